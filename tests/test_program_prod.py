"""The example production stack (Pulumi.prod.example.yaml): an existing management cluster, SSH-joined GPU servers,
dedicated data stores, several workload namespaces and operator networks.

One simulated first `up` of the example as written is shared by the module, with the secrets its header tells
users to set, and its cluster and SSH servers (with their cards) on the simulated machine.
"""

from __future__ import annotations

import base64
import ipaddress
import json

import pytest
import yaml

from components.tenant.spec import admin_kubeconfig_secret_name
from config import load_stack_config
from ops import verify_checks
from ops.verify import platform_from_outputs
from tests.support import netpol
from tests.support.crd_schema import crd_json_schema, schema_errors
from tests.support.fake_platform import FakeCluster
from tests.support.mockrun import load_stack_file, run_program
from tests.support.sim.lab import adopt, lab_world
from tests.support.sim.state import plain
from tests.support.sim.world import ADOPTED_LB_RANGE, set_api_endpoint
from tests.test_config_infrastructure import PRIVATE_KEY, prod_example_with_secrets
from tests.test_program import SECRET_OUTPUTS, STACK_OUTPUTS, FirstUp, credential_parts, first_up, leaks

RELEASE = "kubernetes:helm.sh/v3:Release"
REMOTE = "command:remote:Command"
SECRET_KEYS = ("management", "tenants")
TEAMS = ("team-vision", "team-speech")
NODES = ["team-speech-gpu-01", "team-speech-gpu-02", "team-vision-gpu-01", "team-vision-gpu-02"]


# Where pods reach the adopted cluster's API server: its control-plane nodes, on a network of their own (the
# kubeconfig names a VIP in front of them), outside every workerCidrs of the example.
CONTROL_PLANE_NODE = "10.40.0.11"


def example_on_its_machine(world):
    """The example with its secrets set, pointed at `world`'s existing cluster and SSH servers."""
    config = adopt(world, prod_example_with_secrets())
    set_api_endpoint(world.adopted, CONTROL_PLANE_NODE, 6443)
    return config


@pytest.fixture(scope="module")
def example():
    return load_stack_config(prod_example_with_secrets(), SECRET_KEYS)


@pytest.fixture(scope="module")
def prod() -> FirstUp:
    world = lab_world()
    return first_up(example_on_its_machine(world), world, stack="prod", secret_keys=SECRET_KEYS)


@pytest.fixture(scope="module")
def run(prod):
    return prod.run


def test_adopt_mode_creates_no_kind_cluster_and_runs_nothing_on_the_host(run, prod):
    assert [r.name for r in run.resources if r.type.startswith("docker:") or r.type == "command:local:Command"] == []
    assert prod.world.kind == {} and prod.world.docker.containers == {} and prod.world.docker.networks == {}
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    assert provider.is_secret("kubeconfig")
    assert provider.inputs["kubeconfig"] == run.outputs["managementKubeconfig"].value
    assert yaml.safe_load(provider.inputs["kubeconfig"])["clusters"][0]["cluster"]["server"] == prod.world.adopted.server
    # Not our cluster: an unreachable API fails destroy instead of dropping everything from the state.
    assert (provider.inputs["deleteUnreachable"], provider.inputs["upsertExistingObjects"]) == ("false", "false")


def test_stack_outputs(run, prod, example):
    assert set(run.outputs) == STACK_OUTPUTS
    assert {name for name, output in run.outputs.items() if output.secret} == SECRET_OUTPUTS
    assert run.outputs["kindSubnet"].value is None
    assert run.outputs["workerNetworks"].value == example.management.worker_cidrs
    assert run.outputs["lbPoolRange"].value == example.management.load_balancer_pool
    assert set(run.outputs["tenants"].value) == set(run.outputs["tenantKubeconfigs"].value) == set(TEAMS)
    assert run.outputs["plan"].value["gpuMode"] == "nvidia"
    for team in TEAMS:
        assert set(yaml.safe_load(run.outputs["tenantKubeconfigs"].value[team])["users"][0]["user"]) == {"token"}
        assert prod.world.tenant_api(team).authenticate(run.outputs["tenantAdminKubeconfigs"].value[team])


