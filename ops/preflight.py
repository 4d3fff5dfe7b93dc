"""Preflight: check this host can run the lab (kind cluster + kindest/node worker containers) before `pulumi up`.

Run by `make up` before `pulumi up`; it takes about a second. Every failed check prints what is wrong and the
exact command that fixes it; the exit code is non-zero when any check fails. The probes (PATH lookups, commands
with their stdout and stderr kept apart, /proc reads, environment variables, the platform name, the Python
version) are injectable, so the checks are unit-tested without Docker.

Checked for a local lab: a Linux host (the tenants' MetalLB addresses live on the `kind` bridge, which only a
Linux host routes to), Docker Engine rather than Docker Desktop (same reason), a rootful daemon (rootless Docker
keeps the `kind` bridge in RootlessKit's namespace: same reason again), no userns-remap and no btrfs, zfs or
devicemapper storage (kind gives its own node --userns=host and a /dev/mapper bind there; the worker containers
get neither, so such hosts are refused), one Docker daemon for the docker
CLI (kind) and the pulumi-docker provider (the worker containers), an existing `kind` network large enough to
carve MetalLB's /24 from, kind >= v0.31.0 (v0.32.0 for a `management.nodeImage` of v1.37 or later), pulumi >=
v3.260.0, Python >= 3.10 and the inotify limits. A stack that adopts an existing cluster and has only SSH workers
needs just Python and the Pulumi CLI here. With `--stack NAME` the stack file is checked too: it must exist, hold
no credential in plain text and pass the program's own configuration validator.

Not checked, on purpose: swap and the conntrack table size. The worker containers run their kubelet with
`failSwapOn: false` (as kind's own nodes do), and the tenants' kube-proxy runs with `conntrack.maxPerCore: 0`,
so it never writes the host's conntrack sysctls; both are set in the program. A real machine joined over SSH
is checked by its own join script.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from naming import PROJECT
from ops.hostcheck import PULUMI_INSTALL

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# kind's "known issues" page recommends these for clusters with several nodes.
MIN_INOTIFY_WATCHES = 524288
MIN_INOTIFY_INSTANCES = 512

MIN_PYTHON = (3, 10)
# The release that published the first 1.35 kindest/node; it writes 1.35 images (the management default's minor)
# the same kubeadm config as v0.32.0 (pkg/cluster/internal/kubeadm/config.go: v1beta3).
MIN_KIND = (0, 31, 0)
KIND_RELEASE = "v0.31.0"
# The program relies on the engine replacing `deletedWith` dependents together with their target
# (pulumi/pulumi#23818, first released after v3.259.0).
MIN_PULUMI = (3, 260, 0)
# MetalLB's pool is carved from the last /24 of the kind network.
MAX_KIND_PREFIX = 24
# pulumi-docker's `host` when neither `docker:host` nor DOCKER_HOST is set (on Linux).
PULUMI_DOCKER_DEFAULT_HOST = "unix:///var/run/docker.sock"

# One `docker info` for the daemon checks: version, OS, security options (rootless, userns), storage driver.
DOCKER_INFO = ["docker", "info", "--format", "{{.ServerVersion}}\t{{.OperatingSystem}}\t{{json .SecurityOptions}}\t"
               "{{.Driver}}\t{{json .DriverStatus}}"]
KIND_NETWORK = ["docker", "network", "inspect", "kind", "--format", "{{json .IPAM.Config}}"]
ENDPOINT_FORMAT = ["--format", "{{.Endpoints.docker.Host}}"]

KIND_INSTALL = (
    "(arch=$(uname -m | sed -e s/x86_64/amd64/ -e s/aarch64/arm64/) && cd \"$(mktemp -d)\" && "
    f"curl -fsSLO https://kind.sigs.k8s.io/dl/{KIND_RELEASE}/kind-linux-$arch && "
    f"curl -fsSLO https://kind.sigs.k8s.io/dl/{KIND_RELEASE}/kind-linux-$arch.sha256sum && "
    "sha256sum -c kind-linux-$arch.sha256sum && sudo install -m 0755 kind-linux-$arch /usr/local/bin/kind)"
)


@dataclass(frozen=True)
class Probes:
    """How the checks look at the host; tests substitute fakes."""

    which: Callable[[str], str | None]
    # (exit code, stdout, stderr): checks read answers from stdout only.
    run: Callable[[Sequence[str]], tuple[int, str, str]]
    read: Callable[[str], str | None]
    env: Callable[[str], str | None]
    system: Callable[[], str]
    python_version: Callable[[], tuple[int, int, int]]
    realpath: Callable[[str], str]


def _run(argv: Sequence[str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=10, check=False,
            env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return 127, "", str(error)
    return done.returncode, done.stdout, done.stderr


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


HOST = Probes(
    which=shutil.which,
    run=_run,
    read=_read,
    env=lambda name: os.environ.get(name) or None,
    system=platform.system,
    python_version=lambda: tuple(sys.version_info[:3]),  # type: ignore[return-value]
    realpath=os.path.realpath,
)


@dataclass(frozen=True)
class CheckResult:
    name: str
    # False: a failure, with `fix` saying what to do. Skipped and informational results are not failures.
    ok: bool
    detail: str
    fix: str = ""
    # "skip": not checked, because a check it depends on failed; "info": nothing to do now. Empty for ok/FAIL.
    state: str = ""

    @property
    def mark(self) -> str:
        return self.state or ("ok  " if self.ok else "FAIL")


def skipped(name: str, needs: str) -> CheckResult:
    """A check that could not run because `needs` failed above: reported, never as a second failure."""
    return CheckResult(name, True, f"not checked: needs {needs}, which failed above", state="skip")


def _int_setting(probes: Probes, path: str) -> int | None:
    text = probes.read(path)
    try:
        return int(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def _version(text: str) -> tuple[int, int, int] | None:
    match = re.search(r"\bv?(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(part) for part in match.groups()) if match else None  # type: ignore[return-value]


def _dotted(version: Sequence[int]) -> str:
    return ".".join(str(part) for part in version)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def _said(stdout: str, stderr: str) -> str:
    return " ".join(line.strip() for line in (stderr or stdout).strip().splitlines()) or "no output"


def check_linux(probes: Probes) -> CheckResult:
    name = "Linux host"
    system = probes.system()
    if system == "Linux":
        return CheckResult(name, True, system)
    return CheckResult(
        name, False,
        f"this is {system or 'an unknown system'}: the tenants' MetalLB addresses live on the `kind` Docker bridge, "
        "which only a Linux host routes to (Docker Desktop on macOS/Windows keeps it inside a VM)",
        "run `make up` on a Linux machine (or inside a Linux VM) with Docker Engine: "
        "https://docs.docker.com/engine/install/",
    )


def check_python(probes: Probes) -> CheckResult:
    name = f"Python >= {_dotted(MIN_PYTHON)}"
    version = probes.python_version()
    if tuple(version[:2]) >= MIN_PYTHON:
        return CheckResult(name, True, _dotted(version))
    return CheckResult(
        name, False,
        f"the venv runs Python {_dotted(version)}; the program and its pinned dependencies need "
        f"{_dotted(MIN_PYTHON)} or newer",
        "install Python 3.10+ (e.g. `sudo apt-get install python3.12-venv`), then rebuild the venv with it: "
        "rm -rf .venv && make up PYTHON=python3.12",
    )


DOCKER_DAEMON = "Docker daemon answers"
DOCKER_ENGINE = "Docker Engine, not Docker Desktop"
ONE_DOCKER = "one Docker daemon for kind and Pulumi"
KIND_SUBNET = "kind network subnet"
ROOTFUL = "rootful Docker (not rootless)"
NO_USERNS_REMAP = "no user-namespace remapping in dockerd"
STORAGE = "Docker storage the worker kubelets can use"
NEEDS_THE_DAEMON = (DOCKER_ENGINE, ROOTFUL, NO_USERNS_REMAP, STORAGE, ONE_DOCKER, KIND_SUBNET)


@dataclass(frozen=True)
class DockerFacts:
    """What `docker info` says about the daemon, as the checks below read it."""

    system: str
    security_options: tuple[str, ...] = ()
    driver: str = ""
    backing_filesystem: str = ""


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _facts(line: str) -> DockerFacts:
    server, system, security, driver, status = (line.split("\t") + [""] * 5)[:5]
    options = _json(security)
    backing = ""
    for item in _json(status) or []:
        if isinstance(item, list) and len(item) == 2 and item[0] == "Backing Filesystem":
            backing = str(item[1]).lower()
    return DockerFacts(
        system.strip(),
        tuple(str(option) for option in options) if isinstance(options, list) else (),
        driver.strip().lower(),
        backing,
    )


def _docker_info(probes: Probes) -> tuple[CheckResult, DockerFacts | None]:
    """The daemon check, and what the daemon said about itself when it answered."""
    name = DOCKER_DAEMON
    code, stdout, stderr = probes.run(DOCKER_INFO)
    line = _first_line(stdout)
    server = line.partition("\t")[0].strip()
    if code == 0 and server:
        return CheckResult(name, True, f"server {server}"), _facts(line)
    said = _said("", stderr) if stderr.strip() else f"no server version (exit code {code})"
    if "permission denied" in stderr.lower():
        return CheckResult(
            name, False, f"docker refused this user: {said}",
            'sudo usermod -aG docker "$USER" && newgrp docker',
        ), None
    return CheckResult(
        name, False, f"`docker info` failed: {said}",
        "sudo systemctl start docker",
    ), None


def _security_option(facts: DockerFacts, name: str) -> bool:
    # Each option is a comma-separated list like "name=seccomp,profile=builtin" (kind provider.go info()).
    return any(f"name={name}" in option.split(",") for option in facts.security_options)


def check_rootful(facts: DockerFacts) -> CheckResult:
    """Rootless Docker runs its bridges, `kind` included, inside RootlessKit's network namespace, where the host
    cannot reach container addresses (docs.docker.com/engine/security/rootless/troubleshoot, moby/moby#43625):
    the tenants' MetalLB addresses on the `kind` bridge would be unreachable for Pulumi and `make verify`."""
    if not _security_option(facts, "rootless"):
        return CheckResult(ROOTFUL, True, "the daemon runs as root")
    return CheckResult(
        ROOTFUL, False,
        "this daemon is rootless: the `kind` bridge lives in RootlessKit's network namespace, so the tenants' "
        "MetalLB addresses on it cannot be reached from this host and every tenant provider would time out late "
        "in `pulumi up`",
        "use the system daemon: sudo systemctl enable --now docker && unset DOCKER_HOST && "
        "docker context use default (with this user in the docker group: sudo usermod -aG docker \"$USER\")",
    )


def check_no_userns_remap(facts: DockerFacts) -> CheckResult:
    """dockerd refuses a privileged container in a remapped user namespace unless it runs with --userns=host
    (moby daemon_unix.go verifyPlatformContainerSettings). kind adds that flag to its own node (kind
    provision.go, usernsRemap); the worker containers (components/worker/node.py) are privileged and do not."""
    if not _security_option(facts, "userns"):
        return CheckResult(NO_USERNS_REMAP, True, "off")
    return CheckResult(
        NO_USERNS_REMAP, False,
        "dockerd runs with userns-remap: it refuses the privileged worker containers ('privileged mode is "
        "incompatible with user namespaces'), so the first worker would fail",
        "remove \"userns-remap\" from /etc/docker/daemon.json, then sudo systemctl restart docker (or run the lab on "
        "a Docker host without it)",
    )


# kind binds /dev/mapper into its node on these drivers (provision.go mountDevMapper, kind#1416): without it the
# kubelet cannot resolve the device of its root filesystem and never starts.
DEVMAPPER_DRIVERS = ("btrfs", "zfs", "devicemapper")
DEVMAPPER_BACKING = ("btrfs", "zfs")


def check_storage(facts: DockerFacts) -> CheckResult:
    """The worker containers run a kubelet on Docker's storage as kind's nodes do, but without kind's /dev/mapper
    bind: refuse the storage where kind needs it. kind also binds it over an xfs backing filesystem; that is
    reported, not refused (xfs is the common default, and kind#1416 is about btrfs and zfs)."""
    driver, backing = facts.driver or "unknown", facts.backing_filesystem
    described = f"{driver}" + (f" on {backing}" if backing else "")
    fix = ("move Docker's data-root to an ext4 filesystem with the overlay2 driver (\"data-root\" and "
           "\"storage-driver\" in /etc/docker/daemon.json, then sudo systemctl restart docker)")
    if facts.driver in DEVMAPPER_DRIVERS or backing in DEVMAPPER_BACKING:
        return CheckResult(
            STORAGE, False,
            f"storage {described}: kind binds /dev/mapper into its own node here (kind#1416); the worker "
            "containers do not, so their kubelets could not find their root filesystem's device and the joins "
            "would time out",
            fix,
        )
    if backing == "xfs":
        return CheckResult(
            STORAGE, True,
            f"storage {described}: kind binds /dev/mapper into its nodes on xfs, the worker containers do not; if "
            "a worker's kubelet fails with 'failed to get rootfs info', " + fix,
            state="info",
        )
    return CheckResult(STORAGE, True, described)


def check_docker_engine(system: str) -> CheckResult:
    name = DOCKER_ENGINE
    if "docker desktop" not in system.lower():
        return CheckResult(name, True, system or "unknown operating system")
    return CheckResult(
        name, False,
        "the docker CLI talks to Docker Desktop, which runs containers in a VM: the `kind` bridge (and the "
        "tenants' MetalLB addresses on it) is not reachable from this host",
        "install Docker Engine (https://docs.docker.com/engine/install/), then `docker context use default` "
        "and quit Docker Desktop",
    )


def _context_endpoint(probes: Probes, context: str | None = None) -> tuple[str | None, str]:
    """The docker endpoint of `context` (the CLI's current one when None), or None and what went wrong."""
    argv = ["docker", "context", "inspect", *([context] if context else []), *ENDPOINT_FORMAT]
    code, stdout, stderr = probes.run(argv)
    endpoint = _first_line(stdout)
    if code == 0 and endpoint:
        return endpoint, ""
    return None, f"`{' '.join(argv[:4 if context else 3])}` failed: {_said(stdout, stderr)}"


def _same_endpoint(probes: Probes, first: str, second: str) -> bool:
    def normal(endpoint: str) -> str:
        endpoint = endpoint.strip().rstrip("/")
        if endpoint.startswith("unix://"):
            return "unix://" + probes.realpath(endpoint[len("unix://"):])
        return endpoint

    return normal(first) == normal(second)


def check_one_docker(
    probes: Probes, provider_config: Mapping[str, str] | None = None, stack: str | None = None
) -> CheckResult:
    """The docker CLI (kind) and the pulumi-docker provider (worker containers) must reach the same daemon.

    The CLI honours DOCKER_HOST, then DOCKER_CONTEXT, then `docker context use`. pulumi-docker 5.x takes its
    `context` (stack config `docker:context`, else DOCKER_CONTEXT) first, resolved from ~/.docker/contexts, and
    otherwise its `host` (stack config `docker:host`, else DOCKER_HOST, else unix:///var/run/docker.sock); it
    ignores `docker context use`.
    """
    name = ONE_DOCKER
    provider_config = provider_config or {}
    stack_flag = f" --stack {stack}" if stack else ""
    env_host, env_context = probes.env("DOCKER_HOST"), probes.env("DOCKER_CONTEXT")

    cli, problem = _context_endpoint(probes)
    if cli is None:
        return CheckResult(
            name, False, f"cannot tell which daemon the docker CLI uses: {problem}",
            "unset DOCKER_CONTEXT   # it names a context `docker context ls` does not list"
            if env_context else "docker context use default",
        )

    context = provider_config.get("context") or env_context
    context_source = (
        f"`docker:context` in Pulumi.{stack}.yaml" if provider_config.get("context") else "DOCKER_CONTEXT"
    )
    if context:
        undo = (f"pulumi config rm docker:context{stack_flag}" if provider_config.get("context")
                else "unset DOCKER_CONTEXT")
        if context == "default":
            return CheckResult(
                name, False,
                f"{context_source} names the context `default`, which pulumi-docker cannot resolve (it reads only "
                "~/.docker/contexts, where `default` has no entry)",
                f"{undo} && export DOCKER_HOST={cli}",
            )
        provider, problem = _context_endpoint(probes, context)
        if provider is None:
            return CheckResult(name, False, f"pulumi-docker would use {context_source}={context}, but {problem}",
                               f"{undo} && export DOCKER_HOST={cli}")
        source = f"{context_source}={context}"
    elif provider_config.get("host"):
        provider, source = provider_config["host"], f"`docker:host` in Pulumi.{stack}.yaml"
    elif env_host:
        provider, source = env_host, "DOCKER_HOST"
    else:
        provider, source = PULUMI_DOCKER_DEFAULT_HOST, "its default"

    if _same_endpoint(probes, cli, provider):
        return CheckResult(name, True, f"both use {cli}")
    steps = []
    if provider_config.get("context"):
        steps.append(f"pulumi config rm docker:context{stack_flag}")
    if env_context:
        steps.append("unset DOCKER_CONTEXT")
    if provider_config.get("host"):
        steps.append(f"pulumi config set docker:host {cli}{stack_flag}")
    steps.append(f"export DOCKER_HOST={cli}")
    return CheckResult(
        name, False,
        f"kind (the docker CLI) uses {cli} but the worker containers (pulumi-docker) would go to {provider} "
        f"({source}): the workers could not join the kind network",
        " && ".join(steps),
    )


def check_kind_network(probes: Probes) -> CheckResult:
    name = KIND_SUBNET
    fix = (
        "make down (in every checkout whose lab uses it), then docker network rm kind   "
        "# kind recreates it on the next `make up`, from Docker's default-address-pools "
        "(/etc/docker/daemon.json): they must hand out /24 or larger networks"
    )
    code, stdout, stderr = probes.run(KIND_NETWORK)
    if code != 0:
        said = _said(stdout, stderr)
        if "no such network" in said.lower() or "not found" in said.lower():
            return CheckResult(name, True, "no `kind` network yet; kind creates it")
        return CheckResult(name, False, f"`docker network inspect kind` failed: {said}", "docker network inspect kind")
    try:
        entries = json.loads(stdout.strip() or "null") or []
    except json.JSONDecodeError:
        entries = []
    subnets = []
    for entry in entries if isinstance(entries, list) else []:
        try:
            subnets.append(ipaddress.ip_network(str((entry or {}).get("Subnet", "")), strict=False))
        except (ValueError, AttributeError):
            continue
    ipv4 = [subnet for subnet in subnets if subnet.version == 4]
    if not ipv4:
        return CheckResult(
            name, False,
            f"the `kind` network has no IPv4 subnet ({', '.join(map(str, subnets)) or 'none'}): MetalLB's pool "
            "is carved from its last /24",
            fix,
        )
    subnet = ipv4[0]
    if subnet.prefixlen > MAX_KIND_PREFIX:
        return CheckResult(
            name, False,
            f"the `kind` network is {subnet}, smaller than a /{MAX_KIND_PREFIX}: MetalLB's pool is carved from its "
            f"last /{MAX_KIND_PREFIX}",
            fix,
        )
    return CheckResult(name, True, str(subnet))


def check_kind(probes: Probes) -> CheckResult:
    name = f"kind >= {KIND_RELEASE}"
    path = probes.which("kind")
    if not path:
        return CheckResult(name, False, "`kind` was not found on PATH", KIND_INSTALL)
    code, stdout, stderr = probes.run(["kind", "version"])
    version = _version(stdout) if code == 0 else None
    if version is None:
        return CheckResult(name, False, f"`kind version` printed no version: {_said(stdout, stderr)}", KIND_INSTALL)
    if version < MIN_KIND:
        stale = "" if path == "/usr/local/bin/kind" else f"   # then remove the old {path}"
        return CheckResult(
            name, False,
            f"{path} is v{_dotted(version)}; the management cluster's kindest/node 1.35 images need kind "
            f"{KIND_RELEASE} or newer",
            KIND_INSTALL + stale,
        )
    return CheckResult(name, True, f"v{_dotted(version)} at {path}")


# kind writes kubeadm v1beta4 from v0.32.0 (for Kubernetes >= v1.36.0) and v1beta3 before (kind
# pkg/cluster/internal/kubeadm/config.go at v0.31.0, v0.32.0); kubeadm v1.37 reads v1beta3 no more (kubernetes#136016).
V1BETA4_KUBERNETES, V1BETA4_KIND = (1, 37, 0), (0, 32, 0)


def check_kind_node_image(probes: Probes, stack_config: dict | None) -> list[CheckResult]:
    """Whether the installed kind can create the kind cluster's node image (none to check for an adopted cluster)."""
    from config.models import Management, parse_version
    from config.upgrade import image_version

    management = project_config(stack_config or {}).get("management") or {}
    if not isinstance(management, dict) or "kubeconfig" in management:
        return []
    image = str(management.get("nodeImage") or Management().node_image)
    name, version = "kind can create management.nodeImage", image_version(image)
    kind = _version(probes.run(["kind", "version"])[1]) if probes.which("kind") else None
    if version is None or kind is None:
        said = f"{image} names no Kubernetes version" if version is None else "no kind version (above)"
        return [CheckResult(name, True, f"{said}: not checked", state="info")]
    if parse_version(version) >= V1BETA4_KUBERNETES and kind < V1BETA4_KIND:
        release = f"v{_dotted(V1BETA4_KIND)}"
        return [CheckResult(
            name, False,
            f"kind v{_dotted(kind)} writes kubeadm v1beta3 for {version}; kubeadm v{_dotted(V1BETA4_KUBERNETES)} "
            f"and later read only v1beta4, which kind writes from {release}: `kind create cluster` would fail",
            KIND_INSTALL.replace(KIND_RELEASE, release) + "   # or a management.nodeImage below "
            f"v{_dotted(V1BETA4_KUBERNETES)}",
        )]
    return [CheckResult(name, True, f"kind v{_dotted(kind)}, Kubernetes {version}")]


def check_pulumi(probes: Probes) -> CheckResult:
    name = f"pulumi >= v{_dotted(MIN_PULUMI)}"
    path = probes.which("pulumi")
    if not path:
        return CheckResult(name, False, "`pulumi` was not found on PATH", PULUMI_INSTALL)
    code, stdout, stderr = probes.run(["pulumi", "version"])
    version = _version(stdout) if code == 0 else None
    if version is None:
        return CheckResult(name, False, f"`pulumi version` printed no version: {_said(stdout, stderr)}",
                           PULUMI_INSTALL)
    if version < MIN_PULUMI:
        return CheckResult(
            name, False,
            f"{path} is v{_dotted(version)}; the program relies on the engine replacing `deletedWith` dependents "
            "together with their target (pulumi/pulumi#23818, first released after v3.259.0)",
            PULUMI_INSTALL,
        )
    return CheckResult(name, True, f"v{_dotted(version)} at {path}")


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


CGROUP_V2 = "cgroup v2 on the Docker host"
DOCKER_CGROUP = ["docker", "info", "--format", "{{.CgroupVersion}}"]


def check_cgroup_v2(probes: Probes) -> CheckResult:
    """Kubelets from v1.35 exit on cgroup v1 (KubeletConfiguration failCgroupV1 defaults to true: kubernetes
    pkg/kubelet/apis/config/v1beta1/defaults.go), and kind's node and the worker containers use the host's cgroups."""
    code, stdout, stderr = probes.run(DOCKER_CGROUP)
    version = _first_line(stdout) if code == 0 else ""
    if version == "2":
        return CheckResult(CGROUP_V2, True, "cgroup v2")
    said = f"cgroup v{version}" if version else f"`docker info` gave no cgroup version: {_said(stdout, stderr)}"
    return CheckResult(
        CGROUP_V2, False,
        f"{said}: kubelets from v1.35 refuse to start on cgroup v1 (failCgroupV1 defaults to true), so the kind "
        "node and every worker would never become Ready",
        "boot the host with cgroup v2: add systemd.unified_cgroup_hierarchy=1 to the kernel command line (sudo "
        "grubby --update-kernel=ALL --args=systemd.unified_cgroup_hierarchy=1, or GRUB_CMDLINE_LINUX in "
        "/etc/default/grub and sudo update-grub) and reboot",
    )


def run_checks(
    probes: Probes = HOST,
    local_lab: bool = True,
    provider_config: Mapping[str, str] | None = None,
    stack: str | None = None,
) -> list[CheckResult]:
    """Host checks; without a local lab (existing cluster, SSH workers only) just Python and the Pulumi CLI.

    `provider_config` holds the stack's plain `docker:host` / `docker:context` settings, if any.
    """
    python, pulumi_cli = check_python(probes), check_pulumi(probes)
    if not local_lab:
        return [python, pulumi_cli]
    host = check_linux(probes)
    if not host.ok:
        # Docker, kind and the sysctls are questions about the Linux host the lab needs.
        return [host, python, pulumi_cli]
    results = [host, python]
    if not probes.which("docker"):
        daemon, facts = CheckResult(
            DOCKER_DAEMON, False, "the `docker` CLI is not on PATH",
            "install Docker Engine: https://docs.docker.com/engine/install/",
        ), None
    else:
        daemon, facts = _docker_info(probes)
    results.append(daemon)
    if daemon.ok and facts is not None:
        results += [check_docker_engine(facts.system), check_rootful(facts), check_no_userns_remap(facts),
                    check_storage(facts), check_one_docker(probes, provider_config, stack), check_kind_network(probes)]
    else:
        # Each asks the daemon, or is about the daemon kind and Pulumi will use.
        results += [skipped(name, "the Docker daemon") for name in NEEDS_THE_DAEMON]
    cgroup = check_cgroup_v2(probes) if daemon.ok else skipped(CGROUP_V2, "the Docker daemon")
    return [*results, check_kind(probes), pulumi_cli, *check_inotify(probes), cgroup]


# --- the stack file -----------------------------------------------------------------------------------------------

SECRET_LEAVES = ("kubeconfig", "privateKey")

# Stand-ins for encrypted values, so the validator can check everything around them. Shaped to pass the value
# validators of `privateKey` (a PEM private key) and `kubeconfig` (a kubeconfig document); never used elsewhere.
_PLACEHOLDER_PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\npreflight-placeholder\n-----END OPENSSH PRIVATE KEY-----\n"
)
_PLACEHOLDER_KUBECONFIG = yaml.safe_dump({
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "preflight", "cluster": {"server": "https://preflight.invalid:6443"}}],
    "users": [{"name": "preflight", "user": {}}],
    "contexts": [{"name": "preflight", "context": {"cluster": "preflight", "user": "preflight"}}],
    "current-context": "preflight",
})
_PLACEHOLDERS = {"privateKey": _PLACEHOLDER_PRIVATE_KEY, "kubeconfig": _PLACEHOLDER_KUBECONFIG}
_OPAQUE = "[encrypted]"


