"""Provider models: what each provider this program uses answers to the engine, at the pinned versions.

Versions read (the newest tags in the upstream snapshots; see docs/development.md):
pulumi-kubernetes v4.32.0 (provider.go, await/, helm_release.go unchanged up to 4.34.x but for the
waitFor parser), pulumi-command v1.2.1 (+ pulumi-go-provider v1.3.0 infer), terraform-provider-docker
v4.5.0 (pulumi-docker v5.x), and the pulumi engine at 1b594989 (pkg/resource/plugin/provider_plugin.go for
unconfigured providers and providers without preview support).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from components import kube
from components.host_operations import OPERATOR_ERRORS
from components.kube import ApiError, UnreachableError
from sdk import host_error_text
from tests.support import sdk
from tests.support.sim import hostapi, paths, pki, scripts, systems
from tests.support.sim.state import UNKNOWN, Resource, annotate_secrets, comparable, contains_unknown, plain, secret
from tests.support.sim.world import HelmRelease, KubeApi, WaitTimeoutError, World

if TYPE_CHECKING:
    from tests.support.sim.engine import Engine


class ProviderError(Exception):
    """A provider operation failed; the message is what `pulumi up` would print for the resource."""


class CheckFailedError(ProviderError):
    """The provider's Check refused an input (pulumirpc.CheckFailure): the engine reports it and registers nothing
    for the resource (step_generator.go issueCheckFailures, then "resource ... is invalid")."""

    def __init__(self, property_name: str, value: Any, reason: str):
        # diag/errors.go GetResourcePropertyInvalidValueError: "%v resource '%v': property %v value %v has a problem:
        # %v" (type and name are added by the engine).
        super().__init__(f"property {property_name} value {{{value}}} has a problem: {reason}")


@dataclass
class Diff:
    changes: bool | None  # None: the provider did not say (DIFF_UNKNOWN); the engine compares inputs
    replace_keys: list[str] = field(default_factory=list)
    detailed: list[str] = field(default_factory=list)
    changed_keys: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    unavailable: bool = False  # the provider's configuration is unknown (preview)
    diagnostics: list[str] = field(default_factory=list)  # what the provider printed (dynamic providers)


@dataclass
class Context:
    world: World
    engine: Engine
    preview: bool
    env: dict[str, str]

    def provider_of(self, resource: Resource) -> Resource | None:
        return self.engine.provider_resource(resource)


# --------------------------------------------------------------------------- #
# Diffs of plain input trees
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Change:
    path: tuple
    kind: str  # "add" | "update" | "delete" | "computed"


def structural_diff(old: Any, new: Any, path: tuple = ()) -> list[Change]:
    """What changed between two input trees, the way pulumi-kubernetes' patchConverter walks a JSON merge
    patch (provider.go L3191-3360): maps and arrays recurse, an unknown new value is one entry at its own
    path ("computed values are rendered as null in the patch"), anything else differing is an update."""
    return _structural_diff(comparable(old), comparable(new), path)


def _structural_diff(old: Any, new: Any, path: tuple) -> list[Change]:
    """structural_diff of two trees that are already `comparable` (converted once, not at every level)."""
    if new == UNKNOWN:
        return [] if old == UNKNOWN else [Change(path, "computed")]
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for key in sorted(set(old) | set(new), key=str):
            if key not in new:
                changes.append(Change((*path, key), "delete"))
            elif key not in old:
                changes.append(Change((*path, key), "add"))
            else:
                changes += _structural_diff(old[key], new[key], (*path, key))
        return changes
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [c for i, (a, b) in enumerate(zip(old, new, strict=True)) for c in _structural_diff(a, b, (*path, i))]
    return [] if old == new else [Change(path, "update")]


def changed_paths(old: dict[str, Any], new: dict[str, Any]) -> list[tuple]:
    return [change.path for change in structural_diff(old, new)]


def k8s_path(path: tuple) -> str:
    """pulumi-kubernetes provider.go L3360-3375: segments holding any of `."[]` are written `["..."]`."""
    out = ""
    for segment in path:
        if isinstance(segment, int):
            out += f"[{segment}]"
        elif any(c in segment for c in '."[]'):
            out += '["' + segment.replace('"', '\\"') + '"]'
        else:
            out += f".{segment}" if out else segment
    return out


def _prefix_in(path: tuple, prefixes: list[tuple]) -> bool:
    return any(paths.contains(prefix, path) for prefix in prefixes)


# --------------------------------------------------------------------------- #
# Kubernetes (pulumi-kubernetes)
# --------------------------------------------------------------------------- #

# pulumi-kubernetes provider/diff.go forceNewProperties: always .metadata.name/.namespace; Secret
# .type/.stringData/.data (enableSecretMutable off); Pod: most of .spec (diff.go L119-151, L225-252).
_POD_SPEC_REPLACE = (
    "affinity", "automountServiceAccountToken", "dnsConfig", "dnsPolicy", "enableServiceLinks", "hostAliases",
    "hostIPC", "hostNetwork", "hostPID", "hostname", "imagePullSecrets", "nodeName", "nodeSelector", "overhead",
    "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "restartPolicy", "runtimeClassName",
    "schedulerName", "securityContext", "serviceAccount", "serviceAccountName", "shareProcessNamespace",
    "subdomain", "terminationGracePeriodSeconds", "volumes",
)
_CONTAINER_REPLACE = (
    "args", "command", "env", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "ports", "readinessProbe",
    "resources", "securityContext", "stdin", "stdinOnce", "terminationMessagePath", "terminationMessagePolicy",
    "tty", "volumeDevices", "volumeMounts", "workingDir",
)


def _force_new(kind: str, patch: bool) -> list[tuple]:
    fields: list[tuple] = [("metadata", "name"), ("metadata", "namespace")]
    if patch:
        return fields
    if kind == "Secret":
        fields += [("type",), ("stringData",), ("data",)]
    if kind == "Pod":
        fields += [("spec", f) for f in _POD_SPEC_REPLACE]
        for containers in ("containers", "initContainers"):
            fields += [("spec", containers, "*", f) for f in _CONTAINER_REPLACE]
    return fields


@dataclass(frozen=True)
class K8sConfig:
    known: bool
    kubeconfig: str | None
    delete_unreachable: bool
    cluster_identifier: str | None
    upsert: bool


def _truthy(value: Any) -> bool:
    return plain(value) in (True, "true", "True")


def k8s_config(ctx: Context, resource: Resource) -> K8sConfig:
    provider = ctx.provider_of(resource)
    if provider is None:
        # The default provider reads $KUBECONFIG; the simulated Pulumi host has none.
        return K8sConfig(True, None, False, None, False)
    inputs = provider.inputs
    kubeconfig = inputs.get("kubeconfig")
    known = not contains_unknown(kubeconfig)
    if "deleteUnreachable" in inputs:
        delete_unreachable = _truthy(inputs["deleteUnreachable"])
    else:
        # provider.go L619-633: without the provider setting, the environment variable decides.
        delete_unreachable = ctx.env.get("PULUMI_K8S_DELETE_UNREACHABLE") == "true"
    return K8sConfig(known, plain(kubeconfig) if known else None, delete_unreachable,
                     plain(inputs.get("clusterIdentifier")), _truthy(inputs.get("upsertExistingObjects")))


def _connect(ctx: Context, config: K8sConfig) -> tuple[KubeApi, pki.Identity]:
    if not config.kubeconfig:
        raise UnreachableError("no kubeconfig")
    api = ctx.world.api_for(config.kubeconfig)
    return api, api.authenticate(config.kubeconfig)


def _kind_of(resource: Resource) -> tuple[str, bool]:
    """(Kubernetes kind, is a Patch resource) from the Pulumi type token."""
    kind = resource.type.rsplit(":", 1)[-1]
    if kind.endswith("Patch"):
        return kind[: -len("Patch")], True
    return kind, False


def _object(resource: Resource, kind: str) -> dict[str, Any]:
    obj = {k: v for k, v in plain(resource.inputs).items() if not k.startswith("__")}
    obj["kind"] = kind
    if obj.get("type") is None:
        obj.pop("type", None)
    if "stringData" in obj and kind == "Secret":
        obj["stringData"] = {k: str(v) for k, v in obj["stringData"].items()}
    return obj


def _object_id(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else metadata["name"]


def _unreachable_message(what: str) -> str:
    return (f"{what}: configured Kubernetes cluster is unreachable. If the cluster was deleted, you can remove this "
            "resource from Pulumi state by rerunning the operation with the PULUMI_K8S_DELETE_UNREACHABLE "
            'environment variable set to "true"')


def _wait_for(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get("pulumi.com/waitFor")


def _jsonpath_satisfied(obj: dict[str, Any], expression: str) -> bool:
    """`jsonpath={.a.b.c}=Value` as pulumi-kubernetes await/condition/jsonpath.go evaluates it, including the
    rule that status.observedGeneration must have caught up with metadata.generation."""
    spec = expression.removeprefix("jsonpath=")
    path, _, expected = spec.partition("}=")
    value: Any = obj
    for part in path.strip("{").strip(".").split("."):
        value = value.get(part) if isinstance(value, dict) else None
    generation = (obj.get("metadata") or {}).get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration")
    if generation is not None and observed is not None and observed < generation:
        return False
    return value == expected


def _stored_live_pruned(old: Resource) -> dict[str, Any]:
    """What pulumi-kubernetes v4.32.0 provider.go Diff compares the new inputs with: the stored live object (the
    state) pruned to the old inputs' fields (pruneLiveState), not the old inputs themselves. A field the server
    changed after our write shows only once the state holds it (a create or update stores the object it wrote, a
    refresh the live one). A state without a live object (a Patch resource, an unknown one) falls back to the
    old inputs."""
    live = plain(old.outputs)
    if not isinstance(live, dict) or not live.get("metadata") or contains_unknown(old.outputs):
        return old.inputs
    pruned = prune_map(live, plain(old.inputs))
    return old.inputs if comparable(pruned) == comparable(old.inputs) else annotate_secrets(pruned, old.inputs)


class KubernetesModel:
    """pulumi-kubernetes for ordinary objects, custom resources and Patch resources."""

    def diff(self, ctx: Context, old: Resource, new: Resource) -> Diff:
        config = k8s_config(ctx, new)
        if not config.known:
            # provider_plugin.go L1311-1315: an unconfigured provider cannot diff (DiffUnavailable -> update).
            return Diff(changes=True, unavailable=True)
        kind, patch = _kind_of(new)
        changed = changed_paths(_stored_live_pruned(old), new.inputs)
        if not changed:
            return Diff(changes=False)
        # A change replaces when a force-new field covers its path (openapi.PatchPropertiesChanged on the patch
        # slice): an unknown `metadata` is one entry at `metadata`, which `.metadata.name` does not cover.
        replace = [p for p in changed if _prefix_in(p, _force_new(kind, patch))]
        metadata = plain(new.inputs).get("metadata")
        named = isinstance(metadata, dict) and bool(metadata.get("name"))
        same_identity = not any(p[:2] in (("metadata", "name"), ("metadata", "namespace")) for p in changed)
        return Diff(
            changes=True,
            detailed=[k8s_path(p) for p in changed],
            changed_keys=sorted({str(p[0]) for p in changed}),
            replace_keys=sorted({k8s_path(p) for p in replace}),
            # provider.go L1645-1657: named (not autonamed) objects with the same name are delete-before-replace.
            delete_before_replace=bool(replace) and named and same_identity,
        )

    def create(self, ctx: Context, resource: Resource) -> tuple[str, dict[str, Any]]:
        config = k8s_config(ctx, resource)
        kind, patch = _kind_of(resource)
        if ctx.preview:
            if not config.known:
                return "", {}  # provider_plugin.go L1436-1441: nothing known
            inputs_only = ("", dict(resource.inputs))
            if contains_unknown(resource.inputs) or patch:
                return inputs_only  # provider.go L1724-1736
            try:
                api, identity = _connect(ctx, config)
            except (UnreachableError, ApiError):
                return inputs_only  # gvkExists is false for an unreachable cluster
            if kind not in api.kinds:
                return inputs_only
            try:
                obj = api.create(identity, _object(resource, kind), dry_run=True)
            except ApiError as error:
                if error.status in (403, 404, 409):
                    return inputs_only  # Forbidden, missing namespace, AlreadyExists: failedPreview
                raise ProviderError(f"preview failed: {error}") from None
            obj.pop("status", None)  # provider.go L1849-1854
            return "", obj
        try:
            api, identity = _connect(ctx, config)
        except UnreachableError as error:
            raise ProviderError(_unreachable_message(f"create failed ({error})")) from None
        except ApiError as error:
            raise ProviderError(str(error)) from None
        obj = _object(resource, kind)
        try:
            if patch:
                # await.go L190-201: a server-side apply, which creates the object when it is missing.
                live = api.find(kind, (obj.get("metadata") or {}).get("namespace"), obj["metadata"]["name"])
                if live is None:
                    ctx.world.log(f"{resource.name}: server-side apply created {kind} {obj['metadata']['name']}")
                    created = api.create(identity, {**obj, "metadata": dict(obj["metadata"])})
                else:
                    created = api.update(identity, obj)
            else:
                created = api.create(identity, obj)
        except ApiError as error:
            # await.go L267-274: only NotFound and NoMatch are retried; a 403 fails at once.
            raise ProviderError(
                f"resource {_object_id(obj)} was not successfully created by the Kubernetes API server: "
                f"{error}") from None
        live = self._await(ctx, api, kind, created, resource)
        return _object_id(created), live

    def _await(self, ctx: Context, api: KubeApi, kind: str, obj: dict[str, Any], resource: Resource) -> dict:
        live = api.find(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"]) or obj
        if kind == "Pod":
            systems.schedule(ctx.world, api, live)
            if (live.get("status") or {}).get("phase") != "Running":
                why = (live.get("status") or {}).get("message") or "no node fits its requests"
                raise PartialFailureError(copy.deepcopy(live), f"timed out waiting for Pod {_object_id(live)} to be "
                                                          f"Ready (it is Pending: {why})")
        expression = _wait_for(live)
        if expression and not _jsonpath_satisfied(live, expression):
            raise PartialFailureError(copy.deepcopy(live), f"timed out waiting for {kind} {_object_id(live)}: "
                                                      f"{expression} not satisfied")
        return copy.deepcopy(live)

    def update(self, ctx: Context, old: Resource, resource: Resource) -> dict[str, Any]:
        config = k8s_config(ctx, resource)
        kind, patch = _kind_of(resource)
        if ctx.preview:
            if not config.known:
                return {}
            if contains_unknown(resource.inputs):
                return dict(resource.inputs)  # provider.go L2367-2372
            try:
                api, identity = _connect(ctx, config)
                obj = _object(resource, kind)
                api.get(identity, kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
                # await.go Update in preview: a dry-run apply over the live object; status is kept.
                return api.update(identity, obj, dry_run=True)
            except (UnreachableError, ApiError):
                return dict(resource.inputs)
        try:
            api, identity = _connect(ctx, config)
        except UnreachableError as error:
            raise ProviderError(_unreachable_message(f"update failed ({error})")) from None
        obj = _object(resource, kind)
        try:
            # await.go L460-465: the live object is read first; a missing one fails the update.
            api.get(identity, kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            updated = api.update(identity, obj)
        except ApiError as error:
            raise ProviderError(f"update of resource {_object_id(obj)} failed because the Kubernetes API server "
                                f"reported that it failed to fully initialize or become live: unable to get cluster "
                                f"state: {error}") from None
        return self._await(ctx, api, kind, updated, resource)

    def delete(self, ctx: Context, old: Resource) -> None:
        config = k8s_config(ctx, old)
        kind, patch = _kind_of(old)
        try:
            api, identity = _connect(ctx, config)
        except UnreachableError:
            if config.delete_unreachable:
                ctx.world.log(f"{old.name}: cluster unreachable; dropped from the state")
                return
            raise ProviderError(_unreachable_message("delete failed")) from None
        obj = _object(old, kind)
        namespace, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
        if patch:
            # await.go L958-961: a Patch resource gives up its fields instead of deleting the object.
            live = api.find(kind, namespace, name)
            if live is not None:
                for section in ("annotations", "labels"):
                    for key in (obj["metadata"].get(section) or {}):
                        (live["metadata"].get(section) or {}).pop(key, None)
            return
        try:
            api.delete(identity, kind, namespace, name)
        except ApiError as error:
            if error.status == 404:
                return  # already gone
            raise ProviderError(f"delete failed: {error}") from None
        if api.find(kind, namespace, name) is not None:
            raise ProviderError(f"timed out waiting for {kind} {name} to be deleted (finalizers: "
                                f"{api.find(kind, namespace, name)['metadata'].get('finalizers')})")

    def read(self, ctx: Context, resource: Resource) -> dict[str, Any] | None:
        config = k8s_config(ctx, resource)
        if not config.known:
            return {}  # provider_plugin.go L1548-1553: an empty bag
        kind, _ = _kind_of(resource)
        namespace, _, name = resource.id.rpartition("/")
        try:
            api, identity = _connect(ctx, config)
        except UnreachableError:
            if config.delete_unreachable:
                return None
            raise ProviderError("failed to read resource state due to unreachable cluster") from None
        try:
            return api.get(identity, kind, namespace or None, name)
        except ApiError as error:
            if error.status == 404:
                return None  # provider.go L2053-2064: the delete response
            raise ProviderError(f"failed to read {resource.id}: {error}") from None

    def refresh(self, ctx: Context, resource: Resource) -> Refreshed | None:
        """provider.go Read for `pulumi refresh`: the live object as state, and as inputs the live object pruned to
        the fields the old inputs have (pruneLiveState, util.go pruneMap/pruneSlice), secrets marked as the old
        inputs had them (annotateSecrets). A change made on the cluster then shows in the next `up`'s diff."""
        live = self.read(ctx, resource)
        if live is None:
            return None
        if not live:
            return Refreshed(dict(resource.inputs), dict(resource.outputs))
        pruned = prune_map(copy.deepcopy(live), plain(resource.inputs))
        inputs = resource.inputs if comparable(pruned) == comparable(resource.inputs) else \
            annotate_secrets(pruned, resource.inputs)
        return Refreshed(inputs, {**resource.outputs, **live})


