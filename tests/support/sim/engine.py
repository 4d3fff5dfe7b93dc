"""A Pulumi engine for the real program: preview, up and destroy, with state carried between them.

The program runs under the Python SDK's mocks (`pulumi.runtime.set_mocks`), but the monitor answering it
is this engine: it keeps the state of every resource across operations, decides create / same / update /
replace / delete the way pulumi/pulumi's step generator does (pkg/resource/deploy/step_generator.go,
read at commit 1b594989), and asks a model of each provider (`tests.support.sim.providers`) what the real one
would answer against the simulated machine (`tests.support.sim.world`).

The rules it takes from the engine are listed, each with its file:line at 1b594989, in docs/development.md
("The simulator's rules"): a new one needs its upstream place there and a defect that hid behind its absence.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import os
import runpy
import threading
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import empty_pb2
from pulumi.runtime import rpc

from ops.registrations import quiet_unretrieved, set_config
from sdk import engine_urn, stack_outputs
from tests.support import sdk
from tests.support.sdk import resource_pb2
from tests.support.sim import paths
from tests.support.sim.providers import (
    CheckFailedError,
    Context,
    Diff,
    PartialFailureError,
    ProviderError,
    docker_get_network,
    model_for,
)
from tests.support.sim.providers import refresh as provider_refresh
from tests.support.sim.state import (
    UNKNOWN,
    Alias,
    Resource,
    comparable,
    contains_unknown,
    is_secret,
    normalize,
    plain,
    secret,
)
from tests.support.sim.world import World

PROJECT = "gpu-tenancy"
PROJECT_ROOT = Path(__file__).resolve().parents[3]
MAIN = PROJECT_ROOT / "__main__.py"

# delete-replaced: deleted ahead of a delete-before-replace replacement, created again later in the run.
# discard: a read (`.get`) in the state that the program did not register again (pulumi step.go DeleteStep.Op:
# OpReadDiscard for an external resource); not a change (pkg/engine/update.go HasChanges), but the preview lists it.
OPS = ("create", "update", "replace", "delete", "same", "read", "delete-replaced", "discard", "refresh")


@dataclass
class Step:
    op: str  # one of OPS
    urn: str
    type: str
    name: str
    diffs: list[str] = field(default_factory=list)
    detail: str = ""
    failed: bool = False
    # A component resource: no provider call, but `pulumi preview` lists its create/update/delete too (a component
    # has no provider, so the engine compares its inputs, step_generator.go diff "prov == nil").
    component: bool = False


@dataclass
class Plan:
    """What one operation did (or, for a preview, would do), in execution order."""

    kind: str  # "preview" | "update" | "destroy"
    steps: list[Step] = field(default_factory=list)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    # What the dynamic provider host printed to stderr, line by line: the engine shows each as a diagnostic of the
    # stack (pulumi/pulumi sdk/go/common/resource/plugin/plugin.go runtrace, Infoerrf with no URN).
    diagnostics: list[str] = field(default_factory=list)
    # What the program logged about one resource (pulumi.log with `resource=`), by resource name: the CLI lists it
    # under that resource (pulumi/log.py _log sends the URN with the LogRequest).
    resource_diagnostics: dict[str, list[str]] = field(default_factory=dict)
    stack_name: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return self.error is None

    def names(self, op: str, *, components: bool = False) -> set[str]:
        """Names of the custom resources (or, with `components`, of the components) with this kind of step."""
        return {s.name for s in self.steps if s.op == op and s.component == components}

    def changed(self) -> dict[str, set[str]]:
        """Resource names per kind of change (reads and unchanged resources left out)."""
        return {op: names for op in ("create", "update", "replace", "delete") if (names := self.names(op))}

    def component_changes(self) -> dict[str, set[str]]:
        """Component names per kind of change: they hold no cloud resource, but `pulumi preview` shows them."""
        return {op: names for op in ("create", "update", "delete")
                if (names := self.names(op, components=True))}

    def step(self, name: str) -> Step:
        found = [s for s in self.steps if s.name == name and not s.component] or \
            [s for s in self.steps if s.name == name]
        if not found:
            raise AssertionError(f"no step for {name!r}:\n{self.render()}")
        return found[-1]

    def render(self) -> str:
        """The plan as `pulumi preview` summarises it."""
        title = {"preview": "Previewing update", "update": "Updating", "destroy": "Destroying",
                 "refresh": "Refreshing"}[self.kind]
        marks = {"create": "+ ", "update": "~ ", "replace": "+-", "delete": "- ", "same": "  ", "read": "> ",
                 "delete-replaced": "--", "discard": "< ", "refresh": "  "}
        lines = [f"{title} (simulated):", f"     {'Type':<50} {'Name':<42} Plan"]
        for step in self.steps:
            if step.op == "same" and not step.failed:
                continue
            info = f" [diff: {', '.join(step.diffs)}]" if step.diffs else ""
            failed = " **failed**" if step.failed else ""
            lines.append(f" {marks[step.op]}  {step.type:<50} {step.name:<42} {step.op}{info}{failed}")
            if step.detail and step.failed:
                lines += [f"        {line}" for line in step.detail.splitlines()[:6]]
        counts = {op: len(self.names(op)) for op in ("create", "update", "replace", "delete")}
        lines.append("Resources:")
        lines += [f"    {marks[op]}{n} to {op}" for op, n in counts.items() if n]
        lines.append(f"    {len(self.names('same'))} unchanged")
        if self.diagnostics or self.resource_diagnostics:
            lines += ["", "Diagnostics:"]
        if self.diagnostics:
            lines += [f"  {ROOT_STACK_TYPE} ({PROJECT}-{self.stack_name}):"]
            lines += [f"    {line}" for line in self.diagnostics]
        for name, logged in self.resource_diagnostics.items():
            lines += [f"  {self.step(name).type} ({name}):", *(f"    {line}" for line in logged)]
        for warning in self.warnings:
            lines.append(f"warning: {warning}")
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)


class EngineError(Exception):
    """The operation failed; `plan` holds what happened."""

    def __init__(self, plan: Plan):
        super().__init__(plan.render())
        self.plan = plan


class _CancelledError(Exception):
    pass


def _options(request) -> dict[str, Any]:
    return {
        "delete_before_replace": request.deleteBeforeReplace if request.deleteBeforeReplaceDefined else None,
        "replace_on_changes": list(request.replaceOnChanges),
        "ignore_changes": list(request.ignoreChanges),
        "deleted_with": request.deletedWith,
        "retain_on_delete": bool(request.retainOnDelete),
        "custom_timeouts": {"create": request.customTimeouts.create, "update": request.customTimeouts.update,
                            "delete": request.customTimeouts.delete},
        "additional_secret_outputs": list(request.additionalSecretOutputs),
    }


def _aliases(request) -> tuple[Alias, ...]:
    """The registration's aliases as the engine reads them (source_eval.go L2330-2347 and L2596-2628): the URNs of
    the legacy `aliasURNs` field, then each `aliases` entry, a URN or a spec. The Python SDK sends specs when the
    monitor reports the aliasSpecs feature (sdk/python/lib/pulumi/runtime/resource.py prepare_aliases), which the
    mock monitor does (runtime/mocks.py GetDeploymentInfo), so child aliases are the engine's work, not the SDK's."""
    found = [Alias(urn=urn) for urn in request.aliasURNs]
    for alias in request.aliases:
        if alias.WhichOneof("alias") == "urn":
            found.append(Alias(urn=alias.urn))
            continue
        spec = alias.spec
        found.append(Alias(name=spec.name, type=spec.type, stack=spec.stack, project=spec.project,
                           parent=spec.parentUrn if spec.WhichOneof("parent") == "parentUrn" else "",
                           no_parent=spec.WhichOneof("parent") == "noParent" and spec.noParent))
    return tuple(found)


def reset_ignored(path: str, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`PropertyPath.Reset` for one ignoreChanges entry: the old value wins, an added key is dropped."""
    try:
        segments = paths.parse(path)
    except paths.PropertyPathError:
        return new  # SG:3076: an unparsable path is skipped silently
    new = copy.deepcopy(new)
    old_value = paths.get(old, segments)
    parent = paths.get(new, segments[:-1]) if len(segments) > 1 else new
    if not isinstance(parent, (dict, list)):
        return new
    key = segments[-1]
    if old_value is paths.MISSING:
        if isinstance(parent, dict):
            parent.pop(key, None)
    elif isinstance(parent, dict):
        parent[key] = copy.deepcopy(old_value)
    return new