def test_metallb_hands_out_exactly_the_configured_pool(run, example, vendor_dir):
    (pool,) = run.of_type("kubernetes:metallb.io/v1beta1:IPAddressPool")
    assert pool.inputs["spec"] == {"addresses": [example.management.load_balancer_pool]}
    schema = crd_json_schema(vendor_dir / "metallb" / "metallb.io_ipaddresspools.yaml", "v1beta1")
    assert schema_errors({k: pool.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}, schema) == []
    first, last = (ipaddress.ip_address(a) for a in ADOPTED_LB_RANGE.split("-"))
    for tenant in run.outputs["tenants"].value.values():
        assert first <= ipaddress.ip_address(tenant["endpoint"].rpartition(":")[0]) <= last


def test_ssh_workers_join_over_ssh_with_their_pinned_host_keys(run, prod, example):
    joins = {r.name: r for r in run.of_type(REMOTE) if r.name.endswith("-join")}
    assert sorted(joins) == [f"{node}-join" for node in NODES]
    for tenant in example.tenants:
        endpoint = run.outputs["tenants"].value[tenant.name]["endpoint"]
        for worker in tenant.workers:
            join = joins[f"{tenant.name}-{worker.name}-join"]
            connection = join.inputs["connection"]
            assert (connection["host"], connection["user"]) == (worker.ssh.host, worker.ssh.user)
            assert connection["hostKey"] == worker.ssh.host_key
            assert connection["privateKey"] == PRIVATE_KEY
            assert join.is_secret("connection") and join.is_secret("stdin")
            # The command lines name the action only (non-root users go through sudo -n).
            assert join.inputs["create"] == "sudo -n bash -s -- create"
            assert join.inputs["delete"] == "sudo -n bash -s -- delete"
            # On the machine: joined to its own tenant's control plane.
            assert prod.world.ssh[worker.ssh.host].machine.kubelet_conf == f"https://{endpoint}"
        assert run.outputs["tenants"].value[tenant.name]["nodes"] == [f"{tenant.name}-{w.name}" for w in tenant.workers]


def test_no_secret_is_readable_in_any_input_output_or_state(prod):
    secrets = credential_parts(prod.run.outputs["managementKubeconfig"].value)
    secrets |= {PRIVATE_KEY, base64.b64encode(PRIVATE_KEY.encode()).decode()}
    for team in TEAMS:
        stored = prod.world.adopted.find("Secret", team, admin_kubeconfig_secret_name(team))
        for encoded in stored["data"].values():
            secrets |= credential_parts(base64.b64decode(encoded).decode())
        secrets |= credential_parts(prod.run.outputs["tenantKubeconfigs"].value[team])
    for node in NODES:
        token = plain(prod.sim.resource(f"{node}-membership").outputs["token"])
        secrets |= {token, token.split(".")[1], base64.b64encode(token.encode()).decode()}
    assert leaks(prod, secrets) == []


def test_each_team_admits_its_own_servers_the_shared_networks_and_the_operators_not_the_other_team(run, example):
    management = example.management
    tenants = {tenant.name: tenant for tenant in example.tenants}
    for team in TEAMS:
        own = [*management.worker_cidrs, *tenants[team].worker_cidrs]
        policy = run.named(f"{team}-isolation", "kubernetes:networking.k8s.io/v1:NetworkPolicy")
        ranges = run.named(f"{team}-tcp").inputs["spec"]["networkProfile"]["loadBalancerSourceRanges"]
        assert ranges == sorted({*own, *management.operator_cidrs})
        assert run.outputs["tenants"].value[team]["sourceRanges"] == ranges
        # The pods admit what the load balancer admits: an operator's connection that arrives un-NATed (always on
        # a one-node cluster) is not dropped at the pod. Egress goes to the worker networks only.
        policies = [{"metadata": policy.inputs["metadata"], "spec": policy.inputs["spec"]}]
        operator = netpol.Peer(str(next(ipaddress.ip_network(management.operator_cidrs[0]).hosts())))
        for port in (6443, 8132):
            assert netpol.allowed(policies, "ingress", team, {}, operator, port)
        assert not netpol.allowed(policies, "egress", team, {}, operator, 6443)
        blocks = [peer["ipBlock"]["cidr"] for rule in policy.inputs["spec"]["egress"] for peer in rule["to"]
                  if "ipBlock" in peer]
        assert blocks == own
        for other in TEAMS:
            for worker in tenants[other].workers:
                admitted = any(ipaddress.ip_address(worker.ssh.host) in ipaddress.ip_network(r) for r in ranges)
                assert admitted == (other == team), (team, worker.ssh.host, ranges)


