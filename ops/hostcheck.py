"""What the host needs before `make` can build .venv: standard library only, run by the system `python3`.

`make` runs this before it creates the virtual environment (the venv rule of the Makefile), so a stock Ubuntu
24.04 host learns what to install instead of stopping at `python3 -m venv`:

- Python >= 3.10 for the program and its pinned dependencies;
- `venv` and `ensurepip`: Debian and Ubuntu ship ensurepip only in `python3.X-venv`, without which
  `python3 -m venv` fails ("ensurepip is not available");
- `make` (absent on a stock Ubuntu server or desktop; needed to run this from `make` at all, listed for the
  docs' sake and for `python3 -m ops.hostcheck` run by hand);
- `curl`, which the install commands preflight prints (kind, the Pulumi CLI) use.

Each missing thing is one line with the apt package that provides it; the exit code is 1 when any is missing.
Docker, kind, the Pulumi CLI and the sysctls are checked later by `make preflight` (ops/preflight.py), which
needs the venv. This file keeps to syntax old interpreters can parse, so a Python 3.6 still gets the message.

    python3 -m ops.hostcheck           # the checks
    python3 -m ops.hostcheck pulumi    # the Pulumi CLI install line, on stderr (the Makefile's pulumi-cli)
"""

import importlib.util
import shutil
import sys

MIN_PYTHON = (3, 10)

# The Pulumi CLI release the project is tested with, and the one install line every command prints for it:
# preflight, the Makefile's pulumi-cli (`python3 -m ops.hostcheck pulumi`), make status/verify/kubeconfig.
# get.pulumi.com installs into ~/.pulumi/bin and leaves this shell's PATH as it was, hence the export.
PULUMI_RELEASE = "3.272.0"
PULUMI_INSTALL = (
    "curl -fsSL https://get.pulumi.com | sh -s -- --version " + PULUMI_RELEASE + " && "
    'export PATH="$HOME/.pulumi/bin:$PATH"'
)
PULUMI_MISSING = "the pulumi CLI is not on PATH: " + PULUMI_INSTALL

class Missing:
    """One thing the host lacks: what, why, and the apt package that provides it."""

    def __init__(self, what, why, package):
        self.what, self.why, self.package = what, why, package

    def line(self):
        return f"missing: {self.what} ({self.why}): sudo apt-get install {self.package}"


class HostProbes:
    """How the checks look at the host; tests substitute fakes."""

    def __init__(self, which=shutil.which, has_module=None, version=None):
        self.which = which
        self.has_module = has_module or (lambda name: importlib.util.find_spec(name) is not None)
        self.version = version or (lambda: tuple(sys.version_info[:3]))


def missing(probes=None):
    """Everything the host lacks before `make` can create .venv, in the order it would fail."""
    probes = probes or HostProbes()
    version = probes.version()
    found = []
    if tuple(version[:2]) < MIN_PYTHON:
        found.append(Missing(
            "Python >= {}.{}".format(*MIN_PYTHON),
            "this python3 is {}; then run make with PYTHON=python3.12".format(".".join(map(str, version))),
            "python3.12 python3.12-venv",
        ))
        return found  # the venv checks below would be about the wrong interpreter
    venv_package = f"python{version[0]}.{version[1]}-venv"
    if not probes.has_module("venv"):
        found.append(Missing("the venv module", "python3 -m venv creates .venv", venv_package))
    elif not probes.has_module("ensurepip"):
        found.append(Missing(
            "ensurepip", "python3 -m venv needs it to put pip into .venv; Debian and Ubuntu ship it separately",
            venv_package,
        ))
    if not probes.which("make"):
        found.append(Missing("make", "every command of this project is a make target", "make"))
    if not probes.which("curl"):
        found.append(Missing("curl", "the kind and Pulumi CLI install commands use it", "curl"))
    return found


def report(found):
    """The lines `make` prints: one per missing thing and one install command, or one line saying all is there."""
    if not found:
        return ["host check passed: Python, venv with ensurepip, make, curl"]
    packages = " ".join(dict.fromkeys(package for item in found for package in item.package.split()))
    return [item.line() for item in found] + [
        f"host check failed: sudo apt-get install {packages}   # then run make again"
    ]


def main(argv=None, probes=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["pulumi"]:
        print(PULUMI_MISSING, file=sys.stderr)
        return 1
    if argv:
        print("usage: python3 -m ops.hostcheck [pulumi]", file=sys.stderr)
        return 2
    found = missing(probes)
    for line in report(found):
        print(line, file=sys.stderr if found else sys.stdout)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
