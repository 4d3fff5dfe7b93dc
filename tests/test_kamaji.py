"""Kamaji layer: MetalLB pool carving, chart values against vendored data, and the registered dependency graph."""

import copy
import ipaddress

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from components.helm import helm_values_args, null_overrides, without_nulls
from components.kamaji import (
    DEFAULT_DATASTORE,
    LB_POOL_NAME,
    Kamaji,
    KamajiArgs,
    cert_manager_values,
    choose_lb_pool,
    kamaji_values,
    lb_pool_range,
    metallb_values,
    pool_bounds,
)
from components.kind_cluster import KindManagementCluster, KindManagementClusterArgs
from components.naming import COMPONENT_PREFIX
from config import Versions
from tests.chart_values import load_chart_values, unknown_value_keys
from tests.fixtures import KIND_GATEWAY_V4, KIND_SUBNET_V4
from tools.mockrun import run_program

# Keys of the kamaji-etcd subchart that the vendored kamaji values.yaml does not show, with
# their upstream defaults, from clastix/kamaji-etcd charts/kamaji-etcd/values.yaml at v0.15.0
# (the subchart version clastix/kamaji charts/kamaji/Chart.lock pins at 26.8.2-edge).
KAMAJI_ETCD_UPSTREAM_KEYS = {
    "replicas": 3,
    "quotaBackendBytes": "8589934592",
    "persistentVolumeClaim": {
        "size": "8Gi",
        "storageClassName": "",
        "accessModes": ["ReadWriteOnce"],
        "customAnnotations": {},
        "retentionPolicyWhenDeleted": "Retain",
    },
}

MGMT_PROVIDER = "management-provider"


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
    reserved = {network.network_address, network.broadcast_address, network.network_address + 1}
    assert not reserved & {first, last} and not (first <= network.network_address + 1 <= last)
    # Docker hands container addresses out from the bottom: leave the first 199 free.
    assert int(first) - int(network.network_address) >= 199
    assert int(last) - int(first) + 1 == 51