def _management_policies(run, namespace):
    return [{"metadata": p.inputs["metadata"], "spec": p.inputs["spec"]}
            for p in run.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
            if p.inputs["metadata"]["namespace"] == namespace]


def test_a_dedicated_etcds_setup_jobs_reach_the_management_api_and_nothing_else_in_the_namespace_does(run, prod):
    # kamaji-etcd's hook Jobs run kubectl against the management API (create secret, rollout status, delete
    # secret). Here it lies outside every worker network, so the isolation policy alone stranded them and the
    # release timed out.
    api_server = [("10.96.0.1", 443), (CONTROL_PLANE_NODE, 6443)]  # the `kubernetes` Service and its endpoint
    for team in TEAMS:
        policies = _management_policies(run, team)
        release = run.named(f"{team}-etcd", RELEASE)
        for job in ("etcd-etcd-setup-1", "etcd-etcd-setup-2", "etcd-etcd-teardown"):
            # The labels the Job API gives the pods (the chart's pod templates carry none).
            labels = {"batch.kubernetes.io/job-name": job, "job-name": job, "controller-uid": "0000"}
            for address, port in api_server:
                assert netpol.allowed(policies, "egress", team, labels, netpol.Peer(address), port), (team, job)
            assert not netpol.allowed(policies, "egress", team, labels, netpol.Peer(CONTROL_PLANE_NODE), 10250)
        # The control plane and etcd get no way to the management API.
        for labels in ({"kamaji.clastix.io/name": team}, {"app.kubernetes.io/name": "kamaji-etcd"},
                       {"batch.kubernetes.io/job-name": "something-else"}):
            for address, port in api_server:
                assert not netpol.allowed(policies, "egress", team, labels, netpol.Peer(address), port), labels
        # The policy is in place before the hooks run, and outlives the pre-delete hook on removal.
        assert run.depends_on(release, run.named(f"{team}-etcd-setup"))


def test_make_verify_expects_the_network_policies_the_program_creates_for_dedicated_stores(run):
    management = FakeCluster("https://management", {"admin"})
    for team in TEAMS:
        management.network_policies[team] = _management_policies(run, team)
    kamaji = run.named("kamaji-etcd-clients", "kubernetes:networking.k8s.io/v1:NetworkPolicy")
    management.network_policies["kamaji-system"] = [{"metadata": kamaji.inputs["metadata"],
                                                     "spec": kamaji.inputs["spec"]}]
    _, target = platform_from_outputs(json.loads(json.dumps({name: o.value for name, o in run.outputs.items()})))
    for team in TEAMS:
        result = verify_checks.check_network_policies(management.session("admin"), target.tenants[team])
        assert result.ok and "etcd-setup-api lets its etcd's setup Jobs reach the management API" in result.detail


