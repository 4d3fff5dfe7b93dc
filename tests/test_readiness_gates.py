"""The readiness gates the first `up` passes through (issue 20 #1), each against the race it waits out.

Every scenario lets the real system win all races but one (`lab_world(races=False)`), switches that one on, and
runs the program twice: as it is, where the `up` must succeed, and with the one wait made a no-op, where the
simulated machine must make the `up` fail the way the real system would. The second half is what keeps the
simulator's rule honest: a rule that lets the race win by itself makes it fail.
"""

from __future__ import annotations

import pytest

from components.gpu import operations as gpu_operations
from components.management import kamaji
from components.management import operations as management_operations
from tests.support.lifecycle_support import kind_lab, lab_world, one_tenant_stack


def lab(race: str):
    """Every gate is a tenant's own (or the management layer's): one tenant asks the question."""
    world = lab_world(races=False, tuned_conntrack=True, kind_network=True)
    setattr(world, race, True)
    return kind_lab(one_tenant_stack(), world=world)


@pytest.fixture(scope="module")
def running():
    """`running(race)`: the lab of `race` after its first `up`, run once per race for the module (the first `up`
    a test looks at, or the start of its story); every caller gets its own fork."""
    labs = {}

    def get(race: str):
        if race not in labs:
            sim = lab(race)
            sim.up()
            labs[race] = sim
        return labs[race].fork()

    return get


def skip_wait(monkeypatch, provider: type) -> None:
    """The wait of `provider` returns at once (the defect the gate exists for)."""
    monkeypatch.setattr(provider, "_wait", lambda self, props: None)


# --------------------------------------------------------------------------- #
# HAMi's webhook: its Service has no endpoint until the scheduler labels itself leader
# --------------------------------------------------------------------------- #


def test_first_up_waits_for_hamis_webhook_before_the_smoke_pod(running):
    sim = running("hami_webhook_lag")
    assert sim.output("tenants")["tenant-a"]["smokeTest"]["schedulerName"] == "hami-scheduler"
    assert sim.urn("tenant-a-hami-webhook-ready") in sim.resource("tenant-a-gpu-smoke-test").dependencies


def test_without_the_hami_wait_the_smoke_pod_meets_a_webhook_without_endpoints(monkeypatch):
    skip_wait(monkeypatch, gpu_operations.HamiWebhookReadyProvider)
    plan = lab("hami_webhook_lag").up(expect_error=True)
    assert not plan.ok and 'failed calling webhook "vgpu.hami.io"' in plan.error, plan.render()
    assert "no endpoints available" in plan.error


def test_the_hami_wait_runs_again_after_a_rejoin(running):
    sim = running("hami_webhook_lag")
    plan = sim.up(replace=["tenant-a-worker-0-container"])
    assert "tenant-a-hami-webhook-ready" in plan.names("update"), plan.render()
    assert sim.output("tenants")["tenant-a"]["smokeTest"]["node"] == "tenant-a-worker-0"


# --------------------------------------------------------------------------- #
# The mock device plugin: its resources reach the Node after its poll
# --------------------------------------------------------------------------- #


def test_first_up_waits_for_the_device_plugins_resources(running):
    sim = running("device_plugin_lag")
    resources = sim.output("tenants")["tenant-a"]["smokeTest"]["nodeResources"]
    assert int(resources["nvidia.com/gpumem"]) > 0 and int(resources["nvidia.com/gpucores"]) > 0


def test_without_the_plugin_wait_the_proof_reads_the_node_too_early(monkeypatch):
    skip_wait(monkeypatch, gpu_operations.GpuPluginReadyProvider)
    plan = lab("device_plugin_lag").up(expect_error=True)
    assert not plan.ok and "registered nothing" in plan.error, plan.render()


def test_a_rejoined_worker_is_proved_once_its_plugin_registered_again(running):
    """A replaced container rejoins, the smoke pod is re-created at once, the plugin comes later."""
    sim = running("device_plugin_lag")
    plan = sim.up(replace=["tenant-a-worker-0-container"])
    assert "tenant-a-worker-0-gpu-plugin-ready" in plan.names("replace") | plan.names("update"), plan.render()
    assert sim.output("tenants")["tenant-a"]["smokeTest"]["node"] == "tenant-a-worker-0"


# --------------------------------------------------------------------------- #
# MetalLB's webhook: its Service endpoints follow the controller's readiness
# --------------------------------------------------------------------------- #


def test_first_up_waits_for_metallbs_webhook_before_the_pool(running):
    sim = running("metallb_webhook_lag")
    pool = sim.resource("kamaji-ip-pool")
    assert sim.urn("kamaji-metallb-webhook-ready") in pool.dependencies
    assert sim.urn("kamaji-metallb-webhook-ready") in sim.resource("kamaji-l2-advertisement").dependencies


def test_without_the_metallb_wait_the_pool_meets_a_webhook_without_endpoints(monkeypatch):
    skip_wait(monkeypatch, management_operations.MetalLBWebhookReadyProvider)
    plan = lab("metallb_webhook_lag").up(expect_error=True)
    assert not plan.ok and "validationwebhook.metallb.io" in plan.error, plan.render()


# --------------------------------------------------------------------------- #
# Kamaji's webhook after an upgrade
# --------------------------------------------------------------------------- #


def upgrade_kamaji_and_change_a_control_plane(sim) -> None:
    sim.config.setdefault("versions", {})["kamajiImage"] = "26.9.1-edge"
    sim.config.setdefault("management", {})["operatorCidrs"] = ["192.0.2.0/24"]


def test_a_kamaji_upgrade_probes_the_webhook_again_before_the_next_control_plane_write():
    sim = lab("kamaji_webhook_lag")
    sim.up()
    upgrade_kamaji_and_change_a_control_plane(sim)
    plan = sim.up()
    assert {"kamaji-kamaji", "kamaji-webhook-ready"} <= plan.names("update"), plan.render()
    assert any(name.endswith("control-plane") or "tcp" in name for name in plan.names("update")), plan.render()


def test_a_probe_keyed_on_the_release_id_misses_the_upgrade(monkeypatch):
    """The id (`kamaji-system/kamaji`) never changes: the probe stays put and the TCP update meets the restart."""
    monkeypatch.setattr(kamaji, "release_revision", lambda release: release.id)
    sim = lab("kamaji_webhook_lag")
    sim.up()
    upgrade_kamaji_and_change_a_control_plane(sim)
    plan = sim.up(expect_error=True)
    assert not plan.ok and "mtenantcontrolplane.kb.io" in plan.error, plan.render()


@pytest.mark.parametrize("race", ["hami_webhook_lag", "metallb_webhook_lag", "device_plugin_lag"])
def test_a_second_up_after_the_gates_changes_nothing(running, race):
    sim = running(race)
    plan = sim.up()
    assert plan.changed() == {}, plan.render()
