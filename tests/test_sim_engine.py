"""The lifecycle simulator's own rules, each against the upstream behaviour it models (see tests/support/sim).

Small programs, not the project's: one rule per test, so a wrong rule fails here first.
"""

from __future__ import annotations

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import pytest

from components.kube import ApiError
from tests.support.lifecycle_support import running_kind_lab
from tests.support.sim import Lifecycle, World, paths, systems
from tests.support.sim.providers import structural_diff
from tests.support.sim.state import UNKNOWN, plain

# --------------------------------------------------------------------------- #
# Property paths (pulumi/pulumi sdk/go/common/resource/properties_path.go)
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        # Examples from the parser's own doc comment.
        ("root", ("root",)),
        ("root.nested", ("root", "nested")),
        ('root["nested"]', ("root", "nested")),
        ('root["double"]["nest"]', ("root", "double", "nest")),
        ("root.array[0][1].nested", ("root", "array", 0, 1, "nested")),
        ('root["key with \\"escaped\\" quotes"]', ("root", 'key with "escaped" quotes')),
        ('root["key with a ."]', ("root", "key with a .")),
        ("root.array[*].field", ("root", "array", "*", "field")),
        # Bare names run to the next '.' or '[': a dotted annotation key splits.
        ("metadata.annotations.gpu-tenancy.io/join", ("metadata", "annotations", "gpu-tenancy", "io/join")),
        ('metadata.annotations["gpu-tenancy.io/join"]', ("metadata", "annotations", "gpu-tenancy.io/join")),
    ],
)
def test_property_path_grammar(text, segments):
    assert paths.parse(text) == segments


@pytest.mark.parametrize("bad", [".root", "root.", "root[0", 'root["x', "root[x]"])
def test_property_path_errors(bad):
    with pytest.raises(paths.PropertyPathError):
        paths.parse(bad)


def test_contains_is_a_prefix_match_with_wildcards():
    diff_key = paths.parse('metadata.annotations["gpu-tenancy.io/join"]')
    assert paths.contains(paths.parse('metadata.annotations["gpu-tenancy.io/join"]'), diff_key)
    assert paths.contains(paths.parse("metadata"), diff_key)
    assert not paths.contains(paths.parse("metadata.annotations.gpu-tenancy.io/join"), diff_key)
    assert paths.contains(paths.parse("triggers[*]"), paths.parse("triggers[2]"))
    assert not paths.contains(paths.parse("triggers[*]"), paths.parse("triggers"))


def test_render_quotes_keys_like_the_engine():
    assert paths.render(("metadata", "annotations", "gpu-tenancy.io/join")) == \
        'metadata.annotations["gpu-tenancy.io/join"]'
    assert paths.render(("spec", "containers", 0, "image")) == "spec.containers[0].image"


# --------------------------------------------------------------------------- #
# Diffs (pulumi-kubernetes provider.go convertPatchToDiff)
# --------------------------------------------------------------------------- #


def test_an_unknown_subtree_is_one_change_at_its_own_path():
    old = {"metadata": {"name": "p", "annotations": {"a": "1"}}}
    assert [c.path for c in structural_diff(old, {"metadata": UNKNOWN})] == [("metadata",)]
    assert [c.path for c in structural_diff(old, {"metadata": {"name": "p", "annotations": {"a": "2"}}})] == \
        [("metadata", "annotations", "a")]


# --------------------------------------------------------------------------- #
# Programs on a simulated kind cluster
# --------------------------------------------------------------------------- #


@pytest.fixture
def world():
    world = World()
    world.create_kind_cluster("lab", {"nodes": [{"role": "control-plane"}]})
    return world


def _provider(world):
    return k8s.Provider("lab", kubeconfig=pulumi.Output.secret(world.kind_admin_kubeconfig("lab")))


def _sim(world, program):
    return Lifecycle({}, world=world, program=program)


def test_create_preview_returns_the_inputs_without_status_and_an_unknown_id(world):
    def program():
        provider = _provider(world)
        ns = k8s.core.v1.Namespace("ns", metadata={"name": "team"}, opts=pulumi.ResourceOptions(provider=provider))
        pulumi.export("id", ns.id)
        pulumi.export("name", ns.metadata.apply(lambda m: m["name"]))
        pulumi.export("status", ns.status)

    sim = _sim(world, program)
    preview = sim.preview()
    # Unknown outputs resolve to None in a preview run.
    assert (preview.outputs["id"], preview.outputs["name"], preview.outputs["status"]) == (None, "team", None)
    assert world.kind["lab"].api.find("Namespace", None, "team") is None, "a preview writes nothing"
    up = sim.up()
    assert up.outputs["id"] == "team" and up.outputs["name"] == "team"


