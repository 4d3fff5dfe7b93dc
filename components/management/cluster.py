"""The management cluster: a kind cluster this stack creates, or an existing cluster it adopts.

Kind mode: one `pulumi-command` Command runs components/management/scripts/kind-create.sh, which creates the cluster
(or reuses one that carries this stack's marker label, and refuses any other), waits until its node is Ready,
and prints the kind network's address ranges and the kubeconfig, so a replaced cluster always comes with a
fresh kubeconfig and the subnet comes from the same Docker the cluster runs on. kind writes its own
kubeconfig to a private file (the operator's ~/.kube/config and current context are left alone). The kind
config travels on stdin (`kind create cluster --config -`) and is also the replacement trigger: changing the
cluster name or node image shows in `pulumi preview` and replaces the cluster, and everything inside it with it.
The component and its children have fixed names (COMPONENT_NAME), so a new cluster name is a replacement of the
same Command, deleted first: the old cluster and its MetalLB, which announces the same tenant addresses from the
same `kind` network, are gone before the new one starts.

Adopt mode (`kubeconfig` given): only a Provider for that cluster. Nothing is run on the host and nothing in
the cluster is created or deleted by this component; later layers delete only the objects they created.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import yaml

from components import kube, shell
from naming import COMPONENT_PREFIX, KIND_NETWORK

# Pin kind's node provider: the subnet comes from the *docker* network (kind would otherwise pick podman when
# docker is missing).
KIND_ENVIRONMENT = {"KIND_EXPERIMENTAL_PROVIDER": "docker"}
# How long kind-create.sh waits for the control-plane node to become Ready.
KIND_WAIT_SECONDS = 300
# Inputs of the kind Command that a running stack keeps as first stored: a script edit or a new wait must not
# re-run create (see _create_kind_cluster), and a stack made before the checkout label, or a moved checkout,
# keeps the cluster it has (an ignored input absent from the state is dropped: pulumi sdk/go/common/resource/
# properties_path.go PropertyPath.reset).
IGNORED_KIND_INPUTS = ["create", "delete", "stdin", f"environment.{shell.KIND_WAIT_SECONDS_ENV}",
                       f"environment.{shell.KIND_CHECKOUT_ENV}",
                       *(f"environment.{key}" for key in KIND_ENVIRONMENT)]
# The node labels that say which stack, and which checkout of the project, created a kind cluster (checked before
# reusing or deleting one): two clones with a stack of the same name each keep their own lab.
STACK_LABEL = "gpu-tenancy.io/stack"
CHECKOUT_LABEL = "gpu-tenancy.io/checkout"


def checkout_id(directory: str | None = None) -> str:
    """This checkout's value of CHECKOUT_LABEL: a hash of the project directory's path, as the Makefile names the
    passphrase file (Pulumi runs the program in the project directory)."""
    return hashlib.sha256(os.path.realpath(directory or os.getcwd()).encode()).hexdigest()[:12]


def stack_marker(project: str, stack: str) -> str:
    """The value of STACK_LABEL for a stack: a Kubernetes label value (63 characters of [A-Za-z0-9._-]). A name
    that does not fit keeps its start and gets a hash of the whole name, so two long stack names that differ only
    at the end never share a marker (and so never reuse or delete each other's cluster)."""
    full = f"{project}.{stack}"
    value = re.sub(r"[^A-Za-z0-9._-]", "-", full).strip("-._")
    if len(value) > 63 or value != full:
        digest = hashlib.sha256(full.encode()).hexdigest()[:10]
        value = f"{value[:52].rstrip('-._')}-{digest}"
    return value or "gpu-tenancy"


def kind_config(cluster_name: str, node_image: str, marker: str, checkout: str | None = None) -> dict[str, Any]:
    """kind's Cluster config: one control-plane node labelled with this stack (and checkout), API server on
    loopback only."""
    labels = {STACK_LABEL: marker, **({CHECKOUT_LABEL: checkout} if checkout else {})}
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": cluster_name,
        # kind's default, spelled out: the management API is not exposed to the LAN.
        "networking": {"apiServerAddress": "127.0.0.1"},
        "nodes": [{"role": "control-plane", "image": node_image, "labels": labels}],
    }


