"""The simulator's network, each rule against the upstream behaviour it models (tests/support/sim/world.py
World.api_for and World.contested, systems._start_tenant and rotate_ca, systems.route_get, admits and
kubelet_node_address): two clusters announcing one address, a client whose stored CA no longer verifies the server,
a server's route and source address, a tenant's source ranges, and the address a kubelet reports.

Small worlds, not the project's program: one rule per test, so a wrong rule fails here first.
"""

from __future__ import annotations

import pytest

from components.kube import ApiError, UnreachableError
from tests.support.sim import World, pki, systems
from tests.support.sim.world import SYSTEM_MASTERS, Machine, Tenant

ADDRESS = "172.18.255.200"
SERVER = f"https://{ADDRESS}:6443"


def _two_labs() -> tuple[World, object, object]:
    world = World(kind_network=True)
    first = world.create_kind_cluster("lab-a", {"nodes": [{}]}).api
    second = world.create_kind_cluster("lab-b", {"nodes": [{}]}).api
    return world, first, second


def _admin(world: World, server: str = SERVER) -> str:
    api = world.apis[server]
    return pki.kubeconfig(api.server, api.ca, "kubernetes-super-admin", (SYSTEM_MASTERS,), "t")


def test_a_second_cluster_announcing_an_address_makes_it_answer_no_one():
    """metallb v0.15.3 internal/layer2/arp.go: each cluster's speaker answers ARP for its own addresses."""
    world, first, second = _two_labs()
    systems._start_tenant(world, first, "tenant-a", "tenant-a", ADDRESS)
    only_first = _admin(world)
    assert world.api_for(only_first) is world.tenants[SERVER].api
    systems._start_tenant(world, second, "team-x", "team-x", ADDRESS)
    assert world.address_clashes == [f"{ADDRESS}: kind-lab-a and kind-lab-b"]
    for kubeconfig in (only_first, _admin(world)):
        with pytest.raises(UnreachableError, match="two clusters announce 172.18.255.200.*ARP race"):
            world.api_for(kubeconfig)


def test_when_one_of_the_two_clusters_goes_the_other_answers_alone():
    world, first, second = _two_labs()
    systems._start_tenant(world, first, "tenant-a", "tenant-a", ADDRESS)
    kept = _admin(world)
    systems._start_tenant(world, second, "team-x", "team-x", ADDRESS)
    world.delete_kind_cluster("lab-b")
    assert world.contested(SERVER) is None
    assert world.api_for(kept).tenant.name == "tenant-a"  # type: ignore[attr-defined]


def test_the_same_cluster_reusing_an_address_is_no_clash():
    """A control plane re-created on the same cluster takes the freed address: one speaker, no race."""
    world, first, _ = _two_labs()
    systems._start_tenant(world, first, "tenant-a", "tenant-a", ADDRESS)
    world.drop_tenant(SERVER)
    systems._start_tenant(world, first, "tenant-a", "tenant-a", ADDRESS)
    assert world.address_clashes == [] and world.contested(SERVER) is None


def test_a_stale_ca_fails_the_tls_handshake_instead_of_getting_an_http_answer():
    """urllib3 verifies the server against the kubeconfig's CA before any request: SSLError, which components/kube.py
    reports as UnreachableError; a 401 would need the handshake to succeed."""
    world, first, _ = _two_labs()
    systems._start_tenant(world, first, "tenant-a", "tenant-a", ADDRESS)
    before = _admin(world)
    systems.rotate_ca(world, SERVER)
    with pytest.raises(UnreachableError, match="CERTIFICATE_VERIFY_FAILED") as failed:
        world.api_for(before)
    assert isinstance(failed.value, ApiError) and failed.value.status is None
    assert world.api_for(_admin(world)) is world.tenants[SERVER].api


def _server() -> Machine:
    return Machine(name="gpu-01", interfaces={"eno1": "192.168.50.1", "ens2f0": "10.20.1.11"}, default_interface="eno1",
                   routes={"10.20.0.0/16": "ens2f0", "10.20.255.0/24": "eno1"})


def test_the_most_specific_route_decides_and_its_interface_gives_the_source_address():
    server = _server()
    assert systems.route_get(server, "10.20.1.200") == ("10.20.1.11", "ens2f0")  # /16 over the default route
    assert systems.route_get(server, "10.20.255.200") == ("192.168.50.1", "eno1")  # /24 over the /16
    assert systems.route_get(server, "8.8.8.8") == ("192.168.50.1", "eno1")  # the default route


def test_without_a_default_route_an_uncovered_destination_has_no_route():
    server = _server()
    server.default_interface = None
    assert systems.route_get(server, "8.8.8.8") is None


def test_the_source_ranges_admit_only_their_networks_and_no_ranges_admit_everyone():
    world = World(kind_network=True)
    world.create_kind_cluster("lab-a", {"nodes": [{}]})
    tenant = Tenant(namespace="t", name="t", address=ADDRESS, api=world.kind["lab-a"].api)
    assert systems.admits(tenant, "192.168.50.1")
    tenant.load_balancer_source_ranges = ["10.20.0.0/24", "10.20.1.0/24"]  # type: ignore[attr-defined]
    assert systems.admits(tenant, "10.20.1.11") and not systems.admits(tenant, "192.168.50.1")


def test_a_node_ip_on_an_interface_is_the_address_and_one_on_none_is_refused():
    server = _server()
    assert systems.kubelet_node_address(server, "team-vision-gpu-01", "10.20.1.11") == "10.20.1.11"
    # validateNodeIP: the kubelet sets no address at all rather than a wrong one.
    assert systems.kubelet_node_address(server, "team-vision-gpu-01", "10.20.9.9") is None
    # Without node-ip: the default route's interface.
    assert systems.kubelet_node_address(server, "team-vision-gpu-01") == "192.168.50.1"
