"""TenantGpus: the simulated cards HAMi reads, and the component in the lifecycle simulator (the Konnectivity
gate, per-node registration, the smoke pod and its evidence). The host-side providers it uses (GpuCapacity,
KonnectivityReady) are tested call by call in tests/test_host_operations.py."""

from __future__ import annotations

import copy
import json
import re
from types import SimpleNamespace

import pytest
import yaml

from components.gpu.cards import REGISTER_ANNOTATION, device_type, gpu_capacity, register_annotation
from components.gpu.hami import PROOF_ANNOTATION
from components.gpu.smoke import planned_evidence
from components.gpu.values import HAMI_POD_POLICY, HAMI_TOKEN_POLICY, hami_pod_policy, hami_token_policy
from components.kube import ApiError
from components.tenant.spec import NODE_LABEL_POLICY, SYSTEM_NODE_LABEL, node_label_policy
from config import GpuCard, SmokeTest, Tenant
from config.models import SMOKE_TEST_NAMESPACE
from naming import JOIN_ANNOTATION, TENANT_SYSTEM_NAMESPACES, node_name
from tests.support import mockrun
from tests.support.lifecycle_support import kind_lab, running_adopt_lab, running_kind_lab
from tests.support.mockrun import ProgramRun, reference_stack, registration, run_program
from tests.support.sim import Lifecycle, paths, pki, plain, systems
from tests.support.sim.lab import adopt, lab_world
from tests.test_config_infrastructure import prod_example_with_secrets

A100 = {"uuid": "GPU-MOCK-A0", "model": "NVIDIA-A100", "memoryMiB": 8192, "cores": 100, "slots": 10}


def card(**overrides) -> GpuCard:
    return GpuCard.model_validate({**A100, **overrides})


# --------------------------------------------------------------------------- #
# The card annotation, against HAMi's own format
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def hami_readme(vendor_dir) -> str:
    """The vendored HAMi README: DeviceInfo JSON keys and types, written out from pkg/device/devices.go."""
    return (vendor_dir / "hami" / "README.txt").read_text()


def device_info_fields(readme: str) -> dict[str, str]:
    """{json key: Go type} of HAMi's `DeviceInfo` (pkg/device/devices.go:127-144)."""
    block = readme.split("type DeviceInfo struct`, JSON keys", 1)[1].split("Register annotation format:", 1)[0]
    return dict(re.findall(r"\b(\w+) (string|uint|int32|int|bool)\b", block))


def marshalled_keys(readme: str) -> set[str]:
    """The keys HAMi's MarshalNodeDevices writes into the annotation (devices.go:422-443)."""
    kept = re.search(r"keeps only (.*?)\(no ", readme, re.DOTALL)
    assert kept, "the vendored README no longer lists MarshalNodeDevices' keys"
    return set(re.split(r"[,\s]+", kept.group(1).strip()))


def test_register_annotation_uses_only_hamis_device_info_keys_and_types(hami_readme):
    fields, keys = device_info_fields(hami_readme), marshalled_keys(hami_readme)
    assert {"id", "count", "devmem", "devcore", "type", "health"} <= keys <= set(fields) | {"migProfiles"}
    cards = [card(), card(uuid="GPU-MOCK-T0", model="Tesla-T4", memoryMiB=16384, cores=50, slots=4)]
    for device in json.loads(register_annotation(cards)):
        # An unknown key is ignored by json.Unmarshal and leaves an unusable card (pkg/device/devices.go).
        assert set(device) <= keys
        for key, value in device.items():
            go_type = fields[key]
            if go_type == "string":
                assert isinstance(value, str), key
            elif go_type == "bool":
                assert value is True, key  # unhealthy cards are never scheduled on
            else:
                assert type(value) is int and value >= 0, key
                if go_type == "int32":
                    assert value < 2**31, key


def test_register_annotation_of_one_card_is_a_healthy_hami_core_device():
    # A whole, non-MIG card as HAMi describes one (pkg/device/devices.go: "hami-core" is the default mode),
    # healthy (an unhealthy card is never scheduled on), on NUMA node 0.
    assert json.loads(register_annotation([card()])) == [{
        "id": "GPU-MOCK-A0", "index": 0, "count": 10, "devmem": 8192, "devcore": 100, "type": "NVIDIA-A100",
        "numa": 0, "mode": "hami-core", "health": True,
    }]


def test_register_annotation_lists_each_card_with_its_own_size_in_order():
    devices = json.loads(register_annotation([
        card(uuid="GPU-MOCK-B0", memoryMiB=16384, cores=50, slots=4),
        card(uuid="GPU-MOCK-A0"),
    ]))
    assert [(d["id"], d["index"], d["count"], d["devmem"], d["devcore"]) for d in devices] == [
        ("GPU-MOCK-B0", 0, 4, 16384, 50), ("GPU-MOCK-A0", 1, 10, 8192, 100),
    ]
    assert register_annotation([]) == "[]"


