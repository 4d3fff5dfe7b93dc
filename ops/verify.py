"""`make verify`: check a running platform, tenant by tenant, at any time.

Reads the stack outputs (`pulumi stack output --json --show-secrets`, or a saved
copy with --outputs-file), talks to the management cluster and to every tenant
through `components.kube` (kubeconfigs, certificates and keys stay in
memory), and prints one table per tenant, then one for the lab's image mirror.
A row is OK, FAIL, or SKIP when there was nothing it could try (printed with the
reason; it neither holds nor fails). Exit code: 0 when no check fails, 1 when any
fails, 2 when the outputs cannot be read or verify itself stops on an unexpected
error. The subprocess runner, the API connector and the probes' clock are
injectable, so everything is unit-tested without a cluster.
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

from components import kube
from components.kube import Connect, Json, KubeClient
from ops.hostcheck import PULUMI_MISSING
from ops.verify_checks import (
    FAIL,
    SKIP,
    CheckResult,
    Platform,
    ProbeRequest,
    TenantTarget,
    Waiting,
    calico_node_image,
    verify_tenant,
)

ROOT = Path(__file__).resolve().parent.parent
REQUIRED_OUTPUTS = ("managementKubeconfig", "tenantKubeconfigs", "tenantAdminKubeconfigs", "tenants", "plan")
# What `pulumi stack output --show-secrets` was not asked for prints instead of a secret.
HIDDEN_SECRET = "[secret]"
# The pull-through caches' debug server (distribution's expvar JSON), which listens on each cache's loopback only
# (components/management/image_cache.py DEBUG_ADDRESS).
MIRROR_DEBUG_URL = "http://127.0.0.1:5001/debug/vars"
MIRROR_TIMEOUT = 15
MIRROR_TITLE = "image mirror"

Run = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class TenantReport:
    """One table of the output: a tenant's check results (or, with is_tenant False, the image mirror's)."""

    tenant: str
    title: str
    results: list[CheckResult]
    is_tenant: bool = True


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
            f"{PULUMI_MISSING}; or pass --outputs-file <saved outputs.json>"
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
        return kube.parse(text if isinstance(text, str) else "")
    except kube.KubeconfigError as error:
        raise OutputsError(f"{what} {error.problem}") from None


def _string_list(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(str(item) for item in value)


def _worker_networks(outputs: Json, planned: Json) -> tuple[str, ...]:
    """Where a tenant's workers connect from: its own workerCidrs (and the kind network its container workers sit
    on, in the lab), else the shared outputs.workerNetworks; () when the outputs do not say."""
    own = _string_list(planned.get("workerCidrs")) or ()
    kind = outputs.get("kindSubnet")
    if own:
        return tuple(dict.fromkeys([*([str(kind)] if kind else []), *own]))
    return _string_list(outputs.get("workerNetworks")) or ()


def platform_from_outputs(outputs: Json) -> tuple[Json, Platform]:
    """The management kubeconfig and what to check; a tenant the outputs only half describe is `incomplete`."""
    missing = [key for key in REQUIRED_OUTPUTS if key not in outputs]
    if missing:
        raise OutputsError(f"the stack outputs lack {', '.join(missing)}: run `make up` to finish the stack")
    for key in ("plan", "tenants", "tenantKubeconfigs", "tenantAdminKubeconfigs"):
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
    described = outputs["tenants"]
    tables = {key: outputs[key] for key in ("tenantAdminKubeconfigs", "tenantKubeconfigs")}
    tenants: dict[str, TenantTarget] = {}
    incomplete: dict[str, str] = {}
    for name in [*planned, *(t for t in described if t not in planned)]:
        if name not in planned:
            incomplete[name] = f"{name} is in the output `tenants` but not in the plan (outputs of an older run?)"
            continue
        lacking = [key for key, table in (("tenants", described), *tables.items()) if name not in table]
        if lacking:
            incomplete[name] = f"{name} is planned but missing from the output {' and '.join(lacking)}"
            continue
        try:
            admin = _kubeconfig(tables["tenantAdminKubeconfigs"][name], f"tenantAdminKubeconfigs.{name}")
            user = _kubeconfig(tables["tenantKubeconfigs"][name], f"tenantKubeconfigs.{name}")
        except OutputsError as error:
            incomplete[name] = str(error)
            continue
        description = described[name] or {}
        tenants[name] = TenantTarget(
            name=name,
            namespace=description.get("namespace") or name,
            control_plane=description.get("controlPlane") or name,
            kubeconfig=admin,
            workers=(planned[name] or {}).get("workers") or {},
            user_kubeconfig=user,
            endpoint=description.get("endpoint"),
            source_ranges=_string_list(description.get("sourceRanges")),
            worker_networks=_worker_networks(outputs, planned[name] or {}),
            data_store=description.get("dataStore"),
            own_networks=tuple(str(planned[name][key]) for key in ("podCidr", "serviceCidr")
                               if (planned[name] or {}).get(key)),
        )
    if not tenants and not incomplete:
        raise OutputsError("the plan has no tenants: nothing to verify")
    calico = (plan.get("versions") or {}).get("calico")
    platform = Platform(
        management_cluster=plan.get("managementCluster") or "gpu-tenancy",
        gpu_mode=plan.get("gpuMode") or "mock",
        probe=probe,
        tenants=tenants,
        incomplete=incomplete,
        **({"network_probe_image": calico_node_image(str(calico))} if calico else {}),
    )
    return _kubeconfig(outputs["managementKubeconfig"], "managementKubeconfig"), platform


# --- checking ---------------------------------------------------------------------------------


def verify_platform(platform: Platform, management: KubeClient, connect: Connect,
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


# --- the image mirror -------------------------------------------------------------------------


def _counts(metrics: Any) -> tuple[int, int, int, int]:
    """(Requests, Hits, Misses, BytesPulled) of one expvar Metrics struct (registry/proxy/proxymetrics.go)."""
    if not isinstance(metrics, dict):
        raise ValueError("no proxy counters")
    try:
        requests, hits, misses, pulled = (int(metrics.get(key) or 0)
                                          for key in ("Requests", "Hits", "Misses", "BytesPulled"))
    except (TypeError, ValueError):
        raise ValueError(f"unreadable proxy counters {metrics!r}") from None
    return requests, hits, misses, pulled


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


def mirror_counters(expvar: str) -> dict[str, tuple[int, int, int, int]]:
    """{"blobs": ..., "manifests": ...} from distribution's /debug/vars JSON; ValueError when it has none."""
    try:
        document = json.loads(expvar)
    except ValueError:
        raise ValueError("the debug server did not answer JSON") from None
    registry = document.get("registry") if isinstance(document, dict) else None
    proxy = registry.get("proxy") if isinstance(registry, dict) else None
    if not isinstance(proxy, dict):
        raise ValueError("no registry.proxy counters (is it running in proxy mode?)")
    return {kind: _counts(proxy.get(kind)) for kind in ("blobs", "manifests")}


