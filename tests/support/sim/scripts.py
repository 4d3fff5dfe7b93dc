"""What the commands that pulumi-command runs do to the simulated machine.

The simulator neither executes nor parses bash: a Command's inputs say as data which script runs
(`invocation` below) -- a host command's text is one of the files in components/*/scripts, and a node
command's stdin is dispatch.sh followed by its data block (`read_node_stdin`, the one decoder of what
components/worker/access.py node_stdin writes). The scripts themselves are executed against stub binaries in
their own tests (tests/test_node_access.py, tests/test_node_scripts.py, tests/test_mirror_script.py,
tests/test_kind_scripts.py), which pin their contract; this module is the other half: what that contract does
to kind, Docker and the tenants.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from components import shell
from components.kube import ApiError, UnreachableError
from components.management.cluster import CHECKOUT_LABEL, STACK_LABEL
from components.worker import access
from tests.support.sim import systems
from tests.support.sim.state import is_secret, plain
from tests.support.sim.world import MIRROR_MARKER, TENANT_TRACES, Machine, World


class CommandFailedError(Exception):
    """The command exited non-zero; the message is what pulumi-command reports (combined output)."""


@dataclass(frozen=True)
class Invocation:
    """One run of a Command, read from its inputs: which script runs where, with what (secrets unwrapped)."""

    # The script that does the work: one of components/*/scripts (node-join.sh, kind-create.sh, ...).
    script: str
    action: str  # "create", "update" (a Command with an `update` command whose inputs changed) or "delete"
    environment: Mapping[str, str] = field(default_factory=dict)
    # The variables whose values travelled in a secret input (a node command's whole stdin is secret).
    secret: frozenset[str] = frozenset()
    # What the script reads on stdin (kind-create.sh: the kind config).
    stdin: str = ""
    # Where it runs: a local worker container (through container-exec.sh), an SSH machine, or else the host.
    container: str | None = None
    remote_host: str | None = None
    # container-exec.sh for a delete: GPU_TENANCY_GONE_HINT.
    gone_hint: str = ""


def read_node_stdin(stdin: str) -> dict[str, tuple[str, str, dict[str, str]]]:
    """{action: (script name, script text, {variable: value})} of a node command's stdin (dispatch.sh, then the
    data block of components.worker.access.node_stdin), decoded as dispatch.sh reads it."""
    dispatcher = shell.script_text(shell.DISPATCH)
    if not stdin.startswith(dispatcher):
        raise CommandFailedError("the stdin of this node command does not start with dispatch.sh")
    lines = stdin[len(dispatcher):].split("\n")
    if access.DATA_END not in lines:
        raise CommandFailedError("gpu-tenancy: dispatch.sh: the data block has no end line: stdin was cut short; "
                                 "nothing was run")
    actions = {}
    try:
        for line in lines[: lines.index(access.DATA_END)]:
            action, name, text, *variables = line.split(" ")
            values = {}
            for variable in variables:
                key, _, encoded = variable.partition("=")
                values[key] = base64.b64decode(encoded, validate=True).decode()
            actions[action] = (name, base64.b64decode(text, validate=True).decode(), values)
    except (ValueError, binascii.Error) as error:
        raise CommandFailedError(f"gpu-tenancy: dispatch.sh: damaged data block ({error}); nothing was run") from None
    return actions


def _script_named(text: str) -> str | None:
    """Which of the shipped scripts `text` is, if any."""
    return next((name for name in shell.SCRIPT_NAMES if shell.script_text(name) == text), None)


def invocation(resource_type: str, inputs: Mapping[str, Any], action: str) -> Invocation:
    """What the Command of `inputs` (secrets still marked) runs for `action`: "create", "update" or "delete" (an
    update without an `update` command runs `create`: commandController.go Update)."""
    values = plain(inputs)
    line = str(values.get(action) or "")
    if resource_type == "command:remote:Command":
        connection = values.get("connection") or {}
        if line != access.ssh_command(action, str(connection.get("user", ""))):
            raise CommandFailedError(f"the simulator does not know what this remote command does: {line[:200]!r}")
        return _node_invocation(inputs, action, remote_host=connection.get("host"))
    interpreter = list(values.get("interpreter") or [])
    environment = {key: str(value) for key, value in (values.get("environment") or {}).items()}
    if interpreter == access.container_interpreter() and line == action:
        return _node_invocation(inputs, action, container=environment.get(shell.CONTAINER_ENV, ""),
                                gone_hint=environment.get(shell.GONE_HINT_ENV, ""))
    script = _script_named(line) if interpreter == ["/bin/bash", "-c"] else None
    if script is None:
        raise CommandFailedError(f"the simulator does not know what this command does:\n{line[:400]}")
    secret = frozenset(key for key, value in (inputs.get("environment") or {}).items() if is_secret(value))
    if is_secret(inputs.get("environment")):
        secret = frozenset(environment)
    return Invocation(script=script, action=action, environment=environment, secret=secret,
                      stdin=str(values.get("stdin") or ""))


def _node_invocation(inputs: Mapping[str, Any], action: str, *, container: str | None = None,
                     remote_host: str | None = None, gone_hint: str = "") -> Invocation:
    actions = read_node_stdin(str(plain(inputs.get("stdin")) or ""))
    if action not in actions:
        raise CommandFailedError(f'gpu-tenancy: dispatch.sh: unknown action "{action}" (expected: '
                                 f'{" ".join(actions)})')
    name, text, environment = actions[action]
    if name not in shell.NODE_SCRIPT_NAMES or text != shell.script_text(name):
        raise CommandFailedError(f"the simulator does not know what this node script does: {name}")
    return Invocation(script=name, action=action, environment=environment,
                      secret=frozenset(environment) if is_secret(inputs.get("stdin")) else frozenset(),
                      container=container, remote_host=remote_host, gone_hint=gone_hint)


def execute(world: World, resource_type: str, inputs: Mapping[str, Any], action: str) -> str:
    """Run what the Command of `inputs` runs for `action` on `world`; returns its stdout. The provider model's one
    call into this module (tests of the engine replace it)."""
    return run(world, invocation(resource_type, inputs, action))


def run(world: World, invocation: Invocation) -> str:
    """Apply the effect of the script `invocation` runs; returns its stdout."""
    env = dict(invocation.environment)
    if invocation.script == shell.KIND_CREATE:
        return _kind_create(world, env, invocation.stdin)
    if invocation.script == shell.KIND_DELETE:
        return _kind_delete(world, env)
    if invocation.remote_host is not None:
        host = world.ssh.get(invocation.remote_host)
        if host is None or not host.reachable:
            raise CommandFailedError(f"dial tcp {invocation.remote_host}:22: connect: no route to host")
        machine = host.machine
    elif invocation.container is not None:
        # components/worker/scripts/container-exec.sh: `docker exec -i <container> bash -s -- <action>`, after a
        # presence check for deletes.
        name = invocation.container
        container = world.docker.containers.get(name)
        if container is None or not container.running:
            if invocation.action == access.DELETE:
                state = "gone" if container is None else "stopped"
                hint = f" {invocation.gone_hint}" if invocation.gone_hint else ""
                return f"gpu-tenancy: container {name} is {state}: nothing to undo.{hint}"
            raise CommandFailedError(f"Error response from daemon: No such container: {name}")
        machine = world.machines.setdefault(name, Machine(name=name))
    else:
        raise CommandFailedError(f"{invocation.script} runs on a node, but this command names none")
    if invocation.script == shell.NODE_MIRRORS:
        return _mirrors(machine, env)
    if invocation.script == shell.NODE_JOIN:
        return _join(world, machine, env)
    if invocation.script == shell.NODE_LEAVE:
        return _leave(world, machine, env)
    if invocation.script == shell.NODE_UPGRADE:
        return _upgrade(world, machine, env)
    raise CommandFailedError(f"the simulator has no model of {invocation.script}")


# --------------------------------------------------------------------------- #
# kind (components/management/scripts/kind-create.sh, kind-delete.sh)
# --------------------------------------------------------------------------- #


def _owned(world: World, name: str, env: dict[str, str]) -> bool:
    node = world.kind[name].api.find("Node", None, f"{name}-control-plane") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    checkout = env.get("KIND_CHECKOUT")
    return labels.get(STACK_LABEL) == env["KIND_STACK_MARKER"] and checkout in (None, labels.get(CHECKOUT_LABEL))


def _kind_create(world: World, env: dict[str, str], stdin: str) -> str:
    name, marker = env["KIND_CLUSTER_NAME"], env["KIND_STACK_MARKER"]
    config = yaml.safe_load(stdin or "") or {}
    if name in world.kind:
        if not _owned(world, name, env):
            raise CommandFailedError(f"gpu-tenancy: a kind cluster named {name} exists but this stack did not "
                                     f"create it (no node label {STACK_LABEL}={marker})")
    else:
        world.create_kind_cluster(name, config)
    ipam = [{"Subnet": subnet} for subnet in world.docker.networks["kind"]]
    return json.dumps(ipam) + "\n" + world.kind_admin_kubeconfig(name)


def _kind_delete(world: World, env: dict[str, str]) -> str:
    name = env["KIND_CLUSTER_NAME"]
    if name not in world.kind:
        return ""
    if not _owned(world, name, env):
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
            if env.get("GPU_MODE") == "nvidia":
                _check_gpu_server(machine, env, joined=True)
            return f"worker {node} already joined"
        raise CommandFailedError(f"gpu-tenancy: worker {node}: this machine is already joined to another cluster "
                                 f"({machine.kubelet_conf})")
    container = env["NODE_KIND"] == "container"
    if world.host_swap and not container:
        raise CommandFailedError(f"gpu-tenancy: worker {node}: swap is on; the kubelet will not start")
    if env.get("GPU_MODE") == "nvidia":
        _check_gpu_server(machine, env)
    # node-join.sh gives a server's kubelet node-ip: the source address of its route to the endpoint. A container's
    # kubelet picks its own address.
    node_ip = None if container else _route_to_endpoint(world, machine, node, endpoint)
    try:
        systems.join(world, machine, endpoint=endpoint, token=env["JOIN_TOKEN"], ca_hash=env["CA_CERT_HASH"],
                     node_name=node, over_ssh=not container,
                     # node-join.sh gives container nodes kind's kubelet settings through a kubeadm patch.
                     kubelet_patches={"failSwapOn": False} if container else None,
                     node_ip=node_ip)
    except (UnreachableError, ApiError) as error:
        # The script resets the node after its last failed attempt.
        systems.reset(world, machine)
        raise CommandFailedError(f"gpu-tenancy: worker {node}: kubeadm join to {endpoint} failed 12 times; "
                                 f"last kubeadm output: {error}") from None
    if not container:
        # node-join.sh records the version of the kubelet configuration kubeadm join wrote (node-upgrade.sh's record).
        machine.kubelet_config_version = env["TENANT_VERSION"]
        # node-join.sh persists two kernel settings on a machine; the tenant's Calico and kube-proxy then put
        # their CNI files, state and iptables chains there (what node-leave.sh removes again).
        machine.files.update(TENANT_TRACES)
    return f"worker {node} joined the tenant at {endpoint}"


def _route_to_endpoint(world: World, machine: Machine, node: str, endpoint: str) -> str:
    """node-join.sh on a server (tests/test_node_scripts.py runs the real one): the source address of `ip -o route
    get` to the endpoint's host (resolved with getent first when it is a name), which its curl check then uses
    against the tenant's source ranges. Refuses a machine whose routes the scenario did not give."""
    host = endpoint.rpartition(":")[0]
    try:
        address = str(ipaddress.IPv4Address(host))
    except ValueError:
        address = machine.hosts.get(host)
        if address is None:
            raise CommandFailedError(f"the simulator does not know what {host} resolves to on {machine.name}: a "
                                     "scenario with a name endpoint sets Machine.hosts") from None
    if not machine.interfaces or (machine.default_interface is None and not machine.routes):
        raise CommandFailedError(f"the simulator does not know how {machine.name} reaches {endpoint}: a scenario "
                                 "joining an SSH worker gives its machine interfaces and a default route or routes "
                                 "(World.add_ssh_host does for a server at an IPv4 address)")
    route = systems.route_get(machine, address)
    fix = (f"Give this server a route to {endpoint} that leaves by its interface on the tenant's worker network "
           "(tenants[].workerCidrs or management.workerCidrs)")
    if route is None:
        raise CommandFailedError(f"gpu-tenancy: worker {node}: no route from this server to the tenant endpoint "
                                 f"{endpoint} ('ip -o route get {address}': RTNETLINK answers: Network is "
                                 f"unreachable). {fix}")
    source, _interface = route
    tenant = world.tenants.get(f"https://{endpoint}")
    if tenant is not None and not systems.admits(tenant, source):
        # The script's endpoint check (curl) times out: kube-proxy drops the packets.
        raise CommandFailedError(
            f"gpu-tenancy: worker {node}: cannot reach the tenant API server at {endpoint} from this node (curl: "
            "(28) Connection timed out after 5001 milliseconds). Check routing and firewalls to the load-balancer "
            f"address, and that this node's address ({source}, the source address of its route there) is in the "
            "tenant's worker networks (tenants[].workerCidrs or management.workerCidrs)")
    return source


