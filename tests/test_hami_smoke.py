"""The GPU smoke-test pod and the evidence check that judges it (components/gpu/smoke.py)."""

import copy

import kubernetes_validate
import pytest

from components.gpu.smoke import (
    BINDING,
    PLUGIN,
    SCHEDULER,
    WEBHOOK,
    SmokeTestError,
    check_smoke_evidence,
    hami_evidence,
    observed_pod,
    planned_evidence,
    smoke_namespace_metadata,
    smoke_pod_manifest,
)
from components.images import PAUSE_IMAGE
from config import SmokeTest
from tests.support.chart_values import load_chart_values
from tests.support.fake_platform import baseline_violations

NODE = "tenant-a-worker-0"
URN = ("urn:pulumi:dev::gpu-tenancy::gpu-tenancy:index:Tenant$gpu-tenancy:index:TenantGpus$kubernetes:core/v1:Pod::"
       "tenant-a-gpu-smoke-test")


def pod_document(smoke: SmokeTest | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", **smoke_pod_manifest(smoke or SmokeTest(), PAUSE_IMAGE, NODE)}


# --------------------------------------------------------------------------- #
# The pod
# --------------------------------------------------------------------------- #


def test_smoke_pod_requests_a_fraction_of_a_gpu_like_a_user_would(vendor_dir):
    chart = load_chart_values(vendor_dir / "hami" / "values.yaml")
    spec = pod_document(SmokeTest.model_validate({"gpus": 1, "memoryMiB": 2500, "cores": 25}))["spec"]
    (container,) = spec["containers"]
    # HAMi's resource names from the chart; quantities as strings.
    assert container["resources"]["limits"] == {
        chart["resourceName"]: "1", chart["resourceMem"]: "2500", chart["resourceCores"]: "25",
    }
    # The webhook must set the scheduler, and denies pods with nodeName preset (HAMi pkg/scheduler/webhook.go).
    assert "schedulerName" not in spec
    assert "nodeName" not in spec
    # Pinned by the label the kubelet puts on its own Node, which the scheduler filters on before HAMi.
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": NODE}
    # The webhook denies privileged GPU pods.
    assert container["securityContext"]["privileged"] is False


def test_smoke_pod_meets_pod_security_restricted_which_its_namespace_enforces():
    # kubernetes.io/docs/concepts/security/pod-security-standards, Restricted: baseline plus non-root, seccomp
    # RuntimeDefault/Localhost, no privilege escalation, every capability dropped, only restricted volume types.
    metadata = smoke_namespace_metadata()
    assert metadata["name"] == "gpu-tenancy-smoke"
    assert metadata["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = pod_document()
    assert pod["metadata"]["namespace"] == metadata["name"]
    assert baseline_violations(pod) == []
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert not spec.get("volumes") and spec["automountServiceAccountToken"] is False


def test_smoke_pod_is_a_valid_pod_for_the_tenant_version():
    kubernetes_validate.validate(pod_document(), "1.35.0", strict=True)
    broken = pod_document()
    resources = broken["spec"]["containers"][0]["resources"]
    resources["limit"] = resources.pop("limits")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.35.0", strict=True)


def test_planned_evidence_says_what_the_update_will_prove():
    planned = planned_evidence(SmokeTest.model_validate({"gpus": 2, "memoryMiB": 1024, "cores": 10}))
    assert planned["pod"] == "gpu-tenancy-smoke/gpu-smoke-test"
    assert "hami-scheduler" in planned["proves"]
    assert "2 GPU(s) with 1024 MiB and 10% cores" in planned["proves"]


# --------------------------------------------------------------------------- #
# The evidence
# --------------------------------------------------------------------------- #


def scheduled_pod() -> dict:
    """The smoke pod as HAMi leaves it (annotation names: HAMi v2.10.0 pkg/util/types.go, nvidia/device.go)."""
    return {
        "metadata": {
            "name": "gpu-smoke-test",
            "namespace": "gpu-tenancy-smoke",
            "annotations": {
                "hami.io/vgpu-node": NODE,
                "hami.io/vgpu-devices-allocated": "GPU-MOCK-A0,NVIDIA,3000,30:;",
            },
        },
        "spec": {"schedulerName": "hami-scheduler", "nodeName": NODE},
    }


NODE_STATUS = {"allocatable": {"nvidia.com/gpu": "10", "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "100"}}


def failure(pod: dict, node_status: dict | None = NODE_STATUS, mock: bool = True) -> str:
    with pytest.raises(SmokeTestError) as raised:
        check_smoke_evidence(pod, "tenant-a", resource=URN, node_status=node_status, mock=mock)
    message = str(raised.value)
    # Every message names the tenant and the pod, and how to prove again once fixed.
    assert message.startswith("tenant tenant-a: GPU smoke test pod gpu-tenancy-smoke/gpu-smoke-test ")
    assert message.endswith(f"Once fixed, re-create the pod: make up REPLACE='{URN}'.")
    return message


def test_evidence_of_a_pod_through_webhook_scheduler_and_plugin():
    assert check_smoke_evidence(scheduled_pod(), "tenant-a", resource=URN, node_status=NODE_STATUS) == {
        "pod": "gpu-tenancy-smoke/gpu-smoke-test",
        "node": NODE,
        "schedulerName": "hami-scheduler",
        "devicesAllocated": "GPU-MOCK-A0,NVIDIA,3000,30:;",
        "nodeResources": {"nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "100"},
    }


def test_an_unmutated_pod_on_default_scheduler_blames_the_webhook_path():
    pod = scheduled_pod()
    pod["spec"]["schedulerName"] = "default-scheduler"
    message = failure(pod)
    assert "schedulerName 'default-scheduler', not 'hami-scheduler'" in message
    assert "kubectl -n kube-system get pods -l k8s-app=konnectivity-agent" in message
    assert "kubectl get mutatingwebhookconfiguration hami-webhook" in message


@pytest.mark.parametrize("missing", ["hami.io/vgpu-node", "hami.io/vgpu-devices-allocated"])
def test_a_pod_without_an_allocation_blames_the_scheduler_and_the_cards(missing):
    pod = scheduled_pod()
    del pod["metadata"]["annotations"][missing]
    message = failure(pod)
    assert f"did not allocate a GPU to it (annotation {missing} missing)" in message
    # Where to look: what HAMi's scheduler reads from the nodes, the plugin pods, the scheduler's reasons.
    assert "hami.io/node-nvidia-register" in message and "nvidia.com/gpu capacity" in message
    assert "kubectl -n kube-system get pods -l app.kubernetes.io/component=hami-mock-device-plugin" in message
    assert "FilteringFailed" in message
    assert "Konnectivity" not in message


def test_a_pod_bound_elsewhere_than_hami_allocated_blames_the_extender():
    pod = scheduled_pod()
    pod["spec"]["nodeName"] = "tenant-a-worker-1"
    message = failure(pod)
    assert f"bound to node tenant-a-worker-1 but HAMi allocated its GPU on {NODE}" in message
    assert "hami-scheduler pod logs" in message


@pytest.mark.parametrize("absent", [["nvidia.com/gpumem"], ["nvidia.com/gpucores"],
                                    ["nvidia.com/gpumem", "nvidia.com/gpucores"]])
def test_a_node_without_the_mock_plugins_resources_blames_the_plugin(absent):
    status = copy.deepcopy(NODE_STATUS)
    for key in absent:
        del status["allocatable"][key]
    message = failure(scheduled_pod(), node_status=status)
    assert f"scheduled onto {NODE}, but that node advertises no {', '.join(absent)}" in message
    assert "mock device plugin registered nothing there" in message
    assert "kubectl -n kube-system logs -l app.kubernetes.io/component=hami-mock-device-plugin" in message


@pytest.mark.parametrize("zero", ["0", "", "0Mi", "none"])
def test_a_node_advertising_zero_blames_the_plugin(zero):
    """After a kubelet restart the device manager reports a plugin's resources as 0 until it
    registers again; the string "0" is truthy, so only a number above zero is evidence."""
    status = copy.deepcopy(NODE_STATUS)
    status["allocatable"]["nvidia.com/gpumem"] = zero
    message = failure(scheduled_pod(), node_status=status)
    assert f"scheduled onto {NODE}, but that node advertises no nvidia.com/gpumem" in message


def test_a_node_that_was_not_read_fails_in_mock_mode_only():
    failure(scheduled_pod(), node_status=None)
    # gpuMode nvidia: the real plugin's resources are not what the mock registers; the pod evidence suffices.
    evidence = check_smoke_evidence(scheduled_pod(), "tenant-a", node_status=None, mock=False)
    assert evidence["schedulerName"] == "hami-scheduler" and evidence["nodeResources"] == {}


# --------------------------------------------------------------------------- #
# The judge both the smoke test and `make verify` use
# --------------------------------------------------------------------------- #


def test_the_judge_names_the_first_link_that_does_not_hold():
    node = {"status": NODE_STATUS}
    evidence = hami_evidence(scheduled_pod(), node, plugin=True)
    assert (evidence.ok, evidence.broken, evidence.seen) == (True, None, f"bound to {NODE}, devices GPU-MOCK-A0,NVIDIA,3000,30:;")
    assert (evidence.node, evidence.allocated_on, evidence.scheduler_name) == (NODE, NODE, "hami-scheduler")

    unmutated = scheduled_pod()
    unmutated["spec"]["schedulerName"] = "default-scheduler"
    # The webhook comes first: a pod it never saw proves nothing further down, whatever its annotations say.
    assert hami_evidence(unmutated, node, plugin=True).broken == WEBHOOK
    assert not hami_evidence(unmutated).admitted and hami_evidence(scheduled_pod()).admitted

    elsewhere = scheduled_pod()
    elsewhere["spec"]["nodeName"] = "tenant-a-worker-1"
    assert hami_evidence(elsewhere, node, plugin=True).broken == BINDING

    bare = {"status": {"allocatable": {"nvidia.com/gpu": "10"}}}
    assert hami_evidence(scheduled_pod(), bare, plugin=True).broken == PLUGIN
    # Without `plugin` the node is not judged (make verify reads no Node; gpuMode nvidia has no mock plugin).
    assert hami_evidence(scheduled_pod(), bare).ok and hami_evidence(scheduled_pod()).ok


def test_a_pod_hami_has_not_placed_yet_is_at_the_scheduler_link_and_says_why():
    pending = {"metadata": {"name": "p"}, "spec": {"schedulerName": "hami-scheduler"}, "status": {}}
    evidence = hami_evidence(pending)
    assert (evidence.broken, evidence.seen) == (SCHEDULER, "not bound to a node")
    assert evidence.missing == ("hami.io/vgpu-node", "hami.io/vgpu-devices-allocated")
    pending["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/1 nodes are available."}]
    assert hami_evidence(pending).seen == "not bound: Unschedulable: 0/1 nodes are available."
    bound = scheduled_pod()
    del bound["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    assert hami_evidence(bound).seen == f"bound to {NODE} without hami.io/vgpu-devices-allocated"


def test_an_allocation_not_bound_yet_is_not_evidence():
    # HAMi's scheduler writes its annotations in Filter, before Bind (HAMi pkg/scheduler/scheduler.go).
    pod = scheduled_pod()
    del pod["spec"]["nodeName"]
    evidence = hami_evidence(pod)
    assert evidence.broken == BINDING and evidence.seen.startswith("not bound to a node yet")
    assert "not bound to a node yet, though HAMi allocated its GPU on" in failure(pod)


def test_observed_pod_reads_the_sdks_snake_cased_output():
    metadata = {"name": "gpu-smoke-test", "namespace": "default", "annotations": {"hami.io/vgpu-node": NODE}}
    spec = {"scheduler_name": "hami-scheduler", "node_name": NODE, "containers": []}
    assert observed_pod(metadata, spec) == {
        "metadata": {"name": "gpu-smoke-test", "namespace": "default", "annotations": {"hami.io/vgpu-node": NODE}},
        "spec": {"schedulerName": "hami-scheduler", "nodeName": NODE},
    }
    assert observed_pod(metadata, {"schedulerName": "x"})["spec"]["schedulerName"] == "x"
    assert observed_pod(None, None)["spec"] == {"schedulerName": None, "nodeName": None}
