"""Turn raw stack configuration into a validated `StackConfig`, or one clear error.

Every problem is reported at once, each with the full key path as users write
it (`tenants[1].workers[0].gpus[0].cores`), the offending value and what is
allowed. Nothing here touches Pulumi resources, so it runs before any exists.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from .cidrs import PoolExhaustedError, allocate_ranges, overlapping_pairs
from .models import (
    MAX_SIMULATED_MEMORY_MIB_PER_WORKER,
    GpuCard,
    StackConfig,
    Tenant,
)

NAMESPACE = "gpu-tenancy"
MAX_NODE_NAME_LENGTH = 63
# The tenant controller manager gives every node a /24 of the pod range.
NODE_POD_PREFIX = 24

_MISSING = object()


@dataclass(frozen=True)
class ConfigIssue:
    path: str
    message: str
    value: Any = _MISSING

    def __str__(self) -> str:
        if self.value is _MISSING:
            return f"{self.path}: {self.message}"
        return f"{self.path} = {self.value!r}: {self.message}"


class ConfigError(ValueError):
    """The stack configuration is invalid; `issues` lists every problem."""

    def __init__(self, issues: list[ConfigIssue]):
        self.issues = issues
        lines = "\n".join(f"  - {issue}" for issue in issues)
        super().__init__(
            f"invalid '{NAMESPACE}' stack configuration ({len(issues)} problem"
            f"{'s' if len(issues) != 1 else ''}):\n{lines}\n"
            f"Fix these keys in Pulumi.<stack>.yaml under '{NAMESPACE}:' "
            f"(or with `pulumi config set --path '{NAMESPACE}:<key path>' <value>`); "
            "see the configuration reference in README.md."
        )


def format_path(loc: Iterable[Any]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(root)"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class whose object sits at `loc` (by alias), if any."""
    model: type[BaseModel] = StackConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = next(
            (f for name, f in model.model_fields.items() if (f.alias or name) == part),
            None,
        )
        if field is None:
            return None
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


# Keys whose values are credentials: never repeated in an error message.
SECRET_KEYS = frozenset({"kubeconfig", "privateKey"})
REDACTED = "[secret]"


