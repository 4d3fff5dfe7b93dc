"""Talking to Kubernetes: kubeconfigs, in-memory credentials, one error type and one client.

Everything in the project that reads a kubeconfig or calls an API server goes through here: the dynamic
providers on the Pulumi host (`components.host_operations`, the layers' `operations` modules), the management
layer (which cluster an adopted kubeconfig points at) and `make verify`; config validation reads kubeconfigs
with config/kubeconfig.py, which this module re-exports. The lifecycle simulator and verify's tests implement
`KubeClient` to stand in for a cluster.

Why this client, over the official `kubernetes` package (pinned in requirements.txt):
- The kubeconfig is loaded by the official loader (`kubernetes.config.new_client_from_config_dict`), so
  tokens, client certificates, exec and auth-provider plugins, `tls-server-name`, `proxy-url` and
  `insecure-skip-tls-verify` mean what they mean to kubectl. Only the `*-data` certificates and keys are
  handed to it as paths of anonymous memory files (`MemoryFile`), because the loader would otherwise write
  them to temporary files that stay on disk until the interpreter exits (kubernetes/config/kube_config.py
  `FileOrData.as_file` -> `_create_temp_file_with_content`).
- Requests go through the official `ApiClient` (`param_serialize` + `call_api`: its TLS pool, retries,
  proxies and bearer-token refresh), with plain JSON in and out. The typed APIs would turn objects into
  models and back, and need one class per group; the dynamic client (`kubernetes.dynamic`) first reads the
  server's discovery documents and caches them in a temporary file. The handful of kinds used here are one
  table (`RESOURCES`) of REST paths instead.

A kubeconfig is accepted as YAML text (what Pulumi outputs hold) or as the parsed mapping. Errors about a
kubeconfig never quote it: it holds credentials.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import quote

# What a kubeconfig says is read below config/ (which validates one); callers keep `kube.parse` and the rest.
from config.kubeconfig import Context, Kubeconfig, KubeconfigError, current_context
from config.kubeconfig import parse as parse

Json = dict[str, Any]

# (connect, read) seconds: a dead LoadBalancer address must not hang a provider or a verify run.
REQUEST_TIMEOUT = (5, 20)
# One retry absorbs a dropped connection without multiplying the wait on a dead endpoint.
REQUEST_RETRIES = 1

# kind -> (API path prefix, resource plural, namespaced), as the API server's discovery documents them: the core
# group under /api/v1, the others under /apis/<group>/<version>; Kamaji's CRDs are kamaji.clastix.io/v1alpha1
# (TenantControlPlane namespaced, DataStore cluster-scoped); MetalLB's metallb.io/v1beta1.
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "Secret": ("/api/v1", "secrets", True),
    "Service": ("/api/v1", "services", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "MutatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations",
                                     False),
    "TenantControlPlane": ("/apis/kamaji.clastix.io/v1alpha1", "tenantcontrolplanes", True),
    "DataStore": ("/apis/kamaji.clastix.io/v1alpha1", "datastores", False),
    "IPAddressPool": ("/apis/metallb.io/v1beta1", "ipaddresspools", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
}


# --------------------------------------------------------------------------- #
# Errors
# --------------------------------------------------------------------------- #


class ApiError(Exception):
    """A request that failed: `status` is the HTTP code, or None when no HTTP answer came back (`UnreachableError`)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no answer"
        return f"{where}: {self.message}"


class UnreachableError(ApiError):
    """Nothing answered at the API server's address (refused, timed out, TLS failed)."""

    def __init__(self, message: str) -> None:
        super().__init__(None, message)


def kubeconfig(cluster: Mapping[str, Any], user: Mapping[str, Any], *, namespace: str | None = None,
               name: str = "default", cluster_name: str = "cluster", user_name: str = "user") -> Json:
    """A kubeconfig of one context, `name`: this cluster (server, CA) reached with these user credentials."""
    context: Json = {"cluster": cluster_name, "user": user_name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": dict(cluster)}],
        "users": [{"name": user_name, "user": dict(user)}],
        "contexts": [{"name": name, "context": context}],
        "current-context": name,
    }


def admission_policy(name: str, spec: Json, match_resources: Json | None = None) -> list[Json]:
    """A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30) that fails closed,
    and the binding that makes it deny, over `match_resources` (default: everything its rules match)."""
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name}, "spec": {"failurePolicy": "Fail", **spec}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"],
                                              **({"matchResources": match_resources} if match_resources else {})}},
    ]


