"""components.worker.access: one stdin per node command (dispatch.sh, then a data block), reached by `docker exec -i`
or SSH, with every value on the secret stdin and only the action on a command line.

The registered inputs are executed for real with bash, the way pulumi-command runs them (interpreter + command,
the environment input, the stdin); `docker` and `base64` are stubs that record their argv, so a value on any
command line would be seen.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi_command as command
import pytest

import config
from components import shell as ns
from components.worker.access import (
    DATA_END,
    MAX_SCRIPT_BYTES,
    NodeAccess,
    NodeScript,
    container_environment,
    container_interpreter,
    node_access,
    node_stdin,
    run_on_node,
    ssh_command,
)
from tests.support.mockrun import ProgramFailedError, run_program
from tests.support.sim.scripts import CommandFailedError, invocation, read_node_stdin
from tests.support.ssh_worker import HOST_KEY, PRIVATE_KEY, PRIVATE_KEY_BODY, SSH_HOST, ssh_connection

# Everything a shell could trip over, plus a trailing newline command substitution would eat.
TRICKY = "it's \"quoted\" $HOME `id` \\ ;|& *\nsecond line ünïcode\n"
TOKEN = "abcdef.0123456789abcdef"
CONTAINER = "tenant-a-worker-0"
LOCAL, REMOTE = "command:local:Command", "command:remote:Command"


# --------------------------------------------------------------------------- #
# Where a worker runs
# --------------------------------------------------------------------------- #


def test_a_worker_without_ssh_is_the_local_container_named_like_its_node():
    access = node_access("tenant-a", config.Worker(name="worker-0"))
    assert access == NodeAccess(node_name="tenant-a-worker-0", container_name="tenant-a-worker-0")
    assert not access.is_ssh
    assert access.where == "container tenant-a-worker-0"


def test_a_worker_with_ssh_is_that_machine_and_its_key_is_never_printed():
    access = node_access("tenant-a", config.Worker(name="gpu-1", ssh=ssh_connection()))
    assert access.node_name == "tenant-a-gpu-1"
    assert access.container_name is None and access.is_ssh
    assert access.where == f"ops@{SSH_HOST}:2222"
    assert PRIVATE_KEY_BODY not in repr(access) and PRIVATE_KEY_BODY not in str(access)


def test_node_access_needs_exactly_one_way_in():
    with pytest.raises(ValueError, match="exactly one"):
        NodeAccess(node_name="n")
    with pytest.raises(ValueError, match="exactly one"):
        NodeAccess(node_name="n", container_name="n", ssh=ssh_connection())


# --------------------------------------------------------------------------- #
# Command lines carry the action only; Python writes data, not shell
# --------------------------------------------------------------------------- #


def test_command_lines_only_name_the_action():
    # pulumi-command appends the command to the interpreter: bash -c <container-exec.sh> container-exec.sh create.
    assert container_interpreter() == ["/bin/bash", "-c", ns.script_text(ns.CONTAINER_EXEC), ns.CONTAINER_EXEC]
    assert container_environment("odd name", "hint") == {ns.CONTAINER_ENV: "odd name", ns.GONE_HINT_ENV: "hint"}
    assert container_environment("n") == {ns.CONTAINER_ENV: "n"}
    assert ssh_command("create", "root") == "bash -s -- create"
    # sudo -n fails at once instead of waiting for a password nobody types.
    assert ssh_command("delete", "ops") == "sudo -n bash -s -- delete"
    with pytest.raises(ValueError, match="unknown action"):
        ssh_command("join; rm -rf /", "root")


def test_the_stdin_is_the_dispatcher_file_then_data_lines():
    stdin = node_stdin({"create": ("probe.sh", "echo hi\n", {"A": "x", "EMPTY": ""})})
    dispatcher = ns.script_text(ns.DISPATCH)
    assert stdin.startswith(dispatcher)
    # base64 of "echo hi\n", "x" and "": no shell code besides the file itself.
    assert stdin[len(dispatcher):] == f"create probe.sh ZWNobyBoaQo= A=eA== EMPTY=\n{DATA_END}\n"
    assert read_node_stdin(stdin) == {"create": ("probe.sh", "echo hi\n", {"A": "x", "EMPTY": ""})}


def test_node_stdin_refuses_what_dispatch_would_refuse():
    with pytest.raises(ValueError, match="unknown action"):
        node_stdin({"join": ("probe.sh", "true", {})})
    # Upper case only: dispatch.sh's own variables are lower case, so a value can never overwrite one.
    for name in ("A-B", "script", "Path"):
        with pytest.raises(ValueError, match="upper-case shell variable"):
            node_stdin({"create": ("probe.sh", "true", {name: "x"})})
    for name in ("../x.sh", "probe", "a b.sh"):
        with pytest.raises(ValueError, match="not a script file name"):
            node_stdin({"create": (name, "true", {})})
    for text in ("", "#" * (MAX_SCRIPT_BYTES + 1)):
        with pytest.raises(ValueError, match="must hold 1 to"):
            node_stdin({"create": ("probe.sh", text, {})})
    assert node_stdin({"create": ("probe.sh", "#" * MAX_SCRIPT_BYTES, {})})


def test_node_scripts_name_a_shipped_node_script_and_upper_case_variables():
    assert NodeScript(ns.NODE_LEAVE, {ns.NODE_NAME_ENV: "n"}).name == "node-leave.sh"
    for name in (ns.KIND_CREATE, ns.DISPATCH, "probe.sh"):
        with pytest.raises(ValueError, match="is not a node script"):
            NodeScript(name)
    with pytest.raises(ValueError, match="upper-case shell variable"):
        NodeScript(ns.NODE_LEAVE, {"node_name": "n"})


def test_every_node_script_fits_in_the_one_argument_dispatch_passes_it_in():
    for name in ns.NODE_SCRIPT_NAMES:
        assert len(ns.script_text(name).encode()) <= MAX_SCRIPT_BYTES, name


# --------------------------------------------------------------------------- #
# Running the inputs as pulumi-command and a node would
# --------------------------------------------------------------------------- #


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def host(tmp_path: Path):
    """Runs a Command's inputs as pulumi-command would (local/commandOutputs.go run: interpreter, default
    `/bin/sh -c`, plus the command; the environment input; the stdin). For an SSH worker the line goes to the
    login shell, also `sh -c`. The stdin is a pipe unless `stdin_file` is set.

    `base64` records its argv and runs the real one. `docker` records its argv; `docker container inspect`
    answers from $DOCKER_STATE ("running", "stopped", "gone" or "down"), and `docker exec -i <name> bash -s --
    <action>` runs `bash -s -- <action>` here with the same stdin (or fails, as Docker does, when it is gone).
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv_log = tmp_path / "argv.log"
    real_base64 = shutil.which("base64")
    assert real_base64, "base64 (coreutils) is needed"
    _stub(bin_dir / "base64", f'printf "%s\\n" "base64 $*" >>{argv_log}\nexec {real_base64} "$@"\n')
    _stub(bin_dir / "docker", f"""printf "%s\\n" "docker $*" >>{argv_log}
if [ "$1 $2" = "container inspect" ]; then
  case "$DOCKER_STATE" in
    running) echo true ;;
    stopped) echo false ;;
    gone) echo "Error response from daemon: No such container: ${{@: -1}}" >&2; exit 1 ;;
    *) echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock" >&2; exit 1 ;;
  esac
  exit 0
fi
if [ "$1 $2 $4 $5 $6" = "exec -i bash -s --" ] && [ $# -eq 7 ]; then
  if [ "$DOCKER_STATE" = gone ]; then echo "Error response from daemon: No such container: $3" >&2; exit 1; fi
  exec bash -s -- "$7"
fi
echo "unexpected docker call: $*" >&2; exit 99
""")

    def run(inputs: Mapping[str, Any], action: str, state: str = "running", *, stdin: str | None = None,
            stdin_file: bool = False) -> subprocess.CompletedProcess[str]:
        argv = [*(inputs.get("interpreter") or ["/bin/sh", "-c"]), inputs[action]]
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "DOCKER_STATE": state,
               **(inputs.get("environment") or {})}
        text = inputs["stdin"] if stdin is None else stdin
        if not stdin_file:
            return subprocess.run(argv, input=text, capture_output=True, text=True, timeout=30, env=env)
        path = tmp_path / "stdin"
        path.write_text(text)
        with path.open() as handle:
            return subprocess.run(argv, stdin=handle, capture_output=True, text=True, timeout=30, env=env)

    run.argv = lambda: argv_log.read_text().splitlines() if argv_log.exists() else []
    run.tmp = tmp_path
    return run


