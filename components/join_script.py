"""Scripts that join a worker node to a hosted control plane, and take it out again.

Plain text builders, no Pulumi: `WorkerNode` runs them on the node through
`components.node_access` (`docker exec` into a kindest/node container, or SSH
to a real machine). The join script reads the endpoint, the bootstrap token
and the CA hash from variables (forwarded by name by `docker exec -e`, or
decoded from the SSH stdin program), so the token never appears in any argv:
it is written with bash's builtin `printf` into a private kubeadm
`JoinConfiguration` file, and `kubeadm join --config` reads it from there.
Modelled on clastix/kamaji `e2e/worker_kubeadm_join_test.go` (modprobe,
swapoff, kubeadm join with SystemVerification/FileExisting ignored in a
container).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from components.container_exec import with_tenant_kubeconfig
from config.models import MIN_KUBERNETES_VERSION, parse_version

# Variables the join script reads (secret as a group: the token is among them).
ENDPOINT_ENV = "WORKER_JOIN_ENDPOINT"
TOKEN_ENV = "WORKER_JOIN_TOKEN"
DISCOVERY_HASH_ENV = "WORKER_DISCOVERY_HASH"
JOIN_ENV_NAMES = (ENDPOINT_ENV, TOKEN_ENV, DISCOVERY_HASH_ENV)

# Test-only knobs (never forwarded by `docker exec` nor set over SSH, so production uses the defaults):
# a prefix for /etc and /proc paths, the retry bounds, and the pauses between attempts.
ROOT_ENV = "GPU_TENANCY_NODE_ROOT"
JOIN_ATTEMPTS_ENV = "JOIN_ATTEMPTS"
JOIN_PAUSE_ENV = "JOIN_RETRY_PAUSE_SECONDS"
RUNTIME_ATTEMPTS_ENV = "RUNTIME_WAIT_ATTEMPTS"
RUNTIME_PAUSE_ENV = "RUNTIME_WAIT_PAUSE_SECONDS"
LEAVE_ATTEMPTS_ENV = "LEAVE_ATTEMPTS"
LEAVE_PAUSE_ENV = "LEAVE_RETRY_PAUSE_SECONDS"
ENDPOINT_ATTEMPTS_ENV = "ENDPOINT_WAIT_ATTEMPTS"
ENDPOINT_PAUSE_ENV = "ENDPOINT_WAIT_PAUSE_SECONDS"

# Kamaji's soot controller can need up to a minute after Ready to finish the
# bootstrap RBAC (facts §4): 12 attempts 10 s apart cover that with margin.
DEFAULT_JOIN_ATTEMPTS = 12
DEFAULT_JOIN_PAUSE_SECONDS = 10
# systemd + containerd in a fresh kindest/node come up within seconds; kind itself waits up to 30 s.
DEFAULT_RUNTIME_ATTEMPTS = 60
DEFAULT_RUNTIME_PAUSE_SECONDS = 1
DEFAULT_LEAVE_ATTEMPTS = 5
DEFAULT_LEAVE_PAUSE_SECONDS = 3
# The endpoint answers once the TCP is Ready; a node that cannot reach it (routing, firewall,
# workerCidrs) is told so after a minute instead of kubeadm timing out for an hour.
DEFAULT_ENDPOINT_ATTEMPTS = 12
DEFAULT_ENDPOINT_PAUSE_SECONDS = 5
# kubeadm's own waits per attempt (default 5 min each), kept short because we retry around them.
KUBEADM_DISCOVERY_TIMEOUT = "1m0s"
KUBEADM_TLS_BOOTSTRAP_TIMEOUT = "2m0s"

# Kamaji's join recipe ignores these in a kindest/node container (facts §5): preflight cannot verify a
# container's kernel config (SystemVerification), and kindest/node lacks some host tools (FileExisting).
# A real machine gets kubeadm's full preflight.
IGNORED_PREFLIGHT_ERRORS = ("SystemVerification", "FileExisting")
KUBEADM_API_VERSION = "kubeadm.k8s.io/v1beta4"

# What a node must bring; kindest/node ships all of it. kubectl is used by the leave and GPU capacity
# scripts, curl by the endpoint check.
REQUIRED_TOOLS = ("kubeadm", "kubelet", "kubectl", "containerd", "curl")
# kubeadm reads the v1beta4 JoinConfiguration from 1.31 on; `kubectl wait --for=create` exists from 1.31 on.
MIN_KUBEADM_MINOR = 31
MIN_KUBECTL_MINOR = 31
# Kamaji's tenant kubelet configuration needs kubelet >= 1.35 (facts §1, kamaji issue 1062).
MIN_KUBELET_MINOR = MIN_KUBERNETES_VERSION[1]

# Scripts arrive on stdin (`bash -s`); a brace group is parsed whole before it runs,
# so no command inside can swallow the rest of the script from that stdin.
_READ_WHOLE_SCRIPT_FIRST = "# One brace group: bash reads all of it from stdin before running any command."


def install_hint(kubernetes_version: str) -> str:
    """How to give a machine what a worker needs, for the tenant's Kubernetes minor version."""
    major, minor, _ = parse_version(kubernetes_version)
    series = f"v{major}.{minor}"
    return (
        f"Install kubeadm, kubelet and kubectl {series} from pkgs.k8s.io "
        f"(https://pkgs.k8s.io/core:/stable:/{series}/deb/ or .../rpm/, see "
        "https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/install-kubeadm/) "
        "and containerd with SystemdCgroup = true "
        "(https://kubernetes.io/docs/setup/production-environment/container-runtimes/#containerd-systemd)"
    )