@pytest.mark.parametrize(
    ("subnet", "message"),
    [
        ("10.89.0.0/25", "smaller than a /24"),
        ("10.89.0.0/30", "smaller than a /24"),
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


def test_an_explicit_pool_on_an_adopted_cluster_is_taken_as_given():
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
def test_an_explicit_pool_outside_the_kind_subnet_is_rejected(pool):
    with pytest.raises(ValueError, match=r"management\.loadBalancerPool = .* is not inside the kind network") as raised:
        choose_lb_pool(KIND_SUBNET_V4, pool)
    # The message offers the default that would work.
    assert "172.18.255.200-172.18.255.250" in str(raised.value)


@pytest.mark.parametrize(
    ("pool", "address"),
    [
        ("172.18.0.0-172.18.0.10", "172.18.0.0"),
        ("172.18.0.1-172.18.0.10", "172.18.0.1"),
        ("172.18.255.200-172.18.255.255", "172.18.255.255"),
        ("172.18.0.0/24", "172.18.0.0"),
    ],
)
def test_an_explicit_pool_must_not_take_the_network_gateway_or_broadcast_address(pool, address):
    with pytest.raises(ValueError, match=rf"management\.loadBalancerPool = .* includes {address}"):
        choose_lb_pool(KIND_SUBNET_V4, pool)


# --------------------------------------------------------------------------- #
# Chart values
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def vendored_kamaji_values(vendor_dir):
    return load_chart_values(vendor_dir / "kamaji" / "values.yaml")


def _with_upstream_subchart_keys(chart: dict) -> dict:
    merged = copy.deepcopy(chart)
    merged["kamaji-etcd"] = {**merged["kamaji-etcd"], **KAMAJI_ETCD_UPSTREAM_KEYS}
    return merged


def test_every_kamaji_value_key_exists_in_the_chart(vendored_kamaji_values):
    values = kamaji_values(Versions())
    assert unknown_value_keys(values, _with_upstream_subchart_keys(vendored_kamaji_values)) == []


def test_only_allowlisted_subchart_keys_go_beyond_the_vendored_values(vendored_kamaji_values):
    unknown = unknown_value_keys(kamaji_values(Versions()), vendored_kamaji_values)
    assert sorted(unknown) == sorted(f"kamaji-etcd.{key}" for key in KAMAJI_ETCD_UPSTREAM_KEYS)


@pytest.mark.parametrize(
    "typo",
    [
        {"telemetry": {"disable": True}},
        {"image": {"tags": "x"}},
        {"kamaji-etcd": {"replica": 1}},
        {"kamaji-etcd": {"persistentVolumeClaim": {"sizes": "1Gi"}}},
    ],
)
def test_value_key_check_catches_typos(vendored_kamaji_values, typo):
    assert unknown_value_keys(typo, _with_upstream_subchart_keys(vendored_kamaji_values))


def test_kamaji_values_pin_image_and_size_etcd_for_a_laptop():
    versions = Versions(kamajiImage="26.9.1-edge")
    values = kamaji_values(versions)
    assert values["image"]["tag"] == "26.9.1-edge"
    assert "resources" in values and values["resources"] is None
    assert values["telemetry"] == {"disabled": True}
    assert values["defaultDatastoreName"] == DEFAULT_DATASTORE == "default"
    etcd = values["kamaji-etcd"]
    assert etcd["replicas"] == 1
    assert etcd["datastore"] == {"enabled": True, "name": DEFAULT_DATASTORE}
    # The space alarm fires before the volume is full.
    assert int(etcd["quotaBackendBytes"]) < 2 * 1024**3
    assert etcd["persistentVolumeClaim"]["size"] == "2Gi"


def test_metallb_is_plain_l2_and_cert_manager_installs_its_crds():
    assert metallb_values() == {"speaker": {"frr": {"enabled": False}}}
    assert cert_manager_values()["crds"] == {"enabled": True}
    assert cert_manager_values()["startupapicheck"] == {"enabled": True}


def test_cert_manager_leader_election_moves_into_its_namespace_only_on_an_adopted_cluster():
    # On kind the chart default (kube-system) stays: existing stacks see no change.
    assert "global" not in cert_manager_values()
    adopted = cert_manager_values(adopted=True)
    assert adopted["global"] == {"leaderElection": {"namespace": "cert-manager"}}
    assert {k: v for k, v in adopted.items() if k != "global"} == cert_manager_values()


def test_nulls_are_split_out_for_helm():
    values = {"a": None, "b": {"c": None, "d": 1}, "e": {"f": 2}, "g": "x"}
    assert without_nulls(values) == {"b": {"d": 1}, "e": {"f": 2}, "g": "x"}
    assert null_overrides(values) == {"a": None, "b": {"c": None}}
    args = helm_values_args(values)
    assert args["values"] == without_nulls(values)
    (asset,) = args["value_yaml_files"]
    assert yaml.safe_load(asset.text) == {"a": None, "b": {"c": None}}


def test_values_without_nulls_need_no_yaml_file():
    assert helm_values_args({"a": {"b": 1}}) == {"values": {"a": {"b": 1}}}


# --------------------------------------------------------------------------- #
# The component under mocks
# --------------------------------------------------------------------------- #

VERSIONS = Versions(certManager="v1.21.1", metallb="0.15.3", kamajiChart="0.0.0+latest", kamajiImage="26.8.2-edge")


def _program():
    cluster = KindManagementCluster(
        "management", KindManagementClusterArgs(cluster_name="gpu-tenancy", node_image="kindest/node:v1.35.0")
    )
    kamaji = Kamaji("kamaji", KamajiArgs(provider=cluster.provider, kind_subnet=cluster.kind_subnet, versions=VERSIONS))
    # Stands in for a TenantControlPlane: waits for `ready` and consumes the outputs.
    k8s.core.v1.ConfigMap(
        "tenant-consumer",
        data={"datastore": kamaji.datastore_name, "pool": kamaji.lb_pool_range},
        opts=pulumi.ResourceOptions(provider=kamaji.provider, depends_on=kamaji.ready),
    )
    pulumi.export("datastore_name", kamaji.datastore_name)
    pulumi.export("lb_pool_range", kamaji.lb_pool_range)
    pulumi.export("release_is_kamaji", kamaji.release.name)


@pytest.fixture(scope="module")
def run():
    return run_program({}, program=_program)


def _releases(run):
    return {r.inputs["chart"]: r for r in run.of_type("kubernetes:helm.sh/v3:Release")}


def test_component_parents_every_child_and_uses_the_management_provider(run):
    component = run.named("kamaji", f"{COMPONENT_PREFIX}:Kamaji")
    provider = run.named(MGMT_PROVIDER, "pulumi:providers:kubernetes")
    children = run.children(component)
    assert len(children) == 6
    for child in children:
        assert child.custom
        assert child.provider.rsplit("::", 1)[0] == provider.urn, child


def test_cert_manager_release(run):
    release = _releases(run)["cert-manager"]
    inputs = release.inputs
    assert inputs["name"] == "cert-manager"
    assert inputs["version"] == "v1.21.1"
    assert inputs["repositoryOpts"] == {"repo": "https://charts.jetstack.io"}
    assert inputs["namespace"] == "cert-manager" and inputs["createNamespace"] is True
    assert inputs["values"]["crds"] == {"enabled": True}
    assert inputs["skipAwait"] is False


def test_metallb_release_in_a_privileged_namespace(run):
    namespace = run.named("kamaji-metallb-namespace", "kubernetes:core/v1:Namespace")
    assert namespace.inputs["metadata"]["name"] == "metallb-system"
    assert namespace.inputs["metadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/audit": "privileged",
        "pod-security.kubernetes.io/warn": "privileged",
    }
    release = _releases(run)["metallb"]
    inputs = release.inputs
    assert inputs["name"] == "metallb"
    assert inputs["version"] == "0.15.3"
    assert inputs["repositoryOpts"] == {"repo": "https://metallb.github.io/metallb"}
    assert inputs["namespace"] == "metallb-system"
    assert not inputs.get("createNamespace")
    assert inputs["values"] == {"speaker": {"frr": {"enabled": False}}}
    assert inputs["skipAwait"] is False
    assert run.depends_on(release, namespace)


def test_pool_and_l2_advertisement_wait_for_the_metallb_release(run):
    metallb = _releases(run)["metallb"]
    pool = run.named("kamaji-ip-pool")
    l2 = run.named("kamaji-l2-advertisement")
    assert pool.type == "kubernetes:metallb.io/v1beta1:IPAddressPool"
    assert l2.type == "kubernetes:metallb.io/v1beta1:L2Advertisement"
    for resource in (pool, l2):
        assert resource.inputs["apiVersion"] == "metallb.io/v1beta1"
        assert resource.inputs["metadata"]["namespace"] == "metallb-system"
        # An explicit edge, not only a transitive one through the provider.
        assert metallb.urn in resource.dependencies
        assert run.depends_on(resource, metallb)
    assert l2.inputs["spec"] == {"ipAddressPools": [pool.inputs["metadata"]["name"]]}
    assert pool.inputs["metadata"]["name"] == LB_POOL_NAME


def test_pool_range_lies_in_the_mocked_kind_subnet_away_from_the_gateway(run):
    pool = run.named("kamaji-ip-pool")
    (addresses,) = pool.inputs["spec"]["addresses"]
    assert addresses == "172.18.255.200-172.18.255.250"
    network = ipaddress.ip_network(KIND_SUBNET_V4)
    first, last = (ipaddress.ip_address(end) for end in addresses.split("-"))
    assert first in network and last in network
    assert not first <= ipaddress.ip_address(KIND_GATEWAY_V4) <= last
    assert run.outputs["lb_pool_range"].value == addresses


def test_kamaji_release(run):
    release = _releases(run)["kamaji"]
    inputs = release.inputs
    assert inputs["name"] == "kamaji"
    assert inputs["namespace"] == "kamaji-system" and inputs["createNamespace"] is True
    assert inputs["version"] == "0.0.0+latest"
    assert inputs["repositoryOpts"] == {"repo": "https://clastix.github.io/charts"}
    assert inputs["values"]["image"]["tag"] == "26.8.2-edge"
    assert inputs["values"]["telemetry"] == {"disabled": True}
    assert inputs["values"]["kamaji-etcd"]["replicas"] == 1
    # Helm's null, which deletes the chart's tight default limits, travels as YAML.
    (asset,) = release.raw_inputs["valueYamlFiles"]
    assert yaml.safe_load(asset.text) == {"resources": None}
    assert inputs["skipAwait"] is False
    assert inputs["timeout"] >= 600
    assert run.outputs["release_is_kamaji"].value == "kamaji"


def test_kamaji_waits_for_cert_manager_but_not_for_metallb(run):
    releases = _releases(run)
    kamaji, cert_manager, metallb = releases["kamaji"], releases["cert-manager"], releases["metallb"]
    assert cert_manager.urn in kamaji.dependencies
    assert run.depends_on(kamaji, cert_manager)
    # Independent branches install in parallel.
    assert not run.depends_on(kamaji, metallb)
    assert not run.depends_on(metallb, cert_manager)


def test_versions_come_from_config():
    versions = Versions(certManager="v1.99.0", metallb="0.99.0", kamajiChart="0.0.1+test", kamajiImage="99.1.1-edge")

    def program():
        cluster = KindManagementCluster("management", KindManagementClusterArgs("gpu-tenancy", "kindest/node:v1.35.0"))
        Kamaji("kamaji", KamajiArgs(provider=cluster.provider, kind_subnet=cluster.kind_subnet, versions=versions))

    releases = _releases(run_program({}, program=program))
    assert releases["cert-manager"].inputs["version"] == "v1.99.0"
    assert releases["metallb"].inputs["version"] == "0.99.0"
    assert releases["kamaji"].inputs["version"] == "0.0.1+test"
    assert releases["kamaji"].inputs["values"]["image"]["tag"] == "99.1.1-edge"


def test_tenant_control_planes_can_wait_for_ready(run):
    consumer = run.named("tenant-consumer", "kubernetes:core/v1:ConfigMap")
    releases = _releases(run)
    for needed in (releases["kamaji"], releases["cert-manager"], releases["metallb"],
                   run.named("kamaji-ip-pool"), run.named("kamaji-l2-advertisement")):
        assert run.depends_on(consumer, needed), needed


def test_kind_mode_lets_helm_create_the_release_namespaces(run):
    releases = _releases(run)
    assert releases["cert-manager"].inputs["createNamespace"] is True
    assert releases["kamaji"].inputs["createNamespace"] is True
    names = {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:core/v1:Namespace")}
    assert names == {"metallb-system"}


def _kind_program_with_pool(pool: str):
    def program():
        cluster = KindManagementCluster("management", KindManagementClusterArgs("gpu-tenancy", "kindest/node:v1.35.0"))
        kamaji = Kamaji(
            "kamaji",
            KamajiArgs(provider=cluster.provider, kind_subnet=cluster.kind_subnet, versions=VERSIONS,
                       load_balancer_pool=pool),
        )
        pulumi.export("lb_pool_range", kamaji.lb_pool_range)

    return program


def test_kind_mode_uses_an_explicit_pool_inside_the_kind_subnet():
    run = run_program({}, program=_kind_program_with_pool("172.18.100.10-172.18.100.20"))
    pool = run.named("kamaji-ip-pool", "kubernetes:metallb.io/v1beta1:IPAddressPool")
    assert pool.inputs["spec"] == {"addresses": ["172.18.100.10-172.18.100.20"]}
    assert pool.inputs["metadata"]["name"] == LB_POOL_NAME
    assert run.outputs["lb_pool_range"].value == "172.18.100.10-172.18.100.20"


def test_kind_mode_rejects_an_explicit_pool_outside_the_kind_subnet():
    with pytest.raises(ValueError, match=r"management\.loadBalancerPool = '10\.20\.0\.200-10\.20\.0\.250' is not inside"):
        run_program({}, program=_kind_program_with_pool("10.20.0.200-10.20.0.250"))


def test_outputs_carry_their_resources_as_dependencies(run):
    consumer = run.named("tenant-consumer", "kubernetes:core/v1:ConfigMap")
    assert consumer.inputs["data"] == {"datastore": "default", "pool": "172.18.255.200-172.18.255.250"}
    data_deps = set(consumer.property_dependencies["data"])
    assert _releases(run)["kamaji"].urn in data_deps
    assert run.named("kamaji-ip-pool").urn in data_deps
    assert run.outputs["datastore_name"].value == "default"
