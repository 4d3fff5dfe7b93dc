"""`components.host_operations`: the real `Client` against a local HTTPS API server that requires client certificates,
and the dynamic providers' create/diff/update/delete run against that server with a fake clock.

The server (`ApiServer`) is a small Kubernetes-like REST API: it resolves paths with Kubernetes' URL conventions
(core group under /api/v1, others under /apis/<group>/<version>, namespaced objects under /namespaces/<ns>),
answers errors with a `Status` object, honours `?dryRun=All`, applies JSON merge patches (RFC 7386) to the status
subresource, and records every request with the identity of the client certificate that made it.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import re
import socket
import ssl
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from cryptography import x509
from pulumi.output import Unknown

from components import host_operations
from tests.support.crd_schema import crd_json_schema, schema_errors
from tests.support.sim import pki

# --------------------------------------------------------------------------- #
# Upstream facts
# --------------------------------------------------------------------------- #

# kubeadm token docs and k8s.io/cluster-bootstrap token/api/types.go: a token is "[a-z0-9]{6}.[a-z0-9]{16}", kept
# in a kube-system Secret of type bootstrap.kubernetes.io/token named "bootstrap-token-<token-id>"; extra groups
# must match BootstrapGroupPattern; expiration is RFC 3339 (time.Parse(time.RFC3339, ...)).
BOOTSTRAP_TOKEN_PATTERN = re.compile(r"\A([a-z0-9]{6})\.([a-z0-9]{16})\Z")
BOOTSTRAP_GROUP_PATTERN = re.compile(r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\Z")
RFC3339_UTC = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z\Z")
# kubeadm constants.NodeBootstrapTokenAuthGroup
KUBEADM_NODE_TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
KUBEADM_DEFAULT_TTL = datetime.timedelta(hours=24)  # `kubeadm token create --ttl` default

# REST resources by kind: (apiVersion, plural, namespaced), as the API server's discovery documents them.
RESOURCES = {
    "Node": ("v1", "nodes", False),
    "Secret": ("v1", "secrets", True),
    "DaemonSet": ("apps/v1", "daemonsets", True),
    "TenantControlPlane": ("kamaji.clastix.io/v1alpha1", "tenantcontrolplanes", True),
}
_PLURALS = {(api_version, plural): kind for kind, (api_version, plural, _) in RESOURCES.items()}
_CORE = re.compile(r"^/api/(?P<version>v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?"
                   r"(?P<sub>/status)?$")
_GROUP = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)"
                    r"(?:/(?P<name>[^/]+))?(?P<sub>/status)?$")

# --------------------------------------------------------------------------- #
# A local API server over HTTPS that requires client certificates
# --------------------------------------------------------------------------- #


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
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
                seen = Seen(self.command, url.path, parse_qs(url.query), dict(self.headers),
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

    def fail(self, method: str, path_prefix: str, code: int, message: str) -> None:
        """Answer the next `method` request under `path_prefix` with `code` (once)."""
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
                return code, message if message.startswith("<") else status(code, "Fault", message)
        match = _CORE.match(seen.path) or _GROUP.match(seen.path)
        if not match:
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        parts = match.groupdict()
        api_version = f"{parts['group']}/{parts['version']}" if parts.get("group") else parts["version"]
        kind = _PLURALS.get((api_version, parts["plural"]))
        if kind is None or RESOURCES[kind][2] != bool(parts["ns"]):
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        namespace, name, plural = parts["ns"], parts["name"], parts["plural"]
        key = (kind, namespace, name)
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
        if seen.method == "PATCH" and parts["sub"]:
            if seen.headers.get("Content-Type") != "application/merge-patch+json":
                return 415, status(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
            obj = self.objects[key]
            obj["status"] = merge_patch(obj.get("status", {}), (seen.body or {}).get("status", {}))
            return 200, obj
        return 405, status(405, "MethodNotAllowed", "the server does not allow this method")


@pytest.fixture(scope="module")
def cluster_ca() -> pki.CertificateAuthority:
    return pki.new_ca("tenant-a")


@pytest.fixture(scope="module")
def other_ca() -> pki.CertificateAuthority:
    return pki.new_ca("someone-else")


@pytest.fixture(scope="module")
def _server(cluster_ca, tmp_path_factory):
    server = ApiServer(cluster_ca, tmp_path_factory.mktemp("apiserver"))
    yield server
    server.stop()


@pytest.fixture
def api(_server, monkeypatch) -> ApiServer:
    for name in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    # The real client, whatever another test (or the simulator) left in the hook.
    monkeypatch.setattr(host_operations, "connect", host_operations.Client)
    _server.reset()
    return _server


@pytest.fixture
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


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def client_credentials(kubeconfig: str) -> tuple[bytes, bytes]:
    user = yaml.safe_load(kubeconfig)["users"][0]["user"]
    return base64.b64decode(user["client-certificate-data"]), base64.b64decode(user["client-key-data"])


# --------------------------------------------------------------------------- #
# Client: TLS, credentials
# --------------------------------------------------------------------------- #


def test_client_authenticates_with_the_kubeconfig_certificate(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-0"}})
    with host_operations.Client(api.kubeconfig("kubernetes-admin", ("kubeadm:cluster-admins",))) as client:
        node = client.get("Node", "worker-0")
    assert node["metadata"]["name"] == "worker-0"
    [seen] = api.requests
    assert (seen.user, seen.groups) == ("kubernetes-admin", ("kubeadm:cluster-admins",))
    assert seen.headers["Accept"] == "application/json"
    assert "Authorization" not in seen.headers


def test_client_sends_a_bearer_token_next_to_the_certificate(api):
    kubeconfig = api.kubeconfig()
    document = yaml.safe_load(kubeconfig)
    document["users"][0]["user"]["token"] = "abcdef.0123456789abcdef"
    with host_operations.Client(yaml.safe_dump(document)) as client:
        assert not client.exists("Node", "worker-0")
    assert api.requests[0].headers["Authorization"] == "Bearer abcdef.0123456789abcdef"


def test_server_certificate_from_another_ca_is_refused(api, other_ca):
    kubeconfig = with_cluster(api.kubeconfig(), **{"certificate-authority-data": _b64(other_ca.pem)})
    with host_operations.Client(kubeconfig) as client, pytest.raises(host_operations.UnreachableError) as raised:
        client.get("Node", "worker-0")
    assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value)
    assert api.requests == []


def test_server_certificate_for_another_name_is_refused_unless_tls_server_name_says_so(api):
    # The server's certificate names 127.0.0.1 and tenant.example, not localhost.
    by_name = with_cluster(api.kubeconfig(), server=api.url.replace("127.0.0.1", "localhost"))
    with host_operations.Client(by_name) as client, pytest.raises(host_operations.UnreachableError):
        client.get("Node", "worker-0")
    assert api.requests == []
    with host_operations.Client(with_cluster(by_name, **{"tls-server-name": "tenant.example"})) as client:
        assert client.exists("Node", "worker-0") is False
    assert len(api.requests) == 1


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_insecure_skip_tls_verify_accepts_any_server_certificate(api, other_ca):
    kubeconfig = with_cluster(api.kubeconfig(), **{"certificate-authority-data": _b64(other_ca.pem),
                                                   "insecure-skip-tls-verify": True})
    with host_operations.Client(kubeconfig) as client:
        assert client.exists("Node", "worker-0") is False


@pytest.mark.parametrize("credential", ["none", "foreign"])
def test_server_refuses_a_client_without_a_certificate_of_its_ca(api, other_ca, credential):
    if credential == "none":
        kubeconfig = with_user(api.kubeconfig(), {"token": "abcdef.0123456789abcdef"})
    else:
        cert, key = other_ca.issue("kubernetes-admin", ("system:masters",))
        kubeconfig = with_user(api.kubeconfig(), {"client-certificate-data": _b64(cert),
                                                  "client-key-data": _b64(key)})
    with host_operations.Client(kubeconfig) as client, pytest.raises(host_operations.UnreachableError):
        client.get("Node", "worker-0")
    assert api.requests == []
    assert api.handshake_errors, "the server saw no failed handshake"


def test_nothing_listening_is_unreachable(api, dead_url):
    with host_operations.Client(with_cluster(api.kubeconfig(), server=dead_url)) as client:
        with pytest.raises(host_operations.UnreachableError, match=re.escape(dead_url)):
            client.get("Node", "worker-0")


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd_create is Linux-only")
def test_credentials_stay_in_anonymous_memory_files(api, monkeypatch):
    kubeconfig = api.kubeconfig()
    cert, key = client_credentials(kubeconfig)

    def no_disk(*args, **kwargs):
        raise AssertionError("a credential went through a temporary file")

    for name in ("mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory"):
        monkeypatch.setattr(tempfile, name, no_disk)
    client = host_operations.Client(kubeconfig)
    files = list(client._files)
    paths = [file.path for file in files]
    fds = [file._fd for file in files]
    assert [re.fullmatch(r"/proc/self/fd/(\d+)", path) is not None for path in paths] == [True, True]
    assert [os.readlink(path) for path in paths] == ["/memfd:client-certificate (deleted)",
                                                     "/memfd:client-key (deleted)"]
    assert [Path(path).read_bytes() for path in paths] == [cert, key]
    assert not any(os.get_inheritable(fd) for fd in fds), "child processes would inherit the key (MFD_CLOEXEC)"
    assert client.exists("Node", "worker-0") is False  # TLS really read them
    assert api.requests[0].user == "kubernetes-admin"

    client.close()
    assert [file._fd for file in files] == [-1, -1]
    for fd in fds:  # closed (the number may since have been reused by something else)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        assert not target.startswith("/memfd:client-"), target


def test_without_memfd_the_credentials_are_in_a_private_temp_dir_removed_on_close(api, monkeypatch, tmp_path):
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kubeconfig = api.kubeconfig()
    cert, key = client_credentials(kubeconfig)
    with host_operations.Client(kubeconfig) as client:
        paths = [Path(file.path) for file in client._files]
        for directory in {path.parent for path in paths}:
            assert directory.parent == tmp_path and directory.name.startswith("gpu-tenancy-")
            assert oct(directory.stat().st_mode & 0o777) == oct(0o700)
        assert [oct(path.stat().st_mode & 0o777) for path in paths] == [oct(0o600)] * 2
        assert [path.read_bytes() for path in paths] == [cert, key]
        assert client.exists("Node", "worker-0") is False
    assert api.requests[0].user == "kubernetes-admin"
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- #
# Client: requests and status codes
# --------------------------------------------------------------------------- #


def test_paths_follow_the_kubernetes_url_layout(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w0"}})
    api.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "kube-system"}})
    api.put({"apiVersion": "apps/v1", "kind": "DaemonSet",
             "metadata": {"name": "konnectivity-agent", "namespace": "kube-system"}})
    api.put({"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
             "metadata": {"name": "alpha", "namespace": "tenants"}})
    with host_operations.Client(api.kubeconfig()) as client:
        assert client.exists("Node", "w0")
        assert client.exists("Secret", "s", "kube-system")
        assert client.exists("DaemonSet", "konnectivity-agent", "kube-system")
        assert client.exists("TenantControlPlane", "alpha", "tenants")
        assert not client.exists("Secret", "s", "default")
    assert [seen.path for seen in api.requests] == [
        "/api/v1/nodes/w0",
        "/api/v1/namespaces/kube-system/secrets/s",
        "/apis/apps/v1/namespaces/kube-system/daemonsets/konnectivity-agent",
        "/apis/kamaji.clastix.io/v1alpha1/namespaces/tenants/tenantcontrolplanes/alpha",
        "/api/v1/namespaces/default/secrets/s",
    ]


def test_get_returns_the_object_and_raises_api_errors_with_the_status_message(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w0"}})
    api.fail("GET", "/api/v1/nodes/w0", 403, 'nodes "w0" is forbidden: User "kubernetes-admin" cannot get')
    api.fail("GET", "/api/v1/nodes/w0", 502, "<html>Bad Gateway</html>")
    with host_operations.Client(api.kubeconfig()) as client:
        with pytest.raises(host_operations.ApiError) as forbidden:
            client.get("Node", "w0")
        with pytest.raises(host_operations.ApiError) as gateway:
            client.get("Node", "w0")
        with pytest.raises(host_operations.ApiError) as missing:
            client.get("Node", "w1")
        assert client.get("Node", "w0")["metadata"]["name"] == "w0"
    assert (forbidden.value.status, forbidden.value.message) == (
        403, 'nodes "w0" is forbidden: User "kubernetes-admin" cannot get')
    assert (gateway.value.status, gateway.value.message) == (502, "<html>Bad Gateway</html>")
    assert (missing.value.status, missing.value.message) == (404, 'nodes "w1" not found')


def test_exists_is_false_only_for_404(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w0"}})
    api.fail("GET", "/api/v1/nodes/w0", 401, "Unauthorized")
    with host_operations.Client(api.kubeconfig()) as client:
        with pytest.raises(host_operations.ApiError, match="401"):
            client.exists("Node", "w0")
        assert client.exists("Node", "w0") is True
        assert client.exists("Node", "w1") is False


def test_create_posts_to_the_collection_and_dry_run_stores_nothing(api):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "kube-system"},
              "stringData": {"a": "b"}}
    with host_operations.Client(api.kubeconfig()) as client:
        client.create(secret, dry_run=True)
        assert api.get("Secret", "s", "kube-system") is None
        created = client.create(secret)
        with pytest.raises(host_operations.ApiError) as conflict:
            client.create(secret)
    assert created["metadata"]["uid"]
    assert api.get("Secret", "s", "kube-system")["stringData"] == {"a": "b"}
    assert conflict.value.status == 409
    dry, real, _ = api.called("POST")
    assert (dry.path, dry.query) == ("/api/v1/namespaces/kube-system/secrets", {"dryRun": ["All"]})
    assert (real.path, real.query) == ("/api/v1/namespaces/kube-system/secrets", {})
    assert real.headers["Content-Type"] == "application/json"
    assert real.body == secret


def test_delete_is_false_when_already_gone_and_raises_other_errors(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w0"}})
    api.fail("DELETE", "/api/v1/nodes/w0", 500, "etcdserver: request timed out")
    with host_operations.Client(api.kubeconfig()) as client:
        with pytest.raises(host_operations.ApiError) as failed:
            client.delete("Node", "w0")
        assert api.get("Node", "w0") is not None
        assert client.delete("Node", "w0") is True
        assert client.delete("Node", "w0") is False
    assert (failed.value.status, failed.value.message) == (500, "etcdserver: request timed out")
    assert api.get("Node", "w0") is None


def test_patch_status_sends_a_merge_patch_to_the_status_subresource(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w0"},
             "status": {"capacity": {"cpu": "8"}}})
    with host_operations.Client(api.kubeconfig()) as client:
        node = client.patch_status("Node", "w0", {"status": {"capacity": {"example.com/x": "1"}}})
        with pytest.raises(host_operations.ApiError) as missing:
            client.patch_status("Node", "w1", {"status": {}})
    assert node["status"]["capacity"] == {"cpu": "8", "example.com/x": "1"}
    assert missing.value.status == 404
    seen = api.called("PATCH")[0]
    assert seen.path == "/api/v1/nodes/w0/status"
    assert seen.headers["Content-Type"] == "application/merge-patch+json"


# --------------------------------------------------------------------------- #
# poll, with the module's clock hooks
# --------------------------------------------------------------------------- #


class FakeClock:
    START = datetime.datetime(2026, 3, 1, 10, 0, 0, 500000, tzinfo=datetime.timezone.utc)

    def __init__(self) -> None:
        self.time = self.START
        self.sleeps: list[float] = []
        self._events: list[tuple[float, Any]] = []

    @property
    def elapsed(self) -> float:
        return (self.time - self.START).total_seconds()

    def now(self) -> datetime.datetime:
        return self.time

    def at(self, seconds: float, action) -> None:
        """Run `action` once the clock has passed `seconds` (something happening while the program waits)."""
        self._events.append((seconds, action))

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.time += datetime.timedelta(seconds=seconds)
        for event in list(self._events):
            if event[0] <= self.elapsed:
                self._events.remove(event)
                event[1]()


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(host_operations, "now", fake.now)
    monkeypatch.setattr(host_operations, "sleep", fake.sleep)
    return fake


def test_poll_returns_as_soon_as_the_condition_is_met(clock):
    answers = iter(["1 of 3 ready", "2 of 3 ready", None])
    host_operations.poll(lambda: next(answers), timeout=60, interval=5)
    assert clock.sleeps == [5, 5]


def test_poll_gives_up_after_the_timeout_with_the_last_answer(clock):
    calls = []

    def condition() -> str:
        calls.append(clock.elapsed)
        return f"waited {clock.elapsed:.0f}s"

    with pytest.raises(TimeoutError, match=r"^gave up after 10s: waited 12s$"):
        host_operations.poll(condition, timeout=10, interval=3)
    assert calls == [0, 3, 6, 9, 12]
    assert clock.sleeps == [3, 3, 3, 3]


# --------------------------------------------------------------------------- #
# NodeMembershipProvider
# --------------------------------------------------------------------------- #


def membership_props(api: ApiServer, **overrides: Any) -> dict[str, Any]:
    return {
        "kubeconfig": api.kubeconfig("kubernetes-admin", ("system:masters",)),
        "management_kubeconfig": api.kubeconfig("kind-admin", ("kubeadm:cluster-admins",)),
        "control_plane_namespace": "tenants",
        "control_plane_name": "alpha",
        "node_name": "alpha-worker-0",
        "machine": "container-1",
        "endpoint": "https://172.18.255.200:6443",
        "ca_cert_hash": "sha256:" + "a" * 64,
        **overrides,
    }


def control_plane(namespace: str = "tenants", name: str = "alpha") -> dict[str, Any]:
    return {"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
            "metadata": {"name": name, "namespace": namespace}}


def node(name: str, **status: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status}


def token_secret(token_id: str, node_name: str = "alpha-worker-0") -> dict[str, Any]:
    expiration = FakeClock.START + KUBEADM_DEFAULT_TTL
    return host_operations.bootstrap_token_secret(token_id, "x" * 16, expiration, node_name)


def test_membership_mints_a_valid_kubeadm_bootstrap_token(api, clock):
    props = membership_props(api)
    result = host_operations.NodeMembershipProvider().create(props)

    token_id, token_value = BOOTSTRAP_TOKEN_PATTERN.fullmatch(result.outs["token"]).groups()
    assert result.id == f"alpha-worker-0/{token_id}"
    assert result.outs["token_id"] == token_id
    assert {k: result.outs[k] for k in props} == props

    [post] = api.called("POST")
    assert post.path == "/api/v1/namespaces/kube-system/secrets"
    assert post.user == "kubernetes-admin"  # the tenant kubeconfig, not the management one
    secret = api.get("Secret", f"bootstrap-token-{token_id}", "kube-system")
    assert secret is not None, "the Secret must be named bootstrap-token-<token-id> in kube-system"
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    data = secret["stringData"]
    assert all(isinstance(value, str) for value in data.values())
    assert (data["token-id"], data["token-secret"]) == (token_id, token_value)
    assert data["usage-bootstrap-authentication"] == "true"
    assert data["usage-bootstrap-signing"] == "true"
    assert data["auth-extra-groups"] == KUBEADM_NODE_TOKEN_GROUP
    assert all(BOOTSTRAP_GROUP_PATTERN.fullmatch(group) for group in data["auth-extra-groups"].split(","))
    assert RFC3339_UTC.fullmatch(data["expiration"])
    expires = datetime.datetime.fromisoformat(data["expiration"].replace("Z", "+00:00"))
    assert expires == (clock.START + KUBEADM_DEFAULT_TTL).replace(microsecond=0)
    assert result.outs["expiration"] == data["expiration"]
    assert secret["metadata"]["labels"][host_operations.NODE_LABEL] == "alpha-worker-0"


def test_membership_tokens_are_random(api, clock):
    provider = host_operations.NodeMembershipProvider()
    tokens = {provider.create(membership_props(api)).outs["token"] for _ in range(3)}
    assert len(tokens) == 3
    assert all(BOOTSTRAP_TOKEN_PATTERN.fullmatch(token) for token in tokens)


def _scripted_random(monkeypatch, values: list[str]) -> None:
    draws = iter(values)
    monkeypatch.setattr(host_operations, "_random", lambda length: next(draws))


def test_membership_draws_another_id_when_the_token_id_is_taken(api, clock, monkeypatch):
    taken = api.put(token_secret("aaaaaa", "someone-else"))
    _scripted_random(monkeypatch, ["aaaaaa", "a" * 16, "bbbbbb", "b" * 16])
    result = host_operations.NodeMembershipProvider().create(membership_props(api))
    assert result.outs["token"] == "bbbbbb." + "b" * 16
    assert result.id == "alpha-worker-0/bbbbbb"
    assert len(api.called("POST")) == 2
    assert api.get("Secret", "bootstrap-token-aaaaaa", "kube-system") is taken  # not overwritten


def test_membership_gives_up_after_five_collisions(api, clock, monkeypatch):
    api.put(token_secret("aaaaaa", "someone-else"))
    _scripted_random(monkeypatch, ["aaaaaa", "a" * 16] * 5)
    with pytest.raises(RuntimeError, match="five id collisions"):
        host_operations.NodeMembershipProvider().create(membership_props(api))
    assert len(api.called("POST")) == 5


def test_membership_does_not_retry_other_errors(api, clock):
    api.fail("POST", "/api/v1/namespaces/kube-system/secrets", 403, 'secrets is forbidden: User "x" cannot create')
    with pytest.raises(RuntimeError, match="cannot create the join token of node alpha-worker-0: HTTP 403"):
        host_operations.NodeMembershipProvider().create(membership_props(api))
    assert len(api.called("POST")) == 1


@pytest.mark.parametrize("key", host_operations.NodeMembershipProvider.IDENTITY)
def test_membership_is_replaced_when_its_identity_changes(api, clock, key):
    olds = {**membership_props(api), "token": "t", "token_id": "aaaaaa",
            "expiration": "2026-03-02T10:00:00Z"}
    news = {**membership_props(api), key: "changed"}
    diff = host_operations.NodeMembershipProvider().diff("id", olds, news)
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, [key], True)


def test_membership_is_updated_in_place_for_new_credentials(api, clock):
    props = membership_props(api)
    olds = {**props, "token": "aaaaaa." + "a" * 16, "token_id": "aaaaaa", "expiration": "2026-03-02T10:00:00Z"}
    provider = host_operations.NodeMembershipProvider()
    assert provider.diff("id", olds, dict(props)).changes is False
    news = {**props, "kubeconfig": api.kubeconfig("kubernetes-admin", ("system:masters", "rotated"))}
    diff = provider.diff("id", olds, news)
    assert (diff.changes, diff.replaces) == (True, [])
    outs = provider.update("id", olds, news).outs
    assert outs["kubeconfig"] == news["kubeconfig"]
    assert (outs["token"], outs["token_id"], outs["expiration"]) == (olds["token"], "aaaaaa", olds["expiration"])
    assert api.requests == []


def _expired(props: dict[str, Any], clock: FakeClock, hours: float) -> dict[str, Any]:
    expiration = (clock.START + datetime.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {**props, "token": "aaaaaa." + "a" * 16, "token_id": "aaaaaa", "expiration": expiration}


def test_membership_with_an_expired_unused_token_is_replaced(api, clock):
    props = membership_props(api)
    diff = host_operations.NodeMembershipProvider().diff("id", _expired(props, clock, -1), dict(props))
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["expiration"], True)
    assert [seen.path for seen in api.requests] == ["/api/v1/nodes/alpha-worker-0"]


def test_membership_with_an_expired_token_of_a_registered_node_stays(api, clock):
    api.put(node("alpha-worker-0"))
    props = membership_props(api)
    diff = host_operations.NodeMembershipProvider().diff("id", _expired(props, clock, -1), dict(props))
    assert (diff.changes, diff.replaces) == (False, [])


def test_membership_expiry_is_not_decided_without_an_answer(api, clock, dead_url):
    provider = host_operations.NodeMembershipProvider()
    props = membership_props(api)
    # A token still valid: no call at all.
    assert provider.diff("id", _expired(props, clock, +1), dict(props)).replaces == []
    # Unknown kubeconfig (preview), unreachable tenant, an API error: nothing decided, nothing replaced.
    assert provider.diff("id", _expired(props, clock, -1), {**props, "kubeconfig": Unknown()}).replaces == []
    assert api.requests == []
    gone = {**props, "kubeconfig": with_cluster(props["kubeconfig"], server=dead_url)}
    assert provider.diff("id", _expired(gone, clock, -1), gone).replaces == []
    api.fail("GET", "/api/v1/nodes/", 403, "forbidden")
    assert provider.diff("id", _expired(props, clock, -1), dict(props)).replaces == []


def test_membership_delete_removes_the_node_and_the_token(api, clock):
    api.put(node("alpha-worker-0"))
    api.put(token_secret("aaaaaa"))
    api.put(token_secret("bbbbbb", "alpha-worker-1"))
    props = {**membership_props(api), "token_id": "aaaaaa"}
    host_operations.NodeMembershipProvider().delete("alpha-worker-0/aaaaaa", props)
    assert api.get("Node", "alpha-worker-0") is None
    assert api.get("Secret", "bootstrap-token-aaaaaa", "kube-system") is None
    assert api.get("Secret", "bootstrap-token-bbbbbb", "kube-system") is not None
    # Again: both already gone is fine.
    host_operations.NodeMembershipProvider().delete("alpha-worker-0/aaaaaa", props)


def test_membership_delete_reports_api_errors(api, clock):
    api.put(node("alpha-worker-0"))
    api.fail("DELETE", "/api/v1/nodes/alpha-worker-0", 403, "forbidden")
    with pytest.raises(RuntimeError, match="cannot remove Node alpha-worker-0 from tenant alpha: HTTP 403"):
        host_operations.NodeMembershipProvider().delete("id", {**membership_props(api), "token_id": "aaaaaa"})
    assert api.get("Node", "alpha-worker-0") is not None


# --------------------------------------------------------------------------- #
# An unreachable tenant on delete (_tenant_gone), for every provider that removes something
# --------------------------------------------------------------------------- #


def _delete_membership(props: dict[str, Any]) -> None:
    host_operations.NodeMembershipProvider().delete("id", {**props, "token_id": "aaaaaa"})


def _delete_capacity(props: dict[str, Any]) -> None:
    host_operations.GpuCapacityProvider().delete("id", {**props, "capacity": 2.0, "registration": "r"})


DELETES = pytest.mark.parametrize("delete", [_delete_membership, _delete_capacity], ids=["membership", "capacity"])


@DELETES
def test_delete_with_an_unreachable_tenant_whose_control_plane_is_gone_succeeds(api, clock, dead_url, delete):
    props = membership_props(api)
    delete({**props, "kubeconfig": with_cluster(props["kubeconfig"], server=dead_url)})
    [seen] = api.requests
    assert seen.path == "/apis/kamaji.clastix.io/v1alpha1/namespaces/tenants/tenantcontrolplanes/alpha"
    assert seen.user == "kind-admin"  # asked with the management kubeconfig


@DELETES
def test_delete_with_an_unreachable_tenant_whose_control_plane_exists_fails(api, clock, dead_url, delete):
    api.put(control_plane())
    props = membership_props(api)
    with pytest.raises(RuntimeError, match="TenantControlPlane tenants/alpha still exists: nothing was removed"):
        delete({**props, "kubeconfig": with_cluster(props["kubeconfig"], server=dead_url)})


@DELETES
@pytest.mark.parametrize("management", ["unreachable", "forbidden"])
def test_delete_fails_when_neither_tenant_nor_management_confirms(api, clock, dead_url, delete, management):
    props = membership_props(api)
    props["kubeconfig"] = with_cluster(props["kubeconfig"], server=dead_url)
    if management == "unreachable":
        props["management_kubeconfig"] = with_cluster(props["management_kubeconfig"], server=dead_url)
    else:
        api.fail("GET", "/apis/kamaji.clastix.io/", 403, "forbidden")
    with pytest.raises(RuntimeError, match="cannot confirm that its control plane is gone"):
        delete(props)


# --------------------------------------------------------------------------- #
# NodeRegistrationProvider
# --------------------------------------------------------------------------- #


def registration_props(api: ApiServer) -> dict[str, Any]:
    return {"kubeconfig": api.kubeconfig(), "node_name": "alpha-worker-0", "join": "join-id", "token_id": "aaaaaa"}


def test_registration_waits_for_the_node_then_revokes_its_token(api, clock):
    api.put(token_secret("aaaaaa"))
    registered: list[dict[str, Any]] = []
    clock.at(5, lambda: registered.append(api.put(node("alpha-worker-0"))))
    props = registration_props(api)
    result = host_operations.NodeRegistrationProvider().create(props)
    assert result.id == f"alpha-worker-0/{registered[0]['metadata']['uid']}"
    assert result.outs == props
    assert clock.sleeps == [2.0, 2.0, 2.0]
    assert api.get("Secret", "bootstrap-token-aaaaaa", "kube-system") is None
    assert api.called("DELETE")[0].path == "/api/v1/namespaces/kube-system/secrets/bootstrap-token-aaaaaa"


def test_registration_gives_up_after_its_timeout(api, clock):
    api.put(token_secret("aaaaaa"))
    with pytest.raises(RuntimeError, match=r"Node alpha-worker-0 has not registered: check the kubelet"):
        host_operations.NodeRegistrationProvider().create(registration_props(api))
    assert host_operations.NODE_REGISTER_TIMEOUT <= clock.elapsed < host_operations.NODE_REGISTER_TIMEOUT + 2
    assert api.called("DELETE") == []


def test_registration_does_not_wait_out_an_api_error(api, clock):
    api.fail("GET", "/api/v1/nodes/alpha-worker-0", 403, "forbidden")
    with pytest.raises(host_operations.ApiError, match="403"):
        host_operations.NodeRegistrationProvider().create(registration_props(api))
    assert clock.sleeps == []


@pytest.mark.parametrize(("key", "replaced"), [("node_name", True), ("join", True), ("token_id", True),
                                               ("kubeconfig", False)])
def test_registration_diff(api, key, replaced):
    olds = registration_props(api)
    provider = host_operations.NodeRegistrationProvider()
    assert provider.diff("id", olds, dict(olds)).changes is False
    diff = provider.diff("id", olds, {**olds, key: "changed"})
    assert (diff.changes, diff.replaces) == (True, [key] if replaced else [])


def test_registration_delete_calls_nothing(monkeypatch):
    monkeypatch.setattr(host_operations, "connect", lambda kubeconfig: pytest.fail("delete connected"))
    host_operations.NodeRegistrationProvider().delete("id", {"kubeconfig": "x", "node_name": "n", "token_id": "t"})


# --------------------------------------------------------------------------- #
# GpuCapacityProvider
# --------------------------------------------------------------------------- #


def capacity_props(api: ApiServer, capacity: Any = 10.0) -> dict[str, Any]:
    return {**membership_props(api), "capacity": capacity, "registration": "alpha-worker-0/uid-1"}


def test_capacity_is_an_integer_quantity_on_capacity_and_allocatable(api):
    api.put(node("alpha-worker-0", capacity={"cpu": "8"}, allocatable={"cpu": "7800m"}))
    result = host_operations.GpuCapacityProvider().create(capacity_props(api, 10.0))  # a number, as protobuf sends it
    assert result.id == "alpha-worker-0"
    [patch] = api.called("PATCH")
    assert patch.path == "/api/v1/nodes/alpha-worker-0/status"
    assert patch.body == {"status": {"capacity": {"nvidia.com/gpu": "10"}, "allocatable": {"nvidia.com/gpu": "10"}}}
    assert api.get("Node", "alpha-worker-0")["status"] == {
        "capacity": {"cpu": "8", "nvidia.com/gpu": "10"}, "allocatable": {"cpu": "7800m", "nvidia.com/gpu": "10"}}


@pytest.mark.parametrize("capacity", [0.0, 0, -1.0])
def test_capacity_below_one_is_refused_before_any_call(api, capacity):
    api.put(node("alpha-worker-0"))
    with pytest.raises(RuntimeError, match="must be at least 1"):
        host_operations.GpuCapacityProvider().create(capacity_props(api, capacity))
    assert api.requests == []


def test_capacity_update_and_diff(api):
    api.put(node("alpha-worker-0", capacity={"nvidia.com/gpu": "10"}, allocatable={"nvidia.com/gpu": "10"}))
    provider = host_operations.GpuCapacityProvider()
    olds = capacity_props(api, 10.0)
    assert provider.diff("id", olds, dict(olds)).changes is False
    diff = provider.diff("id", olds, {**olds, "capacity": 4.0})
    assert (diff.changes, diff.replaces) == (True, [])
    for key in ("node_name", "registration"):  # a rejoined worker is a fresh Node without the capacity
        assert provider.diff("id", olds, {**olds, key: "other"}).replaces == [key]
    provider.update("id", olds, {**olds, "capacity": 4.0})
    assert api.get("Node", "alpha-worker-0")["status"]["allocatable"] == {"nvidia.com/gpu": "4"}


def test_capacity_delete_removes_only_the_gpu_resource(api):
    api.put(node("alpha-worker-0", capacity={"cpu": "8", "nvidia.com/gpu": "10"},
                 allocatable={"cpu": "8", "nvidia.com/gpu": "10"}))
    host_operations.GpuCapacityProvider().delete("id", capacity_props(api))
    assert api.get("Node", "alpha-worker-0")["status"] == {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}}


def test_capacity_delete_of_a_gone_node_is_fine_other_errors_are_not(api):
    provider = host_operations.GpuCapacityProvider()
    provider.delete("id", capacity_props(api))  # 404: nothing to take back
    api.put(node("alpha-worker-0"))
    api.fail("PATCH", "/api/v1/nodes/alpha-worker-0/status", 403, "forbidden")
    with pytest.raises(RuntimeError, match="cannot remove the GPU capacity of alpha-worker-0: HTTP 403"):
        provider.delete("id", capacity_props(api))


# --------------------------------------------------------------------------- #
# KonnectivityReadyProvider
# --------------------------------------------------------------------------- #


def konnectivity_agents(number_ready: int | None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "konnectivity-agent", "namespace": "kube-system"},
            "status": {} if number_ready is None else {"numberReady": number_ready}}


def test_konnectivity_waits_for_an_agent_on_every_node(api, clock):
    agents = api.put(konnectivity_agents(None))
    clock.at(4, lambda: agents["status"].update(numberReady=1))
    clock.at(8, lambda: agents["status"].update(numberReady=2))
    props = {"kubeconfig": api.kubeconfig(), "nodes": 2.0, "registrations": ["a/1", "b/2"]}
    result = host_operations.KonnectivityReadyProvider().create(props)
    assert (result.id, result.outs) == ("konnectivity-agent", props)
    assert clock.elapsed == 8
    assert {seen.path for seen in api.requests} == {
        "/apis/apps/v1/namespaces/kube-system/daemonsets/konnectivity-agent"}
    # Another node later: update waits again.
    clock.at(12, lambda: agents["status"].update(numberReady=3))
    host_operations.KonnectivityReadyProvider().update("id", props, {**props, "nodes": 3.0})
    assert clock.elapsed == 12


@pytest.mark.parametrize(("agents", "answer"), [
    (None, "daemonset/konnectivity-agent does not exist (is spec.addons.konnectivity set?)"),
    (1, "1 of 2 konnectivity agents ready"),
])
def test_konnectivity_gives_up_with_the_last_answer(api, clock, agents, answer):
    if agents is not None:
        api.put(konnectivity_agents(agents))
    with pytest.raises(RuntimeError, match=re.escape(answer)):
        host_operations.KonnectivityReadyProvider().create({"kubeconfig": api.kubeconfig(), "nodes": 2.0})
    assert clock.elapsed >= host_operations.KONNECTIVITY_TIMEOUT


# --------------------------------------------------------------------------- #
# KamajiWebhookReadyProvider
# --------------------------------------------------------------------------- #

TCP_COLLECTION = "/apis/kamaji.clastix.io/v1alpha1/namespaces/kamaji-system/tenantcontrolplanes"
WEBHOOK_DOWN = ('Internal error occurred: failed calling webhook "mtenantcontrolplane.kb.io": failed to call '
                'webhook: Post "https://kamaji-webhook-service.kamaji-system.svc:443/mutate": connect: '
                "connection refused")


def webhook_props(api: ApiServer) -> dict[str, Any]:
    return {"kubeconfig": api.kubeconfig(), "namespace": "kamaji-system", "datastore": "default",
            "version": "v1.33.0", "release": "kamaji"}


def test_kamaji_webhook_wait_retries_failed_webhook_calls_with_dry_runs(api, clock):
    api.fail("POST", TCP_COLLECTION, 500, WEBHOOK_DOWN)
    api.fail("POST", TCP_COLLECTION, 500, WEBHOOK_DOWN)
    result = host_operations.KamajiWebhookReadyProvider().create(webhook_props(api))
    assert result.id == "kamaji-webhook"
    posts = api.called("POST")
    assert len(posts) == 3 and len(clock.sleeps) == 2
    assert all(seen.path == TCP_COLLECTION and seen.query == {"dryRun": ["All"]} for seen in posts)
    assert api.objects == {}, "the probe must never be created for real"


def test_kamaji_webhook_denial_counts_as_an_answer(api, clock):
    # controller-runtime's admission.Denied answers 403; the API server reports "admission webhook ... denied".
    api.fail("POST", TCP_COLLECTION, 403, 'admission webhook "vtenantcontrolplane.kb.io" denied the request: no')
    host_operations.KamajiWebhookReadyProvider().create(webhook_props(api))
    assert clock.sleeps == []


def test_kamaji_webhook_wait_gives_up_with_the_last_failure(api, clock):
    for _ in range(int(host_operations.KAMAJI_WEBHOOK_TIMEOUT / 2) + 2):
        api.fail("POST", TCP_COLLECTION, 500, WEBHOOK_DOWN)
    with pytest.raises(RuntimeError, match="Kamaji's admission webhook does not answer: gave up after 180s: "
                                           "Internal error occurred: failed calling webhook"):
        host_operations.KamajiWebhookReadyProvider().update("id", {}, webhook_props(api))


def test_kamaji_webhook_probe_is_a_valid_tenant_control_plane(vendor_dir):
    """The dry run must be an object Kamaji's CRD accepts as sent: a field the structural schema does not know is
    pruned by the API server (so the datastore the probe names would silently be dropped)."""
    schema = crd_json_schema(vendor_dir / "kamaji" / "kamaji.clastix.io_tenantcontrolplanes.yaml")
    probe = host_operations.probe_control_plane("kamaji-system", "default", "v1.33.0")
    assert schema_errors(probe, schema) == []
