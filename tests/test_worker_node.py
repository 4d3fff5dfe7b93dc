"""WorkerNode on the lifecycle simulator: the kindest/node container as kind runs its nodes, the three resources of
a membership (token -> join on the node -> registered), what reaches a node, and how a worker leaves.

The node scripts themselves run against stub binaries in tests/test_node_scripts.py; SSH specifics are in
tests/test_ssh_workers.py.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pulumi_command as command
import pytest
import yaml

import config
from components import shell as ns
from components.host_operations import NodeMembershipProvider
from components.worker.access import container_environment, container_interpreter, node_stdin
from components.worker.node import (
    TenantAccess,
    WorkerNode,
    WorkerNodeArgs,
    node_container_spec,
    worker_image,
)
from config.models import KIND_NODE_IMAGES
from naming import LABEL_ROLE, LABEL_STACK, LABEL_TENANT, LABEL_WORKER
from tests.support.lifecycle_support import block_drain
from tests.support.mockrun import ProgramFailedError, ProgramRun, registered
from tests.support.sim import Lifecycle, hostapi, systems
from tests.support.sim.scripts import invocation
from tests.support.sim.state import contains_secret, plain
from tests.support.sim.world import ApiError, Machine
from tests.support.ssh_worker import (
    PRIVATE_KEY_BODY,
    add_lab_server,
    last_run,
    program_values,
    ssh_worker_config,
    worker_lab,
)

CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/remoteImage:RemoteImage"
LOCAL = "command:local:Command"
REMOTE = "command:remote:Command"
MEMBERSHIP = "pulumi-python:dynamic/gpu-tenancy:NodeMembership"
REGISTRATION = "pulumi-python:dynamic/gpu-tenancy:NodeRegistration"
TCP = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"
BOOTSTRAP_TOKEN = "bootstrap.kubernetes.io/token"
# kubeadm's default bootstrap token lifetime (`kubeadm token create --ttl`, kubeadm constants DefaultTokenDuration).
KUBEADM_TOKEN_TTL = datetime.timedelta(hours=24)
# The lab keeps the kinds in separate tenants (validation refuses a mix): tenant-b runs the container.
NODE = "tenant-b-worker-0"
SSH_NODE = "tenant-a-gpu-1"
CARD = {"uuid": "GPU-MOCK-S0", "model": "NVIDIA-A100", "memoryMiB": 8192}


@dataclass
class Lab:
    sim: Lifecycle
    run: ProgramRun
    started: datetime.datetime
    finished: datetime.datetime

    def state(self, name: str):
        return self.sim.resource(name)

    def tenant_api(self, tenant: str = "tenant-b"):
        return self.sim.world.tenant_api(tenant)


@pytest.fixture(scope="module")
def lab() -> Lab:
    """After a first `up`: tenant-a with the SSH machine gpu-1, tenant-b with its container worker-0."""
    sim = worker_lab(ssh_worker_config("gpu-1", gpus=[CARD]))
    started = sim.world.now
    sim.up(skip_preview=True)
    return Lab(sim, last_run(sim), started, sim.world.now)


def _tokens(api) -> list[dict]:
    return [s for s in api.list("Secret", "kube-system") if s.get("type") == BOOTSTRAP_TOKEN]


# --------------------------------------------------------------------------- #
# The container, as kind runs its nodes
# --------------------------------------------------------------------------- #


def test_node_container_spec_is_kinds_node_flags_as_data():
    image = KIND_NODE_IMAGES["v1.35.0"]
    spec = node_container_spec(tenant="tenant-a", worker="worker-0", image=image, stack="dev")

    assert spec.name == spec.hostname == "tenant-a-worker-0"
    assert spec.image == image and spec.network == "kind"
    assert spec.privileged and spec.tty and not spec.init
    assert spec.security_opts == ("seccomp=unconfined", "apparmor=unconfined")
    assert spec.tmpfs == {"/tmp": "", "/run": ""}
    assert spec.anonymous_volumes == ("/var",)
    assert spec.read_only_binds == ("/lib/modules",)
    assert spec.cgroupns_mode == "private"
    assert (spec.restart, spec.max_retry_count) == ("on-failure", 1)
    assert spec.labels == {LABEL_STACK: "dev", LABEL_TENANT: "tenant-a", LABEL_WORKER: "worker-0", LABEL_ROLE: "worker"}
    assert node_container_spec(tenant="t", worker="w", image=image, network="other", stack="s").network == "other"


def _published_node_images(vendor_dir: Path) -> dict[str, set[str]]:
    """kindest/node digests by version, as the vendored kind notes record them (kind's default image per release,
    and the images cluster-api's mapper lists as pre-built for a release)."""
    found: dict[str, set[str]] = {}
    text = (vendor_dir / "kind" / "README.txt").read_text()
    for version, digest in re.findall(r"kindest/node:(v[0-9.]+)@sha256:([0-9a-f]{64})", text):
        found.setdefault(version, set()).add(digest)
    return found


def test_worker_image_is_the_kindest_node_image_kind_publishes_pinned_by_digest(vendor_dir):
    published = _published_node_images(vendor_dir)
    for version, image in KIND_NODE_IMAGES.items():
        match = re.fullmatch(r"kindest/node:(v[0-9.]+)@sha256:([0-9a-f]{64})", image)
        assert match and match.group(1) == version, image
        assert match.group(2) in published.get(version, ()), (
            f"{image}: not the digest kind published for {version} ({published.get(version)})")
        assert worker_image(config.Tenant(name="t", kubernetesVersion=version, workers=[{"name": "w"}])) == image


def test_worker_image_can_be_overridden_and_is_never_guessed():
    own = "registry.example.net/kindest/node:v1.35.1"
    tenant = config.Tenant(name="t", kubernetesVersion="v1.35.1", nodeImage=own, workers=[{"name": "w"}])
    assert worker_image(tenant) == own
    with pytest.raises(ValueError, match="no kindest/node image is known for v1.35.1; set nodeImage"):
        worker_image(config.Tenant(name="t", kubernetesVersion="v1.35.1", workers=[{"name": "w"}]))


def test_container_runs_like_a_kind_node(lab):
    container = lab.run.named(f"{NODE}-container", CONTAINER)
    spec = node_container_spec(tenant="tenant-b", worker="worker-0", image=KIND_NODE_IMAGES["v1.35.0"], stack="dev")
    inputs = container.inputs

    assert inputs["name"] == inputs["hostname"] == NODE
    assert inputs["privileged"] is True
    assert sorted(inputs["securityOpts"]) == ["apparmor=unconfined", "seccomp=unconfined"]
    assert inputs["tmpfs"] == {"/tmp": "", "/run": ""}
    assert inputs["volumes"] == [{"containerPath": "/var"}]
    assert inputs["mounts"] == [{"target": "/lib/modules", "source": "/lib/modules", "type": "bind", "readOnly": True}]
    assert (inputs["cgroupnsMode"], inputs["tty"], inputs["init"]) == ("private", True, False)
    assert (inputs["restart"], inputs["maxRetryCount"]) == ("on-failure", 1)
    assert inputs["networksAdvanced"] == [{"name": "kind"}]
    assert {label["label"]: label["value"] for label in inputs["labels"]} == spec.labels
    # The name is fixed: the old container must go before its replacement starts.
    assert container.delete_before_replace
    # ... and on the Docker host:
    running = lab.sim.world.docker.containers[NODE]
    assert running.privileged and running.network == "kind"
    assert running.labels == {LABEL_STACK: "dev", LABEL_TENANT: "tenant-b", LABEL_WORKER: "worker-0",
                              LABEL_ROLE: "worker"}


def test_container_runs_the_pinned_image_by_id_and_keeps_it_on_the_host(lab):
    container = lab.run.named(f"{NODE}-container", CONTAINER)
    image = lab.run.named(f"{NODE}-image", IMAGE)
    assert image.inputs == {"name": KIND_NODE_IMAGES["v1.35.0"], "keepLocally": True}
    # The image id, not its name (a name makes pulumi-docker replace the container on every run).
    assert container.inputs["image"] == plain(lab.state(f"{NODE}-image").outputs["imageId"])
    assert image.urn in container.property_dependencies["image"]
    assert KIND_NODE_IMAGES["v1.35.0"] in lab.sim.world.docker.image_pulls


def test_container_waits_for_the_management_cluster(lab):
    container = lab.run.named(f"{NODE}-container", CONTAINER)
    kind = lab.run.named("management-kind", LOCAL)
    assert kind.urn in container.dependencies


def test_a_container_worker_needs_the_management_cluster_and_its_image():
    def program():
        tcp = command.local.Command("tcp", create="true")
        access = TenantAccess(
            name="tenant-a", namespace="tenant-a", kubernetes_version="v1.35.0", endpoint="172.18.255.200:6443",
            ca_certificate="ca", discovery_hash="sha256:" + "ab" * 32, operator_kubeconfig="op",
            management_kubeconfig="mgmt", control_plane=tcp,
        )
        WorkerNode(NODE, WorkerNodeArgs(tenant=access, worker=config.Worker(name="worker-0")))

    with pytest.raises(ProgramFailedError, match="management_cluster and image are required"):
        registered({}, program=program, preview=True)


# --------------------------------------------------------------------------- #
# Membership, join, registration
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("node", [NODE, SSH_NODE])
def test_membership_then_join_then_registered(lab, node):
    run = lab.run
    membership, registered = run.named(f"{node}-membership", MEMBERSHIP), run.named(f"{node}-registered", REGISTRATION)
    join = run.named(f"{node}-join")
    assert run.depends_on(join, membership) and run.depends_on(registered, join)
    assert not run.depends_on(membership, join) and not run.depends_on(join, registered)
    assert registered.inputs["join"] == lab.state(f"{node}-join").id
    assert registered.inputs["token_id"] == plain(lab.state(f"{node}-membership").outputs["token_id"])
    # Host-side records go with the control plane; the node-side reset must run whatever happens to it.
    tcp = run.named(f"{node[:len('tenant-a')]}-tcp", TCP)
    assert membership.deleted_with == registered.deleted_with == tcp.urn
    assert join.deleted_with == ""


def test_a_worker_waits_for_the_one_before_it_only_through_its_drain():
    """Workers roll one at a time (docs/operations.md "Upgrading a tenant"): the second worker's drain waits for the first one
    back in service, the first waits for nothing of the second."""
    component = "gpu-tenancy:index:WorkerNode"
    sim = worker_lab({"name": "worker-1"})
    sim.up(skip_preview=True)
    run, first, second = last_run(sim), "tenant-a-worker-0", "tenant-a-worker-1"
    assert run.depends_on(run.named(f"{second}-drain"), run.named(f"{first}-ready"))
    assert not run.depends_on(run.named(f"{first}-registered"), run.named(second, component))
    assert not run.depends_on(run.named(f"{first}-drain"), run.named(second, component))


def test_membership_names_the_machine_and_the_control_plane(lab):
    membership = lab.run.named(f"{NODE}-membership", MEMBERSHIP)
    inputs = membership.inputs
    tenant = lab.sim.output("tenants")["tenant-b"]
    assert inputs["node_name"] == NODE
    assert inputs["machine"] == lab.state(f"{NODE}-container").id
    assert (inputs["endpoint"], inputs["ca_cert_hash"]) == (tenant["endpoint"], tenant["discoveryHash"])
    assert (inputs["control_plane_namespace"], inputs["control_plane_name"]) == ("tenant-b", "tenant-b")
    assert membership.is_secret("kubeconfig") and membership.is_secret("management_kubeconfig")
    assert {"kubeconfig", "management_kubeconfig", "token"} <= set(membership.additional_secret_outputs)


def test_join_feeds_the_node_scripts_to_docker_exec_and_only_the_action_is_on_the_command_line(lab):
    join = lab.run.named(f"{NODE}-join", LOCAL)
    inputs = join.inputs
    tenant = lab.sim.output("tenants")["tenant-b"]
    membership = lab.state(f"{NODE}-membership")
    values = {
        ns.NODE_NAME_ENV: NODE,
        ns.TENANT_ENDPOINT_ENV: tenant["endpoint"],
        ns.JOIN_TOKEN_ENV: plain(membership.outputs["token"]),
        ns.CA_CERT_HASH_ENV: tenant["discoveryHash"],
        ns.TENANT_CA_CERT_ENV: lab.tenant_api().ca.pem.decode(),
        ns.TENANT_VERSION_ENV: "v1.35.0",
        ns.NODE_KIND_ENV: ns.NODE_KIND_CONTAINER,
    }

    assert inputs["interpreter"] == container_interpreter()
    assert (inputs["create"], inputs["delete"]) == ("create", "delete")
    assert inputs["environment"] == container_environment(
        NODE, f"If Node {NODE} remains in the tenant, the next removal of this worker deletes it.")
    assert inputs["stdin"] == node_stdin({
        "create": (ns.NODE_JOIN, ns.script_text(ns.NODE_JOIN), {name: values[name] for name in ns.NODE_JOIN_ENV}),
        "delete": (ns.NODE_LEAVE, ns.script_text(ns.NODE_LEAVE),
                   {ns.NODE_NAME_ENV: NODE, ns.NODE_KIND_ENV: ns.NODE_KIND_CONTAINER}),
    })
    assert join.is_secret("stdin")
    for key in ("interpreter", "create", "delete", "environment"):
        assert not join.is_secret(key)
    assert inputs["logging"] == "none" and inputs["addPreviousOutputInEnv"] is False
    assert {"stdout", "stderr"} <= set(join.additional_secret_outputs)
    # The token reaches the node only inside the secret stdin.
    created = invocation(LOCAL, join.raw_inputs, "create")
    assert (created.script, created.container) == (ns.NODE_JOIN, NODE)
    assert ns.JOIN_TOKEN_ENV in created.secret


def test_join_is_replaced_with_the_membership_the_machine_or_the_control_plane(lab):
    join = lab.run.named(f"{NODE}-join", LOCAL)
    tenant = lab.sim.output("tenants")["tenant-b"]
    assert join.inputs["triggers"] == [
        lab.state(f"{NODE}-membership").id, lab.state(f"{NODE}-container").id,
        tenant["endpoint"], tenant["discoveryHash"],
    ]
    membership, container = lab.run.named(f"{NODE}-membership"), lab.run.named(f"{NODE}-container")
    assert {membership.urn, container.urn} <= set(join.property_dependencies["triggers"])
    # The same node name joins again only after the old membership is undone.
    assert join.delete_before_replace


def test_an_ssh_worker_upgrades_after_its_join_and_its_ready_waits_for_the_new_kubelet(lab):
    """`<node>-upgrade`: created (record) with the join, replaced with a rejoin, updated (upgrade) on a new version;
    `<node>-ready` runs after it and wants the tenant's version from the SSH Node's kubelet only when the script
    upgraded the server (a first build only records it: node-join.sh joined it at the version)."""
    upgrade = lab.run.named(f"{SSH_NODE}-upgrade", REMOTE)
    join = lab.run.named(f"{SSH_NODE}-join", REMOTE)
    assert upgrade.inputs["triggers"] == [lab.state(f"{SSH_NODE}-join").id]
    assert join.urn in upgrade.dependencies
    assert upgrade.inputs["create"] == "sudo -n bash -s -- create"
    assert upgrade.inputs["update"] == "sudo -n bash -s -- update"
    assert "delete" not in upgrade.inputs  # a leave resets the node: nothing of the upgrade to undo
    created, updated = (invocation(REMOTE, upgrade.raw_inputs, action) for action in ("create", "update"))
    assert (created.script, created.environment[ns.UPGRADE_MODE_ENV]) == (ns.NODE_UPGRADE, ns.UPGRADE_MODE_RECORD)
    assert (updated.script, updated.environment[ns.UPGRADE_MODE_ENV]) == (ns.NODE_UPGRADE, ns.UPGRADE_MODE_UPGRADE)
    assert updated.environment[ns.TENANT_VERSION_ENV] == "v1.35.0"
    ready = lab.run.named(f"{SSH_NODE}-ready")
    assert plain(ready.inputs["kubelet_version"]) is None
    assert upgrade.urn in ready.property_dependencies["kubelet_version"]
    assert upgrade.urn in ready.dependencies
    # A container worker has no upgrade of its own: it is replaced by a container of the new version.
    assert not [r for r in lab.run.resources if r.name == f"{NODE}-upgrade"]


def test_only_the_joins_and_the_ssh_upgrade_run_on_nodes_and_no_tenant_credential_reaches_one(lab):
    world = lab.sim.world
    management = world.kind["gpu-tenancy"].api
    tenants = ("tenant-a", "tenant-b")
    kubeconfigs = [
        base64.b64decode(value).decode() for tenant in tenants
        for value in management.find("Secret", tenant, f"{tenant}-admin-kubeconfig")["data"].values()
    ]
    kubeconfigs += [lab.sim.output("managementKubeconfig"), *(lab.sim.output("tenantKubeconfigs")[t] for t in tenants)]
    ca_keys = [base64.b64decode(management.find("Secret", t, f"{t}-ca")["data"]["ca.key"]).decode() for t in tenants]
    credentials = _credential_fragments(kubeconfigs) + ca_keys
    assert len(credentials) > 10

    node_side = [r for r in lab.run.resources
                 if r.type == REMOTE or (r.type == LOCAL and r.inputs.get("interpreter") == container_interpreter())]
    assert sorted(r.name for r in node_side) == [f"{SSH_NODE}-join", f"{SSH_NODE}-upgrade", f"{NODE}-join"]
    for resource in node_side:
        inputs = resource.inputs
        decoded = program_values(inputs["stdin"])
        haystack = json.dumps(inputs) + json.dumps(decoded)
        if resource.name.endswith("-upgrade"):
            # The SSH worker's upgrade (node-upgrade.sh) needs no credential at all: kubeadm uses the node's own.
            assert set(decoded) == {"create", "update"}
            assert set(decoded["update"]) == {ns.NODE_NAME_ENV, ns.TENANT_VERSION_ENV, ns.UPGRADE_MODE_ENV}
        else:
            assert set(decoded) == {"create", "delete"}
            token = plain(lab.state(resource.name.replace("-join", "-membership")).outputs["token"])
            assert decoded["create"][ns.JOIN_TOKEN_ENV] == token  # the search does see what is sent
        assert not [c for c in credentials if c in haystack], resource.name
        assert PRIVATE_KEY_BODY not in json.dumps({k: v for k, v in inputs.items() if k != "connection"})


def _credential_fragments(kubeconfigs: list[str]) -> list[str]:
    """The private parts of the kubeconfigs: client keys (encoded, and their PEM lines) and bearer tokens."""
    fragments = []
    for text in kubeconfigs:
        for user in yaml.safe_load(text)["users"]:
            if user["user"].get("token"):
                fragments.append(user["user"]["token"])
            if user["user"].get("client-key-data"):
                fragments.append(user["user"]["client-key-data"])
                pem = base64.b64decode(user["user"]["client-key-data"]).decode()
                fragments += [line for line in pem.splitlines() if line and not line.startswith("-----")]
    return fragments


# --------------------------------------------------------------------------- #
# After `up`: registered, token spent
# --------------------------------------------------------------------------- #


def test_after_up_every_worker_is_a_registered_node_and_no_join_token_is_left(lab):
    for tenant, node in (("tenant-b", NODE), ("tenant-a", SSH_NODE)):
        api = lab.tenant_api(tenant)
        obj = api.find("Node", None, node)
        assert obj is not None, node
        assert lab.state(f"{node}-registered").id == f"{node}/{obj['metadata']['uid']}"
        assert _tokens(api) == []
        assert lab.sim.output("tenants")[tenant]["nodes"] == [node]


def test_the_join_token_is_the_memberships_one_day_token_and_is_revoked_once_the_node_registered(lab):
    membership = lab.state(f"{NODE}-membership").outputs
    token, token_id = plain(membership["token"]), plain(membership["token_id"])
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", token) and token.startswith(f"{token_id}.")
    expiration = datetime.datetime.fromisoformat(plain(membership["expiration"]).replace("Z", "+00:00"))
    assert lab.started + KUBEADM_TOKEN_TTL <= expiration <= lab.finished + KUBEADM_TOKEN_TTL
    assert token != plain(lab.state(f"{SSH_NODE}-membership").outputs["token"])

    # Whoever reads the token from the state later cannot join a machine with it.
    world = lab.sim.world
    endpoint = lab.sim.output("tenants")["tenant-b"]["endpoint"]
    with pytest.raises(ApiError, match=f'token id "{token_id}" is invalid'):
        systems.join(world, Machine(name="intruder"), endpoint=endpoint, token=token,
                     ca_hash=lab.sim.output("tenants")["tenant-b"]["discoveryHash"], node_name="intruder")


def test_the_join_token_is_secret_in_the_state(lab):
    assert contains_secret(lab.state(f"{NODE}-membership").outputs["token"])
    assert contains_secret(lab.state(f"{NODE}-join").outputs["stdout"])


# --------------------------------------------------------------------------- #
# Leaving
# --------------------------------------------------------------------------- #


def test_a_replaced_container_leaves_and_joins_again_and_a_removed_worker_is_reset_before_its_node_goes(recorder):
    sim = worker_lab({"name": "worker-1"}, {"name": "worker-2"})
    node = "tenant-a-worker-0"
    sim.up(skip_preview=True)
    api = sim.world.tenant_api("tenant-a")
    old_uid = api.find("Node", None, node)["metadata"]["uid"]
    old_membership = sim.resource(f"{node}-membership").id

    # A new container is a new machine: a new membership, and the node leaves before its Node object goes
    # (a kubelet still running would register the Node again).
    plan = sim.up(replace=[f"{node}-container"], skip_preview=True)
    assert {f"{node}-membership", f"{node}-join", f"{node}-registered"} <= plan.names("replace"), plan.render()
    assert recorder.index(("reset", node)) < recorder.index(("delete Node", node))
    assert sim.resource(f"{node}-membership").id != old_membership
    found = api.find("Node", None, node)
    assert found is not None and found["metadata"]["uid"] != old_uid
    assert _tokens(api) == []

    # Two workers removed; one's container was removed by hand (`docker rm -f`: its kubelet is gone too).
    del sim.world.docker.containers["tenant-a-worker-2"]
    del sim.world.machines["tenant-a-worker-2"]
    recorder.clear()
    sim.config["tenants"][0]["workers"] = sim.config["tenants"][0]["workers"][:1]
    plan = sim.up(skip_preview=True)

    # Both have no cards: system workers, labelled as such (components.tenant.spec.SYSTEM_NODE_LABEL).
    gone = {f"tenant-a-{worker}-{part}" for worker in ("worker-1", "worker-2")
            for part in ("membership", "join", "registered", "container", "image", "drain", "ready",
                         "system-label")}
    assert plan.names("delete") == gone, plan.render()
    assert recorder.index(("reset", "tenant-a-worker-1")) < recorder.index(("delete Node", "tenant-a-worker-1"))
    assert ("reset", "tenant-a-worker-2") not in recorder and ("delete Node", "tenant-a-worker-2") in recorder
    for worker in ("worker-1", "worker-2"):
        assert api.find("Node", None, f"tenant-a-{worker}") is None
        assert f"tenant-a-{worker}" not in sim.world.docker.containers
    assert api.find("Node", None, node) is not None
    assert sim.up(skip_preview=True).changed() == {}


def _pods_on(api, node: str) -> None:
    """A Deployment's pod, a DaemonSet's pod and pod default/db-0 under a budget that allows no disruption."""
    for name, owner, labels in (("web-0", "ReplicaSet", {"app": "web"}), ("agent-0", "DaemonSet", {"app": "agent"})):
        api.put({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": "default", "labels": labels,
                              "ownerReferences": [{"kind": owner, "name": name[:-2], "controller": True}]},
                 "spec": {"nodeName": node, "containers": [{"name": "c", "image": "c"}]},
                 "status": {"phase": "Running"}})
    block_drain(api, node)


