"""Kubernetes API calls made from the Pulumi host, as Pulumi dynamic resources.

Everything that talks to a tenant's API (or Kamaji's) for the program runs here, on the host that already
holds the credentials, never on a worker: minting a worker's one-time join token and removing its Node
when it leaves, waiting for the Node to register, the simulated GPU capacity on the Node status, waiting
for the Konnectivity agents, for the admission webhooks of Kamaji, MetalLB and HAMi to answer, and for the
mock device plugin's resources on a Node. One of them calls no API: `TenantVersionProvider` keeps the version of a
tenant's control plane in the state and refuses, in every preview, a change to it that cannot be made.

The calls go through `components.kube` (credentials stay in memory). Module import has no side effects:
Pulumi's dynamic-provider host imports this module by name (dill pickles the provider classes by
reference, pulumi/pulumi sdk/python/lib/pulumi/dynamic/dynamic.py `serialize_provider`), from the project
directory it runs in.
"""

from __future__ import annotations

import contextlib
import datetime
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulumi import log as pulumi_log
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult

from components import kube
from components.gpu.cards import REGISTER_ANNOTATION
from components.kube import ApiError, UnreachableError
from components.naming import GPU_RESOURCE, HAMI_SCHEDULER_NAME, JOIN_ANNOTATION, PART_OF, PART_OF_LABEL
from components.tenant import spec
from components.tenant.kube_proxy import NODE_BOOTSTRAP_TOKEN_GROUP
from config import upgrade

# --------------------------------------------------------------------------- #
# The seam: how a provider reaches an API server, and what time it is
# --------------------------------------------------------------------------- #


class Clock:
    """Real time. Tests and the lifecycle simulator give a provider another object with these two methods."""

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def poll(condition: Callable[[], str | None], clock: Clock, *, timeout: float, interval: float = 2.0) -> None:
    """Call `condition` until it returns None (done); past `timeout` seconds raise with its last answer."""
    deadline = clock.now() + datetime.timedelta(seconds=timeout)
    while True:
        waiting_for = condition()
        if waiting_for is None:
            return
        if clock.now() >= deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s: {waiting_for}")
        clock.sleep(interval)


class HostOperationProvider(ResourceProvider):
    """Base of the providers below. `connect` and `clock` are the real ones; whoever executes a provider (the
    lifecycle simulator, a test) sets others on the instance it unpickled. The pickle names the class only
    (no instance state), so nothing set here ever reaches the Pulumi state."""

    connect: kube.Connect = staticmethod(kube.connect)
    clock: Clock = Clock()

    def _api(self, kubeconfig: str) -> contextlib.closing[kube.KubeClient]:
        return contextlib.closing(self.connect(kubeconfig))


# --------------------------------------------------------------------------- #
# Join tokens (kubeadm bootstrap tokens) and Node objects
# --------------------------------------------------------------------------- #

BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"
# kubeadm's default token lifetime (`kubeadm token create --ttl`); the token is revoked as soon as the Node it
# was minted for has registered, so this only bounds a join that never happens.
TOKEN_TTL = datetime.timedelta(hours=24)
_TOKEN_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
NODE_LABEL = "gpu-tenancy.io/node"


def bootstrap_token_secret(token_id: str, token_secret: str, expiration: datetime.datetime,
                           node: str) -> dict[str, Any]:
    """The kube-system Secret kubeadm authenticates a join with (format of kubeadm's `token create`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": BOOTSTRAP_TOKEN_TYPE,
        "metadata": {
            # The API server looks tokens up by this exact name.
            "name": f"bootstrap-token-{token_id}",
            "namespace": "kube-system",
            "labels": {PART_OF_LABEL: PART_OF, NODE_LABEL: node},
        },
        "stringData": {
            "description": f"gpu-tenancy: one-time join token of node {node}",
            "token-id": token_id,
            "token-secret": token_secret,
            "expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": NODE_BOOTSTRAP_TOKEN_GROUP,
        },
    }


def _random(length: int) -> str:
    return "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(length))


@dataclass(frozen=True)
class ControlPlaneRef:
    """Where to ask whether a tenant's control plane still exists (the management cluster)."""

    kubeconfig: str
    namespace: str
    name: str


