"""A YAML mistake in a stack file is a message with the file name and the position, in every command."""

from __future__ import annotations

import pytest

from config import stack_file
from config.stack_file import StackFileError

# An indentation mistake: `workers` one column left of `name`.
BROKEN = """\
config:
  gpu-tenancy:tenants:
    - name: tenant-a
     workers: []
"""
MARK = 'in "Pulumi.broken.yaml", line 4, column 6'


def test_the_mark_names_the_file_not_a_string():
    with pytest.raises(StackFileError) as caught:
        stack_file.parse(BROKEN, "Pulumi.broken.yaml")
    error = caught.value
    assert error.detail.startswith("Pulumi.broken.yaml is not valid YAML:\n  while parsing a block collection\n")
    assert MARK in error.detail and "<unicode string>" not in str(error)
    assert error.fix == "fix the YAML of Pulumi.broken.yaml at the position above"


def test_the_message_quotes_no_line_of_the_file():
    # A plain-text credential on the broken line stays out of the message.
    text = "config:\n  gpu-tenancy:token: s3cr3t: [\n"
    with pytest.raises(StackFileError) as caught:
        stack_file.parse(text, "Pulumi.x.yaml")
    assert "s3cr3t" not in str(caught.value) and 'in "Pulumi.x.yaml", line 2' in str(caught.value)


def test_valid_yaml_is_returned_as_parsed(tmp_path):
    (tmp_path / "Pulumi.ok.yaml").write_text("config:\n  gpu-tenancy:gpuMode: mock\n")
    assert stack_file.load(tmp_path / "Pulumi.ok.yaml") == {"config": {"gpu-tenancy:gpuMode": "mock"}}


def test_make_preflight_shows_the_position_and_one_fix(tmp_path, capsys):
    from ops import preflight
    from tests.test_preflight import fake

    (tmp_path / "Pulumi.broken.yaml").write_text(BROKEN)
    assert preflight.main(["--stack", "broken"], fake()[0], root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "[FAIL] Pulumi.broken.yaml readable: Pulumi.broken.yaml is not valid YAML:" in out
    assert MARK in out and "fix: fix the YAML of Pulumi.broken.yaml at the position above" in out


def test_make_graph_shows_the_position_not_a_traceback(tmp_path, capsys, monkeypatch):
    from ops import graph

    (tmp_path / "Pulumi.broken.yaml").write_text(BROKEN)
    monkeypatch.setattr(graph, "ROOT", tmp_path)
    assert graph.main(["--stack", "broken"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("make graph: Pulumi.broken.yaml is not valid YAML:") and MARK in err
    assert "Traceback" not in err
