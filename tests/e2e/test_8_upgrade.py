"""A tenant upgraded from v1.35.0 to v1.36.1 (docs/operations.md "Upgrading a tenant"): a downgrade is refused by the preview
before anything moves; the upgrade changes only that tenant, its Nodes report the new kubelet, and the smoke test
proves fractional GPU admission through the tunnel again. The upgraded config is the lab's reference from here on
(a way back would be a downgrade, which is refused)."""

from __future__ import annotations

import copy

import pytest
from pulumi import automation as auto

from naming import node_name
from tests.e2e.lab import REPLACING, tenant_names, tenants

pytestmark = pytest.mark.e2e


def test_an_upgrade_rolls_one_tenant_and_the_proof_follows(lab):
    document = copy.deepcopy(lab.reference)
    tenant = tenants(document)[0]
    name = tenant["name"]
    assert tenant.get("kubernetesVersion", "v1.35.0") == "v1.35.0"
    tenant["kubernetesVersion"] = "v1.36.1"
    node = node_name(name, tenant["workers"][0]["name"])

    upgraded = lab.up(document)
    assert set(upgraded.by_owner(tenant_names(document))) == {name}, upgraded.render()
    assert {f"{node}-container", f"{name}-gpu-smoke-test"} <= upgraded.names(*REPLACING), upgraded.render()
    summary = upgraded.plain_outputs["tenants"][name]
    assert set(summary["nodeVersions"].values()) == {"v1.36.1"}, summary
    assert summary["smokeTest"]["schedulerName"] == "hami-scheduler", summary
    lab.reference = document

    back = copy.deepcopy(document)
    tenants(back)[0]["kubernetesVersion"] = "v1.35.0"
    lab.write_stack(back)
    with pytest.raises(auto.CommandError, match=r"tenants\[0\]\.kubernetesVersion: v1\.35\.0 is older than v1\.36\.1"):
        lab.stack.preview(color="never")
    settled = lab.up(document)
    assert settled.ops == {} and settled.changes == {}, settled.render()