class PartialFailureError(Exception):
    """Created, but its readiness wait failed: the engine records it with an initialization error."""

    def __init__(self, outputs: dict[str, Any], message: str):
        super().__init__(message)
        self.outputs = outputs


# --------------------------------------------------------------------------- #
# Helm releases (pulumi-kubernetes helm_release.go + helm v3.20.2)
# --------------------------------------------------------------------------- #


def _release(resource: Resource) -> HelmRelease:
    inputs = plain(resource.inputs)
    values: dict[str, Any] = {}
    for asset in inputs.get("valueYamlFiles") or []:
        text = getattr(asset, "text", None)
        if text:
            values = systems_merge(values, yaml.safe_load(text) or {})
    values = systems_merge(values, inputs.get("values") or {})
    return HelmRelease(name=inputs.get("name") or resource.name, namespace=inputs.get("namespace") or "default",
                       chart=str(inputs.get("chart")), values=values, skip_crds=_truthy(inputs.get("skipCrds")))


def systems_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overlay.items():
        out[key] = systems_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def _chart_version(ctx: Context, chart: str) -> str:
    """helm_release.go locateChart + loader.Load for a chart without a repository: the chart directory's version.

    The provider runs in the project directory, so a relative path resolves against it; that is where the program
    looks for its charts too (components.helm.PROJECT_DIR, which the tests point at a stand-in tree).
    """
    from components import helm

    path = Path(chart) if Path(chart).is_absolute() else helm.PROJECT_DIR / chart
    metadata = path / "Chart.yaml"
    # localChart: a directory without Chart.yaml is not a chart; then a name starting with "." (or absolute) is
    # "path %q not found", anything else would be looked up in the local repositories (`helm repo add`).
    if not metadata.is_file():
        if Path(chart).is_absolute() or chart.startswith("."):
            raise CheckFailedError("chart", chart, f'path "{chart}" not found; check the chart name and repository '
                                               "configuration.")
        raise CheckFailedError("chart", chart, f'chart "{chart}" not found in any local repository; check the chart '
                                           "name and repository configuration.")
    return str((yaml.safe_load(metadata.read_text()) or {}).get("version"))


