"""`make e2e` on a machine that cannot run it fails with the reason on one line; a plain `make test` skips every
scenario with one reason, in scenario order (destroy last). And the lab's bookkeeping reads the engine's events and
the fixture stack the way the scenarios rely on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pulumi import automation as auto

from tests.e2e import lab
from tests.e2e.conftest import gate, is_scenario

pytestmark = pytest.mark.repo

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((ROOT / "tests" / "e2e").glob("test_*.py"))


def _pytest_e2e(tmp_path: Path, opt_in: bool, *paths: Path) -> subprocess.CompletedProcess[str]:
    # A PATH with python only: no docker, kind or pulumi.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "GPU_TENANCY_E2E"}
    env["PATH"] = str(bin_dir)
    if opt_in:
        env["GPU_TENANCY_E2E"] = "1"
    targets = [str(path.relative_to(ROOT)) for path in paths] or ["tests/e2e"]
    return subprocess.run([sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "-m", "e2e", *targets],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_asked_for_by_name_it_fails_with_a_one_line_reason(tmp_path):
    done = _pytest_e2e(tmp_path, opt_in=True)
    assert done.returncode != 0
    (line,) = [line for line in (done.stdout + done.stderr).splitlines() if "make e2e cannot run" in line]
    assert "docker" in line and "kind" in line and "pulumi" in line


def test_in_the_unit_suite_every_scenario_skips_with_one_reason_and_destroy_runs_last(tmp_path):
    # Given in reverse order, the scenarios still run in the order of their file names.
    done = _pytest_e2e(tmp_path, False, *reversed(SCENARIOS))
    assert done.returncode == 0, done.stdout + done.stderr
    ran = re.findall(r"^(tests/e2e/test_\w+\.py)::\w+ SKIPPED", done.stdout, re.M)
    scenarios = sum(len(re.findall(r"^def test_", path.read_text(), re.M)) for path in SCENARIOS)
    assert len(ran) == scenarios > len(SCENARIOS) >= 5, done.stdout
    files = list(dict.fromkeys(ran))
    assert files == [str(path.relative_to(ROOT)) for path in SCENARIOS] and files[-1].endswith("_destroy.py")
    skipped = re.findall(r"^SKIPPED \[(\d+)\] tests/e2e/\S+: (.*)$", done.stdout, re.M)
    assert sum(int(count) for count, _ in skipped) == scenarios, done.stdout
    (reason,) = {reason for _, reason in skipped}
    assert "needs docker, kind, pulumi" in reason


def test_only_tests_marked_e2e_are_scenarios(request):
    # Whatever the directories above are called (a checkout in .../e2e puts "e2e" in every test's keywords).
    assert not is_scenario(request.node)


def test_the_gate_refuses_a_parallel_run_and_a_host_without_the_tools():
    with pytest.raises(pytest.UsageError, match="without -n"):
        gate(opted_in=True, missing=[], xdist_worker="gw0")
    with pytest.raises(pytest.UsageError, match="needs kind on this machine"):
        gate(opted_in=True, missing=["kind"], xdist_worker=None)
    assert gate(opted_in=True, missing=[], xdist_worker=None) is None
    assert "make e2e" in gate(opted_in=False, missing=[], xdist_worker=None)


def test_the_e2e_stack_is_the_fixture_stack_with_its_own_cluster():
    fixture = yaml.safe_load((ROOT / "tests" / "fixtures" / "reference-stack.yaml").read_text())["config"]
    config = lab.reference_stack()["config"]
    assert config.pop("gpu-tenancy:management") == {"clusterName": lab.CLUSTER}
    assert config == fixture
    assert lab.tenant_names(lab.reference_stack()) == [t["name"] for t in fixture["gpu-tenancy:tenants"]]


def _step(op: str, name: str, type_: str = "docker:index/container:Container", planning: bool = False) -> auto.EngineEvent:
    """One event as the CLI writes it to the Automation API's event log."""
    urn = f"urn:pulumi:{lab.STACK}::gpu-tenancy::gpu-tenancy:index:WorkerNode${type_}::{name}"
    return auto.EngineEvent.from_json({"sequence": 1, "timestamp": 0, "resourcePreEvent": {
        "metadata": {"op": op, "urn": urn, "type": type_, "provider": ""}, "planning": planning}})


def test_an_updates_steps_are_read_per_resource_and_owner():
    events = [
        _step("same", "tenant-a-worker-0-container"),
        _step("create", "tenant-c-worker-0-container"),
        _step("create", "tenant-c", type_="gpu-tenancy:index:TenantControlPlane"),
        _step("delete-replaced", "tenant-a-worker-0-container"),
        _step("create-replacement", "tenant-a-worker-0-container"),
        _step("read", "tenant-a-gpu-smoke-node", type_="kubernetes:core/v1:Node"),
        # A preview's plan is not what the update did.
        _step("delete", "image-mirror-docker-io", planning=True),
    ]
    update = lab.Update(result=None, ops=lab.step_ops(events))  # type: ignore[arg-type]
    assert update.names() == {"tenant-c-worker-0-container", "tenant-c", "tenant-a-worker-0-container"}
    assert update.names(*lab.REPLACING) == {"tenant-a-worker-0-container"}
    # `tenant-a` is not the owner of `tenant-ab-...`, and what no tenant's name starts is the platform's.
    assert lab.owner("tenant-ab-worker-0", ["tenant-a", "tenant-ab"]) == "tenant-ab"
    assert lab.owner("image-mirror-docker-io", ["tenant-a"]) == lab.MANAGEMENT
    assert update.by_owner(["tenant-a", "tenant-c"]) == {
        "tenant-c": {"create": {"tenant-c-worker-0-container", "tenant-c"}},
        "tenant-a": {"delete-replaced": {"tenant-a-worker-0-container"},
                     "create-replacement": {"tenant-a-worker-0-container"}},
    }


def test_an_updates_summary_tells_changes_from_reads_and_secrets_from_plain_outputs():
    """What `pulumi stack history` records for a quiet `up`: a Node read whose status moved is no change."""
    summary = auto.UpdateSummary(kind="update", start_time=None, message="", environment={}, config={},
                                 result="succeeded", resource_changes={"same": 76, "read": 2})
    quiet = lab.Update(auto.UpResult(stdout="", stderr="", summary=summary, outputs={
        "tenants": auto.OutputValue({"tenant-a": {}}, secret=False),
        "tenantAdminKubeconfigs": auto.OutputValue({"tenant-a": "apiVersion: v1"}, secret=True),
    }))
    assert quiet.changes == {} and quiet.counts == {"same": 76, "read": 2}
    assert quiet.plain_outputs == {"tenants": {"tenant-a": {}}}
    assert set(quiet.outputs) == {"tenants", "tenantAdminKubeconfigs"}
    summary.resource_changes = {"same": 75, "update": 1, "discard": 1}
    assert quiet.changes == {"update": 1}


def test_diagnostics_list_what_they_could_not_collect_instead_of_stopping(tmp_path, monkeypatch):
    """CI runs `python -m tests.e2e.lab diagnostics` after any failure, even one before Docker or kind worked."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    (tmp_path / "project").mkdir()
    assert lab.main(["lab", "diagnostics", str(tmp_path)]) == 0
    into = tmp_path / "diagnostics" / "after-the-run"
    missing = (into / "not-collected.txt").read_text()
    assert all(tool in missing for tool in ("pulumi stack export", "docker ps", "kind get clusters")), missing
    assert lab.main(["lab"]) == 2
