"""The join and leave scripts, run with bash against stub binaries that record their argv.

Stubs stand in for what only exists on a node (kubeadm, kubelet, kubectl,
containerd, systemctl, modprobe, swapoff) and for the docker CLI on the host; a
temporary directory stands in for the node's root filesystem. PATH holds only
the stubs and a few coreutils, so a removed stub really is a missing tool.

The scripts are run three ways: directly with bash, through `docker exec` as a
container worker's Command runs them, and as an SSH worker's Command runs
them (`env GPU_TENANCY_ACTION=<action> bash -s` with the secret stdin program).
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from components import join_script as js
from components.container_exec import TENANT_KUBECONFIG_ENV
from components.node_access import (
    CREATE,
    DELETE,
    docker_exec_script,
    docker_exec_script_if_present,
    node_program,
    ssh_command,
)
from components.worker_node import join_scripts

NODE = "tenant-a-worker-0"
TOKEN = "abcdef.0123456789abcdef"
TOKEN_SECRET = TOKEN.split(".")[1]
ENDPOINT = "172.18.255.200:6443"
CA_HASH = "sha256:" + "ab" * 32
KUBECONFIG_TEXT = "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: s3cr3t-admin\n"
VERSION = "v1.35.0"
SECRETS = {js.ENDPOINT_ENV: ENDPOINT, js.TOKEN_ENV: TOKEN, js.DISCOVERY_HASH_ENV: CA_HASH}
# Host tools the scripts and stubs use besides the stubbed node tools.
SYSTEM_TOOLS = ("bash", "env", "mktemp", "rm", "wc", "sleep", "cat", "cp", "stat", "mkdir", "sed", "base64", "grep")

# Shared by every stub: append "<argc>\x1f<arg>\x1f<arg>..." to $CALLS/<name>.argv, one line per call.
PRELUDE = r"""#!/bin/bash
set -u
rec() { local name=$1; shift; { printf '%s' "$#"; printf '\x1f%s' "$@"; printf '\n'; } >>"$CALLS/$name.argv"; }
next_count() { local f="$CALLS/$1.count" n; n=$(( $(cat "$f" 2>/dev/null || echo 0) + 1 )); echo "$n" >"$f"; echo "$n"; }
pick() { local -a plan; read -r -a plan <<<"$1"; local i=$(( $2 - 1 )); if (( i < ${#plan[@]} )); then echo "${plan[$i]}"; else echo "${plan[-1]}"; fi; }
"""

STUBS = {
    "kubeadm": r"""
# Version queries are not recorded: the tests read the calls that change the node.
[[ "$1" == version ]] && { echo "${KUBEADM_VERSION:-v1.35.0}"; exit 0; }
rec kubeadm "$@"
case "$1" in
  join)
    n=$(next_count kubeadm-join)
    [[ "${2:-}" == --config && -f "${3:-}" ]] || { echo "stub kubeadm: expected join --config <file>" >&2; exit 2; }
    cp "$3" "$CALLS/join-config-$n.yaml"
    stat -c %a "$3" >"$CALLS/join-config-$n.mode"
    echo "$3" >"$CALLS/join-config-$n.path"
    [[ -n "${WORKER_JOIN_TOKEN:-}" ]] && echo leaked >"$CALLS/kubeadm-saw-token-env"
    case "$(pick "${KUBEADM_JOIN_PLAN:-ok}" "$n")" in
      ok)
        mkdir -p "$GPU_TENANCY_NODE_ROOT/etc/kubernetes"
        server="$(sed -n 's/^ *apiServerEndpoint: "\(.*\)"$/\1/p' "$3")"
        printf '    server: https://%s\n' "$server" >"$GPU_TENANCY_NODE_ROOT/etc/kubernetes/kubelet.conf"
        echo "This node has joined the cluster"
        exit 0 ;;
      forbidden)
        echo 'error execution phase kubelet-start: configmaps "kubelet-config" is forbidden: User "system:bootstrap:abcdef" cannot get resource "configmaps"' >&2
        exit 1 ;;
      echo-token)
        secret="$(sed -n 's/^ *token: "[a-z0-9]*\.\(.*\)"$/\1/p' "$3")"
        echo "error: bootstrap token secret $secret rejected" >&2
        exit 1 ;;
    esac ;;
  reset)
    rm -f "$GPU_TENANCY_NODE_ROOT/etc/kubernetes/kubelet.conf"
    echo "[reset] Stopping the kubelet service"
    exit 0 ;;
