"""components.node_access: reaching a worker by docker exec or SSH, secrets never on a command line.

The SSH stdin program is executed for real with bash; `base64` is wrapped by a
stub that records its argv, so a secret on any command line would be seen.
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
from components.node_access import (
    ACTION_ENV,
    NodeAccess,
    NodeScript,
    docker_exec_script,
    docker_exec_script_if_present,
    node_access,
    node_program,
    run_on_node,
    ssh_command,
    ssh_stdin,
)
from tests.ssh_worker import PRIVATE_KEY, PRIVATE_KEY_BODY, SSH_HOST, ssh_connection
from tools.mockrun import run_program

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


def test_a_worker_with_ssh_is_that_machine():
    worker = config.Worker(name="gpu-1", ssh=ssh_connection())
    access = node_access("tenant-a", worker)
    assert access.node_name == "tenant-a-gpu-1"
    assert access.container_name is None and access.is_ssh
    assert access.where == f"ops@{SSH_HOST}:2222"
    assert PRIVATE_KEY_BODY not in repr(access)


def test_node_access_needs_exactly_one_way_in():
    with pytest.raises(ValueError, match="exactly one"):
        NodeAccess(node_name="n")
    with pytest.raises(ValueError, match="exactly one"):
        NodeAccess(node_name="n", container_name="n", ssh=ssh_connection())


# --------------------------------------------------------------------------- #
# Container command lines
# --------------------------------------------------------------------------- #


def test_docker_exec_script_forwards_variables_by_name_and_feeds_the_script_as_a_quoted_heredoc():
    text = docker_exec_script("tenant-a-worker-0", 'echo "$X"\n', ["TENANT_KUBECONFIG", "X"])
    first, *body = text.splitlines()
    assert first == "docker exec -i -e TENANT_KUBECONFIG -e X tenant-a-worker-0 bash -s <<'GPU_TENANCY_NODE_SCRIPT'"
    assert body == ['echo "$X"', "GPU_TENANCY_NODE_SCRIPT"]


def test_docker_exec_script_refuses_what_would_break_the_command_line():
    with pytest.raises(ValueError, match="delimiter"):
        docker_exec_script("c", "echo hi\nGPU_TENANCY_NODE_SCRIPT\necho after\n")
    with pytest.raises(ValueError, match="shell variable"):
        docker_exec_script("c", "true", ["X; rm -rf /"])


def test_docker_exec_script_if_present_names_the_container_and_the_hint():
    text = docker_exec_script_if_present("c-1", "true", gone_hint="Check it by hand.")
    assert "docker container inspect -f '{{.State.Running}}' c-1" in text
    assert "'gpu-tenancy: container c-1 is gone: nothing to undo. Check it by hand.'" in text
    assert text.endswith(docker_exec_script("c-1", "true"))


# --------------------------------------------------------------------------- #
# SSH: the command line names the action, stdin carries everything else
# --------------------------------------------------------------------------- #


def test_ssh_command_only_names_the_action():
    assert ssh_command("create", "root") == f"env {ACTION_ENV}=create bash -s"
    assert ssh_command("delete", "ops") == f"sudo -n env {ACTION_ENV}=delete bash -s"
    with pytest.raises(ValueError, match="unknown action"):
        ssh_command("join; rm -rf /", "root")


@pytest.fixture
def shell(tmp_path: Path):
    """Runs an SSH command line with stdin, as the remote login shell would; base64 records its argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv_log = tmp_path / "argv.log"
    real_base64 = shutil.which("base64")
    assert real_base64, "base64 (coreutils) is needed"
    stub = bin_dir / "base64"
    stub.write_text(f'#!/bin/bash\nprintf "%s\\n" "base64 $*" >>{argv_log}\nexec {real_base64} "$@"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)

    def run(action: str, stdin: str, user: str = "root", **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/sh", "-c", ssh_command(action, user)],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), **env},
        )

    run.argv_log = argv_log
    run.tmp = tmp_path
    return run


def _program(tmp: Path) -> str:
    """Create writes its secrets to files and lists its exported environment; delete does the same for its own."""
    create = (
        f'printf "%s" "$SECRET_A" >{tmp}/create-a\n'
        f'printf "%s" "${{SECRET_B-unset}}" >{tmp}/create-b\n'
        f"env >{tmp}/create-env\n"
        f"cat >{tmp}/create-stdin\n"
    )
    delete = f'printf "%s" "${{SECRET_A-unset}}" >{tmp}/delete-a\nprintf "%s" "$SECRET_B" >{tmp}/delete-b\n'
    return ssh_stdin({"create": (create, {"SECRET_A": TRICKY}), "delete": (delete, {"SECRET_B": TOKEN})})


def test_create_runs_the_create_script_with_its_secrets_byte_for_byte(shell):
    done = shell("create", _program(shell.tmp))

    assert done.returncode == 0, done.stderr
    assert (shell.tmp / "create-a").read_text() == TRICKY
    # Only the branch's own secrets are decoded.
    assert (shell.tmp / "create-b").read_text() == "unset"
    assert not (shell.tmp / "delete-a").exists()
    # Shell variables, not exported: no child process inherits them.
    assert "SECRET_A" not in (shell.tmp / "create-env").read_text()
    # The script's stdin is /dev/null: it cannot read (or swallow) the program.
    assert (shell.tmp / "create-stdin").read_text() == ""


def test_delete_runs_the_delete_script_from_the_same_stdin(shell):
    done = shell("delete", _program(shell.tmp))

    assert done.returncode == 0, done.stderr
    assert (shell.tmp / "delete-b").read_text() == TOKEN
    assert (shell.tmp / "delete-a").read_text() == "unset"
    assert not (shell.tmp / "create-a").exists()


def test_secrets_are_in_no_argv_and_not_in_clear_text_on_stdin(shell):
    program = _program(shell.tmp)
    shell("create", program)
    shell("delete", program)

    argv = shell.argv_log.read_text().splitlines()
    assert argv == ["base64 -d", "base64 -d"]
    assert TOKEN not in program and "quoted" not in program
    assert TOKEN not in ssh_command("delete", "ops")


def test_an_unknown_action_fails_without_running_anything(shell):
    done = shell("create", ssh_stdin({"delete": (f"touch {shell.tmp}/ran\n", {})}))

    assert done.returncode == 2
    assert 'unknown action "create" (expected: delete)' in done.stderr
    assert not (shell.tmp / "ran").exists()


def test_a_failing_script_fails_the_command_with_its_exit_code(shell):
    script = f"set -euo pipefail\nfalse\ntouch {shell.tmp}/after-false\n"
    done = shell("create", ssh_stdin({"create": (script, {"S": "x"})}))
    assert done.returncode == 1
    assert not (shell.tmp / "after-false").exists()

    done = shell("create", ssh_stdin({"create": ("exit 7\n", {})}))
    assert done.returncode == 7


def test_ssh_stdin_refuses_bad_actions_and_variable_names():
    with pytest.raises(ValueError, match="unknown action"):
        ssh_stdin({"join": ("true", {})})
    with pytest.raises(ValueError, match="shell variable"):
        ssh_stdin({"create": ("true", {"A-B": "x"})})


# --------------------------------------------------------------------------- #
# The Command under mocks
# --------------------------------------------------------------------------- #

CREATE_SCRIPT = 'echo "create $N"\n'
DELETE_SCRIPT = 'echo "delete $K"\n'
SECRETS = {"N": "node-secret", "K": "kubeconfig-secret"}


def _one_command(access: NodeAccess, with_delete: bool = True):
    def program():
        parent = command.local.Command("before", create="true")
        run_on_node(
            "on-node",
            access,
            create=NodeScript(CREATE_SCRIPT, ("N",)),
            delete=NodeScript(DELETE_SCRIPT, ("K",), gone_hint="hint") if with_delete else None,
            secrets=SECRETS,
            triggers=["t1", parent.id],
            opts=pulumi.ResourceOptions(depends_on=[parent], delete_before_replace=True),
        )

    return run_program({}, program=program)


def test_a_container_node_gets_a_local_docker_exec_command_with_secrets_in_its_environment():
    run = _one_command(NodeAccess(node_name="n-0", container_name="n-0"))
    resource = run.named("on-node", "command:local:Command")
    inputs = resource.inputs

    assert inputs["create"] == docker_exec_script("n-0", CREATE_SCRIPT, ["N"])
    assert inputs["delete"] == docker_exec_script_if_present("n-0", DELETE_SCRIPT, ["K"], "hint")
    assert inputs["environment"] == SECRETS and resource.is_secret("environment")
    assert "stdin" not in inputs
    assert inputs["logging"] == "none"
    assert resource.additional_secret_outputs == ["stdout", "stderr"]
    assert inputs["triggers"] == ["t1", "before-id"]
    assert resource.delete_before_replace
    assert run.depends_on(resource, run.named("before"))
    for key in ("create", "delete"):
        assert not any(value in inputs[key] for value in SECRETS.values())


def test_an_ssh_node_gets_a_remote_command_whose_secrets_travel_on_a_secret_stdin():
    run = _one_command(NodeAccess(node_name="n-0", ssh=ssh_connection(user="ops")))
    assert run.of_type("command:local:Command") == [run.named("before")]
    resource = run.named("on-node", "command:remote:Command")
    inputs = resource.inputs

    connection = inputs["connection"]
    assert {k: connection[k] for k in ("host", "user", "port", "privateKey")} == {
        "host": SSH_HOST, "user": "ops", "port": 2222, "privateKey": PRIVATE_KEY,
    }
    assert resource.is_secret("connection")
    assert inputs["create"] == "sudo -n env GPU_TENANCY_ACTION=create bash -s"
    assert inputs["delete"] == "sudo -n env GPU_TENANCY_ACTION=delete bash -s"
    assert not resource.is_secret("create") and not resource.is_secret("delete")
    assert inputs["stdin"] == ssh_stdin(
        {"create": (CREATE_SCRIPT, {"N": "node-secret"}), "delete": (DELETE_SCRIPT, {"K": "kubeconfig-secret"})}
    )
    assert resource.is_secret("stdin")
    # AcceptEnv is not relied upon: nothing goes through the SSH environment.
    assert "environment" not in inputs
    assert inputs["addPreviousOutputInEnv"] is False
    assert inputs["logging"] == "none"
    # The SDK itself adds "connection" for remote Commands.
    assert {"stdout", "stderr", "connection"} <= set(resource.additional_secret_outputs)
    assert inputs["triggers"] == ["t1", "before-id"]
    assert resource.delete_before_replace
    for key in ("create", "delete"):
        assert PRIVATE_KEY_BODY not in inputs[key]
        assert not any(value in inputs[key] for value in SECRETS.values())


def test_an_ssh_node_as_root_needs_no_sudo_and_a_create_only_command_has_no_delete():
    run = _one_command(NodeAccess(node_name="n-0", ssh=ssh_connection(user="root")), with_delete=False)
    inputs = run.named("on-node", "command:remote:Command").inputs
    assert inputs["create"] == "env GPU_TENANCY_ACTION=create bash -s"
    assert "delete" not in inputs
    assert inputs["stdin"] == ssh_stdin({"create": (CREATE_SCRIPT, {"N": "node-secret"})})


def test_a_script_naming_a_secret_without_a_value_is_refused():
    def program():
        run_on_node(
            "on-node",
            NodeAccess(node_name="n", container_name="n"),
            create=NodeScript("true", ("MISSING",)),
            secrets={},
        )

    with pytest.raises(Exception, match="no value for secret variable"):
        run_program({}, program=program)


def test_node_program_is_ssh_stdin_with_each_scripts_own_secrets():
    scripts = {"create": NodeScript("echo a\n", ("A",)), "delete": NodeScript("echo b\n", ("B",))}
    assert node_program(scripts, {"A": "1", "B": "2", "C": "3"}) == ssh_stdin(
        {"create": ("echo a\n", {"A": "1"}), "delete": ("echo b\n", {"B": "2"})}
    )
    with pytest.raises(TypeError, match="script text"):
        node_program({"create": NodeScript(pulumi.Output.from_input("x"))}, {})


def test_a_secret_that_does_not_decode_stops_the_script(shell):
    program = ssh_stdin({"create": (f"touch {shell.tmp}/ran\n", {"S": "value"})})
    encoded = program.split("printf '%s' '")[1].split("'")[0]

    done = shell("create", program.replace(encoded, "!!not-base64!!"))

    assert done.returncode != 0
    assert not (shell.tmp / "ran").exists()