class Engine:
    """State plus the world; runs one operation at a time."""

    def __init__(self, world: World):
        self.world = world
        self.state: dict[str, Resource] = {}
        self._serial = 0
        self.lock = threading.RLock()
        self.op: _Operation | None = None
        self.last_operation: _Operation | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> Engine:
        """A copy between operations (see Lifecycle.fork): state and world, not the finished operation."""
        if self.op is not None:
            raise RuntimeError("cannot copy an engine during an operation")
        twin = Engine.__new__(Engine)
        memo[id(self)] = twin
        twin.world = copy.deepcopy(self.world, memo)
        twin.state = copy.deepcopy(self.state, memo)
        twin._serial = self._serial
        twin.lock = threading.RLock()
        twin.op = None
        twin.last_operation = None
        return twin

    def serial(self) -> int:
        self._serial += 1
        return self._serial

    def new_provider_id(self) -> str:
        return str(uuid.UUID(int=self.serial()))

    def provider_resource(self, resource: Resource) -> Resource | None:
        urn = resource.provider_urn
        if not urn:
            return None
        if self.op is not None and urn in self.op.registered:
            return self.op.registered[urn]
        return self.state.get(urn)


class _Operation:
    """One preview or update (the program runs), or one destroy (it does not)."""

    def __init__(self, engine: Engine, kind: str, env: dict[str, str], replace: Iterable[str] = ()):
        self.engine = engine
        self.kind = kind
        self.preview = kind == "preview"
        self.env = env
        self.plan = Plan(kind=kind)
        self.registered: dict[str, Resource] = {}
        self.new_state: dict[str, Resource] = {} if kind != "destroy" else dict(engine.state)
        self.deletes: dict[str, bool] = {}
        self.replaces: set[str] = set()
        self.pending_deletes: list[Resource] = []
        self.recreated: set[str] = set()  # dependents deleted ahead of a delete-before-replace
        self.deleted: set[str] = set()  # deleted by the provider (or with another resource) in this operation
        self.targets_replace = set(replace)
        self.failed = False
        self.ctx = Context(world=engine.world, engine=engine, preview=self.preview, env=env)
        self.aliased: dict[str, str] = {}  # old URN -> the new URN found under it (SG sg.aliased)
        self.aliases: dict[str, str] = {}  # new URN -> the old URN it was found under (SG sg.aliases)

    # ---- aliases (step_generator.go) -------------------------------------- #

    def _collapse_alias(self, name: str, type_: str, parent: str, alias: Alias) -> str:
        """SG collapseAliasToUrn: the old URN an alias stands for."""
        if alias.urn:
            return alias.urn
        old_parent = alias.parent
        if not old_parent:
            old_parent = parent
        else:
            # "If the parent used an alias then use it's old URN here, as that will be this resource old URN as well."
            old_parent = self.aliases.get(old_parent, old_parent)
        if alias.no_parent or (old_parent and qualified_type(old_parent) == ROOT_STACK_TYPE):
            old_parent = ""
        name, type_ = alias.name or name, alias.type or type_
        project, stack = alias.project or pulumi.get_project(), alias.stack or pulumi.get_stack()
        if not old_parent:  # alias.go CreateURN
            return f"urn:pulumi:{stack}::{project}::{type_}::{name}"
        return f"{old_parent[:old_parent.rindex('::')]}${type_}::{name}"

    def _inherited_child_alias(self, child_type: str, child_name: str, parent_name: str, parent_alias: str) -> str:
        """SG inheritedChildAlias: a child named `<parent name>-x` was `<old parent name>-x` under the old parent."""
        alias_name = child_name
        if child_name.startswith(parent_name):
            alias_name = urn_name(parent_alias) + child_name[len(parent_name):]
        return new_urn(pulumi.get_stack(), pulumi.get_project(), qualified_type(parent_alias), child_type, alias_name)

    def _generate_aliases(self, new: Resource) -> list[str]:
        """SG generateAliases: the resource's own aliases, then those multiplied out of its parent's alias."""
        result: list[str] = []

        def add(urn: str) -> None:
            if urn not in result:
                result.append(urn)

        for alias in new.aliases:
            add(self._collapse_alias(new.name, new.type, new.parent, alias))
        parent_alias = self.aliases.get(new.parent) if new.parent else None
        if parent_alias is not None:
            parent_name = urn_name(new.parent)
            add(self._inherited_child_alias(new.type, new.name, parent_name, parent_alias))
            for alias in new.aliases:
                child_alias = self._collapse_alias(new.name, new.type, new.parent, alias)
                add(self._inherited_child_alias(urn_type(child_alias), urn_name(child_alias), parent_name,
                                                parent_alias))
        return result

    def _old_resource(self, new: Resource) -> Resource | None:
        """SG getOldResource: the old state under the new URN, else under the first alias found (URN first, "otherwise
        we may pick the wrong resource"). Claims that alias, or raises the engine's duplicate-alias errors."""
        problems = []
        if new.urn in self.aliased:
            problems.append(f"Duplicate resource URN '{new.urn}' conflicting with alias on resource with URN "
                            f"'{self.aliased[new.urn]}'")  # sdk/go/common/diag/errors.go 2016
        old = None
        for candidate in [new.urn, *self._generate_aliases(new)]:
            old = self.engine.state.get(candidate)
            if old is None:
                continue
            if candidate != new.urn:
                # errors.go 2008, its arguments as step_generator.go passes them.
                if candidate in self.registered:
                    problems.append(f"Duplicate resource alias '{candidate}' applied to resource with URN "
                                    f"'{new.urn}' conflicting with resource with URN '{new.urn}'")
                if candidate in self.aliased:
                    problems.append(f"Duplicate resource alias '{candidate}' applied to resource with URN "
                                    f"'{new.urn}' conflicting with resource with URN '{self.aliased[candidate]}'")
                self.aliased[candidate] = new.urn
                self.aliases[new.urn] = candidate
            break
        if problems:
            raise ProviderError("; ".join(problems))
        return old

    def claimed(self, urn: str) -> bool:
        """An old URN this operation registered again, itself or through an alias (SG isOperatedOn)."""
        return urn in self.registered or urn in self.aliased

    # ---- registration ----------------------------------------------------- #

    def register(self, new: Resource) -> tuple[str, dict[str, Any]]:
        with self.engine.lock:
            if self.failed:
                raise _CancelledError("update canceled")
            self.registered[new.urn] = new
            try:
                old = self._old_resource(new)
                if new.custom:
                    self._lint_paths(new)
            except ProviderError as error:
                self.failed = True
                self.plan.error = f"{new.type} {new.name}: {error}"
                raise
            if not new.custom:
                op = "create" if old is None else "same" if comparable(old.inputs) == comparable(new.inputs) \
                    else "update"
                self.plan.steps.append(Step(op, new.urn, new.type, new.name, component=True))
                self.new_state[new.urn] = new
                return "", {}
            try:
                self._check(new)
            except CheckFailedError as error:
                # No step: the engine stops at the invalid resource (step_generator.go "resource %s is invalid").
                self.failed = True
                self.plan.error = f"{new.type} resource '{new.name}': {error}"
                raise
            try:
                id_, outputs = self._register_custom(new, old)
                return id_, self._mark_secret_outputs(new, outputs)
            except (ProviderError, PartialFailureError) as error:
                self.failed = True
                self.plan.steps[-1].failed = True
                self.plan.steps[-1].detail = str(error)
                self.plan.error = f"{new.type} {new.name}: {error}"
                raise
            except Exception:
                # A bug of the simulator itself: say so, with where it happened.
                self.failed = True
                self.plan.error = f"simulator error at {new.type} {new.name}:\n{traceback.format_exc()}"
                raise

    @staticmethod
    def _mark_secret_outputs(new: Resource, outputs: dict[str, Any]) -> dict[str, Any]:
        """step_executor.go executeStep: "Ensure that any secrets properties in the output are marked as such" --
        every additionalSecretOutputs key present is made secret in the stored state and in the response."""
        if not new.additional_secret_outputs or not isinstance(outputs, dict):
            return outputs
        marked = dict(outputs)
        for key in new.additional_secret_outputs:
            if key in marked and key != "id" and not is_secret(marked[key]):
                marked[key] = secret(marked[key])
        new.outputs = marked
        return marked

    def _lint_paths(self, new: Resource) -> None:
        """Not engine behaviour but this project's guard: the engine accepts a replaceOnChanges path that names no
        input and then simply never acts on it (it only compares paths with a diff's keys, SG diff), which would
        hide a typo for ever. (An ignoreChanges path may well name a key that is absent today: that is how one
        ignores what others add later.)"""
        inputs = plain(new.inputs)
        for path in new.replace_on_changes:
            try:
                parsed = paths.parse(path)
            except paths.PropertyPathError as error:
                raise ProviderError(f"replace_on_changes path {path!r} does not parse as a property path: {error}") \
                    from None
            # Provider SDKs add wildcard paths of their own whether the input is set or not (pulumi-command's
            # Command always asks for `triggers[*]`): only a path without wildcards must name an input.
            if paths.WILDCARD in parsed:
                continue
            if not paths.matches_any_input(parsed, inputs, unknown=UNKNOWN):
                raise ProviderError(f"replace_on_changes path {path!r} names no input of {new.name} (inputs: "
                                    f"{', '.join(sorted(inputs))})")

    def _check(self, new: Resource) -> None:
        """SG:1325-1349: every registered resource goes through its provider's Check, in preview and update alike;
        the checked inputs are what is diffed and stored. Only models that check anything have `check`."""
        check = getattr(model_for(new.type), "check", None)
        if check is not None:
            old = self.engine.state.get(new.urn)
            check(self.ctx, old, new)

    def _register_custom(self, new: Resource, old: Resource | None) -> tuple[str, dict[str, Any]]:
        model = model_for(new.type)
        if old is not None and old.external:
            old = None  # a resource that was read before is created now
        recreated = old is not None and old.urn in self.recreated
        if old is None or recreated:
            op = "replace" if recreated else "create"
            self.plan.steps.append(Step(op, new.urn, new.type, new.name))
            return self._create(model, new)
        goal = new.inputs
        try:
            diff, replace = self._diff(model, old, new)
        except ProviderError:
            # step_generator.go diffResource: a failed Diff fails the resource before any step for it exists; it is
            # listed unchanged, with the error.
            self.plan.steps.append(Step("same", new.urn, new.type, new.name))
            raise
        if not diff.changes and not replace and not old.init_error:
            self.plan.steps.append(Step("same", new.urn, new.type, new.name))
            new.id, new.outputs = old.id, copy.deepcopy(old.outputs)
            self.new_state[new.urn] = new
            return new.id, new.outputs
        diffs = sorted(set(diff.detailed or diff.changed_keys or diff.replace_keys))
        if not replace:
            self.plan.steps.append(Step("update", new.urn, new.type, new.name, diffs))
            outputs = model.update(self.ctx, old, new)
            new.id, new.outputs = old.id, outputs
            self.new_state[new.urn] = new
            return new.id, outputs
        self.replaces.add(new.urn)
        new.inputs = goal  # SG:2003-2021: a replacement is checked and created from the goal, ignored paths included
        dbr = new.delete_before_replace if new.delete_before_replace is not None else diff.delete_before_replace
        if dbr:
            dependents = self._dependent_replacements(old)
            # step_generator.go (generateSteps, delete-before-replace): the deletes of the dependents and of the old
            # resource are recorded in sg.deletes while the steps are generated, before any of them runs; so a
            # dependent deleted_with the replaced resource is skipped (step.go isDeletedWith).
            self.deletes[old.urn] = True
            for dependent in dependents:
                self.deletes[dependent.urn] = True
            for dependent in dependents:
                self.plan.steps.append(Step("delete-replaced", dependent.urn, dependent.type, dependent.name,
                                            detail=f"replaced along with {old.name}"))
                self._delete(dependent)
                self.recreated.add(dependent.urn)
            self._delete(old, record=False)
        else:
            self.pending_deletes.append(old)
        self.plan.steps.append(Step("replace", new.urn, new.type, new.name, diffs))
        return self._create(model, new)

    def _create(self, model, new: Resource) -> tuple[str, dict[str, Any]]:
        try:
            new_id, outputs = model.create(self.ctx, new)
        except PartialFailureError as failure:
            new.id, new.outputs, new.init_error = "partial", failure.outputs, True
            self.new_state[new.urn] = new
            raise
        new.id, new.outputs = new_id, outputs
        self.new_state[new.urn] = new
        return new_id, outputs

    def _diff(self, model, old: Resource, new: Resource) -> tuple[Diff, bool]:
        if new.urn in self.targets_replace:
            return Diff(changes=True, replace_keys=["id"]), True
        if new.deleted_with and new.deleted_with in self.replaces:
            return Diff(changes=True, replace_keys=["deletedWith"]), True
        # SG:2834 providerChanged: a provider found under an alias of the new one is the same provider.
        provider_aliased = self.aliased.get(old.provider_urn) == new.provider_urn
        if old.provider != new.provider and old.provider_urn and not provider_aliased:
            provider_new = self.engine.provider_resource(new)
            provider_old = self.engine.state.get(old.provider_urn)
            if provider_new is not None and provider_old is not None:
                config_diff = model_for(provider_new.type).diff(self.ctx, provider_old, provider_new)
                if config_diff.replace_keys:
                    return Diff(changes=True, replace_keys=["provider"]), True
        for path in new.ignore_changes:
            new.inputs = reset_ignored(path, old.inputs, new.inputs)
        diff = model.diff(self.ctx, old, new)
        self.plan.diagnostics += diff.diagnostics
        if diff.unavailable:
            self.plan.warnings.append(f"{new.name}: The provider for this resource has inputs that are not known "
                                      "during preview.")
            return Diff(changes=True), False
        if diff.changes is None:
            # SG:2996: DIFF_UNKNOWN falls back to comparing the inputs.
            diff.changes = comparable(old.inputs) != comparable(new.inputs) or contains_unknown(new.inputs)
        replace = bool(diff.replace_keys)
        if diff.changes and new.replace_on_changes:
            parsed = [paths.parse(p) for p in new.replace_on_changes]
            candidates = [*diff.detailed, *diff.changed_keys]
            for candidate in candidates:
                try:
                    diff_path = paths.parse(candidate)
                except paths.PropertyPathError:
                    continue
                if any(paths.contains(p, diff_path) for p in parsed):
                    replace = True
        return diff, replace

    def _dependent_replacements(self, old: Resource) -> list[Resource]:
        """SG:3268 calculateDependentReplacements: dependents that must go before `old` is deleted."""
        state = self.engine.state
        replace_set = {old.urn}
        found: list[Resource] = []
        for resource in _topological(state.values()):
            if resource.urn == old.urn or self.claimed(resource.urn) or not resource.custom or resource.external:
                continue
            if not (resource.all_dependencies() & replace_set):
                continue
            replaced = False
            if resource.provider_urn in replace_set or resource.deleted_with in replace_set:
                replaced = True
            else:
                unknown_keys = [k for k, urns in resource.property_dependencies.items() if set(urns) & replace_set]
                if unknown_keys:
                    candidate = copy.copy(resource)
                    candidate.inputs = {**resource.inputs, **{k: UNKNOWN for k in unknown_keys}}
                    diff, replaced = self._diff(model_for(resource.type), resource, candidate)
            if replaced:
                replace_set.add(resource.urn)
                found.append(resource)
        return list(reversed(found))

    def read(self, new: Resource) -> dict[str, Any]:
        with self.engine.lock:
            if self.failed:
                raise _CancelledError("update canceled")
            new.external = True
            self.registered[new.urn] = new
            self.plan.steps.append(Step("read", new.urn, new.type, new.name))
            try:
                self._old_resource(new)  # SG:304: a read claims its old URN too (through its parent's alias)
            except ProviderError as error:
                self._fail_read(new, str(error))
                raise
            if new.id == UNKNOWN or not new.id:
                new.outputs = {}  # step.go: "The only time we can't run is if the ID we are given is unknown"
                return {}
            try:
                outputs = model_for(new.type).read(self.ctx, new)
            except ProviderError as error:
                self._fail_read(new, str(error))
                raise
            if outputs is None:
                message = f"resource '{new.id}' does not exist"
                self._fail_read(new, message)
                raise ProviderError(message)
            new.outputs = outputs
            self.new_state[new.urn] = new
            return outputs

    def _fail_read(self, new: Resource, message: str) -> None:
        self.failed = True
        self.plan.steps[-1].failed = True
        self.plan.steps[-1].detail = message
        self.plan.error = f"{new.type} {new.name}: {message}"

    # ---- deletes ---------------------------------------------------------- #

    def _delete(self, old: Resource, record: bool = True) -> None:
        if old.external or self.preview:
            self.new_state.pop(old.urn, None)
            return
        self.deleted.add(old.urn)
        if old.deleted_with and self.deletes.get(old.deleted_with):
            pass  # step.go isDeletedWith: the other deletion takes this one with it
        elif not old.retain_on_delete:
            model_for(old.type).delete(self.ctx, old)
        if self.new_state.get(old.urn) is old:
            self.new_state.pop(old.urn, None)
        self.engine.state.pop(old.urn, None) if self.kind == "destroy" else None

    def finish_deletes(self) -> None:
        """GenerateDeletes + ScheduleDeletes (SG:2747-2796): what the program no longer registers, and the old
        halves of create-before-delete replacements, in reverse-dependency antichains; within an antichain
        every step runs, after a failed one no later antichain starts (step_executor.go cancelDueToError)."""
        state = self.engine.state
        condemned = [r for urn, r in state.items() if not self.claimed(urn) and urn not in self.recreated]
        condemned += self.pending_deletes
        for resource in condemned:
            self.deletes[resource.urn] = True
        for antichain in _delete_antichains(condemned):
            failures = []
            for resource in antichain:
                if not resource.custom or resource.external:
                    if not resource.custom:
                        self.plan.steps.append(Step("delete", resource.urn, resource.type, resource.name,
                                                    component=True))
                    else:
                        self.plan.steps.append(Step("discard", resource.urn, resource.type, resource.name))
                    self.new_state.pop(resource.urn, None)
                    continue
                step = Step("delete", resource.urn, resource.type, resource.name)
                self.plan.steps.append(step)
                if self.preview:
                    continue
                try:
                    self._delete(resource)
                except ProviderError as error:
                    step.failed, step.detail = True, str(error)
                    failures.append((resource, error))
                    continue
                if self.new_state.get(resource.urn) is resource:
                    self.new_state.pop(resource.urn, None)
            if failures:
                resource, error = failures[0]
                self.plan.error = f"{resource.type} {resource.name}: {error}"
                self.failed = True
                done = {s.urn for s in self.plan.steps if s.op == "delete" and not s.failed}
                for left in condemned:
                    if left.urn not in done and left.custom and not left.external:
                        key = left.urn if left not in self.pending_deletes else left.urn + "#pending-delete"
                        self.new_state.setdefault(key, left)
                return


