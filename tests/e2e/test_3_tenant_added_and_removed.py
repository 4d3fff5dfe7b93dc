"""A tenant added, then removed: only that tenant's resources are created, then deleted; the other tenants and the
management layer are not touched, and the lab ends where it started."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from naming import node_name
from tests.e2e.lab import stack_containers, tenant_names, tenants

pytestmark = pytest.mark.e2e

NEW = "tenant-c"


def with_new_tenant(reference: dict[str, Any]) -> dict[str, Any]:
    """The reference stack plus a tenant shaped like its first one: one worker, one card of its own. Its service
    and pod ranges are left to the program (picked by the tenant's name)."""
    document = copy.deepcopy(reference)
    model = tenants(document)[0]
    card = {**model["workers"][0]["gpus"][0], "uuid": "GPU-MOCK-C0"}
    tenants(document).append({
        "name": NEW,
        "kubernetesVersion": model["kubernetesVersion"],
        "workers": [{"name": "worker-0", "gpus": [card]}],
    })
    return document


def test_a_tenant_added_then_removed_changes_only_that_tenant(lab):
    everyone = [*tenant_names(lab.reference), NEW]
    total = lab.first.counts["create"]
    before = lab.first.plain_outputs["tenants"]

    added = lab.up(with_new_tenant(lab.reference))
    assert {owner: set(ops) for owner, ops in added.by_owner(everyone).items()} == {NEW: {"create"}}, added.render()
    created = added.changes.get("create", 0)
    assert created > 0 and added.changes == {"create": created} and added.counts["same"] == total, added.render()
    tenants_now = added.plain_outputs["tenants"]
    assert tenants_now[NEW]["smokeTest"]["schedulerName"] == "hami-scheduler", tenants_now[NEW]
    assert node_name(NEW, "worker-0") in stack_containers()
    assert {name: tenants_now[name] for name in before} == before

    removed = lab.up(lab.reference)
    assert {owner: set(ops) for owner, ops in removed.by_owner(everyone).items()} == {NEW: {"delete"}}, \
        removed.render()
    assert removed.changes == {"delete": created} and removed.counts["same"] == total, removed.render()
    assert removed.plain_outputs["tenants"] == before
    assert node_name(NEW, "worker-0") not in stack_containers()
