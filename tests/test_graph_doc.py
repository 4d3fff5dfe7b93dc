"""The committed dependency-graph picture matches what `make docs` produces now; `make graph` prints and writes
under build/."""

import re
from pathlib import Path

import pytest

from tests.support.mockrun import REFERENCE_STACK

DOC = Path(__file__).resolve().parent.parent / "docs" / "dependency-graph.md"


@pytest.mark.repo
def test_docs_dependency_graph_is_current(tmp_path, capsys):
    from ops.graph import main

    # What `make docs` runs (tests/test_makefile.py checks the command line).
    fresh = tmp_path / "dependency-graph.md"
    assert main(["--stack-file", str(REFERENCE_STACK), "--mermaid", str(fresh)]) == 0
    assert capsys.readouterr().out.startswith("stack file reference-stack.yaml: ")
    assert DOC.read_text() == fresh.read_text(), "docs/dependency-graph.md is stale: run `make docs`"


def test_graph_cli_prints_chain_and_no_coupling(capsys, tmp_path):
    from ops.graph import main

    target = tmp_path / "g.mmd"
    assert main(["--tenants", "3", "--mermaid", str(target)]) == 0
    out = capsys.readouterr().out
    assert "3 generated tenants:" in out
    assert re.search(r"longest dependency chain: \d+ resources\n\s+1\. management-kind ", out)
    assert "cross-tenant dependencies: none" in out
    assert target.read_text().startswith("flowchart BT\n")


def test_a_config_mistake_is_a_message_and_exit_2_not_a_traceback(capsys, tmp_path, monkeypatch):
    import ops.graph as graph

    monkeypatch.setattr(graph, "load_stack_file", lambda name: {"tenantz": []})
    assert graph.main(["--stack", "broken"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("make graph: invalid 'gpu-tenancy' stack configuration")
    assert "did you mean 'tenants'" in err and "Traceback" not in err


def test_a_missing_stack_file_says_how_to_create_it(capsys):
    from ops.graph import main

    assert main(["--stack", "no-such-stack"]) == 2
    assert "Pulumi.no-such-stack.yaml does not exist" in capsys.readouterr().err
