"""Run the real program (or one component) under Pulumi mocks and inspect it.

The engine behind the unit tests (`tests/`) and `make graph`: no Docker, no
cluster and no Pulumi CLI needed.

`run_program(config)` executes `__main__.py` exactly as `pulumi up` would,
against a recording mock monitor that answers with realistic outputs (a kind
kubeconfig, the `kind` docker network with its IPv6 entry first, a Ready
TenantControlPlane, tenant Secrets holding a real CA certificate). The result
lists every registered resource with its inputs (secret markers preserved),
parent, dependencies and options, and the stack outputs with their
secret-ness.
"""

from __future__ import annotations

import base64
import datetime
import gc
import hashlib
import json
import runpy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pulumi
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pulumi.runtime import mocks, rpc, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MAIN = PROJECT_ROOT / "__main__.py"
PROJECT = "gpu-tenancy"

KIND_SUBNET_V4 = "172.18.0.0/16"
KIND_GATEWAY_V4 = "172.18.0.1"
KIND_SUBNET_V6 = "fc00:f853:ccd:e793::/64"
TENANT_LB_IP = "172.18.255.200"


# --------------------------------------------------------------------------- #
# Realistic fixture data
# --------------------------------------------------------------------------- #


@cache
def tenant_ca_pem(common_name: str = "kubernetes") -> bytes:
    """A real self-signed CA certificate, as Kamaji stores it in `<tcp>-ca`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def kubeconfig_yaml(server: str, cluster: str, user: str = "admin") -> str:
    ca = base64.b64encode(tenant_ca_pem()).decode()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": cluster, "cluster": {"server": server, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": f"mock-token-{cluster}"}}],
            "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
            "current-context": cluster,
        }
    )


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def _secret_outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
    """A Secret read from the management cluster (`Secret.get`)."""
    namespace, _, name = (args.resource_id or "").rpartition("/")
    data: dict[str, str] = {}
    if name.endswith("-admin-kubeconfig"):
        tcp = name[: -len("-admin-kubeconfig")]
        data["admin.conf"] = _b64(kubeconfig_yaml(f"https://{TENANT_LB_IP}:6443", tcp))
    elif name.endswith("-ca"):
        data["ca.crt"] = _b64(tenant_ca_pem())
        data["ca.key"] = _b64("mock-key")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
        "type": "Opaque",
    }


def _command_outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
    create = str(args.inputs.get("create", ""))
    stdout = ""
    if "kind get kubeconfig" in create:
        stdout = kubeconfig_yaml("https://127.0.0.1:41234", "kind-gpu-tenancy")
    elif "kubectl" in create and "get node" in create:
        stdout = args.name
    return {"stdout": stdout, "stderr": ""}


def _tcp_outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
    return {
        "status": {
            "controlPlaneEndpoint": f"{TENANT_LB_IP}:6443",
            "kubernetesResources": {"version": {"status": "Ready"}},
        }
    }


def _random_outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
    length = int(args.inputs.get("length", 16))
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    value = "".join(alphabet[(i * 7 + len(args.name)) % len(alphabet)] for i in range(length))
    return {"result": value}


def _container_outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
    return {"id": f"container-{args.name}", "hostname": args.inputs.get("hostname", args.name)}


def _pod_outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
    """A GPU pod as HAMi leaves it: mutated by the webhook and bound by its scheduler."""
    spec = dict(args.inputs.get("spec") or {})
    spec["schedulerName"] = "hami-scheduler"
    metadata = dict(args.inputs.get("metadata") or {})
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        "hami.io/vgpu-node": "tenant-node",
        "hami.io/vgpu-devices-allocated": "GPU-MOCK-A0,NVIDIA,3000,30:;",
    }
    spec.setdefault("nodeName", "tenant-node")
    return {"spec": spec, "metadata": metadata, "status": {"phase": "Running"}}


def _remote_image_outputs(args: mocks.MockResourceArgs) -> dict[str, Any]:
    """A pulled image: the local image id Containers should reference."""
    digest = hashlib.sha256(str(args.inputs.get("name", args.name)).encode()).hexdigest()
    return {"imageId": f"sha256:{digest}", "repoDigest": f"{args.inputs.get('name', args.name)}@sha256:{digest}"}


OutputFactory = Callable[[mocks.MockResourceArgs], dict[str, Any]]

OUTPUT_FACTORIES: dict[str, OutputFactory] = {
    "command:local:Command": _command_outputs,
    "command:remote:Command": _command_outputs,
    "kamaji.clastix.io/v1alpha1:TenantControlPlane": _tcp_outputs,
    "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane": _tcp_outputs,
    "random:index/randomString:RandomString": _random_outputs,
    "random:index/randomPassword:RandomPassword": _random_outputs,
    "docker:index/container:Container": _container_outputs,
    "docker:index/remoteImage:RemoteImage": _remote_image_outputs,
    "kubernetes:core/v1:Pod": _pod_outputs,
}


def _kind_network(args: mocks.MockCallArgs) -> dict[str, Any]:
    return {
        "id": "kind-network-id",
        "name": args.args.get("name", "kind"),
        "driver": "bridge",
        # Docker lists the IPv6 range first on kind's network: code must filter it.
        "ipamConfigs": [
            {"subnet": KIND_SUBNET_V6, "gateway": "fc00:f853:ccd:e793::1"},
            {"subnet": KIND_SUBNET_V4, "gateway": KIND_GATEWAY_V4},
        ],
    }


CALL_FACTORIES: dict[str, Callable[[mocks.MockCallArgs], dict[str, Any]]] = {
    "docker:index/getNetwork:getNetwork": _kind_network,
}


# --------------------------------------------------------------------------- #
# Recording monitor
# --------------------------------------------------------------------------- #


def unwrap(value: Any) -> Any:
    """Plain value with every secret marker removed (recursively)."""
    if rpc.is_rpc_secret(value):
        return unwrap(rpc.unwrap_rpc_secret(value))
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def contains_secret(value: Any) -> bool:
    if rpc.is_rpc_secret(value):
        return True
    if isinstance(value, dict):
        return any(contains_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_secret(v) for v in value)
    return False


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

    @property
    def inputs(self) -> dict[str, Any]:
        return unwrap(self.raw_inputs)

    def is_secret(self, key: str) -> bool:
        """Whether input `key` (or anything inside it) was marked secret."""
        return contains_secret(self.raw_inputs.get(key))

    def __repr__(self) -> str:
        return f"<{self.type} {self.name}>"


class RecordingMonitor(mocks.MockMonitor):
    def __init__(self, mock: mocks.Mocks):
        super().__init__(mock)
        self.registrations: list[Registration] = []

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        if request.type != "pulumi:pulumi:Stack":
            options = request
            self.registrations.append(
                Registration(
                    urn=self.make_urn(request.parent, request.type, request.name),
                    type=request.type,
                    name=request.name,
                    raw_inputs=rpc.deserialize_properties(request.object),
                    parent=request.parent,
                    dependencies=list(request.dependencies),
                    property_dependencies={
                        key: list(deps.urns) for key, deps in request.propertyDependencies.items()
                    },
                    provider=request.provider,
                    custom=request.custom,
                    additional_secret_outputs=list(options.additionalSecretOutputs),
                    retain_on_delete=bool(options.retainOnDelete),
                    delete_before_replace=bool(options.deleteBeforeReplace),
                    ignore_changes=list(options.ignoreChanges),
                    replace_on_changes=list(options.replaceOnChanges),
                    custom_timeouts={
                        "create": options.customTimeouts.create,
                        "update": options.customTimeouts.update,
                        "delete": options.customTimeouts.delete,
                    },
                )
            )
        return super().RegisterResource(request)

    def ReadResource(self, request):  # noqa: N802
        response = super().ReadResource(request)
        self.registrations.append(
            Registration(
                urn=response.urn,
                type=request.type,
                name=request.name,
                raw_inputs=rpc.deserialize_properties(request.properties),
                parent=request.parent,
                dependencies=list(request.dependencies),
                property_dependencies={},
                provider=request.provider,
                custom=True,
                read=True,
                resource_id=request.id,
                additional_secret_outputs=list(request.additionalSecretOutputs),
            )
        )
        return response


class LabMocks(mocks.Mocks):
    """Answers like the real providers would for this program's resource types."""

    def __init__(self) -> None:
        self.calls: list[mocks.MockCallArgs] = []

    def new_resource(self, args: mocks.MockResourceArgs):
        if args.resource_id == rpc.UNKNOWN:
            # A read whose id is not known yet (preview): the engine skips it, its outputs stay unknown.
            return "", {}
        if args.typ == "kubernetes:core/v1:Secret" and args.resource_id:
            state = _secret_outputs(args)
        else:
            factory = OUTPUT_FACTORIES.get(args.typ)
            state = {**args.inputs, **(factory(args) if factory else {})}
        resource_id = args.resource_id or f"{args.name}-id"
        return resource_id, state

    def call(self, args: mocks.MockCallArgs):
        self.calls.append(args)
        factory = CALL_FACTORIES.get(args.token)
        if factory is None:
            raise AssertionError(f"unexpected invoke {args.token}; add it to CALL_FACTORIES")
        return factory(args)


