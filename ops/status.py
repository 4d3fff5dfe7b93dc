"""`make status`: what the stack built, one compact table per tenant.

Reads the stack's plain outputs (`pulumi stack output --json`, secrets not requested) and prints, per
tenant, its API endpoint and data store, each node with its cards and the GPU slots it advertises, and what
the smoke test proved (the pod, the scheduler that placed it, the card slice HAMi allocated). Exit 0 when the
outputs were read, 2 when they could not be.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from ops.text import aligned
from ops.verify import OutputsError, Run, read_outputs_file, read_stack_outputs

Json = dict[str, Any]



def _card(card: Json) -> str:
    return f"{card.get('uuid', '?')} {card.get('model', '?')} {card.get('memoryMiB', '?')} MiB"


def _allocations(devices: str) -> list[str]:
    """HAMi's `hami.io/vgpu-devices-allocated` ("<uuid>,<type>,<MiB>,<cores>:...;") as readable slices."""
    slices = []
    for container in devices.split(";"):
        for device in filter(None, container.split(":")):
            parts = device.split(",")
            if len(parts) >= 4:
                slices.append(f"{parts[0]} ({parts[2]} MiB, {parts[3]}% cores)")
    return slices


def _smoke_line(smoke: Any) -> str:
    if not smoke:
        return "smoke test: disabled"
    if "proves" in smoke:  # the outputs of a preview-only stack: nothing was proved yet
        return f"smoke test: not run yet ({smoke.get('pod')})"
    slices = ", ".join(_allocations(str(smoke.get("devicesAllocated", "")))) or "no card"
    return (f"smoke test: {smoke.get('pod')} admitted by HAMi's webhook, placed by {smoke.get('schedulerName')} "
            f"on {smoke.get('node')}, got {slices}")


def render(outputs: Json) -> str:
    """The status tables for the stack outputs `outputs` (as `pulumi stack output --json` prints them)."""
    tenants = outputs.get("tenants")
    if not isinstance(tenants, dict) or not tenants:
        raise OutputsError("the stack outputs have no tenants: run `make up` first")
    plan = (outputs.get("plan") or {}).get("tenants") or {}
    lines = []
    if outputs.get("lbPoolRange"):
        lines.append(f"management cluster: kind network {outputs.get('kindSubnet')}, tenant API addresses "
                     f"{outputs['lbPoolRange']}")
    for name, tenant in tenants.items():
        planned = plan.get(name) or {}
        lines.append("")
        lines.append(f"{name}  https://{tenant.get('endpoint')}  Kubernetes {planned.get('kubernetesVersion', '?')}"
                     f"  data store {tenant.get('dataStore')}")
        capacity = tenant.get("gpuCapacity") or {}
        workers = planned.get("workers") or {}
        rows = [["NODE", "CARDS", "GPU SLOTS"]]
        for node in tenant.get("nodes") or []:
            cards = workers.get(node) or []
            slots = capacity.get(node)
            rows.append([node, "; ".join(_card(card) for card in cards) or "-",
                         "-" if slots is None else str(slots)])
        lines.extend(aligned(rows))
        lines.append(f"  {_smoke_line(tenant.get('smokeTest'))}")
    return "\n".join(lines).lstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None, run: Run = subprocess.run) -> int:
    parser = argparse.ArgumentParser(prog="make status", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--outputs-file", help="read saved `pulumi stack output --json` instead")
    args = parser.parse_args(argv)
    try:
        outputs = (read_outputs_file(args.outputs_file) if args.outputs_file
                   else read_stack_outputs(args.stack, run=run, show_secrets=False))
        sys.stdout.write(render(outputs))
    except OutputsError as error:
        print(f"make status: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