def _preflight(kubernetes_version: str) -> str:
    """Bash that checks the node's tools and kubelet version, failing with what is missing and how to fix it."""
    _, tenant_minor, _ = parse_version(kubernetes_version)
    hint = shlex.quote(install_hint(kubernetes_version))
    tools = " ".join(REQUIRED_TOOLS)
    return f"""\
# What a real machine must bring (a kindest/node container has all of it).
install_hint={hint}
missing=""
for tool in {tools}; do
  command -v "$tool" >/dev/null 2>&1 || missing+=" $tool"
done
[[ -z "$missing" ]] || fail "missing on this node:$missing. $install_hint"
kubelet_version="$(kubelet --version 2>&1)" || fail "kubelet --version failed: $kubelet_version"
[[ "$kubelet_version" =~ v([0-9]+)\\.([0-9]+)\\. ]] \\
  || fail "cannot read a version from kubelet --version ('$kubelet_version'). $install_hint"
kubelet_major="${{BASH_REMATCH[1]}}"
kubelet_minor="${{BASH_REMATCH[2]}}"
if ((kubelet_major != 1 || kubelet_minor < {MIN_KUBELET_MINOR})); then
  fail "kubelet v$kubelet_major.$kubelet_minor is too old: Kamaji's tenant kubelet configuration needs kubelet" \\
    ">= v1.{MIN_KUBELET_MINOR}. $install_hint"
fi
if ((kubelet_minor > {tenant_minor})); then
  fail "kubelet v$kubelet_major.$kubelet_minor is newer than the tenant control plane {kubernetes_version}:" \\
    "a kubelet must not be newer than its API server (Kubernetes version skew policy). $install_hint"
fi
minor_of() {{  # <what> <version text>: the minor of the first v1.N.x in the text, or fail
  [[ "$2" =~ v1\\.([0-9]+)\\. ]] || fail "cannot read a version from $1 ('$2'). $install_hint"
  printf '%s' "${{BASH_REMATCH[1]}}"
}}
kubeadm_minor="$(minor_of "kubeadm version -o short" "$(kubeadm version -o short 2>&1)")"
((kubeadm_minor >= {MIN_KUBEADM_MINOR})) \\
  || fail "kubeadm v1.$kubeadm_minor cannot read the kubeadm v1beta4 configuration" \\
    "(needs >= v1.{MIN_KUBEADM_MINOR}). $install_hint"
kubectl_minor="$(minor_of "kubectl version --client" "$(kubectl version --client 2>&1)")"
((kubectl_minor >= {MIN_KUBECTL_MINOR})) \\
  || fail "kubectl v1.$kubectl_minor is too old for these scripts (needs >= v1.{MIN_KUBECTL_MINOR}). $install_hint"
# kubeadm's preflight refuses a node that does not forward IPv4 (and kube-proxy needs it).
ip_forward_file="$root/proc/sys/net/ipv4/ip_forward"
if [[ -r "$ip_forward_file" && "$(<"$ip_forward_file")" != 1 ]]; then
  sysctl -w net.ipv4.ip_forward=1 >/dev/null 2>&1 \\
    || fail "net.ipv4.ip_forward is 0 and cannot be set; run: sudo sysctl -w net.ipv4.ip_forward=1" \\
      "(and persist it in /etc/sysctl.d/)"
  note "set net.ipv4.ip_forward=1 (persist it in /etc/sysctl.d/ on a real machine)"
fi
# The tenant kubelet uses the systemd cgroup driver; containerd's runc must use it too.
if containerd_config="$(containerd config dump 2>/dev/null)"; then
  [[ "$containerd_config" =~ SystemdCgroup[[:space:]]*=[[:space:]]*true ]] \\
    || fail "containerd does not use the systemd cgroup driver (no SystemdCgroup = true in" \\
      "'containerd config dump'); the kubelet does. Set SystemdCgroup = true for the runc runtime in" \\
      "/etc/containerd/config.toml and restart containerd." \\
      "See https://kubernetes.io/docs/setup/production-environment/container-runtimes/#containerd-systemd"
else
  note "cannot run 'containerd config dump'; not checking containerd's cgroup driver"
fi
"""


