"""The documentation stays true: every `make` target, file, link and configuration key that README.md, CHANGELOG.md
or a file under docs/ names exists, every key of the configuration is in docs/configuration.md, the sample outputs
are what the code produces now, and the README stays a front page."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from config.models import StackConfig
from tests.support import readme

pytestmark = pytest.mark.repo

ROOT = Path(__file__).resolve().parent.parent
TEXTS = {path: path.read_text() for path in readme.DOCS}
TEXT = "\n".join(TEXTS.values())
MAKEFILE = (ROOT / "Makefile").read_text()


def config_keys(model: type[BaseModel] = StackConfig, prefix: str = "") -> set[str]:
    """Every key path of the stack configuration, lists written `[]` (e.g. `tenants[].workers[].ssh.hostKey`)."""
    keys = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        keys.add(path)
        annotation = field.annotation
        for candidate in (annotation, *typing.get_args(annotation)):
            for inner in (candidate, *typing.get_args(candidate)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    is_list = typing.get_origin(annotation) is list or typing.get_origin(candidate) is list
                    keys |= config_keys(inner, f"{path}[]." if is_list else f"{path}.")
    return keys


KEYS = config_keys()
TOP_LEVEL = {key for key in KEYS if "." not in key and "[" not in key}


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", MAKEFILE, re.M))


def test_the_readme_is_a_front_page():
    assert len(TEXTS[readme.README].splitlines()) <= 200, "README.md is a front page: move the detail to docs/"


def test_generated_blocks_are_current():
    stale = [str(path.relative_to(ROOT)) for path, text in TEXTS.items() if readme.render(text) != text]
    assert not stale, f"stale generated blocks in {stale}: run `make docs`"
    assert {m[1] for m in readme.BLOCK.findall(TEXT)} == set(readme.GENERATORS)


def test_every_make_target_named_exists_and_make_help_lists_every_target():
    named = set(re.findall(r"\bmake ([a-z][a-z0-9-]*)", TEXT))
    assert named, "the docs name no make target"
    assert named <= make_targets(), named - make_targets()
    phony = set(re.search(r"^\.PHONY: (.*)$", MAKEFILE, re.M).group(1).split())
    help_text = MAKEFILE.split("\nhelp:", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"make ([a-z][a-z0-9-]*)", help_text))
    assert phony - {"help"} <= listed, phony - listed


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_link_between_the_docs_reaches_its_file_and_heading():
    checked = 0
    for path, text in TEXTS.items():
        for target, anchor in re.findall(r"\]\(([A-Za-z0-9_./-]*)(?:#([\w-]+))?\)", text):
            linked = (path.parent / target).resolve() if target else path
            assert linked.exists(), f"{path.relative_to(ROOT)} links to {target}, which does not exist"
            if anchor:
                assert anchor in anchors(linked.read_text()), f"{path.relative_to(ROOT)}: no heading #{anchor} in {target}"
            checked += 1
    assert checked > 20


def test_every_file_named_exists():
    candidates = set(re.findall(r"`([A-Za-z0-9_./-]+\.(?:py|sh|yaml|md|json|txt))`", TEXT))
    ours = {entry.name for entry in ROOT.iterdir()}
    checked = 0
    for name in candidates:
        if name.startswith(("http", "Pulumi.<", "~")) or "<" in name or "*" in name:
            continue
        if name.startswith("build/"):
            continue  # `make graph` output: git-ignored, made on demand (tests/test_makefile.py checks the paths)
        if name.split("/")[0] not in ours and not name.startswith("Pulumi."):
            continue  # an upstream project's file (cited with its project name) or a bare name like `hosts.toml`
        assert (ROOT / name).exists(), f"the docs name {name}, which does not exist"
        checked += 1
    assert checked > 10


def _normalise(token: str) -> str:
    return re.sub(r"\[[0-9]+\]", "[]", token)


def test_every_config_key_named_exists():
    tokens = set(re.findall(r"`([a-z][A-Za-z]*(?:\[[0-9]*\])?(?:\.[a-z][A-Za-z]*(?:\[[0-9]*\])?)*)(?=[`:, ])", TEXT))
    named = {_normalise(t) for t in tokens if t.split(".")[0].split("[")[0] in TOP_LEVEL}
    assert len(named) > 20
    unknown = {key for key in named if key not in KEYS}
    assert not unknown, f"the docs name configuration keys that do not exist: {sorted(unknown)}"


def test_the_reference_covers_every_config_key():
    reference = TEXTS[ROOT / "docs" / "configuration.md"]
    cells = set(re.findall(r"`([A-Za-z\[\].]+)`", reference))
    missing = set()
    for key in KEYS:
        leaf = key.rsplit(".", 1)[-1]
        parent = key.rsplit(".", 1)[0].removesuffix("[]") if "." in key else ""
        # A leaf may be documented in its parent's row ("`dataStore` | `dedicated` (false), ..."), and a section
        # by the rows of its keys.
        documented = key in cells or (parent in cells and f"`{leaf}`" in reference) or any(
            cell.startswith(f"{key}.") for cell in cells)
        if not documented:
            missing.add(key)
    assert not missing, f"keys missing from the configuration reference: {sorted(missing)}"


def test_stale_words_are_gone():
    for stale in ("tests/harness.py", "tenantJoinTokens", "joinTokenExpiration", "kamajiChart", ".pulumi-passphrase`,"):
        assert stale not in TEXT, stale
