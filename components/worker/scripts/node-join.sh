#!/usr/bin/env bash
# Joins this machine to a tenant's hosted control plane with kubeadm, idempotently. Runs ON the worker as
# root, started by dispatch.sh (docker exec into a kindest/node container, or SSH to a real server).
#
# Environment (names in components/shell.py):
#   NODE_NAME        Kubernetes Node name
#   TENANT_ENDPOINT  <host>:<port> of the tenant API server
#   JOIN_TOKEN       bootstrap token <6 [a-z0-9]>.<16 [a-z0-9]> -- SECRET: never printed, never in any argv
#   CA_CERT_HASH     sha256:<64 hex> kubeadm discovery hash of the tenant CA
#   TENANT_CA_CERT   the tenant CA certificate (PEM, public)
#   TENANT_VERSION   the tenant's Kubernetes version, e.g. v1.35.0
#   NODE_KIND        container (a kindest/node container) | machine (a real server)
# gpuMode nvidia, on a worker that lists `gpus` (the program labels it gpu=on, so HAMi's device plugin runs here):
#   GPU_MODE              nvidia (unset: no GPU checks)
#   NVIDIA_RUNTIME_CLASS  nvidia.runtimeClassName; empty: `nvidia` must be containerd's default runtime
#   GPU_UUIDS             the UUIDs of the worker's configured cards, space-separated
# Test-only knobs: GPU_TENANCY_NODE_ROOT (prefix for /etc, /proc and /sys), JOIN_ATTEMPTS,
# JOIN_RETRY_PAUSE_SECONDS, RUNTIME_WAIT_ATTEMPTS, RUNTIME_WAIT_PAUSE_SECONDS, ENDPOINT_WAIT_ATTEMPTS,
# ENDPOINT_WAIT_PAUSE_SECONDS.
#
# Exit 0: joined now, or already joined to this tenant. Exit 1: with the reason and the fix on stderr.
set -euo pipefail
# One brace group: bash reads all of it from stdin before running any command, so no command
# below can swallow the rest of the script from that same stdin.
{
missing=()
for var in NODE_NAME TENANT_ENDPOINT JOIN_TOKEN CA_CERT_HASH TENANT_CA_CERT TENANT_VERSION NODE_KIND; do
  [[ -n "${!var:-}" ]] || missing+=("$var")
done
if ((${#missing[@]} > 0)); then
  printf 'gpu-tenancy: node-join.sh: required environment variable(s) not set: %s\n' "${missing[*]}" >&2
  exit 1
fi

# Take the token out of the environment at once: no process started below inherits it. The shell
# variable is unset as soon as the token is in the private kubeadm configuration file.
token="${JOIN_TOKEN:-}"
unset JOIN_TOKEN

node="${NODE_NAME:-}"
endpoint="${TENANT_ENDPOINT:-}"
ca_hash="${CA_CERT_HASH:-}"
tenant_version="${TENANT_VERSION:-}"
node_kind="${NODE_KIND:-}"
gpu_mode="${GPU_MODE:-}"
runtime_class="${NVIDIA_RUNTIME_CLASS:-}"
gpu_uuids="${GPU_UUIDS:-}"
root="${GPU_TENANCY_NODE_ROOT:-}"
# Kamaji can need up to a minute after Ready to finish the bootstrap RBAC: 12 attempts 10 s apart cover it.
join_attempts="${JOIN_ATTEMPTS:-12}"
join_pause="${JOIN_RETRY_PAUSE_SECONDS:-10}"
# systemd + containerd in a fresh kindest/node come up within seconds; kind itself waits up to 30 s.
runtime_attempts="${RUNTIME_WAIT_ATTEMPTS:-60}"
runtime_pause="${RUNTIME_WAIT_PAUSE_SECONDS:-1}"
# A node that cannot reach the endpoint (routing, firewall, workerCidrs) is told so after a minute.
endpoint_attempts="${ENDPOINT_WAIT_ATTEMPTS:-12}"
endpoint_pause="${ENDPOINT_WAIT_PAUSE_SECONDS:-5}"
kubelet_conf="$root/etc/kubernetes/kubelet.conf"
node_ca="$root/etc/kubernetes/pki/ca.crt"

fail() {
  printf 'gpu-tenancy: worker %s: %s\n' "$node" "$*" >&2
  exit 1
}
note() {
  printf 'gpu-tenancy: worker %s: %s\n' "$node" "$*" >&2
}

# The base64 bodies of the certificates in a PEM text, whitespace removed, '|' after each one.
# Two PEM files hold the same certificates exactly when these agree (no openssl needed on the node).
cert_bodies() {
  local line inside=0 bodies=""
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line//[[:space:]]/}"
    case "$line" in
      -----BEGINCERTIFICATE-----) inside=1 ;;
      -----ENDCERTIFICATE-----) inside=0; bodies+="|" ;;
      *) if ((inside)); then bodies+="$line"; fi ;;
    esac
  done <<<"$1"
  [[ "$bodies" =~ ^([A-Za-z0-9+/=]+\|)+$ ]] || return 1
  printf '%s' "$bodies"
}

# The first `server:` of a kubeconfig file, without quotes.
kubeconfig_server() {
  local line server_re='^[[:space:]]*server:[[:space:]]*"?([^"[:space:]]*)"?[[:space:]]*$'
  while IFS= read -r line || [[ -n "$line" ]]; do
    if [[ "$line" =~ $server_re ]]; then
      printf '%s' "${BASH_REMATCH[1]}"
      return 0
    fi
  done <"$1"
  return 1
}

# Inputs are checked before anything on the node is looked at or changed. Values land in YAML
# double-quoted strings, so the patterns also keep quotes and backslashes out.
[[ "$node" =~ ^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$ ]] \
  || fail "NODE_NAME must be a DNS subdomain name (lower-case letters, digits, '-' and '.'), got '$node'"
[[ "$endpoint" =~ ^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$ ]] \
  || fail "TENANT_ENDPOINT must be <host>:<port> of the tenant API server, got '$endpoint'"
# The token is checked but never echoed: bootstrap tokens are <6 of [a-z0-9]>.<16 of [a-z0-9]>.
[[ "$token" =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]] \
  || fail "JOIN_TOKEN is not a bootstrap token of the form <id>.<secret> ([a-z0-9]{6}.[a-z0-9]{16})"
token_secret="${token#*.}"
[[ "$ca_hash" =~ ^sha256:[0-9a-f]{64}$ ]] \
  || fail "CA_CERT_HASH must be sha256:<64 hex digits>, got '$ca_hash'"
tenant_ca="$(cert_bodies "${TENANT_CA_CERT:-}")" \
  || fail "TENANT_CA_CERT is not a PEM certificate (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)"
[[ "$tenant_version" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] \
  || fail "TENANT_VERSION must look like v1.35.0, got '$tenant_version'"
tenant_major="${BASH_REMATCH[1]}"
tenant_minor="${BASH_REMATCH[2]}"
[[ "$node_kind" == container || "$node_kind" == machine ]] \
  || fail "NODE_KIND must be 'container' or 'machine', got '$node_kind'"
if [[ -n "$gpu_mode" ]]; then
  [[ "$gpu_mode" == nvidia ]] || fail "GPU_MODE must be 'nvidia' or unset, got '$gpu_mode'"
  [[ -z "$runtime_class" || "$runtime_class" =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] \
    || fail "NVIDIA_RUNTIME_CLASS must be a RuntimeClass name (DNS label) or empty, got '$runtime_class'"
  [[ "$gpu_uuids" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*(\ [A-Za-z0-9][A-Za-z0-9._-]*)*$ ]] \
    || fail "GPU_UUIDS must list the worker's card UUIDs separated by spaces, got '$gpu_uuids'"
fi
for knob in "$join_attempts" "$runtime_attempts" "$endpoint_attempts"; do
  [[ "$knob" =~ ^[1-9][0-9]*$ ]] || fail "attempt counts must be positive integers, got '$knob'"
done
for knob in "$join_pause" "$runtime_pause" "$endpoint_pause"; do
  [[ "$knob" =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail "pauses must be numbers of seconds, got '$knob'"
done

joined=""
# Already joined -- but to THIS tenant? Same API server URL (exactly, not a prefix) and same CA;
# a machine still joined to another cluster, or to a replaced control plane, must not pass as done.
if [[ -f "$kubelet_conf" ]]; then
  server="$(kubeconfig_server "$kubelet_conf")" || server="no server"
  fix="Run 'kubeadm reset -f' on it, or use another machine"
  if [[ "$server" != "https://$endpoint" ]]; then
    fail "this machine is already joined to another cluster ($kubelet_conf points at $server)," \
      "not to the tenant at https://$endpoint. $fix"
  fi
  if [[ ! -f "$node_ca" ]]; then
    fail "this machine has $kubelet_conf for https://$endpoint but no $node_ca, so it cannot be shown to" \
      "belong to this tenant. $fix"
  fi
  if [[ "$(cert_bodies "$(<"$node_ca")" || true)" != "$tenant_ca" ]]; then
    fail "this machine is already joined to another cluster at https://$endpoint: $node_ca is not the" \
      "tenant's CA (a replaced control plane at the same address?). $fix"
  fi
  joined="worker $node already joined to the tenant at $endpoint ($kubelet_conf exists); nothing to do"
  # A GPU server is checked again below, read-only: a change of its cards or of gpuMode re-runs this script.
  if [[ "$gpu_mode" != nvidia ]]; then
    printf '%s\n' "$joined"
    exit 0
  fi
fi

# Kubelets from v1.35 exit on cgroup v1 (KubeletConfiguration failCgroupV1 defaults to true: kubernetes
# pkg/kubelet/apis/config/v1beta1/defaults.go); cgroup.controllers exists only at the root of the unified hierarchy.
if [[ ! -f "$root/sys/fs/cgroup/cgroup.controllers" ]]; then
  host="this server"
  [[ "$node_kind" == machine ]] || host="the Docker host"
  fail "this node runs cgroup v1 (no /sys/fs/cgroup/cgroup.controllers): kubelets from v1.35 refuse to start there" \
    "(failCgroupV1 defaults to true). Boot $host with cgroup v2: add systemd.unified_cgroup_hierarchy=1 to its" \
    "kernel command line and reboot"
fi

# What a real machine must bring (a kindest/node container has all of it). Nothing on the node talks to
# the tenant API except kubeadm and the kubelet, so kubectl is not needed.
install_hint="Install kubeadm, kubelet and kubectl v$tenant_major.$tenant_minor from pkgs.k8s.io"
install_hint+=" (https://pkgs.k8s.io/core:/stable:/v$tenant_major.$tenant_minor/deb/ or .../rpm/, see"
install_hint+=" https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/install-kubeadm/)"
install_hint+=" and containerd with SystemdCgroup = true"
install_hint+=" (https://kubernetes.io/docs/setup/production-environment/container-runtimes/#containerd-systemd)"
missing_tools=""
for tool in kubeadm kubelet containerd curl; do
  command -v "$tool" >/dev/null 2>&1 || missing_tools+=" $tool"
done
[[ -z "$missing_tools" ]] || fail "missing on this node:$missing_tools. $install_hint"

kubelet_version="$(kubelet --version 2>&1)" || fail "kubelet --version failed: $kubelet_version"
[[ "$kubelet_version" =~ v([0-9]+)\.([0-9]+)\. ]] \
  || fail "cannot read a version from kubelet --version ('$kubelet_version'). $install_hint"
kubelet_major="${BASH_REMATCH[1]}"
kubelet_minor="${BASH_REMATCH[2]}"
# Kamaji's tenant kubelet configuration needs kubelet >= 1.35 (kamaji issue 1062).
if ((kubelet_major != 1 || kubelet_minor < 35)); then
  fail "kubelet v$kubelet_major.$kubelet_minor is too old: Kamaji's tenant kubelet configuration needs kubelet" \
    ">= v1.35. $install_hint"
fi
if ((kubelet_minor > tenant_minor)); then
  fail "kubelet v$kubelet_major.$kubelet_minor is newer than the tenant control plane $tenant_version:" \
    "a kubelet must not be newer than its API server (Kubernetes version skew policy). $install_hint"
fi
kubeadm_version="$(kubeadm version -o short 2>&1)" || true
[[ "$kubeadm_version" =~ v1\.([0-9]+)\. ]] \
  || fail "cannot read a version from kubeadm version -o short ('$kubeadm_version'). $install_hint"
kubeadm_minor="${BASH_REMATCH[1]}"
# kubeadm reads the v1beta4 JoinConfiguration from 1.31 on.
((kubeadm_minor >= 31)) \
  || fail "kubeadm v1.$kubeadm_minor cannot read the kubeadm v1beta4 configuration (needs >= v1.31). $install_hint"

# `containerd config dump` as lines "<table>" and "<table>.<key>=<value>", the quotes taken off table names and
# string values: containerd 1.x prints TOML strings double-quoted (BurntSushi/toml), 2.x single-quoted
# (pelletier/go-toml/v2 encodeString, used by containerd v2.x cmd/containerd/command/config.go outputConfig).
# A value keeps any other form (true, 3, ['a', 'b']) as printed.
toml_flat() {
  local line table="" key value
  local table_re='^[[:space:]]*\[([^][]+)\][[:space:]]*$'
  local kv_re="^[[:space:]]*([A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')[[:space:]]*=[[:space:]]*(.*[^[:space:]])[[:space:]]*\$"
  while IFS= read -r line || [[ -n "$line" ]]; do
    if [[ "$line" =~ $table_re ]]; then
      table="${BASH_REMATCH[1]//[\"\']/}"
      table="${table//[[:space:]]/}"
      printf '%s\n' "$table"
    elif [[ "$line" =~ $kv_re ]]; then
      key="${BASH_REMATCH[1]//[\"\']/}"
      value="${BASH_REMATCH[2]}"
      if [[ "$value" =~ ^\'(.*)\'$ || "$value" =~ ^\"(.*)\"$ ]]; then
        value="${BASH_REMATCH[1]}"
      fi
      printf '%s\n' "${table:+$table.}$key=$value"
    fi
  done <<<"$1"
}

# The tenant kubelet uses the systemd cgroup driver; containerd's runc must use it too.
containerd_flat=""
if containerd_config="$(containerd config dump 2>/dev/null)"; then
  containerd_flat="$(toml_flat "$containerd_config")"
  [[ "$containerd_flat" =~ \.SystemdCgroup=true($'\n'|$) ]] \
    || fail "containerd does not use the systemd cgroup driver (no SystemdCgroup = true in" \
      "'containerd config dump'); the kubelet does. Set SystemdCgroup = true for the runc runtime in" \
      "/etc/containerd/config.toml and restart containerd." \
      "See https://kubernetes.io/docs/setup/production-environment/container-runtimes/#containerd-systemd"
else
  containerd_config=""
  note "cannot run 'containerd config dump'; not checking containerd's cgroup driver"
fi

# HAMi's device plugin (HAMi v2.10.0 README "Prerequisites", charts/hami/templates/device-plugin/) needs on this
# server: the NVIDIA driver (NVML, >= 440), the nvidia-container-toolkit, containerd's runtime `nvidia` (the chart's
# RuntimeClass has handler: nvidia) as the default runtime unless GPU pods use a RuntimeClass, and no other NVIDIA
# device plugin (it registers the same nvidia.com/gpu resource). Every problem is named at once.
if [[ "$gpu_mode" == nvidia ]]; then
  problems=()
  problem() { problems+=("$*"); }  # one problem, its words joined by spaces
  toolkit_hint="install the NVIDIA Container Toolkit"
  toolkit_hint+=" (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html)"
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    problem "no nvidia-smi: the NVIDIA driver is not installed. Install the driver for these cards" \
      "(https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/) and reboot"
  elif ! smi="$(nvidia-smi --query-gpu=driver_version,uuid --format=csv,noheader 2>&1)"; then
    problem "nvidia-smi fails, so the driver does not work ($smi). Reinstall the NVIDIA driver or reboot"
  else
    driver="${smi%%,*}"
    if [[ ! "$driver" =~ ^([0-9]+)\. ]] || ((BASH_REMATCH[1] < 440)); then
      problem "NVIDIA driver '$driver' is older than 440, which HAMi needs. Upgrade the driver"
    fi
    for uuid in $gpu_uuids; do
      [[ "$smi" == *", $uuid"* ]] || problem "this server has no card $uuid (nvidia-smi lists:" \
        "${smi//$'\n'/; }). Correct the worker's gpus to the cards of this server"
    done
  fi
  if ! command -v nvidia-container-runtime >/dev/null 2>&1; then
    problem "no nvidia-container-runtime: $toolkit_hint"
  fi
  if [[ -z "$containerd_config" ]]; then
    problem "cannot run 'containerd config dump', so containerd's nvidia runtime cannot be checked"
  else
    configure="sudo nvidia-ctk runtime configure --runtime=containerd"
    [[ -n "$runtime_class" ]] || configure+=" --set-as-default"
    configure+=" && sudo systemctl restart containerd"
    # containerd 2.x (config version 3) keeps runtimes in the CRI runtime plugin, 1.x in the CRI plugin.
    runtimes_v3="plugins.io.containerd.cri.v1.runtime.containerd"
    runtimes_v2="plugins.io.containerd.grpc.v1.cri.containerd"
    if [[ ! "$containerd_flat" =~ (^|$'\n')($runtimes_v3|$runtimes_v2)\.runtimes\.nvidia($'\n'|$) ]]; then
      problem "containerd has no runtime named nvidia (HAMi's RuntimeClass handler). Run: $configure"
    elif [[ -z "$runtime_class" \
      && ! "$containerd_flat" =~ (^|$'\n')($runtimes_v3|$runtimes_v2)\.default_runtime_name=nvidia($'\n'|$) ]]; then
      problem "nvidia is not containerd's default runtime, and no RuntimeClass is configured. Run: $configure," \
        "or set nvidia.runtimeClassName in the stack configuration"
    fi
  fi
  # The kernel truncates a command name to 15 characters (TASK_COMM_LEN): nvidia-device-plugin is nvidia-device-p.
  # Nothing of this tenant runs here yet, so any such process is another's; a joined server may run HAMi's own.
  for comm in "$root"/proc/[0-9]*/comm; do
    [[ -z "$joined" ]] || break
    [[ -r "$comm" && "$(<"$comm")" == nvidia-device-p ]] || continue
    pid="${comm%/comm}"
    problem "another NVIDIA device plugin runs here (process ${pid##*/}); HAMi's replaces it. Stop it (NVIDIA's" \
      "k8s-device-plugin or the GPU Operator's) and keep it off this server"
    break
  done
  if ((${#problems[@]} > 0)); then
    note "this worker lists gpus, so it gets gpu=on and HAMi's device plugin, which cannot work here:"
    for item in "${problems[@]}"; do
      printf '  - %s\n' "$item" >&2
    done
    fail "fix the above and run make up again"
  fi
fi
if [[ -n "$joined" ]]; then
  printf '%s\n' "$joined"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Writes a small config file that makes a kernel setting survive a reboot (real machines only).
persist() {  # <file> <why> <content line>
  local file="$1" content
  content="$(printf '# %s\n%s\n' "$2" "$3")"
  if [[ -f "$file" && "$(<"$file")" == "$content" ]]; then
    return 0
  fi
  { mkdir -p "${file%/*}" && printf '%s\n' "$content" >"$file" && chmod 0644 "$file"; } 2>"$work/persist.log" \
    || fail "cannot write $file ($(<"$work/persist.log"))"
  note "wrote $file so that '$3' survives a reboot"
}

ip_forward_file="$root/proc/sys/net/ipv4/ip_forward"
bridge_active_dir="$root/proc/sys/net/bridge"  # exists while br_netfilter is active (module or built in)
if [[ "$node_kind" == machine ]]; then
  # kubeadm's preflight refuses a node that does not forward IPv4 (and kube-proxy needs it).
  if [[ -r "$ip_forward_file" && "$(<"$ip_forward_file")" != 1 ]]; then
    sysctl -w net.ipv4.ip_forward=1 >"$work/sysctl.log" 2>&1 \
      || fail "net.ipv4.ip_forward is 0 and cannot be set ($(<"$work/sysctl.log")); run:" \
        "sudo sysctl -w net.ipv4.ip_forward=1"
    note "set net.ipv4.ip_forward=1"
  fi
  persist "$root/etc/sysctl.d/99-gpu-tenancy.conf" \
    "gpu-tenancy worker join: kube-proxy and the pod network need IPv4 forwarding." "net.ipv4.ip_forward = 1"
  # kube-proxy and Calico need bridged traffic to traverse iptables.
  if [[ ! -d "$bridge_active_dir" ]]; then
    modprobe br_netfilter >"$work/modprobe.log" 2>&1 \
      || fail "cannot load br_netfilter ($(<"$work/modprobe.log")); load it: sudo modprobe br_netfilter"
    note "loaded br_netfilter"
  fi
  persist "$root/etc/modules-load.d/gpu-tenancy.conf" \
    "gpu-tenancy worker join: bridged pod traffic must traverse iptables." "br_netfilter"
  # The kubelet refuses to start while swap is on (kubeadm's preflight checks it too). Turning it off
  # here would last only until the next reboot, so the owner decides.
  if [[ -r "$root/proc/swaps" ]] && (($(wc -l <"$root/proc/swaps") > 1)); then
    fail "swap is on; the kubelet will not start with swap. Run: sudo swapoff -a, and remove or comment out" \
      "the swap entries in /etc/fstab so that it stays off after a reboot"
  fi
else
  # A privileged container shares the host kernel: modprobe may fail (/lib/modules does not match the
  # running kernel, or the module is built in), which is harmless only when br_netfilter is already active.
  if ! modprobe br_netfilter >"$work/modprobe.log" 2>&1; then
    if [[ -d "$bridge_active_dir" ]]; then
      note "modprobe br_netfilter failed but br_netfilter is already active; continuing"
    else
      fail "cannot load br_netfilter ($(<"$work/modprobe.log")) and it is not active;" \
        "load it on the host: sudo modprobe br_netfilter"
    fi
  fi
  # The container has its own network namespace; kubeadm's preflight is skipped here (as kind does), so
  # this is best effort.
  if [[ -r "$ip_forward_file" && "$(<"$ip_forward_file")" != 1 ]]; then
    if sysctl -w net.ipv4.ip_forward=1 >"$work/sysctl.log" 2>&1; then
      note "set net.ipv4.ip_forward=1"
    else
      note "net.ipv4.ip_forward is 0 and cannot be set ($(<"$work/sysctl.log")); continuing"
    fi
  fi
  # Swap is host-wide: swapoff here would change the host. The kubelet tolerates it (failSwapOn: false
  # in the patch below), as in kind's own nodes.
fi

# kubeadm talks to containerd and restarts the kubelet through systemd: both must be up.
for ((attempt = 1; ; attempt++)); do
  if systemctl is-active --quiet containerd; then
    break
  fi
  if ((attempt >= runtime_attempts)); then
    fail "containerd is not active after $runtime_attempts checks;" \
      "inspect it on the node: systemctl status containerd"
  fi
  sleep "$runtime_pause"
done

# The address an SSH server registers with (kubelet --node-ip): the source address of its route to the tenant
# endpoint, which is the address the tenant API server and Konnectivity see it connect from (the one the tenant's
# workerCidrs must admit). Without node-ip, a kubelet without a cloud provider reports the address its node name
# resolves to, else the one of the interface the default route leaves by (kubernetes pkg/kubelet/nodestatus/
# setters.go NodeAddress, k8s.io/apimachinery pkg/util/net ChooseHostInterface): on a server with a management
# LAN and a data network that is the wrong network, and Calico (nodeAddressAutodetectionV4: NodeInternalIP) would
# tunnel pod traffic over it. Container workers are left to the kubelet: a kindest/node container has one
# interface, on the `kind` network, and Docker writes its hostname (= the Node name) with that address into its
# /etc/hosts (moby libnetwork/sandbox_dns_unix.go updateHostsFile), which NodeAddress resolves before it looks at
# any route; kind itself passes node-ip (kind v0.32.0
# pkg/cluster/internal/kubeadm/config.go) to pick the IP family of IPv6 and dual-stack clusters
# (pkg/cluster/internal/create/actions/config/config.go), and tenants here are IPv4 only.
node_ip=""
if [[ "$node_kind" == machine ]]; then
  endpoint_host="${endpoint%:*}"
  endpoint_host="${endpoint_host#\[}"
  endpoint_host="${endpoint_host%\]}"
  route_fix="Give this server a route to $endpoint that leaves by its interface on the tenant's worker network"
  route_fix+=" (tenants[].workerCidrs or management.workerCidrs), e.g. ip route add <network of the endpoint>"
  route_fix+=" via <gateway> dev <interface>, made persistent in the server's network configuration"
  if [[ "$endpoint_host" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ || "$endpoint_host" == *:* ]]; then
    endpoint_ip="$endpoint_host"
  else
    resolved="$(getent ahostsv4 "$endpoint_host" 2>/dev/null)" || resolved=""
    endpoint_ip="${resolved%%[[:space:]]*}"
    [[ "$endpoint_ip" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] \
      || fail "cannot resolve $endpoint_host, the host of the tenant endpoint $endpoint, to an IPv4 address" \
        "('getent ahostsv4 $endpoint_host' finds none). Make it resolvable on this server (DNS or /etc/hosts)"
  fi
  command -v ip >/dev/null 2>&1 \
    || fail "no 'ip' command on this server, so the route to the tenant endpoint $endpoint cannot be read." \
      "Install iproute2"
  route="$(ip -o route get "$endpoint_ip" 2>&1)" \
    || fail "no route from this server to the tenant endpoint $endpoint ('ip -o route get $endpoint_ip':" \
      "${route//$'\n'/ }). $route_fix"
  src_re='(^|[[:space:]])src[[:space:]]+([0-9A-Fa-f.:]+)([[:space:]]|$)'
  [[ "$route" =~ $src_re ]] \
    || fail "the route to the tenant endpoint $endpoint has no source address ('ip -o route get $endpoint_ip':" \
      "${route//$'\n'/ }). $route_fix"
  node_ip="${BASH_REMATCH[2]}"
  dev_re='(^|[[:space:]])dev[[:space:]]+([^[:space:]]+)'
  route_dev="an unnamed interface"
  if [[ "$route" =~ $dev_re ]]; then
    route_dev="${BASH_REMATCH[2]}"
  fi
  note "registers with node-ip $node_ip, the source address of its route to $endpoint_ip (leaving by $route_dev)"
fi

# Fail fast, with the reason, when this node cannot reach the tenant API at all.
for ((attempt = 1; ; attempt++)); do
  # Any HTTP answer (even 401) proves the path; only a failed connection counts.
  if curl -k -sS -o /dev/null --max-time 5 "https://$endpoint/healthz" 2>"$work/curl.log"; then
    break
  fi
  if ((attempt >= endpoint_attempts)); then
    fail "cannot reach the tenant API server at $endpoint from this node ($(<"$work/curl.log"))." \
      "Check routing and firewalls to the load-balancer address, and that this node's address" \
      "${node_ip:+($node_ip, the source address of its route there) }is in the tenant's worker networks" \
      "(tenants[].workerCidrs or management.workerCidrs)"
  fi
  sleep "$endpoint_pause"
done

# The JoinConfiguration holds the token: private file (umask 077) in the private directory that the
# EXIT trap removes. kubeadm's own waits (v1beta4 Timeouts: 5 min discovery and TLS bootstrap, 4 min kubelet health
# check) are cut short: the loop below retries around the first two, and a kubelet that is not healthy after
# kubelet_health (it answers within seconds of its start) fails the join.
kubelet_health=2m0s
config="$work/join-configuration.yaml"
patches="$work/patches"
(
  umask 077
  {
    printf 'apiVersion: kubeadm.k8s.io/v1beta4\n'
    printf 'kind: JoinConfiguration\n'
    printf 'discovery:\n'
    printf '  bootstrapToken:\n'
    printf '    apiServerEndpoint: "%s"\n' "$endpoint"
    printf '    token: "%s"\n' "$token"
    printf '    caCertHashes:\n'
    printf '    - "%s"\n' "$ca_hash"
    printf 'nodeRegistration:\n'
    printf '  name: "%s"\n' "$node"
    if [[ -n "$node_ip" ]]; then
      # kubeadm v1beta4 NodeRegistrationOptions.kubeletExtraArgs: a list of {name, value} (Arg), as kind writes it.
      printf '  kubeletExtraArgs:\n'
      printf '  - name: node-ip\n'
      printf '    value: "%s"\n' "$node_ip"
    fi
    printf 'timeouts:\n'
    printf '  discovery: 1m0s\n'
    printf '  kubeletHealthCheck: %s\n' "$kubelet_health"
    printf '  tlsBootstrap: 2m0s\n'
    if [[ "$node_kind" == container ]]; then
      # As kind joins its own nodes (kind pkg/cluster/internal/kubeadm/config.go JoinSkipPhases): a
      # container's kernel, swap and host tools are the host's, which kubeadm's preflight cannot judge.
      printf 'skipPhases:\n'
      printf -- '- preflight\n'
      printf 'patches:\n'
      printf '  directory: "%s"\n' "$patches"
    fi
  } >"$config"
  if [[ "$node_kind" == container ]]; then
    # kind's kubelet settings for container nodes (kind config.go KubeletConfiguration): the kubelet sees
    # the host's disk and swap, so disk-pressure eviction, image GC and the swap check are turned off.
    # kubeadm v1beta4 patches: target kubeletconfiguration, patch type merge, extension yaml. Pods run under
    # the runtime's default seccomp profile unless they ask otherwise (KubeletConfiguration seccompDefault):
    # the node container itself is privileged and unconfined.
    mkdir "$patches"
    {
      printf 'failSwapOn: false\n'
      printf 'seccompDefault: true\n'
      printf 'imageGCHighThresholdPercent: 100\n'
      printf 'evictionHard:\n'
      printf '  nodefs.available: "0%%"\n'
      printf '  nodefs.inodesFree: "0%%"\n'
      printf '  imagefs.available: "0%%"\n'
    } >"$patches/kubeletconfiguration+merge.yaml"
  fi
)
unset token

# kubeadm's output, with the token secret replaced (kubeadm may echo the token it was given).
redacted() {
  local text
  text="$(<"$1")"
  printf '%s\n' "${text//"$token_secret"/<redacted>}"
}

for ((attempt = 1; ; attempt++)); do
  if kubeadm join --config "$config" >"$work/join.log" 2>&1; then
    redacted "$work/join.log"
    if [[ "$node_kind" == machine ]]; then
      # node-upgrade.sh's record: kubeadm join wrote the kubelet configuration of this version's control plane.
      { mkdir -p "$root/var/lib/kubelet" && printf '%s\n' "$tenant_version" >"$root/var/lib/kubelet/gpu-tenancy-version"; } \
        2>/dev/null \
        || note "cannot write $root/var/lib/kubelet/gpu-tenancy-version: the next node-upgrade.sh upgrades this node"
    fi
    printf 'worker %s joined the tenant at %s (attempt %s)\n' "$node" "$endpoint" "$attempt"
    exit 0
  fi
  # What another attempt cannot change, by kubeadm's own messages: its preflight checks of this node
  # (cmd/kubeadm/app/preflight/checks.go Error), a Ready Node of this name (phases/join/kubelet.go
  # runKubeletStartJoinPhase), a kubelet not healthy in time (util/apiclient/wait.go WaitForKubelet). A preflight
  # phase that cannot read the cluster's configuration yet (Kamaji's RBAC after Ready) is retried.
  cause=""
  case "$(<"$work/join.log")" in
    *"[preflight] Some fatal errors occurred"*) cause="kubeadm's preflight checks refuse this node" ;;
    *"already exists in the cluster. You must delete the existing Node"*)
      cause="a Ready Node of this name is already in the tenant" ;;
    *"The kubelet is not healthy after"*)
      cause="the kubelet did not get healthy within $kubelet_health"
      if command -v journalctl >/dev/null 2>&1; then
        journalctl -u kubelet -n 20 --no-pager >"$work/kubelet.log" 2>&1 || true
      fi ;;
  esac
  if [[ -n "$cause" ]] || ((attempt >= join_attempts)); then
    # Undo the half-done join here too: it would leave bootstrap-kubelet.conf (holding the token) and a
    # kubelet that keeps trying to register.
    kubeadm reset -f >"$work/reset.log" 2>&1 || note "kubeadm reset -f failed: $(redacted "$work/reset.log")"
    if [[ -n "$cause" ]]; then
      note "kubeadm join to $endpoint failed; kubeadm output:"
    else
      note "kubeadm join to $endpoint failed $attempt times; last kubeadm output:"
    fi
    redacted "$work/join.log" >&2
    if [[ -s "$work/kubelet.log" ]]; then
      note "the kubelet's last log lines (journalctl -u kubelet):"
      redacted "$work/kubelet.log" >&2
    fi
    [[ -z "$cause" ]] || fail "$cause, which another attempt cannot change (the node was reset). Fix it, then run" \
      "make up again"
    fail "giving up (the node was reset). Check that the tenant control plane is Ready and reachable" \
      "from this node, then run make up again"
  fi
  note "kubeadm join attempt $attempt/$join_attempts failed; resetting and retrying in ${join_pause}s"
  # A half-done join leaves files behind that make the next attempt fail.
  kubeadm reset -f >"$work/reset.log" 2>&1 || note "kubeadm reset -f failed: $(redacted "$work/reset.log")"
  sleep "$join_pause"
done
}