# --------------------------------------------------------------------------- #
# Running a program and reading the result
# --------------------------------------------------------------------------- #


@dataclass
class StackOutput:
    value: Any
    secret: bool


@dataclass
class ProgramRun:
    resources: list[Registration]
    outputs: dict[str, StackOutput]
    calls: list[mocks.MockCallArgs]

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str, type_: str | None = None) -> Registration:
        found = [r for r in self.resources if r.name == name and (type_ is None or r.type == type_)]
        if len(found) != 1:
            raise AssertionError(
                f"expected one resource named {name!r} (type {type_}), found {found}; "
                f"names: {sorted(r.name for r in self.resources)}"
            )
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
            found.append(child)
            found.extend(self.descendants(child))
        return found

    def direct_dependencies(self, resource: Registration) -> set[str]:
        """URNs this resource waits for: explicit depends_on, input deps, and its provider."""
        deps = set(resource.dependencies)
        for urns in resource.property_dependencies.values():
            deps.update(urns)
        if resource.provider:
            # A provider reference is "<urn>::<id>".
            deps.add(resource.provider.rsplit("::", 1)[0])
        return deps

    def dependency_closure(self, resource: Registration) -> set[str]:
        """Every URN reachable through dependencies (and providers) from `resource`."""
        seen: set[str] = set()
        stack = [resource.urn]
        by_urn = {r.urn: r for r in self.resources}
        while stack:
            urn = stack.pop()
            current = by_urn.get(urn)
            if current is None:
                continue
            for dep in self.direct_dependencies(current):
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    def depends_on(self, resource: Registration, other: Registration) -> bool:
        """True when `resource` transitively waits for `other` (or for a descendant of it)."""
        targets = {other.urn} | {d.urn for d in self.descendants(other)}
        return bool(self.dependency_closure(resource) & targets)


