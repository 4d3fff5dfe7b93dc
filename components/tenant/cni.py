"""Calico in one tenant (`TenantCni`): installed after the tenant's workers joined, since its operator and CNI pods
need a Node to run on, and `deleted_with` the TenantControlPlane, whose cluster it lives in."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

import config
from components.helm import helm_release
from components.tenant import spec as tenant_spec
from naming import COMPONENT_PREFIX

# Pulls the operator and calico-node images, then waits for the operator Deployment.
CALICO_TIMEOUT_SECONDS = 20 * 60
CRD_CHART_TIMEOUT_SECONDS = 5 * 60


@dataclass
class TenantCniArgs:
    tenant: config.Tenant
    tenant_provider: k8s.Provider
    endpoint: pulumi.Input[str]  # "<host>:<port>" of the tenant API server
    # The tenant's worker joins: Calico goes in after them (its operator and CNI pods need a Node to run on).
    depends_on: list[pulumi.Resource]
    # The TenantControlPlane: Calico lives in its cluster and goes with it.
    deleted_with: pulumi.Resource | None = None


class TenantCni(pulumi.ComponentResource):
    """Calico in one tenant: the CRD chart, then tigera-operator with one VXLAN pool over `podCidr`."""

    releases: list[pulumi.Resource]

    def __init__(self, name: str, args: TenantCniArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{COMPONENT_PREFIX}:TenantCni", name, None, opts)
        _, pod_cidr = tenant_spec.resolved_cidrs(args.tenant)
        workers = len(args.tenant.workers)
        system_nodes = tenant_spec.system_node_selector(args.tenant)
        inside = pulumi.ResourceOptions(parent=self, provider=args.tenant_provider, deleted_with=args.deleted_with)
        calico_crds = helm_release(
            f"{name}-calico-crds",
            tenant_spec.CALICO_CRDS_CHART,
            create_namespace=True,
            timeout=CRD_CHART_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(depends_on=args.depends_on)),
        )
        calico = helm_release(
            f"{name}-calico",
            tenant_spec.CALICO_OPERATOR_CHART,
            values=pulumi.Output.from_input(args.endpoint).apply(
                lambda endpoint: tenant_spec.calico_operator_values(pod_cidr, endpoint, workers, system_nodes)
            ),
            create_namespace=True,
            timeout=CALICO_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(depends_on=[calico_crds])),
        )
        self.releases = [calico_crds, calico]
        self.register_outputs({"releases": [release.name for release in self.releases]})
