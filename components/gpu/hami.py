"""TenantGpus: HAMi in one tenant, its GPUs (simulated, or real NVIDIA cards), and the in-stack proof that they work.

Built in two steps. First, per node, in each worker's own chain (`node_cards`, called once the worker's Node has
registered and before its `<node>-ready`, so that an upgraded worker is back in service only with its cards
advertised): in mock mode the card annotation and the `nvidia.com/gpu` status capacity; in nvidia mode only the
`gpu=on` label the real device plugin selects. Then, after the CNI (`install`): Konnectivity agents ready -> HAMi
release. The tenant API server reaches HAMi's webhook only through the agents (clastix/kamaji
internal/resources/konnectivity/egress_selector_configuration_resource.go), which are ordinary pods that need the
CNI (internal/resources/konnectivity/agent.go: hostNetwork off by default). Then two bounded waits: HAMi's
webhook mutates a dry run of a GPU pod (its Service has no endpoint until the scheduler labels itself leader), and
in mock mode every GPU node advertises the plugin's resources above zero. Last, a fractional GPU pod whose state,
read back after `pulumi up` created it, must show HAMi's webhook, its scheduler and the device plugin at work,
or `pulumi up` fails naming the broken link. Everything here lives in the tenant cluster and goes with its
TenantControlPlane (`deleted_with`).
"""

from __future__ import annotations

from dataclasses import dataclass

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
from components.gpu.values import HAMI_CHART, hami_token_policy, hami_values
from components.helm import helm_release
from components.images import PAUSE_IMAGE
from components.naming import COMPONENT_PREFIX, JOIN_ANNOTATION
from components.tenant.operations import KonnectivityReadyProvider
from components.tenant.spec import system_node_selector
from components.worker.access import NodeAccess
from components.worker.node import AdvertisedCards

# Helm waits for HAMi's Deployment, its certificate hook Jobs and (in mock mode) the plugin DaemonSet.
HELM_TIMEOUT_SECONDS = 600
# The pause image starts at once; what takes time is HAMi noticing the node (15 s) and the plugin (30 s).
SMOKE_POD_TIMEOUT = "5m"
# The annotation the smoke pod carries: which registrations of its tenant's nodes it proves.
SMOKE_REPLACE_ON_CHANGES = [f'metadata.annotations["{JOIN_ANNOTATION}"]']


async def _resolved(value):
    return value


def _unknown_in_preview() -> pulumi.Output[str] | None:
    """In a preview, a value that is not known (serialized as the engine's unknown sentinel); None in an update."""
    if not pulumi.runtime.is_dry_run():
        return None
    return pulumi.Output(set(), _resolved(None), _resolved(False))


def _known_or(output: pulumi.Output[dict], fallback: dict) -> pulumi.Output[dict]:
    """`output` where its value is known, else `fallback` (a preview's plain-words stand-in)."""
    async def value():
        return await output.future() if await output.is_known() else fallback

    return pulumi.Output(output.resources(), value(), _resolved(True))


@dataclass
class GpuNode:
    worker: config.Worker  # configured cards
    access: NodeAccess  # the worker (for its Node name)
    registered: pulumi.Resource  # WorkerNode.registered: the Node exists (its id changes on every rejoin)


