"""The TenantControlPlane component inside the real program, on the lifecycle simulator: what it registers on
the management cluster and inside the tenant, which credentials it reads (and which it must not), how its
options shape replacement and tear-down, and what the simulated Kamaji and tenant API end up holding.

One lab serves most tests: the dev stack with an operator network, and tenant-b on a dedicated etcd with a GPU
quota over two workload namespaces. Its program is the real `__main__.py`, plus stack outputs that expose the
component's own attributes (so their secretness is the component's, not `__main__`'s wrapping).
"""

from __future__ import annotations

import base64
import copy
import json
import runpy
from types import SimpleNamespace

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from pulumi.runtime import rpc

from components.tenant import spec as tenant_spec
from components.tenant.control_plane import TenantControlPlane, TenantControlPlaneArgs
from config import load_stack_config
from config.models import DEFAULT_OBJECT_COUNTS
from naming import DEFAULT_DATASTORE
from tests.support import mockrun
from tests.support.crd_schema import schema_errors
from tests.support.lifecycle_support import one_tenant_stack
from tests.support.sim import Lifecycle, World, paths, pki, systems
from tests.support.sim.lab import lab_world
from tests.support.sim.state import plain
from tests.support.sim.world import CLUSTER_ADMINS, KIND_CONTROL_PLANE_IP, SYSTEM_MASTERS
from tests.test_tenant_spec import strict_schema

COMPONENT = "gpu-tenancy:index:TenantControlPlane"
TCP_TYPE = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"
SECRET_TYPE = "kubernetes:core/v1:Secret"
OPERATOR_CIDR = "192.168.77.0/24"
TENANTS = ("tenant-a", "tenant-b")
PROBES = ("user_kubeconfig", "admin_kubeconfig", "operator_kubeconfig", "ca_certificate", "discovery_hash",
          "endpoint")
CARD_C = {"uuid": "GPU-MOCK-C0", "model": "NVIDIA-A100", "memoryMiB": 8192}


def lab_config():
    config = mockrun.reference_stack()
    config["management"] = {"operatorCidrs": [OPERATOR_CIDR]}
    tenant_b = config["tenants"][1]
    tenant_b["dataStore"] = {"dedicated": True, "replicas": 3, "storageSize": "4Gi", "quotaMiB": 2048}
    tenant_b["namespaces"] = ["default", "ml"]
    tenant_b["quota"] = {"gpus": 2, "memoryMiB": 6000, "cores": 60}
    return config


def program_with_probes():
    """`__main__.py`, then each TenantControlPlane's attributes as stack outputs `probe.<tenant>.<attribute>`."""
    made: list[TenantControlPlane] = []
    original = TenantControlPlane.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    TenantControlPlane.__init__ = record
    try:
        runpy.run_path(str(mockrun.MAIN), run_name="__main__")
    finally:
        TenantControlPlane.__init__ = original
    for component in made:
        for attribute in PROBES:
            pulumi.export(f"probe.{component.tenant_name}.{attribute}", getattr(component, attribute))


def _registrations(sim):
    return [mockrun.registration(r) for r in sim.engine.last_operation.registered.values()]


@pytest.fixture(scope="module")
def lab():
    sim = Lifecycle(lab_config(), world=lab_world(), program=program_with_probes)
    sim.preview()
    fresh_preview = _registrations(sim)
    plan = sim.up(skip_preview=True)
    outputs = {name: mockrun.StackOutput(plain(value), name in plan.secret_outputs)
               for name, value in plan.outputs.items()}
    run = mockrun.ProgramRun(resources=_registrations(sim), outputs=outputs)
    stack = load_stack_config(lab_config())
    return SimpleNamespace(sim=sim, plan=plan, run=run, fresh_preview=fresh_preview, versions=stack.versions,
                           tenants={t.name: t for t in stack.tenants})


@pytest.fixture(scope="module")
def tcp_schema(vendor_dir):
    return strict_schema(vendor_dir / "kamaji" / "kamaji.clastix.io_tenantcontrolplanes.yaml")


@pytest.fixture(scope="module")
def datastore_schema(vendor_dir):
    return strict_schema(vendor_dir / "kamaji" / "kamaji.clastix.io_datastores.yaml")


@pytest.fixture
def scratch_config(lab):
    """Change `lab.sim.config` for a preview; restored afterwards (a preview commits no state)."""
    saved = copy.deepcopy(lab.sim.config)
    yield lab.sim.config
    lab.sim.config = saved


