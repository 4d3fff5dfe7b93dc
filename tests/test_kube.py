"""`components.kube`: which cluster and user a kubeconfig's current context means, credentials that never touch a
disk, how answers and failures become `ApiError`s, and the client's requests, against a local HTTPS API server that
requires client certificates (tests/support/apiserver.py)."""

from __future__ import annotations

import base64
import copy
import inspect
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import kube
from components.kube import ApiError, KubeconfigError, UnreachableError
from tests.support import apiserver
from tests.support.apiserver import with_cluster, with_user
from tests.support.fake_platform import FakeSession
from tests.support.sim import pki
from tests.support.sim.hostapi import SimClient

TOKEN = "sha256~s3cr3t-token-never-shown"


@pytest.fixture(scope="module")
def other_ca() -> pki.CertificateAuthority:
    return pki.new_ca("someone-else")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --------------------------------------------------------------------------- #
# The current context
# --------------------------------------------------------------------------- #


def two_contexts(**changes: Any) -> dict[str, Any]:
    """Two clusters, two users, two contexts; the second is current."""
    document = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "old", "cluster": {"server": "https://10.0.0.9:6443"}},
                     {"name": "prod", "cluster": {"server": "https://mgmt.example.net:6443",
                                                  "certificate-authority-data": _b64(b"-----BEGIN CERT-----\n")}}],
        "users": [{"name": "someone", "user": {"token": "other"}}, {"name": "admin", "user": {"token": TOKEN}}],
        "contexts": [{"name": "first", "context": {"cluster": "old", "user": "someone"}},
                     {"name": "ops", "context": {"cluster": "prod", "user": "admin", "namespace": "tenants"}}],
        "current-context": "ops",
    }
    document.update(changes)
    return document


def test_the_current_context_decides_not_the_order():
    context = kube.current_context(yaml.safe_dump(two_contexts()))
    assert (context.name, context.cluster_name, context.user_name, context.namespace) == ("ops", "prod", "admin",
                                                                                          "tenants")
    assert context.server == "https://mgmt.example.net:6443"
    assert context.user == {"token": TOKEN}
    assert context.ca_certificate() == "-----BEGIN CERT-----\n"
    # The parsed mapping is accepted as well as the text.
    assert kube.current_context(two_contexts(**{"current-context": "first"})).server == "https://10.0.0.9:6443"


def test_a_context_without_a_user_is_anonymous():
    document = two_contexts(contexts=[{"name": "ops", "context": {"cluster": "prod"}}])
    context = kube.current_context(document)
    assert (context.user_name, context.user, context.namespace) == (None, {}, None)


@pytest.mark.parametrize(("changes", "problem"), [
    ({"current-context": ""}, "has no current-context: set the context to use (kubectl config use-context"),
    ({"current-context": None}, "has no current-context"),
    ({"current-context": "missing"}, "has no context named 'missing' (its current-context)"),
    ({"contexts": [{"name": "ops", "context": {"user": "admin"}}]}, "has a context 'ops' that names no cluster"),
    ({"contexts": [{"name": "ops", "context": {"cluster": "gone", "user": "admin"}}]},
     "has no cluster named 'gone' (context 'ops' names it)"),
    ({"contexts": [{"name": "ops", "context": {"cluster": "prod", "user": "gone"}}]},
     "has no user named 'gone' (context 'ops' names it)"),
    ({"contexts": "ops"}, "has no context named 'ops'"),
], ids=["empty", "null", "unknown-context", "no-cluster", "unknown-cluster", "unknown-user", "contexts-not-a-list"])
def test_a_current_context_that_does_not_resolve_says_what_is_missing(changes, problem):
    with pytest.raises(KubeconfigError) as raised:
        kube.current_context(yaml.safe_dump(two_contexts(**changes)))
    assert raised.value.problem.startswith(problem)
    assert str(raised.value) == f"kubeconfig {raised.value.problem}"
    assert TOKEN not in str(raised.value)


def test_a_lone_context_is_not_taken_for_a_missing_current_context():
    """kubectl and the official loader (kube_config.py set_active_context reads `current-context`) have no such
    fallback: a kubeconfig without current-context is refused, not guessed."""
    document = two_contexts(contexts=[{"name": "ops", "context": {"cluster": "prod", "user": "admin"}}])
    del document["current-context"]
    with pytest.raises(KubeconfigError, match="has no current-context"):
        kube.current_context(document)


