#!/usr/bin/env bash
# Points this node's containerd at pull-through image mirrors: one /etc/containerd/certs.d/<registry>/hosts.toml
# per registry, which tries the mirror first and falls back to the registry itself. containerd 2.x (kindest/node
# since kind v0.27) reads that directory by default and re-reads it on every pull, so no restart is needed
# (containerd docs/hosts.md). Runs ON the node as root, started by dispatch.sh.
#
# Only files this script wrote (first line: the marker below) are ever replaced or removed; a registry that
# already has a hosts.toml of someone else's is refused, not overwritten.
#
# Environment (names in components/shell.py):
#   NODE_NAME              Kubernetes Node name (for messages)
#   REGISTRY_MIRRORS       one line per registry: "<registry host> <upstream server URL> <mirror URL>";
#                          empty: remove every hosts.toml this script wrote (the delete action)
#   NODE_KIND              container (kindest/node: containerd 2.x reads certs.d by default) | machine (checked)
#   GPU_TENANCY_NODE_ROOT  test-only prefix for /etc
#
# Exit 0: the node's mirror files are exactly REGISTRY_MIRRORS. Exit 1: bad input, a foreign hosts.toml, or (on a
# machine) a containerd that would ignore the files.
set -euo pipefail
# One brace group: bash reads all of it from stdin before running any command.
{
if [[ -z "${NODE_NAME:-}" ]]; then
  printf 'gpu-tenancy: node-mirrors.sh: required environment variable(s) not set: NODE_NAME\n' >&2
  exit 1
fi
node="$NODE_NAME"
root="${GPU_TENANCY_NODE_ROOT:-}"
certs_d="$root/etc/containerd/certs.d"
marker="# gpu-tenancy image mirror: written by node-mirrors.sh, removed with it"
registry_re='^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$'
url_re='^https?://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$'

ours() {
  [[ -f "$1" ]] && [[ "$(head -n 1 "$1")" == "$marker" ]]
}

# A real server's containerd may not read certs.d at all (containerd 1.x generates `config_path = ""`): files it
# ignores would make the mirror silently useless, so say what to change instead.
if [[ "${NODE_KIND:-container}" == machine && -n "${REGISTRY_MIRRORS//[[:space:]]/}" ]]; then
  if ! command -v containerd >/dev/null 2>&1; then
    printf 'gpu-tenancy: node %s: containerd is not installed\n' "$node" >&2
    exit 1
  fi
  if ! containerd config dump 2>/dev/null | grep -Eq '^[[:space:]]*config_path[[:space:]]*=[[:space:]]*"([^"]*:)?/etc/containerd/certs\.d/?(:[^"]*)?"'; then
    printf 'gpu-tenancy: node %s: containerd does not read /etc/containerd/certs.d, so image mirrors would be ignored.\n' \
      "$node" >&2
    printf 'Set config_path = "/etc/containerd/certs.d" in /etc/containerd/config.toml (containerd 1.x: under\n' >&2
    printf '[plugins."io.containerd.grpc.v1.cri".registry]; 2.x: [plugins."io.containerd.cri.v1.images".registry]),\n' >&2
    printf 'restart containerd, and run pulumi up again; or drop management.registryMirrors\n' >&2
    exit 1
  fi
fi

wanted=" "
while read -r registry server mirror extra; do
  [[ -n "$registry" ]] || continue
  if [[ -n "${extra:-}" || ! "$registry" =~ $registry_re || ! "$server" =~ $url_re || ! "$mirror" =~ $url_re ]]; then
    printf 'gpu-tenancy: node %s: malformed mirror entry %q (expected "<registry> <server URL> <mirror URL>")\n' \
      "$node" "$registry $server $mirror${extra:+ $extra}" >&2
    exit 1
  fi
  file="$certs_d/$registry/hosts.toml"
  if [[ -e "$file" ]] && ! ours "$file"; then
    printf 'gpu-tenancy: node %s: %s exists and was not written by gpu-tenancy; merge the mirror %s into it by\n' \
      "$node" "$file" "$mirror" >&2
    printf 'hand and stop giving this node a mirror for %s (management.registryMirrors on an SSH worker,\n' \
      "$registry" >&2
    printf 'management.imageMirror: false for the lab), or remove the file\n' >&2
    exit 1
  fi
  mkdir -p "$certs_d/$registry"
  tmp="$(mktemp "$certs_d/$registry/.hosts.toml.XXXXXX")"
  printf '%s\nserver = "%s"\n\n[host."%s"]\n  capabilities = ["pull", "resolve"]\n' \
    "$marker" "$server" "$mirror" >"$tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$file"
  wanted+="$registry "
done <<<"${REGISTRY_MIRRORS:-}"

# Files of ours for registries no longer listed.
removed=0
for file in "$certs_d"/*/hosts.toml; do
  [[ -e "$file" ]] || continue
  registry="$(basename "$(dirname "$file")")"
  [[ "$wanted" == *" $registry "* ]] && continue
  if ours "$file"; then
    rm -f "$file"
    rmdir "$(dirname "$file")" 2>/dev/null || true
    removed=$((removed + 1))
  fi
done
printf 'node %s: image mirrors for:%s(%d removed)\n' "$node" "$wanted" "$removed"
}
