"""Preflight: check this host can run a kind cluster plus several kindest/node workers.

Run by `make up` before `pulumi up`. Every failed check prints what is wrong
and the exact command that fixes it; the exit code is non-zero when any check
fails. The probes (PATH lookups, commands, /proc reads) are injectable so the
checks are unit-tested without Docker.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

# kind's "known issues" page recommends these for clusters with several nodes.
MIN_INOTIFY_WATCHES = 524288
MIN_INOTIFY_INSTANCES = 512
# kube-proxy in every tenant keeps kubeadm's conntrack.maxPerCore of 32768 and
# cannot raise the host's global table from inside a container (facts §5).
CONNTRACK_PER_CORE = 32768
CONNTRACK_FLOOR = 131072


@dataclass(frozen=True)
class Probes:
    """How the checks look at the host; tests substitute fakes."""

    which: Callable[[str], str | None]
    run: Callable[[Sequence[str]], tuple[int, str]]
    read: Callable[[str], str | None]
    cpu_count: Callable[[], int]


def _run(argv: Sequence[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return 127, str(error)
    return done.returncode, (done.stdout + done.stderr).strip()


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


HOST = Probes(which=shutil.which, run=_run, read=_read, cpu_count=lambda: os.cpu_count() or 1)


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _int_setting(probes: Probes, path: str) -> int | None:
    text = probes.read(path)
    try:
        return int(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def check_tool(probes: Probes, tool: str, install: str) -> CheckResult:
    path = probes.which(tool)
    if path:
        return CheckResult(f"{tool} on PATH", True, path)
    return CheckResult(f"{tool} on PATH", False, f"`{tool}` was not found on PATH", install)


def check_docker(probes: Probes) -> CheckResult:
    name = "Docker daemon answers"
    if not probes.which("docker"):
        return CheckResult(
            name, False, "the `docker` CLI is not on PATH",
            "install Docker Engine: https://docs.docker.com/engine/install/",
        )
    code, output = probes.run(["docker", "info", "--format", "{{.ServerVersion}}"])
    if code == 0 and output:
        return CheckResult(name, True, f"server {output.splitlines()[-1]}")
    if "permission denied" in output.lower():
        return CheckResult(
            name, False, f"docker refused this user: {output}",
            'sudo usermod -aG docker "$USER" && newgrp docker',
        )
    return CheckResult(
        name, False, f"`docker info` failed: {output or 'no answer'}",
        "sudo systemctl start docker",
    )


def check_inotify(probes: Probes) -> list[CheckResult]:
    results = []
    for key, minimum in (
        ("fs.inotify.max_user_watches", MIN_INOTIFY_WATCHES),
        ("fs.inotify.max_user_instances", MIN_INOTIFY_INSTANCES),
    ):
        value = _int_setting(probes, "/proc/sys/" + key.replace(".", "/"))
        if value is None:
            results.append(CheckResult(key, False, "could not read the setting",
                                       f"sudo sysctl -w {key}={minimum}"))
        elif value < minimum:
            results.append(CheckResult(
                key, False,
                f"is {value}, below {minimum}: several kind nodes fail with "
                "'too many open files'",
                f"sudo sysctl -w {key}={minimum} && "
                f"echo '{key} = {minimum}' | sudo tee /etc/sysctl.d/99-gpu-tenancy-{key.rsplit('.', 1)[1]}.conf",
            ))
        else:
            results.append(CheckResult(key, True, str(value)))
    return results


def check_swap(probes: Probes) -> CheckResult:
    text = probes.read("/proc/swaps")
    if text is None:
        return CheckResult("swap off", True, "/proc/swaps not readable; assuming no swap")
    devices = [line.split()[0] for line in text.splitlines()[1:] if line.strip()]
    if not devices:
        return CheckResult("swap off", True, "no swap devices")
    return CheckResult(
        "swap off", False,
        f"swap is on ({', '.join(devices)}): the tenant kubelets refuse to start with swap",
        "sudo swapoff -a   # and comment out swap lines in /etc/fstab to keep it off",
    )


def required_conntrack_max(cores: int) -> int:
    return max(CONNTRACK_PER_CORE * cores, CONNTRACK_FLOOR)


def check_conntrack(probes: Probes) -> CheckResult:
    name = "net.netfilter.nf_conntrack_max"
    needed = required_conntrack_max(probes.cpu_count())
    value = _int_setting(probes, "/proc/sys/net/netfilter/nf_conntrack_max")
    if value is None:
        return CheckResult(
            name, False,
            "the conntrack table is not loaded, so kube-proxy in the tenants would try "
            "(and fail) to size it from inside a container",
            f"sudo modprobe nf_conntrack && sudo sysctl -w {name}={needed}",
        )
    if value < needed:
        return CheckResult(
            name, False,
            f"is {value}, below {needed} (32768 x {probes.cpu_count()} cores, at least "
            f"{CONNTRACK_FLOOR}): kube-proxy in every tenant cannot raise it from inside "
            "its container and crash-loops",
            f"sudo sysctl -w {name}={needed} && "
            f"echo '{name} = {needed}' | sudo tee /etc/sysctl.d/99-gpu-tenancy-conntrack.conf",
        )
    return CheckResult(name, True, str(value))


def run_checks(probes: Probes = HOST, local_lab: bool = True) -> list[CheckResult]:
    """All checks; without a local lab (existing cluster, SSH workers only) just the Pulumi CLI."""
    pulumi_cli = check_tool(probes, "pulumi", "curl -fsSL https://get.pulumi.com | sh")
    if not local_lab:
        return [pulumi_cli]
    return [
        check_docker(probes),
        check_tool(probes, "kind",
                   "go install sigs.k8s.io/kind@v0.31.0   # or see https://kind.sigs.k8s.io/docs/user/quick-start/#installation"),
        pulumi_cli,
        *check_inotify(probes),
        check_swap(probes),
        check_conntrack(probes),
    ]


SECRET_LEAVES = ("kubeconfig", "privateKey")


def plaintext_secrets(node: object, path: str = "") -> list[str]:
    """Key paths of credentials a stack file holds in plain text instead of as `secure:` values."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            if key in SECRET_LEAVES and isinstance(value, str):
                found.append(child)
            else:
                found.extend(plaintext_secrets(value, child))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(plaintext_secrets(value, f"{path}[{index}]"))
    return found


