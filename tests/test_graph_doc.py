"""The committed dependency-graph picture matches what `make graph` produces now."""

import re
from pathlib import Path

from tools.graph import evaluate, mermaid_document
from tools.mockrun import load_stack_file

DOC = Path(__file__).resolve().parent.parent / "docs" / "dependency-graph.md"


def test_docs_dependency_graph_is_current():
    current = mermaid_document(evaluate(load_stack_file("dev")), "stack dev", markdown=True)
    assert DOC.read_text() == current, "docs/dependency-graph.md is stale: run `make graph`"


def test_graph_cli_prints_chain_and_no_coupling(capsys, tmp_path):
    from tools.graph import main

    target = tmp_path / "g.mmd"
    assert main(["--tenants", "3", "--mermaid", str(target)]) == 0
    out = capsys.readouterr().out
    assert "3 generated tenants:" in out
    assert re.search(r"longest dependency chain: \d+ resources\n\s+1\. gpu-tenancy-kind ", out)
    assert "cross-tenant dependencies: none" in out
    assert target.read_text().startswith("flowchart BT\n")
