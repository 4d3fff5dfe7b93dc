"""Pure builders of the tenant plane (components.tenant.spec), checked against the vendored upstream files
(Kamaji's CRDs and chart values, HAMi's chart values) and Kubernetes' own API schema, without Pulumi."""

from __future__ import annotations

import base64
import functools
import ipaddress
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from components.gpu.values import hami_pod_policy, hami_token_policy
from components.management.kamaji import kamaji_values
from components.tenant import spec as tenant_spec
from config import Quota, Versions, Worker, load_stack_config
from config.models import DEFAULT_OBJECT_COUNTS
from naming import DEFAULT_DATASTORE
from tests.support import netpol
from tests.support.cel import admits
from tests.support.crd_schema import _strict, crd_json_schema, schema_errors
from tests.support.fixtures import KIND_SUBNET_V4, kubeconfig_yaml, tenant_ca_pem
from tests.support.sim import paths
from tests.support.sim.providers import changed_paths, k8s_path

KUBERNETES_SCHEMA_VERSION = "1.35.0"
OPERATOR_CIDR = "192.168.77.0/24"
SOURCE_RANGES = [KIND_SUBNET_V4, OPERATOR_CIDR]

# The tutorial's TenantControlPlane: no spec.kubernetes, wrong key names; the vendored CRD refuses it.
SEED_TUTORIAL_TCP = yaml.safe_load(
    """
apiVersion: kamaji.clastix.io/v1alpha1
kind: TenantControlPlane
metadata: {name: tenant-a, namespace: tenant-a}
spec:
  kubernetesVersion: v1.29.0
  controlPlane: {deployment: {replicas: 2}, service: {serviceType: LoadBalancer}}
  networkProfile: {serviceCIDR: 10.96.0.0/16, podCIDR: 10.244.0.0/16}
"""
)


@functools.cache
def vendored_crd_schema(path: Path) -> dict:
    """The raw v1alpha1 OpenAPI schema of a vendored CRD (defaults and enums included), parsed once per run with
    libyaml: the TenantControlPlane CRD has 9000 lines, which the pure-Python loader takes seconds to read."""
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


def strict_schema(path: Path) -> dict:
    """What `tests.support.crd_schema.crd_json_schema` builds (closed objects), from the cached parse."""
    return _strict(vendored_crd_schema(path))


def _crd_property(path, *keys):
    """The raw OpenAPI node of `spec.<keys>` in a vendored CRD."""
    node = vendored_crd_schema(path)
    for key in ("spec", *keys):
        node = node["properties"][key]
    return node


@pytest.fixture(scope="module")
def tcp_crd(vendor_dir):
    return vendor_dir / "kamaji" / "kamaji.clastix.io_tenantcontrolplanes.yaml"


@pytest.fixture(scope="module")
def tcp_schema(tcp_crd):
    return strict_schema(tcp_crd)


@pytest.fixture(scope="module")
def datastore_crd(vendor_dir):
    return vendor_dir / "kamaji" / "kamaji.clastix.io_datastores.yaml"


@pytest.fixture
def tenants(dev_config):
    dev_config["tenants"][1]["quota"] = {"gpus": 2, "memoryMiB": 6000}
    dev_config["tenants"][1]["namespaces"] = ["default", "ml"]
    # A third tenant with automatically allocated ranges and three workers.
    card = {"uuid": "GPU-MOCK-C0", "model": "NVIDIA-A100", "memoryMiB": 8192}
    workers = [{"name": "w0", "gpus": [card]}, {"name": "w1"}, {"name": "w2"}]
    dev_config["tenants"].append({"name": "tenant-c", "workers": workers})
    return load_stack_config(dev_config).tenants


def _manifest(tenant, datastore="default", source_ranges=SOURCE_RANGES):
    """The whole TenantControlPlane object, as components/tenant/control_plane.py creates it."""
    return {
        "apiVersion": tenant_spec.TCP_API_VERSION,
        "kind": tenant_spec.TCP_KIND,
        "metadata": tenant_spec.tenant_control_plane_metadata(tenant),
        "spec": tenant_spec.tenant_control_plane_spec(tenant, datastore, source_ranges),
    }


