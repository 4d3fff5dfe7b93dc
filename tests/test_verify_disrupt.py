"""`make verify DISRUPTIVE=1`: cut a tenant's Konnectivity tunnel on the fake platform, whose tunnel follows its
network (tests/support/fake_platform.py: agents connect through fake_network.py, an open connection survives a new
NetworkPolicy until its pod goes; with no agent HAMi's webhook call fails and its failurePolicy decides)."""

from __future__ import annotations

import pytest

from components.kube import ApiError
from ops import verify
from ops.verify import platform_from_outputs
from ops.verify_checks import Waiting
from ops.verify_disrupt import CUT_POLICY_NAME, REJECTED_ROW, RESTORED_ROW, check_tunnel_cut, cut_policy
from tests.support.fake_network import FakeNetwork
from tests.support.fake_platform import FakeClock, healthy_platform


@pytest.fixture
def platform():
    return healthy_platform()


def cut(platform, tenant="tenant-a", clock=None, timeout=60.0):
    clock = clock or FakeClock()
    said: list[str] = []
    _, target = platform_from_outputs(platform.outputs)
    waiting = Waiting(timeout=timeout, interval=1, now=clock.now, sleep=clock.sleep)
    results = check_tunnel_cut(target, target.tenants[tenant], platform.connect, waiting, say=said.append)
    return {r.name: r for r in results}, said


def policies(cluster):
    return [p["metadata"]["name"] for p in cluster.network_policies.get("kube-system", [])]


def test_cut_tunnel_rejects_gpu_pods_and_comes_back(platform):
    cluster = platform.tenants["tenant-a"]
    agents = set(cluster.agent_pods)
    results, said = cut(platform)
    rejected, restored = results[REJECTED_ROW], results[RESTORED_ROW]
    assert rejected.status == "OK", rejected.detail
    assert 'failed calling webhook "vgpu.hami.io"' in rejected.detail and "No agent available" in rejected.detail
    assert restored.status == "OK", restored.detail
    assert "came back with schedulerName hami-scheduler" in restored.detail
    # A real GPU pod was sent and rejected: nothing was stored.
    assert "create pods" in cluster.requests and cluster.created == []
    # Restored: the policy is gone, the agents were replaced twice (cut, restore) and hold a tunnel again.
    assert policies(cluster) == []
    assert len([name for _, name in cluster.deleted if name.startswith("konnectivity-agent-")]) == 2 * len(agents)
    assert not agents & set(cluster.agent_pods) and cluster.tunnel_up()
    # Before cutting, the operator is told how to undo it by hand.
    assert len(said) == 1 and f"delete networkpolicy {CUT_POLICY_NAME}" in said[0]
    assert "make kubeconfig TENANT=tenant-a ADMIN=1" in said[0]
    # The other tenant was never touched.
    assert "create networkpolicies" not in platform.tenants["tenant-b"].requests


def test_the_policy_denies_all_egress_of_the_agents_only():
    policy = cut_policy()
    assert policy["metadata"]["namespace"] == "kube-system"
    assert policy["spec"] == {"podSelector": {"matchLabels": {"k8s-app": "konnectivity-agent"}},
                              "policyTypes": ["Egress"], "egress": []}


def test_a_policy_alone_leaves_open_tunnels_up(platform):
    """Why the agents are restarted: the model keeps an established connection through a new policy."""
    cluster = platform.tenants["tenant-a"]
    cluster.network_policies["kube-system"] = [cut_policy()]
    assert cluster.tunnel_up()
    for name in list(cluster.agent_pods):
        platform.connect(verify.kube.parse(platform.outputs["tenantAdminKubeconfigs"]["tenant-a"])).delete(
            "Pod", name, "kube-system")
    # The old agent's stream lasts through its graceful termination; its replacement cannot connect.
    assert [cluster.tunnel_up() for _ in range(4)] == [True, False, False, False]