def _provider_urn(registration):
    return registration.provider.rsplit("::", 1)[0]


def _management_api(lab):
    return lab.sim.world.kind["gpu-tenancy"].api


def _live_tcp(lab, tenant):
    return plain(lab.sim.resource(f"{tenant}-tcp").outputs)


def _world_tenant(lab, tenant):
    (found,) = [t for t in lab.sim.world.tenants.values() if t.namespace == tenant]
    return found


def _decoded(secret, key):
    return base64.b64decode(secret["data"][key]).decode()


def _inside(lab, tenant):
    """Everything registered through the tenant's own provider."""
    provider = lab.run.named(f"{tenant}-tenant").urn
    return [r for r in lab.run.resources if r.provider and _provider_urn(r) == provider]


# --------------------------------------------------------------------------- #
# The TenantControlPlane object and what Kamaji makes of it
# --------------------------------------------------------------------------- #


def test_tcp_is_valid_and_waits_for_kamaji_its_fence_and_its_datastore(lab, tcp_schema):
    webhook = lab.run.named("kamaji-webhook-ready")
    for tenant in TENANTS:
        tcp = lab.run.named(f"{tenant}-tcp")
        assert tcp.type == TCP_TYPE
        assert _provider_urn(tcp) == _provider_urn(lab.run.named(f"{tenant}-namespace"))
        assert schema_errors(tcp.inputs, tcp_schema) == []
        assert "status" not in tcp.inputs
        assert (tcp.custom_timeouts["create"], tcp.custom_timeouts["update"]) == ("20m", "20m")
        for before in (f"{tenant}-namespace", f"{tenant}-isolation"):
            assert lab.run.depends_on(tcp, lab.run.named(before)), before
        # Kamaji's webhooks (failurePolicy Fail) answer and the DataStore exists (internal/webhook/handlers/tcp_datastore.go).
        assert lab.run.depends_on(tcp, webhook)
    assert lab.run.depends_on(lab.run.named("tenant-b-tcp"), lab.run.named("tenant-b-datastore"))


def test_kamaji_runs_each_tenant_with_our_ranges_sources_and_admission_plugins(lab):
    worker_networks = lab.run.outputs["workerNetworks"].value
    assert worker_networks
    for tenant in TENANTS:
        network = lab.run.named(f"{tenant}-tcp").inputs["spec"]["networkProfile"]
        expected_sources = sorted({*worker_networks, OPERATOR_CIDR})
        assert network["loadBalancerSourceRanges"] == expected_sources
        running = _world_tenant(lab, tenant)
        config = lab.tenants[tenant]
        assert running.load_balancer_source_ranges == expected_sources
        assert (running.pod_cidrs, running.service_cidrs) == ([config.pod_cidr], [config.service_cidr])
        assert running.node_restriction, "kubelets could modify each other's Node objects"
        # The NetworkPolicy fences the control-plane pods to the same worker networks and operators.
        policy = lab.run.named(f"{tenant}-isolation")
        assert policy.type == "kubernetes:networking.k8s.io/v1:NetworkPolicy"
        assert policy.inputs["spec"] == tenant_spec.isolation_network_policy(
            tenant, worker_networks, [OPERATOR_CIDR])["spec"]
        assert policy.inputs["metadata"]["namespace"] == tenant


def test_kube_proxy_is_ours_not_kamajis_addon(lab):
    for tenant in TENANTS:
        assert "kubeProxy" not in lab.run.named(f"{tenant}-tcp").inputs["spec"]["addons"]
        endpoint = lab.run.outputs["tenants"].value[tenant]["endpoint"]
        config_map = lab.run.named(f"{tenant}-kube-proxy-configmap")
        assert config_map in _inside(lab, tenant)
        kubeconfig = yaml.safe_load(config_map.inputs["data"]["kubeconfig.conf"])
        assert kubeconfig["clusters"][0]["cluster"]["server"] == f"https://{endpoint}"
        api = lab.sim.world.tenant_api(tenant)
        assert systems.kube_proxy_works(lab.sim.world, api)
        daemon_set = api.find("DaemonSet", "kube-system", "kube-proxy")
        assert "kamaji.clastix.io/project" not in (daemon_set["metadata"].get("labels") or {})


