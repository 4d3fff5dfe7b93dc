"""One way to install a chart: an awaited `helm.v3.Release` of a local, verified chart directory.

Every chart here is a real Helm release (not `helm.v4.Chart`): Kamaji's etcd
and HAMi's webhook certificates come from Helm hooks (clastix/kamaji
charts/kamaji/templates/etcd_job_postinstall.yaml; Project-HAMi/HAMi
charts/hami/templates/scheduler/job-patch/), which only a Release runs.

Every chart is a directory `make charts` fetched into .cache/charts and checked against its pin in
components/charts.json (ops/upstream.py), never a chart repository: pulumi-kubernetes loads the chart in
`Check` whenever the inputs are known, i.e. in every preview of a running stack and in every `up`, and a repository
chart is downloaded each time (helm_release.go Check -> helmLoad -> locateChart). With local charts neither a
preview nor `up` needs a chart site. `require_charts` runs before the program registers anything, so a checkout
without .cache/charts fails with one line naming `make charts`, not with the provider's `path not found`.

A local chart's version is whatever its Chart.yaml says (Check overwrites the `version` input with it), and
Kamaji's says 0.0.0+latest at every commit, so a chart bump would change no input and never reach a running lab
(pulumi-kubernetes dropped the old `checksum` input, helm_release.go Diff). Each release therefore carries the
chart's pin, the sha256 of its files, in `description`; a changed file is an update, i.e. a `helm upgrade`. Helm
never upgrades a chart's `crds/` (only installs them), so those CRDs are this program's own resources instead,
applied before the release, which skips them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.charts import CHARTS
from config import ConfigError, ConfigIssue, Versions

# Where `make charts` puts every chart, relative to the project directory: Pulumi runs the program and its
# providers there, and pulumi-kubernetes resolves a chart path starting with "." against its working directory
# (helm_release.go locateChart -> localChart).
CHARTS_DIR = "./.cache/charts"
# The project directory (the one with Pulumi.yaml), where the program looks for the charts itself.
PROJECT_DIR = Path(__file__).resolve().parent.parent
# Every chart directory under CHARTS_DIR, each with the `versions` field its Chart.yaml version must equal; None
# where no config key names it (Kamaji's chart is 0.0.0+latest at every commit; kamaji-etcd is the version
# Kamaji's Chart.lock locks).
LOCAL_CHARTS: dict[str, str | None] = {name: chart.get("versions") for name, chart in CHARTS.items()}
MAKE_CHARTS = "run `make charts` (it downloads every pinned chart once and checks it against its pin)"
# Server-side apply takes the CRD's fields over from Helm, which created them (pulumi-kubernetes await.go
# patchForce: the annotation forces the apply).
PATCH_FORCE = {"pulumi.com/patchForce": "true"}


@dataclass(frozen=True)
class Chart:
    release: str  # Helm release name, set exactly (no random suffix)
    directory: str  # a key of LOCAL_CHARTS: the chart directory under CHARTS_DIR
    namespace: str

    @property
    def path(self) -> str:
        """The Release's `chart` input: the chart directory, relative to the project directory."""
        return f"{CHARTS_DIR}/{self.directory}"


class ChartsMissingError(pulumi.RunError):
    """The pinned charts are not on disk: one line, naming `make charts` (a RunError prints without traceback)."""


def chart_root(project_dir: Path | None = None) -> Path:
    return (project_dir or PROJECT_DIR) / PurePosixPath(CHARTS_DIR)


def require_charts(versions: Versions, project_dir: Path | None = None) -> None:
    """Fail before any resource exists when a chart is not in .cache/charts, or is not the configured version.

    Presence is what the program can check cheaply; `make charts` / `make up` check every file's sha256.
    """
    root = chart_root(project_dir)
    missing = [name for name in LOCAL_CHARTS if not (root / name / "Chart.yaml").is_file()]
    if missing:
        where = CHARTS_DIR.removeprefix("./")
        what = "no chart" if len(missing) == len(LOCAL_CHARTS) else f"no {', '.join(missing)}"
        raise ChartsMissingError(f"the Helm charts are not fetched ({where} has {what}): {MAKE_CHARTS}")
    issues = []
    for name, field in LOCAL_CHARTS.items():
        if field is None:
            continue
        pinned = str((yaml.safe_load((root / name / "Chart.yaml").read_text(encoding="utf-8")) or {}).get("version"))
        wanted = getattr(versions, field)
        if wanted != pinned:
            issues.append(ConfigIssue(
                f"versions.{Versions.model_fields[field].alias}",
                f"the {name} chart `make charts` fetched is {pinned} (components/charts.json pins each chart): "
                f"remove this key, or pin the {wanted} chart in components/charts.json", wanted))
    if issues:
        raise ConfigError(issues, pulumi.get_stack())


