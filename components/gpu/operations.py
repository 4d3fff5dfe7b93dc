"""The GPU layer's operations on a tenant's API, from the Pulumi host (dynamic resources, see
components/host_operations.py): the simulated GPU capacity on a Node's status (GpuCapacity), and waiting for
HAMi's admission webhook to answer (HamiWebhookReady) and for the device plugin's resources on a Node
(GpuPluginReady)."""

from __future__ import annotations

from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, UpdateResult

from components import kube
from components.gpu.cards import NVIDIA_NODE_LABEL
from components.host_operations import (
    HostOperationProvider,
    WaitProvider,
    declare,
    on_tenant,
    poll,
    wait_for_webhook,
)
from components.kube import ApiError
from naming import GPU_RESOURCE, HAMI_SCHEDULER_NAME


class GpuCapacityProvider(HostOperationProvider):
    """`nvidia.com/gpu` capacity and allocatable on a Node's status (a subresource Pulumi patches cannot reach)."""

    def _patch(self, props: dict[str, Any], quantity: str | None, kubeconfig: str | None = None) -> None:
        with self._api(kubeconfig or props["kubeconfig"]) as tenant:
            labels = ((tenant.find("Node", props["node_name"]) or {}).get("metadata") or {}).get("labels") or {}
            if quantity is None and NVIDIA_NODE_LABEL.items() <= labels.items():
                # HAMi's device plugin serves this Node now (gpuMode nvidia): the count is the kubelet's, and a
                # 0 makes HAMi's scheduler drop the node (HAMi v2.10.0 pkg/device/nvidia/device.go CheckHealth).
                return
            tenant.patch_status("Node", props["node_name"],
                                {"status": {"capacity": {GPU_RESOURCE: quantity},
                                            "allocatable": {GPU_RESOURCE: quantity}}})

    @staticmethod
    def _quantity(props: dict[str, Any]) -> str:
        # Numbers reach a dynamic provider as floats (protobuf Struct), and "10.0" is not a Kubernetes quantity.
        capacity = int(props["capacity"])
        if capacity < 1:
            raise RuntimeError(f"nvidia.com/gpu capacity must be at least 1, got {capacity}")
        return str(capacity)

    def create(self, props: dict[str, Any]) -> CreateResult:
        self._patch(props, self._quantity(props))
        return CreateResult(id_=props["node_name"], outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in ("node_name", "registration") if olds.get(k) != news.get(k)]
        changes = bool(replaces) or any(olds.get(k) != news.get(k) for k in ("capacity", "kubeconfig"))
        if not changes and self._lost(news):
            changes = True
        return DiffResult(changes=changes, replaces=replaces)

    def _lost(self, props: dict[str, Any]) -> bool:
        """The Node no longer shows the capacity this resource applied (a status write that did not last, or one
        undone by hand): the update applies it again, so an upgrade stopped at `<node>-ready` for it goes on with
        the next `up`. Without known credentials (a first preview), a Node or an answer: no opinion."""
        kubeconfig = props.get("kubeconfig")
        if not isinstance(kubeconfig, str):
            return False
        try:
            wanted = self._quantity(props)
            with self._api(kubeconfig) as tenant:
                found = tenant.find("Node", props["node_name"])
        except (ApiError, kube.KubeconfigError, RuntimeError, TypeError, ValueError):
            return False
        if found is None:
            return False
        status = found.get("status") or {}
        return any(str((status.get(part) or {}).get(GPU_RESOURCE)) != wanted for part in ("capacity", "allocatable"))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self._patch(news, self._quantity(news))
        return UpdateResult(outs=dict(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        try:
            on_tenant(self, props, lambda kubeconfig: self._patch(props, None, kubeconfig))
        except ApiError as error:
            if error.status != 404:  # the Node is gone: nothing to take back
                raise RuntimeError(f"cannot remove the GPU capacity of {props['node_name']}: {error}") from None


HAMI_WEBHOOK_TIMEOUT = 120.0


def probe_gpu_pod(namespace: str, image: str) -> dict[str, Any]:
    """A pod asking for one GPU, only ever sent as a server-side dry run (HAMi's webhook is sideEffects None, so
    dry runs reach it), to see HAMi's webhook mutate it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-tenancy-webhook-probe", "namespace": namespace},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe", "image": image,
                "resources": {"limits": {GPU_RESOURCE: "1"}},
                "securityContext": {"privileged": False, "allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }


class HamiWebhookReadyProvider(WaitProvider):
    """Waits until HAMi's webhook (failurePolicy Fail) mutates a dry run of a GPU pod: nothing it must admit (the
    smoke pod, a user's first pod) is created before.

    HAMi's webhook Service selects only the scheduler pod labelled `hami.io/scheduler-role: leader`
    (Project-HAMi/HAMi v2.10.0 charts/hami/templates/scheduler/service.yaml), a label the scheduler patches onto
    itself on its 15 s register tick (pkg/scheduler/scheduler.go L420-453), while its readiness probe answers 200
    from the start (routes/route.go ReadyzRoute): a finished Helm release does not prove the webhook serves.
    Done when the answer carries HAMi's schedulerName; its inputs carry the release's revision and the nodes'
    registrations, so it runs again after every HAMi upgrade and rejoin."""

    ID = "hami-webhook"

    def _wait(self, props: dict[str, Any]) -> None:
        def mutated(pod: dict[str, Any]) -> str | None:
            scheduler = (pod.get("spec") or {}).get("schedulerName")
            return None if scheduler == HAMI_SCHEDULER_NAME else \
                f"HAMi's webhook did not mutate a GPU pod (schedulerName {scheduler!r})"

        wait_for_webhook(self, props["kubeconfig"], probe_gpu_pod(props["namespace"], props["image"]),
                          HAMI_WEBHOOK_TIMEOUT, "HAMi's admission webhook does not answer",
                          "Its Service routes only to the scheduler pod labelled hami.io/scheduler-role=leader: "
                          "kubectl -n kube-system get pods -l app.kubernetes.io/component=hami-scheduler "
                          "--show-labels, kubectl -n kube-system get endpoints hami-scheduler (in the tenant)",
                          answered=mutated)


# The mock device plugin waits 30 s between reads of its Node (Project-HAMi/mock-device-plugin v1.0.1
# internal/pkg/api/device/device.go L115-125), the kubelet publishes at its next status update, and on a rejoined
# node the plugin's image is pulled first.
GPU_PLUGIN_TIMEOUT = 180.0


class GpuPluginReadyProvider(WaitProvider):
    """Waits (bounded) until a Node's allocatable shows each of `resources` above zero: the mock device plugin
    registered there. Its inputs carry the Node's registration and HAMi's release revision, so it runs again
    after a rejoin and an upgrade."""

    ID = "gpu-plugin"

    def _wait(self, props: dict[str, Any]) -> None:
        node, resources = props["node_name"], list(props["resources"])
        with self._api(props["kubeconfig"]) as tenant:
            def advertised() -> str | None:
                found = tenant.find("Node", node)
                if found is None:
                    return f"Node {node} does not exist"
                allocatable = (found.get("status") or {}).get("allocatable") or {}
                missing = [f"{key}={allocatable.get(key)!r}" for key in resources
                           if not kube.positive_quantity(allocatable.get(key))]
                return f"Node {node} allocatable has {', '.join(missing)}" if missing else None

            try:
                poll(advertised, self.clock, timeout=GPU_PLUGIN_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(
                    f"HAMi's mock device plugin registered nothing: {error}. Check kubectl -n kube-system logs -l "
                    "app.kubernetes.io/component=hami-mock-device-plugin (in the tenant); it needs the node's "
                    "nvidia.com/gpu capacity and its hami.io/node-nvidia-register annotation") from None


# --------------------------------------------------------------------------- #
# The resources the program declares
# --------------------------------------------------------------------------- #

GpuCapacity = declare(GpuCapacityProvider, "GpuCapacity")
HamiWebhookReady = declare(HamiWebhookReadyProvider, "HamiWebhookReady")
GpuPluginReady = declare(GpuPluginReadyProvider, "GpuPluginReady")

