"""The node commands of HamiMockGpu, run for real with /bin/sh and bash against stub docker/kubectl.

Container nodes: the `docker exec` command lines. SSH nodes: the remote command
line with the secret stdin program, exactly as pulumi-command's remote Command
feeds them to the machine's shell.
"""

import json
import os
import stat
import subprocess
import textwrap

import pytest

from components.gpu_register import (
    apply_capacity_script,
    capacity_patch,
    capacity_removal_patch,
    konnectivity_wait_script,
    remove_capacity_script,
)
from components.node_access import (
    NodeScript,
    docker_exec_script,
    docker_exec_script_if_present,
    node_program,
    ssh_command,
)

KUBECONFIG_TEXT = "apiVersion: v1\nkind: Config\n# admin of tenant-a\n"
USES_KUBECONFIG = ("TENANT_KUBECONFIG",)


def in_container(container: str, script: str) -> str:
    return docker_exec_script(container, script, USES_KUBECONFIG)


def in_container_if_present(container: str, script: str) -> str:
    return docker_exec_script_if_present(container, script, USES_KUBECONFIG)


def over_ssh(create: str, delete: str | None = None) -> str:
    """The stdin program of an SSH node's Command, holding the kubeconfig for the scripts."""
    scripts = {"create": NodeScript(create, USES_KUBECONFIG)}
    if delete is not None:
        scripts["delete"] = NodeScript(delete, USES_KUBECONFIG)
    return node_program(scripts, {"TENANT_KUBECONFIG": KUBECONFIG_TEXT})

# `docker`: `container inspect` answers from $STUB_CONTAINER; `exec ... bash -s` runs the script locally.
DOCKER_STUB = """\
#!/usr/bin/env bash
echo "docker $*" >> "$STUB_LOG"
case "$1 $2" in
  "container inspect")
    case "${STUB_CONTAINER:-running}" in
      missing) echo "Error response from daemon: No such container: ${@: -1}" >&2; exit 1 ;;
      daemon-down) echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock" >&2; exit 1 ;;
      stopped) echo false ;;
      *) echo true ;;
    esac ;;
  "exec -i")
    [ "${@: -2:1}" = bash ] && [ "${@: -1}" = -s ] || { echo "unexpected docker exec $*" >&2; exit 2; }
    exec bash -s ;;
  *) echo "unexpected docker $*" >&2; exit 2 ;;
esac
"""

# `kubectl`: logs its argv and the kubeconfig it was given; answers from $STUB_* variables.
KUBECTL_STUB = """\
#!/usr/bin/env bash
echo "kubectl $*" >> "$STUB_LOG"
[ "$(cat "$KUBECONFIG")" = "$EXPECTED_KUBECONFIG" ] || { echo "kubectl got the wrong kubeconfig" >&2; exit 3; }
[ -z "${TENANT_KUBECONFIG:-}" ] || { echo "TENANT_KUBECONFIG leaked into kubectl" >&2; exit 3; }
args="$*"
case "$args" in
  *"wait --for=create"*) exit "${STUB_WAIT_RC:-0}" ;;
  *"get daemonset/konnectivity-agent"*)
    # One value per call from $STUB_READY (space separated); the last one repeats.
    read -r -a values < "$STUB_READY"
    echo -n "${values[0]}"
    [ "${#values[@]}" -gt 1 ] && echo "${values[*]:1}" > "$STUB_READY"
    exit 0 ;;
  *"rollout status"*) exit "${STUB_ROLLOUT_RC:-0}" ;;
  *"get node"*) [ "${STUB_NODE:-present}" = present ] && echo "node/${3}"; exit 0 ;;
  *"patch node"*) exit 0 ;;
esac
echo "unexpected kubectl $args" >&2
exit 2
"""


