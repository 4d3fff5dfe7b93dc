"""Up and verify: the first `up` of the reference stack builds the whole lab, each tenant's smoke test proves HAMi
on its worker, and `make verify` holds against the live platform."""

from __future__ import annotations

import json

import pytest

from components.management.image_cache import MIRRORED_REGISTRIES, cache_container_name
from naming import node_name
from ops import verify
from tests.e2e.lab import CLUSTER, kind_clusters, stack_containers, tenant_names, tenants

pytestmark = pytest.mark.e2e


def test_the_first_up_creates_the_lab_and_proves_every_tenant(running_lab):
    first = running_lab.first
    assert first.counts["create"] > 0 and set(first.changes) == {"create"}, first.render()
    outputs = first.plain_outputs["tenants"]
    assert sorted(outputs) == sorted(tenant_names(running_lab.reference))
    for tenant in tenants(running_lab.reference):
        workers = [node_name(tenant["name"], worker["name"]) for worker in tenant["workers"]]
        assert outputs[tenant["name"]]["nodes"] == workers
        # The in-stack proof: HAMi's webhook (through the tunnel), its scheduler and the device plugin.
        smoke = outputs[tenant["name"]]["smokeTest"]
        assert smoke["schedulerName"] == "hami-scheduler", smoke
        assert smoke["node"] == workers[0], smoke

    assert CLUSTER in kind_clusters()
    workers = {node_name(t["name"], w["name"]) for t in tenants(running_lab.reference) for w in t["workers"]}
    caches = {cache_container_name(CLUSTER, registry) for registry in MIRRORED_REGISTRIES}
    assert stack_containers() == workers | caches | {f"{CLUSTER}-control-plane"}


def test_verify_holds_on_the_live_platform(running_lab, tmp_path, capsys):
    outputs_file = tmp_path / "outputs.json"
    outputs_file.touch(mode=0o600)
    outputs_file.write_text(json.dumps(running_lab.first.outputs))
    code = verify.main(["--outputs-file", str(outputs_file)])
    report = capsys.readouterr().out
    assert code == 0, report
    # On a complete lab every check can run: none is skipped.
    summary = report.strip().splitlines()[-1]
    assert summary.startswith("verify passed: all "), report