def test_failure_policy_ignore_admits_gpu_pods_without_hami_and_fails(platform):
    cluster = platform.tenants["tenant-a"]
    cluster.webhooks["hami-webhook"]["webhooks"][0]["failurePolicy"] = "Ignore"
    results, _ = cut(platform)
    rejected = results[REJECTED_ROW]
    assert rejected.failed
    assert "dry-run GPU pod admitted with schedulerName default-scheduler" in rejected.detail
    assert "real GPU pod admitted with schedulerName default-scheduler" in rejected.detail
    assert "failurePolicy Fail" in rejected.fix
    # The admitted pod is deleted at once, and the tunnel is restored all the same.
    assert len(cluster.created) == 1 and cluster.pods == {}
    assert results[RESTORED_ROW].status == "OK" and policies(cluster) == []


def test_no_webhook_fails_before_anything_is_cut(platform):
    cluster = platform.tenants["tenant-a"]
    cluster.webhooks.clear()
    results, said = cut(platform)
    assert list(results) == [REJECTED_ROW] and results[REJECTED_ROW].failed
    assert "before any cut a dry-run GPU pod got schedulerName default-scheduler" in results[REJECTED_ROW].detail
    assert "create networkpolicies" not in cluster.requests and said == []


def test_restore_failure_says_the_tunnel_is_still_cut_and_what_to_run(platform):
    cluster = platform.tenants["tenant-a"]
    cluster.failing_requests["delete networkpolicies"] = ApiError(403, "networkpolicies is forbidden")
    results, _ = cut(platform)
    assert results[REJECTED_ROW].status == "OK"
    restored = results[RESTORED_ROW]
    assert restored.failed and restored.detail.startswith("NOT RESTORED: NetworkPolicy kube-system/"
                                                          f"{CUT_POLICY_NAME} could not be removed")
    assert "HTTP 403" in restored.detail
    assert f"kubectl -n kube-system delete networkpolicy {CUT_POLICY_NAME}" in restored.fix
    assert "delete pod -l k8s-app=konnectivity-agent" in restored.fix
    assert policies(cluster) == [CUT_POLICY_NAME]


def test_tunnel_that_does_not_come_back_fails_within_the_timeout(platform):
    cluster = platform.tenants["tenant-a"]
    clock = FakeClock()
    # The agents connect, once more, only after the restore's wait.
    cluster.agent_connect_after = 10_000
    results, _ = cut(platform, clock=clock, timeout=30)
    assert results[REJECTED_ROW].status == "OK"
    restored = results[RESTORED_ROW]
    assert restored.failed and "30 s later a dry-run GPU pod still got" in restored.detail
    assert "logs -l k8s-app=konnectivity-agent" in restored.fix
    assert policies(cluster) == [] and sum(clock.sleeps) <= 30 + 30


def run_main(platform, tmp_path, *args, sleep=None):
    clock = FakeClock()
    waiting = Waiting(timeout=60, interval=1, now=clock.now, sleep=sleep or clock.sleep)
    return verify.main(["--outputs-file", platform.write_outputs(tmp_path), *args], run=platform.docker,
                       connect=platform.connect, waiting=waiting)


def test_make_verify_disruptive_cuts_the_first_tenant_only(platform, tmp_path, capsys):
    assert run_main(platform, tmp_path, "--disruptive") == 0
    out = capsys.readouterr().out
    tables = out.split("\n\n")
    assert REJECTED_ROW in tables[0] and RESTORED_ROW in tables[0]
    assert REJECTED_ROW not in out.split("tenant-b (management namespace", 1)[1]
    assert "create networkpolicies" not in platform.tenants["tenant-b"].requests


def test_make_verify_without_disruptive_cuts_nothing(platform, tmp_path, capsys):
    assert run_main(platform, tmp_path) == 0
    assert REJECTED_ROW not in capsys.readouterr().out
    assert all("create networkpolicies" not in c.requests for c in platform.tenants.values())


def test_disrupt_tenant_names_an_unknown_tenant(platform, tmp_path, capsys):
    assert run_main(platform, tmp_path, "--disruptive", "--disrupt-tenant", "tenant-z") == 2
    err = capsys.readouterr().err
    assert "TENANT=tenant-z: no such tenant in the stack outputs (tenants: tenant-a, tenant-b)" in err
    assert all(c.requests == [] for c in platform.tenants.values())


