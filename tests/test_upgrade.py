"""Tenant upgrades: which version changes are allowed (config.upgrade, the TenantVersion resource's diff) and how
an upgrade runs on the lifecycle simulator (docs/operations.md "Upgrading a tenant")."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest

from components.kube import ApiError
from components.tenant import operations as tenant_operations
from components.worker import operations as worker_operations
from config import ConfigError, load_stack_config, upgrade
from naming import JOIN_ANNOTATION
from tests.support.lifecycle_support import (
    adopt_lab,
    block_drain,
    changed_by_owner,
    kind_lab,
    one_tenant_stack,
    running_adopt_lab,
    running_kind_lab,
    tenant_names,
)
from tests.support.mockrun import reference_stack
from tests.support.readme import all_text
from tests.support.sim import systems
from tests.support.sim.state import comparable, plain

KEY = "tenants[0].kubernetesVersion"
ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- #
# The rules
# --------------------------------------------------------------------------- #


def test_a_newer_patch_or_the_next_minor_is_allowed():
    assert upgrade.version_change_problem(KEY, "v1.35.0", "v1.35.5") is None
    assert upgrade.version_change_problem(KEY, "v1.35.0", "v1.36.1") is None
    assert upgrade.version_change_problem(KEY, "v1.36.1", "v1.36.1") is None
    assert upgrade.next_versions("v1.35.0") == ["v1.36.1", "v1.35.5"]
    assert upgrade.next_versions("v1.36.1") == []


@pytest.mark.parametrize(("current", "wanted", "says"), [
    ("v1.36.1", "v1.35.5", "keep v1.36.1"),  # a lower minor version (Kamaji refuses it too)
    ("v1.35.5", "v1.35.0", "keep v1.35.5 (what the tenant runs), or upgrade to v1.36.1"),  # a lower patch version
])
def test_a_downgrade_is_refused_with_the_key_and_what_is_allowed(current, wanted, says):
    problem = upgrade.version_change_problem(KEY, current, wanted)
    assert problem is not None and problem.startswith(f"{KEY}: {wanted} is older than {current}")
    assert says in problem


def test_a_skipped_minor_version_names_the_step_to_take_first():
    problem = upgrade.version_change_problem(KEY, "v1.34.2", "v1.36.1")
    assert problem is not None and "skips a minor version" in problem
    assert "upgrade to v1.35.5 first, run `make up`, then to v1.36.1" in problem


def test_a_version_the_pinned_kamaji_does_not_accept_is_refused():
    problem = upgrade.version_change_problem(KEY, "v1.36.1", "v1.37.0")
    assert problem is not None and "outside what the pinned Kamaji accepts" in problem


def test_the_version_resource_refuses_in_its_diff_and_records_nothing_else():
    provider = tenant_operations.TenantVersionProvider()
    olds = {"tenant": "tenant-a", "version_key": KEY, "control_plane": "v1.36.1"}
    with pytest.raises(RuntimeError, match=r"tenants\[0\]\.kubernetesVersion: v1\.35\.5 is older"):
        provider.diff("tenant-a", olds, {**olds, "control_plane": "v1.35.5"})
    assert provider.diff("tenant-a", olds, {**olds, "control_plane": "v1.36.1"}).changes is False
    # Reordered tenants move the key, which is no change.
    assert provider.diff("tenant-a", olds, {**olds, "version_key": "tenants[1].kubernetesVersion"}).changes is False
    upgraded = {**olds, "control_plane": "v1.35.0"}
    assert provider.diff("tenant-a", upgraded, olds).changes is True


def test_a_node_image_newer_than_the_control_plane_is_a_config_error():
    stack = reference_stack()
    tenant = stack["tenants"][0]
    tenant["nodeImage"] = "kindest/node:v1.36.1@sha256:" + "0" * 64
    with pytest.raises(ConfigError) as error:
        load_stack_config(stack)
    message = str(error.value)
    assert "tenants[0].nodeImage" in message and "newer than the control plane v1.35.0" in message
    tenant["kubernetesVersion"] = "v1.36.1"
    load_stack_config(stack)
    tenant["nodeImage"] = "kindest/node:v1.35.5@sha256:" + "0" * 64  # older kubelets are allowed
    load_stack_config(stack)


# --------------------------------------------------------------------------- #
# On the simulator: refused before anything moves
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def lab_at_v1_35_5():
    """The one-tenant lab (one_tenant_stack) with tenant-a at v1.35.5, after its first `up`: what these tests refuse
    is tenant-a's alone."""
    stack = one_tenant_stack()
    stack["tenants"][0]["kubernetesVersion"] = "v1.35.5"
    sim = kind_lab(stack)
    sim.up()
    return sim


def test_a_downgrade_is_refused_in_the_preview_and_nothing_changes(lab_at_v1_35_5):
    sim = lab_at_v1_35_5.fork()
    def state():
        return {urn: comparable((r.inputs, r.outputs)) for urn, r in sim.engine.state.items()}

    before = state()
    containers = copy.deepcopy(sim.world.docker.containers)
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.35.0"
    for run in (sim.preview, lambda **kw: sim.up(skip_preview=True, **kw)):
        plan = run(expect_error=True)
        assert plan.error is not None and "tenant-a-version" in plan.error, plan.render()
        assert f"{KEY}: v1.35.0 is older than v1.35.5" in plan.error
        assert "Allowed: keep v1.35.5 (what the tenant runs), or upgrade to v1.36.1" in plan.error
        assert plan.changed() == {}, plan.render()
    assert state() == before
    assert sim.world.docker.containers == containers


def test_a_version_kamaji_does_not_accept_is_a_config_error_before_any_resource(lab_at_v1_35_5):
    sim = lab_at_v1_35_5.fork()
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.37.0"
    plan = sim.preview(expect_error=True)
    assert plan.error is not None and KEY in plan.error, plan.render()
    assert [s for s in plan.steps if not s.component] == [], plan.render()


