"""`make verify`: check a running platform, tenant by tenant, at any time.

Reads the stack outputs (`pulumi stack output --json --show-secrets`, or a saved
copy with --outputs-file), talks to the management cluster and to every tenant
through `components.kube` (kubeconfigs, certificates and keys stay in
memory), and prints one table per tenant, then one for the lab's image mirror.
A row is OK, FAIL, or SKIP when there was nothing it could try (printed with the
reason; it neither holds nor fails). Exit code: 0 when no check fails, 1 when any
fails, 2 when the outputs cannot be read or verify itself stops on an unexpected
error, 130 on Ctrl-C. With --disruptive (`make verify DISRUPTIVE=1 [TENANT=<name>]`) it also cuts one
tenant's Konnectivity tunnel and restores it (ops/verify_disrupt.py). The subprocess runner, the API connector
and the probes' clock are injectable, so everything is unit-tested without a cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components import kube
from components.kube import Connect, Json, KubeClient
from components.management import image_cache
from ops.hostcheck import PULUMI_MISSING
from ops.verify_checks import (
    FAIL,
    NOT_ENFORCED,
    SKIP,
    CheckResult,
    ImageCache,
    Platform,
    ProbeRequest,
    TenantTarget,
    Waiting,
    calico_node_image,
    skip,
    split_host_port,
    verify_tenant,
)
from ops.verify_disrupt import check_tunnel_cut, disruptive_tenant

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


def _planned_cards(outputs: Json, tenant: str) -> Json:
    """The tenant's cards in output gpuPlan (none in the outputs of a run before it existed)."""
    plan = outputs.get("gpuPlan")
    tenants = plan.get("tenants") if isinstance(plan, dict) else None
    cards = (tenants.get(tenant) or {}).get("cards") if isinstance(tenants, dict) else None
    return cards if isinstance(cards, dict) else {}


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
            planned_cards=_planned_cards(outputs, name),
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
                    waiting: Waiting, disrupt: str | None = None) -> Iterable[TenantReport]:
    """One table per tenant, in plan order, yielded as each tenant finishes; the tenant `disrupt` names also gets
    the tunnel cut's rows, once its own checks are done."""
    for name in [*platform.tenants, *platform.incomplete]:
        if name in platform.incomplete:
            yield TenantReport(name, name, [CheckResult(
                "stack outputs", False, platform.incomplete[name] + " → this tenant cannot be checked",
                "run `make up` so the stack outputs describe every tenant",
            )])
        else:
            tenant = platform.tenants[name]
            results = verify_tenant(platform, tenant, management, connect, waiting)
            if name == disrupt:
                answered = next((r for r in results if r.name == "tenant API answers"), None)
                if answered is not None and answered.ok:
                    results += check_tunnel_cut(platform, tenant, connect, waiting)
                else:
                    results.append(CheckResult("tunnel cut: GPU pod rejected", False, f"not run: {name}'s API "
                                               "server does not answer (see 'tenant API answers')",
                                               "fix the tenant API first, then verify again"))
            yield TenantReport(name, f"{name} (management namespace {tenant.namespace})", results)


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


def _docker(run: Run, argv: list[str]) -> subprocess.CompletedProcess[str] | str:
    """Run a docker command; the reason as a string when it could not run at all."""
    try:
        return run(argv, capture_output=True, text=True, check=False, timeout=MIRROR_TIMEOUT)
    except FileNotFoundError:
        return "the `docker` CLI is not on PATH"
    except subprocess.TimeoutExpired:
        return f"`{' '.join(argv[:3])}` did not answer within {MIRROR_TIMEOUT} s"


def _stderr(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stderr or "").split())[-300:] or f"exit code {done.returncode}"


