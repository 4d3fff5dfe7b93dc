"""The user's stack is the user's: Pulumi.dev.yaml ships as the reference lab, and editing it changes neither what
`make test` checks nor what `make docs` writes (both use tests/fixtures/reference-stack.yaml). The one check on the
file itself reads it as committed: a fresh clone's lab must pass preflight."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from config import stack_file
from ops import preflight
from tests.conftest import USER_STACK, UserStackReadError
from tests.support.make import run_make
from tests.support.mockrun import REFERENCE_STACK
from tests.support.readme import DOCS

pytestmark = pytest.mark.repo

ROOT = Path(__file__).resolve().parent.parent
GENERATED = tuple(str(path.relative_to(ROOT)) for path in DOCS)  # what `make docs` writes


def edited_lab() -> dict:
    """The reference lab as a user might edit it: a second card on tenant-a's worker, and a second worker."""
    document = yaml.safe_load(REFERENCE_STACK.read_text())
    workers = document["config"]["gpu-tenancy:tenants"][0]["workers"]
    card = workers[0]["gpus"][0]
    workers[0]["gpus"].append({**card, "uuid": "GPU-MOCK-A1"})
    workers.append({"name": "worker-1", "gpus": [{**copy.deepcopy(card), "uuid": "GPU-MOCK-A2"}]})
    return document


def test_no_test_can_read_the_users_stack():
    # The suite-wide guard in tests/conftest.py: whatever reads it in the test process fails.
    with pytest.raises(UserStackReadError, match="tests read the reference stack"):
        USER_STACK.read_text()
    with pytest.raises(UserStackReadError):
        open(ROOT / "tests" / ".." / "Pulumi.dev.yaml")  # noqa: SIM115 -- the open itself is refused
    assert REFERENCE_STACK.read_text().startswith("#")


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_make_docs_in_a_project_with_an_edited_dev_stack_rewrites_nothing(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(ROOT, project, symlinks=True, ignore=shutil.ignore_patterns(
        USER_STACK.name, ".venv", ".git", ".cache", "build", "__pycache__", ".pulumi-state", "*_cache"))
    (project / ".venv").symlink_to((ROOT / ".venv").resolve())
    (project / USER_STACK.name).write_text(yaml.safe_dump(edited_lab(), sort_keys=False))
    before = {name: (project / name).read_text() for name in GENERATED}
    # -o: the shared virtualenv is current, never rebuilt from the copy.
    done = run_make("docs", "-o", ".venv/.installed", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {name: (project / name).read_text() for name in GENERATED} == before


def committed_dev_stack() -> str:
    """Pulumi.dev.yaml as this checkout committed it (what a fresh clone's `make up` starts from), read from git
    rather than the working tree: a user's uncommitted edits are theirs, not this suite's."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout (or no git): the committed Pulumi.dev.yaml cannot be read")
    done = subprocess.run(["git", "-C", str(ROOT), "show", f"HEAD:{USER_STACK.name}"], capture_output=True,
                          text=True)
    if done.returncode == 0:
        return done.stdout
    if "does not exist in" in done.stderr or "exists on disk, but not in" in done.stderr:
        pytest.fail(f"{USER_STACK.name} is not committed: a fresh clone has no lab to start from ({done.stderr})")
    # Anything else is git's own trouble (no commit yet, a repository owned by another user), not the file's.
    pytest.skip(f"git cannot read HEAD:{USER_STACK.name} here: {done.stderr.strip()}")


def test_the_shipped_dev_stack_passes_preflight():
    # Tests run on the fixture, so nothing else would notice a key renamed there but not in the file users copy.
    document = stack_file.parse(committed_dev_stack(), USER_STACK.name)
    results = [preflight.check_stack_secrets("dev", document), preflight.check_stack_config("dev", document)]
    assert all(result.ok for result in results), preflight.render(results)
    assert preflight.project_config(document)["tenants"], "the reference lab has tenants"