esac
echo "stub kubeadm: unexpected $*" >&2
exit 2
""",
    "kubectl": r"""
[[ "$1" == version ]] && { echo "Client Version: ${KUBECTL_VERSION:-v1.35.0}"; exit 0; }
rec kubectl "$@"
if [[ "$1 $2" == "get --raw" ]]; then
  [[ "${READYZ:-ok}" == ok ]] && { echo ok; exit 0; }
  echo "The connection to the server 172.18.255.200:6443 was refused" >&2; exit 1
fi
n=$(next_count kubectl)
cp "$KUBECONFIG" "$CALLS/kubectl-kubeconfig"
case "$(pick "${KUBECTL_PLAN:-ok}" "$n")" in
  ok) echo "node \"$3\" deleted"; exit 0 ;;
  refused) echo "The connection to the server 172.18.255.200:6443 was refused - did you specify the right host or port?" >&2; exit 1 ;;
esac
""",
    # The endpoint check: any HTTP answer is a success, a refused connection a failure.
    "curl": r"""
rec curl "$@"
n=$(next_count curl)
case "$(pick "${CURL_PLAN:-ok}" "$n")" in
  ok) exit 0 ;;
  refused) echo "curl: (7) Failed to connect to 172.18.255.200 port 6443: Connection refused" >&2; exit 7 ;;
esac
""",
    "systemctl": r"""
rec systemctl "$@"
n=$(next_count systemctl)
(( n >= ${SYSTEMCTL_ACTIVE_AFTER:-1} ))
""",
    "modprobe": r"""
rec modprobe "$@"
if [[ "${MODPROBE_FAILS:-}" == 1 ]]; then echo "modprobe: FATAL: Module $1 not found in directory /lib/modules/6.8.0" >&2; exit 1; fi
""",
    "swapoff": r"""
rec swapoff "$@"
if [[ "${SWAPOFF_FAILS:-}" == 1 ]]; then echo "swapoff: /swap.img: swapoff failed: No such file or directory" >&2; exit 1; fi
""",
    "kubelet": r"""
rec kubelet "$@"
[[ "$1" == --version ]] || { echo "stub kubelet: unexpected $*" >&2; exit 2; }
echo "Kubernetes ${KUBELET_VERSION:-v1.35.0}"
""",
    # `containerd config dump` as containerd 2.x prints it (config version 3), runc with the configured driver.
    "containerd": r"""
rec containerd "$@"
[[ "$1 $2" == "config dump" ]] || { echo "stub containerd: unexpected $*" >&2; exit 2; }
[[ "${CONTAINERD_DUMP_FAILS:-}" == 1 ]] && { echo "containerd: unknown command config" >&2; exit 1; }
printf '%s\n' 'version = 3' "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]" \
  "  SystemdCgroup = ${CONTAINERD_SYSTEMD_CGROUP:-true}"
""",
    # Host docker CLI: `container inspect` reports the container state; `exec` runs the command
    # with only the forwarded variables (plus the harness's own), as docker would inside the container.
    "docker": r"""
rec docker "$@"
case "$1" in
  container)
    case "${DOCKER_CONTAINER_STATE:-running}" in
      missing) echo "Error: No such container: ${@: -1}" >&2; exit 1 ;;
      running) echo true ;;
      *) echo false ;;
    esac ;;
  exec)
    shift
    keep=" $STUB_HARNESS_ENV "
    while (( $# )); do
      case "$1" in
        -i) shift ;;
        -e) keep+="$2 "; shift 2 ;;
        *) break ;;
      esac
    done
    echo "$1" >>"$CALLS/docker-exec-containers"
    shift
    for var in $(compgen -e); do
      [[ "$keep" == *" $var "* ]] || unset "$var" 2>/dev/null || true
    done
    exec "$@" ;;
  *) echo "stub docker: unexpected $*" >&2; exit 2 ;;