def _normalize_urn_references(state: dict[str, Resource], renamed: dict[str, str]) -> dict[str, Resource]:
    """snapshot.go NormalizeURNReferences: what is left under an old URN (a delete that failed, a resource the failed
    update never reached) refers to the new URNs; a child of a renamed parent is renamed with it."""
    if not renamed:
        return state
    aliased = dict(renamed)
    for resource in state.values():
        parent = aliased.get(resource.parent)
        if parent and qualified_type(parent) != ROOT_STACK_TYPE:
            stack, project = resource.urn.split("::")[0].removeprefix("urn:pulumi:"), resource.urn.split("::")[1]
            aliased[resource.urn] = new_urn(stack, project, qualified_type(parent), urn_type(resource.urn),
                                            urn_name(resource.urn))

    def fix(urn: str) -> str:
        return aliased.get(urn, urn)

    def fix_provider(reference: str) -> str:
        if not reference:
            return reference
        urn, _, id_ = reference.rpartition("::")
        return f"{fix(urn)}::{id_}"

    normalized: dict[str, Resource] = {}
    for key, resource in state.items():
        if not ({resource.urn, resource.parent, resource.deleted_with, resource.provider_urn,
                 *resource.all_dependencies()} & set(aliased)):
            normalized[key] = resource
            continue
        fixed = copy.copy(resource)
        fixed.urn, fixed.parent, fixed.deleted_with = fix(resource.urn), fix(resource.parent), fix(resource.deleted_with)
        fixed.provider = fix_provider(resource.provider)
        fixed.dependencies = [fix(urn) for urn in resource.dependencies]
        fixed.property_dependencies = {k: [fix(urn) for urn in v] for k, v in resource.property_dependencies.items()}
        normalized[fix(key)] = fixed
    return normalized