def test_ctrl_c_during_the_cut_restores_the_tunnel(platform, tmp_path, capsys):
    cluster = platform.tenants["tenant-b"]
    clock = FakeClock()

    def sleep(seconds):
        if policies(cluster):  # the tunnel is cut: the operator presses Ctrl-C
            raise KeyboardInterrupt
        clock.sleep(seconds)

    assert run_main(platform, tmp_path, "--disruptive", "--disrupt-tenant", "tenant-b", sleep=sleep) == 130
    err = capsys.readouterr().err
    assert "verify: stopped while tenant-b's tunnel was cut (KeyboardInterrupt): restored (policy removed, " \
           "agents restarted)" in err
    assert err.rstrip().endswith("verify: interrupted")
    assert policies(cluster) == []
    assert len([name for _, name in cluster.deleted if name.startswith("konnectivity-agent-")]) == 2
    assert any(cluster.tunnel_up() for _ in range(3))


def test_cut_that_does_not_take_fails_and_restores(platform, monkeypatch):
    """A tenant CNI that does not enforce NetworkPolicy: the agents reconnect through the policy."""
    cluster = platform.tenants["tenant-a"]
    outcome = FakeNetwork.outcome
    monkeypatch.setattr(FakeNetwork, "outcome", lambda self, source, pod, host, port: "connected"
                        if pod["metadata"].get("labels", {}).get("k8s-app") else outcome(self, source, pod, host, port))
    cluster.agent_connect_after = 0
    results, _ = cut(platform, timeout=20)
    rejected = results[REJECTED_ROW]
    assert rejected.failed and "20 s after the cut GPU pods still come back mutated" in rejected.detail
    assert "enforce NetworkPolicy" in rejected.fix
    assert results[RESTORED_ROW].status == "OK" and policies(cluster) == []


def test_host_network_agents_cannot_be_cut(platform):
    cluster = platform.tenants["tenant-a"]
    for pod in cluster.agent_pods.values():
        pod["spec"]["hostNetwork"] = True
    results, _ = cut(platform)
    assert list(results) == [REJECTED_ROW] and results[REJECTED_ROW].status == "SKIP"
    assert "hostNetwork" in results[REJECTED_ROW].detail and "create networkpolicies" not in cluster.requests


def test_left_over_policy_is_reported_not_reused(platform):
    cluster = platform.tenants["tenant-a"]
    cluster.network_policies["kube-system"] = [cut_policy()]
    results, _ = cut(platform)
    assert list(results) == [REJECTED_ROW] and results[REJECTED_ROW].failed
    assert "left over from an interrupted run" in results[REJECTED_ROW].detail
    assert f"delete networkpolicy {CUT_POLICY_NAME}" in results[REJECTED_ROW].fix


def test_tunnel_back_before_the_real_pod_is_not_a_pass(platform, monkeypatch):
    """The dry run caught the agents between two connections; the real pod, right after, went through HAMi."""
    cluster = platform.tenants["tenant-a"]
    outcome = FakeNetwork.outcome
    monkeypatch.setattr(FakeNetwork, "outcome", lambda self, source, pod, host, port: "connected"
                        if pod["metadata"].get("labels", {}).get("k8s-app") else outcome(self, source, pod, host, port))
    cluster.agent_grace_calls = 0
    results, _ = cut(platform)
    rejected = results[REJECTED_ROW]
    assert rejected.failed and "the real GPU pod right after came back with schedulerName hami-scheduler" in \
        rejected.detail
    assert cluster.pods == {} and len(cluster.created) == 1
    assert results[RESTORED_ROW].status == "OK"


def test_cut_refused_changes_nothing(platform):
    cluster = platform.tenants["tenant-a"]
    cluster.failing_requests["create networkpolicies"] = ApiError(403, "networkpolicies is forbidden")
    results, said = cut(platform)
    assert list(results) == [REJECTED_ROW] and results[REJECTED_ROW].failed
    assert "not tested: the cut failed (HTTP 403: networkpolicies is forbidden)" in results[REJECTED_ROW].detail
    assert "delete pods" not in cluster.requests and policies(cluster) == []
    assert "(ApiError): nothing had been changed yet" in said[-1]


def test_tenant_api_down_does_not_try_the_cut(platform, tmp_path, capsys):
    platform.tenants["tenant-a"].down = True
    assert run_main(platform, tmp_path, "--disruptive") == 1
    assert "not run: tenant-a's API server does not answer" in capsys.readouterr().out
