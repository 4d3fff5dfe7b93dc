"""Generated objects compared whole with the reviewed snapshot (tests/support/snapshots.py says how to update it)."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.support import snapshots


@pytest.fixture(scope="module")
def generated():
    return snapshots.generated_objects()


def test_every_release_container_image_and_volume_matches_the_reviewed_snapshot(generated):
    written = snapshots.SNAPSHOT.read_text()
    current = snapshots.render(generated)
    assert current == written, (
        "the generated objects differ from the reviewed snapshot; if the change is intended, run `make snapshots` "
        "and review `git diff tests/fixtures/snapshots/`:\n" + snapshots.difference(written, current))


def test_a_dropped_option_or_value_shows_in_the_comparison(generated):
    written = snapshots.SNAPSHOT.read_text()
    for key, path in (("dev/docker:index/container:Container/tenant-a-worker-0-container", ("restart",)),
                      ("dev/kubernetes:helm.sh/v3:Release/tenant-a-hami", ("values", "scheduler")),
                      ("prod/kubernetes:helm.sh/v3:Release/kamaji-cert-manager", ("values", "global"))):
        changed = copy.deepcopy(generated)
        parent = changed[key]
        for step in path[:-1]:
            parent = parent[step]
        del parent[path[-1]]
        difference = snapshots.difference(written, snapshots.render(changed))
        removed = [line for line in difference.splitlines() if line.startswith("-") and not line.startswith("---")]
        assert any(line.strip("- ").startswith(f"{path[-1]}:") for line in removed), (key, difference)


def test_the_snapshot_holds_every_chart_and_every_kind_of_docker_object():
    objects = yaml.safe_load(snapshots.SNAPSHOT.read_text())
    charts = {entry["chart"] for key, entry in objects.items() if "/kubernetes:helm.sh/v3:Release/" in key}
    # Every chart is a directory `make charts` fills (components/helm.py): management (cert-manager, Kamaji,
    # MetalLB), each tenant's Calico (CRDs, operator) and HAMi, and a dedicated etcd (the production example).
    assert {chart.rsplit("/", 1)[-1] for chart in charts} == {
        "cert-manager", "kamaji", "metallb", "crd.projectcalico.org.v1", "tigera-operator", "hami", "kamaji-etcd"}
    assert all(chart.startswith("./.cache/charts/") for chart in charts), charts
    assert {key.split("/", 1)[1].rsplit("/", 1)[0] for key in objects} == set(snapshots.TYPES)
