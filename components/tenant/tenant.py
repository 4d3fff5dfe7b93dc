"""Tenant: one tenant, whole -- its hosted control plane, its workers, Calico and its GPUs.

Everything a tenant builds on comes in one `Platform` value (the management cluster, its image caches and Kamaji,
and the stack-wide settings), the same for every tenant; nothing a tenant creates is seen by another. Inside, the
layers follow the README's picture: control plane -> workers joined to it -> CNI -> HAMi and the smoke test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

import config
from components import host_operations
from components.gpu import hami
from components.gpu.hami import GpuCardsArgs, GpuNode, TenantGpus, TenantGpusArgs
from components.management.cluster import ManagementCluster
from components.management.image_cache import RegistryMirror, worker_mirrors
from components.management.kamaji import Kamaji
from components.tenant import spec as tenant_spec
from components.tenant.cni import TenantCni, TenantCniArgs
from components.tenant.control_plane import TenantControlPlane, TenantControlPlaneArgs
from components.tenant.operations import TenantVersionProvider
from components.worker.node import NvidiaWorker, TenantAccess, WorkerNode, WorkerNodeArgs, worker_image
from naming import COMPONENT_PREFIX, JOIN_ANNOTATION, node_name


@dataclass(frozen=True)
class Platform:
    """What every tenant builds on, built once for the whole stack."""

    config: config.StackConfig  # versions, GPU mode, smoke test, the management section (networks, mirrors)
    management_provider: k8s.Provider
    management_kubeconfig: pulumi.Input[str]  # secret; also for the host-side checks of a tenant that is gone
    # Kind mode: the cluster command (None for an adopted cluster). Everything on the management cluster goes with
    # it, and container workers join its docker network, which exists only once the cluster does.
    management_cluster: pulumi.Resource | None
    network_name: str
    # Where a tenant's workers connect from, given the tenant's own workerCidrs (raises when that is nothing).
    worker_networks: Callable[[Sequence[str]], pulumi.Output[list[str]]]
    shared_datastore: pulumi.Input[str]  # Kamaji's shared DataStore (unless a tenant has its own etcd)
    kamaji_ready: list[pulumi.Resource]  # Kamaji's webhook answers and the DataStore exists
    images_ready: list[pulumi.Resource]  # the kind node pulls through the image caches (empty without them)

    @staticmethod
    def of(stack: config.StackConfig, management: ManagementCluster, kamaji: Kamaji,
           mirror: RegistryMirror | None) -> Platform:
        """The platform the management layer built (`mirror` is None without image caches)."""
        return Platform(
            config=stack,
            management_provider=management.provider,
            management_kubeconfig=management.kubeconfig,
            management_cluster=management.cluster,
            network_name=management.network_name,
            worker_networks=management.tenant_worker_networks,
            shared_datastore=kamaji.datastore_name,
            kamaji_ready=kamaji.ready,
            images_ready=mirror.node_ready if mirror is not None else [],
        )


@dataclass
class TenantArgs:
    tenant: config.Tenant
    platform: Platform


def _formerly_top_level(parent: pulumi.Resource, former_type: str | None = None) -> pulumi.ResourceOptions:
    """A part of this tenant that was a top-level component before this component existed (commit a7c63e6). Its
    URN, and so those of everything under it, held no Tenant: the alias finds a running stack's resources there
    (pulumi/pulumi step_generator.go getOldResource; children follow, inheritedChildAlias), so nothing is replaced,
    created or deleted for the move."""
    alias = pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE) if former_type is None else \
        pulumi.Alias(type_=former_type, parent=pulumi.ROOT_STACK_RESOURCE)
    return pulumi.ResourceOptions(parent=parent, aliases=[alias])


class Tenant(pulumi.ComponentResource):
    """One tenant: `TenantControlPlane`, a `WorkerNode` per worker, `TenantCni` and `TenantGpus`."""

    version: pulumi.Resource  # the control plane's version as deployed (TenantVersion)
    control_plane: TenantControlPlane
    workers: list[WorkerNode]
    gpus: TenantGpus
    # The stack's `tenants.<name>` output: where the tenant is and what the smoke test proved.
    summary: dict[str, Any]
    admin_kubeconfig: pulumi.Output[str]  # secret: the operator's credential
    user_kubeconfig: pulumi.Output[str]  # secret: the tenant's users' (namespaced `edit`)

    def __init__(self, name: str, args: TenantArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{COMPONENT_PREFIX}:Tenant", name, None, opts)
        tenant, platform = args.tenant, args.platform
        stack = platform.config
        # First: the version the state holds against the one asked for. Its diff refuses a downgrade or a skipped
        # minor version in the preview, and the control plane and the workers wait for it.
        index = next(i for i, other in enumerate(stack.tenants) if other.name == tenant.name)
        self.version = host_operations.resource(
            TenantVersionProvider(),
            f"{tenant.name}-version",
            {"tenant": tenant.name, "version_key": f"tenants[{index}].kubernetesVersion",
             "control_plane": tenant.kubernetes_version},
            pulumi.ResourceOptions(parent=self),
        )
        self.control_plane = control_plane = TenantControlPlane(
            tenant.name,
            TenantControlPlaneArgs(
                tenant=tenant,
                management_provider=platform.management_provider,
                management_kubeconfig=platform.management_kubeconfig,
                worker_networks=platform.worker_networks(tenant.worker_cidrs),
                operator_cidrs=stack.management.operator_cidrs,
                shared_datastore=platform.shared_datastore,
                depends_on=[*platform.kamaji_ready, self.version],
                deleted_with=platform.management_cluster,
                images_ready=platform.images_ready,
            ),
            _formerly_top_level(self),
        )
        access = TenantAccess(
            name=tenant.name,
            namespace=control_plane.namespace,
            kubernetes_version=tenant.kubernetes_version,
            endpoint=control_plane.endpoint,
            ca_certificate=control_plane.ca_certificate,
            discovery_hash=control_plane.discovery_hash,
            operator_kubeconfig=control_plane.operator_kubeconfig,
            management_kubeconfig=platform.management_kubeconfig,
            control_plane=control_plane.tcp,
            workers=len(tenant.workers),
        )
        self.workers = self._workers(tenant, platform, access, GpuCardsArgs(
            stack.gpu_mode, control_plane.provider, former_parents=hami.former_card_parents(tenant.name, self)))
        # Workers without GPUs get the system label, which a kubelet cannot set on itself and the policy refuses to
        # every token but the program's, before Calico and HAMi place their controllers by it
        # (components.tenant.spec.SYSTEM_NODE_LABEL).
        policy, binding = tenant_spec.node_label_policy()
        inside = pulumi.ResourceOptions(parent=self, provider=control_plane.provider, deleted_with=control_plane.tcp)
        label_policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{tenant.name}-node-label-policy", metadata=policy["metadata"], spec=policy["spec"], opts=inside)
        self.label_policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{tenant.name}-node-label-policy-binding", metadata=binding["metadata"], spec=binding["spec"],
            opts=pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(depends_on=[label_policy])))
        system_nodes = tenant_spec.system_node_selector(tenant)
        self.system_labels = [
            k8s.core.v1.NodePatch(
                f"{node.access.node_name}-system-label",
                # The join id: a rejoined worker is a fresh Node without the label, and an unchanged patch would
                # never be sent again.
                metadata={"name": node.access.node_name, "labels": dict(system_nodes),
                          "annotations": {JOIN_ANNOTATION: node.registered.id}},
                opts=pulumi.ResourceOptions(parent=self, provider=control_plane.provider,
                                            deleted_with=control_plane.tcp, depends_on=[node.registered]),
            )
            for worker, node in zip(tenant.workers, self.workers, strict=True)
            if system_nodes and not worker.gpus
        ]
        cni = TenantCni(
            tenant.name,
            TenantCniArgs(
                tenant=tenant,
                tenant_provider=control_plane.provider,
                endpoint=control_plane.endpoint,
                depends_on=[*(node.registered for node in self.workers), *self.system_labels, self.label_policy],
                deleted_with=control_plane.tcp,
            ),
            _formerly_top_level(self),
        )
        self.gpus = TenantGpus(
            tenant.name,
            TenantGpusArgs(
                tenant=tenant,
                gpu_mode=stack.gpu_mode,
                smoke_test=stack.smoke_test,
                versions=stack.versions,
                tenant_provider=control_plane.provider,
                operator_kubeconfig=control_plane.operator_kubeconfig,
                control_plane=control_plane.tcp,
                nodes=[GpuNode(worker=worker, access=node.access, registered=node.registered, ready=node.ready,
                               cards=node.cards)
                       for worker, node in zip(tenant.workers, self.workers, strict=True)],
                cni=cni.releases,
                runtime_class_name=stack.nvidia.runtime_class_name if stack.nvidia else None,
            ),
            _formerly_top_level(self, hami.FORMER_TYPE),
        )
        self.summary = {
            "namespace": control_plane.namespace,
            "controlPlane": control_plane.tenant_name,
            "endpoint": control_plane.endpoint,
            "discoveryHash": control_plane.discovery_hash,
            "dataStore": control_plane.datastore,
            # Who may open a connection to the tenant's API and Konnectivity server (loadBalancerSourceRanges).
            "sourceRanges": control_plane.source_ranges,
            "nodes": self.gpus.node_names,
            # The kubelet version each Node reports (status.nodeInfo.kubeletVersion), read when it joined or was
            # last upgraded.
            "nodeVersions": pulumi.Output.all(*(node.ready.reported for node in self.workers)).apply(  # type: ignore
                lambda versions: {node.access.node_name: version
                                  for node, version in zip(self.workers, versions, strict=True)}),
            "gpuCapacity": self.gpus.gpu_capacity,
            "smokeTest": self.gpus.smoke_test,
        }
        self.admin_kubeconfig = control_plane.admin_kubeconfig
        self.user_kubeconfig = control_plane.user_kubeconfig
        self.register_outputs({**self.summary, "adminKubeconfig": self.admin_kubeconfig,
                               "userKubeconfig": self.user_kubeconfig})

    def _workers(self, tenant: config.Tenant, platform: Platform, access: TenantAccess,
                 cards: GpuCardsArgs) -> list[WorkerNode]:
        """A WorkerNode per worker, each with its cards. One at a time: a worker is drained for an upgrade only after
        kube-proxy follows the control plane and the worker before it is back in service, its cards advertised
        (docs/operations.md "Upgrading a tenant")."""
        stack = platform.config
        image = worker_image(tenant) if any(worker.ssh is None for worker in tenant.workers) else None
        workers: list[WorkerNode] = []
        for worker in tenant.workers:
            workers.append(WorkerNode(
                node_name(tenant.name, worker.name),
                WorkerNodeArgs(
                    tenant=access,
                    worker=worker,
                    image=image,
                    management_cluster=platform.management_cluster,
                    network_name=platform.network_name,
                    mirrors=worker_mirrors(stack.management, worker),
                    configure_containerd=stack.management.configure_containerd,
                    nvidia=NvidiaWorker(stack.nvidia.runtime_class_name if stack.nvidia else None)
                    if stack.gpu_mode == "nvidia" else None,
                    depends_on=[self.version],
                    drain_after=[*self.control_plane.kube_proxy, *([workers[-1].ready] if workers else [])],
                    cards=cards,
                ),
                _formerly_top_level(self),
            ))
        return workers
