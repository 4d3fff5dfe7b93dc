"""The Pulumi SDK surface the program leans on beyond its documented use, each pinned where a bump would change it
(pulumi and pulumi-kubernetes versions in requirements.txt)."""

import asyncio
import base64
import inspect
from pathlib import Path

import grpc
import pulumi
import pulumi_kubernetes as k8s
import pytest
from pulumi.runtime import resource as resource_runtime
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.rpc import UNKNOWN

from components.gpu import hami
from components.tenant import operations as tenant_operations
from components.tenant.control_plane import _CustomResourceWithStatus
from components.tenant.spec import TCP_API_VERSION, TCP_KIND
from components.worker import operations as worker_operations
from config.source import raw_stack_config
from naming import PROJECT
from ops.registrations import run
from tests.support import sdk

ROOT = Path(__file__).resolve().parents[1]


def test_a_preview_sends_an_unscheduled_value_unknown_and_plans_what_it_cannot_know():
    def program():
        node = hami._unknown_in_preview()
        k8s.core.v1.ConfigMap("preview", data={"node": node, **({} if node is None else {
            "planned": hami._known_or(node.apply(lambda _: {}), {"is": "planned"}).apply(lambda v: v["is"]),
            "known": hami._known_or(pulumi.Output.from_input({"is": "seen"}), {}).apply(lambda v: v["is"]),
        })})

    assert run({}, program=program, preview=True).named("preview").raw_inputs["data"] == {
        "node": UNKNOWN, "planned": "planned", "known": "seen"}
    assert run({}, program=program).named("preview").raw_inputs["data"] == {}


def test_a_custom_resource_reads_back_the_status_pulumi_kubernetes_drops():
    def program():
        metadata = {"name": "tenant-a", "namespace": "tenant-a"}
        ours = _CustomResourceWithStatus("ours", TCP_API_VERSION, TCP_KIND, metadata, {}, pulumi.ResourceOptions())
        theirs = k8s.apiextensions.CustomResource("theirs", api_version=TCP_API_VERSION, kind=TCP_KIND,
                                                  metadata=metadata, spec={})
        pulumi.export("status", ours.status)
        pulumi.export("dropped", not hasattr(theirs, "status"))

    outputs = run({}, program=program).outputs
    assert outputs["status"].value["kubeconfig"] == {"admin": {"secretName": "tenant-a-admin-kubeconfig"}}
    # pulumi-kubernetes#1836: once the SDK's own class keeps status, _CustomResourceWithStatus can go.
    assert outputs["dropped"].value


def test_the_mock_monitor_names_answers_and_hands_over_each_request():
    # sdk.py RequestMonitor (and tests/fixtures/record_old_state.py, which replaces make_urn inside an old
    # checkout): set_mocks takes a MockMonitor, which calls Mocks.new_resource inside its RegisterResource and
    # ReadResource and names the resource with make_urn.
    assert list(inspect.signature(MockMonitor.make_urn).parameters) == ["self", "parent", "type_", "name"]

    def program():
        outer = pulumi.ComponentResource("test:index:Outer", "outer")
        inner = pulumi.ComponentResource("test:index:Inner", "inner", opts=pulumi.ResourceOptions(parent=outer))
        read = k8s.core.v1.Namespace.get("read", "kube-system", opts=pulumi.ResourceOptions(parent=inner))
        k8s.core.v1.ConfigMap("leaf", opts=pulumi.ResourceOptions(parent=inner, deleted_with=read))
        pulumi.export("inner", inner.urn)

    plain = run({}, program=program)
    leaf, read, inner = plain.named("leaf"), plain.named("read"), plain.named("inner")
    assert leaf.urn == "urn:pulumi:dev::gpu-tenancy::test:index:Outer$test:index:Inner$kubernetes:core/v1:ConfigMap::leaf"
    assert (leaf.parent, leaf.deleted_with, leaf.read) == (inner.urn, read.urn, False)
    assert (read.parent, read.read, read.resource_id) == (inner.urn, True, "kube-system")
    assert plain.outputs["inner"].value == inner.urn


# --- tests/support/sdk.py: what the lifecycle simulator uses ---------------------------------------------------- #