def project_config(stack_config: Mapping[str, Any]) -> dict[str, Any]:
    """The `gpu-tenancy:*` keys of a stack file, namespace removed (the way the tests and make docs read them)."""
    config = stack_config.get("config") or {}
    prefix = f"{PROJECT}:"
    return {key[len(prefix):]: value for key, value in config.items() if str(key).startswith(prefix)}


def docker_provider_config(stack_config: Mapping[str, Any]) -> dict[str, str]:
    """The stack's plain-text `docker:host` / `docker:context` settings (pulumi-docker's provider config)."""
    config = stack_config.get("config") or {}
    return {
        key: value
        for key in ("host", "context")
        if isinstance(value := config.get(f"docker:{key}"), str) and value
    }


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
    leaks = plaintext_secrets(project_config(stack_config))
    if not leaks:
        return CheckResult(name, True, "no credential in plain text")
    return CheckResult(
        name, False,
        f"{', '.join(leaks)} in plain text: anyone with the file has the credential",
        # The value from its file on stdin, never on a command line (the Makefile's `secret` target).
        " && ".join(f"make secret STACK={stack} KEY='{leak}' FILE=<file>" for leak in leaks),
    )


def _is_secure(value: object) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _unseal(node: Any, path: str, key: str | None, opaque: list[str]) -> tuple[Any, bool]:
    """`node` with `{secure: ...}` values replaced by placeholders, and whether it held any.

    Encrypted values other than `privateKey` / `kubeconfig` cannot be checked here; their paths go to `opaque`.
    """
    if _is_secure(node):
        if key in _PLACEHOLDERS:
            return _PLACEHOLDERS[key], True
        opaque.append(path)
        return _OPAQUE, True
    if isinstance(node, dict):
        found, result = False, {}
        for child_key, value in node.items():
            child_path = f"{path}.{child_key}" if path else str(child_key)
            result[child_key], secret = _unseal(value, child_path, str(child_key), opaque)
            found = found or secret
        return result, found
    if isinstance(node, list):
        found, items = False, []
        for index, value in enumerate(node):
            item, secret = _unseal(value, f"{path}[{index}]", None, opaque)
            items.append(item)
            found = found or secret
        return items, found
    return node, False