def _timestamp(text: str) -> datetime.datetime | None:
    """Docker's RFC 3339 times with nanoseconds (`2026-11-30T09:00:01.123456789Z`); None for Go's zero time."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text.strip())
    if match is None or match.group(1).startswith("0001-"):
        return None
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    fraction = (match.group(2) or ".0")[:7]
    return datetime.datetime.fromisoformat(f"{match.group(1)}{fraction}{zone}")


def container_times(names: Sequence[str], run: Run) -> dict[str, tuple[datetime.datetime, datetime.datetime]]:
    """Container -> (created, last started), from one `docker inspect`; {} when Docker cannot say."""
    if not names:
        return {}
    done = _docker(run, ["docker", "inspect", "--format", "{{.Name}} {{.Created}} {{.State.StartedAt}}", *names])
    if isinstance(done, str):
        return {}
    times = {}
    for line in (done.stdout or "").splitlines():
        parts = line.split()
        if len(parts) == 3:
            created, started = _timestamp(parts[1]), _timestamp(parts[2])
            if created is not None and started is not None:
                times[parts[0].lstrip("/")] = (created, started)
    return times


def check_mirror_cache(registry: str, cache: Any, run: Run,
                       times: dict[str, tuple[datetime.datetime, datetime.datetime]] | None = None,
                       nodes: Sequence[str] = ()) -> CheckResult:
    """Hits and misses of one pull-through cache, read inside its container (the debug server listens on its
    loopback only). No request at all FAILs when a node was created after the cache last started: that node
    pulled its images since, and none came through the cache."""
    container = str((cache or {}).get("container") or "") if isinstance(cache, dict) else ""
    name = f"cache {registry}"
    if not container:
        return CheckResult(name, False, "the output imageMirror names no container for it",
                           "run `make up` to refresh the stack outputs")
    fix = (f"docker start {container} (or `make up`); docker logs {container}: a cache whose upstream does not "
           "answer at start exits and restarts (check the proxy variables `make up` ran with)")
    done = _docker(run, ["docker", "exec", container, "wget", "-qO-", MIRROR_DEBUG_URL])
    if isinstance(done, str):
        if "not on PATH" in done:
            return CheckResult(name, False, f"{done}: cannot read the cache's counters",
                               "run verify on the Docker host of the lab")
        return CheckResult(name, False, f"{container}: {done}", fix)
    if done.returncode != 0:
        return CheckResult(name, False, f"{container} is not running or its debug server does not answer "
                                        f"({_stderr(done)}) → nodes pull from the internet again", fix)
    try:
        counters = mirror_counters(done.stdout)
    except ValueError as error:
        return CheckResult(name, False, f"{container} answered without counters: {error}", fix)
    parts = []
    for kind, (requests, hits, misses, pulled) in counters.items():
        parts.append(f"{kind} {hits} hits / {misses} misses of {requests} requests, {_size(pulled)} from upstream")
    detail = f"{container}: {'; '.join(parts)} (in-memory counters, since the container last started)"
    if any(requests for requests, *_ in counters.values()):
        return CheckResult(name, True, detail)
    started = (times or {}).get(container, (None, None))[1]
    later = [node for node in nodes if started is not None and node in (times or {}) and times[node][0] > started]
    if later:
        return CheckResult(name, False, f"{container}: no request since it started, though {', '.join(later)} "
                                        "joined later and pulled its images → the nodes do not use this cache",
                           "see the nodes' mirror rows below: their containerd must read "
                           "/etc/containerd/certs.d/<registry>/hosts.toml")
    return CheckResult(name, True, f"{detail}: unused since it started (pulls before that are not counted)")


def _head_sections(text: str) -> dict[str, str]:
    """`head -v` output: file -> its lines."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = re.fullmatch(r"==> (.+) <==", line)
        if header:
            current = sections.setdefault(header.group(1), [])
        elif current is not None:
            current.append(line)
    return {path: "\n".join(lines).rstrip("\n") for path, lines in sections.items()}