def test_the_simulated_kamaji_webhook_refuses_what_tcp_version_go_refuses(lab_at_v1_35_5):
    """The rules the simulator's Kamaji applies on UPDATE (clastix/kamaji 26.8.2-edge tcp_version.go OnUpdate)."""
    sim = lab_at_v1_35_5.fork()
    api = sim.world.kind["gpu-tenancy"].api
    tcp = api.find("TenantControlPlane", "tenant-a", "tenant-a")

    def update(version):
        changed = copy.deepcopy(tcp)
        changed["spec"]["kubernetes"]["version"] = version
        return api.update(None, changed, dry_run=True)

    assert update("v1.35.0")["spec"]["kubernetes"]["version"] == "v1.35.0"  # patch versions are not compared
    assert update("v1.36.1")["spec"]["kubernetes"]["version"] == "v1.36.1"
    with pytest.raises(ApiError, match="greater than the supported one"):
        update("v1.37.0")
    with pytest.raises(ApiError, match="unable to downgrade a TenantControlPlane from 1.35.0 to 1.34.0"):
        update("v1.34.9")
    tcp["spec"]["kubernetes"]["version"] = "v1.34.0"
    api.objects[("TenantControlPlane", "tenant-a", "tenant-a")] = copy.deepcopy(tcp)
    with pytest.raises(ApiError, match="non-sequential mode"):
        update("v1.36.1")


# --------------------------------------------------------------------------- #
# On the simulator: the roll
# --------------------------------------------------------------------------- #

CARD_A1 = {"uuid": "GPU-MOCK-A1", "model": "NVIDIA-A100", "memoryMiB": 8192, "cores": 100, "slots": 10}


def with_two_workers(stack):
    stack["tenants"][0]["workers"].append({"name": "worker-1", "gpus": [dict(CARD_A1)]})
    return stack


@pytest.fixture(scope="module")
def two_workers():
    """The one-tenant lab (one_tenant_stack) with a second worker in tenant-a, at v1.35.0, after its first `up`: for
    what happens inside tenant-a's roll."""
    sim = kind_lab(with_two_workers(one_tenant_stack()))
    sim.up()
    return sim


@pytest.fixture(scope="module")
def two_workers_beside_tenant_b():
    """The reference lab with a second worker in tenant-a, at v1.35.0, after its first `up`: tenant-b is there to
    be left alone."""
    sim = kind_lab(with_two_workers(reference_stack()))
    sim.up()
    return sim


def tenant_api(sim, name="tenant-a"):
    return next(t.api for t in sim.world.tenants.values() if t.name == name)


def out_of_service(sim) -> set[str]:
    """tenant-a's workers that take no new pod now: no Node, cordoned, or not Ready."""
    nodes = {n["metadata"]["name"]: n for n in tenant_api(sim).list("Node")}
    out = set()
    for name in ("tenant-a-worker-0", "tenant-a-worker-1"):
        node = nodes.get(name)
        conditions = {c["type"]: c["status"] for c in ((node or {}).get("status") or {}).get("conditions") or []}
        if node is None or (node.get("spec") or {}).get("unschedulable") or conditions.get("Ready") != "True":
            out.add(name)
    return out


def watch_workers(sim, monkeypatch) -> list[set[str]]:
    """Every change of tenant-a's API records which of its workers are out of service right after it."""
    from tests.support.sim import world as sim_world

    seen: list[set[str]] = []
    react, remove = sim_world.KubeApi._react, sim_world.KubeApi.remove

    def observed(method):
        def run(self, *args, **kwargs):
            result = method(self, *args, **kwargs)
            if any(t.name == "tenant-a" and t.api is self for t in sim.world.tenants.values()):
                seen.append(out_of_service(sim))
            return result
        return run

    monkeypatch.setattr(sim_world.KubeApi, "_react", observed(react))
    monkeypatch.setattr(sim_world.KubeApi, "remove", observed(remove))
    return seen


def order(plan, *names: str) -> list[int]:
    """Where each named resource's (last) step is in the plan."""
    steps = [s.name for s in plan.steps]
    return [len(steps) - 1 - steps[::-1].index(name) for name in names]


@pytest.fixture(scope="module")
def tenant_a_upgraded(two_workers_beside_tenant_b):
    """two_workers_beside_tenant_b with tenant-a raised to v1.36.1, each step run once for the tests that read it:
    the preview; the `up` after it (skip_preview: that preview is its own), with what tenant-a's API showed after
    each change (watch_workers, from after the preview) and each drain as it started (watch_drains, from before the
    preview); `sim`, the stack and machine right after that `up`; and `again`, the `up` after it (on a fork)."""
    sim = two_workers_beside_tenant_b.fork()
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.36.1"
    with pytest.MonkeyPatch.context() as monkeypatch:
        drains = watch_drains(sim, monkeypatch)
        preview = sim.preview()
        seen = watch_workers(sim, monkeypatch)
        plan = sim.up(skip_preview=True)
    again = sim.fork().up()
    return SimpleNamespace(sim=sim, preview=preview, plan=plan, seen=seen, drains=drains, again=again)


def test_an_upgrade_moves_the_control_plane_then_kube_proxy_then_one_worker_at_a_time(tenant_a_upgraded):
    sim, preview, plan, seen = (tenant_a_upgraded.sim, tenant_a_upgraded.preview, tenant_a_upgraded.plan,
                                tenant_a_upgraded.seen)
    assert set(changed_by_owner(preview, tenant_names(sim.config))) == {"tenant-a"}, preview.render()
    assert set(changed_by_owner(plan, tenant_names(sim.config))) == {"tenant-a"}, plan.render()
    positions = order(plan, "tenant-a-version", "tenant-a-tcp", "tenant-a-kube-proxy-daemonset",
                      "tenant-a-worker-0-drain", "tenant-a-worker-0-container", "tenant-a-worker-0-ready",
                      "tenant-a-worker-1-drain", "tenant-a-worker-1-container", "tenant-a-worker-1-ready")
    assert positions == sorted(positions), plan.render()
    # HAMi and the proof wait for every worker's registration (through the tunnel), not for its readiness: the two
    # run side by side, in whichever order the engine gets to them.
    hami = order(plan, "tenant-a-worker-1-registered", "tenant-a-konnectivity-ready", "tenant-a-hami",
                 "tenant-a-gpu-smoke-test")
    assert hami == sorted(hami), plan.render()
    assert seen and all(len(out) <= 1 for out in seen), [out for out in seen if len(out) > 1]
    assert {"tenant-a-worker-0"} in seen and {"tenant-a-worker-1"} in seen  # each was out once
    assert out_of_service(sim) == set()
    tenant = sim.output("tenants")["tenant-a"]
    assert tenant["nodeVersions"] == {"tenant-a-worker-0": "v1.36.1", "tenant-a-worker-1": "v1.36.1"}
    assert tenant["smokeTest"]["schedulerName"] == "hami-scheduler"  # the proof ran again on the new version
    assert sim.output("tenants")["tenant-b"]["nodeVersions"] == {"tenant-b-worker-0": "v1.35.0"}
    assert tenant_a_upgraded.again.changed() == {}


