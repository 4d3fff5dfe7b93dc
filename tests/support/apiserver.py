"""A local Kubernetes-shaped API server over HTTPS that requires client certificates, for the real client.

`ApiServer` resolves paths with Kubernetes' URL conventions (core group under /api/v1, others under
/apis/<group>/<version>, namespaced objects under /namespaces/<ns>), answers errors with a `Status` object,
lists collections, honours `?dryRun=All`, applies JSON merge patches (RFC 7386) to the status subresource, and
records every request with the identity of the client certificate that made it. Used by tests/test_kube.py
(the client itself) and tests/test_host_operations.py (the dynamic providers over the real client).
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import ssl
import sys
import threading
import uuid
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml
from cryptography import x509

from tests.support.sim import pki

# REST resources by kind: (apiVersion, plural, namespaced), as the API server's discovery documents them
# (`kubectl api-resources`; Kamaji's CRDs: kamaji.clastix.io/v1alpha1, TenantControlPlane namespaced, DataStore not;
# MetalLB's metallb.io/v1beta1 IPAddressPool, namespaced).
RESOURCES = {
    "Node": ("v1", "nodes", False),
    "Pod": ("v1", "pods", True),
    "Secret": ("v1", "secrets", True),
    "Service": ("v1", "services", True),
    "DaemonSet": ("apps/v1", "daemonsets", True),
    "Deployment": ("apps/v1", "deployments", True),
    "NetworkPolicy": ("networking.k8s.io/v1", "networkpolicies", True),
    "MutatingWebhookConfiguration": ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", False),
    "TenantControlPlane": ("kamaji.clastix.io/v1alpha1", "tenantcontrolplanes", True),
    "DataStore": ("kamaji.clastix.io/v1alpha1", "datastores", False),
    "IPAddressPool": ("metallb.io/v1beta1", "ipaddresspools", True),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets", True),
    "ResourceQuota": ("v1", "resourcequotas", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
}
_PLURALS = {(api_version, plural): kind for kind, (api_version, plural, _) in RESOURCES.items()}
_CORE = re.compile(r"^/api/(?P<version>v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?"
                   r"(?P<sub>/status|/eviction)?$")
_GROUP = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)"
                    r"(?:/(?P<name>[^/]+))?(?P<sub>/status|/eviction)?$")


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: Message  # case-insensitive, as HTTP header names are
    body: Any
    user: str
    groups: tuple[str, ...]


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class ApiServer:
    """Kubernetes-shaped REST over HTTPS; TLS requires a client certificate signed by `ca`."""

    def __init__(self, ca: pki.CertificateAuthority, directory: Path):
        self.ca = ca
        cert, key = ca.issue_server([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                     x509.DNSName("tenant.example")])
        (directory / "server.crt").write_bytes(cert)
        (directory / "server.key").write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(directory / "server.crt", directory / "server.key")
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=ca.pem.decode())
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.requests: list[Seen] = []
        self.faults: list[tuple[str, str, int, str]] = []
        self.handshake_errors: list[BaseException] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: polls reuse one TLS connection
            disable_nagle_algorithm = True  # headers and body leave at once (no delayed-ACK stalls)

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                subject = self.request.getpeercert()["subject"]
                names = [(k, v) for rdn in subject for k, v in rdn]
                seen = Seen(self.command, url.path, parse_qs(url.query), self.headers,
                            json.loads(raw) if raw else None,
                            next(v for k, v in names if k == "commonName"),
                            tuple(v for k, v in names if k == "organizationName"))
                api.requests.append(seen)
                code, body = api.answer(seen)
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = _serve  # noqa: N815 (http.server names them so)

            def log_message(self, *args: object) -> None:
                return None

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def finish_request(self, request, client_address):  # TLS handshake in the request's thread
                super().finish_request(context.wrap_socket(request, server_side=True), client_address)

            def handle_error(self, request, client_address):
                api.handshake_errors.append(sys.exc_info()[1])

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        self.objects.clear()
        self.requests.clear()
        self.faults.clear()
        self.handshake_errors.clear()

    # -- test helpers ------------------------------------------------------ #

    def kubeconfig(self, user: str = "kubernetes-admin", groups: tuple[str, ...] = ("kubeadm:cluster-admins",)) -> str:
        return pki.kubeconfig(self.url, self.ca, user, groups, "tenant-a")

    def fail(self, method: str, path_prefix: str, code: int, message: str | dict[str, Any]) -> None:
        """Answer the next `method` request under `path_prefix` with `code` (once): a Status of `message`, or
        `message` itself when it is a page (starts with "<") or a whole Status."""
        self.faults.append((method, path_prefix, code, message))

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        api_version, _plural, namespaced = RESOURCES[obj["kind"]]
        assert obj["apiVersion"] == api_version
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("uid", str(uuid.uuid4()))
        self.objects[(obj["kind"], metadata.get("namespace") if namespaced else None, metadata["name"])] = obj
        return obj

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    def called(self, method: str) -> list[Seen]:
        return [seen for seen in self.requests if seen.method == method]

    # -- the API ----------------------------------------------------------- #

    def answer(self, seen: Seen) -> tuple[int, Any]:
        for fault in self.faults:
            method, prefix, code, message = fault
            if method == seen.method and seen.path.startswith(prefix):
                self.faults.remove(fault)
                if isinstance(message, dict) or message.startswith("<"):
                    return code, message
                return code, status(code, "Fault", message)
        match = _CORE.match(seen.path) or _GROUP.match(seen.path)
        if not match:
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        parts = match.groupdict()
        api_version = f"{parts['group']}/{parts['version']}" if parts.get("group") else parts["version"]
        kind = _PLURALS.get((api_version, parts["plural"]))
        if kind is None or (parts["ns"] and not RESOURCES[kind][2]):
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        namespace, name, plural = parts["ns"], parts["name"], parts["plural"]
        if RESOURCES[kind][2] and name is not None and not namespace:
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        key = (kind, namespace, name)
        if seen.method == "GET" and name is None:  # a list: of one namespace, or of all of them
            items = [obj for (k, ns, _), obj in self.objects.items() if k == kind and namespace in (None, ns)]
            return 200, {"kind": f"{kind}List", "apiVersion": api_version, "metadata": {}, "items": items}
        if seen.method == "POST" and name is None:
            body = seen.body or {}
            if body.get("apiVersion") != api_version or body.get("kind") != kind:
                return 400, status(400, "BadRequest", f"the API version/kind in the body does not match {plural}")
            if body.get("metadata", {}).get("namespace", namespace) != namespace:
                return 400, status(400, "BadRequest", "the namespace of the object does not match the request")
            key = (kind, namespace, body["metadata"]["name"])
            if key in self.objects:
                return 409, status(409, "AlreadyExists", f'{plural} "{key[2]}" already exists')
            created = json.loads(json.dumps(body))
            created["metadata"].update({"uid": str(uuid.uuid4())} | ({"namespace": namespace} if namespace else {}))
            if "dryRun" not in seen.query:
                self.objects[key] = created
            return 201, created
        if name is None:
            return 405, status(405, "MethodNotAllowed", "the server does not allow this method")
        if key not in self.objects:
            return 404, status(404, "NotFound", f'{plural} "{name}" not found')
        if seen.method == "GET" and not parts["sub"]:
            return 200, self.objects[key]
        if seen.method == "DELETE" and not parts["sub"]:
            del self.objects[key]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if seen.method == "POST" and parts["sub"] == "/eviction" and kind == "Pod":
            del self.objects[key]  # no PodDisruptionBudget here (a test makes one refuse with `fail`)
            return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if seen.method == "PATCH" and not parts["sub"]:
            if seen.headers.get("Content-Type") != "application/merge-patch+json":
                return 415, status(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
            self.objects[key] = merge_patch(self.objects[key], seen.body or {})
            return 200, self.objects[key]
        if seen.method == "PATCH" and parts["sub"] == "/status":
            if seen.headers.get("Content-Type") != "application/merge-patch+json":
                return 415, status(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
            obj = self.objects[key]
            obj["status"] = merge_patch(obj.get("status", {}), (seen.body or {}).get("status", {}))
            return 200, obj
        return 405, status(405, "MethodNotAllowed", "the server does not allow this method")


def clear_proxies(monkeypatch) -> None:
    """The client honours HTTPS_PROXY; a local server is reached directly."""
    for name in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def dead_url() -> str:
    """An address where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"https://127.0.0.1:{port}"


def with_cluster(kubeconfig: str, **cluster: Any) -> str:
    document = yaml.safe_load(kubeconfig)
    document["clusters"][0]["cluster"].update(cluster)
    return yaml.safe_dump(document)


def with_user(kubeconfig: str, user: dict[str, Any]) -> str:
    document = yaml.safe_load(kubeconfig)
    document["users"][0]["user"] = user
    return yaml.safe_dump(document)
