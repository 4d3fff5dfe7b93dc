"""The production walkthrough of docs/real-clusters.md, command by command, on a fresh clone.

The commands are read from docs/real-clusters.md (tests/support/readme.py `shell_commands`), so the docs and the code
cannot drift: each runs in bash, as written, in a copy of the tracked files without .cache/charts (a fresh clone; the
shared virtualenv stands in for `make venv`). `pulumi` is a stub on PATH that records its command line, its
environment and its stdin, and writes a `secure:` placeholder where `pulumi config set --secret --path` would.
`make secret` runs for real. `make preview` / `make up` / `make verify` run as `make -n` (their recipes are
checked) and the Pulumi operation they end in runs on the simulator: an adopted cluster and SSH servers, with the
secrets exactly as the stub received them on stdin. Their chart step (`ops.upstream fetch`) needs the chart sites;
here the stand-in chart tree takes its place (tests/test_upstream.py tests the fetch itself).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import helm
from ops.preflight import check_stack_config, check_stack_secrets
from ops.registrations import stack_keys
from tests.support.charts import write_fake_charts
from tests.support.readme import shell_commands
from tests.support.sim import Lifecycle
from tests.support.sim.lab import adopt, lab_world
from tests.test_config_infrastructure import PRIVATE_KEY

pytestmark = pytest.mark.repo

ROOT = Path(__file__).resolve().parent.parent
SECTION, DOC = "Beyond one machine: real clusters and GPU servers", ROOT / "docs" / "real-clusters.md"
PULUMI_STUB = """\
#!{python}
import json, os, sys
argv = sys.argv[1:]
entry = {{"argv": argv, "tmpdir": os.environ.get("TMPDIR"),
          "passphrase_file": os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE"), "stdin": None}}
if argv[:2] == ["config", "set"]:
    entry["stdin"] = sys.stdin.read()
    if entry["stdin"].endswith("\\n"):
        entry["stdin"] = entry["stdin"][:-1]  # pulumi: cmdutil.RemoveTrailingNewline
    import re, yaml
    stack = argv[argv.index("--stack") + 1]
    key = next(a for a in argv[2:] if ":" in a and not a.startswith("-"))
    path = "Pulumi.%s.yaml" % stack
    document = yaml.safe_load(open(path)) or {{}}
    top, rest = re.match(r"([^.\\[]+)(.*)", key).groups()
    node, parts = document.setdefault("config", {{}}), [top] + re.findall(r"[^.\\[\\]]+|\\[\\d+\\]", rest)
    for part, following in zip(parts, parts[1:] + [None]):
        part = int(part[1:-1]) if part.startswith("[") else part
        if following is None:
            node[part] = {{"secure": "v1:stub"}}
        else:
            node = node[part] if isinstance(node, list) else node.setdefault(part, {{}})
    yaml.safe_dump(document, open(path, "w"), sort_keys=False)
with open(os.environ["WALKTHROUGH_LOG"], "a") as log:
    log.write(json.dumps(entry) + "\\n")
"""
# Each documented command runs with this prelude: `make` keeps its own targets' recipes honest, and stops short of
# the chart sites and the cluster for the targets that need them.
PRELUDE = """\
make() {
  printf '%s\\n' "$*" >>"$WALKTHROUGH_MAKE"
  case "$1" in
    secret) command make --no-print-directory -o .venv/.installed "$@" ;;
    *) command make --no-print-directory -n -o .venv/.installed "$@" >>"$WALKTHROUGH_RECIPES" ;;
  esac
}
"""
TENANT_PATH = re.compile(r"[^.\[\]]+|\[\d+\]")


def _set_path(config: dict[str, Any], path: str, value: str) -> None:
    parts = [int(p[1:-1]) if p.startswith("[") else p for p in TENANT_PATH.findall(path)]
    node: Any = config
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


@pytest.fixture
def clone(tmp_path):
    """A fresh clone: the tracked files, no .cache/charts, no state, no passphrase; the shared virtualenv."""
    project = tmp_path / "project"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        source = ROOT / name
        if name == "Pulumi.dev.yaml" or not source.is_file():
            continue
        target = project / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    (project / ".venv").symlink_to((ROOT / ".venv").resolve())
    return project


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("bash") is None, reason="needs GNU make and bash")
def test_the_documented_prod_walkthrough_runs_as_written_on_a_fresh_clone(clone, tmp_path, monkeypatch):
    home, bin_dir, logs = tmp_path / "home", tmp_path / "bin", tmp_path / "logs"
    for directory in (home / ".ssh", bin_dir, logs):
        directory.mkdir(parents=True)
    stub = bin_dir / "pulumi"
    stub.write_text(PULUMI_STUB.format(python=sys.executable))
    stub.chmod(0o755)
    # The machine the walkthrough reaches: the management cluster behind mgmt-admin.kubeconfig, and the servers.
    world = lab_world()
    example = adopt(world, stack_keys(clone / "Pulumi.prod.example.yaml"))
    kubeconfig = example["management"]["kubeconfig"]
    (clone / "mgmt-admin.kubeconfig").write_text(kubeconfig + "\n")
    (home / ".ssh" / "gpu-fleet").write_text(PRIVATE_KEY)
    log, made, recipes = logs / "pulumi.jsonl", logs / "make.txt", logs / "recipes.txt"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(home), "WALKTHROUGH_LOG": str(log),
           "WALKTHROUGH_MAKE": str(made), "WALKTHROUGH_RECIPES": str(recipes), "LANG": "C.UTF-8"}

    commands = shell_commands(SECTION, DOC)
    assert commands, "the docs' prod walkthrough has no commands"
    operations = []
    for command in commands:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", PRELUDE + command], cwd=clone, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
        # The walkthrough knows every command it finds; a new one must be taught here, not skipped.
        words = command.split("#", 1)[0].split()
        if words[0] == "make" and words[1] in ("preview", "up"):
            operations.append(words[1])
        else:
            assert words[0] in ("cp", "make", "for"), f"the walkthrough does not know this command: {command}"

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    # Every credential went in on stdin; none is on a command line or in a documented command (the shell history).
    secrets = [c for c in calls if c["argv"][:3] == ["config", "set", "--secret"]]
    assert {c["stdin"] for c in secrets} == {kubeconfig, PRIVATE_KEY.rstrip("\n")}
    for call in calls:
        for credential in (kubeconfig, PRIVATE_KEY.strip()):
            assert not any(credential.splitlines()[1] in arg for arg in call["argv"]), call["argv"]
    assert not any("$(cat" in command for command in commands)
    # With this stack's passphrase file, outside the project, mode 600 (make backend made it on first use).
    passphrases = {c["passphrase_file"] for c in calls}
    (passphrase,) = passphrases
    assert Path(passphrase).is_relative_to(home) and stat.S_IMODE(Path(passphrase).stat().st_mode) == 0o600
    # Pulumi.prod.yaml holds only `secure:` values for them, and preflight's stack checks pass on it.
    stack_file = yaml.safe_load((clone / "Pulumi.prod.yaml").read_text())
    assert check_stack_secrets("prod", stack_file).ok
    result = check_stack_config("prod", stack_file)
    assert result.ok, result.detail

    # `make preview` / `make up`: the charts first, then pulumi in a private TMPDIR (the kubeconfig file).
    text = recipes.read_text()
    for operation in operations:
        line = next(line for line in text.splitlines() if f"pulumi {operation} --stack prod" in line)
        assert 'TMPDIR="$tmp"' in line and "mktemp -d" in line, line
        before = text[:text.index(line)]
        assert "ops.upstream fetch --group chart" in before and "ops.upstream verify --group chart" in before
    assert operations[:2] == ["preview", "up"], operations

    # The same commands' Pulumi operations, on the simulator, with the config the walkthrough produced.
    config = stack_keys(clone / "Pulumi.prod.yaml")
    for call in secrets:
        key = next(a for a in call["argv"] if a.startswith("gpu-tenancy:")).removeprefix("gpu-tenancy:")
        _set_path(config, key, call["stdin"])
    assert config["management"]["kubeconfig"] == kubeconfig
    monkeypatch.setattr(helm, "PROJECT_DIR", clone)
    sim = Lifecycle(config, world=world, stack="prod", secret_keys=("management", "tenants"))
    # Before the chart step: one line, naming make charts (a bare `pulumi preview --stack prod` on a fresh clone).
    early = sim.preview(expect_error=True)
    assert not early.ok and "run `make charts`" in early.error.strip().splitlines()[-1]
    write_fake_charts(clone)  # what `ops.upstream fetch --group chart` in make preview writes
    for operation in operations:
        plan = sim.preview(expect_error=True) if operation == "preview" else sim.up(expect_error=True)
        assert plan.ok, plan.render()
    # No kind, no docker, no cache in the prod plan (the docs' promise).
    assert not [r.name for r in sim.engine.state.values() if r.type.startswith("docker:")]
    assert world.kind == {} and world.docker.containers == {}
    assert "ops.verify --stack prod" in text


def test_the_walkthrough_parser_keeps_a_loop_whole():
    text = textwrap.dedent("""\
        ## Steps

        ```sh
        # a comment
        cp a b   # copy
        for t in 0 1; do for w in 0 1; do
          make secret KEY="x[$t]" FILE=f
        done; done
        make up
        ```
        """)
    assert shell_commands("Steps", text=text) == [
        "cp a b   # copy", 'for t in 0 1; do for w in 0 1; do\n  make secret KEY="x[$t]" FILE=f\ndone; done', "make up"]