class HelmReleaseModel:
    def check(self, ctx: Context, old: Resource | None, new: Resource) -> None:
        """helm_release.go Check: with a configured provider (provider_plugin.go Check returns the inputs unchanged
        otherwise) and no unknown input, load the chart, and set `version` to the loaded chart's version.

        A repository chart is downloaded (repo index, then the package) in every such Check: the simulated machine
        reaches no chart site, like an offline host or one whose chart repository is down (helm_release.go Check).
        """
        if not k8s_config(ctx, new).known or contains_unknown(new.inputs):
            return
        inputs = plain(new.inputs)
        chart = str(inputs.get("chart"))
        repo = (inputs.get("repositoryOpts") or {}).get("repo")
        if repo:
            host = repo.split("://", 1)[-1].split("/", 1)[0]
            raise CheckFailedError("chart", chart, f'looks like "{repo}" is not a valid chart repository or cannot be '
                                               f'reached: Get "{repo.rstrip("/")}/index.yaml": dial tcp: lookup '
                                               f"{host}: no such host; check the chart name and repository "
                                               "configuration.")
        new.inputs = {**new.inputs, "version": _chart_version(ctx, chart)}

    def diff(self, ctx: Context, old: Resource, new: Resource) -> Diff:
        config = k8s_config(ctx, new)
        if not config.known:
            return Diff(changes=True, unavailable=True)
        changed = changed_paths(old.inputs, new.inputs)
        if not changed:
            return Diff(changes=False)
        replace = [p for p in changed if p[0] in ("name", "namespace")]
        # provider/pkg/provider/helm_release.go Diff: DeleteBeforeReplace is always false.
        return Diff(changes=True, detailed=[k8s_path(p) for p in changed],
                    changed_keys=sorted({str(p[0]) for p in changed}), replace_keys=[k8s_path(p) for p in replace],
                    delete_before_replace=False)

    def create(self, ctx: Context, resource: Resource) -> tuple[str, dict[str, Any]]:
        config = k8s_config(ctx, resource)
        if ctx.preview:
            if not config.known:
                return "", {}
            # helm_release.go L988-1004, L1274-1278: no Helm call; inputs with status/resourceNames unknown.
            return "", {**resource.inputs, "status": UNKNOWN, "resourceNames": UNKNOWN}
        release = _release(resource)
        try:
            api, _ = _connect(ctx, config)
        except (UnreachableError, ApiError):
            raise ProviderError("can't create Helm Release with unreachable cluster") from None
        if plain(resource.inputs).get("createNamespace"):
            api.ensure_namespace(release.namespace)
        outputs = {**resource.inputs,
                   "status": {"status": "deployed", "name": release.name, "revision": release.revision}}
        try:
            systems.helm_install(ctx.world, api, release)
        except (WaitTimeoutError, ApiError) as error:
            api.helm[(release.namespace, release.name)] = release  # helm leaves a failed release behind
            message = f"Helm release {release.namespace}/{release.name} failed: {error}"
            raise PartialFailureError(outputs, message) from None
        return f"{release.namespace}/{release.name}", outputs

    def update(self, ctx: Context, old: Resource, resource: Resource) -> dict[str, Any]:
        if ctx.preview:
            return {**resource.inputs, "status": UNKNOWN}
        config = k8s_config(ctx, resource)
        release = _release(resource)
        try:
            api, _ = _connect(ctx, config)
        except (UnreachableError, ApiError):
            raise ProviderError("can't update Helm Release with unreachable cluster") from None
        try:
            systems.helm_upgrade(ctx.world, api, release)
        except (WaitTimeoutError, ApiError) as error:
            raise ProviderError(f"Helm release {release.namespace}/{release.name} upgrade failed: {error}") from None
        return {**resource.inputs, "status": {"status": "deployed", "name": release.name, "revision": release.revision}}

    def delete(self, ctx: Context, old: Resource) -> None:
        config = k8s_config(ctx, old)
        release = _release(old)
        try:
            api, _ = _connect(ctx, config)
        except UnreachableError:
            # provider.go L2546-2553: checked before deleteUnreachable (pulumi-kubernetes#2675, PR #4593 open).
            raise ProviderError("can't delete Helm Release with unreachable cluster. Reason: \"cluster unreachable\"") \
                from None
        wait = not _truthy(old.inputs.get("skipAwait"))
        try:
            systems.helm_uninstall(ctx.world, api, release.name, release.namespace, wait=wait)
        except (WaitTimeoutError, ApiError) as error:
            raise ProviderError(str(error)) from None

    def read(self, ctx: Context, resource: Resource) -> dict[str, Any] | None:
        """helm_release.go Read: the release as Helm stores it; none (uninstalled by hand) is a delete."""
        config = k8s_config(ctx, resource)
        if not config.known:
            return dict(resource.outputs)
        try:
            api, _ = _connect(ctx, config)
        except UnreachableError:
            if config.delete_unreachable:
                return None
            raise ProviderError("failed to read resource state due to unreachable cluster") from None
        namespace, _, name = resource.id.rpartition("/")
        if (namespace, name) not in api.helm:
            return None
        return dict(resource.outputs)


