"""Building blocks for lifecycle scenarios: a lab on a simulated Docker host, an adopted cluster with SSH
machines, and helpers to read plans by tenant."""

from __future__ import annotations

import copy
from typing import Any

from tests.support.mockrun import reference_stack
from tests.support.sim import Lifecycle, Plan, World
from tests.support.sim.lab import adopt, lab_world
from tests.test_config_infrastructure import prod_example_with_secrets

MANAGEMENT = "management"

__all__ = ["MANAGEMENT", "adopt_lab", "changed_by_owner", "kept_after_destroy", "kind_lab", "lab_world",
           "one_tenant_stack", "owner", "running_adopt_lab", "running_kind_lab",
           "tenant_names"]


def one_tenant_stack() -> dict[str, Any]:
    """The reference stack with its first tenant only: for a question about one tenant, at about half the cost of a
    simulated operation on the two-tenant lab (67 resources instead of 110). Questions about what one tenant does
    to another keep the reference stack."""
    config = reference_stack()
    config["tenants"] = config["tenants"][:1]
    return config


def kind_lab(config: dict[str, Any] | None = None, world: World | None = None, **world_options: Any) -> Lifecycle:
    return Lifecycle(copy.deepcopy(config) if config is not None else reference_stack(),
                     world=world or lab_world(**world_options))


_RUNNING: dict[tuple[Any, ...], Lifecycle] = {}


def running_kind_lab(*, one_tenant: bool = False, **world_options: Any) -> Lifecycle:
    """The dev lab (its first tenant only with `one_tenant`, see one_tenant_stack) after its first `up` on a typical
    host (or on the host `world_options` describe, see `lab_world`). Each first `up` runs once per test process (per
    pytest-xdist worker); every caller gets its own copy of the stack and the machine (Lifecycle.fork), so scenarios
    never see each other's changes."""
    key = (one_tenant, *sorted(world_options.items()))
    if key not in _RUNNING:
        sim = kind_lab(one_tenant_stack() if one_tenant else None, **world_options)
        sim.up()
        _RUNNING[key] = sim
    return _RUNNING[key].fork()


def adopt_lab(world: World | None = None, *, one_tenant: bool = False) -> Lifecycle:
    """The production example: an existing management cluster, SSH-joined GPU servers (its first tenant only, with
    its servers, with `one_tenant`: for a question about one tenant, as one_tenant_stack)."""
    world = world or lab_world()
    example = prod_example_with_secrets()
    if one_tenant:
        example["tenants"] = example["tenants"][:1]
    config = adopt(world, example)
    return Lifecycle(config, world=world, stack="prod", secret_keys=["management", "tenants"])


def running_adopt_lab(*, one_tenant: bool = False, **world_options: Any) -> Lifecycle:
    """`adopt_lab` after its first `up`, on a machine `world_options` describe (see `lab_world`): like
    running_kind_lab, once per test process, and every caller gets its own fork."""
    key = ("adopt", one_tenant, *sorted(world_options.items()))
    if key not in _RUNNING:
        sim = adopt_lab(lab_world(**world_options), one_tenant=one_tenant)
        sim.up()
        _RUNNING[key] = sim
    return _RUNNING[key].fork()


def owner(name: str, tenants: list[str]) -> str:
    """Which tenant a resource belongs to (its name starts with the tenant's), or the management layer."""
    for tenant in sorted(tenants, key=len, reverse=True):
        if name == tenant or name.startswith(f"{tenant}-"):
            return tenant
    return MANAGEMENT


def changed_by_owner(plan: Plan, tenants: list[str]) -> dict[str, dict[str, set[str]]]:
    """{owner: {op: names}} for every create/update/replace/delete in the plan."""
    out: dict[str, dict[str, set[str]]] = {}
    for op, names in plan.changed().items():
        for name in names:
            out.setdefault(owner(name, tenants), {}).setdefault(op, set()).add(name)
    return out


def tenant_names(config: dict[str, Any]) -> list[str]:
    return [t["name"] for t in config["tenants"]]


def kept_after_destroy(sim: Lifecycle) -> list[str]:
    """What `make down` leaves on the Docker host on purpose, as `World.leftovers` names it (docs/operations.md "What
    `make down` leaves"): the `kind` network kind made (it never removes it), the registry and kindest/node images
    (`keep_locally`: the next `make up` and other labs use them) and the image cache volume
    (`retain_on_delete`). Nothing in adopt mode."""
    from components.management.image_cache import REGISTRY_IMAGE, cache_volume_name
    from components.worker.node import worker_image
    from config import load_stack_config

    config = load_stack_config(sim.config, secret_keys=sim.secret_keys)
    if config.management.adopts_existing_cluster:
        return []
    kept = [] if "kind" in sim.world.preexisting["network"] else ["network kind"]
    images = {worker_image(t) for t in config.tenants if any(w.ssh is None for w in t.workers)}
    if config.management.runs_image_mirror:
        images.add(REGISTRY_IMAGE)
    kept += [f"image {image}" for image in sorted(images)]
    if config.management.runs_image_mirror:
        kept.append(f"volume {cache_volume_name(config.management.cluster_name)}")
    return kept


def block_drain(api, node: str) -> None:
    """Pod default/db-0 on `node`, under a PodDisruptionBudget that allows no disruption (minAvailable 1 of 1)."""
    api.put({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "db-0", "namespace": "default", "labels": {"app": "db"}},
             "spec": {"nodeName": node, "containers": [{"name": "db", "image": "db"}]},
             "status": {"phase": "Running"}})
    api.put({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "db", "namespace": "default", "generation": 1},
             "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
             "status": {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1}})
