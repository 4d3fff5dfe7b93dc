"""Tenant upgrades: which version changes are allowed (config.upgrade, the TenantVersion resource's diff) and how
an upgrade runs on the lifecycle simulator (README "Upgrading a tenant")."""

from __future__ import annotations

import copy

import pytest

from components import host_operations
from components.kube import ApiError
from config import ConfigError, load_stack_config, upgrade
from tests.support.lifecycle_support import kind_lab
from tests.support.mockrun import reference_stack
from tests.support.sim.state import comparable

KEY = "tenants[0].kubernetesVersion"


# --------------------------------------------------------------------------- #
# The rules
# --------------------------------------------------------------------------- #


def test_a_newer_patch_or_the_next_minor_is_allowed():
    assert upgrade.version_change_problem(KEY, "v1.35.0", "v1.35.5") is None
    assert upgrade.version_change_problem(KEY, "v1.35.0", "v1.36.1") is None
    assert upgrade.version_change_problem(KEY, "v1.36.1", "v1.36.1") is None
    assert upgrade.next_versions("v1.35.0") == ["v1.36.1", "v1.35.5"]
    assert upgrade.next_versions("v1.36.1") == []


@pytest.mark.parametrize(("current", "wanted", "says"), [
    ("v1.36.1", "v1.35.5", "keep v1.36.1"),  # a lower minor version (Kamaji refuses it too)
    ("v1.35.5", "v1.35.0", "keep v1.35.5 (what the tenant runs), or upgrade to v1.36.1"),  # a lower patch version
])
def test_a_downgrade_is_refused_with_the_key_and_what_is_allowed(current, wanted, says):
    problem = upgrade.version_change_problem(KEY, current, wanted)
    assert problem is not None and problem.startswith(f"{KEY}: {wanted} is older than {current}")
    assert says in problem


def test_a_skipped_minor_version_names_the_step_to_take_first():
    problem = upgrade.version_change_problem(KEY, "v1.34.2", "v1.36.1")
    assert problem is not None and "skips a minor version" in problem
    assert "upgrade to v1.35.5 first, run `pulumi up`, then to v1.36.1" in problem


def test_a_version_the_pinned_kamaji_does_not_accept_is_refused():
    problem = upgrade.version_change_problem(KEY, "v1.36.1", "v1.37.0")
    assert problem is not None and "outside what the pinned Kamaji accepts" in problem


def test_the_version_resource_refuses_in_its_diff_and_records_nothing_else():
    provider = host_operations.TenantVersionProvider()
    olds = {"tenant": "tenant-a", "version_key": KEY, "control_plane": "v1.36.1"}
    with pytest.raises(ValueError, match=r"tenants\[0\]\.kubernetesVersion: v1\.35\.5 is older"):
        provider.diff("tenant-a", olds, {**olds, "control_plane": "v1.35.5"})
    assert provider.diff("tenant-a", olds, {**olds, "control_plane": "v1.36.1"}).changes is False
    # Reordered tenants move the key, which is no change.
    assert provider.diff("tenant-a", olds, {**olds, "version_key": "tenants[1].kubernetesVersion"}).changes is False
    upgraded = {**olds, "control_plane": "v1.35.0"}
    assert provider.diff("tenant-a", upgraded, olds).changes is True


def test_a_node_image_newer_than_the_control_plane_is_a_config_error():
    stack = reference_stack()
    tenant = stack["tenants"][0]
    tenant["nodeImage"] = "kindest/node:v1.36.1@sha256:" + "0" * 64
    with pytest.raises(ConfigError) as error:
        load_stack_config(stack)
    message = str(error.value)
    assert "tenants[0].nodeImage" in message and "newer than the control plane v1.35.0" in message
    tenant["kubernetesVersion"] = "v1.36.1"
    load_stack_config(stack)
    tenant["nodeImage"] = "kindest/node:v1.35.5@sha256:" + "0" * 64  # older kubelets are allowed
    load_stack_config(stack)


# --------------------------------------------------------------------------- #
# On the simulator: refused before anything moves
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def lab_at_v1_35_5():
    """The reference lab with tenant-a at v1.35.5, after its first `up`."""
    stack = reference_stack()
    stack["tenants"][0]["kubernetesVersion"] = "v1.35.5"
    sim = kind_lab(stack)
    sim.up()
    return sim


def test_a_downgrade_is_refused_in_the_preview_and_nothing_changes(lab_at_v1_35_5):
    sim = lab_at_v1_35_5.fork()
    def state():
        return {urn: comparable((r.inputs, r.outputs)) for urn, r in sim.engine.state.items()}

    before = state()
    containers = copy.deepcopy(sim.world.docker.containers)
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.35.0"
    for run in (sim.preview, lambda **kw: sim.up(skip_preview=True, **kw)):
        plan = run(expect_error=True)
        assert plan.error is not None and "tenant-a-version" in plan.error, plan.render()
        assert f"{KEY}: v1.35.0 is older than v1.35.5" in plan.error
        assert "Allowed: keep v1.35.5 (what the tenant runs), or upgrade to v1.36.1" in plan.error
        assert plan.changed() == {}, plan.render()
    assert state() == before
    assert sim.world.docker.containers == containers


def test_a_version_kamaji_does_not_accept_is_a_config_error_before_any_resource(lab_at_v1_35_5):
    sim = lab_at_v1_35_5.fork()
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.37.0"
    plan = sim.preview(expect_error=True)
    assert plan.error is not None and KEY in plan.error, plan.render()
    assert [s for s in plan.steps if not s.component] == [], plan.render()


def test_the_simulated_kamaji_webhook_refuses_what_tcp_version_go_refuses(lab_at_v1_35_5):
    """The rules the simulator's Kamaji applies on UPDATE (clastix/kamaji 26.8.2-edge tcp_version.go OnUpdate)."""
    sim = lab_at_v1_35_5.fork()
    api = sim.world.kind["gpu-tenancy"].api
    tcp = api.find("TenantControlPlane", "tenant-a", "tenant-a")

    def update(version):
        changed = copy.deepcopy(tcp)
        changed["spec"]["kubernetes"]["version"] = version
        return api.update(None, changed, dry_run=True)

    assert update("v1.35.0")["spec"]["kubernetes"]["version"] == "v1.35.0"  # patch versions are not compared
    assert update("v1.36.1")["spec"]["kubernetes"]["version"] == "v1.36.1"
    with pytest.raises(ApiError, match="greater than the supported one"):
        update("v1.37.0")
    with pytest.raises(ApiError, match="unable to downgrade a TenantControlPlane from 1.35.0 to 1.34.0"):
        update("v1.34.9")
    tcp["spec"]["kubernetes"]["version"] = "v1.34.0"
    api.objects[("TenantControlPlane", "tenant-a", "tenant-a")] = copy.deepcopy(tcp)
    with pytest.raises(ApiError, match="non-sequential mode"):
        update("v1.36.1")