def join_script(
    node_name: str,
    kubernetes_version: str,
    ignore_preflight_errors: Sequence[str] = IGNORED_PREFLIGHT_ERRORS,
) -> str:
    """Bash script (run on the node) that joins it to the tenant, idempotently.

    Exits 0 without calling kubeadm when /etc/kubernetes/kubelet.conf exists.
    Otherwise checks the node brings kubeadm, kubelet, kubectl and containerd
    (with a kubelet between v1.35 and the tenant version), loads br_netfilter,
    turns swap off, waits for containerd, writes a private JoinConfiguration
    and runs `kubeadm join --config`, retrying (with `kubeadm reset -f` in
    between) while the tenant finishes its RBAC. On giving up it exits 1 with
    the last kubeadm output on stderr. The token is never printed: kubeadm
    output is shown with the token secret redacted.
    """
    node = shlex.quote(node_name)
    if ignore_preflight_errors:
        ignored = "  printf '  ignorePreflightErrors:\\n'\n" + "".join(
            f"  printf '  - %s\\n' {shlex.quote(check)}\n" for check in ignore_preflight_errors
        )
    else:
        ignored = ""
    preflight = _preflight(kubernetes_version)
    return f"""\
set -euo pipefail
{_READ_WHOLE_SCRIPT_FIRST}
{{
node={node}
root="${{{ROOT_ENV}:-}}"
kubelet_conf="$root/etc/kubernetes/kubelet.conf"
join_attempts="${{{JOIN_ATTEMPTS_ENV}:-{DEFAULT_JOIN_ATTEMPTS}}}"
join_pause="${{{JOIN_PAUSE_ENV}:-{DEFAULT_JOIN_PAUSE_SECONDS}}}"
runtime_attempts="${{{RUNTIME_ATTEMPTS_ENV}:-{DEFAULT_RUNTIME_ATTEMPTS}}}"
runtime_pause="${{{RUNTIME_PAUSE_ENV}:-{DEFAULT_RUNTIME_PAUSE_SECONDS}}}"

fail() {{
  printf 'gpu-tenancy: worker %s: %s\\n' "$node" "$*" >&2
  exit 1
}}
note() {{
  printf 'gpu-tenancy: worker %s: %s\\n' "$node" "$*" >&2
}}

endpoint="${{{ENDPOINT_ENV}:-}}"
if [[ -f "$kubelet_conf" ]]; then
  # Joined -- but to this tenant? A machine still joined to another cluster must not pass as done.
  if grep -qF "server: https://$endpoint" "$kubelet_conf"; then
    printf 'worker %s already joined (%s exists); nothing to do\\n' "$node" "$kubelet_conf"
    exit 0
  fi
  fail "this machine is already joined to another cluster ($(grep -m1 'server:' "$kubelet_conf" || true))," \\
    "not to the tenant at $endpoint. Run 'kubeadm reset -f' on it, or use another machine"
fi

token="${{{TOKEN_ENV}:-}}"
ca_hash="${{{DISCOVERY_HASH_ENV}:-}}"
unset {TOKEN_ENV}
[[ "$endpoint" =~ ^[^[:space:]]+:[0-9]+$ ]] \\
  || fail "{ENDPOINT_ENV} must be <host>:<port> of the tenant API server, got '$endpoint'"
# The token is checked but never echoed: bootstrap tokens are <6 of [a-z0-9]>.<16 of [a-z0-9]>.
[[ "$token" =~ ^[a-z0-9]{{6}}\\.[a-z0-9]{{16}}$ ]] \\
  || fail "{TOKEN_ENV} is not a bootstrap token of the form <id>.<secret> ([a-z0-9]{{6}}.[a-z0-9]{{16}})"
[[ "$ca_hash" =~ ^sha256:[0-9a-f]{{64}}$ ]] \\
  || fail "{DISCOVERY_HASH_ENV} must be sha256:<64 hex digits>, got '$ca_hash'"
token_secret="${{token#*.}}"

{preflight}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# kube-proxy and Calico need bridged traffic to traverse iptables. A privileged
# container shares the host kernel: modprobe may fail (e.g. /lib/modules does not
# match the running kernel, or the module is built in), which is harmless only
# when br_netfilter is already active -- its sysctls live under /proc/sys/net/bridge.
if ! modprobe br_netfilter >"$work/modprobe.log" 2>&1; then
  if [[ -d "$root/proc/sys/net/bridge" ]]; then
    note "modprobe br_netfilter failed but br_netfilter is already active; continuing"
  else
    fail "cannot load br_netfilter ($(<"$work/modprobe.log")) and it is not active;" \\
      "load it on the host: sudo modprobe br_netfilter"
  fi
fi

# The kubelet refuses to start while swap is on. Swap is host-wide, and a host
# swap file is not visible inside the container, so swapoff can fail here.
swapoff -a >"$work/swapoff.log" 2>&1 || true
if [[ -r "$root/proc/swaps" ]] && (( $(wc -l <"$root/proc/swaps") > 1 )); then
  fail "swap is still on after swapoff -a ($(<"$work/swapoff.log")); the kubelet will not start." \\
    "Run on the host: sudo swapoff -a"
fi

# kubeadm talks to containerd and restarts the kubelet through systemd: both must be up.
for ((attempt = 1; ; attempt++)); do
  if systemctl is-active --quiet containerd; then
    break
  fi
  if ((attempt >= runtime_attempts)); then
    fail "containerd is not active after $runtime_attempts checks;" \\
      "inspect it on the node: systemctl status containerd"
  fi
  sleep "$runtime_pause"
done

# Fail fast, with the reason, when this node cannot reach the tenant API at all.
endpoint_attempts="${{{ENDPOINT_ATTEMPTS_ENV}:-{DEFAULT_ENDPOINT_ATTEMPTS}}}"
endpoint_pause="${{{ENDPOINT_PAUSE_ENV}:-{DEFAULT_ENDPOINT_PAUSE_SECONDS}}}"
for ((attempt = 1; ; attempt++)); do
  # Any HTTP answer (even 401) proves the path; only a failed connection counts.
  if curl -k -sS -o /dev/null --max-time 5 "https://$endpoint/healthz" 2>"$work/curl.log"; then
    break
  fi
  if ((attempt >= endpoint_attempts)); then
    fail "cannot reach the tenant API server at $endpoint from this node ($(<"$work/curl.log"))." \\
      "Check routing and firewalls to the load-balancer address, and that this node's address is in" \\
      "the worker networks (management.workerCidrs)"
  fi
  sleep "$endpoint_pause"
done

config="$work/join-configuration.yaml"
(
  umask 077
  {{
  printf 'apiVersion: {KUBEADM_API_VERSION}\\n'
  printf 'kind: JoinConfiguration\\n'
  printf 'discovery:\\n'
  printf '  bootstrapToken:\\n'
  printf '    apiServerEndpoint: "%s"\\n' "$endpoint"
  printf '    token: "%s"\\n' "$token"
  printf '    caCertHashes:\\n'
  printf '    - "%s"\\n' "$ca_hash"
  printf 'nodeRegistration:\\n'
  printf '  name: "%s"\\n' "$node"
{ignored}  printf 'timeouts:\\n'
  printf '  discovery: {KUBEADM_DISCOVERY_TIMEOUT}\\n'
  printf '  tlsBootstrap: {KUBEADM_TLS_BOOTSTRAP_TIMEOUT}\\n'
  }} >"$config"
)
unset token

redacted() {{
  local text
  text="$(<"$1")"
  printf '%s\\n' "${{text//"$token_secret"/<redacted>}}"
}}

for ((attempt = 1; ; attempt++)); do
  if kubeadm join --config "$config" >"$work/join.log" 2>&1; then
    redacted "$work/join.log"
    printf 'worker %s joined the tenant at %s (attempt %s)\\n' "$node" "$endpoint" "$attempt"
    exit 0
  fi
  if ((attempt >= join_attempts)); then
    note "kubeadm join to $endpoint failed $attempt times; last kubeadm output:"
    redacted "$work/join.log" >&2
    fail "giving up. Check that the tenant control plane is Ready and reachable from this node," \\
      "then run pulumi up again"
  fi
  note "kubeadm join attempt $attempt/$join_attempts failed; resetting and retrying in ${{join_pause}}s"
  # A half-done join leaves files behind that make the next attempt's preflight fail.
  kubeadm reset -f >"$work/reset.log" 2>&1 || note "kubeadm reset -f failed: $(<"$work/reset.log")"
  sleep "$join_pause"
done
}}
"""


