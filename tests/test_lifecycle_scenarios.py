"""The life of a stack, operation by operation, on a simulated machine that loses every race it may lose.

Each test is a short story: what the user changes, what `pulumi preview` / `up` / `destroy` plans and does,
and what is left alone. A failing test prints the plan the way `pulumi preview` would.
"""

from __future__ import annotations

import copy

import pytest

from components.gpu.cards import REGISTER_ANNOTATION
from components.shell import CONTAINER_ENV, KIND_WAIT_SECONDS_ENV
from components.worker.access import container_interpreter
from tests.support.lifecycle_support import (
    MANAGEMENT,
    adopt_lab,
    changed_by_owner,
    kept_after_destroy,
    kind_lab,
    running_kind_lab,
    tenant_names,
)
from tests.support.sim import systems
from tests.support.sim.state import plain, secret

CARD_C = {"uuid": "GPU-MOCK-C0", "model": "NVIDIA-A100", "memoryMiB": 8192}


def running_lab():
    """The dev lab after its first `make up` (a copy of one shared first `up`)."""
    return running_kind_lab()


def running_tenant_a():
    """The dev lab with tenant-a only after its first `make up` (a copy of one shared first `up`): for a story about
    one tenant and the management layer, at about half the cost of each operation."""
    return running_kind_lab(one_tenant=True)


@pytest.fixture(scope="module")
def second_up():
    """A second `up` with no change on a copy of the running dev lab, run once for the tests that read it: the
    outputs the first `up` left, the second up's preview and its update."""
    running = running_lab()
    outputs = copy.deepcopy(running.outputs)
    plan = running.up()
    preview = running.history[-2]
    assert preview.kind == "preview"
    return outputs, preview, plan


def test_fresh_preview_in_kind_mode_plans_only_creates():
    sim = kind_lab()
    plan = sim.preview()
    assert plan.names("create")
    assert not plan.names("update") | plan.names("replace") | plan.names("delete")
    assert sim.world.kind == {} and sim.world.docker.containers == {}, "a preview must not touch the machine"


def test_fresh_preview_in_adopt_mode_plans_only_creates():
    sim = adopt_lab()
    plan = sim.preview()
    assert plan.names("create")
    assert not plan.names("update") | plan.names("replace") | plan.names("delete")


def test_first_up_builds_everything_and_proves_every_tenant():
    running = running_lab()
    tenants = running.output("tenants")
    assert set(tenants) == {"tenant-a", "tenant-b"}
    for name, tenant in tenants.items():
        assert tenant["smokeTest"]["schedulerName"] == "hami-scheduler"
        assert tenant["smokeTest"]["node"] == f"{name}-worker-0"
    assert running.world.leftovers() != []


def test_second_up_with_no_change_does_nothing(second_up):
    _, _, plan = second_up
    assert plan.changed() == {}, plan.render()


def test_a_preview_of_a_running_stack_shows_no_change_at_all(second_up):
    """Not even the lines that do not count as changes: no `discard` of a read the update makes, and the stack
    outputs as the last update left them. The preview is the one `pulumi up` runs first (second_up)."""
    outputs, plan, _ = second_up
    assert plan.changed() == {} and plan.component_changes() == {}, plan.render()
    assert plan.names("discard") == set(), plan.render()
    assert plain(plan.outputs) == plain(outputs)


def test_adding_a_tenant_touches_no_existing_resource():
    running = running_lab()
    running.config["tenants"].append({"name": "tenant-c", "workers": [{"name": "w0", "gpus": [CARD_C]}]})
    preview = running.preview()
    plan = running.up(skip_preview=True)
    for result in (preview, plan):
        by_owner = changed_by_owner(result, tenant_names(running.config))
        assert set(by_owner) == {"tenant-c"}, result.render()
        assert set(by_owner["tenant-c"]) == {"create"}
    assert running.output("tenants")["tenant-c"]["smokeTest"]["schedulerName"] == "hami-scheduler"


