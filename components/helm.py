"""One way to install a chart: an awaited `helm.v3.Release` with pinned version and exact release name.

Every chart here is a real Helm release (not `helm.v4.Chart`): Kamaji's etcd
and HAMi's webhook certificates come from Helm hooks (clastix/kamaji
charts/kamaji/templates/etcd_job_postinstall.yaml; Project-HAMi/HAMi
charts/hami/templates/scheduler/job-patch/), which only a Release runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml


@dataclass(frozen=True)
class Chart:
    release: str  # Helm release name, set exactly (no random suffix)
    chart: str  # chart name in `repo`, or a local chart directory when `repo` is empty
    repo: str
    namespace: str


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
    version: str | None,
    timeout: int,
    opts: pulumi.ResourceOptions,
    values: pulumi.Input[dict[str, Any]] | None = None,
    create_namespace: bool = False,
) -> k8s.helm.v3.Release:
    """Install `chart` and wait (`skip_await=False`) for its workloads and hooks, up to `timeout` seconds.

    A chart without `repo` is a local directory (its version is the one in its Chart.yaml); pulumi-kubernetes
    resolves it relative to the project directory (helm_release.go localChart).
    """
    value_args = helm_values_args(values) if isinstance(values, dict) else {"values": values}
    source: dict[str, Any] = {"version": version}
    if chart.repo:
        source["repository_opts"] = k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo)
    return k8s.helm.v3.Release(
        resource_name,
        name=chart.release,
        chart=chart.chart,
        **source,
        namespace=chart.namespace,
        create_namespace=create_namespace,
        skip_await=False,
        timeout=timeout,
        opts=opts,
        **value_args,
    )
