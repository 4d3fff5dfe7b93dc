"""`make verify` against a fake running platform (tests/support/fake_platform.py) and local fake API servers."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import socket
import subprocess

import pytest
import yaml

from components import kube
from components.images import PAUSE_IMAGE, worker_images
from components.kube import ApiError, UnreachableError
from components.management.image_cache import DEBUG_PORT, MIRRORED_REGISTRIES
from components.plan import gpu_plan, plan_summary
from components.tenant.spec import SYSTEM_NODE_LABEL, etcd_setup_network_policy, isolation_network_policy
from config import Versions, load_stack_config
from ops import verify, verify_checks
from ops.verify import (
    OutputsError,
    TenantReport,
    check_mirror_cache,
    mirror_counters,
    platform_from_outputs,
    read_outputs_file,
    read_stack_outputs,
    render_summary,
    render_table,
    verify_mirror,
    verify_platform,
)
from ops.verify_checks import (
    NETWORK_PROBE_DEADLINE,
    NETWORK_PROBE_SCRIPT,
    PROBE_IMAGE,
    CheckResult,
    ProbeRequest,
    Waiting,
    cross_tenant_kubeconfig,
    expected_capacity,
    network_probe_pod,
    probe_gpu_pod,
    probe_pod,
    probe_verdict,
    shared_networks,
    verify_tenant,
)
from tests.support.fake_platform import (
    LAB_NETWORK,
    QUOTA_REJECTION,
    FakeClock,
    FakeCluster,
    FakeDocker,
    FakeSession,
    baseline_violations,
    card,
    expvar_json,
    healthy_platform,
    kubeconfig_yaml,
    node,
)
from tests.support.mockrun import reference_stack, run_program

# --- helpers ----------------------------------------------------------------------------------

NETWORK_ROWS = ("pod → tenant-b API", "pod → tenant-b Konnectivity", "pod → tenant-b node ports",
                "pod → tenant-b HAMi extender", "pod → tenant-b data store")
ENFORCED_ROW = "NetworkPolicy enforced (management)"
# The lab's summary: kindnetd fails open, so each tenant's enforcement row is NOT ENFORCED.
LAB_LOOSE = "2 not enforced (tenant-a: 1, tenant-b: 1)"


@pytest.fixture
def platform():
    return healthy_platform()


@pytest.fixture
def clock():
    return FakeClock()


def waiting_on(clock, timeout=60.0, interval=1.0):
    return Waiting(timeout=timeout, interval=interval, now=clock.now, sleep=clock.sleep)


def check(platform, clock, tenant="tenant-a", **waiting):
    """Run every check of one tenant; results by check name."""
    management_kubeconfig, target = platform_from_outputs(platform.outputs)
    target = dataclasses.replace(target, image_caches=verify.image_caches(platform.outputs.get("imageMirror"),
                                                                          platform.docker))
    results = verify_tenant(target, target.tenants[tenant], platform.connect(management_kubeconfig),
                            platform.connect, waiting_on(clock, **waiting))
    names = [r.name for r in results]
    assert len(names) == len(set(names)), names
    return {r.name: r for r in results}


def failed(results):
    return {name: r for name, r in results.items() if r.failed}


def statuses(results):
    """Every row that is not OK, with its status."""
    return {name: r.status for name, r in results.items() if r.status != "OK"}


# In the lab the shared etcd's names do not resolve in a tenant, and its pods' addresses lie inside tenant-a's own
# pod network (both 10.244.0.0/16): from tenant-a nothing of the data store can be tried.
LAB_SKIPS = {"pod → tenant-b data store": "SKIP"}


def run_main(platform, tmp_path, clock, capsys, *args):
    code = verify.main(["--outputs-file", platform.write_outputs(tmp_path), *args],
                       run=platform.docker, connect=platform.connect, waiting=waiting_on(clock))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def gpu_probes(cluster):
    return [pod for pod in cluster.created if pod["metadata"]["name"].startswith("verify-gpu-")]


def network_probes(cluster):
    return [pod for pod in cluster.created if pod["metadata"]["name"].startswith("verify-net-")]


def assert_probe_cleaned_up(cluster):
    created = [(pod["metadata"]["namespace"], pod["metadata"]["name"]) for pod in cluster.created]
    assert created, "no probe pod was created"
    assert cluster.deleted == created
    assert cluster.pods == {}


def _probe(session, clock, **waiting):
    return probe_gpu_pod(session, ProbeRequest(1, 3000, 30), waiting_on(clock, **waiting))


def admin(platform, tenant="tenant-a"):
    return FakeSession(platform.tenants[tenant], f"{tenant}-admin-token")


# --- the happy path ---------------------------------------------------------------------------


def test_all_green_platform_passes(platform, clock, tmp_path, capsys):
    code, out, err = run_main(platform, tmp_path, clock, capsys)
    assert code == 0, out
    assert err == ""
    assert "FAIL" not in out
    assert out.rstrip().endswith(
        f"verify passed: 45 checks OK, 1 skipped (tenant-a: 1), {LAB_LOOSE} in 2 tenant(s) and the image mirror")
    (skip_line,) = [line for line in out.splitlines() if "  SKIP  " in line]
    assert skip_line.startswith("pod → tenant-b data store") and "not tested: " in skip_line
    for name, cluster in platform.tenants.items():
        assert f"{name} (management namespace {name})" in out
        assert len(gpu_probes(cluster)) == 1
        # API, Konnectivity, the extender's two node ports, three etcd names and (tenant-b only) three etcd pod
        # addresses; two ports of each of the three caches.
        assert len(network_probes(cluster)) == {"tenant-a": 13, "tenant-b": 16}[name]
        assert_probe_cleaned_up(cluster)
    # On the management cluster: each tenant's control-plane pod and its etcd, from `default`.
    assert len(network_probes(platform.management)) == 4
    assert platform.management.deleted == [(p["metadata"]["namespace"], p["metadata"]["name"])
                                           for p in platform.management.created]
    assert "bound to tenant-a-worker-0, devices GPU-MOCK-A0,NVIDIA,3000,30:;" in out
    assert "tenant-b's API server refused tenant-a's admin and user credentials (HTTP 401)" in out
    assert out.index("tenant-b (management") < out.index("image mirror (pull-through caches") < out.index(
        "verify passed")


def test_every_check_of_a_tenant_is_reported(platform, clock):
    results = check(platform, clock)
    assert list(results) == [
        "control plane Ready",
        "tenant API answers",
        "node tenant-a-worker-0 Ready",
        "node tenant-a-worker-0 GPU capacity",
        "Konnectivity agent ready",
        "HAMi scheduler ready",
        "HAMi webhook (failurePolicy Fail)",
        "system-worker label only from gpu-tenancy",
        "probe admitted by HAMi webhook",
        "probe got a GPU slice",
        "object quota counts every kind",
        "GPU pod past HAMi refused",
        "isolated from tenant-b",
        *NETWORK_ROWS,
        "pod → image caches",
        "NetworkPolicies (management)",
        ENFORCED_ROW,
    ]
    assert statuses(results) == {**LAB_SKIPS, ENFORCED_ROW: "NOT ENFORCED"}
    assert results["NetworkPolicies (management)"].detail == (
        "exist: tenant-a/tenant-isolation selects every pod (Ingress and Egress); kamaji-system/kamaji-etcd-clients "
        "the etcd pods (the objects only: see 'NetworkPolicy enforced')")
    assert results["control plane Ready"].detail == (
        "TenantControlPlane tenant-a/tenant-a Ready (v1.35.0 at 172.18.255.200:6443)")
    assert results["node tenant-a-worker-0 GPU capacity"].detail == "gpu=10 gpumem=8192 gpucores=100"


def test_probe_polls_a_real_condition_not_a_fixed_sleep(platform, clock):
    # The fake allocates on the second read: exactly one pause between two reads.
    _probe(admin(platform), clock)
    assert clock.sleeps == [1.0]
    assert platform.tenants["tenant-a"].pod_reads == 2


def test_probe_pod_is_the_plans_fractional_request(platform, clock):
    check(platform, clock)
    created = gpu_probes(platform.tenants["tenant-a"])[0]
    assert created["metadata"]["name"].startswith("verify-gpu-")
    assert created["metadata"]["namespace"] == "default"


def test_probe_manifest():
    pod = probe_pod(ProbeRequest(gpus=2, memory_mib=3000, cores=30))
    assert pod["metadata"]["generateName"] == "verify-gpu-"
    assert pod["metadata"]["namespace"] == "default"
    assert "name" not in pod["metadata"]
    assert "schedulerName" not in pod["spec"]
    (container,) = pod["spec"]["containers"]
    # The smoke-test pod's image, which every worker pulled for the in-stack smoke test.
    assert container["image"] == PROBE_IMAGE == PAUSE_IMAGE
    assert container["securityContext"]["privileged"] is False
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["resources"] == {
        "limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}}


def test_multi_card_multi_node_capacity():
    assert expected_capacity([card("A", 8192, 100, 10), card("B", 4096, 50, 4)]) == {
        "nvidia.com/gpu": 14, "nvidia.com/gpumem": 12288, "nvidia.com/gpucores": 150}
    assert expected_capacity([]) == {"nvidia.com/gpu": 0, "nvidia.com/gpumem": 0, "nvidia.com/gpucores": 0}
    platform = healthy_platform(workers={"tenant-a": {
        "tenant-a-worker-0": [card("GPU-MOCK-A0"), card("GPU-MOCK-A1", 4096, 50, 4)],
        "tenant-a-worker-1": [],
    }})
    results = check(platform, FakeClock())
    assert results["node tenant-a-worker-0 GPU capacity"].detail == "gpu=14 gpumem=12288 gpucores=150"
    assert results["node tenant-a-worker-1 GPU capacity"].ok
    assert results["Konnectivity agent ready"].detail == "2/2 agents ready"


# --- management cluster failures --------------------------------------------------------------


def test_control_plane_not_ready(platform, clock, tmp_path, capsys):
    tcp = platform.management.tenant_control_planes[("tenant-a", "tenant-a")]
    tcp["status"]["kubernetesResources"]["version"]["status"] = "Provisioning"
    result = check(platform, clock)["control plane Ready"]
    assert not result.ok
    assert "tenant-a/tenant-a is Provisioning → the tenant API server is not serving" in result.detail
    # kind writes a private kubeconfig (kind-create.sh) and an adopted cluster has its own: the stack output
    # serves both.
    assert result.fix == ("KUBECONFIG=<(pulumi stack output managementKubeconfig --show-secrets) kubectl -n tenant-a "
                          "describe tcp tenant-a (then the same with -n kamaji-system logs deploy/kamaji)")
    code, out, _ = run_main(platform, tmp_path, FakeClock(), capsys)
    assert code == 1
    assert "verify failed: 1 of 48 checks failed (tenant-a: 1)" in out


def test_control_plane_without_status_or_missing(platform, clock):
    del platform.management.tenant_control_planes[("tenant-a", "tenant-a")]["status"]
    assert "is no status yet" in check(platform, clock)["control plane Ready"].detail
    platform.management.tenant_control_planes.clear()
    result = check(platform, clock)["control plane Ready"]
    assert not result.ok and "not found" in result.detail and "make up" in result.fix


def test_management_cluster_down(platform, clock):
    platform.management.down = True
    results = check(platform, clock)
    assert set(failed(results)) == {"control plane Ready", "NetworkPolicies (management)", "pod → tenant-b data store",
                                    "pod → tenant-b node ports"}
    assert results[ENFORCED_ROW].status == "SKIP"
    assert results["pod → tenant-b data store"].detail.startswith(
        "not tested: cannot read tenant-b's DataStore from the management cluster (no answer: ")
    assert "cannot read TenantControlPlane" in results["control plane Ready"].detail
    assert "docker ps --filter name=gpu-tenancy-control-plane" in results["control plane Ready"].fix


def _policies(platform, namespace):
    return platform.management.network_policies[namespace]


def _rename_isolation(platform):
    _policies(platform, "tenant-a")[0]["metadata"]["name"] = "allow-same-namespace"


def _narrow_isolation(platform):
    _policies(platform, "tenant-a")[0]["spec"]["podSelector"] = {"matchLabels": {"kamaji.clastix.io/name": "x"}}


def _ingress_only_isolation(platform):
    _policies(platform, "tenant-a")[0]["spec"]["policyTypes"] = ["Ingress"]


def _no_etcd_policy(platform):
    platform.management.network_policies["kamaji-system"] = []


def _etcd_policy_elsewhere(platform):
    _policies(platform, "kamaji-system")[0]["spec"]["podSelector"] = {"matchLabels": {"app.kubernetes.io/name": "kamaji"}}


def _operators_not_admitted(platform):
    # The load balancer admits an operator network that the policy (the lab's worker network only) does not.
    platform.outputs["tenants"]["tenant-a"]["sourceRanges"] = [LAB_NETWORK, "10.30.0.0/24"]


@pytest.mark.parametrize("breakage, message", [
    (lambda p: p.management.network_policies.update({"tenant-a": []}),
     "NetworkPolicy tenant-a/tenant-isolation not found (present: none) → the tenant's control-plane pods are "
     "reachable from every other namespace"),
    # Any policy is not the fence: an allow-all one would pass a check that only counts policies.
    (_rename_isolation, "NetworkPolicy tenant-a/tenant-isolation not found (present: allow-same-namespace)"),
    (_narrow_isolation, "its podSelector {'matchLabels': {'kamaji.clastix.io/name': 'x'}} leaves some pods unfenced"),
    (_ingress_only_isolation, "NetworkPolicy tenant-a/tenant-isolation: its policyTypes lack Egress → "),
    (_operators_not_admitted, "NetworkPolicy tenant-a/tenant-isolation does not admit 10.30.0.0/24 on ports 6443 and "
                              "8132, which the load balancer admits (loadBalancerSourceRanges) → connections from "
                              "there pass the load balancer and are dropped at the pod"),
    (_no_etcd_policy, "NetworkPolicy kamaji-system/kamaji-etcd-clients not found → every pod of the management "
                      "cluster reaches the shared etcd"),
    (_etcd_policy_elsewhere, "NetworkPolicy kamaji-system/kamaji-etcd-clients: its podSelector {'matchLabels': "
                             "{'app.kubernetes.io/name': 'kamaji'}} is not the etcd pods'"),
])
def test_network_policies_are_checked_by_name_and_shape(platform, clock, breakage, message):
    breakage(platform)
    results = check(platform, clock)
    # A policy that lets the management probe through also fails the enforcement row (tested below).
    assert set(failed(results)) - {ENFORCED_ROW} == {"NetworkPolicies (management)"}
    result = results["NetworkPolicies (management)"]
    assert message in result.detail
    assert "make up" in result.fix


def _dedicated_store_policies(platform, setup_policy):
    """tenant-a with a dedicated etcd, the management namespace holding its fence and `setup_policy` (or none)."""
    platform.outputs["tenants"]["tenant-a"]["dataStore"] = "tenant-a-etcd"
    if setup_policy is not None:
        platform.management.network_policies["tenant-a"].append(setup_policy)
    _, target = platform_from_outputs(copy.deepcopy(platform.outputs))
    return verify_checks.check_network_policies(platform.management.session("kind-admin-token"),
                                                target.tenants["tenant-a"])


SETUP_POLICY = etcd_setup_network_policy("tenant-a", "etcd", [("10.96.0.1", 443), ("172.18.0.2", 6443)])


def test_a_dedicated_data_store_needs_the_policy_that_lets_its_setup_jobs_reach_the_api(platform):
    result = _dedicated_store_policies(platform, None)
    assert not result.ok
    assert result.detail == (
        "NetworkPolicy tenant-a/etcd-setup-api not found → the dedicated etcd's setup Jobs cannot reach the "
        "management API server unless it lies in a worker network: its Helm release hangs on install, upgrade and "
        "removal")
    assert "make up" in result.fix


def test_the_setup_jobs_policy_must_select_the_jobs_and_let_them_out(platform):
    wrong = copy.deepcopy(SETUP_POLICY)
    wrong["spec"]["podSelector"] = {}
    wrong["spec"]["egress"] = [{"ports": [{"port": 6443}]}]
    result = _dedicated_store_policies(platform, wrong)
    assert not result.ok
    assert "its podSelector {} is not the setup Jobs'" in result.detail
    assert "it admits no egress to an address" in result.detail


def test_a_dedicated_data_store_with_its_setup_policy_passes(platform):
    result = _dedicated_store_policies(platform, copy.deepcopy(SETUP_POLICY))
    assert result.ok, result
    assert "; tenant-a/etcd-setup-api lets its etcd's setup Jobs reach the management API" in result.detail


def test_network_policies_the_program_creates_pass(dev_run):
    """verify expects exactly the NetworkPolicies the program registers (names and shapes from its real run)."""
    management = FakeCluster("https://management", {"admin"})
    policies = dev_run.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert len(policies) == 3
    for policy in policies:
        management.network_policies.setdefault(policy.inputs["metadata"]["namespace"], []).append(
            {"metadata": policy.inputs["metadata"], "spec": policy.inputs["spec"]})
    _, target = platform_from_outputs(json.loads(json.dumps(
        {name: output.value for name, output in dev_run.outputs.items()})))
    assert list(target.tenants) == ["tenant-a", "tenant-b"]
    for tenant in target.tenants.values():
        result = verify_checks.check_network_policies(management.session("admin"), tenant)
        assert result.ok, result


# --- tenant API, nodes, capacity --------------------------------------------------------------


def test_tenant_api_down_skips_the_in_tenant_checks(platform, clock):
    platform.tenants["tenant-a"].down = True
    results = check(platform, clock)
    assert list(results) == ["control plane Ready", "tenant API answers", "isolated from tenant-b",
                             "network isolation probes", "NetworkPolicies (management)", ENFORCED_ROW]
    assert not results["tenant API answers"].ok
    assert "not run: tenant-a's API server does not answer" in results["network isolation probes"].detail
    assert "https://172.18.255.200:6443 did not answer" in results["tenant API answers"].detail
    assert "metallb-system" in results["tenant API answers"].fix
    assert platform.tenants["tenant-a"].created == []
    # tenant-b cannot prove it is isolated from an API server that does not answer.
    other = check(platform, clock, tenant="tenant-b")["isolated from tenant-a"]
    assert not other.ok and "isolation could not be tested" in other.detail


def test_stale_admin_credentials(platform, clock):
    platform.tenants["tenant-a"].tokens = {"rotated"}
    result = check(platform, clock)["tenant API answers"]
    assert not result.ok
    assert "refused the stack's admin credentials (HTTP 401: Unauthorized)" in result.detail
    assert "stale" in result.detail


def test_node_missing(platform, clock):
    platform.tenants["tenant-a"].nodes = []
    results = check(platform, clock)
    result = results["node tenant-a-worker-0 Ready"]
    assert not result.ok and "not registered in the tenant → the worker did not join" in result.detail
    assert "docker logs tenant-a-worker-0" in result.fix
    assert "node tenant-a-worker-0 GPU capacity" not in results
    assert not results["probe got a GPU slice"].ok


def test_node_not_ready(platform, clock):
    platform.tenants["tenant-a"].nodes = [node(
        "tenant-a-worker-0", {"nvidia.com/gpu": "10", "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "100"},
        ready="False", reason="KubeletNotReady",
        message="container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady")]
    results = check(platform, clock)
    result = results["node tenant-a-worker-0 Ready"]
    assert not result.ok
    assert "Ready=False (KubeletNotReady: container runtime network not ready" in result.detail
    assert "calico-system" in result.fix
    assert results["node tenant-a-worker-0 GPU capacity"].ok


def test_mock_memory_capacity_mismatch(platform, clock):
    platform.tenants["tenant-a"].nodes[0]["status"]["capacity"]["nvidia.com/gpumem"] = "0"
    results = check(platform, clock)
    result = results["node tenant-a-worker-0 GPU capacity"]
    assert set(failed(results)) == {"node tenant-a-worker-0 GPU capacity"}
    assert result.detail.startswith(
        "advertises gpu=10 gpumem=0 gpucores=100, plan expects gpu=10 gpumem=8192 gpucores=100")
    assert "mock device plugin has not registered" in result.detail
    assert "ds/hami-mock-device-plugin" in result.fix


def test_mock_gpu_count_mismatch_points_at_the_status_patch(platform, clock):
    del platform.tenants["tenant-a"].nodes[0]["status"]["capacity"]["nvidia.com/gpu"]
    result = check(platform, clock)["node tenant-a-worker-0 GPU capacity"]
    assert not result.ok
    assert "advertises gpu=0" in result.detail and "status patch is missing or stale" in result.detail


def test_unparseable_capacity(platform, clock):
    platform.tenants["tenant-a"].nodes[0]["status"]["capacity"]["nvidia.com/gpu"] = "lots"
    result = check(platform, clock)["node tenant-a-worker-0 GPU capacity"]
    assert not result.ok and "unreadable GPU capacity" in result.detail


def test_nvidia_mode_reports_what_the_node_advertises():
    platform = healthy_platform(gpu_mode="nvidia")
    capacity = platform.tenants["tenant-a"].nodes[0]["status"]["capacity"]
    capacity.update({"nvidia.com/gpu": "40"})
    del capacity["nvidia.com/gpumem"]
    result = check(platform, FakeClock())["node tenant-a-worker-0 GPU capacity"]
    assert result.ok
    assert result.detail == "advertises gpu=40 gpumem=0 gpucores=100"
    capacity["nvidia.com/gpu"] = "0"
    result = check(platform, FakeClock())["node tenant-a-worker-0 GPU capacity"]
    assert not result.ok and "advertises no nvidia.com/gpu" in result.detail
    assert "ds/hami-device-plugin" in result.fix


# --- Konnectivity and HAMi --------------------------------------------------------------------


def test_konnectivity_agent_not_ready(platform, clock):
    platform.tenants["tenant-a"].daemon_sets[("kube-system", "konnectivity-agent")]["status"]["numberReady"] = 0
    result = check(platform, clock)["Konnectivity agent ready"]
    assert not result.ok
    assert result.detail == ("0/1 agents ready → Konnectivity agent not ready → tenant API server cannot reach "
                             "webhooks")
    assert "`kubectl -n kube-system logs ds/konnectivity-agent` and the CNI" in result.fix


def test_konnectivity_agent_scheduled_nowhere_or_missing(platform, clock):
    status = platform.tenants["tenant-a"].daemon_sets[("kube-system", "konnectivity-agent")]["status"]
    status.update(desiredNumberScheduled=0, numberReady=0)
    assert not check(platform, clock)["Konnectivity agent ready"].ok
    platform.tenants["tenant-a"].daemon_sets.clear()
    result = check(platform, clock)["Konnectivity agent ready"]
    assert not result.ok and "not found" in result.detail and "spec.addons.konnectivity" in result.fix


def test_hami_scheduler_not_ready_or_missing(platform, clock):
    del platform.tenants["tenant-a"].deployments[("kube-system", "hami-scheduler")]["status"]["readyReplicas"]
    result = check(platform, clock)["HAMi scheduler ready"]
    assert not result.ok and "has no ready replica" in result.detail
    assert "logs deploy/hami-scheduler -c vgpu-scheduler-extender" in result.fix
    platform.tenants["tenant-a"].deployments.clear()
    result = check(platform, clock)["HAMi scheduler ready"]
    assert not result.ok and "HAMi is not installed" in result.detail


def test_hami_webhook_missing(platform, clock):
    platform.tenants["tenant-a"].webhooks.clear()
    result = check(platform, clock)["HAMi webhook (failurePolicy Fail)"]
    assert not result.ok
    assert "MutatingWebhookConfiguration hami-webhook not found" in result.detail


def test_hami_webhook_failure_policy_ignore(platform, clock):
    platform.tenants["tenant-a"].webhooks["hami-webhook"]["webhooks"][0]["failurePolicy"] = "Ignore"
    results = check(platform, clock)
    assert set(failed(results)) == {"HAMi webhook (failurePolicy Fail)"}
    result = results["HAMi webhook (failurePolicy Fail)"]
    assert "failurePolicy vgpu.hami.io=Ignore → a broken tunnel silently admits GPU pods" in result.detail
    assert "scheduler.admissionWebhook.failurePolicy=Fail" in result.fix


# --- the probe pod ----------------------------------------------------------------------------


def test_probe_rejected_by_the_webhook_names_the_tunnel(platform, clock):
    cluster = platform.tenants["tenant-a"]
    cluster.admission = "reject"
    results = check(platform, clock)
    result = results["probe admitted by HAMi webhook"]
    assert not result.ok
    assert 'failed calling webhook "vgpu.hami.io"' in result.detail
    assert "through the Konnectivity tunnel" in result.detail
    assert "probe got a GPU slice" not in results
    assert cluster.created == [] and cluster.deleted == []
    # The dead webhook refuses the network probes too: one attempt, then the same refusal for the rest; the dry
    # run labelled past it never reaches it.
    assert cluster.requests.count("create pods") == 3
    for row in [*NETWORK_ROWS, "pod → image caches"]:
        if row == "pod → tenant-b node ports":  # none exists, so there is nothing to probe
            assert results[row].ok
            continue
        assert not results[row].ok and "No agent available" in results[row].detail


def test_probe_refused_for_another_reason(platform, clock):
    platform.tenants["tenant-a"].admission = "over-quota"
    result = check(platform, clock)["probe admitted by HAMi webhook"]
    assert not result.ok
    assert QUOTA_REJECTION in result.detail
    assert "tunnel" not in result.detail


def test_probe_not_mutated_by_the_webhook(platform, clock):
    cluster = platform.tenants["tenant-a"]
    cluster.admission = "skipped"
    results = check(platform, clock)
    result = results["probe admitted by HAMi webhook"]
    assert not result.ok
    assert result.detail == ("schedulerName is default-scheduler → admission did not go through HAMi's webhook "
                             "(Konnectivity tunnel or hami-webhook down)")
    assert "probe got a GPU slice" not in results
    assert_probe_cleaned_up(cluster)
    clock = FakeClock()
    assert len(_probe(admin(platform), clock)) == 1
    assert clock.sleeps == []


def test_probe_never_allocated_times_out_bounded(platform, clock):
    cluster = platform.tenants["tenant-a"]
    cluster.allocate_on_read = None
    (_, result) = _probe(admin(platform), clock, timeout=5, interval=1)
    assert not result.ok
    assert result.detail.startswith(
        "no GPU allocated within 5 s (not bound: Unschedulable: 0/1 nodes are available: 1 NodeUnfitPod.)")
    assert clock.sleeps == [1] * 5
    assert cluster.pod_reads == 6
    assert "vgpu-scheduler-extender" in result.fix
    assert_probe_cleaned_up(cluster)


def test_default_wait_is_sixty_seconds_of_one_second_polls(platform, clock):
    platform.tenants["tenant-a"].allocate_on_read = None
    assert not probe_gpu_pod(admin(platform), ProbeRequest(1, 3000, 30),
                             Waiting(now=clock.now, sleep=clock.sleep))[-1].ok
    assert clock.sleeps == [1.0] * 60


def test_probe_bound_without_hami_annotations(platform, clock):
    cluster = platform.tenants["tenant-a"]
    cluster.allocate_on_read = 1
    cluster.allocated_devices = ""
    result = check(platform, clock, timeout=2)["probe got a GPU slice"]
    assert not result.ok
    assert "(bound to tenant-a-worker-0 without hami.io/vgpu-devices-allocated)" in result.detail
    assert_probe_cleaned_up(cluster)


def test_probe_survives_failed_reads(platform, clock):
    cluster = platform.tenants["tenant-a"]
    cluster.failing_pod_reads = 2
    assert _probe(admin(platform), clock)[-1].ok
    assert clock.sleeps == [1.0, 1.0, 1.0]
    assert_probe_cleaned_up(cluster)


class _Vanishing(FakeSession):
    def find(self, kind, name, namespace=None):
        found = super().find(kind, name, namespace)
        return None if kind == "Pod" else found


class _Broken(FakeSession):
    def find(self, kind, name, namespace=None):
        raise RuntimeError("bug while polling")


class _Sticky(FakeSession):
    def delete(self, kind, name, namespace=None, **options):
        raise UnreachableError("connection reset")


def test_probe_pod_that_disappears(platform, clock):
    cluster = platform.tenants["tenant-a"]
    results = _probe(_Vanishing(cluster, "tenant-a-admin-token"), clock)
    assert [r.ok for r in results] == [True, False]
    assert "disappeared before it was scheduled" in results[1].detail
    assert_probe_cleaned_up(cluster)


def test_probe_pod_is_deleted_even_when_polling_crashes(platform, clock):
    cluster = platform.tenants["tenant-a"]
    with pytest.raises(RuntimeError):
        _probe(_Broken(cluster, "tenant-a-admin-token"), clock)
    assert_probe_cleaned_up(cluster)


def test_probe_pod_that_cannot_be_deleted_is_reported(platform, clock):
    cluster = platform.tenants["tenant-a"]
    results = _probe(_Sticky(cluster, "tenant-a-admin-token"), clock)
    assert [r.name for r in results] == ["probe admitted by HAMi webhook", "probe got a GPU slice",
                                         "probe pod deleted"]
    pod_name = cluster.created[0]["metadata"]["name"]
    assert not results[2].ok and results[2].fix == f"in the tenant: kubectl -n default delete pod {pod_name}"


class _Misbound(FakeSession):
    """A pod bound to another node than the one HAMi allocated on (a bind that bypassed HAMi's extender)."""

    def find(self, kind, name, namespace=None):
        pod = super().find(kind, name, namespace)
        if kind == "Pod" and pod and pod["spec"].get("nodeName"):
            pod["spec"]["nodeName"] = "tenant-a-worker-9"
        return pod


def test_probe_bound_elsewhere_than_hami_allocated_fails_as_the_smoke_test_does(platform, clock):
    cluster = platform.tenants["tenant-a"]
    result = _probe(_Misbound(cluster, "tenant-a-admin-token"), clock, timeout=2)[-1]
    assert (result.name, result.ok) == ("probe got a GPU slice", False)
    assert "(bound to node tenant-a-worker-9 but HAMi allocated its GPU on tenant-a-worker-0)" in result.detail
    assert_probe_cleaned_up(cluster)


# --- isolation: credentials -------------------------------------------------------------------


def test_isolation_breach(platform, clock):
    platform.tenants["tenant-b"].tokens.add("tenant-a-admin-token")
    results = check(platform, clock)
    assert set(failed(results)) == {"isolated from tenant-b"}
    result = results["isolated from tenant-b"]
    assert "tenant-a's admin credentials listed 1 node(s) of tenant-b → the tenants share a CA or credentials" in (
        result.detail)
    assert check(platform, clock, tenant="tenant-b")["isolated from tenant-a"].ok


def test_isolation_breach_with_the_tenant_users_credential(platform, clock):
    platform.tenants["tenant-b"].tokens.add("tenant-a-user-token")
    result = check(platform, clock)["isolated from tenant-b"]
    assert not result.ok
    assert "tenant-a's user credentials listed 1 node(s) of tenant-b" in result.detail


def test_isolation_uses_own_users_with_the_other_cluster_entry(platform, clock):
    check(platform, clock)
    crossed = [k for k in platform.connect.kubeconfigs if k["current-context"] == "cross-tenant"]
    assert [k["clusters"][0]["cluster"]["server"] for k in crossed] == ["https://172.18.255.201:6443"] * 2
    assert [k["users"][0]["user"] for k in crossed] == [{"token": "tenant-a-admin-token"},
                                                        {"token": "tenant-a-user-token"}]


def test_isolation_accepts_403_but_not_other_answers(platform, clock):
    platform.tenants["tenant-b"].refusal = (403, 'nodes is forbidden: User "kubernetes-admin" cannot list')
    result = check(platform, clock)["isolated from tenant-b"]
    assert result.ok and "(HTTP 403)" in result.detail
    platform.tenants["tenant-b"].refusal = (500, "etcdserver: request timed out")
    result = check(platform, clock)["isolated from tenant-b"]
    assert not result.ok
    assert ("answered tenant-a's admin credentials with HTTP 500: etcdserver: request timed out and user credentials "
            "with HTTP 500: etcdserver: request timed out, not 401/403") in result.detail


def test_cross_tenant_kubeconfig():
    own = yaml.safe_load(kubeconfig_yaml("tenant-a", "https://a:6443", "token-a"))
    other = yaml.safe_load(kubeconfig_yaml("tenant-b", "https://b:6443", "token-b"))
    crossed = cross_tenant_kubeconfig(own, other)
    assert crossed["clusters"] == [{"name": "other-tenant", "cluster": other["clusters"][0]["cluster"]}]
    assert crossed["users"] == [{"name": "this-tenant", "user": {"token": "token-a"}}]
    assert "token-b" not in json.dumps(crossed)
    assert crossed["contexts"][0]["context"] == {"cluster": "other-tenant", "user": "this-tenant"}
    broken = dict(own, contexts=[{"name": own["current-context"], "context": {"cluster": "gone", "user": "x"}}])
    with pytest.raises(ValueError, match="no cluster named 'gone'"):
        cross_tenant_kubeconfig(broken, other)


def test_single_tenant_has_no_isolation_rows():
    platform = healthy_platform(tenants=["solo"])
    results = check(platform, FakeClock(), tenant="solo")
    assert not any(name.startswith(("isolated", "network")) for name in results)
    # Only the image caches are probed from its pods: there is no other tenant.
    assert [name for name in results if name.startswith("pod →")] == ["pod → image caches"]
    assert statuses(results) == {ENFORCED_ROW: "NOT ENFORCED"}
    assert len(network_probes(platform.tenants["solo"])) == 6


# --- isolation: the network, from a pod in the tenant -----------------------------------------

# A prod-shaped pair: each team's servers in its own workerCidrs, the management nodes shared, operators admitted
# by both (as in Pulumi.prod.example.yaml). Sharing the operator network does not make A's pods B's clients.
PROD_RANGES = {"tenant-a": ["10.20.0.0/24", "10.20.1.0/24", "10.30.0.0/24"],
               "tenant-b": ["10.20.0.0/24", "10.20.2.0/24", "10.30.0.0/24"]}


def separate_networks(platform):
    """Per-tenant worker networks (no kind network, as on an adopted cluster): the tenants share no worker network."""
    platform.outputs.update(kindSubnet=None, workerNetworks=["10.20.0.0/24"])
    for index, name in enumerate(("tenant-a", "tenant-b")):
        platform.outputs["plan"]["tenants"][name]["workerCidrs"] = [f"10.20.{index + 1}.0/24"]
        platform.outputs["tenants"][name]["sourceRanges"] = PROD_RANGES[name]
        # The fence the program writes for them: the workers both ways, the operators (10.30.0.0/24) in.
        platform.management.network_policies[name] = [
            isolation_network_policy(name, ["10.20.0.0/24", f"10.20.{index + 1}.0/24"], ["10.30.0.0/24"])]
    return platform


def reach(platform, outcome, ports=(6443, 8132), source="tenant-a", target="tenant-b"):
    host = platform.outputs["tenants"][target]["endpoint"].split(":")[0]
    platform.tenants[source].reach.update({(host, port): outcome for port in ports})


@pytest.mark.parametrize("layout", ["shared", "separate"])
@pytest.mark.parametrize("outcome, ok_when_shared, ok_when_separate", [
    ("connected", True, False),
    ("refused", True, True),
    ("filtered", True, True),
    ("hang", True, True),  # still running past the deadline: the kubelet did not act, nothing answered
])
def test_network_probe_verdicts(platform, clock, layout, outcome, ok_when_shared, ok_when_separate):
    if layout == "separate":
        separate_networks(platform)
    reach(platform, outcome)
    results = check(platform, clock)
    expected = ok_when_shared if layout == "shared" else ok_when_separate
    for row in NETWORK_ROWS[:2]:
        assert results[row].ok is expected, results[row]
    assert results["pod → tenant-b data store"].status == "SKIP"
    assert_probe_cleaned_up(platform.tenants["tenant-a"])


def test_connected_by_design_says_so_plainly(platform, clock):
    result = check(platform, clock)["pod → tenant-b API"]
    assert result.ok
    assert result.detail == (
        "connected to 172.18.255.201:6443: reachable by design: both admit 172.18.0.0/16; separate them with "
        "tenants[].workerCidrs; tenant-b still refuses tenant-a's credentials, see 'isolated from tenant-b'")


def test_shared_management_worker_cidrs_are_shared_by_design(platform, clock):
    # No per-tenant workerCidrs: every tenant's servers are in management.workerCidrs, which every tenant admits.
    platform.outputs.update(kindSubnet=None, workerNetworks=["10.20.0.0/16"])
    for name in ("tenant-a", "tenant-b"):
        platform.outputs["tenants"][name]["sourceRanges"] = ["10.20.0.0/16", "10.30.0.0/24"]
    result = check(platform, clock)["pod → tenant-b Konnectivity"]
    assert result.ok and "reachable by design: both admit 10.20.0.0/16;" in result.detail


def test_connection_between_separated_tenants_fails_with_the_fix(clock):
    platform = separate_networks(healthy_platform())
    reach(platform, "connected")
    results = check(platform, clock)
    assert set(failed(results)) == {"pod → tenant-b API", "pod → tenant-b Konnectivity"}
    result = results["pod → tenant-b Konnectivity"]
    assert result.detail == (
        "tenant-a's pod connected to tenant-b's Konnectivity server at 172.18.255.201:8132 → tenant-b admits only "
        "10.20.0.0/24, 10.20.2.0/24, 10.30.0.0/24, none of tenant-a's worker networks (10.20.1.0/24)")
    assert "kubectl -n tenant-b get svc tenant-b -o jsonpath='{.spec.loadBalancerSourceRanges}'" in result.fix
    assert "kube-proxy must enforce them" in result.fix
    # The operators' network is in both lists; it is not where tenant-a's pods come from.
    assert shared_networks(["10.20.1.0/24"], PROD_RANGES["tenant-b"]) == ()
    assert shared_networks(PROD_RANGES["tenant-a"], PROD_RANGES["tenant-b"]) != ()


def test_separated_and_filtered_is_ok_and_says_why(clock):
    platform = separate_networks(healthy_platform())
    reach(platform, "filtered")
    result = check(platform, clock)["pod → tenant-b API"]
    assert result.ok
    assert result.detail == (f"172.18.255.201:6443 filtered (no answer within {NETWORK_PROBE_DEADLINE} s): "
                             "tenant-b admits only 10.20.0.0/24, 10.20.2.0/24, 10.30.0.0/24")


def test_refused_carries_bashs_message(platform, clock):
    reach(platform, "refused")
    result = check(platform, clock)["pod → tenant-b API"]
    assert result.ok
    assert result.detail.startswith("172.18.255.201:6443 refused (bash: connect: Connection refused): although both "
                                    "admit 172.18.0.0/16")


def test_connection_without_source_ranges_in_the_outputs_cannot_be_judged(platform, clock):
    del platform.outputs["tenants"]["tenant-b"]["sourceRanges"]
    result = check(platform, clock)["pod → tenant-b API"]
    assert not result.ok and "no tenants.tenant-b.sourceRanges" in result.detail and "make up" in result.fix


@pytest.mark.parametrize("outcome, ok", [("unresolvable", True), ("filtered", True), ("refused", True),
                                         ("connected", False)])
def test_data_store_must_never_be_reachable(platform, clock, outcome, ok):
    for index in range(3):
        platform.tenants["tenant-b"].reach[(f"kamaji-etcd-{index}.kamaji-etcd.kamaji-system.svc.cluster.local",
                                            2379)] = outcome
    result = check(platform, clock, tenant="tenant-b")["pod → tenant-a data store"]
    assert result.ok is ok, result
    if not ok:
        assert "tenant-b's pod connected to kamaji-etcd-0.kamaji-etcd.kamaji-system.svc.cluster.local:2379" in (
            result.detail)
        assert "data store default is reachable from tenant workloads" in result.detail


def test_data_store_endpoints_and_pod_addresses_are_probed(platform, clock):
    results = check(platform, clock, tenant="tenant-b")
    assert results["pod → tenant-a data store"].detail == (
        "data store default: kamaji-etcd-0.kamaji-etcd.kamaji-system.svc.cluster.local:2379, "
        "kamaji-etcd-1.kamaji-etcd.kamaji-system.svc.cluster.local:2379, "
        "kamaji-etcd-2.kamaji-etcd.kamaji-system.svc.cluster.local:2379 unresolvable; "
        f"10.244.0.10:2379, 10.244.0.11:2379, 10.244.0.12:2379 filtered (no answer within {NETWORK_PROBE_DEADLINE} s)")
    targets = {(env["HOST"], env["PORT"]) for env in (
        {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        for pod in network_probes(platform.tenants["tenant-b"]))}
    assert ("10.244.0.10", "2379") in targets and ("172.18.255.200", "8132") in targets
    assert results["pod → tenant-a data store"].status == "OK"


def test_data_store_nothing_could_reach_is_not_tested_rather_than_ok(platform, clock, tmp_path, capsys):
    """From tenant-a the etcd names do not resolve and the etcd pods' addresses lie inside its own pod network
    (10.244.0.0/16: probing them would only reach tenant-a's own pods): nothing was tried, so nothing is proven."""
    result = check(platform, clock)["pod → tenant-b data store"]
    assert (result.status, result.ok, result.failed) == ("SKIP", False, False)
    assert result.detail == (
        "not tested: kamaji-etcd-0.kamaji-etcd.kamaji-system.svc.cluster.local:2379, "
        "kamaji-etcd-1.kamaji-etcd.kamaji-system.svc.cluster.local:2379, "
        "kamaji-etcd-2.kamaji-etcd.kamaji-system.svc.cluster.local:2379 unresolvable; "
        "10.244.0.10, 10.244.0.11, 10.244.0.12 not probed (inside tenant-a's own 10.244.0.0/16) → no address of "
        "tenant-b's data store default was tried from tenant-a's pods")
    # Only names went out as probes: none of the skipped addresses did.
    hosts = {env["value"] for pod in network_probes(platform.tenants["tenant-a"])
             for env in pod["spec"]["containers"][0]["env"] if env["name"] == "HOST"}
    assert not hosts & {"10.244.0.10", "10.244.0.11", "10.244.0.12"}
    # A skip is printed as such and does not fail the run; the summary counts it apart from the OKs.
    code, out, _ = run_main(healthy_platform(), tmp_path, FakeClock(), capsys)
    assert code == 0
    assert f"45 checks OK, 1 skipped (tenant-a: 1), {LAB_LOOSE}" in out


def test_a_row_whose_names_do_not_resolve_is_not_tested(platform, clock):
    """The API and Konnectivity rows follow the same rule: an endpoint name a tenant pod cannot resolve tested
    nothing, whatever the source ranges say."""
    platform.outputs["tenants"]["tenant-b"]["endpoint"] = "tenant-b.cp.example:6443"
    results = check(platform, clock)
    for row in ("pod → tenant-b API", "pod → tenant-b Konnectivity"):
        assert results[row].status == "SKIP", results[row]
        assert results[row].detail.startswith("not tested: tenant-b.cp.example:")
    assert "tenant-b.cp.example:8132 unresolvable" in results["pod → tenant-b Konnectivity"].detail


def test_data_store_comes_from_the_control_planes_status(platform, clock):
    platform.management.datastores["tenant-b-etcd"] = {"spec": {"endpoints": ["etcd-b.example:2379"]}}
    tcp = platform.management.tenant_control_planes[("tenant-b", "tenant-b")]
    tcp["status"]["storage"]["dataStoreName"] = "tenant-b-etcd"
    result = check(platform, clock)["pod → tenant-b data store"]
    assert result.status == "SKIP"
    assert result.detail == ("not tested: etcd-b.example:2379 unresolvable → no address of tenant-b's data store "
                             "tenant-b-etcd was tried from tenant-a's pods")
    # Once its address answers the probe (even a refusal), the row is a real verdict.
    platform.tenants["tenant-a"].reach[("etcd-b.example", 2379)] = "refused"
    result = check(platform, clock)["pod → tenant-b data store"]
    assert result.status == "OK"
    assert result.detail.startswith("data store tenant-b-etcd: etcd-b.example:2379 refused")
    del platform.management.datastores["tenant-b-etcd"]
    result = check(platform, clock)["pod → tenant-b data store"]
    assert not result.ok and result.detail == "not tested: DataStore tenant-b-etcd not found on the management cluster"


@pytest.mark.parametrize("outcome, message", [
    ("pending", "did not start within 60 s (ErrImagePull: failed to pull and unpack image quay.io/calico/node:"),
    ("unstarted-deadline", "the deadline passed before the container started (ContainerCreating)"),
])
def test_a_probe_that_never_ran_is_not_a_verdict(platform, clock, outcome, message):
    reach(platform, outcome, ports=(6443,))
    results = check(platform, clock)
    result = results["pod → tenant-b API"]
    assert not result.ok
    assert result.detail.startswith("not tested: 172.18.255.201:6443: ") and message in result.detail
    assert "quay.io/calico/node" in result.fix
    assert results["pod → tenant-b Konnectivity"].ok
    assert_probe_cleaned_up(platform.tenants["tenant-a"])


def test_probes_run_together_and_wait_a_bounded_time(platform, clock):
    reach(platform, "hang")
    check(platform, clock)
    # The GPU probe's one pause, then one poll round per second for all network probes: Pending, Running from
    # the next read on, called filtered once deadline + grace (15 s) have passed. Then the management probes:
    # dropped, so ended by their activeDeadlineSeconds after four rounds.
    assert clock.sleeps == [1.0] + [1.0] * 16 + [1.0] * 4
    platform = healthy_platform()
    reach(platform, "pending", ports=(6443,))
    clock = FakeClock()
    check(platform, clock, timeout=5)
    assert clock.sleeps == [1.0] + [1.0] * 5 + [1.0] * 4


def test_probe_runs_as_the_tenant_user_in_its_namespace(platform, clock):
    cluster = platform.tenants["tenant-a"]
    user = yaml.safe_load(platform.outputs["tenantKubeconfigs"]["tenant-a"])
    user["contexts"][0]["context"]["namespace"] = "training"
    platform.outputs["tenantKubeconfigs"]["tenant-a"] = yaml.safe_dump(user)
    cluster.user_tokens["tenant-a-user-token"] = "training"
    cluster.baseline_namespaces.add("training")
    results = check(platform, clock)
    assert [results[row].status for row in NETWORK_ROWS] == ["OK", "OK", "OK", "OK", "SKIP"]
    assert {pod["metadata"]["namespace"] for pod in network_probes(cluster)} == {"training"}
    assert_probe_cleaned_up(cluster)
    # The user may not create pods elsewhere: the probe says so instead of guessing.
    cluster.user_tokens["tenant-a-user-token"] = "default"
    result = check(platform, clock)["pod → tenant-b API"]
    assert not result.ok and 'cannot create resource "pods"' in result.detail and 'namespace "training"' in result.detail


def test_probe_pod_passes_pod_security_baseline_and_asks_for_no_gpu(platform):
    _, target = platform_from_outputs(platform.outputs)
    pod = network_probe_pod(target.network_probe_image, "172.18.255.201", 6443, "default", "tenant-b API server")
    assert baseline_violations(pod) == []
    spec = pod["spec"]
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    (container,) = spec["containers"]
    assert container["securityContext"]["privileged"] is False
    assert not any("nvidia.com" in resource for kind in container["resources"].values() for resource in kind)
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert 5 <= spec["activeDeadlineSeconds"] <= 15
    assert container["command"] == ["bash", "-c", NETWORK_PROBE_SCRIPT.read_text()]
    assert container["env"] == [{"name": "HOST", "value": "172.18.255.201"}, {"name": "PORT", "value": "6443"}]
    # calico-node's image at the plan's Calico version: what Calico's DaemonSet already put on every worker.
    assert container["image"] == f"quay.io/calico/node:{Versions().calico}"
    assert container["image"] in worker_images(Versions(), "v1.35.0", "mock")
    # The checker is not vacuous: what baseline forbids, it reports.
    bad = copy.deepcopy(pod)
    bad["spec"]["hostNetwork"] = True
    bad["spec"]["containers"][0]["securityContext"].update(privileged=True, capabilities={"add": ["NET_ADMIN"]})
    assert baseline_violations(bad) == ["hostNetwork=true", "container probe privileged=true",
                                        "container probe adds capabilities ['NET_ADMIN']"]


def test_a_privileged_probe_would_be_refused_by_pod_security(platform, clock, monkeypatch):
    def host_network(*args):
        pod = network_probe_pod(*args)
        pod["spec"]["hostNetwork"] = True
        return pod

    monkeypatch.setattr(verify_checks, "network_probe_pod", host_network)
    result = check(platform, clock)["pod → tenant-b API"]
    assert not result.ok and 'violates PodSecurity "baseline:latest": hostNetwork=true' in result.detail
    assert network_probes(platform.tenants["tenant-a"]) == []


class _CrashingReads(FakeSession):
    def find(self, kind, name, namespace=None):
        if kind == "Pod":
            raise RuntimeError("bug while polling")
        return super().find(kind, name, namespace)


class _StickyProbes(FakeSession):
    def delete(self, kind, name, namespace=None, **options):
        if name.startswith("verify-net-"):
            raise UnreachableError("connection reset")
        return super().delete(kind, name, namespace, **options)


@pytest.mark.parametrize("session, raises", [(_CrashingReads, True), (_StickyProbes, False)])
def test_probe_pods_are_deleted_or_reported_in_every_path(platform, clock, session, raises):
    cluster = platform.tenants["tenant-a"]
    management_kubeconfig, target = platform_from_outputs(platform.outputs)

    def connect(kubeconfig):
        api = platform.connect(kubeconfig)
        return session(api.cluster, api.token) if api.cluster is cluster else api

    if raises:
        with pytest.raises(RuntimeError):
            verify_checks.check_network_isolation(target, target.tenants["tenant-a"],
                                                  platform.connect(management_kubeconfig), connect, waiting_on(clock))
        assert_probe_cleaned_up(cluster)
        return
    results = verify_checks.check_network_isolation(target, target.tenants["tenant-a"],
                                                    platform.connect(management_kubeconfig), connect,
                                                    waiting_on(clock))
    leftovers = [r for r in results if r.name.startswith("probe pod ")]
    assert [r.ok for r in leftovers] == [False] * len(network_probes(cluster)) == [False] * 7
    assert leftovers[0].fix == f"in the tenant: kubectl -n default delete pod {network_probes(cluster)[0]['metadata']['name']}"


@pytest.mark.parametrize("pod, verdict", [
    ({"status": {"phase": "Pending"}}, None),
    ({"status": {"phase": "Running", "containerStatuses": [{"state": {"running": {"startedAt": "t"}}}]}}, None),
    ({"status": {"phase": "Succeeded"}}, ("connected", "connected")),
    ({"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {
        "exitCode": 1, "startedAt": "t", "message": "bash: connect: No route to host\nbash: ..."}}}]}},
     ("refused", "bash: connect: No route to host")),
    ({"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {
        "exitCode": 1, "startedAt": "t", "message": "bash: etcd: host unknown"}}}]}},
     ("unresolvable", "bash: etcd: host unknown")),
    ({"status": {"phase": "Failed", "reason": "DeadlineExceeded", "containerStatuses": [{"state": {"terminated": {
        "exitCode": 137, "startedAt": "t"}}}]}}, ("filtered", f"no answer within {NETWORK_PROBE_DEADLINE} s")),
    ({"status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}},
     ("not run", "the pod failed (Evicted: low on memory)")),
])
def test_probe_verdicts(pod, verdict):
    assert probe_verdict(pod) == verdict


