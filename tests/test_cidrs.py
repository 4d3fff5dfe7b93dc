"""Automatic service/pod range allocation."""

import ipaddress
import itertools

import pytest

from config import load_stack_config
from config.cidrs import POD_POOL, SERVICE_POOL, PoolExhaustedError, allocate_ranges, dns_service_ip


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


def test_fifty_tenants_get_non_overlapping_ranges():
    config = load_stack_config(tenants(50))
    networks = all_networks(config)
    assert len(networks) == 100
    for a, b in itertools.combinations(networks, 2):
        assert not a.overlaps(b), (a, b)
    for tenant in config.tenants:
        assert ipaddress.IPv4Network(tenant.service_cidr).subnet_of(SERVICE_POOL)
        assert ipaddress.IPv4Network(tenant.pod_cidr).subnet_of(POD_POOL)


def test_allocation_is_deterministic():
    first = [(t.service_cidr, t.pod_cidr) for t in load_stack_config(tenants(50)).tenants]
    second = [(t.service_cidr, t.pod_cidr) for t in load_stack_config(tenants(50)).tenants]
    assert first == second
    assert first[0] == ("10.96.0.0/20", "10.128.0.0/16")
    assert first[1] == ("10.96.16.0/20", "10.129.0.0/16")


def test_appending_a_tenant_keeps_existing_ranges():
    before = [(t.service_cidr, t.pod_cidr) for t in load_stack_config(tenants(5)).tenants]
    after = [(t.service_cidr, t.pod_cidr) for t in load_stack_config(tenants(6)).tenants]
    assert after[:5] == before


def test_automatic_ranges_skip_explicit_ones_of_any_tenant():
    raw = tenants(3)
    # The last tenant pins exactly the blocks the first would otherwise get.
    raw["tenants"][2]["serviceCidr"] = "10.96.0.0/20"
    raw["tenants"][2]["podCidr"] = "10.128.0.0/16"
    config = load_stack_config(raw)
    assert config.tenants[2].service_cidr == "10.96.0.0/20"
    assert config.tenants[0].service_cidr == "10.96.16.0/20"
    assert config.tenants[0].pod_cidr == "10.129.0.0/16"
    networks = all_networks(config)
    for a, b in itertools.combinations(networks, 2):
        assert not a.overlaps(b)


def test_mixed_explicit_and_automatic_with_the_dev_ranges():
    raw = tenants(2)
    raw["tenants"][0].update(serviceCidr="10.96.0.0/16", podCidr="10.244.0.0/16")
    config = load_stack_config(raw)
    assert config.tenants[1].service_cidr == "10.97.0.0/20"
    assert config.tenants[1].pod_cidr == "10.128.0.0/16"


def test_pool_exhaustion_names_the_tenant_and_the_fix():
    requested = [(None, None)] * (2 ** (16 - 9) + 1)
    with pytest.raises(PoolExhaustedError, match=r"tenants\[128\]\.podCidr: no free /16 .* set podCidr explicitly"):
        allocate_ranges(requested)


def test_dns_service_ip_is_the_tenth_address():
    assert dns_service_ip("10.96.0.0/16") == "10.96.0.10"
    assert dns_service_ip("10.96.16.0/20") == "10.96.16.10"
