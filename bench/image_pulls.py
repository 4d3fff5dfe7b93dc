"""Benchmark: image pulls that reach an upstream registry, with and without the lab's image mirror.

Derived from the program's own list of images per node (components/images.py `node_images`): without the mirror
every node pulls every image it runs; with it, the first `make up` pulls each distinct image once (into the cache)
and an `up` after `make down` pulls nothing (the cache volume is kept). Docker Hub's share is shown on its own:
its anonymous limit is 100 manifest pulls per 6 hours per address.

    .venv/bin/python -m bench.image_pulls [--sizes 2 8 32]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from components.images import node_images
from components.management.image_cache import registries_of
from config import load_stack_config
from ops.graph import generated_config


@dataclass(frozen=True)
class PullCounts:
    tenants: int
    nodes: int
    without_mirror: int
    without_mirror_docker_hub: int
    first_up: int
    first_up_docker_hub: int
    # An up after `make down`: nothing is downloaded; images referenced by tag alone still have their tag checked
    # upstream (distribution's proxy resolves a tag upstream first: registry/proxy/proxytagservice.go).
    again: int
    tag_checks: int


def _docker_hub(images) -> int:
    return sum(1 for image in images if registries_of([image]) == {"docker.io"})


def pull_counts(config, cached: set[str] | None = None) -> PullCounts:
    """`cached`: what the cache volume holds before the `up` after `make down` (default: everything the first `up`
    pulled, within the week the caches keep content: CACHE_TTL in components/management/image_cache.py)."""
    nodes = node_images(config)
    every_pull = [image for images in nodes.values() for image in images]
    distinct = set(every_pull)
    kept = distinct if cached is None else cached
    return PullCounts(
        tenants=len(config.tenants), nodes=len(nodes),
        without_mirror=len(every_pull), without_mirror_docker_hub=_docker_hub(every_pull),
        first_up=len(distinct), first_up_docker_hub=_docker_hub(distinct),
        again=len(distinct - kept), tag_checks=sum(1 for image in distinct if "@sha256:" not in image),
    )


def table(rows: list[PullCounts]) -> str:
    lines = [
        "| tenants | nodes | pulls without mirror (Docker Hub) | first `make up` with mirror (Docker Hub) "
        "| `make up` after `make down` |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {r.tenants} | {r.nodes} | {r.without_mirror} ({r.without_mirror_docker_hub}) "
              f"| {r.first_up} ({r.first_up_docker_hub}) | {r.again} (+{r.tag_checks} tag checks) |" for r in rows]
    return "\n".join(lines)


def rows(sizes: list[int]) -> list[PullCounts]:
    return [pull_counts(load_stack_config(generated_config(size))) for size in sizes]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 32])
    args = parser.parse_args(argv)
    print(table(rows(args.sizes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