def unsealed_config(stack_config: dict) -> tuple[dict[str, Any], set[str], list[str]]:
    """The stack file's `gpu-tenancy` keys with encrypted values replaced by placeholders, the keys holding a
    secret, and the paths of encrypted values no placeholder can stand for (`_unseal`)."""
    raw: dict[str, Any] = {}
    secret_keys: set[str] = set()
    opaque: list[str] = []
    for key, value in project_config(stack_config).items():
        raw[key], secret = _unseal(value, key, key, opaque)
        # Keys with a plain-text credential count as secret here: check_stack_secrets already reports them with
        # the exact command, so the validator does not repeat it.
        if secret or plaintext_secrets({key: value}):
            secret_keys.add(key)
    return raw, secret_keys, opaque


def _hidden(issue: Any, opaque: Sequence[str]) -> bool:
    """An issue about a value preflight could not decrypt (unknown keys are reported all the same)."""
    if str(issue.message).startswith("unknown key"):
        return False
    return any(issue.path == p or issue.path.startswith((f"{p}.", f"{p}[")) for p in opaque)


def check_stack_config(stack: str, stack_config: dict) -> CheckResult:
    """Validate the stack's `gpu-tenancy` configuration with the program's own validator."""
    name = f"configuration of Pulumi.{stack}.yaml valid"
    fix = (
        f"edit the keys above in Pulumi.{stack}.yaml (or `pulumi config set --stack {stack} --path "
        f"'{PROJECT}:<key path>' <value>`), then `make preflight STACK={stack}`"
    )
    try:
        from config import ConfigError, load_stack_config
    except Exception as error:  # any import failure means this venv cannot run the program either
        return CheckResult(name, False, f"cannot load the program's validator: {error}", "rm -rf .venv && make venv")

    raw, secret_keys, opaque = unsealed_config(stack_config)
    try:
        config = load_stack_config(raw, secret_keys)
    except ConfigError as error:
        issues = [issue for issue in error.issues if not _hidden(issue, opaque)]
        if issues:
            # The problems only: the fix line below is preflight's, which knows the stack.
            return CheckResult(name, False, ConfigError(issues, stack).problems, fix)
        config = None
    workers = sum(len(tenant.workers) for tenant in config.tenants) if config else 0
    summary = f"{len(config.tenants)} tenant(s), {workers} worker(s)" if config else "checked"
    if opaque:
        summary += f"; encrypted, so checked by `pulumi up` only: {', '.join(opaque)}"
    return CheckResult(name, True, summary)


