#!/usr/bin/env bash
# Brings a joined real server to its tenant's new Kubernetes version, after the Pulumi host drained it. Runs ON
# the worker as root, started by dispatch.sh over SSH (components/worker/node.py `<node>-upgrade`).
#
# As kubernetes.io/docs/tasks/administer-cluster/kubeadm/upgrading-linux-nodes/ upgrades a worker: the server
# must already have kubeadm and kubelet of the new version (this script names the packages and the commands when
# it does not: installing packages is the owner's decision), then `kubeadm upgrade node`, then
# `systemctl daemon-reload` and `systemctl restart kubelet`. On a worker, `kubeadm upgrade node` reads the
# kubeadm-config and kubelet-config ConfigMaps with the node's own credentials (/etc/kubernetes/kubelet.conf) and
# writes /var/lib/kubelet/config.yaml (kubernetes cmd/kubeadm/app/cmd/upgrade/node.go newNodeData, and
# cmd/kubeadm/app/phases/upgrade/postupgrade.go WriteKubeletConfigFiles); its control-plane and addon phases skip a
# node without a kube-apiserver manifest. Kamaji keeps both ConfigMaps current with the TenantControlPlane's version,
# readable by system:nodes (clastix/kamaji 26.8.2-edge internal/resources/kubeadm_utils.go KubeadmPhaseCreate with
# TenantControlPlaneVersion; internal/kubeadm/uploadconfig.go: UploadKubeadmConfig calls kubeadm's
# uploadconfig.UploadConfiguration, which binds Role kubeadm:nodes-kubeadm-config to system:nodes, and
# UploadKubeletConfig's createConfigMapRBACRules binds kubelet-config's Role to system:nodes).
#
# Environment (names in components/shell.py):
#   NODE_NAME       Kubernetes Node name (for messages)
#   TENANT_VERSION  the tenant's Kubernetes version, e.g. v1.36.1
#   UPGRADE_MODE    why it runs: record (the worker was just joined: its first build, or a rejoin) or upgrade (the
#                   tenant's version changed). Both follow the same rules: a server recorded at TENANT_VERSION is
#                   left alone, one without a record is recorded, one recorded at another version (or "upgrading
#                   to ...") is upgraded.
# Test-only knob: GPU_TENANCY_NODE_ROOT (prefix for /etc and /var).
#
# Which version the kubelet configuration was last brought to is kept in /var/lib/kubelet/gpu-tenancy-version:
# node-join.sh writes it after a join (`kubeadm reset` empties /var/lib/kubelet, so a rejoin starts afresh), this
# script after an upgrade, and "upgrading to <version>" while an upgrade has not finished.
#
# Exit 0: upgraded now, already at TENANT_VERSION, or nothing to upgrade. Exit 1: with the reason and the fix.
set -euo pipefail
# One brace group: bash reads all of it from stdin before running any command.
{
missing=()
for var in NODE_NAME TENANT_VERSION UPGRADE_MODE; do
  [[ -n "${!var:-}" ]] || missing+=("$var")
done
if ((${#missing[@]} > 0)); then
  printf 'gpu-tenancy: node-upgrade.sh: required environment variable(s) not set: %s\n' "${missing[*]}" >&2
  exit 1
fi
node="${NODE_NAME:-}"
version="${TENANT_VERSION:-}"
mode="${UPGRADE_MODE:-}"
root="${GPU_TENANCY_NODE_ROOT:-}"
kubelet_conf="$root/etc/kubernetes/kubelet.conf"
marker="$root/var/lib/kubelet/gpu-tenancy-version"

fail() {
  printf 'gpu-tenancy: worker %s: %s\n' "$node" "$*" >&2
  exit 1
}

[[ "$node" =~ ^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$ ]] \
  || fail "NODE_NAME must be a DNS subdomain name (lower-case letters, digits, '-' and '.'), got '$node'"
[[ "$version" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] \
  || fail "TENANT_VERSION must look like v1.36.1, got '$version'"
minor="v${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
plain="${version#v}"
[[ "$mode" == record || "$mode" == upgrade ]] || fail "UPGRADE_MODE must be 'record' or 'upgrade', got '$mode'"

record() {
  { mkdir -p "${marker%/*}" && printf '%s\n' "$version" >"$marker"; } 2>/dev/null \
    || fail "cannot write $marker"
}

if [[ ! -f "$kubelet_conf" ]]; then
  printf 'worker %s is not joined (no %s): node-join.sh joins it at %s; nothing to upgrade\n' "$node" \
    "$kubelet_conf" "$version"
  exit 0
fi

# What is installed: both must be exactly the tenant's version (the upgrade docs install kubeadm and kubelet of
# the same patch; kubeadm upgrade node writes the configuration for the version in kubeadm-config).
installed() {  # <tool> <version command...>: the vX.Y.Z it reports, or "none"
  local tool="$1" out
  shift
  if ! command -v "$tool" >/dev/null 2>&1; then
    printf 'none'
  elif out="$("$@" 2>&1)" && [[ "$out" =~ (v[0-9]+\.[0-9]+\.[0-9]+) ]]; then
    printf '%s' "${BASH_REMATCH[1]}"
  else
    printf 'unreadable'
  fi
}
kubelet_version="$(installed kubelet kubelet --version)"

recorded=""
if [[ -f "$marker" ]]; then
  recorded="$(<"$marker")" || fail "cannot read $marker"
fi
if [[ "$recorded" == "$version" ]]; then
  printf 'worker %s is at %s (%s); nothing to do\n' "$node" "$version" "$marker"
  exit 0
fi
# No record, in either mode: a server joined before node-join.sh wrote one. It was not drained for this (or the
# drain is for a version change in this very `up`): record the tenant's version and leave its kubelet as it runs;
# node-join.sh let it join, and the next version change upgrades it. <node>-ready waits for a new kubelet only when
# this script says it upgraded one (components/worker/node.py).
if [[ -z "$recorded" ]]; then
  record
  printf 'worker %s has no record (kubelet %s); recorded as %s\n' "$node" "$kubelet_version" "$version"
  exit 0
fi

# From here on this server is being upgraded: if anything below stops it (packages, kubeadm, the restart), the next
# attempt goes on with the upgrade whatever its mode and whatever is installed by then.
{ mkdir -p "${marker%/*}" && printf 'upgrading to %s\n' "$version" >"$marker"; } 2>/dev/null \
  || fail "cannot write $marker"
kubeadm_version="$(installed kubeadm kubeadm version -o short)"
wrong=()
[[ "$kubeadm_version" == "$version" ]] || wrong+=(kubeadm)
[[ "$kubelet_version" == "$version" ]] || wrong+=(kubelet)

if ((${#wrong[@]} > 0)); then
  # The package versions pkgs.k8s.io publishes: deb <version>-1.1, rpm <version>-150500.1.1 (dnf takes
  # name-version). Repositories per minor: https://pkgs.k8s.io/core:/stable:/<minor>/deb/ and .../rpm/.
  repo="https://pkgs.k8s.io/core:/stable:/$minor"
  if command -v apt-get >/dev/null 2>&1; then
    packages=""
    for package in "${wrong[@]}"; do packages+=" $package=$plain-1.1"; done
    how="point /etc/apt/sources.list.d/kubernetes.list at $repo/deb/ (its key: $repo/deb/Release.key), then run:"
    how+=" sudo apt-mark unhold ${wrong[*]} && sudo apt-get update && sudo apt-get install -y$packages"
    how+=" && sudo apt-mark hold ${wrong[*]}"
  elif command -v dnf >/dev/null 2>&1 || command -v yum >/dev/null 2>&1; then
    manager=dnf
    command -v dnf >/dev/null 2>&1 || manager=yum
    packages=""
    for package in "${wrong[@]}"; do packages+=" $package-$plain"; done
    how="point baseurl in /etc/yum.repos.d/kubernetes.repo at $repo/rpm/ (gpgkey $repo/rpm/repodata/repomd.xml.key),"
    how+=" then run: sudo $manager install -y$packages --disableexcludes=kubernetes"
  else
    how="this server has neither apt-get nor dnf/yum: install ${wrong[*]} $version from $repo/"
  fi
  fail "cannot upgrade to $version: this server has kubeadm $kubeadm_version and kubelet $kubelet_version," \
    "not $version. To install them, $how." \
    "See https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/upgrading-linux-nodes/." \
    "The Node stays cordoned (drained) until then; run make up again when they are installed: it goes on" \
    "from this worker"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
kubeadm upgrade node >"$work/upgrade.log" 2>&1 \
  || fail "kubeadm upgrade node failed; the Node stays cordoned. Its output: $(<"$work/upgrade.log")." \
    "Fix the cause and run make up again"
cat "$work/upgrade.log"
systemctl daemon-reload >"$work/systemctl.log" 2>&1 \
  || fail "systemctl daemon-reload failed ($(<"$work/systemctl.log")); the Node stays cordoned"
systemctl restart kubelet >"$work/systemctl.log" 2>&1 \
  || fail "systemctl restart kubelet failed ($(<"$work/systemctl.log")); the Node stays cordoned." \
    "Inspect it: journalctl -u kubelet"
record
printf 'worker %s upgraded to %s: kubeadm upgrade node, kubelet restarted\n' "$node" "$version"
}
