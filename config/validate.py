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

from pulumi import RunError
from pydantic import BaseModel, ValidationError

from naming import PROJECT, TENANT_SYSTEM_NAMESPACES

from . import upgrade
from .cidrs import allocate_ranges, free_block, overlapping_pairs
from .kubeconfig import KubeconfigError, current_context, parse
from .models import (
    KIND_NODE_IMAGES,
    MAX_SIMULATED_MEMORY_MIB_PER_WORKER,
    MAX_SOURCE_RANGES,
    SMOKE_TEST_NAMESPACE,
    StackConfig,
    Tenant,
)

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


class ConfigError(RunError, ValueError):
    """The stack configuration is invalid; `issues` lists every problem.

    A `pulumi.RunError`: `pulumi up` prints it as a plain message instead of a Python traceback. `problems` is
    the list alone (for a caller with its own fix line, like preflight); the message adds one fix line, naming
    the stack's file when `stack` is known.
    """

    def __init__(self, issues: list[ConfigIssue], stack: str | None = None):
        self.issues = issues
        self.stack = stack
        lines = "\n".join(f"  - {issue}" for issue in issues)
        self.problems = (
            f"invalid '{PROJECT}' stack configuration ({len(issues)} problem"
            f"{'s' if len(issues) != 1 else ''}):\n{lines}"
        )
        super().__init__(f"{self.problems}\n{self.fix}")

    @property
    def fix(self) -> str:
        file = f"Pulumi.{self.stack}.yaml" if self.stack else "Pulumi.<stack>.yaml"
        flag = f"--stack {self.stack} " if self.stack else ""
        return (f"Fix these keys in {file} under '{PROJECT}:' (or with `pulumi config set {flag}--path "
                f"'{PROJECT}:<key path>' <value>`); see the configuration reference in docs/configuration.md.")

    def for_stack(self, stack: str) -> ConfigError:
        """The same problems, with the fix line naming `stack`'s file."""
        return ConfigError(self.issues, stack)


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
SECRET_KEYS = frozenset({"kubeconfig", "privateKey", "token", "dockerHub"})
REDACTED = "[secret]"


# Text that is a credential wherever it is put (a private key under `hostKey`, a kubeconfig as a string).
_CREDENTIAL_MARKERS = ("-----BEGIN", "PRIVATE KEY", "client-key-data", "client-certificate-data", "token:")


def redact(value: Any) -> Any:
    """`value` with the values of every secret key, and anything that looks like a credential, replaced."""
    if isinstance(value, dict):
        return {k: REDACTED if k in SECRET_KEYS else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str) and any(marker in value for marker in _CREDENTIAL_MARKERS):
        return REDACTED
    return value


def _meant(loc: tuple[Any, ...]) -> str | None:
    """The allowed key an unknown key at `loc` most likely misspells, if any."""
    parent = _model_at(loc[:-1])
    allowed = _allowed_keys(parent) if parent else []
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.5)
    if not close:
        lowered = {key.lower(): key for key in allowed}
        close = [lowered[str(loc[-1]).lower()]] if str(loc[-1]).lower() in lowered else []
    return close[0] if close else None


def _unquoted_message(loc: tuple[Any, ...], value: bool | int | float) -> str:
    """A string key given a number or boolean: YAML read an unquoted `1.35` or `yes` that way. Say how to write it,
    with the key's own default as the example when it has one (kubernetesVersion: v1.35.0)."""
    what = "a boolean" if isinstance(value, bool) else "a number"
    model = _model_at(loc[:-1])
    field = next((f for n, f in (model.model_fields.items() if model else ()) if (f.alias or n) == loc[-1]), None)
    example = field.default if field is not None and isinstance(field.default, str) else None
    if example:
        return f"YAML reads this as {what}: write it as a string like {example}"
    return f"YAML reads this as {what}: write it as a string, in quotes"