def test_removing_a_tenant_deletes_only_that_tenant():
    running = running_lab()
    running.config["tenants"] = [t for t in running.config["tenants"] if t["name"] != "tenant-b"]
    plan = running.up()
    by_owner = changed_by_owner(plan, ["tenant-a", "tenant-b"])
    assert set(by_owner) == {"tenant-b"} and set(by_owner["tenant-b"]) == {"delete"}, plan.render()
    assert "tenant-b-worker-0" not in running.world.docker.containers
    assert running.world.tenant_api("tenant-b") is None
    assert running.up().changed() == {}


def test_adding_a_worker_creates_only_that_worker():
    running = running_lab()  # beside tenant-b, which it must leave alone
    tenant = running.config["tenants"][0]
    tenant["workers"].append({"name": "worker-1", "gpus": [CARD_C]})
    plan = running.up()
    by_owner = changed_by_owner(plan, tenant_names(running.config))
    assert set(by_owner) == {"tenant-a"}, plan.render()
    assert by_owner["tenant-a"]["create"] and all("worker-1" in n for n in by_owner["tenant-a"]["create"])
    assert not by_owner["tenant-a"].get("replace") and not by_owner["tenant-a"].get("delete"), plan.render()
    assert running.world.tenant_api("tenant-a").find("Node", None, "tenant-a-worker-1") is not None


def test_adding_a_card_updates_that_node_only():
    running = running_lab()  # beside tenant-b, which it must leave alone
    card = {"uuid": "GPU-MOCK-A1", "model": "NVIDIA-A100", "memoryMiB": 8192}
    running.config["tenants"][0]["workers"][0]["gpus"].append(card)
    plan = running.up()
    by_owner = changed_by_owner(plan, tenant_names(running.config))
    assert set(by_owner) == {"tenant-a"}, plan.render()
    assert set(by_owner["tenant-a"]) <= {"update", "replace"}
    assert all(name.startswith("tenant-a-worker-0-gpu") for ops in by_owner["tenant-a"].values() for name in ops)
    node = running.world.tenant_api("tenant-a").find("Node", None, "tenant-a-worker-0")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "20"


def test_changing_a_cards_memory_updates_only_its_annotation():
    running = running_tenant_a()
    running.config["tenants"][0]["workers"][0]["gpus"][0]["memoryMiB"] = 16384
    plan = running.up()
    assert plan.changed() == {"update": {"tenant-a-worker-0-gpu-register"}}, plan.render()
    node = running.world.tenant_api("tenant-a").find("Node", None, "tenant-a-worker-0")
    assert '"devmem":16384' in node["metadata"]["annotations"]["hami.io/node-nvidia-register"]


def test_a_replaced_control_plane_rejoins_its_workers_and_proves_again():
    running = running_tenant_a()
    before = running.output("tenants")["tenant-a"]["discoveryHash"]
    plan = running.up(replace=["tenant-a-tcp"])
    by_owner = changed_by_owner(plan, tenant_names(running.config))
    assert set(by_owner) == {"tenant-a"}, plan.render()
    tenant = running.output("tenants")["tenant-a"]
    assert tenant["discoveryHash"] != before
    assert tenant["smokeTest"]["schedulerName"] == "hami-scheduler"
    assert running.up().changed() == {}


def test_a_week_later_up_changes_nothing_and_no_join_token_is_left():
    running = running_lab()
    running.advance(days=8)
    plan = running.up()
    assert plan.changed() == {}, plan.render()
    for tenant in ("tenant-a", "tenant-b"):
        api = running.world.tenant_api(tenant)
        tokens = [s for s in api.list("Secret", "kube-system") if s.get("type") == "bootstrap.kubernetes.io/token"]
        assert tokens == [], f"{tenant} still holds a join token"


