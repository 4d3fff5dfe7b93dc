"""The management layer's waits, from the Pulumi host (dynamic resources, see components/host_operations.py): until
Kamaji's webhook (KamajiWebhookReady) and MetalLB's (MetalLBWebhookReady) answer on the management cluster."""

from __future__ import annotations

from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, UpdateResult

from components.host_operations import (
    HostOperationProvider,
    WaitProvider,
    declare,
    inputs_changed,
    wait_for_webhook,
)

KAMAJI_WEBHOOK_TIMEOUT = 180.0


def probe_control_plane(namespace: str, datastore: str, version: str) -> dict[str, Any]:
    """A TenantControlPlane that is only ever sent as a server-side dry run, to see Kamaji's webhooks answer."""
    return {
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "TenantControlPlane",
        "metadata": {"name": "gpu-tenancy-webhook-probe", "namespace": namespace},
        "spec": {
            "dataStore": datastore,
            "controlPlane": {"deployment": {"replicas": 1}, "service": {"serviceType": "ClusterIP"}},
            "kubernetes": {"version": version, "kubelet": {"cgroupfs": "systemd"}},
        },
    }


class KamajiWebhookReadyProvider(HostOperationProvider):
    """Waits until Kamaji's TenantControlPlane webhooks (failurePolicy Fail) answer a server-side dry run.

    Kamaji's readiness probe is a plain ping (clastix/kamaji cmd/manager/cmd.go `AddReadyzCheck("readyz",
    healthz.Ping)`), so a finished Helm release does not prove the webhook serves yet. Any answer from the
    webhook counts, an admission denial included; only a failed call to it is waited out.
    """

    def _wait(self, props: dict[str, Any]) -> None:
        probe = probe_control_plane(props["namespace"], props["datastore"], props["version"])
        wait_for_webhook(self, props["kubeconfig"], probe, KAMAJI_WEBHOOK_TIMEOUT,
                          "Kamaji's admission webhook does not answer",
                          "Check kubectl -n kamaji-system get pods,endpoints kamaji-webhook-service")

    def create(self, props: dict[str, Any]) -> CreateResult:
        self._wait(props)
        return CreateResult(id_="kamaji-webhook", outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=inputs_changed(olds, news))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self._wait(news)
        return UpdateResult(outs=dict(news))


METALLB_WEBHOOK_TIMEOUT = 120.0


def probe_address_pool(namespace: str, addresses: list[str]) -> dict[str, Any]:
    """An IPAddressPool only ever sent as a server-side dry run, to see MetalLB's webhook answer (an overlap with
    the stack's own pool is a denial, which counts as an answer)."""
    return {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": "gpu-tenancy-webhook-probe", "namespace": namespace},
        "spec": {"addresses": list(addresses), "autoAssign": False},
    }


class MetalLBWebhookReadyProvider(WaitProvider):
    """Waits until MetalLB's validating webhooks (failurePolicy fail) answer a dry run of an IPAddressPool.

    The controller's readiness covers its webhook server (metallb/metallb internal/k8s/k8s.go, v0.15.3), not the
    `metallb-webhook-service` endpoints, which follow it; a failed webhook call is not retried by
    pulumi-kubernetes (provider/pkg/await/await.go retries only NotFound and NoMatch)."""

    ID = "metallb-webhook"

    def _wait(self, props: dict[str, Any]) -> None:
        wait_for_webhook(self, props["kubeconfig"], probe_address_pool(props["namespace"], [props["addresses"]]),
                          METALLB_WEBHOOK_TIMEOUT, "MetalLB's admission webhook does not answer",
                          "Check kubectl -n metallb-system get pods,endpoints metallb-webhook-service")


# --------------------------------------------------------------------------- #
# The resources the program declares
# --------------------------------------------------------------------------- #

KamajiWebhookReady = declare(KamajiWebhookReadyProvider, "KamajiWebhookReady")
MetalLBWebhookReady = declare(MetalLBWebhookReadyProvider, "MetalLBWebhookReady")