def test_a_containers_new_image_is_pulled_before_its_drain(tenant_a_upgraded):
    plan = tenant_a_upgraded.plan
    steps = [(s.name, s.op) for s in plan.steps]
    for worker in ("tenant-a-worker-0", "tenant-a-worker-1"):
        assert steps.index((f"{worker}-image", "replace")) < steps.index((f"{worker}-drain", "update")), plan.render()


def test_a_drain_blocked_by_a_disruption_budget_names_the_pod_and_the_next_up_finishes(two_workers):
    sim = two_workers.fork()
    api = tenant_api(sim)
    block_drain(api, "tenant-a-worker-1")
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.36.1"
    plan = sim.up(expect_error=True)
    assert plan.error is not None and "tenant-a-worker-1-drain" in plan.error, plan.render()
    assert ("pod default/db-0 (Cannot evict pod as it would violate the pod's disruption budget. The disruption "
            "budget db needs 1 healthy pods and has 1 currently)") in plan.error
    assert "run `make up` again" in plan.error
    # Worker 0 is done, worker 1 is cordoned with the pod still on it; the preview shows what is left.
    assert out_of_service(sim) == {"tenant-a-worker-1"}
    assert api.find("Pod", "default", "db-0") is not None
    left = sim.preview()
    changed = changed_by_owner(left, tenant_names(sim.config))
    assert set(changed) == {"tenant-a"}, left.render()
    assert "tenant-a-worker-1-drain" in changed["tenant-a"]["update"]
    assert "tenant-a-worker-1-container" in changed["tenant-a"]["replace"]
    assert not {"tenant-a-tcp", "tenant-a-worker-0-drain", "tenant-a-worker-0-ready"} & \
        set().union(*changed["tenant-a"].values()), left.render()
    # The budget allows one disruption now: the next `up` drains worker 1 and finishes.
    api.find("PodDisruptionBudget", "default", "db")["status"]["disruptionsAllowed"] = 1
    sim.up()
    assert api.find("Pod", "default", "db-0") is None
    assert sim.output("tenants")["tenant-a"]["nodeVersions"] == {
        "tenant-a-worker-0": "v1.36.1", "tenant-a-worker-1": "v1.36.1"}
    assert out_of_service(sim) == set()


def test_a_drain_leaves_daemonset_and_mirror_pods_and_takes_the_rest():
    def pod(name, node="w0", **metadata):
        return {"metadata": {"name": name, "namespace": "default", **metadata}, "spec": {"nodeName": node}}

    pods = [pod("web"), pod("bare"), pod("elsewhere", node="w1"),
            pod("agent", ownerReferences=[{"kind": "DaemonSet", "name": "calico-node"}]),
            pod("static", annotations={worker_operations.MIRROR_POD_ANNOTATION: "x"}),
            pod("job", ownerReferences=[{"kind": "Job", "name": "batch"}])]
    assert [p["metadata"]["name"] for p in worker_operations._drained_pods(pods, "w0")] == ["web", "bare", "job"]


def test_the_simulated_eviction_applies_the_budgets_as_eviction_go_does(two_workers):
    sim = two_workers.fork()
    api = tenant_api(sim)

    def pod(name, phase="Running", **labels):
        api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                                 "labels": labels},
                 "spec": {"nodeName": "tenant-a-worker-0"}, "status": {"phase": phase}})

    def budget(name, selector, **status):
        api.put({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                 "metadata": {"name": name, "namespace": "default", "generation": 2},
                 "spec": {"selector": selector}, "status": status})

    budget("one", {"matchLabels": {"app": "one"}}, observedGeneration=2, disruptionsAllowed=1)
    pod("one-a", app="one")
    pod("one-b", app="one")
    api.evict(None, "default", "one-a")  # takes the one allowed disruption
    with pytest.raises(ApiError, match="would violate the pod's disruption budget") as refused:
        api.evict(None, "default", "one-b")
    assert refused.value.status == 429
    pod("done", phase="Succeeded", app="one")
    api.evict(None, "default", "done")  # a terminal pod goes without asking the budget
    budget("stale", {"matchLabels": {"app": "stale"}}, observedGeneration=1, disruptionsAllowed=5)
    pod("stale-a", app="stale")
    with pytest.raises(ApiError, match="disruption budget"):
        api.evict(None, "default", "stale-a")  # the budget has not caught up with its generation
    budget("twice", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["one"]}]},
           observedGeneration=2, disruptionsAllowed=1)
    with pytest.raises(ApiError, match="more than one PodDisruptionBudget"):
        api.evict(None, "default", "one-b")
    budget("empty", {}, observedGeneration=2, disruptionsAllowed=0)  # matches nothing
    pod("free", app="free")
    api.evict(None, "default", "free")
    budget("unknown", {"matchLabels": {"app": "unknown"}})
    pod("unknown-a", app="unknown")
    with pytest.raises(ApiError, match="no disruption controller"):
        api.evict(None, "default", "unknown-a")
    assert {p["metadata"]["name"] for p in api.list("Pod", "default")} >= {"one-b", "stale-a", "unknown-a"}
    assert not {"one-a", "done", "free"} & {p["metadata"]["name"] for p in api.list("Pod", "default")}