def leave_script(node_name: str) -> str:
    """Bash script (run on the node) that takes the node out of the tenant.

    Stops the node being a member (`kubeadm reset -f`, so a later join on the
    same container starts clean) and deletes its Node object with the tenant
    admin kubeconfig from $TENANT_KUBECONFIG, retrying a few times. A tenant API
    that no longer answers (control plane destroyed or replaced) has no Node to
    remove, so that ends well; a tenant that answers but refuses the delete fails
    with kubectl's message.
    """
    node = shlex.quote(node_name)
    body = f"""\
{_READ_WHOLE_SCRIPT_FIRST}
{{
node={node}
root="${{{ROOT_ENV}:-}}"
attempts="${{{LEAVE_ATTEMPTS_ENV}:-{DEFAULT_LEAVE_ATTEMPTS}}}"
pause="${{{LEAVE_PAUSE_ENV}:-{DEFAULT_LEAVE_PAUSE_SECONDS}}}"

if [[ -f "$root/etc/kubernetes/kubelet.conf" ]]; then
  # Stops the kubelet and removes its credentials so it cannot re-register the Node.
  if ! out="$(kubeadm reset -f 2>&1)"; then
    printf 'gpu-tenancy: worker %s: kubeadm reset -f failed (continuing): %s\\n' "$node" "$out" >&2
  fi
fi

if ! command -v kubectl >/dev/null 2>&1; then
  # Only a node that failed the join preflight lacks kubectl, and such a node never registered.
  printf 'gpu-tenancy: worker %s: kubectl is not installed here; not removing Node %s %s\\n' \\
    "$node" "$node" "(if it exists: kubectl delete node $node)" >&2
  exit 0
fi

for ((attempt = 1; ; attempt++)); do
  if out="$(kubectl delete node "$node" --ignore-not-found --wait=false --request-timeout=20s 2>&1)"; then
    printf 'Node %s removed from the tenant (%s)\\n' "$node" "$out"
    exit 0
  fi
  if ((attempt >= attempts)); then
    if ! kubectl get --raw /readyz --request-timeout=10s >/dev/null 2>&1; then
      # The tenant control plane is gone (destroyed or replaced): there is no Node object left to remove.
      printf 'gpu-tenancy: worker %s: the tenant API server does not answer; nothing to remove (%s)\\n' \\
        "$node" "$out" >&2
      exit 0
    fi
    printf 'gpu-tenancy: worker %s: could not delete Node %s from the tenant after %s attempts: %s\\n' \\
      "$node" "$node" "$attempt" "$out" >&2
    printf '%s\\n' "If the tenant control plane is gone for good, drop this join from the stack:" \\
      "pulumi state delete <urn of the join Command>" >&2
    exit 1
  fi
  sleep "$pause"
done
}}
"""
    return with_tenant_kubeconfig(body)

