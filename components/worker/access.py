"""Run a script on a worker node, whether it is a local kindest/node container or a real machine over SSH.

The only work done ON a node is node-side work (kubeadm join and reset, local files): the scripts in
components/worker/scripts/, which take their values from the environment. Nothing that talks to the tenant API
runs on a node (components/worker/operations.py does that from the Pulumi host).

Python assembles data here, never shell code. Both kinds of node get the same stdin: the text of
components/worker/scripts/dispatch.sh, then a data block naming, for each action, the script and its variables
(base64; never echoed, never in any argv). The command line only names the action:

* a **container** worker: pulumi-command `local.Command` runs container-exec.sh on the Pulumi host (interpreter
  `["/bin/bash", "-c", <its text>, "container-exec.sh"]`, command `<action>`), which runs
  `docker exec -i <container> bash -s -- <action>` (its processes hold no secret in their environment: the
  docker CLI only forwards stdin);
* an **SSH** worker: `[sudo -n] bash -s -- <action>`, by `remote.Command` (its `environment` input would need
  the server's AcceptEnv; pulumi/pulumi-command provider/pkg/provider/remote/commandOutputs.go calls
  `session.Setenv`).

pulumi-command feeds the stored stdin to the delete command as well (local/commandOutputs.go and
remote/commandOutputs.go set stdin from the stored inputs), and dispatch.sh picks the delete line.
The whole stdin is secret; values a delete needs are only those its line names.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_command as command

import config
from components import shell
from config.models import SshConnection
from naming import node_name

# The action word dispatch.sh and container-exec.sh take as their argument; it is on the command line, so it
# must never carry data.
CREATE, UPDATE, DELETE = shell.ACTIONS
ACTIONS = shell.ACTIONS

# pulumi-command output may echo what a script printed: secret, and never streamed to the Pulumi log.
SECRET_OUTPUTS = ["stdout", "stderr"]

# The last line of dispatch.sh's data block: a stdin cut short before it runs nothing.
DATA_END = "end"
# What dispatch.sh accepts. Variables are upper case: none is one of dispatch.sh's own (lower-case) variables.
_VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_SCRIPT_NAME = re.compile(r"[a-z0-9][a-z0-9-]*\.sh")
# dispatch.sh hands a script's text to bash as one argument, which Linux caps at 32 pages
# (MAX_ARG_STRLEN, include/uapi/linux/binfmts.h), minus the terminating NUL.
MAX_SCRIPT_BYTES = 32 * 4096 - 1


@dataclass(frozen=True)
class NodeAccess:
    """How to reach one worker node: exactly one of `container_name` and `ssh` is set."""

    # Kubernetes Node name, "<tenant>-<worker>".
    node_name: str
    # A local kindest/node container on the kind network, reached with `docker exec`.
    container_name: str | None = None
    # A real machine reached over SSH (its private key is a secret; the model never prints it).
    ssh: SshConnection | None = None

    def __post_init__(self) -> None:
        if (self.container_name is None) == (self.ssh is None):
            raise ValueError(f"node {self.node_name}: give exactly one of container_name and ssh")

    @property
    def is_ssh(self) -> bool:
        return self.ssh is not None

    @property
    def where(self) -> str:
        """Human-readable location, for messages."""
        if self.ssh is not None:
            return f"{self.ssh.user}@{self.ssh.host}:{self.ssh.port}"
        return f"container {self.container_name}"


def node_access(tenant: str, worker: config.Worker) -> NodeAccess:
    """Where worker `worker` of `tenant` runs: its `ssh` machine, or a local container named like the Node."""
    name = node_name(tenant, worker.name)
    if worker.ssh is not None:
        return NodeAccess(node_name=name, ssh=worker.ssh)
    return NodeAccess(node_name=name, container_name=name)


@dataclass(frozen=True)
class NodeScript:
    """What a node command runs for one action: a script of components/worker/scripts (`shell.NODE_JOIN`, ...)
    and the variables it reads. Every value travels inside the secret stdin.

    The data block of the stdin holds exactly this, so a reader of the Command's inputs (the lifecycle
    simulator, tests/support/sim/scripts.py) gets the same structure back."""

    name: str
    environment: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in shell.NODE_SCRIPT_NAMES:
            known = ", ".join(shell.NODE_SCRIPT_NAMES)
            raise ValueError(f"{self.name!r} is not a node script; expected one of {known}")
        _check_names(self.environment)


# --------------------------------------------------------------------------- #
# Command lines (they carry the action only)
# --------------------------------------------------------------------------- #


def _check_action(action: str) -> None:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {ACTIONS}")


def container_interpreter() -> list[str]:
    """How pulumi-command runs a container worker's command: bash with container-exec.sh's text, then the
    script's name as $0. pulumi-command appends the command (`create` or `delete`) as $1
    (local/commandOutputs.go run: `args = append(interpreter, command)`)."""
    return ["/bin/bash", "-c", shell.script_text(shell.CONTAINER_EXEC), shell.CONTAINER_EXEC]


def container_environment(container: str, gone_hint: str = "") -> dict[str, str]:
    """container-exec.sh's variables: the container, and what to say when a delete finds it gone (no secret)."""
    environment = {shell.CONTAINER_ENV: container}
    if gone_hint:
        environment[shell.GONE_HINT_ENV] = gone_hint
    return environment