# --------------------------------------------------------------------------- #
# Replacement and tear-down options
# --------------------------------------------------------------------------- #


def test_cidr_replace_paths_name_real_inputs_of_the_registered_tcp(lab):
    for tenant in TENANTS:
        tcp = lab.run.named(f"{tenant}-tcp")
        assert tcp.replace_on_changes == list(tenant_spec.CIDR_REPLACE_ON_CHANGES)
        for path in tcp.replace_on_changes:
            assert paths.matches_any_input(paths.parse(path), tcp.inputs), path
        # A fixed name: the old control plane must go before its replacement is created.
        assert tcp.delete_before_replace


def test_a_changed_pod_range_replaces_only_that_tenants_control_plane_and_what_lives_in_it(lab, scratch_config):
    scratch_config["tenants"][0]["podCidr"] = "10.250.0.0/16"
    plan = lab.sim.preview()
    step = plan.step("tenant-a-tcp")
    assert step.op == "replace", plan.render()
    assert any("podCidrs" in diff for diff in step.diffs), step.diffs
    changed = {name for names in plan.changed().values() for name in names}
    assert changed and all(name.startswith("tenant-a-") for name in changed), plan.render()


def test_management_objects_go_with_the_cluster_and_tenant_objects_with_the_tcp(lab):
    cluster = lab.run.named("management-kind").urn
    for tenant in TENANTS:
        tcp = lab.run.named(f"{tenant}-tcp")
        management = [f"{tenant}-namespace", f"{tenant}-isolation", f"{tenant}-tcp"]
        if tenant == "tenant-b":
            management += ["tenant-b-etcd", "tenant-b-datastore"]
        for name in management:
            assert lab.run.named(name).deleted_with == cluster, name
        inside = _inside(lab, tenant)
        assert {r.name for r in inside} >= {f"{tenant}-kube-proxy-daemonset", f"{tenant}-user-rolebinding-default",
                                             f"{tenant}-namespace-default"}
        for resource in inside:
            # Reads (`.get`) are never deleted, so they need no deleted_with.
            assert resource.read or resource.deleted_with == tcp.urn, resource


def test_tenants_never_depend_on_each_other(lab):
    for mine in TENANTS:
        for other in TENANTS:
            if other == mine:
                continue
            other_component = lab.run.named(other, COMPONENT)
            for resource in lab.run.descendants(lab.run.named(mine, COMPONENT)):
                assert not lab.run.depends_on(resource, other_component), f"{resource} waits for tenant {other}"


# --------------------------------------------------------------------------- #
# Credentials: read by Kamaji's pointer, after the control plane exists, never the CA key
# --------------------------------------------------------------------------- #


def test_admin_secret_is_read_by_kamajis_status_pointer_after_the_tcp(lab):
    steps = [(step.op, step.name) for step in lab.plan.steps]
    for tenant in TENANTS:
        tcp = lab.run.named(f"{tenant}-tcp")
        live = _live_tcp(lab, tenant)
        pointer = live["status"]["kubeconfig"]["admin"]["secretName"]
        read = lab.run.named(f"{tenant}-admin-kubeconfig", SECRET_TYPE)
        assert read.read and read.resource_id == f"{live['metadata']['namespace']}/{pointer}"
        assert tcp.urn in read.dependencies
        assert _provider_urn(read) == _provider_urn(tcp)
        assert {"data", "stringData"} <= set(read.additional_secret_outputs)
        assert steps.index(("create", tcp.name)) < steps.index(("read", read.name))


def test_a_fresh_preview_reads_no_tenant_secret(lab):
    reads = [r for r in lab.fresh_preview if r.read]
    assert {r.name for r in reads} >= {f"{t}-admin-kubeconfig" for t in TENANTS}
    # An unknown id: the engine skips the read ("The only time we can't run is if the ID we are given is unknown").
    assert {r.resource_id for r in reads if r.type == SECRET_TYPE} <= {rpc.UNKNOWN, ""}


