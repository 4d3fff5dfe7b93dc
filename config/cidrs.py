"""Automatic, deterministic and stable allocation of tenant service and pod ranges.

A tenant that omits `serviceCidr` / `podCidr` gets the block of a fixed pool that a hash of its *name* picks. So
its ranges depend on nothing else: adding, removing or reordering other tenants never moves them (a moved range
would replace that tenant's control plane). When the picked block would overlap another tenant's range (explicit
or automatic), validation reports it and offers a free block to pin instead of moving anyone silently. The plan
summary output shows what was allocated; pinning a tenant's current ranges never changes them.

kind's own defaults (services 10.96.0.0/16, pods 10.244.0.0/16) are never picked: a tenant range equal to the
management cluster's would make addresses ambiguous on the management node.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

IPv4Network = ipaddress.IPv4Network

# Services: /20 blocks (4096 addresses each) out of 10.96.0.0/11 -> 512 blocks.
SERVICE_POOL = ipaddress.IPv4Network("10.96.0.0/11")
SERVICE_BLOCK_PREFIX = 20
# Pods: /18 blocks (64 nodes x /24) out of 10.128.0.0/9 -> 512 blocks.
POD_POOL = ipaddress.IPv4Network("10.128.0.0/9")
POD_BLOCK_PREFIX = 18
# kind v1alpha4 defaults (networking.serviceSubnet, networking.podSubnet) of the management cluster.
RESERVED = (ipaddress.IPv4Network("10.96.0.0/16"), ipaddress.IPv4Network("10.244.0.0/16"))


@dataclass(frozen=True)
class TenantRanges:
    service_cidr: str
    pod_cidr: str


@dataclass(frozen=True)
class RangeConflict:
    """Tenant `index`'s automatic `key` range `cidr` overlaps tenant `other`'s range; `free` is a block to pin."""

    index: int
    key: str
    cidr: str
    other: int
    other_key: str
    free: str | None


@functools.cache
def blocks(pool: IPv4Network, prefix: int) -> tuple[IPv4Network, ...]:
    """The blocks of `pool` automatic allocation may hand out (kind's own ranges excluded)."""
    return tuple(block for block in pool.subnets(new_prefix=prefix) if not any(block.overlaps(r) for r in RESERVED))


def automatic_block(name: str, key: str) -> str:
    """The block of `key`'s pool ("serviceCidr" or "podCidr") that tenant `name` gets when it pins none."""
    pool, prefix = (SERVICE_POOL, SERVICE_BLOCK_PREFIX) if key == "serviceCidr" else (POD_POOL, POD_BLOCK_PREFIX)
    candidates = blocks(pool, prefix)
    digest = int.from_bytes(hashlib.sha256(f"{key}/{name}".encode()).digest()[:8], "big")
    return str(candidates[digest % len(candidates)])


def free_block(key: str, taken: list[IPv4Network]) -> str | None:
    pool, prefix = (SERVICE_POOL, SERVICE_BLOCK_PREFIX) if key == "serviceCidr" else (POD_POOL, POD_BLOCK_PREFIX)
    return next((str(b) for b in blocks(pool, prefix) if not any(b.overlaps(t) for t in taken)), None)


def allocate_ranges(
    requested: Sequence[tuple[str, str | None, str | None]],
) -> tuple[list[TenantRanges], list[RangeConflict]]:
    """(name, service, pod) per tenant -> their ranges (explicit ones kept as given), and every automatic range
    that overlaps another tenant's. A conflict is reported on the later-listed tenant, with a free block."""
    ranges = [
        TenantRanges(service_cidr=service or automatic_block(name, "serviceCidr"),
                     pod_cidr=pod or automatic_block(name, "podCidr"))
        for name, service, pod in requested
    ]
    entries = [
        (index, key, cidr, explicit is None)
        for index, ((_, service, pod), r) in enumerate(zip(requested, ranges, strict=True))
        for key, cidr, explicit in (("serviceCidr", r.service_cidr, service), ("podCidr", r.pod_cidr, pod))
    ]
    taken = [IPv4Network(cidr) for _, _, cidr, _ in entries]
    conflicts = []
    for index, key, cidr, automatic in entries:
        for other, other_key, other_cidr, other_automatic in entries:
            if other == index or not IPv4Network(cidr).overlaps(IPv4Network(other_cidr)):
                continue
            # Blame the automatic side; when both are automatic, the later-listed tenant.
            if automatic and (not other_automatic or other < index):
                conflicts.append(RangeConflict(index, key, cidr, other, other_key, free_block(key, taken)))
                break
    return ranges, conflicts


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
