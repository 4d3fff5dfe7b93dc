"""No test reads the prose under ../shared/docs (tests/conftest.py fails the test that does); the guard behind it."""

from __future__ import annotations

import pytest

from tests.conftest import SHARED, SHARED_DOCS
from tests.support.no_prose import Guard

pytestmark = pytest.mark.repo


def test_the_guard_sees_reads_and_listings_under_its_folder_and_nothing_else(tmp_path):
    docs, vendor = tmp_path / "shared" / "docs", tmp_path / "shared" / "vendor"
    for folder in (docs / "reviews", vendor):
        folder.mkdir(parents=True)
    (docs / "reviews" / "facts.md").write_text("prose")
    (vendor / "README.txt").write_text("data")
    guard = Guard(docs).start()
    try:
        (vendor / "README.txt").read_text()
        assert guard.drain() == []
        (docs / "reviews" / "facts.md").read_text()
        (read,) = guard.drain()
        assert read.startswith(str(docs / "reviews" / "facts.md")) and "test_no_prose.py" in read
        assert list(docs.rglob("*.md"))
        assert guard.drain(), "a glob lists the folder"
    finally:
        guard.stop()
    (docs / "reviews" / "facts.md").read_text()
    assert guard.drain() == [], "a stopped guard records nothing"


def test_the_suite_guards_the_shared_docs_of_this_checkout():
    assert SHARED_DOCS.root.endswith("/shared/docs") and SHARED_DOCS.root.startswith(str(SHARED.resolve()))
    if not (SHARED / "docs").is_dir():
        pytest.skip("no ../shared/docs beside this checkout")
    next((SHARED / "docs").iterdir(), None)
    # The read happened inside this test: take it back, or the suite's guard would fail this very test.
    assert SHARED_DOCS.drain()
