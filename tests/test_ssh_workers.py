"""Workers that are real machines reached over SSH, on the lifecycle simulator: a pinned host key, the join
program on the secret stdin, a new machine as a new membership, an expired token, and leaving (also after the
tenant itself is gone)."""

from __future__ import annotations

import copy

import pytest

from components import shell as ns
from components.host_operations import NodeMembershipProvider
from components.worker.access import node_stdin, ssh_command
from config import ConfigError, load_stack_config
from tests.support.lifecycle_support import kept_after_destroy, running_adopt_lab
from tests.support.mockrun import reference_stack
from tests.support.sim import hostapi
from tests.support.sim.state import plain
from tests.support.ssh_worker import (
    HOST_KEY,
    PRIVATE_KEY,
    PRIVATE_KEY_BODY,
    SSH_HOST,
    add_lab_server,
    last_run,
    program_values,
    ssh_worker_config,
    worker_lab,
)

REMOTE = "command:remote:Command"
BOOTSTRAP_TOKEN = "bootstrap.kubernetes.io/token"
NODE = "tenant-a-gpu-1"
ROOT_HOST = "gpu-2.example.net"
ROOT_HOST_KEY = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBDdMOcE6ElgQbxA1T4Y2ypgMDEEGd4Y5"
                 "KNlrp+3Yz2BC5O8i5F3+7I09JnCrUVQtDdbXD8eqoINwE1U0vLs2/yM=")
OTHER_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAISomebodyElsesServerKey000000000000000"


def _tokens(api) -> list[dict]:
    return [s for s in api.list("Secret", "kube-system") if s.get("type") == BOOTSTRAP_TOKEN]


# --------------------------------------------------------------------------- #
# Configuration
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("port, keyscan", [(2222, "ssh-keyscan -p 2222 -t ed25519 gpu-1.example.net"),
                                           (22, "ssh-keyscan -t ed25519 gpu-1.example.net")])
def test_an_ssh_worker_needs_its_host_key_and_is_told_how_to_read_it(port, keyscan):
    raw = copy.deepcopy(reference_stack())
    worker = ssh_worker_config("gpu-1", host_key=None)
    worker["ssh"]["port"] = port
    raw["tenants"][0]["workers"] = [worker]
    raw["smokeTest"]["enabled"] = False

    with pytest.raises(ConfigError) as error:
        load_stack_config(raw, {"tenants"})

    message = str(error.value)
    assert "tenants[0].workers[0].ssh.hostKey" in message
    assert "would receive the join token" in message
    assert f"`{keyscan}`" in message
    assert "pulumi config set --path 'gpu-tenancy:tenants[0].workers[0].ssh.hostKey' 'ssh-ed25519 AAAA...'" in message
    raw["tenants"][0]["workers"][0]["ssh"]["hostKey"] = HOST_KEY
    assert load_stack_config(raw, {"tenants"}).tenants[0].workers[0].ssh.host_key == HOST_KEY


# --------------------------------------------------------------------------- #
# A first `up`
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def lab():
    """tenant-a with gpu-1 (user ops, port 2222) and gpu-2 (root, an ECDSA host key); worker-0 is tenant-b's."""
    sim = worker_lab(ssh_worker_config("gpu-1", user="ops"),
                     ssh_worker_config("gpu-2", user="root", host=ROOT_HOST, host_key=ROOT_HOST_KEY))
    sim.up(skip_preview=True)
    return sim


def test_an_ssh_worker_is_joined_over_ssh_pinned_to_its_host_key(lab):
    run = last_run(lab)
    join = run.named(f"{NODE}-join", REMOTE)
    connection = join.inputs["connection"]
    assert {k: connection[k] for k in ("host", "user", "port", "privateKey", "hostKey")} == {
        "host": SSH_HOST, "user": "ops", "port": 2222, "privateKey": PRIVATE_KEY, "hostKey": HOST_KEY}
    assert join.is_secret("connection")
    assert run.named("tenant-a-gpu-2-join", REMOTE).inputs["connection"]["hostKey"] == ROOT_HOST_KEY
    # No docker resource for a machine.
    assert not [r for r in run.resources if r.type.startswith("docker:") and "gpu-" in r.name]
    # The simulated client met both servers with their pinned keys.
    assert not [event for event in lab.world.events if "without checking its host key" in event]


