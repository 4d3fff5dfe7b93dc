"""The defects that would break a real `pulumi preview` / `up` / `destroy`, one scenario each.

Each scenario sets up the simulated machine so that only the defect it is about can bite (the other races
of the real system are won, see `lab_world(races=False)`), and asserts that the operation succeeds.
"""

from __future__ import annotations

import copy

from components import shell as ns
from tests.support.lifecycle_support import (
    adopt_lab,
    kept_after_destroy,
    kind_lab,
    lab_world,
    one_tenant_stack,
    running_adopt_lab,
    running_kind_lab,
    tenant_names,
)
from tests.support.sim.state import plain
from tests.support.ssh_worker import program_values

CARD_C = {"uuid": "GPU-MOCK-C0", "model": "NVIDIA-A100", "memoryMiB": 8192}
# A host where every race of the real system is won, with the conntrack table kube-proxy wants and a kind network.
CALM = {"races": False, "tuned_conntrack": True, "kind_network": True}


def running_calm_lab():
    """The dev lab after its first `up` on the calm host (a copy of one shared first `up`)."""
    return running_kind_lab(**CALM)


def running_calm_tenant_a():
    """The dev lab with tenant-a only after its first `up` on the calm host (a copy of one shared first `up`): for a
    story about one tenant, at about half the cost of each operation."""
    return running_kind_lab(one_tenant=True, **CALM)


def running_calm_adopted_team_vision():
    """The production example with its first tenant (team-vision, its two SSH servers) after its first `up` on a
    host whose races are won (a copy of one shared first `up` of `adopt_lab(lab_world(races=False), ...)`)."""
    return running_adopt_lab(one_tenant=True, races=False)


def test_fresh_preview_on_a_host_without_a_kind_network():
    # pulumi-command returns a non-empty id in preview (commandController.go Create), so the engine runs
    # an invoke that depends on the not-yet-created kind cluster against the real Docker daemon.
    sim = kind_lab(races=False, tuned_conntrack=True, kind_network=False)
    plan = sim.preview()
    assert plan.names("create") and not plan.names("delete")


def test_first_up_survives_kamajis_rbac_window():
    """issue 11 #1: admin.conf has no rights until Kamaji's soot controller binds kubeadm:cluster-admins."""
    world = lab_world(**CALM)
    world.soot_rbac_lag = True
    sim = kind_lab(one_tenant_stack(), world=world)
    sim.up()


def test_first_up_survives_kamajis_webhook_coming_up():
    """issue 13 #6: Kamaji's readiness does not include its webhook server (failurePolicy Fail)."""
    world = lab_world(**CALM)
    world.kamaji_webhook_lag = True
    sim = kind_lab(one_tenant_stack(), world=world)
    sim.up()


def test_first_up_on_a_host_with_the_default_conntrack_table():
    """issue 13 #1: kube-proxy 1.35 writes nf_conntrack_max when it differs from its target."""
    sim = kind_lab(one_tenant_stack(), races=False, tuned_conntrack=False, kind_network=True)
    assert sim.world.docker.nf_conntrack_max == 262144
    sim.up()


def test_adding_a_tenant_to_a_running_stack_previews_and_creates_only_that_tenant():
    """issue 11 #2: the Secret reads of a new tenant must not run before its control plane exists."""
    sim = running_calm_lab()
    sim.config["tenants"].append({"name": "tenant-c", "workers": [{"name": "w0", "gpus": [CARD_C]}]})
    plan = sim.up()
    created = plan.names("create")
    assert created and all(name.startswith("tenant-c") for name in created), plan.render()
    assert not plan.names("update") | plan.names("replace") | plan.names("delete"), plan.render()


def test_first_preview_in_adopt_mode():
    """issue 11 #2: with an existing cluster the management provider is configured during the first preview."""
    sim = adopt_lab(lab_world(races=False))
    sim.preview()


def test_turning_the_smoke_test_on_later_previews_cleanly():
    """issue 12 #1: in preview the provider returns the pod's inputs, never a scheduled pod."""
    config = kind_lab().config
    config["smokeTest"]["enabled"] = False
    sim = kind_lab(config, **CALM)
    sim.up()
    sim.config["smokeTest"]["enabled"] = True
    plan = sim.up()
    # The namespace is there already: HAMi's webhook gate sends its probe there.
    assert plan.names("create") == {f"{tenant}-gpu-smoke-test" for tenant in ("tenant-a", "tenant-b")}
    assert sim.output("tenants")["tenant-a"]["smokeTest"]["schedulerName"] == "hami-scheduler"


def test_the_smoke_tests_own_replace_hint_works():
    """issue 12 #1: a replacement of the pod is what the evidence error tells users to run."""
    sim = running_calm_tenant_a()
    plan = sim.up(replace=["tenant-a-gpu-smoke-test"])
    assert plan.names("replace") == {"tenant-a-gpu-smoke-test"}


def test_a_replaced_worker_container_rejoins_and_the_proof_moves_with_it():
    """issue 12 #2: the smoke pod's replace_on_changes path must match the engine's diff path."""
    sim = running_calm_tenant_a()
    plan = sim.up(replace=["tenant-a-worker-0-container"])
    assert "tenant-a-gpu-smoke-test" in plan.names("replace"), plan.render()
    assert sim.output("tenants")["tenant-a"]["smokeTest"]["node"] == "tenant-a-worker-0"


