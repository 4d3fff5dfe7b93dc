"""The management plane (components/management/kamaji.py, components/helm.py): cert-manager, Kamaji from the verified local chart
with its kamaji-etcd subchart, the DataStore this program owns, the etcd NetworkPolicy, the gate on Kamaji's
webhook, and MetalLB with its pool. Values and objects are checked against the vendored upstream files."""

from __future__ import annotations

import copy
import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from components.charts import CHARTS
from components.helm import helm_values_args, null_overrides, without_nulls
from components.images import DEDICATED_ETCD_IMAGES
from components.management.cluster import ManagementCluster, ManagementClusterArgs
from components.management.kamaji import (
    KAMAJI_CHART,
    KAMAJI_RELEASE_NAME,
    LB_POOL_NAME,
    Kamaji,
    KamajiArgs,
    cert_manager_values,
    choose_lb_pool,
    etcd_network_policy,
    kamaji_values,
    lb_pool_range,
    metallb_values,
    pool_bounds,
)
from components.tenant import spec as tenant_spec
from components.tenant.spec import ETCD_CHART
from config import Versions
from config.models import DataStore
from naming import COMPONENT_PREFIX, DEFAULT_DATASTORE, KAMAJI_NAMESPACE
from ops import upstream
from ops.registrations import KIND_SUBNET_V4 as MOCKED_KIND_SUBNET
from tests.support.chart_values import load_chart_values, unknown_value_keys
from tests.support.crd_schema import crd_json_schema, schema_errors
from tests.support.fixtures import KIND_GATEWAY_V4, KIND_SUBNET_V4, kubeconfig_yaml
from tests.support.mockrun import PROJECT_ROOT, reference_stack, registered

RELEASE = "kubernetes:helm.sh/v3:Release"
DATASTORE = "kubernetes:kamaji.clastix.io/v1alpha1:DataStore"
TCP = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"
WEBHOOK_READY = "pulumi-python:dynamic/gpu-tenancy:KamajiWebhookReady"
METALLB_WEBHOOK_READY = "pulumi-python:dynamic/gpu-tenancy:MetalLBWebhookReady"
NODE_IMAGE = "kindest/node:v1.35.0"

# kamaji-etcd's own values.yaml is not vendored: `make charts` fetches the subchart into the chart directory, pinned
# in components/charts.json. Tests that compare with its defaults read that file and skip
# without it; templates/_helpers.tpl (at the same pin) labels the pods with `etcd.selectorLabels` =
# app.kubernetes.io/name (nameOverride, else the chart name) and app.kubernetes.io/instance (the release), and in
# cert-manager mode names the CA secret `<fullname>-ca` and the client certificate `<fullname>-client-certs`.
# The API server labels every namespace with its own name (Kubernetes >= 1.22, NamespaceDefaultLabelName).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


# --------------------------------------------------------------------------- #
# MetalLB pool range
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("subnet", "expected"),
    [
        ("172.18.0.0/16", "172.18.255.200-172.18.255.250"),  # Kamaji's kind quickstart
        ("172.19.0.0/16", "172.19.255.200-172.19.255.250"),
        ("172.18.16.0/20", "172.18.31.200-172.18.31.250"),
        ("192.168.96.0/20", "192.168.111.200-192.168.111.250"),
        ("10.89.0.0/24", "10.89.0.200-10.89.0.250"),
        ("10.0.0.0/8", "10.255.255.200-10.255.255.250"),
    ],
)
def test_lb_pool_range_table(subnet, expected):
    assert lb_pool_range(subnet) == expected


@pytest.mark.parametrize("subnet", ["172.18.0.0/16", "172.18.16.0/20", "10.89.0.0/24", "192.168.0.0/23"])
def test_lb_pool_range_stays_inside_clear_of_reserved_and_low_addresses(subnet):
    network = ipaddress.ip_network(subnet)
    first, last = (ipaddress.ip_address(end) for end in lb_pool_range(subnet).split("-"))
    assert first < last and first in network and last in network
    assert not first <= network.network_address + 1 <= last
    assert network.broadcast_address not in (first, last)
    # Docker hands container addresses out from the bottom: leave the first 199 free.
    assert int(first) - int(network.network_address) >= 199
    assert int(last) - int(first) + 1 == 51


@pytest.mark.parametrize(
    ("subnet", "message"),
    [
        ("10.89.0.0/25", "smaller than a /24"),
        ("fc00:f853:ccd:e793::/64", "not IPv4"),
        ("not-a-network", "not a network in CIDR form"),
    ],
)
def test_lb_pool_range_rejects_unusable_subnets(subnet, message):
    with pytest.raises(ValueError, match=message):
        lb_pool_range(subnet)


