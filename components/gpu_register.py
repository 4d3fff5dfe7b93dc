"""Simulated GPUs on a worker Node, and the shell that waits for the Konnectivity tunnel.

Plain data and script builders, no Pulumi. HAMi learns about a node's cards
from the `hami.io/node-nvidia-register` annotation (a JSON array, one object
per card) and only treats the node as healthy while its status advertises
`nvidia.com/gpu` capacity/allocatable > 0 (facts §8; HAMi v2.10.0
`pkg/device/devices.go` `CheckHealth` reads `status.allocatable`). The
annotation is applied with a NodePatch; the status cannot be (it is a
subresource), so a `kubectl patch --subresource=status` runs on the worker
(through `components.node_access`: docker exec or SSH) with the tenant admin
kubeconfig, which the scripts read from $TENANT_KUBECONFIG.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from components.container_exec import with_tenant_kubeconfig
from config import GpuCard

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
# Which join of the worker our patches were applied after: a rejoined worker is a fresh Node object
# without them, so a new join id must re-apply them (and re-create the smoke pod bound to the old one).
JOIN_ANNOTATION = "gpu-tenancy.io/join"
GPU_RESOURCE = "nvidia.com/gpu"
# Label the real HAMi device plugin DaemonSet selects (chart `devicePlugin.nvidiaNodeSelector`).
NVIDIA_NODE_LABEL = {"gpu": "on"}

KONNECTIVITY_AGENT = "konnectivity-agent"
KONNECTIVITY_NAMESPACE = "kube-system"
# Image pulls on a fresh kind node dominate; five minutes is generous without hiding a dead tunnel.
KONNECTIVITY_TIMEOUT_SECONDS = 300
POLL_SECONDS = 2
# Seconds `kubectl wait --for=create` gives a just-joined Node to appear.
NODE_APPEAR_TIMEOUT_SECONDS = 120


# --------------------------------------------------------------------------- #
# What the scheduler and the mock device plugin read
# --------------------------------------------------------------------------- #


def register_annotation(cards: Sequence[GpuCard]) -> str:
    """The `hami.io/node-nvidia-register` value for these cards, in configuration order.

    Field names and types follow HAMi's DeviceInfo JSON (facts §8); an unknown
    key would be ignored silently and leave an unusable card.
    """
    devices = [
        {
            "id": card.uuid,
            "index": index,
            "count": card.slots,
            "devmem": card.memory_mib,
            "devcore": card.cores,
            "type": card.model,
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for index, card in enumerate(cards)
    ]
    return json.dumps(devices, separators=(",", ":"))


def gpu_capacity(cards: Sequence[GpuCard]) -> int:
    """`nvidia.com/gpu` the node advertises: every card counted once per slot."""
    return sum(card.slots for card in cards)


def capacity_patch(capacity: int) -> dict[str, Any]:
    """Merge patch for the Node status: advertise `capacity` GPU slots (capacity and allocatable)."""
    if capacity < 1:
        raise ValueError(f"nvidia.com/gpu capacity must be at least 1, got {capacity}")
    quantity = str(capacity)
    # allocatable too: HAMi checks it, and the kubelet only copies capacity over on its next status sync.
    return {"status": {"capacity": {GPU_RESOURCE: quantity}, "allocatable": {GPU_RESOURCE: quantity}}}


def capacity_removal_patch() -> dict[str, Any]:
    """Merge patch that removes the advertised GPUs; a no-op when they are already gone."""
    return {"status": {"capacity": {GPU_RESOURCE: None}, "allocatable": {GPU_RESOURCE: None}}}


# --------------------------------------------------------------------------- #
# Scripts run on a worker with the tenant admin kubeconfig
# --------------------------------------------------------------------------- #


def _patch_status_line(node: str, patch: dict[str, Any]) -> str:
    body = json.dumps(patch, separators=(",", ":"))
    return f"kubectl patch node {node} --subresource=status --type=merge -p {shlex.quote(body)}\n"


def apply_capacity_script(node_name: str, capacity: int) -> str:
    """Advertise `capacity` GPU slots on the Node's status; idempotent (a merge patch)."""
    node = shlex.quote(node_name)
    return with_tenant_kubeconfig(
        f"kubectl wait --for=create node/{node} --timeout={NODE_APPEAR_TIMEOUT_SECONDS}s >/dev/null\n"
        + _patch_status_line(node, capacity_patch(capacity))
    )


def remove_capacity_script(node_name: str) -> str:
    """Take the advertised GPUs off the Node's status; succeeds when the Node is already gone."""
    node = shlex.quote(node_name)
    return with_tenant_kubeconfig(
        f'if [ -z "$(kubectl get node {node} --ignore-not-found -o name)" ]; then\n'
        f"  echo 'gpu-tenancy: node {node_name} is gone: no GPU capacity to remove'\n"
        "  exit 0\n"
        "fi\n" + _patch_status_line(node, capacity_removal_patch())
    )


def konnectivity_wait_script(
    expected_nodes: int,
    timeout_seconds: int = KONNECTIVITY_TIMEOUT_SECONDS,
    poll_seconds: float = POLL_SECONDS,
) -> str:
    """Wait (bounded) until Kamaji's konnectivity-agent DaemonSet runs on the joined nodes.

    Waits for the DaemonSet to exist, then until at least `expected_nodes` of
    its pods are ready (a fresh DaemonSet can still report 0 desired pods, which
    `rollout status` alone would accept), then for the rollout to finish.
    """
    if expected_nodes < 1:
        raise ValueError("the Konnectivity wait needs at least one joined node")
    ds = f"daemonset/{KONNECTIVITY_AGENT}"
    ns = KONNECTIVITY_NAMESPACE
    return with_tenant_kubeconfig(f"""\
expected={expected_nodes}
deadline=$((SECONDS + {timeout_seconds}))
remaining() {{ local left=$((deadline - SECONDS)); echo $((left > 1 ? left : 1)); }}
fail() {{
  echo "gpu-tenancy: $*" \\
    "Every call from the tenant API server into its nodes (HAMi's admission webhook included)" \\
    "goes through this tunnel, and the agent pods need the CNI." \\
    "Check: kubectl -n {ns} get ds,pods -l k8s-app={KONNECTIVITY_AGENT}" >&2
  exit 1
}}
kubectl -n {ns} wait --for=create {ds} --timeout="$(remaining)s" >/dev/null \\
  || fail "{ds} did not appear in {ns} within {timeout_seconds}s" \\
    "(is spec.addons.konnectivity set on the TenantControlPlane?)."
while :; do
  ready="$(kubectl -n {ns} get {ds} -o jsonpath='{{.status.numberReady}}')" || ready=""
  if [ "${{ready:-0}}" -ge "$expected" ]; then
    break
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    fail "{ds} has ${{ready:-0}} of $expected pods ready after {timeout_seconds}s."
  fi
  sleep {poll_seconds}
done
kubectl -n {ns} rollout status {ds} --timeout="$(remaining)s" \\
  || fail "{ds} did not finish rolling out within {timeout_seconds}s."
""")