def test_a_gpu_server_replaced_under_the_same_name_gets_its_label_back_in_nvidia_mode():
    """issue 21 #1: the new Node of a rejoined worker has no `gpu=on`, which HAMi's device-plugin DaemonSet
    selects; the label patch must follow the join, or it is `same` and never sent again."""
    sim = running_calm_adopted_team_vision()
    tenant = sim.config["tenants"][0]
    worker = tenant["workers"][0]
    node = f"{tenant['name']}-{worker['name']}"
    host = sim.world.add_ssh_host("10.20.1.21", worker["ssh"]["hostKey"])
    host.machine.cards = list(worker["gpus"])
    host.machine.gpus = len(host.machine.cards)
    worker["ssh"]["host"] = "10.20.1.21"

    plan = sim.up()
    assert plan.ok, plan.render()
    assert f"{node}-gpu-label" in plan.names("update"), plan.render()
    api = sim.world.tenant_api(tenant["name"])
    assert api.find("Node", None, node)["metadata"]["labels"]["gpu"] == "on"
    assert sim.output("tenants")[tenant["name"]]["smokeTest"]["node"] == node
    assert sim.up().changed() == {}


def _replace_server(sim, tenant: dict, worker: dict, address: str):
    """A new server at `address` with the same cards takes `worker`'s name; returns its simulated host."""
    host = sim.world.add_ssh_host(address, worker["ssh"]["hostKey"])
    host.machine.cards = list(worker["gpus"])
    host.machine.gpus = len(host.machine.cards)
    worker["ssh"]["host"] = address
    return host


def test_a_gpu_server_that_cannot_run_hamis_plugin_is_refused_at_its_join_and_the_old_one_left_clean():
    """issue 21 #2, #4 and #8: a new server under the same name in nvidia mode. Without the container toolkit and
    containerd's nvidia runtime it is refused by its join, naming both, not by Helm's 600 s wait; the server it
    replaces has left clean; once fixed it joins and gets `gpu=on` back."""
    sim = running_calm_adopted_team_vision()
    tenant = sim.config["tenants"][0]
    worker = tenant["workers"][0]
    node = f"{tenant['name']}-{worker['name']}"
    old_address = worker["ssh"]["host"]
    host = _replace_server(sim, tenant, worker, "10.20.1.21")
    host.machine.nvidia_missing = {"toolkit", "nvidia runtime"}

    plan = sim.up(expect_error=True)

    assert "this worker lists gpus, so it gets gpu=on and HAMi's device plugin" in (plan.error or ""), plan.render()
    assert "nvidia runtime; toolkit" in plan.error
    assert host.machine.kubelet_conf is None
    # The old server left before the new one tried: nothing of the tenant is left on it.
    assert [line for line in sim.world.leftovers() if old_address in line] == []

    host.machine.nvidia_missing = set()
    plan = sim.up()

    assert plan.ok, plan.render()
    api = sim.world.tenant_api(tenant["name"])
    assert api.find("Node", None, node)["metadata"]["labels"]["gpu"] == "on"
    join = sim.resource(f"{node}-join")
    values = program_values(plain(join.inputs["stdin"]))["create"]
    assert (values[ns.GPU_MODE_ENV], values[ns.GPU_UUIDS_ENV]) == (
        "nvidia", " ".join(card["uuid"] for card in worker["gpus"]))
    assert sim.up().changed() == {}


def test_an_ssh_worker_removed_leaves_a_clean_server():
    """issue 21 #4 and #8: after its removal the server keeps nothing of the tenant, and its Node is gone."""
    sim = running_calm_adopted_team_vision()
    tenant = sim.config["tenants"][0]
    removed = tenant["workers"].pop()
    # The example's declared workloads fill both servers and it sets strictCapacity: with one server left the
    # preview refuses them (tests/test_gpu_plan.py); this story is about the server, not the plan.
    tenant.pop("workloads", None)
    node = f"{tenant['name']}-{removed['name']}"
    address = removed["ssh"]["host"]
    assert [line for line in sim.world.leftovers() if address in line] != []  # the tenant ran there

    plan = sim.up()

    assert plan.ok, plan.render()
    assert f"{node}-join" in plan.names("delete"), plan.render()
    assert [line for line in sim.world.leftovers() if address in line] == []
    assert sim.world.tenant_api(tenant["name"]).find("Node", None, node) is None


def test_destroy_leaves_nothing_behind():
    """issue 13 #2: Helm's uninstall wait and the DataStore finalizer only Kamaji's controller removes."""
    sim = running_calm_lab()
    sim.destroy()
    assert sim.world.leftovers() == kept_after_destroy(sim)
    assert sim.resources() == []


def test_destroy_after_the_kind_cluster_was_deleted_by_hand():
    """issue 13 #3: pulumi-kubernetes refuses to delete a Helm release on an unreachable cluster."""
    sim = running_calm_lab()
    sim.world.delete_kind_cluster("gpu-tenancy")
    sim.destroy(env={"PULUMI_K8S_DELETE_UNREACHABLE": "true"})
    assert sim.world.leftovers() == kept_after_destroy(sim)
    assert sim.resources() == []


def test_tenant_names_of_the_dev_lab():
    assert tenant_names(copy.deepcopy(kind_lab().config)) == ["tenant-a", "tenant-b"]
