#!/usr/bin/env bash
# Deletes this stack's kind management cluster; a cluster that is already gone is not an error, and a
# cluster of the same name that does not carry this stack's owner label is refused. Runs on the Pulumi host.
#
# Environment (names in components/shell.py):
#   KIND_CLUSTER_NAME  the kind cluster's name
#   KIND_STACK_MARKER  value of the node label gpu-tenancy.io/stack this stack put on its cluster
#   KIND_CHECKOUT      value of the node label gpu-tenancy.io/checkout (unset for a stack made before that label)
# Everything is printed on stderr.
set -euo pipefail
# One brace group: bash parses all of it before running any command.
{
missing=()
for var in KIND_CLUSTER_NAME KIND_STACK_MARKER; do
  [[ -n "${!var:-}" ]] || missing+=("$var")
done
if ((${#missing[@]} > 0)); then
  printf 'gpu-tenancy: kind-delete.sh: required environment variable(s) not set: %s\n' "${missing[*]}" >&2
  exit 1
fi
name="${KIND_CLUSTER_NAME:-}"
marker="${KIND_STACK_MARKER:-}"
control_plane="$name-control-plane"
label="gpu-tenancy.io/stack" label_checkout="gpu-tenancy.io/checkout"
owner_path='{.metadata.labels.gpu-tenancy\.io/stack}/{.metadata.labels.gpu-tenancy\.io/checkout}'

fail() {
  printf 'gpu-tenancy: kind cluster %s: %s\n' "$name" "$*" >&2
  exit 1
}
note() {
  printf 'gpu-tenancy: kind cluster %s: %s\n' "$name" "$*" >&2
}

[[ "$name" =~ ^[a-z0-9.-]+$ ]] || fail "KIND_CLUSTER_NAME must match ^[a-z0-9.-]+$"

# The checks below go through the docker CLI, so kind must use docker too.
export KIND_EXPERIMENTAL_PROVIDER=docker

# Private directory (mode 0700) for kind's throwaway kubeconfig and its lock file, removed on exit.
private="$(mktemp -d)"
trap 'rm -rf "$private"' EXIT

# Outside any `if`, so a failing `kind get clusters` (docker unreachable) stops the script.
existing="$(kind get clusters)"
exists=""
while IFS= read -r line; do
  if [[ "$line" == "$name" ]]; then
    exists=1
  fi
done <<<"$existing"
if [[ -z "$exists" ]]; then
  note "does not exist: nothing to delete"
  exit 0
fi

# Only a cluster that carries this stack's label is deleted: the same name may be someone else's lab.
if ! owner="$(docker exec "$control_plane" kubectl --kubeconfig=/etc/kubernetes/admin.conf \
  get node "$control_plane" -o jsonpath="$owner_path" 2>"$private/owner.log")"; then
  fail "cannot read its owner label $label, so it is not deleted ($(<"$private/owner.log")). If its" \
    "control-plane container is not running, start it (docker start $control_plane) or delete it by hand:" \
    "kind delete cluster --name $name"
fi
checkout="${owner#*/}" owner="${owner%%/*}"
if [[ "$owner" != "$marker" || (-n "${KIND_CHECKOUT:-}" && "$checkout" != "$KIND_CHECKOUT") ]]; then
  fail "does not belong to this stack (node $control_plane has $label='$owner'" \
    "and $label_checkout='$checkout', this stack expects $label='$marker' and" \
    "$label_checkout='${KIND_CHECKOUT:-any}'): not deleting it. If it really should go, delete it by hand:" \
    "kind delete cluster --name $name"
fi
# kind removes the cluster's entry from this throwaway file instead of editing ~/.kube/config. Seeded with
# that entry: from a file without it, kind logs "ERROR: failed to update kubeconfig: Cluster not found"
# (kind pkg/cluster/internal/delete/delete.go) although the delete goes on.
kind get kubeconfig --name "$name" >"$private/kubeconfig" 2>/dev/null || true
kind delete cluster --name "$name" --kubeconfig "$private/kubeconfig" >&2
}
