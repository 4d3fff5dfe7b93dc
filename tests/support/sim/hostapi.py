"""What a dynamic provider (`components/*/operations.py`) reaches while the simulator runs it: the simulated clusters.

The providers' own code runs unchanged (tests/support/sim/providers.py DynamicModel loads them as the
dynamic-provider host does). `attach` gives the provider instance it unpickled the simulator's side of the
seam: `connect` returns a `components.kube.KubeClient` of the simulated API server the kubeconfig names (same
authentication and errors), and `clock` is the simulated clock, whose `sleep` lets simulated time pass (any race
the program waits out is then lost by the system, not by the program). Nothing module-level is replaced.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from typing import Any, TypeVar

from components.host_operations import HostOperationProvider
from components.kube import ApiError, UnreachableError
from tests.support.sim.world import KubeApi, World

Provider = TypeVar("Provider", bound=HostOperationProvider)


class SimClient:
    """`components.kube.KubeClient` of one simulated API server, authenticated as the kubeconfig's user."""

    def __init__(self, world: World, kubeconfig: str, touched: set[str]):
        self.api: KubeApi = world.api_for(kubeconfig)
        self.identity = self.api.authenticate(kubeconfig)
        self.server = self.api.server
        touched.add(self.server)

    def close(self) -> None:
        return None

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self.api.reachable:
            raise UnreachableError(f"{self.server}: connection refused")
        return fn(*args, **kwargs)

    def find(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            obj = self._call(self.api.get, self.identity, kind, namespace, name)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        if kind == "DaemonSet":
            obj.setdefault("status", {})["numberReady"] = _ready_agents(self.api, name)
        return obj

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        self._call(self.api.authorize, self.identity, "list", kind, namespace or "", "")
        return copy.deepcopy(self.api.list(kind, namespace))

    def create(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        return self._call(self.api.create, self.identity, obj, dry_run=dry_run)

    def delete(self, kind: str, name: str, namespace: str | None = None, *,
               grace_period_seconds: int | None = None) -> bool:
        try:
            self._call(self.api.delete, self.identity, kind, namespace, name)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def patch(self, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        current = self._call(self.api.get, self.identity, kind, namespace, name)
        return self._call(self.api.update, self.identity, {"kind": kind, "metadata": current["metadata"], **{
            key: value for key, value in patch.items() if key != "metadata"}})

    def patch_status(self, kind: str, name: str, patch: dict[str, Any],
                     namespace: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        assert not dry_run, "the simulator has no model of admission policies on a status dry run"
        return self._call(self.api.patch_status, self.identity, kind, name, patch)

    def evict(self, name: str, namespace: str) -> None:
        self._call(self.api.evict, self.identity, namespace, name)


def _ready_agents(api: KubeApi, name: str) -> int:
    from tests.support.sim import systems

    if name != "konnectivity-agent" or not systems._features(api).konnectivity:
        return 0
    return len(systems._ready_nodes(api))


class SimClock:
    """The world's clock. Sleeping is waiting: the tenants the provider talked to catch up meanwhile."""

    def __init__(self, world: World, touched: set[str]):
        self.world = world
        self.touched = touched

    def now(self) -> datetime.datetime:
        return self.world.now

    def sleep(self, seconds: float) -> None:
        self.world.now += datetime.timedelta(seconds=seconds)
        for server in self.touched:
            self.world.wait_for_tenant(server)
            host = self.world.apis.get(server)
            state = getattr(host, "kamaji", None)
            if state is not None:
                state.webhook_ready = state.running
        from tests.support.sim import systems

        systems.time_passed(self.world)


def attach(provider: Provider, world: World) -> Provider:
    """`provider`, pointed at the simulated machine (for the one call the simulator makes on this instance)."""
    touched: set[str] = set()
    provider.connect = lambda kubeconfig: SimClient(world, kubeconfig, touched)
    provider.clock = SimClock(world, touched)
    return provider