def test_adding_a_tenant_previews_without_reading_its_secret_yet(lab, scratch_config):
    scratch_config["tenants"].append({"name": "tenant-c", "workers": [{"name": "w0", "gpus": [CARD_C]}]})
    plan = lab.sim.preview()
    reads = {r.name: r.resource_id for r in _registrations(lab.sim) if r.read and r.type == SECRET_TYPE}
    assert reads["tenant-c-admin-kubeconfig"] in (rpc.UNKNOWN, "")
    for tenant in TENANTS:
        assert reads[f"{tenant}-admin-kubeconfig"] == f"{tenant}/{tenant}-admin-kubeconfig"
    assert set(plan.changed()) == {"create"}, plan.render()
    assert all(name.startswith("tenant-c") for name in plan.names("create")), plan.render()


def test_the_admin_secret_name_comes_from_the_status_not_from_a_naming_rule(monkeypatch):
    """Kamaji may name the Secret differently (a prefix, a new version): the pointer is what counts."""
    make_secret, reconcile = systems._kubeconfig_secret, systems._reconcile_tenant

    def renamed_secret(tenant, tcp_name, namespace):
        secret = make_secret(tenant, tcp_name, namespace)
        secret["metadata"]["name"] = f"{tcp_name}-kubeconfigs"
        return secret

    def pointing_at_it(world, api, tcp):
        reconcile(world, api, tcp)
        admin = ((tcp.get("status") or {}).get("kubeconfig") or {}).get("admin")
        if admin:
            admin["secretName"] = f"{tcp['metadata']['name']}-kubeconfigs"

    monkeypatch.setattr(systems, "_kubeconfig_secret", renamed_secret)
    monkeypatch.setattr(systems, "_reconcile_tenant", pointing_at_it)
    run = mockrun.run_program(one_tenant_stack())
    assert run.named("tenant-a-admin-kubeconfig", SECRET_TYPE).resource_id == "tenant-a/tenant-a-kubeconfigs"
    assert run.outputs["tenants"].value["tenant-a"]["smokeTest"]["schedulerName"] == "hami-scheduler"


def test_no_ca_private_key_is_read_into_the_state(lab):
    secret_reads = {r.name for r in lab.run.resources if r.read and r.type == SECRET_TYPE}
    assert secret_reads == {f"{t}-admin-kubeconfig" for t in TENANTS}
    state = json.dumps([[plain(r.inputs), plain(r.outputs)] for r in lab.sim.engine.state.values()], default=str)
    for tenant in TENANTS:
        ca_secret = _live_tcp(lab, tenant)["status"]["certificates"]["ca"]["secretName"]
        stored = _management_api(lab).find("Secret", tenant, ca_secret)
        assert stored is not None
        key = stored["data"]["ca.key"]
        assert key not in state and base64.b64decode(key).decode() not in state


def test_the_program_writes_into_the_tenant_as_super_admin(lab):
    for tenant in TENANTS:
        live = _live_tcp(lab, tenant)
        secret = _management_api(lab).find("Secret", tenant, live["status"]["kubeconfig"]["admin"]["secretName"])
        provider = lab.run.named(f"{tenant}-tenant", "pulumi:providers:kubernetes")
        assert provider.is_secret("kubeconfig")
        kubeconfig = provider.inputs["kubeconfig"]
        assert kubeconfig == _decoded(secret, tenant_spec.SUPER_ADMIN_KUBECONFIG_KEY)
        # system:masters: no wait for Kamaji to bind kubeadm:cluster-admins (internal/resources/kubeadm_phases.go).
        assert SYSTEM_MASTERS in pki.identity_of(pki.parse_kubeconfig(kubeconfig).client_certificate).groups
        # A re-created control plane (new UID) is a new cluster: the provider and all it manages are replaced.
        assert provider.inputs["clusterIdentifier"] == live["metadata"]["uid"]
        # The operator gets admin.conf, not the super-admin credential.
        admin = lab.run.outputs["tenantAdminKubeconfigs"].value[tenant]
        assert admin == _decoded(secret, tenant_spec.ADMIN_KUBECONFIG_KEY)
        assert pki.identity_of(pki.parse_kubeconfig(admin).client_certificate).groups == (CLUSTER_ADMINS,)


def test_ca_and_discovery_hash_come_from_the_tenants_ca_and_the_workers_joined_with_it(lab):
    for tenant in TENANTS:
        ca_pem = lab.sim.world.tenant_api(tenant).ca.pem.decode()
        assert lab.run.outputs[f"probe.{tenant}.ca_certificate"].value == ca_pem
        expected = tenant_spec.discovery_hash(ca_pem)
        assert lab.run.outputs[f"probe.{tenant}.discovery_hash"].value == expected
        assert lab.run.outputs["tenants"].value[tenant]["discoveryHash"] == expected
        assert lab.sim.world.machines[f"{tenant}-worker-0"].kubelet_ca_hash == expected