def check_node_mirrors(node: str, caches: dict[str, str], run: Run) -> CheckResult:
    """The hosts.toml node-mirrors.sh wrote on `node` for each cache (registry -> cache URL), read in the node."""
    name = f"node {node} mirrors"
    files = {registry: f"{image_cache.CERTS_D}/{registry}/hosts.toml" for registry in sorted(caches)}
    fix = ("rewrite them: `make up REPLACE=<urn>` of the node's mirrors command (`pulumi stack --show-urns | "
           "grep mirror`); a file someone else wrote stays until removed by hand")
    done = _docker(run, ["docker", "exec", node, "head", "-v", "-n", "64", *files.values()])
    if isinstance(done, str):
        return CheckResult(name, False, f"{node}: {done}", "run verify on the Docker host of the lab")
    if done.returncode != 0 and not (done.stdout or "").strip():
        return CheckResult(name, False, f"{node} could not be read ({_stderr(done)})",
                           f"docker start {node} (or `make up`)")
    found = _head_sections(done.stdout or "")
    wrong = []
    for registry, path in files.items():
        text = found.get(path)
        if text is None:
            wrong.append(f"{registry}: no {path}")
        elif text != image_cache.hosts_toml(registry, caches[registry]).rstrip("\n"):
            wrong.append(f"{registry}: {path} does not send pulls to {caches[registry]} first")
    if wrong:
        return CheckResult(name, False, f"{'; '.join(wrong)} → this node pulls those registries from the internet",
                           fix)
    return CheckResult(name, True, f"hosts.toml for {', '.join(files)}: each cache first, the registry itself "
                                   "as fallback")


def _mirror_layout(image_mirror: Any) -> tuple[dict[str, Any], list[str] | None]:
    """(registry -> cache, nodes) from the output; nodes None when an older run's output names none."""
    if "caches" in image_mirror and isinstance(image_mirror["caches"], dict):
        nodes = image_mirror.get("nodes")
        return image_mirror["caches"], [str(n) for n in nodes] if isinstance(nodes, list) else None
    return image_mirror, None


def verify_mirror(image_mirror: Any, run: Run) -> TenantReport | None:
    """The image mirror's table, or None when the stack runs no mirror (output absent or null): each cache's
    counters, then each node's hosts.toml."""
    if not image_mirror:
        return None
    if not isinstance(image_mirror, dict):
        results = [CheckResult("image mirror outputs", False, "the output imageMirror is not a map",
                               "run `make up` to refresh the stack outputs")]
    else:
        caches, nodes = _mirror_layout(image_mirror)
        containers = [str(c.get("container")) for c in caches.values() if isinstance(c, dict) and c.get("container")]
        times = container_times([*containers, *(nodes or [])], run)
        results = [check_mirror_cache(registry, cache, run, times, nodes or ()) for registry, cache in caches.items()]
        urls = {registry: str(cache.get("url")) for registry, cache in caches.items()
                if isinstance(cache, dict) and cache.get("url")}
        if nodes is None:
            results.append(skip("nodes' mirrors", "not tested: the output imageMirror names no nodes (outputs of "
                                                  "an older run)", "run `make up` to refresh the stack outputs"))
        else:
            results += [check_node_mirrors(node, urls, run) for node in nodes]
    return TenantReport(MIRROR_TITLE, f"{MIRROR_TITLE} (pull-through caches on the kind network)", results,
                        is_tenant=False)


# --- rendering --------------------------------------------------------------------------------


def render_table(report: TenantReport) -> str:
    width = max(len("CHECK"), *(len(r.name) for r in report.results))
    status = max(len("STATUS"), *(len(r.status) for r in report.results))
    indent = " " * (width + 2 + status + 2)
    lines = [report.title, f"{'CHECK':<{width}}  {'STATUS':<{status}}  DETAIL"]
    for result in report.results:
        lines.append(f"{result.name:<{width}}  {result.status:<{status}}  {result.detail}")
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
    loose, loose_where = _per_report(reports, NOT_ENFORCED)
    skipped = f", {skips} skipped ({skipped_where})" if skips else ""
    skipped += f", {loose} not enforced ({loose_where})" if loose else ""
    if not failures:
        tenants = sum(report.is_tenant for report in reports)
        extra = "".join(f" and the {report.tenant}" for report in reports if not report.is_tenant)
        checks = f"{total - skips - loose} checks OK{skipped}" if skipped else f"all {total} checks OK"
        return f"verify passed: {checks} in {tenants} tenant(s){extra}"
    return f"verify failed: {failures} of {total} checks failed ({failed_where}){skipped}"