def kind_config_yaml(cluster_name: str, node_image: str, marker: str, checkout: str | None = None) -> str:
    return yaml.safe_dump(kind_config(cluster_name, node_image, marker, checkout), sort_keys=False)


@dataclass(frozen=True)
class KindOutput:
    """What kind-create.sh prints: the kind network's IPAM entries (line 1), then the kubeconfig."""

    subnets: list[str]
    kubeconfig: str


def parse_create_output(stdout: str) -> KindOutput:
    first, _, kubeconfig = stdout.partition("\n")
    try:
        entries = json.loads(first)
    except ValueError:
        raise ValueError("kind-create.sh printed no IPAM line for the kind network (expected JSON first)") from None
    subnets = [entry.get("Subnet") for entry in entries or [] if isinstance(entry, dict)]
    if not kubeconfig.strip():
        raise ValueError("kind-create.sh printed no kubeconfig")
    return KindOutput(subnets=[s for s in subnets if s], kubeconfig=kubeconfig)


class KindNetworkError(pulumi.RunError, ValueError):
    """The kind network cannot serve the stack: one line, no traceback (the language host prints a RunError so,
    also one raised in an apply: pulumi runtime/stack.py re-raises the RPC manager's unhandled exception)."""


def ipv4_subnet(subnets: Sequence[str | None], network: str = KIND_NETWORK) -> str:
    """The first IPv4 subnet among a docker network's IPAM entries (kind lists its IPv6 range first)."""
    for subnet in subnets:
        if not subnet:
            continue
        try:
            parsed = ipaddress.ip_network(subnet, strict=False)
        except ValueError:
            continue
        if parsed.version == 4:
            return str(parsed)
    found = ", ".join(s for s in subnets if s) or "none"
    raise KindNetworkError(
        f"docker network {network!r} has no IPv4 subnet (found: {found}); MetalLB needs one for the "
        f"tenant API server addresses. Run `make down` in every checkout whose lab uses it, then "
        f"`docker network rm {network}`, and `make up` again so kind recreates the network with an IPv4 range."
    )


def clear_of_tenants(subnet: str, tenant_ranges: dict[str, str]) -> str:
    """The kind subnet, once no tenant range overlaps it: Docker picks it only when kind creates the network."""
    for key, cidr in tenant_ranges.items():
        if ipaddress.ip_network(subnet).overlaps(ipaddress.ip_network(cidr)):
            raise KindNetworkError(f"{key} = {cidr!r} overlaps the `kind` network {subnet}: the tenant's nodes "
                                   f"would take its addresses (the management node's, MetalLB's) for their own; set "
                                   f"{key} to a range outside it")
    return subnet


@dataclass(frozen=True)
class KubeconfigCluster:
    """The cluster a kubeconfig's current context points at."""

    name: str
    server: str


def current_cluster(kubeconfig: str) -> KubeconfigCluster:
    """Name and API server of the current context's cluster; errors never echo the (secret) document."""
    try:
        context = kube.current_context(kubeconfig)
        return KubeconfigCluster(name=context.cluster_name, server=context.server)
    except kube.KubeconfigError as error:
        raise ValueError(f"management.kubeconfig {error.problem}; fix the file and store it again") from None


def worker_networks(kind_subnet: str | None, worker_cidrs: Sequence[str]) -> list[str]:
    """IPv4 networks tenant API servers accept connections from: the kind subnet (if any), then `worker_cidrs`."""
    networks: list[str] = []
    for entry in ([kind_subnet] if kind_subnet is not None else []) + list(worker_cidrs):
        network = ipaddress.ip_network(entry, strict=False)
        if network.version != 4:
            raise ValueError(f"management.workerCidrs: {entry!r} is not an IPv4 network")
        if str(network) not in networks:
            networks.append(str(network))
    if not networks:
        raise ValueError(
            "management.workerCidrs is empty: with management.kubeconfig, list the IPv4 networks your GPU "
            "servers reach tenant API servers from, there or in tenants[].workerCidrs (tenant control planes "
            "accept connections only from those)"
        )
    return networks


