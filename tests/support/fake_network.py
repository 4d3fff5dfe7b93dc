"""Where a network probe's connection goes, derived from the fake platform's objects rather than from a table of
hoped-for outcomes: `make verify`'s isolation rows are judged against what the network would do.

The rules, each from the component that enforces it:
- a tenant pod's egress passes its own tenant's NetworkPolicies first (Calico, which every tenant runs, enforces
  them), then leaves its node masqueraded to the node's address (Calico `natOutgoing`);
- a LoadBalancer address: kube-proxy's firewall chain admits only `loadBalancerSourceRanges` and drops the rest
  (kubernetes pkg/proxy/iptables/proxier.go, "firewall filter based on each source range", unmatched traffic to
  KUBE-MARK-DROP); a node port gets no such filter ("For loadbalancers which direct traffic to service NodePort, the
  firewall rules will not apply"); a Service without a ready endpoint is rejected (refused), a node port that no
  Service has is refused by the node;
- the backend pod's ingress policy sees the original source when the pod runs on the node that received the packet
  (kube-network-policies queues at `srcnat - 5`, before kube-proxy's masquerade: pkg/dataplane/controller.go; Calico
  polices in FORWARD), and the receiving node's address when the packet crossed to another node (masqueraded);
- the management cluster enforces NetworkPolicy as its CNI does: Calico always; kind's kindnetd only while it
  reads its queue (kind v0.32.0 images/kindnetd/cmd/kindnetd/main.go FailOpen: true: the queue has the `bypass`
  flag, so packets pass unjudged when nobody reads it); "none" never;
- the management pod network is not routed from tenant workers (the packet leaves by the worker's default route
  and nobody answers) unless `routed_pod_network` says a route was added;
- a container node's mirror fence (components/worker/scripts/node-mirrors.sh: a mangle FORWARD chain that drops
  forwarded TCP to the kind network on the caches' ports) drops what its pods send there; a host-network pod's
  traffic is the node's own, not forwarded, so the fence does not see it;
- names do not resolve in a tenant pod: the probes that matter use addresses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.support import netpol

if TYPE_CHECKING:
    from tests.support.fake_platform import FakeCluster

Json = dict[str, Any]


def _dig(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def node_address(node: Json) -> str | None:
    for address in _dig(node, "status", "addresses") or []:
        if address.get("type") == "InternalIP":
            return address.get("address")
    return None


def _in(address: str, networks: Iterable[str]) -> bool:
    return any(ipaddress.ip_address(address) in ipaddress.ip_network(n, strict=False) for n in networks)


@dataclass
class FakeNetwork:
    management: FakeCluster
    tenants: dict[str, FakeCluster]
    # "calico" (enforces), "kindnetd" (enforces while `kindnetd_reading`, else fails open), "none".
    cni: str = "kindnetd"
    kindnetd_reading: bool = True
    # Other hosts on the kind network (the image caches): address -> ports something listens on.
    hosts: dict[str, set[int]] = field(default_factory=dict)
    routed_pod_network: bool = False
    # The kind network, and the nodes whose mirror fence is in place: node address -> the TCP ports it drops.
    kind_network: str = "172.18.0.0/16"
    fenced_nodes: dict[str, set[int]] = field(default_factory=dict)

    def enforces(self) -> bool:
        return self.cni == "calico" or (self.cni == "kindnetd" and self.kindnetd_reading)

    def outcome(self, source: FakeCluster, pod: Json, host: str, port: int) -> str:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return "unresolvable"
        namespace = pod["metadata"]["namespace"]
        labels = pod["metadata"].get("labels") or {}
        if source is self.management:
            peer = netpol.Peer(_dig(pod, "status", "podIP") or "10.244.0.250", namespace, labels)
            if self.enforces() and not netpol.allowed(_policies(source), "egress", namespace, labels,
                                                      netpol.Peer(host), port):
                return "filtered"
            return self._deliver(peer, host, port, from_tenant=False)
        # Calico in the tenant enforces the tenant's own policies on the pod's egress; a host-network pod is no
        # workload endpoint, so no NetworkPolicy selects it (Calico polices hosts only through HostEndpoints).
        if not _dig(pod, "spec", "hostNetwork") and not netpol.allowed(_policies(source), "egress", namespace, labels, netpol.Peer(host), port):
            return "filtered"
        worker = next((node_address(n) for n in source.nodes if node_address(n)), None)
        if (not _dig(pod, "spec", "hostNetwork") and port in self.fenced_nodes.get(worker or "", set())
                and _in(host, [self.kind_network])):
            return "filtered"  # GPU-TENANCY-MIRRORS -> DROP
        return self._deliver(netpol.Peer(worker or "0.0.0.0"), host, port, from_tenant=True)

    def _deliver(self, peer: netpol.Peer, host: str, port: int, from_tenant: bool) -> str:
        management = self.management
        nodes = {node_address(n): n["metadata"]["name"] for n in management.nodes if node_address(n)}
        for service in management.services.values():
            ingress = [i.get("ip") for i in _dig(service, "status", "loadBalancer", "ingress") or []]
            entry = next((p for p in _dig(service, "spec", "ports") or [] if p.get("port") == port), None)
            if host in ingress and entry is not None:
                ranges = _dig(service, "spec", "loadBalancerSourceRanges") or []
                if ranges and not _in(peer.ip, ranges):
                    return "filtered"  # KUBE-FW -> KUBE-MARK-DROP
                # MetalLB L2: the first node announces the address and receives the traffic.
                return self._to_backend(service, entry, peer, next(iter(nodes.items()), (None, None)))
        if host in nodes:
            for service in management.services.values():
                entry = next((p for p in _dig(service, "spec", "ports") or [] if p.get("nodePort") == port), None)
                if entry is not None:
                    return self._to_backend(service, entry, peer, (host, nodes[host]))
            return "refused"
        target = next((pod for pod in management.pods.values() if _dig(pod, "status", "podIP") == host), None)
        if target is not None:
            if from_tenant and not self.routed_pod_network:
                return "filtered"
            return self._to_pod(target, port, peer)
        for tenant in self.tenants.values():
            if host in {node_address(n) for n in tenant.nodes}:
                open_ports = {p.get("nodePort") for s in tenant.services.values()
                              for p in _dig(s, "spec", "ports") or []}
                return "connected" if port in open_ports else "refused"
        if host in self.hosts:
            return "connected" if port in self.hosts[host] else "refused"
        return "filtered"

    def _to_backend(self, service: Json, entry: Json, peer: netpol.Peer,
                    receiving: tuple[str | None, str | None]) -> str:
        namespace = service["metadata"]["namespace"]
        selector = _dig(service, "spec", "selector") or {}
        backends = [pod for (ns, _), pod in self.management.pods.items() if ns == namespace and selector
                    and netpol.selects({"matchLabels": selector}, pod["metadata"].get("labels") or {})
                    and _dig(pod, "status", "phase") == "Running"]
        if not backends:
            return "refused"  # kube-proxy: "has no endpoints" -> REJECT
        backend = backends[0]
        address, name = receiving
        seen = peer if (_dig(backend, "spec", "nodeName") == name or address is None) else netpol.Peer(address)
        return self._to_pod(backend, int(entry.get("targetPort") or entry["port"]), seen)

    def _to_pod(self, pod: Json, port: int, peer: netpol.Peer) -> str:
        namespace = pod["metadata"]["namespace"]
        labels = pod["metadata"].get("labels") or {}
        if self.enforces() and not netpol.allowed(_policies(self.management), "ingress", namespace, labels, peer,
                                                  port):
            return "filtered"
        listening = {p.get("containerPort") for c in _dig(pod, "spec", "containers") or [] for p in c.get("ports") or []}
        return "connected" if port in listening else "refused"


def _policies(cluster: FakeCluster) -> list[Json]:
    return [{**policy, "metadata": {**policy.get("metadata", {}), "namespace": namespace}}
            for namespace, policies in cluster.network_policies.items() for policy in policies]