def _reissued_kubeconfig(provider: HostOperationProvider, ref: ControlPlaneRef, tenant: str, stored: str,
                         error: Exception) -> str | None:
    """The tenant's credential to use instead of `stored`, which no longer reaches it; None when the control plane
    is gone (nothing left to clean up there). Raises when the tenant is simply down.

    A control plane re-created at the same address (MetalLB hands out the first free address again) or re-keyed
    by Kamaji (status CARotating, clastix/kamaji controllers/soot/manager.go) presents a certificate the stored
    CA does not verify, so the client fails its TLS handshake: to the client that is "does not answer". The
    management cluster says which: the control plane exists and its admin Secret (the name in
    status.kubeconfig.admin.secretName, clastix/kamaji internal/resources/kubeconfig.go) holds another CA.
    """
    try:
        with provider._api(ref.kubeconfig) as management:
            tcp = management.find("TenantControlPlane", ref.name, ref.namespace)
            secret_name = ((((tcp or {}).get("status") or {}).get("kubeconfig") or {}).get("admin") or {}).get(
                "secretName") or spec.admin_kubeconfig_secret_name(ref.name)
            secret = management.find("Secret", secret_name, ref.namespace) if tcp is not None else None
    except (ApiError, kube.KubeconfigError) as mgmt_error:
        raise RuntimeError(
            f"the API of tenant {tenant} does not answer ({error}) and the management cluster cannot confirm that "
            f"its control plane is gone ({mgmt_error}); retry when one of them answers"
        ) from None
    if tcp is None:
        return None
    try:
        current = spec.decode_secret_value((secret or {}).get("data"), spec.SUPER_ADMIN_KUBECONFIG_KEY, secret_name)
        reissued = kube.current_context(current).ca_certificate() != kube.current_context(stored).ca_certificate()
    except (ValueError, kube.KubeconfigError):
        reissued = False
    if not reissued:
        raise RuntimeError(
            f"the API of tenant {tenant} does not answer ({error}) but its TenantControlPlane "
            f"{ref.namespace}/{ref.name} still exists: nothing was removed, retry when the tenant answers "
            f"(kubectl -n {ref.namespace} get tcp,pods)"
        )
    return current


def _on_tenant(provider: HostOperationProvider, props: dict[str, Any], operation: Callable[[str], None]) -> None:
    """`operation(kubeconfig)` on the tenant with the stored credential; when that no longer reaches it, with the
    credential its control plane has now (`_reissued_kubeconfig`), or not at all when the control plane is gone."""
    try:
        operation(props["kubeconfig"])
        return
    except UnreachableError as error:
        current = _reissued_kubeconfig(provider, _ref(props), props["control_plane_name"], props["kubeconfig"],
                                       error)
    if current is not None:
        operation(current)


def _ref(props: dict[str, Any]) -> ControlPlaneRef:
    return ControlPlaneRef(
        props["management_kubeconfig"], props["control_plane_namespace"], props["control_plane_name"]
    )


# --------------------------------------------------------------------------- #
# Dynamic providers
# --------------------------------------------------------------------------- #