def _delete_antichains(condemned: list[Resource]) -> list[list[Resource]]:
    """Dependents first: levels of resources none of whose condemned dependents are left."""
    left: dict[str, Resource] = {}
    for resource in condemned:
        left.setdefault(resource.urn, resource)
    chains: list[list[Resource]] = []
    while left:
        dependents_left = set()
        for resource in left.values():
            dependents_left |= resource.all_dependencies() & set(left)
        chain = sorted((r for urn, r in left.items() if urn not in dependents_left), key=lambda r: r.urn)
        if not chain:  # a cycle cannot happen in a real state; be safe
            chain = sorted(left.values(), key=lambda r: r.urn)
        chains.append(chain)
        for resource in chain:
            left.pop(resource.urn)
    return chains


def _topological(resources: Iterable[Resource]) -> list[Resource]:
    """Dependencies before dependents (stable: state order otherwise)."""
    resources = list(resources)
    by_urn = {r.urn: r for r in resources}
    out: list[Resource] = []
    seen: set[str] = set()

    def visit(resource: Resource, trail: frozenset[str]) -> None:
        if resource.urn in seen or resource.urn in trail:
            return
        for dep in sorted(resource.all_dependencies()):
            if dep in by_urn:
                visit(by_urn[dep], trail | {resource.urn})
        seen.add(resource.urn)
        out.append(resource)

    for resource in resources:
        visit(resource, frozenset())
    return out


