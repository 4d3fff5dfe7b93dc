"""HamiMockGpu: HAMi values, simulated cards, the Konnectivity wait and the in-stack smoke test."""

import copy
import json

import kubernetes_validate
import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import pytest
import yaml

from components.gpu_register import (
    JOIN_ANNOTATION,
    REGISTER_ANNOTATION,
    apply_capacity_script,
    capacity_patch,
    capacity_removal_patch,
    gpu_capacity,
    konnectivity_wait_script,
    register_annotation,
    remove_capacity_script,
)
from components.hami import GpuNode, HamiMockGpu, HamiMockGpuArgs
from components.hami_smoke import (
    SmokeTestError,
    check_smoke_evidence,
    observed_pod,
    smoke_pod_manifest,
)
from components.hami_values import (
    EXTENDER_DEFAULT_ARGS,
    HAMI_CHART_REPO,
    WEBHOOK_EXEMPT_NAMESPACES,
    device_config_yaml,
    hami_values,
    nvidia_device_config,
)
from components.node_access import NodeScript, node_access, node_program
from config import GpuCard, SmokeTest, Tenant, Versions
from tests.chart_values import load_chart_values, unknown_value_keys
from tests.fixtures import kubeconfig_yaml
from tests.ssh_worker import PRIVATE_KEY_BODY, ssh_worker_config
from tools import mockrun as harness
from tools.mockrun import run_program

A100 = {"uuid": "GPU-MOCK-A0", "model": "NVIDIA-A100", "memoryMiB": 8192, "cores": 100, "slots": 10}


def card(**overrides) -> GpuCard:
    return GpuCard.model_validate({**A100, **overrides})


@pytest.fixture(scope="module")
def chart(vendor_dir):
    return load_chart_values(vendor_dir / "hami" / "values.yaml")


# --------------------------------------------------------------------------- #
# The register annotation and the status capacity
# --------------------------------------------------------------------------- #


def test_register_annotation_for_one_card_is_exactly_hamis_device_info():
    assert register_annotation([card()]) == (
        '[{"id":"GPU-MOCK-A0","index":0,"count":10,"devmem":8192,"devcore":100,'
        '"type":"NVIDIA-A100","numa":0,"mode":"hami-core","health":true}]'
    )


def test_register_annotation_lists_cards_in_order_with_their_own_sizes():
    cards = [
        card(uuid="GPU-MOCK-B0", model="NVIDIA-T4", memoryMiB=16384, cores=50, slots=4),
        card(uuid="GPU-MOCK-A0"),
        GpuCard.model_validate({"uuid": "GPU-MOCK-C0", "model": "NVIDIA-L4", "memoryMiB": 24576}),
    ]
    devices = json.loads(register_annotation(cards))
    assert [d["id"] for d in devices] == ["GPU-MOCK-B0", "GPU-MOCK-A0", "GPU-MOCK-C0"]
    assert [d["index"] for d in devices] == [0, 1, 2]
    assert devices[0] == {
        "id": "GPU-MOCK-B0", "index": 0, "count": 4, "devmem": 16384, "devcore": 50,
        "type": "NVIDIA-T4", "numa": 0, "mode": "hami-core", "health": True,
    }
    # Defaults: the whole card (100 % cores) shared by 10 containers.
    assert (devices[2]["count"], devices[2]["devcore"]) == (10, 100)
    for device in devices:
        assert list(device) == ["id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health"]
        assert all(type(device[k]) is int for k in ("index", "count", "devmem", "devcore", "numa"))
        assert device["health"] is True


def test_register_annotation_without_cards_is_an_empty_array():
    assert register_annotation([]) == "[]"


def test_capacity_is_cards_times_slots():
    assert gpu_capacity([card()]) == 10
    assert gpu_capacity([card(), card(uuid="GPU-MOCK-A1")]) == 20
    assert gpu_capacity([card(slots=3), card(uuid="GPU-MOCK-A1", slots=5)]) == 8
    assert gpu_capacity([]) == 0


def test_capacity_patch_advertises_capacity_and_allocatable_as_quantities():
    assert capacity_patch(20) == {
        "status": {"capacity": {"nvidia.com/gpu": "20"}, "allocatable": {"nvidia.com/gpu": "20"}}
    }
    with pytest.raises(ValueError, match="at least 1"):
        capacity_patch(0)


