"""Kubernetes API calls made from the Pulumi host, as Pulumi dynamic resources: what they share.

Everything that talks to a tenant's API (or Kamaji's) for the program runs on the host that already holds the
credentials, never on a worker. Each layer's operations live with that layer: the worker's join token, Node
registration, drain and readiness in components/worker/operations.py; the GPU capacity and the waits for HAMi's
webhook and device plugin in components/gpu/operations.py; the waits for Kamaji's and MetalLB's webhooks in
components/management/operations.py; the wait for the Konnectivity agents and the tenant's version in
components/tenant/operations.py. This module holds what they share: the seam (how a provider reaches an API
server, and what time it is), reaching a tenant whose control plane was re-created, the webhook wait, and
`resource`, which declares one of them.

The calls go through `components.kube` (credentials stay in memory). Module import has no side effects but one in
Pulumi's dynamic-provider host, which imports the module the state names for a provider (components/providers.py):
a refusal reaches the operator as its message, not a traceback (`sdk.report_host_errors_by_message`).
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult

from components import kube
from components.kube import ApiError, UnreachableError
from components.tenant import spec
from sdk import report_host_errors_by_message

# What the providers raise with a message for the operator (a bug's exception keeps its traceback).
OPERATOR_ERRORS = (RuntimeError, TimeoutError, ApiError, kube.KubeconfigError)
report_host_errors_by_message(OPERATOR_ERRORS)

# --------------------------------------------------------------------------- #
# The seam: how a provider reaches an API server, and what time it is
# --------------------------------------------------------------------------- #


class Clock:
    """Real time. Tests and the lifecycle simulator give a provider another object with these two methods."""

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def poll(condition: Callable[[], str | None], clock: Clock, *, timeout: float, interval: float = 2.0) -> None:
    """Call `condition` until it returns None (done); past `timeout` seconds raise with its last answer."""
    deadline = clock.now() + datetime.timedelta(seconds=timeout)
    while True:
        waiting_for = condition()
        if waiting_for is None:
            return
        if clock.now() >= deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s: {waiting_for}")
        clock.sleep(interval)


class HostOperationProvider(ResourceProvider):
    """Base of the layers' providers (components/*/operations.py). `connect` and `clock` are the real ones;
    whoever executes a provider (the lifecycle simulator, a test) sets others on the instance it unpickled. The
    pickle names the class only (no instance state), so nothing set here ever reaches the Pulumi state."""

    connect: kube.Connect = staticmethod(kube.connect)
    clock: Clock = Clock()

    def _api(self, kubeconfig: str) -> contextlib.closing[kube.KubeClient]:
        return contextlib.closing(self.connect(kubeconfig))


@dataclass(frozen=True)
class ControlPlaneRef:
    """Where to ask whether a tenant's control plane still exists (the management cluster)."""

    kubeconfig: str
    namespace: str
    name: str


def reissued_kubeconfig(provider: HostOperationProvider, ref: ControlPlaneRef, tenant: str, stored: str,
                         error: Exception) -> str | None:
    """The tenant's credential to use instead of `stored`, which no longer reaches it; None when the control plane
    is gone (nothing left to clean up there). Raises when the tenant is simply down.

    A control plane re-created at the same address (MetalLB hands out the first free address again) or re-keyed
    by Kamaji (status CARotating, clastix/kamaji controllers/soot/manager.go) presents a certificate the stored
    CA does not verify, so the client fails its TLS handshake: to the client that is "does not answer". The
    management cluster says which: the control plane exists and its admin Secret (the name in
    status.kubeconfig.admin.secretName, clastix/kamaji internal/resources/kubeconfig.go) holds another CA.
    """
    try:
        with provider._api(ref.kubeconfig) as management:
            tcp = management.find("TenantControlPlane", ref.name, ref.namespace)
            secret_name = ((((tcp or {}).get("status") or {}).get("kubeconfig") or {}).get("admin") or {}).get(
                "secretName") or spec.admin_kubeconfig_secret_name(ref.name)
            secret = management.find("Secret", secret_name, ref.namespace) if tcp is not None else None
    except (ApiError, kube.KubeconfigError) as mgmt_error:
        raise RuntimeError(
            f"the API of tenant {tenant} does not answer ({error}) and the management cluster cannot confirm that "
            f"its control plane is gone ({mgmt_error}); retry when one of them answers"
        ) from None
    if tcp is None:
        return None
    try:
        current = spec.decode_secret_value((secret or {}).get("data"), spec.SUPER_ADMIN_KUBECONFIG_KEY, secret_name)
        reissued = kube.current_context(current).ca_certificate() != kube.current_context(stored).ca_certificate()
    except (ValueError, kube.KubeconfigError):
        reissued = False
    if not reissued:
        raise RuntimeError(
            f"the API of tenant {tenant} does not answer ({error}) but its TenantControlPlane "
            f"{ref.namespace}/{ref.name} still exists: nothing was removed, retry when the tenant answers "
            f"(kubectl -n {ref.namespace} get tcp,pods)"
        )
    return current