def _scripts(tmp: Path) -> dict[str, tuple[str, str, dict[str, str]]]:
    """Create writes its variables, stdin and environment to files; delete writes its own variables."""
    create = (
        f'printf "%s" "$SECRET_A" >{tmp}/create-a\n'
        f'printf "%s" "${{SECRET_B-unset}}" >{tmp}/create-b\n'
        f'printf "%s" "$0" >{tmp}/create-name\n'
        f"cat >{tmp}/create-stdin\n"
        f"env -0 >{tmp}/create-env\n"
    )
    delete = f'printf "%s" "${{SECRET_A-unset}}" >{tmp}/delete-a\nprintf "%s" "$SECRET_B" >{tmp}/delete-b\n'
    return {"create": ("probe-create.sh", create, {"SECRET_A": TRICKY}),
            "delete": ("probe-delete.sh", delete, {"SECRET_B": TOKEN})}


def _container(stdin: str, hint: str = "") -> dict[str, Any]:
    """The inputs run_on_node registers for a container worker (pinned below against a real registration)."""
    return {"interpreter": container_interpreter(), "create": "create", "delete": "delete",
            "environment": container_environment(CONTAINER, hint), "stdin": stdin}


def _ssh(stdin: str, user: str = "root") -> dict[str, Any]:
    return {"create": ssh_command("create", user), "delete": ssh_command("delete", user), "stdin": stdin}


