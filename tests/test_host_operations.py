"""The dynamic providers (`components/*/operations.py`, on `components.host_operations`): their
create/diff/update/delete, run over the real client (`components.kube`) against a local HTTPS API server that
requires client certificates (tests/support/apiserver.py), with a fake clock given to each provider.
"""

from __future__ import annotations

import base64
import datetime
import re
from typing import Any, TypeVar

import dill
import pytest

from components import host_operations, kube, providers
from components.gpu import operations as gpu_operations
from components.management import operations as management_operations
from components.tenant import operations as tenant_operations
from components.worker import operations as worker_operations
from tests.support import apiserver
from tests.support.apiserver import ApiServer, with_cluster
from tests.support.crd_schema import crd_json_schema, schema_errors
from tests.support.sdk import Unknown, serialize_provider
from tests.support.sim import pki

Provider = TypeVar("Provider", bound=host_operations.HostOperationProvider)

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


@pytest.fixture
def dead_url() -> str:
    return apiserver.dead_url()


# --------------------------------------------------------------------------- #
# poll, on an injected clock
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
def clock() -> FakeClock:
    return FakeClock()


def timed(provider: Provider, clock: FakeClock) -> Provider:
    """The provider with `clock` for its time (the seam the lifecycle simulator uses too)."""
    provider.clock = clock
    return provider


def test_poll_returns_as_soon_as_the_condition_is_met(clock):
    answers = iter(["1 of 3 ready", "2 of 3 ready", None])
    host_operations.poll(lambda: next(answers), clock, timeout=60, interval=5)
    assert clock.sleeps == [5, 5]


def test_poll_gives_up_after_the_timeout_with_the_last_answer(clock):
    calls = []

    def condition() -> str:
        calls.append(clock.elapsed)
        return f"waited {clock.elapsed:.0f}s"

    with pytest.raises(TimeoutError, match=r"^gave up after 10s: waited 12s$"):
        host_operations.poll(condition, clock, timeout=10, interval=3)
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
    return worker_operations.bootstrap_token_secret(token_id, "x" * 16, expiration, node_name)


def test_membership_mints_a_valid_kubeadm_bootstrap_token(api, clock):
    props = membership_props(api)
    result = timed(worker_operations.NodeMembershipProvider(), clock).create(props)

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
    assert secret["metadata"]["labels"][worker_operations.NODE_LABEL] == "alpha-worker-0"


def test_membership_tokens_are_random(api, clock):
    provider = timed(worker_operations.NodeMembershipProvider(), clock)
    tokens = {provider.create(membership_props(api)).outs["token"] for _ in range(3)}
    assert len(tokens) == 3
    assert all(BOOTSTRAP_TOKEN_PATTERN.fullmatch(token) for token in tokens)


def _scripted_random(monkeypatch, values: list[str]) -> None:
    draws = iter(values)
    monkeypatch.setattr(worker_operations, "_random", lambda length: next(draws))


def test_membership_draws_another_id_when_the_token_id_is_taken(api, clock, monkeypatch):
    taken = api.put(token_secret("aaaaaa", "someone-else"))
    _scripted_random(monkeypatch, ["aaaaaa", "a" * 16, "bbbbbb", "b" * 16])
    result = timed(worker_operations.NodeMembershipProvider(), clock).create(membership_props(api))
    assert result.outs["token"] == "bbbbbb." + "b" * 16
    assert result.id == "alpha-worker-0/bbbbbb"
    assert len(api.called("POST")) == 2
    assert api.get("Secret", "bootstrap-token-aaaaaa", "kube-system") is taken  # not overwritten


def test_membership_gives_up_after_five_collisions(api, clock, monkeypatch):
    api.put(token_secret("aaaaaa", "someone-else"))
    _scripted_random(monkeypatch, ["aaaaaa", "a" * 16] * 5)
    with pytest.raises(RuntimeError, match="five id collisions"):
        timed(worker_operations.NodeMembershipProvider(), clock).create(membership_props(api))
    assert len(api.called("POST")) == 5