@pytest.mark.parametrize(("text", "problem"), [
    ("", "is not a kubeconfig"),
    ("just text", "is not a kubeconfig"),
    ("- a\n- list\n", "is not a kubeconfig"),
    (f"users:\n- user: {{token: {TOKEN}\n  bad: [yaml", "is not YAML (error at line"),
])
def test_what_is_not_a_kubeconfig_is_refused_without_echoing_it(text, problem):
    with pytest.raises(KubeconfigError) as raised:
        kube.current_context(text)
    assert raised.value.problem.startswith(problem)
    assert TOKEN not in str(raised.value)


def test_a_cluster_without_server_or_ca_data_is_refused_when_asked_for_them():
    context = kube.current_context(two_contexts(clusters=[{"name": "prod", "cluster": {}}]))
    with pytest.raises(KubeconfigError, match=r"has no server in its cluster 'prod'"):
        _ = context.server
    with pytest.raises(KubeconfigError, match=r"has no base64 certificate-authority-data in cluster 'prod'"):
        context.ca_certificate()


def test_a_one_context_kubeconfig_resolves_to_what_it_was_built_from():
    built = kube.kubeconfig({"server": "https://x:6443"}, {"token": TOKEN}, namespace="team", name="cross")
    context = kube.current_context(built)
    assert (context.name, context.server, context.user, context.namespace) == ("cross", "https://x:6443",
                                                                               {"token": TOKEN}, "team")


# --------------------------------------------------------------------------- #
# Credentials in memory
# --------------------------------------------------------------------------- #


def _memory_files() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/memfd:"):
            found.append(target)
    return sorted(found)