def test_bash_really_exits_as_the_classifier_expects(tmp_path):
    """The probe's command on this machine: 0 when something listens, 1 with bash's message otherwise."""
    def run(host, port):
        return subprocess.run(["bash", "-c", NETWORK_PROBE_SCRIPT.read_text()], env={"HOST": host, "PORT": str(port)},
                               capture_output=True, text=True, timeout=10)

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert run("127.0.0.1", listener.getsockname()[1]).returncode == 0
        closed = listener.getsockname()[1]
    refused = run("127.0.0.1", closed)
    unresolved = run("name.invalid", 2379)
    for done, outcome in ((refused, "refused"), (unresolved, "unresolvable")):
        pod = {"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {
            "exitCode": done.returncode, "startedAt": "t", "message": done.stderr}}}]}}
        assert done.returncode == 1
        assert probe_verdict(pod)[0] == outcome, done.stderr


# --- stack outputs ----------------------------------------------------------------------------


def test_outputs_missing_a_tenant(platform, clock, tmp_path, capsys):
    del platform.outputs["tenants"]["tenant-b"]
    code, out, _ = run_main(platform, tmp_path, clock, capsys)
    assert code == 1
    assert "tenant-b is planned but missing from the output tenants → this tenant cannot be checked" in out
    assert "isolated from tenant-b" not in out and "pod → tenant-b" not in out
    assert out.rstrip().endswith("verify failed: 1 of 22 checks failed (tenant-b: 1), 1 not enforced (tenant-a: 1)")


