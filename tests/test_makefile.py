"""What `make` runs (dry runs: `make -n`), where the order or the environment matters."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import readme
from tests.support.make import run_make

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.repo, pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")]


def dry_run(target: str, *variables: str) -> list[str]:
    return run_make("-n", target, "STACK=dev", *variables, cwd=ROOT, check=True).stdout.splitlines()


@pytest.mark.parametrize(("target", "command"), [("up", "pulumi up"), ("down", "pulumi destroy"),
                                               ("preview", "pulumi preview"), ("refresh", "pulumi refresh")])
def test_pulumi_runs_with_a_private_tmpdir_removed_afterwards(target, command):
    # pulumi-kubernetes leaves each provider's kubeconfig in $TMPDIR (provider.go writeKubeconfigToFile).
    (line,) = [line for line in dry_run(target) if command in line]
    assert line.startswith('tmp="$(mktemp -d)" && trap \'rm -rf "$tmp"\' EXIT && TMPDIR="$tmp" ')


def test_a_replacement_goes_through_make_up():
    urn = "urn:pulumi:dev::gpu-tenancy::gpu-tenancy:index:Tenant$kubernetes:core/v1:Pod::tenant-a-gpu-smoke-test"
    (line,) = [line for line in dry_run("up", f"REPLACE={urn}") if "pulumi up" in line]
    assert line.startswith('tmp="$(mktemp -d)"') and line.rstrip().endswith(f"pulumi up --stack dev --replace '{urn}'")


def test_the_docs_and_messages_run_pulumi_only_through_make():
    """Run by hand, a pulumi command that loads the providers leaves super-admin kubeconfigs in /tmp."""
    text = readme.all_text()
    direct = re.findall(r"`(pulumi (?:up|preview|refresh|destroy|import|watch)\b[^`]*)`", text)
    assert [command for command in direct if " -" in command] == []
    blocks = [line for block in re.findall(r"^```\w*\n(.*?)^```", text, re.M | re.S) for line in block.splitlines()
              if re.match(r"\s*pulumi (?:up|preview|refresh|destroy|import|watch)\b", line)]
    assert blocks == []
    # A failure's fix line, which the operator runs next.
    sources = [path for folder in ("components", "ops", "config") for path in (ROOT / folder).rglob("*")
               if path.suffix in (".py", ".sh")]
    told = [f"{path.relative_to(ROOT)}: {match}" for path in sources
            for match in re.findall(r"run `?pulumi (?:up|preview|refresh|destroy)\b|pulumi up --replace", path.read_text())]
    assert told == []


def test_make_up_checks_the_host_then_fetches_the_chart_then_checks_it():
    # Offline, the preflight table must appear before any download is tried: the missing tool is named first.
    lines = dry_run("up")

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    host = first("-m ops.preflight --stack dev")
    assert "--charts" not in lines[host]
    steps = [host, first("ops.upstream fetch --group chart"), first("ops.upstream verify --group chart"),
             first("pulumi stack select dev"), first("pulumi up --stack dev")]
    assert steps == sorted(steps), lines


def test_the_host_check_runs_before_the_venv_is_made():
    # -W: as if requirements.txt had changed, so the venv rule runs even where .venv is current.
    done = run_make("-n", "-W", "requirements.txt", "venv", cwd=ROOT, check=True)
    lines = done.stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if line.endswith("-m ops.hostcheck"))
    venv = next(i for i, line in enumerate(lines) if " -m venv " in line)
    assert check < venv


def make_without_pulumi(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`make ARGS` with an empty PATH (no pulumi) and a passphrase in the environment (so the Makefile needs no
    sha256sum to name the passphrase file)."""
    return run_make("--no-print-directory", *args, f"PYTHON={sys.executable}", cwd=ROOT,
                    env={"PATH": str(tmp_path), "HOME": str(tmp_path), "PULUMI_CONFIG_PASSPHRASE": ""})


def test_make_pulumi_cli_prints_the_one_install_line(tmp_path):
    # One hint everywhere, with the version and the PATH export (ops/hostcheck.py PULUMI_MISSING).
    from ops.hostcheck import PULUMI_MISSING

    done = make_without_pulumi(tmp_path, "pulumi-cli")
    assert done.returncode != 0 and done.stderr.splitlines()[0] == PULUMI_MISSING


