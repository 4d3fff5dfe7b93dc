import copy
import gc
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A test process holds many simulated machines and Pulumi runtimes (shared first `up`s, module fixtures), and each
# simulated operation allocates a few million objects: with Python's default thresholds (700, 10, 10) the cyclic
# collector ran thousands of times per test file, a quarter of its CPU (tests/test_lifecycle_scenarios.py: 10.9 s
# of 43 s). Collections a hundred times rarer keep memory bounded and cost 4 s there.
gc.set_threshold(100_000, 50, 100)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ops import upstream  # noqa: E402
from tests.support.mockrun import reference_stack  # noqa: E402
from tests.support.no_prose import Guard  # noqa: E402

SHARED = ROOT.parent / "shared"
# The user's lab, theirs to edit: no test may depend on what is in it.
USER_STACK = ROOT / "Pulumi.dev.yaml"


class UserStackReadError(RuntimeError):
    """A test (or what it ran in this process) opened the user's Pulumi.dev.yaml."""


def refuse_the_users_stack(event: str, args: tuple) -> None:
    """Audit hook (PEP 578): every open() in the test process goes through it. Tests read
    tests/fixtures/reference-stack.yaml (tests.support.mockrun.reference_stack), so that a user who edits their
    Pulumi.dev.yaml does not change what `make test` checks."""
    if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    path = os.fsdecode(args[0])
    if path.endswith(USER_STACK.name) and os.path.realpath(path) == str(USER_STACK):
        raise UserStackReadError(f"{USER_STACK.name} is the user's lab: tests read the reference stack "
                                 "(tests/fixtures/reference-stack.yaml, tests.support.mockrun.reference_stack())")


sys.addaudithook(refuse_the_users_stack)

# Started before any test module is imported, so reads while collecting count too.
SHARED_DOCS = Guard(SHARED / "docs").start()
# The repository's own texts: a test that reads them checks the repository, not the product (`make test-product`).
REPOSITORY_TEXTS = [Guard(ROOT / text).start() for text in ("README.md", "CHANGELOG.md", "docs", ".github", "Makefile")]


def pytest_collection_finish(session):
    for guard in REPOSITORY_TEXTS:  # read while importing the test modules: no test to name
        guard.drain()


@pytest.fixture(autouse=True)
def _no_test_reads_the_shared_docs(request):
    """Upstream facts come from ../shared/vendor; the prose under ../shared/docs changes between rounds."""
    yield
    reads = SHARED_DOCS.drain()
    assert not reads, (f"read under {SHARED / 'docs'} (tests read data from {SHARED / 'vendor'} only, "
                       f"never the prose next to it): {reads}")
    texts = [read for guard in REPOSITORY_TEXTS for read in guard.drain()]
    assert not texts or request.node.get_closest_marker("repo"), f"mark the test @pytest.mark.repo: it read {texts}"


@pytest.fixture
def dev_config():
    """A fresh, mutable copy of the `gpu-tenancy:*` keys of the reference stack (tests/fixtures/reference-stack.yaml)."""
    return copy.deepcopy(reference_stack())


UPSTREAM_MISSING = (
    "upstream reference files are not available: clone the project with ../shared beside it, "
    "or run `make upstream` (downloads the pinned files and checks their sha256)"
)


def locate_vendor_dir(shared: Path = SHARED, cache: Path | None = None, manifest=None) -> Path | None:
    """<shared>/vendor when present, else the reference copy under `cache` (default .cache/upstream) when it is
    complete and matches the pinned sha256 sums, else None."""
    if (shared / "vendor").is_dir():
        return shared / "vendor"
    if not upstream.reference_problems(cache, manifest):
        return upstream.vendor_dir(cache)
    return None


@pytest.fixture(scope="session")
def vendor_dir() -> Path:
    """The upstream reference files: ../shared/vendor, else the verified copy `make upstream` made, else skip."""
    path = locate_vendor_dir()
    if path is None:
        pytest.skip(UPSTREAM_MISSING)
    return path


@pytest.fixture(scope="session", autouse=True)
def fetched_charts(tmp_path_factory):
    """Every test runs as if `make charts` had run: the program (and the simulator's Helm model) look for the charts
    in a stand-in project directory holding their Chart.yaml and crds/ files (tests/support/charts.py). A test that
    wants a fresh clone points `components.helm.PROJECT_DIR` elsewhere with monkeypatch."""
    from components import helm
    from tests.support.charts import write_fake_charts

    saved = helm.PROJECT_DIR
    helm.PROJECT_DIR = write_fake_charts(tmp_path_factory.mktemp("project"))
    yield helm.PROJECT_DIR
    helm.PROJECT_DIR = saved


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


# --------------------------------------------------------------------------- #
# A local HTTPS API server (tests/support/apiserver.py): one per test module, reset before each test.
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def cluster_ca():
    from tests.support.sim import pki

    return pki.new_ca("tenant-a")


@pytest.fixture(scope="module")
def _api_server(cluster_ca, tmp_path_factory):
    from tests.support.apiserver import ApiServer

    server = ApiServer(cluster_ca, tmp_path_factory.mktemp("apiserver"))
    yield server
    server.stop()


@pytest.fixture
def api(_api_server, monkeypatch):
    """The module's API server with no object, no recorded request and no proxy variable."""
    from tests.support.apiserver import clear_proxies

    clear_proxies(monkeypatch)
    _api_server.reset()
    return _api_server