@dataclass
class ManagementClusterArgs:
    cluster_name: str
    node_image: str
    # An existing cluster to adopt instead of creating a kind cluster (secret).
    kubeconfig: pulumi.Input[str] | None = None
    # Extra IPv4 networks workers reach tenant API servers from (beside the kind network in kind mode).
    worker_cidrs: list[str] = field(default_factory=list)
    # Every tenant's serviceCidr and podCidr by config key: the kind network must stay clear of them.
    tenant_ranges: dict[str, str] = field(default_factory=dict)


# The type token before the adopt mode made "Kind" wrong. Type tokens are part of every URN below this component, so
# a running stack finds its resources under the old one (pulumi/pulumi step_generator.go getOldResource; the
# children follow their parent's alias, inheritedChildAlias): renamed in place, nothing replaced.
FORMER_TYPE = f"{COMPONENT_PREFIX}:KindManagementCluster"
# The component's name, the same whatever the cluster is called. A component named after the cluster gave every
# resource below it a new URN when `management.clusterName` changed: the engine then creates the new kind cluster
# and deletes the old one only with the other deletes at the end of the update (delete_before_replace acts on a
# replacement of one URN only, pulumi/pulumi pkg/resource/deploy/step_generator.go), so for a whole `up` two
# clusters' MetalLB speakers answered ARP for the same tenant addresses.
COMPONENT_NAME = "management"


def former_names(cluster_name: str) -> list[pulumi.Alias]:
    """Where a running stack keeps this component: named after its cluster, under this type or the former one
    (children follow, with their names' prefix renamed: step_generator.go inheritedChildAlias)."""
    return [pulumi.Alias(type_=FORMER_TYPE), pulumi.Alias(name=cluster_name),
            pulumi.Alias(name=cluster_name, type_=FORMER_TYPE)]