# --- command line -----------------------------------------------------------------------------


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ops.verify", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev", help="Pulumi stack to read the outputs of (default: dev)")
    parser.add_argument("--outputs-file", help="read saved `pulumi stack output --json --show-secrets` instead")
    parser.add_argument("--probe-timeout", type=float, default=60.0,
                        help="seconds to wait for the GPU probe to get a GPU, for the network probes to start, "
                             "and, with --disruptive, for the tunnel to go down and to come back (default: 60)")
    parser.add_argument("--disruptive", action="store_true",
                        help="also cut one tenant's Konnectivity tunnel: a GPU pod must then be rejected; the tunnel "
                             "is restored afterwards (make verify DISRUPTIVE=1)")
    parser.add_argument("--disrupt-tenant", metavar="TENANT",
                        help="with --disruptive: the tenant to cut (default: the first of the plan)")
    return parser.parse_args(argv)


def _unexpected(error: Exception) -> str:
    """One line for an error verify did not foresee (a malformed output, a bug): its type and first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = f": {lines[0][:200]}" if lines else ""
    return (f"verify: stopped by an unexpected {type(error).__name__}{said} (malformed stack outputs? run `make up`, "
            "then verify again)")


def image_caches(image_mirror: Any, run: Run) -> tuple[ImageCache, ...]:
    """The caches of the output imageMirror, each with the address Docker gave it (one `docker inspect`; None
    where Docker cannot say): the tenant pods' probes aim at that address."""
    if not isinstance(image_mirror, dict):
        return ()
    caches, _ = _mirror_layout(image_mirror)
    found = []
    for registry, cache in caches.items():
        if not isinstance(cache, dict) or not cache.get("url"):
            continue
        try:
            host, port = split_host_port(str(cache["url"]).split("://", 1)[-1].rstrip("/"))
        except ValueError:
            continue
        found.append((str(registry), str(cache.get("container") or host), host, port))
    if not found:
        return ()
    done = _docker(run, ["docker", "inspect", "--format",
                         "{{.Name}} {{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
                         *dict.fromkeys(container for _, container, _, _ in found)])
    addresses: dict[str, str] = {}
    if not isinstance(done, str):
        for line in (done.stdout or "").splitlines():
            parts = line.split()
            if len(parts) >= 2:
                addresses[parts[0].lstrip("/")] = parts[1]
    return tuple(ImageCache(registry, host, port, addresses.get(container))
                 for registry, container, host, port in found)


def _verify(args: argparse.Namespace, run: Run, connect: Connect, waiting: Waiting) -> int:
    try:
        outputs = (read_outputs_file(args.outputs_file) if args.outputs_file
                   else read_stack_outputs(args.stack, run))
        management_kubeconfig, platform = platform_from_outputs(outputs)
        try:
            disrupt = disruptive_tenant(platform, args.disrupt_tenant) if args.disruptive else None
        except ValueError as error:
            raise OutputsError(str(error)) from None
        if args.disrupt_tenant and not args.disruptive:
            raise OutputsError("--disrupt-tenant needs --disruptive (make verify DISRUPTIVE=1 TENANT=<name>)")
        platform = dataclasses.replace(platform, image_caches=image_caches(outputs.get("imageMirror"), run))
        try:
            management = connect(management_kubeconfig)
        except ValueError as error:
            raise OutputsError(f"managementKubeconfig: {error}") from None
    except OutputsError as error:
        print(f"verify: {error}", file=sys.stderr)
        return 2
    reports: list[TenantReport] = []
    for report in verify_platform(platform, management, connect, waiting, disrupt):
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
    """0: no check failed; 1: a check failed; 2: the outputs are unusable or verify stopped on an unexpected error;
    130: interrupted (Ctrl-C)."""
    args = _arguments(argv)
    waiting = waiting or Waiting(timeout=args.probe_timeout)
    opened: list[KubeClient] = []

    def connect_tracked(kubeconfig: Json) -> KubeClient:
        api = connect(kubeconfig)
        opened.append(api)
        return api

    try:
        return _verify(args, run, connect_tracked, waiting)
    except KeyboardInterrupt:  # a cut tunnel was restored on the way out, and said so
        print("verify: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # 1 means "a check failed": anything else unforeseen is exit 2, in one line
        print(_unexpected(error), file=sys.stderr)
        return 2
    finally:
        # The clients' certificates and keys live in memory files: release them all.
        for api in opened:
            api.close()


if __name__ == "__main__":
    sys.exit(main())
