"""TenantGpus: HAMi in one tenant, its GPUs (simulated, or real NVIDIA cards), and the in-stack proof that they work.

Each worker puts its own cards on its Node (`GpuCards`, children of its WorkerNode, once the Node has registered
and before its `<node>-ready`, so that an upgraded worker is back in service only with its cards advertised): in
mock mode the card annotation and the `nvidia.com/gpu` status capacity; in nvidia mode only the `gpu=on` label the
real device plugin selects. After the CNI, `TenantGpus`: Konnectivity agents ready -> HAMi release. The tenant API
server reaches HAMi's webhook only through the agents (clastix/kamaji
internal/resources/konnectivity/egress_selector_configuration_resource.go), which are ordinary pods that need the
CNI (internal/resources/konnectivity/agent.go: hostNetwork off by default). Then two bounded waits: HAMi's
webhook mutates a dry run of a GPU pod (its Service has no endpoint until the scheduler labels itself leader), and
in mock mode every GPU node advertises the plugin's resources above zero. Last, a fractional GPU pod whose state,
read back after `pulumi up` created it, must show HAMi's webhook, its scheduler and the device plugin at work,
or `pulumi up` fails naming the broken link. Everything here lives in the tenant cluster and goes with its
TenantControlPlane (`deleted_with`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

import config
from components import host_operations
from components.gpu.cards import NVIDIA_NODE_LABEL, REGISTER_ANNOTATION, gpu_capacity
from components.gpu.cards import register_annotation as card_annotation
from components.gpu.operations import GpuCapacityProvider, GpuPluginReadyProvider, HamiWebhookReadyProvider
from components.gpu.smoke import (
    PLUGIN_RESOURCES,
    SMOKE_POD_NAMESPACE,
    check_smoke_evidence,
    observed_pod,
    planned_evidence,
    sdk_field,
    smoke_namespace_metadata,
    smoke_pod_manifest,
)
from components.gpu.values import HAMI_CHART, hami_pod_policy, hami_token_policy, hami_values
from components.helm import helm_release
from components.images import PAUSE_IMAGE
from components.tenant.operations import KonnectivityReadyProvider
from components.tenant.spec import system_node_selector
from components.worker.access import NodeAccess
from naming import COMPONENT_PREFIX, JOIN_ANNOTATION

if TYPE_CHECKING:  # the worker builds its cards (components/worker/node.py imports this module)
    from components.worker.node import TenantAccess

# Helm waits for HAMi's Deployment, its certificate hook Jobs and (in mock mode) the plugin DaemonSet.
HELM_TIMEOUT_SECONDS = 600
# The pause image starts at once; what takes time is HAMi noticing the node (15 s) and the plugin (30 s).
SMOKE_POD_TIMEOUT = "5m"
# What the smoke pod proves: its worker's join, and the mode, the version its worker was last drained for (a drain
# evicts the bare pod, components/worker/operations.py _drained_pods) and HAMi's release revision. A change of
# either replaces the pod in the same `up`.
PROOF_ANNOTATION = "gpu-tenancy.io/proof"
SMOKE_REPLACE_ON_CHANGES = [f'metadata.annotations["{key}"]' for key in (JOIN_ANNOTATION, PROOF_ANNOTATION)]


def _unknown_in_preview() -> pulumi.Output[str] | None:
    """In a preview, a value that is not known (serialized as the engine's unknown sentinel); None in an update."""
    return pulumi.Output.from_input(pulumi.UNKNOWN) if pulumi.runtime.is_dry_run() else None


def _known_or(output: pulumi.Output[dict], fallback: dict) -> pulumi.Output[dict]:
    """`output` where its value is known, else `fallback` (a preview's plain-words stand-in)."""
    return output.apply(lambda value: fallback if pulumi.contains_unknowns(value) else value, run_with_unknowns=True)


@dataclass(frozen=True)
class GpuCardsArgs:
    """What every worker of a tenant needs for its cards (WorkerNodeArgs.cards)."""

    gpu_mode: str  # "mock" | "nvidia"
    tenant_provider: k8s.Provider
    # Where the cards were until each worker held its own: under TenantGpus (`former_card_parents`).
    former_parents: Sequence[pulumi.Input[str]]


def former_card_parents(tenant_name: str, tenant: pulumi.Resource) -> list[pulumi.Output[str]]:
    """The URNs of this tenant's TenantGpus, the cards' parent until commit e08431f, under its Tenant and (before
    commit a7c63e6's Tenant existed) at the top with FORMER_TYPE: the cards' aliases find them there (pulumi/pulumi
    step_generator.go getOldResource), so moving them under their worker changes nothing in a running stack."""
    return [pulumi.create_urn(tenant_name, GPUS_TYPE, parent=tenant), pulumi.create_urn(tenant_name, FORMER_TYPE)]


class GpuCards:
    """One worker's cards, children of its WorkerNode, once its Node has registered (`resources`), and what its Node
    shows when they are advertised (`expected`, what `<node>-ready` waits for after an upgrade). Not a component: a
    running stack's preview would list a new one as a create."""

    resources: list[pulumi.Resource]
    expected: pulumi.Input[dict]  # {"mode": "mock", "gpu": <count>, "join": <registration id>} or {"mode": "nvidia"}

    def __init__(self, worker: pulumi.Resource, node_name: str, cards: Sequence[config.GpuCard],
                 registered: pulumi.Resource, tenant: TenantAccess, args: GpuCardsArgs) -> None:
        moved = [pulumi.Alias(parent=parent) for parent in args.former_parents]
        after_registration = pulumi.ResourceOptions(parent=worker, deleted_with=tenant.control_plane,
                                                    depends_on=[registered], aliases=moved)
        inside = pulumi.ResourceOptions.merge(after_registration, pulumi.ResourceOptions(
            provider=args.tenant_provider))
        if args.gpu_mode == "mock":
            self.resources = [
                k8s.core.v1.NodePatch(
                    f"{node_name}-gpu-register",
                    metadata={"name": node_name, "annotations": {REGISTER_ANNOTATION: card_annotation(cards),
                                                                 JOIN_ANNOTATION: registered.id}},
                    opts=inside,
                ),
                host_operations.resource(
                    GpuCapacityProvider(),
                    f"{node_name}-gpu-capacity",
                    {"kubeconfig": tenant.operator_kubeconfig, "management_kubeconfig": tenant.management_kubeconfig,
                     "control_plane_namespace": tenant.namespace, "control_plane_name": tenant.name,
                     "node_name": node_name, "capacity": gpu_capacity(cards),
                     # A rejoined worker is a fresh Node without the capacity: apply it again.
                     "registration": registered.id},
                    after_registration,
                ),
            ]
            self.expected = {"mode": "mock", "gpu": gpu_capacity(cards), "join": registered.id}
        else:
            # The join id as in mock mode: a rejoined worker is a fresh Node without the label, and without a
            # changed input the patch would be `same` and never sent again.
            self.resources = [k8s.core.v1.NodePatch(
                f"{node_name}-gpu-label",
                metadata={"name": node_name, "labels": dict(NVIDIA_NODE_LABEL),
                          "annotations": {JOIN_ANNOTATION: registered.id}},
                opts=inside,
            )]
            # HAMi's device plugin, which the label brings to the node, registers `nvidia.com/gpu` with the kubelet.
            self.expected = {"mode": "nvidia"}


@dataclass
class GpuNode:
    worker: config.Worker  # configured cards
    access: NodeAccess  # the worker (for its Node name)
    registered: pulumi.Resource  # WorkerNode.registered: the Node exists (its id changes on every rejoin)
    ready: pulumi.Resource  # WorkerNode.ready: back in service after an upgrade
    cards: GpuCards | None  # WorkerNode.cards (None for a worker without `gpus`)


@dataclass
class TenantGpusArgs:
    tenant: config.Tenant
    gpu_mode: str  # "mock" | "nvidia"
    smoke_test: config.SmokeTest
    versions: config.Versions
    tenant_provider: k8s.Provider
    operator_kubeconfig: pulumi.Input[str]  # super-admin kubeconfig (secret), for the host-side resources
    control_plane: pulumi.Resource  # everything here goes with it
    nodes: list[GpuNode]  # every worker, its cards advertised
    cni: list[pulumi.Resource]  # the tenant's CNI releases: the Konnectivity agents need them
    runtime_class_name: str | None = None  # nvidia mode only


GPUS_TYPE = f"{COMPONENT_PREFIX}:TenantGpus"
# The former type token ("Mock" went: the component also runs real NVIDIA cards). A running stack's URNs hold it,
# with no parent: components.tenant.tenant gives TenantGpus the alias to both (see also
# components/management/cluster.py FORMER_TYPE).
FORMER_TYPE = f"{COMPONENT_PREFIX}:HamiMockGpu"


class TenantGpus(pulumi.ComponentResource):
    """HAMi in one tenant and the GPUs it shares out: simulated cards (mock mode) or the real NVIDIA device plugin
    (nvidia mode), then the smoke-test pod that proves the path."""

    release: k8s.helm.v3.Release
    node_names: pulumi.Output[list[str]]
    # node -> nvidia.com/gpu this program advertises (mock); None in nvidia mode, where the device plugin decides.
    gpu_capacity: pulumi.Output[dict[str, int]] | None
    smoke_test: pulumi.Output[dict] | None  # evidence: pod, node, schedulerName, devicesAllocated, node resources

    def __init__(self, name: str, args: TenantGpusArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        """HAMi, its waits and the smoke test, after the tenant's CNI, on the nodes whose workers advertised their
        cards (GpuCards)."""
        super().__init__(GPUS_TYPE, name, None, opts)
        nodes = args.nodes
        if not nodes:
            raise ValueError(f"tenant {args.tenant.name}: TenantGpus needs at least one joined worker node")
        tenant = args.tenant.name
        mock = args.gpu_mode == "mock"
        inside = pulumi.ResourceOptions(parent=self, provider=args.tenant_provider, deleted_with=args.control_plane)
        host_side = pulumi.ResourceOptions(parent=self, deleted_with=args.control_plane)
        node_resources = [resource for node in nodes if node.cards is not None for resource in node.cards.resources]
        registrations = [node.registered for node in nodes]

        # The webhook is reached through the tunnel: wait for its agents before installing HAMi.
        tunnel = host_operations.resource(
            KonnectivityReadyProvider(),
            f"{tenant}-konnectivity-ready",
            {"kubeconfig": args.operator_kubeconfig, "nodes": len(nodes),
             "registrations": [node.registered.id for node in nodes]},
            pulumi.ResourceOptions.merge(host_side, pulumi.ResourceOptions(
                depends_on=[*registrations, *args.cni])),
        )

        # Before HAMi's pods get their tokens, and before GPU capacity can be used: what those tokens may do, and
        # that a GPU pod goes through HAMi (components/gpu/values.py).
        bindings = []
        for name, (policy, binding) in (("token", hami_token_policy()), ("pod", hami_pod_policy())):
            created = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                f"{tenant}-hami-{name}-policy", metadata=policy["metadata"], spec=policy["spec"], opts=inside)
            bindings.append(k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                f"{tenant}-hami-{name}-policy-binding", metadata=binding["metadata"], spec=binding["spec"],
                opts=pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(depends_on=[created]))))
        self.release = helm_release(
            f"{tenant}-hami",
            HAMI_CHART,
            values=hami_values(args.gpu_mode, args.tenant.kubernetes_version, args.versions,  # type: ignore[arg-type]
                               args.runtime_class_name, args.tenant.scheduling.node_policy,
                               args.tenant.scheduling.gpu_policy, system_node_selector(args.tenant)),
            timeout=HELM_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(depends_on=[tunnel, *bindings])),
        )

        self.node_names = pulumi.Output.all(*(node.registered.id for node in nodes)).apply(
            lambda _: [node.access.node_name for node in nodes]
        )
        self.gpu_capacity = None
        if mock:
            capacities = {node.access.node_name: gpu_capacity(node.worker.gpus) for node in nodes}
            self.gpu_capacity = self.node_names.apply(lambda _: dict(capacities))

        # Nothing a webhook must admit is created before it answers; it runs again after an upgrade (a new
        # revision) or a rejoin (a new registration). Its probe goes to the proof's namespace, there with or without
        # the smoke test: NamespaceLifecycle refuses a pod in a missing namespace before any webhook sees it
        # (k8s.io/apiserver pkg/admission/plugin/namespace/lifecycle/admission.go Admit, kubernetes
        # pkg/kubeapiserver/options/plugins.go AllOrderedPlugins).
        namespace = k8s.core.v1.Namespace(f"{tenant}-gpu-smoke-namespace", metadata=smoke_namespace_metadata(),
                                          opts=inside)
        revision = self.release.status.apply(lambda status: dict.get(status or {}, "revision"))
        registration_ids = [node.registered.id for node in nodes]
        webhook = host_operations.resource(
            HamiWebhookReadyProvider(),
            f"{tenant}-hami-webhook-ready",
            {"kubeconfig": args.operator_kubeconfig, "namespace": SMOKE_POD_NAMESPACE, "image": PAUSE_IMAGE,
             "revision": revision, "registrations": registration_ids},
            pulumi.ResourceOptions.merge(host_side, pulumi.ResourceOptions(depends_on=[self.release, namespace])),
        )
        waits: list[pulumi.Resource] = [webhook]
        if mock:
            for node in nodes:
                if not node.worker.gpus:
                    continue
                waits.append(host_operations.resource(
                    GpuPluginReadyProvider(),
                    f"{node.access.node_name}-gpu-plugin-ready",
                    {"kubeconfig": args.operator_kubeconfig, "node_name": node.access.node_name,
                     "resources": list(PLUGIN_RESOURCES), "registration": node.registered.id, "revision": revision},
                    pulumi.ResourceOptions.merge(host_side, pulumi.ResourceOptions(
                        depends_on=[self.release, *node_resources])),
                ))

        self.smoke_test = None
        if args.smoke_test.enabled:
            self.smoke_test = self._smoke_test(tenant, args, nodes, inside,
                                               [self.release, namespace, *node_resources, *waits], revision)

        self.register_outputs({
            "release": self.release.name,
            "node_names": self.node_names,
            "gpu_capacity": self.gpu_capacity,
            "smoke_test": self.smoke_test,
        })

    def _smoke_test(self, tenant: str, args: TenantGpusArgs, nodes: list[GpuNode], inside: pulumi.ResourceOptions,
                    depends_on: list[pulumi.Resource], revision: pulumi.Output[Any]) -> pulumi.Output[dict]:
        worker = args.smoke_test.worker_in(args.tenant)
        # Validation refuses a smoke test that fits on no worker.
        node = next(node for node in nodes if node.worker is worker)
        manifest = smoke_pod_manifest(args.smoke_test, PAUSE_IMAGE, node.access.node_name)
        proof = revision.apply(lambda number: f"gpuMode={args.gpu_mode} "
                               f"kubernetesVersion={args.tenant.kubernetes_version} hamiRevision={number}")
        metadata = {**manifest["metadata"], "annotations": {JOIN_ANNOTATION: node.registered.id,
                                                            PROOF_ANNOTATION: proof}}
        pod = k8s.core.v1.Pod(
            f"{tenant}-gpu-smoke-test",
            metadata=metadata,
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(
                # Its worker uncordoned after an upgrade: the pod is pinned there.
                depends_on=[*depends_on, node.ready],
                # The pod has a fixed name and an immutable spec: a changed request means delete, then create.
                delete_before_replace=True,
                # A rejoin or a drain dropped the pod: prove again. Bracketed: the engine's property-path grammar
                # splits a bare dotted key (properties_path.go).
                replace_on_changes=SMOKE_REPLACE_ON_CHANGES,
                custom_timeouts=pulumi.CustomTimeouts(create=SMOKE_POD_TIMEOUT),
            )),
        )
        # The Node the pod ran on: the mock device plugin's resources are in its allocatable. Read in a preview too
        # (a read not registered again shows as `discard`, pulumi step.go DeleteStep.Op): on a running stack the
        # unchanged pod's nodeName is known and the preview judges what the update will judge. A pod still to be
        # created has none: the id is unknown and the engine skips the read (step.go ReadStep.Apply).
        node = k8s.core.v1.Node.get(
            f"{tenant}-gpu-smoke-node",
            pod.spec.apply(lambda spec: sdk_field(spec, "nodeName", "node_name") or _unknown_in_preview()),
            opts=pulumi.ResourceOptions(parent=self, provider=args.tenant_provider),
        )
        evidence = pulumi.Output.all(pod.metadata, pod.spec, node.status, pod.urn).apply(
            lambda parts: check_smoke_evidence(observed_pod(parts[0], parts[1]), tenant, resource=parts[3],
                                               node_status=parts[2], mock=args.gpu_mode == "mock")
        )
        if not pulumi.runtime.is_dry_run():
            return evidence
        # A preview without a scheduled pod to judge says what the update will prove instead.
        return _known_or(evidence, planned_evidence(args.smoke_test))