class ManagementCluster(pulumi.ComponentResource):
    """The cluster that hosts Kamaji: a kind cluster created here, or an adopted one (`args.kubeconfig`).

    Exposes its kubeconfig (secret), a Provider, and the networks tenant API servers accept workers from.
    """

    cluster_name: str
    network_name: str
    adopted: bool
    # The kind cluster command (None for an adopted cluster): objects in the cluster are deleted with it.
    cluster: command.local.Command | None
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider
    # IPv4 subnet of the docker `kind` network; None for an adopted cluster.
    kind_subnet: pulumi.Output[str] | None
    worker_networks: pulumi.Output[list[str]]

    def __init__(self, name: str, args: ManagementClusterArgs, opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=former_names(args.cluster_name)))
        super().__init__(f"{COMPONENT_PREFIX}:ManagementCluster", name, None, opts)
        self.network_name = KIND_NETWORK
        self.adopted = args.kubeconfig is not None
        self.cluster = None
        self._worker_cidrs = list(args.worker_cidrs)
        if args.kubeconfig is not None:
            self._adopt(name, args, args.kubeconfig)
        else:
            self._create_kind_cluster(name, args)
        self.register_outputs(
            {
                "clusterName": self.cluster_name,
                "networkName": self.network_name,
                "adopted": self.adopted,
                "kubeconfig": self.kubeconfig,
                "kindSubnet": self.kind_subnet,
                "workerNetworks": self.worker_networks,
            }
        )

    def _adopt(self, name: str, args: ManagementClusterArgs, kubeconfig: pulumi.Input[str]) -> None:
        if isinstance(kubeconfig, str):
            # The config value is read now: a broken kubeconfig fails before any resource exists.
            cluster = current_cluster(kubeconfig)
            self.cluster_name = cluster.name
            identifier: pulumi.Input[str] = cluster.server
        else:
            self.cluster_name = args.cluster_name
            identifier = pulumi.Output.from_input(kubeconfig).apply(lambda text: current_cluster(text).server)
        self.kubeconfig = pulumi.Output.secret(kubeconfig)
        self.kind_subnet = None
        # Validation makes sure every tenant has some network when this one is empty.
        self.worker_networks = pulumi.Output.from_input(
            worker_networks(None, args.worker_cidrs) if args.worker_cidrs else [])
        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=self.kubeconfig,
            # Not our cluster: an unreachable API (VPN down, expired credentials) must fail `pulumi destroy`
            # loudly, not drop cert-manager, Kamaji and the tenants from the state while they keep running.
            # Set explicitly, so PULUMI_K8S_DELETE_UNREACHABLE cannot flip it.
            delete_unreachable=False,
            # Creating an object that already exists fails instead of taking it over (and deleting it on destroy).
            upsert_existing_objects=False,
            # Only a different API server means a different cluster: a rotated token, CA or proxy setting in the
            # kubeconfig updates the provider instead of replacing everything in the cluster (pulumi-kubernetes#4019).
            cluster_identifier=identifier,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _create_kind_cluster(self, name: str, args: ManagementClusterArgs) -> None:
        self.cluster_name = args.cluster_name
        marker = stack_marker(pulumi.get_project(), pulumi.get_stack())
        config = kind_config_yaml(args.cluster_name, args.node_image, marker)
        checkout = checkout_id()
        environment = {
            **KIND_ENVIRONMENT,
            shell.KIND_CLUSTER_NAME_ENV: args.cluster_name,
            shell.KIND_STACK_MARKER_ENV: marker,
            shell.KIND_CHECKOUT_ENV: checkout,
            shell.KIND_WAIT_SECONDS_ENV: str(KIND_WAIT_SECONDS),
        }
        self.cluster = command.local.Command(
            f"{name}-kind",
            create=shell.script_text(shell.KIND_CREATE),
            delete=shell.script_text(shell.KIND_DELETE),
            stdin=kind_config_yaml(args.cluster_name, args.node_image, marker, checkout),
            environment=environment,
            interpreter=["/bin/bash", "-c"],
            # Only a config change replaces the cluster (the checkout label aside: see IGNORED_KIND_INPUTS).
            triggers=[config],
            # stdout holds the admin kubeconfig: never logged, and not handed back to the delete command as
            # PULUMI_COMMAND_STDOUT. kind's progress goes to stderr, which carries no credential.
            logging=command.local.Logging.STDERR,
            add_previous_output_in_env=False,
            opts=pulumi.ResourceOptions(
                parent=self,
                additional_secret_outputs=["stdout"],
                # The old cluster must be gone before the new one is created: the same name (a node image
                # change), or the same tenant addresses on the same network (a cluster name change).
                delete_before_replace=True,
                # Any other input change is an update whose stdout is unknown in preview (pulumi-go-provider
                # infer/resource.go ensureDefaultComputed), so the Provider built from it would be shown replaced
                # with everything on it (pulumi-kubernetes provider.go DiffConfig). The scripts and the wait are
                # kept as stored until a replacement, which runs and stores the current ones (pulumi
                # step_generator.go); the name and marker stay live: they change only with `triggers`.
                ignore_changes=IGNORED_KIND_INPUTS,
            ),
        )
        created = self.cluster.stdout.apply(parse_create_output)
        self.kubeconfig = pulumi.Output.secret(created.apply(lambda c: c.kubeconfig))
        # Not a secret: the network's address ranges.
        ranges = dict(args.tenant_ranges)
        self.kind_subnet = pulumi.Output.unsecret(
            created.apply(lambda c: clear_of_tenants(ipv4_subnet(c.subnets), ranges)))
        self.provider = k8s.Provider(f"{name}-provider", kubeconfig=self.kubeconfig,
                                     opts=pulumi.ResourceOptions(parent=self))
        worker_cidrs = list(args.worker_cidrs)
        self.worker_networks = self.kind_subnet.apply(lambda subnet: worker_networks(subnet, worker_cidrs))

    def tenant_worker_networks(self, tenant_cidrs: Sequence[str]) -> pulumi.Output[list[str]]:
        """Where one tenant's workers connect from: the kind network (lab) and `management.workerCidrs` (every
        tenant admits those), plus the tenant's own `workerCidrs` (only it admits those). Raises when that leaves
        no network at all (an adopted cluster without any workerCidrs)."""
        cidrs = [*self._worker_cidrs, *tenant_cidrs]
        if self.kind_subnet is None:
            return pulumi.Output.from_input(worker_networks(None, cidrs))
        return self.kind_subnet.apply(lambda subnet: worker_networks(subnet, cidrs))
