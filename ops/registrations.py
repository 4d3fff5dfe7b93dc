"""Run the program once under plain Pulumi mocks and record what it registers (`make graph`, `make docs`).

The pulumi/examples `testing-unit-py` pattern (`pulumi.runtime.set_mocks`): no engine, no provider, no state and no
machine. A resource's outputs are its inputs plus what a provider or controller fills in that the program reads back
before it can register the rest; each answer below names the code it stands for. Every registration is recorded
with its inputs (secret markers kept), parent, dependencies, provider and options. What a resource *does* (a second
`up`, a change, destroy) is the lifecycle simulator's question (tests/support/sim), not this module's.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import runpy
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import rpc

from config import stack_file
from naming import GPU_CORES_RESOURCE, GPU_MEMORY_RESOURCE, PROJECT
from sdk import RequestMonitor, engine_urn, stack_outputs

ROOT = Path(__file__).resolve().parents[1]
MAIN = ROOT / "__main__.py"
# The kind network kind-create.sh reports: the IPv6 range kind derives from the name "kind", listed first, then
# Docker's first free IPv4 pool (kind pkg/cluster/internal/providers/docker/network.go generateULASubnetFromName).
KIND_SUBNET_V6 = "fc00:f853:ccd:e793::/64"
KIND_SUBNET_V4 = "172.18.0.0/16"


def stack_keys(path: Path) -> dict[str, Any]:
    """The `gpu-tenancy:*` keys of a stack file, namespace removed."""
    document = stack_file.load(Path(path)) or {}
    prefix = f"{PROJECT}:"
    return {key[len(prefix):]: value for key, value in (document.get("config") or {}).items()
            if key.startswith(prefix)}


def plain(value: Any) -> Any:
    """`value` with every secret marker removed."""
    if rpc.is_rpc_secret(value):
        return plain(rpc.unwrap_rpc_secret(value))
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def contains_secret(value: Any) -> bool:
    if rpc.is_rpc_secret(value):
        return True
    if isinstance(value, dict):
        return any(contains_secret(v) for v in value.values())
    return isinstance(value, list) and any(contains_secret(v) for v in value)


# --------------------------------------------------------------------------- #
# What was registered
# --------------------------------------------------------------------------- #


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    raw_inputs: dict[str, Any]
    parent: str
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    provider: str
    custom: bool
    read: bool = False
    resource_id: str = ""
    additional_secret_outputs: list[str] = field(default_factory=list)
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    ignore_changes: list[str] = field(default_factory=list)
    replace_on_changes: list[str] = field(default_factory=list)
    custom_timeouts: dict[str, str] = field(default_factory=dict)
    deleted_with: str = ""

    @property
    def inputs(self) -> dict[str, Any]:
        return plain(self.raw_inputs)

    def is_secret(self, key: str) -> bool:
        """Whether input `key` (or anything inside it) was marked secret."""
        return contains_secret(self.raw_inputs.get(key))

    def __repr__(self) -> str:
        return f"<{self.type} {self.name}>"


@dataclass
class StackOutput:
    value: Any
    secret: bool


@dataclass
class ProgramRun:
    resources: list[Registration]
    outputs: dict[str, StackOutput]

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str, type_: str | None = None) -> Registration:
        found = [r for r in self.resources if r.name == name and (type_ is None or r.type == type_)]
        if len(found) != 1:
            raise AssertionError(f"expected one resource named {name!r} (type {type_}), found {found}; "
                                 f"names: {sorted(r.name for r in self.resources)}")
        return found[0]

    def by_urn(self, urn: str) -> Registration:
        for resource in self.resources:
            if resource.urn == urn:
                return resource
        raise AssertionError(f"no resource with urn {urn}")

    def children(self, parent: Registration) -> list[Registration]:
        return [r for r in self.resources if r.parent == parent.urn]

    def descendants(self, parent: Registration) -> list[Registration]:
        found = []
        for child in self.children(parent):
            found += [child, *self.descendants(child)]
        return found

    def direct_dependencies(self, resource: Registration) -> set[str]:
        """URNs this resource waits for: explicit depends_on, input deps, and its provider."""
        deps = set(resource.dependencies)
        for urns in resource.property_dependencies.values():
            deps.update(urns)
        if resource.provider:
            deps.add(resource.provider.rsplit("::", 1)[0])  # a provider reference is "<urn>::<id>"
        return deps

    def dependency_closure(self, resource: Registration) -> set[str]:
        """Every URN reachable through dependencies (and providers) from `resource`."""
        seen: set[str] = set()
        stack = [resource.urn]
        by_urn = {r.urn: r for r in self.resources}
        while stack:
            current = by_urn.get(stack.pop())
            for dep in self.direct_dependencies(current) if current is not None else ():
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    def depends_on(self, resource: Registration, other: Registration) -> bool:
        """True when `resource` transitively waits for `other` (or for a descendant of it)."""
        targets = {other.urn} | {d.urn for d in self.descendants(other)}
        return bool(self.dependency_closure(resource) & targets)


# --------------------------------------------------------------------------- #
# The answers
# --------------------------------------------------------------------------- #


@functools.cache
def _ca_pem() -> str:
    """A real self-signed CA certificate (the program hashes its public key for kubeadm's discovery): Ed25519 from
    a fixed seed, so the same bytes every run."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.x509.oid import NameOID

    key = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(32))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(1).not_valid_before(start).not_valid_after(start + datetime.timedelta(days=3650))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, None))
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _kubeconfig(server: str, cluster: str) -> str:
    ca = base64.b64encode(_ca_pem().encode()).decode()
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": ca}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "admin"}}],
        "users": [{"name": "admin", "user": {"token": "mock-token"}}],
    })


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _answer(type_: str, name: str, inputs: dict[str, Any], read: bool) -> dict[str, Any]:
    """What the provider (or a controller) adds to the inputs, for the outputs the program reads back."""
    from components import shell
    from components.gpu import smoke
    from components.tenant import spec
    from naming import HAMI_SCHEDULER_NAME

    metadata = plain(inputs.get("metadata")) or {}
    if type_ == "command:local:Command" and plain(inputs.get("create")) == shell.script_text(shell.KIND_CREATE):
        # kind-create.sh: the kind network's IPAM entries, then kind's kubeconfig (its context is kind-<cluster>).
        ipam = [{"Subnet": KIND_SUBNET_V6}, {"Subnet": KIND_SUBNET_V4}]
        cluster = (plain(inputs.get("environment")) or {}).get(shell.KIND_CLUSTER_NAME_ENV, "kind")
        return {"stdout": f"{json.dumps(ipam)}\n{_kubeconfig('https://127.0.0.1:6443', f'kind-{cluster}')}"}
    if type_ == f"kubernetes:{spec.TCP_API_VERSION}:{spec.TCP_KIND}":
        # Kamaji's status (api/v1alpha1 tenantcontrolplane_status.go); the address is a documentation one
        # (RFC 5737), the same for the same tenant every run.
        address = f"192.0.2.{1 + zlib.crc32(name.encode()) % 254}:6443"
        secret_name = spec.admin_kubeconfig_secret_name(metadata.get("name") or name)
        return {"metadata": {**metadata, "uid": f"uid-{name}"},
                "status": {"controlPlaneEndpoint": address, "kubeconfig": {"admin": {"secretName": secret_name}}}}
    if type_ == "kubernetes:core/v1:Secret" and read:
        # The admin kubeconfigs Kamaji writes (internal/resources/kubeconfig.go).
        document = _kubeconfig("https://192.0.2.1:6443", name)
        return {"data": {spec.ADMIN_KUBECONFIG_KEY: _b64(document), spec.SUPER_ADMIN_KUBECONFIG_KEY: _b64(document)}}
    if type_ == "kubernetes:core/v1:Secret" and plain(inputs.get("type")) == "kubernetes.io/service-account-token":
        # kube-controller-manager fills the token in (pkg/controller/serviceaccount/tokens_controller.go).
        return {"data": {"token": _b64("mock-service-account-token")}}
    if type_ == "kubernetes:core/v1:Pod":
        # HAMi's webhook sets the scheduler; its scheduler records the allocation (Project-HAMi/HAMi
        # pkg/device/nvidia/device.go names the annotation; value "<uuid>,NVIDIA,<MiB>,<cores>:;") and binds.
        pod_spec = plain(inputs.get("spec")) or {}
        node = (pod_spec.get("nodeSelector") or {}).get("kubernetes.io/hostname", "node")
        annotations = {**(metadata.get("annotations") or {}), smoke.VGPU_NODE_ANNOTATION: node,
                       smoke.DEVICES_ALLOCATED_ANNOTATION: "GPU-MOCK,NVIDIA,3000,30:;"}
        return {"metadata": {**metadata, "annotations": annotations},
                "spec": {**pod_spec, "schedulerName": HAMI_SCHEDULER_NAME, "nodeName": node}}
    if type_ == "kubernetes:core/v1:Service" and read and name.endswith("-management-api-service"):
        # The management cluster's `default/kubernetes` Service (kubernetes pkg/controlplane/reconcilers).
        return {"spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}
    if type_ == "kubernetes:discovery.k8s.io/v1:EndpointSlice" and read:
        # The API server's own endpoints behind it (pkg/controlplane/reconcilers/endpointsadapter.go).
        return {"endpoints": [{"addresses": ["192.0.2.250"]}], "ports": [{"name": "https", "port": 6443,
                                                                          "protocol": "TCP"}]}
    if type_ == "kubernetes:helm.sh/v3:Release":
        # Helm's first install is revision 1 (pulumi-kubernetes helm_release.go sets status.revision).
        return {"status": {"revision": 1}}
    if type_ == "kubernetes:core/v1:Node" and read:
        # What HAMi's mock device plugin registers with the kubelet (components/gpu/smoke.py PLUGIN_RESOURCES).
        return {"status": {"allocatable": {GPU_MEMORY_RESOURCE: "8192", GPU_CORES_RESOURCE: "100"}}}
    if type_ == "docker:index/remoteImage:RemoteImage":
        # pulumi-docker's imageId: the image's content digest.
        return {"imageId": "sha256:" + hashlib.sha256(str(plain(inputs.get("name"))).encode()).hexdigest()}
    if type_ == "pulumi-python:dynamic/gpu-tenancy:NodeMembership":
        # components/worker/operations.py NodeMembershipProvider.create.
        return {"token": "abcdef.0123456789abcdef", "token_id": "abcdef", "expiration": "2026-01-02T00:00:00Z"}
    return {}


def with_unknowns(value: Any) -> Any:
    """`value` with each unknown (a preview) as the wire sentinel `rpc.UNKNOWN`."""
    if rpc.is_rpc_secret(value):
        return rpc.wrap_rpc_secret(with_unknowns(rpc.unwrap_rpc_secret(value)))
    if isinstance(value, dict):
        return {k: with_unknowns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_unknowns(v) for v in value]
    return rpc.UNKNOWN if pulumi.contains_unknowns(value) else value


class _Recorder(pulumi.runtime.Mocks):
    """Answers each registration and records it, with the parent, dependencies and options of its request."""

    def __init__(self) -> None:
        self.monitor = RequestMonitor(self)
        self.registered: list[Registration] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        request, read = self.monitor.request()
        registration = Registration(
            urn=engine_urn(request.parent, args.typ, args.name), type=args.typ, name=args.name,
            raw_inputs=with_unknowns(args.inputs), parent=request.parent, dependencies=list(request.dependencies),
            property_dependencies={}, provider=args.provider or "", custom=read or bool(args.custom), read=read,
            additional_secret_outputs=list(request.additionalSecretOutputs))
        if not read:
            timeouts = request.customTimeouts
            registration.property_dependencies = {k: list(v.urns) for k, v in request.propertyDependencies.items()}
            registration.retain_on_delete = bool(request.retainOnDelete)
            registration.delete_before_replace = bool(request.deleteBeforeReplace)
            registration.ignore_changes = list(request.ignoreChanges)
            registration.replace_on_changes = list(request.replaceOnChanges)
            registration.deleted_with = request.deletedWith
            registration.custom_timeouts = {"create": timeouts.create, "update": timeouts.update,
                                            "delete": timeouts.delete}
        self.registered.append(registration)
        if pulumi.runtime.is_dry_run() and not read:
            # A create in a preview: the provider echoes the inputs; its id and computed outputs are unknown.
            registration.resource_id, state = "", dict(args.inputs)
        else:
            registration.resource_id = args.resource_id or f"{args.name}-id"
            state = {**args.inputs, **_answer(args.typ, args.name, args.inputs, read)}
        # The engine encrypts the outputs named in additionalSecretOutputs (pulumi/pulumi
        # pkg/resource/deploy/step_executor.go): so do these answers.
        return registration.resource_id, {k: rpc.wrap_rpc_secret(v) if k in request.additionalSecretOutputs else v
                                          for k, v in state.items()}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        raise NotImplementedError(f"ops/registrations.py has no answer for the invoke {args.token}: add one")


def set_config(config: dict[str, Any], secret_keys: Iterable[str]) -> None:
    """The program's config: the `gpu-tenancy:*` keys, structured values as JSON text (as Pulumi hands them over)."""
    pulumi.runtime.set_all_config({f"{PROJECT}:{k}": v if isinstance(v, str) else json.dumps(v)
                                   for k, v in config.items()}, [f"{PROJECT}:{key}" for key in secret_keys])


def quiet_unretrieved(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An event loop's exception handler that drops "exception was never retrieved" (a failed run's outputs)."""
    if "exception was never retrieved" not in context.get("message", ""):
        loop.default_exception_handler(context)


def run(config: dict[str, Any], *, stack: str = "dev", preview: bool = False, secret_keys: Iterable[str] = (),
        program: Callable[[], Any] | None = None) -> ProgramRun:
    """Run `__main__.py` (or `program`) once with `config` (the `gpu-tenancy:*` keys) as a first `up` (or preview)
    would; raises what the program raised."""
    pulumi.runtime.reset_options()  # a new root Stack for set_mocks
    # A failed run leaves outputs holding exceptions nobody awaits: asyncio would print each one when collected
    # (the handler stays on the SDK's event loop for whenever that happens).
    asyncio.get_event_loop().set_exception_handler(quiet_unretrieved)
    recorder = _Recorder()
    pulumi.runtime.set_mocks(recorder, project=PROJECT, stack=stack, preview=preview, monitor=recorder.monitor)
    set_config(config, secret_keys)
    outputs: dict[str, StackOutput] = {}

    async def exported() -> None:
        for name, value in stack_outputs().items():
            output = pulumi.Output.from_input(value)
            outputs[name] = StackOutput(plain(await output.future()), bool(await output.is_secret()))

    def body() -> Any:
        (program or (lambda: runpy.run_path(str(MAIN), run_name="__main__")))()
        return exported()

    pulumi.runtime.test(body)()
    return ProgramRun(resources=recorder.registered, outputs=outputs)