# --------------------------------------------------------------------------- #
# Choosing the pool: management.loadBalancerPool or the carved default
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("pool", "first", "last"),
    [
        ("172.18.255.200-172.18.255.250", "172.18.255.200", "172.18.255.250"),
        ("10.0.0.7-10.0.0.7", "10.0.0.7", "10.0.0.7"),
        ("172.18.200.0/24", "172.18.200.0", "172.18.200.255"),
        ("10.20.255.192/27", "10.20.255.192", "10.20.255.223"),
    ],
)
def test_pool_bounds(pool, first, last):
    assert pool_bounds(pool) == (ipaddress.IPv4Address(first), ipaddress.IPv4Address(last))


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ("10.0.0.9-10.0.0.1", "ends before it starts"),
        ("10.0.0.1/24", "neither an IPv4 range"),  # host bits set: not a network
        ("fd00::1-fd00::9", "neither an IPv4 range"),
        ("pool", "neither an IPv4 range"),
    ],
)
def test_pool_bounds_rejects_unusable_pools_naming_the_key(pool, message):
    with pytest.raises(ValueError, match=message) as raised:
        pool_bounds(pool)
    assert str(raised.value).startswith("management.loadBalancerPool")


def test_without_an_explicit_pool_kind_gets_the_carved_range_and_an_adopted_cluster_none():
    assert choose_lb_pool(KIND_SUBNET_V4, None) == lb_pool_range(KIND_SUBNET_V4) == "172.18.255.200-172.18.255.250"
    assert choose_lb_pool(None, None) is None


@pytest.mark.parametrize("pool", ["172.18.255.200-172.18.255.250", "172.18.100.10-172.18.100.20", "172.18.200.0/24"])
def test_an_explicit_pool_inside_the_kind_subnet_wins(pool):
    assert choose_lb_pool(KIND_SUBNET_V4, pool) == pool


def test_an_explicit_pool_on_an_adopted_cluster_is_taken_as_given_but_still_checked():
    assert choose_lb_pool(None, "10.20.255.200-10.20.255.250") == "10.20.255.200-10.20.255.250"
    with pytest.raises(ValueError, match="management.loadBalancerPool"):
        choose_lb_pool(None, "10.20.255.250-10.20.255.200")


@pytest.mark.parametrize(
    "pool",
    [
        "10.20.0.200-10.20.0.250",  # another network entirely
        "172.17.255.200-172.18.0.20",  # starts below the subnet
        "172.18.255.200-172.19.0.5",  # ends above it
        "172.18.0.0/15",  # a CIDR that contains the subnet
    ],
)
def test_an_explicit_pool_outside_the_kind_subnet_is_rejected_offering_the_default(pool):
    with pytest.raises(ValueError, match=r"management\.loadBalancerPool = .* is not inside the kind network") as raised:
        choose_lb_pool(KIND_SUBNET_V4, pool)
    assert "172.18.255.200-172.18.255.250" in str(raised.value)


@pytest.mark.parametrize(
    ("pool", "address"),
    [
        ("172.18.0.0-172.18.0.10", "172.18.0.0"),
        (f"{KIND_GATEWAY_V4}-172.18.0.10", KIND_GATEWAY_V4),
        ("172.18.255.200-172.18.255.255", "172.18.255.255"),
        ("172.18.0.0/24", "172.18.0.0"),
    ],
)
def test_an_explicit_pool_must_not_take_the_network_gateway_or_broadcast_address(pool, address):
    with pytest.raises(ValueError, match=rf"management\.loadBalancerPool = .* includes {re.escape(address)}"):
        choose_lb_pool(KIND_SUBNET_V4, pool)


# --------------------------------------------------------------------------- #
# Chart values against the vendored values.yaml (and values.schema.json where the chart has a closed one)
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def kamaji_chart(vendor_dir) -> dict[str, Any]:
    return load_chart_values(vendor_dir / "kamaji" / "values.yaml")


@pytest.fixture(scope="module")
def etcd_chart() -> dict[str, Any]:
    """kamaji-etcd's values.yaml as `make charts` fetched it, its chart checked against its pin; skip when not fetched."""
    directory = upstream.chart_root() / ETCD_CHART.directory
    if not (directory / "values.yaml").is_file():
        pytest.skip(f"kamaji-etcd's values.yaml is fetched by `make charts` (not there: {directory})")
    problem = upstream.tree_problem(directory, CHARTS[ETCD_CHART.directory])
    assert problem is None, f"{directory}: {problem}: run `make charts`"
    return yaml.safe_load((directory / "values.yaml").read_text())