@pytest.mark.parametrize("inputs", [_ssh, _container])
def test_create_runs_the_create_script_with_its_own_values_byte_for_byte(host, inputs):
    # Bytes after the end line (a client that keeps stdin open) are neither decoded nor handed to the script.
    done = host(inputs(node_stdin(_scripts(host.tmp)) + "after the end\n"), "create")

    assert done.returncode == 0, done.stderr
    assert (host.tmp / "create-a").read_text() == TRICKY
    # Only the line's own values are decoded.
    assert (host.tmp / "create-b").read_text() == "unset"
    assert not (host.tmp / "delete-a").exists()
    # Run like the file it is: $0 is its name, and its stdin is /dev/null (it cannot read the data block).
    assert (host.tmp / "create-name").read_text() == "probe-create.sh"
    assert (host.tmp / "create-stdin").read_text() == ""


def test_the_script_gets_the_nodes_environment_plus_its_own_variables_and_nothing_of_the_dispatcher(host):
    done = host(_ssh(node_stdin(_scripts(host.tmp))), "create")
    assert done.returncode == 0, done.stderr

    names = {entry.split("=", 1)[0] for entry in (host.tmp / "create-env").read_text().split("\0") if entry}
    assert "SECRET_A" in names and "SECRET_B" not in names
    assert not {"action", "script", "name", "chosen", "fields", "known", "ended", "var", "field"} & names


@pytest.mark.parametrize("inputs", [_ssh, _container])
def test_delete_runs_the_delete_script_of_the_same_stdin(host, inputs):
    done = host(inputs(node_stdin(_scripts(host.tmp))), "delete")

    assert done.returncode == 0, done.stderr
    assert (host.tmp / "delete-b").read_text() == TOKEN
    assert (host.tmp / "delete-a").read_text() == "unset"
    assert not (host.tmp / "create-a").exists()


def test_a_stdin_in_a_regular_file_works_too(host):
    # bash reads a seekable stdin in blocks and seeks back before each command: the data block is still there.
    done = host(_ssh(node_stdin(_scripts(host.tmp))), "create", stdin_file=True)
    assert done.returncode == 0, done.stderr
    assert (host.tmp / "create-a").read_text() == TRICKY


def test_values_are_in_no_argv_and_not_in_clear_text_on_stdin(host):
    stdin = node_stdin(_scripts(host.tmp))
    host(_container(stdin), "create")
    host(_container(stdin), "delete")

    assert host.argv() == [
        f"docker exec -i {CONTAINER} bash -s -- create", "base64 -d", "base64 -d",
        f"docker container inspect -f {{{{.State.Running}}}} {CONTAINER}",
        f"docker exec -i {CONTAINER} bash -s -- delete", "base64 -d", "base64 -d",
    ]
    assert TOKEN not in stdin and "quoted" not in stdin


