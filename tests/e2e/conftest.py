"""The end-to-end scenarios: the gate that decides whether they run, their order, and the one lab they share.

They need a Docker daemon, kind and the Pulumi CLI. Outside `make e2e` they skip, all with one reason; under
`make e2e` (GPU_TENANCY_E2E=1) on a host without those tools, the run stops with the reason on one line.

One `up` of the reference stack serves every scenario (`running_lab`, once per session); `lab` hands it to a
scenario at the reference config. The scenario files run in the order of their names, whatever order they are
given in, so `test_9_destroy.py` comes last (as kamaji's e2e names its last spec `zz_...`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from components.management.image_cache import cache_volume_name
from tests.e2e import lab as lab_module

OPT_IN = "GPU_TENANCY_E2E"


def missing_prerequisites() -> list[str]:
    missing = [tool for tool in ("docker", "kind", "pulumi") if shutil.which(tool) is None]
    if "docker" not in missing:
        try:
            answered = subprocess.run(
                ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=20, check=False
            ).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            answered = False
        if not answered:
            missing.append("a Docker daemon that answers `docker info`")
    return missing


def is_scenario(item: pytest.Item) -> bool:
    """Marked e2e. Not `"e2e" in item.keywords`: keywords hold every parent's name, so a checkout in a directory
    named e2e would make every test a scenario."""
    return item.get_closest_marker("e2e") is not None


def in_scenario_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """Other tests first, as collected; then the e2e scenarios by file name, each file's tests in their order."""
    e2e = [item for item in items if is_scenario(item)]
    return [item for item in items if not is_scenario(item)] + sorted(e2e, key=lambda item: item.path.name)


def gate(opted_in: bool, missing: list[str], xdist_worker: str | None) -> str | None:
    """None when the scenarios run, else the reason they all skip. Asked for by name (`make e2e`), a run that
    cannot happen is a usage error instead: the reason on one line."""
    if opted_in:
        if missing:
            raise pytest.UsageError(f"make e2e cannot run: end-to-end lifecycle needs {', '.join(missing)} on "
                                    "this machine")
        if xdist_worker:
            # Each xdist worker would build its own lab under the same stack and cluster names.
            raise pytest.UsageError("make e2e cannot run: its scenarios share one lab and run in one process, "
                                    "in order: run pytest without -n")
        return None
    if missing:
        return f"end-to-end lifecycle needs {', '.join(missing)} on this machine"
    return f"end-to-end lifecycle builds a real lab on this Docker host: run `make e2e` ({OPT_IN}=1)"


def pytest_collection_modifyitems(config, items):
    e2e = [item for item in items if is_scenario(item)]
    if not e2e:
        return
    items[:] = in_scenario_order(items)
    reason = gate(os.environ.get(OPT_IN) == "1", missing_prerequisites(), os.environ.get("PYTEST_XDIST_WORKER"))
    if reason is not None:
        for item in e2e:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def running_lab(request, tmp_path_factory):
    """The reference lab after its first `up` (`running_lab.first`), torn down after the last scenario."""
    if lab_module.stack_containers() or lab_module.CLUSTER in lab_module.kind_clusters():
        pytest.fail(f"leftovers of an earlier run: kind cluster {lab_module.CLUSTER} or containers "
                    f"{sorted(lab_module.stack_containers())}; clean up first (`kind delete cluster --name "
                    f"{lab_module.CLUSTER}`, `docker rm -f <container>`)")
    given = os.environ.get(lab_module.WORKDIR_ENV)
    workdir = Path(given) if given else tmp_path_factory.mktemp("e2e")
    workdir.mkdir(parents=True, exist_ok=True)
    failed_before = request.session.testsfailed
    with pytest.MonkeyPatch.context() as patch:
        # A passphrase in the environment would win over the lab's own file.
        patch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
        lab = lab_module.Lab(workdir)
        try:
            lab.first = lab.up()
        except Exception:
            _diagnose(lab, "after-the-first-up")
            lab.close()
            raise
        yield lab
        try:
            if request.session.testsfailed > failed_before:
                _diagnose(lab, "before-teardown")
        finally:
            lab.close()
        # The e2e lab's own cache (the destroy scenario has checked that it outlives the stack).
        subprocess.run(["docker", "volume", "rm", cache_volume_name(lab_module.CLUSTER)], capture_output=True,
                       check=False)


def _diagnose(lab: lab_module.Lab, moment: str) -> None:
    into = lab.diagnostics / moment
    problems = lab_module.write_diagnostics(lab.workdir, into)
    print(f"e2e diagnostics in {into}" + (f"; not collected: {problems}" if problems else ""))


@pytest.fixture
def lab(running_lab):
    """The shared lab at the reference config: brought back there first if an earlier scenario left it elsewhere."""
    running_lab.converge()
    return running_lab