@pytest.mark.parametrize(("model", "expected"), [
    ("NVIDIA-A100", "NVIDIA-A100"), ("A100", "NVIDIA-A100"), ("Tesla-T4", "NVIDIA-Tesla-T4"),
])
def test_device_type_contains_what_hamis_scheduler_looks_for(hami_readme, model, expected):
    # pkg/scheduler/score.go getNodeResources keeps devices whose type contains the device type key
    # (case-insensitively); the real plugin prefixes other models with "NVIDIA-" (register.go:170-173).
    key = re.search(r'NvidiaGPUDevice\s*=\s*"(\w+)"', hami_readme).group(1)
    assert device_type(model) == expected
    assert key.lower() in device_type(model).lower()
    assert json.loads(register_annotation([card(model=model)]))[0]["type"] == expected


def test_capacity_counts_every_slot_of_every_card():
    assert gpu_capacity([card(slots=3), card(uuid="GPU-MOCK-A1", slots=5)]) == 8
    assert gpu_capacity([]) == 0


# --------------------------------------------------------------------------- #
# The component in the simulator: one tenant whose workers differ
# --------------------------------------------------------------------------- #

TENANT = "tenant-a"
# cpu-0 has no cards; small-0's card is smaller than the smoke request; worker-0 is the first the request fits
# on; worker-1's model lacks the NVIDIA prefix.
WORKERS = [
    {"name": "cpu-0"},
    {"name": "small-0", "gpus": [{**A100, "uuid": "GPU-MOCK-S0", "memoryMiB": 2048}]},
    {"name": "worker-0", "gpus": [A100]},
    {"name": "worker-1", "gpus": [{**A100, "uuid": "GPU-MOCK-A1", "model": "A100", "slots": 4},
                                  {**A100, "uuid": "GPU-MOCK-A2", "model": "A100", "slots": 3}]},
]
GPU_WORKERS = ("small-0", "worker-0", "worker-1")


def lab_config() -> dict:
    config = copy.deepcopy(reference_stack())
    config["tenants"] = [{**config["tenants"][0], "workers": copy.deepcopy(WORKERS)}]
    return config


@pytest.fixture(scope="module")
def lab():
    """A first `pulumi up` (its preview first), then a preview of the running stack."""
    sim = kind_lab(lab_config())
    sim.up()
    first_preview = sim.history[0]
    run = ProgramRun(resources=[registration(r) for r in sim.engine.last_operation.registered.values()], outputs={})
    return SimpleNamespace(run=run, first_preview=first_preview, preview=sim.preview(),
                           tenant=Tenant.model_validate(lab_config()["tenants"][0]),
                           smoke=SmokeTest.model_validate(lab_config()["smokeTest"]),
                           api=sim.world.tenant_api(TENANT), output=sim.output("tenants")[TENANT])


def registered(lab, worker: str):
    return lab.run.named(f"{node_name(TENANT, worker)}-registered")


def test_konnectivity_agents_gate_the_hami_release(lab):
    run = lab.run
    tunnel = run.named(f"{TENANT}-konnectivity-ready", "pulumi-python:dynamic/gpu-tenancy:KonnectivityReady")
    release = run.named(f"{TENANT}-hami", "kubernetes:helm.sh/v3:Release")
    # Workers joined -> CNI -> agents ready -> HAMi: the webhook is reached through the agents (components/gpu/hami.py).
    assert run.depends_on(release, tunnel)
    assert run.depends_on(tunnel, run.named(f"{TENANT}-calico"))
    assert all(run.depends_on(tunnel, registered(lab, w["name"])) for w in WORKERS)
    assert tunnel.inputs["nodes"] == len(WORKERS)
    # A rejoined worker brings a new agent pod to wait for.
    assert tunnel.inputs["registrations"] == [registered(lab, w["name"]).resource_id for w in WORKERS]
    assert tunnel.is_secret("kubeconfig")


def test_release_is_the_vendored_chart_in_kube_system(lab, vendor_dir):
    chart = yaml.safe_load((vendor_dir / "hami" / "Chart.yaml").read_text())
    inputs = lab.run.named(f"{TENANT}-hami").inputs
    assert (inputs["chart"], inputs["version"]) == (f"./.cache/charts/{chart['name']}", chart["version"])
    assert (inputs["name"], inputs["namespace"]) == ("hami", "kube-system")
    assert "repositoryOpts" not in inputs


