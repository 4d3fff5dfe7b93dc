#!/usr/bin/env bash
# Creates this stack's kind management cluster, or reuses it when it already exists and carries this stack's
# owner label; refuses a cluster of the same name that belongs to someone else. Runs on the Pulumi host.
#
# Environment (names in components/shell.py):
#   KIND_CLUSTER_NAME  the kind cluster's name
#   KIND_STACK_MARKER  value of the node label gpu-tenancy.io/stack that the kind config on stdin sets
#   KIND_CHECKOUT      value of the node label gpu-tenancy.io/checkout (unset for a stack made before that label)
#   KIND_WAIT_SECONDS  how long to wait for the control-plane node to be Ready (default 300)
#   HTTP_PROXY, HTTPS_PROXY, NO_PROXY (or lower case)  the host's, which kind hands its node
# stdin: the kind config (YAML), read only when the cluster is created.
# stdout, and nothing else: line 1 the kind docker network's IPAM entries as one JSON line, then the
# cluster's kubeconfig. Everything else (kind's progress, notes, errors) goes to stderr.
set -euo pipefail
# One brace group: bash parses all of it before running any command.
{
missing=()
for var in KIND_CLUSTER_NAME KIND_STACK_MARKER; do
  [[ -n "${!var:-}" ]] || missing+=("$var")
done
if ((${#missing[@]} > 0)); then
  printf 'gpu-tenancy: kind-create.sh: required environment variable(s) not set: %s\n' "${missing[*]}" >&2
  exit 1
fi
name="${KIND_CLUSTER_NAME:-}"
marker="${KIND_STACK_MARKER:-}"
wait_seconds="${KIND_WAIT_SECONDS:-300}"
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

# kind's own rule for cluster names; the name also goes into container names and messages.
[[ "$name" =~ ^[a-z0-9.-]+$ ]] || fail "KIND_CLUSTER_NAME must match ^[a-z0-9.-]+$"
# A Kubernetes label value.
[[ "$marker" =~ ^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$ ]] \
  || fail "KIND_STACK_MARKER must be a label value (up to 63 letters, digits, '-', '_', '.'), got '$marker'"
[[ "$wait_seconds" =~ ^[1-9][0-9]*$ ]] || fail "KIND_WAIT_SECONDS must be a positive integer, got '$wait_seconds'"

# The checks below go through the docker CLI, so kind must use docker too (not podman or nerdctl).
export KIND_EXPERIMENTAL_PROVIDER=docker

# Behind a proxy kind hands its node the proxy variables, adding only subnets and node names to NO_PROXY (kind
# pkg/cluster/internal/providers/docker/provision.go getProxyEnv): name the image caches too
# (components/management/image_cache.py cache_container_name), or the node's containerd asks the proxy for them.
# Also without management.imageMirror, which a later `up` can turn on: the node keeps this environment.
if [[ -n "${HTTP_PROXY:-${http_proxy:-}}${HTTPS_PROXY:-${https_proxy:-}}" ]]; then
  no_proxy_list="${NO_PROXY:-${no_proxy:-}}"
  for registry in docker.io quay.io registry.k8s.io; do
    no_proxy_list="${no_proxy_list:+$no_proxy_list,}$name-mirror-${registry//./-}"
  done
  export NO_PROXY="$no_proxy_list" no_proxy="$no_proxy_list"
fi

# kind writes the new cluster's kubeconfig here instead of merging it into ~/.kube/config and switching the
# user's current context (kind pkg/cluster/internal/kubeconfig/paths.go uses only an explicit path).
private="$(mktemp -d)"
trap 'rm -rf "$private"' EXIT

# Outside any `if`, so a failing `kind get clusters` (docker unreachable) stops the script; an empty list
# is no error.
existing="$(kind get clusters)"
exists=""
while IFS= read -r line; do
  if [[ "$line" == "$name" ]]; then
    exists=1
  fi
done <<<"$existing"

if [[ -n "$exists" ]]; then
  # Read inside the node with its own admin kubeconfig: works whoever created the cluster.
  if ! owner="$(docker exec "$control_plane" kubectl --kubeconfig=/etc/kubernetes/admin.conf \
    get node "$control_plane" -o jsonpath="$owner_path" 2>"$private/owner.log")"; then
    fail "exists, but its owner label $label cannot be read ($(<"$private/owner.log")). Nothing was changed." \
      "If its control-plane container is not running, start it (docker start $control_plane) or delete it" \
      "by hand: kind delete cluster --name $name"
  fi
  checkout="${owner#*/}" owner="${owner%%/*}"
  if [[ "$owner" != "$marker" || (-n "${KIND_CHECKOUT:-}" && "$checkout" != "$KIND_CHECKOUT") ]]; then
    fail "exists but does not belong to this stack: node $control_plane has $label='$owner' and" \
      "$label_checkout='$checkout', this stack expects $label='$marker' and" \
      "$label_checkout='${KIND_CHECKOUT:-any}' (a hash of the project directory's path). Nothing was changed." \
      "Either delete it" \
      "(kind delete cluster --name $name), pick another management.clusterName, or adopt it on purpose" \
      "with management.kubeconfig: pulumi config set --secret --path 'gpu-tenancy:management.kubeconfig'" \
      "\"\$(kind get kubeconfig --name $name)\""
  fi
  note "already exists and belongs to this stack ($label=$marker): reusing it"
else
  kind create cluster --name "$name" --config - --kubeconfig "$private/kubeconfig" >&2 \
    || fail "kind create cluster failed (kind's output above)"
fi

# Wait for real: `kind create --wait` only warns when its wait times out (kind waitforready.go returns nil).
if ! docker exec "$control_plane" kubectl --kubeconfig=/etc/kubernetes/admin.conf \
  wait --for=condition=Ready "node/$control_plane" --timeout="${wait_seconds}s" >&2; then
  fail "node $control_plane is not Ready after ${wait_seconds}s (kubectl's output above). Inspect it:" \
    "docker exec $control_plane kubectl --kubeconfig=/etc/kubernetes/admin.conf get nodes,pods -A"
fi

network="$(docker network inspect kind --format '{{json .IPAM.Config}}')" \
  || fail "cannot inspect the docker network 'kind'"
[[ "$network" != *$'\n'* ]] || fail "docker network inspect printed more than one line: $network"
kubeconfig="$(kind get kubeconfig --name "$name")" || fail "kind get kubeconfig failed"
printf '%s\n' "$network" "$kubeconfig"
}