def _swap_worker(sim, worker: str) -> dict:
    """Remove `worker` and add one of the same kind in its place (a tenant keeps at least one worker); its tenant."""
    tenant = next(t for t in sim.config["tenants"] if any(w["name"] == worker for w in t["workers"]))
    (gone,) = [w for w in tenant["workers"] if w["name"] == worker]
    successor = {**copy.deepcopy(gone), "name": f"{worker}-next"}
    if "ssh" in gone:
        successor["ssh"]["host"] = "gpu-next.lab"
        add_lab_server(sim.world, "gpu-next.lab")
    tenant["workers"] = [successor if w is gone else w for w in tenant["workers"]]
    return tenant


@pytest.mark.parametrize(("node", "worker"), [(NODE, "worker-0"), (SSH_NODE, "gpu-1")])
def test_a_removed_worker_is_cordoned_and_drained_before_it_leaves(lab, recorder, monkeypatch, node, worker):
    sim = lab.sim.fork()
    api = sim.world.tenant_api(node.rsplit("-", 2)[0])
    _pods_on(api, node)
    evict = hostapi.SimClient.evict

    def recording_evict(self, name, namespace):
        recorder.append(("evict", name))
        return evict(self, name, namespace)

    monkeypatch.setattr(hostapi.SimClient, "evict", recording_evict)
    _swap_worker(sim, worker)
    machine = sim.world.machines[node].name
    plan = sim.up(skip_preview=True, expect_error=True)
    # The budget holds the worker: cordoned, still a member, the pod and the budget named on one line.
    assert plan.error is not None and f"{node}-ready" in plan.error, plan.render()
    assert "pod default/db-0" in plan.error and "disruption budget db needs 1 healthy pods" in plan.error
    assert "\n" not in plan.error and "run `make up` again" in plan.error
    assert ("reset", machine) not in recorder and ("delete Node", node) not in recorder
    assert api.find("Node", None, node)["spec"]["unschedulable"] is True
    assert api.find("Pod", "default", "web-0") is None and api.find("Pod", "default", "agent-0") is not None
    api.find("PodDisruptionBudget", "default", "db")["status"]["disruptionsAllowed"] = 1
    sim.up(skip_preview=True)
    assert recorder.index(("evict", "db-0")) < recorder.index(("reset", machine)) \
        < recorder.index(("delete Node", node)), recorder
    assert ("evict", "agent-0") not in recorder
    assert api.find("Node", None, node) is None