# --------------------------------------------------------------------------- #
# Provider resources (DiffConfig)
# --------------------------------------------------------------------------- #


def _active_cluster(kubeconfig: str | None) -> Any:
    """provider/util.go getActiveClusterFromConfig: the current context's whole cluster entry."""
    try:
        return kube.current_context(kubeconfig or "").cluster
    except kube.KubeconfigError:
        return None


class KubernetesProviderModel:
    """`pulumi:providers:kubernetes`: DiffConfig (provider.go L454-569)."""

    def diff(self, ctx: Context, old: Resource, new: Resource) -> Diff:
        olds, news = old.inputs, new.inputs
        changed = changed_paths(olds, news)
        if not changed:
            return Diff(changes=False)
        keys = sorted({str(p[0]) for p in changed})
        replaces = []
        identifier_same = "clusterIdentifier" in news and not contains_unknown(news.get("clusterIdentifier")) and \
            plain(olds.get("clusterIdentifier")) == plain(news.get("clusterIdentifier"))
        if "clusterIdentifier" in keys and "clusterIdentifier" in olds:
            replaces.append("clusterIdentifier")
        if contains_unknown(news.get("kubeconfig")):
            # "We can't tell for sure if a computed value has changed, so we make the conservative choice and
            # force a replacement" -- unless a same clusterIdentifier clears the replaces (deferred).
            return Diff(changes=True, changed_keys=keys, replace_keys=[] if identifier_same else ["kubeconfig"])
        old_cluster, new_cluster = _active_cluster(plain(olds.get("kubeconfig"))), \
            _active_cluster(plain(news.get("kubeconfig")))
        if old_cluster is not None and new_cluster is not None and old_cluster != new_cluster and "kubeconfig" in keys:
            replaces.append("kubeconfig")
        if identifier_same:
            replaces = []
        return Diff(changes=True, changed_keys=keys, detailed=keys, replace_keys=replaces)

    def create(self, ctx: Context, resource: Resource) -> tuple[str, dict[str, Any]]:
        return ("" if ctx.preview else ctx.engine.new_provider_id()), dict(resource.inputs)

    def update(self, ctx: Context, old: Resource, resource: Resource) -> dict[str, Any]:
        return dict(resource.inputs)

    def delete(self, ctx: Context, old: Resource) -> None:
        return None

    def read(self, ctx: Context, resource: Resource) -> dict[str, Any] | None:
        return dict(resource.outputs)