def test_toggling_the_smoke_test():
    running = running_lab()
    running.config["smokeTest"]["enabled"] = False
    # The namespace stays: HAMi's webhook gate probes there.
    proof = {f"{tenant}-gpu-smoke-test" for tenant in ("tenant-a", "tenant-b")}
    plan = running.up()
    assert plan.changed() == {"delete": proof}, plan.render()
    running.config["smokeTest"]["enabled"] = True
    plan = running.up()
    assert plan.changed() == {"create": proof}, plan.render()


def test_destroy_leaves_nothing():
    running = running_lab()
    running.destroy()
    assert running.world.leftovers() == kept_after_destroy(running)
    assert running.resources() == []


def test_destroy_after_a_tenant_control_plane_was_deleted_by_hand():
    running = running_lab()
    api = running.world.kind["gpu-tenancy"].api
    api.delete(None, "TenantControlPlane", "tenant-b", "tenant-b")
    assert running.world.tenant_api("tenant-b") is None
    running.destroy()
    assert running.world.leftovers() == kept_after_destroy(running)


def test_destroy_after_the_kind_cluster_was_deleted_by_hand():
    running = running_lab()
    running.world.delete_kind_cluster("gpu-tenancy")
    running.destroy(env={"PULUMI_K8S_DELETE_UNREACHABLE": "true"})
    assert running.world.leftovers() == kept_after_destroy(running)
    assert running.resources() == []


def test_a_change_to_tenant_b_touches_nothing_of_tenant_a_or_the_management_layer():
    running = running_lab()
    endpoint_a = running.output("tenants")["tenant-a"]["endpoint"]
    tenant_b = running.config["tenants"][1]
    tenant_b["workers"][0]["gpus"][0]["memoryMiB"] = 16384
    tenant_b["quota"] = {"gpus": 4}
    plan = running.up()
    assert set(changed_by_owner(plan, tenant_names(running.config))) == {"tenant-b"}, plan.render()
    plan = running.up(replace=["tenant-b-tcp"])
    owners = changed_by_owner(plan, tenant_names(running.config))
    assert set(owners) == {"tenant-b"}, plan.render()
    assert MANAGEMENT not in owners
    assert running.output("tenants")["tenant-a"]["endpoint"] == endpoint_a


def test_an_upgrade_that_rewrites_the_node_commands_updates_them_in_place():
    """The first `up` after an upgrade that changes how node commands are written (here, the inline bash programs
    before dispatch.sh) updates each node command, which re-runs its idempotent create on the node: joined nodes
    stay joined, nothing is replaced, and the kind cluster command is left alone."""
    running = running_lab()
    node_commands = {r.name for r in running.resources() if r.inputs.get("interpreter") == container_interpreter()}
    assert node_commands == {"image-mirror-kind-node", "tenant-a-worker-0-join", "tenant-a-worker-0-mirrors",
                             "tenant-b-worker-0-join", "tenant-b-worker-0-mirrors"}
    for name in node_commands:
        inputs = running.resource(name).inputs
        # What the previous version stored: the action in an environment variable, a whole bash program on stdin.
        container = plain(inputs["environment"])[CONTAINER_ENV]
        inputs["create"] = f"docker exec -i -e GPU_TENANCY_ACTION=create {container} bash -s"
        inputs["delete"] = f"exec docker exec -i -e GPU_TENANCY_ACTION=delete {container} bash -s"
        inputs["stdin"] = secret("set -euo pipefail\n{\ncase \"${GPU_TENANCY_ACTION:-}\" in\nesac\n}\n")
        del inputs["interpreter"], inputs["environment"]
    joined = {name: machine.kubelet_conf for name, machine in running.world.machines.items()}

    for plan in (running.preview(), running.up(skip_preview=True)):
        assert plan.changed() == {"update": node_commands}, plan.render()
    assert {name: machine.kubelet_conf for name, machine in running.world.machines.items()} == joined
    for tenant in ("tenant-a", "tenant-b"):
        stdout = plain(running.resource(f"{tenant}-worker-0-join").outputs["stdout"])
        assert stdout == f"worker {tenant}-worker-0 already joined"
    assert running.up().changed() == {}