def test_cards_are_written_after_each_nodes_registration(lab):
    run = lab.run
    for worker in WORKERS:
        node, cards = node_name(TENANT, worker["name"]), [GpuCard.model_validate(c) for c in worker.get("gpus", [])]
        names = {r.name for r in run.resources}
        if not cards:
            assert f"{node}-gpu-register" not in names and f"{node}-gpu-capacity" not in names
            continue
        join = registered(lab, worker["name"])
        patch = run.named(f"{node}-gpu-register", "kubernetes:core/v1:NodePatch")
        capacity = run.named(f"{node}-gpu-capacity", "pulumi-python:dynamic/gpu-tenancy:GpuCapacity")
        # Both are the worker's, wait for the Node object, and are applied again when it rejoins (new registration id).
        assert patch.parent == capacity.parent == run.named(node, "gpu-tenancy:index:WorkerNode").urn
        assert join.urn in patch.dependencies and join.urn in capacity.dependencies
        assert patch.inputs["metadata"] == {"name": node, "annotations": {
            REGISTER_ANNOTATION: register_annotation(cards), JOIN_ANNOTATION: join.resource_id}}
        assert (capacity.inputs["node_name"], capacity.inputs["capacity"]) == (node, gpu_capacity(cards))
        assert capacity.inputs["registration"] == join.resource_id
        assert capacity.is_secret("kubeconfig") and capacity.is_secret("management_kubeconfig")


def test_nodes_carry_the_cards_and_the_capacity_hami_needs(lab):
    for worker in GPU_WORKERS:
        node = lab.api.find("Node", None, node_name(TENANT, worker))
        devices = json.loads(node["metadata"]["annotations"][REGISTER_ANNOTATION])
        allocatable = node["status"]["allocatable"]
        assert allocatable["nvidia.com/gpu"] == str(lab.output["gpuCapacity"][node_name(TENANT, worker)])
        # What the mock device plugin registered from them (sums over the cards).
        assert allocatable["nvidia.com/gpumem"] == str(sum(d["devmem"] for d in devices))
    assert lab.output["gpuCapacity"] == {"tenant-a-cpu-0": 0, "tenant-a-small-0": 10, "tenant-a-worker-0": 10,
                                         "tenant-a-worker-1": 7}
    assert lab.output["nodes"] == [node_name(TENANT, w["name"]) for w in WORKERS]


def test_every_namespace_hami_must_not_block_is_exempt_from_its_webhook(lab):
    # Whatever the program and the tenant's system run pods in stays out of the webhook (failurePolicy Fail);
    # the namespaces of the tenant's users, and the smoke pod's, go through it.
    workloads = {ns for kind in ("Deployment", "DaemonSet") for (k, ns, _) in lab.api.objects if k == kind}
    releases = {r.inputs["namespace"] for r in lab.run.of_type("kubernetes:helm.sh/v3:Release")
                if r.provider.startswith(lab.run.named(f"{TENANT}-tenant").urn)}
    assert workloads and releases
    assert workloads | releases <= set(TENANT_SYSTEM_NAMESPACES)
    smoke = lab.run.named(f"{TENANT}-gpu-smoke-test").inputs["metadata"]["namespace"]
    assert not ({smoke, *lab.tenant.namespaces} & set(TENANT_SYSTEM_NAMESPACES))


def test_the_smoke_pod_has_a_namespace_of_its_own_outside_every_user_quota_and_credential(lab):
    pod = lab.run.named(f"{TENANT}-gpu-smoke-test", "kubernetes:core/v1:Pod")
    namespace = lab.run.named(f"{TENANT}-gpu-smoke-namespace", "kubernetes:core/v1:Namespace")
    assert pod.inputs["metadata"]["namespace"] == namespace.inputs["metadata"]["name"] == SMOKE_TEST_NAMESPACE
    assert SMOKE_TEST_NAMESPACE not in lab.tenant.namespaces
    assert namespace.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert lab.run.depends_on(pod, namespace)
    assert namespace.deleted_with == pod.deleted_with == lab.run.named(f"{TENANT}-tcp").urn
    assert lab.api.list("ResourceQuota", SMOKE_TEST_NAMESPACE) == []
    assert lab.api.list("RoleBinding", SMOKE_TEST_NAMESPACE) == []  # the tenant user cannot touch the proof