def test_the_join_program_goes_on_the_secret_stdin_and_the_command_line_names_only_the_action(lab):
    run = last_run(lab)
    join = run.named(f"{NODE}-join", REMOTE)
    inputs = join.inputs
    tenant = lab.output("tenants")["tenant-a"]
    token = plain(lab.resource(f"{NODE}-membership").outputs["token"])

    assert (inputs["create"], inputs["delete"]) == (ssh_command("create", "ops"), ssh_command("delete", "ops")) == (
        "sudo -n bash -s -- create", "sudo -n bash -s -- delete")
    root = run.named("tenant-a-gpu-2-join", REMOTE).inputs
    assert (root["create"], root["delete"]) == ("bash -s -- create", "bash -s -- delete")
    values = program_values(inputs["stdin"])
    assert values == {
        "create": {
            ns.NODE_NAME_ENV: NODE, ns.TENANT_ENDPOINT_ENV: tenant["endpoint"], ns.JOIN_TOKEN_ENV: token,
            ns.CA_CERT_HASH_ENV: tenant["discoveryHash"], ns.TENANT_CA_CERT_ENV: values["create"][ns.TENANT_CA_CERT_ENV],
            ns.TENANT_VERSION_ENV: "v1.35.0", ns.NODE_KIND_ENV: ns.NODE_KIND_MACHINE,
        },
        "delete": {ns.NODE_NAME_ENV: NODE, ns.NODE_KIND_ENV: ns.NODE_KIND_MACHINE},
    }
    assert inputs["stdin"] == node_stdin({
        "create": (ns.NODE_JOIN, ns.script_text(ns.NODE_JOIN), values["create"]),
        "delete": (ns.NODE_LEAVE, ns.script_text(ns.NODE_LEAVE), values["delete"]),
    })
    assert join.is_secret("stdin") and "environment" not in inputs
    assert inputs["addPreviousOutputInEnv"] is False and inputs["logging"] == "none"
    for key in ("create", "delete"):
        assert not join.is_secret(key)
        for value in (token, PRIVATE_KEY_BODY, tenant["endpoint"]):
            assert value not in inputs[key]


def test_the_machine_is_the_membership_and_triggers_the_join(lab):
    run = last_run(lab)
    membership, join = run.named(f"{NODE}-membership"), run.named(f"{NODE}-join", REMOTE)
    tenant = lab.output("tenants")["tenant-a"]
    assert membership.inputs["machine"] == SSH_HOST
    assert join.inputs["triggers"] == [lab.resource(f"{NODE}-membership").id, SSH_HOST, tenant["endpoint"],
                                       tenant["discoveryHash"]]
    assert join.delete_before_replace


def test_after_up_the_machines_are_nodes_of_the_tenant_and_no_token_is_left(lab):
    api = lab.world.tenant_api("tenant-a")
    endpoint = lab.output("tenants")["tenant-a"]["endpoint"]
    for host, node in ((SSH_HOST, NODE), (ROOT_HOST, "tenant-a-gpu-2")):
        assert lab.world.ssh[host].machine.kubelet_conf == f"https://{endpoint}"
        assert api.find("Node", None, node) is not None
    assert _tokens(api) == []


# --------------------------------------------------------------------------- #
# Later operations
# --------------------------------------------------------------------------- #


def test_a_server_with_another_host_key_gets_nothing_and_a_join_retried_days_later_gets_a_fresh_token():
    sim = worker_lab(ssh_worker_config("gpu-1"))
    host = sim.world.ssh[SSH_HOST]
    host.host_key = OTHER_HOST_KEY  # someone else answers at that address

    plan = sim.up(skip_preview=True, expect_error=True)

    assert "host key mismatch" in (plan.error or ""), plan.render()
    api = sim.world.tenant_api("tenant-a")
    assert host.machine.kubelet_conf is None and api.find("Node", None, NODE) is None
    first = sim.resource(f"{NODE}-membership")
    # Its token was minted (and is still unused) but never sent.
    assert f"bootstrap-token-{plain(first.outputs['token_id'])}" in [s["metadata"]["name"] for s in _tokens(api)]

    # Two days later the right server answers: the unused token has expired, so the membership is replaced.
    sim.advance(days=2)
    host.host_key = HOST_KEY
    plan = sim.up(skip_preview=True)

    assert f"{NODE}-membership" in plan.names("replace"), plan.render()
    assert sim.resource(f"{NODE}-membership").outputs["token_id"] != first.outputs["token_id"]
    assert host.machine.kubelet_conf is not None and api.find("Node", None, NODE) is not None
    assert _tokens(api) == []


