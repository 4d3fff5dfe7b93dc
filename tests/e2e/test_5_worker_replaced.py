"""A worker replaced (`pulumi up --replace` of its container's URN): a new container rejoins the tenant under the
same name, the smoke test is proved again on it, nothing outside that tenant changes, and the next `up` is quiet."""

from __future__ import annotations

import pytest

from naming import node_name
from tests.e2e.lab import REPLACING, container_id, tenant_names, tenants

pytestmark = pytest.mark.e2e

CONTAINER = "docker:index/container:Container"


def test_a_replaced_worker_rejoins_and_the_smoke_proof_follows(lab):
    tenant = tenants(lab.reference)[0]["name"]
    node = node_name(tenant, tenants(lab.reference)[0]["workers"][0]["name"])
    before = container_id(node)

    replaced = lab.up(replace=[lab.urn(f"{node}-container", CONTAINER)])
    assert f"{node}-container" in replaced.names(*REPLACING), replaced.render()
    # The pod ran on the old Node object: it is made again, and proves again, on the rejoined one.
    assert f"{tenant}-gpu-smoke-test" in replaced.names(*REPLACING), replaced.render()
    assert set(replaced.by_owner(tenant_names(lab.reference))) == {tenant}, replaced.render()
    assert container_id(node) != before
    smoke = replaced.plain_outputs["tenants"][tenant]["smokeTest"]
    assert smoke["schedulerName"] == "hami-scheduler" and smoke["node"] == node, smoke

    settled = lab.up()
    assert settled.ops == {} and settled.changes == {}, settled.render()