def test_the_proof_leaves_a_quota_as_big_as_its_request_to_the_users():
    # The smoke pod once ran in `default`, a quota'd workload namespace, and held the quota there for good.
    sim = running_kind_lab(one_tenant=True)
    tenant = sim.config["tenants"][0]
    smoke = SmokeTest.model_validate(sim.config.get("smokeTest") or {})
    tenant["quota"] = {"gpus": smoke.gpus, "memoryMiB": smoke.gpus * smoke.memory_mib,
                       "cores": smoke.gpus * smoke.cores}
    sim.up()
    api = sim.world.tenant_api(tenant["name"])
    assert api.find("Pod", SMOKE_TEST_NAMESPACE, "gpu-smoke-test")["status"]["phase"] == "Running"
    assert {q["metadata"]["namespace"] for q in api.list("ResourceQuota")} == set(tenant.get("namespaces",
                                                                                             ["default"]))
    limits = {"nvidia.com/gpu": str(smoke.gpus), "nvidia.com/gpumem": str(smoke.memory_mib),
              "nvidia.com/gpucores": str(smoke.cores)}
    created = api.create(None, {"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": "training", "namespace": "default"},
                                "spec": {"containers": [{"name": "job", "image": "pause",
                                                         "resources": {"limits": limits}}]}})
    systems.schedule(sim.world, api, api.find("Pod", "default", created["metadata"]["name"]))
    assert api.find("Pod", "default", "training")["status"]["phase"] == "Running"


def test_a_gpu_pod_kept_from_hamis_webhook_is_refused_and_without_the_policy_runs_unaccounted():
    sim = running_kind_lab(one_tenant=True)
    api = sim.world.tenant_api(sim.config["tenants"][0]["name"])
    gpu_node = next(n["metadata"]["name"] for n in api.list("Node")
                    if int(n["status"].get("allocatable", {}).get("nvidia.com/gpu", 0)) > 0)

    def pod(name, labels=None, **spec):
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                                **({"labels": labels} if labels else {})},
                "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"limits": limits}}], **spec}}

    # Skipped by the webhook's objectSelector; allowed unmutated for naming another scheduler, bound by hand.
    ignored, foreign = pod("ignored", {"hami.io/webhook": "ignore"}), pod("foreign", schedulerName="mine",
                                                                         nodeName=gpu_node)
    for bypass in (ignored, foreign):
        with pytest.raises(ApiError, match=f"ValidatingAdmissionPolicy '{HAMI_POD_POLICY}'"):
            api.create(None, copy.deepcopy(bypass))
    assert api.create(None, pod("through"))["spec"]["schedulerName"] == "hami-scheduler"
    # Without it, default-scheduler runs the labelled pod on a card HAMi never accounts for.
    api.remove("ValidatingAdmissionPolicyBinding", None, HAMI_POD_POLICY)
    assert api.create(None, ignored)["spec"]["schedulerName"] == "default-scheduler"
    systems.schedule(sim.world, api, api.find("Pod", "default", "ignored"))
    ran = api.find("Pod", "default", "ignored")
    assert ran["status"]["phase"] == "Running" and ran["spec"]["nodeName"] == gpu_node
    assert "hami.io/vgpu-devices-allocated" not in ran["metadata"].get("annotations", {})


def test_smoke_pod_is_pinned_to_the_first_worker_the_request_fits_on(lab):
    pod = lab.run.named(f"{TENANT}-gpu-smoke-test", "kubernetes:core/v1:Pod")
    worker = lab.smoke.worker_in(lab.tenant)
    assert worker is not None and worker.name == "worker-0"  # cpu-0 has no card, small-0's is too small
    spec = pod.inputs["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": node_name(TENANT, worker.name)}
    assert "schedulerName" not in spec and "nodeName" not in spec
    (container,) = spec["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": str(lab.smoke.gpus),
                                                "nvidia.com/gpumem": str(lab.smoke.memory_mib),
                                                "nvidia.com/gpucores": str(lab.smoke.cores)}
    # It proves that worker's current registration, in this mode, at this version, with this HAMi release, after
    # HAMi and every card is in place and its worker is back in service.
    assert pod.inputs["metadata"]["annotations"] == {
        JOIN_ANNOTATION: registered(lab, worker.name).resource_id,
        PROOF_ANNOTATION: f"gpuMode=mock kubernetesVersion={lab.tenant.kubernetes_version} hamiRevision=1"}
    assert lab.run.depends_on(pod, lab.run.named(f"{TENANT}-hami"))
    assert lab.run.depends_on(pod, lab.run.named(f"{node_name(TENANT, worker.name)}-ready"))
    for name in GPU_WORKERS:
        for suffix in ("gpu-register", "gpu-capacity"):
            assert lab.run.depends_on(pod, lab.run.named(f"{node_name(TENANT, name)}-{suffix}"))


