"""Benchmark: program evaluation time and critical-path length for 2, 8 and 32 tenants.

Runs the real program under mocks (no cluster) several times per size and
reports the median evaluation time, the resource count and the longest
dependency chain. Exits non-zero if the chain grows with the tenant count or
if any resource of one tenant waits for another tenant's.

    .venv/bin/python -m bench.graph_bench [--repeat 3] [--sizes 2 8 32]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from ops.graph import evaluate, generated_config


def measure(tenants: int, repeat: int) -> dict[str, float | int]:
    runs = [evaluate(generated_config(tenants)) for _ in range(repeat)]
    report = runs[-1].report
    return {
        "tenants": tenants,
        "resources": report.resource_count,
        "chain": len(report.longest_chain),
        "cross": len(report.cross_tenant),
        "seconds": statistics.median(run.seconds for run in runs),
    }


def table(rows: list[dict[str, float | int]]) -> str:
    lines = [
        "| tenants | resources | longest chain | cross-tenant deps | evaluation (median) |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['tenants']} | {r['resources']} | {r['chain']} | {r['cross']} | {r['seconds']:.2f} s |" for r in rows
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 32])
    args = parser.parse_args(argv)
    rows = [measure(size, args.repeat) for size in args.sizes]
    print(table(rows))
    chains = {row["chain"] for row in rows}
    if len(chains) != 1 or any(row["cross"] for row in rows):
        print("FAIL: the critical path must not depend on the number of tenants", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