def test_a_removed_worker_whose_kubelet_is_gone_is_not_held_by_pods_that_cannot_finish(lab):
    """Its container was removed by hand: a pod already terminating there never finishes (no kubelet), so the drain
    does not wait for it; the Node goes and PodGC takes the pod."""
    sim = lab.sim.fork()
    api = sim.world.tenant_api("tenant-b")
    del sim.world.docker.containers[NODE]
    del sim.world.machines[NODE]
    systems.time_passed(sim.world, settled=True)
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "web-0", "namespace": "default", "deletionTimestamp": sim.world.now.isoformat(),
        "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "controller": True}]},
        "spec": {"nodeName": NODE}, "status": {"phase": "Running"}})
    _swap_worker(sim, "worker-0")
    plan = sim.up(skip_preview=True)
    assert f"{NODE}-ready" in plan.names("delete"), plan.render()
    assert api.find("Node", None, NODE) is None and api.find("Pod", "default", "web-0") is None


def test_a_removed_worker_of_a_tenant_that_is_gone_leaves_undrained_and_says_so_once(lab, capsys):
    from components.worker.operations import NodeReadyProvider
    from tests.support import sdk

    ready = lab.state(f"{NODE}-ready")
    provider = hostapi.attach(NodeReadyProvider(), lab.sim.world)
    tenant_api = lab.tenant_api()
    try:
        tenant_api.reachable = False
        with sdk.engine_detached():  # as the provider host runs it: pulumi.log.warn prints to stderr
            provider.delete(ready.id, plain(ready.outputs))
    finally:
        tenant_api.reachable = True
    warnings = [line for line in capsys.readouterr().err.splitlines() if NODE in line]
    assert len(warnings) == 1 and "not drained" in warnings[0], warnings
    assert not (tenant_api.find("Node", None, NODE).get("spec") or {}).get("unschedulable")


def test_a_membership_is_not_dropped_while_the_tenant_is_down_but_still_exists(lab):
    """Removing a worker whose tenant API does not answer: the Node must not be forgotten silently."""
    world = lab.sim.world
    membership = lab.state(f"{NODE}-membership")
    tenant_api, management = lab.tenant_api(), world.kind["gpu-tenancy"].api
    provider = hostapi.attach(NodeMembershipProvider(), world)
    try:
        tenant_api.reachable = False
        with pytest.raises(RuntimeError, match=r"TenantControlPlane tenant-b/tenant-b still exists: nothing was "
                                               r"removed, retry"):
            provider.delete(membership.id, plain(membership.outputs))
        management.reachable = False
        with pytest.raises(RuntimeError, match="cannot confirm that its control plane is gone"):
            provider.delete(membership.id, plain(membership.outputs))
    finally:
        tenant_api.reachable = management.reachable = True
    assert tenant_api.find("Node", None, NODE) is not None