def _k8s_errors(manifest):
    try:
        kubernetes_validate.validate(manifest, KUBERNETES_SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return str(error).splitlines()[0]
    return None


# --------------------------------------------------------------------------- #
# TenantControlPlane against Kamaji's CRD
# --------------------------------------------------------------------------- #


def test_tcp_manifest_is_valid_against_the_vendored_crd(tenants, tcp_schema):
    for tenant in tenants:
        assert schema_errors(_manifest(tenant), tcp_schema) == [], tenant.name
    assert schema_errors(_manifest(tenants[1], "tenant-b-etcd"), tcp_schema) == []


def test_seed_tutorial_manifest_fails_the_same_check(tcp_schema):
    errors = schema_errors(SEED_TUTORIAL_TCP, tcp_schema)
    assert any("'kubernetes' is a required property" in e for e in errors), errors
    assert any(e.startswith("spec:") and "'kubernetesVersion' was unexpected" in e for e in errors), errors
    assert any(e.startswith("spec.networkProfile:") and "'serviceCIDR'" in e and "'podCIDR'" in e for e in errors), errors


def test_schema_check_catches_a_wrong_case_key_and_a_bad_enum(tenants, tcp_schema):
    manifest = _manifest(tenants[0])
    network = manifest["spec"]["networkProfile"]
    network["podCIDRs"] = network.pop("podCidrs")
    manifest["spec"]["kubernetes"]["kubelet"]["cgroupfs"] = "system-d"
    manifest["spec"]["kubernetes"]["admissionControllers"].append("NodeRestrictions")
    errors = schema_errors(manifest, tcp_schema)
    assert any("'podCIDRs' was unexpected" in e for e in errors), errors
    assert any(e.startswith("spec.kubernetes.kubelet.cgroupfs:") for e in errors), errors
    assert any(e.startswith("spec.kubernetes.admissionControllers.18:") for e in errors), errors


def test_tcp_spec_uses_kamajis_field_names_and_defaults_for_one_machine(tenants):
    tenant = tenants[0]
    manifest = _manifest(tenant)
    spec = manifest["spec"]
    assert manifest["metadata"]["name"] == manifest["metadata"]["namespace"] == "tenant-a"
    assert manifest["metadata"]["annotations"] == {
        "pulumi.com/waitFor": "jsonpath={.status.kubernetesResources.version.status}=Ready"
    }
    assert manifest["metadata"]["labels"]["gpu-tenancy/tenant"] == "tenant-a"
    kubernetes = spec["kubernetes"]
    assert (kubernetes["version"], kubernetes["kubelet"]) == ("v1.35.0", {"cgroupfs": "systemd"})
    assert spec["controlPlane"] == {"deployment": {"replicas": 1},
                                    "service": {"serviceType": "LoadBalancer", "allocateLoadBalancerNodePorts": False}}
    assert spec["dataStore"] == "default"
    network = spec["networkProfile"]
    assert network["port"] == 6443
    # The list forms only: Kamaji copies the deprecated singular fields into the lists on CREATE only.
    assert (network["serviceCidrs"], network["podCidrs"]) == ([tenant.service_cidr], [tenant.pod_cidr])
    assert not {"serviceCidr", "podCidr"} & set(network)


def test_addons_are_dns_and_konnectivity_but_not_kamajis_kube_proxy(tenants, tcp_crd):
    addons = _manifest(tenants[0])["spec"]["addons"]
    # An absent addon is not installed (Kamaji internal/resources/addons/); the program installs kube-proxy itself (components.tenant.kube_proxy).
    assert "kubeProxy" in _crd_property(tcp_crd, "addons")["properties"]
    assert addons == {"coreDNS": {}, "konnectivity": {"server": {"port": 8132}}}


def test_admission_controllers_are_kamajis_default_plus_node_restriction(tenants, tcp_crd):
    field = _crd_property(tcp_crd, "kubernetes", "admissionControllers")
    plugins = _manifest(tenants[0])["spec"]["kubernetes"]["admissionControllers"]
    # The list replaces the CRD default, so all of it must be there, plus what kubeadm adds and Kamaji lacks.
    assert plugins == [*field["default"], "NodeRestriction"]
    assert "NodeRestriction" not in field["default"]
    assert set(plugins) <= set(field["items"]["enum"])
    assert len(set(plugins)) == len(plugins)


def test_load_balancer_source_ranges_are_exactly_the_given_networks(tenants, tcp_crd):
    assert "loadBalancerSourceRanges" in _crd_property(tcp_crd, "networkProfile")["properties"]
    network = _manifest(tenants[0], source_ranges=[OPERATOR_CIDR, KIND_SUBNET_V4])["spec"]["networkProfile"]
    assert network["loadBalancerSourceRanges"] == sorted([OPERATOR_CIDR, KIND_SUBNET_V4])
    with pytest.raises(ValueError, match="no networks may reach its API server"):
        tenant_spec.tenant_control_plane_spec(tenants[0], "default", [])


def test_the_control_plane_is_reachable_on_its_load_balancer_address_only(tenants, tcp_crd):
    """issue 22 #2: kube-proxy applies loadBalancerSourceRanges to the LoadBalancer address, not to node ports."""
    service = _manifest(tenants[0])["spec"]["controlPlane"]["service"]
    assert service["allocateLoadBalancerNodePorts"] is False
    field = _crd_property(tcp_crd, "controlPlane", "service")
    assert field["properties"]["allocateLoadBalancerNodePorts"]["type"] == "boolean"
    # The CRD's CEL rule (not checked by the schema test): the field needs serviceType LoadBalancer.
    rules = [r["rule"] for r in vendored_crd_schema(tcp_crd)["properties"]["spec"]["x-kubernetes-validations"]]
    assert ("!has(self.controlPlane.service.allocateLoadBalancerNodePorts) || "
            "self.controlPlane.service.serviceType == 'LoadBalancer'") in rules
    assert service["serviceType"] == "LoadBalancer"


def test_dns_service_ip_lies_in_each_tenants_service_range(tenants):
    for tenant in tenants:
        network = _manifest(tenant)["spec"]["networkProfile"]
        (dns,) = network["dnsServiceIPs"]
        (service_cidr,) = network["serviceCidrs"]
        assert ipaddress.ip_address(dns) in ipaddress.ip_network(service_cidr)
    assert _manifest(tenants[2])["spec"]["networkProfile"]["serviceCidrs"] != ["10.96.0.0/16"]


def test_tcp_name_must_be_a_dns1035_label(tenants):
    for bad in ("1tenant", "Tenant-a", "tenant_a", "tenant-", "a" * 64):
        with pytest.raises(ValueError, match="DNS-1035"):
            tenant_spec.tenant_control_plane_metadata(tenants[0].model_copy(update={"name": bad}))
    assert tenant_spec.tenant_control_plane_metadata(tenants[0])["name"] == "tenant-a"


def test_unresolved_cidrs_are_refused_with_a_pointer_to_the_loader(tenants):
    for field in ("pod_cidr", "service_cidr"):
        raw = tenants[0].model_copy(update={field: None})
        with pytest.raises(ValueError, match="load_stack_config"):
            tenant_spec.tenant_control_plane_spec(raw, "default", SOURCE_RANGES)


def test_endpoint_from_status_and_its_parts():
    status = {"controlPlaneEndpoint": "172.18.255.200:6443"}
    assert tenant_spec.control_plane_endpoint(status, "t") == "172.18.255.200:6443"
    assert tenant_spec.split_endpoint("172.18.255.200:6443") == ("172.18.255.200", "6443")
    with pytest.raises(ValueError, match="MetalLB"):
        tenant_spec.control_plane_endpoint({"kubernetesResources": {}}, "t")
    with pytest.raises(ValueError, match="MetalLB"):
        tenant_spec.control_plane_endpoint(None, "t")
    with pytest.raises(ValueError, match="<host>:<port>"):
        tenant_spec.split_endpoint("172.18.255.200")


# --------------------------------------------------------------------------- #
# replace_on_changes: engine property paths over the TCP's inputs
# --------------------------------------------------------------------------- #


def _diff_paths(old, new):
    """The paths the engine tests against replace_on_changes: the provider's detailed diff keys, parsed."""
    return [paths.parse(k8s_path(p)) for p in changed_paths(old, new)]


def _replaces(old, new):
    replace = [paths.parse(p) for p in tenant_spec.CIDR_REPLACE_ON_CHANGES]
    return any(paths.contains(r, d) for r in replace for d in _diff_paths(old, new))


def test_cidr_replace_paths_name_fields_of_the_manifest_and_the_crd(tenants, tcp_crd):
    manifest = _manifest(tenants[0])
    assert tenant_spec.CIDR_REPLACE_ON_CHANGES
    for path in tenant_spec.CIDR_REPLACE_ON_CHANGES:
        segments = paths.parse(path)
        assert paths.render(segments) == path, "spelled the way the engine renders it"
        assert paths.matches_any_input(segments, manifest), path
        assert segments[0] == "spec"
        assert _crd_property(tcp_crd, *segments[1:])["type"] == "array"


def test_a_changed_range_replaces_and_other_changes_do_not(tenants):
    tenant = tenants[0]
    before = _manifest(tenant)
    for change in ({"pod_cidr": "10.250.0.0/16"}, {"service_cidr": "10.90.0.0/16"}):
        assert _replaces(before, _manifest(tenant.model_copy(update=change))), change
    # A stack from before allocateLoadBalancerNodePorts: the new field is an update, not a replacement.
    without_field = _manifest(tenant)
    del without_field["spec"]["controlPlane"]["service"]["allocateLoadBalancerNodePorts"]
    assert _diff_paths(without_field, before) and not _replaces(without_field, before)
    for other in (_manifest(tenant.model_copy(update={"kubernetes_version": "v1.35.5"})),
                  _manifest(tenant, source_ranges=[KIND_SUBNET_V4]),
                  _manifest(tenant, datastore="tenant-a-etcd")):
        assert _diff_paths(before, other)
        assert not _replaces(before, other)


# --------------------------------------------------------------------------- #
# Credentials Kamaji writes
# --------------------------------------------------------------------------- #


def test_admin_secret_id_follows_kamajis_status_pointer():
    metadata = {"name": "tenant-a", "namespace": "tenant-a"}
    status = {"kubeconfig": {"admin": {"secretName": "tenant-a-admin-kubeconfig-v2"}}}
    assert tenant_spec.admin_secret_id(metadata, status, "tenant-a") == "tenant-a/tenant-a-admin-kubeconfig-v2"
    # No pointer yet (a create preview strips the status): no id, so the read waits for the control plane.
    for missing in (None, {}, {"kubeconfig": {}}, {"kubeconfig": {"admin": {}}}):
        with pytest.raises(ValueError, match="status.kubeconfig.admin.secretName"):
            tenant_spec.admin_secret_id(metadata, missing, "tenant-a")


def test_decode_secret_value_names_the_secret_and_key():
    data = {"admin.conf": base64.b64encode(b"apiVersion: v1\n").decode()}
    assert tenant_spec.decode_secret_value(data, "admin.conf", "t-admin-kubeconfig") == "apiVersion: v1\n"
    with pytest.raises(ValueError, match="'t-admin-kubeconfig' has no key 'super-admin.conf'"):
        tenant_spec.decode_secret_value(data, "super-admin.conf", "t-admin-kubeconfig")
    with pytest.raises(ValueError, match="has no key"):
        tenant_spec.decode_secret_value(None, "admin.conf", "t-admin-kubeconfig")
    with pytest.raises(ValueError, match="not base64"):
        tenant_spec.decode_secret_value({"admin.conf": "%%%"}, "admin.conf", "t-admin-kubeconfig")


def test_ca_certificate_is_the_current_contexts_cluster_ca():
    kubeconfig = kubeconfig_yaml("https://172.18.255.200:6443", "ca-of-tenant-a")
    assert tenant_spec.ca_certificate(kubeconfig).encode() == tenant_ca_pem("ca-of-tenant-a")
    # Another cluster listed first does not confuse it: the current context decides.
    document = yaml.safe_load(kubeconfig)
    other = yaml.safe_load(kubeconfig_yaml("https://10.0.0.1:6443", "another-ca"))
    document["clusters"] = other["clusters"] + document["clusters"]
    assert tenant_spec.ca_certificate(yaml.safe_dump(document)).encode() == tenant_ca_pem("ca-of-tenant-a")


# kubeadm's own test vector: kubernetes/kubernetes cmd/kubeadm/app/util/pubkeypin/pubkeypin_test.go
# (`testCertPEM`, `expectedHash`; Apache-2.0). kubeadm --discovery-token-ca-cert-hash must equal it.
KUBEADM_TEST_CERT = """-----BEGIN CERTIFICATE-----
MIIDRDCCAiygAwIBAgIJAJgVaCXvC6HkMA0GCSqGSIb3DQEBBQUAMB8xHTAbBgNV
BAMTFGt1YmVhZG0ta2V5cGlucy10ZXN0MCAXDTE3MDcwNTE3NDMxMFoYDzIxMTcw
NjExMTc0MzEwWjAfMR0wGwYDVQQDExRrdWJlYWRtLWtleXBpbnMtdGVzdDCCASIw
DQYJKoZIhvcNAQEBBQADggEPADCCAQoCggEBAK0ba8mHU9UtYlzM1Own2Fk/XGjR
J4uJQvSeGLtz1hID1IA0dLwruvgLCPadXEOw/f/IWIWcmT+ZmvIHZKa/woq2iHi5
+HLhXs7aG4tjKGLYhag1hLjBI7icqV7ovkjdGAt9pWkxEzhIYClFMXDjKpMSynu+
YX6nZ9tic1cOkHmx2yiZdMkuriRQnpTOa7bb03OC1VfGl7gHlOAIYaj4539WCOr8
+ACTUMJUFEHcRZ2o8a/v6F9GMK+7SC8SJUI+GuroXqlMAdhEv4lX5Co52enYaClN
+D9FJLRpBv2YfiCQdJRaiTvCBSxEFz6BN+PtP5l2Hs703ZWEkOqCByM6HV8CAwEA
AaOBgDB+MB0GA1UdDgQWBBRQgUX8MhK2rWBWQiPHWcKzoWDH5DBPBgNVHSMESDBG
gBRQgUX8MhK2rWBWQiPHWcKzoWDH5KEjpCEwHzEdMBsGA1UEAxMUa3ViZWFkbS1r
ZXlwaW5zLXRlc3SCCQCYFWgl7wuh5DAMBgNVHRMEBTADAQH/MA0GCSqGSIb3DQEB
BQUAA4IBAQCaAUif7Pfx3X0F08cxhx8/Hdx4jcJw6MCq6iq6rsXM32ge43t8OHKC
pJW08dk58a3O1YQSMMvD6GJDAiAfXzfwcwY6j258b1ZlI9Ag0VokvhMl/XfdCsdh
AWImnL1t4hvU5jLaImUUMlYxMcSfHBGAm7WJIZ2LdEfg6YWfZh+WGbg1W7uxLxk6
y4h5rWdNnzBHWAGf7zJ0oEDV6W6RSwNXtC0JNnLaeIUm/6xdSddJlQPwUv8YH4jX
c1vuFqTnJBPcb7W//R/GI2Paicm1cmns9NLnPR35exHxFTy+D1yxmGokpoPMdife
aH+sfuxT8xeTPb3kjzF9eJTlnEquUDLM
-----END CERTIFICATE-----
"""
KUBEADM_EXPECTED_HASH = "sha256:345959acb2c3b2feb87d281961c893f62a314207ef02599f1cc4a5fb255480b3"


def test_discovery_hash_matches_kubeadms_test_vector():
    assert tenant_spec.discovery_hash(KUBEADM_TEST_CERT) == KUBEADM_EXPECTED_HASH
    assert tenant_spec.discovery_hash(KUBEADM_TEST_CERT.encode()) == KUBEADM_EXPECTED_HASH


def test_discovery_hash_of_a_kubeconfigs_ca_matches_openssl(tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not on PATH: no independent implementation to compare with")
    ca = tenant_spec.ca_certificate(kubeconfig_yaml("https://172.18.255.200:6443", "discovery-hash-test"))
    (tmp_path / "ca.crt").write_text(ca)
    pipeline = (
        f"{openssl} x509 -in ca.crt -pubkey -noout | {openssl} pkey -pubin -outform der | "
        f"{openssl} dgst -sha256 -hex"
    )
    out = subprocess.run(["bash", "-o", "pipefail", "-c", pipeline], cwd=tmp_path, capture_output=True, text=True,
                         check=True)
    expected = out.stdout.strip().split()[-1]
    assert tenant_spec.discovery_hash(ca) == f"sha256:{expected}"
    assert tenant_spec.discovery_hash(tenant_ca_pem("another-ca")) != f"sha256:{expected}"


# --------------------------------------------------------------------------- #
# NetworkPolicy on the management cluster: a tiny evaluator of the rules, then the API schema
# --------------------------------------------------------------------------- #


def _allowed(policy, direction, ns, ip, pod_labels=None, port=None, protocol="TCP"):
    """Whether the policy lets a pod it fences receive from (ingress) / send to (egress) a peer in namespace `ns`
    with address `ip` and labels `pod_labels`; pods in other namespaces have pod IPs."""
    return netpol.allowed([policy], direction, policy["metadata"]["namespace"], {},
                          netpol.Peer(ip, ns, pod_labels or {}), port, protocol)


POD_IP = "10.244.1.17"  # management cluster pod range: not on the kind network
WORKER_IP = "172.18.0.5"  # a worker container on the kind network


def _policy(*networks):
    return tenant_spec.isolation_network_policy("tenant-a", list(networks) or [KIND_SUBNET_V4])


def test_other_tenants_cannot_reach_the_control_plane_pods():
    policy = _policy()
    assert policy["metadata"]["namespace"] == "tenant-a"
    assert policy["spec"]["podSelector"] == {}, "must select every pod of the tenant namespace"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    for port in (6443, 8132, 2379):  # API server, Konnectivity, a dedicated etcd
        assert not _allowed(policy, "ingress", "tenant-b", POD_IP, port=port)
        assert not _allowed(policy, "ingress", "default", POD_IP, port=port)
        assert not _allowed(policy, "egress", "tenant-b", POD_IP, port=port)


def test_kamaji_workers_same_namespace_and_dns_still_work():
    policy = _policy()
    assert _allowed(policy, "ingress", "kamaji-system", POD_IP, port=6443)
    assert _allowed(policy, "ingress", "tenant-a", POD_IP, port=2379)  # the API server to its own etcd
    assert _allowed(policy, "ingress", "elsewhere", WORKER_IP, port=6443)
    assert _allowed(policy, "ingress", "elsewhere", WORKER_IP, port=8132)  # its konnectivity agent
    assert _allowed(policy, "egress", "kamaji-system", POD_IP, port=2379)  # the shared kamaji-etcd
    dns = {"k8s-app": "kube-dns"}
    assert _allowed(policy, "egress", "kube-system", POD_IP, dns, port=53, protocol="UDP")
    assert _allowed(policy, "egress", "kube-system", POD_IP, dns, port=53, protocol="TCP")
    assert not _allowed(policy, "egress", "kube-system", POD_IP, {"app": "other"}, port=53, protocol="UDP")
    assert not _allowed(policy, "egress", "kube-system", POD_IP, dns, port=443)


def test_outside_traffic_reaches_only_the_api_and_konnectivity_ports():
    policy = _policy()
    assert not _allowed(policy, "ingress", "elsewhere", WORKER_IP, port=10257)  # controller manager
    assert not _allowed(policy, "ingress", "elsewhere", WORKER_IP, port=2379)
    assert _allowed(policy, "ingress", "kamaji-system", POD_IP, port=10257)


def test_every_worker_network_is_admitted_both_ways():
    policy = _policy(KIND_SUBNET_V4, "10.20.0.0/16")
    assert _allowed(policy, "ingress", "elsewhere", "10.20.1.11", port=6443)  # an SSH-joined GPU server
    assert _allowed(policy, "egress", "elsewhere", "10.20.1.11", port=10250)
    assert not _allowed(policy, "ingress", "elsewhere", "10.30.0.1", port=6443)


def test_operators_reach_the_api_and_konnectivity_ports_wherever_the_load_balancer_admits_them():
    # management.operatorCidrs are in loadBalancerSourceRanges; un-NATed (a one-node cluster) they reach the pod
    # with their own address, and a policy admitting only the worker networks dropped them.
    operators = "10.30.0.0/24"
    policy = tenant_spec.isolation_network_policy("tenant-a", [KIND_SUBNET_V4], [operators])
    for port in (6443, 8132):
        assert _allowed(policy, "ingress", None, "10.30.0.7", port=port)
    assert not _allowed(policy, "ingress", None, "10.30.0.7", port=10257)
    assert not _allowed(policy, "ingress", None, "10.31.0.7", port=6443)
    # A source, not a destination: the control plane opens no connection to the operators.
    assert not _allowed(policy, "egress", None, "10.30.0.7", port=22)
    (outside,) = [rule for rule in policy["spec"]["ingress"] if any("ipBlock" in peer for peer in rule["from"])]
    ranges = tenant_spec.api_source_ranges([KIND_SUBNET_V4], [operators])
    assert [peer["ipBlock"]["cidr"] for peer in outside["from"]] == ranges == sorted([KIND_SUBNET_V4, operators])


def test_more_source_ranges_than_the_tcp_takes_are_refused_even_past_validation():
    networks = [f"10.40.{i}.0/24" for i in range(16)]
    assert tenant_spec.api_source_ranges(networks, networks[:3]) == sorted(networks)  # duplicates count once
    with pytest.raises(ValueError, match="at most 16 loadBalancerSourceRanges"):
        tenant_spec.api_source_ranges(networks, ["10.30.0.0/24"])
    with pytest.raises(ValueError, match="at most 16"):
        tenant_spec.isolation_network_policy("tenant-a", networks, ["10.30.0.0/24"])


def test_no_peer_opens_the_policy_to_every_namespace():
    policy = _policy()
    for rule in policy["spec"]["ingress"] + policy["spec"]["egress"]:
        for peer in rule.get("from", []) + rule.get("to", []):
            assert peer.get("namespaceSelector") != {}, peer
            if "ipBlock" in peer:
                assert peer["ipBlock"]["cidr"] == KIND_SUBNET_V4


def test_network_policy_is_a_valid_kubernetes_object():
    policy = _policy()
    assert _k8s_errors(policy) is None
    broken = yaml.safe_load(yaml.safe_dump(policy))
    block = broken["spec"]["ingress"][1]["from"][0]["ipBlock"]
    block["cidrs"] = block.pop("cidr")
    assert _k8s_errors(broken) is not None


def test_network_policy_refuses_an_ipv6_subnet_and_no_network():
    with pytest.raises(ValueError, match="IPv4"):
        tenant_spec.isolation_network_policy("tenant-a", ["fc00:f853:ccd:e793::/64"])
    with pytest.raises(ValueError, match="no worker networks"):
        tenant_spec.isolation_network_policy("tenant-a", [])


# The `default/kubernetes` Service and EndpointSlice as an API server keeps them (SDK reads may snake_case).
API_SERVICE = {"spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                                              "targetPort": 6443}]}}
API_SLICE = {"addressType": "IPv4", "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
             "endpoints": [{"addresses": ["10.40.0.11"]}, {"addresses": ["10.40.0.12"]}]}


def test_the_management_api_is_reached_at_its_service_address_and_at_its_endpoints():
    expected = [("10.40.0.11", 6443), ("10.40.0.12", 6443), ("10.96.0.1", 443)]
    assert tenant_spec.management_api_destinations(API_SERVICE, API_SLICE) == expected
    snake = {"spec": {"cluster_ip": "10.96.0.1", "ports": [{"port": 443, "protocol": "TCP"}]}}
    assert tenant_spec.management_api_destinations(snake, API_SLICE) == expected


@pytest.mark.parametrize("endpoints", [[], [{"addresses": ["fd00::11"]}], None])
def test_no_ipv4_api_endpoint_is_an_error_not_an_open_rule(endpoints):
    with pytest.raises(ValueError, match="EndpointSlice default/kubernetes lists no IPv4 API server address"):
        tenant_spec.management_api_destinations(API_SERVICE, {**API_SLICE, "endpoints": endpoints})
    with pytest.raises(ValueError, match="admits all"):
        tenant_spec.etcd_setup_network_policy("tenant-b", "etcd", [])


def test_only_a_dedicated_etcds_hook_jobs_get_out_to_the_management_api():
    destinations = tenant_spec.management_api_destinations(API_SERVICE, API_SLICE)
    policy = tenant_spec.etcd_setup_network_policy("tenant-b", "etcd", destinations)
    assert _k8s_errors(policy) is None
    assert policy["spec"]["policyTypes"] == ["Egress"]
    for rule in policy["spec"]["egress"]:
        assert rule["to"] and rule["ports"], "an empty to/ports admits every destination/port"
    # clastix/kamaji-etcd templates: Jobs `<release>-etcd-setup-1`, `-etcd-setup-2`, `-etcd-teardown`.
    for job in ("etcd-etcd-setup-1", "etcd-etcd-setup-2", "etcd-etcd-teardown"):
        labels = {"batch.kubernetes.io/job-name": job}
        for address, port in destinations:
            assert netpol.allowed([policy], "egress", "tenant-b", labels, netpol.Peer(address), port)
        assert not netpol.allowed([policy], "egress", "tenant-b", labels, netpol.Peer("10.96.0.1"), 6443)
        assert not netpol.allowed([policy], "egress", "tenant-b", labels, netpol.Peer("10.40.0.13"), 6443)
    # Selects nothing else: other pods of the namespace keep exactly the isolation policy.
    for labels in ({}, {"app.kubernetes.io/name": "kamaji-etcd"}, {"batch.kubernetes.io/job-name": "etcd-backup"}):
        assert not netpol.selects(policy["spec"]["podSelector"], labels)


# --------------------------------------------------------------------------- #
# Data stores: the shared one Kamaji's chart deploys, or a tenant's own kamaji-etcd
# --------------------------------------------------------------------------- #


def _kamaji_etcd_values(vendor_dir):
    return yaml.safe_load((vendor_dir / "kamaji" / "values.yaml").read_text())["kamaji-etcd"]


def test_shared_datastore_names_the_etcd_kamajis_chart_deploys(vendor_dir, datastore_crd):
    upstream = _kamaji_etcd_values(vendor_dir)
    chart_values = yaml.safe_load((vendor_dir / "kamaji" / "values.yaml").read_text())
    assert DEFAULT_DATASTORE == upstream["datastore"]["name"] == chart_values["defaultDatastoreName"]
    assert tenant_spec.SHARED_ETCD_NAME == upstream["fullnameOverride"]
    assert upstream["certManager"]["enabled"] and not upstream["selfSignedCertificates"]["enabled"]
    spec = tenant_spec.shared_datastore_spec("kamaji-system", 3)
    fullname, domain = upstream["fullnameOverride"], upstream["clusterDomain"]
    assert spec["endpoints"] == [f"{fullname}-{i}.{fullname}.kamaji-system.svc.{domain}:2379" for i in range(3)]
    tls = spec["tlsConfig"]
    for part in ("certificateAuthority", "clientCertificate"):
        refs = [tls[part][key]["secretReference"] for key in ("certificate", "privateKey")]
        assert {ref["namespace"] for ref in refs} == {"kamaji-system"}
        assert all(ref["name"].startswith(f"{fullname}-") for ref in refs)
        # cert-manager writes tls.crt / tls.key.
        assert [ref["keyPath"] for ref in refs] == ["tls.crt", "tls.key"]
    manifest = tenant_spec.datastore_manifest(DEFAULT_DATASTORE, spec)
    assert "namespace" not in manifest["metadata"], "DataStore is cluster-scoped"
    assert schema_errors(manifest, strict_schema(datastore_crd)) == []


def test_dedicated_datastore_and_etcd_values_come_from_the_tenant_config(dev_config, vendor_dir, datastore_crd):
    dev_config["tenants"][1]["dataStore"] = {"dedicated": True, "replicas": 3, "storageSize": "4Gi",
                                             "quotaMiB": 2048}
    tenant_a, tenant_b = load_stack_config(dev_config).tenants
    assert not tenant_a.data_store.dedicated
    store = tenant_b.data_store
    values = tenant_spec.dedicated_etcd_values(store)
    assert values["replicas"] == 3
    assert values["persistentVolumeClaim"]["size"] == "4Gi"
    # A string: a JSON number would reach the chart's template as a float (2.147483648e+09).
    assert values["quotaBackendBytes"] == str(2048 * 1024 * 1024)
    # The program owns the DataStore object, so the chart must not render one too.
    assert values["datastore"] == {"enabled": False}
    fullname = values["fullnameOverride"]
    name = tenant_spec.dedicated_datastore_name("tenant-b")
    assert name != DEFAULT_DATASTORE
    spec = tenant_spec.dedicated_datastore_spec("tenant-b", store.replicas)
    domain = _kamaji_etcd_values(vendor_dir)["clusterDomain"]
    assert spec["endpoints"] == [f"{fullname}-{i}.{fullname}.tenant-b.svc.{domain}:2379" for i in range(3)]
    refs = [spec["tlsConfig"][part][key]["secretReference"]
            for part in ("certificateAuthority", "clientCertificate") for key in ("certificate", "privateKey")]
    assert {ref["namespace"] for ref in refs} == {"tenant-b"}
    assert all(ref["name"].startswith(f"{fullname}-") for ref in refs)
    manifest = tenant_spec.datastore_manifest(name, spec, "tenant-b")
    assert manifest["metadata"]["labels"]["gpu-tenancy/tenant"] == "tenant-b"
    assert schema_errors(manifest, strict_schema(datastore_crd)) == []
    one = tenant_spec.dedicated_datastore_spec("tenant-b", 1)
    assert len(one["endpoints"]) == 1


def test_datastore_schema_check_catches_a_wrong_driver(datastore_crd):
    manifest = tenant_spec.datastore_manifest("x", {**tenant_spec.dedicated_datastore_spec("t", 1), "driver": "ETCD"})
    assert any(e.startswith("spec.driver:") for e in schema_errors(manifest, strict_schema(datastore_crd)))


# --------------------------------------------------------------------------- #
# Calico
# --------------------------------------------------------------------------- #


def test_calico_pool_is_the_tenant_pod_range_over_vxlan(tenants):
    for tenant in tenants:
        values = tenant_spec.calico_operator_values(tenant.pod_cidr, "172.18.255.201:6443", len(tenant.workers))
        (pool,) = values["installation"]["calicoNetwork"]["ipPools"]
        assert pool == {
            "cidr": tenant.pod_cidr,
            "encapsulation": "VXLAN",
            "natOutgoing": "Enabled",
            "nodeSelector": "all()",
            "blockSize": 26,
        }
        assert values["kubernetesServiceEndpoint"] == {"host": "172.18.255.201", "port": "6443"}
        assert {values[k]["enabled"] for k in ("apiServer", "goldmane", "whisker")} == {False}


def test_calico_control_plane_replicas_fit_the_workers(tenants):
    replicas = [
        tenant_spec.calico_operator_values(t.pod_cidr, "1.2.3.4:6443", len(t.workers))["installation"][
            "controlPlaneReplicas"]
        for t in tenants
    ]
    assert replicas == [1, 1, 2]


# --------------------------------------------------------------------------- #
# Inside the tenant: GPU quota, workload namespaces, the restricted credential
# --------------------------------------------------------------------------- #


def _hami_quota_keys(vendor_dir):
    """HAMi's resource names (chart values): the card count is a native extended-resource quota (`requests.`),
    memory and cores are what HAMi's quota manager counts, under `limits.` (pkg/device/quota.go)."""
    values = yaml.safe_load((vendor_dir / "hami" / "values.yaml").read_text())
    return (f"requests.{values['resourceName']}", f"limits.{values['resourceMem']}",
            f"limits.{values['resourceCores']}")


def test_quota_keys_are_hamis_resource_names(vendor_dir):
    gpus, memory, cores = _hami_quota_keys(vendor_dir)
    quota = Quota.model_validate({"gpus": 2, "memoryMiB": 6000, "cores": 60})
    assert tenant_spec.gpu_quota_hard(quota) == {gpus: "2", memory: "6000", cores: "60"}


def test_quota_lists_only_the_keys_that_are_set_in_each_namespace(tenants, vendor_dir):
    gpus, memory, _ = _hami_quota_keys(vendor_dir)
    assert tenant_spec.gpu_resource_quota(tenants[0].quota, "default") is None
    for namespace in tenants[1].namespaces:
        quota = tenant_spec.gpu_resource_quota(tenants[1].quota, namespace)
        assert quota["metadata"]["namespace"] == namespace
        assert quota["spec"]["hard"] == {gpus: "2", memory: "6000"}
        assert _k8s_errors(quota) is None
    assert tenant_spec.gpu_quota_hard(tenants[1].quota.model_copy(update={"gpus": 0, "memory_mib": None})) == {
        gpus: "0"
    }
    empty = tenants[1].quota.model_copy(update={"gpus": None, "memory_mib": None, "cores": None})
    assert tenant_spec.gpu_resource_quota(empty, "default") is None


def test_workload_namespace_enforces_pod_security_baseline():
    namespace = tenant_spec.workload_namespace("ml")
    labels = namespace["metadata"]["labels"]
    # kubernetes.io/docs/concepts/security/pod-security-admission: levels privileged|baseline|restricted.
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"
    assert namespace["metadata"]["name"] == "ml"
    assert _k8s_errors(namespace) is None


def test_tenant_user_gets_edit_only_in_its_workload_namespaces():
    objects = tenant_spec.tenant_user_objects(["default", "ml"])
    for obj in objects:
        assert _k8s_errors(obj) is None, obj
        assert obj["metadata"].get("namespace"), f"{obj['kind']} is cluster-scoped"
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    assert set(by_kind) == {"ServiceAccount", "Secret", "RoleBinding"}
    (account,) = by_kind["ServiceAccount"]
    (token,) = by_kind["Secret"]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": account["metadata"]["name"]}
    assert token["metadata"]["namespace"] == account["metadata"]["namespace"]
    subject = {"kind": "ServiceAccount", "name": account["metadata"]["name"],
               "namespace": account["metadata"]["namespace"]}
    bindings = by_kind["RoleBinding"]
    # Not in the ServiceAccount's own namespace (kube-system): edit there would read every system Secret.
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["default", "ml"]
    for binding in bindings:
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}
        assert binding["subjects"] == [subject]


def test_tenant_user_kubeconfig_carries_the_token_and_trusts_the_tenant_ca():
    ca = tenant_ca_pem("user-kubeconfig-ca").decode()
    text = tenant_spec.tenant_user_kubeconfig("172.18.255.200:6443", ca, "the-token", "tenant-a", "ml")
    document = yaml.safe_load(text)
    assert tenant_spec.ca_certificate(text) == ca
    (cluster,) = document["clusters"]
    (user,) = document["users"]
    (context,) = document["contexts"]
    assert cluster["cluster"]["server"] == "https://172.18.255.200:6443"
    assert user["user"] == {"token": "the-token"}
    assert context["context"] == {"cluster": cluster["name"], "user": user["name"], "namespace": "ml"}
    assert document["current-context"] == context["name"]


def test_object_quota_counts_every_kind_the_tenant_user_may_create_in_each_namespace():
    quota = tenant_spec.object_resource_quota(None, "ml")
    assert quota["metadata"]["name"] == tenant_spec.OBJECT_QUOTA_NAME and quota["metadata"]["namespace"] == "ml"
    hard = quota["spec"]["hard"]
    assert hard == {f"count/{kind}": str(count) for kind, count in DEFAULT_OBJECT_COUNTS.items()}
    assert {"count/secrets", "count/configmaps", "count/pods"} <= set(hard)
    assert _k8s_errors(quota) is None
    # One kind changed, the others keep their defaults; a GPU-only quota leaves the defaults.
    changed = tenant_spec.object_resource_quota(Quota.model_validate({"objects": {"secrets": 3}}), "ml")
    assert changed["spec"]["hard"] == {**hard, "count/secrets": "3"}
    assert tenant_spec.object_resource_quota(Quota.model_validate({"gpus": 1}), "ml") == quota


def test_the_object_quota_counts_every_kind_the_tenant_users_role_may_create():
    # The rules of the role the user is bound to (kubernetes bootstrappolicy, vendored in tests/data): a kind it may
    # create that the quota does not count would be unbounded in the shared etcd.
    rules = yaml.safe_load((Path(__file__).parent / "data" / "aggregate-to-edit.yaml").read_text())["rules"]
    kinds = tenant_spec.counted_kinds(rules)
    assert {"events", "leases.coordination.k8s.io", "pods", "deployments.apps"} <= kinds
    assert set(DEFAULT_OBJECT_COUNTS) == kinds
    # Subresources (pods/exec, serviceaccounts/token) store nothing; a rule without create counts nothing.
    assert not {kind for kind in kinds if "/" in kind}
    assert tenant_spec.counted_kinds([{"apiGroups": ["x.io"], "resources": ["widgets"], "verbs": ["get"]}]) == set()
    assert tenant_spec.counted_kinds([{"apiGroups": ["x.io"], "resources": ["widgets"], "verbs": ["*"]}]) == {
        "widgets.x.io"}


# The largest object the API server can store: etcd's default --max-request-bytes (1.5 MiB); Secrets and ConfigMaps
# are held to 1 MiB of data, other kinds only by that.
MAX_OBJECT_MIB = 1.5


def worst_case_mib(counts: dict[str, int]) -> int:
    """The most one namespace's objects can take in etcd at these counts (each object at its size limit)."""
    return int(sum(counts.values()) * MAX_OBJECT_MIB)


def test_default_object_counts_leave_room_in_the_shared_etcd():
    # Two lab tenants of one namespace each, every object at its size limit, stay below the shared etcd's quota.
    shared_mib = int(kamaji_values(Versions())["kamaji-etcd"]["quotaBackendBytes"]) // 2**20
    assert 2 * worst_case_mib(DEFAULT_OBJECT_COUNTS) < shared_mib


# --------------------------------------------------------------------------- #
# Where the powerful controllers run: root on a GPU worker must not be tenant admin
# --------------------------------------------------------------------------- #


def test_a_system_node_selector_exists_only_where_a_tenant_has_a_worker_without_gpus(tenants):
    assert all(tenant.workers and all(w.gpus for w in tenant.workers) for tenant in tenants[:2])
    assert [tenant_spec.system_node_selector(t) for t in tenants[:2]] == [None, None]
    mixed = tenants[0].model_copy(update={"workers": [*tenants[0].workers, Worker(name="system")]})
    assert tenant_spec.system_node_selector(mixed) == {tenant_spec.SYSTEM_NODE_LABEL: "true"}
    # A label prefix NodeRestriction keeps kubelets from setting on their own Node.
    assert tenant_spec.SYSTEM_NODE_LABEL.startswith("node-restriction.kubernetes.io/")


def test_calico_runs_its_operator_and_kube_controllers_on_system_workers_only_when_there_are_some(tenants, vendor_dir):
    selector = {tenant_spec.SYSTEM_NODE_LABEL: "true"}
    plain = tenant_spec.calico_operator_values(tenants[0].pod_cidr, "1.2.3.4:6443", 2)
    assert "nodeSelector" not in plain and "calicoKubeControllersDeployment" not in plain["installation"]
    values = tenant_spec.calico_operator_values(tenants[0].pod_cidr, "1.2.3.4:6443", 2, selector)
    chart = yaml.safe_load((vendor_dir / "calico" / "values.yaml").read_text())
    # The chart's top-level nodeSelector places the tigera-operator Deployment; its own default is kept.
    assert values["nodeSelector"] == {**chart["nodeSelector"], **selector}
    controllers = values["installation"]["calicoKubeControllersDeployment"]
    assert controllers["spec"]["template"]["spec"]["nodeSelector"] == selector
    installation = {"apiVersion": "operator.tigera.io/v1", "kind": "Installation", "metadata": {"name": "default"},
                    "spec": values["installation"]}
    schema = crd_json_schema(vendor_dir / "calico" / "operator.tigera.io_installations.yaml", "v1")
    assert schema_errors(installation, schema) == []


CALICO_NODE = "system:serviceaccount:calico-system:calico-node"
SYSTEM = {tenant_spec.SYSTEM_NODE_LABEL: "true"}
GPU_NODE = {"metadata": {"name": "gpu-0", "labels": {"kubernetes.io/hostname": "gpu-0"}}, "spec": {}}
SYSTEM_NODE = {"metadata": {"name": "cpu-0", "labels": {"kubernetes.io/hostname": "cpu-0", **SYSTEM}}, "spec": {}}


def _labelled(node, labels):
    return {**node, "metadata": {**node["metadata"], "labels": labels}}


@pytest.mark.parametrize("user, groups, operation, subresource, new, old, allowed", [
    # Root on a GPU worker with calico-node's token (nodes/status patch, cluster-wide): the status strategy keeps
    # label changes (kubernetes pkg/registry/core/node/strategy.go), so the policy must refuse them.
    (CALICO_NODE, (), "UPDATE", "status", _labelled(GPU_NODE, {**GPU_NODE["metadata"]["labels"], **SYSTEM}),
     GPU_NODE, False),
    (CALICO_NODE, (), "UPDATE", "status", _labelled(SYSTEM_NODE, {"kubernetes.io/hostname": "cpu-0"}), SYSTEM_NODE,
     False),
    (CALICO_NODE, (), "UPDATE", "status", _labelled(SYSTEM_NODE, {**SYSTEM_NODE["metadata"]["labels"],
                                                                   tenant_spec.SYSTEM_NODE_LABEL: "false"}),
     SYSTEM_NODE, False),
    (CALICO_NODE, (), "UPDATE", "", _labelled(GPU_NODE, SYSTEM), GPU_NODE, False),
    ("kubernetes-admin", ("kubeadm:cluster-admins",), "CREATE", "", SYSTEM_NODE, None, False),
    # What kubelets and Calico write keeps the labels as they are; other labels stay free.
    (CALICO_NODE, (), "UPDATE", "status", SYSTEM_NODE, SYSTEM_NODE, True),
    ("system:node:gpu-0", ("system:nodes",), "UPDATE", "status",
     _labelled(GPU_NODE, {**GPU_NODE["metadata"]["labels"], "team": "a"}), GPU_NODE, True),
    ("system:node:gpu-0", ("system:nodes",), "CREATE", "", GPU_NODE, None, True),
    ("system:node:gpu-0", ("system:nodes",), "UPDATE", "", {"metadata": {"name": "gpu-0"}}, {"metadata": {
        "name": "gpu-0"}}, True),
    # The program's own NodePatch (super-admin.conf: system:masters).
    ("kubernetes-super-admin", ("system:masters",), "UPDATE", "", _labelled(GPU_NODE, SYSTEM), GPU_NODE, True),
])
def test_only_the_program_sets_node_restriction_labels(user, groups, operation, subresource, new, old, allowed):
    spec = tenant_spec.node_label_policy()[0]["spec"]
    assert admits(spec, user, operation, "nodes", new, old, (*groups, "system:authenticated"), subresource) is allowed


@pytest.mark.parametrize("policy", [tenant_spec.node_label_policy, hami_token_policy, hami_pod_policy])
def test_every_admission_policy_is_a_valid_binding_that_denies_and_fails_closed(policy):
    manifests = policy()
    for manifest in manifests:
        kubernetes_validate.validate(manifest, "1.35.0", strict=True)
    definition, binding = manifests
    assert definition["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["policyName"] == definition["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_tenant_user_cannot_fill_the_shared_etcd_with_events_or_leases():
    """Events and leases count against the object quota like every other kind the user may create; with the quota
    of before, which counted neither, the same creates had no bound."""
    from components.kube import ApiError
    from tests.support.lifecycle_support import running_kind_lab

    sim = running_kind_lab(one_tenant=True)
    api = sim.world.tenant_api(sim.config["tenants"][0]["name"])
    quota = api.find("ResourceQuota", "default", tenant_spec.OBJECT_QUOTA_NAME)
    for version, kind, key in (("v1", "Event", "count/events"),
                               ("coordination.k8s.io/v1", "Lease", "count/leases.coordination.k8s.io")):
        def create(number: int, version: str = version, kind: str = kind) -> None:
            api.create(None, {"apiVersion": version, "kind": kind, "metadata": {"name": f"x{number}",
                                                                                  "namespace": "default"}})

        limit = int(quota["spec"]["hard"][key])
        for number in range(limit):
            create(number)
        with pytest.raises(ApiError, match=f"exceeded quota: {tenant_spec.OBJECT_QUOTA_NAME}, requested: {key}=1"):
            create(limit)
        del quota["spec"]["hard"][key]
        create(limit)