def test_outputs_missing_a_tenant_kubeconfig_or_plan_entry(platform):
    del platform.outputs["tenantKubeconfigs"]["tenant-a"]
    del platform.outputs["tenantAdminKubeconfigs"]["tenant-a"]
    platform.outputs["tenants"]["tenant-c"] = dict(platform.outputs["tenants"]["tenant-b"])
    _, target = platform_from_outputs(platform.outputs)
    assert list(target.tenants) == ["tenant-b"]
    assert target.incomplete == {
        "tenant-a": "tenant-a is planned but missing from the output tenantAdminKubeconfigs and tenantKubeconfigs",
        "tenant-c": "tenant-c is in the output `tenants` but not in the plan (outputs of an older run?)",
    }


def test_admin_checks_use_the_admin_kubeconfig_and_probes_the_users(platform, clock):
    """tenantKubeconfigs holds the tenants' restricted credential, which may not list nodes: the in-tenant checks
    need tenantAdminKubeconfigs."""
    check(platform, clock)
    cluster = platform.tenants["tenant-a"]
    assert {session.token for session in cluster.sessions} == {"tenant-a-admin-token", "tenant-a-user-token"}
    # tenant-b sees tenant-a's two credentials knocking (and refuses both), and its own admin credential reading
    # its nodes and HAMi's Service for the extender probe.
    assert {s.token for s in platform.tenants["tenant-b"].sessions} == {"tenant-a-admin-token", "tenant-a-user-token",
                                                                       "tenant-b-admin-token"}
    # The network probes and the GPU pod past HAMi run as the user.
    users = [session for session in cluster.sessions if session.token == "tenant-a-user-token"]
    assert len(users) == 2
    with pytest.raises(ApiError, match='User "system:serviceaccount:kube-system:tenant-user" cannot list'):
        users[0].list("Node")
    assert {pod["metadata"]["namespace"] for pod in cluster.created} == {"default"}


