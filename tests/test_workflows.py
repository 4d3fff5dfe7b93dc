"""The CI workflows install what the code pins: kind as ops/preflight.py's install hint prints it, the Pulumi CLI of the
SDK in requirements.txt, the inotify limits preflight checks. A bump of one side fails here until the other follows.
(The kind binary's sha256 lives only in the workflow: the download's `sha256sum -c` fails when it is stale.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ops import hostcheck, preflight
from tests.e2e import lab

pytestmark = pytest.mark.repo

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"


def load(name: str) -> dict:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the bare key `on` as true.
    workflow["on"] = workflow.pop(True, workflow.get("on"))
    return workflow


def job(name: str) -> dict:
    (only,) = load(name)["jobs"].values()
    return only


def runs(job_: dict) -> str:
    return "\n".join(step.get("run", "") for step in job_["steps"])


def step(job_: dict, run: str) -> dict:
    (found,) = [s for s in job_["steps"] if s.get("run", "").strip() == run]
    return found


def requirement(name: str) -> str:
    (version,) = re.findall(rf"^{re.escape(name)}==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    return version


def test_e2e_installs_the_kind_and_pulumi_that_preflight_pins():
    e2e = job("e2e.yaml")
    env = e2e["env"]
    assert env["KIND_VERSION"] == preflight.KIND_RELEASE
    assert re.fullmatch(r"[0-9a-f]{64}", env["KIND_SHA256"])
    assert env["PULUMI_VERSION"] == hostcheck.PULUMI_RELEASE == requirement("pulumi")
    script = runs(e2e)
    # The same download as preflight's hint, checked against the pinned sum before it is installed.
    assert "https://kind.sigs.k8s.io/dl/${KIND_VERSION}/kind-linux-amd64" in script
    assert f"https://kind.sigs.k8s.io/dl/{preflight.KIND_RELEASE}/kind-linux-$arch" in preflight.KIND_INSTALL
    assert script.index('echo "${KIND_SHA256}  kind" | sha256sum -c -') < script.index("sudo install -m 0755 kind")
    assert 'curl -fsSL https://get.pulumi.com | sh -s -- --version "${PULUMI_VERSION}"' in script
    assert f"curl -fsSL https://get.pulumi.com | sh -s -- --version {hostcheck.PULUMI_RELEASE}" in \
        hostcheck.PULUMI_INSTALL
    # Each install proves the version it got.
    assert 'kind version | grep -F " ${KIND_VERSION} "' in script
    assert 'pulumi" version | grep -Fx "v${PULUMI_VERSION}"' in script


def test_e2e_sets_the_inotify_limits_preflight_checks():
    (line,) = [line for line in runs(job("e2e.yaml")).splitlines() if "sysctl -w" in line]
    values = dict(re.findall(r"(fs\.inotify\.\w+)=(\d+)", line))
    assert int(values["fs.inotify.max_user_watches"]) >= preflight.MIN_INOTIFY_WATCHES
    assert int(values["fs.inotify.max_user_instances"]) >= preflight.MIN_INOTIFY_INSTANCES


def test_e2e_runs_make_e2e_on_a_hosted_runner_and_uploads_diagnostics_on_failure():
    e2e = job("e2e.yaml")
    assert e2e["runs-on"] == "ubuntu-latest"
    assert "e2e" in re.findall(r"^([a-z0-9-]+):", (ROOT / "Makefile").read_text(), re.M)
    run = step(e2e, "make e2e")
    workdir = run["env"][lab.WORKDIR_ENV]
    assert run["timeout-minutes"] < e2e["timeout-minutes"]
    collect, upload = [s for s in e2e["steps"] if s.get("if") == "${{ failure() }}"]
    assert collect["env"][lab.WORKDIR_ENV] == workdir
    assert f'python -m tests.e2e.lab diagnostics "${lab.WORKDIR_ENV}"' in collect["run"]
    assert upload["uses"].startswith("actions/upload-artifact@")
    # Where the lab writes them (Lab.diagnostics).
    assert upload["with"]["path"] == f"{workdir}/diagnostics"


def test_the_unit_workflow_runs_ci_run_on_python_3_11():
    test = job("test.yaml")
    assert test["runs-on"] == "ubuntu-latest"
    assert step(test, "bash .ci/run")
    assert (ROOT / ".ci" / "run").is_file()
    (python,) = [s["with"]["python-version"] for s in test["steps"] if s.get("uses", "").startswith(
        "actions/setup-python@")]
    assert python == "3.11" and tuple(map(int, python.split("."))) >= preflight.MIN_PYTHON
    assert {"push", "pull_request"} <= set(load("test.yaml")["on"])


def test_every_action_is_pinned_to_a_release():
    for path in sorted(WORKFLOWS.glob("*.yaml")):
        for step_ in (s for j in yaml.safe_load(path.read_text())["jobs"].values() for s in j["steps"]):
            if "uses" in step_:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+(\.\d+)*", step_["uses"]), (path.name, step_["uses"])
