"""The lab the end-to-end scenarios share: one stack of the reference config on this Docker host, driven through the
Pulumi Automation API (the `pulumi` CLI underneath), never through a fake.

The project is copied to a scratch directory, so stack files and state never touch the checkout: a local file
backend, a random passphrase in a file beside it (mode 600), and a private TMPDIR (pulumi-kubernetes leaves each
provider's kubeconfig there, as `make up` knows). The stack is `e2e`, its kind cluster `gpu-tenancy-e2e`.

`python -m tests.e2e.lab diagnostics <work dir>` writes what CI uploads after a failed run: the state as
`pulumi stack export` prints it (secrets stay encrypted), `kind export logs`, and the logs of the stack's containers.
"""

from __future__ import annotations

import copy
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from components.management.image_cache import LABEL_STACK

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_STACK = ROOT / "tests" / "fixtures" / "reference-stack.yaml"
PROJECT = "gpu-tenancy"
STACK = "e2e"
CLUSTER = "gpu-tenancy-e2e"
# kind labels every node container with its cluster (pkg/cluster/internal/providers/docker/constants.go).
KIND_CLUSTER_LABEL = "io.x-k8s.kind.cluster"
# The network kind creates on first use and never removes: it belongs to kind, not to a stack.
KIND_NETWORK = "kind"
TENANTS_KEY = f"{PROJECT}:tenants"
# Steps that change something (the engine's OpType values); `same`, `read`, `discard` and `refresh` do not.
MUTATING = frozenset({"create", "update", "replace", "delete", "create-replacement", "delete-replaced"})
REPLACING = frozenset({"replace", "create-replacement", "delete-replaced"})
# The counts of `summary.resource_changes` that are no change: what the engine's HasChanges leaves out (pulumi
# pkg/engine/update.go). A `.get` is counted as `read` whenever what it read differs from the last time (a Node's
# status does), and as `discard` when the program stops reading it; default providers are never counted.
NO_CHANGE = frozenset({"same", "read", "read-replacement", "discard"})
# The owner of a resource whose name is no tenant's (`<tenant>` or `<tenant>-...`): kind, the caches, Kamaji.
MANAGEMENT = "management"
# Where the work directory goes (default: pytest's temporary directory); CI sets it to find the diagnostics.
WORKDIR_ENV = "GPU_TENANCY_E2E_DIR"


# --- the stack file ----------------------------------------------------------------------------------------------


def reference_stack() -> dict[str, Any]:
    """tests/fixtures/reference-stack.yaml as the e2e stack file: the same lab, with its own kind cluster name (so
    it never meets a `make up` lab of stack dev on the same host)."""
    document = yaml.safe_load(REFERENCE_STACK.read_text())
    config = document["config"]
    config[f"{PROJECT}:management"] = {**(config.get(f"{PROJECT}:management") or {}), "clusterName": CLUSTER}
    return document


