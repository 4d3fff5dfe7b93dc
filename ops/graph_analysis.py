"""Dependency-graph analysis of a program run: longest chain, tenant coupling, Mermaid.

Pure functions over plain data, fed by `ops.graph` from a run of the real
program under mocks. The graph holds custom resources (what providers
actually create); an edge A -> B means A waits for B (explicit depends_on,
an input that is B's output, or B being A's provider). Component resources
are not work, and depends_on on a component already expands to its children.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GraphNode:
    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    dependencies: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class GraphReport:
    resource_count: int
    longest_chain: list[GraphNode]
    cross_tenant: list[tuple[GraphNode, str, GraphNode, str]]
    tenant_of: dict[str, str | None]


def longest_chain(nodes: Sequence[GraphNode]) -> list[GraphNode]:
    """The longest path (in resources) through the wait-for edges, first-created first."""
    by_urn = {n.urn: n for n in nodes if n.custom}
    memo: dict[str, list[str]] = {}

    def chain(urn: str, visiting: frozenset[str]) -> list[str]:
        if urn in memo:
            return memo[urn]
        if urn in visiting:
            raise ValueError(f"dependency cycle through {urn}")
        best: list[str] = []
        for dep in sorted(by_urn[urn].dependencies):
            if dep in by_urn:
                candidate = chain(dep, visiting | {urn})
                if len(candidate) > len(best):
                    best = candidate
        memo[urn] = [*best, urn]
        return memo[urn]

    longest: list[str] = []
    for urn in sorted(by_urn):
        candidate = chain(urn, frozenset())
        if len(candidate) > len(longest):
            longest = candidate
    return [by_urn[urn] for urn in longest]


def assign_tenants(
    nodes: Sequence[GraphNode], owners: Mapping[tuple[str, str], str]
) -> dict[str, str | None]:
    """Tenant of every resource: the tenant of its nearest owning ancestor component.

    `owners` maps (component type, component name) to a tenant name.
    """
    by_urn = {n.urn: n for n in nodes}
    result: dict[str, str | None] = {}

    def owner(urn: str) -> str | None:
        if urn in result:
            return result[urn]
        node = by_urn.get(urn)
        if node is None:
            return None
        tenant = owners.get((node.type, node.name))
        if tenant is None and node.parent:
            tenant = owner(node.parent)
        result[urn] = tenant
        return tenant

    for node in nodes:
        owner(node.urn)
    return result


def transitive_dependencies(nodes: Iterable[GraphNode]) -> dict[str, set[str]]:
    by_urn = {n.urn: n for n in nodes}
    closure: dict[str, set[str]] = {}

    def visit(urn: str) -> set[str]:
        if urn in closure:
            return closure[urn]
        closure[urn] = set()
        found: set[str] = set()
        for dep in by_urn[urn].dependencies:
            if dep in by_urn:
                found.add(dep)
                found |= visit(dep)
        closure[urn] = found
        return found

    for urn in by_urn:
        visit(urn)
    return closure


def cross_tenant_dependencies(
    nodes: Sequence[GraphNode], tenant_of: Mapping[str, str | None]
) -> list[tuple[GraphNode, str, GraphNode, str]]:
    """(resource, its tenant, dependency, other tenant) for every wait across tenants."""
    by_urn = {n.urn: n for n in nodes}
    found = []
    for urn, deps in sorted(transitive_dependencies(nodes).items()):
        mine = tenant_of.get(urn)
        if mine is None:
            continue
        for dep in sorted(deps):
            theirs = tenant_of.get(dep)
            if theirs is not None and theirs != mine:
                found.append((by_urn[urn], mine, by_urn[dep], theirs))
    return found


def analyse(nodes: Sequence[GraphNode], owners: Mapping[tuple[str, str], str]) -> GraphReport:
    tenant_of = assign_tenants(nodes, owners)
    return GraphReport(
        resource_count=sum(n.custom for n in nodes),
        longest_chain=longest_chain(nodes),
        cross_tenant=cross_tenant_dependencies(nodes, tenant_of),
        tenant_of=tenant_of,
    )


def _label(node: GraphNode) -> str:
    short_type = node.type.split(":")[-1]
    return f"{node.name}<br/><small>{short_type}</small>".replace('"', "'")


def mermaid(nodes: Sequence[GraphNode], report: GraphReport) -> str:
    """A Mermaid flowchart: one subgraph per tenant, the longest chain highlighted."""
    custom = sorted((n for n in nodes if n.custom), key=lambda n: n.urn)
    ids = {n.urn: f"r{i}" for i, n in enumerate(custom)}
    groups: dict[str | None, list[GraphNode]] = {}
    for node in custom:
        groups.setdefault(report.tenant_of.get(node.urn), []).append(node)
    lines = ["flowchart BT"]
    for tenant, members in sorted(groups.items(), key=lambda item: (item[0] is not None, item[0] or "")):
        indent = "    "
        if tenant is not None:
            lines.append(f'    subgraph tenant_{tenant.replace("-", "_")}["tenant {tenant}"]')
            indent = "        "
        for node in members:
            lines.append(f'{indent}{ids[node.urn]}["{_label(node)}"]')
        if tenant is not None:
            lines.append("    end")
    for node in custom:
        for dep in sorted(node.dependencies):
            if dep in ids:
                lines.append(f"    {ids[node.urn]} --> {ids[dep]}")
    chain_ids = [ids[n.urn] for n in report.longest_chain]
    if chain_ids:
        lines.append("    classDef critical stroke:#d33,stroke-width:3px")
        lines.append(f"    class {','.join(chain_ids)} critical")
    return "\n".join(lines) + "\n"
