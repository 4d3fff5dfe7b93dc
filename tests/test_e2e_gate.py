"""`make e2e` on a machine that cannot run it fails with the reason on one line; a plain `make test` skips it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pytest_e2e(tmp_path: Path, opt_in: bool) -> subprocess.CompletedProcess[str]:
    # A PATH with python only: no docker, kind or pulumi.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "GPU_TENANCY_E2E"}
    env["PATH"] = str(bin_dir)
    if opt_in:
        env["GPU_TENANCY_E2E"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "e2e", "tests/e2e"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_asked_for_by_name_it_fails_with_a_one_line_reason(tmp_path):
    done = _pytest_e2e(tmp_path, opt_in=True)
    assert done.returncode != 0
    (line,) = [line for line in (done.stdout + done.stderr).splitlines() if "make e2e cannot run" in line]
    assert "docker" in line and "kind" in line and "pulumi" in line


def test_in_the_unit_suite_it_skips_with_the_reason(tmp_path):
    done = _pytest_e2e(tmp_path, opt_in=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout and "needs docker, kind, pulumi" in done.stdout
