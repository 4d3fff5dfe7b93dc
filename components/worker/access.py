"""Run a script on a worker node, whether it is a local kindest/node container or a real machine over SSH.

The only work done ON a node is node-side work (kubeadm join and reset, local files): the scripts in
components/*/scripts/, which take their values from the environment. Nothing that talks to the tenant API
runs on a node (components.host_operations does that from the Pulumi host).

Both kinds of node get the same program on stdin: one bash program holding the create and the delete
branch, each preceded by its own variables as base64 literals decoded into exported variables (never
echoed, never in any argv). The command line only names the action:

* a **container** worker: `docker exec -i -e GPU_TENANCY_ACTION=<action> <container> bash -s`, run by
  pulumi-command `local.Command` on the Pulumi host (whose processes then hold no secret in their
  environment: the docker CLI only forwards stdin);
* an **SSH** worker: `[sudo -n] env GPU_TENANCY_ACTION=<action> bash -s`, by `remote.Command` (its
  `environment` input would need the server's AcceptEnv; pulumi/pulumi-command
  provider/pkg/provider/remote/commandOutputs.go calls `session.Setenv`).

pulumi-command feeds the stored stdin to the delete command as well (local/commandOutputs.go and
remote/commandOutputs.go set stdin from the stored inputs), and the dispatcher picks the delete branch.
The whole stdin is secret; values a delete needs are only those its branch names.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_command as command

import config
from components.naming import node_name
from config.models import SshConnection

# The action word the dispatcher reads; it is on the command line, so it must never carry data.
ACTION_ENV = "GPU_TENANCY_ACTION"
CREATE = "create"
DELETE = "delete"
ACTIONS = (CREATE, DELETE)

# pulumi-command output may echo what a script printed: secret, and never streamed to the Pulumi log.
SECRET_OUTPUTS = ["stdout", "stderr"]

_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    """A bash script to run on a node and the environment it reads (every value secret in transit)."""

    script: str
    environment: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    # Container workers only: what to tell the user when the container is already gone (delete scripts).
    gone_hint: str = ""


# --------------------------------------------------------------------------- #
# Command lines (they carry the action only)
# --------------------------------------------------------------------------- #


def _check_action(action: str) -> None:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {ACTIONS}")


def container_command(container: str, action: str) -> str:
    """Run the stdin program in `container` for `action` (the docker CLI forwards stdin; no value in argv)."""
    _check_action(action)
    return f"docker exec -i -e {ACTION_ENV}={action} {shlex.quote(container)} bash -s"


def container_command_if_present(container: str, action: str, gone_hint: str = "") -> str:
    """`container_command`, but succeeding without running anything when the container is gone or stopped.

    Any other `docker container inspect` failure (e.g. the daemon is down) fails: the container may still exist.
    """
    name = shlex.quote(container)
    hint = f" {gone_hint}" if gone_hint else ""
    gone = shlex.quote(f"gpu-tenancy: container {container} is gone: nothing to undo.{hint}")
    stopped = shlex.quote(f"gpu-tenancy: container {container} is stopped: nothing to undo.{hint}")
    return (
        f"if ! state=\"$(docker container inspect -f '{{{{.State.Running}}}}' {name} 2>&1)\"; then\n"
        '  case "$state" in\n'
        f"    *'No such'*) echo {gone}; exit 0 ;;\n"
        '    *) echo "$state" >&2; exit 1 ;;\n'
        "  esac\n"
        "fi\n"
        'if [ "$state" != true ]; then\n'
        f"  echo {stopped}\n"
        "  exit 0\n"
        "fi\n"
        f"exec {container_command(container, action)}\n"
    )


def ssh_command(action: str, user: str) -> str:
    """The remote command line: names the action, carries no data. Non-root users need passwordless sudo."""
    _check_action(action)
    # sudo -n fails at once ("a password is required") instead of waiting for a password nobody types.
    prefix = "" if user == "root" else "sudo -n "
    return f"{prefix}env {ACTION_ENV}={action} bash -s"


# --------------------------------------------------------------------------- #
# The stdin program (scripts + their variables)
# --------------------------------------------------------------------------- #


def _check_names(names: Sequence[str]) -> None:
    for name in names:
        if not _SHELL_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a shell variable name")


def _assign(name: str, value: str) -> str:
    # The base64 alphabet needs no quoting; printf is a builtin, so the value is in no process's argv.
    # The trailing `x` keeps trailing newlines that command substitution would strip.
    encoded = base64.b64encode(value.encode()).decode()
    return (f"{name}=\"$(printf '%s' '{encoded}' | base64 -d && printf x)\"; {name}=\"${{{name}%x}}\"; "
            f"export {name}\n")


def node_program(actions: Mapping[str, tuple[str, Mapping[str, str]]]) -> str:
    """The bash program fed to `bash -s` on a node: one branch per action, chosen by $GPU_TENANCY_ACTION.

    `actions` maps an action to (script, {variable: value}). Each branch exports only its own variables in a
    subshell, then runs its script there, with stdin from /dev/null.
    """
    branches = []
    for action, (script, values) in actions.items():
        _check_action(action)
        _check_names(list(values))
        assignments = "".join(_assign(name, value) for name, value in values.items())
        branches.append(f"{action})\n(\n{assignments}{script.rstrip()}\n) </dev/null\n;;\n")
    known = " ".join(actions)
    return (
        "set -euo pipefail\n"
        "# One brace group: bash reads all of it from stdin before running any command.\n"
        "{\n"
        f'case "${{{ACTION_ENV}:-}}" in\n'
        + "".join(branches)
        + "*)\n"
        f"printf 'gpu-tenancy: unknown action \"%s\" (expected: {known})\\n' \"${{{ACTION_ENV}:-}}\" >&2\n"
        "exit 2 ;;\n"
        "esac\n"
        "}\n"
    )


# --------------------------------------------------------------------------- #
# The Command
# --------------------------------------------------------------------------- #


def run_on_node(
    name: str,
    access: NodeAccess,
    *,
    create: NodeScript,
    delete: NodeScript | None = None,
    triggers: Sequence[pulumi.Input[str]] | None = None,
    opts: pulumi.ResourceOptions | None = None,
) -> command.local.Command | command.remote.Command:
    """A pulumi-command Command that runs `create` (and `delete` on destroy) on the node.

    The scripts' environments travel inside the secret stdin program only. `opts` carries parent, depends_on
    and delete_before_replace.
    """
    scripts = {CREATE: create} if delete is None else {CREATE: create, DELETE: delete}
    for script in scripts.values():
        _check_names(list(script.environment))
    stdin = pulumi.Output.all(**{
        f"{action}.{key}": value for action, script in scripts.items() for key, value in script.environment.items()
    }).apply(lambda values: node_program({
        action: (script.script, {key: str(values[f"{action}.{key}"]) for key in script.environment})
        for action, script in scripts.items()
    }))
    options = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=SECRET_OUTPUTS))
    trigger_list = list(triggers) if triggers is not None else None

    if access.ssh is None:
        container = access.container_name or ""
        return command.local.Command(
            name,
            create=container_command(container, CREATE),
            delete=container_command_if_present(container, DELETE, delete.gone_hint) if delete else None,
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
        delete=ssh_command(DELETE, ssh.user) if delete is not None else None,
        stdin=pulumi.Output.secret(stdin),
        # The previous stdout would be sent with Setenv, which servers without AcceptEnv refuse (a warning).
        add_previous_output_in_env=False,
        triggers=trigger_list,
        logging=command.remote.Logging.NONE,
        opts=options,
    )