def test_moving_removing_and_destroying_ssh_workers_resets_every_machine(recorder):
    new_host = "gpu-3.example.net"
    sim = worker_lab(ssh_worker_config("gpu-1"),
                     ssh_worker_config("gpu-2", user="root", host=ROOT_HOST, host_key=ROOT_HOST_KEY))
    add_lab_server(sim.world, new_host, HOST_KEY)
    machines = {host: sim.world.ssh[host].machine for host in (SSH_HOST, ROOT_HOST, new_host)}
    sim.up(skip_preview=True)
    api = sim.world.tenant_api("tenant-a")
    old_uid = api.find("Node", None, NODE)["metadata"]["uid"]

    # gpu-1 moves to another machine: the old one leaves first, then the Node goes, then the new one joins.
    sim.config["tenants"][0]["workers"][0]["ssh"]["host"] = new_host
    plan = sim.up(skip_preview=True)
    assert {f"{NODE}-membership", f"{NODE}-join", f"{NODE}-registered"} <= plan.names("replace"), plan.render()
    assert recorder == [("reset", SSH_HOST), ("delete Node", NODE)]
    assert machines[SSH_HOST].kubelet_conf is None and machines[new_host].kubelet_conf is not None
    # The old server is clean: no persisted kernel setting, CNI file or chain of the tenant is left on it.
    assert [line for line in sim.world.leftovers() if SSH_HOST in line] == []
    assert any(new_host in line for line in sim.world.leftovers())
    assert api.find("Node", None, NODE)["metadata"]["uid"] != old_uid
    assert _tokens(api) == []

    # gpu-2 is removed.
    recorder.clear()
    del sim.config["tenants"][0]["workers"][1]
    plan = sim.up(skip_preview=True)
    assert recorder == [("reset", ROOT_HOST), ("delete Node", "tenant-a-gpu-2")]
    assert machines[ROOT_HOST].kubelet_conf is None and api.find("Node", None, "tenant-a-gpu-2") is None
    assert [line for line in sim.world.leftovers() if ROOT_HOST in line] == []

    # The tenant is deleted out of band (`kubectl delete tcp`): its Node records went with it, the machines still
    # run a kubelet for it.
    sim.world.kind["gpu-tenancy"].api.delete(None, "TenantControlPlane", "tenant-a", "tenant-a")
    assert sim.world.tenant_api("tenant-a") is None
    membership = sim.resource(f"{NODE}-membership")
    provider = hostapi.attach(NodeMembershipProvider(), sim.world)
    provider.delete(membership.id, plain(membership.outputs))  # gone counts as removed

    sim.destroy()

    assert machines[new_host].kubelet_conf is None
    assert sim.world.leftovers() == kept_after_destroy(sim) and sim.resources() == []


def test_a_joined_gpu_server_is_checked_again_when_its_cards_change():
    """A changed `gpus` re-runs the join (its stdin changes; pulumi-command runs `create` again without an `update`):
    a server already joined is checked for HAMi's device plugin too, not passed as "nothing to do"."""
    sim = running_adopt_lab(one_tenant=True, races=False)
    tenant = sim.config["tenants"][0]
    worker = next(w for w in tenant["workers"] if w.get("gpus"))
    machine = sim.world.machines[f"{tenant['name']}-{worker['name']}"]
    assert machine.kubelet_conf is not None
    # A card swapped in the configuration, and the server lost its container toolkit.
    worker["gpus"][0] = {**worker["gpus"][0], "uuid": "GPU-5f3c2a10-0009"}
    machine.nvidia_missing = {"toolkit"}

    plan = sim.up(expect_error=True)

    assert "this worker lists gpus, so it gets gpu=on and HAMi's device plugin" in (plan.error or ""), plan.render()
    assert "toolkit; this server has no card GPU-5f3c2a10-0009" in plan.error
