"""`make verify`: check a running platform, tenant by tenant, at any time.

Reads the stack outputs (`pulumi stack output --json --show-secrets`, or a saved
copy with --outputs-file), talks to the management cluster and to every tenant
with the official `kubernetes` client (kubeconfigs stay in memory), and prints
one table per tenant. Exit code: 0 when every check holds, 1 when any fails,
2 when the outputs cannot be read. The subprocess runner, the API connector and
the probe's clock are injectable, so everything is unit-tested without a cluster.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools import verify_api
from tools.preflight import CheckResult
from tools.verify_api import Connect, Json
from tools.verify_checks import Platform, ProbeRequest, TenantTarget, Waiting, verify_tenant

ROOT = Path(__file__).resolve().parent.parent
REQUIRED_OUTPUTS = ("managementKubeconfig", "tenantKubeconfigs", "tenants", "plan")
# What `pulumi stack output --show-secrets` was not asked for prints instead of a secret.
HIDDEN_SECRET = "[secret]"

Run = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class TenantReport:
    """One table of the output: a tenant's check results."""

    tenant: str
    title: str
    results: list[CheckResult]


class OutputsError(Exception):
    """The stack outputs are missing or unusable; nothing can be checked."""


# --- reading the outputs ----------------------------------------------------------------------


def _parse_outputs(text: str, source: str) -> Json:
    try:
        outputs = json.loads(text)
    except ValueError as error:
        raise OutputsError(f"{source} is not JSON ({error})") from None
    if not isinstance(outputs, dict) or not outputs:
        raise OutputsError(f"{source} has no outputs: run `make up` first")
    return outputs


def read_stack_outputs(stack: str, run: Run = subprocess.run, cwd: Path = ROOT, show_secrets: bool = True) -> Json:
    argv = ["pulumi", "stack", "output", "--json", *(["--show-secrets"] if show_secrets else []), "--stack", stack]
    try:
        done = run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise OutputsError(
            "the `pulumi` CLI is not on PATH: install it (curl -fsSL https://get.pulumi.com | sh) "
            "or pass --outputs-file <saved outputs.json>"
        ) from None
    if done.returncode != 0:
        # stdout may carry decrypted secrets: only stderr is shown.
        message = " ".join((done.stderr or "").split())[-600:] or f"exit code {done.returncode}"
        raise OutputsError(
            f"`pulumi stack output --stack {stack}` failed: {message} (run it from the project root with the "
            "stack's passphrase; `make verify` sets both)"
        )
    return _parse_outputs(done.stdout, f"stack {stack!r}")


def read_outputs_file(path: str | Path) -> Json:
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise OutputsError(f"cannot read {path}: {error.strerror or error}") from None
    return _parse_outputs(text, str(path))


def _kubeconfig(text: Any, what: str) -> Json:
    if text == HIDDEN_SECRET:
        raise OutputsError(f"{what} is hidden: save the outputs with `pulumi stack output --json --show-secrets`")
    try:
        kubeconfig = yaml.safe_load(text) if isinstance(text, str) else None
    except yaml.YAMLError as error:
        raise OutputsError(f"{what} is not YAML ({error})") from None
    if not isinstance(kubeconfig, dict):
        raise OutputsError(f"{what} is not a kubeconfig")
    return kubeconfig


def platform_from_outputs(outputs: Json) -> tuple[Json, Platform]:
    """The management kubeconfig and what to check; a tenant the outputs only half describe is `incomplete`."""
    missing = [key for key in REQUIRED_OUTPUTS if key not in outputs]
    if missing:
        raise OutputsError(f"the stack outputs lack {', '.join(missing)}: run `make up` to finish the stack")
    for key in ("plan", "tenants", "tenantKubeconfigs"):
        if outputs[key] == HIDDEN_SECRET:
            raise OutputsError(f"{key} is hidden: save the outputs with `pulumi stack output --json --show-secrets`")
        if not isinstance(outputs[key], dict):
            raise OutputsError(f"the output {key} is not a map: run `make up` to refresh the stack outputs")
    plan = outputs["plan"]
    smoke = plan.get("smokeTest") or {}
    try:
        probe = ProbeRequest(gpus=int(smoke["gpus"]), memory_mib=int(smoke["memoryMiB"]), cores=int(smoke["cores"]))
    except (KeyError, TypeError, ValueError):
        raise OutputsError("plan.smokeTest needs gpus, memoryMiB and cores") from None
    planned = plan.get("tenants") or {}
    described, kubeconfigs = outputs["tenants"], outputs["tenantKubeconfigs"]
    tenants: dict[str, TenantTarget] = {}
    incomplete: dict[str, str] = {}
    for name in [*planned, *(t for t in described if t not in planned)]:
        if name not in planned:
            incomplete[name] = f"{name} is in the output `tenants` but not in the plan (outputs of an older run?)"
        elif name not in described or name not in kubeconfigs:
            lacking = [key for key, table in (("tenants", described), ("tenantKubeconfigs", kubeconfigs))
                       if name not in table]
            incomplete[name] = f"{name} is planned but missing from the output {' and '.join(lacking)}"
        else:
            try:
                kubeconfig = _kubeconfig(kubeconfigs[name], f"tenantKubeconfigs.{name}")
            except OutputsError as error:
                incomplete[name] = str(error)
                continue
            tenants[name] = TenantTarget(
                name=name,
                namespace=described[name].get("namespace") or name,
                control_plane=described[name].get("controlPlane") or name,
                kubeconfig=kubeconfig,
                workers=(planned[name] or {}).get("workers") or {},
            )
    if not tenants and not incomplete:
        raise OutputsError("the plan has no tenants: nothing to verify")
    platform = Platform(
        management_cluster=plan.get("managementCluster") or "gpu-tenancy",
        gpu_mode=plan.get("gpuMode") or "mock",
        probe=probe,
        tenants=tenants,
        incomplete=incomplete,
    )
    return _kubeconfig(outputs["managementKubeconfig"], "managementKubeconfig"), platform