def check_mirror_cache(registry: str, cache: Any, run: Run) -> CheckResult:
    """Hits and misses of one pull-through cache, read inside its container (the debug port is not published)."""
    container = str((cache or {}).get("container") or "") if isinstance(cache, dict) else ""
    name = f"cache {registry}"
    if not container:
        return CheckResult(name, False, "the output imageMirror names no container for it",
                           "run `make up` to refresh the stack outputs")
    fix = f"docker start {container} (or `make up`); docker logs {container}"
    argv = ["docker", "exec", container, "wget", "-qO-", MIRROR_DEBUG_URL]
    try:
        done = run(argv, capture_output=True, text=True, check=False, timeout=MIRROR_TIMEOUT)
    except FileNotFoundError:
        return CheckResult(name, False, "the `docker` CLI is not on PATH: cannot read the cache's counters",
                           "run verify on the Docker host of the lab")
    except subprocess.TimeoutExpired:
        return CheckResult(name, False, f"{container} did not answer within {MIRROR_TIMEOUT} s", fix)
    if done.returncode != 0:
        why = " ".join((done.stderr or "").split())[-300:] or f"exit code {done.returncode}"
        return CheckResult(name, False, f"{container} is not running or its debug server does not answer ({why}) "
                                        "→ nodes pull from the internet again", fix)
    try:
        counters = mirror_counters(done.stdout)
    except ValueError as error:
        return CheckResult(name, False, f"{container} answered without counters: {error}", fix)
    parts = []
    for kind, (requests, hits, misses, pulled) in counters.items():
        parts.append(f"{kind} {hits} hits / {misses} misses of {requests} requests, {_size(pulled)} from upstream")
    return CheckResult(name, True, f"{container}: {'; '.join(parts)} (in-memory counters, since the container "
                                   "last started)")