def test_each_team_has_a_dedicated_etcd_and_data_store(run, example, vendor_dir):
    schema = crd_json_schema(vendor_dir / "kamaji" / "kamaji.clastix.io_datastores.yaml")
    for tenant in example.tenants:
        store = tenant.data_store
        etcd = run.named(f"{tenant.name}-etcd", RELEASE)
        values = etcd.inputs["values"]
        assert etcd.inputs["namespace"] == tenant.name
        assert (values["replicas"], values["persistentVolumeClaim"]["size"]) == (store.replicas, store.storage_size)
        assert values["quotaBackendBytes"] == str(store.quota_mib * 1024 * 1024)
        datastore = run.named(f"{tenant.name}-datastore")
        manifest = {k: datastore.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}
        assert schema_errors(manifest, schema) == []
        assert len(manifest["spec"]["endpoints"]) == store.replicas
        assert {e.split(".")[2] for e in manifest["spec"]["endpoints"]} == {tenant.name}
        name = manifest["metadata"]["name"]
        assert run.named(f"{tenant.name}-tcp").inputs["spec"]["dataStore"] == name
        assert run.outputs["tenants"].value[tenant.name]["dataStore"] == name
        assert run.depends_on(run.named(f"{tenant.name}-tcp"), etcd)
    # Nobody uses the shared etcd, but it still exists for tenants without a store of their own.
    assert run.named("kamaji-datastore").inputs["metadata"]["name"] == "default"


def test_workload_namespaces_get_pod_security_quota_and_the_user_binding(run, example):
    for tenant in example.tenants:
        for namespace in tenant.namespaces:
            patch = run.named(f"{tenant.name}-namespace-{namespace}", "kubernetes:core/v1:NamespacePatch")
            assert patch.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
            quota = run.named(f"{tenant.name}-gpu-quota-{namespace}", "kubernetes:core/v1:ResourceQuota")
            assert quota.inputs["metadata"]["namespace"] == namespace
            assert quota.inputs["spec"]["hard"] == {
                "requests.nvidia.com/gpu": str(tenant.quota.gpus),
                "limits.nvidia.com/gpumem": str(tenant.quota.memory_mib),
                "limits.nvidia.com/gpucores": str(tenant.quota.cores),
            }
            binding = run.named(f"{tenant.name}-user-rolebinding-{namespace}")
            assert binding.inputs["metadata"]["namespace"] == namespace
    assert example.tenants[0].namespaces == ["default", "training"]
    assert not [r for r in run.resources if r.name.startswith("team-speech-") and r.name.endswith("-training")]


def test_hami_uses_the_real_device_plugin_on_labelled_gpu_nodes(run):
    hami = [r for r in run.of_type(RELEASE) if r.inputs["name"] == "hami"]
    assert sorted(r.name for r in hami) == [f"{team}-hami" for team in sorted(TEAMS)]
    for release in hami:
        values = release.inputs["values"]
        assert values["devicePlugin"]["enabled"] is True and values["mockDevicePlugin"]["enabled"] is False
    labels = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"] for r in run.resources
              if r.name.endswith("-gpu-label")}
    assert labels == {node: {"gpu": "on"} for node in NODES}
    assert [r.name for r in run.resources if r.name.endswith(("-gpu-register", "-gpu-capacity"))] == []


def test_every_team_is_proven_on_the_server_its_smoke_test_fits(run, example):
    for tenant in example.tenants:
        node = f"{tenant.name}-{example.smoke_test.worker_in(tenant).name}"
        pod = run.named(f"{tenant.name}-gpu-smoke-test")
        assert pod.inputs["spec"]["nodeSelector"] == {"kubernetes.io/hostname": node}
        evidence = run.outputs["tenants"].value[tenant.name]["smokeTest"]
        assert (evidence["schedulerName"], evidence["node"]) == ("hami-scheduler", node)
        # The real device plugin decides the capacity: the program reports none of its own.
        assert run.outputs["tenants"].value[tenant.name]["gpuCapacity"] is None


def test_a_preview_of_the_example_touches_no_server():
    world = lab_world()
    run = run_program(example_on_its_machine(world), stack="prod", secret_keys=SECRET_KEYS, world=world,
                      preview=True)
    assert run.named("team-vision-gpu-01-join").inputs["connection"]["host"] == "10.20.1.11"
    assert [host.machine.kubelet_conf for host in world.ssh.values()] == [None] * len(NODES)
    assert not any(key[0] == "Namespace" and key[2].startswith("team-") for key in world.adopted.objects)


def test_the_example_file_keeps_secrets_out():
    raw = load_stack_file("prod.example")
    assert "kubeconfig" not in raw["management"]
    assert all("privateKey" not in w["ssh"] for t in raw["tenants"] for w in t["workers"])