# --------------------------------------------------------------------------- #
# pulumi-command (local and remote Command)
# --------------------------------------------------------------------------- #


def _check_host_key(ctx: Context, resource: Resource) -> None:
    if resource.type != "command:remote:Command":
        return
    connection = plain(resource.inputs).get("connection") or {}
    host = ctx.world.ssh.get(connection.get("host", ""))
    pinned = connection.get("hostKey")
    if host is not None and pinned and pinned != host.host_key:
        raise ProviderError(f"ssh: handshake failed: ssh: host key mismatch for {host.host}")
    if host is not None and not pinned:
        ctx.world.log(f"{resource.name}: connected to {host.host} without checking its host key")


class CommandModel:
    """pulumi-command v1.2.1 local/remote Command (commandController.go; infer/resource.go of go-provider v1.3.0)."""

    def diff(self, ctx: Context, old: Resource, new: Resource) -> Diff:
        changed = changed_paths(old.inputs, new.inputs)
        if not changed:
            return Diff(changes=False)
        # common/inputs.go: `triggers` is replaceOnChanges; everything else is an update (CustomUpdate).
        replace = [p for p in changed if p[0] == "triggers"]
        return Diff(changes=True, detailed=[paths.render(p) for p in changed],
                    changed_keys=sorted({str(p[0]) for p in changed}),
                    replace_keys=["triggers"] if replace else [])

    def _outputs(self, resource: Resource, stdout: Any, stderr: Any) -> dict[str, Any]:
        outputs = dict(resource.inputs)
        outputs["stdout"], outputs["stderr"] = stdout, stderr
        return outputs

    def create(self, ctx: Context, resource: Resource) -> tuple[str, dict[str, Any]]:
        # commandController.go Create: a random non-empty id even in preview, where nothing runs and the
        # outputs that do not mirror an input (stdout, stderr) are unknown.
        new_id = hashlib.sha1(f"{resource.urn}{len(ctx.engine.state)}".encode()).hexdigest()[:8]
        if ctx.preview:
            return f"{resource.name}-{new_id}", self._outputs(resource, UNKNOWN, UNKNOWN)
        _check_host_key(ctx, resource)
        stdout = self._run(ctx, resource, "create")
        return f"{resource.name}-{new_id}", self._outputs(resource, stdout, "")

    def update(self, ctx: Context, old: Resource, resource: Resource) -> dict[str, Any]:
        if ctx.preview:
            return self._outputs(resource, UNKNOWN, UNKNOWN)
        _check_host_key(ctx, resource)
        # commandController.go Update: without an `update` command, `create` runs again.
        action = "update" if plain(resource.inputs).get("update") else "create"
        return self._outputs(resource, self._run(ctx, resource, action), "")

    def delete(self, ctx: Context, old: Resource) -> None:
        # Delete runs the stored (old) inputs: the old delete command, environment and stdin.
        if not plain(old.inputs).get("delete"):
            return
        self._run(ctx, old, "delete")

    def _run(self, ctx: Context, resource: Resource, action: str) -> str:
        command = str(plain(resource.inputs).get(action) or "")
        try:
            # What runs is read from the inputs as data (scripts.invocation), never from the bash text.
            return scripts.execute(ctx.world, resource.type, resource.inputs, action)
        except scripts.CommandFailedError as error:
            # commandOutputs.go: the error carries the command and the combined output.
            raise ProviderError(f"exit status 1: running {command.splitlines()[0][:80]!r}:\n{error}") from None

    def read(self, ctx: Context, resource: Resource) -> dict[str, Any] | None:
        return dict(resource.outputs)


