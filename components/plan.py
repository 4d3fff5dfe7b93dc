"""The plan summary: what the validated configuration will build, as plain data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.gpu.capacity import SMOKE_WORKLOAD, plan_stack, unplaced
from components.tenant.spec import GPU_QUOTA_NAME
from config import ConfigError, ConfigIssue, StackConfig
from config.models import SMOKE_TEST_NAMESPACE


def plan_summary(config: StackConfig) -> dict[str, Any]:
    """Tenants with their (possibly allocated) CIDRs, workers and cards, and the versions `make verify` needs."""
    return {
        "managementCluster": config.management.cluster_name,
        "gpuMode": config.gpu_mode,
        "smokeTest": config.smoke_test.model_dump(by_alias=True),
        # calico: the tag of quay.io/calico/node every tenant worker holds (verify's network probe runs it).
        "versions": {"calico": config.versions.calico},
        "tenants": {
            tenant.name: {
                "kubernetesVersion": tenant.kubernetes_version,
                "serviceCidr": tenant.service_cidr,
                "podCidr": tenant.pod_cidr,
                # Networks only this tenant's workers connect from (besides the shared outputs.workerNetworks).
                "workerCidrs": list(tenant.worker_cidrs),
                "workers": {
                    f"{tenant.name}-{worker.name}": [
                        card.model_dump(by_alias=True) for card in worker.gpus
                    ]
                    for worker in tenant.workers
                },
                "gpuSlots": sum(card.slots for worker in tenant.workers for card in worker.gpus),
                "quota": tenant.quota.model_dump(by_alias=True) if tenant.quota else None,
            }
            for tenant in config.tenants
        },
    }


def gpu_plan(config: StackConfig) -> dict[str, Any]:
    """Output `gpuPlan`: where HAMi would place the smoke pod and every declared workload (components/gpu/capacity)."""
    return plan_stack(config, SMOKE_TEST_NAMESPACE, GPU_QUOTA_NAME)


def capacity_issues(config: StackConfig, plan: dict[str, Any]) -> list[ConfigIssue]:
    """One issue per declared workload with pods the plan cannot place, at the workload's key path."""
    issues = []
    for t_index, tenant in enumerate(config.tenants):
        placements = plan["tenants"][tenant.name]["placements"]
        for w_index, workload in enumerate(tenant.workloads):
            refused = [p for p in placements if p["workload"] == workload.name and p["unplaced"]]
            if refused:
                first = refused[0]
                issues.append(ConfigIssue(
                    f"tenants[{t_index}].workloads[{w_index}]",
                    f"{len(refused)} of {workload.replicas} pod(s) of '{workload.name}' would not be placed; replica "
                    f"{first['replica']}: {first['unplaced']}. Lower the request or replicas, add cards, raise "
                    "tenants[].quota, or set strictCapacity: false to deploy anyway",
                ))
    smoke = [(name, p) for name, p in unplaced(plan) if p["workload"] == SMOKE_WORKLOAD]
    issues += [ConfigIssue("smokeTest", f"would not be placed in tenant '{name}': {p['unplaced']}")
               for name, p in smoke]
    return issues


def check_capacity(config: StackConfig, plan: dict[str, Any], stack: str | None,
                   warn: Callable[[str], None]) -> None:
    """Pods that do not fit: an error before any resource exists with `strictCapacity: true`, else one warning each."""
    issues = capacity_issues(config, plan)
    if not issues:
        return
    if config.strict_capacity:
        raise ConfigError(issues, stack)
    for issue in issues:
        warn(f"GPU plan: {issue} (strictCapacity: true makes this an error)")
