"""Destroy, last: nothing of the stack is left on the host (no kind cluster, no container, volume or network it
made) except the image cache volume, which `pulumi destroy` keeps on purpose (`retain_on_delete`); an `up` after
it fetches no layer upstream, and a second destroy again leaves only the cache."""

from __future__ import annotations

import json
import subprocess

import pytest

from components.management.image_cache import DEBUG_PORT, cache_volume_name
from tests.e2e.lab import (
    CLUSTER,
    KIND_NETWORK,
    Inventory,
    Lab,
    kind_clusters,
    stack_containers,
    volume_exists,
)

pytestmark = pytest.mark.e2e


def assert_only_the_cache_is_left(lab: Lab) -> None:
    assert lab.resources() == []
    assert CLUSTER not in kind_clusters()
    assert stack_containers() == set()
    added = Inventory.now().added_since(lab.baseline)
    assert added.containers == frozenset(), added
    assert added.volumes <= {cache_volume_name(CLUSTER)}, added
    # kind creates its network on first use and never removes it; no stack makes one.
    assert added.networks <= {KIND_NETWORK}, added
    assert volume_exists(cache_volume_name(CLUSTER)), "the image cache must outlive the stack"


def blob_misses(outputs: dict) -> dict[str, int]:
    """Registry -> layers its cache fetched upstream since it started (distribution's expvar JSON)."""
    misses = {}
    for registry, cache in ((outputs.get("imageMirror") or {}).get("caches") or {}).items():
        text = subprocess.run(
            ["docker", "exec", cache["container"], "wget", "-qO-", f"http://127.0.0.1:{DEBUG_PORT}/debug/vars"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout
        misses[registry] = json.loads(text)["registry"]["proxy"]["blobs"]["Misses"]
    return misses


def test_destroy_leaves_only_the_image_cache(lab):
    gone = lab.destroy()
    # Every resource the first `up` created is deleted (a `.get` is only discarded from the state).
    assert gone.changes == {"delete": lab.first.counts["create"]}, gone.render()
    assert_only_the_cache_is_left(lab)


def test_an_up_after_destroy_pulls_every_layer_from_the_cache(running_lab):
    if not running_lab.destroyed or running_lab.unsettled:
        pytest.fail("needs the lab the destroy above left behind")
    again = running_lab.up()
    # Fresh cache containers count from zero: every layer came out of the kept volume.
    misses = blob_misses(again.plain_outputs)
    assert misses and all(count == 0 for count in misses.values()), misses
    running_lab.destroy()
    assert_only_the_cache_is_left(running_lab)