def _no_disk(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a credential went through a temporary file")

    for name in ("mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory"):
        monkeypatch.setattr(tempfile, name, refuse)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd_create is Linux-only")
def test_the_ca_certificate_and_key_live_in_anonymous_memory_files_until_close(api, monkeypatch):
    document = yaml.safe_load(api.kubeconfig())
    # Another user's key in the same file is not loaded at all.
    cert, key = pki.new_ca("elsewhere").issue("someone", ())
    document["users"].append({"name": "other", "user": {"client-certificate-data": _b64(cert),
                                                        "client-key-data": _b64(key)}})
    original = copy.deepcopy(document)
    _no_disk(monkeypatch)
    before = _memory_files()
    client = kube.connect(document)
    configuration = client._api.configuration
    paths = [configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file]
    assert [re.fullmatch(r"/proc/self/fd/\d+", path) is not None for path in paths] == [True] * 3
    assert [os.readlink(path) for path in paths] == ["/memfd:certificate-authority (deleted)",
                                                     "/memfd:client-certificate (deleted)",
                                                     "/memfd:client-key (deleted)"]
    user = original["users"][0]["user"]
    assert Path(configuration.key_file).read_bytes() == base64.b64decode(user["client-key-data"])
    assert not any(os.get_inheritable(int(path.rsplit("/", 1)[1])) for path in paths), \
        "child processes (an exec plugin) would inherit the key: MFD_CLOEXEC"
    assert client.find("Node", "worker-0") is None  # TLS really read the CA, the certificate and the key
    assert api.requests[0].user == "kubernetes-admin"
    assert document == original, "the caller's kubeconfig was changed"
    assert len(_memory_files()) == len(before) + 3
    client.close()
    client.close()  # safe to repeat
    assert _memory_files() == before


def test_without_memfd_the_credentials_live_in_private_directories_removed_on_close(api, monkeypatch, tmp_path):
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def no_loader_files(*args, **kwargs):
        raise AssertionError("the kubernetes loader wrote a temporary file")

    monkeypatch.setattr(tempfile, "mkstemp", no_loader_files)
    with kube.connect(api.kubeconfig()) as client:
        directories = list(tmp_path.iterdir())
        assert len(directories) == 3  # the CA, the certificate and the key, each in a directory of its own
        assert {oct(directory.stat().st_mode & 0o777) for directory in directories} == {oct(0o700)}
        files = [file for directory in directories for file in directory.iterdir()]
        assert {oct(file.stat().st_mode & 0o777) for file in files} == {oct(0o600)}
        assert client.find("Node", "worker-0") is None
    assert list(tmp_path.iterdir()) == []


def test_a_refused_kubeconfig_leaves_no_memory_file(api):
    before = _memory_files()
    with pytest.raises(KubeconfigError, match="has no context named 'missing'"):
        kube.connect(dict(yaml.safe_load(api.kubeconfig()), **{"current-context": "missing"}))
    key = yaml.safe_load(api.kubeconfig())["users"][0]["user"]["client-key-data"]
    broken = with_user(api.kubeconfig(), {"client-certificate-data": key, "client-key-data": "not base64!"})
    with pytest.raises(KubeconfigError, match="has a client-key-data that is not base64 "
                                              "\\(in user 'kubernetes-admin'\\)") as raised:
        kube.connect(broken)
    assert key not in str(raised.value)
    with pytest.raises(KubeconfigError, match="has no server in its cluster 'tenant-a'"):
        kube.connect(with_cluster(api.kubeconfig(), server=""))
    assert _memory_files() == before
    assert isinstance(raised.value, ValueError)  # what verify and config catch


# --------------------------------------------------------------------------- #
# TLS and authentication (the official loader and REST layer)
# --------------------------------------------------------------------------- #


def test_the_client_authenticates_with_the_kubeconfig_certificate(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-0"}})
    with kube.connect(api.kubeconfig("kubernetes-admin", ("kubeadm:cluster-admins",))) as client:
        node = client.find("Node", "worker-0")
    assert node["metadata"]["name"] == "worker-0"
    [seen] = api.requests
    assert (seen.user, seen.groups) == ("kubernetes-admin", ("kubeadm:cluster-admins",))
    assert seen.headers["Accept"] == "application/json"
    assert "Authorization" not in seen.headers


def test_a_bearer_token_is_sent_next_to_the_certificate(api):
    document = yaml.safe_load(api.kubeconfig())
    document["users"][0]["user"]["token"] = TOKEN
    with kube.connect(document) as client:
        assert client.find("Node", "worker-0") is None
    assert api.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_an_exec_credential_plugin_supplies_the_token(api):
    """management.allowExecCredentials lets an adopted kubeconfig run one (kubernetes/config/exec_provider.py)."""
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": "from-the-plugin"}}
    document = yaml.safe_load(api.kubeconfig())
    document["users"][0]["user"]["exec"] = {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": ["-c", f"import json; print(json.dumps({credential!r}))"], "interactiveMode": "Never"}
    with kube.connect(document) as client:
        client.find("Node", "worker-0")
    assert api.requests[0].headers["Authorization"] == "Bearer from-the-plugin"


def test_a_server_certificate_from_another_ca_is_refused(api, other_ca):
    kubeconfig = with_cluster(api.kubeconfig(), **{"certificate-authority-data": _b64(other_ca.pem)})
    with kube.connect(kubeconfig) as client, pytest.raises(UnreachableError) as raised:
        client.find("Node", "worker-0")
    assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value)
    assert api.requests == []


def test_a_server_certificate_for_another_name_is_refused_unless_tls_server_name_says_so(api):
    # The server's certificate names 127.0.0.1 and tenant.example, not localhost.
    by_name = with_cluster(api.kubeconfig(), server=api.url.replace("127.0.0.1", "localhost"))
    with kube.connect(by_name) as client, pytest.raises(UnreachableError):
        client.find("Node", "worker-0")
    assert api.requests == []
    with kube.connect(with_cluster(by_name, **{"tls-server-name": "tenant.example"})) as client:
        assert client.find("Node", "worker-0") is None
    assert len(api.requests) == 1


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_insecure_skip_tls_verify_accepts_any_server_certificate(api, other_ca):
    kubeconfig = with_cluster(api.kubeconfig(), **{"certificate-authority-data": _b64(other_ca.pem),
                                                   "insecure-skip-tls-verify": True})
    with kube.connect(kubeconfig) as client:
        assert client.find("Node", "worker-0") is None


@pytest.mark.parametrize("credential", ["none", "foreign"])
def test_the_server_refuses_a_client_without_a_certificate_of_its_ca(api, other_ca, credential):
    if credential == "none":
        kubeconfig = with_user(api.kubeconfig(), {"token": TOKEN})
    else:
        cert, key = other_ca.issue("kubernetes-admin", ("system:masters",))
        kubeconfig = with_user(api.kubeconfig(), {"client-certificate-data": _b64(cert),
                                                  "client-key-data": _b64(key)})
    with kube.connect(kubeconfig) as client, pytest.raises(UnreachableError):
        client.find("Node", "worker-0")
    assert api.requests == []
    assert api.handshake_errors, "the server saw no failed handshake"


def test_nothing_listening_is_unreachable_a_status_less_api_error(api):
    dead = apiserver.dead_url()
    with kube.connect(with_cluster(api.kubeconfig(), server=dead)) as client:
        with pytest.raises(UnreachableError) as raised:
            client.list("Node")
    error = raised.value
    assert isinstance(error, ApiError) and error.status is None
    assert str(error).startswith(f"no answer: {dead}: ")


# --------------------------------------------------------------------------- #
# Requests, answers and errors
# --------------------------------------------------------------------------- #


def test_paths_follow_the_kubernetes_url_layout(api):
    objects = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w0"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "verify-gpu-x", "namespace": "default"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "kube-system"}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "konnectivity-agent",
                                                                   "namespace": "kube-system"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hami-scheduler",
                                                                    "namespace": "kube-system"}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "p",
                                                                                     "namespace": "tenant-a"}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": "hami-webhook"}},
        {"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
         "metadata": {"name": "alpha", "namespace": "tenants"}},
        {"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore", "metadata": {"name": "default"}},
        {"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
         "metadata": {"name": "kind-ip-pool", "namespace": "metallb-system"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "alpha", "namespace": "team-a"}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "db", "namespace": "team"}},
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "object-quota", "namespace": "team"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "edit"}},
    ]
    assert {obj["kind"] for obj in objects} == set(kube.RESOURCES), "a kind of the client is not tried here"
    for obj in objects:
        api.put(obj)
    with kube.connect(api.kubeconfig()) as client:
        for obj in objects:
            assert client.find(obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace")) == obj
        assert client.find("Secret", "s", "default") is None
        assert client.list("Node") == [objects[0]]
        assert client.list("NetworkPolicy", "tenant-a") == [objects[5]]
        assert client.list("NetworkPolicy", "tenant-b") == []
    assert [seen.path for seen in api.requests] == [
        "/api/v1/nodes/w0",
        "/api/v1/namespaces/default/pods/verify-gpu-x",
        "/api/v1/namespaces/kube-system/secrets/s",
        "/apis/apps/v1/namespaces/kube-system/daemonsets/konnectivity-agent",
        "/apis/apps/v1/namespaces/kube-system/deployments/hami-scheduler",
        "/apis/networking.k8s.io/v1/namespaces/tenant-a/networkpolicies/p",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/hami-webhook",
        "/apis/kamaji.clastix.io/v1alpha1/namespaces/tenants/tenantcontrolplanes/alpha",
        "/apis/kamaji.clastix.io/v1alpha1/datastores/default",
        "/apis/metallb.io/v1beta1/namespaces/metallb-system/ipaddresspools/kind-ip-pool",
        "/api/v1/namespaces/team-a/services/alpha",
        "/apis/policy/v1/namespaces/team/poddisruptionbudgets/db",
        "/api/v1/namespaces/team/resourcequotas/object-quota",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/edit",
        "/api/v1/namespaces/default/secrets/s",
        "/api/v1/nodes",
        "/apis/networking.k8s.io/v1/namespaces/tenant-a/networkpolicies",
        "/apis/networking.k8s.io/v1/namespaces/tenant-b/networkpolicies",
    ]


def test_error_answers_carry_the_status_and_the_servers_message(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w0"}})
    api.fail("GET", "/api/v1/nodes/w0", 403, 'nodes "w0" is forbidden: User "kubernetes-admin" cannot get')
    api.fail("GET", "/api/v1/nodes/w0", 502, "<html>Bad Gateway</html>")
    api.fail("GET", "/api/v1/nodes/w0", 200, "<html>a captive portal</html>")
    with kube.connect(api.kubeconfig()) as client:
        with pytest.raises(ApiError) as forbidden:
            client.find("Node", "w0")
        with pytest.raises(ApiError) as gateway:
            client.find("Node", "w0")
        with pytest.raises(ApiError) as not_json:
            client.find("Node", "w0")
        assert client.find("Node", "w0")["metadata"]["name"] == "w0"
    assert (forbidden.value.status, forbidden.value.message) == (
        403, 'nodes "w0" is forbidden: User "kubernetes-admin" cannot get')
    assert str(forbidden.value) == 'HTTP 403: nodes "w0" is forbidden: User "kubernetes-admin" cannot get'
    assert (gateway.value.status, gateway.value.message) == (502, "<html>Bad Gateway</html>")
    assert not isinstance(gateway.value, UnreachableError)
    assert (not_json.value.status, not_json.value.message) == (
        200, "GET /api/v1/nodes/w0 answered with a body that is not JSON")


def test_create_posts_to_the_collection_and_a_dry_run_stores_nothing(api):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "kube-system"},
              "stringData": {"a": "b"}}
    with kube.connect(api.kubeconfig()) as client:
        client.create(secret, dry_run=True)
        assert api.get("Secret", "s", "kube-system") is None
        created = client.create(secret)
        with pytest.raises(ApiError) as conflict:
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
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}})
    api.fail("DELETE", "/api/v1/namespaces/default/pods/p", 500, "etcdserver: request timed out")
    with kube.connect(api.kubeconfig()) as client:
        with pytest.raises(ApiError) as failed:
            client.delete("Pod", "p", "default")
        assert api.get("Pod", "p", "default") is not None
        assert client.delete("Pod", "p", "default", grace_period_seconds=0) is True
        assert client.delete("Pod", "p", "default") is False
    assert (failed.value.status, failed.value.message) == (500, "etcdserver: request timed out")
    assert [seen.query for seen in api.called("DELETE")] == [{}, {"gracePeriodSeconds": ["0"]}, {}]