esac
""",
}

# Variables of the test harness itself that the docker stub lets through to the "container".
HARNESS_ENV = [
    "PATH", "HOME", "TMPDIR", "CALLS", js.ROOT_ENV, "KUBEADM_JOIN_PLAN", "KUBECTL_PLAN", "READYZ", "CURL_PLAN",
    "KUBEADM_VERSION", "KUBECTL_VERSION", js.ENDPOINT_ATTEMPTS_ENV, js.ENDPOINT_PAUSE_ENV,
    js.JOIN_ATTEMPTS_ENV, js.JOIN_PAUSE_ENV, js.RUNTIME_ATTEMPTS_ENV, js.RUNTIME_PAUSE_ENV,
    js.LEAVE_ATTEMPTS_ENV, js.LEAVE_PAUSE_ENV, "SYSTEMCTL_ACTIVE_AFTER", "MODPROBE_FAILS", "SWAPOFF_FAILS",
    "KUBELET_VERSION", "CONTAINERD_SYSTEMD_CGROUP", "CONTAINERD_DUMP_FAILS",
]


@dataclass
class Node:
    """A fake node: stub binaries, a root filesystem and the recorded calls."""

    base: Path

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def calls_dir(self) -> Path:
        return self.base / "calls"

    @property
    def tmp(self) -> Path:
        return self.base / "tmp"

    def calls(self, name: str) -> list[list[str]]:
        path = self.calls_dir / f"{name}.argv"
        if not path.exists():
            return []
        result = []
        for line in path.read_text().splitlines():
            count, *args = line.split("\x1f")
            assert int(count) == len(args)
            result.append(args)
        return result

    def all_argv_text(self) -> str:
        return "".join(p.read_text() for p in self.calls_dir.glob("*.argv"))

    def mark_joined(self) -> None:
        (self.root / "etc/kubernetes").mkdir(parents=True, exist_ok=True)
        (self.root / "etc/kubernetes/kubelet.conf").write_text(f"    server: https://{ENDPOINT}\n")

    def joined(self) -> bool:
        return (self.root / "etc/kubernetes/kubelet.conf").exists()

    def remove_tool(self, name: str) -> None:
        (self.base / "bin" / name).unlink()

    def env(self, **overrides: str) -> dict[str, str]:
        env = {
            "PATH": f"{self.base / 'bin'}:{self.base / 'sysbin'}",
            "HOME": str(self.base),
            "TMPDIR": str(self.tmp),
            "CALLS": str(self.calls_dir),
            js.ROOT_ENV: str(self.root),
            js.JOIN_PAUSE_ENV: "0",
            js.RUNTIME_PAUSE_ENV: "0",
            js.LEAVE_PAUSE_ENV: "0",
            "STUB_HARNESS_ENV": " ".join(HARNESS_ENV),
        }
        env.update(overrides)
        return env

    def run(self, args: list[str], stdin: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, input=stdin, capture_output=True, text=True, env=self.env(**env), timeout=60)

    def run_join(self, version: str = VERSION, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run(["bash", "-s"], js.join_script(NODE, version), **{**SECRETS, **env})

    def run_over_ssh(self, action: str, version: str = VERSION, **env: str) -> subprocess.CompletedProcess[str]:
        """As the SSH worker's Command runs: action on the command line, scripts and secrets on stdin only."""
        create, delete = join_scripts(NODE, version, over_ssh=True)
        program = node_program({CREATE: create, DELETE: delete}, {**SECRETS, TENANT_KUBECONFIG_ENV: KUBECONFIG_TEXT})
        return self.run(["/bin/sh", "-c", ssh_command(action, "root")], program, **env)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    fake = Node(tmp_path)
    for directory in ("bin", "sysbin", "calls", "tmp", "root/proc/sys/net", "root/etc"):
        (tmp_path / directory).mkdir(parents=True)
    for tool in SYSTEM_TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed on the test host"
        (tmp_path / "sysbin" / tool).symlink_to(found)
    # base64 decodes the SSH stdin's secrets: record its argv too, then run the real one.
    wrapper = tmp_path / "bin" / "base64"
    wrapper.write_text(PRELUDE + f'rec base64 "$@"\nexec {tmp_path / "sysbin" / "base64"} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    # An empty swap table: just the header line, as on a host without swap.
    (fake.root / "proc/swaps").write_text("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
    for name, body in STUBS.items():
        path = tmp_path / "bin" / name
        path.write_text(PRELUDE + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return fake


def assert_token_never_exposed(node: Node, *outputs: subprocess.CompletedProcess[str]) -> None:
    assert TOKEN_SECRET not in node.all_argv_text()
    assert "s3cr3t-admin" not in node.all_argv_text()
    assert not (node.calls_dir / "kubeadm-saw-token-env").exists(), "kubeadm inherited WORKER_JOIN_TOKEN"
    for done in outputs:
        assert TOKEN_SECRET not in done.stdout
        assert TOKEN_SECRET not in done.stderr


# --------------------------------------------------------------------------- #
# join
# --------------------------------------------------------------------------- #


def test_first_join_prepares_the_node_and_joins_with_a_private_config(node):
    done = node.run_join()

    assert done.returncode == 0, done.stderr
    assert node.calls("modprobe") == [["br_netfilter"]]
    assert node.calls("swapoff") == [["-a"]]
    assert node.calls("systemctl") == [["is-active", "--quiet", "containerd"]]
    assert node.calls("curl") == [["-k", "-sS", "-o", "/dev/null", "--max-time", "5", f"https://{ENDPOINT}/healthz"]]
    [join] = node.calls("kubeadm")
    assert join[:2] == ["join", "--config"] and len(join) == 3
    assert node.joined()
    assert f"worker {NODE} joined the tenant at {ENDPOINT} (attempt 1)" in done.stdout

    config = yaml.safe_load((node.calls_dir / "join-config-1.yaml").read_text())
    assert config == {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"apiServerEndpoint": ENDPOINT, "token": TOKEN, "caCertHashes": [CA_HASH]}},
        "nodeRegistration": {"name": NODE, "ignorePreflightErrors": ["SystemVerification", "FileExisting"]},
        # kubeadm's own 5-minute waits, shortened: the script retries around them.
        "timeouts": {"discovery": "1m0s", "tlsBootstrap": "2m0s"},
    }
    assert (node.calls_dir / "join-config-1.mode").read_text().strip() == "600"
    # The file holding the token is gone once the script ends.
    assert not Path((node.calls_dir / "join-config-1.path").read_text().strip()).exists()
    assert list(node.tmp.iterdir()) == []
    assert_token_never_exposed(node, done)


def test_already_joined_node_is_left_alone(node):
    node.mark_joined()

    done = node.run_join()

    assert done.returncode == 0, done.stderr
    assert "already joined" in done.stdout
    assert node.calls("kubeadm") == []
    assert node.calls("modprobe") == [] and node.calls("swapoff") == []
    assert node.calls("kubelet") == [] and node.calls("containerd") == []


def test_transient_failure_is_reset_and_retried_until_success(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="forbidden forbidden ok", **{js.JOIN_ATTEMPTS_ENV: "5"})

    assert done.returncode == 0, done.stderr
    assert [call[0] for call in node.calls("kubeadm")] == ["join", "reset", "join", "reset", "join"]
    assert ["reset", "-f"] in node.calls("kubeadm")
    assert "kubeadm join attempt 1/5 failed; resetting and retrying" in done.stderr
    assert "(attempt 3)" in done.stdout
    assert node.joined()
    assert_token_never_exposed(node, done)


def test_permanent_failure_gives_up_with_the_kubeadm_message(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="forbidden", **{js.JOIN_ATTEMPTS_ENV: "3"})

    assert done.returncode == 1
    assert [call[0] for call in node.calls("kubeadm")] == ["join", "reset", "join", "reset", "join"]
    assert f"kubeadm join to {ENDPOINT} failed 3 times" in done.stderr
    assert 'configmaps "kubelet-config" is forbidden' in done.stderr
    assert "giving up" in done.stderr
    assert not node.joined()
    assert_token_never_exposed(node, done)


def test_kubeadm_output_is_shown_with_the_token_secret_redacted(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="echo-token", **{js.JOIN_ATTEMPTS_ENV: "1"})

    assert done.returncode == 1
    assert "bootstrap token secret <redacted> rejected" in done.stderr
    assert_token_never_exposed(node, done)


def test_join_attempts_default_to_a_bounded_retry(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="forbidden")

    assert done.returncode == 1
    joins = [call for call in node.calls("kubeadm") if call[0] == "join"]
    assert len(joins) == js.DEFAULT_JOIN_ATTEMPTS
    # Long enough for Kamaji to finish the tenant RBAC (up to a minute after Ready).
    assert (js.DEFAULT_JOIN_ATTEMPTS - 1) * js.DEFAULT_JOIN_PAUSE_SECONDS >= 90


def test_waits_for_containerd_before_joining(node):
    done = node.run_join(SYSTEMCTL_ACTIVE_AFTER="3")

    assert done.returncode == 0, done.stderr
    assert len(node.calls("systemctl")) == 3
    assert len(node.calls("kubeadm")) == 1


def test_gives_up_when_containerd_never_comes_up(node):
    done = node.run_join(SYSTEMCTL_ACTIVE_AFTER="99", **{js.RUNTIME_ATTEMPTS_ENV: "4"})

    assert done.returncode == 1
    assert len(node.calls("systemctl")) == 4
    assert "containerd is not active after 4 checks" in done.stderr
    assert node.calls("kubeadm") == []


def test_modprobe_failure_is_tolerated_when_br_netfilter_is_already_active(node):
    (node.root / "proc/sys/net/bridge").mkdir()

    done = node.run_join(MODPROBE_FAILS="1")

    assert done.returncode == 0, done.stderr
    assert "br_netfilter is already active" in done.stderr
    assert node.joined()


def test_modprobe_failure_is_fatal_when_br_netfilter_is_not_active(node):
    done = node.run_join(MODPROBE_FAILS="1")

    assert done.returncode == 1
    assert "cannot load br_netfilter" in done.stderr
    assert "Module br_netfilter not found" in done.stderr
    assert "sudo modprobe br_netfilter" in done.stderr
    assert node.calls("kubeadm") == []


def test_swap_still_on_fails_fast_with_the_host_fix(node):
    (node.root / "proc/swaps").write_text(
        "Filename\tType\tSize\tUsed\tPriority\n/swap.img\tfile\t2097148\t0\t-2\n"
    )

    done = node.run_join(SWAPOFF_FAILS="1")

    assert done.returncode == 1
    assert "swap is still on" in done.stderr and "sudo swapoff -a" in done.stderr
    assert node.calls("kubeadm") == []


def test_swapoff_failure_is_harmless_when_no_swap_is_active(node):
    done = node.run_join(SWAPOFF_FAILS="1")

    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (js.TOKEN_ENV, "abcdef.short", "is not a bootstrap token"),
        (js.TOKEN_ENV, "", "is not a bootstrap token"),
        (js.ENDPOINT_ENV, "", "must be <host>:<port>"),
        (js.DISCOVERY_HASH_ENV, "sha256:xyz", "must be sha256:<64 hex digits>"),
    ],
)
def test_malformed_inputs_are_rejected_before_touching_the_node(node, variable, value, message):
    done = node.run_join(**{variable: value})

    assert done.returncode == 1
    assert message in done.stderr
    assert node.calls("modprobe") == [] and node.calls("kubeadm") == [] and node.calls("kubelet") == []
    if variable == js.TOKEN_ENV and value:
        assert value not in done.stderr


