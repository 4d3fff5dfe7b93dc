"""Automatic service/pod range allocation."""

import ipaddress
import itertools

import pytest

from config import ConfigError, load_stack_config
from config.cidrs import POD_POOL, SERVICE_POOL, allocate_ranges, automatic_block, dns_service_ip


def tenants(count, **extra):
    return {
        "tenants": [
            {
                "name": f"team-{i}",
                "workers": [{"name": "w0", "gpus": [{"uuid": f"GPU-{i}", "model": "A100", "memoryMiB": 8192}]}],
                **extra,
            }
            for i in range(count)
        ]
    }


def all_networks(config):
    return [
        ipaddress.IPv4Network(cidr)
        for tenant in config.tenants
        for cidr in (tenant.service_cidr, tenant.pod_cidr)
    ]


def ranges(raw):
    return {t.name: (t.service_cidr, t.pod_cidr) for t in load_stack_config(raw).tenants}


def test_eight_automatic_tenants_get_non_overlapping_ranges_inside_the_pools_and_outside_kinds():
    config = load_stack_config(tenants(8))
    networks = all_networks(config)
    for a, b in itertools.combinations(networks, 2):
        assert not a.overlaps(b), (a, b)
    for tenant in config.tenants:
        service, pod = ipaddress.IPv4Network(tenant.service_cidr), ipaddress.IPv4Network(tenant.pod_cidr)
        assert service.subnet_of(SERVICE_POOL) and pod.subnet_of(POD_POOL)
        # kind's own serviceSubnet and podSubnet (v1alpha4 defaults) on the management cluster.
        assert not service.overlaps(ipaddress.IPv4Network("10.96.0.0/16"))
        assert not pod.overlaps(ipaddress.IPv4Network("10.244.0.0/16"))


def test_a_tenants_automatic_ranges_depend_only_on_its_name():
    before = ranges(tenants(6))
    removed = tenants(6)
    del removed["tenants"][0]
    reordered = tenants(6)
    reordered["tenants"].reverse()
    appended = tenants(7)
    for other in (ranges(removed), ranges(reordered), ranges(appended)):
        assert all(other[name] == before[name] for name in other if name in before)
    assert ranges(tenants(6)) == before


def test_pinning_a_tenants_current_ranges_changes_nothing():
    automatic = ranges(tenants(3))
    pinned = tenants(3)
    pinned["tenants"][1].update(serviceCidr=automatic["team-1"][0], podCidr=automatic["team-1"][1])
    assert ranges(pinned) == automatic


def _colliding_names(key):
    seen = {}
    for index in itertools.count():
        name = f"t{index}"
        block = automatic_block(name, key)
        if block in seen:
            return seen[block], name
        seen[block] = name


def test_two_names_that_pick_the_same_block_are_reported_with_both_ways_out():
    first, second = _colliding_names("podCidr")
    raw = tenants(2)
    raw["tenants"][0]["name"], raw["tenants"][1]["name"] = first, second
    with pytest.raises(ConfigError) as refused:
        load_stack_config(raw)
    (issue,) = refused.value.issues
    assert issue.path == "tenants[1].podCidr"
    block = automatic_block(first, "podCidr")
    assert f"podCidr: {block}" in str(issue) and f"'{first}'" in str(issue)
    free = str(issue).rsplit("podCidr: ", 1)[1]
    raw["tenants"][1]["podCidr"] = free
    config = load_stack_config(raw)
    assert config.tenants[0].pod_cidr == block and config.tenants[1].pod_cidr == free


def test_an_explicit_range_over_another_tenants_automatic_one_is_reported_on_the_automatic_side():
    raw = tenants(2)
    raw["tenants"][1]["podCidr"] = automatic_block("team-0", "podCidr")
    with pytest.raises(ConfigError) as refused:
        load_stack_config(raw)
    assert [issue.path for issue in refused.value.issues] == ["tenants[0].podCidr"]
    assert "if this tenant already runs" in str(refused.value)


def test_allocate_ranges_keeps_explicit_ranges():
    result, conflicts = allocate_ranges([("a", "10.1.0.0/16", "10.2.0.0/16"), ("b", None, None)])
    assert result[0].service_cidr == "10.1.0.0/16" and result[0].pod_cidr == "10.2.0.0/16"
    assert result[1].service_cidr == automatic_block("b", "serviceCidr") and not conflicts


def test_dns_service_ip_is_the_tenth_address():
    assert dns_service_ip("10.96.0.0/16") == "10.96.0.10"
    assert dns_service_ip("10.96.16.0/20") == "10.96.16.10"


# Fixed expectations for known names. A tenant without pinned ranges keeps these for life: a change to the pools,
# the block sizes, the exclusions or the hash would move every automatic range, and a moved range replaces that
# tenant's control plane (components/tenant/spec.py CIDR_REPLACE_ON_CHANGES). Change this table only together with
# a migration note telling running stacks to pin their current ranges first.
KNOWN_ALLOCATIONS = {
    # name: (serviceCidr, podCidr)
    "tenant-a": ("10.120.144.0/20", "10.170.0.0/18"),
    "tenant-b": ("10.111.48.0/20", "10.215.128.0/18"),
    "team-0": ("10.126.96.0/20", "10.226.64.0/18"),
    "team-vision": ("10.110.128.0/20", "10.247.0.0/18"),
    "lab": ("10.115.32.0/20", "10.198.128.0/18"),
}


@pytest.mark.parametrize("name", sorted(KNOWN_ALLOCATIONS))
def test_a_known_name_gets_the_same_automatic_ranges_as_ever(name):
    assert (automatic_block(name, "serviceCidr"), automatic_block(name, "podCidr")) == KNOWN_ALLOCATIONS[name]


def test_the_validated_config_carries_the_known_allocations():
    raw = tenants(len(KNOWN_ALLOCATIONS))
    for tenant, name in zip(raw["tenants"], KNOWN_ALLOCATIONS, strict=True):
        tenant["name"] = name
    assert ranges(raw) == KNOWN_ALLOCATIONS