def test_smoke_pod_is_replaced_on_a_rejoin_and_deleted_before_its_replacement(lab):
    pod = lab.run.named(f"{TENANT}-gpu-smoke-test", "kubernetes:core/v1:Pod")
    # The engine's path grammar (properties_path.go) splits a bare dotted key: it must be bracketed, and name
    # an input the pod really has, or the replacement never triggers.
    assert [paths.parse(path) for path in pod.replace_on_changes] == [
        ("metadata", "annotations", JOIN_ANNOTATION), ("metadata", "annotations", PROOF_ANNOTATION)]
    assert all(paths.matches_any_input(paths.parse(path), pod.inputs) for path in pod.replace_on_changes)
    # Fixed name: the old pod must go before the new one is created.
    assert pod.delete_before_replace


def test_up_outputs_the_evidence_of_the_pinned_worker(lab):
    node = node_name(TENANT, "worker-0")
    allocatable = lab.api.find("Node", None, node)["status"]["allocatable"]
    assert lab.output["smokeTest"] == {
        "pod": "gpu-tenancy-smoke/gpu-smoke-test",
        "node": node,
        "schedulerName": "hami-scheduler",
        "devicesAllocated": f"GPU-MOCK-A0,NVIDIA,{lab.smoke.memory_mib},{lab.smoke.cores}:;",
        "nodeResources": {key: allocatable[key] for key in ("nvidia.com/gpumem", "nvidia.com/gpucores")},
    }


def test_a_first_preview_plans_the_evidence_and_a_running_stacks_preview_shows_the_last(lab):
    # A first preview has no scheduled pod: the Node read has an unknown id (the engine skips it, asking the
    # tenant API nothing), and the preview still succeeds.
    assert lab.first_preview.ok and f"{TENANT}-gpu-smoke-node" in lab.first_preview.names("read")
    # A running stack's unchanged pod has its node: the preview reads it again (no `discard`) and judges what the
    # update judges, so the output does not change.
    assert f"{TENANT}-gpu-smoke-node" in lab.preview.names("read"), lab.preview.render()
    assert not lab.preview.names("discard"), lab.preview.render()
    assert plain(lab.preview.outputs["tenants"])[TENANT]["smokeTest"] == lab.output["smokeTest"]
    assert lab.preview.changed() == {}, lab.preview.render()


def test_a_preview_that_replaces_the_smoke_pod_plans_the_evidence():
    """The replaced pod has no node yet in a preview: the output says what the update will prove."""
    running = running_kind_lab(one_tenant=True)
    running.config["smokeTest"]["memoryMiB"] = running.config["smokeTest"].get("memoryMiB", 3000) - 1000
    preview = running.preview()
    assert f"{TENANT}-gpu-smoke-test" in preview.names("replace"), preview.render()
    smoke = SmokeTest.model_validate(running.config["smokeTest"])
    assert plain(preview.outputs["tenants"])[TENANT]["smokeTest"] == planned_evidence(smoke)


def test_a_mock_plugin_that_registers_nothing_fails_the_update(monkeypatch):
    refresh = systems.refresh_nodes

    def plugin_registers_nothing(world, api, **options):
        refresh(world, api, **options)
        for node in api.list("Node"):
            for part in ("capacity", "allocatable"):
                for key in ("nvidia.com/gpumem", "nvidia.com/gpucores"):
                    node["status"][part].pop(key, None)

    monkeypatch.setattr(systems, "refresh_nodes", plugin_registers_nothing)
    config = copy.deepcopy(reference_stack())
    config["tenants"] = config["tenants"][:1]
    sim = kind_lab(config)
    plan = sim.up(skip_preview=True, expect_error=True)
    assert not plan.ok
    # The bounded wait before the smoke pod names the node and what it shows; the pod is never made.
    assert ("HAMi's mock device plugin registered nothing: gave up after 180s: Node tenant-a-worker-0 allocatable "
            "has nvidia.com/gpumem=None, nvidia.com/gpucores=None") in plan.error
    assert "kubectl -n kube-system logs -l app.kubernetes.io/component=hami-mock-device-plugin" in plan.error
    assert plan.step("tenant-a-worker-0-gpu-plugin-ready").failed, plan.render()
    assert "tenant-a-gpu-smoke-test" not in plan.names("create"), plan.render()


def nvidia_config(smoke_test: bool) -> dict:
    """The production example (SSH machines with real cards, gpuMode nvidia), one tenant, with a RuntimeClass."""
    raw = prod_example_with_secrets()
    raw["tenants"] = raw["tenants"][:1]
    raw["nvidia"] = {"runtimeClassName": "nvidia"}
    raw["smokeTest"]["enabled"] = smoke_test
    return raw


