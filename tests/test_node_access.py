"""components.worker.access: one stdin program per node command, reached by `docker exec -i` or SSH, with every
value on the secret stdin and only the action on a command line.

The programs and command lines are executed for real with bash; `docker` and `base64` are stubs that record
their argv, so a value on any command line would be seen.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pulumi
import pulumi_command as command
import pytest

import config
from components.worker.access import (
    ACTION_ENV,
    NodeAccess,
    NodeScript,
    container_command,
    container_command_if_present,
    node_access,
    node_program,
    run_on_node,
    ssh_command,
)
from tests.support.mockrun import ProgramFailedError, run_program
from tests.support.ssh_worker import HOST_KEY, PRIVATE_KEY, PRIVATE_KEY_BODY, SSH_HOST, ssh_connection

# Everything a shell could trip over, plus a trailing newline command substitution would eat.
TRICKY = "it's \"quoted\" $HOME `id` \\ ;|& *\nsecond line ünïcode\n"
TOKEN = "abcdef.0123456789abcdef"


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
# Command lines carry the action only
# --------------------------------------------------------------------------- #


def test_command_lines_only_name_the_action():
    assert container_command("tenant-a-worker-0", "create") == \
        f"docker exec -i -e {ACTION_ENV}=create tenant-a-worker-0 bash -s"
    assert container_command("odd name", "delete") == f"docker exec -i -e {ACTION_ENV}=delete 'odd name' bash -s"
    assert ssh_command("create", "root") == f"env {ACTION_ENV}=create bash -s"
    # sudo -n fails at once instead of waiting for a password nobody types.
    assert ssh_command("delete", "ops") == f"sudo -n env {ACTION_ENV}=delete bash -s"
    for make in (lambda: container_command("c", "join; rm -rf /"), lambda: ssh_command("join; rm -rf /", "root")):
        with pytest.raises(ValueError, match="unknown action"):
            make()


def test_node_program_refuses_bad_actions_and_variable_names():
    with pytest.raises(ValueError, match="unknown action"):
        node_program({"join": ("true", {})})
    with pytest.raises(ValueError, match="shell variable"):
        node_program({"create": ("true", {"A-B": "x"})})


# --------------------------------------------------------------------------- #
# Running the program as a node would
# --------------------------------------------------------------------------- #


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def shell(tmp_path: Path):
    """Runs a command line with a stdin, as pulumi-command's shell would (locally, or as the SSH login shell).

    `base64` records its argv and runs the real one. `docker` records its argv; `docker container inspect`
    answers from $DOCKER_STATE ("running", "stopped", "gone" or "down"), and `docker exec -i -e K=V <name>
    bash -s` runs `env K=V bash -s` here with the same stdin.
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
if [ "$1 $2 $3" = "exec -i -e" ] && [ "$6 $7" = "bash -s" ]; then exec env "$4" bash -s; fi
echo "unexpected docker call: $*" >&2; exit 99
""")

    def run(line: str, stdin: str, state: str = "running") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/sh", "-c", line], input=stdin, capture_output=True, text=True, timeout=30,
            env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "DOCKER_STATE": state},
        )

    run.argv = lambda: argv_log.read_text().splitlines() if argv_log.exists() else []
    run.tmp = tmp_path
    return run


def _program(tmp: Path) -> str:
    """Create writes its variables to files and lists its stdin; delete does the same for its own."""
    create = (
        f'printf "%s" "$SECRET_A" >{tmp}/create-a\n'
        f'printf "%s" "${{SECRET_B-unset}}" >{tmp}/create-b\n'
        f"cat >{tmp}/create-stdin\n"
    )
    delete = f'printf "%s" "${{SECRET_A-unset}}" >{tmp}/delete-a\nprintf "%s" "$SECRET_B" >{tmp}/delete-b\n'
    return node_program({"create": (create, {"SECRET_A": TRICKY}), "delete": (delete, {"SECRET_B": TOKEN})})


@pytest.mark.parametrize("line", [ssh_command("create", "root"), container_command("tenant-a-worker-0", "create")])
def test_create_runs_the_create_branch_with_its_own_values_byte_for_byte(shell, line):
    done = shell(line, _program(shell.tmp))

    assert done.returncode == 0, done.stderr
    assert (shell.tmp / "create-a").read_text() == TRICKY
    # Only the branch's own values are decoded.
    assert (shell.tmp / "create-b").read_text() == "unset"
    assert not (shell.tmp / "delete-a").exists()
    # The script's stdin is /dev/null: it cannot read (or swallow) the rest of the program.
    assert (shell.tmp / "create-stdin").read_text() == ""


@pytest.mark.parametrize("line", [ssh_command("delete", "root"),
                                  container_command_if_present("tenant-a-worker-0", "delete")])
def test_delete_runs_the_delete_branch_of_the_same_stdin(shell, line):
    done = shell(line, _program(shell.tmp))

    assert done.returncode == 0, done.stderr
    assert (shell.tmp / "delete-b").read_text() == TOKEN
    assert (shell.tmp / "delete-a").read_text() == "unset"
    assert not (shell.tmp / "create-a").exists()


def test_values_are_in_no_argv_and_not_in_clear_text_on_stdin(shell):
    program = _program(shell.tmp)
    shell(container_command("n", "create"), program)
    shell(container_command_if_present("n", "delete"), program)

    argv = shell.argv()
    assert argv == [
        f"docker exec -i -e {ACTION_ENV}=create n bash -s", "base64 -d",
        "docker container inspect -f {{.State.Running}} n", f"docker exec -i -e {ACTION_ENV}=delete n bash -s",
        "base64 -d",
    ]
    assert TOKEN not in program and "quoted" not in program


@pytest.mark.parametrize("state, said", [("gone", "is gone"), ("stopped", "is stopped")])
def test_a_delete_on_a_container_that_is_not_running_succeeds_without_running_anything(shell, state, said):
    line = container_command_if_present("tenant-a-worker-0", "delete", "If Node x remains, delete it.")
    done = shell(line, _program(shell.tmp), state=state)

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"gpu-tenancy: container tenant-a-worker-0 {said}: nothing to undo. If Node x remains, " \
                          "delete it.\n"
    assert not [entry for entry in shell.argv() if entry.startswith("docker exec")]
    assert not (shell.tmp / "delete-b").exists()


def test_a_delete_fails_when_docker_cannot_say_whether_the_container_exists(shell):
    done = shell(container_command_if_present("tenant-a-worker-0", "delete"), _program(shell.tmp), state="down")

    assert done.returncode == 1
    assert "Cannot connect to the Docker daemon" in done.stderr
    assert not [entry for entry in shell.argv() if entry.startswith("docker exec")]


def test_an_action_without_a_branch_fails_without_running_anything(shell):
    done = shell(ssh_command("create", "root"), node_program({"delete": (f"touch {shell.tmp}/ran\n", {})}))

    assert done.returncode == 2
    assert 'unknown action "create" (expected: delete)' in done.stderr
    assert not (shell.tmp / "ran").exists()


def test_a_failing_script_fails_the_command_with_its_exit_code(shell):
    script = f"set -euo pipefail\nfalse\ntouch {shell.tmp}/after-false\n"
    assert shell(ssh_command("create", "root"), node_program({"create": (script, {"S": "x"})})).returncode == 1
    assert not (shell.tmp / "after-false").exists()
    assert shell(ssh_command("create", "root"), node_program({"create": ("exit 7\n", {})})).returncode == 7


def test_a_truncated_program_runs_nothing(shell):
    program = node_program({"create": (f"touch {shell.tmp}/ran\n", {"S": "value"})})
    for cut in (len(program) // 3, len(program) - 3):
        done = shell(ssh_command("create", "root"), program[:cut])
        assert done.returncode != 0
        assert not (shell.tmp / "ran").exists()


def test_a_value_that_does_not_decode_stops_the_script(shell):
    program = node_program({"create": (f"touch {shell.tmp}/ran\n", {"S": "value"})})
    encoded = program.split("printf '%s' '")[1].split("'")[0]

    done = shell(ssh_command("create", "root"), program.replace(encoded, "!!not-base64!!"))

    assert done.returncode != 0
    assert not (shell.tmp / "ran").exists()


# --------------------------------------------------------------------------- #
# The Command registered for a node
# --------------------------------------------------------------------------- #

CREATE_SCRIPT = 'echo "create $N"\n'
DELETE_SCRIPT = 'echo "delete $K"\n'


def _one_command(access: NodeAccess, with_delete: bool = True):
    def program():
        before = command.local.Command("before", create="true")
        run_on_node(
            "on-node",
            access,
            create=NodeScript(CREATE_SCRIPT, {"N": "node-value", "T": before.id}),
            delete=NodeScript(DELETE_SCRIPT, {"K": "delete-value"}, gone_hint="hint") if with_delete else None,
            triggers=["t1", before.id],
            opts=pulumi.ResourceOptions(depends_on=[before], delete_before_replace=True),
        )

    # A preview: nothing runs, the registrations are complete.
    return run_program({}, program=program, preview=True)


def test_a_container_node_gets_a_local_docker_exec_command_with_a_secret_stdin():
    run = _one_command(NodeAccess(node_name="n-0", container_name="n-0"))
    resource = run.named("on-node", "command:local:Command")
    inputs = resource.inputs
    before_id = run.named("before").resource_id

    assert inputs["create"] == container_command("n-0", "create")
    assert inputs["delete"] == container_command_if_present("n-0", "delete", "hint")
    assert inputs["stdin"] == node_program({
        "create": (CREATE_SCRIPT, {"N": "node-value", "T": before_id}),
        "delete": (DELETE_SCRIPT, {"K": "delete-value"}),
    })
    assert resource.is_secret("stdin")
    assert not resource.is_secret("create") and not resource.is_secret("delete")
    # The Pulumi host's docker CLI process holds no value in its environment either.
    assert "environment" not in inputs
    assert inputs["logging"] == "none" and inputs["addPreviousOutputInEnv"] is False
    assert resource.additional_secret_outputs == ["stdout", "stderr"]
    assert inputs["triggers"] == ["t1", before_id]
    assert resource.delete_before_replace
    assert run.depends_on(resource, run.named("before"))


def test_an_ssh_node_gets_a_remote_command_pinned_to_its_host_key_with_a_secret_stdin():
    run = _one_command(NodeAccess(node_name="n-0", ssh=ssh_connection(user="ops")))
    assert run.of_type("command:local:Command") == [run.named("before")]
    resource = run.named("on-node", "command:remote:Command")
    inputs = resource.inputs

    connection = inputs["connection"]
    assert {key: connection[key] for key in ("host", "user", "port", "privateKey", "hostKey")} == {
        "host": SSH_HOST, "user": "ops", "port": 2222, "privateKey": PRIVATE_KEY, "hostKey": HOST_KEY,
    }
    assert resource.is_secret("connection")
    assert inputs["create"] == "sudo -n env GPU_TENANCY_ACTION=create bash -s"
    assert inputs["delete"] == "sudo -n env GPU_TENANCY_ACTION=delete bash -s"
    assert inputs["stdin"] == node_program({
        "create": (CREATE_SCRIPT, {"N": "node-value", "T": run.named("before").resource_id}),
        "delete": (DELETE_SCRIPT, {"K": "delete-value"}),
    })
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


def test_an_ssh_node_as_root_needs_no_sudo_and_a_create_only_command_has_no_delete():
    run = _one_command(NodeAccess(node_name="n-0", ssh=ssh_connection(user="root")), with_delete=False)
    inputs = run.named("on-node", "command:remote:Command").inputs
    assert inputs["create"] == "env GPU_TENANCY_ACTION=create bash -s"
    assert "delete" not in inputs
    assert list(_branches(inputs["stdin"])) == ["create"]


def _branches(program: str) -> list[str]:
    return [line[:-1] for line in program.splitlines() if line in ("create)", "delete)")]


def test_a_script_variable_that_is_not_a_shell_name_is_refused():
    def program():
        run_on_node("on-node", NodeAccess(node_name="n", container_name="n"),
                    create=NodeScript("true", {"BAD-NAME": "x"}))

    with pytest.raises(ProgramFailedError, match="'BAD-NAME' is not a shell variable name"):
        run_program({}, program=program, preview=True)