@pytest.mark.parametrize(("target", "usage"), [
    ("kubeconfig", "usage: make kubeconfig TENANT=<tenant name> [ADMIN=1]"),
    ("secret", "usage: make secret STACK=dev KEY='<key path, e.g. management.kubeconfig>' FILE=<file>"),
])
def test_a_target_says_its_usage_before_the_prerequisites(tmp_path, target, usage):
    # Without its variables and without pulumi, the usage line comes first, not the pulumi install hint.
    done = make_without_pulumi(tmp_path, target)
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == usage
    assert "pulumi" not in done.stderr


@pytest.mark.parametrize("target", ["kubeconfig TENANT=alpha", "secret KEY=management.kubeconfig FILE=Makefile"])
def test_a_target_given_its_variables_checks_the_pulumi_cli_next(tmp_path, target):
    from ops.hostcheck import PULUMI_MISSING

    done = make_without_pulumi(tmp_path, *target.split())
    assert done.returncode != 0 and done.stderr.splitlines()[0] == PULUMI_MISSING


def test_make_e2e_checks_the_host_before_it_fetches_the_charts():
    # Offline, a host without Docker, kind or pulumi is told so, not that the chart site is unreachable.
    lines = dry_run("e2e")
    steps = [next(i for i, line in enumerate(lines) if text in line)
             for text in ("-m ops.preflight", "ops.upstream fetch --group chart", "-m pytest -m e2e")]
    assert steps == sorted(steps) and lines[steps[0]].endswith("-m ops.preflight"), lines


def test_make_backend_leaves_the_passphrase_file_to_ops_passphrase():
    # No shell branch of its own: ops.passphrase reads PULUMI_CONFIG_PASSPHRASE_FILE and refuses a legacy file.
    lines = dry_run("backend")
    assert ".venv/bin/python -m ops.passphrase --stack dev --state-dir .pulumi-state" in lines
    assert not [line for line in lines if "passphrase" in line and ("if [" in line or "echo" in line)]


@pytest.mark.parametrize(("variables", "source", "target"), [
    ((), "--stack dev", "build/dependency-graph.md"),
    (("TENANTS=3",), "--tenants 3", "build/dependency-graph-3.md"),
])
def test_make_graph_writes_under_build_never_into_docs(variables, source, target):
    (line,) = [line for line in dry_run("graph", *variables) if "ops.graph" in line]
    assert line.endswith(f"-m ops.graph {source} --mermaid {target}")


def test_only_make_docs_writes_the_docs_and_always_from_the_reference_stack():
    (graph, readme) = [line for line in dry_run("docs", "STACK=prod") if "ops.graph" in line or "readme" in line]
    assert graph.endswith("-m ops.graph --stack-file tests/fixtures/reference-stack.yaml "
                          "--mermaid docs/dependency-graph.md")
    assert readme.endswith("-m tests.support.readme")


def test_make_test_runs_whole_files_on_parallel_workers_with_a_pinned_xdist():
    (line,) = [line for line in dry_run("test") if " -m pytest" in line]
    # One worker per CPU; a file never splits across workers, so its module-scoped first `up` runs once.
    assert line.endswith("-m pytest -n auto --dist loadfile")
    pins = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert [pin for pin in pins if pin.startswith("pytest-xdist==")], "pytest -n needs pytest-xdist installed"
    (zero,) = [line for line in dry_run("test", "TEST_JOBS=0") if " -m pytest" in line]
    assert zero.endswith("-m pytest -n 0 --dist loadfile")
    # The product's tests alone: every test but the repository checks (pyproject.toml registers `repo`).
    (product,) = [line for line in dry_run("test-product") if " -m pytest" in line]
    assert product.endswith('-m pytest -n auto --dist loadfile -m "not repo"')


def test_a_make_under_make_test_job_count_answers_for_the_makefile_not_the_outer_command_line():
    # What `make test TEST_JOBS=0` (docs/development.md) hands every process under it (GNU make 4.3 exports the command line's
    # variables and lists them in MAKEFLAGS): a test's own `make -n test` must still see the Makefile's default.
    outer = {**os.environ, "MAKEFLAGS": " -- TEST_JOBS=0", "MAKELEVEL": "1", "TEST_JOBS": "0"}
    (line,) = [line for line in run_make("-n", "test", cwd=ROOT, env=outer, check=True).stdout.splitlines()
               if " -m pytest" in line]
    assert line.endswith("-m pytest -n auto --dist loadfile")
