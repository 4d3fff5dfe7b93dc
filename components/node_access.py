"""Run a script on a worker node, whether it is a local kindest/node container or a real machine over SSH.

One place for "run this script on that worker", used by the join (`WorkerNode`)
and by the per-node GPU operations (`HamiMockGpu`):

* A **container** worker is reached with `docker exec` from the Pulumi host
  (pulumi-command `local.Command`). The script travels in a quoted heredoc;
  secrets travel as environment variables of the Command that
  `docker exec -e NAME` forwards by name, so no value is ever in an argv.
* An **SSH** worker is reached with pulumi-command `remote.Command`. Its
  `environment` input needs the SSH server to accept each variable
  (`AcceptEnv`; pulumi/pulumi-command provider/pkg/provider/remote/commandOutputs.go
  calls `session.Setenv` and fails otherwise), so secrets never go there.
  Instead the Command's **stdin** (a secret) is one bash program holding the
  create and the delete script, each preceded by its own secrets as base64
  literals decoded into shell variables (not exported, never echoed). The
  command line only names the action: `env GPU_TENANCY_ACTION=create bash -s`
  (behind `sudo -n` for a non-root user). pulumi-command runs the delete
  command with the stdin stored at create time (remote/commandController.go
  `Delete` runs the stored state), and the dispatcher then picks the delete
  script.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_command as command

import config
from components.container_exec import docker_exec
from components.naming import node_name
from config.models import SshConnection

# The action word the SSH dispatcher reads; it is on the command line, so it must never carry data.
ACTION_ENV = "GPU_TENANCY_ACTION"
CREATE = "create"
DELETE = "delete"
ACTIONS = (CREATE, DELETE)

# pulumi-command output may echo what a script printed: secret, and never streamed to the Pulumi log.
SECRET_OUTPUTS = ["stdout", "stderr"]

_HEREDOC_EOF = "GPU_TENANCY_NODE_SCRIPT"
_SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    """A bash script to run on a node, and the names of the secret variables it reads."""

    script: pulumi.Input[str]
    secrets: tuple[str, ...] = ()
    # Container workers only: what to tell the user when the container is already gone (delete scripts).
    gone_hint: str = ""


# --------------------------------------------------------------------------- #
# Container workers: host command lines (pulumi-command runs them with /bin/sh)
# --------------------------------------------------------------------------- #


def _check_names(names: Sequence[str]) -> None:
    for name in names:
        if not _SHELL_NAME.match(name):
            raise ValueError(f"{name!r} is not a shell variable name")


def docker_exec_script(container: str, script: str, env_names: Sequence[str] = ()) -> str:
    """Run `script` with bash inside `container`; the named variables are forwarded by name only."""
    _check_names(env_names)
    if any(line.strip() == _HEREDOC_EOF for line in script.splitlines()):
        raise ValueError(f"script must not contain the heredoc delimiter {_HEREDOC_EOF}")
    return f"{docker_exec(container, env_names)} <<'{_HEREDOC_EOF}'\n{script.rstrip()}\n{_HEREDOC_EOF}\n"


def docker_exec_script_if_present(
    container: str, script: str, env_names: Sequence[str] = (), gone_hint: str = ""
) -> str:
    """Like `docker_exec_script`, but succeeds without running anything when the container is gone or stopped.

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
        "fi\n" + docker_exec_script(container, script, env_names)
    )


# --------------------------------------------------------------------------- #
# SSH workers: the command line (action only) and the stdin program (scripts + secrets)
# --------------------------------------------------------------------------- #