# --------------------------------------------------------------------------- #
# Docker (pulumi-docker / terraform-provider-docker v4.5.0)
# --------------------------------------------------------------------------- #

# resource_docker_container.go: only these change a running container in place.
_CONTAINER_IN_PLACE = {"restart", "maxRetryCount", "memory", "memoryReservation", "cpuShares", "cpuSet", "memorySwap",
                       "healthcheck", "tmpfs", "init", "mustRun", "wait", "waitTimeout", "rm", "start", "attach",
                       "logs", "removeVolumes", "destroyGraceSeconds"}


class DockerContainerModel:
    def diff(self, ctx: Context, old: Resource, new: Resource) -> Diff:
        changed = changed_paths(old.inputs, new.inputs)
        if not changed:
            return Diff(changes=False)
        keys = sorted({str(p[0]) for p in changed})
        replace = [k for k in keys if k not in _CONTAINER_IN_PLACE]
        # pulumi-docker provider/resources.go: docker_container is delete-before-replace when the provider
        # itself asks for a replacement.
        return Diff(changes=True, changed_keys=keys, detailed=keys, replace_keys=replace,
                    delete_before_replace=bool(replace))

    def create(self, ctx: Context, resource: Resource) -> tuple[str, dict[str, Any]]:
        if ctx.preview:
            return "", dict(resource.inputs)
        inputs = plain(resource.inputs)
        name = inputs["name"]
        docker = ctx.world.docker
        if name in docker.containers:
            raise ProviderError(f'Unable to create container: Error response from daemon: Conflict. The container name '
                                f'"/{name}" is already in use')
        networks = [n.get("name") for n in inputs.get("networksAdvanced") or []]
        for network in networks:
            if network not in docker.networks:
                raise ProviderError(f"Unable to create container: network {network} not found")
        labels = {entry["label"]: entry["value"] for entry in inputs.get("labels") or []}
        volumes = tuple(v["volumeName"] for v in inputs.get("volumes") or [] if v.get("volumeName"))
        for volume in volumes:
            # moby daemon/create.go: a named volume a container mounts is created if it does not exist.
            docker.volumes.setdefault(volume, {})
        container = scripts_container(name, inputs, networks, labels)
        container.volumes = volumes
        container.env = tuple(inputs.get("envs") or ())
        container.restart = str(inputs.get("restart") or "no")
        container.healthcheck = tuple((inputs.get("healthcheck") or {}).get("tests") or ())
        docker.containers[name] = container
        ctx.world.machines.pop(name, None)  # a new container is a new machine
        container_id = f"container-{name}-{ctx.engine.serial()}"
        outputs = {**resource.inputs, "id": UNKNOWN}
        if inputs.get("start") is False:
            container.running = False
            return container_id, outputs
        docker.start(container)
        # resource_docker_container_funcs.go (v4.5.0) Create: the id is set before the start, so a failed wait
        # leaves a created container in the state (the bridge reports an initialization error).
        if _truthy(inputs.get("wait")):
            if not container.healthcheck:
                raise PartialFailureError(outputs, "you have supplied a 'wait' argument, but the container does not "
                                                   "have a healthcheck defined. Please remove the 'wait' argument or "
                                                   "add a 'healthcheck' attribute")
            if container.health != "healthy":
                # waitForHealthyState polls until wait_timeout (default 60 s), then errContainerFailedToBeInHealthyState.
                raise PartialFailureError(outputs, "container failed to be in healthy state")
        return container_id, outputs

    def update(self, ctx: Context, old: Resource, resource: Resource) -> dict[str, Any]:
        return dict(resource.inputs)

    def delete(self, ctx: Context, old: Resource) -> None:
        name = plain(old.inputs)["name"]
        ctx.world.docker.containers.pop(name, None)
        ctx.world.machines.pop(name, None)

    def read(self, ctx: Context, resource: Resource) -> dict[str, Any] | None:
        """resource_docker_container_funcs.go resourceDockerContainerRead: a container that no longer exists is
        removed from the state (d.SetId(""))."""
        if plain(resource.inputs).get("name") not in ctx.world.docker.containers:
            return None
        return dict(resource.outputs)


def scripts_container(name: str, inputs: dict[str, Any], networks: list[str], labels: dict[str, str]):
    from tests.support.sim.world import Container

    return Container(name=name, image=str(inputs.get("image")), network=(networks or ["bridge"])[0], labels=labels,
                     privileged=bool(inputs.get("privileged")),
                     # resource_docker_container.go: `restart` defaults to "no"; max_retry_count applies to on-failure.
                     restart=str(inputs.get("restart") or "no"))


class DockerImageModel:
    def diff(self, ctx: Context, old: Resource, new: Resource) -> Diff:
        changed = changed_paths(old.inputs, new.inputs)
        if not changed:
            return Diff(changes=False)
        keys = sorted({str(p[0]) for p in changed})
        return Diff(changes=True, changed_keys=keys, detailed=keys,
                    replace_keys=[k for k in keys if k in ("name", "pullTriggers", "triggers", "platform")])

    def create(self, ctx: Context, resource: Resource) -> tuple[str, dict[str, Any]]:
        name = plain(resource.inputs)["name"]
        digest = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
        if ctx.preview:
            return "", {**resource.inputs, "imageId": UNKNOWN, "repoDigest": UNKNOWN}
        docker = ctx.world.docker
        if name not in docker.images:
            docker.image_pulls.append(name)
            docker.images.add(name)
        docker.image_names[digest] = name
        return f"{digest}{name}", {**resource.inputs, "imageId": digest, "repoDigest": f"{name}@{digest}"}

    def update(self, ctx: Context, old: Resource, resource: Resource) -> dict[str, Any]:
        return {**resource.inputs, "imageId": old.outputs.get("imageId"), "repoDigest": old.outputs.get("repoDigest")}

    def delete(self, ctx: Context, old: Resource) -> None:
        if not _truthy(old.inputs.get("keepLocally")):  # resource_docker_image_funcs.go: keep_locally -> no-op
            ctx.world.docker.images.discard(plain(old.inputs)["name"])

    def read(self, ctx: Context, resource: Resource) -> dict[str, Any] | None:
        """resource_docker_remote_image.go Read: an image no longer on the host is removed from the state."""
        if plain(resource.inputs).get("name") not in ctx.world.docker.images:
            return None
        return dict(resource.outputs)


def _label_set(value: Any) -> set[tuple[str, str]]:
    return {(entry["label"], entry["value"]) for entry in plain(value) or []}


