"""What `components.host_operations` reaches while the simulator runs a dynamic provider: the simulated clusters.

The dynamic providers' own code runs unchanged (tests/support/sim/providers.py DynamicModel loads them as the
dynamic-provider host does); only the three hooks of `components.host_operations` are replaced for the call:
`connect` returns a client of the simulated API server the kubeconfig names (same authentication and
errors), `now` is the simulated clock, and `sleep` lets simulated time pass (and any race the program
waits out is then lost by the system, not by the program).
"""

from __future__ import annotations

import datetime
from typing import Any

from components import host_operations
from tests.support.sim.world import ApiError, KubeApi, UnreachableError, World


class SimClient:
    def __init__(self, world: World, kubeconfig: str, touched: set[str]):
        self.world = world
        try:
            self.api: KubeApi = world.api_for(kubeconfig)
            self.identity = self.api.authenticate(kubeconfig)
        except UnreachableError as error:
            raise host_operations.UnreachableError(str(error)) from None
        except ApiError as error:
            raise host_operations.ApiError(error.code, error.message) from None
        self.server = self.api.server
        touched.add(self.server)

    def __enter__(self) -> SimClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        return None

    def _call(self, fn, *args, **kwargs) -> Any:
        if not self.api.reachable:
            raise host_operations.UnreachableError(f"{self.server}: connection refused")
        try:
            return fn(*args, **kwargs)
        except ApiError as error:
            raise host_operations.ApiError(error.code, error.message) from None

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = self._call(self.api.get, self.identity, kind, namespace, name)
        if kind == "DaemonSet":
            obj.setdefault("status", {})["numberReady"] = _ready_agents(self.api, name)
        return obj

    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool:
        try:
            self.get(kind, name, namespace)
        except host_operations.ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def create(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        return self._call(self.api.create, self.identity, obj, dry_run=dry_run)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        try:
            self._call(self.api.delete, self.identity, kind, namespace, name)
        except host_operations.ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def patch_status(self, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._call(self.api.patch_status, self.identity, kind, name, patch.get("status", patch))


def _ready_agents(api: KubeApi, name: str) -> int:
    from tests.support.sim import systems

    if name != "konnectivity-agent" or not systems._features(api).konnectivity:
        return 0
    return len(systems._ready_nodes(api))


class patched:  # noqa: N801 -- a context manager
    """Point `components.host_operations` at the simulated machine for the duration of one provider call."""

    def __init__(self, world: World):
        self.world = world
        self.touched: set[str] = set()

    def __enter__(self) -> patched:
        self.saved = (host_operations.connect, host_operations.now, host_operations.sleep)
        host_operations.connect = lambda kubeconfig: SimClient(self.world, kubeconfig, self.touched)
        host_operations.now = lambda: self.world.now
        host_operations.sleep = self._sleep
        return self

    def _sleep(self, seconds: float) -> None:
        self.world.now += datetime.timedelta(seconds=seconds)
        for server in self.touched:
            self.world.wait_for_tenant(server)
            host = self.world.apis.get(server)
            state = getattr(host, "kamaji", None)
            if state is not None:
                state.webhook_ready = state.running

    def __exit__(self, *exc: object) -> None:
        host_operations.connect, host_operations.now, host_operations.sleep = self.saved