class NodeMembershipProvider(HostOperationProvider):
    """A worker's membership of its tenant, tenant side: a one-time join token minted for the worker, and its
    Node removed when the worker leaves (after the node-side `kubeadm reset`, which depends on this resource).

    Replaced when the worker becomes another machine or the tenant another control plane; also when the token
    expired before the Node ever registered (so a join retried after a day gets a fresh token).
    """

    IDENTITY = ("node_name", "machine", "endpoint", "ca_cert_hash")

    def create(self, props: dict[str, Any]) -> CreateResult:
        node = props["node_name"]
        with self._api(props["kubeconfig"]) as tenant:
            expiration = self.clock.now() + TOKEN_TTL
            for _ in range(5):
                token_id, token_secret = _random(6), _random(16)
                try:
                    tenant.create(bootstrap_token_secret(token_id, token_secret, expiration, node))
                    break
                except ApiError as error:
                    if error.status != 409:  # an id collision: draw again
                        raise RuntimeError(f"cannot create the join token of node {node}: {error}") from None
            else:
                raise RuntimeError(f"cannot create the join token of node {node}: five id collisions")
        outs = {**props, "token": f"{token_id}.{token_secret}", "token_id": token_id,
                "expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ")}
        return CreateResult(id_=f"{node}/{token_id}", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [key for key in self.IDENTITY if olds.get(key) != news.get(key)]
        if not replaces and self._expired_unused(olds, news):
            replaces = ["expiration"]
        changes = bool(replaces) or any(olds.get(k) != news.get(k) for k in news if k != "__provider")
        return DiffResult(changes=changes, replaces=replaces, delete_before_replace=True)

    def _expired_unused(self, olds: dict[str, Any], news: dict[str, Any]) -> bool:
        expiration = olds.get("expiration")
        if not expiration or datetime.datetime.fromisoformat(expiration.replace("Z", "+00:00")) > self.clock.now():
            return False
        kubeconfig = news.get("kubeconfig")
        if not isinstance(kubeconfig, str):
            return False  # unknown in this preview: nothing to decide with
        try:
            with self._api(kubeconfig) as tenant:
                return tenant.find("Node", olds["node_name"]) is None
        except (ApiError, kube.KubeconfigError):
            return False

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        keep = {k: olds[k] for k in ("token", "token_id", "expiration") if k in olds}
        return UpdateResult(outs={**news, **keep})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        node = props["node_name"]

        def remove(kubeconfig: str) -> None:
            with self._api(kubeconfig) as tenant:
                tenant.delete("Node", node)
                tenant.delete("Secret", f"bootstrap-token-{props['token_id']}", "kube-system")

        try:
            _on_tenant(self, props, remove)
        except ApiError as error:
            raise RuntimeError(f"cannot remove Node {node} from tenant {props['control_plane_name']}: {error}") \
                from None


NODE_REGISTER_TIMEOUT = 180.0


class NodeRegistrationProvider(HostOperationProvider):
    """Waits (bounded) until the joined worker's Node object exists, then revokes its join token.

    `kubeadm join` can return before the kubelet has registered the Node; everything that patches the Node
    waits for this resource instead. Its id is `<node>/<the Node's uid>`: a rejoined worker is a fresh Node
    object (the old one was deleted with the old membership), so what depends on the id (the card patches, the
    smoke pod bound to the node) sees the change and is applied again.
    """

    def create(self, props: dict[str, Any]) -> CreateResult:
        node = props["node_name"]
        with self._api(props["kubeconfig"]) as tenant:
            uid: list[str] = []

            def registered() -> str | None:
                found = tenant.find("Node", node)
                if found is None:
                    return f"Node {node} has not registered"
                uid.append(found["metadata"]["uid"])
                return None

            try:
                poll(registered, self.clock, timeout=NODE_REGISTER_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(f"{error}: check the kubelet on the worker (journalctl -u kubelet)") from None
            tenant.delete("Secret", f"bootstrap-token-{props['token_id']}", "kube-system")
        return CreateResult(id_=f"{node}/{uid[-1]}", outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in ("node_name", "join", "token_id") if olds.get(k) != news.get(k)]
        changes = bool(replaces) or olds.get("kubeconfig") != news.get("kubeconfig")
        return DiffResult(changes=changes, replaces=replaces)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=dict(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        return None


class GpuCapacityProvider(HostOperationProvider):
    """`nvidia.com/gpu` capacity and allocatable on a Node's status (a subresource Pulumi patches cannot reach)."""

    def _patch(self, props: dict[str, Any], quantity: str | None, kubeconfig: str | None = None) -> None:
        with self._api(kubeconfig or props["kubeconfig"]) as tenant:
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
            _on_tenant(self, props, lambda kubeconfig: self._patch(props, None, kubeconfig))
        except ApiError as error:
            if error.status != 404:  # the Node is gone: nothing to take back
                raise RuntimeError(f"cannot remove the GPU capacity of {props['node_name']}: {error}") from None


KONNECTIVITY_TIMEOUT = 300.0


def _inputs_changed(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    """Any input changed but `__provider`. That one is the provider pickled by reference, so it changes whenever the
    class moves to another module (pulumi/dynamic/dynamic.py serialize_provider); without a diff of its own the
    engine would compare every input (step_generator.go diff, DIFF_UNKNOWN) and update a resource that did not."""
    return any(olds.get(key) != news.get(key) for key in {*olds, *news} - {"__provider"})


class KonnectivityReadyProvider(HostOperationProvider):
    """Waits until Kamaji's konnectivity-agent DaemonSet has a ready pod on every joined node: every call from
    the tenant API server into its nodes (HAMi's admission webhook included) goes through these agents."""

    def _wait(self, props: dict[str, Any]) -> None:
        expected = int(props["nodes"])
        with self._api(props["kubeconfig"]) as tenant:
            def ready() -> str | None:
                agents = tenant.find("DaemonSet", "konnectivity-agent", "kube-system")
                if agents is None:
                    return "daemonset/konnectivity-agent does not exist (is spec.addons.konnectivity set?)"
                have = int((agents.get("status") or {}).get("numberReady") or 0)
                return None if have >= expected else f"{have} of {expected} konnectivity agents ready"

            try:
                poll(ready, self.clock, timeout=KONNECTIVITY_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(
                    f"{error}. The agent pods need the CNI; check: kubectl -n kube-system get ds,pods "
                    "-l k8s-app=konnectivity-agent (in the tenant)") from None

    def create(self, props: dict[str, Any]) -> CreateResult:
        self._wait(props)
        return CreateResult(id_="konnectivity-agent", outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=_inputs_changed(olds, news))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self._wait(news)
        return UpdateResult(outs=dict(news))


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
        _wait_for_webhook(self, props["kubeconfig"], probe, KAMAJI_WEBHOOK_TIMEOUT,
                          "Kamaji's admission webhook does not answer",
                          "Check kubectl -n kamaji-system get pods,endpoints kamaji-webhook-service")

    def create(self, props: dict[str, Any]) -> CreateResult:
        self._wait(props)
        return CreateResult(id_="kamaji-webhook", outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=_inputs_changed(olds, news))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self._wait(news)
        return UpdateResult(outs=dict(news))


def _wait_for_webhook(provider: HostOperationProvider, kubeconfig: str, probe: dict[str, Any], timeout: float,
                      failure: str, check: str, answered: Callable[[dict[str, Any]], str | None] | None = None
                      ) -> None:
    """Send `probe` as a server-side dry run until a webhook answers: any admission answer counts (a denial too),
    a failed call to the webhook (failurePolicy Fail) or a 5xx is waited out, and `answered` may judge a success
    (None: done, else what is still missing). Past `timeout` raise `failure`, the last answer and `check`."""
    with provider._api(kubeconfig) as cluster:
        def answers() -> str | None:
            try:
                created = cluster.create(probe, dry_run=True)
            except UnreachableError:
                raise
            except ApiError as error:
                if "failed calling webhook" in error.message or (error.status or 0) >= 500:
                    return error.message
                return None
            return answered(created) if answered is not None else None

        try:
            poll(answers, provider.clock, timeout=timeout)
        except TimeoutError as error:
            raise RuntimeError(f"{failure}: {error}. {check}") from None


class _WaitProvider(HostOperationProvider):
    """A wait with nothing to delete: it runs on create and whenever an input changes (`__provider` aside)."""

    ID = ""

    def _wait(self, props: dict[str, Any]) -> None:
        raise NotImplementedError

    def create(self, props: dict[str, Any]) -> CreateResult:
        self._wait(props)
        return CreateResult(id_=self.ID, outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=_inputs_changed(olds, news))

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


class MetalLBWebhookReadyProvider(_WaitProvider):
    """Waits until MetalLB's validating webhooks (failurePolicy fail) answer a dry run of an IPAddressPool.

    The controller's readiness covers its webhook server (metallb/metallb internal/k8s/k8s.go, v0.15.3), not the
    `metallb-webhook-service` endpoints, which follow it; a failed webhook call is not retried by
    pulumi-kubernetes (provider/pkg/await/await.go retries only NotFound and NoMatch)."""

    ID = "metallb-webhook"

    def _wait(self, props: dict[str, Any]) -> None:
        _wait_for_webhook(self, props["kubeconfig"], probe_address_pool(props["namespace"], [props["addresses"]]),
                          METALLB_WEBHOOK_TIMEOUT, "MetalLB's admission webhook does not answer",
                          "Check kubectl -n metallb-system get pods,endpoints metallb-webhook-service")


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


class HamiWebhookReadyProvider(_WaitProvider):
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

        _wait_for_webhook(self, props["kubeconfig"], probe_gpu_pod(props["namespace"], props["image"]),
                          HAMI_WEBHOOK_TIMEOUT, "HAMi's admission webhook does not answer",
                          "Its Service routes only to the scheduler pod labelled hami.io/scheduler-role=leader: "
                          "kubectl -n kube-system get pods -l app.kubernetes.io/component=hami-scheduler "
                          "--show-labels, kubectl -n kube-system get endpoints hami-scheduler (in the tenant)",
                          answered=mutated)


# The mock device plugin waits 30 s between reads of its Node (Project-HAMi/mock-device-plugin v1.0.1
# internal/pkg/api/device/device.go L115-125), the kubelet publishes at its next status update, and on a rejoined
# node the plugin's image is pulled first.
GPU_PLUGIN_TIMEOUT = 180.0


def positive_quantity(value: Any) -> bool:
    """A Kubernetes quantity above zero (`"0"`, `""`, None and nonsense are not): the kubelet reports a device
    plugin's resources as 0 until the plugin registers again after a restart."""
    text = str(value if value is not None else "").strip()
    digits = text.rstrip("kKMGTPEimun")
    try:
        return float(digits) > 0
    except ValueError:
        return False


class GpuPluginReadyProvider(_WaitProvider):
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
                           if not positive_quantity(allocatable.get(key))]
                return f"Node {node} allocatable has {', '.join(missing)}" if missing else None

            try:
                poll(advertised, self.clock, timeout=GPU_PLUGIN_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(
                    f"HAMi's mock device plugin registered nothing: {error}. Check kubectl -n kube-system logs -l "
                    "app.kubernetes.io/component=hami-mock-device-plugin (in the tenant); it needs the node's "
                    "nvidia.com/gpu capacity and its hami.io/node-nvidia-register annotation") from None


# kubectl drain's default is no timeout; a blocked eviction must stop the update with the pod named instead.
DRAIN_TIMEOUT = 300.0
DRAIN_INTERVAL = 5.0  # kubectl drain retries a refused eviction after 5 s
# A static pod's mirror on the API server (kubernetes pkg/kubelet/types/pod_update.go ConfigMirrorAnnotationKey).
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


def _drained_pods(pods: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    """The pods `kubectl drain --ignore-daemonsets --delete-emptydir-data --force` evicts from `node`: all bound to
    it but DaemonSet pods (their controller ignores the cordon and would put them back) and static pods' mirrors
    (the kubelet owns them). Pods without a controller are evicted too: they would not survive the node anyway."""
    drained = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if any(owner.get("kind") == "DaemonSet" for owner in metadata.get("ownerReferences") or []):
            continue
        if MIRROR_POD_ANNOTATION in (metadata.get("annotations") or {}):
            continue
        drained.append(pod)
    return drained


def one_worker_warning(tenant: str, node: str, current: Any, wanted: Any) -> str:
    """What the preview says when the only worker of a tenant is about to be drained for an upgrade."""
    return (f"tenant {tenant} has one worker, {node}: its upgrade from {current} to {wanted} drains it, so every "
            f"workload of tenant {tenant} stops until {node} is back in service (Ready, its cards advertised). Add a "
            "worker first to keep them running")


class NodeDrainProvider(HostOperationProvider):
    """Before a worker moves to another Kubernetes version: its Node cordoned, then its pods evicted.

    Evictions go through the Eviction API, so the API server applies each pod's PodDisruptionBudget and answers
    429 while it allows no disruption (kubernetes pkg/registry/core/pod/storage/eviction.go checkAndDecrement);
    a refused eviction is retried, bounded by DRAIN_TIMEOUT, and then the update stops naming the pod. The Node
    stays cordoned, and this resource keeps its old version in the state, so the next `up` drains again and goes
    on from this worker. A first build (or a new worker) has nothing to drain; neither has a Node that is gone.
    """

    # Inputs that only say what to tell the operator; no change by themselves. The worker count is one: the diff
    # reads it from the state (olds), which a `same` step would leave at an old count.
    NOT_A_CHANGE = ("tenant",)

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=props["node_name"], outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        upgrade_planned = olds.get("version") != news.get("version")
        # The workers there while this one is drained are those of the state: a worker added in the same `up` is
        # created only after this one is back (components/tenant/tenant.py: each worker after the one before), and
        # a removed one is deleted at the end of the update. A state from before the count was kept has the config's.
        workers = olds.get("tenant_workers", news.get("tenant_workers"))
        if upgrade_planned and workers == 1:
            # Shown in the preview, and only when this drain is planned: the engine diffs every resource with a
            # state in a preview as in an update (pulumi/pulumi v3.259.0 pkg/resource/deploy/step_generator.go
            # generateSteps -> diff). The provider host runs without an engine connection (pulumi 3.272.0, as
            # pinned, sdk/python/lib/pulumi/dynamic/__main__.py get_provider configures Settings without one), so
            # pulumi.log.warn prints "warning: ..." to its stderr (sdk/python/lib/pulumi/log.py warn), which the
            # engine shows as a diagnostic of the stack (v3.259.0 sdk/go/common/resource/plugin/plugin.go runtrace,
            # not hidden for pulumi-resource-pulumi-python).
            pulumi_log.warn(one_worker_warning(str(news.get("tenant")), str(news.get("node_name")),
                                               olds.get("version"), news.get("version")))
        # A state from before the count was kept is no change for it: a running stack previews none.
        ignored = dict.fromkeys((*self.NOT_A_CHANGE, *(() if "tenant_workers" in olds else ("tenant_workers",))))
        return DiffResult(changes=_inputs_changed({**olds, **ignored}, {**news, **ignored}))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if olds.get("version") != news.get("version"):
            self._drain(news)
        return UpdateResult(outs=dict(news))

    def _drain(self, props: dict[str, Any]) -> None:
        node = props["node_name"]
        with self._api(props["kubeconfig"]) as tenant:
            if tenant.find("Node", node) is None:
                return
            tenant.patch("Node", node, {"spec": {"unschedulable": True}})
            refused: dict[str, str] = {}

            def drained() -> str | None:
                left = _drained_pods(tenant.list("Pod"), node)
                for pod in left:
                    name, namespace = pod["metadata"]["name"], pod["metadata"].get("namespace") or "default"
                    if (pod.get("metadata") or {}).get("deletionTimestamp"):
                        continue  # evicted, still terminating
                    try:
                        tenant.evict(name, namespace)
                        refused.pop(f"{namespace}/{name}", None)
                    except ApiError as error:
                        if error.status == 404:
                            continue
                        if error.status != 429:
                            raise RuntimeError(f"cannot evict pod {namespace}/{name} from Node {node}: {error}") \
                                from None
                        refused[f"{namespace}/{name}"] = error.message
                if not left:
                    return None
                return f"{len(left)} pod(s) left on Node {node}: {', '.join(sorted(refused) or ['terminating'])}"

            try:
                poll(drained, self.clock, timeout=DRAIN_TIMEOUT, interval=DRAIN_INTERVAL)
            except TimeoutError as error:
                blocking = ", ".join(f"pod {pod} ({message})" for pod, message in sorted(refused.items()))
                namespaces = sorted({pod.split("/")[0] for pod in refused}) or ["<namespace>"]
                raise RuntimeError(
                    f"the drain of Node {node} before its upgrade to {props['version']} is blocked: "
                    f"{blocking or error}. The Node stays cordoned and the worker keeps its version. Let the "
                    f"PodDisruptionBudget allow one disruption (kubectl -n {namespaces[0]} get pdb) or move the pod, "
                    f"then run `pulumi up` again: it drains this worker again and goes on from here") from None


NODE_READY_TIMEOUT = 300.0


def _quantity_value(value: Any) -> int | None:
    """A whole-number Kubernetes quantity as an int (None when absent or not a plain count)."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def cards_missing(node: dict[str, Any], cards: dict[str, Any] | None) -> str | None:
    """What of a worker's cards its Node does not show yet (None: all advertised, or no cards to wait for).

    mock: the program's own patches -- `nvidia.com/gpu` in capacity and allocatable equal to the cards' slots
    (GpuCapacityProvider; the kubelet copies each capacity entry into allocatable at its status update, kubernetes
    pkg/kubelet/nodestatus/setters.go MachineInfo), and the card annotation applied after this join (the join id
    next to it). nvidia: `nvidia.com/gpu` in allocatable above zero, which only HAMi's device plugin puts there
    (it registers the resource with the kubelet, Project-HAMi/HAMi v2.10.0
    pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go Register / ListAndWatch)."""
    if not cards:
        return None
    name = (node.get("metadata") or {}).get("name")
    status = node.get("status") or {}
    capacity = (status.get("capacity") or {}).get(GPU_RESOURCE)
    allocatable = (status.get("allocatable") or {}).get(GPU_RESOURCE)
    if cards.get("mode") == "nvidia":
        if positive_quantity(allocatable):
            return None
        return (f"Node {name} advertises no {GPU_RESOURCE} (allocatable {allocatable!r}): HAMi's device plugin has "
                f"not registered its cards there (kubectl -n kube-system get pods -o wide -l "
                f"app.kubernetes.io/component=hami-device-plugin, in the tenant)")
    wanted = int(cards["gpu"])
    missing = [f"{GPU_RESOURCE} {part} {value!r}, not {wanted}" for part, value in
               (("capacity", capacity), ("allocatable", allocatable)) if _quantity_value(value) != wanted]
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if not annotations.get(REGISTER_ANNOTATION):
        missing.append(f"no {REGISTER_ANNOTATION} annotation")
    elif annotations.get(JOIN_ANNOTATION) != cards.get("join"):
        missing.append(f"its {REGISTER_ANNOTATION} annotation is not from this join ({JOIN_ANNOTATION} "
                       f"{annotations.get(JOIN_ANNOTATION)!r}, not {cards.get('join')!r})")
    if not missing:
        return None
    return f"Node {name} does not advertise its cards: {'; '.join(missing)}"


class NodeReadyProvider(HostOperationProvider):
    """After a worker moved to another Kubernetes version: its new Node Ready, its kubelet at that version (when
    `kubelet_version` is set), its cards advertised (when `cards` is set, see `cards_missing`), then uncordoned,
    before the next worker of the tenant is drained.

    On a first build nothing waits here (the Nodes become Ready only with the CNI, which is installed after every
    worker has joined); a changed registration alone (a rejoin at the same version) waits for nothing either. What
    `cards` holds is no change by itself: it only says what to wait for when the version changes."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=props["node_name"], outs={**props, "reported": self._reported(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=_inputs_changed(
            olds, {**news, "reported": olds.get("reported"), "cards": olds.get("cards")}))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if olds.get("version") != news.get("version"):
            self._wait(news)
        return UpdateResult(outs={**news, "reported": self._reported(news)})

    def _reported(self, props: dict[str, Any]) -> str | None:
        """The kubelet version the Node reports (status.nodeInfo.kubeletVersion), for the tenant's outputs."""
        with self._api(props["kubeconfig"]) as tenant:
            found = tenant.find("Node", props["node_name"]) or {}
        return ((found.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")

    def _wait(self, props: dict[str, Any]) -> None:
        node, kubelet = props["node_name"], props.get("kubelet_version")
        uid = str(props.get("registration") or "").rpartition("/")[2]
        with self._api(props["kubeconfig"]) as tenant:
            def ready() -> str | None:
                found = tenant.find("Node", node)
                if found is None:
                    return f"Node {node} does not exist"
                if uid and (found.get("metadata") or {}).get("uid") != uid:
                    return f"Node {node} is not the one that registered after the upgrade"
                status = found.get("status") or {}
                running = ((status.get("nodeInfo") or {}).get("kubeletVersion"))
                if kubelet and running != kubelet:
                    return f"Node {node} runs kubelet {running}, not {kubelet}"
                conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
                if conditions.get("Ready") != "True":
                    return f"Node {node} is not Ready"
                return cards_missing(found, props.get("cards"))

            try:
                poll(ready, self.clock, timeout=NODE_READY_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(
                    f"{error}. The next worker is not drained until this one is back; check the kubelet on {node} "
                    "(journalctl -u kubelet) and run `pulumi up` again") from None
            if (tenant.find("Node", node) or {}).get("spec", {}).get("unschedulable"):
                tenant.patch("Node", node, {"spec": {"unschedulable": False}})


class TenantVersionProvider(HostOperationProvider):
    """The Kubernetes version of a tenant's control plane, as the stack last deployed it.

    Its diff sees the version in the state (olds) and the one the config asks for (news): the engine diffs every
    resource that has a state in a preview as well as in an update (pulumi/pulumi v3.259.0
    pkg/resource/deploy/step_generator.go generateSteps -> sg.diff -> prov.Diff), and the dynamic provider host
    hands both to this diff (sdk/python/lib/pulumi/dynamic/__main__.py Diff). A change `config.upgrade`
    refuses is raised there, so the preview fails with the config key and the allowed next step, and the tenant's
    control plane and workers, which depend on this resource, are never reached. No live cluster is asked."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=props["tenant"], outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        current, wanted = olds.get("control_plane"), news.get("control_plane")
        if isinstance(current, str) and isinstance(wanted, str):
            problem = upgrade.version_change_problem(str(news.get("version_key")), current, wanted)
            if problem is not None:
                raise ValueError(problem)
        # The key moves when tenants are reordered; only the version is a change.
        return DiffResult(changes=current != wanted)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=dict(news))


# --------------------------------------------------------------------------- #
# The resources the program declares
# --------------------------------------------------------------------------- #


# Inputs that hold credentials: secret in the state (the dynamic provider host does not accept secrets, so the
# engine marks an output secret when the input of the same name was, provider_plugin.go annotateSecrets;
# additional_secret_outputs makes sure of it).
CREDENTIAL_KEYS = ("kubeconfig", "management_kubeconfig")


class _HostOperation(Resource):
    """Base of the dynamic resources below; each gets its own type token, e.g.
    `pulumi-python:dynamic/gpu-tenancy:NodeMembership` (pulumi/dynamic/dynamic.py __init_subclass__)."""


class NodeMembership(_HostOperation, module="gpu-tenancy", name="NodeMembership"):
    pass


class NodeRegistration(_HostOperation, module="gpu-tenancy", name="NodeRegistration"):
    pass


class GpuCapacity(_HostOperation, module="gpu-tenancy", name="GpuCapacity"):
    pass


class KonnectivityReady(_HostOperation, module="gpu-tenancy", name="KonnectivityReady"):
    pass


class KamajiWebhookReady(_HostOperation, module="gpu-tenancy", name="KamajiWebhookReady"):
    pass


class MetalLBWebhookReady(_HostOperation, module="gpu-tenancy", name="MetalLBWebhookReady"):
    pass


class HamiWebhookReady(_HostOperation, module="gpu-tenancy", name="HamiWebhookReady"):
    pass


class GpuPluginReady(_HostOperation, module="gpu-tenancy", name="GpuPluginReady"):
    pass


class TenantVersion(_HostOperation, module="gpu-tenancy", name="TenantVersion"):
    pass


class NodeDrain(_HostOperation, module="gpu-tenancy", name="NodeDrain"):
    pass


class NodeReady(_HostOperation, module="gpu-tenancy", name="NodeReady"):
    pass


_RESOURCES: dict[type, type] = {
    NodeMembershipProvider: NodeMembership,
    NodeRegistrationProvider: NodeRegistration,
    GpuCapacityProvider: GpuCapacity,
    KonnectivityReadyProvider: KonnectivityReady,
    KamajiWebhookReadyProvider: KamajiWebhookReady,
    MetalLBWebhookReadyProvider: MetalLBWebhookReady,
    HamiWebhookReadyProvider: HamiWebhookReady,
    GpuPluginReadyProvider: GpuPluginReady,
    TenantVersionProvider: TenantVersion,
    NodeDrainProvider: NodeDrain,
    NodeReadyProvider: NodeReady,
}


def resource(provider: ResourceProvider, name: str, props: dict[str, Any], opts: Any,
             outputs: tuple[str, ...] = (), secret_outputs: tuple[str, ...] = ()) -> Any:
    """The dynamic resource of `provider` with `props` as inputs and `outputs` (set by the provider) readable as
    attributes; credential inputs and `secret_outputs` are secret in the state."""
    import pulumi

    credentials = [key for key in CREDENTIAL_KEYS if key in props]
    options = pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(additional_secret_outputs=[*credentials, *secret_outputs]))
    return _RESOURCES[type(provider)](provider, name, {**props, **dict.fromkeys(outputs)}, options)
