"""What the shell that pulumi-command runs does to the simulated machine.

The simulator does not execute bash: it recognises each script this program ships by what it runs (kind,
kubeadm, kubectl) and applies the script's contract to the world. The scripts themselves are executed
against stub binaries in their own tests (tests/test_node_scripts.py, tests/test_kind_scripts.py,
tests/test_mirror_script.py), which pin that contract; this module is the other half: what the contract
does to kind, Docker and the tenants.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from tests.support.sim import systems
from tests.support.sim.world import MIRROR_MARKER, ApiError, Machine, UnreachableError, World


class CommandFailedError(Exception):
    """The command exited non-zero; the message is what pulumi-command reports (combined output)."""


@dataclass(frozen=True)
class Invocation:
    """One run of a command: its text, stdin and environment (secrets already unwrapped)."""

    script: str
    stdin: str
    environment: Mapping[str, str]
    remote_host: str | None = None  # set for command:remote:Command


def _ssh_branch(program: str, action: str) -> tuple[str, dict[str, str]]:
    """The script and decoded secrets of one action of the SSH stdin program (components.worker.access.node_program)."""
    match = re.search(rf"^{action}\)\n\(\n(.*?)\n\) </dev/null\n;;$", program, re.S | re.M)
    if match is None:
        return "", {}
    body = match.group(1)
    values = {}
    for name, encoded in re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)=\"\$\(printf '%s' '([A-Za-z0-9+/=]*)'", body, re.M):
        values[name] = base64.b64decode(encoded).decode()
    return body, values


def run(world: World, invocation: Invocation, action: str) -> str:
    """Apply the effect of the script `invocation` runs for `action` ("create" or "delete"); returns stdout."""
    script, env = invocation.script, dict(invocation.environment)
    if "kind create cluster" in script and action == "create":
        return _kind_create(world, env, invocation.stdin)
    if "kind delete cluster" in script and action == "delete":
        return _kind_delete(world, env)
    if invocation.remote_host is not None:
        host = world.ssh.get(invocation.remote_host)
        if host is None or not host.reachable:
            raise CommandFailedError(f"dial tcp {invocation.remote_host}:22: connect: no route to host")
        machine = host.machine
    else:
        # components/worker/access.py: `docker exec -i -e GPU_TENANCY_ACTION=<action> <container> bash -s`, with
        # the node program on stdin (wrapped in a presence check for deletes).
        exec_match = re.search(r"docker exec -i -e GPU_TENANCY_ACTION=\S+ (\S+) bash -s", script)
        if exec_match is None:
            raise CommandFailedError(f"the simulator does not know what this command does:\n{script[:400]}")
        machine_name = shlex.split(exec_match.group(1))[0]
        container = world.docker.containers.get(machine_name)
        if container is None or not container.running:
            if "docker container inspect" in script:  # the "if present" wrapper of delete commands
                return f"gpu-tenancy: container {machine_name} is gone: nothing to undo."
            raise CommandFailedError(f"Error response from daemon: No such container: {machine_name}")
        machine = world.machines.setdefault(machine_name, Machine(name=machine_name))
    body, values = _ssh_branch(invocation.stdin, action)
    env.update(values)
    if "containerd/certs.d" in body:
        return _mirrors(machine, env)
    if "kubeadm join" in body:
        return _join(world, machine, env)
    if "kubeadm reset -f" in body:
        return _leave(world, machine, env)
    raise CommandFailedError(f"the simulator does not know what this node script does:\n{body[:400]}")


# --------------------------------------------------------------------------- #
# kind (components/management/scripts/kind-create.sh, kind-delete.sh)
# --------------------------------------------------------------------------- #

STACK_LABEL = "gpu-tenancy.io/stack"


def _owner(world: World, name: str) -> str | None:
    node = world.kind[name].api.find("Node", None, f"{name}-control-plane") or {}
    return ((node.get("metadata") or {}).get("labels") or {}).get(STACK_LABEL)


def _kind_create(world: World, env: dict[str, str], stdin: str) -> str:
    name, marker = env["KIND_CLUSTER_NAME"], env["KIND_STACK_MARKER"]
    config = yaml.safe_load(stdin or "") or {}
    if name in world.kind:
        if _owner(world, name) != marker:
            raise CommandFailedError(f"gpu-tenancy: a kind cluster named {name} exists but this stack did not "
                                     f"create it (no node label {STACK_LABEL}={marker})")
    else:
        world.create_kind_cluster(name, config)
    ipam = [{"Subnet": subnet} for subnet in world.docker.networks["kind"]]
    return json.dumps(ipam) + "\n" + world.kind_admin_kubeconfig(name)


def _kind_delete(world: World, env: dict[str, str]) -> str:
    name, marker = env["KIND_CLUSTER_NAME"], env["KIND_STACK_MARKER"]
    if name not in world.kind:
        return ""
    if _owner(world, name) != marker:
        raise CommandFailedError(f"gpu-tenancy: refusing to delete kind cluster {name}: this stack did not create it")
    world.delete_kind_cluster(name)
    return ""


# --------------------------------------------------------------------------- #
# Worker join and leave (components/worker/scripts/node-join.sh, node-leave.sh)
# --------------------------------------------------------------------------- #


def _join(world: World, machine: Machine, env: dict[str, str]) -> str:
    node, endpoint = env["NODE_NAME"], env["TENANT_ENDPOINT"]
    if machine.kubelet_conf is not None:
        if machine.kubelet_conf == f"https://{endpoint}" and machine.kubelet_ca_hash == env["CA_CERT_HASH"]:
            return f"worker {node} already joined"
        raise CommandFailedError(f"gpu-tenancy: worker {node}: this machine is already joined to another cluster "
                                 f"({machine.kubelet_conf})")
    container = env["NODE_KIND"] == "container"
    if world.host_swap and not container:
        raise CommandFailedError(f"gpu-tenancy: worker {node}: swap is on; the kubelet will not start")
    try:
        systems.join(world, machine, endpoint=endpoint, token=env["JOIN_TOKEN"], ca_hash=env["CA_CERT_HASH"],
                     node_name=node, over_ssh=not container,
                     # node-join.sh gives container nodes kind's kubelet settings through a kubeadm patch.
                     kubelet_patches={"failSwapOn": False} if container else None)
    except (UnreachableError, ApiError) as error:
        # The script resets the node after its last failed attempt.
        systems.reset(world, machine)
        raise CommandFailedError(f"gpu-tenancy: worker {node}: kubeadm join to {endpoint} failed 12 times; "
                                 f"last kubeadm output: {error}") from None
    return f"worker {node} joined the tenant at {endpoint}"


def _leave(world: World, machine: Machine, env: dict[str, str]) -> str:
    node = env["NODE_NAME"]
    if machine.kubelet_conf is None:
        return f"worker {node} was not joined"
    systems.reset(world, machine)
    return f"worker {node} reset"


# --------------------------------------------------------------------------- #
# Image mirrors (components/worker/scripts/node-mirrors.sh)
# --------------------------------------------------------------------------- #


def _mirrors(machine: Machine, env: dict[str, str]) -> str:
    """Exactly the listed registries get a hosts.toml of ours; files of ours for others go; foreign ones stay."""
    from components.management.image_cache import hosts_toml

    wanted = {}
    for line in env["REGISTRY_MIRRORS"].splitlines():
        if line.strip():
            registry, _server, mirror = line.split()
            wanted[f"/etc/containerd/certs.d/{registry}/hosts.toml"] = hosts_toml(registry, mirror)
    for path in wanted:
        current = machine.files.get(path)
        if current is not None and not current.startswith(MIRROR_MARKER):
            raise CommandFailedError(f"gpu-tenancy: node {env['NODE_NAME']}: {path} exists and was not written by "
                                     "gpu-tenancy")
    for path in [p for p, content in machine.files.items()
                 if p.startswith("/etc/containerd/certs.d/") and content.startswith(MIRROR_MARKER)]:
        if path not in wanted:
            del machine.files[path]
    machine.files.update(wanted)
    return f"node {env['NODE_NAME']}: image mirrors for: {' '.join(sorted(wanted))}"


def describe(inputs: Mapping[str, Any]) -> str:
    """A one-line description of a command for plan output."""
    text = str(inputs.get("create") or "")
    return text.splitlines()[0][:60] if text else ""