def test_credentials_are_secret_outputs_and_the_public_parts_are_not(lab):
    outputs = lab.run.outputs
    for tenant in TENANTS:
        for attribute in ("user_kubeconfig", "admin_kubeconfig", "operator_kubeconfig"):
            assert outputs[f"probe.{tenant}.{attribute}"].secret, attribute
        for attribute in ("ca_certificate", "discovery_hash", "endpoint"):
            assert not outputs[f"probe.{tenant}.{attribute}"].secret, attribute
    assert outputs["tenantKubeconfigs"].secret and outputs["tenantAdminKubeconfigs"].secret
    assert not outputs["tenants"].secret
    readable = json.dumps(outputs["tenants"].value)
    for tenant in TENANTS:
        for attribute in ("user_kubeconfig", "admin_kubeconfig", "operator_kubeconfig"):
            token_or_key = yaml.safe_load(outputs[f"probe.{tenant}.{attribute}"].value)["users"][0]["user"]
            assert not any(str(value) in readable for value in token_or_key.values())


# --------------------------------------------------------------------------- #
# Data stores
# --------------------------------------------------------------------------- #


def test_shared_and_dedicated_data_stores_follow_the_config(lab, datastore_schema):
    tenant_a = lab.run.named("tenant-a-tcp")
    assert tenant_a.inputs["spec"]["dataStore"] == DEFAULT_DATASTORE
    assert not [r for r in lab.run.resources if r.name in ("tenant-a-etcd", "tenant-a-datastore")]
    store = lab.tenants["tenant-b"].data_store
    etcd = lab.run.named("tenant-b-etcd", "kubernetes:helm.sh/v3:Release")
    assert (etcd.inputs["chart"], etcd.inputs["namespace"]) == ("./.cache/charts/kamaji/charts/kamaji-etcd", "tenant-b")
    assert etcd.inputs["values"] == tenant_spec.dedicated_etcd_values(store)
    assert etcd.inputs["values"]["replicas"] == 3 and etcd.inputs["values"]["persistentVolumeClaim"]["size"] == "4Gi"
    datastore = lab.run.named("tenant-b-datastore")
    assert datastore.type == "kubernetes:kamaji.clastix.io/v1alpha1:DataStore"
    assert schema_errors(datastore.inputs, datastore_schema) == []
    assert datastore.inputs["spec"] == tenant_spec.dedicated_datastore_spec("tenant-b", 3)
    assert lab.run.depends_on(datastore, etcd)
    name = datastore.inputs["metadata"]["name"]
    assert lab.run.named("tenant-b-tcp").inputs["spec"]["dataStore"] == name
    assert lab.run.outputs["tenants"].value["tenant-b"]["dataStore"] == name
    assert lab.run.outputs["tenants"].value["tenant-a"]["dataStore"] == DEFAULT_DATASTORE
    assert _live_tcp(lab, "tenant-b")["status"]["storage"]["dataStoreName"] == name


def test_a_dedicated_etcds_setup_jobs_may_reach_the_api_server_the_cluster_names(lab):
    # Read from the cluster (the `kubernetes` Service and its EndpointSlice): in the lab the kind node's address.
    policy = lab.run.named("tenant-b-etcd-setup", "kubernetes:networking.k8s.io/v1:NetworkPolicy")
    expected = tenant_spec.etcd_setup_network_policy("tenant-b", "etcd", [("10.96.0.1", 443),
                                                                          (KIND_CONTROL_PLANE_IP, 6443)])
    assert {k: policy.inputs[k] for k in ("metadata", "spec")} == {k: expected[k] for k in ("metadata", "spec")}
    assert lab.run.depends_on(lab.run.named("tenant-b-etcd"), policy)
    assert policy.deleted_with == lab.run.named("management-kind").urn
    assert not [r for r in lab.run.resources if r.name == "tenant-a-etcd-setup"]  # shared store: no hooks of its own
    # Read again on every run, and unchanged when the API server has not moved.
    plan = lab.sim.preview()
    assert plan.changed() == {}, plan.render()


# --------------------------------------------------------------------------- #
# Inside the tenant: workload namespaces, GPU quota, the restricted credential
# --------------------------------------------------------------------------- #