def test_every_kamaji_value_key_outside_the_subchart_exists_in_kamajis_chart(kamaji_chart):
    values = kamaji_values(Versions())
    unknown = unknown_value_keys(values, kamaji_chart)
    # Kamaji's values.yaml shows only some of kamaji-etcd's keys; the others are checked against the subchart below.
    assert [key for key in unknown if not key.startswith("kamaji-etcd.")] == []
    assert unknown_value_keys({"imag": {"tag": "x"}}, kamaji_chart), "a misspelt key shows"


def test_every_kamaji_etcd_value_key_exists_in_the_subchart(kamaji_chart, etcd_chart):
    ours = kamaji_values(Versions())["kamaji-etcd"]
    # What Helm hands the subchart: its defaults, Kamaji's values for it, then ours.
    assert unknown_value_keys(ours, _helm_merge(etcd_chart, kamaji_chart["kamaji-etcd"])) == []
    assert unknown_value_keys({"replica": 1}, etcd_chart), "a misspelt subchart key shows"


def test_every_dedicated_etcd_value_key_exists_in_the_subchart(etcd_chart):
    ours = tenant_spec.dedicated_etcd_values(DataStore(dedicated=True))
    assert unknown_value_keys(ours, etcd_chart) == []


def test_a_dedicated_etcds_ca_generator_is_pinned_by_digest():
    # kamaji-etcd v0.15.0 templates/etcd_job_preinstall_1.yaml: image "<jobs.cfssl.image>:<jobs.cfssl.tag or latest>",
    # which generates the etcd's CA and keys; `latest` is also pulled Always.
    cfssl = tenant_spec.dedicated_etcd_values(DataStore(dedicated=True))["jobs"]["cfssl"]
    assert cfssl["image"] == "docker.io/cfssl/cfssl"
    tag, _, digest = cfssl["tag"].partition("@")
    assert tag and tag != "latest" and re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    assert f"{cfssl['image']}:{cfssl['tag']}" in DEDICATED_ETCD_IMAGES


def test_kamaji_values_pin_the_image_and_size_etcd_for_a_laptop():
    values = kamaji_values(Versions(kamajiImage="26.9.1-edge"))
    assert values["image"] == {"tag": "26.9.1-edge", "pullPolicy": "IfNotPresent"}
    assert "resources" in values and values["resources"] is None  # Helm null: drop the tight default limits
    assert values["telemetry"] == {"disabled": True}
    etcd = values["kamaji-etcd"]
    assert etcd["replicas"] == 1
    assert etcd["persistentVolumeClaim"] == {"size": "2Gi"}
    # A string (a JSON number would reach the template as a float); the space alarm fires before the disk is full.
    assert isinstance(etcd["quotaBackendBytes"], str) and int(etcd["quotaBackendBytes"]) < 2 * 1024**3


def test_the_chart_renders_no_datastore_and_the_program_takes_over_its_name(kamaji_chart):
    values = kamaji_values(Versions())
    # templates/etcd_datastore.yaml is gated by `datastore.enabled` (on by default in Kamaji's values).
    assert kamaji_chart["kamaji-etcd"]["datastore"]["enabled"] is True
    assert values["kamaji-etcd"]["datastore"] == {"enabled": False}
    # Same name the chart would have given it and Kamaji's default for TenantControlPlanes that name none.
    assert DEFAULT_DATASTORE == kamaji_chart["kamaji-etcd"]["datastore"]["name"] == kamaji_chart["defaultDatastoreName"]
    assert values["defaultDatastoreName"] == DEFAULT_DATASTORE


def _helm_merge(defaults: Any, overrides: Any) -> Any:
    """Helm's coalescing of user values over chart defaults: maps merge, a null deletes the key."""
    if not (isinstance(defaults, dict) and isinstance(overrides, dict)):
        return copy.deepcopy(overrides)
    merged = copy.deepcopy(defaults)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _helm_merge(merged.get(key), value)
    return merged


@pytest.mark.parametrize("adopted", [False, True])
def test_cert_manager_values_pass_the_charts_closed_schema(vendor_dir, adopted):
    chart = load_chart_values(vendor_dir / "cert-manager" / "values.yaml")
    schema = json.loads((vendor_dir / "cert-manager" / "values.schema.json").read_text())
    values = cert_manager_values(adopted)
    assert unknown_value_keys(values, chart) == []
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert [error.message for error in validator.iter_errors(_helm_merge(chart, values))] == []
    # The check has teeth: the schema is closed at the top level.
    assert list(validator.iter_errors(_helm_merge(chart, {**values, "crd": {"enabled": True}})))