class DockerVolumeModel:
    """docker_volume (terraform-provider-docker v4.5.0 resource_docker_volume.go): name, labels, driver and
    driver_opts force a new volume; id = name. Create ends in Read, which stores what Docker reports: for a name
    that exists, that volume with its own labels (moby volume/service/store.go create: "there is an existing
    volume ... return it. TODO: there could be some inconsistent details such as labels here")."""

    # Optional and Computed: a value the config leaves out is no difference.
    _COMPUTED = ("name", "driver")

    def diff(self, ctx: Context, old: Resource, new: Resource) -> Diff:
        # The bridge diffs the stored state (Read's labels) with the config (pulumi-terraform-bridge
        # pkg/tfbridge/provider.go Diff), then drops the attributes ignoreChanges names (tfshim/sdk-v2
        # processIgnoreChanges).
        state, config = old.outputs or old.inputs, new.inputs
        changed = []
        for key in ("name", "labels", "driver", "driverOpts"):
            if key in new.ignore_changes:
                continue
            want = config.get(key)
            if contains_unknown(want):
                changed.append(key)
            elif want is None and key in self._COMPUTED:
                continue
            elif key == "labels":
                if _label_set(want) != _label_set(state.get(key)):
                    changed.append(key)
            elif (plain(want) or None) != (plain(state.get(key)) or None):
                changed.append(key)
        if not changed:
            return Diff(changes=False)
        return Diff(changes=True, changed_keys=changed, detailed=changed, replace_keys=changed)

    def create(self, ctx: Context, resource: Resource) -> tuple[str, dict[str, Any]]:
        inputs = plain(resource.inputs)
        name = inputs["name"]
        if ctx.preview:
            return "", dict(resource.inputs)
        labels = {entry["label"]: entry["value"] for entry in inputs.get("labels") or []}
        stored = ctx.world.docker.volumes.setdefault(name, labels)
        return name, {**resource.inputs, "driver": "local", "mountpoint": f"/var/lib/docker/volumes/{name}/_data",
                      "labels": [{"label": key, "value": value} for key, value in sorted(stored.items())]}

    def update(self, ctx: Context, old: Resource, resource: Resource) -> dict[str, Any]:
        return dict(resource.inputs)

    def delete(self, ctx: Context, old: Resource) -> None:
        name = plain(old.inputs)["name"]
        users = [c.name for c in ctx.world.docker.containers.values() if name in c.volumes]
        if users:
            raise ProviderError(f"Error removing volume {name}: volume is in use - {users}")
        ctx.world.docker.volumes.pop(name, None)

    def read(self, ctx: Context, resource: Resource) -> dict[str, Any] | None:
        """resource_docker_volume.go resourceDockerVolumeRead: a volume that is gone is removed from the state; one
        that exists reports its own labels."""
        name = plain(resource.outputs or resource.inputs).get("name")
        labels = ctx.world.docker.volumes.get(name)
        if labels is None:
            return None
        return {**resource.outputs, "labels": [{"label": k, "value": v} for k, v in sorted(labels.items())]}


def docker_get_network(world: World, args: dict[str, Any]) -> dict[str, Any]:
    name = args.get("name", "")
    subnets = world.docker.networks.get(name)
    if subnets is None:
        raise ProviderError(f"Could not find docker network: Error response from daemon: network {name} not found")
    return {"id": f"network-{name}", "name": name, "driver": "bridge",
            "ipamConfigs": [{"subnet": subnet} for subnet in subnets]}


# --------------------------------------------------------------------------- #
# Python dynamic providers (pulumi/dynamic/__main__.py)
# --------------------------------------------------------------------------- #


def _dynamic_provider(ctx: Context, inputs: dict[str, Any]):
    """The provider the inputs pickle, as the dynamic-provider host loads it, pointed at the simulated machine."""
    import dill

    provider = dill.loads(base64.b64decode(plain(inputs)["__provider"]))
    return hostapi.attach(provider, ctx.world)


@contextlib.contextmanager
def _as_provider_host(printed: list[str]):
    """A provider call as the dynamic provider host makes it: the host configures the SDK without an engine
    address (pulumi/dynamic/__main__.py get_provider: `configure(Settings(project=..., stack="stack", ...))`), so
    `pulumi.log.warn` and friends print to stderr (pulumi/log.py: `print("warning: " + msg, file=sys.stderr)`), and
    the engine reads the plugin's stderr line by line into its diagnostics (sdk/go/common/resource/plugin/plugin.go
    runtrace; not hidden for pulumi-resource-pulumi-python, isDynamicPluginBinary). Each non-empty line printed
    lands in `printed`."""
    buffer = io.StringIO()
    try:
        with sdk.engine_detached(), contextlib.redirect_stderr(buffer):
            yield
    finally:
        printed += [line.rstrip() for line in buffer.getvalue().splitlines() if line.strip()]


def _host_error(error: Exception) -> ProviderError:
    """pulumi 3.272.0 pulumi/dynamic/__main__.py _abort_with_traceback: the host answers a provider's exception with
    `traceback.format_exc()`, as the program sets it there (sdk.report_host_errors_by_message), and the engine
    prints that status message as the resource's error."""
    return ProviderError(host_error_text(error, OPERATOR_ERRORS))