def test_workload_namespaces_enforce_pod_security_baseline(lab):
    for tenant in TENANTS:
        api = lab.sim.world.tenant_api(tenant)
        for namespace in lab.tenants[tenant].namespaces:
            patch = lab.run.named(f"{tenant}-namespace-{namespace}")
            assert patch.type == "kubernetes:core/v1:NamespacePatch"
            assert patch in _inside(lab, tenant)
            labels = api.find("Namespace", None, namespace)["metadata"]["labels"]
            assert labels["pod-security.kubernetes.io/enforce"] == "baseline", (tenant, namespace)


def test_gpu_quota_in_every_workload_namespace_with_hamis_resource_names(lab, vendor_dir):
    hami = yaml.safe_load((vendor_dir / "hami" / "values.yaml").read_text())
    assert not [r for r in lab.run.of_type("kubernetes:core/v1:ResourceQuota")
                if r.name.startswith("tenant-a-gpu-quota")]
    expected = {f"requests.{hami['resourceName']}": "2", f"limits.{hami['resourceMem']}": "6000",
                f"limits.{hami['resourceCores']}": "60"}
    api = lab.sim.world.tenant_api("tenant-b")
    for namespace in ("default", "ml"):
        quota = lab.run.named(f"tenant-b-gpu-quota-{namespace}", "kubernetes:core/v1:ResourceQuota")
        assert quota in _inside(lab, "tenant-b")
        assert quota.inputs["metadata"]["namespace"] == namespace
        assert quota.inputs["spec"]["hard"] == expected
        assert lab.run.depends_on(quota, lab.run.named(f"tenant-b-namespace-{namespace}"))
        assert api.find("ResourceQuota", namespace, tenant_spec.GPU_QUOTA_NAME)["spec"]["hard"] == expected


def test_object_quota_in_every_workload_namespace_of_every_tenant(lab):
    for tenant in TENANTS:
        api = lab.sim.world.tenant_api(tenant)
        for namespace in lab.tenants[tenant].namespaces:
            quota = lab.run.named(f"{tenant}-object-quota-{namespace}", "kubernetes:core/v1:ResourceQuota")
            assert quota in _inside(lab, tenant)
            assert lab.run.depends_on(quota, lab.run.named(f"{tenant}-namespace-{namespace}"))
            hard = api.find("ResourceQuota", namespace, tenant_spec.OBJECT_QUOTA_NAME)["spec"]["hard"]
            assert hard["count/secrets"] == str(DEFAULT_OBJECT_COUNTS["secrets"]), (tenant, namespace)
            assert hard["count/configmaps"] == str(DEFAULT_OBJECT_COUNTS["configmaps"]), (tenant, namespace)


def _binds_tenant_user(obj):
    return any(s.get("kind") == "ServiceAccount" and s.get("name") == tenant_spec.TENANT_USER
               for s in obj.get("subjects") or [])


