"""Imports run downward: `config/` below `components/` below `ops/`, and nothing outside `tests/` imports the test
machinery (`tests/` may use them, not the reverse)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.repo

ROOT = Path(__file__).resolve().parent.parent
# Not ours, or not code that ships: the virtualenv, downloads and generated output.
SKIPPED = {"tests", ".venv", ".cache", "build", ".git"}


def shipped_modules(root: Path = ROOT) -> list[Path]:
    return sorted(path for path in root.rglob("*.py")
                  if not SKIPPED & set(path.relative_to(root).parts[:-1]))


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def imports_of_tests(root: Path = ROOT) -> dict[str, set[str]]:
    return {str(path.relative_to(root)): found for path in shipped_modules(root)
            if (found := {name for name in imported_modules(path) if name == "tests" or name.startswith("tests.")})}


def test_no_module_outside_tests_imports_tests():
    modules = shipped_modules()
    # The walk sees the program, its components and the operator commands.
    assert {"__main__.py", "ops/graph.py", "ops/registrations.py", "components/tenant/control_plane.py"} <= {
        str(path.relative_to(ROOT)) for path in modules}
    assert imports_of_tests() == {}


def test_the_walk_finds_a_tests_import_at_any_depth(tmp_path):
    (tmp_path / "ops").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "ops" / "tool.py").write_text("import json\n\ndef f():\n    from tests.support import mockrun\n")
    (tmp_path / "ops" / "fine.py").write_text("from . import tool\nimport testsuite\n")
    (tmp_path / "tests" / "test_x.py").write_text("import tests.support\n")
    assert imports_of_tests(tmp_path) == {"ops/tool.py": {"tests.support"}}


@pytest.mark.parametrize(("layer", "above"), [("config", {"components", "ops"}), ("components", {"ops"})])
def test_a_layer_imports_nothing_from_the_layers_above_it(layer, above):
    """config/ below components/ below ops/; the chart list the program reads is the program's (components/charts.py)."""
    assert {str(path.relative_to(ROOT)): found for path in sorted((ROOT / layer).rglob("*.py"))
            if (found := {name for name in imported_modules(path) if name.split(".")[0] in above})} == {}


# The modules allowed to use Pulumi SDK names that are not public API (each use pinned by tests/test_sdk.py), and the
# recorder of old states, which runs inside an old checkout.
SDK_PRIVATE = {"sdk.py", "tests/support/sdk.py", "tests/test_sdk.py", "tests/fixtures/record_old_state.py"}
# Public submodules of `pulumi` besides the names in its __all__ (pulumi/__init__.py imports them for users).
PULUMI_SUBMODULES = {"automation", "dynamic", "log", "runtime"}


def private_sdk_uses(path: Path) -> set[str]:
    """`from pulumi... import` of a name outside the module's __all__ (pulumi.runtime.rpc: any name without `_`), an
    import of another pulumi module, and `_name` attributes read off anything imported from pulumi."""
    import importlib

    found, roots = set(), set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "pulumi" or alias.name.startswith("pulumi."):
                    roots.add((alias.asname or alias.name).split(".")[0])
                    if alias.name not in ("pulumi", "pulumi.runtime", "pulumi.dynamic", "pulumi.automation"):
                        found.add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pulumi":
            # A name pulumi re-exports at its top (pulumi.asset.FileAsset is pulumi.FileAsset) is public too.
            public = {*getattr(importlib.import_module(node.module), "__all__", ()), *importlib.import_module("pulumi").__all__}
            for alias in node.names:
                roots.add(alias.asname or alias.name)
                allowed = (alias.name in public or (node.module == "pulumi" and alias.name in PULUMI_SUBMODULES)
                           or (node.module == "pulumi.runtime.rpc" and not alias.name.startswith("_")))
                if not allowed:
                    found.add(f"{node.module}.{alias.name}")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in roots:
                found.add(f"{base.id}...{node.attr}")
    return found


def test_only_the_two_sdk_modules_use_pulumi_names_that_are_not_public():
    code = sorted(ROOT.glob("*.py")) + [path for folder in ("components", "config", "ops", "tests", "bench")
                                         for path in sorted((ROOT / folder).rglob("*.py"))]
    assert {str(path.relative_to(ROOT)): found for path in code if str(path.relative_to(ROOT)) not in SDK_PRIVATE
            and (found := private_sdk_uses(path))} == {}
    assert private_sdk_uses(ROOT / "tests/support/sdk.py") >= {"pulumi.runtime.sync_await._sync_await",
                                                               "pulumi.runtime.mocks.MockMonitor"}
