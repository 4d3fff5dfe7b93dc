"""Longest chain, tenant attribution, cross-tenant detection and Mermaid output."""

import pytest

from ops.graph_analysis import GraphNode, analyse, longest_chain, mermaid

STACK = "urn:pulumi:dev::gpu-tenancy::pulumi:pulumi:Stack::gpu-tenancy-dev"
TCP = "gpu-tenancy:index:TenantControlPlane"


def node(name, deps=(), parent=STACK, custom=True, type_="kubernetes:core/v1:Secret"):
    return GraphNode(urn=f"urn:{name}", type=type_, name=name, parent=parent, custom=custom,
                     dependencies=frozenset(f"urn:{d}" for d in deps))


def tenant_graph(cross=False):
    return [
        node("cluster"),
        node("kamaji", ["cluster"]),
        node("a", custom=False, type_=TCP),
        node("b", custom=False, type_=TCP),
        node("a-tcp", ["kamaji"], parent="urn:a"),
        node("a-join", ["a-tcp"], parent="urn:a"),
        node("b-tcp", ["kamaji"], parent="urn:b"),
        node("b-join", ["b-tcp", *(["a-join"] if cross else [])], parent="urn:b"),
    ]


OWNERS = {(TCP, "a"): "a", (TCP, "b"): "b"}


def test_longest_chain_follows_waits_in_creation_order():
    chain = longest_chain(tenant_graph())
    assert [n.name for n in chain] in (["cluster", "kamaji", "a-tcp", "a-join"], ["cluster", "kamaji", "b-tcp", "b-join"])


def test_components_are_not_counted():
    report = analyse(tenant_graph(), OWNERS)
    assert report.resource_count == 6


def test_independent_tenants_have_no_cross_edges():
    report = analyse(tenant_graph(), OWNERS)
    assert report.cross_tenant == []
    assert report.tenant_of["urn:a-join"] == "a"
    assert report.tenant_of["urn:cluster"] is None


def test_a_cross_tenant_wait_is_reported_and_lengthens_the_chain():
    report = analyse(tenant_graph(cross=True), OWNERS)
    assert [(x.name, xt, y.name, yt) for x, xt, y, yt in report.cross_tenant] == [("b-join", "b", "a-join", "a"), ("b-join", "b", "a-tcp", "a")]
    assert len(report.longest_chain) == 5


def test_cycle_is_an_error():
    nodes = [node("x", ["y"]), node("y", ["x"])]
    with pytest.raises(ValueError, match="cycle"):
        longest_chain(nodes)


def test_mermaid_has_subgraphs_edges_and_highlighted_chain():
    nodes = tenant_graph()
    text = mermaid(nodes, analyse(nodes, OWNERS))
    assert text.startswith("flowchart BT\n")
    assert 'subgraph tenant_a["tenant a"]' in text
    assert "classDef critical" in text
    assert text.count(" --> ") == 5