def test_membership_does_not_retry_other_errors(api, clock):
    api.fail("POST", "/api/v1/namespaces/kube-system/secrets", 403, 'secrets is forbidden: User "x" cannot create')
    with pytest.raises(RuntimeError, match="cannot create the join token of node alpha-worker-0: HTTP 403"):
        timed(worker_operations.NodeMembershipProvider(), clock).create(membership_props(api))
    assert len(api.called("POST")) == 1


@pytest.mark.parametrize("key", worker_operations.NodeMembershipProvider.IDENTITY)
def test_membership_is_replaced_when_its_identity_changes(api, clock, key):
    olds = {**membership_props(api), "token": "t", "token_id": "aaaaaa",
            "expiration": "2026-03-02T10:00:00Z"}
    news = {**membership_props(api), key: "changed"}
    diff = timed(worker_operations.NodeMembershipProvider(), clock).diff("id", olds, news)
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, [key], True)


def test_membership_is_updated_in_place_for_new_credentials(api, clock):
    props = membership_props(api)
    olds = {**props, "token": "aaaaaa." + "a" * 16, "token_id": "aaaaaa", "expiration": "2026-03-02T10:00:00Z"}
    provider = timed(worker_operations.NodeMembershipProvider(), clock)
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
    diff = timed(worker_operations.NodeMembershipProvider(), clock).diff("id", _expired(props, clock, -1), dict(props))
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["expiration"], True)
    assert [seen.path for seen in api.requests] == ["/api/v1/nodes/alpha-worker-0"]


def test_membership_with_an_expired_token_of_a_registered_node_stays(api, clock):
    api.put(node("alpha-worker-0"))
    props = membership_props(api)
    diff = timed(worker_operations.NodeMembershipProvider(), clock).diff("id", _expired(props, clock, -1), dict(props))
    assert (diff.changes, diff.replaces) == (False, [])


def test_membership_expiry_is_not_decided_without_an_answer(api, clock, dead_url):
    provider = timed(worker_operations.NodeMembershipProvider(), clock)
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
    timed(worker_operations.NodeMembershipProvider(), clock).delete("alpha-worker-0/aaaaaa", props)
    assert api.get("Node", "alpha-worker-0") is None
    assert api.get("Secret", "bootstrap-token-aaaaaa", "kube-system") is None
    assert api.get("Secret", "bootstrap-token-bbbbbb", "kube-system") is not None
    # Again: both already gone is fine.
    timed(worker_operations.NodeMembershipProvider(), clock).delete("alpha-worker-0/aaaaaa", props)


def test_membership_delete_reports_api_errors(api, clock):
    api.put(node("alpha-worker-0"))
    api.fail("DELETE", "/api/v1/nodes/alpha-worker-0", 403, "forbidden")
    with pytest.raises(RuntimeError, match="cannot remove Node alpha-worker-0 from tenant alpha: HTTP 403"):
        timed(worker_operations.NodeMembershipProvider(), clock).delete("id", {**membership_props(api), "token_id": "aaaaaa"})
    assert api.get("Node", "alpha-worker-0") is not None


# --------------------------------------------------------------------------- #
# An unreachable tenant on delete (_reissued_kubeconfig), for every provider that removes something
# --------------------------------------------------------------------------- #


def _delete_membership(props: dict[str, Any]) -> None:
    worker_operations.NodeMembershipProvider().delete("id", {**props, "token_id": "aaaaaa"})


def _delete_capacity(props: dict[str, Any]) -> None:
    gpu_operations.GpuCapacityProvider().delete("id", {**props, "capacity": 2.0, "registration": "r"})


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


