"""A card's memory changed: only that worker's GPU registration is updated (no node rejoins, nothing else moves), and
the node's HAMi annotation carries the new size; changing it back restores the lab."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from components import kube
from components.gpu.cards import REGISTER_ANNOTATION
from naming import node_name
from tests.e2e.lab import tenants

pytestmark = pytest.mark.e2e


def registered_memory(admin_kubeconfig: str, node: str) -> dict[str, int]:
    """Card UUID -> `devmem` of the node's `hami.io/node-nvidia-register` annotation, read from the tenant's API."""
    with kube.connect(yaml.safe_load(admin_kubeconfig)) as api:
        found = api.find("Node", node)
    return {card["id"]: card["devmem"] for card in json.loads(found["metadata"]["annotations"][REGISTER_ANNOTATION])}


def test_a_cards_memory_change_updates_only_that_worker(lab):
    document = copy.deepcopy(lab.reference)
    tenant = tenants(document)[0]
    node = node_name(tenant["name"], tenant["workers"][0]["name"])
    card = tenant["workers"][0]["gpus"][0]
    original = card["memoryMiB"]
    card["memoryMiB"] = original + 4096

    changed = lab.up(document)
    # What the simulator claims too (tests/test_lifecycle_scenarios.py): one annotation patch, nothing else.
    assert changed.names() == changed.names("update") == {f"{node}-gpu-register"}, changed.render()
    assert changed.changes == {"update": 1}, changed.render()
    admin = changed.outputs["tenantAdminKubeconfigs"][tenant["name"]]
    assert registered_memory(admin, node)[card["uuid"]] == original + 4096

    back = lab.up(lab.reference)
    assert back.names() == changed.names() and back.changes == {"update": 1}, back.render()
    assert registered_memory(admin, node)[card["uuid"]] == original
