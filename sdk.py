"""Reading objects back through the Pulumi SDK, and the only product module that uses SDK names that are not public
API; tests/test_sdk.py fails, naming the use, when the pinned pulumi (requirements.txt) changes one. It sits below
config/ and components/ (it imports neither), since both need it."""

from __future__ import annotations

import sys
import threading
import traceback
import types
from collections.abc import Mapping
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config
from pulumi.runtime.mocks import MockMonitor

STACK_TYPE = "pulumi:pulumi:Stack"


def sdk_field(obj: Mapping[str, Any] | None, camel: str, snake: str) -> Any:
    """A field of an object read back through the Pulumi SDK, which may hand it over snake_cased."""
    if not obj:
        return None
    return dict.get(obj, camel, dict.get(obj, snake))  # type: ignore[arg-type]


def all_config() -> dict[str, Any]:
    """Every config key the engine handed the program (pulumi/runtime/config.py CONFIG, which set_all_config fills):
    the public get_config answers only per key, so a misspelt key would pass unnoticed."""
    return dict(runtime_config.CONFIG.get())


def engine_urn(parent: str, type_: str, name: str) -> str:
    """The URN the engine gives (pulumi pkg/resource/urn.go New): the parent's whole qualified type, `$`, the type;
    nothing of the stack for a top-level resource."""
    parent_type = parent.split("::")[2] if parent else ""
    qualified = f"{parent_type}${type_}" if parent_type and parent_type != STACK_TYPE else type_
    return f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::{qualified}::{name}"


class RequestMonitor(MockMonitor):
    """The monitor `pulumi.runtime.set_mocks` takes (pulumi/runtime/mocks.py), with engine URNs (its make_urn keeps
    only the parent's last type) and, for `Mocks.new_resource`, the request it answers: `request()` is
    `(request, read)`, whose parent, dependencies and options MockResourceArgs leave out."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self._current = threading.local()  # the SDK sends each request from an executor thread

    def request(self) -> tuple[Any, bool]:
        return self._current.request, self._current.read

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        return engine_urn(parent, type_, name)

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 -- gRPC method name
        self._current.request, self._current.read = request, False
        return super().RegisterResource(request)

    def ReadResource(self, request: Any) -> Any:  # noqa: N802
        self._current.request, self._current.read = request, True
        return super().ReadResource(request)


def stack_outputs() -> dict[str, Any]:
    """What the program exported (the root Stack's `outputs`, pulumi/runtime/stack.py Stack.output)."""
    return dict(getattr(pulumi.runtime.get_root_resource(), "outputs", None) or {})


def host_error_text(error: BaseException, messages: tuple[type[BaseException], ...]) -> str:
    """What a failed dynamic-provider call reports: the message of an error of `messages`, else its traceback."""
    if isinstance(error, messages):
        return str(error)
    return "".join(traceback.format_exception(error)).rstrip()


def report_host_errors_by_message(messages: tuple[type[BaseException], ...]) -> None:
    """In Pulumi's dynamic-provider host (`python -m pulumi.dynamic`), answer a failed call with `host_error_text`:
    the host sends `traceback.format_exc()` as the error (pulumi 3.272.0 pulumi/dynamic/__main__.py
    _abort_with_traceback; pulumi/pulumi#10416), which the CLI prints under the resource. Elsewhere a no-op."""
    host = sys.modules.get("__main__")
    if getattr(getattr(host, "__spec__", None), "name", None) != "pulumi.dynamic.__main__" \
            or not hasattr(host, "_abort_with_traceback"):
        return
    host.traceback = types.SimpleNamespace(  # type: ignore[union-attr]
        **{**vars(traceback), "format_exc": lambda: host_error_text(sys.exc_info()[1], messages)})  # type: ignore