# --------------------------------------------------------------------------- #
# On the simulator: SSH workers (components/worker/scripts/node-upgrade.sh)
# --------------------------------------------------------------------------- #

VISION = "team-vision"
VISION_SERVERS = {"team-vision-gpu-01": "10.20.1.11", "team-vision-gpu-02": "10.20.1.12"}


def set_packages(sim, host: str, version: str, manager: str) -> None:
    machine = sim.world.ssh[host].machine
    machine.kubeadm_version = machine.kubelet_version = version
    machine.package_manager = manager


def adopted_at_v1_35_0(*, one_tenant: bool):
    """The production example (existing cluster, SSH-joined GPU servers with kubeadm and kubelet v1.35.0; apt on
    team-vision's gpu-01, dnf on the other servers), after its first `up`; team-vision alone with `one_tenant`."""
    sim = adopt_lab(one_tenant=one_tenant)
    for host in sim.world.ssh:
        set_packages(sim, host, "v1.35.0", "apt" if host == VISION_SERVERS["team-vision-gpu-01"] else "dnf")
    sim.up()
    return sim


@pytest.fixture(scope="module")
def vision_beside_speech_at_v1_35_0():
    """adopted_at_v1_35_0 with both tenants: team-speech is there to be left alone."""
    return adopted_at_v1_35_0(one_tenant=False)


@pytest.fixture(scope="module")
def vision_at_v1_35_0():
    """adopted_at_v1_35_0 with team-vision alone, for what happens on its servers."""
    return adopted_at_v1_35_0(one_tenant=True)


def unschedulable(sim, tenant: str, nodes) -> set[str]:
    """The tenant's Nodes that take no new pod now: missing, cordoned or not Ready."""
    api = tenant_api(sim, tenant)
    out = set()
    for name in nodes:
        node = api.find("Node", None, name)
        conditions = {c["type"]: c["status"] for c in ((node or {}).get("status") or {}).get("conditions") or []}
        if node is None or (node.get("spec") or {}).get("unschedulable") or conditions.get("Ready") != "True":
            out.add(name)
    return out