# --------------------------------------------------------------------------- #
# The monitor the SDK talks to
# --------------------------------------------------------------------------- #


ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


def qualified_type(urn: str) -> str:
    """urn.go QualifiedType: `a$b$c` of `urn:pulumi:<stack>::<project>::a$b$c::<name>`."""
    return urn.split("::")[2]


def urn_name(urn: str) -> str:
    """urn.go Name: everything after the third `::` (a name may hold `::` itself)."""
    return urn.split("::", 3)[3]


def urn_type(urn: str) -> str:
    """urn.go Type: the last part of the qualified type."""
    return qualified_type(urn).split("$")[-1]


def new_urn(stack: str, project: str, parent_type: str, type_: str, name: str) -> str:
    """urn.go New: the parent's qualified type, `$`, the resource's type (no parent part for the stack)."""
    qualified = f"{parent_type}${type_}" if parent_type and parent_type != ROOT_STACK_TYPE else type_
    return f"urn:pulumi:{stack}::{project}::{qualified}::{name}"


class _NoMocks(pulumi.runtime.Mocks):
    def new_resource(self, args):  # pragma: no cover - the monitor never calls it
        raise AssertionError("unused")

    def call(self, args):  # pragma: no cover
        raise AssertionError("unused")


class _SimEngine:
    """The engine's Log service: a line the program logs about a resource is listed under it."""

    def __init__(self, operation: _Operation):
        self.operation = operation

    def Log(self, request):  # noqa: N802 -- gRPC method name
        if request.urn:
            severity = {2: "warning", 3: "error"}.get(request.severity, "info")  # engine.proto LogSeverity
            name = request.urn.rsplit("::", 1)[-1]
            self.operation.plan.resource_diagnostics.setdefault(name, []).append(f"{severity}: {request.message}")


