"""`make graph`: what `pulumi up` will create, and how long its critical path is, without a cluster.

Runs the real program under mocks (`tools.mockrun`) for a stack file or for N
generated tenants, then prints the resource count, the longest dependency
chain (its length and the resources on it) and any dependency between
resources of different tenants (there should be none), and writes the graph
as a Mermaid flowchart.

    python -m tools.graph                      # Pulumi.dev.yaml
    python -m tools.graph --tenants 32 --mermaid graph.mmd
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.naming import COMPONENT_PREFIX, node_name
from config import StackConfig, load_stack_config
from tools.graph_analysis import GraphNode, GraphReport, analyse, mermaid
from tools.mockrun import ProgramRun, load_stack_file, run_program

TENANT_COMPONENTS = ("TenantControlPlane", "HamiMockGpu")


def generated_config(tenants: int) -> dict[str, Any]:
    """N tenants shaped like the dev lab (one worker, one simulated A100 each; ranges allocated)."""
    return {
        "tenants": [
            {
                "name": f"team-{index:03d}",
                "workers": [
                    {
                        "name": "worker-0",
                        "gpus": [
                            {"uuid": f"GPU-MOCK-{index:03d}", "model": "NVIDIA-A100", "memoryMiB": 8192,
                             "cores": 100, "slots": 10}
                        ],
                    }
                ],
            }
            for index in range(tenants)
        ]
    }


def tenant_owners(config: StackConfig) -> dict[tuple[str, str], str]:
    """(component type, component name) -> tenant, for every per-tenant component the program creates."""
    owners: dict[tuple[str, str], str] = {}
    for tenant in config.tenants:
        for component in TENANT_COMPONENTS:
            owners[(f"{COMPONENT_PREFIX}:{component}", tenant.name)] = tenant.name
        for worker in tenant.workers:
            owners[(f"{COMPONENT_PREFIX}:WorkerNode", node_name(tenant.name, worker.name))] = tenant.name
    return owners


def graph_nodes(run: ProgramRun) -> list[GraphNode]:
    return [
        GraphNode(
            urn=r.urn,
            type=r.type,
            name=r.name,
            parent=r.parent,
            custom=r.custom,
            dependencies=frozenset(run.direct_dependencies(r)),
        )
        for r in run.resources
    ]


@dataclass(frozen=True)
class GraphRun:
    nodes: list[GraphNode]
    report: GraphReport
    seconds: float


def evaluate(raw_config: dict[str, Any]) -> GraphRun:
    """Run the program under mocks and analyse what it registered."""
    config = load_stack_config(raw_config)
    started = time.perf_counter()
    run = run_program(raw_config)
    seconds = time.perf_counter() - started
    nodes = graph_nodes(run)
    return GraphRun(nodes=nodes, report=analyse(nodes, tenant_owners(config)), seconds=seconds)


def render(result: GraphRun, label: str) -> str:
    report = result.report
    lines = [
        f"{label}: {report.resource_count} resources, program evaluated in {result.seconds:.2f} s",
        f"longest dependency chain: {len(report.longest_chain)} resources",
    ]
    lines += [f"  {i:2d}. {n.name}  ({n.type})" for i, n in enumerate(report.longest_chain, 1)]
    if report.cross_tenant:
        lines.append(f"cross-tenant dependencies: {len(report.cross_tenant)} (tenants must be independent)")
        lines += [f"  {a.name} ({ta}) waits for {b.name} ({tb})" for a, ta, b, tb in report.cross_tenant]
    else:
        lines.append("cross-tenant dependencies: none")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make graph", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--stack", default="dev", help="use Pulumi.<stack>.yaml (default: dev)")
    source.add_argument("--tenants", type=int, help="use N generated tenants instead of a stack file")
    parser.add_argument("--mermaid", type=Path, help="write the dependency graph as a Mermaid file")
    args = parser.parse_args(argv)

    if args.tenants is not None:
        raw, label = generated_config(args.tenants), f"{args.tenants} generated tenants"
    else:
        raw, label = load_stack_file(args.stack), f"stack {args.stack}"
    result = evaluate(raw)
    print(render(result, label))
    if args.mermaid:
        args.mermaid.write_text(mermaid(result.nodes, result.report))
        print(f"wrote {args.mermaid}")
    return 1 if result.report.cross_tenant else 0


if __name__ == "__main__":
    sys.exit(main())