def kubelet_versions(sim, tenant: str) -> dict[str, str | None]:
    return {n["metadata"]["name"]: ((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")
            for n in tenant_api(sim, tenant).list("Node")}


def test_an_ssh_worker_is_upgraded_once_its_packages_are_installed_one_server_at_a_time(
        vision_beside_speech_at_v1_35_0, monkeypatch):
    from tests.support.sim import world as sim_world

    sim = vision_beside_speech_at_v1_35_0.fork()
    assert kubelet_versions(sim, VISION) == dict.fromkeys(VISION_SERVERS, "v1.35.0")
    speech_before = {urn: comparable((r.inputs, r.outputs)) for urn, r in sim.engine.state.items()
                     if "team-speech" in urn}
    seen: list[set[str]] = []
    react = sim_world.KubeApi._react

    def observed(self, *args, **kwargs):
        result = react(self, *args, **kwargs)
        if self is tenant_api(sim, VISION):
            seen.append(unschedulable(sim, VISION, VISION_SERVERS))
        return result

    monkeypatch.setattr(sim_world.KubeApi, "_react", observed)
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.36.1"
    # gpu-02 has the new packages already; gpu-01, the first in the roll, does not.
    set_packages(sim, VISION_SERVERS["team-vision-gpu-02"], "v1.36.1", "dnf")
    preview = sim.preview()
    changed = changed_by_owner(preview, tenant_names(sim.config))
    assert set(changed) == {VISION}, preview.render()
    assert {"team-vision-gpu-01-upgrade", "team-vision-gpu-02-upgrade"} <= changed[VISION]["update"]

    plan = sim.up(skip_preview=True, expect_error=True)  # `preview` is its preview
    assert plan.error is not None and "team-vision-gpu-01-upgrade" in plan.error, plan.render()
    assert "cannot upgrade to v1.36.1: this server has kubeadm v1.35.0 and kubelet v1.35.0" in plan.error
    assert "sudo apt-get install -y kubeadm=1.36.1-1.1 kubelet=1.36.1-1.1" in plan.error
    assert "The Node stays cordoned (drained) until then; run make up again" in plan.error
    # gpu-01 is drained and cordoned at its old kubelet; gpu-02 was never drained; the other tenant is untouched.
    assert unschedulable(sim, VISION, VISION_SERVERS) == {"team-vision-gpu-01"}
    assert kubelet_versions(sim, VISION) == dict.fromkeys(VISION_SERVERS, "v1.35.0")
    assert {urn: comparable((r.inputs, r.outputs)) for urn, r in sim.engine.state.items()
            if "team-speech" in urn} == speech_before
    left = changed_by_owner(sim.preview(), tenant_names(sim.config))
    assert {"team-vision-gpu-01-upgrade", "team-vision-gpu-01-ready", "team-vision-gpu-02-drain"} \
        <= set().union(*left[VISION].values())

    # The operator installs them (what the message says); the next `up` goes on from gpu-01.
    set_packages(sim, VISION_SERVERS["team-vision-gpu-01"], "v1.36.1", "apt")
    plan = sim.up()
    positions = order(plan, "team-vision-gpu-01-drain", "team-vision-gpu-01-upgrade", "team-vision-gpu-01-ready",
                      "team-vision-gpu-02-drain", "team-vision-gpu-02-upgrade", "team-vision-gpu-02-ready")
    assert positions == sorted(positions), plan.render()
    assert kubelet_versions(sim, VISION) == dict.fromkeys(VISION_SERVERS, "v1.36.1")
    assert sim.output("tenants")[VISION]["nodeVersions"] == dict.fromkeys(VISION_SERVERS, "v1.36.1")
    assert unschedulable(sim, VISION, VISION_SERVERS) == set()
    assert seen and all(len(out) <= 1 for out in seen), [out for out in seen if len(out) > 1]
    assert {"team-vision-gpu-01"} in seen and {"team-vision-gpu-02"} in seen
    assert {sim.world.ssh[host].machine.kubelet_config_version for host in VISION_SERVERS.values()} == {"v1.36.1"}
    assert sim.up().changed() == {}


def test_a_stack_from_before_the_upgrade_step_that_raises_the_version_finishes_and_keeps_its_kubelets(
        vision_at_v1_35_0):
    """A stack created before `<node>-upgrade` existed: its servers have no record, and the first `up` of the new
    program also raises the version. `<node>-upgrade` is created (record mode), records the servers, and
    `<node>-ready` waits for no new kubelet (the script did not upgrade): the `up` finishes, the servers keep
    v1.35.0 (within the skew policy), and nothing is left stuck. CHANGELOG.md: run one `up` first, or upgrade by hand."""
    sim = vision_at_v1_35_0.fork()
    for urn in [urn for urn, r in sim.engine.state.items() if r.name.endswith("-upgrade")]:
        del sim.engine.state[urn]
    for host in sim.world.ssh.values():
        host.machine.kubelet_config_version = None
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.36.1"
    sim.up()
    assert kubelet_versions(sim, VISION) == dict.fromkeys(VISION_SERVERS, "v1.35.0")
    assert unschedulable(sim, VISION, VISION_SERVERS) == set()
    assert all(plain(sim.resource(f"{node}-ready").inputs["kubelet_version"]) is None for node in VISION_SERVERS)
    assert sim.up().changed() == {}


# --------------------------------------------------------------------------- #
# The simulator's kubelet, which the waits below read
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def gpu_servers():
    """The production example's first tenant (gpuMode nvidia, two SSH GPU servers) after its first `up`: what these
    tests look at happens on one tenant's servers."""
    return running_adopt_lab(one_tenant=True, races=False)


def test_the_simulated_kubelet_copies_extended_capacity_into_allocatable(two_workers):
    """kubernetes pkg/kubelet/nodestatus/setters.go MachineInfo: capacity others wrote is kept, each entry is copied
    into allocatable, and an extended resource gone from capacity leaves allocatable."""
    sim = two_workers.fork()
    api = tenant_api(sim)
    status = api.find("Node", None, "tenant-a-worker-0")["status"]
    status["capacity"].update({"nvidia.com/gpu": "7", "example.com/x": "2"})  # written by someone, capacity only
    status["allocatable"]["cpu"] = "3"
    systems.refresh_nodes(sim.world, api)  # the kubelet's next status update
    assert status["allocatable"]["nvidia.com/gpu"] == "7" and status["allocatable"]["example.com/x"] == "2"
    assert status["allocatable"]["cpu"] == "3"  # not an extended resource: the simulator leaves it alone
    del status["capacity"]["nvidia.com/gpu"]
    systems.refresh_nodes(sim.world, api)
    # Gone from allocatable too, and so are the mock plugin's resources, which need the capacity.
    assert not {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"} & set(status["allocatable"])


def test_the_simulated_nvidia_plugin_registers_only_where_it_can_run(gpu_servers):
    """HAMi's device plugin registers `nvidia.com/gpu` with the kubelet (Project-HAMi/HAMi v2.10.0
    pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go Register, ListAndWatch: cards x deviceSplitCount);
    where it cannot run any more, the kubelet keeps the resource at 0 (setters.go MachineInfo
    removedDevicePlugins), and allocatable follows."""
    sim = gpu_servers.fork()
    tenant = sim.config["tenants"][0]
    node = f"{tenant['name']}-{tenant['workers'][0]['name']}"
    api = sim.world.tenant_api(tenant["name"])
    status = api.find("Node", None, node)["status"]
    assert status["capacity"]["nvidia.com/gpu"] == status["allocatable"]["nvidia.com/gpu"] == "20"
    sim.world.machines[node].nvidia_missing = {"driver"}
    systems.refresh_nodes(sim.world, api)
    status = api.find("Node", None, node)["status"]
    assert status["capacity"]["nvidia.com/gpu"] == status["allocatable"]["nvidia.com/gpu"] == "0"
    sim.world.machines[node].nvidia_missing = set()
    systems.refresh_nodes(sim.world, api)
    assert api.find("Node", None, node)["status"]["allocatable"]["nvidia.com/gpu"] == "20"


# --------------------------------------------------------------------------- #
# On the simulator: a worker is back in service only with its cards
# --------------------------------------------------------------------------- #


def not_back(sim, tenant: str, node: str) -> str | None:
    """What keeps the worker out of service (None: back): its Node missing, not Ready, on another kubelet than its
    tenant's version, or without its cards (judged as `<node>-ready` judges)."""
    found = sim.world.tenant_api(tenant).find("Node", None, node)
    if found is None:
        return "no Node"
    status = found.get("status") or {}
    ready = next((c["status"] for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
    kubelet = (status.get("nodeInfo") or {}).get("kubeletVersion")
    wanted = next(t["kubernetesVersion"] for t in sim.config["tenants"] if t["name"] == tenant)
    if ready != "True" or kubelet != wanted:
        return f"Ready {ready}, kubelet {kubelet}"
    cards = plain(sim.resource(f"{node}-ready").inputs.get("cards"))
    if cards and cards.get("mode") == "mock":
        # The join of the Node as it is now (a registration id is `<node>/<uid>`, NodeRegistrationProvider).
        cards = {**cards, "join": f"{node}/{found['metadata']['uid']}"}
    return worker_operations.cards_missing(found, cards)


def watch_drains(sim, monkeypatch) -> list[tuple[str, dict[str, str | None]]]:
    """Each drain as it starts: the Node drained, and what keeps every other worker of its tenant out of service
    right then (`not_back`: the world as the drain finds it)."""
    seen: list[tuple[str, dict[str, str | None]]] = []
    drain = worker_operations.NodeDrainProvider._drain

    def observed(provider, props):
        node = props["node_name"]
        tenant = next(t["name"] for t in sim.config["tenants"] if node.startswith(f"{t['name']}-"))
        others = [f"{tenant}-{w['name']}" for t in sim.config["tenants"] if t["name"] == tenant
                  for w in t["workers"] if f"{tenant}-{w['name']}" != node]
        seen.append((node, {other: not_back(sim, tenant, other) for other in others}))
        return drain(provider, props)

    monkeypatch.setattr(worker_operations.NodeDrainProvider, "_drain", observed)
    return seen


def waits_for(sim, name: str) -> set[str]:
    """The names of everything resource `name` depends on, directly or not (its state's dependencies, explicit and
    through its inputs): what Pulumi finishes before it starts `name`, however it runs the rest in parallel."""
    by_urn = {r.urn: r for r in sim.engine.state.values()}
    seen: set[str] = set()
    todo = list(sim.resource(name).all_dependencies())
    while todo:
        urn = todo.pop()
        if urn in seen or urn not in by_urn:
            continue
        seen.add(urn)
        todo += list(by_urn[urn].all_dependencies())
    return {by_urn[urn].name for urn in seen}


def test_the_next_drain_starts_only_once_the_previous_worker_advertises_its_cards(two_workers_beside_tenant_b,
                                                                                   tenant_a_upgraded):
    # The order does not rest on how the simulator happens to serialize steps: the next drain depends on the
    # previous worker's card resources, through its `-ready`.
    assert {"tenant-a-worker-0-ready", "tenant-a-worker-0-gpu-register", "tenant-a-worker-0-gpu-capacity"} <= \
        waits_for(two_workers_beside_tenant_b, "tenant-a-worker-1-drain")
    # The upgrade to v1.36.1, as tenant_a_upgraded ran it once.
    sim, plan, drains = tenant_a_upgraded.sim, tenant_a_upgraded.plan, tenant_a_upgraded.drains
    assert [node for node, _ in drains] == ["tenant-a-worker-0", "tenant-a-worker-1"], plan.render()
    # When worker-1's drain began, worker-0 was back with its cards, from its new join.
    assert drains[1][1] == {"tenant-a-worker-0": None}
    for worker in ("tenant-a-worker-0", "tenant-a-worker-1"):
        # The two card steps both follow the registration and precede `-ready`; between themselves they have no
        # dependency, so the engine runs them in parallel and either may finish first.
        registered, annotation, capacity, ready = order(plan, f"{worker}-registered", f"{worker}-gpu-register",
                                                        f"{worker}-gpu-capacity", f"{worker}-ready")
        assert registered < min(annotation, capacity) and max(annotation, capacity) < ready, plan.render()
    node = tenant_api(sim).find("Node", None, "tenant-a-worker-0")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == node["status"]["capacity"]["nvidia.com/gpu"] == "10"
    assert node["metadata"]["annotations"][JOIN_ANNOTATION] == sim.resource("tenant-a-worker-0-registered").id
    assert tenant_a_upgraded.again.changed() == {}


def test_a_rejoined_node_whose_capacity_never_lands_stops_the_up_and_the_next_up_goes_on(two_workers, monkeypatch):
    """The status write of worker-0's capacity is lost (the API takes it and it does not last): `<node>-ready`
    stops the update naming the Node and what is missing, worker-1 is not touched; the next `up` sees the
    capacity missing on the Node (GpuCapacity's diff), applies it again and finishes the roll."""
    from tests.support.sim import world as sim_world

    sim = two_workers.fork()
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.36.1"
    patch_status = sim_world.KubeApi.patch_status

    def lost(self, identity, kind, name, patch):
        if kind == "Node" and name == "tenant-a-worker-0":
            return copy.deepcopy(self.objects.get(("Node", None, name)))
        return patch_status(self, identity, kind, name, patch)

    monkeypatch.setattr(sim_world.KubeApi, "patch_status", lost)
    drains = watch_drains(sim, monkeypatch)
    plan = sim.up(expect_error=True)
    assert plan.error is not None and "tenant-a-worker-0-ready" in plan.error, plan.render()
    # As docs/operations.md "Upgrading a tenant" shows it.
    assert "tenant-a-worker-0-ready: gave up after 300s: Node tenant-a-worker-0 does not advertise its cards: " \
           "nvidia.com/gpu capacity None, not 10; nvidia.com/gpu allocatable None, not 10. The next worker is not " \
           "drained until this one is back; check the kubelet on tenant-a-worker-0 (journalctl -u kubelet) and run " \
           "`make up` again" in plan.error, plan.error
    assert [node for node, _ in drains] == ["tenant-a-worker-0"]
    assert sim.output("tenants")["tenant-a"]["nodeVersions"]["tenant-a-worker-1"] == "v1.35.0"

    monkeypatch.setattr(sim_world.KubeApi, "patch_status", patch_status)
    left = sim.preview()
    changed = changed_by_owner(left, tenant_names(sim.config))
    assert {"tenant-a-worker-0-gpu-capacity", "tenant-a-worker-0-ready", "tenant-a-worker-1-drain"} <= \
        changed["tenant-a"]["update"], left.render()
    plan = sim.up(skip_preview=True)  # `left` is its preview
    assert [node for node, _ in drains] == ["tenant-a-worker-0", "tenant-a-worker-1"], plan.render()
    assert drains[1][1] == {"tenant-a-worker-0": None}
    assert sim.output("tenants")["tenant-a"]["nodeVersions"] == {
        "tenant-a-worker-0": "v1.36.1", "tenant-a-worker-1": "v1.36.1"}
    assert sim.up().changed() == {}


def test_a_rejoined_node_whose_kubelet_stops_posting_stops_the_roll_there(two_workers, monkeypatch):
    """worker-0's new container stops right after its Node registered: its kubelet posts nothing more, the node
    lifecycle controller turns the Node's Ready to Unknown, and `<node>-ready` holds worker-1 back."""
    sim = two_workers.fork()
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.36.1"
    create = worker_operations.NodeRegistrationProvider.create

    def registered_then_stopped(provider, props):
        result = create(provider, props)
        if props["node_name"] == "tenant-a-worker-0":
            sim.world.docker.containers["tenant-a-worker-0"].running = False
        return result

    monkeypatch.setattr(worker_operations.NodeRegistrationProvider, "create", registered_then_stopped)
    drains = watch_drains(sim, monkeypatch)
    plan = sim.up(expect_error=True)
    assert plan.error is not None and "tenant-a-worker-0-ready: gave up after 300s: Node tenant-a-worker-0 is not " \
        "Ready" in plan.error, plan.render()
    assert [node for node, _ in drains] == ["tenant-a-worker-0"]
    assert not_back(sim, "tenant-a", "tenant-a-worker-0") == "Ready Unknown, kubelet v1.36.1"


def test_the_wait_refuses_a_node_registered_before_the_upgrade(two_workers):
    """The Node `<node>-ready` finds must be the one `<node>-registered` saw register after the rejoin: another
    object of the same name (Ready, even at the new version) is not the upgraded worker. The engine's order (the old
    membership deletes the old Node before the new join) keeps one from the program; this is the wait's own guard."""
    from tests.support.sim import hostapi

    sim = two_workers.fork()
    node = tenant_api(sim).find("Node", None, "tenant-a-worker-1")
    node["spec"] = {"unschedulable": True}
    node["status"]["nodeInfo"]["kubeletVersion"] = "v1.36.1"
    ready = sim.resource("tenant-a-worker-1-ready")
    props = {**plain(ready.outputs), "version": "v1.36.1", "kubelet_version": "v1.36.1", "cards": None,
             "registration": "tenant-a-worker-1/the-uid-registered-after-the-upgrade"}
    provider = hostapi.attach(worker_operations.NodeReadyProvider(), sim.world)
    with pytest.raises(RuntimeError, match="Node tenant-a-worker-1 is not the one that registered after the upgrade"):
        provider.update(ready.id, plain(ready.outputs), props)
    assert tenant_api(sim).find("Node", None, "tenant-a-worker-1")["spec"]["unschedulable"] is True


def install_everywhere(sim, version: str) -> None:
    """The owner installed kubeadm and kubelet `version` on every server before the `up` (node-upgrade.sh checks)."""
    for host in sim.world.ssh:
        set_packages(sim, host, version, "apt")


def test_in_nvidia_mode_the_next_drain_waits_for_the_device_plugins_gpus(gpu_servers, monkeypatch):
    sim = gpu_servers.fork()
    tenant = sim.config["tenants"][0]
    first, second = (f"{tenant['name']}-{w['name']}" for w in tenant["workers"])
    tenant["kubernetesVersion"] = "v1.36.1"
    install_everywhere(sim, "v1.36.1")
    drains = watch_drains(sim, monkeypatch)
    plan = sim.up()
    assert [node for node, _ in drains] == [first, second], plan.render()
    assert drains[1][1] == {first: None}
    # A drained server keeps advertising its cards, so the watch above cannot tell a concurrent drain: what orders
    # the second drain after the first server is back is the dependency Pulumi waits for.
    assert f"{first}-ready" in waits_for(sim, f"{second}-drain")
    assert plain(sim.resource(f"{first}-ready").inputs["cards"]) == {"mode": "nvidia"}
    assert sim.up().changed() == {}


def test_in_nvidia_mode_a_server_whose_plugin_stops_advertising_stops_the_roll_there(gpu_servers, monkeypatch):
    """Another device plugin starts on the first server while it is drained (its join, finding the server joined,
    does not look for one): HAMi's device plugin cannot register there, the kubelet reports `nvidia.com/gpu` 0 (the
    simulator, after kubernetes setters.go MachineInfo), and `<node>-ready` stops the update naming the Node and
    the plugin; the second server is not drained. With that plugin gone, the next `up` finishes. (A lost driver
    stops the roll earlier, at the join's own checks.)"""
    sim = gpu_servers.fork()
    tenant = sim.config["tenants"][0]
    first, second = (f"{tenant['name']}-{w['name']}" for w in tenant["workers"])
    tenant["kubernetesVersion"] = "v1.36.1"
    install_everywhere(sim, "v1.36.1")
    machine = sim.world.machines[first]
    drains = watch_drains(sim, monkeypatch)
    drain = worker_operations.NodeDrainProvider._drain

    def driver_lost(provider, props):
        drain(provider, props)
        if props["node_name"] == first:
            machine.nvidia_missing = {"other device plugin"}
            systems.refresh_nodes(sim.world, sim.world.tenant_api(tenant["name"]))  # the kubelet's next status

    monkeypatch.setattr(worker_operations.NodeDrainProvider, "_drain", driver_lost)
    plan = sim.up(expect_error=True)
    assert plan.error is not None and f"{first}-ready" in plan.error, plan.render()
    assert f"Node {first} advertises no nvidia.com/gpu (allocatable '0'): HAMi's device plugin has not registered " \
           "its cards there" in plan.error
    assert [node for node, _ in drains] == [first]

    machine.nvidia_missing = set()
    plan = sim.up()
    assert [node for node, _ in drains] == [first, second], plan.render()
    assert drains[1][1] == {first: None}
    assert sim.up().changed() == {}


def as_before_issue_23_deliverable_2(sim) -> None:
    """The state as the program before the card waits and the one-worker warning left it: `<node>-ready` without
    `cards` and without depending on the card resources, `<node>-drain` without `tenant`/`tenant_workers`. The
    URNs and parents are the same (the card resources keep their names and their TenantGpus parent)."""
    cards = {r.urn for r in sim.engine.state.values()
             if r.name.endswith(("-gpu-register", "-gpu-capacity", "-gpu-label"))}
    for resource in sim.engine.state.values():
        dropped = {"NodeReady": ("cards",), "NodeDrain": ("tenant", "tenant_workers")}.get(
            resource.type.rpartition(":")[2], ())
        for key in dropped:
            resource.inputs.pop(key, None)
            resource.outputs.pop(key, None)
        if dropped:
            resource.dependencies = [urn for urn in resource.dependencies if urn not in cards]


def test_a_running_stack_of_the_previous_program_sees_no_change(two_workers):
    sim = two_workers.fork()
    as_before_issue_23_deliverable_2(sim)
    assert "cards" not in sim.resource("tenant-a-worker-0-ready").inputs
    preview = sim.preview()
    assert preview.changed() == {} and preview.diagnostics == [], preview.render()
    assert sim.up(skip_preview=True).changed() == {}  # `preview` is its preview
    assert sim.up().changed() == {}


# --------------------------------------------------------------------------- #
# A tenant with one worker says so in the preview
# --------------------------------------------------------------------------- #

def said(plan) -> list[str]:
    """Every diagnostic line of `plan`: the stack's, then each resource's."""
    return [*plan.diagnostics, *(line for lines in plan.resource_diagnostics.values() for line in lines)]


DRAIN_TYPE = "pulumi-python:dynamic/gpu-tenancy:NodeDrain"
ONE_WORKER = ("tenant tenant-a has one worker, tenant-a-worker-0: its upgrade from v1.35.0 to v1.36.1 drains it, "
              "so every workload of tenant tenant-a stops")


def test_the_provider_hosts_check_gives_the_drain_its_warning(tmp_path):
    """What the program shows comes from the real host: `python -m pulumi.dynamic` (what pulumi-resource-pulumi-python
    runs) answers Check with the stored inputs as olds (pulumi step_generator.go), and prints nothing. Only a version
    change of a tenant's only worker has a warning."""
    from pulumi.runtime import rpc

    from tests.support.sdk import host_struct, provider_host, provider_pb2, serialize_provider

    olds = {"kubeconfig": "unused", "node_name": "tenant-a-worker-0", "version": "v1.35.0", "tenant": "tenant-a",
            "tenant_workers": 1, "__provider": serialize_provider(worker_operations.NodeDrainProvider())}
    two = {**olds, "tenant_workers": 2}
    with (tmp_path / "stderr").open("w") as stderr, provider_host(ROOT, stderr) as host:
        answers = [rpc.deserialize_properties(host.Check(provider_pb2.CheckRequest(
                       urn="urn", olds=host_struct(old), news=host_struct(news))).inputs).get("warning")
                   for old, news in ((olds, {**olds, "version": "v1.36.1"}),  # the only worker: warned
                                     (two, {**two, "version": "v1.36.1"}),  # one of two: not
                                     (olds, {**olds, "tenant_workers": 1.0}),  # no upgrade: not
                                     ({}, {**olds, "version": "v1.36.1"}))]  # a new worker: not
    assert answers[0].startswith(ONE_WORKER) and answers[1:] == [None, None, None], answers
    assert (tmp_path / "stderr").read_text() == ""


def test_the_preview_of_a_one_worker_tenants_upgrade_warns_on_the_drain_that_its_workloads_stop():
    sim = running_kind_lab()  # each tenant has one worker; tenant-b's, not upgraded, is not warned about
    assert said(sim.preview()) == []  # no upgrade planned: nothing to say
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.36.1"
    preview = sim.preview()
    [warning] = preview.resource_diagnostics["tenant-a-worker-0-drain"]
    assert said(preview) == [warning], preview.render()
    assert warning.startswith(f"warning: {ONE_WORKER} until tenant-a-worker-0 is back"), preview.render()
    assert "Add a worker first to keep them running" in warning
    assert f"Diagnostics:\n  {DRAIN_TYPE} (tenant-a-worker-0-drain):\n    {warning}" in preview.render()
    assert "tenant-b" not in warning
    plan = sim.up(skip_preview=True)
    assert said(plan) == []  # said once: the update's outputs hold no warning
    assert said(sim.preview()) == []  # done: nothing left to say


@pytest.mark.repo
def test_the_docs_show_the_one_worker_warning_as_the_preview_prints_it():
    warning = worker_operations.one_worker_warning("tenant-a", "tenant-a-worker-0", "v1.35.0", "v1.36.1")
    assert f"Diagnostics:\n  {DRAIN_TYPE} (tenant-a-worker-0-drain):\n    warning: {warning}\n" in all_text()


def test_a_worker_added_in_the_same_up_as_the_upgrade_does_not_keep_the_workloads_running():
    """The new worker joins only after the old one is back (each worker waits for the one before), so the old one is
    drained while it is the tenant's only Node: the preview warns although the config lists two workers."""
    sim = running_kind_lab(one_tenant=True)
    tenant = sim.config["tenants"][0]
    tenant["kubernetesVersion"] = "v1.36.1"
    tenant["workers"].append({"name": "worker-1"})
    [warning] = said(sim.preview())
    assert warning.startswith(f"warning: {ONE_WORKER}"), warning


def test_the_warning_follows_workers_added_or_removed_in_an_up_of_their_own():
    sim = running_kind_lab(one_tenant=True)
    tenant = sim.config["tenants"][0]
    tenant["workers"].append({"name": "worker-1"})
    sim.up()
    tenant["kubernetesVersion"] = "v1.36.1"
    assert said(sim.preview()) == []  # two workers now: the other keeps the workloads running
    tenant["kubernetesVersion"] = "v1.35.0"
    tenant["workers"].pop()
    sim.up()
    tenant["kubernetesVersion"] = "v1.36.1"
    [warning] = said(sim.preview())  # one again
    assert warning.startswith(f"warning: {ONE_WORKER}"), warning


def test_a_two_worker_tenants_upgrade_does_not_warn(tenant_a_upgraded):
    # The preview of tenant-a's upgrade to v1.36.1, as tenant_a_upgraded ran it once.
    assert said(tenant_a_upgraded.preview) == []


def test_a_one_worker_tenants_upgrade_stopped_at_its_drain_still_warns_in_the_next_preview():
    """The warning follows the drain still to come, not the version record: `<tenant>-version` is done after a
    blocked drain, the drain is not."""
    sim = running_kind_lab(one_tenant=True)
    api = tenant_api(sim)
    block_drain(api, "tenant-a-worker-0")
    sim.config["tenants"][0]["kubernetesVersion"] = "v1.36.1"
    plan = sim.up(expect_error=True)
    assert plan.error is not None and "tenant-a-worker-0-drain" in plan.error, plan.render()
    left = sim.preview()
    assert "tenant-a-version" not in left.names("update"), left.render()
    assert [line[:len(ONE_WORKER) + 9] for line in said(left)] == [f"warning: {ONE_WORKER}"], left.render()