class SimMonitor(sdk.MockMonitor):
    def __init__(self, operation: _Operation):
        super().__init__(_NoMocks())
        self.operation = operation

    def RegisterResource(self, request):  # noqa: N802 -- gRPC method name
        urn = engine_urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            return resource_pb2.RegisterResourceResponse(urn=urn)
        sdk._ensure_event_loop()
        resource = Resource(
            urn=urn, type=request.type, name=request.name, custom=bool(request.custom), parent=request.parent,
            provider=request.provider,
            inputs=normalize(rpc.deserialize_properties(request.object, keep_unknowns=True)),
            dependencies=list(request.dependencies),
            property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
            aliases=_aliases(request),
            **_options(request),
        )
        id_, outputs = self.operation.register(resource)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=id_, object=sdk.serialized(outputs))

    def ReadResource(self, request):  # noqa: N802
        sdk._ensure_event_loop()
        urn = engine_urn(request.parent, request.type, request.name)
        resource = Resource(
            urn=urn, type=request.type, name=request.name, custom=True, parent=request.parent,
            provider=request.provider, id=request.id,
            inputs=normalize(rpc.deserialize_properties(request.properties, keep_unknowns=True)),
            dependencies=list(request.dependencies),
            additional_secret_outputs=list(request.additionalSecretOutputs),
        )
        outputs = self.operation.read(resource)
        return resource_pb2.ReadResourceResponse(urn=urn, properties=sdk.serialized(outputs))

    def Invoke(self, request):  # noqa: N802
        sdk._ensure_event_loop()
        args = rpc.deserialize_properties(request.args)
        operation = self.operation
        if request.tok != "docker:index/getNetwork:getNetwork":
            raise AssertionError(f"the simulator has no model of the invoke {request.tok}")
        # source_eval.go L1140-1161: with dependencies that are pending creation (an empty id) the engine
        # answers "unknown" without calling the provider.
        depends_on = list(getattr(request, "dependsOn", []) or [])
        for urn in depends_on:
            registered = operation.registered.get(urn)
            if registered is not None and registered.custom and not registered.id:
                return resource_pb2.ResourceInvokeResponse(unknown=True)
        try:
            result = docker_get_network(operation.engine.world, args)
        except ProviderError as error:
            with operation.engine.lock:
                operation.failed = True
                operation.plan.error = f"invoke {request.tok}: {error}"
            raise
        return resource_pb2.ResourceInvokeResponse(**{"return": sdk.serialized(result)})

    def RegisterResourceOutputs(self, request):  # noqa: N802
        return empty_pb2.Empty()


