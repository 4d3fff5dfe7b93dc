#!/usr/bin/env bash
# Takes this machine out of its tenant: `kubeadm reset -f` stops the kubelet and removes its credentials.
# Runs ON the worker as root, started by dispatch.sh. It needs no kubeconfig and does not touch the
# tenant API: the Pulumi host deletes the Node object after this has run.
#
# Environment (names in components/shell.py):
#   NODE_NAME              Kubernetes Node name (for messages)
#   GPU_TENANCY_NODE_ROOT  test-only prefix for /etc
#
# Exit 0: reset, or never joined. Exit 1: the reset failed (its output on stderr).
set -euo pipefail
# One brace group: bash reads all of it from stdin before running any command.
{
if [[ -z "${NODE_NAME:-}" ]]; then
  printf 'gpu-tenancy: node-leave.sh: required environment variable(s) not set: NODE_NAME\n' >&2
  exit 1
fi
node="${NODE_NAME:-}"
root="${GPU_TENANCY_NODE_ROOT:-}"

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
  exit 0
fi

# A kubelet left running would register the Node again right after the Pulumi host deletes it: a failed
# reset must fail the leave, not pass silently.
if ! out="$(kubeadm reset -f 2>&1)"; then
  printf 'gpu-tenancy: worker %s: kubeadm reset -f failed, the kubelet may still be running and would register\n' \
    "$node" >&2
  printf 'the Node again. Fix the cause and run pulumi destroy (or pulumi up) again. kubeadm said:\n%s\n' \
    "$out" >&2
  exit 1
fi
printf '%s\n' "$out"
printf 'worker %s left its cluster (kubeadm reset -f)\n' "$node"
}
