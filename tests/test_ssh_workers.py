"""WorkerNode wired into HamiMockGpu the way __main__ does it, for a tenant mixing a container and an SSH machine."""

from __future__ import annotations

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import pytest

from components.hami import GpuNode, HamiMockGpu, HamiMockGpuArgs
from components.worker_node import WorkerNode, WorkerNodeArgs
from config import SmokeTest, Tenant, Versions
from tests.fixtures import kubeconfig_yaml
from tests.ssh_worker import PRIVATE_KEY_BODY, ssh_worker_config
from tools.mockrun import run_program

ENDPOINT = "10.20.255.200:6443"
TOKEN = "abcdef.0123456789abcdef"
CA_HASH = "sha256:" + "cd" * 32
KUBECONFIG = kubeconfig_yaml(f"https://{ENDPOINT}", "tenant-a")
CARD = {"uuid": "GPU-L4-0", "model": "NVIDIA-L4", "memoryMiB": 24000}
TENANT = {
    "name": "tenant-a",
    "workers": [ssh_worker_config("gpu-1", user="ops", gpus=[CARD]), {"name": "worker-0", "gpus": [CARD]}],
}


def program():
    tenant = Tenant.model_validate(TENANT)
    management = command.local.Command("management", create="kind create cluster")
    provider = k8s.Provider("tenant-a-provider", kubeconfig=pulumi.Output.secret(KUBECONFIG))
    workers = [
        WorkerNode(
            f"tenant-a-{worker.name}",
            WorkerNodeArgs(
                tenant_name=tenant.name,
                worker=worker,
                kubernetes_version=tenant.kubernetes_version,
                endpoint=ENDPOINT,
                join_token=TOKEN,
                discovery_hash=CA_HASH,
                tenant_kubeconfig=KUBECONFIG,
                management_cluster=management,
            ),
        )
        for worker in tenant.workers
    ]
    gpus = HamiMockGpu(
        tenant.name,
        HamiMockGpuArgs(
            tenant=tenant,
            gpu_mode="mock",
            smoke_test=SmokeTest(),
            versions=Versions(),
            tenant_provider=provider,
            tenant_kubeconfig=KUBECONFIG,
            nodes=[
                GpuNode(worker=worker, node_name=node.node_name, access=node.access, joined=node.join)
                for worker, node in zip(tenant.workers, workers, strict=True)
            ],
            depends_on=[],
        ),
    )
    pulumi.export("nodes", gpus.node_names)
    pulumi.export("capacity", gpus.gpu_capacity)


@pytest.fixture(scope="module")
def run():
    return run_program({}, program=program)


def test_every_node_operation_of_the_ssh_worker_goes_over_ssh(run):
    remote = {r.name for r in run.of_type("command:remote:Command")}
    assert remote == {"tenant-a-gpu-1-join", "tenant-a-konnectivity-agent-ready", "tenant-a-gpu-1-gpu-capacity"}
    local = {r.name for r in run.of_type("command:local:Command")}
    assert local == {"management", "tenant-a-worker-0-join", "tenant-a-worker-0-gpu-capacity"}
    assert [c.inputs["name"] for c in run.of_type("docker:index/container:Container")] == ["tenant-a-worker-0"]


def test_the_ssh_nodes_gpu_operations_wait_for_its_join(run):
    join = run.named("tenant-a-gpu-1-join", "command:remote:Command")
    capacity = run.named("tenant-a-gpu-1-gpu-capacity", "command:remote:Command")
    assert run.depends_on(capacity, join)
    assert capacity.inputs["triggers"] == ["tenant-a-gpu-1-join-id"]
    register = run.named("tenant-a-gpu-1-gpu-register", "kubernetes:core/v1:NodePatch")
    assert register.inputs["metadata"]["name"] == "tenant-a-gpu-1"
    assert run.depends_on(register, join)
    tunnel = run.named("tenant-a-konnectivity-agent-ready")
    assert run.depends_on(tunnel, join) and run.depends_on(tunnel, run.named("tenant-a-worker-0-join"))


def test_no_secret_is_readable_in_any_command_line(run):
    for resource in run.of_type("command:remote:Command") + run.of_type("command:local:Command"):
        for key in ("create", "delete"):
            text = resource.inputs.get(key) or ""
            for secret in (TOKEN.split(".")[1], "mock-token-tenant-a", PRIVATE_KEY_BODY):
                assert secret not in text, (resource.name, key)
        if resource.type == "command:remote:Command":
            assert resource.is_secret("stdin") and resource.is_secret("connection")


def test_outputs_list_both_nodes(run):
    assert run.outputs["nodes"].value == ["tenant-a-gpu-1", "tenant-a-worker-0"]
    assert run.outputs["capacity"].value == {"tenant-a-gpu-1": 10, "tenant-a-worker-0": 10}
