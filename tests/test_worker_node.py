"""WorkerNode under Pulumi mocks: the node container as kind runs its nodes, SSH machines, and the secret-safe join."""

from __future__ import annotations

import pulumi
import pulumi_command as command
import pytest

import config
from components import join_script
from components.node_access import (
    NodeAccess,
    docker_exec_script,
    docker_exec_script_if_present,
    node_program,
    ssh_command,
)
from components.worker_node import (
    LABEL_ROLE,
    LABEL_STACK,
    LABEL_TENANT,
    LABEL_WORKER,
    WorkerNode,
    WorkerNodeArgs,
    join_scripts,
    kind_node_image,
    node_container_spec,
)
from tests.fixtures import kubeconfig_yaml
from tests.ssh_worker import PRIVATE_KEY, PRIVATE_KEY_BODY, SSH_HOST, ssh_worker_config
from tools.mockrun import run_program

TOKEN = "abcdef.0123456789abcdef"
CA_HASH = "sha256:" + "ab" * 32
ENDPOINT = "172.18.255.200:6443"
KUBECONFIG = kubeconfig_yaml(f"https://{ENDPOINT}", "tenant-a")

CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/remoteImage:RemoteImage"
COMMAND = "command:local:Command"
REMOTE = "command:remote:Command"
COMPONENT = "gpu-tenancy:index:WorkerNode"
SECRETS = {
    join_script.ENDPOINT_ENV: ENDPOINT,
    join_script.TOKEN_ENV: TOKEN,
    join_script.DISCOVERY_HASH_ENV: CA_HASH,
    "TENANT_KUBECONFIG": KUBECONFIG,
}


def _worker_program(workers=("worker-0",), *, with_management=True):
    """`workers`: names (local containers) or worker config dicts (e.g. with `ssh`)."""

    def program():
        management = command.local.Command("management", create="kind create cluster") if with_management else None
        for entry in workers:
            worker = config.Worker.model_validate(entry if isinstance(entry, dict) else {"name": entry})
            node = WorkerNode(
                f"tenant-a-{worker.name}",
                WorkerNodeArgs(
                    tenant_name="tenant-a",
                    worker=worker,
                    kubernetes_version="v1.35.0",
                    endpoint=ENDPOINT,
                    join_token=TOKEN,
                    discovery_hash=CA_HASH,
                    tenant_kubeconfig=KUBECONFIG,
                    management_cluster=management,
                ),
            )
            # Something that needs the node, as the HAMi layer will.
            command.local.Command(f"uses-{worker.name}", create=node.node_name.apply(lambda n: f"echo {n}"))
            pulumi.export(f"{worker.name}_node_name", node.node_name)
            pulumi.export(f"{worker.name}_container_name", node.container_name)
            pulumi.export(f"{worker.name}_access", {"node": node.access.node_name, "ssh": node.access.is_ssh,
                                                    "container": node.access.container_name})

    return program


@pytest.fixture(scope="module")
def run():
    return run_program({}, program=_worker_program())


# --------------------------------------------------------------------------- #
# pure container description
# --------------------------------------------------------------------------- #


def test_node_container_spec_is_kinds_node_flags_as_data():
    spec = node_container_spec(tenant="tenant-a", worker="worker-0", kubernetes_version="v1.35.0", stack="dev")

    assert spec.name == spec.hostname == "tenant-a-worker-0"
    assert spec.image == "kindest/node:v1.35.0"
    assert spec.network == "kind"
    assert spec.privileged and spec.tty and not spec.init
    assert spec.security_opts == ("seccomp=unconfined", "apparmor=unconfined")
    assert spec.tmpfs == {"/tmp": "", "/run": ""}
    assert spec.anonymous_volumes == ("/var",)
    assert spec.read_only_binds == ("/lib/modules",)
    assert spec.cgroupns_mode == "private"
    assert (spec.restart, spec.max_retry_count) == ("on-failure", 1)
    assert spec.labels == {LABEL_STACK: "dev", LABEL_TENANT: "tenant-a", LABEL_WORKER: "worker-0", LABEL_ROLE: "worker"}