def ssh_command(action: str, user: str) -> str:
    """The remote command line: names the action, carries no data. Non-root users need passwordless sudo."""
    _check_action(action)
    # sudo -n fails at once ("a password is required") instead of waiting for a password nobody types.
    prefix = [] if user == "root" else ["sudo", "-n"]
    return " ".join([*prefix, "bash", "-s", "--", action])


# --------------------------------------------------------------------------- #
# The stdin: dispatch.sh, then the data block it reads
# --------------------------------------------------------------------------- #


def _check_names(names: Mapping[str, object]) -> None:
    for name in names:
        if not _VARIABLE_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an upper-case shell variable name")


def _base64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def node_stdin(actions: Mapping[str, tuple[str, str, Mapping[str, str]]]) -> str:
    """What a node command feeds to `bash -s -- <action>`: dispatch.sh, then one data line per action.

    `actions` maps an action to (script name, script text, {variable: value}). A line is
    `<action> <name> <base64 text> <NAME>=<base64 value>...`; the block ends with `end`.
    """
    lines = []
    for action, (name, text, values) in actions.items():
        _check_action(action)
        _check_names(values)
        if not _SCRIPT_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a script file name")
        if not text or len(text.encode()) > MAX_SCRIPT_BYTES:
            raise ValueError(f"{name}: a node script must hold 1 to {MAX_SCRIPT_BYTES} bytes")
        variables = [f"{key}={_base64(value)}" for key, value in values.items()]
        lines.append(" ".join([action, name, _base64(text), *variables]))
    return shell.script_text(shell.DISPATCH) + "".join(f"{line}\n" for line in [*lines, DATA_END])


# --------------------------------------------------------------------------- #
# The Command
# --------------------------------------------------------------------------- #


def run_on_node(
    name: str,
    access: NodeAccess,
    *,
    create: NodeScript,
    update: NodeScript | None = None,
    delete: NodeScript | None = None,
    gone_hint: str = "",
    triggers: Sequence[pulumi.Input[str]] | None = None,
    opts: pulumi.ResourceOptions | None = None,
) -> command.local.Command | command.remote.Command:
    """A pulumi-command Command that runs `create` (and `delete` on destroy) on the node.

    `update` (SSH workers only) is what runs when the Command's inputs change: pulumi-command runs its `update`
    command then, and `create` again only when it has none (pulumi/pulumi-command v1.2.1
    provider/pkg/provider/remote/commandController.go Update); a changed `triggers` replaces the Command (create).
    The scripts' environments travel inside the secret stdin only. `gone_hint` (container workers) is what a
    delete says when the container is already gone. `opts` carries parent, depends_on and delete_before_replace.
    """
    if update is not None and access.ssh is None:
        raise ValueError(f"{name}: an update script runs on SSH workers only (container-exec.sh knows create and "
                         "delete)")
    scripts = {CREATE: create, **({UPDATE: update} if update is not None else {}),
               **({DELETE: delete} if delete is not None else {})}
    stdin = pulumi.Output.all(**{
        f"{action}.{key}": value for action, script in scripts.items() for key, value in script.environment.items()
    }).apply(lambda values: node_stdin({
        action: (script.name, shell.script_text(script.name),
                 {key: str(values[f"{action}.{key}"]) for key in script.environment})
        for action, script in scripts.items()
    }))
    options = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=SECRET_OUTPUTS))
    trigger_list = list(triggers) if triggers is not None else None

    if access.ssh is None:
        return command.local.Command(
            name,
            interpreter=container_interpreter(),
            # container-exec.sh's argument: the action word is the whole command.
            create=CREATE,
            delete=DELETE if delete is not None else None,
            environment=container_environment(access.container_name or "", gone_hint if delete else ""),
            # Holds the scripts' variables: secret as a whole, also in the state.
            stdin=pulumi.Output.secret(stdin),
            triggers=trigger_list,
            logging=command.local.Logging.NONE,
            add_previous_output_in_env=False,
            opts=options,
        )

    ssh = access.ssh
    return command.remote.Command(
        name,
        connection=command.remote.ConnectionArgs(
            host=ssh.host,
            user=ssh.user,
            port=ssh.port,
            private_key=pulumi.Output.secret(ssh.private_key),
            # Required by config validation: a server presenting another key is refused.
            host_key=ssh.host_key,
        ),
        create=ssh_command(CREATE, ssh.user),
        update=ssh_command(UPDATE, ssh.user) if update is not None else None,
        delete=ssh_command(DELETE, ssh.user) if delete is not None else None,
        stdin=pulumi.Output.secret(stdin),
        # The previous stdout would be sent with Setenv, which servers without AcceptEnv refuse (a warning).
        add_previous_output_in_env=False,
        triggers=trigger_list,
        logging=command.remote.Logging.NONE,
        opts=options,
    )