def ssh_command(action: str, user: str) -> str:
    """The remote command line: names the action, carries no data. Non-root users need passwordless sudo."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {ACTIONS}")
    # sudo -n fails at once ("a password is required") instead of waiting for a password nobody types.
    prefix = "" if user == "root" else "sudo -n "
    return f"{prefix}env {ACTION_ENV}={action} bash -s"


def _assign_secret(name: str, value: str) -> str:
    # The base64 alphabet needs no quoting; printf is a builtin, so the value is in no process's argv.
    # The trailing `x` keeps trailing newlines that command substitution would strip.
    encoded = base64.b64encode(value.encode()).decode()
    return f"{name}=\"$(printf '%s' '{encoded}' | base64 -d && printf x)\"; {name}=\"${{{name}%x}}\"\n"


def ssh_stdin(actions: Mapping[str, tuple[str, Mapping[str, str]]]) -> str:
    """The bash program fed to `bash -s` on an SSH worker: one branch per action, chosen by $GPU_TENANCY_ACTION.

    `actions` maps an action to (script, {secret variable: value}). Each branch decodes only its own
    secrets into shell variables of a subshell, then runs its script there, with stdin from /dev/null.
    """
    branches = []
    for action, (script, values) in actions.items():
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; expected one of {ACTIONS}")
        _check_names(list(values))
        assignments = "".join(_assign_secret(name, value) for name, value in values.items())
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


def node_program(scripts: Mapping[str, NodeScript], values: Mapping[str, str]) -> str:
    """`ssh_stdin` for resolved scripts (plain text) and the values of the secrets they name."""
    actions = {}
    for action, script in scripts.items():
        if not isinstance(script.script, str):
            raise TypeError(f"{action}: node_program needs the script text, not an Output")
        actions[action] = (script.script, {name: values[name] for name in script.secrets})
    return ssh_stdin(actions)


# --------------------------------------------------------------------------- #
# The Command
# --------------------------------------------------------------------------- #


def run_on_node(
    name: str,
    access: NodeAccess,
    *,
    create: NodeScript,
    delete: NodeScript | None = None,
    secrets: Mapping[str, pulumi.Input[str]] | None = None,
    triggers: Sequence[pulumi.Input[str]] | None = None,
    opts: pulumi.ResourceOptions | None = None,
) -> command.local.Command | command.remote.Command:
    """A pulumi-command Command that runs `create` (and `delete` on destroy) on the node.

    `secrets` holds the values of every variable the scripts name; they never reach a command line or
    the logs. `opts` carries parent, depends_on and delete_before_replace.
    """
    secrets = dict(secrets or {})
    scripts = [create] if delete is None else [create, delete]
    for script in scripts:
        _check_names(script.secrets)
        unknown = [n for n in script.secrets if n not in secrets]
        if unknown:
            raise ValueError(f"{name}: no value for secret variable(s) {', '.join(unknown)}")
    options = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=SECRET_OUTPUTS))

    if access.ssh is None:
        container = access.container_name or ""
        create_text = pulumi.Output.from_input(create.script).apply(
            lambda s: docker_exec_script(container, s, create.secrets)
        )
        delete_text = None
        if delete is not None:
            delete_text = pulumi.Output.from_input(delete.script).apply(
                lambda s: docker_exec_script_if_present(container, s, delete.secrets, delete.gone_hint)
            )
        return command.local.Command(
            name,
            create=create_text,
            delete=delete_text,
            environment=pulumi.Output.secret(secrets) if secrets else None,
            triggers=list(triggers) if triggers is not None else None,
            logging=command.local.Logging.NONE,
            opts=options,
        )

    ssh = access.ssh
    needed = {n: secrets[n] for script in scripts for n in script.secrets}

    def program(parts: dict) -> str:
        resolved = {CREATE: NodeScript(parts["create"], create.secrets)}
        if delete is not None:
            resolved[DELETE] = NodeScript(parts["delete"], delete.secrets)
        return node_program(resolved, parts["secrets"] or {})

    stdin = pulumi.Output.all(
        create=create.script, delete=delete.script if delete is not None else "", secrets=needed
    ).apply(program)
    return command.remote.Command(
        name,
        connection=command.remote.ConnectionArgs(
            host=ssh.host,
            user=ssh.user,
            port=ssh.port,
            private_key=pulumi.Output.secret(ssh.private_key),
            # Unset, pulumi-command does not check the server's identity at all.
            host_key=ssh.host_key,
        ),
        create=ssh_command(CREATE, ssh.user),
        delete=ssh_command(DELETE, ssh.user) if delete is not None else None,
        # Holds the secrets (and the scripts): secret as a whole, also in the state.
        stdin=pulumi.Output.secret(stdin),
        # The previous stdout would be sent with Setenv, which servers without AcceptEnv refuse (a warning).
        add_previous_output_in_env=False,
        triggers=list(triggers) if triggers is not None else None,
        logging=command.remote.Logging.NONE,
        opts=options,
    )