@pytest.mark.parametrize("mutate, message", [
    (lambda o: o.pop("plan"), "the stack outputs lack plan: run `make up`"),
    (lambda o: o.update(managementKubeconfig="[secret]"), "save the outputs with `pulumi stack output --json --show-secrets`"),
    (lambda o: o.update(managementKubeconfig="- a\n- list"), "managementKubeconfig is not a kubeconfig"),
    (lambda o: o.update(tenantKubeconfigs="[secret]"), "tenantKubeconfigs is hidden"),
    (lambda o: o.update(tenantAdminKubeconfigs="[secret]"), "tenantAdminKubeconfigs is hidden"),
    (lambda o: o.pop("tenantAdminKubeconfigs"), "the stack outputs lack tenantAdminKubeconfigs: run `make up`"),
    (lambda o: o.update(tenants=["tenant-a"]), "the output tenants is not a map"),
    (lambda o: o["plan"].pop("smokeTest"), "plan.smokeTest needs gpus, memoryMiB and cores"),
    (lambda o: (o["plan"]["tenants"].clear(), o["tenants"].clear()), "the plan has no tenants"),
])
def test_unusable_outputs_exit_2(platform, clock, tmp_path, capsys, mutate, message):
    mutate(platform.outputs)
    code, out, err = run_main(platform, tmp_path, clock, capsys)
    assert code == 2
    assert out == ""
    assert message in err


