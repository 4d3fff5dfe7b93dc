"""Test data for workers reached over SSH, and a small lab for worker tests (shared by several test modules)."""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

from config.models import SshConnection
from tests.support.mockrun import ProgramRun, StackOutput, reference_stack, registration
from tests.support.sim import Lifecycle, World
from tests.support.sim.lab import lab_world
from tests.support.sim.scripts import read_node_stdin
from tests.support.sim.state import plain
from tests.support.sim.world import SshHost

# Shape-valid for the config model; the simulator never parses it.
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
# A line of the key that must never show up in clear text anywhere.
PRIVATE_KEY_BODY = PRIVATE_KEY.splitlines()[1]

SSH_HOST = "gpu-1.example.net"
# The server's public host key, as `ssh-keyscan -t ed25519 <host>` prints it without the host name.
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGvZ3JC6WYCQJZ6Xo5F3CMFbl5lnZTRnQnEoeeKHx4Kq"


def ssh_connection(user: str = "ops", host: str = SSH_HOST, port: int = 2222,
                   host_key: str | None = HOST_KEY) -> SshConnection:
    return SshConnection(host=host, user=user, port=port, privateKey=PRIVATE_KEY, hostKey=host_key)


def ssh_worker_config(name: str = "gpu-1", user: str = "ops", gpus: list | None = None, *, host: str = SSH_HOST,
                      host_key: str | None = HOST_KEY) -> dict:
    """A `workers[]` entry as a user writes it in the stack config."""
    ssh: dict[str, Any] = {"host": host, "user": user, "port": 2222, "privateKey": PRIVATE_KEY}
    if host_key is not None:
        ssh["hostKey"] = host_key
    entry: dict = {"name": name, "ssh": ssh}
    if gpus:
        entry["gpus"] = gpus
    return entry


# --------------------------------------------------------------------------- #
# A lab for worker scenarios
# --------------------------------------------------------------------------- #

TENANT = "tenant-a"


def worker_lab(*extra_workers: dict, world: World | None = None) -> Lifecycle:
    """The dev lab cut down to tenant-a (its container worker-0 with one mock card) plus `extra_workers`. SSH
    workers take tenant-a alone, and the container worker-0 is tenant-b's (validation keeps the kinds apart).

    Every SSH machine the workers name exists on the simulated network and presents the host key they pin.
    The image mirror is off: how nodes pull is components/management/image_cache.py's subject, not membership's.
    """
    config = copy.deepcopy(reference_stack())
    config.setdefault("management", {})["imageMirror"] = False
    if any("ssh" in worker for worker in extra_workers):
        config["tenants"][0]["workers"] = []
        if not any(worker.get("gpus") for worker in extra_workers):
            config["smokeTest"]["enabled"] = False
    else:
        config["tenants"] = [t for t in config["tenants"] if t["name"] == TENANT]
    config["tenants"][0]["workers"].extend(copy.deepcopy(list(extra_workers)))
    world = world or lab_world()
    for worker in extra_workers:
        ssh = worker.get("ssh")
        if ssh and ssh["host"] not in world.ssh:
            add_lab_server(world, ssh["host"], ssh.get("hostKey") or HOST_KEY)
    # SSH private keys must be set with `pulumi config set --secret` (config.validate checks it).
    return Lifecycle(config, world=world, secret_keys=["tenants"])


def add_lab_server(world: World, host: str, host_key: str = HOST_KEY) -> SshHost:
    """A server of the lab at `host`: one interface with the default route, at `host` when that is an IPv4 address,
    else on the `kind` network (docs/real-clusters.md: in the lab an SSH worker must be able to route there) at the next free of
    172.18.1.1, .2, ..."""
    try:
        return world.add_ssh_host(host, host_key, address=str(ipaddress.IPv4Address(host)))
    except ValueError:
        pass
    taken = {address for entry in world.ssh.values() for address in entry.machine.interfaces.values()}
    address = next(f"172.18.1.{n}" for n in range(1, 255) if f"172.18.1.{n}" not in taken)
    return world.add_ssh_host(host, host_key, address=address)


def last_run(sim: Lifecycle) -> ProgramRun:
    """What the last operation of `sim` registered, as `tests.support.mockrun.run_program` reports it."""
    operation = sim.engine.last_operation
    return ProgramRun(
        resources=[registration(r) for r in operation.registered.values()],
        outputs={name: StackOutput(plain(value), name in sim.secret_outputs) for name, value in sim.outputs.items()},
    )


def program_values(stdin: str) -> dict[str, dict[str, str]]:
    """{action: {variable: value}} of a node command's stdin (components.worker.access.node_stdin), decoded."""
    return {action: values for action, (_name, _text, values) in read_node_stdin(stdin).items()}