# --------------------------------------------------------------------------- #
# preflight: what a real machine must bring
# --------------------------------------------------------------------------- #


def test_preflight_checks_the_tools_the_kubelet_version_and_containerds_cgroup_driver(node):
    done = node.run_join()

    assert done.returncode == 0, done.stderr
    assert node.calls("kubelet") == [["--version"]]
    assert node.calls("containerd") == [["config", "dump"]]


@pytest.mark.parametrize("tool", ["kubeadm", "kubelet", "kubectl", "containerd"])
def test_a_missing_tool_fails_naming_it_and_how_to_install_it(node, tool):
    node.remove_tool(tool)

    done = node.run_join()

    assert done.returncode == 1
    assert f"missing on this node: {tool}." in done.stderr
    assert "from pkgs.k8s.io (https://pkgs.k8s.io/core:/stable:/v1.35/deb/" in done.stderr
    assert "kubeadm, kubelet and kubectl v1.35" in done.stderr
    assert "containerd with SystemdCgroup = true" in done.stderr
    assert node.calls("modprobe") == [] and node.calls("kubeadm") == []
    assert_token_never_exposed(node, done)


def test_every_missing_tool_is_named_at_once(node):
    for tool in ("kubeadm", "kubectl"):
        node.remove_tool(tool)

    done = node.run_join(version="v1.36.1")

    assert done.returncode == 1
    assert "missing on this node: kubeadm kubectl." in done.stderr
    # The install hint follows the tenant's minor version.
    assert "https://pkgs.k8s.io/core:/stable:/v1.36/deb/" in done.stderr


