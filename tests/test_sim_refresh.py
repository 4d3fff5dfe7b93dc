"""`pulumi refresh` on the simulator (tests/support/sim/engine.py run_refresh, each provider's Read in providers.py),
against the running lab: each rule against the upstream behaviour it models.

The engine reads every custom resource but the providers through its provider (pulumi v3.259.0
pkg/resource/deploy/step.go RefreshStep.Apply): gone is a delete from the state, new inputs or state replace the
stored ones. pulumi-kubernetes (v4.32.0 provider.go Read) returns the live object, and as inputs the live object
pruned to the old inputs' fields, so a change made on the cluster shows in the next `up`; the docker bridge drops a
container, image or volume that is gone.
"""

from __future__ import annotations

import pytest

from tests.support.lifecycle_support import running_kind_lab

POLICY = "tenant-a-isolation"


def _management(sim):
    (cluster,) = sim.world.kind.values()
    return cluster.api


def test_a_refresh_of_a_running_lab_deletes_nothing_and_the_next_preview_is_empty():
    running = running_kind_lab(one_tenant=True)
    plan = running.refresh()
    assert "delete" not in plan.changed(), plan.render()
    assert running.preview().changed() == {}


def test_an_object_deleted_by_hand_leaves_the_state_and_the_next_up_creates_it():
    running = running_kind_lab(one_tenant=True)
    _management(running).remove("NetworkPolicy", "tenant-a", "tenant-isolation")
    plan = running.refresh()
    assert plan.changed().get("delete") == {POLICY}, plan.render()
    assert running.up().changed() == {"create": {POLICY}}
    assert _management(running).find("NetworkPolicy", "tenant-a", "tenant-isolation") is not None


def test_a_label_changed_on_the_cluster_shows_in_the_next_up_and_is_put_back():
    running = running_kind_lab(one_tenant=True)
    live = _management(running).find("NetworkPolicy", "tenant-a", "tenant-isolation")
    (label, value) = next(iter(live["metadata"]["labels"].items()))
    live["metadata"]["labels"][label] = "changed-by-hand"
    assert running.preview().changed() == {}, "without a refresh the engine compares stored inputs only"
    running.refresh()
    plan = running.up()
    assert plan.changed() == {"update": {POLICY}}, plan.render()
    assert any(diff.startswith("metadata") for diff in plan.step(POLICY).diffs), plan.render()
    assert _management(running).find("NetworkPolicy", "tenant-a", "tenant-isolation")["metadata"]["labels"][
        label] == value


def test_a_cache_container_removed_by_hand_leaves_the_state_and_the_next_up_runs_it_again():
    running = running_kind_lab(one_tenant=True)
    docker = running.world.docker
    (name,) = [n for n in docker.containers if n.endswith("-mirror-quay-io")]
    docker.containers.pop(name)
    plan = running.refresh()
    assert plan.changed().get("delete") == {"image-mirror-quay-io"}, plan.render()
    running.up()
    assert name in docker.containers


@pytest.mark.parametrize("delete_unreachable", [False, True], ids=["fails", "with-delete-unreachable"])
def test_a_refresh_with_a_tenant_unreachable_fails_unless_told_to_drop_its_objects(delete_unreachable):
    running = running_kind_lab(one_tenant=True)
    (server,) = [s for s, t in running.world.tenants.items() if t.name == "tenant-a"]
    running.world.tenants[server].api.reachable = False
    env = {"PULUMI_K8S_DELETE_UNREACHABLE": "true"} if delete_unreachable else {}
    plan = running.refresh(env=env, expect_error=True)
    if delete_unreachable:
        assert plan.ok and plan.changed().get("delete"), plan.render()
        assert all(name.startswith("tenant-a-") for name in plan.changed()["delete"]), plan.render()
    else:
        assert not plan.ok and "failed to read resource state due to unreachable cluster" in plan.render()


# --------------------------------------------------------------------------- #
# Diffs against the stored state (pulumi-kubernetes v4.32.0 provider.go Diff: the stored live object pruned to
# the old inputs, pruneLiveState, against the new inputs), on a small program
# --------------------------------------------------------------------------- #


def _config_map_program(kubeconfig: str):
    import pulumi
    import pulumi_kubernetes as k8s

    def program():
        provider = k8s.Provider("cluster", kubeconfig=kubeconfig)
        k8s.core.v1.ConfigMap("settings", metadata={"name": "settings", "namespace": "default"},
                              data={"mode": "fast"}, opts=pulumi.ResourceOptions(provider=provider))
    return program


def _lab_with_one_cluster():
    from tests.support.sim import Lifecycle, World

    world = World(kind_network=True)
    api = world.create_kind_cluster("lab", {"nodes": [{}]}).api
    return world, api, (lambda: Lifecycle({}, world=world, program=_config_map_program(
        world.kind_admin_kubeconfig("lab"))))


def test_a_field_an_admission_webhook_rewrites_differs_on_every_preview():
    """The state holds what the server stored, so a mutated input field is a diff again and again: the engine
    does not compare old inputs with new ones."""
    world, api, make = _lab_with_one_cluster()

    def slow_down(identity, operation, obj, old):
        if obj.get("kind") == "ConfigMap":
            obj = {**obj, "data": {**(obj.get("data") or {}), "mode": "slow"}}
        return obj

    api.admission.append(slow_down)
    sim = make()
    sim.up()
    plan = sim.preview()
    assert plan.changed() == {"update": {"settings"}} and plan.step("settings").diffs == ["data.mode"], plan.render()


def test_a_field_the_server_leaves_alone_is_no_diff():
    _, _, make = _lab_with_one_cluster()
    sim = make()
    sim.up()
    assert sim.preview().changed() == {}
