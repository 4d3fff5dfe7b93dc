"""Renames and replacements that must happen in order (issue 20 deliverable 6): a new `management.clusterName`
replaces the kind cluster before its successor announces the same tenant addresses, and keeps the image cache; a
tenant whose CA changed at the same address lets its workers leave and rejoin.

Each scenario runs on the lifecycle simulator, whose `World.contested` refuses to pick a control plane while two
clusters' MetalLB answer ARP for the same address (metallb v0.15.3 internal/layer2/arp.go).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from components.management.image_cache import cache_volume_name
from tests.support.lifecycle_support import running_kind_lab

RENAMED = "lab-renamed"


def _rename(sim, name: str) -> None:
    sim.config.setdefault("management", {})["clusterName"] = name


@pytest.fixture(scope="module")
def renamed():
    """The running lab after a `management.clusterName` change and its `up` (the preview first, then the update),
    with what the tests read before it: each test forks `renamed.sim`."""
    sim = running_kind_lab()
    before = sim.resource("management-kind")
    volumes = set(sim.world.docker.volumes)
    _rename(sim, RENAMED)
    preview = sim.preview()
    plan = sim.up(skip_preview=True, expect_error=True)
    return SimpleNamespace(sim=sim, before=before, volumes=volumes, preview=preview, plan=plan)


def test_a_cluster_name_change_is_one_replacement_of_the_kind_cluster_old_one_first(renamed):
    preview = renamed.preview
    assert "management-kind" in preview.names("replace"), preview.render()
    # No second management component, cluster or provider appears beside the first.
    assert not {name for name in preview.names("create") if name.startswith(("management", "gpu-tenancy"))}
    plan = renamed.plan
    running = renamed.sim.fork()
    world = running.world
    assert world.address_clashes == [], "two clusters announced the same tenant addresses during the up"
    assert plan.ok, plan.render()
    assert list(world.kind) == [RENAMED]
    assert running.resource("management-kind").urn == renamed.before.urn
    assert all(tenant.api.reachable for tenant in world.tenants.values()) and len(world.tenants) == 2
    assert running.up().changed() == {}


def test_a_cluster_name_change_keeps_pulling_through_the_cache_it_filled(renamed):
    old_volume = cache_volume_name("gpu-tenancy")
    assert renamed.plan.ok, renamed.plan.render()
    running = renamed.sim.fork()
    world = running.world
    assert set(world.docker.volumes) == renamed.volumes, "a new cache volume, and the filled one orphaned"
    caches = [c for c in world.docker.containers.values() if c.volumes]
    assert caches and all(c.volumes == (old_volume,) and c.name.startswith(f"{RENAMED}-") for c in caches)
    running.destroy()
    assert f"volume {old_volume}" in world.leftovers() and f"volume {cache_volume_name(RENAMED)}" not in (
        world.leftovers())


# --------------------------------------------------------------------------- #
# A tenant CA that changed at the same address
# --------------------------------------------------------------------------- #


def test_after_a_tenant_ca_rotation_the_workers_rejoin_and_nothing_is_left_failing():
    from tests.support.sim import systems

    running = running_kind_lab(one_tenant=True)
    world = running.world
    (server,) = [s for s, t in world.tenants.items() if t.name == "tenant-a"]
    systems.rotate_ca(world, server)
    # The memberships hold the old CA: their deletes fail the TLS handshake and must use the current credential.
    plan = running.up(expect_error=True)
    assert plan.ok, plan.render()
    assert "tenant-a-worker-0-membership" in plan.names("replace")
    nodes = world.tenants[server].api.list("Node")
    assert [n["metadata"]["name"] for n in nodes] == ["tenant-a-worker-0"]
    assert running.up().changed() == {}
    running.destroy()


def test_a_control_plane_deleted_by_hand_comes_back_and_its_workers_rejoin_it():
    """The other way a CA changes at the same address: `kubectl delete tcp`, `pulumi refresh` (the tenant's objects
    are gone with it, PULUMI_K8S_DELETE_UNREACHABLE as `make down` sets it), then `up`: MetalLB hands the new
    control plane the freed address, with a new CA, and the workers' old memberships are deleted first."""
    running = running_kind_lab(one_tenant=True)
    world = running.world
    (cluster,) = world.kind.values()
    (server,) = [s for s, t in world.tenants.items() if t.name == "tenant-a"]
    cluster.api.delete(None, "TenantControlPlane", "tenant-a", "tenant-a")
    assert server not in world.tenants
    running.refresh(env={"PULUMI_K8S_DELETE_UNREACHABLE": "true"})
    plan = running.up(expect_error=True)
    assert plan.ok, plan.render()
    assert "tenant-a-worker-0-membership" in plan.names("replace") and server in world.tenants
    assert [n["metadata"]["name"] for n in world.tenants[server].api.list("Node")] == ["tenant-a-worker-0"]
    assert running.up().changed() == {}