_last_monitor: RecordingMonitor | None = None


def last_run_registrations() -> list[Registration]:
    """What the most recent `run_program` registered, also when it raised."""
    return list(_last_monitor.registrations) if _last_monitor else []


def _to_config_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_program(
    config: dict[str, Any],
    *,
    stack: str = "dev",
    preview: bool = False,
    program: Callable[[], Any] | None = None,
    secret_keys: Iterable[str] = (),
) -> ProgramRun:
    """Run `__main__.py` (or `program`) under mocks with `gpu-tenancy:<key>` config."""
    global _last_monitor
    # A failure inside an output of a previous run would otherwise leak into this one.
    settings.SETTINGS.outputs.clear()
    mock = LabMocks()
    monitor = _last_monitor = RecordingMonitor(mock)
    settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mock, project=PROJECT, stack=stack, preview=preview, monitor=monitor)
    pulumi.runtime.set_all_config(
        {f"{PROJECT}:{key}": _to_config_value(value) for key, value in config.items()},
        [f"{PROJECT}:{key}" for key in secret_keys],
    )
    body = program or (lambda: runpy.run_path(str(MAIN), run_name="__main__"))
    try:
        _sync_await(run_pulumi_func(body))
    finally:
        # Futures of a run that failed inside an apply report "exception never retrieved" when collected;
        # collect them now, not in the middle of pytest rendering a later failure.
        gc.collect()

    root = settings.get_root_resource()
    outputs: dict[str, StackOutput] = {}
    for name, value in (getattr(root, "outputs", None) or {}).items():
        output = pulumi.Output.from_input(value)
        outputs[name] = StackOutput(
            value=_sync_await(output.future()),
            secret=bool(_sync_await(output.is_secret())),
        )
    return ProgramRun(resources=list(monitor.registrations), outputs=outputs, calls=mock.calls)


def load_stack_file(name: str = "dev") -> dict[str, Any]:
    """The `gpu-tenancy:*` keys of `Pulumi.<name>.yaml`, namespace removed."""
    document = yaml.safe_load((PROJECT_ROOT / f"Pulumi.{name}.yaml").read_text())
    prefix = f"{PROJECT}:"
    return {
        key[len(prefix):]: value
        for key, value in (document.get("config") or {}).items()
        if key.startswith(prefix)
    }