def test_tenant_user_may_edit_only_its_workload_namespaces(lab):
    bindings = [r for r in lab.run.resources if "RoleBinding" in r.type and _binds_tenant_user(r.inputs)]
    assert not [r for r in bindings if "ClusterRoleBinding" in r.type], "a cluster-scoped grant"
    assert not [r for r in lab.run.resources if r.type.endswith((":Role", ":ClusterRole"))
                and tenant_spec.TENANT_USER in r.name]
    for tenant in TENANTS:
        namespaces = lab.tenants[tenant].namespaces
        mine = [r for r in bindings if r in _inside(lab, tenant)]
        assert sorted(r.inputs["metadata"]["namespace"] for r in mine) == sorted(namespaces)
        for binding in mine:
            assert binding.inputs["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                 "name": "edit"}
            namespace = binding.inputs["metadata"]["namespace"]
            assert lab.run.depends_on(binding, lab.run.named(f"{tenant}-namespace-{namespace}"))
        api = lab.sim.world.tenant_api(tenant)
        live = [b for kind in ("RoleBinding", "ClusterRoleBinding") for b in api.list(kind) if _binds_tenant_user(b)]
        assert sorted(b["metadata"].get("namespace") for b in live) == sorted(namespaces)


def test_tenant_user_token_is_created_after_its_service_account(lab):
    # kube-controller-manager's TokensController deletes a service-account-token Secret whose ServiceAccount does
    # not exist (kubernetes pkg/controller/serviceaccount/tokens_controller.go syncSecret: "Service account does
    # not exist, deleting token"), and pulumi-kubernetes waits only 5 s for the token (await/awaiters.go
    # untilCoreV1SecretInitialized). Created in parallel, the credential can vanish under the program.
    for tenant in TENANTS:
        token = lab.run.named(f"{tenant}-user-secret-kube-system", SECRET_TYPE)
        account = lab.run.named(f"{tenant}-user-serviceaccount-kube-system")
        assert lab.run.depends_on(token, account)


def test_user_kubeconfig_is_the_live_token_against_the_tenant_endpoint(lab):
    for tenant in TENANTS:
        text = lab.run.outputs["tenantKubeconfigs"].value[tenant]
        assert text == lab.run.outputs[f"probe.{tenant}.user_kubeconfig"].value
        document = yaml.safe_load(text)
        endpoint = lab.run.outputs["tenants"].value[tenant]["endpoint"]
        assert document["clusters"][0]["cluster"]["server"] == f"https://{endpoint}"
        assert tenant_spec.ca_certificate(text) == lab.sim.world.tenant_api(tenant).ca.pem.decode()
        api = lab.sim.world.tenant_api(tenant)
        stored = api.find("Secret", tenant_spec.TENANT_USER_NAMESPACE, tenant_spec.TENANT_USER_TOKEN)
        assert stored["metadata"]["annotations"]["kubernetes.io/service-account.name"] == tenant_spec.TENANT_USER
        assert document["users"][0]["user"] == {"token": _decoded(stored, "token")}
        assert document["contexts"][0]["context"]["namespace"] == lab.tenants[tenant].namespaces[0]


# --------------------------------------------------------------------------- #
# TenantCni
# --------------------------------------------------------------------------- #


def test_calico_goes_in_after_every_join_on_the_tenant_provider(lab, vendor_dir):
    calico = vendor_dir / "calico"
    crds_chart = yaml.safe_load((calico / "crd.projectcalico.org.v1" / "Chart.yaml").read_text())["name"]
    operator_chart = yaml.safe_load((calico / "Chart.yaml").read_text())["name"]
    for tenant in TENANTS:
        config = lab.tenants[tenant]
        crds, operator = lab.run.named(f"{tenant}-calico-crds"), lab.run.named(f"{tenant}-calico")
        inside = _inside(lab, tenant)
        assert crds in inside and operator in inside
        assert (crds.inputs["chart"], operator.inputs["chart"]) == (f"./.cache/charts/{crds_chart}",
                                                                    f"./.cache/charts/{operator_chart}")
        for release in (crds, operator):
            assert release.inputs["version"] == lab.versions.calico
            assert release.inputs["namespace"] == "tigera-operator"
        assert lab.run.depends_on(operator, crds)
        # Workers joined -> CNI; on destroy Calico then goes while its nodes still exist.
        for worker in config.workers:
            assert lab.run.depends_on(crds, lab.run.named(f"{tenant}-{worker.name}-registered"))
        values = operator.inputs["values"]
        assert values["installation"]["calicoNetwork"]["ipPools"][0]["cidr"] == config.pod_cidr
        host, port = tenant_spec.split_endpoint(lab.run.outputs["tenants"].value[tenant]["endpoint"])
        assert values["kubernetesServiceEndpoint"] == {"host": host, "port": port}


# --------------------------------------------------------------------------- #
# Failing early
# --------------------------------------------------------------------------- #


def test_an_unresolved_tenant_fails_before_any_tenant_object_is_registered(dev_config):
    stack = load_stack_config(dev_config)
    raw = stack.tenants[0].model_copy(update={"service_cidr": None})

    def program():
        management = k8s.Provider("management", kubeconfig="management-kubeconfig")
        TenantControlPlane(raw.name, TenantControlPlaneArgs(
            tenant=raw, management_provider=management, management_kubeconfig="management-kubeconfig",
            worker_networks=["172.18.0.0/16"], operator_cidrs=[], shared_datastore="default"))

    sim = Lifecycle({}, world=World(), program=program)
    plan = sim.up(skip_preview=True, expect_error=True)
    assert "load_stack_config" in (plan.error or ""), plan.render()
    assert [r.type for r in _registrations(sim)] == ["pulumi:providers:kubernetes", COMPONENT]