def chart_digest(directory: str) -> str:
    """The chart's pin: sha256 over its files, subcharts included (components/charts.py tree_digest)."""
    return CHARTS[directory]["sha256"]


def chart_crds(directory: str, project_dir: Path | None = None) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of the chart's own `crds/` files (components/charts.json), as fetched."""
    crds = []
    for name in CHARTS[directory].get("crds", []):
        path = chart_root(project_dir) / directory / "crds" / name
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ChartsMissingError(f"{CHARTS_DIR.removeprefix('./')}/{directory}/crds/{name} is missing: "
                                     f"{MAKE_CHARTS}") from None
        for document in yaml.safe_load_all(text):
            if document is None:
                continue
            if document.get("kind") != "CustomResourceDefinition":
                raise ValueError(f"{path}: {document.get('kind')!r} in crds/ is not a CustomResourceDefinition")
            crds.append(document)
    return crds


def without_nulls(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with every `None` leaf removed (the Python SDK drops them silently anyway)."""
    return {
        key: without_nulls(value) if isinstance(value, dict) else value
        for key, value in values.items()
        if value is not None
    }


def null_overrides(values: dict[str, Any]) -> dict[str, Any]:
    """Only the `None` leaves of `values`, at their paths (empty when there are none)."""
    found: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            found[key] = None
        elif isinstance(value, dict) and (nested := null_overrides(value)):
            found[key] = nested
    return found


def helm_values_args(values: dict[str, Any]) -> dict[str, Any]:
    """`values` / `value_yaml_files` arguments of a Release that keep Helm nulls.

    Python drops `None` from `values`, so nulls travel in a YAML document, which
    pulumi-kubernetes >= 4.30 passes to Helm unchanged (pulumi-kubernetes #4293).
    """
    nulls = null_overrides(values)
    args: dict[str, Any] = {"values": without_nulls(values)}
    if nulls:
        args["value_yaml_files"] = [pulumi.StringAsset(yaml.safe_dump(nulls, sort_keys=True))]
    return args


def helm_release(
    resource_name: str,
    chart: Chart,
    *,
    timeout: int,
    opts: pulumi.ResourceOptions,
    values: pulumi.Input[dict[str, Any]] | None = None,
    create_namespace: bool = False,
) -> k8s.helm.v3.Release:
    """Install the local `chart` and wait (`skip_await=False`) for its workloads and hooks, up to `timeout` seconds.

    No `version`: Check sets it from the chart's Chart.yaml (helm_release.go Check), which `require_charts`
    compared with the config. `description` carries the chart files' sha256, so a chart bump upgrades the release.
    The chart's `crds/` become CustomResourceDefinitionPatch resources (server-side apply: create or take over,
    and never delete; Helm keeps CRDs too), applied before the release, which then skips them.
    """
    if chart.directory not in LOCAL_CHARTS:
        raise ValueError(f"{chart.directory!r} is not a chart directory `make charts` fetches ({sorted(LOCAL_CHARTS)})")
    value_args = helm_values_args(values) if isinstance(values, dict) else {"values": values}
    crds = [
        k8s.apiextensions.v1.CustomResourceDefinitionPatch(
            f"{resource_name}-crd-{crd['metadata']['name']}",
            metadata={**crd["metadata"], "annotations": {**(crd["metadata"].get("annotations") or {}), **PATCH_FORCE}},
            spec=crd["spec"],
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True)),
        )
        for crd in chart_crds(chart.directory)
    ]
    extra: dict[str, Any] = {}
    if crds:
        extra["skip_crds"] = True
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=crds))
    return k8s.helm.v3.Release(
        resource_name,
        name=chart.release,
        chart=chart.path,
        description=f"chart files sha256:{chart_digest(chart.directory)}",
        namespace=chart.namespace,
        create_namespace=create_namespace,
        skip_await=False,
        timeout=timeout,
        opts=opts,
        **extra,
        **value_args,
    )