def test_cert_manager_installs_its_crds_proves_its_webhook_and_moves_leases_only_when_adopted(vendor_dir):
    chart = load_chart_values(vendor_dir / "cert-manager" / "values.yaml")
    kind = cert_manager_values()
    assert chart["crds"]["enabled"] is False and kind["crds"] == {"enabled": True}
    assert kind["startupapicheck"] == {"enabled": True}
    # On kind the chart default (kube-system) stays; on a cluster we do not own, our namespace, which destroy removes.
    assert "global" not in kind and chart["global"]["leaderElection"]["namespace"] == "kube-system"
    adopted = cert_manager_values(adopted=True)
    assert adopted["global"] == {"leaderElection": {"namespace": "cert-manager"}}
    assert {k: v for k, v in adopted.items() if k != "global"} == kind


def test_metallb_is_plain_l2_whatever_the_charts_defaults(vendor_dir):
    chart = load_chart_values(vendor_dir / "metallb" / "values.yaml")
    schema = json.loads((vendor_dir / "metallb" / "values.schema.json").read_text())
    values = metallb_values()
    assert unknown_value_keys(values, chart) == []
    validator = jsonschema.Draft7Validator(schema)
    assert [error.message for error in validator.iter_errors(_helm_merge(chart, values))] == []
    assert list(validator.iter_errors(_helm_merge(chart, {"speaker": {"frr": {"enabled": "no"}}})))
    # The speaker's FRR sidecar (on by default in 0.15) and every optional subchart (frr-k8s, on by default from
    # 0.16) are off in our values, not by a default a chart bump can flip.
    assert chart["speaker"]["frr"]["enabled"] is True and values["speaker"]["frr"]["enabled"] is False
    subcharts = yaml.safe_load((vendor_dir / "metallb" / "Chart.yaml").read_text())["dependencies"]
    conditions = [dependency["condition"] for dependency in subcharts if dependency["name"] != "crds"]
    assert conditions == ["frrk8s.enabled"]
    for condition in conditions:
        group, key = condition.split(".")
        assert values[group][key] is False, condition


def test_helm_nulls_travel_in_a_yaml_file():
    values = {"a": None, "b": {"c": None, "d": 1}, "e": {"f": 2}, "g": "x"}
    assert without_nulls(values) == {"b": {"d": 1}, "e": {"f": 2}, "g": "x"}
    assert null_overrides(values) == {"a": None, "b": {"c": None}}
    args = helm_values_args(values)
    assert args["values"] == without_nulls(values)
    (asset,) = args["value_yaml_files"]
    assert yaml.safe_load(asset.text) == {"a": None, "b": {"c": None}}
    assert helm_values_args({"a": {"b": 1}}) == {"values": {"a": {"b": 1}}}


# --------------------------------------------------------------------------- #
# The local chart: where `make charts` puts it, and which Kamaji it is
# --------------------------------------------------------------------------- #


def test_the_release_installs_the_directory_make_charts_fills_with_the_subchart_inside():
    assert (PROJECT_ROOT / KAMAJI_CHART.path).resolve() == (upstream.chart_root() / "kamaji").resolve()
    assert (CHARTS["kamaji"]["repo"], CHARTS["kamaji"]["path"]) == ("clastix/kamaji", "charts/kamaji")
    # Helm takes subcharts from charts/ of the chart directory; tenants' dedicated data stores install the same one.
    assert ETCD_CHART.directory == "kamaji/charts/kamaji-etcd"
    assert (PROJECT_ROOT / ETCD_CHART.path).resolve() == (upstream.chart_root() / "kamaji/charts/kamaji-etcd").resolve()
    assert (CHARTS[ETCD_CHART.directory]["repo"], CHARTS[ETCD_CHART.directory]["path"]) == (
        "clastix/kamaji-etcd", "charts/kamaji-etcd")


def test_the_chart_is_fetched_at_the_commit_of_the_pinned_kamaji_image(vendor_dir):
    readme = (vendor_dir / "kamaji" / "README.txt").read_text()
    commit = re.search(r"^Commit\s*:\s*([0-9a-f]{40})", readme, re.M).group(1)
    tag = re.search(r"\(tag (\S+),", readme).group(1)
    assert Versions().kamaji_image == tag
    assert (CHARTS["kamaji"]["commit"], CHARTS["kamaji"]["tag"]) == (commit, tag)