def test_worker_image_tag_follows_the_tenant_version():
    assert kind_node_image("v1.36.2") == "kindest/node:v1.36.2"
    spec = node_container_spec(tenant="t", worker="w", kubernetes_version="v1.36.2", network="other", stack="s")
    assert spec.image == "kindest/node:v1.36.2" and spec.network == "other"


# --------------------------------------------------------------------------- #
# registered resources
# --------------------------------------------------------------------------- #


def test_component_parents_its_resources(run):
    component = run.named("tenant-a-worker-0", COMPONENT)
    children = {(r.type, r.name) for r in run.children(component)}
    assert children == {
        (IMAGE, "tenant-a-worker-0-image"),
        (CONTAINER, "tenant-a-worker-0-container"),
        (COMMAND, "tenant-a-worker-0-join"),
    }


def test_image_is_kept_locally(run):
    image = run.named("tenant-a-worker-0-image", IMAGE)
    assert image.inputs["name"] == "kindest/node:v1.35.0"
    assert image.inputs["keepLocally"] is True


def test_container_runs_like_a_kind_node(run):
    container = run.named("tenant-a-worker-0-container", CONTAINER)
    inputs = container.inputs

    assert inputs["name"] == inputs["hostname"] == "tenant-a-worker-0"
    assert inputs["privileged"] is True
    assert sorted(inputs["securityOpts"]) == ["apparmor=unconfined", "seccomp=unconfined"]
    assert inputs["tmpfs"] == {"/tmp": "", "/run": ""}
    assert inputs["volumes"] == [{"containerPath": "/var"}]
    assert inputs["mounts"] == [{"target": "/lib/modules", "source": "/lib/modules", "type": "bind", "readOnly": True}]
    assert inputs["cgroupnsMode"] == "private"
    assert inputs["tty"] is True
    assert inputs["init"] is False
    assert inputs["networksAdvanced"] == [{"name": "kind"}]
    assert inputs["restart"] == "on-failure"
    assert inputs["maxRetryCount"] == 1
    labels = {label["label"]: label["value"] for label in inputs["labels"]}
    assert labels == {LABEL_STACK: "dev", LABEL_TENANT: "tenant-a", LABEL_WORKER: "worker-0", LABEL_ROLE: "worker"}
    # The container's name is fixed: the old one must be deleted before a replacement is created.
    assert container.delete_before_replace


def test_container_uses_the_pulled_image_id(run):
    container = run.named("tenant-a-worker-0-container", CONTAINER)
    image = run.named("tenant-a-worker-0-image", IMAGE)
    assert container.inputs["image"].startswith("sha256:")
    assert image.urn in container.property_dependencies["image"]


def test_container_waits_explicitly_for_the_management_cluster(run):
    container = run.named("tenant-a-worker-0-container", CONTAINER)
    management = run.named("management", COMMAND)
    assert management.urn in container.dependencies
    assert not run.depends_on(management, container)


# --------------------------------------------------------------------------- #
# join command
# --------------------------------------------------------------------------- #


def test_join_runs_the_script_in_the_container_with_secrets_only_in_the_environment(run):
    join = run.named("tenant-a-worker-0-join", COMMAND)
    inputs = join.inputs
    create, delete = join_scripts("tenant-a-worker-0", "v1.35.0", over_ssh=False)

    assert inputs["create"] == docker_exec_script("tenant-a-worker-0", create.script, join_script.JOIN_ENV_NAMES)
    assert inputs["delete"] == docker_exec_script_if_present(
        "tenant-a-worker-0", delete.script, ["TENANT_KUBECONFIG"], delete.gone_hint
    )
    assert "stdin" not in inputs
    # The program passed token and kubeconfig in plain: the component itself marks them secret.
    assert join.is_secret("environment")
    assert inputs["environment"] == SECRETS
    secret = TOKEN.split(".")[1]
    for key in ("create", "delete"):
        assert secret not in inputs[key]
        assert "token: s" not in inputs[key]
        assert "mock-token-tenant-a" not in inputs[key]
        assert not join.is_secret(key)