def test_nvidia_mode_labels_each_node_after_its_registration_and_uses_the_runtime_class():
    # Without the smoke test: see the next test.
    raw = nvidia_config(smoke_test=False)
    run = mockrun.registered(raw, stack="prod", secret_keys=["management", "tenants"])
    tenant = raw["tenants"][0]["name"]
    for worker in raw["tenants"][0]["workers"]:
        node = node_name(tenant, worker["name"])
        label = run.named(f"{node}-gpu-label", "kubernetes:core/v1:NodePatch")
        # The label the chart's device-plugin DaemonSet selects (values devicePlugin.nvidiaNodeSelector).
        # With the join id: a rejoined worker's fresh Node gets the label again (issue 21 #1).
        assert label.inputs["metadata"] == {"name": node, "labels": {"gpu": "on"},
                                            "annotations": {JOIN_ANNOTATION: run.named(f"{node}-registered").resource_id}}
        assert run.named(f"{node}-registered").urn in label.dependencies
    # The real plugin writes the cards and the capacity itself (HAMi pkg/device-plugin/nvidiadevice/nvinternal/plugin/
    # register.go).
    assert not [r for r in run.resources if r.name.endswith(("-gpu-register", "-gpu-capacity"))]
    plugin = run.named(f"{tenant}-hami").inputs["values"]["devicePlugin"]
    assert (plugin["runtimeClassName"], plugin["createRuntimeClass"]) == ("nvidia", True)
    assert run.outputs["tenants"].value[tenant]["gpuCapacity"] is None


def test_nvidia_mode_proves_the_real_plugin_on_the_first_worker_it_fits_on():
    raw = nvidia_config(smoke_test=True)
    run = run_program(raw, stack="prod", secret_keys=["management", "tenants"])
    tenant = raw["tenants"][0]["name"]
    evidence = run.outputs["tenants"].value[tenant]["smokeTest"]
    assert evidence["schedulerName"] == "hami-scheduler"
    assert evidence["node"] == node_name(tenant, raw["tenants"][0]["workers"][0]["name"])


# --------------------------------------------------------------------------- #
# HAMi's Services stay inside the tenant (issue 22 #1)
# --------------------------------------------------------------------------- #


def node_ports(api) -> list[tuple[str, int]]:
    """(Service, nodePort) of every port a tenant publishes on each of its nodes."""
    return [(service["metadata"]["name"], port["nodePort"]) for service in api.list("Service")
            for port in (service.get("spec") or {}).get("ports") or [] if "nodePort" in port]


def test_mock_mode_publishes_no_hami_port_on_the_nodes_and_the_webhook_still_answers(lab):
    assert lab.api.find("Service", "kube-system", "hami-scheduler")["spec"]["type"] == "ClusterIP"
    assert node_ports(lab.api) == []
    # The smoke pod went through the webhook (it set the scheduler) on the ClusterIP Service.
    assert lab.output["smokeTest"]["schedulerName"] == "hami-scheduler"


def test_nvidia_mode_publishes_no_hami_port_on_the_gpu_servers_and_the_webhook_still_answers():
    sim = running_adopt_lab(one_tenant=True, races=False)
    for tenant in sim.config["tenants"]:
        api = sim.world.tenant_api(tenant["name"])
        assert {s["metadata"]["name"]: s["spec"]["type"] for s in api.list("Service", "kube-system")
                if s["metadata"]["name"].startswith("hami-")} == {
            "hami-scheduler": "ClusterIP", "hami-device-plugin-monitor": "ClusterIP"}
        assert node_ports(api) == []
        assert sim.output("tenants")[tenant["name"]]["smokeTest"]["schedulerName"] == "hami-scheduler"