@pytest.fixture
def stubs(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("docker", DOCKER_STUB), ("kubectl", KUBECTL_STUB)):
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "calls.log"
    log.touch()
    ready = tmp_path / "ready"
    ready.write_text("1\n")

    def run(command: str, stdin: str | None = None, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
        """`stdin` given: an SSH node, whose kubeconfig comes from stdin only (not from the environment)."""
        secrets = {} if stdin is not None else {"TENANT_KUBECONFIG": KUBECONFIG_TEXT}
        done = subprocess.run(
            ["/bin/sh", "-c", command],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            env={
                "PATH": f"{bin_dir}:{os.environ['PATH']}",
                **secrets,
                "EXPECTED_KUBECONFIG": KUBECONFIG_TEXT.rstrip("\n"),
                "STUB_LOG": str(log),
                "STUB_READY": str(ready),
                **env,
            },
        )
        return done, log.read_text().splitlines()

    run.ready = ready
    return run


def _patch_calls(calls):
    return [line for line in calls if line.startswith("kubectl patch")]


def test_capacity_create_patches_the_node_status_inside_the_worker(stubs):
    done, calls = stubs(in_container("tenant-a-worker-0", apply_capacity_script("tenant-a-worker-0", 10)))
    assert done.returncode == 0, done.stderr
    assert calls[0] == "docker exec -i -e TENANT_KUBECONFIG tenant-a-worker-0 bash -s"
    assert calls[1] == "kubectl wait --for=create node/tenant-a-worker-0 --timeout=120s"
    (patch,) = _patch_calls(calls)
    prefix = "kubectl patch node tenant-a-worker-0 --subresource=status --type=merge -p "
    assert patch.startswith(prefix)
    assert json.loads(patch[len(prefix):]) == capacity_patch(10)
    assert KUBECONFIG_TEXT.strip() not in done.stdout + done.stderr


def test_capacity_create_fails_when_the_node_never_appears(stubs):
    done, calls = stubs(in_container("tenant-a-worker-0", apply_capacity_script("tenant-a-worker-0", 10)), STUB_WAIT_RC="1")
    assert done.returncode != 0
    assert _patch_calls(calls) == []


def test_capacity_delete_removes_both_entries(stubs):
    done, calls = stubs(in_container_if_present("tenant-a-worker-0", remove_capacity_script("tenant-a-worker-0")))
    assert done.returncode == 0, done.stderr
    (patch,) = _patch_calls(calls)
    prefix = "kubectl patch node tenant-a-worker-0 --subresource=status --type=merge -p "
    assert json.loads(patch[len(prefix):]) == capacity_removal_patch()


def test_capacity_delete_tolerates_a_missing_node(stubs):
    done, calls = stubs(
        in_container_if_present("tenant-a-worker-0", remove_capacity_script("tenant-a-worker-0")), STUB_NODE="gone"
    )
    assert done.returncode == 0, done.stderr
    assert "node tenant-a-worker-0 is gone" in done.stdout
    assert _patch_calls(calls) == []


@pytest.mark.parametrize("state", ["missing", "stopped"])
def test_capacity_delete_tolerates_a_missing_or_stopped_container(stubs, state):
    done, calls = stubs(
        in_container_if_present("tenant-a-worker-0", remove_capacity_script("tenant-a-worker-0")), STUB_CONTAINER=state
    )
    assert done.returncode == 0, done.stderr
    assert "nothing to undo" in done.stdout
    assert not any(line.startswith(("docker exec", "kubectl")) for line in calls)


def test_capacity_delete_fails_when_docker_itself_fails(stubs):
    done, calls = stubs(
        in_container_if_present("tenant-a-worker-0", remove_capacity_script("tenant-a-worker-0")),
        STUB_CONTAINER="daemon-down",
    )
    assert done.returncode == 1
    assert "Cannot connect to the Docker daemon" in done.stderr
    assert not any(line.startswith("docker exec") for line in calls)


def test_konnectivity_wait_polls_until_every_node_has_an_agent(stubs):
    stubs.ready.write_text("0 1 2 3\n")
    script = konnectivity_wait_script(expected_nodes=3, timeout_seconds=20, poll_seconds=0.01)
    done, calls = stubs(in_container("tenant-a-worker-0", script))
    assert done.returncode == 0, done.stderr
    assert calls[1].startswith("kubectl -n kube-system wait --for=create daemonset/konnectivity-agent --timeout=")
    reads = [line for line in calls if "get daemonset/konnectivity-agent" in line]
    assert len(reads) == 4
    assert calls[-1].startswith("kubectl -n kube-system rollout status daemonset/konnectivity-agent --timeout=")


def test_konnectivity_wait_gives_up_with_a_clear_message(stubs):
    stubs.ready.write_text("0\n")
    script = konnectivity_wait_script(expected_nodes=2, timeout_seconds=1, poll_seconds=0.05)
    done, calls = stubs(in_container("tenant-a-worker-0", script))
    assert done.returncode == 1
    assert "daemonset/konnectivity-agent has 0 of 2 pods ready after 1s" in done.stderr
    assert "tunnel" in done.stderr and "CNI" in done.stderr
    assert not any("rollout status" in line for line in calls)


def test_konnectivity_wait_reports_a_missing_daemonset(stubs):
    done, _ = stubs(in_container("tenant-a-worker-0", konnectivity_wait_script(1, timeout_seconds=1)), STUB_WAIT_RC="1")
    assert done.returncode == 1
    assert "did not appear in kube-system" in done.stderr
    assert "spec.addons.konnectivity" in done.stderr


def test_konnectivity_wait_fails_when_the_rollout_does_not_finish(stubs):
    done, _ = stubs(in_container("tenant-a-worker-0", konnectivity_wait_script(1, timeout_seconds=5)), STUB_ROLLOUT_RC="1")
    assert done.returncode == 1
    assert "did not finish rolling out" in done.stderr


def test_scripts_refuse_bad_input():
    with pytest.raises(ValueError):
        konnectivity_wait_script(0)
    with pytest.raises(ValueError, match="delimiter"):
        in_container("c", textwrap.dedent("""\
            echo hi
            GPU_TENANCY_NODE_SCRIPT
            echo after
        """))


# --------------------------------------------------------------------------- #
# SSH nodes: the same scripts, the kubeconfig on stdin
# --------------------------------------------------------------------------- #


def test_capacity_create_over_ssh_patches_the_node_status(stubs):
    program = over_ssh(apply_capacity_script("tenant-a-gpu-1", 10), remove_capacity_script("tenant-a-gpu-1"))

    done, calls = stubs(ssh_command("create", "root"), program)

    assert done.returncode == 0, done.stderr
    assert calls[0] == "kubectl wait --for=create node/tenant-a-gpu-1 --timeout=120s"
    (patch,) = _patch_calls(calls)
    prefix = "kubectl patch node tenant-a-gpu-1 --subresource=status --type=merge -p "
    assert json.loads(patch[len(prefix):]) == capacity_patch(10)
    assert not any("admin of tenant-a" in line for line in calls)
    assert "admin of tenant-a" not in program


def test_capacity_delete_over_ssh_removes_both_entries_from_the_same_stdin(stubs):
    program = over_ssh(apply_capacity_script("tenant-a-gpu-1", 10), remove_capacity_script("tenant-a-gpu-1"))

    done, calls = stubs(ssh_command("delete", "root"), program)

    assert done.returncode == 0, done.stderr
    (patch,) = _patch_calls(calls)
    prefix = "kubectl patch node tenant-a-gpu-1 --subresource=status --type=merge -p "
    assert json.loads(patch[len(prefix):]) == capacity_removal_patch()
    assert not any("wait --for=create" in line for line in calls)


def test_capacity_delete_over_ssh_tolerates_a_missing_node(stubs):
    program = over_ssh(apply_capacity_script("tenant-a-gpu-1", 10), remove_capacity_script("tenant-a-gpu-1"))

    done, calls = stubs(ssh_command("delete", "root"), program, STUB_NODE="gone")

    assert done.returncode == 0, done.stderr
    assert "node tenant-a-gpu-1 is gone" in done.stdout
    assert _patch_calls(calls) == []


def test_konnectivity_wait_over_ssh(stubs):
    stubs.ready.write_text("0 2\n")
    program = over_ssh(konnectivity_wait_script(expected_nodes=2, timeout_seconds=20, poll_seconds=0.01))

    done, calls = stubs(ssh_command("create", "root"), program)

    assert done.returncode == 0, done.stderr
    assert calls[-1].startswith("kubectl -n kube-system rollout status daemonset/konnectivity-agent")


def test_konnectivity_wait_over_ssh_fails_like_in_a_container(stubs):
    stubs.ready.write_text("0\n")
    program = over_ssh(konnectivity_wait_script(expected_nodes=2, timeout_seconds=1, poll_seconds=0.05))

    done, _ = stubs(ssh_command("create", "root"), program)

    assert done.returncode == 1
    assert "daemonset/konnectivity-agent has 0 of 2 pods ready after 1s" in done.stderr


def test_over_ssh_without_the_kubeconfig_on_stdin_kubectl_gets_nothing(stubs):
    """Negative case: the kubeconfig really comes from stdin, not from anywhere else."""
    program = node_program({"create": NodeScript(apply_capacity_script("n", 1), ())}, {})

    done, calls = stubs(ssh_command("create", "root"), program)

    assert done.returncode != 0
    assert _patch_calls(calls) == []