# --------------------------------------------------------------------------- #
# Running the program
# --------------------------------------------------------------------------- #


def run_operation(
    engine: Engine,
    kind: str,
    config: dict[str, Any],
    *,
    stack: str,
    secret_keys: Iterable[str] = (),
    env: dict[str, str] | None = None,
    replace: Iterable[str] = (),
    program: Callable[[], Any] | None = None,
) -> Plan:
    """Run one preview / update (program executed) or destroy (program not executed)."""
    env = dict(env or {})
    operation = _Operation(engine, kind, env, replace)
    operation.plan.stack_name = stack
    engine.op = operation
    engine.last_operation = operation
    try:
        if kind != "destroy":
            _run_program(operation, config, stack, secret_keys, env, program)
        if not operation.failed and operation.plan.error is None:
            if kind == "destroy":
                operation.registered = {}
            operation.finish_deletes()
    finally:
        engine.op = None
    if not operation.preview:
        committed = {}
        new_state = operation.new_state
        if operation.failed and kind != "destroy":
            # A failed update leaves what it never reached as it was: the snapshot manager starts from the base
            # snapshot and only records the steps that ran (pkg/backend/snapshot.go). An old resource whose new
            # URN was written has been renamed, not kept.
            committed = {urn: r for urn, r in engine.state.items() if urn not in operation.deleted
                         and operation.aliased.get(urn) not in new_state}
        committed.update({urn: r for urn, r in new_state.items() if not urn.endswith("#pending-delete")})
        for urn, resource in new_state.items():
            if urn.endswith("#pending-delete"):
                committed.setdefault(resource.urn, resource)
        renamed = {old: new for old, new in operation.aliased.items() if new in committed}
        engine.state = _normalize_urn_references(committed, renamed)
        engine.world.end_of_operation()
    return operation.plan