# A kubeconfig whose key line is broken: PyYAML's message would quote that line, key and all.
BROKEN_KUBECONFIG = ("apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n"
                     "    client-key-data: c2VjcmV0LWtleQ: oops\n")


@pytest.mark.parametrize("output", ["tenantAdminKubeconfigs", "managementKubeconfig"])
def test_a_kubeconfig_that_is_not_yaml_is_reported_without_its_content(platform, clock, tmp_path, capsys, output):
    with pytest.raises(yaml.YAMLError) as raw:
        yaml.safe_load(BROKEN_KUBECONFIG)
    assert "c2VjcmV0LWtleQ" in str(raw.value)  # what the message must not pass on
    if output == "managementKubeconfig":
        platform.outputs[output] = BROKEN_KUBECONFIG
    else:
        platform.outputs[output]["tenant-b"] = BROKEN_KUBECONFIG
    code, out, err = run_main(platform, tmp_path, clock, capsys)
    assert "c2VjcmV0LWtleQ" not in out + err
    where = f"{output}{'.tenant-b' if output != 'managementKubeconfig' else ''}"
    assert f"{where} is not YAML (error at line 6, column 36)" in out + err
    assert code == (2 if output == "managementKubeconfig" else 1)


def _tenant_description_is_a_string(outputs):
    outputs["tenants"]["tenant-a"] = "tenant-a"


