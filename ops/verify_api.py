"""The narrow Kubernetes API that `make verify` needs, and its implementation over the official client.

The checks in `ops.verify_checks` only see `KubeApi`: objects come back as plain
dicts shaped exactly like the API's JSON, and every failure is an `ApiError`.
Tests substitute a fake built from recorded objects; `connect` is the real thing.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from components.host_operations import _MemoryFile

# TenantControlPlane: kamaji.clastix.io/v1alpha1, plural tenantcontrolplanes (vendored CRD);
# DataStore: same group and version, cluster-scoped, plural datastores.
KAMAJI_GROUP = "kamaji.clastix.io"
KAMAJI_VERSION = "v1alpha1"
TCP_PLURAL = "tenantcontrolplanes"
DATASTORE_PLURAL = "datastores"
# kubeconfig entries whose `<key>-data` the official loader would write to a temporary file
# (kubernetes/config/kube_config.py FileOrData.as_file -> _create_temp_file_with_content).
_FILE_DATA_KEYS = (
    ("clusters", "cluster", "certificate-authority"),
    ("users", "user", "client-certificate"),
    ("users", "user", "client-key"),
)
# (connect, read) seconds: a dead LoadBalancer IP must not hang the whole run.
REQUEST_TIMEOUT = (5, 20)
# One retry absorbs a dropped connection without multiplying the wait on a dead endpoint.
REQUEST_RETRIES = 1

Json = dict[str, Any]


class ApiError(Exception):
    """A request that failed: `status` is the HTTP code, or None when no HTTP answer came back."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no answer"
        return f"{where}: {self.message}"


class KubeApi(Protocol):
    """What the checks read and write in one cluster, as the API's JSON."""

    def get_tenant_control_plane(self, namespace: str, name: str) -> Json | None: ...

    def get_datastore(self, name: str) -> Json | None: ...

    def list_network_policies(self, namespace: str) -> list[Json]: ...

    def list_nodes(self) -> list[Json]: ...

    def read_daemon_set(self, namespace: str, name: str) -> Json | None: ...

    def read_deployment(self, namespace: str, name: str) -> Json | None: ...

    def read_mutating_webhook_configuration(self, name: str) -> Json | None: ...

    def create_pod(self, namespace: str, pod: Json) -> Json: ...

    def read_pod(self, namespace: str, name: str) -> Json | None: ...

    def delete_pod(self, namespace: str, name: str) -> None: ...

    def close(self) -> None: ...


# kubeconfig (parsed YAML) -> API of the cluster it points at, authenticated as its user.
# Raises ValueError when the kubeconfig is unusable.
Connect = Callable[[Json], KubeApi]


def _status_message(error: ApiException) -> str:
    """The `message` of the Kubernetes Status body, else the HTTP reason."""
    try:
        body = json.loads(error.body or "")
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(error.reason or error.body or "request failed")


def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Json:
    try:
        response = method(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    except ApiException as error:
        # The client reports TLS failures as status 0: no HTTP answer either.
        raise ApiError(error.status or None, _status_message(error)) from None
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise ApiError(None, str(error)) from None
    return json.loads(response.data)


def _get(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Json | None:
    try:
        return _call(method, *args, **kwargs)
    except ApiError as error:
        if error.status == 404:
            return None
        raise


class KubernetesApi:
    """`KubeApi` over the official `kubernetes` client; raw JSON, no model deserialization."""

    def __init__(self, api_client: client.ApiClient, files: list[_MemoryFile] | None = None) -> None:
        self._client = api_client
        # The kubeconfig's certificates and key as anonymous memory files, read by path at each TLS handshake.
        self._files = list(files or [])
        self._core = client.CoreV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._networking = client.NetworkingV1Api(api_client)
        self._admission = client.AdmissionregistrationV1Api(api_client)

    def get_tenant_control_plane(self, namespace: str, name: str) -> Json | None:
        return _get(self._custom.get_namespaced_custom_object, KAMAJI_GROUP, KAMAJI_VERSION, namespace,
                    TCP_PLURAL, name)

    def get_datastore(self, name: str) -> Json | None:
        return _get(self._custom.get_cluster_custom_object, KAMAJI_GROUP, KAMAJI_VERSION, DATASTORE_PLURAL, name)

    def list_network_policies(self, namespace: str) -> list[Json]:
        return _call(self._networking.list_namespaced_network_policy, namespace).get("items") or []

    def list_nodes(self) -> list[Json]:
        return _call(self._core.list_node).get("items") or []

    def read_daemon_set(self, namespace: str, name: str) -> Json | None:
        return _get(self._apps.read_namespaced_daemon_set, name, namespace)

    def read_deployment(self, namespace: str, name: str) -> Json | None:
        return _get(self._apps.read_namespaced_deployment, name, namespace)

    def read_mutating_webhook_configuration(self, name: str) -> Json | None:
        return _get(self._admission.read_mutating_webhook_configuration, name)

    def create_pod(self, namespace: str, pod: Json) -> Json:
        return _call(self._core.create_namespaced_pod, namespace, pod)

    def read_pod(self, namespace: str, name: str) -> Json | None:
        return _get(self._core.read_namespaced_pod, name, namespace)

    def delete_pod(self, namespace: str, name: str) -> None:
        # Already gone is fine: deletion must be safe to repeat.
        _get(self._core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)

    def close(self) -> None:
        """Drop the connection pool and the memory files; safe to repeat."""
        self._client.close()
        for file in self._files:
            file.close()
        self._files = []


def _data_in_memory(kubeconfig: Json) -> tuple[Json, list[_MemoryFile]]:
    """A copy of the kubeconfig whose `*-data` certificates and keys are paths of anonymous memory files.

    The official loader writes `client-key-data` and friends to temporary files (left on disk until the
    interpreter exits); given a path instead it only reads it.
    """
    copied = copy.deepcopy(kubeconfig)
    files: list[_MemoryFile] = []
    try:
        for section, inner, key in _FILE_DATA_KEYS:
            for entry in copied.get(section) or []:
                body = entry.get(inner) if isinstance(entry, Mapping) else None
                if not isinstance(body, dict) or not body.get(f"{key}-data"):
                    continue
                try:
                    content = base64.b64decode(str(body.pop(f"{key}-data")))
                except ValueError:  # binascii.Error
                    raise ValueError(
                        f"unusable kubeconfig: {key}-data of {entry.get('name')!r} is not base64") from None
                files.append(_MemoryFile(key, content))
                body[key] = files[-1].path
    except BaseException:
        for file in files:
            file.close()
        raise
    return copied, files


def connect(kubeconfig: Json) -> KubernetesApi:
    """A client for the kubeconfig's current context, built in memory: no kubeconfig, certificate or key is
    written to disk. Close the result to release its memory files."""
    if not isinstance(kubeconfig, Mapping):
        raise ValueError("unusable kubeconfig: not a mapping")
    configuration = client.Configuration(retries=REQUEST_RETRIES)
    loadable, files = _data_in_memory(dict(kubeconfig))
    try:
        api_client = config.new_client_from_config_dict(
            loadable, persist_config=False, client_configuration=configuration
        )
    except (ConfigException, TypeError, KeyError, AttributeError) as error:
        for file in files:
            file.close()
        raise ValueError(f"unusable kubeconfig: {error}") from None
    return KubernetesApi(api_client, files)
