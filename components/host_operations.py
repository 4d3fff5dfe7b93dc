"""Kubernetes API calls made from the Pulumi host, as Pulumi dynamic resources.

Everything that talks to a tenant's API (or Kamaji's) for the program runs here, on the host that already
holds the credentials, never on a worker: minting a worker's one-time join token and removing its Node
when it leaves, waiting for the Node to register, the simulated GPU capacity on the Node status, waiting
for the Konnectivity agents, and waiting for Kamaji's admission webhook to answer.

The credential stays in memory: a kubeconfig's client certificate and key are handed to TLS through
anonymous in-memory files (`memfd_create`), never written to disk. Module import has no side effects:
Pulumi's dynamic-provider host imports this module by name (dill pickles the provider classes by
reference, pulumi/pulumi sdk/python/lib/pulumi/dynamic/dynamic.py `serialize_provider`), from the project
directory it runs in.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import yaml
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult

# --------------------------------------------------------------------------- #
# A small client
# --------------------------------------------------------------------------- #


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class UnreachableError(Exception):
    """Nothing answered at the API server's address (refused, timed out, TLS failed)."""


def path_for(kind: str, name: str, namespace: str | None = None) -> str:
    """The REST path of one object of the kinds this module touches."""
    plural = {"Node": "nodes", "Secret": "secrets", "DaemonSet": "daemonsets",
              "TenantControlPlane": "tenantcontrolplanes"}[kind]
    prefix = {"Node": "/api/v1", "Secret": "/api/v1", "DaemonSet": "/apis/apps/v1",
              "TenantControlPlane": "/apis/kamaji.clastix.io/v1alpha1"}[kind]
    scope = f"/namespaces/{quote(namespace)}" if namespace else ""
    return f"{prefix}{scope}/{plural}" + (f"/{quote(name)}" if name else "")