def test_the_simulator_answers_the_requests_and_responses_it_reads_and_writes():
    for message, fields in {
        sdk.resource_pb2.RegisterResourceRequest: {
            "type", "name", "parent", "custom", "object", "provider", "dependencies", "propertyDependencies",
            "deleteBeforeReplace", "deleteBeforeReplaceDefined", "replaceOnChanges", "ignoreChanges", "deletedWith",
            "retainOnDelete", "customTimeouts", "additionalSecretOutputs", "aliasURNs", "aliases"},
        sdk.resource_pb2.ReadResourceRequest: {
            "type", "name", "parent", "id", "properties", "provider", "dependencies", "additionalSecretOutputs"},
        sdk.resource_pb2.ResourceInvokeRequest: {"tok", "args"},
        sdk.resource_pb2.RegisterResourceResponse: {"urn", "id", "object"},
        sdk.resource_pb2.ReadResourceResponse: {"urn", "properties"},
        sdk.resource_pb2.ResourceInvokeResponse: {"return", "unknown"},
    }.items():
        assert fields <= set(message.DESCRIPTOR.fields_by_name), message.DESCRIPTOR.name
    assert {"RegisterResource", "ReadResource", "Invoke", "RegisterResourceOutputs"} <= set(vars(sdk.MockMonitor))
    assert list(inspect.signature(sdk.MockMonitor.__init__).parameters) == ["self", "mocks"]
    assert sdk._ensure_event_loop() is asyncio.get_event_loop()
    assert rpc.deserialize_properties(sdk.serialized({"a": rpc.wrap_rpc_secret("b")})) == {
        "a": rpc.wrap_rpc_secret("b")}
    assert isinstance(pulumi.UNKNOWN, sdk.Unknown)


def test_a_simulated_program_runs_without_stack_traces_and_raises_what_it_raised():
    walk, walked = resource_runtime._get_stack_trace, []

    def body():
        walked.append(resource_runtime._get_stack_trace)
        raise ValueError("the program's own error")

    sdk.fresh_root()
    pulumi.runtime.set_mocks(_Mocks(), preview=False)
    with pytest.raises(ValueError, match="the program's own error"):
        sdk.run_program(body)
    assert walked == [sdk.source_pb2.StackTrace] and resource_runtime._get_stack_trace is walk
    assert list(inspect.signature(walk).parameters) == []


def test_a_detached_engine_sends_the_sdk_log_to_stderr(capsys):
    with sdk.engine_detached():
        pulumi.log.warn("to stderr")
    assert capsys.readouterr().err == "warning: to stderr\n"


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return f"{args.name}-id", args.inputs

    def call(self, args):
        return {}


def test_a_dynamic_provider_is_pickled_by_reference_and_spoken_to_over_the_provider_protocol():
    # tests/test_old_state.py, test_upgrade.py and test_host_operations.py: what a stack stores as `__provider`, and
    # the host's Diff, asked as the engine asks it.
    assert base64.b64decode(sdk.serialize_provider(_Mocks())).startswith(b"\x80")
    assert {"olds", "news"} <= set(sdk.provider_pb2.DiffRequest.DESCRIPTOR.fields_by_name)
    assert sdk.provider_pb2.DiffResponse.DIFF_NONE != sdk.provider_pb2.DiffResponse.DIFF_SOME
    assert hasattr(sdk.provider_pb2_grpc, "ResourceProviderStub")


def test_the_whole_config_map_is_what_set_all_config_set():
    # sdk.py all_config reads pulumi.runtime.config.CONFIG (config/source.py raw_stack_config): the public API
    # answers only per key, so a misspelt key would pass unnoticed.
    pulumi.runtime.set_all_config({f"{PROJECT}:misspelt": "yes"}, [])
    assert raw_stack_config()["misspelt"] == "yes"


def test_the_provider_host_answers_a_refusal_with_its_message_and_a_bug_with_its_traceback():
    """What the engine prints under the resource is the host's status message (pulumi/dynamic/__main__.py aborts
    with traceback.format_exc()): a deliberate refusal is its one line; anything else keeps its traceback."""
    olds = {"tenant": "tenant-a", "control_plane": "v1.35.5", "version_key": "tenants[0].kubernetesVersion",
            "__provider": sdk.serialize_provider(tenant_operations.TenantVersionProvider())}
    drain = {"version": "v1.35.0", "__provider": sdk.serialize_provider(worker_operations.NodeDrainProvider())}
    answers = []
    with sdk.provider_host(ROOT) as host:
        for call in (lambda: host.Diff(sdk.provider_pb2.DiffRequest(
                         id="id", urn="urn", olds=sdk.host_struct(olds),
                         news=sdk.host_struct({**olds, "control_plane": "v1.35.0"}))),
                     # No node_name: a KeyError in the provider, which is a bug.
                     lambda: host.Update(sdk.provider_pb2.UpdateRequest(
                         id="id", urn="urn", olds=sdk.host_struct(drain),
                         news=sdk.host_struct({**drain, "version": "v1.36.1"})))):
            with pytest.raises(grpc.RpcError) as error:
                call()
            answers.append(error.value.details())
    assert answers[0].startswith("tenants[0].kubernetesVersion: v1.35.0 is older than v1.35.5") and \
        "\n" not in answers[0], answers[0]
    assert answers[1].startswith("Traceback (most recent call last):"), answers[1]