@pytest.mark.parametrize("state, said", [("gone", "is gone"), ("stopped", "is stopped")])
def test_a_delete_on_a_container_that_is_not_running_succeeds_without_running_anything(host, state, said):
    done = host(_container(node_stdin(_scripts(host.tmp)), "If Node x remains, delete it."), "delete", state=state)

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"gpu-tenancy: container {CONTAINER} {said}: nothing to undo. If Node x remains, " \
                          "delete it.\n"
    assert not [entry for entry in host.argv() if entry.startswith("docker exec")]
    assert not (host.tmp / "delete-b").exists()


def test_a_delete_fails_when_docker_cannot_say_whether_the_container_exists(host):
    done = host(_container(node_stdin(_scripts(host.tmp))), "delete", state="down")

    assert done.returncode == 1
    assert "Cannot connect to the Docker daemon" in done.stderr
    assert not [entry for entry in host.argv() if entry.startswith("docker exec")]


def test_a_create_in_a_container_that_is_gone_fails(host):
    done = host(_container(node_stdin(_scripts(host.tmp))), "create", state="gone")

    assert done.returncode == 1
    assert f"No such container: {CONTAINER}" in done.stderr
    assert not (host.tmp / "create-a").exists()


def test_container_exec_needs_its_container_and_a_known_action(host):
    inputs = _container(node_stdin(_scripts(host.tmp)))
    done = host({**inputs, "environment": {}}, "create")
    assert (done.returncode, done.stderr) == (2, "gpu-tenancy: container-exec.sh: GPU_TENANCY_CONTAINER is not set\n")
    done = host({**inputs, "create": "join"}, "create")
    assert done.returncode == 2 and 'unknown action "join"' in done.stderr
    assert host.argv() == []


def test_an_action_without_a_line_fails_without_running_anything(host):
    stdin = node_stdin({"delete": ("probe.sh", f"touch {host.tmp}/ran\n", {})})
    done = host(_ssh(stdin), "create")

    assert done.returncode == 2
    assert 'unknown action "create" (expected: delete)' in done.stderr
    assert not (host.tmp / "ran").exists()
    # The simulator reads the same stdin the same way.
    with pytest.raises(CommandFailedError, match='unknown action "create" \\(expected: delete\\)'):
        invocation(REMOTE, {**_ssh(stdin), "connection": {"user": "root", "host": "h"}}, "create")


def test_a_failing_script_fails_the_command_with_its_exit_code(host):
    script = f"set -euo pipefail\nfalse\ntouch {host.tmp}/after-false\n"
    assert host(_ssh(node_stdin({"create": ("probe.sh", script, {"S": "x"})})), "create").returncode == 1
    assert not (host.tmp / "after-false").exists()
    assert host(_ssh(node_stdin({"create": ("probe.sh", "exit 7\n", {})})), "create").returncode == 7