class Client:
    """JSON over the Kubernetes REST API with the `kubernetes` package's REST client (TLS, proxies)."""

    def __init__(self, kubeconfig: str, timeout: float = 20.0):
        from kubernetes.client import Configuration
        from kubernetes.client.rest import RESTClientObject

        cluster, user = _current(kubeconfig)
        self.server = cluster["server"].rstrip("/")
        configuration = Configuration(host=self.server)
        self._files: list[_MemoryFile] = []
        if cluster.get("certificate-authority-data"):
            configuration.ca_cert_data = base64.b64decode(cluster["certificate-authority-data"]).decode()
        if cluster.get("insecure-skip-tls-verify"):
            configuration.verify_ssl = False
        if cluster.get("tls-server-name"):
            configuration.tls_server_name = cluster["tls-server-name"]
        if user.get("client-certificate-data") and user.get("client-key-data"):
            cert = _MemoryFile("client-certificate", base64.b64decode(user["client-certificate-data"]))
            key = _MemoryFile("client-key", base64.b64decode(user["client-key-data"]))
            self._files += [cert, key]
            configuration.cert_file, configuration.key_file = cert.path, key.path
        self._headers = {"Accept": "application/json"}
        if user.get("token"):
            self._headers["Authorization"] = f"Bearer {user['token']}"
        self._rest = RESTClientObject(configuration)
        self._timeout = timeout

    def close(self) -> None:
        self._rest.close()
        for file in self._files:
            file.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        import urllib3

        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            response = self._rest.request(method, self.server + path, headers=headers, body=body,
                                          _request_timeout=self._timeout)
            data = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise UnreachableError(f"{self.server}: {error}") from None
        text = data.decode() if isinstance(data, bytes) else str(data or "")
        if response.status >= 400:
            try:
                message = json.loads(text).get("message", text)
            except ValueError:
                message = text
            raise ApiError(response.status, message)
        return json.loads(text) if text else {}

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.request("GET", path_for(kind, name, namespace))

    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool:
        try:
            self.get(kind, name, namespace)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def create(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        metadata = obj["metadata"]
        path = path_for(obj["kind"], "", metadata.get("namespace"))
        return self.request("POST", path + ("?dryRun=All" if dry_run else ""), obj)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete; False when it was already gone."""
        try:
            self.request("DELETE", path_for(kind, name, namespace))
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def patch_status(self, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path_for(kind, name) + "/status", patch, "application/merge-patch+json")


class _MemoryFile:
    """Bytes TLS can read by path without them ever reaching a disk: an anonymous memory file (Linux)."""

    def __init__(self, name: str, content: bytes):
        if hasattr(os, "memfd_create"):
            self._fd = os.memfd_create(name, os.MFD_CLOEXEC)
            self.path = f"/proc/self/fd/{self._fd}"
            self._temp_dir: str | None = None
        else:  # not Linux: a private temporary file, removed on close
            self._temp_dir = tempfile.mkdtemp(prefix="gpu-tenancy-")
            self.path = os.path.join(self._temp_dir, name)
            self._fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.write(self._fd, content)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._temp_dir:
            for entry in os.listdir(self._temp_dir):
                os.remove(os.path.join(self._temp_dir, entry))
            os.rmdir(self._temp_dir)
            self._temp_dir = None


def _current(kubeconfig: str) -> tuple[dict[str, Any], dict[str, Any]]:
    document = yaml.safe_load(kubeconfig)
    context = next(c["context"] for c in document["contexts"] if c["name"] == document["current-context"])
    cluster = next(c["cluster"] for c in document["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in document["users"] if u["name"] == context["user"])
    return cluster, user


# Hooks the lifecycle simulator replaces (tests/support/sim/hostapi.py): how to reach an API, what time it is,
# and how to pause between two polls.
connect: Callable[[str], Any] = Client


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def poll(condition: Callable[[], str | None], *, timeout: float, interval: float = 2.0) -> None:
    """Call `condition` until it returns None (done); past `timeout` seconds raise with its last answer."""
    deadline = now() + datetime.timedelta(seconds=timeout)
    while True:
        waiting_for = condition()
        if waiting_for is None:
            return
        if now() >= deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s: {waiting_for}")
        sleep(interval)


# --------------------------------------------------------------------------- #
# Join tokens (kubeadm bootstrap tokens) and Node objects
# --------------------------------------------------------------------------- #

BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"
BOOTSTRAP_TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
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
            "labels": {"app.kubernetes.io/part-of": "gpu-tenancy", NODE_LABEL: node},
        },
        "stringData": {
            "description": f"gpu-tenancy: one-time join token of node {node}",
            "token-id": token_id,
            "token-secret": token_secret,
            "expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": BOOTSTRAP_TOKEN_GROUP,
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


def _tenant_gone(ref: ControlPlaneRef, tenant: str, error: Exception) -> None:
    """An unreachable tenant API counts as gone only when its TenantControlPlane is gone too; else raise."""
    try:
        with connect(ref.kubeconfig) as management:
            exists = management.exists("TenantControlPlane", ref.name, ref.namespace)
    except (ApiError, UnreachableError) as mgmt_error:
        raise RuntimeError(
            f"the API of tenant {tenant} does not answer ({error}) and the management cluster cannot confirm that "
            f"its control plane is gone ({mgmt_error}); retry when one of them answers"
        ) from None
    if exists:
        raise RuntimeError(
            f"the API of tenant {tenant} does not answer ({error}) but its TenantControlPlane "
            f"{ref.namespace}/{ref.name} still exists: nothing was removed, retry when the tenant answers "
            f"(kubectl -n {ref.namespace} get tcp,pods)"
        )


def _ref(props: dict[str, Any]) -> ControlPlaneRef:
    return ControlPlaneRef(
        props["management_kubeconfig"], props["control_plane_namespace"], props["control_plane_name"]
    )


# --------------------------------------------------------------------------- #
# Dynamic providers
# --------------------------------------------------------------------------- #


class NodeMembershipProvider(ResourceProvider):
    """A worker's membership of its tenant, tenant side: a one-time join token minted for the worker, and its
    Node removed when the worker leaves (after the node-side `kubeadm reset`, which depends on this resource).

    Replaced when the worker becomes another machine or the tenant another control plane; also when the token
    expired before the Node ever registered (so a join retried after a day gets a fresh token).
    """

    IDENTITY = ("node_name", "machine", "endpoint", "ca_cert_hash")

    def create(self, props: dict[str, Any]) -> CreateResult:
        node = props["node_name"]
        with connect(props["kubeconfig"]) as tenant:
            expiration = now() + TOKEN_TTL
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
        if not expiration or datetime.datetime.fromisoformat(expiration.replace("Z", "+00:00")) > now():
            return False
        kubeconfig = news.get("kubeconfig")
        if not isinstance(kubeconfig, str):
            return False  # unknown in this preview: nothing to decide with
        try:
            with connect(kubeconfig) as tenant:
                return not tenant.exists("Node", olds["node_name"])
        except (ApiError, UnreachableError):
            return False

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        keep = {k: olds[k] for k in ("token", "token_id", "expiration") if k in olds}
        return UpdateResult(outs={**news, **keep})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        node = props["node_name"]
        try:
            with connect(props["kubeconfig"]) as tenant:
                tenant.delete("Node", node)
                tenant.delete("Secret", f"bootstrap-token-{props['token_id']}", "kube-system")
        except UnreachableError as error:
            _tenant_gone(_ref(props), props["control_plane_name"], error)
        except ApiError as error:
            raise RuntimeError(f"cannot remove Node {node} from tenant {props['control_plane_name']}: {error}") \
                from None


NODE_REGISTER_TIMEOUT = 180.0


class NodeRegistrationProvider(ResourceProvider):
    """Waits (bounded) until the joined worker's Node object exists, then revokes its join token.

    `kubeadm join` can return before the kubelet has registered the Node; everything that patches the Node
    waits for this resource instead. Its id is `<node>/<the Node's uid>`: a rejoined worker is a fresh Node
    object (the old one was deleted with the old membership), so what depends on the id (the card patches, the
    smoke pod bound to the node) sees the change and is applied again.
    """

    def create(self, props: dict[str, Any]) -> CreateResult:
        node = props["node_name"]
        with connect(props["kubeconfig"]) as tenant:
            uid: list[str] = []

            def registered() -> str | None:
                try:
                    uid.append(tenant.get("Node", node)["metadata"]["uid"])
                except ApiError as error:
                    if error.status != 404:
                        raise
                    return f"Node {node} has not registered"
                return None

            try:
                poll(registered, timeout=NODE_REGISTER_TIMEOUT)
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


GPU_RESOURCE = "nvidia.com/gpu"


class GpuCapacityProvider(ResourceProvider):
    """`nvidia.com/gpu` capacity and allocatable on a Node's status (a subresource Pulumi patches cannot reach)."""

    def _patch(self, props: dict[str, Any], quantity: str | None) -> None:
        with connect(props["kubeconfig"]) as tenant:
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
        return DiffResult(changes=changes, replaces=replaces)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self._patch(news, self._quantity(news))
        return UpdateResult(outs=dict(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        try:
            self._patch(props, None)
        except ApiError as error:
            if error.status != 404:  # the Node is gone: nothing to take back
                raise RuntimeError(f"cannot remove the GPU capacity of {props['node_name']}: {error}") from None
        except UnreachableError as error:
            _tenant_gone(_ref(props), props["control_plane_name"], error)


KONNECTIVITY_TIMEOUT = 300.0


class KonnectivityReadyProvider(ResourceProvider):
    """Waits until Kamaji's konnectivity-agent DaemonSet has a ready pod on every joined node: every call from
    the tenant API server into its nodes (HAMi's admission webhook included) goes through these agents."""

    def _wait(self, props: dict[str, Any]) -> None:
        expected = int(props["nodes"])
        with connect(props["kubeconfig"]) as tenant:
            def ready() -> str | None:
                try:
                    status = tenant.get("DaemonSet", "konnectivity-agent", "kube-system").get("status") or {}
                except ApiError as error:
                    if error.status == 404:
                        return "daemonset/konnectivity-agent does not exist (is spec.addons.konnectivity set?)"
                    raise
                have = int(status.get("numberReady") or 0)
                return None if have >= expected else f"{have} of {expected} konnectivity agents ready"

            try:
                poll(ready, timeout=KONNECTIVITY_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(
                    f"{error}. The agent pods need the CNI; check: kubectl -n kube-system get ds,pods "
                    "-l k8s-app=konnectivity-agent (in the tenant)") from None

    def create(self, props: dict[str, Any]) -> CreateResult:
        self._wait(props)
        return CreateResult(id_="konnectivity-agent", outs=dict(props))

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


class KamajiWebhookReadyProvider(ResourceProvider):
    """Waits until Kamaji's TenantControlPlane webhooks (failurePolicy Fail) answer a server-side dry run.

    Kamaji's readiness probe is a plain ping (clastix/kamaji cmd/manager/cmd.go `AddReadyzCheck("readyz",
    healthz.Ping)`), so a finished Helm release does not prove the webhook serves yet. Any answer from the
    webhook counts, an admission denial included; only a failed call to it is waited out.
    """

    def _wait(self, props: dict[str, Any]) -> None:
        probe = probe_control_plane(props["namespace"], props["datastore"], props["version"])
        with connect(props["kubeconfig"]) as management:
            def answers() -> str | None:
                try:
                    management.create(probe, dry_run=True)
                except ApiError as error:
                    if "failed calling webhook" in error.message or error.status >= 500:
                        return error.message
                return None

            try:
                poll(answers, timeout=KAMAJI_WEBHOOK_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(f"Kamaji's admission webhook does not answer: {error}. Check kubectl -n "
                                   "kamaji-system get pods,endpoints kamaji-webhook-service") from None

    def create(self, props: dict[str, Any]) -> CreateResult:
        self._wait(props)
        return CreateResult(id_="kamaji-webhook", outs=dict(props))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self._wait(news)
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


_RESOURCES: dict[type, type] = {
    NodeMembershipProvider: NodeMembership,
    NodeRegistrationProvider: NodeRegistration,
    GpuCapacityProvider: GpuCapacity,
    KonnectivityReadyProvider: KonnectivityReady,
    KamajiWebhookReadyProvider: KamajiWebhookReady,
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