@pytest.mark.parametrize("kubelet", ["v1.34.3", "v1.29.0", "v0.99.0"])
def test_a_kubelet_older_than_1_35_is_refused(node, kubelet):
    done = node.run_join(KUBELET_VERSION=kubelet)

    assert done.returncode == 1
    minor = ".".join(kubelet.split(".")[:2])
    assert f"kubelet {minor} is too old" in done.stderr
    assert ">= v1.35" in done.stderr and "pkgs.k8s.io" in done.stderr
    assert node.calls("kubeadm") == []


def test_a_kubelet_newer_than_the_tenant_is_refused(node):
    done = node.run_join(version="v1.35.0", KUBELET_VERSION="v1.36.0")

    assert done.returncode == 1
    assert "kubelet v1.36 is newer than the tenant control plane v1.35.0" in done.stderr
    assert "version skew" in done.stderr
    assert node.calls("kubeadm") == []


def test_an_older_supported_kubelet_may_join_a_newer_tenant(node):
    done = node.run_join(version="v1.36.2", KUBELET_VERSION="v1.35.4")

    assert done.returncode == 0, done.stderr
    assert node.joined()


def test_an_unreadable_kubelet_version_is_refused(node):
    done = node.run_join(KUBELET_VERSION="unknown")

    assert done.returncode == 1
    assert "cannot read a version from kubelet --version ('Kubernetes unknown')" in done.stderr


