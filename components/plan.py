"""The plan summary: what the validated configuration will build, as plain data."""

from __future__ import annotations

from typing import Any

from config import StackConfig


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