def test_a_truncated_stdin_runs_nothing(host):
    stdin = node_stdin({"create": ("probe.sh", f"touch {host.tmp}/ran\n", {"S": "value"})})
    dispatcher = len(ns.script_text(ns.DISPATCH))
    # Inside dispatch.sh (its brace group never closes), inside the data line, and just before `end`.
    for cut in (dispatcher // 2, dispatcher + 20, len(stdin) - len(f"{DATA_END}\n")):
        done = host(_ssh(stdin[:cut]), "create")
        assert done.returncode != 0, cut
        assert not (host.tmp / "ran").exists()
        with pytest.raises(CommandFailedError):
            read_node_stdin(stdin[:cut])


@pytest.mark.parametrize("damage, said", [
    (lambda line: line.replace("S=dmFsdWU=", "S=!!not-base64!!"), "the value of S does not decode"),
    (lambda line: line.replace("S=dmFsdWU=", "s=dmFsdWU="), "'s' is not an upper-case variable name"),
    (lambda line: line.replace("probe.sh", "../probe.sh"), "'../probe.sh' is not a script name"),
    (lambda line: "create probe.sh", "fewer than 3 fields"),
])
def test_a_damaged_data_line_stops_before_anything_runs(host, damage, said):
    stdin = node_stdin({"create": ("probe.sh", f"touch {host.tmp}/ran\n", {"S": "value"})})
    dispatcher = ns.script_text(ns.DISPATCH)
    line = stdin[len(dispatcher):].splitlines()[0]

    done = host(_ssh(stdin.replace(line, damage(line))), "create")

    assert done.returncode == 2
    assert said in done.stderr
    assert not (host.tmp / "ran").exists()


# --------------------------------------------------------------------------- #
# The Command registered for a node
# --------------------------------------------------------------------------- #

CREATE = NodeScript(ns.NODE_MIRRORS, {"N": "node-value"})
DELETE = NodeScript(ns.NODE_LEAVE, {"K": "delete-value"})


def _one_command(access: NodeAccess, with_delete: bool = True):
    def program():
        before = command.local.Command("before", create="true")
        run_on_node(
            "on-node",
            access,
            create=NodeScript(CREATE.name, {**CREATE.environment, "T": before.id}),
            delete=DELETE if with_delete else None,
            gone_hint="hint",
            triggers=["t1", before.id],
            opts=pulumi.ResourceOptions(depends_on=[before], delete_before_replace=True),
        )

    # A preview: nothing runs, the registrations are complete.
    return run_program({}, program=program, preview=True)


def _expected_stdin(before_id: str, with_delete: bool = True) -> str:
    scripts = {"create": (CREATE.name, ns.script_text(CREATE.name), {"N": "node-value", "T": before_id})}
    if with_delete:
        scripts["delete"] = (DELETE.name, ns.script_text(DELETE.name), {"K": "delete-value"})
    return node_stdin(scripts)


def test_a_container_node_gets_a_local_command_running_container_exec_with_a_secret_stdin():
    run = _one_command(NodeAccess(node_name="n-0", container_name="n-0"))
    resource = run.named("on-node", LOCAL)
    inputs = resource.inputs
    before_id = run.named("before").resource_id

    assert inputs["interpreter"] == container_interpreter()
    assert (inputs["create"], inputs["delete"]) == ("create", "delete")
    # No value in the Pulumi host's docker CLI environment either: only the container's name and the hint.
    assert inputs["environment"] == container_environment("n-0", "hint")
    assert inputs["stdin"] == _expected_stdin(before_id)
    assert resource.is_secret("stdin")
    for key in ("interpreter", "create", "delete", "environment"):
        assert not resource.is_secret(key)
    assert inputs["logging"] == "none" and inputs["addPreviousOutputInEnv"] is False
    assert resource.additional_secret_outputs == ["stdout", "stderr"]
    assert inputs["triggers"] == ["t1", before_id]
    assert resource.delete_before_replace
    assert run.depends_on(resource, run.named("before"))
    # What runs, read back from the inputs as the simulator reads them.
    created = invocation(LOCAL, resource.raw_inputs, "create")
    assert (created.script, created.action, created.container) == (ns.NODE_MIRRORS, "create", "n-0")
    assert created.environment == {"N": "node-value", "T": before_id} and created.secret == {"N", "T"}
    deleted = invocation(LOCAL, resource.raw_inputs, "delete")
    assert (deleted.script, deleted.environment, deleted.gone_hint) == (ns.NODE_LEAVE, {"K": "delete-value"}, "hint")


def test_an_ssh_node_gets_a_remote_command_pinned_to_its_host_key_with_a_secret_stdin():
    run = _one_command(NodeAccess(node_name="n-0", ssh=ssh_connection(user="ops")))
    assert run.of_type(LOCAL) == [run.named("before")]
    resource = run.named("on-node", REMOTE)
    inputs = resource.inputs

    connection = inputs["connection"]
    assert {key: connection[key] for key in ("host", "user", "port", "privateKey", "hostKey")} == {
        "host": SSH_HOST, "user": "ops", "port": 2222, "privateKey": PRIVATE_KEY, "hostKey": HOST_KEY,
    }
    assert resource.is_secret("connection")
    assert inputs["create"] == "sudo -n bash -s -- create"
    assert inputs["delete"] == "sudo -n bash -s -- delete"
    assert inputs["stdin"] == _expected_stdin(run.named("before").resource_id)
    assert resource.is_secret("stdin")
    assert not resource.is_secret("create") and not resource.is_secret("delete")
    # AcceptEnv is not relied upon: nothing goes through the SSH environment.
    assert "environment" not in inputs
    assert inputs["addPreviousOutputInEnv"] is False
    assert inputs["logging"] == "none"
    assert {"stdout", "stderr"} <= set(resource.additional_secret_outputs)
    assert resource.delete_before_replace
    for key in ("create", "delete"):
        assert PRIVATE_KEY_BODY not in inputs[key]
    deleted = invocation(REMOTE, resource.raw_inputs, "delete")
    assert (deleted.script, deleted.remote_host, deleted.secret) == (ns.NODE_LEAVE, SSH_HOST, {"K"})


def test_an_ssh_node_as_root_needs_no_sudo_and_a_create_only_command_has_no_delete():
    run = _one_command(NodeAccess(node_name="n-0", ssh=ssh_connection(user="root")), with_delete=False)
    inputs = run.named("on-node", REMOTE).inputs
    assert inputs["create"] == "bash -s -- create"
    assert "delete" not in inputs
    assert list(read_node_stdin(inputs["stdin"])) == ["create"]


def test_a_container_create_only_command_has_no_delete_and_no_hint():
    run = _one_command(NodeAccess(node_name="n-0", container_name="n-0"), with_delete=False)
    inputs = run.named("on-node", LOCAL).inputs
    assert "delete" not in inputs
    assert inputs["environment"] == {ns.CONTAINER_ENV: "n-0"}
    assert inputs["stdin"] == _expected_stdin(run.named("before").resource_id, with_delete=False)


def test_the_registered_leave_runs_node_leave_through_both_scripts(host):
    """End to end: the inputs of a real registration, container-exec.sh, dispatch.sh and node-leave.sh."""
    def program():
        run_on_node("on-node", NodeAccess(node_name="n-0", container_name=CONTAINER),
                    create=NodeScript(ns.NODE_LEAVE, {ns.NODE_NAME_ENV: "n-0", ns.NODE_KIND_ENV: ns.NODE_KIND_CONTAINER,
                                                      ns.NODE_ROOT_ENV: str(host.tmp)}))

    inputs = run_program({}, program=program, preview=True).named("on-node", LOCAL).inputs
    done = host(inputs, "create")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"worker n-0 never joined a cluster (no {host.tmp}/etc/kubernetes/kubelet.conf): " \
                          "nothing to reset\n"


def test_a_script_variable_that_is_not_an_upper_case_shell_name_is_refused():
    def program():
        run_on_node("on-node", NodeAccess(node_name="n", container_name="n"),
                    create=NodeScript(ns.NODE_LEAVE, {"BAD-NAME": "x"}))

    with pytest.raises(ProgramFailedError, match="'BAD-NAME' is not an upper-case shell variable name"):
        run_program({}, program=program, preview=True)


UPDATE = NodeScript(ns.NODE_UPGRADE, {"U": "update-value"})


def _with_update(access: NodeAccess):
    def program():
        run_on_node("on-node", access, create=CREATE, update=UPDATE)

    return run_program({}, program=program, preview=True)


def test_an_ssh_command_with_an_update_runs_the_update_line_when_its_inputs_change():
    """pulumi-command v1.2.1 remote/commandController.go Update: the `update` command when there is one."""
    inputs = _with_update(NodeAccess(node_name="n-0", ssh=ssh_connection(user="ops"))).named("on-node", REMOTE).inputs
    assert inputs["update"] == "sudo -n bash -s -- update" == ssh_command("update", "ops")
    assert list(read_node_stdin(inputs["stdin"])) == ["create", "update"]
    updated = invocation(REMOTE, inputs, "update")
    assert (updated.script, updated.action, updated.environment) == (ns.NODE_UPGRADE, "update", {"U": "update-value"})


def test_a_container_command_cannot_have_an_update():
    """container-exec.sh knows only create and delete."""
    with pytest.raises(ProgramFailedError, match="an update script runs on SSH workers only"):
        _with_update(NodeAccess(node_name="n-0", container_name="n-0"))
