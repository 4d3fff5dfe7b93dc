"""Product code is there for the product: every module-level name in it is used by the program, the operator
commands or the benches, not only by tests (test helpers belong under tests/)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.repo

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ["__main__.py", "naming.py", "sdk.py", "components", "config", "ops"]
# Readers of product code besides the product itself.
USERS = [*PRODUCT, "bench", "Makefile"]
# The environment contract of the node and kind scripts (components/shell.py): tests run each script against it,
# the program forwards the variables one by one.
SCRIPT_CONTRACT = re.compile(r"^(NODE_JOIN|KIND_CREATE|KIND_DELETE)_ENV$|_(ATTEMPTS|PAUSE)_ENV$|^NODE_ROOT_ENV$")
# Read only by tests, kept beside what they describe: where `make upstream` puts the reference files (conftest
# reads them from there), and the hosts.toml node-mirrors.sh writes (the simulator's model of that script,
# tests/support/sim/scripts.py, imports it; it moves when that model does).
TEST_READERS = {"ops/upstream.py": {"vendor_dir"}, "components/management/image_cache.py": {"hosts_toml"}}


def _files(entries: list[str]) -> list[Path]:
    found = []
    for entry in entries:
        path = ROOT / entry
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return found


def _defined(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("__") and n != "main"]


def test_every_product_name_is_used_by_the_product():
    texts = {path: path.read_text() for path in _files(USERS)}
    modules = [path for path in _files(PRODUCT)]
    assert len(modules) > 30
    unused = []
    for module in modules:
        relative = str(module.relative_to(ROOT))
        for name in _defined(ast.parse(texts[module])):
            if SCRIPT_CONTRACT.search(name) or name in TEST_READERS.get(relative, ()):
                continue
            word = re.compile(rf"\b{re.escape(name)}\b")
            if len(word.findall(texts[module])) > 1 or any(word.search(t) for p, t in texts.items() if p != module):
                continue
            unused.append(f"{relative}: {name}")
    assert not unused, "defined but used by no product code (delete it, or move it into tests/):\n" + "\n".join(unused)
