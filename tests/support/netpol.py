"""A small evaluator of Kubernetes NetworkPolicy semantics, for judging the policies the program writes by what they
let through rather than by their shape.

The rules, as networking.k8s.io/v1 NetworkPolicySpec documents them (kubernetes/api networking/v1/types.go):
- a pod is isolated in a direction only if some policy of its namespace selects it and lists that direction in
  policyTypes (default: Ingress, plus Egress when the policy has egress rules); otherwise everything is allowed;
- policies are additive: a connection is allowed if any rule of any selecting policy admits it;
- a rule admits a peer if its ports are empty or missing or list the port, and its from/to is empty or missing or
  has a matching peer;
- a peer's podSelector without namespaceSelector means the policy's namespace; an ipBlock matches addresses
  (and pods are matched by it through their pod IP only, which the callers here never put in a block).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Peer:
    """The other end of a connection: a pod (namespace and labels) or, with namespace None, an outside address."""

    ip: str
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against a label set; {} or None selects everything."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def policy_types(policy: Json) -> list[str]:
    spec = policy.get("spec") or {}
    return list(spec.get("policyTypes") or ["Ingress", *(["Egress"] if spec.get("egress") else [])])


def _peer_matches(peer_rule: Json, policy_namespace: str, peer: Peer) -> bool:
    if "ipBlock" in peer_rule:
        block = peer_rule["ipBlock"]
        address = ipaddress.ip_address(peer.ip)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(excepted) for excepted in block.get("except") or [])
    if peer.namespace is None:
        return False  # selectors match pods only
    if "namespaceSelector" in peer_rule:
        namespace_ok = selects(peer_rule["namespaceSelector"], {NAMESPACE_NAME_LABEL: peer.namespace})
    else:
        namespace_ok = peer.namespace == policy_namespace
    return namespace_ok and selects(peer_rule.get("podSelector"), peer.labels)


def _rule_admits(rule: Json, peers_key: str, policy_namespace: str, peer: Peer, port: int, protocol: str) -> bool:
    ports = rule.get("ports") or []
    if ports and not any(p.get("protocol", "TCP") == protocol and p.get("port") in (None, port) for p in ports):
        return False
    peers = rule.get(peers_key) or []
    return not peers or any(_peer_matches(p, policy_namespace, peer) for p in peers)


def allowed(policies: Iterable[Json], direction: str, namespace: str, pod_labels: Mapping[str, str], peer: Peer,
            port: int, protocol: str = "TCP") -> bool:
    """Whether the pod (`namespace`, `pod_labels`) may receive from (`ingress`) or send to (`egress`) `peer` on
    `port` under `policies` (any namespace's: only its own namespace's apply to it)."""
    kind, key, peers_key = ("Ingress", "ingress", "from") if direction == "ingress" else ("Egress", "egress", "to")
    applying = [p for p in policies if (p.get("metadata") or {}).get("namespace") == namespace
                and selects((p.get("spec") or {}).get("podSelector"), pod_labels) and kind in policy_types(p)]
    if not applying:
        return True
    return any(_rule_admits(rule, peers_key, namespace, peer, port, protocol)
               for policy in applying for rule in (policy.get("spec") or {}).get(key) or [])