def test_an_unconfigured_provider_answers_nothing_in_preview(world):
    def program():
        cluster = command.local.Command("cluster", create="true")
        provider = k8s.Provider("later", kubeconfig=cluster.stdout)
        ns = k8s.core.v1.Namespace("ns", metadata={"name": "team"}, opts=pulumi.ResourceOptions(provider=provider))
        pulumi.export("name", ns.metadata.apply(lambda m: m["name"]))

    preview = _sim(world, program).preview()
    assert preview.outputs["name"] is None  # provider_plugin.go: Create(preview) of an unconfigured provider is empty


def test_a_read_runs_in_preview_when_its_id_is_known_and_fails_on_a_missing_object(world):
    def program():
        provider = _provider(world)
        k8s.core.v1.Secret.get("missing", "default/nope", opts=pulumi.ResourceOptions(provider=provider))

    plan = _sim(world, program).preview(expect_error=True)
    assert plan.error and "resource 'default/nope' does not exist" in plan.error


def test_a_read_whose_id_is_unknown_is_skipped_in_preview(world):
    def program():
        provider = _provider(world)
        ns = k8s.core.v1.Namespace("ns", metadata={"name": "team"}, opts=pulumi.ResourceOptions(provider=provider))
        k8s.core.v1.Secret.get("later", ns.id.apply(lambda i: f"{i}/s"), opts=pulumi.ResourceOptions(provider=provider))

    plan = _sim(world, program).preview()
    assert plan.step("later").op == "read" and not plan.step("later").failed


def _pod_program(world, annotation: str, replace_on_changes: list[str]):
    def program():
        provider = _provider(world)
        k8s.core.v1.Pod(
            "pod",
            metadata={"name": "p", "namespace": "default", "annotations": {"gpu-tenancy.io/join": annotation}},
            spec={"containers": [{"name": "c", "image": "pause"}]},
            opts=pulumi.ResourceOptions(provider=provider, replace_on_changes=replace_on_changes,
                                        delete_before_replace=True),
        )

    return program


def test_replace_on_changes_uses_the_engines_grammar(world):
    path = 'metadata.annotations["gpu-tenancy.io/join"]'
    sim = _sim(world, _pod_program(world, "1", [path]))
    sim.up()
    sim.program = _pod_program(world, "2", [path])
    plan = sim.preview()
    assert plan.step("pod").op == "replace", plan.render()


@pytest.mark.parametrize("path", ["metadata.annotations.gpu-tenancy.io/join", "spec.containerz", "metadata[",
                                  "metadata.annotations[0]"])
def test_a_path_that_names_no_input_fails_the_operation(world, path):
    # The engine splits the unbracketed key at its dots ("gpu-tenancy", "io/join"): a path that can never match,
    # which the engine would accept silently and never act on.
    sim = _sim(world, _pod_program(world, "1", [path]))
    plan = sim.up(expect_error=True)
    assert not plan.ok and repr(path) in plan.error, plan.render()


def test_a_command_runs_create_again_when_its_inputs_change_and_delete_sees_the_old_inputs(world):
    ran = []
    from tests.support.sim import scripts

    original = scripts.execute

    def record(w, resource_type, inputs, action):
        ran.append((action, plain(inputs)["environment"]["VALUE"]))
        return "ok"

    scripts.execute = record
    try:
        def program_with(value):
            def program():
                command.local.Command("c", create="true # create", delete="true # delete",
                                      environment={"VALUE": value})
            return program

        sim = _sim(world, program_with("1"))
        sim.up()
        sim.program = program_with("2")
        assert sim.up().step("c").op == "update"
        sim.destroy()
    finally:
        scripts.execute = original
    assert ran == [("create", "1"), ("create", "2"), ("delete", "2")]


# --------------------------------------------------------------------------- #
# Credentials, deletes, Helm
# --------------------------------------------------------------------------- #