def _stack_template(stack: str, root: Path) -> str:
    example = root / f"Pulumi.{stack}.example.yaml"
    return example.name if example.exists() else "Pulumi.dev.yaml"


def load_stack(stack: str, root: Path = PROJECT_ROOT) -> tuple[dict | None, CheckResult | None]:
    """The parsed `Pulumi.<stack>.yaml`, or None and the failed check saying why."""
    path = root / f"Pulumi.{stack}.yaml"
    if not path.exists():
        return None, CheckResult(
            f"Pulumi.{stack}.yaml exists", False,
            f"{path.name} does not exist in {root}: stack '{stack}' has no configuration, so `pulumi up` would "
            "stop at 'tenants: required key is missing'",
            f"cp {_stack_template(stack, root)} {path.name}   # then edit it; or set keys one by one: "
            f"pulumi config set --stack {stack} --path '{PROJECT}:tenants[0].name' team-a",
        )
    from config.stack_file import StackFileError, load

    try:
        document = load(path) or {}
    except OSError as error:
        return None, CheckResult(f"Pulumi.{stack}.yaml readable", False, f"cannot be read: {error}",
                                 f"ls -l {path.name}   # readable by this user?")
    except StackFileError as error:
        return None, CheckResult(f"Pulumi.{stack}.yaml readable", False, error.detail, error.fix)
    if not isinstance(document, dict) or not isinstance(document.get("config") or {}, dict):
        return None, CheckResult(
            f"Pulumi.{stack}.yaml readable", False,
            "is not a Pulumi stack file (a mapping with a `config:` mapping of '<namespace>:<key>' entries)",
            f"cp {_stack_template(stack, root)} {path.name}   # then edit it",
        )
    return document, None


