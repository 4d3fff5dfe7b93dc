import copy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.mockrun import load_stack_file  # noqa: E402

SHARED = ROOT.parent / "shared"


@pytest.fixture
def dev_config():
    """A fresh, mutable copy of the `gpu-tenancy:*` keys of Pulumi.dev.yaml."""
    return copy.deepcopy(load_stack_file("dev"))


@pytest.fixture(scope="session")
def vendor_dir() -> Path:
    path = SHARED / "vendor"
    if not path.is_dir():
        pytest.fail(f"{path} is missing: clone the project with ../shared beside it")
    return path