def test_containerd_without_the_systemd_cgroup_driver_is_refused(node):
    done = node.run_join(CONTAINERD_SYSTEMD_CGROUP="false")

    assert done.returncode == 1
    assert "containerd does not use the systemd cgroup driver" in done.stderr
    assert "/etc/containerd/config.toml" in done.stderr
    assert node.calls("kubeadm") == []


def test_a_containerd_that_cannot_dump_its_config_is_not_held_against_the_node(node):
    done = node.run_join(CONTAINERD_DUMP_FAILS="1")

    assert done.returncode == 0, done.stderr
    assert "not checking containerd's cgroup driver" in done.stderr
    assert node.joined()


def test_install_hint_names_the_tenant_minor_series():
    hint = js.install_hint("v1.36.2")
    assert "kubeadm, kubelet and kubectl v1.36 from pkgs.k8s.io" in hint
    assert "https://pkgs.k8s.io/core:/stable:/v1.36/deb/" in hint
    assert "SystemdCgroup = true" in hint


# --------------------------------------------------------------------------- #
# a container worker: docker exec with the secrets forwarded by name
# --------------------------------------------------------------------------- #


def container_join_command() -> str:
    join, _ = join_scripts(NODE, VERSION, over_ssh=False)
    return docker_exec_script(NODE, join.script, join.secrets)


def container_leave_command() -> str:
    _, leave = join_scripts(NODE, VERSION, over_ssh=False)
    return docker_exec_script_if_present(NODE, leave.script, leave.secrets, leave.gone_hint)


def test_container_join_forwards_the_variables_by_name_through_docker_exec(node):
    """The host command exactly as the Command runs it: script in a heredoc, values only in the environment."""
    done = node.run(["/bin/sh", "-c", container_join_command()], "", **SECRETS)

    assert done.returncode == 0, done.stderr
    [docker] = node.calls("docker")
    assert docker == ["exec", "-i", "-e", js.ENDPOINT_ENV, "-e", js.TOKEN_ENV, "-e", js.DISCOVERY_HASH_ENV,
                      NODE, "bash", "-s"]
    assert node.joined()
    config = yaml.safe_load((node.calls_dir / "join-config-1.yaml").read_text())
    assert config["nodeRegistration"]["ignorePreflightErrors"] == ["SystemVerification", "FileExisting"]
    assert_token_never_exposed(node, done)


def test_join_fails_through_docker_exec_when_a_variable_is_not_forwarded(node):
    """Negative case for the test above: the stub really drops what is not forwarded."""
    join, _ = join_scripts(NODE, VERSION, over_ssh=False)
    command = docker_exec_script(NODE, join.script, [js.ENDPOINT_ENV, js.DISCOVERY_HASH_ENV])

    done = node.run(["/bin/sh", "-c", command], "", **SECRETS)

    assert done.returncode == 1
    assert "is not a bootstrap token" in done.stderr