def check_charts(root: Path = PROJECT_ROOT) -> CheckResult:
    """The Helm charts `pulumi up` installs: each pinned by one sha256 over its files (ops/upstream.py).

    Charts not fetched yet are information (`make up` fetches them before it checks them); a chart that is there
    but is not its pinned files (a file changed, added or missing) is a failure.
    """
    from ops import upstream

    name = "Helm charts (pinned, verified)"
    problems = upstream.chart_problems(root / ".cache")
    if not problems:
        return CheckResult(name, True, str(upstream.chart_root(root / ".cache")))
    wrong = [problem for problem in problems if not problem.endswith(": missing")]
    if not wrong:
        count = f"{len(problems)} of {len(upstream.CHARTS)} charts " if len(problems) < len(upstream.CHARTS) else ""
        return CheckResult(
            name, True,
            f"{count}not fetched yet (`make up` fetches them into .cache/charts; `make charts` fetches them now)",
            state="info",
        )
    shown = "; ".join(wrong[:3]) + (f"; and {len(wrong) - 3} more" if len(wrong) > 3 else "")
    return CheckResult(name, False, shown, "make charts   # downloads the pinned charts and checks each one")


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


ROUTED_SERVERS = "SSH workers reach the kind network"


def check_routed_servers(probes: Probes, stack_config: dict) -> list[CheckResult]:
    """SSH workers in the kind lab reach their tenant's API and Konnectivity on a MetalLB address of the `kind` bridge.
    Docker 28+ drops what is forwarded into a bridge and no published port accepts, unless the network's gateway
    mode is nat-unprotected (moby libnetwork/drivers/bridge/internal/iptabler/network.go setDefaultForwardRule)."""
    config = project_config(stack_config)
    tenants = [t for t in config.get("tenants") or [] if isinstance(t, dict)]
    servers = [f"tenants[{t}].workers[{w}]" for t, tenant in enumerate(tenants)
               for w, worker in enumerate(tenant.get("workers") or []) if isinstance(worker, dict) and "ssh" in worker]
    if not servers or "kubeconfig" in (config.get("management") or {}):
        return []
    code, stdout, _ = probes.run(["docker", "version", "--format", "{{.Server.Version}}"])
    version = _version(stdout) if code == 0 else None
    if version is None:
        return [skipped(ROUTED_SERVERS, "the Docker daemon")]
    if version < (28, 0, 0):
        return [CheckResult(ROUTED_SERVERS, True, f"Docker {_dotted(version)} forwards routed traffic into it")]
    code, stdout, _ = probes.run(["docker", "network", "inspect", "kind", "--format", "{{json .Options}}"])
    options = (_json(stdout) if code == 0 else None) or {}
    if isinstance(options, dict) and options.get("com.docker.network.bridge.gateway_mode_ipv4") == "nat-unprotected":
        return [CheckResult(ROUTED_SERVERS, True, f"Docker {_dotted(version)}, and the `kind` network is "
                                                  "nat-unprotected: every port of every container on it is open to "
                                                  "hosts that route to this one")]
    more = f" (and {len(servers) - 1} more)" if len(servers) > 1 else ""
    return [CheckResult(
        ROUTED_SERVERS, False,
        f"Docker {_dotted(version)} drops traffic routed into the `kind` network that no published port accepts, so "
        f"{servers[0]}{more} could not reach its tenant's API or Konnectivity on the load-balancer address",
        "join the servers to a management cluster they reach (management.kubeconfig, docs/real-clusters.md); or, "
        "accepting that every port of every container on the `kind` network opens to any host that routes to this "
        "one: make down (in every checkout whose lab uses it), then docker network rm kind && docker network "
        "create -o com.docker.network.bridge.enable_ip_masquerade=true "
        "-o com.docker.network.bridge.gateway_mode_ipv4=nat-unprotected kind",
    )]


