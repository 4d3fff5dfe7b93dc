"""Automatic, deterministic allocation of tenant service and pod ranges.

Tenants that omit `serviceCidr` / `podCidr` get the first free block of a
fixed pool, in the order the tenants are listed, skipping every range that
any tenant pinned explicitly. The result depends only on the configuration,
so every `pulumi up` computes the same ranges. Appending a tenant never moves
an existing one; inserting one in the middle of the list shifts the automatic
ranges of the tenants after it, so pin ranges of tenants that already exist
before reordering (the plan summary output shows what was allocated).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

IPv4Network = ipaddress.IPv4Network

# Services: /20 blocks (4096 addresses each) out of 10.96.0.0/11 -> 512 tenants.
SERVICE_POOL = ipaddress.IPv4Network("10.96.0.0/11")
SERVICE_BLOCK_PREFIX = 20
# Pods: /16 blocks (256 nodes x /24) out of 10.128.0.0/9 -> 128 tenants.
POD_POOL = ipaddress.IPv4Network("10.128.0.0/9")
POD_BLOCK_PREFIX = 16


class PoolExhaustedError(ValueError):
    """No free block is left in an automatic pool."""


@dataclass(frozen=True)
class TenantRanges:
    service_cidr: str
    pod_cidr: str


def _first_free(
    pool: IPv4Network, prefix: int, taken: list[IPv4Network]
) -> IPv4Network | None:
    for block in pool.subnets(new_prefix=prefix):
        if not any(block.overlaps(used) for used in taken):
            return block
    return None


def _take(pool: IPv4Network, prefix: int, taken: list[IPv4Network], key: str) -> str:
    """The first free block of `pool`, recorded as taken; PoolExhaustedError names `key` otherwise."""
    block = _first_free(pool, prefix, taken)
    if block is None:
        key_name = key.rsplit(".", 1)[-1]
        raise PoolExhaustedError(f"{key}: no free /{prefix} left in {pool}; set {key_name} explicitly")
    taken.append(block)
    return str(block)


def allocate_ranges(
    requested: Sequence[tuple[str | None, str | None]],
) -> list[TenantRanges]:
    """Fill in missing (service, pod) ranges; explicit ones are kept as given.

    Raises PoolExhaustedError naming the tenant index whose range could not be found.
    """
    taken = [
        ipaddress.IPv4Network(cidr)
        for pair in requested
        for cidr in pair
        if cidr is not None
    ]
    result = []
    for index, (service, pod) in enumerate(requested):
        service = service or _take(SERVICE_POOL, SERVICE_BLOCK_PREFIX, taken, f"tenants[{index}].serviceCidr")
        pod = pod or _take(POD_POOL, POD_BLOCK_PREFIX, taken, f"tenants[{index}].podCidr")
        result.append(TenantRanges(service_cidr=service, pod_cidr=pod))
    return result


def dns_service_ip(service_cidr: str) -> str:
    """The cluster DNS address: the 10th address of the service range, as kubeadm does."""
    return str(ipaddress.IPv4Network(service_cidr)[10])


def overlapping_pairs(
    ranges: Sequence[tuple[str, str]],
) -> Iterator[tuple[int, int]]:
    """Index pairs (i < j) of (key, cidr) entries whose networks overlap."""
    networks = [ipaddress.IPv4Network(cidr) for _, cidr in ranges]
    for j, later in enumerate(networks):
        for i in range(j):
            if networks[i].overlaps(later):
                yield i, j