# --------------------------------------------------------------------------- #
# an SSH worker: action on the command line, scripts and secrets on stdin
# --------------------------------------------------------------------------- #


def test_ssh_join_joins_with_secrets_from_stdin_only(node):
    # No secret in the environment: everything comes from the stdin program.
    done = node.run_over_ssh(CREATE)

    assert done.returncode == 0, done.stderr
    assert node.joined()
    assert [call[0] for call in node.calls("kubeadm")] == ["join"]
    config = yaml.safe_load((node.calls_dir / "join-config-1.yaml").read_text())
    assert config["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": ENDPOINT, "token": TOKEN, "caCertHashes": [CA_HASH],
    }
    # A real machine gets kubeadm's full preflight.
    assert config["nodeRegistration"] == {"name": NODE}
    assert node.calls("kubectl") == []
    assert all(call == ["-d"] for call in node.calls("base64"))
    assert_token_never_exposed(node, done)


def test_ssh_join_is_idempotent(node):
    node.mark_joined()

    done = node.run_over_ssh(CREATE)

    assert done.returncode == 0, done.stderr
    assert "already joined" in done.stdout
    assert node.calls("kubeadm") == []


def test_ssh_leave_resets_and_deletes_the_node_with_the_kubeconfig_from_stdin(node):
    node.mark_joined()

    done = node.run_over_ssh(DELETE)

    assert done.returncode == 0, done.stderr
    assert node.calls("kubeadm") == [["reset", "-f"]]
    assert [call[:3] for call in node.calls("kubectl")] == [["delete", "node", NODE]]
    assert (node.calls_dir / "kubectl-kubeconfig").read_text() == KUBECONFIG_TEXT
    assert not node.joined()
    assert list(node.tmp.iterdir()) == []
    assert_token_never_exposed(node, done)


@pytest.mark.parametrize("tool", ["kubeadm", "kubelet", "containerd", "kubectl"])
def test_ssh_join_on_a_machine_missing_a_tool_fails_clearly(node, tool):
    node.remove_tool(tool)

    done = node.run_over_ssh(CREATE)

    assert done.returncode == 1
    assert f"gpu-tenancy: worker {NODE}: missing on this node: {tool}." in done.stderr
    assert "pkgs.k8s.io" in done.stderr
    assert_token_never_exposed(node, done)


def test_ssh_join_with_an_old_kubelet_fails_clearly(node):
    done = node.run_over_ssh(CREATE, KUBELET_VERSION="v1.31.4")

    assert done.returncode == 1
    assert "kubelet v1.31 is too old" in done.stderr
    assert node.calls("kubeadm") == []


def test_ssh_leave_on_a_machine_without_kubectl_ends_well(node):
    node.remove_tool("kubectl")

    done = node.run_over_ssh(DELETE)

    assert done.returncode == 0, done.stderr
    assert "kubectl is not installed here" in done.stderr
    assert f"kubectl delete node {NODE}" in done.stderr


# --------------------------------------------------------------------------- #
# leave (the Command's delete) of a container worker
# --------------------------------------------------------------------------- #


def run_leave(node: Node, **env: str) -> subprocess.CompletedProcess[str]:
    return node.run(
        ["/bin/sh", "-c", container_leave_command()],
        "",
        **{**SECRETS, TENANT_KUBECONFIG_ENV: KUBECONFIG_TEXT, **env},
    )


def test_leave_resets_the_node_and_deletes_it_from_the_tenant(node):
    node.mark_joined()

    done = run_leave(node)

    assert done.returncode == 0, done.stderr
    assert node.calls("kubeadm") == [["reset", "-f"]]
    assert node.calls("kubectl") == [["delete", "node", NODE, "--ignore-not-found", "--wait=false",
                                      "--request-timeout=20s"]]
    assert (node.calls_dir / "kubectl-kubeconfig").read_text() == KUBECONFIG_TEXT
    assert f"Node {NODE} removed from the tenant" in done.stdout
    assert not node.joined()
    # The admin kubeconfig only ever travelled by environment variable name.
    assert "s3cr3t-admin" not in node.all_argv_text()
    assert node.calls("docker")[-1] == ["exec", "-i", "-e", TENANT_KUBECONFIG_ENV, NODE, "bash", "-s"]
    assert list(node.tmp.iterdir()) == []


