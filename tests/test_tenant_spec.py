"""Pure builders of the tenant plane, tested without Pulumi."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from components import tenant_spec
from config import load_stack_config
from tests.crd_schema import crd_json_schema, schema_errors
from tests.fixtures import tenant_ca_pem

UTC = datetime.timezone.utc
KUBERNETES_SCHEMA_VERSION = "1.35.0"
KIND_SUBNET = "172.18.0.0/16"

# The tutorial's TenantControlPlane (facts §3 ✗): no spec.kubernetes, wrong key names.
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


@pytest.fixture(scope="module")
def tcp_schema(vendor_dir):
    return crd_json_schema(vendor_dir / "kamaji" / "kamaji.clastix.io_tenantcontrolplanes.yaml")


@pytest.fixture
def tenants(dev_config):
    dev_config["tenants"][1]["quota"] = {"gpus": 2, "memoryMiB": 6000}
    # A third tenant with automatically allocated ranges.
    card = {"uuid": "GPU-MOCK-C0", "model": "NVIDIA-A100", "memoryMiB": 8192}
    workers = [{"name": "w0", "gpus": [card]}, {"name": "w1"}, {"name": "w2"}]
    dev_config["tenants"].append({"name": "tenant-c", "workers": workers})
    return load_stack_config(dev_config).tenants


def _k8s_errors(manifest):
    try:
        kubernetes_validate.validate(manifest, KUBERNETES_SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return str(error).splitlines()[0]
    return None


# --------------------------------------------------------------------------- #
# TenantControlPlane
# --------------------------------------------------------------------------- #


def test_tcp_manifest_is_valid_against_the_vendored_crd(tenants, tcp_schema):
    for tenant in tenants:
        manifest = tenant_spec.tenant_control_plane_manifest(tenant, "default")
        assert schema_errors(manifest, tcp_schema) == [], tenant.name


def test_seed_tutorial_manifest_fails_the_same_check(tcp_schema):
    errors = schema_errors(SEED_TUTORIAL_TCP, tcp_schema)
    assert any("'kubernetes' is a required property" in e for e in errors), errors
    assert any(e.startswith("spec:") and "'kubernetesVersion' was unexpected" in e for e in errors), errors
    assert any(e.startswith("spec.networkProfile:") and "'serviceCIDR'" in e and "'podCIDR'" in e for e in errors), errors


def test_schema_check_catches_a_wrong_case_key_and_a_bad_enum(tenants, tcp_schema):
    manifest = tenant_spec.tenant_control_plane_manifest(tenants[0], "default")
    manifest["spec"]["networkProfile"]["podCIDR"] = manifest["spec"]["networkProfile"].pop("podCidr")
    manifest["spec"]["kubernetes"]["kubelet"]["cgroupfs"] = "system-d"
    errors = schema_errors(manifest, tcp_schema)
    assert any("'podCIDR' was unexpected" in e for e in errors), errors
    assert any(e.startswith("spec.kubernetes.kubelet.cgroupfs:") for e in errors), errors


def test_tcp_spec_follows_the_platform_facts(tenants):
    tenant = tenants[0]
    manifest = tenant_spec.tenant_control_plane_manifest(tenant, "default")
    spec = manifest["spec"]
    assert manifest["metadata"]["name"] == manifest["metadata"]["namespace"] == "tenant-a"
    assert manifest["metadata"]["annotations"] == {
        "pulumi.com/waitFor": "jsonpath={.status.kubernetesResources.version.status}=Ready"
    }
    assert spec["kubernetes"] == {"version": "v1.35.0", "kubelet": {"cgroupfs": "systemd"}}
    assert spec["controlPlane"] == {"deployment": {"replicas": 1}, "service": {"serviceType": "LoadBalancer"}}
    assert spec["dataStore"] == "default"
    assert spec["addons"] == {"coreDNS": {}, "kubeProxy": {}, "konnectivity": {"server": {"port": 8132}}}
    network = spec["networkProfile"]
    assert (network["serviceCidr"], network["podCidr"]) == (tenant.service_cidr, tenant.pod_cidr)
    assert network["port"] == 6443


def test_dns_service_ip_lies_in_each_tenants_service_range(tenants):
    for tenant in tenants:
        network = tenant_spec.tenant_control_plane_spec(tenant, "default")["networkProfile"]
        (dns,) = network["dnsServiceIPs"]
        assert ipaddress.ip_address(dns) in ipaddress.ip_network(network["serviceCidr"])
    assert tenant_spec.tenant_control_plane_spec(tenants[2], "default")["networkProfile"]["serviceCidr"] != "10.96.0.0/16"


def test_tcp_name_must_be_a_dns1035_label(tenants):
    for bad in ("1tenant", "Tenant-a", "tenant_a", "tenant-", "a" * 64):
        with pytest.raises(ValueError, match="DNS-1035"):
            tenant_spec.tenant_control_plane_metadata(tenants[0].model_copy(update={"name": bad}))
    assert tenant_spec.tenant_control_plane_metadata(tenants[0])["name"] == "tenant-a"


def test_unresolved_cidrs_are_refused_with_a_pointer_to_the_loader(tenants):
    raw = tenants[0].model_copy(update={"pod_cidr": None})
    with pytest.raises(ValueError, match="load_stack_config"):
        tenant_spec.tenant_control_plane_spec(raw, "default")


def test_endpoint_from_status_and_its_parts():
    status = {"controlPlaneEndpoint": "172.18.255.200:6443"}
    assert tenant_spec.control_plane_endpoint(status, "t") == "172.18.255.200:6443"
    assert tenant_spec.split_endpoint("172.18.255.200:6443") == ("172.18.255.200", "6443")
    with pytest.raises(ValueError, match="MetalLB"):
        tenant_spec.control_plane_endpoint({"kubernetesResources": {}}, "t")
    with pytest.raises(ValueError, match="<host>:<port>"):
        tenant_spec.split_endpoint("172.18.255.200")


# --------------------------------------------------------------------------- #
# NetworkPolicy: a tiny evaluator of the rules, then the API schema
# --------------------------------------------------------------------------- #


def _labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and not selector.get(
        "matchExpressions"
    )


def _peer_matches(peer, policy_ns, ns, pod_labels, ip):
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(ip)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except", [])
        )
    if "namespaceSelector" in peer:
        ns_ok = _labels_match(peer["namespaceSelector"], {"kubernetes.io/metadata.name": ns})
    else:
        ns_ok = ns == policy_ns
    return ns_ok and _labels_match(peer.get("podSelector", {}), pod_labels)


def _allowed(policy, direction, ns, ip, pod_labels=None, port=None, protocol="TCP"):
    """Whether the policy admits traffic from (ingress) / to (egress) a peer; pods in other namespaces have pod IPs."""
    key, peers_key = ("ingress", "from") if direction == "ingress" else ("egress", "to")
    policy_ns = policy["metadata"]["namespace"]
    for rule in policy["spec"].get(key, []):
        ports = rule.get("ports")
        if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports):
            continue
        if any(_peer_matches(peer, policy_ns, ns, pod_labels or {}, ip) for peer in rule.get(peers_key, [])):
            return True
    return False


POD_IP = "10.244.1.17"  # management cluster pod range: not on the kind network


def test_other_tenants_cannot_reach_the_control_plane_pods():
    policy = tenant_spec.isolation_network_policy("tenant-a", [KIND_SUBNET])
    assert policy["spec"]["podSelector"] == {}, "must select every pod of the tenant namespace"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert not _allowed(policy, "ingress", "tenant-b", POD_IP, port=6443)
    assert not _allowed(policy, "ingress", "default", POD_IP, port=6443)
    assert not _allowed(policy, "egress", "tenant-b", POD_IP, port=6443)


def test_kamaji_workers_same_namespace_and_dns_still_work():
    policy = tenant_spec.isolation_network_policy("tenant-a", [KIND_SUBNET])
    assert _allowed(policy, "ingress", "kamaji-system", POD_IP, port=6443)
    assert _allowed(policy, "ingress", "tenant-a", POD_IP, port=8132)
    assert _allowed(policy, "ingress", "elsewhere", "172.18.0.5", port=6443)  # a worker container
    assert _allowed(policy, "ingress", "elsewhere", "172.18.0.5", port=8132)  # its konnectivity agent
    assert _allowed(policy, "egress", "kamaji-system", POD_IP, port=2379)  # kamaji-etcd
    dns = {"k8s-app": "kube-dns"}
    assert _allowed(policy, "egress", "kube-system", POD_IP, dns, port=53, protocol="UDP")
    assert _allowed(policy, "egress", "kube-system", POD_IP, dns, port=53, protocol="TCP")
    assert not _allowed(policy, "egress", "kube-system", POD_IP, {"app": "other"}, port=53, protocol="UDP")
    assert not _allowed(policy, "egress", "kube-system", POD_IP, dns, port=443)


def test_no_peer_opens_the_policy_to_every_namespace():
    policy = tenant_spec.isolation_network_policy("tenant-a", [KIND_SUBNET])
    for rule in policy["spec"]["ingress"] + policy["spec"]["egress"]:
        for peer in rule.get("from", []) + rule.get("to", []):
            assert peer.get("namespaceSelector") != {}, peer
            if "ipBlock" in peer:
                assert peer["ipBlock"]["cidr"] == KIND_SUBNET


def test_network_policy_is_a_valid_kubernetes_object():
    policy = tenant_spec.isolation_network_policy("tenant-a", [KIND_SUBNET])
    assert _k8s_errors(policy) is None
    broken = yaml.safe_load(yaml.safe_dump(policy))
    block = broken["spec"]["ingress"][1]["from"][0]["ipBlock"]
    block["cidrs"] = block.pop("cidr")
    assert _k8s_errors(broken) is not None


def test_network_policy_refuses_an_ipv6_subnet():
    with pytest.raises(ValueError, match="IPv4"):
        tenant_spec.isolation_network_policy("tenant-a", ["fc00:f853:ccd:e793::/64"])


# --------------------------------------------------------------------------- #
# Credentials
# --------------------------------------------------------------------------- #


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


def test_discovery_hash_matches_openssl(tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not on PATH: no independent implementation to compare with")
    pem = tenant_ca_pem("discovery-hash-test")
    (tmp_path / "ca.crt").write_bytes(pem)
    pipeline = (
        f"{openssl} x509 -in ca.crt -pubkey -noout | {openssl} pkey -pubin -outform der | "
        f"{openssl} dgst -sha256 -hex"
    )
    out = subprocess.run(["bash", "-o", "pipefail", "-c", pipeline], cwd=tmp_path, capture_output=True, text=True, check=True)
    expected = out.stdout.strip().split()[-1]
    assert tenant_spec.discovery_hash(pem) == f"sha256:{expected}"
    assert tenant_spec.discovery_hash(pem.decode()) == f"sha256:{expected}"
    assert tenant_spec.discovery_hash(tenant_ca_pem("another-ca")) != f"sha256:{expected}"


def test_decode_secret_value_names_the_secret_and_key():
    data = {"admin.conf": base64.b64encode(b"apiVersion: v1\n").decode()}
    assert tenant_spec.decode_secret_value(data, "admin.conf", "t-admin-kubeconfig") == "apiVersion: v1\n"
    with pytest.raises(ValueError, match="'t-ca' has no key 'ca.crt'"):
        tenant_spec.decode_secret_value({}, "ca.crt", "t-ca")
    with pytest.raises(ValueError, match="not base64"):
        tenant_spec.decode_secret_value({"ca.crt": "%%%"}, "ca.crt", "t-ca")
    assert tenant_spec.admin_kubeconfig_secret_name("t") == "t-admin-kubeconfig"
    assert tenant_spec.ca_secret_name("t") == "t-ca"


# --------------------------------------------------------------------------- #
# Bootstrap token
# --------------------------------------------------------------------------- #


def test_token_secret_shape_is_what_kubeadm_join_needs():
    manifest = tenant_spec.bootstrap_token_secret("abc123", "0123456789abcdef", "2026-08-27T00:00:00Z")
    assert manifest["type"] == "bootstrap.kubernetes.io/token"
    assert manifest["metadata"]["name"] == "bootstrap-token-abc123"
    assert manifest["metadata"]["namespace"] == "kube-system"
    data = manifest["stringData"]
    assert data["token-id"] == "abc123" and data["token-secret"] == "0123456789abcdef"
    assert data["usage-bootstrap-authentication"] == data["usage-bootstrap-signing"] == "true"
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    assert datetime.datetime.fromisoformat(data["expiration"].replace("Z", "+00:00")).tzinfo is not None
    assert _k8s_errors(manifest) is None


def test_token_format_is_enforced():
    for token_id, secret in (("ABC123", "0123456789abcdef"), ("abc12", "0123456789abcdef"), ("abc123", "0123456789abcde!")):
        with pytest.raises(ValueError, match=r"\[a-z0-9\]\{6\}"):
            tenant_spec.bootstrap_token_secret(token_id, secret, "2026-08-27T00:00:00Z")
    assert tenant_spec.TOKEN_PATTERN.match("abc123.0123456789abcdef")
    assert not tenant_spec.TOKEN_PATTERN.match("abc123.0123456789abcdeF")


def test_token_window_is_stable_inside_a_window_and_moves_after_it():
    start = tenant_spec.token_window(datetime.datetime(2026, 8, 20, 12, tzinfo=UTC)).start
    first = tenant_spec.token_window(start)
    last = tenant_spec.token_window(start + tenant_spec.TOKEN_ROTATION - datetime.timedelta(seconds=1))
    after = tenant_spec.token_window(start + tenant_spec.TOKEN_ROTATION)
    assert first == last
    assert after.label != first.label
    assert after.expiration == first.expiration + tenant_spec.TOKEN_ROTATION


def test_a_fresh_token_always_has_at_least_one_rotation_period_left():
    now = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    for hours in range(0, 24 * 30, 7):
        moment = now + datetime.timedelta(hours=hours)
        window = tenant_spec.token_window(moment)
        assert window.start <= moment < window.start + tenant_spec.TOKEN_ROTATION
        assert tenant_spec.TOKEN_ROTATION < window.expiration - moment <= 2 * tenant_spec.TOKEN_ROTATION
        assert window.expiration_rfc3339.endswith("Z")
        assert datetime.datetime.fromisoformat(window.expiration_rfc3339.replace("Z", "+00:00")) == window.expiration


def test_token_window_needs_an_aware_time():
    with pytest.raises(ValueError, match="timezone-aware"):
        tenant_spec.token_window(datetime.datetime(2026, 8, 20))


# --------------------------------------------------------------------------- #
# Calico and quota
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
        tenant_spec.calico_operator_values(t.pod_cidr, "1.2.3.4:6443", len(t.workers))["installation"]["controlPlaneReplicas"]
        for t in tenants
    ]
    assert replicas == [1, 1, 2]


def test_quota_lists_only_the_keys_that_are_set(tenants):
    assert tenant_spec.gpu_resource_quota(tenants[0].quota) is None
    quota = tenant_spec.gpu_resource_quota(tenants[1].quota)
    assert quota["metadata"]["namespace"] == "default"
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "2", "requests.nvidia.com/gpumem": "6000"}
    assert _k8s_errors(quota) is None
    full = tenants[1].quota.model_copy(update={"cores": 150})
    assert tenant_spec.gpu_quota_hard(full)["requests.nvidia.com/gpucores"] == "150"
    assert tenant_spec.gpu_quota_hard(tenants[1].quota.model_copy(update={"gpus": 0, "memory_mib": None})) == {
        "requests.nvidia.com/gpu": "0"
    }


def test_outside_traffic_reaches_only_the_api_and_konnectivity_ports():
    policy = tenant_spec.isolation_network_policy("tenant-a", [KIND_SUBNET])
    assert _allowed(policy, "ingress", "elsewhere", "172.18.0.5", port=6443)
    assert _allowed(policy, "ingress", "elsewhere", "172.18.0.5", port=8132)
    assert not _allowed(policy, "ingress", "elsewhere", "172.18.0.5", port=10257)  # controller manager
    assert _allowed(policy, "ingress", "kamaji-system", POD_IP, port=10257)


def test_every_worker_network_is_admitted_both_ways():
    policy = tenant_spec.isolation_network_policy("tenant-a", [KIND_SUBNET, "10.20.0.0/16"])
    assert _allowed(policy, "ingress", "elsewhere", "10.20.1.11", port=6443)  # an SSH-joined GPU server
    assert _allowed(policy, "egress", "elsewhere", "10.20.1.11", port=10250)
    assert not _allowed(policy, "ingress", "elsewhere", "10.30.0.1", port=6443)


def test_network_policy_needs_a_worker_network():
    with pytest.raises(ValueError, match="no worker networks"):
        tenant_spec.isolation_network_policy("tenant-a", [])
