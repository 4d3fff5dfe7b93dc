"""Each path `make verify` probes into another tenant, on a platform where it is closed and one where it is open.
The outcomes come from the fake platform's network model (tests/support/fake_network.py: kube-proxy's source
ranges on the LoadBalancer address only, node ports, NetworkPolicy as the CNI enforces it), not from a table."""

from __future__ import annotations

import dataclasses

import pytest

from ops import verify
from ops.verify import platform_from_outputs
from ops.verify_checks import HAMI_DEFAULT_NODE_PORTS, verify_tenant
from tests.support.fake_network import node_address
from tests.support.fake_platform import FakeClock, healthy_platform

ENFORCED = "NetworkPolicy enforced (management)"


def check(platform, tenant="tenant-a"):
    clock = FakeClock()
    management_kubeconfig, target = platform_from_outputs(platform.outputs)
    target = dataclasses.replace(target, image_caches=verify.image_caches(platform.outputs.get("imageMirror"),
                                                                          platform.docker))
    waiting = verify.Waiting(timeout=60, interval=1, now=clock.now, sleep=clock.sleep)
    results = verify_tenant(target, target.tenants[tenant], platform.connect(management_kubeconfig),
                            platform.connect, waiting)
    return {r.name: r for r in results}


@pytest.fixture
def platform():
    return healthy_platform()


def test_node_ports_closed_and_open(platform):
    result = check(platform)["pod → tenant-b node ports"]
    assert result.status == "OK" and "has no node port (allocateLoadBalancerNodePorts false)" in result.detail
    # Kamaji's default (allocateLoadBalancerNodePorts unset): node ports on every management node, which
    # kube-proxy does not filter by source range.
    service = platform.management.services[("tenant-b", "tenant-b")]
    service["spec"]["allocateLoadBalancerNodePorts"] = True
    for port, node_port in zip(service["spec"]["ports"], (31443, 31132), strict=True):
        port["nodePort"] = node_port
    result = check(platform)["pod → tenant-b node ports"]
    assert result.failed
    assert "tenant-a's pod connected to 172.18.0.2:31132, 172.18.0.2:31443" in result.detail
    assert "allocateLoadBalancerNodePorts: false" in result.fix


def test_node_ports_bypass_the_source_ranges_the_load_balancer_address_applies(platform):
    """With tenant-a's workers outside tenant-b's source ranges the LoadBalancer address drops them, while a node
    port lets them through: the masqueraded packet arrives from the management node, which tenant-b admits."""
    service = platform.management.services[("tenant-b", "tenant-b")]
    service["spec"]["loadBalancerSourceRanges"] = ["172.18.0.0/24", "172.18.2.0/24"]
    platform.outputs["tenants"]["tenant-b"]["sourceRanges"] = ["172.18.0.0/24", "172.18.2.0/24"]
    platform.outputs.update(kindSubnet=None, workerNetworks=["172.18.0.0/24"])
    platform.outputs["plan"]["tenants"]["tenant-a"]["workerCidrs"] = ["172.18.1.0/24"]
    results = check(platform)
    assert results["pod → tenant-b API"].status == "OK" and "filtered" in results["pod → tenant-b API"].detail
    service["spec"]["ports"][0]["nodePort"] = 31443
    results = check(platform)
    assert results["pod → tenant-b API"].status == "OK"
    assert results["pod → tenant-b node ports"].failed


def test_source_ranges_closed_and_open(platform):
    """Separate worker networks: tenant-b's Service admits only its own, so kube-proxy drops tenant-a's pods; a
    Service whose ranges admit tenant-a (the outputs still say they do not) lets them connect, which fails."""
    platform.outputs.update(kindSubnet=None, workerNetworks=["172.18.0.0/24"])
    for index, name in enumerate(("tenant-a", "tenant-b")):
        platform.outputs["plan"]["tenants"][name]["workerCidrs"] = [f"172.18.{index + 1}.0/24"]
        platform.outputs["tenants"][name]["sourceRanges"] = ["172.18.0.0/24", f"172.18.{index + 1}.0/24"]
    service = platform.management.services[("tenant-b", "tenant-b")]
    service["spec"]["loadBalancerSourceRanges"] = ["172.18.0.0/24", "172.18.2.0/24"]
    assert node_address(platform.tenants["tenant-a"].nodes[0]) == "172.18.1.10"
    result = check(platform)["pod → tenant-b API"]
    assert result.ok and "filtered" in result.detail
    service["spec"]["loadBalancerSourceRanges"].append("172.18.1.0/24")
    result = check(platform)["pod → tenant-b API"]
    assert result.failed and "tenant-a's pod connected to tenant-b's API server at 172.18.255.201:6443" in (
        result.detail)