def _admin_secret(kubeconfig: str, namespace: str = "tenants", name: str = "alpha-admin-kubeconfig") -> dict[str, Any]:
    """The Secret Kamaji keeps a control plane's admin kubeconfigs in (clastix/kamaji internal/resources/kubeconfig.go)."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {"super-admin.conf": base64.b64encode(kubeconfig.encode()).decode()}}


def _with_status(tcp: dict[str, Any], secret_name: str = "alpha-admin-kubeconfig") -> dict[str, Any]:
    return {**tcp, "status": {"kubeconfig": {"admin": {"secretName": secret_name}}}}


def _other_ca(kubeconfig: str) -> str:
    """The same server and user, trusting a CA that did not sign the server's certificate (the stored credential of a
    control plane that was re-created or re-keyed at the same address)."""
    return with_cluster(kubeconfig, **{"certificate-authority-data": base64.b64encode(pki.new_ca("old").pem).decode()})


def test_a_stale_ca_is_a_failed_tls_handshake_not_an_http_answer(api):
    """What the rule below relies on, with the real client: a server the stored CA does not verify "does not answer"."""
    with pytest.raises(kube.UnreachableError), kube.connect(_other_ca(membership_props(api)["kubeconfig"])) as client:
        client.find("Node", "alpha-worker-0")


@DELETES
def test_delete_after_the_tenant_ca_changed_at_the_same_address_uses_its_current_credential(api, clock, delete):
    api.put(node("alpha-worker-0", capacity={"nvidia.com/gpu": "2"}, allocatable={"nvidia.com/gpu": "2"}))
    api.put(_with_status(control_plane()))
    props = membership_props(api)
    api.put(_admin_secret(props["kubeconfig"]))
    delete({**props, "kubeconfig": _other_ca(props["kubeconfig"])})
    left = api.get("Node", "alpha-worker-0")
    if delete is _delete_membership:
        assert left is None
    else:
        assert "nvidia.com/gpu" not in left["status"]["capacity"] and "nvidia.com/gpu" not in left["status"]["allocatable"]


@DELETES
def test_delete_with_a_tenant_down_whose_credential_did_not_change_fails(api, clock, dead_url, delete):
    api.put(_with_status(control_plane()))
    props = membership_props(api)
    stored = with_cluster(props["kubeconfig"], server=dead_url)
    api.put(_admin_secret(stored))
    with pytest.raises(RuntimeError, match="TenantControlPlane tenants/alpha still exists: nothing was removed"):
        delete({**props, "kubeconfig": stored})


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
    result = timed(worker_operations.NodeRegistrationProvider(), clock).create(props)
    assert result.id == f"alpha-worker-0/{registered[0]['metadata']['uid']}"
    assert result.outs == props
    assert clock.sleeps == [2.0, 2.0, 2.0]
    assert api.get("Secret", "bootstrap-token-aaaaaa", "kube-system") is None
    assert api.called("DELETE")[0].path == "/api/v1/namespaces/kube-system/secrets/bootstrap-token-aaaaaa"


def test_registration_gives_up_after_its_timeout(api, clock):
    api.put(token_secret("aaaaaa"))
    with pytest.raises(RuntimeError, match=r"Node alpha-worker-0 has not registered: check the kubelet"):
        timed(worker_operations.NodeRegistrationProvider(), clock).create(registration_props(api))
    assert worker_operations.NODE_REGISTER_TIMEOUT <= clock.elapsed < worker_operations.NODE_REGISTER_TIMEOUT + 2
    assert api.called("DELETE") == []


def test_registration_does_not_wait_out_an_api_error(api, clock):
    api.fail("GET", "/api/v1/nodes/alpha-worker-0", 403, "forbidden")
    with pytest.raises(host_operations.ApiError, match="403"):
        timed(worker_operations.NodeRegistrationProvider(), clock).create(registration_props(api))
    assert clock.sleeps == []


@pytest.mark.parametrize(("key", "replaced"), [("node_name", True), ("join", True), ("token_id", True),
                                               ("kubeconfig", False)])
def test_registration_diff(api, key, replaced):
    olds = registration_props(api)
    provider = worker_operations.NodeRegistrationProvider()
    assert provider.diff("id", olds, dict(olds)).changes is False
    diff = provider.diff("id", olds, {**olds, key: "changed"})
    assert (diff.changes, diff.replaces) == (True, [key] if replaced else [])


def test_registration_delete_calls_nothing():
    provider = worker_operations.NodeRegistrationProvider()
    provider.connect = lambda kubeconfig: pytest.fail("delete connected")
    provider.delete("id", {"kubeconfig": "x", "node_name": "n", "token_id": "t"})


# --------------------------------------------------------------------------- #
# GpuCapacityProvider
# --------------------------------------------------------------------------- #


def capacity_props(api: ApiServer, capacity: Any = 10.0) -> dict[str, Any]:
    return {**membership_props(api), "capacity": capacity, "registration": "alpha-worker-0/uid-1"}


def test_capacity_is_an_integer_quantity_on_capacity_and_allocatable(api):
    api.put(node("alpha-worker-0", capacity={"cpu": "8"}, allocatable={"cpu": "7800m"}))
    result = gpu_operations.GpuCapacityProvider().create(capacity_props(api, 10.0))  # a number, as protobuf sends it
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
        gpu_operations.GpuCapacityProvider().create(capacity_props(api, capacity))
    assert api.requests == []


def test_capacity_update_and_diff(api):
    api.put(node("alpha-worker-0", capacity={"nvidia.com/gpu": "10"}, allocatable={"nvidia.com/gpu": "10"}))
    provider = gpu_operations.GpuCapacityProvider()
    olds = capacity_props(api, 10.0)
    assert provider.diff("id", olds, dict(olds)).changes is False
    diff = provider.diff("id", olds, {**olds, "capacity": 4.0})
    assert (diff.changes, diff.replaces) == (True, [])
    for key in ("node_name", "registration"):  # a rejoined worker is a fresh Node without the capacity
        assert provider.diff("id", olds, {**olds, key: "other"}).replaces == [key]
    provider.update("id", olds, {**olds, "capacity": 4.0})
    assert api.get("Node", "alpha-worker-0")["status"]["allocatable"] == {"nvidia.com/gpu": "4"}


def test_capacity_gone_from_the_node_is_a_change_so_the_next_up_applies_it_again(api, dead_url):
    """A status write that did not last (or was undone by hand): the diff reads the Node and asks for an update,
    which is what lets an upgrade stopped at `<node>-ready` for the missing capacity go on with the next `up`."""
    api.put(node("alpha-worker-0", capacity={"nvidia.com/gpu": "10"}, allocatable={"nvidia.com/gpu": "10"}))
    provider = gpu_operations.GpuCapacityProvider()
    olds = capacity_props(api, 10.0)
    assert provider.diff("id", olds, dict(olds)).changes is False
    api.get("Node", "alpha-worker-0")["status"]["allocatable"] = {}
    assert provider.diff("id", olds, dict(olds)).changes is True
    api.get("Node", "alpha-worker-0")["status"] = {"capacity": {"nvidia.com/gpu": "4"}}
    assert provider.diff("id", olds, dict(olds)).changes is True
    provider.update("id", olds, dict(olds))
    assert provider.diff("id", olds, dict(olds)).changes is False
    # No opinion without an answer or without a Node.
    unreachable = {**olds, "kubeconfig": with_cluster(olds["kubeconfig"], server=dead_url)}
    assert provider.diff("id", unreachable, dict(unreachable)).changes is False
    del api.objects[("Node", None, "alpha-worker-0")]
    assert provider.diff("id", olds, dict(olds)).changes is False


def test_capacity_delete_removes_only_the_gpu_resource(api):
    api.put(node("alpha-worker-0", capacity={"cpu": "8", "nvidia.com/gpu": "10"},
                 allocatable={"cpu": "8", "nvidia.com/gpu": "10"}))
    gpu_operations.GpuCapacityProvider().delete("id", capacity_props(api))
    assert api.get("Node", "alpha-worker-0")["status"] == {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}}


def test_capacity_delete_of_a_gone_node_is_fine_other_errors_are_not(api):
    provider = gpu_operations.GpuCapacityProvider()
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
    result = timed(tenant_operations.KonnectivityReadyProvider(), clock).create(props)
    assert (result.id, result.outs) == ("konnectivity-agent", props)
    assert clock.elapsed == 8
    assert {seen.path for seen in api.requests} == {
        "/apis/apps/v1/namespaces/kube-system/daemonsets/konnectivity-agent"}
    # Another node later: update waits again.
    clock.at(12, lambda: agents["status"].update(numberReady=3))
    timed(tenant_operations.KonnectivityReadyProvider(), clock).update("id", props, {**props, "nodes": 3.0})
    assert clock.elapsed == 12


@pytest.mark.parametrize(("agents", "answer"), [
    (None, "daemonset/konnectivity-agent does not exist (is spec.addons.konnectivity set?)"),
    (1, "1 of 2 konnectivity agents ready"),
])
def test_konnectivity_gives_up_with_the_last_answer(api, clock, agents, answer):
    if agents is not None:
        api.put(konnectivity_agents(agents))
    with pytest.raises(RuntimeError, match=re.escape(answer)):
        timed(tenant_operations.KonnectivityReadyProvider(), clock).create({"kubeconfig": api.kubeconfig(), "nodes": 2.0})
    assert clock.elapsed >= tenant_operations.KONNECTIVITY_TIMEOUT


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
    result = timed(management_operations.KamajiWebhookReadyProvider(), clock).create(webhook_props(api))
    assert result.id == "kamaji-webhook"
    posts = api.called("POST")
    assert len(posts) == 3 and len(clock.sleeps) == 2
    assert all(seen.path == TCP_COLLECTION and seen.query == {"dryRun": ["All"]} for seen in posts)
    assert api.objects == {}, "the probe must never be created for real"


def test_kamaji_webhook_denial_counts_as_an_answer(api, clock):
    # controller-runtime's admission.Denied answers 403; the API server reports "admission webhook ... denied".
    api.fail("POST", TCP_COLLECTION, 403, 'admission webhook "vtenantcontrolplane.kb.io" denied the request: no')
    timed(management_operations.KamajiWebhookReadyProvider(), clock).create(webhook_props(api))
    assert clock.sleeps == []


def test_kamaji_webhook_wait_gives_up_with_the_last_failure(api, clock):
    for _ in range(int(management_operations.KAMAJI_WEBHOOK_TIMEOUT / 2) + 2):
        api.fail("POST", TCP_COLLECTION, 500, WEBHOOK_DOWN)
    with pytest.raises(RuntimeError, match="Kamaji's admission webhook does not answer: gave up after 180s: "
                                           "Internal error occurred: failed calling webhook"):
        timed(management_operations.KamajiWebhookReadyProvider(), clock).update("id", {}, webhook_props(api))


def test_kamaji_webhook_wait_takes_no_answer_for_no_answer(api, clock, dead_url):
    """Only an answer from the API server says anything about the webhook: an unreachable management cluster fails
    the wait at once instead of passing it."""
    props = {**webhook_props(api), "kubeconfig": with_cluster(api.kubeconfig(), server=dead_url)}
    with pytest.raises(kube.UnreachableError, match=re.escape(dead_url)):
        timed(management_operations.KamajiWebhookReadyProvider(), clock).create(props)
    assert clock.sleeps == []


def test_kamaji_webhook_probe_is_a_valid_tenant_control_plane(vendor_dir):
    """The dry run must be an object Kamaji's CRD accepts as sent: a field the structural schema does not know is
    pruned by the API server (so the datastore the probe names would silently be dropped)."""
    schema = crd_json_schema(vendor_dir / "kamaji" / "kamaji.clastix.io_tenantcontrolplanes.yaml")
    probe = management_operations.probe_control_plane("kamaji-system", "default", "v1.33.0")
    assert schema_errors(probe, schema) == []


# --------------------------------------------------------------------------- #
# HamiWebhookReadyProvider, GpuPluginReadyProvider, MetalLBWebhookReadyProvider
# --------------------------------------------------------------------------- #

POD_COLLECTION = "/api/v1/namespaces/default/pods"
HAMI_DOWN = ('Internal error occurred: failed calling webhook "vgpu.hami.io": failed to call webhook: Post '
             '"https://hami-scheduler.kube-system.svc:443/webhook?timeout=10s": no endpoints available for service '
             '"hami-scheduler"')


def hami_props(api: ApiServer) -> dict[str, Any]:
    return {"kubeconfig": api.kubeconfig(), "namespace": "default", "image": "registry.k8s.io/pause:3.10",
            "revision": 1.0, "registrations": ["a/1"]}


class AnswersInTurn:
    """A KubeClient whose `create` gives these answers in turn (an ApiError is raised), recording the dry runs."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[dict[str, Any], bool]] = []

    def create(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        self.sent.append((obj, dry_run))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        return None


def test_hami_webhook_wait_is_done_once_a_dry_run_comes_back_mutated(api, clock):
    """HAMi's webhook Service has no endpoint (a failed call), then the webhook may not mutate yet."""
    unmutated = {"spec": {"schedulerName": "default-scheduler"}}
    client = AnswersInTurn(kube.ApiError(500, HAMI_DOWN), unmutated, {"spec": {"schedulerName": "hami-scheduler"}})
    provider = timed(gpu_operations.HamiWebhookReadyProvider(), clock)
    provider.connect = lambda kubeconfig: client
    result = provider.create(hami_props(api))
    assert result.id == "hami-webhook" and result.outs == hami_props(api) | {"kubeconfig": result.outs["kubeconfig"]}
    assert clock.sleeps == [2.0, 2.0]
    assert all(dry_run for _, dry_run in client.sent)
    probe = client.sent[0][0]
    assert probe["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "nodeName" not in probe["spec"] and "schedulerName" not in probe["spec"]


def test_hami_webhook_wait_sends_dry_runs_and_gives_up_naming_the_leader_label(api, clock):
    """Through the real client: every probe is a dry run that the (unmutating) server never stores."""
    api.fail("POST", POD_COLLECTION, 500, HAMI_DOWN)
    with pytest.raises(RuntimeError, match=r"HAMi's admission webhook does not answer: gave up after 120s: HAMi's "
                                           r"webhook did not mutate a GPU pod \(schedulerName None\)\. .*"
                                           r"hami\.io/scheduler-role=leader"):
        timed(gpu_operations.HamiWebhookReadyProvider(), clock).create(hami_props(api))
    posts = api.called("POST")
    assert posts and all(seen.path == POD_COLLECTION and seen.query == {"dryRun": ["All"]} for seen in posts)
    assert api.objects == {}


def test_hami_webhook_denial_counts_as_an_answer(api, clock):
    api.fail("POST", POD_COLLECTION, 403, 'admission webhook "vgpu.hami.io" denied the request: exceeding quota')
    timed(gpu_operations.HamiWebhookReadyProvider(), clock).create(hami_props(api))
    assert clock.sleeps == []


def plugin_props(api: ApiServer) -> dict[str, Any]:
    return {"kubeconfig": api.kubeconfig(), "node_name": "alpha-worker-0",
            "resources": ["nvidia.com/gpumem", "nvidia.com/gpucores"], "registration": "alpha-worker-0/u1",
            "revision": 1.0}


def test_plugin_wait_takes_zero_for_not_yet_and_waits_for_numbers_above_it(api, clock):
    """The mock polls every 30 s; a kubelet that restarted reports "0" until it registers again."""
    worker = api.put(node("alpha-worker-0", allocatable={"nvidia.com/gpu": "10", "nvidia.com/gpumem": "0"}))
    clock.at(30, lambda: worker["status"]["allocatable"].update({"nvidia.com/gpumem": "8192"}))
    clock.at(40, lambda: worker["status"]["allocatable"].update({"nvidia.com/gpucores": "100"}))
    result = timed(gpu_operations.GpuPluginReadyProvider(), clock).create(plugin_props(api))
    assert result.id == "gpu-plugin" and clock.elapsed == 40
    assert {seen.path for seen in api.requests} == {"/api/v1/nodes/alpha-worker-0"}


def test_plugin_wait_gives_up_naming_what_the_node_shows(api, clock):
    api.put(node("alpha-worker-0", allocatable={"nvidia.com/gpumem": "0"}))
    with pytest.raises(RuntimeError, match=re.escape(
            "HAMi's mock device plugin registered nothing: gave up after 180s: Node alpha-worker-0 allocatable has "
            "nvidia.com/gpumem='0', nvidia.com/gpucores=None. Check kubectl -n kube-system logs -l "
            "app.kubernetes.io/component=hami-mock-device-plugin")):
        timed(gpu_operations.GpuPluginReadyProvider(), clock).update("id", {}, plugin_props(api))
    assert gpu_operations.GPU_PLUGIN_TIMEOUT <= clock.elapsed < gpu_operations.GPU_PLUGIN_TIMEOUT + 2


@pytest.mark.parametrize(("value", "positive"), [
    ("8192", True), ("1", True), ("100", True), ("1k", True), ("0.5", True), (8192.0, True),
    ("0", False), ("0Mi", False), ("", False), (None, False), ("-1", False), ("none", False),
])
def test_positive_quantity(value, positive):
    assert kube.positive_quantity(value) is positive


POOL_COLLECTION = "/apis/metallb.io/v1beta1/namespaces/metallb-system/ipaddresspools"
METALLB_DOWN = ('Internal error occurred: failed calling webhook "ipaddresspoolvalidationwebhook.metallb.io": '
                'failed to call webhook: Post "https://metallb-webhook-service.metallb-system.svc:443/validate-'
                'metallb-io-v1beta1-ipaddresspool?timeout=10s": no endpoints available for service '
                '"metallb-webhook-service"')


def metallb_props(api: ApiServer) -> dict[str, Any]:
    return {"kubeconfig": api.kubeconfig(), "namespace": "metallb-system",
            "addresses": "172.18.255.200-172.18.255.250", "revision": 1.0}


def test_metallb_webhook_wait_retries_failed_calls_with_dry_runs_of_a_pool(api, clock):
    """MetalLB's webhook Service endpoints follow the controller's readiness."""
    api.fail("POST", POOL_COLLECTION, 500, METALLB_DOWN)
    result = timed(management_operations.MetalLBWebhookReadyProvider(), clock).create(metallb_props(api))
    assert result.id == "metallb-webhook" and clock.sleeps == [2.0]
    posts = api.called("POST")
    assert len(posts) == 2 and all(seen.query == {"dryRun": ["All"]} for seen in posts)
    assert posts[0].body["spec"]["addresses"] == ["172.18.255.200-172.18.255.250"]
    assert api.objects == {}


def test_metallb_webhook_wait_gives_up_naming_the_service(api, clock):
    for _ in range(int(management_operations.METALLB_WEBHOOK_TIMEOUT / 2) + 2):
        api.fail("POST", POOL_COLLECTION, 500, METALLB_DOWN)
    with pytest.raises(RuntimeError, match=r"MetalLB's admission webhook does not answer: gave up after 120s: .*"
                                           r"metallb-webhook-service"):
        timed(management_operations.MetalLBWebhookReadyProvider(), clock).create(metallb_props(api))


def test_metallb_probe_is_a_valid_address_pool(vendor_dir):
    schema = crd_json_schema(vendor_dir / "metallb" / "metallb.io_ipaddresspools.yaml", "v1beta1")
    probe = management_operations.probe_address_pool("metallb-system", ["172.18.255.200-172.18.255.250"])
    assert schema_errors(probe, schema) == []


WAITS = [gpu_operations.HamiWebhookReadyProvider, gpu_operations.GpuPluginReadyProvider,
         management_operations.MetalLBWebhookReadyProvider, management_operations.KamajiWebhookReadyProvider]


@pytest.mark.parametrize("provider_class", WAITS, ids=lambda cls: cls.__name__)
def test_a_wait_runs_again_for_a_new_revision_but_not_for_a_moved_pickle(provider_class):
    """The revision is what changes on an upgrade; `__provider` changes when the class moves."""
    olds = {"kubeconfig": "k", "revision": 1.0, "__provider": "old-path"}
    assert not provider_class().diff("id", olds, {**olds, "__provider": "new-path"}).changes
    assert provider_class().diff("id", olds, {**olds, "revision": 2.0}).changes


# --------------------------------------------------------------------------- #
# The seam and the pickles
# --------------------------------------------------------------------------- #

PROVIDERS = [getattr(providers, name) for name in providers.__all__]


@pytest.mark.parametrize("provider_class", PROVIDERS, ids=lambda cls: cls.__name__)
def test_a_provider_pickles_by_reference_without_its_seam(provider_class, clock):
    """What Pulumi stores (`__provider`) names the class only, no instance state: the simulator's client factory
    and clock, set on the one instance it runs, leave the class alone, and the provider host gets the real ones."""
    provider = provider_class()
    provider.connect, provider.clock = (lambda kubeconfig: pytest.fail("connected")), clock
    stored = serialize_provider(provider_class())
    loaded = dill.loads(base64.b64decode(stored))
    assert type(loaded) is provider_class and vars(loaded) == {}
    assert loaded.connect is kube.connect and isinstance(loaded.clock, host_operations.Clock)
    assert serialize_provider(provider_class()) == stored  # stable: no diff of `__provider` between runs

