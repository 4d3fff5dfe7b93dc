"""The production example on an adopted management cluster with one node and with three (issue 21 deliverable 8).

What the node count changes for this program: where in-cluster clients reach the management API server. The API
server writes one endpoint per control-plane instance into the EndpointSlice `default/kubernetes` (kubernetes
pkg/controlplane/reconcilers/endpointsadapter.go), and a dedicated etcd's setup Jobs must be let out to every one
of them (components/tenant/spec.py management_api_destinations). Each scenario runs the example's first `up` on the
simulator (its first team only, which has a dedicated etcd: each tenant builds its own policy), then checks that the
cluster ends as it was found.
"""

from __future__ import annotations

import copy

import pytest

from tests.support.lifecycle_support import adopt_lab, running_adopt_lab
from tests.support.sim import Lifecycle
from tests.support.sim.world import KubeApi

API_PORT = 6443


def _control_plane_nodes(api: KubeApi, count: int) -> list[str]:
    """`count` control-plane nodes, each running an API server: their Nodes and the endpoints the API server keeps."""
    addresses = [f"10.20.0.{10 + n}" for n in range(count)]
    for n, address in enumerate(addresses):
        api.put({"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": f"mgmt-{n}", "labels": {"node-role.kubernetes.io/control-plane": ""}},
                 "status": {"addresses": [{"type": "InternalIP", "address": address}],
                            "conditions": [{"type": "Ready", "status": "True"}]}})
    slice_ = api.find("EndpointSlice", "default", "kubernetes")
    slice_["endpoints"] = [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]
    return addresses


def _snapshot(api: KubeApi) -> dict:
    return copy.deepcopy(api.objects)


@pytest.fixture(scope="module", params=[1, 3], ids=["one-node", "three-nodes"])
def adopted(request):
    # Its first team only (with a dedicated etcd, on its servers): what the node count changes is each tenant's own.
    sim = adopt_lab(one_tenant=True)
    addresses = _control_plane_nodes(sim.world.adopted, request.param)
    found = _snapshot(sim.world.adopted)
    sim.up()
    return sim, addresses, found


def _dedicated(sim: Lifecycle) -> list[str]:
    return [t["name"] for t in sim.config["tenants"] if (t.get("dataStore") or {}).get("dedicated")]


def test_every_tenant_is_up_and_proved_on_its_servers():
    sim = running_adopt_lab()  # both teams of the example (the node count changes nothing here)
    tenants = sim.output("tenants")
    assert set(tenants) == {t["name"] for t in sim.config["tenants"]} and len(tenants) == 2
    for name, summary in tenants.items():
        api = sim.world.tenant_api(name)
        assert api is not None and api.reachable, name
        assert summary["endpoint"].startswith("10.20.255."), summary  # from the loadBalancerPool
    assert len({summary["endpoint"] for summary in tenants.values()}) == len(tenants)  # an address each


def test_a_dedicated_etcd_may_reach_every_api_server_of_the_cluster(adopted):
    sim, addresses, _ = adopted
    assert _dedicated(sim), "the example has a tenant with a dedicated etcd"
    for tenant in _dedicated(sim):
        (policy,) = [p for p in sim.world.adopted.list("NetworkPolicy", tenant) if p["metadata"]["name"] ==
                     "etcd-setup-api"]
        allowed = {(peer["ipBlock"]["cidr"], port["port"]) for rule in policy["spec"]["egress"]
                   for peer in rule["to"] for port in rule["ports"]}
        assert {(f"{a}/32", API_PORT) for a in addresses} <= allowed, allowed


def test_the_next_preview_and_up_change_nothing(adopted):
    sim, _, _ = adopted
    running = sim.fork()
    assert running.preview().changed() == {}
    assert running.up(skip_preview=True).changed() == {}


def test_an_api_server_that_moves_updates_only_the_setup_policies(adopted):
    sim, addresses, _ = adopted
    running = sim.fork()
    slice_ = running.world.adopted.find("EndpointSlice", "default", "kubernetes")
    slice_["endpoints"][-1]["addresses"] = ["10.20.0.99"]  # a control-plane node replaced by another
    plan = running.up()
    assert plan.changed() == {"update": {f"{t}-etcd-setup" for t in _dedicated(sim)}}, plan.render()


def test_destroy_leaves_the_cluster_as_it_was_found(adopted):
    sim, _, found = adopted
    running = sim.fork()
    running.destroy()
    assert running.resources() == [] and running.world.leftovers() == []
    left = running.world.adopted.objects
    # Only the charts' CRDs stay: Helm never deletes a chart's crds/ (helm pkg/action/uninstall.go), and the
    # program's CRD patches give up their fields only (components/management/kamaji.py).
    assert {k for k in left if k not in found and k[0] != "CustomResourceDefinition"} == set(), (
        "objects of ours left on the adopted cluster")
    assert {k for k in found if k not in left} == set(), "objects of the cluster's own removed"