# --- checking ---------------------------------------------------------------------------------


def verify_platform(platform: Platform, management: verify_api.KubeApi, connect: Connect,
                    waiting: Waiting) -> Iterable[TenantReport]:
    """One table per tenant, in plan order, yielded as each tenant finishes."""
    for name in [*platform.tenants, *platform.incomplete]:
        if name in platform.incomplete:
            yield TenantReport(name, name, [CheckResult(
                "stack outputs", False, platform.incomplete[name] + " → this tenant cannot be checked",
                "run `make up` so the stack outputs describe every tenant",
            )])
        else:
            tenant = platform.tenants[name]
            yield TenantReport(name, f"{name} (management namespace {tenant.namespace})",
                               verify_tenant(platform, tenant, management, connect, waiting))


# --- rendering --------------------------------------------------------------------------------


def render_table(report: TenantReport) -> str:
    width = max(len("CHECK"), *(len(r.name) for r in report.results))
    indent = " " * (width + 2 + 6 + 2)
    lines = [report.title, f"{'CHECK':<{width}}  {'STATUS':<6}  DETAIL"]
    for result in report.results:
        lines.append(f"{result.name:<{width}}  {'OK' if result.ok else 'FAIL':<6}  {result.detail}")
        if not result.ok and result.fix:
            lines.append(f"{indent}fix: {result.fix}")
    return "\n".join(lines)


def render_summary(reports: Sequence[TenantReport]) -> str:
    total = sum(len(report.results) for report in reports)
    failed = {report.tenant: sum(not r.ok for r in report.results) for report in reports}
    failures = sum(failed.values())
    if not failures:
        return f"verify passed: all {total} checks OK in {len(reports)} tenant(s)"
    where = ", ".join(f"{tenant}: {count}" for tenant, count in failed.items() if count)
    return f"verify failed: {failures} of {total} checks failed ({where})"


def render_report(reports: Sequence[TenantReport]) -> str:
    return "\n\n".join([*(render_table(report) for report in reports), render_summary(reports)])


# --- command line -----------------------------------------------------------------------------


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.verify", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev", help="Pulumi stack to read the outputs of (default: dev)")
    parser.add_argument("--outputs-file", help="read saved `pulumi stack output --json --show-secrets` instead")
    parser.add_argument("--probe-timeout", type=float, default=60.0,
                        help="seconds to wait for the probe pod to get a GPU (default: 60)")
    return parser.parse_args(argv)


def main(
    argv: Sequence[str] | None = None,
    *,
    run: Run = subprocess.run,
    connect: Connect = verify_api.connect,
    waiting: Waiting | None = None,
) -> int:
    args = _arguments(argv)
    waiting = waiting or Waiting(timeout=args.probe_timeout)
    try:
        outputs = read_outputs_file(args.outputs_file) if args.outputs_file else read_stack_outputs(args.stack, run)
        management_kubeconfig, platform = platform_from_outputs(outputs)
        try:
            management = connect(management_kubeconfig)
        except ValueError as error:
            raise OutputsError(f"managementKubeconfig: {error}") from None
    except OutputsError as error:
        print(f"verify: {error}", file=sys.stderr)
        return 2
    reports: list[TenantReport] = []
    for report in verify_platform(platform, management, connect, waiting):
        reports.append(report)
        print(render_table(report) + "\n", flush=True)
    print(render_summary(reports))
    return 0 if all(r.ok for report in reports for r in report.results) else 1


if __name__ == "__main__":
    sys.exit(main())