def _planned_tenants_is_a_list(outputs):
    outputs["plan"]["tenants"] = ["tenant-a", "tenant-b"]


@pytest.mark.parametrize("breakage", [_tenant_description_is_a_string, _planned_tenants_is_a_list])
def test_an_unexpected_error_exits_2_in_one_line(platform, clock, tmp_path, capsys, breakage):
    """1 means "a check failed": an error verify did not foresee is not a verdict on the platform."""
    breakage(platform.outputs)
    code, out, err = run_main(platform, tmp_path, clock, capsys)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("verify: stopped by an unexpected ")
    assert "Traceback" not in err


def test_a_crash_in_a_check_exits_2_and_still_closes_every_client(platform, clock, tmp_path, capsys, monkeypatch):
    def crash(*args):
        raise KeyError("controlPlaneEndpoint")

    monkeypatch.setattr(verify_checks, "check_konnectivity_agent", crash)
    code, out, err = run_main(platform, tmp_path, clock, capsys)
    assert code == 2
    assert err == ("verify: stopped by an unexpected KeyError: 'controlPlaneEndpoint' (malformed stack outputs? "
                   "run `make up`, then verify again)\n")
    assert "verify passed" not in out and "verify failed" not in out
    assert platform.connect.sessions() and all(session.closed for session in platform.connect.sessions())


def test_hidden_tenant_kubeconfig_is_a_failed_tenant(platform):
    platform.outputs["tenantKubeconfigs"]["tenant-b"] = "[secret]"
    _, target = platform_from_outputs(platform.outputs)
    assert "tenantKubeconfigs.tenant-b is hidden" in target.incomplete["tenant-b"]


@pytest.fixture(scope="module")
def dev_run():
    """The real program for the reference stack (one simulated run)."""
    return run_program(reference_stack())


@pytest.fixture(scope="module")
def dev_outputs(dev_run):
    """The stack outputs the real program exports for the reference stack."""
    return {name: output.value for name, output in dev_run.outputs.items()}


def test_the_programs_outputs_describe_what_verify_needs(dev_outputs):
    management_kubeconfig, target = platform_from_outputs(json.loads(json.dumps(dev_outputs)))
    assert management_kubeconfig["current-context"]
    assert target.incomplete == {}
    assert dev_outputs["plan"]["versions"]["calico"] == Versions().calico
    assert target.network_probe_image == f"quay.io/calico/node:{dev_outputs['plan']['versions']['calico']}"
    for name, tenant in target.tenants.items():
        assert tenant.endpoint == dev_outputs["tenants"][name]["endpoint"]
        assert tenant.source_ranges == (dev_outputs["kindSubnet"],)
        assert tenant.worker_networks == (dev_outputs["kindSubnet"],)
        assert tenant.data_store == dev_outputs["tenants"][name]["dataStore"]
        user = kube.current_context(tenant.user_kubeconfig)
        assert user.namespace == "default" and "token" in user.user
        assert tenant.kubeconfig != tenant.user_kubeconfig
    assert set(dev_outputs["imageMirror"]["caches"]) == {"docker.io", "quay.io", "registry.k8s.io"}
    # The nodes verify reads hosts.toml on: the kind node and each container worker, as Docker names them.
    assert dev_outputs["imageMirror"]["nodes"] == ["gpu-tenancy-control-plane", "tenant-a-worker-0",
                                                   "tenant-b-worker-0"]


def test_plan_names_calico_and_each_tenants_own_worker_networks(dev_config):
    dev_config["tenants"][1]["workerCidrs"] = ["10.20.2.0/24"]
    plan = plan_summary(load_stack_config(dev_config))
    assert plan["versions"] == {"calico": Versions().calico}
    assert [tenant["workerCidrs"] for tenant in plan["tenants"].values()] == [[], ["10.20.2.0/24"]]
    outputs = healthy_platform().outputs
    outputs["plan"] = plan
    _, target = platform_from_outputs(outputs)
    # Its own servers, and the kind network its container workers sit on.
    assert target.tenants["tenant-b"].worker_networks == ("172.18.0.0/16", "10.20.2.0/24")
    assert target.tenants["tenant-a"].worker_networks == ("172.18.0.0/16",)


def test_unusable_management_kubeconfig_exit_2(platform, clock, tmp_path, capsys):
    def refuse(kubeconfig):
        raise ValueError("unusable kubeconfig: Invalid kube-config file. No configuration found.")

    code = verify.main(["--outputs-file", platform.write_outputs(tmp_path)], connect=refuse,
                       waiting=waiting_on(clock))
    assert code == 2
    assert "managementKubeconfig: unusable kubeconfig" in capsys.readouterr().err


