"""HamiMockGpu: HAMi in one tenant, its (simulated) GPUs, and the in-stack proof that they work.

Order inside a tenant (facts §6): workers joined -> CNI -> Konnectivity agent
running -> HAMi release. Per node, in mock mode, the card annotation and the
`nvidia.com/gpu` status capacity; in nvidia mode only the `gpu=on` label the
real device plugin selects. Last, a fractional GPU pod whose read-back state
must show HAMi's webhook and scheduler at work, or `pulumi up` fails naming
the broken link.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

import config
from components.container_exec import TENANT_KUBECONFIG_ENV
from components.gpu_register import (
    JOIN_ANNOTATION,
    NVIDIA_NODE_LABEL,
    REGISTER_ANNOTATION,
    apply_capacity_script,
    gpu_capacity,
    konnectivity_wait_script,
    register_annotation,
    remove_capacity_script,
)
from components.hami_smoke import check_smoke_evidence, observed_pod, smoke_pod_manifest
from components.hami_values import HAMI_CHART, hami_values
from components.helm import helm_release
from components.naming import COMPONENT_PREFIX
from components.node_access import NodeAccess, NodeScript, run_on_node

# Helm waits for HAMi's Deployment, its certificate hook Jobs and (in mock mode) the plugin DaemonSet.
HELM_TIMEOUT_SECONDS = 600
# The pause image starts at once; what takes time is HAMi noticing the node (15 s) and the plugin (30 s).
SMOKE_POD_TIMEOUT = "5m"


@dataclass
class GpuNode:
    worker: config.Worker  # configured cards
    node_name: pulumi.Input[str]  # "<tenant>-<worker>"; WorkerNode.node_name resolves after the join
    access: NodeAccess  # how to run a script on that worker (WorkerNode.access): container or SSH
    joined: pulumi.Resource  # the worker's join Command: anything touching the Node waits on it


@dataclass
class HamiMockGpuArgs:
    tenant: config.Tenant
    gpu_mode: str  # "mock" | "nvidia"
    smoke_test: config.SmokeTest
    versions: config.Versions
    tenant_provider: k8s.Provider
    tenant_kubeconfig: pulumi.Input[str]  # secret admin kubeconfig of the tenant
    nodes: list[GpuNode]
    depends_on: list[pulumi.Resource]  # the tenant's CNI releases (Calico)


class HamiMockGpu(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    node_names: pulumi.Output[list[str]]
    gpu_capacity: pulumi.Output[dict[str, int]]  # node -> nvidia.com/gpu capacity (cards x slots)
    smoke_test: pulumi.Output[dict] | None  # evidence: pod, node, schedulerName, devicesAllocated

    def __init__(self, name: str, args: HamiMockGpuArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{COMPONENT_PREFIX}:HamiMockGpu", name, None, opts)
        if not args.nodes:
            raise ValueError(f"tenant {args.tenant.name}: HamiMockGpu needs at least one joined worker node")
        tenant = args.tenant.name
        mock = args.gpu_mode == "mock"
        self._kubeconfig = pulumi.Output.secret(args.tenant_kubeconfig)
        k8s_opts = {"parent": self, "provider": args.tenant_provider}

        # (1) The webhook is reached through the tunnel: wait for its agents before installing HAMi.
        tunnel = self._tenant_command(
            f"{tenant}-konnectivity-agent-ready",
            args.nodes[0].access,
            create=konnectivity_wait_script(len(args.nodes)),
            depends_on=[*(node.joined for node in args.nodes), *args.depends_on],
        )

        # (2) HAMi itself.
        self.release = helm_release(
            f"{tenant}-hami",
            HAMI_CHART,
            version=args.versions.hami,
            values=hami_values(args.gpu_mode, args.tenant.kubernetes_version, args.versions),  # type: ignore[arg-type]
            timeout=HELM_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions(**k8s_opts, depends_on=[tunnel]),
        )

        # (3) The cards on each node.
        node_resources: list[pulumi.Resource] = []
        for node in args.nodes:
            cards = node.worker.gpus
            if not cards:
                continue
            node_opts = pulumi.ResourceOptions(**k8s_opts, depends_on=[node.joined])
            if mock:
                node_resources.append(
                    k8s.core.v1.NodePatch(
                        f"{node.access.node_name}-gpu-register",
                        metadata={
                            "name": node.node_name,
                            "annotations": {
                                REGISTER_ANNOTATION: register_annotation(cards),
                                JOIN_ANNOTATION: node.joined.id,
                            },
                        },
                        opts=node_opts,
                    )
                )
                node_resources.append(self._capacity_command(node, gpu_capacity(cards)))
            else:
                node_resources.append(
                    k8s.core.v1.NodePatch(
                        f"{node.access.node_name}-gpu-label",
                        metadata={"name": node.node_name, "labels": dict(NVIDIA_NODE_LABEL)},
                        opts=node_opts,
                    )
                )

        self.node_names = pulumi.Output.all(*(node.node_name for node in args.nodes))
        capacities = [gpu_capacity(node.worker.gpus) for node in args.nodes]
        self.gpu_capacity = self.node_names.apply(lambda names: dict(zip(names, capacities, strict=True)))

        # (4) The proof.
        self.smoke_test = None
        if args.smoke_test.enabled:
            manifest = smoke_pod_manifest(args.smoke_test, f"registry.k8s.io/pause:{args.versions.pause}")
            joins = pulumi.Output.all(*(node.joined.id for node in args.nodes)).apply(",".join)
            metadata = {**manifest["metadata"], "annotations": {JOIN_ANNOTATION: joins}}
            pod = k8s.core.v1.Pod(
                f"{tenant}-gpu-smoke-test",
                metadata=metadata,
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions(
                    **k8s_opts,
                    depends_on=[self.release, *node_resources],
                    # The pod has a fixed name and an immutable spec: a changed request means delete, then create.
                    delete_before_replace=True,
                    # A rejoined worker dropped the pod with its old Node: prove again on the new one.
                    replace_on_changes=[f"metadata.annotations.{JOIN_ANNOTATION}"],
                    custom_timeouts=pulumi.CustomTimeouts(create=SMOKE_POD_TIMEOUT),
                ),
            )
            self.smoke_test = pulumi.Output.all(pod.metadata, pod.spec, pod.urn).apply(
                lambda parts: _evidence(tenant, *parts)
            )

        self.register_outputs(
            {
                "release": self.release.name,
                "node_names": self.node_names,
                "gpu_capacity": self.gpu_capacity,
                "smoke_test": self.smoke_test,
            }
        )

    def _tenant_command(
        self,
        name: str,
        access: NodeAccess,
        *,
        create: pulumi.Input[str],
        depends_on: list[pulumi.Resource],
        delete: pulumi.Input[str] | None = None,
        triggers: list[pulumi.Input[str]] | None = None,
        delete_before_replace: bool = False,
    ) -> pulumi.CustomResource:
        """A script run on a worker that talks to the tenant API with the admin kubeconfig (never argv or logs)."""
        uses_kubeconfig = (TENANT_KUBECONFIG_ENV,)
        return run_on_node(
            name,
            access,
            create=NodeScript(create, uses_kubeconfig),
            delete=NodeScript(delete, uses_kubeconfig) if delete is not None else None,
            secrets={TENANT_KUBECONFIG_ENV: self._kubeconfig},
            triggers=triggers,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=depends_on, delete_before_replace=delete_before_replace
            ),
        )

    def _capacity_command(self, node: GpuNode, capacity: int) -> pulumi.CustomResource:
        """`nvidia.com/gpu` on the Node status; the count is in the script, so a change re-runs create."""
        node_name = pulumi.Output.from_input(node.node_name)
        return self._tenant_command(
            f"{node.access.node_name}-gpu-capacity",
            node.access,
            create=node_name.apply(lambda n: apply_capacity_script(n, capacity)),
            delete=node_name.apply(remove_capacity_script),
            depends_on=[node.joined],
            # A rejoined worker is a fresh Node without the capacity: apply it again. Delete first, so the
            # old command's removal cannot run after the new command's patch.
            triggers=[node.joined.id],
            delete_before_replace=True,
        )


def _evidence(tenant: str, metadata: Any, spec: Any, urn: str) -> dict[str, Any]:
    return check_smoke_evidence(observed_pod(metadata, spec), tenant, resource=urn)