def positive_quantity(value: Any) -> bool:
    """A Kubernetes quantity above zero (`"0"`, `""`, None and nonsense are not): the kubelet reports a device
    plugin's resources as 0 until the plugin registers again after a restart."""
    text = str(value if value is not None else "").strip()
    digits = text.rstrip("kKMGTPEimun")
    try:
        return float(digits) > 0
    except ValueError:
        return False


# --------------------------------------------------------------------------- #
# Credentials in memory
# --------------------------------------------------------------------------- #


class MemoryFile:
    """Bytes TLS can read by path without them ever reaching a disk: an anonymous memory file (Linux
    `memfd_create`, close-on-exec so no child process inherits it); elsewhere a private temporary file,
    removed on close."""

    def __init__(self, name: str, content: bytes) -> None:
        self._temp_dir: str | None = None
        if hasattr(os, "memfd_create"):
            self._fd = os.memfd_create(name, os.MFD_CLOEXEC)
            self.path = f"/proc/self/fd/{self._fd}"
        else:
            self._temp_dir = tempfile.mkdtemp(prefix="gpu-tenancy-")
            self.path = os.path.join(self._temp_dir, name)
            self._fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.write(self._fd, content)

    def close(self) -> None:
        """Release the file; safe to repeat."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._temp_dir:
            for entry in os.listdir(self._temp_dir):
                os.remove(os.path.join(self._temp_dir, entry))
            os.rmdir(self._temp_dir)
            self._temp_dir = None


# Entries whose `<key>-data` the official loader would write to a temporary file: (entry, key).
_FILE_DATA_KEYS = (("cluster", "certificate-authority"), ("user", "client-certificate"), ("user", "client-key"))


def _in_memory(context: Context) -> tuple[Json, list[MemoryFile]]:
    """A one-context kubeconfig of `context` whose `*-data` certificates and keys are paths of memory files."""
    bodies = {"cluster": {**context.cluster, "server": context.server}, "user": dict(context.user)}
    files: list[MemoryFile] = []
    try:
        for entry, key in _FILE_DATA_KEYS:
            data = bodies[entry].pop(f"{key}-data", None)
            if not data:
                continue
            try:
                content = base64.b64decode(str(data), validate=True)
            except binascii.Error:
                owner = context.cluster_name if entry == "cluster" else context.user_name
                raise KubeconfigError(f"has a {key}-data that is not base64 (in {entry} {owner!r})") from None
            files.append(MemoryFile(key, content))
            bodies[entry][key] = files[-1].path
    except BaseException:
        for file in files:
            file.close()
        raise
    return kubeconfig(bodies["cluster"], bodies["user"], namespace=context.namespace), files


# --------------------------------------------------------------------------- #
# The client
# --------------------------------------------------------------------------- #


class KubeClient(Protocol):
    """What the project reads and writes in one cluster, as the API's JSON; every failure is an `ApiError`.

    `find` is None for a missing object (404) and `delete` False for one already gone; `create` posts to the
    collection of the object's kind and metadata.namespace (a dry run stores nothing); `patch` and `patch_status`
    send a JSON merge patch (RFC 7386) to the object or its status subresource; `evict` posts a policy/v1 Eviction
    for a pod, which the API server refuses with 429 while a PodDisruptionBudget forbids it (kubernetes
    pkg/registry/core/pod/storage/eviction.go); `close` releases connections and credentials (repeatable).
    """

    def find(self, kind: str, name: str, namespace: str | None = None) -> Json | None: ...

    def list(self, kind: str, namespace: str | None = None) -> list[Json]: ...

    def create(self, obj: Json, dry_run: bool = False) -> Json: ...

    def delete(self, kind: str, name: str, namespace: str | None = None, *,
               grace_period_seconds: int | None = None) -> bool: ...

    def patch(self, kind: str, name: str, patch: Json, namespace: str | None = None) -> Json: ...

    def patch_status(self, kind: str, name: str, patch: Json, namespace: str | None = None,
                     dry_run: bool = False) -> Json: ...

    def evict(self, name: str, namespace: str) -> None: ...

    def close(self) -> None: ...


# kubeconfig -> client of the cluster its current context names, authenticated as its user.
Connect = Callable[[Kubeconfig], KubeClient]


def path_for(kind: str, name: str = "", namespace: str | None = None) -> str:
    """The REST path of one object (or, without `name`, of the collection) of a kind in `RESOURCES`."""
    prefix, plural, namespaced = RESOURCES[kind]
    if namespace and not namespaced:
        raise ValueError(f"{kind} is cluster-scoped: no namespace {namespace!r}")
    scope = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
    return f"{prefix}{scope}/{plural}" + (f"/{quote(name, safe='')}" if name else "")


class Client:
    """`KubeClient` over the official `ApiClient`; see the module docstring. Close it (or use `with`) to release
    its connection pool and its memory files."""

    def __init__(self, api_client: Any, files: list[MemoryFile]) -> None:
        self._api = api_client
        self._files = files
        self.server: str = api_client.configuration.host

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._api.close()
        for file in self._files:
            file.close()
        self._files = []

    def request(self, method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None,
                content_type: str = "application/json") -> Json:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json", **({"Content-Type": content_type} if body is not None else {})}
        method, url, headers, body, _ = self._api.param_serialize(
            method, path, query_params=query or None, header_params=headers, body=body, auth_settings=["BearerToken"])
        try:
            response = self._api.call_api(method, url, headers, body, _request_timeout=REQUEST_TIMEOUT)
            data = response.read()
        except ApiException as error:  # the REST layer reports a failed TLS handshake as status 0
            raise UnreachableError(f"{self.server}: {' '.join(str(error.reason).split())}") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise UnreachableError(f"{self.server}: {error}") from None
        text = data.decode(errors="replace") if isinstance(data, bytes) else str(data or "")
        if response.status >= 400:
            raise ApiError(response.status, _status_message(text) or str(response.reason or "request failed"))
        try:
            return json.loads(text) if text else {}
        except ValueError:
            raise ApiError(response.status, f"{method} {path} answered with a body that is not JSON") from None

    def find(self, kind: str, name: str, namespace: str | None = None) -> Json | None:
        try:
            return self.request("GET", path_for(kind, name, namespace))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None) -> list[Json]:
        return self.request("GET", path_for(kind, "", namespace)).get("items") or []

    def create(self, obj: Json, dry_run: bool = False) -> Json:
        path = path_for(obj["kind"], "", (obj.get("metadata") or {}).get("namespace"))
        return self.request("POST", path, obj, [("dryRun", "All")] if dry_run else None)

    def delete(self, kind: str, name: str, namespace: str | None = None, *,
               grace_period_seconds: int | None = None) -> bool:
        query = [("gracePeriodSeconds", str(grace_period_seconds))] if grace_period_seconds is not None else None
        try:
            self.request("DELETE", path_for(kind, name, namespace), query=query)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def patch(self, kind: str, name: str, patch: Json, namespace: str | None = None) -> Json:
        return self.request("PATCH", path_for(kind, name, namespace), patch,
                            content_type="application/merge-patch+json")

    def patch_status(self, kind: str, name: str, patch: Json, namespace: str | None = None,
                     dry_run: bool = False) -> Json:
        return self.request("PATCH", path_for(kind, name, namespace) + "/status", patch,
                            [("dryRun", "All")] if dry_run else None, content_type="application/merge-patch+json")

    def evict(self, name: str, namespace: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        self.request("POST", path_for("Pod", name, namespace) + "/eviction", body)


def _status_message(text: str) -> str:
    """The `message` of a Kubernetes Status body and its causes' (an eviction names the refusing budget only there,
    kubernetes pkg/registry/core/pod/storage/eviction.go checkAndDecrement), else the body (a proxy's error page)."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()
    if isinstance(body, dict) and body.get("message"):
        message = str(body["message"])
        causes = (body.get("details") or {}).get("causes") or []
        return " ".join([message, *(c["message"] for c in causes if c.get("message") and c["message"] not in message)])
    return text.strip()


def connect(kubeconfig: Kubeconfig) -> Client:
    """A client of the kubeconfig's current context, built in memory: no kubeconfig, certificate or key is
    written to disk. KubeconfigError (a ValueError) when the kubeconfig cannot be used."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    loadable, files = _in_memory(current_context(kubeconfig))
    try:
        api_client = config.new_client_from_config_dict(
            loadable, persist_config=False, client_configuration=client.Configuration(retries=REQUEST_RETRIES))
    except (ConfigException, TypeError, KeyError, AttributeError, ValueError) as error:
        for file in files:
            file.close()
        raise KubeconfigError(f"is unusable: {error}") from None
    return Client(api_client, files)