def test_a_403_is_not_retried(world):
    """pulumi-kubernetes await.go: only NotFound and NoMatch are retried on create."""
    api = world.kind["lab"].api
    api.authorizer = lambda identity, verb, kind, ns, name: False
    from tests.support.sim import pki

    limited = pki.kubeconfig(api.server, api.ca, "kubernetes-admin", ("kubeadm:cluster-admins",), "lab")

    def program():
        provider = k8s.Provider("limited", kubeconfig=pulumi.Output.secret(limited))
        k8s.core.v1.Namespace("ns", metadata={"name": "team"}, opts=pulumi.ResourceOptions(provider=provider))

    plan = _sim(world, program).up(skip_preview=True, expect_error=True)
    assert "403" in plan.error and 'cannot create resource "namespaces"' in plan.error


def test_deletes_run_dependents_first_and_deleted_with_skips_the_provider_call(world):
    deleted = []
    from tests.support.sim import scripts

    original = scripts.execute
    scripts.execute = lambda w, resource_type, inputs, action: deleted.append(plain(inputs)[action]) or "ok"
    try:
        def program():
            parent = command.local.Command("parent", create="true", delete="echo parent")
            command.local.Command("child", create="true", delete="echo child",
                                  opts=pulumi.ResourceOptions(depends_on=[parent]))
            command.local.Command("inside", create="true", delete="echo inside",
                                  opts=pulumi.ResourceOptions(deleted_with=parent))

        sim = _sim(world, program)
        sim.up()
        deleted.clear()
        sim.destroy()
    finally:
        scripts.execute = original
    # step.go isDeletedWith: "inside" goes with "parent" without a call of its own.
    assert deleted == ["echo child", "echo parent"]


def test_delete_before_replace_deletes_the_dependents_that_would_be_replaced_first(world):
    def program_with(trigger):
        def program():
            machine = command.local.Command("machine", create="true", triggers=[trigger],
                                            opts=pulumi.ResourceOptions(delete_before_replace=True))
            command.local.Command("join", create="true", triggers=[machine.id])
            command.local.Command("bystander", create="true", opts=pulumi.ResourceOptions(depends_on=[machine]))
        return program

    from tests.support.sim import scripts

    original = scripts.execute
    scripts.execute = lambda w, resource_type, inputs, action: "ok"
    try:
        sim = _sim(world, program_with("1"))
        sim.up()
        sim.program = program_with("2")
        plan = sim.up()
    finally:
        scripts.execute = original
    ops = [(s.op, s.name) for s in plan.steps if s.op != "same"]
    # SG:3268 calculateDependentReplacements: "join" (its trigger becomes unknown) goes first; a plain
    # depends_on ("bystander") is never a dependent replacement.
    assert ops == [("delete-replaced", "join"), ("replace", "machine"), ("replace", "join")]


def test_a_dependent_deleted_with_the_replaced_resource_is_not_deleted_on_its_own(world):
    def program_with(trigger):
        def program():
            machine = command.local.Command("machine", create="true", delete="echo machine", triggers=[trigger],
                                            opts=pulumi.ResourceOptions(delete_before_replace=True))
            command.local.Command("inside", create="true", delete="echo inside", triggers=[machine.id],
                                  opts=pulumi.ResourceOptions(deleted_with=machine))
        return program

    from tests.support.sim import scripts

    ran = []
    original = scripts.execute
    scripts.execute = lambda w, resource_type, inputs, action: ran.append((action, plain(inputs)[action])) or "ok"
    try:
        sim = _sim(world, program_with("1"))
        sim.up()
        ran.clear()
        sim.program = program_with("2")
        plan = sim.up()
    finally:
        scripts.execute = original
    assert ("delete-replaced", "inside") in [(s.op, s.name) for s in plan.steps]
    # step_generator.go records both deletes before either runs, so step.go isDeletedWith skips "inside".
    assert [script for action, script in ran if action == "delete"] == ["echo machine"]


def _release_program(world, values=None):
    def program():
        provider = _provider(world)
        # Local charts (the provider's Check loads them; tests/conftest.py provides the stand-in chart tree).
        cert_manager = k8s.helm.v3.Release("cm", name="cert-manager", chart="./.cache/charts/cert-manager",
                                           namespace="cert-manager",
                                           create_namespace=True, opts=pulumi.ResourceOptions(provider=provider))
        k8s.helm.v3.Release("kamaji", name="kamaji", chart="./.cache/charts/kamaji", namespace="kamaji-system",
                            create_namespace=True,
                            values=values or {}, opts=pulumi.ResourceOptions(provider=provider,
                                                                             depends_on=[cert_manager]))
    return program


