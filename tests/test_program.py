"""The whole program under mocks: what `pulumi up` of a stack registers, end to end."""

import copy
import ipaddress
import json

import pytest

from components.gpu_register import REGISTER_ANNOTATION
from components.tenant_spec import discovery_hash
from config import load_stack_config
from tests.crd_schema import crd_json_schema, schema_errors
from tests.fixtures import KIND_SUBNET_V4, tenant_ca_pem
from tools.graph import evaluate, generated_config, graph_nodes, tenant_owners
from tools.graph_analysis import analyse
from tools.mockrun import load_stack_file, run_program

RELEASE = "kubernetes:helm.sh/v3:Release"
COMMAND = "command:local:Command"
TCP = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"


@pytest.fixture(scope="module")
def dev():
    return run_program(load_stack_file("dev"))


def releases(run):
    return {r.inputs["name"]: r for r in run.of_type(RELEASE) if r.inputs.get("namespace") != "kube-system"}


def test_management_plane_is_built_in_dependency_order(dev):
    kind = dev.named("gpu-tenancy-kind", COMMAND)
    assert "kind create cluster" in kind.inputs["create"]
    cert_manager = dev.named("kamaji-cert-manager", RELEASE)
    metallb = dev.named("kamaji-metallb", RELEASE)
    kamaji = dev.named("kamaji-kamaji", RELEASE)
    pool = dev.named("kamaji-ip-pool")
    assert (kamaji.inputs["name"], kamaji.inputs["namespace"], kamaji.inputs["version"]) == (
        "kamaji", "kamaji-system", "0.0.0+latest")
    assert kamaji.inputs["values"]["image"]["tag"] == "26.8.2-edge"
    first, last = pool.inputs["spec"]["addresses"][0].split("-")
    subnet = ipaddress.ip_network(KIND_SUBNET_V4)
    assert ipaddress.ip_address(first) in subnet and ipaddress.ip_address(last) in subnet
    assert dev.depends_on(cert_manager, kind)
    assert dev.depends_on(kamaji, cert_manager)
    assert dev.depends_on(pool, metallb)
    for tcp in dev.of_type(TCP):
        assert dev.depends_on(tcp, kamaji)


def test_every_tenant_gets_a_schema_valid_control_plane_with_all_addons(dev, vendor_dir):
    schema = crd_json_schema(vendor_dir / "kamaji" / "kamaji.clastix.io_tenantcontrolplanes.yaml")
    tcps = {r.inputs["metadata"]["name"]: r for r in dev.of_type(TCP)}
    assert sorted(tcps) == ["tenant-a", "tenant-b"]
    for tcp in tcps.values():
        manifest = {k: tcp.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}
        assert schema_errors(manifest, schema) == []
        assert set(manifest["spec"]["addons"]) == {"coreDNS", "kubeProxy", "konnectivity"}
    assert tcps["tenant-b"].inputs["spec"]["networkProfile"]["podCidr"] == "10.245.0.0/16"


def test_credentials_are_secret_outputs_and_the_ca_hash_is_right(dev):
    outputs = dev.outputs
    for key in ("managementKubeconfig", "tenantKubeconfigs", "tenantJoinTokens"):
        assert outputs[key].secret, key
    assert not outputs["tenants"].secret
    expected_hash = discovery_hash(tenant_ca_pem())
    for name, tenant in outputs["tenants"].value.items():
        assert tenant["discoveryHash"] == expected_hash
        assert tenant["endpoint"] == "172.18.255.200:6443"
        assert "certificate-authority-data" in outputs["tenantKubeconfigs"].value[name]


def _secret_strings(run):
    values = [run.outputs["managementKubeconfig"].value]
    values += run.outputs["tenantKubeconfigs"].value.values()
    for token in run.outputs["tenantJoinTokens"].value.values():
        values += [token, token.split(".")[1]]
    # As they appear inside JSON text (kubeconfigs span lines).
    return [json.dumps(value)[1:-1] for value in values]


def test_no_secret_appears_in_plain_text_in_any_resource_input(dev):
    secrets = _secret_strings(dev)
    leaks, carried = [], set()
    for resource in dev.resources:
        for key, value in resource.raw_inputs.items():
            text = json.dumps(value, default=str)
            found = [secret for secret in secrets if secret in text]
            if resource.is_secret(key):
                carried.update(found)
            else:
                leaks += [f"{resource.name}.{key}" for _ in found]
    assert leaks == []
    # The check is live: every secret does travel somewhere, marked secret.
    assert carried == set(secrets)


def test_secret_carrying_commands_have_logging_off_and_secret_outputs(dev):
    for command in dev.of_type(COMMAND):
        if command.is_secret("environment") or "kind get kubeconfig" in command.inputs["create"]:
            assert command.inputs.get("logging") == "none", command.name
            assert {"stdout", "stderr"} <= set(command.additional_secret_outputs), command.name