def test_the_worker_without_gpus_is_labelled_a_system_node_before_calico_and_hami_place_controllers_there(lab):
    # So that root on a GPU worker is not tenant admin, the tigera-operator (bind, escalate), calico-kube-controllers,
    # HAMi's scheduler (pods patch, binding) and its certificate Jobs (every MutatingWebhookConfiguration) keep their
    # tokens off the GPU workers.
    run = lab.run
    selector = {SYSTEM_NODE_LABEL: "true"}
    node = node_name(TENANT, "cpu-0")
    label = run.named(f"{node}-system-label", "kubernetes:core/v1:NodePatch")
    assert label.inputs["metadata"] == {"name": node, "labels": selector,
                                        "annotations": {JOIN_ANNOTATION: registered(lab, "cpu-0").resource_id}}
    assert run.depends_on(label, registered(lab, "cpu-0"))
    assert not [r for r in run.resources if r.name.endswith("-system-label") and r.name != label.name]
    assert lab.api.find("Node", None, node)["metadata"]["labels"][SYSTEM_NODE_LABEL] == "true"
    calico = run.named(f"{TENANT}-calico")
    assert run.depends_on(calico, label)
    # Before calico-node's token exists, no token but the program's may set the label (nodes and nodes/status).
    binding = run.named(f"{TENANT}-node-label-policy-binding",
                        "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
    assert run.depends_on(calico, binding) and binding.inputs["spec"]["policyName"] == NODE_LABEL_POLICY
    assert lab.api.find("ValidatingAdmissionPolicy", None, NODE_LABEL_POLICY)["spec"] == node_label_policy()[0]["spec"]
    assert calico.inputs["values"]["nodeSelector"][SYSTEM_NODE_LABEL] == "true"
    assert calico.inputs["values"]["installation"]["calicoKubeControllersDeployment"]["spec"]["template"]["spec"][
        "nodeSelector"] == selector
    scheduler = run.named(f"{TENANT}-hami").inputs["values"]["scheduler"]
    assert scheduler["nodeSelector"] == selector == scheduler["patch"]["nodeSelector"]


def test_root_on_a_gpu_worker_cannot_label_it_a_system_worker_with_calico_nodes_token():
    """The exploit: calico-node's token, on every worker, writes `nodes/status`, where a label change is kept. It
    would label a GPU worker a system one, or take the label off the real one, and the tenant's most powerful
    controllers would follow. The node-label policy refuses both; without its binding the forgery is stored."""
    sim = kind_lab(lab_config())
    sim.up(skip_preview=True)
    api = sim.world.tenant_api(TENANT)
    calico = pki.Identity(systems.CALICO_NODE, ("system:serviceaccounts", "system:authenticated"))
    gpu, system = node_name(TENANT, "worker-0"), node_name(TENANT, "cpu-0")
    for target, labels in ((gpu, {SYSTEM_NODE_LABEL: "true"}), (system, {SYSTEM_NODE_LABEL: None})):
        with pytest.raises(ApiError, match=f"ValidatingAdmissionPolicy '{NODE_LABEL_POLICY}'"):
            api.patch_status(calico, "Node", target, {"metadata": {"labels": labels}})
    # What calico-node writes there itself goes through.
    api.patch_status(calico, "Node", gpu, {"metadata": {"annotations": {"projectcalico.org/IPv4Address": "x"}}})
    assert SYSTEM_NODE_LABEL not in api.find("Node", None, gpu)["metadata"]["labels"]
    assert api.find("Node", None, system)["metadata"]["labels"][SYSTEM_NODE_LABEL] == "true"
    api.remove("ValidatingAdmissionPolicyBinding", None, NODE_LABEL_POLICY)
    api.patch_status(calico, "Node", gpu, {"metadata": {"labels": {SYSTEM_NODE_LABEL: "true"}}})
    assert api.find("Node", None, gpu)["metadata"]["labels"][SYSTEM_NODE_LABEL] == "true"


def test_hamis_token_policy_is_in_place_before_hami_runs(lab):
    run = lab.run
    policy = run.named(f"{TENANT}-hami-token-policy",
                       "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
    binding = run.named(f"{TENANT}-hami-token-policy-binding",
                        "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
    assert policy.inputs["spec"] == hami_token_policy()[0]["spec"]
    assert binding.inputs["spec"]["policyName"] == policy.inputs["metadata"]["name"]
    release = run.named(f"{TENANT}-hami")
    assert run.depends_on(release, binding) and run.depends_on(binding, policy)
    assert lab.api.find("ValidatingAdmissionPolicy", None, HAMI_TOKEN_POLICY) is not None
    pod_binding = run.named(f"{TENANT}-hami-pod-policy-binding")
    assert pod_binding.inputs["spec"] == hami_pod_policy()[1]["spec"] and run.depends_on(release, pod_binding)


# --------------------------------------------------------------------------- #
# The proof follows the pod: what evicts or outdates it proves again in the same `up`
# --------------------------------------------------------------------------- #


def proof_of_the_live_pod(sim, tenant: str) -> dict:
    """The tenant's `smokeTest` output, checked against the smoke pod the tenant's API has now."""
    pod = sim.world.tenant_api(tenant).find("Pod", SMOKE_TEST_NAMESPACE, "gpu-smoke-test")
    evidence = sim.output("tenants")[tenant]["smokeTest"]
    assert pod is not None, f"smokeTest reports {evidence} of a pod that no longer exists"
    assert pod["status"]["phase"] == "Running"
    assert evidence["node"] == pod["spec"]["nodeName"]
    assert evidence["devicesAllocated"] == pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    return pod


def test_an_ssh_worker_upgraded_in_place_proves_again_on_the_pod_its_drain_did_not_evict():
    sim = running_adopt_lab(one_tenant=True, races=False)
    tenant = sim.config["tenants"][0]["name"]
    before = proof_of_the_live_pod(sim, tenant)
    for host in sim.world.ssh.values():
        host.machine.kubeadm_version = host.machine.kubelet_version = "v1.36.1"
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.36.1"
    sim.up()
    after = proof_of_the_live_pod(sim, tenant)
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    assert sim.up().changed() == {}


def test_in_nvidia_mode_the_smoke_pod_starts_under_nvidias_container_hooks():
    sim = running_adopt_lab(one_tenant=True, races=False)
    pod = proof_of_the_live_pod(sim, sim.config["tenants"][0]["name"])
    assert sim.world.tenant_api(sim.config["tenants"][0]["name"]).find(
        "Node", None, pod["spec"]["nodeName"])["metadata"]["labels"]["gpu"] == "on"


VISION_NODES = ("team-vision-gpu-01", "team-vision-gpu-02")


def test_a_gpu_mode_switch_proves_the_new_mode_again_and_keeps_what_the_device_plugin_registered(monkeypatch):
    from tests.support.sim import world as sim_world

    raw = prod_example_with_secrets()
    raw["tenants"] = raw["tenants"][:1]
    raw["gpuMode"] = "mock"
    raw["tenants"][0].pop("workloads", None)
    for worker in raw["tenants"][0]["workers"]:  # what the mock device plugin can register (config/validate.py)
        worker["gpus"] = [{**card, "memoryMiB": 49152} for card in worker["gpus"]]
    world = lab_world()
    sim = Lifecycle(adopt(world, raw), world=world, stack="prod", secret_keys=["management", "tenants"])
    sim.up()
    tenant = sim.config["tenants"][0]["name"]
    before = proof_of_the_live_pod(sim, tenant)
    sim.config["gpuMode"] = "nvidia"
    preview = sim.preview()
    assert f"{tenant}-gpu-smoke-test" in preview.names("replace"), preview.render()
    erased: list[str] = []
    patch_status = sim_world.KubeApi.patch_status

    def recorded(self, identity, kind, name, patch):
        node = self.find("Node", None, name) if kind == "Node" else None
        if node and (node["metadata"].get("labels") or {}).get("gpu") == "on" and None in (
                (patch.get("capacity") or {}).get("nvidia.com/gpu", 0), (patch.get("allocatable") or {}).get(
                    "nvidia.com/gpu", 0)):
            erased.append(name)
        return patch_status(self, identity, kind, name, patch)

    monkeypatch.setattr(sim_world.KubeApi, "patch_status", recorded)
    plan = sim.up(skip_preview=True)
    # HAMi's scheduler drops a node whose nvidia.com/gpu reads 0 until its next register tick (HAMi v2.10.0
    # pkg/device/nvidia/device.go CheckHealth): the plugin's count is never erased, not even for a moment.
    assert erased == []
    after = proof_of_the_live_pod(sim, tenant)
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    # The simulated capacity goes at the end of the update, after HAMi's device plugin registered its own there.
    assert {f"{node}-gpu-capacity" for node in VISION_NODES} <= plan.names("delete"), plan.render()
    api = sim.world.tenant_api(tenant)
    for node in VISION_NODES:
        status = api.find("Node", None, node)["status"]
        assert status["capacity"]["nvidia.com/gpu"] == status["allocatable"]["nvidia.com/gpu"] == "20", node
    assert sim.up().changed() == {}


def test_without_the_smoke_test_the_webhook_gate_still_waits_for_hamis_answer(monkeypatch):
    from tests.support.sim import world as sim_world

    answers: list[str] = []
    create = sim_world.KubeApi.create

    def recorded(self, identity, obj, dry_run=False):
        probe = dry_run and obj["kind"] == "Pod"
        try:
            created = create(self, identity, obj, dry_run=dry_run)
        except Exception as error:
            if probe:
                answers.append(str(error))
            raise
        if probe:
            answers.append(f"schedulerName {created['spec'].get('schedulerName')}")
        return created

    monkeypatch.setattr(sim_world.KubeApi, "create", recorded)
    config = lab_config()
    config["smokeTest"] = {"enabled": False}
    sim = kind_lab(config)
    sim.up(skip_preview=True)
    gate = sim.resource(f"{TENANT}-hami-webhook-ready")
    assert sim.urn(f"{TENANT}-gpu-smoke-namespace") in gate.dependencies
    # NamespaceLifecycle answers before any webhook: only a mutated probe shows HAMi's webhook at work.
    assert answers and answers[-1] == "schedulerName hami-scheduler", answers
