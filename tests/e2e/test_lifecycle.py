"""The whole lifecycle on a real Docker host, driven by the Pulumi Automation API.

up the dev stack -> verify -> change one card's memory (only that node's
simulated GPU resources update) -> up again (no changes) -> destroy (no
containers, no kind cluster left, the image cache volume kept) -> up again
(every layer comes from the cache: no blob is fetched upstream) -> destroy.
State goes to a throwaway local backend; the cache volume is removed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from pulumi import automation as auto

from components.management.image_cache import DEBUG_PORT, cache_volume_name
from ops import verify

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
STACK = "e2e"
CLUSTER = "gpu-tenancy-e2e"
CHANGED_NODE = "tenant-a-worker-0"
MUTATING_OPS = {"create", "update", "replace", "delete", "create-replacement", "delete-replaced"}


def _copy_project(target: Path) -> Path:
    """The project in a scratch directory, so stack files and state never touch the checkout."""
    project = target / "project"
    shutil.copytree(
        # .cache holds the pinned Kamaji chart (`make charts`), which the program installs from there.
        ROOT, project, ignore=shutil.ignore_patterns(".venv", ".git", ".pulumi-state", ".pulumi-passphrase", "__pycache__",
                                                    "build")
    )
    stack_config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    stack_config["config"]["gpu-tenancy:management"] = {"clusterName": CLUSTER}
    (project / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(stack_config, sort_keys=False))
    return project


def _set_card_memory(project: Path, memory_mib: int) -> None:
    path = project / f"Pulumi.{STACK}.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"]["gpu-tenancy:tenants"][0]["workers"][0]["gpus"][0]["memoryMiB"] = memory_mib
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def _changed_urns(events: list[auto.EngineEvent]) -> list[str]:
    return sorted(
        event.resource_pre_event.metadata.urn
        for event in events
        if event.resource_pre_event and event.resource_pre_event.metadata.op.value in MUTATING_OPS
    )


def _leftovers() -> tuple[list[str], bool]:
    containers = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=gpu-tenancy.stack={STACK}", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    clusters = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True, check=True).stdout.split()
    return containers, CLUSTER in clusters


def _cache_misses(outputs: dict) -> dict[str, int]:
    """Blob misses (layers fetched upstream) per cache since it started, from distribution's expvar JSON."""
    misses = {}
    for registry, cache in (outputs.get("imageMirror") or {}).items():
        text = subprocess.run(
            ["docker", "exec", cache["container"], "wget", "-qO-", f"http://127.0.0.1:{DEBUG_PORT}/debug/vars"],
            capture_output=True, text=True, check=True,
        ).stdout
        misses[registry] = json.loads(text)["registry"]["proxy"]["blobs"]["Misses"]
    return misses


def _volume_exists(name: str) -> bool:
    return subprocess.run(["docker", "volume", "inspect", name], capture_output=True, check=False).returncode == 0


def test_up_verify_update_noop_destroy(tmp_path):
    containers, cluster_exists = _leftovers()
    if containers or cluster_exists:
        pytest.fail(f"leftovers from an earlier run: containers {containers}, cluster {cluster_exists}; clean up first")
    project = _copy_project(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    # pulumi-kubernetes leaves each provider's kubeconfig in $TMPDIR (as `make up` does, a private one).
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir(mode=0o700)
    stack = auto.create_or_select_stack(
        stack_name=STACK,
        work_dir=str(project),
        opts=auto.LocalWorkspaceOptions(
            env_vars={
                "PULUMI_BACKEND_URL": f"file://{state}",
                "PULUMI_CONFIG_PASSPHRASE": "e2e-throwaway",
                "TMPDIR": str(private_tmp),
            },
            project_settings=auto.ProjectSettings(
                name="gpu-tenancy",
                runtime=auto.ProjectRuntimeInfo(name="python", options={"virtualenv": str(ROOT / ".venv")}),
            ),
        ),
    )
    try:
        # 1. up: the in-stack smoke test already proves webhook + tunnel + scheduling per tenant.
        first = stack.up(on_output=print)
        tenants = first.outputs["tenants"].value
        assert sorted(tenants) == ["tenant-a", "tenant-b"]
        for tenant in tenants.values():
            assert tenant["smokeTest"]["schedulerName"] == "hami-scheduler"

        # 2. verify against the live platform.
        outputs_file = tmp_path / "outputs.json"
        outputs_file.write_text(json.dumps({key: out.value for key, out in first.outputs.items()}))
        os.chmod(outputs_file, 0o600)
        assert verify.main(["--outputs-file", str(outputs_file)]) == 0

        # 3. one card's memory changes: only that node's simulated GPU resources update.
        _set_card_memory(project, 12288)
        events: list[auto.EngineEvent] = []
        second = stack.up(on_output=print, on_event=events.append)
        changed = _changed_urns(events)
        assert changed and all(CHANGED_NODE in urn for urn in changed), changed
        assert set(second.summary.resource_changes or {}) <= {"same", "update"}

        # 4. nothing left to do.
        third = stack.up(on_output=print, expect_no_changes=True)
        assert set(third.summary.resource_changes or {}) == {"same"}
        # 5. destroy leaves nothing behind but the image cache.
        stack.destroy(on_output=print)
        assert _leftovers() == ([], False)
        assert _volume_exists(cache_volume_name(CLUSTER)), "the image cache must survive `make down`"

        # 6. up again: every layer the platform needs is in the cache (fresh caches count from zero).
        again = stack.up(on_output=print)
        misses = _cache_misses({key: out.value for key, out in again.outputs.items()})
        assert misses and all(count == 0 for count in misses.values()), misses
    finally:
        stack.destroy(on_output=print)
        stack.workspace.remove_stack(STACK)
        subprocess.run(["docker", "volume", "rm", cache_volume_name(CLUSTER)], capture_output=True, check=False)
    assert _leftovers() == ([], False)
