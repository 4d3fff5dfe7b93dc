"""Keep the documentation's sample outputs true: in README.md, CHANGELOG.md and every file under docs/ (`DOCS`), the
blocks between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` are produced by the code itself (a simulated
`make up` of the reference stack, tests/fixtures/reference-stack.yaml; the image-pull benchmark; `make plan`).

    python -m tests.support.readme          # rewrite the blocks (make docs)
    python -m tests.support.readme --check  # exit 1 when a block is stale (the test suite checks this too)
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# Every file whose names, keys and samples tests/test_readme.py keeps true.
DOCS = (README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md")))
BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.S)


def all_text() -> str:
    """All of `DOCS`, one after the other: where a test looks for what the docs show an operator."""
    return "\n".join(path.read_text() for path in DOCS)


def _status() -> str:
    """`make status` after a simulated `make up` of the reference stack. Its tenants are added one `up` at a time: MetalLB
    hands out addresses in the order control planes ask, which in one `up` is whichever is first (in the simulator
    as on a real cluster), and the sample must not change from one run to the next."""
    from ops.stand_in_charts import stand_in_charts
    from ops.status import render
    from tests.support.mockrun import reference_stack
    from tests.support.sim import Lifecycle
    from tests.support.sim.lab import lab_world
    from tests.support.sim.state import plain

    config = reference_stack()
    tenants = config["tenants"]
    # The program needs the charts on disk (their Chart.yaml, Kamaji's crds/): a stand-in tree, as make graph uses.
    with stand_in_charts():
        sim = Lifecycle({**config, "tenants": tenants[:1]}, world=lab_world())
        for count in range(1, len(tenants) + 1):
            sim.config["tenants"] = tenants[:count]
            sim.up(skip_preview=True)  # what `make up` shows comes from the update; its preview changes nothing
    outputs = {name: ("[secret]" if name in sim.secret_outputs else plain(value))
               for name, value in sim.outputs.items()}
    return f"```text\n$ make status\n{render(outputs)}```\n"


def _image_pulls() -> str:
    from bench.image_pulls import rows, table

    return table(rows([2, 8, 32])) + "\n"


PLAN_INPUT = "<!-- plan-input:{name} -->"
PLAN_EXAMPLES = ("plan-two-teams", "plan-spread", "plan-slots")


def plan_example(name: str) -> dict:
    """The stack configuration of the worked example `name` (docs/capacity.md): the YAML block after its
    `<!-- plan-input:NAME -->` marker, written as a stack file (`gpu-tenancy:<key>` under `config:`)."""
    import yaml

    text = all_text()
    block = re.search(r"```yaml\n(.*?)```", text[text.index(PLAN_INPUT.format(name=name)):], re.S)
    assert block is not None, f"no yaml block after the plan-input marker of {name}"
    document = yaml.safe_load(block.group(1))
    return {key.split(":", 1)[1]: value for key, value in document["config"].items()}


def _plan(name: str) -> Callable[[], str]:
    def generate() -> str:
        from components.plan import gpu_plan
        from config import load_stack_config
        from ops.plan import render as render_plan

        return f"```text\n$ make plan\n{render_plan(gpu_plan(load_stack_config(plan_example(name))))}```\n"

    return generate


GENERATORS: dict[str, Callable[[], str]] = {"status": _status, "image-pulls": _image_pulls,
                                            **{name: _plan(name) for name in PLAN_EXAMPLES}}


def shell_commands(section: str, path: Path = README, text: str | None = None) -> list[str]:
    """The commands of the first ```sh block under the heading `section` (any level) of `path`, in order, exactly
    as written: one per line, except that a `for` loop is one command up to its last `done`."""
    text = path.read_text() if text is None else text
    heading = re.search(rf"^#+ {re.escape(section)}\n", text, re.M)
    if heading is None:
        raise ValueError(f"{path.name} has no section {section!r}")
    block = re.search(r"^```sh\n(.*?)^```$", text[heading.end():], re.M | re.S)
    if block is None:
        raise ValueError(f"{path.name} section {section!r} has no ```sh block")
    commands: list[str] = []
    depth = 0
    for line in block.group(1).splitlines():
        if not line.strip() or (depth == 0 and line.lstrip().startswith("#")):
            continue
        words = line.split("#", 1)[0].replace(";", " ").split()
        if depth:
            commands[-1] += "\n" + line
        else:
            commands.append(line)
        depth += words.count("do") - words.count("done")
    if depth:
        raise ValueError(f"{path.name} section {section!r}: a loop without its `done`")
    return commands


def render(text: str) -> str:
    """`text` with every generated block replaced by what its generator produces now."""
    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in GENERATORS:
            raise ValueError(f"generated block {name!r} has no generator (known: {', '.join(GENERATORS)})")
        return f"{match.group(1)}{GENERATORS[name]()}{match.group(4)}"

    return BLOCK.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether every block is current")
    args = parser.parse_args(argv)
    fresh = {path: render(path.read_text()) for path in DOCS}
    stale = [path for path, text in fresh.items() if text != path.read_text()]
    if args.check and stale:
        print(f"stale generated blocks in {', '.join(str(p.relative_to(ROOT)) for p in stale)}: run `make docs`",
              file=sys.stderr)
        return 1
    for path in [] if args.check else stale:
        path.write_text(fresh[path])
        print(f"{path.relative_to(ROOT)}: generated blocks rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