def redact(value: Any) -> Any:
    """`value` with the values of every secret key replaced (recursively)."""
    if isinstance(value, dict):
        return {k: REDACTED if k in SECRET_KEYS else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _issue_from_pydantic(error: dict[str, Any]) -> ConfigIssue:
    loc = tuple(error["loc"])
    path = format_path(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = _allowed_keys(parent) if parent else []
        hint = ""
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.5)
        if not close:
            lowered = {key.lower(): key for key in allowed}
            if str(loc[-1]).lower() in lowered:
                close = [lowered[str(loc[-1]).lower()]]
        if close:
            hint = f"; did you mean '{close[0]}'?"
        return ConfigIssue(
            path,
            f"unknown key '{loc[-1]}' (allowed here: {', '.join(allowed)}){hint}",
        )
    if kind == "missing":
        if loc and loc[-1] in SECRET_KEYS:
            return ConfigIssue(path, f"required key is missing; {_secret_hint(path)}")
        return ConfigIssue(path, "required key is missing")
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    value = error.get("input", _MISSING)
    if any(part in SECRET_KEYS for part in loc):
        value = _MISSING
    elif value is not _MISSING:
        value = redact(value)
    return ConfigIssue(path, message, value)


def _tenant_issues(index: int, tenant: Tenant, gpu_mode: str) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    prefix = f"tenants[{index}]"
    seen_workers: dict[str, int] = {}
    for w_index, worker in enumerate(tenant.workers):
        w_path = f"{prefix}.workers[{w_index}]"
        if worker.name in seen_workers:
            issues.append(
                ConfigIssue(
                    f"{w_path}.name",
                    f"duplicates {prefix}.workers[{seen_workers[worker.name]}].name; "
                    "worker names must be unique within a tenant",
                    worker.name,
                )
            )
        seen_workers.setdefault(worker.name, w_index)
        node_name = f"{tenant.name}-{worker.name}"
        if len(node_name) > MAX_NODE_NAME_LENGTH:
            issues.append(
                ConfigIssue(
                    f"{w_path}.name",
                    f"node name '{node_name}' (<tenant>-<worker>) is {len(node_name)} "
                    f"characters; shorten the tenant or worker name to fit "
                    f"{MAX_NODE_NAME_LENGTH}",
                    worker.name,
                )
            )
        total = sum(card.memory_mib for card in worker.gpus)
        if gpu_mode == "mock" and total >= MAX_SIMULATED_MEMORY_MIB_PER_WORKER:
            issues.append(
                ConfigIssue(
                    f"{w_path}.gpus",
                    f"simulated cards add up to {total} MiB; keep the sum of memoryMiB "
                    f"per worker below {MAX_SIMULATED_MEMORY_MIB_PER_WORKER} (the mock "
                    "device plugin registers one device per MiB and kubelet's 4 MiB "
                    "gRPC limit breaks beyond that) - move cards to another worker",
                )
            )
    return issues


def _card_fits(card: GpuCard, memory_mib: int, cores: int) -> bool:
    return card.memory_mib >= memory_mib and card.cores >= cores


def _smoke_test_issues(config: StackConfig) -> list[ConfigIssue]:
    smoke = config.smoke_test
    if not smoke.enabled:
        return []
    issues = []
    for index, tenant in enumerate(config.tenants):
        fits = any(
            sum(_card_fits(card, smoke.memory_mib, smoke.cores) for card in worker.gpus)
            >= smoke.gpus
            for worker in tenant.workers
        )
        if not fits:
            issues.append(
                ConfigIssue(
                    "smokeTest",
                    f"the smoke-test request ({smoke.gpus} GPU x {smoke.memory_mib} MiB, "
                    f"{smoke.cores}% cores) fits on no worker of tenants[{index}] "
                    f"('{tenant.name}'): it needs {smoke.gpus} card(s) on one worker with "
                    "at least that memoryMiB and cores each. Lower smokeTest.memoryMiB/"
                    "cores/gpus, add a card, or set smokeTest.enabled: false",
                )
            )
        quota = tenant.quota
        if quota is None:
            continue
        for key, limit, needed in (
            ("gpus", quota.gpus, smoke.gpus),
            ("memoryMiB", quota.memory_mib, smoke.gpus * smoke.memory_mib),
            ("cores", quota.cores, smoke.gpus * smoke.cores),
        ):
            if limit is not None and limit < needed:
                issues.append(
                    ConfigIssue(
                        f"tenants[{index}].quota.{key}",
                        f"is below the smoke-test request ({needed}), so the quota would "
                        "reject the proof pod; raise the quota or lower smokeTest",
                        limit,
                    )
                )
    return issues


def _stack_issues(config: StackConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    seen_tenants: dict[str, int] = {}
    seen_cards: dict[str, str] = {}
    for index, tenant in enumerate(config.tenants):
        if tenant.name in seen_tenants:
            issues.append(
                ConfigIssue(
                    f"tenants[{index}].name",
                    f"duplicates tenants[{seen_tenants[tenant.name]}].name; "
                    "tenant names must be unique",
                    tenant.name,
                )
            )
        seen_tenants.setdefault(tenant.name, index)
        issues.extend(_tenant_issues(index, tenant, config.gpu_mode))
        for w_index, worker in enumerate(tenant.workers):
            for c_index, card in enumerate(worker.gpus):
                path = f"tenants[{index}].workers[{w_index}].gpus[{c_index}].uuid"
                if card.uuid in seen_cards:
                    issues.append(
                        ConfigIssue(
                            path,
                            f"duplicates {seen_cards[card.uuid]}; card uuids must be "
                            "unique across the whole stack",
                            card.uuid,
                        )
                    )
                seen_cards.setdefault(card.uuid, path)

    explicit = [
        (f"tenants[{index}].{key}", cidr)
        for index, tenant in enumerate(config.tenants)
        for key, cidr in (("serviceCidr", tenant.service_cidr), ("podCidr", tenant.pod_cidr))
        if cidr is not None
    ]
    for i, j in overlapping_pairs(explicit):
        issues.append(
            ConfigIssue(
                explicit[j][0],
                f"overlaps {explicit[i][0]} ({explicit[i][1]}); service and pod ranges "
                "must not overlap each other or any other tenant's",
                explicit[j][1],
            )
        )
    issues.extend(_pod_room_issues(config))
    issues.extend(_smoke_test_issues(config))
    return issues


def _pod_room_issues(config: StackConfig) -> list[ConfigIssue]:
    issues = []
    for index, tenant in enumerate(config.tenants):
        if tenant.pod_cidr is None:
            continue  # allocated later as a /16, then checked again
        prefix = ipaddress.IPv4Network(tenant.pod_cidr).prefixlen
        room = 2 ** (NODE_POD_PREFIX - prefix)
        if room < len(tenant.workers):
            issues.append(
                ConfigIssue(
                    f"tenants[{index}].podCidr",
                    f"has room for {room} node(s) (one /{NODE_POD_PREFIX} each) but the "
                    f"tenant has {len(tenant.workers)} workers; use a larger range",
                    tenant.pod_cidr,
                )
            )
    return issues


def _secret_hint(path: str) -> str:
    return (
        f"store it as a secret: pulumi config set --secret --path '{NAMESPACE}:{path}' \"$(cat <file>)\" "
        "(a plain value would sit unencrypted in Pulumi.<stack>.yaml)"
    )


def _infrastructure_issues(config: StackConfig, secret_keys: Collection[str]) -> list[ConfigIssue]:
    """Existing management cluster and SSH workers: what goes with what, and secrets stored as secrets."""
    issues: list[ConfigIssue] = []
    management = config.management
    if management.adopts_existing_cluster:
        if "management" not in secret_keys:
            issues.append(ConfigIssue("management.kubeconfig", _secret_hint("management.kubeconfig")))
        for key, field in (("clusterName", "cluster_name"), ("nodeImage", "node_image")):
            if field in management.model_fields_set:
                issues.append(
                    ConfigIssue(
                        f"management.{key}",
                        "only applies to the kind cluster this program creates; remove it when "
                        "management.kubeconfig names an existing cluster",
                    )
                )
        if not management.worker_cidrs:
            issues.append(
                ConfigIssue(
                    "management.workerCidrs",
                    "is required with management.kubeconfig: list the IPv4 networks your GPU servers (and the "
                    "load balancer's source NAT, i.e. the management nodes) reach tenant API servers from, "
                    "e.g. ['10.20.0.0/16']; tenant control planes accept connections only from there",
                )
            )
    ssh_workers = False
    seen_hosts: dict[tuple[str, int], str] = {}
    for index, tenant in enumerate(config.tenants):
        for w_index, worker in enumerate(tenant.workers):
            path = f"tenants[{index}].workers[{w_index}]"
            if worker.ssh is not None:
                ssh_workers = True
                address = (worker.ssh.host.lower(), worker.ssh.port)
                if address in seen_hosts:
                    issues.append(
                        ConfigIssue(
                            f"{path}.ssh.host",
                            f"is also {seen_hosts[address]}; a machine can be only one worker (two joins on one "
                            "machine would reset each other)",
                            worker.ssh.host,
                        )
                    )
                seen_hosts.setdefault(address, f"{path}.ssh.host")
            elif management.adopts_existing_cluster:
                issues.append(
                    ConfigIssue(
                        f"{path}.ssh",
                        "is required with management.kubeconfig: a worker without `ssh` is a local kindest/node "
                        "container on the kind network, which an existing cluster does not have",
                    )
                )
    if ssh_workers and "tenants" not in secret_keys:
        issues.append(
            ConfigIssue("tenants[*].workers[*].ssh.privateKey", _secret_hint("tenants[0].workers[0].ssh.privateKey"))
        )
    return issues


def load_stack_config(raw: dict[str, Any], secret_keys: Collection[str] = ()) -> StackConfig:
    """Validate raw config and fill in automatic CIDRs, or raise ConfigError.

    `secret_keys` names the top-level keys Pulumi holds as secrets (or that contain secrets).
    """
    try:
        config = StackConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError([_issue_from_pydantic(e) for e in error.errors()]) from None

    issues = _stack_issues(config) + _infrastructure_issues(config, secret_keys)
    if issues:
        raise ConfigError(issues)

    try:
        ranges = allocate_ranges([(t.service_cidr, t.pod_cidr) for t in config.tenants])
    except PoolExhaustedError as error:
        path, _, message = str(error).partition(": ")
        raise ConfigError([ConfigIssue(path, message)]) from None
    tenants = [
        tenant.model_copy(update={"service_cidr": r.service_cidr, "pod_cidr": r.pod_cidr})
        for tenant, r in zip(config.tenants, ranges, strict=False)
    ]
    config = config.model_copy(update={"tenants": tenants})
    issues = _pod_room_issues(config)
    if issues:
        raise ConfigError(issues)
    return config