class FakeRun:
    def __init__(self, returncode=0, stdout="", stderr="", missing=False):
        self.result = (returncode, stdout, stderr)
        self.missing = missing
        self.calls = []

    def __call__(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        if self.missing:
            raise FileNotFoundError(2, "No such file or directory", "pulumi")
        return subprocess.CompletedProcess(argv, *self.result)


def test_reads_the_stack_outputs_with_pulumi(platform, clock, capsys):
    pulumi = FakeRun(stdout=json.dumps(platform.outputs))

    def run(argv, **kwargs):
        return (platform.docker if argv[0] == "docker" else pulumi)(argv, **kwargs)

    code = verify.main(["--stack", "lab"], run=run, connect=platform.connect, waiting=waiting_on(clock))
    assert code == 0
    ((argv, kwargs),) = pulumi.calls
    # One inspect for the caches' addresses, one for the times, then each cache's counters and each node's
    # hosts.toml.
    nodes = platform.outputs["imageMirror"]["nodes"]
    assert len(platform.docker.calls) == 2 + len(MIRRORED_REGISTRIES) + len(nodes)
    assert argv == ["pulumi", "stack", "output", "--json", "--show-secrets", "--stack", "lab"]
    assert kwargs["cwd"] == verify.ROOT
    assert (verify.ROOT / "Pulumi.yaml").is_file()
    assert kwargs["capture_output"] and kwargs["text"]
    assert "verify passed" in capsys.readouterr().out


def test_default_stack_is_dev():
    run = FakeRun(stdout='{"plan": {}}')
    assert read_stack_outputs("dev", run) == {"plan": {}}
    assert run.calls[0][0][-2:] == ["--stack", "dev"]


def test_pulumi_missing(capsys):
    from ops.hostcheck import PULUMI_MISSING

    assert verify.main([], run=FakeRun(missing=True)) == 2
    err = capsys.readouterr().err
    # The one install line, with its version and the PATH export.
    assert f"verify: {PULUMI_MISSING}; or pass --outputs-file" in err


def test_pulumi_failure_shows_stderr_but_never_stdout():
    run = FakeRun(returncode=255, stdout="apiVersion: v1\nclient-key-data: SECRET",
                  stderr="error: no stack named 'dev' found\n")
    with pytest.raises(OutputsError) as error:
        read_stack_outputs("dev", run)
    assert "error: no stack named 'dev' found" in str(error.value)
    assert "SECRET" not in str(error.value)


@pytest.mark.parametrize("stdout, message", [
    ("{}", "stack 'dev' has no outputs: run `make up` first"),
    ("", "stack 'dev' is not JSON"),
    ("[1, 2]", "stack 'dev' has no outputs"),
])
def test_pulumi_without_usable_outputs(stdout, message):
    with pytest.raises(OutputsError, match=message.replace("(", r"\(")):
        read_stack_outputs("dev", FakeRun(stdout=stdout))


def test_outputs_file_missing(tmp_path):
    with pytest.raises(OutputsError, match="cannot read"):
        read_outputs_file(tmp_path / "nope.json")


# --- the image mirror -------------------------------------------------------------------------


def test_mirror_counters_from_distributions_expvar():
    assert mirror_counters(expvar_json(blobs=(212, 204, 8, 61_865_984, 1), manifests=(96, 71, 25, 98_304, 2))) == {
        "blobs": (212, 204, 8, 61_865_984), "manifests": (96, 71, 25, 98_304)}
    for text, message in (("<html>404</html>", "did not answer JSON"), ('{"cmdline": []}', "no registry.proxy"),
                          ('{"registry": {"proxy": {"blobs": {"Hits": "many"}}}}', "unreadable proxy counters")):
        with pytest.raises(ValueError, match=message):
            mirror_counters(text)


def test_mirror_table_reads_each_cache_inside_its_container(platform):
    report = verify_mirror(platform.outputs["imageMirror"], platform.docker)
    caches = [r for r in report.results if r.name.startswith("cache ")]
    assert [r.name for r in caches] == ["cache docker.io", "cache quay.io", "cache registry.k8s.io"]
    assert all(r.ok for r in report.results)
    assert caches[0].detail == (
        "gpu-tenancy-mirror-docker-io: blobs 204 hits / 8 misses of 212 requests, 59.0 MiB from upstream; "
        "manifests 71 hits / 25 misses of 96 requests, 96.0 KiB from upstream (in-memory counters, since the "
        "container last started)")
    execs = [argv for argv, _ in platform.docker.calls if argv[1] == "exec" and "wget" in argv]
    assert execs[0] == ["docker", "exec", "gpu-tenancy-mirror-docker-io", "wget", "-qO-",
                        f"http://127.0.0.1:{DEBUG_PORT}/debug/vars"]
    assert all(kwargs["timeout"] and kwargs["capture_output"] and kwargs["text"]
               for _, kwargs in platform.docker.calls)


def test_mirror_table_shows_each_nodes_hosts_toml(platform):
    """That a cache answers says nothing about the nodes; each node's containerd configuration does."""
    report = verify_mirror(platform.outputs["imageMirror"], platform.docker)
    rows = {r.name: r for r in report.results if r.name.startswith("node ")}
    assert list(rows) == ["node gpu-tenancy-control-plane mirrors", "node tenant-a-worker-0 mirrors",
                          "node tenant-b-worker-0 mirrors"]
    assert all(r.ok for r in rows.values())
    assert rows["node tenant-a-worker-0 mirrors"].detail == (
        "hosts.toml for docker.io, quay.io, registry.k8s.io: each cache first, the registry itself as fallback")
    reads = [argv for argv, _ in platform.docker.calls if "head" in argv]
    assert reads[0] == ["docker", "exec", "gpu-tenancy-control-plane", "head", "-v", "-n", "64",
                        *(f"/etc/containerd/certs.d/{r}/hosts.toml" for r in ("docker.io", "quay.io",
                                                                               "registry.k8s.io"))]


def test_a_node_without_its_hosts_toml_or_with_another_fails_with_the_fix(platform):
    files = platform.docker.node_files["tenant-b-worker-0"]
    del files["/etc/containerd/certs.d/quay.io/hosts.toml"]
    files["/etc/containerd/certs.d/docker.io/hosts.toml"] = 'server = "https://registry-1.docker.io"\n'
    del platform.docker.node_files["tenant-a-worker-0"]
    report = verify_mirror(platform.outputs["imageMirror"], platform.docker)
    rows = {r.name: r for r in report.results}
    broken = rows["node tenant-b-worker-0 mirrors"]
    assert not broken.ok
    assert broken.detail == (
        "docker.io: /etc/containerd/certs.d/docker.io/hosts.toml does not send pulls to "
        "http://gpu-tenancy-mirror-docker-io:5000 first; quay.io: no /etc/containerd/certs.d/quay.io/hosts.toml "
        "→ this node pulls those registries from the internet")
    assert broken.fix.startswith("rewrite them: `make up REPLACE=<urn>`")
    gone = rows["node tenant-a-worker-0 mirrors"]
    assert not gone.ok and "No such container: tenant-a-worker-0" in gone.detail
    assert rows["node gpu-tenancy-control-plane mirrors"].ok


def test_a_cache_nobody_pulled_through_fails_only_when_a_node_joined_after_it_started(platform):
    quiet = expvar_json(blobs=(0, 0, 0, 0, 0), manifests=(0, 0, 0, 0, 0))
    platform.docker.containers["gpu-tenancy-mirror-quay-io"] = quiet
    # The cache restarted after every node was created: their pulls are not counted, nothing to tell.
    for name in platform.outputs["imageMirror"]["nodes"]:
        platform.docker.times[name] = ("2026-11-30T08:00:00.5Z", "2026-11-30T08:00:01.123456789Z")
    row = {r.name: r for r in verify_mirror(platform.outputs["imageMirror"], platform.docker).results}
    assert row["cache quay.io"].ok
    assert row["cache quay.io"].detail.endswith("unused since it started (pulls before that are not counted)")
    # tenant-b-worker-0 was created after the cache last started, and pulled its Calico images since: not from it.
    platform.docker.times["tenant-b-worker-0"] = ("2026-11-30T09:30:00.000000001Z", "2026-11-30T09:30:02Z")
    row = {r.name: r for r in verify_mirror(platform.outputs["imageMirror"], platform.docker).results}
    assert not row["cache quay.io"].ok
    assert row["cache quay.io"].detail == (
        "gpu-tenancy-mirror-quay-io: no request since it started, though tenant-b-worker-0 joined later and pulled "
        "its images → the nodes do not use this cache")
    assert row["cache docker.io"].ok  # it served requests


def test_docker_times_parse_with_nanoseconds_and_go_zero_time_is_none():
    utc = datetime.timezone.utc
    assert verify._timestamp("2026-11-30T09:00:01.123456789Z") == datetime.datetime(2026, 11, 30, 9, 0, 1, 123456,
                                                                                     tzinfo=utc)
    assert verify._timestamp("2026-11-30T10:00:01+01:00") == datetime.datetime(2026, 11, 30, 9, 0, 1, tzinfo=utc)
    assert verify._timestamp("0001-01-01T00:00:00Z") is None and verify._timestamp("yesterday") is None


def test_outputs_of_an_older_run_name_no_nodes(platform):
    caches = platform.outputs["imageMirror"]["caches"]
    report = verify_mirror(caches, platform.docker)  # the map of registries alone, as before
    assert [r.name for r in report.results] == ["cache docker.io", "cache quay.io", "cache registry.k8s.io",
                                                "nodes' mirrors"]
    assert report.results[-1].skipped and "names no nodes" in report.results[-1].detail


def test_stopped_or_missing_cache_fails_with_the_fix(platform, clock, tmp_path, capsys):
    platform.docker.containers["gpu-tenancy-mirror-quay-io"] = None
    del platform.docker.containers["gpu-tenancy-mirror-registry-k8s-io"]
    code, out, _ = run_main(platform, tmp_path, clock, capsys)
    assert code == 1
    assert out.rstrip().endswith(
        f"verify failed: 2 of 48 checks failed (image mirror: 2), 1 skipped (tenant-a: 1), {LAB_LOOSE}")
    report = verify_mirror(platform.outputs["imageMirror"], platform.docker)
    stopped = {r.name: r for r in report.results}["cache quay.io"]
    assert not stopped.ok
    assert "gpu-tenancy-mirror-quay-io is not running or its debug server does not answer" in stopped.detail
    assert "is not running)" in stopped.detail
    assert stopped.fix.startswith("docker start gpu-tenancy-mirror-quay-io (or `make up`)")
    assert "exits and restarts (check the proxy variables" in stopped.fix
    missing = {r.name: r for r in report.results}["cache registry.k8s.io"]
    assert "No such container: gpu-tenancy-mirror-registry-k8s-io" in missing.detail


def test_mirror_without_docker_or_answer():
    def missing(argv, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "docker")

    def slow(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    assert "`docker` CLI is not on PATH" in check_mirror_cache("quay.io", {"container": "c"}, missing).detail
    assert not check_mirror_cache("quay.io", {"container": "c"}, slow).ok
    answered = check_mirror_cache("quay.io", {"container": "c"}, FakeDocker({"c": '{"registry": {}}'}))
    assert not answered.ok and "answered without counters: no registry.proxy counters" in answered.detail
    assert verify.container_times(["c"], missing) == {}


@pytest.mark.parametrize("mirror", [None, {}, "absent"])
def test_no_mirror_no_table(platform, clock, tmp_path, capsys, mirror):
    if mirror == "absent":
        del platform.outputs["imageMirror"]
    else:
        platform.outputs["imageMirror"] = mirror
    code, out, _ = run_main(platform, tmp_path, clock, capsys)
    assert code == 0 and "image mirror" not in out and platform.docker.calls == []
    assert out.rstrip().endswith(f"verify passed: 37 checks OK, 1 skipped (tenant-a: 1), {LAB_LOOSE} in 2 tenant(s)")


# --- rendering --------------------------------------------------------------------------------


def test_table_columns_are_aligned_and_failures_carry_a_fix():
    report = TenantReport("t", "t (management namespace t)", [
        CheckResult("short", True, "fine"),
        CheckResult("a much longer check name", False, "broken → consequence", "do this"),
        CheckResult("no fix given", False, "broken"),
        verify_checks.skip("untestable", "not tested: nothing to try"),
    ])
    lines = render_table(report).splitlines()
    assert lines[0] == "t (management namespace t)"
    assert lines[1] == "CHECK                     STATUS  DETAIL"
    assert lines[2] == "short                     OK      fine"
    assert lines[3] == "a much longer check name  FAIL    broken → consequence"
    assert lines[4] == "                                  fix: do this"
    assert lines[5] == "no fix given              FAIL    broken"
    assert lines[6] == "untestable                SKIP    not tested: nothing to try"
    assert len(lines) == 7
    detail_column = lines[1].index("DETAIL")
    assert {line.index(word) for line, word in zip(lines[2:], ("fine", "broken", "fix:", "broken", "not tested"),
                                                   strict=True)} == {detail_column}


def test_summary_counts_failures_per_tenant():
    reports = [TenantReport("a", "a", [CheckResult("x", True, ""), CheckResult("y", False, "")]),
               TenantReport("b", "b", [CheckResult("x", True, "")])]
    assert render_summary(reports) == "verify failed: 1 of 3 checks failed (a: 1)"
    assert render_summary(reports[1:]) == "verify passed: all 1 checks OK in 1 tenant(s)"
    reports.append(TenantReport("c", "c", [CheckResult("x", True, ""), verify_checks.skip("z", "not tested")]))
    assert render_summary(reports) == "verify failed: 1 of 5 checks failed (a: 1), 1 skipped (c: 1)"
    assert render_summary(reports[1:]) == "verify passed: 2 checks OK, 1 skipped (c: 1) in 2 tenant(s)"
    with pytest.raises(ValueError, match="either OK, skipped or not enforced"):
        CheckResult("w", True, "", skipped=True)


def test_report_is_what_the_cli_prints(tmp_path, capsys):
    printed = healthy_platform()
    code, out, _ = run_main(printed, tmp_path, FakeClock(), capsys)
    rendered = healthy_platform()
    management_kubeconfig, target = platform_from_outputs(rendered.outputs)
    target = dataclasses.replace(target, image_caches=verify.image_caches(rendered.outputs["imageMirror"],
                                                                          rendered.docker))
    clock = FakeClock()
    reports = list(verify_platform(target, rendered.connect(management_kubeconfig), rendered.connect,
                                   waiting_on(clock)))
    reports.append(verify_mirror(rendered.outputs["imageMirror"], rendered.docker))
    assert code == 0
    # Each tenant's table as soon as it is checked, then the summary.
    assert out == "\n\n".join([*(render_table(report) for report in reports), render_summary(reports)]) + "\n"


def test_verify_closes_every_client_it_opened(platform, clock, tmp_path, capsys):
    code, _, _ = run_main(platform, tmp_path, clock, capsys)
    assert code == 0
    sessions = platform.connect.sessions()
    # management, per tenant: admin, user (network probes, the GPU pod past HAMi), its two credentials against the
    # other tenant, and the other tenant's admin for its nodes and HAMi Service (the extender probe).
    assert len(sessions) == 1 + 2 * 6
    assert all(session.closed for session in sessions)


# --- HAMi's allocations next to the plan's ----------------------------------------------------


def hami_pod(namespace, name, node, devices, phase="Running"):
    return {"metadata": {"name": name, "namespace": namespace,
                         "annotations": {"hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": devices}},
            "spec": {"containers": [{"name": "c"}]}, "status": {"phase": phase}}


def planned_platform(workloads):
    """A healthy platform whose outputs carry the gpuPlan of the reference stack with these workloads."""
    raw = reference_stack()
    raw["tenants"][0]["workloads"] = workloads
    platform = healthy_platform()
    platform.outputs["gpuPlan"] = gpu_plan(load_stack_config(raw))
    return platform


def test_verify_prints_hamis_allocations_next_to_the_plans_per_card(platform, clock):
    platform = planned_platform([{"name": "quarter", "memoryPercent": 25, "cores": 25}])
    cluster = platform.tenants["tenant-a"]
    cluster.pods[("gpu-tenancy-smoke", "gpu-smoke-test")] = hami_pod(
        "gpu-tenancy-smoke", "gpu-smoke-test", "tenant-a-worker-0", "GPU-MOCK-A0,NVIDIA,3000,30:;")
    cluster.pods[("default", "quarter-0")] = hami_pod("default", "quarter-0", "tenant-a-worker-0",
                                                      "GPU-MOCK-A0,NVIDIA,2048,25:;")
    # An ended pod holds nothing any more.
    cluster.pods[("default", "done")] = hami_pod("default", "done", "tenant-a-worker-0",
                                                 "GPU-MOCK-A0,NVIDIA,1000,10:;", phase="Succeeded")
    row = check(platform, clock)["card GPU-MOCK-A0: HAMi vs plan"]
    assert row.status == "OK"
    assert row.detail == (
        "HAMi: 2 pod(s), 2/10 slots, 5048 MiB, 55% cores (gpu-tenancy-smoke/gpu-smoke-test, default/quarter-0) | "
        "plan: 2 pod(s), 2/10 slots, 5048 MiB, 55% cores (smokeTest/0, quarter/0) → matches the plan")


def test_a_difference_from_the_plan_is_shown_not_failed(platform, clock):
    platform = planned_platform([{"name": "quarter", "replicas": 2, "memoryPercent": 25, "cores": 25}])
    cluster = platform.tenants["tenant-a"]
    cluster.pods[("gpu-tenancy-smoke", "gpu-smoke-test")] = hami_pod(
        "gpu-tenancy-smoke", "gpu-smoke-test", "tenant-a-worker-0", "GPU-MOCK-A0,NVIDIA,3000,30:;")
    results = check(platform, clock)
    row = results["card GPU-MOCK-A0: HAMi vs plan"]
    assert row.status == "OK" and row.detail.startswith("HAMi: 1 pod(s), 1/10 slots, 3000 MiB, 30% cores")
    assert row.detail.endswith("plan: 3 pod(s), 3/10 slots, 7096 MiB, 80% cores (smokeTest/0, quarter/0, quarter/1) "
                               "→ differs: declared workloads not (all) running, or HAMi placed them otherwise than "
                               "the plan")
    # tenant-b's card is planned too, with its smoke pod only.
    assert "card GPU-MOCK-B0: HAMi vs plan" in check(platform, clock, tenant="tenant-b")


def test_a_card_hami_uses_that_the_plan_lacks_fails(platform, clock):
    platform = planned_platform([])
    platform.tenants["tenant-a"].pods[("default", "odd")] = hami_pod("default", "odd", "tenant-a-worker-0",
                                                                     "GPU-OTHER,NVIDIA,100,1:;")
    row = check(platform, clock)["card GPU-OTHER: HAMi vs plan"]
    assert row.status == "FAIL" and "the plan has no such card" in row.detail


def test_outputs_without_a_gpu_plan_add_no_rows(platform, clock):
    assert not [name for name in check(platform, clock) if "HAMi vs plan" in name]


SYSTEM_ROW = "system-worker label only from gpu-tenancy"


def test_the_system_worker_label_is_observed_on_exactly_the_workers_without_gpus_and_refused_to_others(clock):
    platform = healthy_platform(workers={"tenant-a": {"tenant-a-gpu-0": [card("GPU-MOCK-A0")], "tenant-a-cpu-0": []}})
    result = check(platform, clock)[SYSTEM_ROW]
    assert result.ok, result.detail
    assert "['tenant-a-cpu-0']" in result.detail and "refused by gpu-tenancy-node-restriction-labels" in result.detail
    cluster = platform.tenants["tenant-a"]
    assert cluster.requests.count("patch nodes/status") == 1 and cluster.dry_runs == []

    # The policy missing: the dry run is accepted, so any nodes/status writer could forge the label.
    cluster.node_label_policy = False
    result = check(platform, clock)[SYSTEM_ROW]
    assert result.failed and "calico-node's token" in result.detail and "make up" in result.fix

    # A GPU worker carrying the label (forged before the policy, or left over).
    cluster.node_label_policy = True
    cluster.nodes[0]["metadata"]["labels"][SYSTEM_NODE_LABEL] = "true"
    result = check(platform, clock)[SYSTEM_ROW]
    assert result.failed and "'tenant-a-gpu-0'" in result.detail


def test_a_gpu_pod_past_hami_is_ok_only_when_the_policy_refuses_it(platform, clock):
    cluster = platform.tenants["tenant-a"]
    result = check(platform, clock)["GPU pod past HAMi refused"]
    assert result.ok and "by gpu-tenancy-gpu-pods-through-hami" in result.detail
    # A dry run, as the tenant user, in its namespace: nothing is stored.
    assert cluster.requests.count("create pods") >= 1 and not [
        pod for pod in cluster.created if pod["metadata"].get("labels", {}).get("hami.io/webhook")]
    cluster.gpu_pod_policy = False
    result = check(platform, clock)["GPU pod past HAMi refused"]
    assert not result.ok and "hami.io/webhook=ignore is admitted in default" in result.detail
    assert "gpu-tenancy-gpu-pods-through-hami" in result.fix
    (admitted,) = cluster.dry_runs
    assert admitted["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    assert admitted["spec"]["schedulerName"] == "default-scheduler"


def test_the_object_quota_row_is_ok_only_when_every_kind_the_role_may_create_is_counted(platform, clock):
    cluster = platform.tenants["tenant-a"]
    result = check(platform, clock)["object quota counts every kind"]
    assert result.ok and result.detail == "19 kinds counted in default, all edit may create"
    # Counted in spec but not yet enforced, or a kind aggregated into edit that the program does not count.
    quota = cluster.resource_quotas[("default", "object-quota")]
    del quota["status"]["hard"]["count/events"]
    cluster.cluster_roles["edit"]["rules"].append({"apiGroups": ["x.io"], "resources": ["widgets"],
                                                   "verbs": ["create"]})
    result = check(platform, clock)["object quota counts every kind"]
    assert not result.ok
    assert result.detail.startswith("edit may create events, widgets.x.io in default, which object-quota does not")
    del cluster.resource_quotas[("default", "object-quota")]
    result = check(platform, clock)["object quota counts every kind"]
    assert not result.ok and "ResourceQuota default/object-quota not found" in result.detail