def test_hami_extender_closed_and_open(platform):
    result = check(platform)["pod → tenant-b HAMi extender"]
    assert result.ok and "172.18.2.10:31993, 172.18.2.10:31998 refused" in result.detail
    # The chart's default: the extender as a NodePort on every node of the tenant.
    platform.tenants["tenant-b"].services[("kube-system", "hami-scheduler")]["spec"] = {
        "type": "NodePort", "ports": [{"name": "scheduler", "port": 443, "nodePort": HAMI_DEFAULT_NODE_PORTS[0]},
                                      {"name": "monitor", "port": 31993, "nodePort": HAMI_DEFAULT_NODE_PORTS[1]}]}
    result = check(platform)["pod → tenant-b HAMi extender"]
    assert result.failed and "connected to 172.18.2.10:31993, 172.18.2.10:31998" in result.detail
    assert "ClusterIP" in result.fix


def test_hami_extender_on_a_node_port_the_chart_does_not_default_to(platform):
    platform.tenants["tenant-b"].services[("kube-system", "hami-scheduler")]["spec"] = {
        "type": "NodePort", "ports": [{"name": "scheduler", "port": 443, "nodePort": 30555}]}
    result = check(platform)["pod → tenant-b HAMi extender"]
    assert result.failed and "172.18.2.10:30555" in result.detail


def test_image_caches_closed_and_open(platform):
    result = check(platform)["pod → image caches"]
    assert result.ok and "172.18.0.5:5000" in result.detail and "filtered" in result.detail
    # A host-network pod is the node itself, which pulls from the caches: the fence drops only forwarded traffic.
    assert platform.tenants["tenant-a"].network.outcome(platform.tenants["tenant-a"], {
        "metadata": {"namespace": "default"}, "spec": {"hostNetwork": True}}, "172.18.0.5", 5000) == "connected"
    # Nothing keeps tenant-a's pods from the caches (its node without its mirror fence): the proxy answers them.
    platform.tenants["tenant-a"].network.fenced_nodes.clear()
    result = check(platform)["pod → image caches"]
    assert result.failed
    assert "connected to 172.18.0.5:5000, 172.18.0.6:5000, 172.18.0.7:5000" in result.detail
    assert "the lab's image caches is reachable from tenant workloads" in result.detail


def test_data_store_closed_and_open(platform):
    """From tenant-b (whose pod network does not hold the etcd pods' addresses), with a route to the management
    pod network added (root on a lab worker can): the kamaji-etcd-clients policy drops it while it is enforced."""
    platform.management.network.routed_pod_network = True
    platform.management.network.cni = "calico"
    result = check(platform, "tenant-b")["pod → tenant-a data store"]
    assert result.ok and "10.244.0.10:2379" in result.detail and "filtered" in result.detail
    platform.management.network.cni = "kindnetd"
    platform.management.network.kindnetd_reading = False  # FailOpen: nobody reads the queue, packets pass
    result = check(platform, "tenant-b")["pod → tenant-a data store"]
    assert result.failed and "tenant-b's pod connected to 10.244.0.10:2379" in result.detail


def test_enforcement_kindnetd_is_not_enforced_even_when_it_drops(platform):
    result = check(platform)[ENFORCED]
    assert result.status == "NOT ENFORCED" and not result.failed
    assert "10.244.0.30:6443 filtered" in result.detail and "10.244.0.10:2379 filtered" in result.detail
    assert "FailOpen" in result.detail


def test_enforcement_kindnetd_failing_open_is_a_failure(platform):
    platform.management.network.kindnetd_reading = False
    result = check(platform)[ENFORCED]
    assert result.failed
    assert "connected to tenant-a control plane at 10.244.0.30:6443, tenant-a data store default at " \
           "10.244.0.10:2379 → NetworkPolicy is not enforced (CNI: kindnetd)" in result.detail


def test_enforcement_by_calico_is_proved(platform):
    del platform.management.daemon_sets[("kube-system", "kindnet")]
    platform.management.daemon_sets[("calico-system", "calico-node")] = {"metadata": {"name": "calico-node"}}
    platform.management.network.cni = "calico"
    result = check(platform)[ENFORCED]
    assert result.status == "OK" and "(CNI: Calico)" in result.detail


@pytest.mark.parametrize("cni", ["calico", "none"])
def test_enforcement_fails_when_the_policy_objects_exist_but_nothing_enforces_them(platform, cni):
    """The shape row stays OK (the objects exist); only the probe tells that nothing enforces them."""
    del platform.management.daemon_sets[("kube-system", "kindnet")]
    platform.management.network.cni = cni
    if cni == "calico":  # enforced, but the etcd's fence is gone
        platform.management.network_policies["kamaji-system"] = []
    results = check(platform)
    assert results[ENFORCED].failed
    assert ("NetworkPolicies (management)" in {n for n, r in results.items() if r.failed}) is (cni == "calico")