# --------------------------------------------------------------------------- #
# The DataStore the program owns, and the NetworkPolicy in front of its etcd
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def datastore_crd(vendor_dir) -> Path:
    return vendor_dir / "kamaji" / "kamaji.clastix.io_datastores.yaml"


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, "only matchLabels selectors are evaluated here"
    return all(labels.get(key) == value for key, value in selector["matchLabels"].items())


@pytest.fixture(scope="module")
def etcd_values(kamaji_chart) -> dict[str, Any]:
    """The shared kamaji-etcd's values that Kamaji's chart and ours set (the subchart's defaults lie below them)."""
    return _helm_merge(kamaji_chart, kamaji_values(Versions()))["kamaji-etcd"]


def _etcd_pod_labels(etcd_values: dict[str, Any], vendor_dir: Path) -> dict[str, str]:
    """Labels of the shared etcd's pods: kamaji-etcd's `etcd.selectorLabels` for the subchart of release kamaji."""
    dependency = yaml.safe_load((vendor_dir / "kamaji" / "Chart.yaml").read_text())["dependencies"][0]
    name = etcd_values.get("nameOverride") or dependency["name"]
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": KAMAJI_RELEASE_NAME}


def test_the_datastore_is_what_kamaji_etcd_would_render_and_valid_for_the_crd(run, etcd_values, datastore_crd):
    (datastore,) = run.of_type(DATASTORE)
    manifest = {key: datastore.inputs[key] for key in ("apiVersion", "kind", "metadata", "spec")}
    assert schema_errors(manifest, crd_json_schema(datastore_crd)) == []
    crd = yaml.safe_load(datastore_crd.read_text())
    assert crd["spec"]["scope"] == "Cluster" and "namespace" not in manifest["metadata"]
    assert manifest["metadata"]["name"] == DEFAULT_DATASTORE == run.outputs["datastore_name"].value
    etcd = etcd_values
    fullname, domain, replicas = etcd["fullnameOverride"], etcd["clusterDomain"], etcd["replicas"]
    spec = manifest["spec"]
    assert spec["driver"] == "etcd"
    # templates/_helpers.tpl etcd.endpointsYAML: one headless-service name per StatefulSet pod.
    hosts = [endpoint.rsplit(":", 1)[0] for endpoint in spec["endpoints"]]
    assert hosts == [f"{fullname}-{i}.{fullname}.{KAMAJI_NAMESPACE}.svc.{domain}" for i in range(replicas)]
    # One client port for every member: the one the etcd NetworkPolicy opens to tenants, kamaji-etcd's clientPort
    # (both in the tests below).
    assert len({_endpoint_port(endpoint) for endpoint in spec["endpoints"]}) == 1
    # Kamaji's values put kamaji-etcd in cert-manager mode: these are the secrets cert-manager writes.
    assert etcd["certManager"]["enabled"] is True and etcd["selfSignedCertificates"]["enabled"] is False
    tls = spec["tlsConfig"]
    for part, secret in (("certificateAuthority", f"{fullname}-ca"), ("clientCertificate", f"{fullname}-client-certs")):
        assert tls[part] == {
            "certificate": {"secretReference": {"name": secret, "namespace": KAMAJI_NAMESPACE, "keyPath": "tls.crt"}},
            "privateKey": {"secretReference": {"name": secret, "namespace": KAMAJI_NAMESPACE, "keyPath": "tls.key"}},
        }


def test_etcd_policy_selects_the_shared_etcd_pods_only(etcd_values, vendor_dir):
    policy = etcd_network_policy()
    assert policy["metadata"]["namespace"] == KAMAJI_NAMESPACE
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert _matches(spec["podSelector"], _etcd_pod_labels(etcd_values, vendor_dir))
    # Not the Kamaji controller (release kamaji, chart kamaji) in the same namespace.
    assert not _matches(spec["podSelector"], {"app.kubernetes.io/name": "kamaji",
                                              "app.kubernetes.io/instance": KAMAJI_RELEASE_NAME})


def _reach(policy: dict[str, Any], namespace_labels: dict[str, str], port: int) -> bool:
    """Whether a pod in a namespace with these labels may connect to `port` of the selected pods."""
    for rule in policy["spec"]["ingress"]:
        ports = rule.get("ports")
        if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in ports):
            continue
        for peer in rule["from"]:
            assert set(peer) == {"namespaceSelector"}, peer
            if _matches(peer["namespaceSelector"], namespace_labels):
                return True
    return False