def _issue_from_pydantic(error: dict[str, Any]) -> ConfigIssue:
    loc = tuple(error["loc"])
    path = format_path(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = _allowed_keys(parent) if parent else []
        meant = _meant(loc)
        hint = f"; did you mean '{meant}'?" if meant else ""
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
    if kind == "string_type" and isinstance(value, (bool, int, float)):
        message = _unquoted_message(loc, value)
    if any(part in SECRET_KEYS for part in loc):
        value = _MISSING
    elif value is not _MISSING:
        value = redact(value)
    return ConfigIssue(path, message, value)




# --------------------------------------------------------------------------- #
# Checks across fields (run over whatever validated, so every problem is reported in one round)
# --------------------------------------------------------------------------- #

Indexed = list[tuple[int, Tenant]]


def _tenant_issues(index: int, tenant: Tenant, config: StackConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    prefix = f"tenants[{index}]"
    seen_workers: dict[str, int] = {}
    containers = [w for w in tenant.workers if w.ssh is None]
    servers = [w_index for w_index, w in enumerate(tenant.workers) if w.ssh is not None]
    if containers and servers and not config.management.adopts_existing_cluster:
        # kind network.go creates the network with enable_ip_masquerade; felix/rules/static.go drops VXLAN from hosts
        # that are no Calico node.
        issues.append(ConfigIssue(
            f"{prefix}.workers[{servers[0]}].ssh",
            "a tenant mixes container and SSH workers: Docker masquerades what the containers send to the server's "
            "address, and Calico on the server drops VXLAN from an address that is not a node, so pods on the two "
            "kinds cannot reach each other (nor CoreDNS, nor the webhooks). Give the SSH workers a tenant of their own",
        ))
    for w_index, worker in enumerate(tenant.workers):
        w_path = f"{prefix}.workers[{w_index}]"
        if worker.name in seen_workers:
            issues.append(ConfigIssue(
                f"{w_path}.name",
                f"duplicates {prefix}.workers[{seen_workers[worker.name]}].name; worker names must be unique within "
                "a tenant",
                worker.name,
            ))
        seen_workers.setdefault(worker.name, w_index)
        node_name = f"{tenant.name}-{worker.name}"
        if len(node_name) > MAX_NODE_NAME_LENGTH:
            issues.append(ConfigIssue(
                f"{w_path}.name",
                f"node name '{node_name}' (<tenant>-<worker>) is {len(node_name)} characters; shorten the tenant or "
                f"worker name to fit {MAX_NODE_NAME_LENGTH}",
                worker.name,
            ))
        total = sum(card.memory_mib for card in worker.gpus)
        if config.gpu_mode == "mock" and total >= MAX_SIMULATED_MEMORY_MIB_PER_WORKER:
            issues.append(ConfigIssue(
                f"{w_path}.gpus",
                f"simulated cards add up to {total} MiB; keep the sum of memoryMiB per worker below "
                f"{MAX_SIMULATED_MEMORY_MIB_PER_WORKER} (the mock device plugin registers one device per MiB and "
                "kubelet's 4 MiB gRPC limit breaks beyond that) - move cards to another worker",
            ))
        if config.gpu_mode == "nvidia" and worker.ssh is None and worker.gpus:
            # HAMi's real device plugin needs the NVIDIA driver and runtime on the node; in a kindest/node container
            # it crash-loops (register.go getAPIDevices -> nvml.Init) and the Helm release times out.
            issues.append(ConfigIssue(
                f"{w_path}.gpus",
                "gpuMode nvidia needs real GPU servers: a worker without `ssh` is a kindest/node container, where "
                "HAMi's device plugin cannot start. Give this worker `ssh` (a machine with the NVIDIA driver and "
                "container toolkit), or use gpuMode mock",
            ))
        if config.gpu_mode == "nvidia":
            for c_index, card in enumerate(worker.gpus):
                if "slots" in card.model_fields_set and card.slots != DEVICE_SPLIT_COUNT:
                    issues.append(ConfigIssue(
                        f"{w_path}.gpus[{c_index}].slots",
                        "only applies with gpuMode: mock; HAMi's real device plugin splits every card "
                        f"devicePlugin.deviceSplitCount ({DEVICE_SPLIT_COUNT}) ways - remove it",
                        card.slots,
                    ))
    if containers and tenant.node_image is None and tenant.kubernetes_version not in KIND_NODE_IMAGES:
        issues.append(ConfigIssue(
            f"{prefix}.kubernetesVersion",
            f"no kindest/node image is published for {tenant.kubernetes_version} (known: "
            f"{', '.join(KIND_NODE_IMAGES)}); pick one of those, or set {prefix}.nodeImage to a kindest/node image "
            f"built for {tenant.kubernetes_version} (kind build node-image), pinned by digest",
            tenant.kubernetes_version,
        ))
    kubelet = upgrade.image_version(tenant.node_image) if tenant.node_image is not None and containers else None
    if kubelet is not None:
        issues += [ConfigIssue(f"{prefix}.nodeImage", problem, tenant.node_image) for problem in
                   upgrade.kubelet_problems(f"{prefix}.kubernetesVersion", tenant.kubernetes_version,
                                            {"its container workers": kubelet})]
    if tenant.node_image is not None and not containers:
        issues.append(ConfigIssue(
            f"{prefix}.nodeImage",
            "only applies to container workers (workers without `ssh`); this tenant has none - remove it",
        ))
    store = tenant.data_store
    if not store.dedicated:
        for key, field in (("replicas", "replicas"), ("storageSize", "storage_size"), ("quotaMiB", "quota_mib")):
            if field in store.model_fields_set:
                issues.append(ConfigIssue(
                    f"{prefix}.dataStore.{key}",
                    "only applies to a dedicated data store; set dataStore.dedicated: true or remove it",
                ))
    seen_namespaces: set[str] = set()
    for n_index, namespace in enumerate(tenant.namespaces):
        if namespace.startswith("kube-") or namespace in TENANT_SYSTEM_NAMESPACES:
            issues.append(ConfigIssue(
                f"{prefix}.namespaces[{n_index}]",
                "is a system namespace of the tenant; list namespaces the tenant's users work in (e.g. default, ml)",
                namespace,
            ))
        if namespace == SMOKE_TEST_NAMESPACE:
            issues.append(ConfigIssue(
                f"{prefix}.namespaces[{n_index}]",
                "is the namespace of the GPU smoke test, which the program keeps outside the users' namespaces and "
                "quotas; list the namespaces the tenant's users work in (e.g. default, ml)",
                namespace,
            ))
        if namespace in seen_namespaces:
            issues.append(ConfigIssue(f"{prefix}.namespaces[{n_index}]", "is listed twice", namespace))
        seen_namespaces.add(namespace)
    return issues + _workload_issues(prefix, tenant)


def _workload_issues(prefix: str, tenant: Tenant) -> list[ConfigIssue]:
    """Each declared workload on its own: a key it cannot use, or a request no card of the tenant could ever take
    (empty cards, HAMi's per-card checks in Project-HAMi/HAMi v2.10.0 pkg/device/nvidia/device.go Fit)."""
    issues: list[ConfigIssue] = []
    seen: dict[str, int] = {}
    workers = [w for w in tenant.workers if w.gpus]
    cards = [(card, worker) for worker in workers for card in worker.gpus]
    for index, workload in enumerate(tenant.workloads):
        path = f"{prefix}.workloads[{index}]"
        if workload.name in seen:
            issues.append(ConfigIssue(f"{path}.name", f"duplicates {prefix}.workloads[{seen[workload.name]}].name; "
                                      "workload names must be unique within a tenant", workload.name))
        seen.setdefault(workload.name, index)
        if workload.memory_mib is not None and workload.memory_percent is not None:
            issues.append(ConfigIssue(f"{path}.memoryPercent", "set memoryMiB or memoryPercent, not both (HAMi "
                                      "ignores the percentage when nvidia.com/gpumem is given)"))
        if workload.namespace is not None and workload.namespace not in tenant.namespaces:
            issues.append(ConfigIssue(f"{path}.namespace", f"is not one of {prefix}.namespaces "
                                      f"({', '.join(tenant.namespaces)}); add it there or pick one of those",
                                      workload.namespace))
        if not cards:
            issues.append(ConfigIssue(path, f"this tenant has no GPU cards ({prefix}.workers[].gpus), so no pod of "
                                      "it could ever be scheduled; add cards or remove the workload"))
            continue
        issues += _unsatisfiable(path, workload, workers, cards)
    return issues


def _unsatisfiable(path: str, workload: Any, workers: list[Any], cards: list[tuple[Any, Any]]) -> list[ConfigIssue]:
    most = max(workers, key=lambda w: len(w.gpus))
    if workload.gpus > len(most.gpus):
        return [ConfigIssue(f"{path}.gpus", f"asks for {workload.gpus} cards per pod, and HAMi gives a pod cards of "
                            f"one node only; the most on one worker is {len(most.gpus)} (worker '{most.name}'): lower "
                            "gpus or put more cards on one worker", workload.gpus)]
    memory = workload.memory_mib or 0
    largest, on = max(cards, key=lambda pair: pair[0].memory_mib)
    if memory > largest.memory_mib:
        return [ConfigIssue(f"{path}.memoryMiB", f"no card of this tenant has that much memory (largest: "
                            f"{largest.uuid} on worker '{on.name}', {largest.memory_mib} MiB): lower memoryMiB, use "
                            "memoryPercent, or add a larger card", memory)]
    # No cores: the whole card (100) when the whole memory is asked for (defaultExclusiveCoreIfNeeded).
    whole = workload.memory_mib is None and workload.memory_percent in (None, 100)
    cores = workload.cores if workload.cores is not None else (100 if whole else 0)
    strongest, on = max(cards, key=lambda pair: pair[0].cores)
    if cores > strongest.cores:
        implied = "" if workload.cores is not None else " (unset with the whole memory: HAMi makes it 100)"
        return [ConfigIssue(f"{path}.cores", f"no card of this tenant has {cores}% cores{implied}; most: "
                            f"{strongest.uuid} on worker '{on.name}', {strongest.cores}%: lower cores or use a card "
                            "with more", cores)]
    if not any(sum(card.memory_mib >= memory and card.cores >= cores for card in w.gpus) >= workload.gpus
               for w in workers):
        return [ConfigIssue(path, f"no worker has {workload.gpus} cards with at least {memory} MiB and {cores}% "
                            "cores each (HAMi gives a pod cards of one node only): lower the request or put such "
                            "cards on one worker")]
    return []


# charts/hami values.yaml devicePlugin.deviceSplitCount (v2.10.0): how many pods share a card in nvidia mode.
DEVICE_SPLIT_COUNT = 10




def _smoke_test_issues(config: StackConfig, tenants: Indexed, partial: Collection[int] = ()) -> list[ConfigIssue]:
    """The smoke-test request against each tenant's workers; `partial` names tenants that lost a refused card,
    worker or key, whose workers are not judged (the fit would only echo the refusal).

    Not against `quota`: a quota applies to `namespaces` only, and the smoke pod runs in SMOKE_TEST_NAMESPACE,
    which cannot be one of them, so any quota leaves the proof alone (and the proof leaves the quota whole)."""
    smoke = config.smoke_test
    if not smoke.enabled:
        return []
    issues = []
    for index, tenant in tenants:
        if index not in partial and smoke.worker_in(tenant) is None:
            issues.append(ConfigIssue(
                "smokeTest",
                f"the smoke-test request ({smoke.gpus} GPU x {smoke.memory_mib} MiB, {smoke.cores}% cores) fits on no "
                f"worker of tenants[{index}] ('{tenant.name}'): it needs {smoke.gpus} card(s) on one worker with at "
                "least that memoryMiB and cores each. Lower smokeTest.memoryMiB/cores/gpus, add a card, or set "
                "smokeTest.enabled: false",
            ))
    return issues


def _stack_issues(config: StackConfig, tenants: Indexed) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    seen_tenants: dict[str, int] = {}
    seen_cards: dict[str, str] = {}
    for index, tenant in tenants:
        if tenant.name in seen_tenants:
            issues.append(ConfigIssue(
                f"tenants[{index}].name",
                f"duplicates tenants[{seen_tenants[tenant.name]}].name; tenant names must be unique",
                tenant.name,
            ))
        seen_tenants.setdefault(tenant.name, index)
        issues.extend(_tenant_issues(index, tenant, config))
        for w_index, worker in enumerate(tenant.workers):
            for c_index, card in enumerate(worker.gpus):
                path = f"tenants[{index}].workers[{w_index}].gpus[{c_index}].uuid"
                if card.uuid in seen_cards:
                    issues.append(ConfigIssue(
                        path, f"duplicates {seen_cards[card.uuid]}; card uuids must be unique across the whole stack",
                        card.uuid,
                    ))
                seen_cards.setdefault(card.uuid, path)
    issues.extend(_container_name_issues(config, tenants))
    issues.extend(_node_image_issues(config, tenants))
    explicit = [
        (f"tenants[{index}].{key}", cidr)
        for index, tenant in tenants
        for key, cidr in (("serviceCidr", tenant.service_cidr), ("podCidr", tenant.pod_cidr))
        if cidr is not None
    ]
    for i, j in overlapping_pairs(explicit):
        issues.append(ConfigIssue(
            explicit[j][0],
            f"overlaps {explicit[i][0]} ({explicit[i][1]}); service and pod ranges must not overlap each other or any "
            "other tenant's",
            explicit[j][1],
        ))
    return issues


def _node_image_issues(config: StackConfig, tenants: Indexed) -> list[ConfigIssue]:
    """A node image runs as a privileged container: a tag can be moved under it, a digest cannot."""
    if config.management.allow_unpinned_node_images:
        return []
    images = [(f"tenants[{index}].nodeImage", tenant.node_image) for index, tenant in tenants]
    if not config.management.adopts_existing_cluster:
        images.insert(0, ("management.nodeImage", config.management.node_image))
    return [
        ConfigIssue(
            path,
            "is not pinned by digest: it runs as a privileged container, and whoever can move its tag gets root on "
            "the Docker host. Append @sha256:<digest> (kind's release notes list each kindest/node image with its "
            "digest; `docker buildx imagetools inspect <image>` prints it), or, for an image built locally, which has "
            "no registry digest, set management.allowUnpinnedNodeImages: true",
            image,
        )
        for path, image in images
        if image is not None and "@sha256:" not in image
    ]


def _container_name_issues(config: StackConfig, tenants: Indexed) -> list[ConfigIssue]:
    """Node names `<tenant>-<worker>` name resources of the program and, for container workers, Docker containers
    (unique per host): no two workers, and no container worker and kind's own node, may share one."""
    seen: dict[str, str] = {}
    if not config.management.adopts_existing_cluster:
        seen[f"{config.management.cluster_name}-control-plane"] = (
            f"the kind node of management.clusterName '{config.management.cluster_name}'")
    issues = []
    for index, tenant in tenants:
        for w_index, worker in enumerate(tenant.workers):
            name = f"{tenant.name}-{worker.name}"
            path = f"tenants[{index}].workers[{w_index}]"
            if name in seen and not (worker.ssh is not None and seen[name].startswith("the kind node")):
                what = "Node name" if worker.ssh is not None else "container and Node name"
                issues.append(ConfigIssue(
                    f"{path}.name",
                    f"makes the {what} '{name}', which is also {seen[name]}; node names must be unique - rename the "
                    "tenant or the worker",
                    worker.name,
                ))
            else:
                seen.setdefault(name, f"{path} (tenant '{tenant.name}', worker '{worker.name}')")
    return issues


def _known_networks(config: StackConfig) -> list[tuple[str, ipaddress.IPv4Network]]:
    """The real networks the stack knows, by config key: the servers' and the load-balancer pool's. Operators'
    networks are not among them: tenant nodes never route to them."""
    management = config.management
    known = [(f"management.workerCidrs[{i}]", cidr) for i, cidr in enumerate(management.worker_cidrs)]
    known += [(f"tenants[{t}].workerCidrs[{i}]", cidr)
              for t, tenant in enumerate(config.tenants) for i, cidr in enumerate(tenant.worker_cidrs)]
    # Wider than a /8 is "anyone" (allowAnySource), not a network.
    networks = [(key, network) for key, cidr in known
                if (network := ipaddress.IPv4Network(cidr, strict=False)).prefixlen >= MIN_SOURCE_PREFIX]
    if management.load_balancer_pool:
        first, _, last = management.load_balancer_pool.partition("-")
        bounds = [ipaddress.IPv4Address(a) for a in (first, last)] if last else None
        networks += [("management.loadBalancerPool", network) for network in
                     (ipaddress.summarize_address_range(*bounds) if bounds
                      else [ipaddress.IPv4Network(management.load_balancer_pool)])]
    for t, tenant in enumerate(config.tenants):
        for w, worker in enumerate(tenant.workers):
            try:
                networks.append((f"tenants[{t}].workers[{w}].ssh.host", ipaddress.IPv4Network(worker.ssh.host)))
            except (AttributeError, ValueError):
                continue  # a container worker, or a host name (not resolved here)
    return networks


def _known_network_issues(config: StackConfig, allocated: list[Tenant]) -> list[ConfigIssue]:
    """Tenant ranges (the automatic ones too) against real networks: felix routes a pod range into its tunnel or a
    blackhole and skips NAT towards it (felix route_mgr.go, rules/nat.go), so those addresses become unreachable."""
    known = _known_networks(config)
    taken = [network for _, network in known] + [ipaddress.IPv4Network(cidr) for t in allocated
                                                  for cidr in (t.service_cidr, t.pod_cidr)]
    issues = []
    for index, (given, tenant) in enumerate(zip(config.tenants, allocated, strict=True)):
        for key, cidr, explicit in (("serviceCidr", tenant.service_cidr, given.service_cidr),
                                    ("podCidr", tenant.pod_cidr, given.pod_cidr)):
            network = ipaddress.IPv4Network(cidr)
            # A workerCidrs entry wider than the range is an allow-list that may hold it, not a collision.
            other = next(((k, n) for k, n in known if n.overlaps(network)
                          and not (k.endswith("]") and "workerCidrs" in k and n.prefixlen < network.prefixlen)), None)
            if other is None:
                continue
            how = "as set" if explicit else "picked by the tenant's name"
            free = free_block(key, taken)
            issues.append(ConfigIssue(
                f"tenants[{index}].{key}",
                f"{cidr} ({how}) overlaps {other[0]} ({other[1]}): the tenant's nodes would take those addresses for "
                f"their own (Calico tunnels pod addresses, kube-proxy captures service addresses); set "
                f"tenants[{index}].{key} to a free range"
                + (f", e.g. {key}: {free}" if free else " outside those networks"),
            ))
    return issues


def _pod_room_issues(tenants: Indexed) -> list[ConfigIssue]:
    issues = []
    for index, tenant in tenants:
        if tenant.pod_cidr is None:
            continue  # allocated later as a /16, then checked again
        prefix = ipaddress.IPv4Network(tenant.pod_cidr).prefixlen
        room = 2 ** (NODE_POD_PREFIX - prefix)
        if room < len(tenant.workers):
            issues.append(ConfigIssue(
                f"tenants[{index}].podCidr",
                f"has room for {room} node(s) (one /{NODE_POD_PREFIX} each) but the tenant has {len(tenant.workers)} "
                "workers; use a larger range",
                tenant.pod_cidr,
            ))
    return issues


def _secret_hint(path: str) -> str:
    return (
        f"store it as a secret, read from its file on stdin: make secret STACK=<stack> KEY='{path}' FILE=<file> "
        "(a plain value would sit unencrypted in Pulumi.<stack>.yaml)"
    )


def _current_context_issues(document: dict[str, Any], key: str) -> list[ConfigIssue]:
    """The current context must name a context whose cluster and user exist (what the program connects with)."""
    try:
        current_context(document)
    except KubeconfigError as error:
        return [ConfigIssue(key, error.problem)]
    return []


def _kubeconfig_issues(kubeconfig: str, allow_exec: bool) -> list[ConfigIssue]:
    """What an adopted cluster's kubeconfig may not do, never echoing it."""
    key = "management.kubeconfig"
    try:
        document = parse(kubeconfig)
    except KubeconfigError as error:
        return [ConfigIssue(key, error.problem)]
    issues = []
    sections = {name: document.get(name) for name in ("clusters", "users", "contexts")}
    for name, entries in sections.items():
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            issues.append(ConfigIssue(key, f"has no list of {name} (a kubeconfig lists clusters, users and contexts)"))
    if issues:
        return issues
    for name, field in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
        for entry in sections[name]:
            if not isinstance(entry.get(field, {}), dict):
                issues.append(ConfigIssue(key, f"{name} entry '{entry.get('name')}' has a `{field}` that is not a "
                                               "mapping"))
    if issues:
        return issues
    issues += _current_context_issues(document, key)
    for entry in sections["clusters"]:
        cluster = entry.get("cluster") or {}
        server = cluster.get("server", "")
        if not isinstance(server, str) or not server:
            issues.append(ConfigIssue(key, f"cluster '{entry.get('name')}' has no server URL"))
            continue
        if cluster.get("insecure-skip-tls-verify"):
            issues.append(ConfigIssue(key, f"cluster '{entry.get('name')}' sets insecure-skip-tls-verify: the API "
                                           "server's identity would not be checked; give its CA "
                                           "(certificate-authority-data) instead"))
        if server.startswith("http://"):
            issues.append(ConfigIssue(key, f"cluster '{entry.get('name')}' has a plain-HTTP server ({server}); use "
                                           "its https:// address"))
    for entry in sections["users"]:
        user = entry.get("user") or {}
        if ("exec" in user or "auth-provider" in user) and not allow_exec:
            issues.append(ConfigIssue(key, f"user '{entry.get('name')}' runs a credential plugin (exec/auth-provider), "
                                           "i.e. a command on the Pulumi host taken from config; set "
                                           "management.allowExecCredentials: true if that is intended (some managed "
                                           "clusters need it), or use a certificate or token credential"))
    return issues


def _any_source_issues(config: StackConfig) -> list[ConfigIssue]:
    if config.management.allow_any_source:
        return []
    issues = []
    sources = [("management.workerCidrs", config.management.worker_cidrs),
               ("management.operatorCidrs", config.management.operator_cidrs)]
    sources += [(f"tenants[{i}].workerCidrs", t.worker_cidrs) for i, t in enumerate(config.tenants)]
    for key, cidrs in sources:
        for index, cidr in enumerate(cidrs):
            # Anything wider than a /8 (0.0.0.0/0, or 0.0.0.0/1 + 128.0.0.0/1) is "anyone", not a network of yours.
            if ipaddress.ip_network(cidr).prefixlen < MIN_SOURCE_PREFIX:
                issues.append(ConfigIssue(
                    f"{key}[{index}]",
                    f"is wider than a /{MIN_SOURCE_PREFIX} and opens tenant API servers to (nearly) any address; list "
                    "the networks workers and operators connect from, or set management.allowAnySource: true to "
                    "accept that on purpose",
                    cidr,
                ))
    return issues


MIN_SOURCE_PREFIX = 8


def _source_range_issues(config: StackConfig, tenants: Indexed) -> list[ConfigIssue]:
    """No tenant admits more source networks than its TenantControlPlane takes: the API server would refuse it at
    `up`, after the kind cluster and everything before the tenant exist."""
    management = config.management
    shared = {*management.worker_cidrs, *management.operator_cidrs}
    # The lab adds the kind network, whose range docker picks when the cluster is created.
    lab = 0 if management.adopts_existing_cluster else 1
    kind = " and the kind network" if lab else ""
    fix = (f"a TenantControlPlane admits at most {MAX_SOURCE_RANGES} (Kamaji's limit on loadBalancerSourceRanges). "
           "Merge neighbouring networks into the wider one that covers them (10.20.0.0/24 and 10.20.1.0/24 are "
           "10.20.0.0/23) or list fewer")
    if len(shared) + lab > MAX_SOURCE_RANGES:
        key = "management.operatorCidrs" if management.operator_cidrs else "management.workerCidrs"
        return [ConfigIssue(key, f"management.workerCidrs and management.operatorCidrs{kind} are {len(shared) + lab} "
                                 f"networks every tenant admits: {fix}")]
    issues = []
    for index, tenant in tenants:
        count = len(shared | set(tenant.worker_cidrs)) + lab
        if count > MAX_SOURCE_RANGES:
            issues.append(ConfigIssue(
                f"tenants[{index}].workerCidrs",
                f"with management.workerCidrs and management.operatorCidrs{kind} makes {count} networks that "
                f"tenants[{index}] ('{tenant.name}') admits: {fix}",
            ))
    return issues


def _infrastructure_issues(config: StackConfig, tenants: Indexed, secret_keys: Collection[str]) -> list[ConfigIssue]:
    """Existing management cluster and SSH workers: what goes with what, and secrets stored as secrets."""
    issues: list[ConfigIssue] = []
    management = config.management
    if management.adopts_existing_cluster:
        if "management" not in secret_keys:
            issues.append(ConfigIssue("management.kubeconfig", _secret_hint("management.kubeconfig")))
        issues.extend(_kubeconfig_issues(management.kubeconfig or "", management.allow_exec_credentials))
        for key, field in (("clusterName", "cluster_name"), ("nodeImage", "node_image")):
            if field in management.model_fields_set:
                issues.append(ConfigIssue(
                    f"management.{key}",
                    "only applies to the kind cluster this program creates; remove it when management.kubeconfig "
                    "names an existing cluster",
                ))
        if not management.worker_cidrs and not all(t.worker_cidrs for t in config.tenants):
            issues.append(ConfigIssue(
                "management.workerCidrs",
                "is required with management.kubeconfig unless every tenant sets its own workerCidrs: list the IPv4 "
                "networks your GPU servers (and the load balancer's source NAT, i.e. the management nodes) reach "
                "tenant API servers from, e.g. ['10.20.0.0/16']; tenant control planes accept connections only "
                "from there",
            ))
    elif management.allow_exec_credentials:
        issues.append(ConfigIssue("management.allowExecCredentials", "only applies with management.kubeconfig"))
    issues.extend(_mirror_issues(config, secret_keys))
    issues.extend(_any_source_issues(config))
    issues.extend(_source_range_issues(config, tenants))
    if config.nvidia is not None and config.gpu_mode != "nvidia":
        issues.append(ConfigIssue("nvidia", "only applies with gpuMode: nvidia; remove it or set gpuMode: nvidia"))
    ssh_workers = False
    seen_hosts: dict[tuple[str, int], str] = {}
    for index, tenant in tenants:
        for w_index, worker in enumerate(tenant.workers):
            path = f"tenants[{index}].workers[{w_index}]"
            if worker.ssh is not None:
                ssh_workers = True
                address = (worker.ssh.host.lower(), worker.ssh.port)
                if address in seen_hosts:
                    issues.append(ConfigIssue(
                        f"{path}.ssh.host",
                        f"is also {seen_hosts[address]}; a machine can be only one worker (two joins on one machine "
                        "would reset each other)",
                        worker.ssh.host,
                    ))
                seen_hosts.setdefault(address, f"{path}.ssh.host")
                if worker.ssh.host_key is None:
                    ssh = worker.ssh
                    port = f"-p {ssh.port} " if ssh.port != 22 else ""
                    issues.append(ConfigIssue(
                        f"{path}.ssh.hostKey",
                        f"is required: without it anyone answering at {ssh.host} would receive the join token. Read "
                        f"the server's key where you trust the network (or from its console: cat "
                        f"/etc/ssh/ssh_host_ed25519_key.pub), e.g. `ssh-keyscan {port}-t ed25519 {ssh.host}`, and "
                        f"set it without the host name: pulumi config set --path "
                        f"'{PROJECT}:{path}.ssh.hostKey' 'ssh-ed25519 AAAA...'",
                    ))
            elif management.adopts_existing_cluster:
                issues.append(ConfigIssue(
                    f"{path}.ssh",
                    "is required with management.kubeconfig: a worker without `ssh` is a local kindest/node container "
                    "on the kind network, which an existing cluster does not have",
                ))
    if ssh_workers and "tenants" not in secret_keys:
        issues.append(ConfigIssue(
            "tenants[*].workers[*].ssh.privateKey", _secret_hint("tenants[0].workers[0].ssh.privateKey")
        ))
    return issues


def _mirror_issues(config: StackConfig, secret_keys: Collection[str]) -> list[ConfigIssue]:
    management = config.management
    issues = []
    if management.adopts_existing_cluster and "image_mirror" in management.model_fields_set and \
            management.image_mirror:
        issues.append(ConfigIssue(
            "management.imageMirror",
            "only applies to the kind lab (the stack runs the mirror on the kind network); with "
            "management.kubeconfig point your SSH workers at an existing mirror with management.registryMirrors",
        ))
    if management.docker_hub is not None:
        if not management.runs_image_mirror:
            issues.append(ConfigIssue(
                "management.dockerHub",
                "is for the stack's docker.io mirror, which runs only in the kind lab with management.imageMirror on; "
                "remove it",
            ))
        if "management" not in secret_keys:
            issues.append(ConfigIssue("management.dockerHub.token", _secret_hint("management.dockerHub.token")))
    if not management.allow_http_mirrors:
        for registry, mirror in sorted(management.registry_mirrors.items()):
            if mirror.startswith("http://"):
                issues.append(ConfigIssue(
                    f"management.registryMirrors.{registry}",
                    f"{mirror!r} is plain HTTP: anyone on the path to it could hand your GPU servers other content. "
                    "Use an https:// mirror, or set management.allowHttpMirrors: true to accept that (the mirror then "
                    "serves layers only, by digest, and tags are resolved at the registry itself)",
                ))
    if management.registry_mirrors and not any(w.ssh for t in config.tenants for w in t.workers):
        issues.append(ConfigIssue(
            "management.registryMirrors",
            "only applies to SSH workers (container workers use the stack's own mirror); remove it",
        ))
    if management.configure_containerd and not management.registry_mirrors:
        issues.append(ConfigIssue(
            "management.configureContainerd",
            "only applies with management.registryMirrors (it lets SSH workers' containerd read their hosts.toml "
            "files); remove it or set registryMirrors",
        ))
    return issues


# --------------------------------------------------------------------------- #
# Loading
# --------------------------------------------------------------------------- #


def _has_default(loc: tuple[Any, ...]) -> bool:
    model = _model_at(loc[:-1])
    if model is None:
        return False
    field = next((f for n, f in model.model_fields.items() if (f.alias or n) == loc[-1]), None)
    return field is not None and not field.is_required()


def _prune(raw: Any, loc: tuple[Any, ...], extra: bool) -> int:
    """Remove what failed at `loc` from `raw`: the key itself when it is unknown or optional, else the innermost
    list element holding it (a card, a worker, a tenant). The length of the location removed; 0 when nothing
    could be removed."""
    cut = len(loc)
    if not (extra or _has_default(loc)):
        cut = max((i + 1 for i, part in enumerate(loc) if isinstance(part, int)), default=0)
    if cut == 0:
        return 0
    parent = raw
    for part in loc[: cut - 1]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return 0
    try:
        del parent[loc[cut - 1]]
    except (KeyError, IndexError, TypeError):
        return 0
    return cut


@dataclass
class _Pruned:
    """What `_validate` removed to validate the rest: which tenants (by their index in the stack file) lost
    something, where each remaining tenant sits in the file, and whether part of `smokeTest` went."""

    origin: list[int]
    tenants: set[int]
    smoke_test: bool = False


def _location_order(entry: dict[str, Any]) -> list[tuple[int, str]]:
    # List indices compare as numbers (tenants[10] after tenants[2]), keys by name.
    return [(part, "") if isinstance(part, int) else (-1, str(part)) for part in entry["loc"]]


def _validate(raw: Any) -> tuple[StackConfig | None, list[ConfigIssue], _Pruned]:
    """The model, and every field error; with errors, the model of what is left once they are pruned, so the checks
    across fields report in the same round."""
    import copy

    issues: list[ConfigIssue] = []
    working = copy.deepcopy(raw)
    tenants = raw.get("tenants") if isinstance(raw, dict) else None
    pruned = _Pruned(origin=list(range(len(tenants))) if isinstance(tenants, list) else [], tenants=set())
    for _ in range(20):
        try:
            return StackConfig.model_validate(working), issues, pruned
        except ValidationError as error:
            errors = error.errors()
        if not issues:
            # A misspelt required key is one problem: the unknown key says what it meant, so the meant key's
            # "required key is missing" is not reported beside it.
            misspelt = {(*e["loc"][:-1], meant) for e in errors
                        if e["type"] == "extra_forbidden" and (meant := _meant(tuple(e["loc"])))}
            issues = [_issue_from_pydantic(e) for e in errors
                      if not (e["type"] == "missing" and tuple(e["loc"]) in misspelt)]
        # Delete from the deepest location first so earlier list indices stay valid.
        removed = False
        for entry in sorted(errors, key=_location_order, reverse=True):
            loc = tuple(entry["loc"])
            cut = _prune(working, loc, entry["type"] == "extra_forbidden")
            removed |= cut > 0
            if cut and loc[0] == "tenants" and len(loc) > 1 and isinstance(loc[1], int) \
                    and loc[1] < len(pruned.origin):
                pruned.tenants.add(pruned.origin[loc[1]])
                if cut == 2:  # the whole tenant
                    del pruned.origin[loc[1]]
            elif cut and loc[0] == "smokeTest":
                pruned.smoke_test = True
        if not removed:
            break
    return None, issues, pruned


def _range_conflict_issue(conflict: Any, config: StackConfig, ranges: list[Any]) -> ConfigIssue:
    c = conflict
    other = config.tenants[c.other]
    other_cidr = ranges[c.other].service_cidr if c.other_key == "serviceCidr" else ranges[c.other].pod_cidr
    other_is_automatic = (other.service_cidr if c.other_key == "serviceCidr" else other.pod_cidr) is None
    free = f"e.g. {c.key}: {c.free}" if c.free else "outside every other tenant's ranges"
    if other_is_automatic:
        message = (f"is not set, and this tenant's name picks {c.cidr}, as tenants[{c.other}] ('{other.name}') does "
                   f"for its {c.other_key}; pin one of them (pinning a tenant's current range never moves it): keep "
                   f"the one that already runs with {c.key}: {c.cidr}, and give the other a free range, {free}")
    else:
        message = (f"is not set, and this tenant's name picks {c.cidr}, which overlaps "
                   f"tenants[{c.other}].{c.other_key} ({other_cidr}); if this tenant already runs, pin {c.key}: "
                   f"{c.cidr} here and move the other range; otherwise pin a free one here, {free}")
    return ConfigIssue(f"tenants[{c.index}].{c.key}", message)


def load_stack_config(
    raw: dict[str, Any], secret_keys: Collection[str] = (), stack: str | None = None
) -> StackConfig:
    """Validate raw config and fill in automatic CIDRs, or raise ConfigError listing every problem at once.

    `secret_keys` names the top-level keys Pulumi holds as secrets (or that contain secrets); `stack`, when known,
    is named in the error's fix line.
    """
    config, issues, pruned = _validate(raw)
    if config is not None:
        # Paths name each tenant by its place in the stack file, even when one before it was refused whole.
        tenants = list(zip(pruned.origin, config.tenants, strict=True))
        # A value refused above was pruned: a cross-field check would only report its absence again. So the
        # smoke-test fit skips a tenant that lost a card, worker or key, and nothing is judged against a smokeTest
        # that lost a key. (Fewer workers can only pass the pod-range check more easily: it judges them all.)
        refused = {issue.path for issue in issues}
        checks = (_stack_issues(config, tenants) + _pod_room_issues(tenants)
                  + (_smoke_test_issues(config, tenants, pruned.tenants) if not pruned.smoke_test else [])
                  + _infrastructure_issues(config, tenants, secret_keys))
        issues += [issue for issue in checks if issue.path not in refused]
    if issues or config is None:
        raise ConfigError(issues, stack)
    ranges, conflicts = allocate_ranges([(t.name, t.service_cidr, t.pod_cidr) for t in config.tenants])
    if conflicts:
        raise ConfigError([_range_conflict_issue(c, config, ranges) for c in conflicts], stack)
    allocated = [
        tenant.model_copy(update={"service_cidr": r.service_cidr, "pod_cidr": r.pod_cidr})
        for tenant, r in zip(config.tenants, ranges, strict=True)
    ]
    issues = _known_network_issues(config, allocated)
    config = config.model_copy(update={"tenants": allocated})
    issues += _pod_room_issues(list(enumerate(config.tenants)))
    if issues:
        raise ConfigError(issues, stack)
    return config
