"""The provider `check` step on the simulator (tests/support/sim/engine.py _check, providers.py
HelmReleaseModel.check): pulumi-kubernetes v4.32.0 helm_release.go Check loads the chart in preview and update alike,
so a chart that is not on disk, or whose repository the host cannot reach, fails the operation before any step runs.
"""

from __future__ import annotations

import pytest

from components.management.kamaji import KAMAJI_CHART_DIR
from tests.support.lifecycle_support import kind_lab, running_kind_lab


def test_a_preview_on_a_fresh_clone_fails_at_the_check_of_the_local_chart_and_creates_nothing():
    sim = kind_lab()
    sim.world.charts_on_disk = set()  # `make charts` never ran
    plan = sim.preview(expect_error=True)
    assert not plan.ok
    assert f"property chart value '{KAMAJI_CHART_DIR}' has a problem: path \"{KAMAJI_CHART_DIR}\" not found" in (
        plan.error or ""), plan.render()
    assert sim.world.kind == {} and sim.resources() == []


def test_with_the_charts_on_disk_the_same_preview_passes_the_check():
    sim = kind_lab()
    sim.world.charts_on_disk = {KAMAJI_CHART_DIR}
    assert sim.preview().ok


def test_a_chart_repository_the_host_cannot_reach_fails_the_check_in_preview():
    running = running_kind_lab()
    running.world.docker.blocked_hosts.add("charts.jetstack.io")
    plan = running.preview(expect_error=True)
    assert not plan.ok and 'looks like "https://charts.jetstack.io" is not a valid chart repository or cannot be ' \
        "reached" in plan.render(), plan.render()


@pytest.mark.xfail(strict=True, reason=(
    "defect (pulumi-engine PE-3, issue 20 #3): cert-manager, MetalLB, Calico and HAMi come from chart repositories, "
    "which helm_release.go Check downloads in every preview and update, so a no-change preview of a running lab "
    "fails while one of those sites is down. Fixed once every chart is a local, checksum-verified copy."))
def test_a_no_change_preview_needs_no_chart_site():
    running = running_kind_lab()
    running.world.docker.blocked_hosts.update({"charts.jetstack.io", "metallb.github.io", "docs.tigera.io",
                                              "project-hami.github.io"})
    assert running.preview().changed() == {}
