"""`make plan`: will the declared GPU workloads fit? One table per tenant and a picture, without a cluster.

Reads Pulumi.<stack>.yaml (or --stack-file), validates it with the program's own validator and runs the same
planner `pulumi preview` exports as `gpuPlan` (components/gpu/capacity.py, faithful to HAMi v2.10.0's scheduler):
where each pod lands or why HAMi would refuse it, what every card has left, and the quota figures. The picture
(an SVG, standard library only) draws each card as bars of slots, memory and cores, filled per workload.

    python -m ops.plan --stack dev --svg build/gpu-plan-dev.svg

Exit 0 when every pod is placed, 1 when one is not, 2 when the stack file or its configuration is invalid.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from components.gpu.capacity import SMOKE_WORKLOAD
from components.plan import gpu_plan
from config import ConfigError, StackConfig, load_stack_config
from config.stack_file import StackFileError, load
from ops.preflight import PROJECT_ROOT, unsealed_config
from ops.text import aligned

Json = dict[str, Any]



def _used(figure: Json) -> str:
    return f"{figure['used']}/{figure['total']}"


def _limit(figure: Json) -> str:
    return f"{figure['used']}/{'-' if figure['limit'] is None else figure['limit']}"


def _ratio(value: float | None) -> str:
    return "unlimited" if value is None else f"{value:g}x"


def render(plan: Json) -> str:
    """The plan as text: per tenant its pods, its cards and its quota; then the pool."""
    lines: list[str] = []
    for name, tenant in plan["tenants"].items():
        lines.append(f"tenant {name} (nodePolicy {tenant['nodePolicy']}, gpuPolicy {tenant['gpuPolicy']})")
        rows = [["POD", "NAMESPACE", "NODE", "CARDS", "UNPLACED"]]
        for p in tenant["placements"]:
            rows.append([f"{p['workload']}/{p['replica']}", p["namespace"], p["node"] or "-",
                         ",".join(p["cards"]) or "-", p["unplaced"] or ""])
        lines += aligned(rows)
        ties = [p for p in tenant["placements"] if p["tiedWith"]]
        for p in ties:
            lines.append(f"  {p['workload']}/{p['replica']}: {p['node']} and {', '.join(p['tiedWith'])} score the "
                         "same; HAMi may pick any of them")
        cards = [["CARD", "NODE", "SLOTS", "MEMORY MiB", "CORES %", "FREE MiB"]]
        for uuid, card in tenant["cards"].items():
            cards.append([uuid, card["node"], _used(card["slots"]), _used(card["memoryMiB"]), _used(card["cores"]),
                          str(card["memoryMiB"]["free"])])
        lines += aligned(cards) if len(cards) > 1 else ["  no GPU cards"]
        quota = tenant["quota"]
        if quota is None:
            lines.append("  quota: none")
        else:
            for namespace, figures in quota["namespaces"].items():
                lines.append(f"  quota {namespace}: gpus {_limit(figures['gpus'])}, memoryMiB "
                             f"{_limit(figures['memoryMiB'])}, cores {_limit(figures['cores'])}")
            over = quota["overcommit"]
            lines.append(f"  quota of all namespaces / cards: gpus {_ratio(over['gpus'])}, memoryMiB "
                         f"{_ratio(over['memoryMiB'])}, cores {_ratio(over['cores'])}")
        lines.append("")
    pool = plan["pool"]
    over = pool["overcommit"]
    lines.append(f"pool: {pool['cards']} cards, {pool['slots']} slots, {pool['memoryMiB']} MiB, {pool['cores']}% "
                 f"cores; quota of every tenant / pool: gpus {_ratio(over['gpus'])}, memoryMiB "
                 f"{_ratio(over['memoryMiB'])}, cores {_ratio(over['cores'])}")
    lines.append("every pod placed" if not plan["unplaced"] else f"{plan['unplaced']} pod(s) not placed")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- #
# The picture
# --------------------------------------------------------------------------- #

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
SMOKE_COLOUR = "#bab0ac"
BAR, ROW, LABEL = 480, 16, 230


def colours(plan: Json) -> dict[tuple[str, str], str]:
    """A colour per (tenant, workload), the smoke pod grey."""
    result: dict[tuple[str, str], str] = {}
    for name, tenant in plan["tenants"].items():
        workloads = list(dict.fromkeys(p["workload"] for p in tenant["placements"]))
        declared = [w for w in workloads if w != SMOKE_WORKLOAD]
        for workload in workloads:
            result[(name, workload)] = SMOKE_COLOUR if workload == SMOKE_WORKLOAD else PALETTE[
                declared.index(workload) % len(PALETTE)]
    return result


def svg(plan: Json) -> str:
    """Cards as bars (slots, memory, cores), filled per workload and tenant; a legend per tenant."""
    colour = colours(plan)
    parts: list[str] = []
    y = 20

    def text(x: float, y: float, value: str, size: int = 12, weight: str = "normal") -> None:
        parts.append(f'<text x="{x}" y="{y}" font-size="{size}" font-weight="{weight}">{escape(value)}</text>')

    for name, tenant in plan["tenants"].items():
        text(10, y, f"tenant {name}  (nodePolicy {tenant['nodePolicy']}, gpuPolicy {tenant['gpuPolicy']})", 14, "bold")
        y += 18
        for uuid, card in tenant["cards"].items():
            text(10, y + 12, f"{uuid} on {card['node']}")
            for row, (label, key, share) in enumerate((("slots", "slots", lambda h: 1),
                                                       ("MiB", "memoryMiB", lambda h: h["memoryMiB"]),
                                                       ("cores", "cores", lambda h: h["cores"]))):
                top = y + row * (ROW + 2)
                total = card[key]["total"] or 1
                parts.append(f'<rect x="{LABEL}" y="{top}" width="{BAR}" height="{ROW}" fill="#f2f2f2" '
                             'stroke="#999"/>')
                x = float(LABEL)
                for holder in card["holders"]:
                    width = BAR * share(holder) / total
                    workload = holder["pod"].rsplit("/", 1)[0]
                    parts.append(f'<rect x="{x:.1f}" y="{top}" width="{width:.1f}" height="{ROW}" '
                                 f'fill="{colour[(name, workload)]}"><title>{escape(holder["pod"])}: '
                                 f'{share(holder)} {label}</title></rect>')
                    x += width
                text(LABEL + BAR + 8, top + 12, f"{label} {card[key]['used']}/{card[key]['total']}")
            y += 3 * (ROW + 2) + 10
        legend = [(workload, c) for (tenant_name, workload), c in colour.items() if tenant_name == name]
        x = 10
        for workload, c in legend:
            refused = sum(1 for p in tenant["placements"] if p["workload"] == workload and p["unplaced"])
            label = workload + (f" ({refused} not placed)" if refused else "")
            parts.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{c}"/>')
            text(x + 16, y + 11, label)
            x += 30 + 7 * len(label)
        y += 34
    width = LABEL + BAR + 140
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" viewBox="0 0 {width} {y}" '
            f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
            + "\n".join(parts) + "\n</svg>\n")


# --------------------------------------------------------------------------- #
# Command line
# --------------------------------------------------------------------------- #


def load_config(path: Path, stack: str | None) -> StackConfig:
    """The validated configuration of a stack file (encrypted values stand in as placeholders: the plan reads none)."""
    document = load(path) or {}
    raw, secret_keys, _ = unsealed_config(document if isinstance(document, dict) else {})
    return load_stack_config(raw, secret_keys, stack)


def main(argv: Sequence[str] | None = None, root: Path = PROJECT_ROOT) -> int:
    parser = argparse.ArgumentParser(prog="make plan", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--stack", default="dev", help="plan Pulumi.<stack>.yaml (default: dev)")
    source.add_argument("--stack-file", type=Path, help="plan this stack file")
    parser.add_argument("--svg", type=Path, help="write the picture here (e.g. build/gpu-plan-dev.svg)")
    args = parser.parse_args(argv)
    path = args.stack_file or root / f"Pulumi.{args.stack}.yaml"
    try:
        config = load_config(path, None if args.stack_file else args.stack)
    except FileNotFoundError:
        print(f"make plan: {path.name} does not exist: create it (cp Pulumi.dev.yaml {path.name}) or pass "
              "STACK=<name> of an existing stack file", file=sys.stderr)
        return 2
    except (ConfigError, StackFileError) as error:
        print(f"make plan: {error}", file=sys.stderr)
        return 2
    plan = gpu_plan(config)
    print(render(plan), end="")
    if args.svg:
        args.svg.parent.mkdir(parents=True, exist_ok=True)
        args.svg.write_text(svg(plan))
        print(f"wrote {args.svg}")
    return 1 if plan["unplaced"] else 0


if __name__ == "__main__":
    sys.exit(main())