def test_join_scripts_differ_between_container_and_ssh_only_in_kubeadms_ignored_checks():
    container_join, container_leave = join_scripts("n", "v1.35.0", over_ssh=False)
    ssh_join, ssh_leave = join_scripts("n", "v1.35.0", over_ssh=True)
    assert container_join.script == join_script.join_script("n", "v1.35.0", join_script.IGNORED_PREFLIGHT_ERRORS)
    assert ssh_join.script == join_script.join_script("n", "v1.35.0", ())
    assert "ignorePreflightErrors" in container_join.script and "ignorePreflightErrors" not in ssh_join.script
    assert container_leave == ssh_leave
    assert container_join.secrets == ssh_join.secrets == join_script.JOIN_ENV_NAMES
    assert container_leave.secrets == ("TENANT_KUBECONFIG",)


def test_join_output_is_secret_and_never_logged(run):
    join = run.named("tenant-a-worker-0-join", COMMAND)
    assert join.inputs["logging"] == "none"
    assert join.additional_secret_outputs == ["stdout", "stderr"]


def test_join_reruns_when_the_container_or_the_control_plane_is_replaced(run):
    join = run.named("tenant-a-worker-0-join", COMMAND)
    container = run.named("tenant-a-worker-0-container", CONTAINER)
    # Not the token: a rotated token needs no rejoin.
    assert join.inputs["triggers"] == ["tenant-a-worker-0-container-id", ENDPOINT, CA_HASH]
    assert container.urn in join.property_dependencies["triggers"]
    assert container.urn in join.dependencies
    # Replacing the join removes the old Node first; the new join registers the same name.
    assert join.delete_before_replace


def test_delete_removes_the_node_from_the_tenant_and_tolerates_a_missing_container(run):
    delete = run.named("tenant-a-worker-0-join", COMMAND).inputs["delete"]
    assert 'kubectl delete node "$node" --ignore-not-found' in delete
    assert "node=tenant-a-worker-0" in delete
    assert "docker container inspect" in delete and "nothing to undo" in delete
    assert "docker exec -i -e TENANT_KUBECONFIG tenant-a-worker-0 bash -s" in delete
    # The leave needs no token: it is not forwarded.
    assert join_script.TOKEN_ENV not in delete


# --------------------------------------------------------------------------- #
# outputs and parallelism
# --------------------------------------------------------------------------- #


def test_node_name_resolves_after_the_join(run):
    assert run.outputs["worker-0_node_name"].value == "tenant-a-worker-0"
    assert not run.outputs["worker-0_node_name"].secret
    assert run.outputs["worker-0_container_name"].value == "tenant-a-worker-0"
    consumer = run.named("uses-worker-0", COMMAND)
    assert run.depends_on(consumer, run.named("tenant-a-worker-0-join", COMMAND))


def test_workers_are_independent_of_each_other():
    run = run_program({}, program=_worker_program(workers=("worker-0", "worker-1")))
    first = run.named("tenant-a-worker-0-join", COMMAND)
    second = run.named("tenant-a-worker-1-join", COMMAND)
    assert not run.depends_on(first, run.named("tenant-a-worker-1", COMPONENT))
    assert not run.depends_on(second, run.named("tenant-a-worker-0", COMPONENT))
    names = {r.inputs["name"] for r in run.of_type(CONTAINER)}
    assert names == {"tenant-a-worker-0", "tenant-a-worker-1"}


def test_a_container_worker_needs_the_management_cluster():
    with pytest.raises(Exception, match="management_cluster is required"):
        run_program({}, program=_worker_program(with_management=False))


# --------------------------------------------------------------------------- #
# a real machine joined over SSH
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def ssh_run():
    return run_program({}, program=_worker_program(workers=(ssh_worker_config("gpu-1", user="ops"),)))


def test_ssh_worker_has_no_docker_resources(ssh_run):
    assert ssh_run.of_type(CONTAINER) == [] and ssh_run.of_type(IMAGE) == []
    component = ssh_run.named("tenant-a-gpu-1", COMPONENT)
    assert {(r.type, r.name) for r in ssh_run.children(component)} == {(REMOTE, "tenant-a-gpu-1-join")}
    assert ssh_run.outputs["gpu-1_container_name"].value is None
    assert ssh_run.outputs["gpu-1_access"].value == {"node": "tenant-a-gpu-1", "ssh": True, "container": None}