def test_leave_of_a_node_that_never_joined_only_deletes_the_node_object(node):
    done = run_leave(node)

    assert done.returncode == 0, done.stderr
    assert node.calls("kubeadm") == []
    assert [call[:3] for call in node.calls("kubectl")] == [["delete", "node", NODE]]


@pytest.mark.parametrize(("state", "word"), [("missing", "gone"), ("exited", "stopped")])
def test_leave_tolerates_a_container_that_is_gone(node, state, word):
    done = run_leave(node, DOCKER_CONTAINER_STATE=state)

    assert done.returncode == 0, done.stderr
    assert f"container {NODE} is {word}: nothing to undo" in done.stdout
    assert f"kubectl delete node {NODE}" in done.stdout
    assert [call[0] for call in node.calls("docker")] == ["container"]
    assert node.calls("kubectl") == []


def test_leave_retries_an_unreachable_tenant(node):
    done = run_leave(node, KUBECTL_PLAN="refused ok", **{js.LEAVE_ATTEMPTS_ENV: "3"})

    assert done.returncode == 0, done.stderr
    assert len(node.calls("kubectl")) == 2


def test_leave_fails_loudly_when_the_answering_tenant_keeps_refusing(node):
    done = run_leave(node, KUBECTL_PLAN="refused", **{js.LEAVE_ATTEMPTS_ENV: "3"})

    assert done.returncode == 1
    assert [call[0] for call in node.calls("kubectl")] == ["delete", "delete", "delete", "get"]
    assert f"could not delete Node {NODE} from the tenant after 3 attempts" in done.stderr
    assert "was refused" in done.stderr


def test_leave_ends_well_when_the_tenant_is_gone(node):
    node.mark_joined()
    done = run_leave(node, KUBECTL_PLAN="refused", READYZ="down", **{js.LEAVE_ATTEMPTS_ENV: "2"})

    assert done.returncode == 0, done.stderr
    assert node.calls("kubeadm") == [["reset", "-f"]]
    assert [call[0] for call in node.calls("kubectl")] == ["delete", "delete", "get"]
    assert "the tenant API server does not answer; nothing to remove" in done.stderr



def test_an_unreachable_endpoint_fails_fast_with_the_reason(node):
    done = node.run_join(CURL_PLAN="refused", **{js.ENDPOINT_ATTEMPTS_ENV: "3", js.ENDPOINT_PAUSE_ENV: "0"})

    assert done.returncode == 1
    assert len(node.calls("curl")) == 3
    assert node.calls("kubeadm") == []
    assert f"cannot reach the tenant API server at {ENDPOINT}" in done.stderr
    assert "Connection refused" in done.stderr
    assert "management.workerCidrs" in done.stderr


def test_endpoint_that_comes_up_late_is_waited_for(node):
    done = node.run_join(CURL_PLAN="refused ok", **{js.ENDPOINT_PAUSE_ENV: "0"})

    assert done.returncode == 0, done.stderr
    assert len(node.calls("curl")) == 2


def test_a_machine_joined_to_another_cluster_is_refused(node):
    (node.root / "etc/kubernetes").mkdir(parents=True, exist_ok=True)
    (node.root / "etc/kubernetes/kubelet.conf").write_text("    server: https://10.9.9.9:6443\n")

    done = node.run_join()

    assert done.returncode == 1
    assert "already joined to another cluster" in done.stderr
    assert "https://10.9.9.9:6443" in done.stderr
    assert node.calls("kubeadm") == []


@pytest.mark.parametrize("tool, variable", [("kubeadm", "KUBEADM_VERSION"), ("kubectl", "KUBECTL_VERSION")])
def test_too_old_kubeadm_or_kubectl_is_refused(node, tool, variable):
    done = node.run_join(**{variable: "v1.30.2"})

    assert done.returncode == 1
    assert f"{tool} v1.30" in done.stderr
    assert "pkgs.k8s.io" in done.stderr


def test_ip_forwarding_off_and_not_settable_fails_with_the_fix(node):
    (node.root / "proc/sys/net/ipv4").mkdir(parents=True, exist_ok=True)
    (node.root / "proc/sys/net/ipv4/ip_forward").write_text("0\n")

    done = node.run_join()  # no sysctl on this node's PATH

    assert done.returncode == 1
    assert "sudo sysctl -w net.ipv4.ip_forward=1" in done.stderr
    assert node.calls("kubeadm") == []