def verify_mirror(image_mirror: Any, run: Run) -> TenantReport | None:
    """The image mirror's table, or None when the stack runs no mirror (output absent or null)."""
    if not image_mirror:
        return None
    if not isinstance(image_mirror, dict):
        results = [CheckResult("image mirror outputs", False, "the output imageMirror is not a map",
                               "run `make up` to refresh the stack outputs")]
    else:
        results = [check_mirror_cache(registry, cache, run) for registry, cache in image_mirror.items()]
    return TenantReport(MIRROR_TITLE, f"{MIRROR_TITLE} (pull-through caches on the kind network)", results,
                        is_tenant=False)


# --- rendering --------------------------------------------------------------------------------


def render_table(report: TenantReport) -> str:
    width = max(len("CHECK"), *(len(r.name) for r in report.results))
    indent = " " * (width + 2 + 6 + 2)
    lines = [report.title, f"{'CHECK':<{width}}  {'STATUS':<6}  DETAIL"]
    for result in report.results:
        lines.append(f"{result.name:<{width}}  {result.status:<6}  {result.detail}")
        if not result.ok and result.fix:
            lines.append(f"{indent}fix: {result.fix}")
    return "\n".join(lines)


def _per_report(reports: Sequence[TenantReport], status: str) -> tuple[int, str]:
    counts = {report.tenant: sum(r.status == status for r in report.results) for report in reports}
    return sum(counts.values()), ", ".join(f"{tenant}: {count}" for tenant, count in counts.items() if count)


def render_summary(reports: Sequence[TenantReport]) -> str:
    total = sum(len(report.results) for report in reports)
    failures, failed_where = _per_report(reports, FAIL)
    skips, skipped_where = _per_report(reports, SKIP)
    skipped = f", {skips} skipped ({skipped_where})" if skips else ""
    if not failures:
        tenants = sum(report.is_tenant for report in reports)
        extra = "".join(f" and the {report.tenant}" for report in reports if not report.is_tenant)
        checks = f"{total - skips} checks OK{skipped}" if skips else f"all {total} checks OK"
        return f"verify passed: {checks} in {tenants} tenant(s){extra}"
    return f"verify failed: {failures} of {total} checks failed ({failed_where}){skipped}"


# --- command line -----------------------------------------------------------------------------


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ops.verify", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev", help="Pulumi stack to read the outputs of (default: dev)")
    parser.add_argument("--outputs-file", help="read saved `pulumi stack output --json --show-secrets` instead")
    parser.add_argument("--probe-timeout", type=float, default=60.0,
                        help="seconds to wait for the GPU probe to get a GPU, and for the network probes to "
                             "start (default: 60)")
    return parser.parse_args(argv)


def _unexpected(error: Exception) -> str:
    """One line for an error verify did not foresee (a malformed output, a bug): its type and first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = f": {lines[0][:200]}" if lines else ""
    return (f"verify: stopped by an unexpected {type(error).__name__}{said} (malformed stack outputs? run `make up`, "
            "then verify again)")


def _verify(args: argparse.Namespace, run: Run, connect: Connect, waiting: Waiting) -> int:
    try:
        outputs = (read_outputs_file(args.outputs_file) if args.outputs_file
                   else read_stack_outputs(args.stack, run))
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
    mirror = verify_mirror(outputs.get("imageMirror"), run)
    if mirror is not None:
        reports.append(mirror)
        print(render_table(mirror) + "\n", flush=True)
    print(render_summary(reports))
    return 1 if any(r.failed for report in reports for r in report.results) else 0


def main(
    argv: Sequence[str] | None = None,
    *,
    run: Run = subprocess.run,
    connect: Connect = kube.connect,
    waiting: Waiting | None = None,
) -> int:
    """0: no check failed; 1: a check failed; 2: the outputs are unusable or verify stopped on an unexpected error."""
    args = _arguments(argv)
    waiting = waiting or Waiting(timeout=args.probe_timeout)
    opened: list[KubeClient] = []

    def connect_tracked(kubeconfig: Json) -> KubeClient:
        api = connect(kubeconfig)
        opened.append(api)
        return api

    try:
        return _verify(args, run, connect_tracked, waiting)
    except Exception as error:  # 1 means "a check failed": anything else unforeseen is exit 2, in one line
        print(_unexpected(error), file=sys.stderr)
        return 2
    finally:
        # The clients' certificates and keys live in memory files: release them all.
        for api in opened:
            api.close()


if __name__ == "__main__":
    sys.exit(main())