def test_ssh_join_connects_with_a_secret_private_key(ssh_run):
    join = ssh_run.named("tenant-a-gpu-1-join", REMOTE)
    connection = join.inputs["connection"]
    assert (connection["host"], connection["user"], connection["port"]) == (SSH_HOST, "ops", 2222)
    assert connection["privateKey"] == PRIVATE_KEY
    assert join.is_secret("connection")


def test_ssh_join_sends_scripts_and_secrets_on_a_secret_stdin_and_only_the_action_on_the_command_line(ssh_run):
    join = ssh_run.named("tenant-a-gpu-1-join", REMOTE)
    inputs = join.inputs
    create, delete = join_scripts("tenant-a-gpu-1", "v1.35.0", over_ssh=True)

    assert inputs["create"] == ssh_command("create", "ops") == "sudo -n env GPU_TENANCY_ACTION=create bash -s"
    assert inputs["delete"] == ssh_command("delete", "ops") == "sudo -n env GPU_TENANCY_ACTION=delete bash -s"
    assert inputs["stdin"] == node_program({"create": create, "delete": delete}, SECRETS)
    assert join.is_secret("stdin")
    assert "environment" not in inputs
    for key in ("create", "delete"):
        assert not join.is_secret(key)
        for secret in (TOKEN.split(".")[1], "mock-token-tenant-a", PRIVATE_KEY_BODY, CA_HASH, ENDPOINT):
            assert secret not in inputs[key]


def test_ssh_join_output_is_secret_and_never_logged(ssh_run):
    join = ssh_run.named("tenant-a-gpu-1-join", REMOTE)
    assert join.inputs["logging"] == "none"
    assert {"stdout", "stderr"} <= set(join.additional_secret_outputs)
    assert join.inputs["addPreviousOutputInEnv"] is False


def test_ssh_join_reruns_for_another_host_or_a_new_control_plane(ssh_run):
    join = ssh_run.named("tenant-a-gpu-1-join", REMOTE)
    assert join.inputs["triggers"] == [SSH_HOST, ENDPOINT, CA_HASH]
    assert join.delete_before_replace


def test_ssh_node_name_resolves_after_the_join(ssh_run):
    assert ssh_run.outputs["gpu-1_node_name"].value == "tenant-a-gpu-1"
    assert ssh_run.depends_on(ssh_run.named("uses-gpu-1", COMMAND), ssh_run.named("tenant-a-gpu-1-join", REMOTE))


def test_ssh_worker_needs_no_management_cluster():
    run = run_program({}, program=_worker_program(workers=(ssh_worker_config("gpu-1"),), with_management=False))
    assert run.named("tenant-a-gpu-1-join", REMOTE)


def test_a_tenant_mixes_container_and_ssh_workers():
    run = run_program({}, program=_worker_program(workers=("worker-0", ssh_worker_config("gpu-1", user="root"))))

    [container] = run.of_type(CONTAINER)
    assert container.inputs["name"] == "tenant-a-worker-0"
    local_join = run.named("tenant-a-worker-0-join", COMMAND)
    remote_join = run.named("tenant-a-gpu-1-join", REMOTE)
    assert local_join.inputs["create"].startswith("docker exec -i -e WORKER_JOIN_ENDPOINT")
    assert remote_join.inputs["create"] == "env GPU_TENANCY_ACTION=create bash -s"
    assert run.outputs["worker-0_access"].value == {
        "node": "tenant-a-worker-0", "ssh": False, "container": "tenant-a-worker-0",
    }
    assert run.outputs["gpu-1_access"].value["ssh"] is True
    # Still independent of each other.
    assert not run.depends_on(remote_join, run.named("tenant-a-worker-0", COMPONENT))
    assert not run.depends_on(local_join, run.named("tenant-a-gpu-1", COMPONENT))


def test_worker_access_is_the_configured_way_in():
    run = run_program({}, program=_worker_program())
    assert run.outputs["worker-0_access"].value == {
        "node": "tenant-a-worker-0", "ssh": False, "container": "tenant-a-worker-0",
    }
    assert NodeAccess(node_name="x", container_name="x").where == "container x"
