"""A stand-in chart tree for runs without `make charts` (make graph and the tests).

The real chart files come from GitHub (components/charts.json, `make charts`); tests cannot download them. What the
program and the simulator's Helm model read from a chart directory is small: its Chart.yaml (present, and its `version`)
and the CRDs in its `crds/`. `write_fake_charts` writes exactly that for every chart directory the program
installs: a Chart.yaml with the chart's name and pinned version, and each `crds/` file the program applies as a
minimal CustomResourceDefinition. Nothing else (templates, values) is written.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import yaml

from components import helm
from components.charts import CHARTS
from config import Versions

# The chart directories whose version no config key names: what their pinned Chart.yaml says
# (clastix/kamaji charts/kamaji/Chart.yaml @ddbabd87, clastix/kamaji-etcd charts/kamaji-etcd/Chart.yaml @v0.15.0).
UNNAMED_VERSIONS = {"kamaji": "0.0.0+latest", "kamaji/charts/kamaji-etcd": "0.15.0"}
# The kind each pinned crds/ file defines (controller-gen names the file <group>_<plural>.yaml, not the kind).
CRD_KINDS = {
    "kamaji.clastix.io_datastores.yaml": "DataStore",
    "kamaji.clastix.io_kubeconfiggenerators.yaml": "KubeconfigGenerator",
    "kamaji.clastix.io_tenantcontrolplanes.yaml": "TenantControlPlane",
}


def chart_version(directory: str, versions: Versions | None = None) -> str:
    field = helm.LOCAL_CHARTS[directory]
    return UNNAMED_VERSIONS[directory] if field is None else getattr(versions or Versions(), field)


def fake_crd(file_name: str, revision: str = "1") -> dict:
    group, _, plural = PurePosixPath(file_name).stem.partition("_")
    kind = CRD_KINDS[file_name]  # a KeyError here: a new crds/ file in components/charts.json, add its kind above
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced" if kind == "TenantControlPlane" else "Cluster",
                 "names": {"kind": kind, "plural": plural},
                 "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "description": f"rev {revision}"}}}]},
    }


def write_fake_charts(project_dir: Path, versions: Versions | None = None, crd_revision: str = "1") -> Path:
    """Chart.yaml and crds/ of every chart under `project_dir`/.cache/charts; returns `project_dir`."""
    root = helm.chart_root(project_dir)
    for directory in helm.LOCAL_CHARTS:
        chart = root / directory
        chart.mkdir(parents=True, exist_ok=True)
        name = PurePosixPath(directory).name
        (chart / "Chart.yaml").write_text(
            yaml.safe_dump({"apiVersion": "v2", "name": name, "version": chart_version(directory, versions)}))
        for crd in CHARTS[directory].get("crds", []):
            (chart / "crds").mkdir(exist_ok=True)
            (chart / "crds" / crd).write_text(yaml.safe_dump(fake_crd(crd, crd_revision)))
    return project_dir


@contextlib.contextmanager
def stand_in_charts() -> Iterator[Path]:
    """Meanwhile the program finds a stand-in chart tree (in a temporary project directory), whatever is in
    .cache/charts: for running it under the simulator outside pytest (`make graph`)."""
    saved = helm.PROJECT_DIR
    with tempfile.TemporaryDirectory(prefix="gpu-tenancy-charts-") as scratch:
        helm.PROJECT_DIR = write_fake_charts(Path(scratch))
        try:
            yield helm.PROJECT_DIR
        finally:
            helm.PROJECT_DIR = saved
