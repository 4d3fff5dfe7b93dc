"""Lifecycle simulator: run the real program through preview, up and destroy against a simulated machine.

    sim = Lifecycle(config)            # a fresh Docker host, empty state
    sim.preview()                      # the plan `pulumi preview` would show
    sim.up()                           # preview, then the update; state and machine carried on
    sim.config["tenants"].append(...)  # change the stack config between operations
    sim.world.delete_kind_cluster(...) # or break the machine on purpose
    sim.refresh()                      # `pulumi refresh`: the state re-read, the program not run
    sim.destroy()

Every operation returns a `Plan` (`plan.render()` reads like `pulumi preview`); a failed operation raises
`EngineError` carrying its plan unless `expect_error=True`. See `tests/support/sim/engine.py` for the engine rules
and `tests/support/sim/providers.py` for the provider rules, each with the upstream file it follows.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Iterable
from typing import Any

from tests.support.sim.engine import Engine, EngineError, Plan, Step, run_operation, run_refresh
from tests.support.sim.state import Resource, plain
from tests.support.sim.world import World

__all__ = ["Lifecycle", "Plan", "Step", "EngineError", "World", "Resource"]


class Lifecycle:
    def __init__(
        self,
        config: dict[str, Any],
        *,
        world: World | None = None,
        stack: str = "dev",
        secret_keys: Iterable[str] = (),
        program: Callable[[], Any] | None = None,
    ):
        self.world = world or World()
        self.engine = Engine(self.world)
        self.config = copy.deepcopy(config)
        self.stack = stack
        self.secret_keys = list(secret_keys)
        self.program = program
        self.history: list[Plan] = []
        self.outputs: dict[str, Any] = {}
        self.secret_outputs: set[str] = set()

    def fork(self) -> Lifecycle:
        """An independent copy of this stack and its machine, as they are between two operations: one
        expensive `up` can be the starting point of many scenarios."""
        return copy.deepcopy(self)

    # ---- operations ------------------------------------------------------- #

    def _run(self, kind: str, *, env: dict[str, str] | None, replace: Iterable[str] = (),
             expect_error: bool = False) -> Plan:
        plan = run_operation(self.engine, kind, self.config, stack=self.stack, secret_keys=self.secret_keys,
                             env=env, replace=replace, program=self.program)
        self.history.append(plan)
        if kind == "update" and plan.ok:
            self.outputs, self.secret_outputs = plan.outputs, plan.secret_outputs
        if not plan.ok and not expect_error:
            raise EngineError(plan)
        return plan

    def preview(self, *, env: dict[str, str] | None = None, expect_error: bool = False) -> Plan:
        return self._run("preview", env=env, expect_error=expect_error)

    def up(
        self,
        *,
        skip_preview: bool = False,
        replace: Iterable[str] = (),
        env: dict[str, str] | None = None,
        expect_error: bool = False,
    ) -> Plan:
        """`pulumi up`: the preview first (unless skipped, as the Automation API does), then the update."""
        targets = [self.urn(name) if not name.startswith("urn:") else name for name in replace]
        if not skip_preview:
            preview = self._run("preview", env=env, replace=targets, expect_error=expect_error)
            if not preview.ok:
                return preview
        return self._run("update", env=env, replace=targets, expect_error=expect_error)

    def destroy(self, *, env: dict[str, str] | None = None, expect_error: bool = False) -> Plan:
        return self._run("destroy", env=env, expect_error=expect_error)

    def refresh(self, *, env: dict[str, str] | None = None, expect_error: bool = False) -> Plan:
        """`pulumi refresh`: the state re-read through the providers, the program not run (engine.run_refresh)."""
        plan = run_refresh(self.engine, env=env)
        self.history.append(plan)
        if not plan.ok and not expect_error:
            raise EngineError(plan)
        return plan

    def advance(self, **delta: float) -> None:
        """Let time pass on the simulated machine (datetime.timedelta keywords)."""
        self.world.now += datetime.timedelta(**delta)

    # ---- state ------------------------------------------------------------ #

    def resources(self) -> list[Resource]:
        return [r for r in self.engine.state.values() if r.custom]

    def resource(self, name: str, type_: str | None = None) -> Resource:
        found = [r for r in self.engine.state.values() if r.name == name and (type_ is None or r.type == type_)]
        if len(found) != 1:
            raise AssertionError(f"expected one resource named {name!r} in the state, found {found}")
        return found[0]

    def urn(self, name: str) -> str:
        return self.resource(name).urn

    def output(self, name: str) -> Any:
        return plain(self.outputs[name])
