"""Simulated machines that fit a stack configuration: the kind lab on a Docker host, or an existing
management cluster with the SSH machines the config names."""

from __future__ import annotations

from typing import Any

from config.models import DEFAULT_KUBERNETES_VERSION
from tests.support.sim.world import World

# The first address of MetalLB's pool on the lab's kind network (kind's 172.18.0.0/16, .255.200-.250).
FIRST_TENANT_ADDRESS = "172.18.255.200"


def lab_world(*, races: bool = True, tuned_conntrack: bool = False, kind_network: bool = False) -> World:
    """A Linux Docker host like most: 4 CPUs, the kernel's default conntrack table, no `kind` network yet.

    `races=False` lets the real system win its races (Kamaji's, HAMi's and MetalLB's webhooks, the RBAC and the mock
    device plugin come up at once), to look at one
    defect at a time; `tuned_conntrack=True` sets nf_conntrack_max to what kube-proxy with kubeadm defaults
    wants on 4 CPUs (131072, hash size 32768).
    """
    world = World(kind_network=kind_network)
    if not races:
        world.kamaji_webhook_lag = False
        world.soot_rbac_lag = False
        world.hami_webhook_lag = False
        world.metallb_webhook_lag = False
        world.device_plugin_lag = False
    if tuned_conntrack:
        world.docker.nf_conntrack_max = 131072
        world.docker.conntrack_hashsize = 32768
    return world


def adopt(world: World, config: dict[str, Any]) -> dict[str, Any]:
    """Give `world` the existing cluster and SSH machines `config` names; returns `config` pointing at them."""
    management = config.setdefault("management", {})
    management["kubeconfig"] = world.adopt_cluster()
    for tenant in config.get("tenants") or []:
        for worker in tenant.get("workers") or []:
            ssh = worker.get("ssh")
            if ssh:
                host = world.add_ssh_host(ssh["host"], ssh.get("hostKey") or f"ssh-ed25519 AAAAkeyof{ssh['host']}",
                                          tenant.get("kubernetesVersion") or DEFAULT_KUBERNETES_VERSION)
                host.machine.cards = list(worker.get("gpus") or [])
                host.machine.gpus = len(host.machine.cards)
    return config


def world_for(config: dict[str, Any]) -> World:
    """A machine for a first run of `config` (the config is pointed at it in place when it adopts a cluster)."""
    world = lab_world()
    if (config.get("management") or {}).get("kubeconfig"):
        adopt(world, config)
    return world