def _check_gpu_server(machine: Machine, env: dict[str, str], *, joined: bool = False) -> None:
    """node-join.sh's checks of a GPU server for HAMi's device plugin (tests/test_node_scripts.py runs the real
    ones): every problem at once, before the join and on every run on a joined server, which may run HAMi's own
    plugin (so no other plugin is looked for there)."""
    missing = set(machine.nvidia_missing) - ({"other device plugin"} if joined else set())
    if env.get("NVIDIA_RUNTIME_CLASS"):
        missing.discard("nvidia default runtime")
    problems = sorted(missing)
    present = {card["uuid"] for card in machine.cards} if "driver" not in missing else set()
    problems += [f"this server has no card {uuid}" for uuid in env["GPU_UUIDS"].split()
                 if "driver" not in missing and uuid not in present]
    if problems:
        raise CommandFailedError(f"gpu-tenancy: worker {env['NODE_NAME']}: this worker lists gpus, so it gets gpu=on "
                                 f"and HAMi's device plugin, which cannot work here: {'; '.join(problems)}")


def _leave(world: World, machine: Machine, env: dict[str, str]) -> str:
    node = env["NODE_NAME"]
    said = f"worker {node} was not joined"
    if machine.kubelet_conf is not None:
        systems.reset(world, machine)
        said = f"worker {node} reset"
    if env.get("NODE_KIND") == "machine":
        for path in TENANT_TRACES:
            machine.files.pop(path, None)
    return said