def tenants(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    return document["config"][TENANTS_KEY]


def tenant_names(document: Mapping[str, Any]) -> list[str]:
    return [tenant["name"] for tenant in tenants(document)]


# --- what an update did ------------------------------------------------------------------------------------------


def resource_name(urn: str) -> str:
    """The name a resource was given in the program: the last `::` part of its URN."""
    return urn.rsplit("::", 1)[-1]


def owner(name: str, tenant_list: Iterable[str]) -> str:
    """Which tenant a resource belongs to (its name is the tenant's or starts with `<tenant>-`), else management."""
    for tenant in sorted(tenant_list, key=len, reverse=True):
        if name == tenant or name.startswith(f"{tenant}-"):
            return tenant
    return MANAGEMENT


def step_ops(events: Iterable[auto.EngineEvent]) -> dict[str, set[str]]:
    """URN -> the mutating steps the engine took on it, from the events of one `up` or `destroy`."""
    ops: dict[str, set[str]] = {}
    for event in events:
        pre = event.resource_pre_event
        if pre is None or pre.planning:
            continue
        op = getattr(pre.metadata.op, "value", pre.metadata.op)
        if op in MUTATING:
            ops.setdefault(pre.metadata.urn, set()).add(op)
    return ops


@dataclass
class Update:
    """One `up` or `destroy`: the engine's own summary and the steps it reported, resource by resource."""

    result: auto.UpResult | auto.DestroyResult
    ops: dict[str, set[str]] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        """`summary.resource_changes`: op -> number of resources, as `pulumi stack history` records it."""
        changes = self.result.summary.resource_changes or {}
        return {str(getattr(op, "value", op)): count for op, count in changes.items()}

    @property
    def changes(self) -> dict[str, int]:
        """The counts that are changes (NO_CHANGE left out): `{}` for an update that changed nothing."""
        return {op: count for op, count in self.counts.items() if op not in NO_CHANGE}

    @property
    def outputs(self) -> dict[str, Any]:
        """Every stack output, secrets in clear: keep them out of assertion messages."""
        return {key: output.value for key, output in getattr(self.result, "outputs", {}).items()}

    @property
    def plain_outputs(self) -> dict[str, Any]:
        """The outputs that are not secrets (the kubeconfigs are), safe to compare and print."""
        return {key: output.value for key, output in getattr(self.result, "outputs", {}).items()
                if not output.secret}

    def names(self, *ops: str) -> set[str]:
        """Names of the resources with any of `ops` (default: any change)."""
        wanted = set(ops) or MUTATING
        return {resource_name(urn) for urn, done in self.ops.items() if done & wanted}

    def by_owner(self, tenant_list: Iterable[str]) -> dict[str, dict[str, set[str]]]:
        """owner -> op -> names, for every changed resource."""
        tenant_list = list(tenant_list)
        out: dict[str, dict[str, set[str]]] = {}
        for urn, done in self.ops.items():
            for op in done:
                out.setdefault(owner(resource_name(urn), tenant_list), {}).setdefault(op, set()).add(
                    resource_name(urn))
        return out

    def render(self) -> str:
        """For assertion messages: the summary, then each changed resource."""
        lines = [f"summary: {self.counts}"]
        lines += [f"  {', '.join(sorted(done))}: {urn}" for urn, done in sorted(self.ops.items())]
        return "\n".join(lines)


# --- what is on the host -----------------------------------------------------------------------------------------


def _run(argv: list[str], timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)


def docker_names(what: str, *filters: str) -> set[str]:
    """Names of Docker containers (all, running or not), volumes or networks, with `--filter` values."""
    command = {"container": ["docker", "ps", "-a"], "volume": ["docker", "volume", "ls"],
               "network": ["docker", "network", "ls"]}[what]
    argv = [*command, *(arg for value in filters for arg in ("--filter", value)), "--format", "{{.Name}}"]
    if what == "container":
        argv[-1] = "{{.Names}}"
    return set(_run(argv, check=True).stdout.split())


def kind_clusters() -> set[str]:
    return set(_run(["kind", "get", "clusters"], check=True).stdout.split())


@dataclass(frozen=True)
class Inventory:
    containers: frozenset[str]
    volumes: frozenset[str]
    networks: frozenset[str]

    @classmethod
    def now(cls) -> Inventory:
        return cls(*(frozenset(docker_names(what)) for what in ("container", "volume", "network")))

    def added_since(self, earlier: Inventory) -> Inventory:
        return Inventory(self.containers - earlier.containers, self.volumes - earlier.volumes,
                         self.networks - earlier.networks)


def stack_containers() -> set[str]:
    """Containers labelled with the e2e stack (workers, caches) or belonging to its kind cluster."""
    return docker_names("container", f"label={LABEL_STACK}={STACK}") | docker_names(
        "container", f"label={KIND_CLUSTER_LABEL}={CLUSTER}")


def container_id(name: str) -> str:
    return _run(["docker", "inspect", "--format", "{{.Id}}", name], check=True).stdout.strip()


def volume_exists(name: str) -> bool:
    return _run(["docker", "volume", "inspect", name]).returncode == 0


# --- the lab -----------------------------------------------------------------------------------------------------


class Lab:
    """The e2e stack in `workdir`: `up` with a stack document, `destroy`, and what the last update did."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.project = workdir / "project"
        if self.project.exists():
            raise RuntimeError(f"{self.project} exists (an earlier run's): remove {workdir} or choose another "
                               f"{WORKDIR_ENV}")
        self.state = workdir / "state"
        self.passphrase = workdir / "passphrase"
        self.tmp = workdir / "tmp"
        self.diagnostics = workdir / "diagnostics"
        # What the host held before the lab: the destroy scenario compares against it.
        self.baseline = Inventory.now()
        self.reference = reference_stack()
        self.current: dict[str, Any] | None = None
        # Set while an update runs: an update that raised leaves the stack somewhere between two configs.
        self.unsettled = False
        self.destroyed = False
        self.first: Update | None = None
        self._copy_project()
        self.write_stack(self.reference)
        # What the pulumi CLI runs with: the backend, the passphrase file, the private TMPDIR.
        self.env = {
            "PULUMI_BACKEND_URL": f"file://{self.state}",
            "PULUMI_CONFIG_PASSPHRASE_FILE": str(self.passphrase),
            "TMPDIR": str(self.tmp),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
        }
        self.stack = auto.create_or_select_stack(
            stack_name=STACK, work_dir=str(self.project), opts=auto.LocalWorkspaceOptions(env_vars=self.env),
        )

    def _copy_project(self) -> None:
        shutil.copytree(
            # .cache holds the pinned Helm charts (`make charts`), which the program installs from there. Left out:
            # the checkout's own state, passphrase and saved credentials (git-ignored), and what is rebuilt.
            ROOT, self.project, ignore=shutil.ignore_patterns(
                ".venv", ".git", ".pulumi-state", ".pulumi-passphrase", "*.kubeconfig", "outputs*.json",
                "__pycache__", "build"),
        )
        project_file = self.project / "Pulumi.yaml"
        settings = yaml.safe_load(project_file.read_text())
        # The checkout's virtualenv (the copy has none), and the scratch backend whichever of the project file and
        # PULUMI_BACKEND_URL the CLI prefers.
        settings["runtime"]["options"]["virtualenv"] = str(ROOT / ".venv")
        settings["backend"] = {"url": f"file://{self.state}"}
        project_file.write_text(yaml.safe_dump(settings, sort_keys=False))
        for directory in (self.state, self.tmp):
            directory.mkdir(mode=0o700)
        self.passphrase.touch(mode=0o600)
        self.passphrase.write_text(secrets.token_urlsafe(32) + "\n")

    def write_stack(self, document: Mapping[str, Any]) -> None:
        """The stack file's `config` becomes `document`'s; the rest stays (the CLI keeps `encryptionsalt` there)."""
        path = self.project / f"Pulumi.{STACK}.yaml"
        existing = yaml.safe_load(path.read_text()) if path.exists() else {}
        path.write_text(yaml.safe_dump({**(existing or {}), "config": document["config"]}, sort_keys=False))
        self.current = copy.deepcopy(dict(document))

    def up(self, document: Mapping[str, Any] | None = None, **options: Any) -> Update:
        """`pulumi up` of `document` (default: the stack file as it is), with its events."""
        if document is not None:
            self.write_stack(document)
        events: list[auto.EngineEvent] = []
        self.unsettled = True
        result = self.stack.up(on_output=print, on_event=events.append, color="never", **options)
        self.unsettled = False
        self.destroyed = False
        return Update(result, step_ops(events))

    def converge(self) -> None:
        """Back to the reference config, if a scenario left the stack elsewhere (or destroyed it)."""
        if self.unsettled or self.destroyed or self.current != self.reference:
            self.up(self.reference)

    def destroy(self, **options: Any) -> Update:
        events: list[auto.EngineEvent] = []
        self.unsettled = True
        result = self.stack.destroy(on_output=print, on_event=events.append, color="never", **options)
        self.unsettled = False
        self.destroyed = True
        return Update(result, step_ops(events))

    def resources(self) -> list[dict[str, Any]]:
        """The resources in the state (read in memory only: the Automation API exports with --show-secrets)."""
        return list((self.stack.export_stack().deployment or {}).get("resources") or [])

    def urn(self, name: str, type_: str) -> str:
        (urn,) = [r["urn"] for r in self.resources() if r["type"] == type_ and resource_name(r["urn"]) == name]
        return urn

    def close(self) -> None:
        """Tear down whatever is left, as `make down` does (an unreachable cluster does not stop it). A destroy
        that fails keeps the stack, so its state can still be read."""
        if not self.destroyed or self.unsettled:
            # The workspace runs every command with this very dict.
            self.env["PULUMI_K8S_DELETE_UNREACHABLE"] = "true"
            self.destroy()
        self.stack.workspace.remove_stack(STACK)


def write_diagnostics(workdir: Path, into: Path) -> list[str]:
    """What a failed run leaves for a person to read, in `into`; returns what could not be collected."""
    into.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []

    def save(name: str, argv: list[str], **kwargs: Any) -> None:
        try:
            done = _run(argv, **kwargs)
        except (OSError, subprocess.TimeoutExpired) as error:
            problems.append(f"{' '.join(argv)}: {error}")
            return
        (into / name).write_text(done.stdout + (f"\n--- stderr\n{done.stderr}" if done.stderr else ""))
        if done.returncode != 0:
            problems.append(f"{' '.join(argv)}: exit {done.returncode}")

    project = workdir / "project"
    if project.is_dir():
        # Without --show-secrets: secret values stay ciphertext (the passphrase is not collected).
        env = {**os.environ, "PULUMI_BACKEND_URL": f"file://{workdir / 'state'}",
               "PULUMI_CONFIG_PASSPHRASE_FILE": str(workdir / "passphrase"), "PULUMI_SKIP_UPDATE_CHECK": "true"}
        env.pop("PULUMI_CONFIG_PASSPHRASE", None)
        save("stack-export.json", ["pulumi", "stack", "export", "--stack", STACK], cwd=project, env=env)
    save("docker-ps.txt", ["docker", "ps", "-a", "--no-trunc"])
    try:
        clusters = kind_clusters()
    except (OSError, subprocess.SubprocessError) as error:
        clusters = set()
        problems.append(f"kind get clusters: {error}")
    if CLUSTER in clusters:
        save("kind-export-logs.txt", ["kind", "export", "logs", str(into / "kind"), "--name", CLUSTER], timeout=600)
    try:
        containers = docker_names("container", f"label={LABEL_STACK}={STACK}")
    except (OSError, subprocess.SubprocessError) as error:
        containers = set()
        problems.append(f"docker ps: {error}")
    for name in sorted(containers):
        save(f"{name}.log", ["docker", "logs", "--timestamps", name])
        # Without the environment: a cache's holds the Docker Hub token when one is configured.
        save(f"{name}.inspect.json", ["docker", "inspect", "--format",
                                      "{{json .State}} {{json .HostConfig}} {{json .NetworkSettings}}", name])
        # Worker containers run systemd: the kubelet's and containerd's journals say why a node did not join.
        save(f"{name}.journal.txt", ["docker", "exec", name, "journalctl", "--no-pager", "-u", "kubelet",
                                     "-u", "containerd"])
    if problems:
        (into / "not-collected.txt").write_text("\n".join(problems) + "\n")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] != "diagnostics":
        print("usage: python -m tests.e2e.lab diagnostics <work dir>", file=sys.stderr)
        return 2
    workdir = Path(argv[2])
    into = workdir / "diagnostics" / "after-the-run"
    problems = write_diagnostics(workdir, into)
    print(f"diagnostics in {into}" + (f" ({len(problems)} item(s) not collected)" if problems else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