def test_patch_status_sends_a_merge_patch_to_the_status_subresource(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w0"}, "status": {"capacity": {"cpu": "8"}}})
    with kube.connect(api.kubeconfig()) as client:
        node = client.patch_status("Node", "w0", {"status": {"capacity": {"example.com/x": "1"}}})
        with pytest.raises(ApiError) as missing:
            client.patch_status("Node", "w1", {"status": {}})
    assert node["status"]["capacity"] == {"cpu": "8", "example.com/x": "1"}
    assert missing.value.status == 404
    seen = api.called("PATCH")[0]
    assert seen.path == "/api/v1/nodes/w0/status"
    assert seen.headers["Content-Type"] == "application/merge-patch+json"
    # verify's probe of the node-label policy: the server must store nothing.
    with kube.connect(api.kubeconfig()) as client:
        client.patch_status("Node", "w0", {"metadata": {"labels": {"x": "y"}}}, dry_run=True)
    assert [seen.query for seen in api.called("PATCH")] == [{}, {}, {"dryRun": ["All"]}]


def test_patch_sends_a_merge_patch_to_the_object(api):
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w0"}, "spec": {"podCIDR": "10.0.0.0/24"}})
    with kube.connect(api.kubeconfig()) as client:
        node = client.patch("Node", "w0", {"spec": {"unschedulable": True}})
    assert node["spec"] == {"podCIDR": "10.0.0.0/24", "unschedulable": True}
    seen = api.called("PATCH")[0]
    assert seen.path == "/api/v1/nodes/w0"
    assert seen.headers["Content-Type"] == "application/merge-patch+json"


def test_evict_posts_an_eviction_to_the_pods_subresource(api):
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"}})
    # kubernetes pkg/registry/core/pod/storage/eviction.go checkAndDecrement: the budget is named in a cause only.
    refusal = apiserver.status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
    refusal["details"] = {"causes": [{"reason": "DisruptionBudget",
                                      "message": "The disruption budget db needs 1 healthy pods and has 1 currently"}]}
    api.fail("POST", "/api/v1/namespaces/team/pods/p/eviction", 429, refusal)
    with kube.connect(api.kubeconfig()) as client:
        with pytest.raises(ApiError) as refused:
            client.evict("p", "team")
        client.evict("p", "team")
    assert refused.value.status == 429
    assert refused.value.message == ("Cannot evict pod as it would violate the pod's disruption budget. The "
                                     "disruption budget db needs 1 healthy pods and has 1 currently")
    seen = api.called("POST")[-1]
    assert seen.path == "/api/v1/namespaces/team/pods/p/eviction"
    assert seen.body == {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "team"}}
    assert api.get("Pod", "p", "team") is None


def test_a_cluster_scoped_kind_takes_no_namespace():
    with pytest.raises(ValueError, match="Node is cluster-scoped"):
        kube.path_for("Node", "w0", "default")


@pytest.mark.parametrize("implementation", [kube.Client, SimClient, FakeSession], ids=lambda cls: cls.__name__)
def test_the_client_and_both_fakes_have_the_one_interface(implementation):
    """One seam: the dynamic providers' simulator and verify's fake platform stand in for exactly `KubeClient`."""
    for name in ("find", "list", "create", "delete", "patch", "patch_status", "evict", "close"):
        expected = inspect.signature(getattr(kube.KubeClient, name)).parameters
        actual = inspect.signature(getattr(implementation, name)).parameters
        assert [(p.name, p.kind, p.default) for p in actual.values()] == \
            [(p.name, p.kind, p.default) for p in expected.values()], f"{implementation.__name__}.{name}"
