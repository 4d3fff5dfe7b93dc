"""The Pulumi SDK names the tests' lifecycle simulator (tests/support/sim) uses that are not public API, in one
place; tests/test_sdk.py fails, naming the use, when the pinned pulumi (requirements.txt) changes one. The
simulator stands where the engine does, so it answers the SDK's gRPC requests (pulumi/runtime/proto) itself."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import grpc
import pulumi
from pulumi.dynamic.dynamic import serialize_provider  # noqa: F401 -- re-exported: how a provider is pickled
from pulumi.output import Unknown  # noqa: F401 -- re-exported: what the dynamic provider host hands a Diff
from pulumi.runtime import resource as resource_runtime
from pulumi.runtime import rpc, settings
from pulumi.runtime.mocks import MockMonitor, _ensure_event_loop  # noqa: F401 -- re-exported
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc, resource_pb2, source_pb2  # noqa: F401 -- re-exported
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await


def serialized(properties: dict[str, Any]) -> Any:
    """`properties` as the engine sends them back (rpc.serialize_properties, awaited)."""
    return _sync_await(rpc.serialize_properties(properties, {}))


def run_program(body: Callable[[], Any]) -> None:
    """Run `body` as the language host runs a program (pulumi/runtime/stack.py
    run_pulumi_func), raising what it raised. The SDK walks and formats the whole Python stack for every resource
    (runtime/resource.py _get_stack_trace, sent as the request's stackTrace, which the engine only shows in
    diagnostics): under pytest's deep stacks that was a sixth of a simulated operation's CPU, so it is skipped."""
    walk, resource_runtime._get_stack_trace = resource_runtime._get_stack_trace, source_pb2.StackTrace
    try:
        _sync_await(run_pulumi_func(body))
    finally:
        resource_runtime._get_stack_trace = walk


def fresh_root() -> None:
    """Forget the last run's root stack and outputs, so that set_mocks registers a new stack."""
    settings.SETTINGS.outputs.clear()
    settings.ROOT.set(None)


def resolved(output: pulumi.Output[Any]) -> tuple[Any, bool]:
    """The value of `output` after a run, and whether it is secret."""
    return _sync_await(output.future()), bool(_sync_await(output.is_secret()))


@contextlib.contextmanager
def engine_detached() -> Iterator[None]:
    """Meanwhile the SDK has no engine to log to, as in the dynamic provider host (pulumi/dynamic/__main__.py
    configures Settings without one), so `pulumi.log` prints to stderr (pulumi/log.py)."""
    saved, settings.SETTINGS.engine = settings.SETTINGS.engine, None
    try:
        yield
    finally:
        settings.SETTINGS.engine = saved


def host_struct(properties: dict[str, Any]) -> Any:
    """`properties` as the engine sends them to a provider (not asyncio.run, which unsets the current loop)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(properties, {}))
    finally:
        loop.close()


@contextlib.contextmanager
def provider_host(root: Path, stderr: int | IO[str] = subprocess.DEVNULL) -> Iterator[Any]:
    """`python -m pulumi.dynamic` (what pulumi-resource-pulumi-python runs) in `root`: it prints its port, then serves
    the ResourceProvider gRPC service for every dynamic resource of the program."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("https_proxy", "all_proxy", "http_proxy")}
    env["PYTHONPATH"] = str(root)
    process = subprocess.Popen([sys.executable, "-m", "pulumi.dynamic"], cwd=root, env=env, stdout=subprocess.PIPE,
                               stderr=stderr, text=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{int(process.stdout.readline())}") as channel:
            yield provider_pb2_grpc.ResourceProviderStub(channel)
    finally:
        process.terminate()
        process.wait(timeout=30)
