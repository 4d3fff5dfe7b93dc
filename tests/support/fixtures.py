"""Test data shaped like the real thing: kubeconfigs and CA certificates from `tests.support.sim.pki` (real X.509),
and the kind network the simulated Docker host creates (kind's defaults)."""

from __future__ import annotations

import functools
import ipaddress

from tests.support.sim import pki
from tests.support.sim.lab import FIRST_TENANT_ADDRESS
from tests.support.sim.world import KIND_SUBNET_V4, KIND_SUBNET_V6

__all__ = ["KIND_GATEWAY_V4", "KIND_SUBNET_V4", "KIND_SUBNET_V6", "TENANT_LB_IP", "kubeconfig_yaml", "tenant_ca_pem"]

# Docker gives a network's first address to its gateway.
KIND_GATEWAY_V4 = str(next(ipaddress.ip_network(KIND_SUBNET_V4).hosts()))
# The first tenant's API address: the first address of MetalLB's pool.
TENANT_LB_IP = FIRST_TENANT_ADDRESS


@functools.cache
def _ca(name: str) -> pki.CertificateAuthority:
    return pki.new_ca(name)


def tenant_ca_pem(name: str = "tenant-ca") -> bytes:
    """A real self-signed CA certificate (PEM), the same one for the same name within a test run."""
    return _ca(name).pem


def kubeconfig_yaml(server: str, cluster: str) -> str:
    """A client-certificate kubeconfig for `server`, shaped like kubeadm's."""
    return pki.kubeconfig(server, _ca(cluster), "kubernetes-admin", ("kubeadm:cluster-admins",), cluster)