def _endpoint_port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _management_namespaces(dev) -> dict[str, dict[str, str]]:
    """Every namespace on the management cluster of the dev lab, with the labels the API server gives it."""
    namespaces = {name: {} for name in ("default", "kube-system", "kube-public", "kube-node-lease",
                                         "local-path-storage", KAMAJI_NAMESPACE, "cert-manager")}
    # The management cluster's namespaces only: the program also creates namespaces inside the tenants.
    (management,) = {tcp.provider for tcp in dev.of_type(TCP)}
    for resource in dev.of_type(NAMESPACE):
        if resource.provider != management:
            continue
        metadata = resource.inputs["metadata"]
        namespaces[metadata["name"]] = dict(metadata.get("labels") or {})
    for name, labels in namespaces.items():
        labels[NAMESPACE_NAME_LABEL] = name
    return namespaces


def _etcd_policy_and_port(dev) -> tuple[dict[str, Any], int]:
    """The etcd NetworkPolicy of the dev lab, and the port the shared DataStore tells API servers to dial."""
    (policy,) = [r for r in dev.of_type(NETWORK_POLICY) if r.inputs["metadata"]["namespace"] == KAMAJI_NAMESPACE]
    (datastore,) = [d for d in dev.of_type(DATASTORE) if d.inputs["metadata"]["name"] == DEFAULT_DATASTORE]
    return {"spec": policy.inputs["spec"]}, _endpoint_port(datastore.inputs["spec"]["endpoints"][0])


def test_only_kamaji_and_the_tenant_control_planes_reach_etcd(dev):
    """Only kamaji-system (Kamaji, etcd peers, the chart's setup jobs) and the tenants' control-plane namespaces reach
    the port the DataStore names; every other port of the etcd pods only from inside kamaji-system."""
    policy, port = _etcd_policy_and_port(dev)
    namespaces = _management_namespaces(dev)
    tenants = {tcp.inputs["metadata"]["namespace"] for tcp in dev.of_type(TCP)}
    assert tenants and tenants < set(namespaces)
    reaching = {p: {n for n, labels in namespaces.items() if _reach(policy, labels, p)}
                for p in {port, port + 1} | {entry["port"] for rule in policy["spec"]["ingress"]
                                             for entry in rule.get("ports") or []}}
    assert reaching.pop(port) == {KAMAJI_NAMESPACE, *tenants}
    assert reaching and all(found == {KAMAJI_NAMESPACE} for found in reaching.values()), reaching


def test_the_datastore_and_the_etcd_policy_use_kamaji_etcds_ports(dev, etcd_chart):
    policy, port = _etcd_policy_and_port(dev)
    assert port == etcd_chart["clientPort"]
    namespaces = _management_namespaces(dev)
    # Members of a three-replica etcd talk to each other on the peer port (a one-member etcd does not need it).
    assert {n for n, labels in namespaces.items() if _reach(policy, labels, etcd_chart["peerApiPort"])} == {
        KAMAJI_NAMESPACE}


# --------------------------------------------------------------------------- #
# What the component registers (kind mode), under plain mocks: the kind network is the one they answer
# --------------------------------------------------------------------------- #

# Not the defaults, so the tests show the versions come from the arguments (the Kamaji image); a chart's version
# is the one of the chart `make charts` fetched, whatever the component is given (require_charts compares the two).
VERSIONS = Versions(certManager="v1.21.9", metallb="0.15.9", kamajiImage="26.9.1-edge")


def _kind_program(pool: str | None = None):
    def program():
        cluster = ManagementCluster(
            "management", ManagementClusterArgs(cluster_name="gpu-tenancy", node_image=NODE_IMAGE))
        kamaji = Kamaji("kamaji", KamajiArgs(
            provider=cluster.provider, kubeconfig=cluster.kubeconfig, kind_subnet=cluster.kind_subnet,
            versions=VERSIONS, load_balancer_pool=pool, deleted_with=cluster.cluster))
        # Stands in for a TenantControlPlane: waits for `ready` and consumes the outputs.
        k8s.core.v1.ConfigMap(
            "tenant-consumer",
            metadata={"name": "tenant-consumer", "namespace": "default"},
            data={"datastore": kamaji.datastore_name, "pool": kamaji.lb_pool_range},
            opts=pulumi.ResourceOptions(provider=kamaji.provider, depends_on=kamaji.ready),
        )
        pulumi.export("datastore_name", kamaji.datastore_name)
        pulumi.export("lb_pool_range", kamaji.lb_pool_range)
        pulumi.export("release_name", kamaji.release.name)

    return program