def node_ports(api) -> dict[str, list[int]]:
    """{Service: its node ports} of every Service that opens a port on each node of that cluster."""
    ports = {s["metadata"]["name"]: [p["nodePort"] for p in s["spec"].get("ports") or [] if p.get("nodePort")]
             for s in api.list("Service")}
    return {name: found for name, found in ports.items() if found}


def test_an_upgrade_closes_the_control_planes_node_ports_in_place():
    """issue 22 #2: a stack whose control plane Services got node ports (before allocateLoadBalancerNodePorts was
    set) has them closed by the next `up`: the TenantControlPlanes are updated, not replaced, Kamaji clears the
    ports and the endpoints stay."""
    running = running_lab()
    management = running.world.kind["gpu-tenancy"].api
    assert node_ports(management) == {}
    endpoints = {name: tenant["endpoint"] for name, tenant in running.output("tenants").items()}
    for tenant in ("tenant-a", "tenant-b"):
        # What the previous version stored and Kamaji made of it.
        for spec in (running.resource(f"{tenant}-tcp").inputs["spec"],
                     management.find("TenantControlPlane", tenant, tenant)["spec"]):
            del spec["controlPlane"]["service"]["allocateLoadBalancerNodePorts"]
        tcp = management.find("TenantControlPlane", tenant, tenant)
        address = management.find("Service", tenant, tenant)["status"]["loadBalancer"]["ingress"][0]["ip"]
        management.put(systems.control_plane_service(management, tcp, address))
    assert set(node_ports(management)) == {"tenant-a", "tenant-b"}

    plan = running.up()
    assert plan.changed() == {"update": {"tenant-a-tcp", "tenant-b-tcp"}}, plan.render()
    assert node_ports(management) == {}
    assert {name: tenant["endpoint"] for name, tenant in running.output("tenants").items()} == endpoints
    assert running.up().changed() == {}


def test_a_script_edit_on_a_running_stack_previews_no_rebuild():
    """An upgrade that edits kind-create.sh, kind-delete.sh or the kind wait (here: what the previous version
    stored differs from the checkout) neither previews nor runs anything: the kind Command keeps what it stored,
    so its stdout -- and the Provider and everything on the management cluster -- stays known."""
    running = running_tenant_a()
    kind = running.resource("management-kind")
    before = {key: kind.inputs[key] for key in ("create", "delete")}
    kind.inputs["create"] = before["create"] + "\n# a comment the previous version had\n"
    kind.inputs["delete"] = before["delete"] + "\n# a comment the previous version had\n"
    environment = plain(kind.inputs["environment"])
    environment[KIND_WAIT_SECONDS_ENV] = "120"
    kind.inputs["environment"] = environment
    stored = copy.deepcopy(kind.inputs)

    for plan in (running.preview(), running.up(skip_preview=True)):
        assert plan.changed() == {}, plan.render()
    assert running.resource("management-kind").inputs == stored


def test_a_targeted_replace_of_a_membership_keeps_the_rejoined_node():
    """`pulumi up --replace <worker>-membership`: a targeted replace carries no delete-before-replace from the
    provider's diff (pulumi step_generator.go), so without the option the old membership's delete (Node by
    name) ran last and removed the Node the new join had just registered, with its GPU annotation."""
    running = running_tenant_a()
    plan = running.up(replace=["tenant-a-worker-0-membership"])
    assert "tenant-a-worker-0-membership" in plan.names("replace"), plan.render()
    nodes = {node["metadata"]["name"]: node for node in running.world.tenant_api("tenant-a").list("Node")}
    assert "tenant-a-worker-0" in nodes, plan.render()
    assert REGISTER_ANNOTATION in (nodes["tenant-a-worker-0"]["metadata"].get("annotations") or {})
    assert running.output("tenants")["tenant-a"]["smokeTest"]["schedulerName"] == "hami-scheduler"