def _upgrade(world: World, machine: Machine, env: dict[str, str]) -> str:
    """node-upgrade.sh (tests/test_node_scripts.py runs the real one against stubs), in either mode: a server not
    joined, or one recorded at the version (node-join.sh records it), is left alone; one without a record is recorded;
    any other is being upgraded (so recorded, until it is done): it needs kubeadm and kubelet of exactly the version
    installed, else it fails naming the packages for the server's package manager, then runs `kubeadm upgrade node`
    and restarts the kubelet."""
    node, version = env["NODE_NAME"], env["TENANT_VERSION"]
    if machine.kubelet_conf is None:
        return f"worker {node} is not joined: node-join.sh joins it at {version}; nothing to upgrade"
    # Both modes follow the same rules (node-upgrade.sh's header).
    recorded = machine.kubelet_config_version
    if recorded == version:
        return f"worker {node} is at {version}; nothing to do"
    if recorded is None:
        machine.kubelet_config_version = version
        return f"worker {node} has no record (kubelet {machine.kubelet_version}); recorded as {version}"
    if machine.kubeadm_version is None or machine.kubelet_version is None:
        raise CommandFailedError(f"the simulator does not know which kubeadm and kubelet {node} has installed: a "
                                 "scenario with SSH workers sets Machine.kubeadm_version and kubelet_version "
                                 "(World.add_ssh_host gives them the tenant's version)")
    machine.kubelet_config_version = f"upgrading to {version}"
    wrong = [name for name, installed in (("kubeadm", machine.kubeadm_version), ("kubelet", machine.kubelet_version))
             if installed != version]
    if wrong:
        # node-upgrade.sh's message, word for word (tests/test_node_scripts.py pins the script's own).
        plain_version, minor = version.removeprefix("v"), version.rsplit(".", 1)[0]
        repo = f"https://pkgs.k8s.io/core:/stable:/{minor}"
        names = " ".join(wrong)
        if machine.package_manager == "apt":
            how = (f"point /etc/apt/sources.list.d/kubernetes.list at {repo}/deb/ (its key: {repo}/deb/Release.key), "
                   f"then run: sudo apt-mark unhold {names} && sudo apt-get update && sudo apt-get install -y "
                   f"{' '.join(f'{name}={plain_version}-1.1' for name in wrong)} && sudo apt-mark hold {names}")
        elif machine.package_manager in ("dnf", "yum"):
            how = (f"point baseurl in /etc/yum.repos.d/kubernetes.repo at {repo}/rpm/ (gpgkey "
                   f"{repo}/rpm/repodata/repomd.xml.key), then run: sudo {machine.package_manager} install -y "
                   f"{' '.join(f'{name}-{plain_version}' for name in wrong)} --disableexcludes=kubernetes")
        else:
            how = f"this server has neither apt-get nor dnf/yum: install {names} {version} from {repo}/"
        raise CommandFailedError(
            f"gpu-tenancy: worker {node}: cannot upgrade to {version}: this server has kubeadm "
            f"{machine.kubeadm_version} and kubelet {machine.kubelet_version}, not {version}. To install them, {how}. "
            "See https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/upgrading-linux-nodes/. "
            "The Node stays cordoned (drained) until then; run make up again when they are installed: it goes on "
            "from this worker")
    try:
        systems.kubeadm_upgrade_node(world, machine, node)
    except (UnreachableError, ApiError) as error:
        raise CommandFailedError(f"gpu-tenancy: worker {node}: kubeadm upgrade node failed; the Node stays "
                                 f"cordoned. Its output: {error}") from None
    systems.restart_kubelet(world, machine, node)
    machine.kubelet_config_version = version
    return f"worker {node} upgraded to {version}: kubeadm upgrade node, kubelet restarted"


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
            wanted[f"/etc/containerd/certs.d/{registry}/hosts.toml"] = hosts_toml(
                registry, mirror, machine=env.get(shell.NODE_KIND_ENV) == shell.NODE_KIND_MACHINE)
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
