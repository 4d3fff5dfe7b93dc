"""What the shell that pulumi-command runs does to the simulated machine.

The simulator does not execute bash: it recognises each script this program ships by what it runs (kind,
kubeadm, kubectl) and applies the script's contract to the world. The scripts themselves are executed
against stub binaries in their own tests (tests/test_join_script.py, tests/test_kind_cluster.py,
tests/test_node_scripts.py), which pin that contract; this module is the other half: what the contract
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

from tools.sim import systems
from tools.sim.world import ApiError, Machine, UnreachableError, WaitTimeoutError, World


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
    """The script and decoded secrets of one action of the SSH stdin program (components.node_access.ssh_stdin)."""
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
    machine_name = None
    if invocation.remote_host is not None:
        host = world.ssh.get(invocation.remote_host)
        if host is None or not host.reachable:
            raise CommandFailedError(f"dial tcp {invocation.remote_host}:22: connect: no route to host")
        script, secrets = _ssh_branch(invocation.stdin, action)
        env.update(secrets)
        machine = host.machine
    else:
        exec_match = re.search(r"docker exec -i (?:-e \S+ )*(\S+) bash -s", script)
        machine = None
        if exec_match:
            machine_name = shlex.split(exec_match.group(1))[0]
            container = world.docker.containers.get(machine_name)
            if container is None or not container.running:
                if "docker container inspect" in script:  # the "if present" wrapper of delete scripts
                    return f"gpu-tenancy: container {machine_name} is gone: nothing to undo."
                raise CommandFailedError(f"Error response from daemon: No such container: {machine_name}")
            machine = world.machines.setdefault(machine_name, Machine(name=machine_name))
    if "kind create cluster" in script:
        return _kind_create(world, script, invocation.stdin)
    if "kind delete cluster" in script:
        return _kind_delete(world, script)
    if machine is None:
        raise CommandFailedError(f"the simulator does not know what this command does:\n{script[:400]}")
    if "kubeadm join" in script:
        return _join(world, machine, script, env, over_ssh=invocation.remote_host is not None)
    if "kubeadm reset -f" in script:
        return _leave(world, machine, script, env)
    if "--subresource=status" in script and "kubectl wait --for=create" in script:
        return _apply_capacity(world, script, env)
    if "--subresource=status" in script:
        return _remove_capacity(world, script, env)
    if "daemonset/konnectivity-agent" in script:
        return _konnectivity_wait(world, script, env)
    raise CommandFailedError(f"the simulator does not know what this command does:\n{script[:400]}")


def _quoted_after(script: str, prefix: str) -> str:
    match = re.search(rf"{re.escape(prefix)}(\S+)", script)
    if match is None:
        raise CommandFailedError(f"cannot find {prefix!r} in the script")
    return shlex.split(match.group(1))[0]


# --------------------------------------------------------------------------- #
# kind
# --------------------------------------------------------------------------- #


def _kind_create(world: World, script: str, stdin: str) -> str:
    name = _quoted_after(script, "kind create cluster --name ")
    config = yaml.safe_load(stdin or "") or {}
    if name not in world.kind:
        world.create_kind_cluster(name, config)
    return world.kind_admin_kubeconfig(name)


def _kind_delete(world: World, script: str) -> str:
    name = _quoted_after(script, "kind delete cluster --name ")
    world.delete_kind_cluster(name)
    return ""


# --------------------------------------------------------------------------- #
# Worker join and leave (components/join_script.py)
# --------------------------------------------------------------------------- #


def _node_name(script: str) -> str:
    match = re.search(r"^node=(\S+)$", script, re.M)
    if match is None:
        raise CommandFailedError("node script names no node")
    return shlex.split(match.group(1))[0]


def _join(world: World, machine: Machine, script: str, env: dict[str, str], over_ssh: bool) -> str:
    node = _node_name(script)
    endpoint = env.get("WORKER_JOIN_ENDPOINT", "")
    if machine.kubelet_conf is not None:
        if machine.kubelet_conf == f"https://{endpoint}":
            return f"worker {node} already joined"
        raise CommandFailedError(f"gpu-tenancy: worker {node}: this machine is already joined to another cluster")
    if world.host_swap and not over_ssh and "failSwapOn: false" not in script:
        raise CommandFailedError(f"gpu-tenancy: worker {node}: swap is still on after swapoff -a; the kubelet will not "
                            "start. Run on the host: sudo swapoff -a")
    try:
        systems.join(world, machine, endpoint=endpoint, token=env.get("WORKER_JOIN_TOKEN", ""),
                     ca_hash=env.get("WORKER_DISCOVERY_HASH", ""), node_name=node, over_ssh=over_ssh,
                     kubelet_patches={"failSwapOn": False} if "failSwapOn: false" in script else None)
    except (UnreachableError, ApiError) as error:
        raise CommandFailedError(f"gpu-tenancy: worker {node}: kubeadm join to {endpoint} failed 12 times; "
                                 f"last kubeadm output: {error}") from None
    return f"worker {node} joined the tenant at {endpoint}"


def _tenant_client(world: World, env: dict[str, str]):
    kubeconfig = env.get("TENANT_KUBECONFIG")
    if not kubeconfig:
        raise CommandFailedError("TENANT_KUBECONFIG is not set")
    api = world.api_for(kubeconfig)
    return api, api.authenticate(kubeconfig)


def _leave(world: World, machine: Machine, script: str, env: dict[str, str]) -> str:
    node = _node_name(script)
    systems.reset(world, machine)
    if "kubectl delete node" not in script:
        return f"worker {node} reset"
    try:
        api, identity = _tenant_client(world, env)
    except UnreachableError:
        # join_script.leave_script: a tenant API that does not answer /readyz counts as gone.
        return f"gpu-tenancy: worker {node}: the tenant API server does not answer; nothing to remove"
    except ApiError as error:
        raise CommandFailedError(f"could not delete Node {node}: {error}") from None
    try:
        api.delete(identity, "Node", None, node)
    except ApiError as error:
        if error.code != 404:
            raise CommandFailedError(f"gpu-tenancy: worker {node}: could not delete Node {node}: {error}") from None
    return f"Node {node} removed from the tenant"


def _apply_capacity(world: World, script: str, env: dict[str, str]) -> str:
    node = _quoted_after(script, "kubectl wait --for=create node/")
    patch = json.loads(shlex.split(re.search(r"--type=merge -p (\S+)", script).group(1))[0])
    try:
        api, identity = _tenant_client(world, env)
        world.wait_for_tenant(api.server)  # `kubectl wait` polls for up to two minutes
        if api.find("Node", None, node) is None:
            raise WaitTimeoutError(f'timed out waiting for the condition on nodes/{node}')
        api.patch_status(identity, "Node", node, patch["status"])
    except (UnreachableError, ApiError, WaitTimeoutError) as error:
        raise CommandFailedError(str(error)) from None
    return f"node/{node} patched"


def _remove_capacity(world: World, script: str, env: dict[str, str]) -> str:
    node = _quoted_after(script, "kubectl get node ")
    try:
        api, identity = _tenant_client(world, env)
    except UnreachableError:
        # `[ -z "$(kubectl get node ...)" ]` swallows the connection error: "node is gone".
        return f"gpu-tenancy: node {node} is gone: no GPU capacity to remove"
    if api.find("Node", None, node) is None:
        return f"gpu-tenancy: node {node} is gone: no GPU capacity to remove"
    try:
        api.patch_status(identity, "Node", node, {"capacity": {systems.GPU: None}, "allocatable": {systems.GPU: None}})
    except ApiError as error:
        raise CommandFailedError(str(error)) from None
    return f"node/{node} patched"


def _konnectivity_wait(world: World, script: str, env: dict[str, str]) -> str:
    expected = int(re.search(r"^expected=(\d+)$", script, re.M).group(1))
    try:
        api, identity = _tenant_client(world, env)
        world.wait_for_tenant(api.server)  # the script polls for five minutes
        api.get(identity, "DaemonSet", "kube-system", "konnectivity-agent")
    except (UnreachableError, ApiError) as error:
        raise CommandFailedError(f"gpu-tenancy: daemonset/konnectivity-agent did not appear in kube-system ({error})") \
            from None
    ready = len(systems._ready_nodes(api)) if systems._features(api).konnectivity else 0
    if ready < expected:
        raise CommandFailedError(f"gpu-tenancy: daemonset/konnectivity-agent has {ready} of {expected} pods ready "
                                 "after 300s.")
    return "daemon set \"konnectivity-agent\" successfully rolled out"


def describe(inputs: Mapping[str, Any]) -> str:
    """A one-line description of a command for plan output."""
    text = str(inputs.get("create") or "")
    return text.splitlines()[0][:60] if text else ""
