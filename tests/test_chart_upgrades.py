"""A chart bump reaches a running lab, CRDs included (Helm never upgrades crds/).

pulumi-kubernetes decides an upgrade from the Release's inputs alone: Check overwrites `version` with the local
chart's Chart.yaml version and Diff dropped the old `checksum` input (helm_release.go Check, Diff
`delete(oldInputs, "checksum")`). Kamaji's Chart.yaml says 0.0.0+latest at every commit, so each release carries the
sha256 of its chart's pinned files in `description` (components/helm.py). Helm never upgrades `crds/`, so those
CRDs are CustomResourceDefinitionPatch resources of the program, applied before the release, which skips them.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components import helm
from components.charts import CHARTS
from tests.support.charts import chart_version, write_fake_charts
from tests.support.lifecycle_support import one_tenant_stack, running_kind_lab
from tests.support.mockrun import run_program
from tests.support.sim import Lifecycle
from tests.support.sim.lab import lab_world

RELEASE = "kubernetes:helm.sh/v3:Release"
CRD_PATCH = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinitionPatch"
KAMAJI_CRDS = {f"kamaji-kamaji-crd-{name}.kamaji.clastix.io" for name in
               ("datastores", "kubeconfiggenerators", "tenantcontrolplanes")}


@pytest.fixture(scope="module")
def dev():
    return run_program(one_tenant_stack())


def bump(monkeypatch, *directories: str) -> None:
    """components/charts.json with a new pin for each chart of `directories` (what a chart bump does)."""
    for directory in directories:
        monkeypatch.setitem(CHARTS, directory, CHARTS[directory] | {"sha256": format(int(CHARTS[directory]["sha256"],
                                                                                         16) ^ 1, "064x")})


# --------------------------------------------------------------------------- #
# What the program registers
# --------------------------------------------------------------------------- #


def test_every_release_describes_its_chart_files(dev):
    releases = dev.of_type(RELEASE)
    for release in releases:
        directory = release.inputs["chart"].removeprefix(f"{helm.CHARTS_DIR}/")
        assert release.inputs["description"] == f"chart files sha256:{helm.chart_digest(directory)}"
        # The program sends no version; the provider's Check set the fetched chart's (its Chart.yaml).
        assert release.inputs["version"] == chart_version(directory), release.name
    # Different charts, different digests (the subchart is part of Kamaji's, and its own for the etcd releases).
    assert len({helm.chart_digest(name) for name in helm.LOCAL_CHARTS}) == len(helm.LOCAL_CHARTS)


def test_the_digest_is_the_charts_pin_and_only_its_own(monkeypatch):
    before = {name: helm.chart_digest(name) for name in helm.LOCAL_CHARTS}
    assert before == {name: chart["sha256"] for name, chart in CHARTS.items()}
    bump(monkeypatch, "kamaji/charts/kamaji-etcd")
    after = {name: helm.chart_digest(name) for name in helm.LOCAL_CHARTS}
    assert {name for name in before if before[name] != after[name]} == {"kamaji/charts/kamaji-etcd"}


def test_kamajis_crds_are_patches_applied_before_the_release_which_skips_them(dev):
    release = dev.named("kamaji-kamaji", RELEASE)
    crds = {r.name: r for r in dev.of_type(CRD_PATCH)}
    assert set(crds) == KAMAJI_CRDS
    assert release.inputs["skipCrds"] is True
    for crd in crds.values():
        assert crd.urn in release.dependencies
        # Taken over from Helm (which created them on existing labs), and kept on destroy, as Helm keeps CRDs.
        assert crd.inputs["metadata"]["annotations"]["pulumi.com/patchForce"] == "true"
        assert crd.retain_on_delete
        assert (crd.provider, crd.parent, crd.deleted_with) == (release.provider, release.parent,
                                                                release.deleted_with)
        assert crd.inputs["spec"]["names"]["kind"] in {"DataStore", "KubeconfigGenerator", "TenantControlPlane"}
    # Charts without crds/ keep Helm's default.
    assert not [r.name for r in dev.of_type(RELEASE) if r.inputs.get("skipCrds") and r is not release]


def test_only_charts_installed_on_their_own_have_a_crds_directory():
    """helm_release applies a chart's own crds/; a subchart with crds/ would need the same, and has none."""
    # ops/upstream.py checks each fetched chart's crds/ against the list (tests/test_upstream.py).
    # MetalLB's frr-k8s subchart (a package, with CRDs of its own) stays disabled (tests/test_kamaji.py): Helm drops
    # a disabled subchart.
    assert {name for name, chart in CHARTS.items() if chart.get("crds")} == {"kamaji"}


# --------------------------------------------------------------------------- #
# A chart bump on a running lab
# --------------------------------------------------------------------------- #


def test_a_no_change_preview_of_a_running_lab_updates_no_chart():
    sim = running_kind_lab(one_tenant=True)
    plan = sim.preview()
    assert plan.changed() == {}, plan.render()


def test_a_kamaji_chart_bump_upgrades_the_release_and_its_crds_on_a_running_lab(tmp_path, monkeypatch):
    sim = running_kind_lab(one_tenant=True)
    api = sim.world.kind["gpu-tenancy"].api
    before = api.find("CustomResourceDefinition", None, "tenantcontrolplanes.kamaji.clastix.io")
    assert before["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] == "rev 1"
    # The new tag's files: a changed template and changed CRDs; the Chart.yaml version stays 0.0.0+latest.
    bump(monkeypatch, "kamaji")
    monkeypatch.setattr(helm, "PROJECT_DIR", write_fake_charts(tmp_path / "project", crd_revision="2"))
    plan = sim.preview()
    # The upgrade's new Helm revision re-runs the wait for Kamaji's webhook before any TenantControlPlane write.
    assert plan.changed() == {"update": {"kamaji-kamaji", *KAMAJI_CRDS, "kamaji-webhook-ready"}}, plan.render()
    assert plan.step("kamaji-kamaji").diffs == ["description"]
    sim.up(skip_preview=True)
    after = api.find("CustomResourceDefinition", None, "tenantcontrolplanes.kamaji.clastix.io")
    assert after["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] == "rev 2"
    assert sim.preview().changed() == {}


def test_a_cert_manager_chart_bump_upgrades_only_cert_manager(tmp_path, monkeypatch):
    sim = running_kind_lab(one_tenant=True)
    bump(monkeypatch, "cert-manager")
    plan = sim.preview()
    assert plan.changed() == {"update": {"kamaji-cert-manager"}}, plan.render()


# --------------------------------------------------------------------------- #
# The simulator's rule: with skipCrds, the CRDs must come from elsewhere first
# --------------------------------------------------------------------------- #


def test_a_kamaji_release_that_skips_its_crds_fails_without_them():
    world = lab_world()

    def program():
        provider = k8s.Provider("cluster", kubeconfig=pulumi.Config().require("kubeconfig"))
        opts = pulumi.ResourceOptions(provider=provider)
        cert_manager = k8s.helm.v3.Release("cm", name="cert-manager", chart="./.cache/charts/cert-manager",
                                           namespace="cert-manager", create_namespace=True, opts=opts)
        k8s.helm.v3.Release("kamaji", name="kamaji", chart="./.cache/charts/kamaji", namespace="kamaji-system",
                            create_namespace=True, skip_crds=True,
                            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[cert_manager])))

    sim = Lifecycle({"kubeconfig": world.adopt_cluster()}, world=world, program=program)
    plan = sim.up(expect_error=True)
    assert 'no matches for kind "DataStore"' in plan.error and "ensure CRDs are installed first" in plan.error