@dataclass
class TenantGpusArgs:
    tenant: config.Tenant
    gpu_mode: str  # "mock" | "nvidia"
    smoke_test: config.SmokeTest
    versions: config.Versions
    tenant_provider: k8s.Provider
    # super-admin kubeconfig (secret), for the host-side resources; the management side for dead-tenant checks.
    operator_kubeconfig: pulumi.Input[str]
    management_kubeconfig: pulumi.Input[str]
    control_plane_namespace: pulumi.Input[str]
    control_plane: pulumi.Resource  # everything here goes with it
    runtime_class_name: str | None = None  # nvidia mode only


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
        """The component only: the workers add their cards (`node_cards`), then `install` adds HAMi and the proof."""
        super().__init__(f"{COMPONENT_PREFIX}:TenantGpus", name, None, opts)
        self._args = args
        self._inside = pulumi.ResourceOptions(parent=self, provider=args.tenant_provider,
                                              deleted_with=args.control_plane)
        self._host_side = pulumi.ResourceOptions(parent=self, deleted_with=args.control_plane)
        self._node_resources: list[pulumi.Resource] = []

    def node_cards(self, node: GpuNode) -> AdvertisedCards | None:
        """The cards of one worker, once its Node object exists, and what its Node shows when they are advertised
        (what `<node>-ready` waits for after an upgrade); None for a worker without `gpus`."""
        args, cards = self._args, node.worker.gpus
        if not cards:
            return None
        node_name = node.access.node_name
        after_registration = pulumi.ResourceOptions.merge(self._inside, pulumi.ResourceOptions(
            depends_on=[node.registered]))
        resources: list[pulumi.Resource] = []
        if args.gpu_mode == "mock":
            resources.append(k8s.core.v1.NodePatch(
                f"{node_name}-gpu-register",
                metadata={
                    "name": node_name,
                    "annotations": {REGISTER_ANNOTATION: card_annotation(cards),
                                    JOIN_ANNOTATION: node.registered.id},
                },
                opts=after_registration,
            ))
            resources.append(host_operations.resource(
                GpuCapacityProvider(),
                f"{node_name}-gpu-capacity",
                {"kubeconfig": args.operator_kubeconfig, "management_kubeconfig": args.management_kubeconfig,
                 "control_plane_namespace": args.control_plane_namespace, "control_plane_name": args.tenant.name,
                 "node_name": node_name, "capacity": gpu_capacity(cards),
                 # A rejoined worker is a fresh Node without the capacity: apply it again.
                 "registration": node.registered.id},
                pulumi.ResourceOptions.merge(self._host_side, pulumi.ResourceOptions(depends_on=[node.registered])),
            ))
            expected: dict[str, pulumi.Input] = {"mode": "mock", "gpu": gpu_capacity(cards),
                                                 "join": node.registered.id}
        else:
            # The join id as in mock mode: a rejoined worker is a fresh Node without the label, and without a
            # changed input the patch would be `same` and never sent again (pulumi-kubernetes provider.go Diff
            # compares with the stored state, not the new Node).
            resources.append(k8s.core.v1.NodePatch(
                f"{node_name}-gpu-label",
                metadata={"name": node_name, "labels": dict(NVIDIA_NODE_LABEL),
                          "annotations": {JOIN_ANNOTATION: node.registered.id}},
                opts=after_registration,
            ))
            # HAMi's device plugin, which the label brings to the node, registers `nvidia.com/gpu` with the kubelet.
            expected = {"mode": "nvidia"}
        self._node_resources += resources
        return AdvertisedCards(resources=resources, expected=expected)

    def install(self, nodes: list[GpuNode], depends_on: list[pulumi.Resource]) -> None:
        """HAMi, its waits and the smoke test, after the tenant's CNI releases (`depends_on`); every node's cards
        were added by `node_cards` before."""
        args = self._args
        if not nodes:
            raise ValueError(f"tenant {args.tenant.name}: TenantGpus needs at least one joined worker node")
        tenant = args.tenant.name
        mock = args.gpu_mode == "mock"
        inside, host_side = self._inside, self._host_side
        node_resources = self._node_resources
        registrations = [node.registered for node in nodes]

        # The webhook is reached through the tunnel: wait for its agents before installing HAMi.
        tunnel = host_operations.resource(
            KonnectivityReadyProvider(),
            f"{tenant}-konnectivity-ready",
            {"kubeconfig": args.operator_kubeconfig, "nodes": len(nodes),
             "registrations": [node.registered.id for node in nodes]},
            pulumi.ResourceOptions.merge(host_side, pulumi.ResourceOptions(
                depends_on=[*registrations, *depends_on])),
        )

        # Before HAMi's pods get their tokens: what those tokens may do (components/gpu/values.py).
        policy, binding = hami_token_policy()
        token_policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{tenant}-hami-token-policy", metadata=policy["metadata"], spec=policy["spec"], opts=inside)
        token_binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{tenant}-hami-token-policy-binding", metadata=binding["metadata"], spec=binding["spec"],
            opts=pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(depends_on=[token_policy])))
        self.release = helm_release(
            f"{tenant}-hami",
            HAMI_CHART,
            values=hami_values(args.gpu_mode, args.tenant.kubernetes_version, args.versions,  # type: ignore[arg-type]
                               args.runtime_class_name, args.tenant.scheduling.node_policy,
                               args.tenant.scheduling.gpu_policy, system_node_selector(args.tenant)),
            timeout=HELM_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(depends_on=[tunnel, token_binding])),
        )

        self.node_names = pulumi.Output.all(*(node.registered.id for node in nodes)).apply(
            lambda _: [node.access.node_name for node in nodes]
        )
        self.gpu_capacity = None
        if mock:
            capacities = {node.access.node_name: gpu_capacity(node.worker.gpus) for node in nodes}
            self.gpu_capacity = self.node_names.apply(lambda _: dict(capacities))

        # Nothing a webhook must admit is created before it answers; it runs again after an upgrade (a new
        # revision) or a rejoin (a new registration).
        revision = self.release.status.apply(lambda status: dict.get(status or {}, "revision"))
        registration_ids = [node.registered.id for node in nodes]
        webhook = host_operations.resource(
            HamiWebhookReadyProvider(),
            f"{tenant}-hami-webhook-ready",
            {"kubeconfig": args.operator_kubeconfig, "namespace": SMOKE_POD_NAMESPACE, "image": PAUSE_IMAGE,
             "revision": revision, "registrations": registration_ids},
            pulumi.ResourceOptions.merge(host_side, pulumi.ResourceOptions(depends_on=[self.release])),
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
            self.smoke_test = self._smoke_test(tenant, args, nodes, inside, [self.release, *node_resources, *waits])

        self.register_outputs({
            "release": self.release.name,
            "node_names": self.node_names,
            "gpu_capacity": self.gpu_capacity,
            "smoke_test": self.smoke_test,
        })

    def _smoke_test(self, tenant: str, args: TenantGpusArgs, nodes: list[GpuNode], inside: pulumi.ResourceOptions,
                    depends_on: list[pulumi.Resource]) -> pulumi.Output[dict]:
        worker = args.smoke_test.worker_in(args.tenant)
        # Validation refuses a smoke test that fits on no worker.
        node = next(node for node in nodes if node.worker is worker)
        manifest = smoke_pod_manifest(args.smoke_test, PAUSE_IMAGE, node.access.node_name)
        metadata = {**manifest["metadata"], "annotations": {JOIN_ANNOTATION: node.registered.id}}
        # The proof's own namespace, outside every user quota (components/gpu/smoke.py).
        namespace = k8s.core.v1.Namespace(f"{tenant}-gpu-smoke-namespace", metadata=smoke_namespace_metadata(),
                                          opts=inside)
        pod = k8s.core.v1.Pod(
            f"{tenant}-gpu-smoke-test",
            metadata=metadata,
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(
                depends_on=[*depends_on, namespace],
                # The pod has a fixed name and an immutable spec: a changed request means delete, then create.
                delete_before_replace=True,
                # A rejoined worker dropped the pod with its old Node: prove again on the new one. Bracketed: the
                # engine's property-path grammar splits a bare dotted key (properties_path.go).
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