@pytest.fixture(scope="module")
def run():
    return registered({}, program=_kind_program())


@pytest.fixture(scope="module")
def dev():
    """The whole program on the dev lab."""
    return registered(reference_stack())


def _releases(run) -> dict[str, Any]:
    return {r.inputs["name"]: r for r in run.of_type(RELEASE)}


def test_every_child_is_on_the_management_cluster_and_goes_with_it(run):
    component = run.named("kamaji", f"{COMPONENT_PREFIX}:Kamaji")
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    cluster = run.named("management-kind", "command:local:Command")
    children = run.children(component)
    assert {c.type for c in children} >= {RELEASE, DATASTORE, NETWORK_POLICY, WEBHOOK_READY, NAMESPACE}
    for child in children:
        assert child.custom
        # Tear-down deletes the cluster, not each object in it (and works when it was deleted by hand).
        assert child.deleted_with == cluster.urn, child
        if child.type not in (WEBHOOK_READY, METALLB_WEBHOOK_READY):  # dynamic: it talks with the kubeconfig
            assert child.provider.rsplit("::", 1)[0] == provider.urn, child


def test_cert_manager_release(run):
    inputs = _releases(run)["cert-manager"].inputs
    # The local chart `make charts` fetched, and no version: the provider's Check sets its Chart.yaml's (plain mocks
    # run no Check; require_charts compares that version with the config).
    assert inputs["chart"] == "./.cache/charts/cert-manager" and "repositoryOpts" not in inputs
    assert "version" not in inputs
    assert inputs["namespace"] == "cert-manager" and inputs["createNamespace"] is True
    assert inputs["values"] == cert_manager_values()
    assert inputs["skipAwait"] is False


def test_kamaji_release_installs_the_local_chart_with_helm_nulls(run):
    release = _releases(run)[KAMAJI_RELEASE_NAME]
    inputs = release.inputs
    # The CRDs hard-code kamaji-system/kamaji-webhook-service and kamaji-serving-cert.
    assert (inputs["name"], inputs["namespace"]) == ("kamaji", "kamaji-system") and inputs["createNamespace"] is True
    # A local directory: no repository, and no version (the provider's Check sets its Chart.yaml's, 0.0.0+latest).
    assert inputs["chart"] == KAMAJI_CHART.path == "./.cache/charts/kamaji"
    assert "repositoryOpts" not in inputs and "version" not in inputs
    assert inputs["values"] == without_nulls(kamaji_values(VERSIONS))
    assert inputs["values"]["image"]["tag"] == VERSIONS.kamaji_image
    (asset,) = release.raw_inputs["valueYamlFiles"]
    assert yaml.safe_load(asset.text) == {"resources": None}
    assert inputs["skipAwait"] is False and inputs["timeout"] >= 600
    assert run.outputs["release_name"].value == "kamaji"