def test_workers_are_joined_with_secret_inputs(dev):
    containers = dev.of_type("docker:index/container:Container")
    assert sorted(c.inputs["hostname"] for c in containers) == ["tenant-a-worker-0", "tenant-b-worker-0"]
    kind = dev.named("gpu-tenancy-kind", COMMAND)
    for container in containers:
        assert dev.depends_on(container, kind)
    joins = [c for c in dev.of_type(COMMAND) if c.name.endswith("-join")]
    assert len(joins) == 2
    for join in joins:
        assert join.is_secret("environment")
        tcp_name = join.name.split("-worker")[0]
        assert dev.depends_on(join, dev.named(f"{tcp_name}-bootstrap-token"))


def test_hami_per_tenant_after_joins_and_cni(dev):
    hami = {r.name: r for r in dev.of_type(RELEASE) if r.inputs["name"] == "hami"}
    assert sorted(hami) == ["tenant-a-hami", "tenant-b-hami"]
    for tenant in ("tenant-a", "tenant-b"):
        release = hami[f"{tenant}-hami"]
        values = release.inputs["values"]
        assert release.inputs["namespace"] == "kube-system"
        assert release.inputs["version"] == "2.10.0"
        assert values["scheduler"]["admissionWebhook"]["failurePolicy"] == "Fail"
        assert values["mockDevicePlugin"]["enabled"] is True
        assert values["devicePlugin"]["enabled"] is False
        assert dev.depends_on(release, dev.named(f"{tenant}-worker-0-join"))
        assert dev.depends_on(release, dev.named(f"{tenant}-calico"))
        assert dev.depends_on(release, dev.named(f"{tenant}-konnectivity-agent-ready"))
        # Facts §6: workers joined -> CNI -> agent -> HAMi (and the reverse on destroy).
        assert dev.depends_on(dev.named(f"{tenant}-calico-crds"), dev.named(f"{tenant}-worker-0-join"))


def test_simulated_cards_annotation_capacity_and_smoke_test_per_tenant(dev):
    for tenant, uuid in (("tenant-a", "GPU-MOCK-A0"), ("tenant-b", "GPU-MOCK-B0")):
        node = f"{tenant}-worker-0"
        patch = dev.named(f"{node}-gpu-register")
        cards = json.loads(patch.inputs["metadata"]["annotations"][REGISTER_ANNOTATION])
        assert cards == [{"id": uuid, "index": 0, "count": 10, "devmem": 8192, "devcore": 100,
                          "type": "NVIDIA-A100", "numa": 0, "mode": "hami-core", "health": True}]
        capacity = dev.named(f"{node}-gpu-capacity")
        assert '{"capacity":{"nvidia.com/gpu":"10"},"allocatable":{"nvidia.com/gpu":"10"}}' in capacity.inputs["create"]
        pod = dev.named(f"{tenant}-gpu-smoke-test")
        limits = pod.inputs["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}
        assert "schedulerName" not in pod.inputs["spec"]
        assert dev.depends_on(pod, dev.named(f"{tenant}-hami"))
        evidence = dev.outputs["tenants"].value[tenant]["smokeTest"]
        assert evidence["schedulerName"] == "hami-scheduler"
        assert dev.outputs["tenants"].value[tenant]["gpuCapacity"] == {node: 10}


def test_tenants_do_not_depend_on_each_other():
    raw = generated_config(3)
    config = load_stack_config(raw)
    run = run_program(raw)
    report = analyse(graph_nodes(run), tenant_owners(config))
    assert report.cross_tenant == []
    tenants_seen = {t for t in report.tenant_of.values() if t}
    assert tenants_seen == {"team-000", "team-001", "team-002"}


def test_adding_tenants_does_not_lengthen_the_critical_path():
    two, eight = evaluate(generated_config(2)), evaluate(generated_config(8))
    assert len(two.report.longest_chain) == len(eight.report.longest_chain)
    assert eight.report.resource_count > two.report.resource_count


def test_running_twice_registers_identical_inputs():
    def snapshot():
        run = run_program(load_stack_file("dev"))
        # Assets compare by content (their default repr carries a memory address).
        return {r.urn: json.dumps(r.inputs, sort_keys=True, default=lambda o: getattr(o, "text", repr(o)))
                for r in run.resources}

    assert snapshot() == snapshot()


def test_nvidia_mode_labels_nodes_and_skips_simulation():
    raw = copy.deepcopy(load_stack_file("dev"))
    raw["gpuMode"] = "nvidia"
    run = run_program(raw)
    assert [r for r in run.resources if r.name.endswith("-gpu-register") or r.name.endswith("-gpu-capacity")] == []
    labels = [r for r in run.resources if r.name.endswith("-gpu-label")]
    assert sorted(r.inputs["metadata"]["labels"]["gpu"] for r in labels) == ["on", "on"]
    for release in (r for r in run.of_type(RELEASE) if r.inputs["name"] == "hami"):
        assert release.inputs["values"]["devicePlugin"]["enabled"] is True
        assert release.inputs["values"]["mockDevicePlugin"]["enabled"] is False
