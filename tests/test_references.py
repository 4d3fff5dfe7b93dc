"""Comments a clone can follow: what the code, tests and docs point at is inside the repository or names its
upstream file, never notes or reviews kept beside the checkout."""

from __future__ import annotations

import ast
import functools
import importlib
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.repo

ROOT = Path(__file__).resolve().parent.parent
# Generated or installed trees, not sources.
SKIPPED_DIRS = {".venv", ".cache", "build", ".git", ".pulumi-state", "__pycache__", ".pytest_cache", ".ruff_cache"}
SOURCE_SUFFIXES = {".py", ".sh", ".md", ".yaml", ".yml", ".toml", ".txt", ".json"}


def source_files() -> list[Path]:
    """Every source, test and doc file of the project (the Makefile included)."""
    found = []
    for path in sorted(ROOT.rglob("*")):
        relative = path.relative_to(ROOT)
        if any(part in SKIPPED_DIRS for part in relative.parts) or not path.is_file():
            continue
        if relative == Path("Pulumi.dev.yaml"):  # the user's lab: no test reads it (tests/conftest.py)
            continue
        if path.suffix in SOURCE_SUFFIXES or path.name == "Makefile":
            found.append(path)
    return found


# Notes outside the repository (the research notes and reviews beside the checkout): a clone has none of them, so a
# citation of one says nothing there. Spelt in pieces so that this file does not match itself.
OUTSIDE_NOTES = re.compile("|".join([
    r"facts\s+" + "\u00a7", "platform" + r"[- ]facts", r"shared/" + "docs",
    r"\breviews?\s+(?:Part\b|[A-Z]{1,3}\d*-?\d)",  # a review and a part or finding of it
    r"\b(?:maintainer|security|gpu-layer|management-mirror|pulumi-engine|tenant-plane)[- ](?:review|[A-Z]{1,3}\d*-?\d)",
]), re.IGNORECASE)
# A review's finding id alone; looked for in comments, docstrings and docs only, where a card's UUID never is.
FINDING = re.compile(r"\b(?:PE|TP|MM\d*|S\d*)-\d+[a-z]?\b|\bG\d+\b")


# The guard that keeps the tests off the prose beside the checkout has to name that folder.
NAMES_THE_FOLDER = {Path("tests/conftest.py"), Path("tests/support/no_prose.py"), Path("tests/test_no_prose.py")}


def test_nothing_points_at_notes_outside_the_repository():
    files = [path for path in source_files() if path.relative_to(ROOT) not in NAMES_THE_FOLDER]
    assert len(files) > 50 and ROOT / "Makefile" in files
    hits = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            for path in files
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if OUTSIDE_NOTES.search(line)]
    docs = [(str(path.relative_to(ROOT)), number, line) for path in files if path.suffix == ".md"
            for number, line in enumerate(path.read_text().splitlines(), 1)]
    hits += [f"{path}:{number}: {text.strip()[:120]}" for path, number, text in (*all_prose(), *docs)
             if FINDING.search(text)]
    assert not hits, "say the reason and name the upstream file instead:\n" + "\n".join(hits)


# --------------------------------------------------------------------------- #
# What comments and docstrings name exists
# --------------------------------------------------------------------------- #

# A path into one of our own top-level folders. (Upstream files are cited with their project and never start with
# one of these; `docs/` is left out because upstream projects have docs/ folders too.)
OUR_PATH = re.compile(r"(?<![\w./-])((?:components|ops|config|tests|bench)/[\w./-]*\w\.(?:py|sh|yaml|md|json|txt))\b")
# A dotted name in one of our packages: a module, or a module's function, class or constant.
OUR_NAME = re.compile(r"(?<![\w./-])((?:components|ops|config|tests)(?:\.[A-Za-z_]\w*)+)")
# `config.yaml`, kube-proxy's `config.conf`, Go's `config.go`: file names, not Python names.
FILE_SUFFIXES = {"go", "conf", "yaml", "yml", "toml", "json", "txt", "md", "py", "sh", "tpl"}


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each comment and docstring of a Python file, or of each comment of a shell script or the
    Makefile."""
    text = path.read_text()
    if path.suffix != ".py":
        for number, line in enumerate(text.splitlines(), 1):
            if "#" in line:
                yield number, line[line.index("#"):]
        return
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                yield node.body[0].lineno, docstring


@functools.cache
def all_prose() -> tuple[tuple[str, int, str], ...]:
    """(file, line, text) of every comment and docstring of the code, the scripts and the Makefile, read once."""
    return tuple((str(path.relative_to(ROOT)), number, text)
                 for path in source_files() if path.suffix in (".py", ".sh") or path.name == "Makefile"
                 for number, text in prose(path))


def resolves(dotted: str) -> bool:
    """Whether `a.b.c` is one of our modules, or an attribute (function, class, constant) of one."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module = ROOT.joinpath(*parts[:split])
        if module.with_suffix(".py").is_file() or (module / "__init__.py").is_file():
            obj = importlib.import_module(".".join(parts[:split]))
            for attribute in parts[split:]:
                if not hasattr(obj, attribute):
                    return False
                obj = getattr(obj, attribute)
            return True
    return False


def test_every_repository_path_a_comment_names_exists():
    named, broken = 0, []
    for path, number, text in all_prose():
        for name in OUR_PATH.findall(text):
            named += 1
            if not (ROOT / name).exists():
                broken.append(f"{path}:{number}: {name}")
    assert named > 30
    assert not broken, "comments and docstrings name files that do not exist:\n" + "\n".join(broken)


def test_every_module_and_function_a_comment_names_exists():
    named, broken = 0, []
    for path, number, text in all_prose():
        for name in OUR_NAME.findall(text):
            if name.rsplit(".", 1)[-1] in FILE_SUFFIXES:
                continue
            named += 1
            if not resolves(name):
                broken.append(f"{path}:{number}: {name}")
    assert named > 30
    assert not broken, "comments and docstrings name modules or functions that do not exist:\n" + "\n".join(broken)


def test_the_checks_recognise_what_they_look_for():
    cited = ["(gpu-layer" + " review" + " G1)", "(maintainer" + " review" + " Part 1 #6)", "security" + " review" + " S-2",
             "(reviews" + " PE-3)", "(gpu-layer" + " G3)"]
    assert all(OUTSIDE_NOTES.search(text) for text in cited)
    assert [FINDING.search(text).group(0) for text in ("MM4" + "-3:", "(S4" + "-2)", "gpu-layer G" + "3")] == [
        "MM4" + "-3", "S4" + "-2", "G" + "3"]
    assert not any(OUTSIDE_NOTES.search(t) or FINDING.search(t) for t in (
        "pulumi preview", "review it with git diff", "upload to S3", "IPv4", "card GPU-A1-0", "issue 22 #1"))
    text = "see tests/test_join_script.py and components.worker.access.ssh_stdin; kamaji docs/x.md, config.go"
    assert OUR_PATH.findall(text) == ["tests/test_join_script.py"]
    assert [n for n in OUR_NAME.findall(text) if n.rsplit(".", 1)[-1] not in FILE_SUFFIXES] == [
        "components.worker.access.ssh_stdin"]
    assert not resolves("components.worker.access.ssh_stdin") and resolves("components.worker.access.node_stdin")
    assert resolves("tests.support.sim.Lifecycle") and not resolves("components.nothing_here")
