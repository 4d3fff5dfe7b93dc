#!/usr/bin/env bash
# Takes this machine out of its tenant: `kubeadm reset -f` stops the kubelet and removes its credentials.
# Runs ON the worker as root, started by dispatch.sh. It needs no kubeconfig and does not touch the
# tenant API: the Pulumi host deletes the Node object after this has run.
#
# On a real server (NODE_KIND=machine) it then removes what the join and the tenant's pods put there and
# kubeadm reset leaves behind: kubeadm's cleanup-node phase empties only /etc/kubernetes and /var/lib/kubelet
# (kubernetes cmd/kubeadm/app/cmd/phases/reset/cleanupnode.go, runCleanupNode/resetConfigDir), and its output
# says it does not clean the CNI configuration or iptables rules. So: Calico's CNI files and state, the `cali-`
# (Calico) and `KUBE-` (kube-proxy, iptables mode) chains and Calico's ipsets, and the two files node-join.sh
# persisted -- only those that carry its marker --, and felix's VXLAN devices and routes. A container is deleted
# with everything in it instead.
#
# Environment (names in components/shell.py):
#   NODE_NAME              Kubernetes Node name (for messages)
#   NODE_KIND              container (a kindest/node container) | machine (a real server)
#   GPU_TENANCY_NODE_ROOT  test-only prefix for /etc, /opt and /var
#
# Exit 0: reset and cleaned, or never joined. Exit 1: the reset or a clean-up step failed (its output on stderr).
set -euo pipefail
# One brace group: bash reads all of it from stdin before running any command.
{
missing=()
for var in NODE_NAME NODE_KIND; do
  [[ -n "${!var:-}" ]] || missing+=("$var")
done
if ((${#missing[@]} > 0)); then
  printf 'gpu-tenancy: node-leave.sh: required environment variable(s) not set: %s\n' "${missing[*]}" >&2
  exit 1
fi
node="${NODE_NAME:-}"
node_kind="${NODE_KIND:-}"
root="${GPU_TENANCY_NODE_ROOT:-}"
if [[ "$node_kind" != container && "$node_kind" != machine ]]; then
  printf "gpu-tenancy: node-leave.sh: NODE_KIND must be 'container' or 'machine', got '%s'\n" "$node_kind" >&2
  exit 1
fi

fail() {
  printf 'gpu-tenancy: worker %s: %s\n' "$node" "$*" >&2
  exit 1
}

# kubelet.conf: joined. bootstrap-kubelet.conf alone: a join that was interrupted, whose kubelet may still
# try to register with the token in that file.
joined=""
for file in "$root/etc/kubernetes/kubelet.conf" "$root/etc/kubernetes/bootstrap-kubelet.conf"; do
  if [[ -f "$file" ]]; then
    joined="$file"
    break
  fi
done
if [[ -z "$joined" ]]; then
  printf 'worker %s never joined a cluster (no %s): nothing to reset\n' "$node" \
    "$root/etc/kubernetes/kubelet.conf"
else
  # A kubelet left running would register the Node again right after the Pulumi host deletes it: a failed
  # reset must fail the leave, not pass silently.
  if ! out="$(kubeadm reset -f 2>&1)"; then
    printf 'gpu-tenancy: worker %s: kubeadm reset -f failed, the kubelet may still be running and would register\n' \
      "$node" >&2
    printf 'the Node again. Fix the cause and run make down (or make up) again. kubeadm said:\n%s\n' \
      "$out" >&2
    exit 1
  fi
  printf '%s\n' "$out"
  printf 'worker %s left its cluster (kubeadm reset -f)\n' "$node"
fi

[[ "$node_kind" == machine ]] || exit 0

# The clean-up runs on every leave of a machine, also when an earlier leave reset it and stopped half-way:
# each step is idempotent.
removed=()

# Calico's install-cni writes its network configuration and the kubeconfig of its plugin into the CNI
# configuration directory, and its two plugin binaries next to the standard ones (which other users of the
# server may need: they stay). calico-node keeps its state under /var/lib/calico and /var/run/calico.
for path in etc/cni/net.d/10-calico.conflist etc/cni/net.d/calico-kubeconfig opt/cni/bin/calico \
  opt/cni/bin/calico-ipam var/lib/calico var/run/calico var/log/calico; do
  if [[ -e "$root/$path" || -L "$root/$path" ]]; then
    # $path is one of the fixed relative paths above, never empty.
    # shellcheck disable=SC2115
    rm -rf -- "$root/$path" || fail "cannot remove /$path"
    removed+=("/$path")
  fi
done

# The chains of Calico (cali-*) and of kube-proxy in iptables mode (KUBE-*), and every rule that jumps to one,
# in each table, for IPv4 and IPv6. The rest of the ruleset (Docker's, the firewall's) is restored unchanged.
without_ours() {
  local line
  while IFS= read -r line || [[ -n "$line" ]]; do
    case "$line" in
      :cali-* | :KUBE-* | "-A cali-"* | "-A KUBE-"* | *" -j cali-"* | *" -j KUBE-"* | *" -g cali-"* | *" -g KUBE-"*) ;;
      *) printf '%s\n' "$line" ;;
    esac
  done
}
for family in iptables ip6tables; do
  if ! command -v "$family-save" >/dev/null 2>&1 || ! command -v "$family-restore" >/dev/null 2>&1; then
    continue
  fi
  rules="$("$family-save" 2>&1)" || fail "$family-save failed: $rules"
  kept="$(without_ours <<<"$rules")"
  [[ "$kept" == "$rules" ]] && continue
  out="$(printf '%s\n' "$kept" | "$family-restore" 2>&1)" \
    || fail "cannot remove the cali- and KUBE- chains ($family-restore: $out); the $family rules are unchanged"
  removed+=("the $family cali- and KUBE- chains")
done
# Calico's ipsets (cali40* for IPv4, cali60* for IPv6), once no rule refers to them.
if command -v ipset >/dev/null 2>&1; then
  sets="$(ipset list -n 2>/dev/null)" || sets=""
  while IFS= read -r set; do
    [[ "$set" == cali40* || "$set" == cali60* ]] || continue
    out="$(ipset destroy "$set" 2>&1)" || fail "cannot destroy Calico's ipset $set: $out"
    removed+=("ipset $set")
  done <<<"$sets"
fi

# Felix's VXLAN devices, which take the routes through them along, and its routes of protocol 80: the blackhole of
# this node's IPAM block (projectcalico/calico v3.32.1 felix/dataplane/linux/dataplanedefs/dataplane_defs.go
# VXLANIfaceNameV4/V6 and DefaultRouteProto, route_mgr.go calculateRouteProtocol; the tenants leave felix's
# deviceRouteProtocol at its default). kubeadm reset touches no link and no route.
if command -v ip >/dev/null 2>&1; then
  for device in vxlan.calico vxlan-v6.calico; do
    ip link show dev "$device" >/dev/null 2>&1 || continue
    out="$(ip link delete dev "$device" 2>&1)" || fail "cannot delete Calico's device $device: $out"
    removed+=("device $device")
  done
  for family in -4 -6; do
    [[ -n "$(ip "$family" route show proto 80 2>/dev/null)" ]] || continue
    out="$(ip "$family" route flush proto 80 2>&1)" \
      || fail "cannot remove Calico's routes (ip $family route flush proto 80: $out)"
    removed+=("the ip $family routes of protocol 80 (Calico's)")
  done
fi

# The files node-join.sh persisted, recognised by their first line; the running kernel keeps the settings until
# the next reboot.
for file in etc/sysctl.d/99-gpu-tenancy.conf etc/modules-load.d/gpu-tenancy.conf; do
  if [[ -f "$root/$file" && "$(head -n 1 "$root/$file")" == "# gpu-tenancy worker join:"* ]]; then
    rm -f -- "$root/$file" || fail "cannot remove /$file"
    removed+=("/$file")
  fi
done

if ((${#removed[@]} > 0)); then
  printf 'worker %s: removed:' "$node"
  printf ' %s;' "${removed[@]}"
  printf '\n'
else
  printf 'worker %s: nothing of the tenant left to remove\n' "$node"
fi
}
