"""The host check `make` runs with the system python3 before it creates .venv (ops/hostcheck.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from ops import hostcheck
from ops.hostcheck import HostProbes, main, missing, report

SOURCE = Path(hostcheck.__file__)


def probes(tools=("make", "curl"), modules=("venv", "ensurepip"), version=(3, 12, 3)):
    return HostProbes(
        which=lambda name: f"/usr/bin/{name}" if name in tools else None,
        has_module=lambda name: name in modules,
        version=lambda: version,
    )


def test_a_complete_host_passes_in_one_line(capsys):
    assert main([], probes()) == 0
    assert capsys.readouterr().out == "host check passed: Python, venv with ensurepip, make, curl\n"


def test_stock_ubuntu_2404_lacks_ensurepip_and_make():
    # Debian and Ubuntu ship ensurepip only in python3.X-venv; a stock 24.04 has neither it nor make.
    found = missing(probes(tools=("curl",), modules=("venv",)))
    lines = report(found)
    assert lines == [
        "missing: ensurepip (python3 -m venv needs it to put pip into .venv; Debian and Ubuntu ship it separately): "
        "sudo apt-get install python3.12-venv",
        "missing: make (every command of this project is a make target): sudo apt-get install make",
        "host check failed: sudo apt-get install python3.12-venv make   # then run make again",
    ]


def test_the_venv_package_follows_the_interpreter_version():
    (item,) = missing(probes(modules=(), version=(3, 11, 2)))
    assert item.what == "the venv module" and item.package == "python3.11-venv"


def test_missing_curl_is_named_with_its_package():
    (item,) = missing(probes(tools=("make",)))
    assert item.line().endswith("): sudo apt-get install curl")


def test_an_old_python_is_the_only_line_since_the_venv_checks_would_be_about_it():
    found = missing(probes(tools=(), modules=(), version=(3, 8, 10)))
    assert len(found) == 1
    assert "this python3 is 3.8.10" in found[0].line() and "PYTHON=python3.12" in found[0].line()
    assert found[0].package == "python3.12 python3.12-venv"


def test_failures_go_to_stderr_with_exit_code_1(capsys):
    assert main([], probes(tools=("make",))) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "missing: curl" in captured.err


def test_it_runs_with_the_standard_library_only():
    tree = ast.parse(SOURCE.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names


def test_it_parses_as_python_36_so_an_old_interpreter_gets_the_message():
    ast.parse(SOURCE.read_text(), feature_version=(3, 6))
    assert "from __future__" not in SOURCE.read_text()


def test_it_runs_as_a_module_of_the_system_python():
    done = subprocess.run([sys.executable, "-S", "-m", "ops.hostcheck"], cwd=SOURCE.parent.parent,
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1) and (done.stdout + done.stderr).startswith(("host check", "missing:"))