class DynamicModel:
    """A Python dynamic provider: its own create/diff/update/delete run, as the dynamic provider host runs them.

    The provider accepts no secrets (Configure returns acceptSecrets=false): inputs arrive unwrapped, and
    outputs are marked secret where the input of the same name was (annotateSecrets). It does not support
    preview: in preview its Create/Update are not called and the inputs stand in for the outputs
    (provider_plugin.go L1442-1443, L1718-1719).
    """

    def check(self, ctx: Context, old: Resource | None, new: Resource) -> None:
        """dynamic/__main__.py Check: the provider's check, given the stored inputs (SG:1333-1340), sets the inputs;
        the default one (pulumi/dynamic/dynamic.py ResourceProvider.check) returns them unchanged."""
        from pulumi.dynamic import ResourceProvider

        provider = _dynamic_provider(ctx, new.inputs)
        if type(provider).check is ResourceProvider.check:
            return
        news = {k: (v if not contains_unknown(v) else sdk.Unknown()) for k, v in plain(new.inputs).items()}
        with _as_provider_host([]):
            result = provider.check(plain(old.inputs) if old is not None else {}, news)
        for failure in result.failures:
            raise CheckFailedError(failure.property, news.get(failure.property), failure.reason)
        # rpc.serialize_properties sends no None value.
        changed = {k: v for k, v in result.inputs.items() if k not in news or v is not news[k]}
        new.inputs = {k: v for k, v in {**new.inputs, **changed}.items() if k not in changed or v is not None}

    def diff(self, ctx: Context, old: Resource, new: Resource) -> Diff:
        provider = _dynamic_provider(ctx, new.inputs if not contains_unknown(new.inputs.get("__provider"))
                                     else old.inputs)
        # dynamic/__main__.py Diff deserializes with keep_unknowns: an unknown input is an `Unknown` object.
        news = {k: (v if not contains_unknown(v) else sdk.Unknown()) for k, v in plain(new.inputs).items()}
        printed: list[str] = []
        try:
            with _as_provider_host(printed):
                result = provider.diff(old.id, plain(old.outputs), news)
        except Exception as error:  # noqa: BLE001 -- the host answers the Diff call with the exception as an error
            # step_generator.go diffResource returns the provider's error and the step fails, in a preview as in an
            # update (pulumi v3.259.0 pkg/resource/deploy/step_generator.go diff: no DryRun exception).
            raise _host_error(error) from None
        changed = changed_paths(old.inputs, new.inputs)
        return Diff(changes=result.changes, replace_keys=list(result.replaces or []),
                    changed_keys=sorted({str(p[0]) for p in changed}), detailed=[paths.render(p) for p in changed],
                    delete_before_replace=bool(result.delete_before_replace), diagnostics=printed)

    def create(self, ctx: Context, resource: Resource) -> tuple[str, dict[str, Any]]:
        if ctx.preview:
            return "", dict(resource.inputs)
        provider = _dynamic_provider(ctx, resource.inputs)
        try:
            result = provider.create(plain(resource.inputs))
        except Exception as error:  # noqa: BLE001 -- the dynamic host reports any exception as the failure
            raise _host_error(error) from None
        outputs = {**(result.outs or {}), "__provider": resource.inputs["__provider"]}
        return result.id, annotate_secrets(outputs, resource.inputs)

    def update(self, ctx: Context, old: Resource, resource: Resource) -> dict[str, Any]:
        if ctx.preview:
            return dict(resource.inputs)
        provider = _dynamic_provider(ctx, resource.inputs)
        try:
            result = provider.update(old.id, plain(old.outputs), plain(resource.inputs))
        except Exception as error:  # noqa: BLE001
            raise _host_error(error) from None
        outputs = {**(result.outs or {}), "__provider": resource.inputs["__provider"]}
        return annotate_secrets(outputs, resource.inputs)

    def delete(self, ctx: Context, old: Resource) -> None:
        provider = _dynamic_provider(ctx, old.outputs or old.inputs)
        try:
            provider.delete(old.id, plain(old.outputs))
        except Exception as error:  # noqa: BLE001
            raise _host_error(error) from None

    def read(self, ctx: Context, resource: Resource) -> dict[str, Any] | None:
        return dict(resource.outputs)


@dataclass
class Refreshed:
    """What a provider's Read returns to `pulumi refresh`: the inputs to keep and the new state."""

    inputs: dict[str, Any]
    outputs: dict[str, Any]


def refresh(model: Any, ctx: Context, resource: Resource) -> Refreshed | None:
    """A provider's Read in `pulumi refresh`; None when the resource is gone (an empty id, pulumi step.go
    RefreshStep.Apply). Models without an input-returning Read keep the old inputs (Read returns none): the
    docker bridge, pulumi-command (no Read of its own, pulumi-go-provider infer returns the state) and Python
    dynamic providers (ResourceProvider.read returns the state it is given, pulumi/dynamic/dynamic.py)."""
    if hasattr(model, "refresh"):
        return model.refresh(ctx, resource)
    outputs = model.read(ctx, resource)
    return None if outputs is None else Refreshed(dict(resource.inputs), outputs)


def prune_map(source: Any, target: Any) -> Any:
    """pulumi-kubernetes v4.32.0 provider/pkg/provider/util.go pruneMap: `source` with only the keys `target` has."""
    if not isinstance(source, dict) or not isinstance(target, dict):
        return None
    result: dict[str, Any] = {}
    for key, value in source.items():
        if key not in target:
            continue
        wanted = target[key]
        if value is None or wanted is None or type(value) is not type(wanted):
            result[key] = value
        elif isinstance(value, dict):
            result[key] = prune_map(value, wanted)
        elif isinstance(value, list):
            result[key] = _prune_slice(value, wanted)
        else:
            result[key] = value
    return result


def _prune_slice(source: list[Any], target: list[Any]) -> list[Any] | None:
    """util.go pruneSlice: element by element, as long as both have one; other element types copy `source`."""
    if not source or not target:
        return []
    if type(source[0]) is not type(target[0]):
        return copy.deepcopy(source)
    result = []
    for value, wanted in zip(source, target, strict=False):
        if value is None or wanted is None:
            result.append(value)
        elif isinstance(value, dict):
            result.append(prune_map(value, wanted))
        elif isinstance(value, list):
            result.append(_prune_slice(value, wanted))
        else:
            result.append(value)
    return result


MODELS: dict[str, Callable[[], Any]] = {
    "command:local:Command": CommandModel,
    "command:remote:Command": CommandModel,
    "docker:index/container:Container": DockerContainerModel,
    "docker:index/remoteImage:RemoteImage": DockerImageModel,
    "docker:index/volume:Volume": DockerVolumeModel,
    "kubernetes:helm.sh/v3:Release": HelmReleaseModel,
    "pulumi:providers:kubernetes": KubernetesProviderModel,
    "pulumi-python:dynamic:Resource": DynamicModel,
}


def model_for(type_: str):
    factory = MODELS.get(type_)
    if factory is not None:
        return factory()
    if type_.startswith("pulumi-python:dynamic"):
        return DynamicModel()
    if type_.startswith("kubernetes:"):
        return KubernetesModel()
    if type_.startswith("pulumi:providers:"):
        return KubernetesProviderModel()
    raise ProviderError(f"the simulator has no model of resource type {type_}")


__all__ = ["CheckFailedError", "Context", "Diff", "ProviderError", "PartialFailureError", "model_for",
           "docker_get_network", "secret", "os"]