def test_metallb_release_in_its_privileged_namespace(run):
    namespace = run.named("kamaji-metallb-namespace", NAMESPACE)
    assert namespace.inputs["metadata"] == {"name": "metallb-system", "labels": {
        f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")}}
    release = _releases(run)["metallb"]
    inputs = release.inputs
    assert inputs["chart"] == "./.cache/charts/metallb" and "repositoryOpts" not in inputs
    assert "version" not in inputs  # the provider's Check sets the fetched chart's
    assert inputs["namespace"] == "metallb-system" and not inputs.get("createNamespace")
    assert inputs["values"] == metallb_values() and inputs["skipAwait"] is False
    assert namespace.urn in release.dependencies
    # The only namespace this stack owns on kind: Helm creates cert-manager and kamaji-system.
    assert {r.inputs["metadata"]["name"] for r in run.of_type(NAMESPACE)} == {"metallb-system"}


def test_kamaji_waits_for_cert_manager_and_nothing_waits_for_metallb_needlessly(run):
    releases = _releases(run)
    kamaji, cert_manager, metallb = releases["kamaji"], releases["cert-manager"], releases["metallb"]
    # The chart renders cert-manager Issuer/Certificate objects.
    assert cert_manager.urn in kamaji.dependencies
    assert not run.depends_on(kamaji, metallb) and not run.depends_on(metallb, cert_manager)


def test_the_pool_is_carved_from_the_kind_subnet_after_metallb(run):
    metallb = _releases(run)["metallb"]
    pool = run.named("kamaji-ip-pool", "kubernetes:metallb.io/v1beta1:IPAddressPool")
    l2 = run.named("kamaji-l2-advertisement", "kubernetes:metallb.io/v1beta1:L2Advertisement")
    for resource in (pool, l2):
        assert resource.inputs["metadata"] == {"name": LB_POOL_NAME, "namespace": "metallb-system"}
        # MetalLB's webhook must answer first: an explicit edge, not only one through the provider.
        assert metallb.urn in resource.dependencies
    assert l2.inputs["spec"] == {"ipAddressPools": [LB_POOL_NAME]}
    assert pool.inputs["spec"] == {"addresses": [lb_pool_range(MOCKED_KIND_SUBNET)]}
    assert run.outputs["lb_pool_range"].value == lb_pool_range(MOCKED_KIND_SUBNET)


def test_the_datastore_and_the_etcd_policy_come_after_the_release(run):
    release = _releases(run)["kamaji"]
    for resource in (*run.of_type(DATASTORE), *run.of_type(NETWORK_POLICY)):
        assert release.urn in resource.dependencies, resource
    (policy,) = run.of_type(NETWORK_POLICY)
    assert {k: policy.inputs[k] for k in ("metadata", "spec")} == etcd_network_policy()


def test_the_webhook_gate_probes_after_the_datastore_exists_with_a_secret_kubeconfig(run):
    gate = run.named("kamaji-webhook-ready", WEBHOOK_READY)
    datastore = run.named("kamaji-datastore", DATASTORE)
    release = _releases(run)["kamaji"]
    # Kamaji's webhook rejects a TenantControlPlane whose DataStore does not exist: the probe would fail otherwise.
    assert datastore.urn in gate.dependencies and release.urn in gate.dependencies
    assert gate.inputs["datastore"] == DEFAULT_DATASTORE and gate.inputs["namespace"] == KAMAJI_NAMESPACE
    assert gate.is_secret("kubeconfig") and "kubeconfig" in gate.additional_secret_outputs


def test_whatever_waits_for_ready_waits_for_the_gate_the_datastore_and_the_pool(run):
    consumer = run.named("tenant-consumer", "kubernetes:core/v1:ConfigMap")
    for name in ("kamaji-webhook-ready", "kamaji-datastore", "kamaji-ip-pool", "kamaji-l2-advertisement"):
        assert run.named(name).urn in consumer.dependencies, name
    # The outputs carry their resources too.
    assert consumer.inputs["data"] == {"datastore": DEFAULT_DATASTORE, "pool": lb_pool_range(MOCKED_KIND_SUBNET)}
    assert {run.named("kamaji-datastore").urn, run.named("kamaji-ip-pool").urn} <= set(
        consumer.property_dependencies["data"])


def test_every_tenant_control_plane_of_the_program_waits_for_kamajis_webhook(dev):
    gate = dev.named("kamaji-webhook-ready", WEBHOOK_READY)
    tcps = dev.of_type(TCP)
    assert len(tcps) == len(reference_stack()["tenants"])
    for tcp in tcps:
        assert dev.depends_on(tcp, gate), tcp


def test_an_explicit_pool_inside_the_kind_subnet_is_used_as_given():
    run = registered({}, program=_kind_program("172.18.100.10-172.18.100.20"))
    pool = run.named("kamaji-ip-pool", "kubernetes:metallb.io/v1beta1:IPAddressPool")
    assert pool.inputs["spec"] == {"addresses": ["172.18.100.10-172.18.100.20"]}
    assert run.outputs["lb_pool_range"].value == "172.18.100.10-172.18.100.20"


def test_an_explicit_pool_outside_the_kind_subnet_fails_the_up():
    with pytest.raises(AssertionError, match=r"management\.loadBalancerPool = '10\.20\.0\.200-10\.20\.0\.250' is not"):
        registered({}, program=_kind_program("10.20.0.200-10.20.0.250"))


def test_on_an_adopted_cluster_nothing_is_deleted_with_a_cluster():
    kubeconfig = kubeconfig_yaml("https://10.0.0.10:6443", "prod-mgmt")

    def program():
        cluster = ManagementCluster("management", ManagementClusterArgs(
            cluster_name="gpu-tenancy", node_image=NODE_IMAGE, kubeconfig=kubeconfig, worker_cidrs=["10.20.0.0/16"]))
        Kamaji("kamaji", KamajiArgs(provider=cluster.provider, kubeconfig=cluster.kubeconfig, kind_subnet=None,
                                    versions=VERSIONS, deleted_with=cluster.cluster))

    run = registered({}, program=program)
    children = run.descendants(run.named("kamaji", f"{COMPONENT_PREFIX}:Kamaji"))
    assert children and all(child.deleted_with == "" for child in children)