def test_capacity_removal_patch_nulls_both_entries():
    assert capacity_removal_patch() == {
        "status": {"capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}}
    }
    assert json.dumps(capacity_removal_patch(), separators=(",", ":")) == (
        '{"status":{"capacity":{"nvidia.com/gpu":null},"allocatable":{"nvidia.com/gpu":null}}}'
    )


# --------------------------------------------------------------------------- #
# HAMi chart values
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("mode", ["mock", "nvidia"])
def test_every_value_key_exists_in_the_vendored_chart(chart, mode):
    assert unknown_value_keys(hami_values(mode, "v1.35.0", Versions()), chart) == []


def test_a_misspelled_value_key_would_be_caught(chart):
    values = copy.deepcopy(hami_values("mock", "v1.35.0", Versions()))
    values["scheduler"]["admissionWebhook"]["failurepolicy"] = values["scheduler"]["admissionWebhook"].pop(
        "failurePolicy"
    )
    values["mockDevicePlugin"]["imageTag"] = "1.0.1"
    assert unknown_value_keys(values, chart) == [
        "scheduler.admissionWebhook.failurepolicy",
        "mockDevicePlugin.imageTag",
    ]


def test_scheduler_values_pin_kube_scheduler_and_make_the_webhook_fail_loudly():
    scheduler = hami_values("mock", "v1.36.2", Versions())["scheduler"]
    assert scheduler["kubeScheduler"]["image"] == {
        "registry": "registry.k8s.io", "repository": "kube-scheduler", "tag": "v1.36.2",
    }
    webhook = scheduler["admissionWebhook"]
    assert webhook["failurePolicy"] == "Fail"
    for namespace in ("kube-system", "tigera-operator", "calico-system", "calico-apiserver"):
        assert namespace in webhook["whitelistNamespaces"]
    # The smoke test and user workloads must still go through the webhook.
    assert "default" not in webhook["whitelistNamespaces"]
    assert all(isinstance(ns, str) for ns in webhook["whitelistNamespaces"])
    assert tuple(webhook["whitelistNamespaces"]) == WEBHOOK_EXEMPT_NAMESPACES


def test_node_lock_timeout_is_added_to_the_chart_default_extender_args(chart):
    args = hami_values("mock", "v1.35.0", Versions())["scheduler"]["extender"]["extraArgs"]
    assert list(EXTENDER_DEFAULT_ARGS) == chart["scheduler"]["extender"]["extraArgs"]
    assert args == [*chart["scheduler"]["extender"]["extraArgs"], "--node-lock-timeout=15s"]


def test_mock_mode_runs_the_mock_plugin_with_a_device_config_it_can_parse():
    values = hami_values("mock", "v1.35.0", Versions(mockDevicePlugin="1.0.1"))
    assert values["devicePlugin"] == {"enabled": False}
    assert values["mockDevicePlugin"] == {"enabled": True, "image": {"tag": "1.0.1"}}
    content = values["device-config"]["content"]
    assert content == device_config_yaml()
    parsed = yaml.safe_load(content)
    assert list(parsed) == ["nvidia"]
    assert "vnpus" not in content
    assert parsed == nvidia_device_config()


def test_device_config_keeps_the_charts_nvidia_names_and_defaults(chart):
    nvidia = nvidia_device_config()["nvidia"]
    assert nvidia["resourceCountName"] == chart["resourceName"] == "nvidia.com/gpu"
    assert nvidia["resourceMemoryName"] == chart["resourceMem"] == "nvidia.com/gpumem"
    assert nvidia["resourceMemoryPercentageName"] == chart["resourceMemPercentage"]
    assert nvidia["resourceCoreName"] == chart["resourceCores"] == "nvidia.com/gpucores"
    assert nvidia["resourcePriorityName"] == chart["resourcePriority"]
    assert nvidia["deviceSplitCount"] == chart["devicePlugin"]["deviceSplitCount"]
    assert nvidia["deviceMemoryScaling"] == chart["devicePlugin"]["deviceMemoryScaling"]
    assert nvidia["deviceCoreScaling"] == chart["devicePlugin"]["deviceCoreScaling"]
    assert nvidia["gpuCorePolicy"] == chart["devices"]["nvidia"]["gpuCorePolicy"]
    assert nvidia["libCudaLogLevel"] == chart["devices"]["nvidia"]["libCudaLogLevel"]
    assert nvidia["runtimeClassName"] == chart["devicePlugin"]["runtimeClassName"]


def test_nvidia_mode_runs_the_real_plugin_with_the_chart_device_config():
    values = hami_values("nvidia", "v1.35.0", Versions())
    assert values["devicePlugin"] == {"enabled": True}
    assert values["mockDevicePlugin"] == {"enabled": False}
    assert "device-config" not in values
    assert values["scheduler"]["admissionWebhook"]["failurePolicy"] == "Fail"


def test_unknown_gpu_mode_is_refused():
    with pytest.raises(ValueError, match="gpuMode"):
        hami_values("amd", "v1.35.0", Versions())


# --------------------------------------------------------------------------- #
# The smoke-test pod and its evidence
# --------------------------------------------------------------------------- #


def _pod_document(smoke=None):
    manifest = smoke_pod_manifest(smoke or SmokeTest(), "registry.k8s.io/pause:3.10.1")
    return {"apiVersion": "v1", "kind": "Pod", **manifest}


def test_smoke_pod_requests_a_fraction_of_a_gpu_like_a_user_would():
    pod = _pod_document(SmokeTest.model_validate({"gpus": 1, "memoryMiB": 3000, "cores": 30}))
    spec = pod["spec"]
    assert "schedulerName" not in spec
    assert "nodeName" not in spec
    (container,) = spec["containers"]
    assert container["resources"]["limits"] == {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30",
    }
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert pod["metadata"]["namespace"] == "default"


def test_smoke_pod_is_a_valid_kubernetes_pod():
    kubernetes_validate.validate(_pod_document(), "1.35.0", strict=True)
    broken = _pod_document()
    broken["spec"]["containers"][0]["resources"]["limit"] = broken["spec"]["containers"][0]["resources"].pop("limits")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.35.0", strict=True)


def _scheduled_pod(**changes):
    pod = {
        "metadata": {
            "name": "gpu-smoke-test",
            "namespace": "default",
            "annotations": {
                "hami.io/vgpu-node": "tenant-a-worker-0",
                "hami.io/vgpu-devices-allocated": "GPU-MOCK-A0,NVIDIA,3000,30:;",
            },
        },
        "spec": {"schedulerName": "hami-scheduler", "nodeName": "tenant-a-worker-0"},
    }
    for path, value in changes.items():
        section, key = path.split("__")
        if section == "annotations":
            target = pod["metadata"]["annotations"]
        else:
            target = pod[section]
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return pod


def test_evidence_of_a_pod_admitted_and_scheduled_by_hami():
    assert check_smoke_evidence(_scheduled_pod(), "tenant-a") == {
        "pod": "default/gpu-smoke-test",
        "node": "tenant-a-worker-0",
        "schedulerName": "hami-scheduler",
        "devicesAllocated": "GPU-MOCK-A0,NVIDIA,3000,30:;",
    }


def test_default_scheduler_means_the_webhook_or_the_tunnel_is_broken():
    with pytest.raises(SmokeTestError) as failure:
        check_smoke_evidence(_scheduled_pod(spec__schedulerName="default-scheduler"), "tenant-a", resource="urn:x")
    message = str(failure.value)
    assert "tenant tenant-a" in message and "default/gpu-smoke-test" in message
    assert "webhook" in message and "Konnectivity" in message
    assert "'default-scheduler'" in message
    assert "pulumi up --replace 'urn:x'" in message


@pytest.mark.parametrize("missing", ["hami.io/vgpu-node", "hami.io/vgpu-devices-allocated"])
def test_missing_hami_annotations_mean_the_scheduler_did_not_allocate(missing):
    pod = _scheduled_pod()
    del pod["metadata"]["annotations"][missing]
    with pytest.raises(SmokeTestError) as failure:
        check_smoke_evidence(pod, "tenant-a")
    message = str(failure.value)
    assert "did not allocate" in message and missing in message
    assert "hami.io/node-nvidia-register" in message and "nvidia.com/gpu capacity" in message
    assert "Konnectivity" not in message


def test_a_pod_bound_elsewhere_than_hami_allocated_is_refused():
    with pytest.raises(SmokeTestError, match="bound to node other-node"):
        check_smoke_evidence(_scheduled_pod(spec__nodeName="other-node"), "tenant-a")


def test_observed_pod_reads_the_sdks_snake_cased_output():
    metadata = {"name": "gpu-smoke-test", "namespace": "default", "annotations": {"hami.io/vgpu-node": "n"}}
    spec = {"scheduler_name": "hami-scheduler", "node_name": "n", "containers": []}
    assert observed_pod(metadata, spec) == {
        "metadata": {"name": "gpu-smoke-test", "namespace": "default", "annotations": {"hami.io/vgpu-node": "n"}},
        "spec": {"schedulerName": "hami-scheduler", "nodeName": "n"},
    }
    assert observed_pod(metadata, {"schedulerName": "x"})["spec"]["schedulerName"] == "x"
    assert observed_pod(None, None)["spec"] == {"schedulerName": None, "nodeName": None}


# --------------------------------------------------------------------------- #
# The component under mocks
# --------------------------------------------------------------------------- #

TENANT = {
    "name": "tenant-a",
    "kubernetesVersion": "v1.35.0",
    "workers": [
        {"name": "worker-0", "gpus": [A100]},
        {"name": "worker-1", "gpus": [
            {**A100, "uuid": "GPU-MOCK-A1", "slots": 4},
            {**A100, "uuid": "GPU-MOCK-A2", "slots": 4},
        ]},
        {"name": "cpu-0"},
    ],
}
ADMIN_KUBECONFIG = kubeconfig_yaml("https://172.18.255.200:6443", "tenant-a")


def _program(gpu_mode="mock", smoke=None, tenant_config=None):
    def program():
        tenant = Tenant.model_validate(tenant_config or TENANT)
        provider = k8s.Provider("tenant-a-provider", kubeconfig=pulumi.Output.secret(ADMIN_KUBECONFIG))
        cni = command.local.Command("tenant-a-calico", create="true")
        nodes = []
        for worker in tenant.workers:
            node = f"{tenant.name}-{worker.name}"
            join = command.local.Command(f"{node}-join", create="join")
            nodes.append(GpuNode(worker=worker, node_name=join.stdout.apply(lambda _, n=node: n),
                                 access=node_access(tenant.name, worker), joined=join))
        gpu = HamiMockGpu("tenant-a", HamiMockGpuArgs(
            tenant=tenant,
            gpu_mode=gpu_mode,
            smoke_test=smoke or SmokeTest(),
            versions=Versions(),
            tenant_provider=provider,
            tenant_kubeconfig=ADMIN_KUBECONFIG,
            nodes=nodes,
            depends_on=[cni],
        ))
        pulumi.export("node_names", gpu.node_names)
        pulumi.export("gpu_capacity", gpu.gpu_capacity)
        pulumi.export("smoke_test", gpu.smoke_test)
        pulumi.export("release_name", gpu.release.name)
    return program


@pytest.fixture(scope="module")
def mock_run():
    return run_program({}, program=_program())


def test_component_type_and_children(mock_run):
    (component,) = mock_run.of_type("gpu-tenancy:index:HamiMockGpu")
    children = {r.name for r in mock_run.children(component)}
    assert children == {
        "tenant-a-konnectivity-agent-ready",
        "tenant-a-hami",
        "tenant-a-worker-0-gpu-register",
        "tenant-a-worker-0-gpu-capacity",
        "tenant-a-worker-1-gpu-register",
        "tenant-a-worker-1-gpu-capacity",
        "tenant-a-gpu-smoke-test",
    }
    provider = mock_run.named("tenant-a-provider")
    for child in mock_run.children(component):
        if child.type.startswith("kubernetes:"):
            assert child.provider.startswith(provider.urn)


def test_release_is_hami_in_kube_system_from_the_pinned_chart(mock_run):
    release = mock_run.named("tenant-a-hami", "kubernetes:helm.sh/v3:Release")
    inputs = release.inputs
    assert (inputs["name"], inputs["namespace"], inputs["chart"]) == ("hami", "kube-system", "hami")
    assert inputs["version"] == Versions().hami == "2.10.0"
    assert inputs["repositoryOpts"] == {"repo": HAMI_CHART_REPO}
    assert inputs["values"] == hami_values("mock", "v1.35.0", Versions())
    assert mock_run.outputs["release_name"].value == "hami"


def test_order_joins_and_cni_then_tunnel_then_hami(mock_run):
    tunnel = mock_run.named("tenant-a-konnectivity-agent-ready")
    release = mock_run.named("tenant-a-hami")
    cni = mock_run.named("tenant-a-calico")
    joins = [mock_run.named(f"tenant-a-{w}-join") for w in ("worker-0", "worker-1", "cpu-0")]
    assert mock_run.depends_on(release, tunnel)
    assert mock_run.depends_on(tunnel, cni)
    assert all(mock_run.depends_on(tunnel, join) for join in joins)
    assert not mock_run.depends_on(tunnel, release)


def test_tunnel_wait_runs_in_a_worker_and_waits_for_every_node(mock_run):
    create = mock_run.named("tenant-a-konnectivity-agent-ready").inputs["create"]
    assert create.startswith("docker exec -i -e TENANT_KUBECONFIG tenant-a-worker-0 bash -s <<'")
    assert "expected=3" in create
    assert "rollout status daemonset/konnectivity-agent" in create
    assert "mock-token-tenant-a" not in create


def test_node_patches_annotate_each_gpu_worker_after_its_join(mock_run):
    for worker, cards in (("worker-0", 1), ("worker-1", 2)):
        patch = mock_run.named(f"tenant-a-{worker}-gpu-register", "kubernetes:core/v1:NodePatch")
        metadata = patch.inputs["metadata"]
        assert metadata["name"] == f"tenant-a-{worker}"
        devices = json.loads(metadata["annotations"][REGISTER_ANNOTATION])
        assert len(devices) == cards
        assert mock_run.depends_on(patch, mock_run.named(f"tenant-a-{worker}-join"))
        assert not mock_run.depends_on(patch, mock_run.named("tenant-a-hami"))
    names = {r.name for r in mock_run.resources}
    assert "tenant-a-cpu-0-gpu-register" not in names and "tenant-a-cpu-0-gpu-capacity" not in names


def test_capacity_commands_patch_status_create_and_delete(mock_run):
    command_ = mock_run.named("tenant-a-worker-1-gpu-capacity", "command:local:Command")
    create, delete = command_.inputs["create"], command_.inputs["delete"]
    assert "docker exec -i -e TENANT_KUBECONFIG tenant-a-worker-1 bash -s" in create
    assert "kubectl patch node tenant-a-worker-1 --subresource=status --type=merge" in create
    assert json.dumps(capacity_patch(8), separators=(",", ":")) in create
    assert json.dumps(capacity_removal_patch(), separators=(",", ":")) in delete
    assert "docker container inspect" in delete
    assert mock_run.depends_on(command_, mock_run.named("tenant-a-worker-1-join"))
    assert "update" not in command_.inputs


def test_a_rejoined_worker_gets_its_gpus_and_a_new_proof(mock_run):
    # A rejoin (new join id) leaves a fresh Node without our patches and drops the pod bound to the old one.
    join_id = "tenant-a-worker-1-join-id"  # the id the mocks give that join Command (`<name>-id`)
    capacity = mock_run.named("tenant-a-worker-1-gpu-capacity", "command:local:Command")
    assert capacity.inputs["triggers"] == [join_id]
    assert capacity.delete_before_replace
    register = mock_run.named("tenant-a-worker-1-gpu-register")
    assert register.inputs["metadata"]["annotations"][JOIN_ANNOTATION] == join_id
    pod = mock_run.named("tenant-a-gpu-smoke-test", "kubernetes:core/v1:Pod")
    assert join_id in pod.inputs["metadata"]["annotations"][JOIN_ANNOTATION].split(",")
    assert pod.replace_on_changes == [f"metadata.annotations.{JOIN_ANNOTATION}"]


def test_smoke_pod_waits_for_hami_and_every_node_patch(mock_run):
    pod = mock_run.named("tenant-a-gpu-smoke-test", "kubernetes:core/v1:Pod")
    assert mock_run.depends_on(pod, mock_run.named("tenant-a-hami"))
    for worker in ("worker-0", "worker-1"):
        assert mock_run.depends_on(pod, mock_run.named(f"tenant-a-{worker}-gpu-register"))
        assert mock_run.depends_on(pod, mock_run.named(f"tenant-a-{worker}-gpu-capacity"))
    assert pod.delete_before_replace
    assert pod.inputs["spec"] == smoke_pod_manifest(SmokeTest(), "registry.k8s.io/pause:3.10.1")["spec"]
    assert "schedulerName" not in pod.inputs["spec"] and "nodeName" not in pod.inputs["spec"]


def test_kubeconfig_is_a_secret_on_every_command_that_carries_it(mock_run):
    (component,) = mock_run.of_type("gpu-tenancy:index:HamiMockGpu")
    commands = [r for r in mock_run.children(component) if r.type == "command:local:Command"]
    assert len(commands) == 3
    for resource in commands:
        assert resource.inputs["environment"] == {"TENANT_KUBECONFIG": ADMIN_KUBECONFIG}
        assert resource.is_secret("environment")
        assert resource.inputs["logging"] == "none"
        assert set(resource.additional_secret_outputs) >= {"stdout", "stderr"}
        for key in ("create", "delete"):
            assert "mock-token-tenant-a" not in (resource.inputs.get(key) or "")


def test_outputs_node_names_capacity_and_evidence(mock_run):
    outputs = mock_run.outputs
    assert outputs["node_names"].value == ["tenant-a-worker-0", "tenant-a-worker-1", "tenant-a-cpu-0"]
    assert outputs["gpu_capacity"].value == {"tenant-a-worker-0": 10, "tenant-a-worker-1": 8, "tenant-a-cpu-0": 0}
    assert outputs["smoke_test"].value == {
        "pod": "default/gpu-smoke-test",
        "node": "tenant-node",
        "schedulerName": "hami-scheduler",
        "devicesAllocated": "GPU-MOCK-A0,NVIDIA,3000,30:;",
    }
    assert not outputs["smoke_test"].secret


def test_nvidia_mode_labels_gpu_nodes_and_writes_no_simulated_cards():
    run = run_program({}, program=_program(gpu_mode="nvidia"))
    names = {r.name for r in run.resources}
    assert not any(name.endswith(("-gpu-register", "-gpu-capacity")) for name in names)
    for worker in ("worker-0", "worker-1"):
        patch = run.named(f"tenant-a-{worker}-gpu-label", "kubernetes:core/v1:NodePatch")
        assert patch.inputs["metadata"]["labels"] == {"gpu": "on"}
        assert "annotations" not in patch.inputs["metadata"]
        assert run.depends_on(patch, run.named(f"tenant-a-{worker}-join"))
        assert run.depends_on(run.named("tenant-a-gpu-smoke-test"), patch)
    assert "tenant-a-cpu-0-gpu-label" not in names
    values = run.named("tenant-a-hami").inputs["values"]
    assert values["mockDevicePlugin"] == {"enabled": False}
    assert values["devicePlugin"] == {"enabled": True}
    assert "device-config" not in values


def test_smoke_test_can_be_switched_off():
    run = run_program({}, program=_program(smoke=SmokeTest(enabled=False)))
    assert run.of_type("kubernetes:core/v1:Pod") == []
    assert run.outputs["smoke_test"].value is None


def test_a_pod_left_on_default_scheduler_fails_the_deployment(monkeypatch):
    def unmutated_pod(args):
        return {"spec": {**args.inputs["spec"], "schedulerName": "default-scheduler", "nodeName": "n"},
                "metadata": args.inputs["metadata"]}

    monkeypatch.setitem(harness.OUTPUT_FACTORIES, "kubernetes:core/v1:Pod", unmutated_pod)
    with pytest.raises(Exception, match="Konnectivity") as failure:
        run_program({}, program=_program())
    assert "tenant-a-gpu-smoke-test" in str(failure.value)


def test_no_nodes_is_refused():
    def program():
        HamiMockGpu("tenant-a", HamiMockGpuArgs(
            tenant=Tenant.model_validate(TENANT), gpu_mode="mock", smoke_test=SmokeTest(), versions=Versions(),
            tenant_provider=k8s.Provider("p"), tenant_kubeconfig="x", nodes=[], depends_on=[],
        ))

    with pytest.raises(Exception, match="at least one joined worker"):
        run_program({}, program=program)


# --------------------------------------------------------------------------- #
# Workers reached over SSH
# --------------------------------------------------------------------------- #

# worker-0 (first, so it runs the Konnectivity wait) and cpu-0 are real machines; worker-1 stays a container.
SSH_TENANT = {
    **TENANT,
    "workers": [
        ssh_worker_config("worker-0", user="ops", gpus=[A100]),
        TENANT["workers"][1],
        ssh_worker_config("cpu-0", user="root"),
    ],
}
KUBECONFIG_SECRET = {"TENANT_KUBECONFIG": ADMIN_KUBECONFIG}
USES_KUBECONFIG = ("TENANT_KUBECONFIG",)


@pytest.fixture(scope="module")
def ssh_run():
    return run_program({}, program=_program(tenant_config=SSH_TENANT))


def test_konnectivity_wait_runs_on_the_first_node_over_ssh(ssh_run):
    tunnel = ssh_run.named("tenant-a-konnectivity-agent-ready", "command:remote:Command")
    inputs = tunnel.inputs
    assert inputs["connection"]["user"] == "ops"
    assert inputs["create"] == "sudo -n env GPU_TENANCY_ACTION=create bash -s"
    assert "delete" not in inputs
    assert inputs["stdin"] == node_program(
        {"create": NodeScript(konnectivity_wait_script(3), USES_KUBECONFIG)}, KUBECONFIG_SECRET
    )
    assert tunnel.is_secret("stdin") and tunnel.is_secret("connection")
    assert inputs["logging"] == "none"
    assert {"stdout", "stderr"} <= set(tunnel.additional_secret_outputs)
    # Same order as with containers: every join and the CNI, then the tunnel, then HAMi.
    assert all(ssh_run.depends_on(tunnel, ssh_run.named(f"tenant-a-{w}-join")) for w in ("worker-0", "worker-1"))
    assert ssh_run.depends_on(tunnel, ssh_run.named("tenant-a-calico"))
    assert ssh_run.depends_on(ssh_run.named("tenant-a-hami"), tunnel)


def test_capacity_of_an_ssh_node_is_patched_by_a_remote_command_with_a_secret_stdin(ssh_run):
    capacity = ssh_run.named("tenant-a-worker-0-gpu-capacity", "command:remote:Command")
    inputs = capacity.inputs
    assert inputs["create"] == "sudo -n env GPU_TENANCY_ACTION=create bash -s"
    assert inputs["delete"] == "sudo -n env GPU_TENANCY_ACTION=delete bash -s"
    assert inputs["stdin"] == node_program(
        {
            "create": NodeScript(apply_capacity_script("tenant-a-worker-0", 10), USES_KUBECONFIG),
            "delete": NodeScript(remove_capacity_script("tenant-a-worker-0"), USES_KUBECONFIG),
        },
        KUBECONFIG_SECRET,
    )
    assert capacity.is_secret("stdin")
    assert "environment" not in inputs
    for key in ("create", "delete"):
        assert "mock-token-tenant-a" not in inputs[key] and PRIVATE_KEY_BODY not in inputs[key]
    assert inputs["triggers"] == ["tenant-a-worker-0-join-id"]
    assert capacity.delete_before_replace
    assert ssh_run.depends_on(capacity, ssh_run.named("tenant-a-worker-0-join"))
    assert ssh_run.depends_on(ssh_run.named("tenant-a-gpu-smoke-test"), capacity)


def test_container_and_ssh_nodes_mix_in_one_tenant(ssh_run):
    local = ssh_run.named("tenant-a-worker-1-gpu-capacity", "command:local:Command")
    assert "docker exec -i -e TENANT_KUBECONFIG tenant-a-worker-1 bash -s" in local.inputs["create"]
    assert local.is_secret("environment")
    # The register annotation is a NodePatch through the tenant provider, whatever the node is.
    register = ssh_run.named("tenant-a-worker-0-gpu-register", "kubernetes:core/v1:NodePatch")
    assert len(json.loads(register.inputs["metadata"]["annotations"][REGISTER_ANNOTATION])) == 1
    names = {r.name for r in ssh_run.resources}
    assert "tenant-a-cpu-0-gpu-capacity" not in names
    assert ssh_run.outputs["gpu_capacity"].value == {
        "tenant-a-worker-0": 10, "tenant-a-worker-1": 8, "tenant-a-cpu-0": 0,
    }
