#!/usr/bin/env bash
# Runs a node command's stdin (dispatch.sh and its data block) inside a local worker container, for one
# action. Runs on the Pulumi host: pulumi-command local.Command calls
# `bash -c <this file> container-exec.sh <action>` (components/worker/access.py). stdin goes to
# `docker exec -i` untouched; no value is on any command line and this process's environment holds none.
#
# Argument: the action, create or delete.
# Environment (names in components/shell.py):
#   GPU_TENANCY_CONTAINER   the container, named like its Node
#   GPU_TENANCY_GONE_HINT   delete only, optional: what to tell the user when there is nothing to undo
#
# A delete in a container that is gone or stopped succeeds without running anything: there is nothing to
# undo. Any other `docker container inspect` failure (the daemon is down) fails: the container may exist.
set -euo pipefail
# One brace group, like every script here: bash parses all of it before running any of it.
{
action="${1:-}"
container="${GPU_TENANCY_CONTAINER:-}"
if [[ -z "$container" ]]; then
  printf 'gpu-tenancy: container-exec.sh: GPU_TENANCY_CONTAINER is not set\n' >&2
  exit 2
fi
case "$action" in
  create) ;;
  delete)
    hint="${GPU_TENANCY_GONE_HINT:+ $GPU_TENANCY_GONE_HINT}"
    if ! state="$(docker container inspect -f '{{.State.Running}}' "$container" 2>&1)"; then
      case "$state" in
        *'No such'*) printf 'gpu-tenancy: container %s is gone: nothing to undo.%s\n' "$container" "$hint"; exit 0 ;;
        *) printf '%s\n' "$state" >&2; exit 1 ;;
      esac
    fi
    if [[ "$state" != true ]]; then
      printf 'gpu-tenancy: container %s is stopped: nothing to undo.%s\n' "$container" "$hint"
      exit 0
    fi
    ;;
  *)
    printf 'gpu-tenancy: container-exec.sh: unknown action "%s" (expected create or delete)\n' "$action" >&2
    exit 2
    ;;
esac
exec docker exec -i "$container" bash -s -- "$action"
}