def run_refresh(engine: Engine, *, env: dict[str, str] | None = None) -> Plan:
    """`pulumi refresh` (pulumi v3.259.0 pkg/resource/deploy/step.go RefreshStep.Apply): the program does not run;
    every custom resource but the providers is read through its provider, with its stored inputs and state. An empty
    id (gone) removes it from the state (`delete`); new inputs or state replace the stored ones (`update`); a failed
    read leaves that resource as it was and fails the operation. Components and providers never change."""
    operation = _Operation(engine, "refresh", dict(env or {}))
    plan = operation.plan
    refreshed: dict[str, Resource] = {}
    for urn, resource in engine.state.items():
        if not resource.custom or resource.is_provider:
            refreshed[urn] = resource
            continue
        try:
            result = provider_refresh(model_for(resource.type), operation.ctx, resource)
        except ProviderError as error:
            plan.steps.append(Step("refresh", urn, resource.type, resource.name, detail=str(error), failed=True))
            plan.error = plan.error or f"{resource.type} {resource.name}: {error}"
            refreshed[urn] = resource
            continue
        if result is None:
            plan.steps.append(Step("delete", urn, resource.type, resource.name))
            continue
        changed = [key for key in sorted({*result.inputs, *resource.inputs})
                   if comparable(result.inputs.get(key)) != comparable(resource.inputs.get(key))]
        changed += [key for key in sorted({*result.outputs, *resource.outputs})
                    if comparable(result.outputs.get(key)) != comparable(resource.outputs.get(key))
                    and key not in changed]
        entry = copy.copy(resource)
        entry.inputs, entry.outputs = result.inputs, result.outputs
        refreshed[urn] = entry
        plan.steps.append(Step("update" if changed else "same", urn, resource.type, resource.name, diffs=changed))
    engine.state = refreshed
    engine.world.end_of_operation()
    return plan


def _run_program(operation: _Operation, config: dict[str, Any], stack: str, secret_keys: Iterable[str],
                 env: dict[str, str], program: Callable[[], Any] | None) -> None:
    sdk.fresh_root()
    # Outputs of a failed run hold exceptions nobody awaits; asyncio would print each one when collected.
    asyncio.get_event_loop().set_exception_handler(quiet_unretrieved)
    monitor = SimMonitor(operation)
    pulumi.runtime.set_mocks(_NoMocks(), project=PROJECT, stack=stack, preview=operation.preview, monitor=monitor)
    pulumi.runtime.settings.SETTINGS.engine = _SimEngine(operation)
    set_config(config, secret_keys)
    body = program or (lambda: runpy.run_path(str(MAIN), run_name="__main__"))
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        sdk.run_program(body)
    except Exception as error:  # noqa: BLE001 -- a program error is the operation's failure
        if operation.plan.error is None:
            operation.plan.error = f"program failed: {type(error).__name__}: {error}"
        operation.failed = True
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if operation.failed or operation.plan.error is not None:
            # The futures of a failed run hold exceptions nobody retrieves: collect them now, while the quiet
            # handler is set, rather than inside a later test's failure report (a finalizer during pytest's
            # ast.parse trips CPython 3.11's recursion check). A full collection costs ~0.4 s in a test process,
            # a fifth of a simulated operation, so a run that succeeded leaves its garbage to the collector.
            gc.collect()
    for name, value in stack_outputs().items():
        try:
            operation.plan.outputs[name], secret = sdk.resolved(pulumi.Output.from_input(value))
            if secret:
                operation.plan.secret_outputs.add(name)
        except Exception as error:  # noqa: BLE001
            if operation.plan.error is None:
                operation.plan.error = f"output {name}: {error}"
            operation.failed = True