def check_stack_secrets(stack: str, stack_config: dict) -> CheckResult:
    name = f"secrets of Pulumi.{stack}.yaml encrypted"
    config = {key.removeprefix("gpu-tenancy:"): value for key, value in (stack_config.get("config") or {}).items()}
    leaks = plaintext_secrets(config)
    if not leaks:
        return CheckResult(name, True, "no credential in plain text")
    return CheckResult(
        name, False,
        f"{', '.join(leaks)} in plain text: anyone with the file has the credential",
        " && ".join(f"pulumi config set --secret --path 'gpu-tenancy:{leak}' \"$(cat <file>)\"" for leak in leaks),
    )


def needs_local_lab(stack_config: dict) -> bool:
    """Whether a stack file's `gpu-tenancy` config builds anything on this host (kind cluster or containers)."""
    config = stack_config.get("config") or {}
    management = config.get("gpu-tenancy:management") or {}
    if not isinstance(management, dict) or "kubeconfig" not in management:
        return True
    tenants = config.get("gpu-tenancy:tenants") or []
    return any(
        "ssh" not in worker
        for tenant in tenants if isinstance(tenant, dict)
        for worker in tenant.get("workers") or [] if isinstance(worker, dict)
    )


def render(results: Sequence[CheckResult]) -> str:
    lines = []
    for result in results:
        mark = "ok  " if result.ok else "FAIL"
        lines.append(f"[{mark}] {result.name}: {result.detail}")
        if not result.ok and result.fix:
            lines.append(f"       fix: {result.fix}")
    failed = sum(not r.ok for r in results)
    lines.append(
        "preflight passed" if not failed else f"preflight failed: {failed} check(s) above need fixing"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, probes: Probes = HOST) -> int:
    parser = argparse.ArgumentParser(prog="make preflight", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", help="check only what Pulumi.<stack>.yaml needs on this host")
    args = parser.parse_args(argv)
    local_lab = True
    stack_checks: list[CheckResult] = []
    if args.stack:
        stack_file = Path(__file__).resolve().parent.parent / f"Pulumi.{args.stack}.yaml"
        if stack_file.exists():
            stack_config = yaml.safe_load(stack_file.read_text()) or {}
            local_lab = needs_local_lab(stack_config)
            stack_checks.append(check_stack_secrets(args.stack, stack_config))
    if not local_lab:
        print(f"stack {args.stack}: existing management cluster and SSH workers only; no local lab to check")
    results = [*stack_checks, *run_checks(probes, local_lab)]
    print(render(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