def render(results: Sequence[CheckResult]) -> str:
    lines = []
    for result in results:
        lines.append(f"[{result.mark}] {result.name}: {result.detail}")
        if not result.ok and result.fix:
            lines.append(f"       fix: {result.fix}")
    failed = sum(not r.ok for r in results)
    lines.append(
        "preflight passed" if not failed else f"preflight failed: {failed} check(s) above need fixing"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, probes: Probes = HOST, root: Path = PROJECT_ROOT) -> int:
    parser = argparse.ArgumentParser(prog="make preflight", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", help="also check Pulumi.<stack>.yaml, and only what it needs on this host")
    parser.add_argument("--charts", action="store_true", help="also check the pinned Helm charts (`make charts`)")
    args = parser.parse_args(argv)
    local_lab = True
    provider_config: dict[str, str] = {}
    stack_checks: list[CheckResult] = []
    document: dict | None = None
    if args.stack:
        document, problem = load_stack(args.stack, root)
        if problem:
            stack_checks.append(problem)
        else:
            assert document is not None
            local_lab = needs_local_lab(document)
            provider_config = docker_provider_config(document)
            stack_checks += [check_stack_secrets(args.stack, document), check_stack_config(args.stack, document),
                             *check_routed_servers(probes, document)]
    if not local_lab:
        print(f"stack {args.stack}: existing management cluster and SSH workers only; no local lab to check")
    results = [*stack_checks, *run_checks(probes, local_lab, provider_config, args.stack)]
    if local_lab:
        results += check_kind_node_image(probes, document)
    if args.charts:
        results.append(check_charts(root))
    print(render(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
