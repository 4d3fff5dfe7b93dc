"""`make verify` against a fake running platform (tests/fake_platform.py) and a local fake API server."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from config import Versions
from tests.fake_platform import (
    QUOTA_REJECTION,
    FakeClock,
    FakeSession,
    card,
    healthy_platform,
    kubeconfig_yaml,
    node,
)
from tools import verify, verify_api
from tools.preflight import CheckResult
from tools.verify import (
    OutputsError,
    TenantReport,
    platform_from_outputs,
    read_outputs_file,
    read_stack_outputs,
    render_report,
    render_summary,
    render_table,
    verify_platform,
)
from tools.verify_api import ApiError
from tools.verify_checks import (
    PROBE_IMAGE,
    ProbeRequest,
    Waiting,
    allocation,
    cross_tenant_kubeconfig,
    expected_capacity,
    probe_gpu_pod,
    probe_pod,
    verify_tenant,
)

# --- helpers ----------------------------------------------------------------------------------


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
    results = verify_tenant(target, target.tenants[tenant], platform.connect(management_kubeconfig),
                            platform.connect, waiting_on(clock, **waiting))
    names = [r.name for r in results]
    assert len(names) == len(set(names)), names
    return {r.name: r for r in results}


def failed(results):
    return {name: r for name, r in results.items() if not r.ok}


def run_main(platform, tmp_path, clock, capsys, *args):
    code = verify.main(["--outputs-file", platform.write_outputs(tmp_path), *args],
                       connect=platform.connect, waiting=waiting_on(clock))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_probe_cleaned_up(cluster):
    created = [(pod["metadata"]["namespace"], pod["metadata"]["name"]) for pod in cluster.created]
    assert cluster.deleted == created
    assert cluster.pods == {}


# --- the happy path ---------------------------------------------------------------------------


def test_all_green_platform_passes(platform, clock, tmp_path, capsys):
    code, out, err = run_main(platform, tmp_path, clock, capsys)
    assert code == 0, out
    assert err == ""
    assert "FAIL" not in out
    assert out.rstrip().endswith("verify passed: all 22 checks OK in 2 tenant(s)")
    for name, cluster in platform.tenants.items():
        assert f"{name} (management namespace {name})" in out
        assert len(cluster.created) == 1
        assert_probe_cleaned_up(cluster)
    assert "bound to tenant-a-worker-0, devices GPU-MOCK-A0,NVIDIA,3000,30:;" in out
    assert "tenant-b's API server refused tenant-a's credentials (HTTP 401)" in out


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
        "probe admitted by HAMi webhook",
        "probe got a GPU slice",
        "isolated from tenant-b",
        "NetworkPolicies (management)",
    ]
    assert all(r.ok for r in results.values())
    assert results["control plane Ready"].detail == (
        "TenantControlPlane tenant-a/tenant-a Ready (v1.35.0 at 172.18.255.200:6443)")
    assert results["node tenant-a-worker-0 GPU capacity"].detail == "gpu=10 gpumem=8192 gpucores=100"


def test_probe_polls_a_real_condition_not_a_fixed_sleep(platform, clock):
    # The fake allocates on the second read: exactly one pause between two reads.
    check(platform, clock)
    assert clock.sleeps == [1.0]
    assert platform.tenants["tenant-a"].pod_reads == 2


def test_probe_pod_is_the_plans_fractional_request(platform, clock):
    check(platform, clock)
    created = platform.tenants["tenant-a"].created[0]
    assert created["metadata"]["name"].startswith("verify-gpu-")
    assert created["metadata"]["namespace"] == "default"


def test_probe_manifest():
    pod = probe_pod(ProbeRequest(gpus=2, memory_mib=3000, cores=30))
    assert pod["metadata"]["generateName"] == "verify-gpu-"
    assert pod["metadata"]["namespace"] == "default"
    assert "name" not in pod["metadata"]
    assert "schedulerName" not in pod["spec"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == PROBE_IMAGE == f"registry.k8s.io/pause:{Versions().pause}"
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
    assert "kubectl --context kind-gpu-tenancy -n tenant-a describe tcp tenant-a" in result.fix
    code, out, _ = run_main(platform, tmp_path, FakeClock(), capsys)
    assert code == 1
    assert "verify failed: 1 of 22 checks failed (tenant-a: 1)" in out


def test_control_plane_without_status_or_missing(platform, clock):
    del platform.management.tenant_control_planes[("tenant-a", "tenant-a")]["status"]
    assert "is no status yet" in check(platform, clock)["control plane Ready"].detail
    platform.management.tenant_control_planes.clear()
    result = check(platform, clock)["control plane Ready"]
    assert not result.ok and "not found" in result.detail and "make up" in result.fix


def test_management_cluster_down(platform, clock):
    platform.management.down = True
    results = check(platform, clock)
    assert set(failed(results)) == {"control plane Ready", "NetworkPolicies (management)"}
    assert "cannot read TenantControlPlane" in results["control plane Ready"].detail
    assert "docker ps --filter name=gpu-tenancy-control-plane" in results["control plane Ready"].fix


def test_network_policies_missing(platform, clock):
    platform.management.network_policies["tenant-a"] = []
    results = check(platform, clock)
    assert set(failed(results)) == {"NetworkPolicies (management)"}
    assert "no NetworkPolicy in management namespace tenant-a" in results["NetworkPolicies (management)"].detail


# --- tenant API, nodes, capacity --------------------------------------------------------------


def test_tenant_api_down_skips_the_in_tenant_checks(platform, clock):
    platform.tenants["tenant-a"].down = True
    results = check(platform, clock)
    assert list(results) == ["control plane Ready", "tenant API answers", "isolated from tenant-b",
                             "NetworkPolicies (management)"]
    assert not results["tenant API answers"].ok
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
    assert clock.sleeps == []
    assert_probe_cleaned_up(cluster)


def test_probe_never_allocated_times_out_bounded(platform, clock):
    cluster = platform.tenants["tenant-a"]
    cluster.allocate_on_read = None
    result = check(platform, clock, timeout=5, interval=1)["probe got a GPU slice"]
    assert not result.ok
    assert result.detail.startswith(
        "no GPU allocated within 5 s (not bound: Unschedulable: 0/1 nodes are available: 1 NodeUnfitPod.)")
    assert clock.sleeps == [1] * 5
    assert cluster.pod_reads == 6
    assert "vgpu-scheduler-extender" in result.fix
    assert_probe_cleaned_up(cluster)


def test_default_wait_is_sixty_seconds_of_one_second_polls(platform, clock):
    platform.tenants["tenant-a"].allocate_on_read = None
    assert not check(platform, clock)["probe got a GPU slice"].ok
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
    assert check(platform, clock)["probe got a GPU slice"].ok
    assert clock.sleeps == [1.0, 1.0, 1.0]
    assert_probe_cleaned_up(cluster)


class _Vanishing(FakeSession):
    def read_pod(self, namespace, name):
        super().read_pod(namespace, name)
        return None


class _Broken(FakeSession):
    def read_pod(self, namespace, name):
        raise RuntimeError("bug while polling")


class _Sticky(FakeSession):
    def delete_pod(self, namespace, name):
        raise ApiError(None, "connection reset")


def _probe(session, clock):
    return probe_gpu_pod(session, ProbeRequest(1, 3000, 30), waiting_on(clock))


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


def test_allocation_states():
    pending = {"metadata": {"name": "p"}, "spec": {}, "status": {}}
    assert allocation(pending) == (False, "not bound to a node")
    done = {"metadata": {"annotations": {"hami.io/vgpu-node": "n", "hami.io/vgpu-devices-allocated": "D"}},
            "spec": {"nodeName": "n"}}
    assert allocation(done) == (True, "bound to n, devices D")


# --- isolation --------------------------------------------------------------------------------


def test_isolation_breach(platform, clock):
    platform.tenants["tenant-b"].tokens.add("tenant-a-admin-token")
    results = check(platform, clock)
    assert set(failed(results)) == {"isolated from tenant-b"}
    result = results["isolated from tenant-b"]
    assert "tenant-a's credentials listed 1 node(s) of tenant-b → the tenants share a CA or credentials" in (
        result.detail)
    assert check(platform, clock, tenant="tenant-b")["isolated from tenant-a"].ok


def test_isolation_uses_own_user_with_the_other_cluster_entry(platform, clock):
    check(platform, clock)
    crossed = [k for k in platform.connect.kubeconfigs if k["current-context"] == "cross-tenant"]
    assert len(crossed) == 1
    assert crossed[0]["clusters"][0]["cluster"]["server"] == "https://172.18.255.201:6443"
    assert crossed[0]["users"][0]["user"] == {"token": "tenant-a-admin-token"}


def test_isolation_accepts_403_but_not_other_answers(platform, clock):
    platform.tenants["tenant-b"].refusal = (403, 'nodes is forbidden: User "kubernetes-admin" cannot list')
    result = check(platform, clock)["isolated from tenant-b"]
    assert result.ok and "(HTTP 403)" in result.detail
    platform.tenants["tenant-b"].refusal = (500, "etcdserver: request timed out")
    result = check(platform, clock)["isolated from tenant-b"]
    assert not result.ok
    assert "answered tenant-a's credentials with HTTP 500: etcdserver: request timed out, not 401/403" in result.detail


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


def test_single_tenant_has_no_isolation_row():
    results = check(healthy_platform(tenants=["solo"]), FakeClock(), tenant="solo")
    assert not any(name.startswith("isolated") for name in results)
    assert all(r.ok for r in results.values())


# --- stack outputs ----------------------------------------------------------------------------


def test_outputs_missing_a_tenant(platform, clock, tmp_path, capsys):
    del platform.outputs["tenants"]["tenant-b"]
    code, out, _ = run_main(platform, tmp_path, clock, capsys)
    assert code == 1
    assert "tenant-b is planned but missing from the output tenants → this tenant cannot be checked" in out
    assert "isolated from tenant-b" not in out
    assert out.rstrip().endswith("verify failed: 1 of 11 checks failed (tenant-b: 1)")


def test_outputs_missing_a_tenant_kubeconfig_or_plan_entry(platform):
    del platform.outputs["tenantKubeconfigs"]["tenant-a"]
    platform.outputs["tenants"]["tenant-c"] = dict(platform.outputs["tenants"]["tenant-b"])
    _, target = platform_from_outputs(platform.outputs)
    assert list(target.tenants) == ["tenant-b"]
    assert target.incomplete == {
        "tenant-a": "tenant-a is planned but missing from the output tenantKubeconfigs",
        "tenant-c": "tenant-c is in the output `tenants` but not in the plan (outputs of an older run?)",
    }


@pytest.mark.parametrize("mutate, message", [
    (lambda o: o.pop("plan"), "the stack outputs lack plan: run `make up`"),
    (lambda o: o.update(managementKubeconfig="[secret]"), "save the outputs with `pulumi stack output --json --show-secrets`"),
    (lambda o: o.update(managementKubeconfig="- a\n- list"), "managementKubeconfig is not a kubeconfig"),
    (lambda o: o.update(tenantKubeconfigs="[secret]"), "tenantKubeconfigs is hidden"),
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


def test_hidden_tenant_kubeconfig_is_a_failed_tenant(platform):
    platform.outputs["tenantKubeconfigs"]["tenant-b"] = "[secret]"
    _, target = platform_from_outputs(platform.outputs)
    assert "tenantKubeconfigs.tenant-b is hidden" in target.incomplete["tenant-b"]


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
    run = FakeRun(stdout=json.dumps(platform.outputs))
    code = verify.main(["--stack", "lab"], run=run, connect=platform.connect, waiting=waiting_on(clock))
    assert code == 0
    ((argv, kwargs),) = run.calls
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
    assert verify.main([], run=FakeRun(missing=True)) == 2
    err = capsys.readouterr().err
    assert "the `pulumi` CLI is not on PATH" in err and "--outputs-file" in err


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


# --- rendering --------------------------------------------------------------------------------


def test_table_columns_are_aligned_and_failures_carry_a_fix():
    report = TenantReport("t", "t (management namespace t)", [
        CheckResult("short", True, "fine"),
        CheckResult("a much longer check name", False, "broken → consequence", "do this"),
        CheckResult("no fix given", False, "broken"),
    ])
    lines = render_table(report).splitlines()
    assert lines[0] == "t (management namespace t)"
    assert lines[1] == "CHECK                     STATUS  DETAIL"
    assert lines[2] == "short                     OK      fine"
    assert lines[3] == "a much longer check name  FAIL    broken → consequence"
    assert lines[4] == "                                  fix: do this"
    assert lines[5] == "no fix given              FAIL    broken"
    assert len(lines) == 6
    detail_column = lines[1].index("DETAIL")
    assert all(line.index("fine" if "fine" in line else "broken") == detail_column for line in lines[2:4])
    assert lines[4].index("fix:") == detail_column


def test_summary_counts_failures_per_tenant():
    reports = [TenantReport("a", "a", [CheckResult("x", True, ""), CheckResult("y", False, "")]),
               TenantReport("b", "b", [CheckResult("x", True, "")])]
    assert render_summary(reports) == "verify failed: 1 of 3 checks failed (a: 1)"
    assert render_summary(reports[1:]) == "verify passed: all 1 checks OK in 1 tenant(s)"


def test_report_is_what_the_cli_prints(tmp_path, capsys):
    printed = healthy_platform()
    code, out, _ = run_main(printed, tmp_path, FakeClock(), capsys)
    rendered = healthy_platform()
    management_kubeconfig, target = platform_from_outputs(rendered.outputs)
    clock = FakeClock()
    reports = list(verify_platform(target, rendered.connect(management_kubeconfig), rendered.connect,
                                   waiting_on(clock)))
    assert code == 0
    assert out == render_report(reports) + "\n"


# --- the real API adapter, against a local HTTP server ----------------------------------------


class _Handler(BaseHTTPRequestHandler):
    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        url = urlparse(self.path)
        self.server.seen.append((self.command, url.path, parse_qs(url.query), self.headers["Authorization"], body))
        status, payload = self.server.routes.get(
            (self.command, url.path), (404, {"kind": "Status", "code": 404, "message": "not found"}))
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _serve  # noqa: N815 -- http.server dispatches on these names

    def log_message(self, *args):
        pass


@pytest.fixture
def api_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.routes, server.seen = {}, []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _real_api(server, token="good-token"):
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return verify_api.connect(yaml.safe_load(kubeconfig_yaml("fake", url, token)))


def test_real_api_reads_the_right_paths_as_json(api_server):
    tcp = {"kind": "TenantControlPlane", "status": {"kubernetesResources": {"version": {"status": "Ready"}}}}
    api_server.routes.update({
        ("GET", "/apis/kamaji.clastix.io/v1alpha1/namespaces/tenant-a/tenantcontrolplanes/tenant-a"): (200, tcp),
        ("GET", "/api/v1/nodes"): (200, {"kind": "NodeList", "items": [node("n0")]}),
        ("GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/konnectivity-agent"): (200, {"kind": "DaemonSet"}),
        ("GET", "/apis/apps/v1/namespaces/kube-system/deployments/hami-scheduler"): (200, {"kind": "Deployment"}),
        ("GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/hami-webhook"): (
            200, {"kind": "MutatingWebhookConfiguration"}),
        ("GET", "/apis/networking.k8s.io/v1/namespaces/tenant-a/networkpolicies"): (
            200, {"kind": "NetworkPolicyList", "items": [{"metadata": {"name": "p"}}]}),
        ("GET", "/api/v1/namespaces/default/pods/verify-gpu-abcde"): (200, {"kind": "Pod"}),
    })
    api = _real_api(api_server)
    assert api.get_tenant_control_plane("tenant-a", "tenant-a") == tcp
    assert api.list_nodes() == [node("n0")]
    assert api.read_daemon_set("kube-system", "konnectivity-agent") == {"kind": "DaemonSet"}
    assert api.read_deployment("kube-system", "hami-scheduler") == {"kind": "Deployment"}
    assert api.read_mutating_webhook_configuration("hami-webhook") == {"kind": "MutatingWebhookConfiguration"}
    assert api.list_network_policies("tenant-a") == [{"metadata": {"name": "p"}}]
    assert api.read_pod("default", "verify-gpu-abcde") == {"kind": "Pod"}
    assert {seen[3] for seen in api_server.seen} == {"Bearer good-token"}


def test_real_api_not_found_is_none_and_delete_tolerates_it(api_server):
    api = _real_api(api_server)
    assert api.get_tenant_control_plane("tenant-a", "missing") is None
    assert api.read_pod("default", "gone") is None
    api.delete_pod("default", "gone")
    method, path, query, _, _ = api_server.seen[-1]
    assert (method, path, query["gracePeriodSeconds"]) == ("DELETE", "/api/v1/namespaces/default/pods/gone", ["0"])


def test_real_api_creates_the_probe_pod(api_server):
    manifest = probe_pod(ProbeRequest(1, 3000, 30))
    api_server.routes[("POST", "/api/v1/namespaces/default/pods")] = (201, {"metadata": {"name": "verify-gpu-x"}})
    assert _real_api(api_server).create_pod("default", manifest) == {"metadata": {"name": "verify-gpu-x"}}
    assert api_server.seen[-1][4] == manifest


def test_real_api_errors_carry_the_status_and_message(api_server):
    api_server.routes[("GET", "/api/v1/nodes")] = (401, {"kind": "Status", "code": 401, "message": "Unauthorized"})
    api_server.routes[("POST", "/api/v1/namespaces/default/pods")] = (500, {"kind": "Status", "message": "webhook down"})
    api = _real_api(api_server, token="other-tenants-token")
    with pytest.raises(ApiError) as error:
        api.list_nodes()
    assert (error.value.status, error.value.message) == (401, "Unauthorized")
    with pytest.raises(ApiError) as error:
        api.create_pod("default", probe_pod(ProbeRequest(1, 1, 1)))
    assert str(error.value) == "HTTP 500: webhook down"


def test_real_api_without_an_answer():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = verify_api.connect(yaml.safe_load(kubeconfig_yaml("dead", f"http://127.0.0.1:{port}", "t")))
    with pytest.raises(ApiError) as error:
        api.list_nodes()
    assert error.value.status is None
    assert str(error.value).startswith("no answer: ")


def test_real_connect_rejects_a_broken_kubeconfig():
    with pytest.raises(ValueError, match="unusable kubeconfig"):
        verify_api.connect({"apiVersion": "v1", "kind": "Config", "current-context": "missing"})