def test_helm_uninstall_waits_for_the_datastore_that_only_kamaji_can_release(world):
    sim = _sim(world, _release_program(world))
    sim.up()
    plan = sim.destroy(expect_error=True)
    assert "timed out waiting for the condition (DataStore default still terminating)" in plan.error
    # helm purged the release anyway: the next destroy cannot find it.
    assert "release: not found" in sim.destroy(expect_error=True).error


def test_helm_skips_what_is_annotated_resource_policy_keep(world):
    keep = {"kamaji-etcd": {"datastore": {"annotations": {"helm.sh/resource-policy": "keep"}}}}
    sim = _sim(world, _release_program(world, keep))
    sim.up()
    sim.destroy()
    assert world.kind["lab"].api.find("DataStore", None, "default") is not None


def test_an_unreachable_cluster_drops_objects_only_when_asked_and_never_helm_releases(world):
    def program():
        provider = _provider(world)
        k8s.core.v1.Namespace("ns", metadata={"name": "team"}, opts=pulumi.ResourceOptions(provider=provider))

    sim = _sim(world, program)
    sim.up()
    world.delete_kind_cluster("lab")
    assert "unreachable" in sim.destroy(expect_error=True).error
    sim.destroy(env={"PULUMI_K8S_DELETE_UNREACHABLE": "true"})
    assert sim.resources() == []

    world.create_kind_cluster("lab", {"nodes": [{"role": "control-plane"}]})
    sim = _sim(world, _release_program(world))
    sim.up()
    world.delete_kind_cluster("lab")
    plan = sim.destroy(env={"PULUMI_K8S_DELETE_UNREACHABLE": "true"}, expect_error=True)
    assert "can't delete Helm Release with unreachable cluster" in plan.error


# --------------------------------------------------------------------------- #
# Pod admission inside a tenant: kube-apiserver's ResourceQuota and HAMi's webhook quota
# --------------------------------------------------------------------------- #


def _gpu_pod(name, namespace, gpus=1, memory=3000, cores=30):
    limits = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(memory), "nvidia.com/gpucores": str(cores)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"limits": limits}}]}}


@pytest.fixture
def tenant_api():
    """tenant-a of a running dev lab, with an empty namespace `team` (HAMi's webhook sees it)."""
    sim = running_kind_lab()
    api = sim.world.tenant_api("tenant-a")
    api.ensure_namespace("team")
    return sim.world, api


def _quota(api, hard):
    api.put({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "team"},
             "spec": {"hard": hard}})


def test_the_api_server_charges_an_extended_resource_only_under_requests(tenant_api):
    # pkg/quota/v1/evaluator/core/pods.go: "only quota objects in format of requests.resourceName is allowed for
    # extended resource"; a limits. key (not one of HAMi's own) is charged by nobody.
    world, api = tenant_api
    _quota(api, {"limits.nvidia.com/gpu": "0"})
    assert api.create(None, _gpu_pod("free", "team"))["metadata"]["name"] == "free"
    _quota(api, {"requests.nvidia.com/gpu": "1"})  # requests default to the limits: the pod above holds it
    with pytest.raises(ApiError) as refused:
        api.create(None, _gpu_pod("second", "team"))
    assert refused.value.status == 403
    assert refused.value.message == (
        'pods "second" is forbidden: exceeded quota: q, requested: requests.nvidia.com/gpu=1, '
        "used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1")
    # A finished pod is not charged (QuotaV1Pod).
    api.find("Pod", "team", "free")["status"] = {"phase": "Succeeded"}
    assert api.create(None, _gpu_pod("third", "team"))["metadata"]["name"] == "third"


def test_hamis_webhook_refuses_card_memory_beyond_its_limits_quota(tenant_api):
    # Project-HAMi/HAMi v2.10.0 pkg/scheduler/webhook.go fitResourceQuota against what its scheduler allocated.
    world, api = tenant_api
    _quota(api, {"limits.nvidia.com/gpumem": "4000"})
    first = api.create(None, _gpu_pod("first", "team", memory=3000))
    systems.schedule(world, api, api.find("Pod", "team", first["metadata"]["name"]))
    assert api.find("Pod", "team", "first")["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    with pytest.raises(ApiError) as refused:
        api.create(None, _gpu_pod("second", "team", memory=3000))
    assert (refused.value.status, refused.value.message) == (
        403, 'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota')
    assert api.create(None, _gpu_pod("small", "team", memory=1000))["metadata"]["name"] == "small"