def on_tenant(provider: HostOperationProvider, props: dict[str, Any], operation: Callable[[str], None]) -> None:
    """`operation(kubeconfig)` on the tenant with the stored credential; when that no longer reaches it, with the
    credential its control plane has now (`reissued_kubeconfig`), or not at all when the control plane is gone."""
    try:
        operation(props["kubeconfig"])
        return
    except UnreachableError as error:
        current = reissued_kubeconfig(provider, control_plane_ref(props), props["control_plane_name"],
                                      props["kubeconfig"], error)
    if current is not None:
        operation(current)


def control_plane_ref(props: dict[str, Any]) -> ControlPlaneRef:
    return ControlPlaneRef(
        props["management_kubeconfig"], props["control_plane_namespace"], props["control_plane_name"]
    )


def inputs_changed(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    """Any input changed but `__provider`. That one is the provider pickled by reference, so it changes whenever the
    class moves to another module (pulumi/dynamic/dynamic.py serialize_provider); without a diff of its own the
    engine would compare every input (step_generator.go diff, DIFF_UNKNOWN) and update a resource that did not."""
    return any(olds.get(key) != news.get(key) for key in {*olds, *news} - {"__provider"})


def wait_for_webhook(provider: HostOperationProvider, kubeconfig: str, probe: dict[str, Any], timeout: float,
                      failure: str, check: str, answered: Callable[[dict[str, Any]], str | None] | None = None
                      ) -> None:
    """Send `probe` as a server-side dry run until a webhook answers: any admission answer counts (a denial too),
    a failed call to the webhook (failurePolicy Fail) or a 5xx is waited out, and `answered` may judge a success
    (None: done, else what is still missing). Past `timeout` raise `failure`, the last answer and `check`."""
    with provider._api(kubeconfig) as cluster:
        def answers() -> str | None:
            try:
                created = cluster.create(probe, dry_run=True)
            except UnreachableError:
                raise
            except ApiError as error:
                if "failed calling webhook" in error.message or (error.status or 0) >= 500:
                    return error.message
                return None
            return answered(created) if answered is not None else None

        try:
            poll(answers, provider.clock, timeout=timeout)
        except TimeoutError as error:
            raise RuntimeError(f"{failure}: {error}. {check}") from None


class WaitProvider(HostOperationProvider):
    """A wait with nothing to delete: it runs on create and whenever an input changes (`__provider` aside)."""

    ID = ""

    def _wait(self, props: dict[str, Any]) -> None:
        raise NotImplementedError

    def create(self, props: dict[str, Any]) -> CreateResult:
        self._wait(props)
        return CreateResult(id_=self.ID, outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=inputs_changed(olds, news))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self._wait(news)
        return UpdateResult(outs=dict(news))


# --------------------------------------------------------------------------- #
# The resources the program declares
# --------------------------------------------------------------------------- #


# Inputs that hold credentials: secret in the state (the dynamic provider host does not accept secrets, so the
# engine marks an output secret when the input of the same name was, provider_plugin.go annotateSecrets;
# additional_secret_outputs makes sure of it).
CREDENTIAL_KEYS = ("kubeconfig", "management_kubeconfig")
_RESOURCES: dict[type, type] = {}
# Where every provider is pickled from, whichever module it is written in (that module's docstring says why).
PROVIDERS_MODULE = "components.providers"


class HostOperation(Resource):
    """Base of the layers' dynamic resources (`declare`)."""


def declare(provider: type[HostOperationProvider], name: str) -> type[HostOperation]:
    """The dynamic resource `resource` declares for `provider`: a HostOperation with its own type token,
    `pulumi-python:dynamic/gpu-tenancy:<name>` (pulumi/dynamic/dynamic.py Resource.__init_subclass__). The token is
    in every URN of its resources, so `name` never changes. The state names `provider` by PROVIDERS_MODULE."""
    resource_class = types.new_class(name, (HostOperation,), {"module": "gpu-tenancy", "name": name},
                                     lambda body: body.update(__module__=provider.__module__, __qualname__=name))
    _RESOURCES[provider] = resource_class
    provider.__module__ = PROVIDERS_MODULE
    return resource_class


def resource(provider: ResourceProvider, name: str, props: dict[str, Any], opts: Any,
             outputs: tuple[str, ...] = (), secret_outputs: tuple[str, ...] = ()) -> Any:
    """The dynamic resource of `provider` with `props` as inputs and `outputs` (set by the provider) readable as
    attributes; credential inputs and `secret_outputs` are secret in the state."""
    import pulumi

    credentials = [key for key in CREDENTIAL_KEYS if key in props]
    options = pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(additional_secret_outputs=[*credentials, *secret_outputs]))
    return _RESOURCES[type(provider)](provider, name, {**props, **dict.fromkeys(outputs)}, options)


# --------------------------------------------------------------------------- #
# The module path of the providers in stacks created before they moved into their layers
# --------------------------------------------------------------------------- #


def __getattr__(name: str) -> Any:
    """`components.host_operations.<X>Provider`, where every provider lived from the layered layout (commit b17a449)
    until they moved into their layers (bcf2d48): a stack created then names it in its state. Resolved from
    PROVIDERS_MODULE on first use (PEP 562; pickle's find_class reaches it through getattr): that module imports
    the layers, which import this one. Remove once no supported stack was created before bcf2d48 (CHANGELOG)."""
    if name.endswith("Provider"):
        return getattr(importlib.import_module(PROVIDERS_MODULE), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
