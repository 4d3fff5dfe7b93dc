import copy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ops import upstream  # noqa: E402
from tests.support.mockrun import load_stack_file  # noqa: E402

SHARED = ROOT.parent / "shared"


@pytest.fixture
def dev_config():
    """A fresh, mutable copy of the `gpu-tenancy:*` keys of Pulumi.dev.yaml."""
    return copy.deepcopy(load_stack_file("dev"))


UPSTREAM_MISSING = (
    "upstream reference files are not available: clone the project with ../shared beside it, "
    "or run `make upstream` (downloads the pinned files and checks their sha256)"
)


def locate_vendor_dir(shared: Path = SHARED, cache: Path | None = None, manifest=None) -> Path | None:
    """<shared>/vendor when present, else the reference copy under `cache` (default .cache/upstream) when it is
    complete and matches the pinned sha256 sums, else None."""
    if (shared / "vendor").is_dir():
        return shared / "vendor"
    if not upstream.missing_or_invalid("reference", cache, manifest):
        return upstream.vendor_dir(cache)
    return None


@pytest.fixture(scope="session")
def vendor_dir() -> Path:
    """The upstream reference files: ../shared/vendor, else the verified copy `make upstream` made, else skip."""
    path = locate_vendor_dir()
    if path is None:
        pytest.skip(UPSTREAM_MISSING)
    return path


@pytest.fixture
def recorder(monkeypatch):
    """Records, in order, every `kubeadm reset` on a simulated machine and every Node delete sent from the Pulumi
    host: a node must leave before its Node object goes (else its kubelet registers it again)."""
    from tests.support.sim import hostapi, systems

    events: list[tuple[str, str]] = []
    reset, delete = systems.reset, hostapi.SimClient.delete

    def recording_reset(world, machine):
        events.append(("reset", machine.name))
        return reset(world, machine)

    def recording_delete(self, kind, name, namespace=None, **options):
        if kind == "Node":
            events.append(("delete Node", name))
        return delete(self, kind, name, namespace, **options)

    monkeypatch.setattr(systems, "reset", recording_reset)
    monkeypatch.setattr(hostapi.SimClient, "delete", recording_delete)
    return events
