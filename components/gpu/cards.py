"""Simulated GPUs on a worker Node, as plain data.

HAMi learns about a node's cards from the `hami.io/node-nvidia-register` annotation (a JSON array, one object
per card) and only treats the node as healthy while its status advertises `nvidia.com/gpu` capacity/allocatable
> 0 (HAMi v2.10.0 `pkg/device/devices.go` `CheckHealth` reads `status.allocatable`). The annotation
is applied with a NodePatch; the status (a subresource) by a dynamic resource on the Pulumi host
(components.gpu.operations.GpuCapacityProvider).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from components.gpu.capacity import device_type
from config import GpuCard

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
# Label the real HAMi device plugin DaemonSet selects (chart `devicePlugin.nvidiaNodeSelector`).
NVIDIA_NODE_LABEL = {"gpu": "on"}


# --------------------------------------------------------------------------- #
# What the scheduler and the mock device plugin read
# --------------------------------------------------------------------------- #


def register_annotation(cards: Sequence[GpuCard]) -> str:
    """The `hami.io/node-nvidia-register` value for these cards, in configuration order.

    Field names and types follow HAMi's DeviceInfo JSON (HAMi v2.10.0 `pkg/device/devices.go` `DeviceInfo`,
    read with json.Unmarshal); an unknown key would be ignored silently and leave an unusable card.
    """
    devices = [
        {
            "id": card.uuid,
            "index": index,
            "count": card.slots,
            "devmem": card.memory_mib,
            "devcore": card.cores,
            "type": device_type(card.model),
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for index, card in enumerate(cards)
    ]
    return json.dumps(devices, separators=(",", ":"))


def gpu_capacity(cards: Sequence[GpuCard]) -> int:
    """`nvidia.com/gpu` the node advertises: every card counted once per slot."""
    return sum(card.slots for card in cards)


