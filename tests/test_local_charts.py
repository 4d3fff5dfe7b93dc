"""Every chart is a local directory `make charts` fetched (components/helm.py): no preview or `up` needs a chart
site (helm_release.go Check loads the chart in every preview), and a checkout without the charts fails in one
line naming `make charts`.

The simulator's Helm model has the provider's Check (pulumi-kubernetes helm_release.go Check -> helmLoad ->
locateChart): with a configured provider and known inputs it loads the chart, so a missing local chart fails a
preview with the provider's message, and a repository chart needs its (here unreachable) site.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import pulumi
import pulumi_kubernetes as k8s
import pytest

import components
from components import helm
from tests.support.charts import write_fake_charts
from tests.support.lifecycle_support import adopt_lab, kind_lab, one_tenant_stack, running_kind_lab
from tests.support.mockrun import reference_stack, run_program
from tests.support.readme import all_text
from tests.support.sim import Lifecycle
from tests.support.sim.lab import lab_world

RELEASE = "kubernetes:helm.sh/v3:Release"


def _defined_charts() -> dict[str, helm.Chart]:
    """Every Chart constant in the product's modules, by module.name."""
    found = {}
    for module_info in pkgutil.walk_packages(components.__path__, "components."):
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if isinstance(value, helm.Chart):
                found[f"{module_info.name}.{name}"] = value
    return found


def test_each_local_charts_version_key_is_a_versions_field():
    assert set(helm.LOCAL_CHARTS.values()) - {None} <= set(helm.Versions.model_fields)


def test_every_chart_the_product_defines_is_a_local_chart():
    charts = _defined_charts()
    assert len({chart.directory for chart in charts.values()}) == len(helm.LOCAL_CHARTS)
    assert {chart.directory for chart in charts.values()} == set(helm.LOCAL_CHARTS)
    for chart in charts.values():
        assert chart.path == f"./.cache/charts/{chart.directory}"
    with pytest.raises(ValueError, match="not a chart directory `make charts` fetches"):
        helm.helm_release("x", helm.Chart("x", "https://charts.jetstack.io", "x"), timeout=1,
                          opts=pulumi.ResourceOptions())


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_release_the_program_registers_installs_a_local_chart(stack):
    if stack == "dev":
        run = run_program(one_tenant_stack(), preview=True)
    else:
        sim = adopt_lab(one_tenant=True)  # the production example, with its dedicated etcd
        run = run_program(sim.config, stack="prod", secret_keys=sim.secret_keys, world=sim.world, preview=True)
    releases = run.of_type(RELEASE)
    assert len(releases) >= 5
    for release in releases:
        # No repository: the chart is a directory of .cache/charts, which Check loads from disk.
        assert "repositoryOpts" not in release.inputs, release.name
        assert release.inputs["chart"] in {f"./.cache/charts/{name}" for name in helm.LOCAL_CHARTS}, release.name


# --------------------------------------------------------------------------- #
# A fresh clone (no .cache/charts)
# --------------------------------------------------------------------------- #


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """A checkout on which `make charts` never ran."""
    monkeypatch.setattr(helm, "PROJECT_DIR", tmp_path)
    return tmp_path


def _one_line(error: str | None) -> str:
    assert error, "expected the operation to fail"
    line = error.removeprefix("program failed: ChartsMissingError: ")
    assert "\n" not in line, error
    return line


def test_a_fresh_clone_preview_fails_in_one_line_naming_make_charts_before_registering_anything(fresh_clone):
    # The adopted cluster is the case the provider would fail on (its Provider is configured during preview).
    sim = adopt_lab()
    plan = sim.preview(expect_error=True)
    line = _one_line(plan.error)
    assert line == ("the Helm charts are not fetched (.cache/charts has no chart): run `make charts` (it downloads "
                    "every pinned chart once and checks it against its pin)")
    assert plan.steps == [] and sim.engine.last_operation.registered == {}


@pytest.mark.repo
def test_the_docs_show_the_line_a_fresh_clone_prints(fresh_clone):
    with pytest.raises(helm.ChartsMissingError) as raised:
        helm.require_charts(helm.Versions())
    assert str(raised.value) in all_text().splitlines()


def test_a_partly_fetched_checkout_names_the_missing_charts(fresh_clone):
    write_fake_charts(fresh_clone)
    for name in ("hami", "kamaji/charts/kamaji-etcd"):
        (helm.chart_root(fresh_clone) / name / "Chart.yaml").unlink()
    plan = kind_lab().preview(expect_error=True)
    assert _one_line(plan.error).startswith(
        "the Helm charts are not fetched (.cache/charts has no kamaji/charts/kamaji-etcd, hami): run `make charts`")


def test_with_the_charts_present_the_adopted_preview_and_up_work():
    sim = adopt_lab(one_tenant=True)
    plan = sim.preview()
    assert {"kamaji-cert-manager", "kamaji-kamaji"} <= plan.names("create")
    sim.up(skip_preview=True)
    assert sim.preview().changed() == {}


def test_without_the_programs_check_the_providers_check_fails_the_adopted_preview(fresh_clone, monkeypatch):
    """The rule broken once: with no check of its own, the program runs into pulumi-kubernetes' Check."""
    monkeypatch.setattr(helm, "require_charts", lambda versions, project_dir=None: None)
    plan = adopt_lab().preview(expect_error=True)
    failed = re.fullmatch(
        r"kubernetes:helm.sh/v3:Release resource '(?P<name>kamaji-[a-z-]+)': property chart value "
        r"\{(?P<chart>\./\.cache/charts/[a-z-]+)\} has a problem: path \"(?P=chart)\" not found; check the chart "
        r"name and repository configuration\.", plan.error or "")
    assert failed, plan.error
    # The invalid resource gets no step.
    assert failed["name"] not in {step.name for step in plan.steps}


def test_a_running_lab_whose_charts_were_removed_fails_its_preview_in_one_line(monkeypatch, tmp_path):
    sim = running_kind_lab(one_tenant=True)
    monkeypatch.setattr(helm, "PROJECT_DIR", tmp_path)
    assert "run `make charts`" in _one_line(sim.preview(expect_error=True).error)


def test_a_configured_chart_version_other_than_the_fetched_one_is_a_config_error():
    config = reference_stack()
    config["versions"] = {"certManager": "v1.22.0"}
    sim = kind_lab(config)
    plan = sim.preview(expect_error=True)
    assert "versions.certManager = 'v1.22.0': the cert-manager chart `make charts` fetched is v1.21.1" in plan.error
    assert "Pulumi.dev.yaml" in plan.error and sim.engine.last_operation.registered == {}


# --------------------------------------------------------------------------- #
# A repository chart needs its site in every Check
# --------------------------------------------------------------------------- #


def _repository_chart_program():
    provider = k8s.Provider("cluster", kubeconfig=pulumi.Config().require("kubeconfig"))
    k8s.helm.v3.Release("from-a-site", chart="cert-manager", version="v1.21.1", namespace="cert-manager",
                        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo="https://charts.jetstack.io"),
                        opts=pulumi.ResourceOptions(provider=provider))


def test_a_repository_chart_fails_every_checked_preview_on_a_host_without_the_chart_site():
    world = lab_world()
    sim = Lifecycle({"kubeconfig": world.adopt_cluster()}, world=world, program=_repository_chart_program)
    plan = sim.preview(expect_error=True)
    assert plan.error.startswith("kubernetes:helm.sh/v3:Release resource 'from-a-site': property chart value "
                                 "{cert-manager} has a problem: looks like \"https://charts.jetstack.io\" is not a "
                                 "valid chart repository or cannot be reached")
