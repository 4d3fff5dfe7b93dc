"""WorkerNode under Pulumi mocks: the node container as kind runs its nodes, and the secret-safe join."""

from __future__ import annotations

import pulumi
import pulumi_command as command
import pytest

import config
from components import join_script
from components.worker_node import (
    LABEL_ROLE,
    LABEL_STACK,
    LABEL_TENANT,
    LABEL_WORKER,
    WorkerNode,
    WorkerNodeArgs,
    kind_node_image,
    node_container_spec,
)
from tools.mockrun import kubeconfig_yaml, run_program

TOKEN = "abcdef.0123456789abcdef"
CA_HASH = "sha256:" + "ab" * 32
ENDPOINT = "172.18.255.200:6443"
KUBECONFIG = kubeconfig_yaml(f"https://{ENDPOINT}", "tenant-a")

CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/remoteImage:RemoteImage"
COMMAND = "command:local:Command"
COMPONENT = "gpu-tenancy:index:WorkerNode"


def _worker_program(workers=("worker-0",)):
    def program():
        management = command.local.Command("management", create="kind create cluster")
        for worker in workers:
            node = WorkerNode(
                f"tenant-a-{worker}",
                WorkerNodeArgs(
                    tenant_name="tenant-a",
                    worker=config.Worker(name=worker),
                    kubernetes_version="v1.35.0",
                    endpoint=ENDPOINT,
                    join_token=TOKEN,
                    discovery_hash=CA_HASH,
                    tenant_kubeconfig=KUBECONFIG,
                    management_cluster=management,
                ),
            )
            # Something that needs the node, as the HAMi layer will.
            command.local.Command(f"uses-{worker}", create=node.node_name.apply(lambda n: f"echo {n}"))
            pulumi.export(f"{worker}_node_name", node.node_name)
            pulumi.export(f"{worker}_container_name", node.container_name)

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

    assert inputs["create"] == join_script.join_command("tenant-a-worker-0")
    assert inputs["stdin"] == join_script.join_script("tenant-a-worker-0")
    assert inputs["delete"] == join_script.leave_command("tenant-a-worker-0", "tenant-a-worker-0")
    # The program passed token and kubeconfig in plain: the component itself marks them secret.
    assert join.is_secret("environment")
    assert inputs["environment"] == {
        join_script.ENDPOINT_ENV: ENDPOINT,
        join_script.TOKEN_ENV: TOKEN,
        join_script.DISCOVERY_HASH_ENV: CA_HASH,
        "TENANT_KUBECONFIG": KUBECONFIG,
    }
    secret = TOKEN.split(".")[1]
    for key in ("create", "stdin", "delete"):
        assert secret not in inputs[key]
        assert "token: s" not in inputs[key]
        assert not join.is_secret(key)


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
    assert "docker container inspect" in delete and "exit 0" in delete
    assert "docker exec -i -e TENANT_KUBECONFIG tenant-a-worker-0 bash -s" in delete


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
