"""The kind management cluster: one control-plane node, its kubeconfig, a Provider, and the kind network's subnet.

One `pulumi-command` Command creates (or adopts) the cluster and prints its
kubeconfig, so a replaced cluster always comes with a fresh kubeconfig. The
kind config travels on the command's stdin (`kind create cluster --config -`)
and is also its replacement trigger: changing the cluster name or node image
shows in `pulumi preview` and replaces the cluster (delete first, because the
new cluster has the same name), which also replaces everything inside it.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_docker as docker
import pulumi_kubernetes as k8s
import yaml

from components.naming import COMPONENT_PREFIX, KIND_NETWORK

# Pin kind's node provider: the subnet lookup below reads the *docker* network
# (kind would otherwise pick podman when docker is missing).
KIND_ENVIRONMENT = {"KIND_EXPERIMENTAL_PROVIDER": "docker"}
# `kind create cluster --wait`: return only once the control-plane node is Ready.
KIND_WAIT = "5m"


def kind_config(cluster_name: str, node_image: str) -> dict[str, Any]:
    """kind's Cluster config: one control-plane node, API server only on the loopback interface."""
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": cluster_name,
        # kind's default, spelled out: the management API is not exposed to the LAN.
        "networking": {"apiServerAddress": "127.0.0.1"},
        "nodes": [{"role": "control-plane", "image": node_image}],
    }


def kind_config_yaml(cluster_name: str, node_image: str) -> str:
    return yaml.safe_dump(kind_config(cluster_name, node_image), sort_keys=False)


def _if_cluster_exists(cluster_name: str) -> str:
    # Outside the `if`, so `set -e` stops on a failing `kind get clusters` (docker unreachable);
    # an empty list is not an error.
    return f'existing="$(kind get clusters)"\nif grep -qxF -- {shlex.quote(cluster_name)} <<<"$existing"; then'


def create_script(cluster_name: str) -> str:
    """Create the cluster from the kind config on stdin unless it exists; print only its kubeconfig on stdout."""
    name = shlex.quote(cluster_name)
    return f"""\
set -euo pipefail
{_if_cluster_exists(cluster_name)}
  printf 'kind cluster %s already exists: reusing it\\n' {name} >&2
else
  kind create cluster --name {name} --config - --wait {KIND_WAIT} >&2
fi
kind get kubeconfig --name {name}
"""


def delete_script(cluster_name: str) -> str:
    """Delete the cluster; a cluster that is already gone is not an error."""
    name = shlex.quote(cluster_name)
    return f"""\
set -euo pipefail
{_if_cluster_exists(cluster_name)}
  kind delete cluster --name {name} >&2
else
  printf 'kind cluster %s does not exist: nothing to delete\\n' {name} >&2
fi
"""


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
    raise ValueError(
        f"docker network {network!r} has no IPv4 subnet (found: {found}); MetalLB needs one for the "
        f"tenant API server addresses. Delete all kind clusters, run `docker network rm {network}`, "
        "and run `make up` again so kind recreates the network with an IPv4 range."
    )


@dataclass
class KindManagementClusterArgs:
    cluster_name: str
    node_image: str


class KindManagementCluster(pulumi.ComponentResource):
    """A kind cluster that hosts Kamaji; exposes its kubeconfig (secret), a Provider and the kind subnet."""

    cluster_name: str
    network_name: str
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider
    kind_subnet: pulumi.Output[str]

    def __init__(self, name: str, args: KindManagementClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{COMPONENT_PREFIX}:KindManagementCluster", name, None, opts)
        self.cluster_name = args.cluster_name
        self.network_name = KIND_NETWORK
        config = kind_config_yaml(args.cluster_name, args.node_image)

        cluster = command.local.Command(
            f"{name}-kind",
            create=create_script(args.cluster_name),
            delete=delete_script(args.cluster_name),
            stdin=config,
            environment=KIND_ENVIRONMENT,
            interpreter=["/bin/bash", "-c"],
            # Only a config change replaces the cluster; edits to the script text re-run the idempotent create.
            triggers=[config],
            # stdout is the admin kubeconfig: never logged, and not handed back to the delete
            # command as PULUMI_COMMAND_STDOUT.
            logging=command.local.Logging.NONE,
            add_previous_output_in_env=False,
            opts=pulumi.ResourceOptions(
                parent=self,
                additional_secret_outputs=["stdout", "stderr"],
                # Same name before and after: the old cluster must be gone before the new one is created.
                delete_before_replace=True,
            ),
        )
        self.kubeconfig = pulumi.Output.secret(cluster.stdout)

        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=self.kubeconfig,
            # `make down` after the cluster was deleted by hand drops its objects instead of hanging.
            delete_unreachable=True,
            opts=pulumi.ResourceOptions(parent=self),
        )

        # depends_on gates the lookup: kind creates the network together with its first cluster.
        network = docker.get_network_output(
            name=KIND_NETWORK,
            opts=pulumi.InvokeOutputOptions(parent=self, depends_on=[cluster]),
        )
        self.kind_subnet = network.apply(
            lambda result: ipv4_subnet([entry.subnet for entry in result.ipam_configs or []])
        )

        self.register_outputs(
            {
                "clusterName": self.cluster_name,
                "networkName": self.network_name,
                "kubeconfig": self.kubeconfig,
                "kindSubnet": self.kind_subnet,
            }
        )
