"""Names we hand to Kubernetes and Docker, checked against what the systems themselves allow or already use.

Tenant names become namespaces on the management cluster: a tenant named like a namespace the platform itself
uses would share it (and its NetworkPolicies, quotas and deletion). The set of such namespaces is read from what a
simulated `up` really leaves on the management cluster, not from our constant.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest

from config import ConfigError, load_stack_config
from tests.support.lifecycle_support import running_kind_lab
from tests.support.mockrun import reference_stack


@pytest.fixture(scope="module")
def management_namespaces() -> set[str]:
    sim = running_kind_lab()
    api = sim.world.kind["gpu-tenancy"].api
    tenants = {t["name"] for t in sim.config["tenants"]}
    return {ns["metadata"]["name"] for ns in api.list("Namespace")} - tenants


def _tenant_named(name: str) -> dict:
    raw = copy.deepcopy(reference_stack())
    raw["tenants"][0]["name"] = name
    return raw


def test_the_platform_uses_namespaces_of_its_own(management_namespaces):
    # kind's, Kubernetes' and the ones the charts install into.
    assert {"kube-system", "default", "cert-manager", "kamaji-system", "metallb-system"} <= management_namespaces


def test_no_tenant_may_take_a_namespace_the_platform_uses(management_namespaces):
    for namespace in sorted(management_namespaces):
        with pytest.raises(ConfigError) as refused:
            load_stack_config(_tenant_named(namespace))
        assert "tenants[0].name" in str(refused.value), namespace


# k8s.io/apimachinery pkg/util/validation/validation.go: a DNS-1123 label is at most 63 characters of [a-z0-9-],
# starting and ending alphanumeric; a namespace name is one (IsDNS1123Label). Docker container names are looser.
@pytest.mark.parametrize("name", ["team_a", "Team-a", "team-", "-team", "team.a", "tëam", "team a", "team\n", ""])
def test_tenant_names_are_dns_labels(name):
    with pytest.raises(ConfigError):
        load_stack_config(_tenant_named(name))


@pytest.mark.parametrize("name", ["team_0", "W0", "w-", "w.0", "w\n"])
def test_worker_names_are_dns_labels(name):
    raw = copy.deepcopy(reference_stack())
    raw["tenants"][0]["workers"][0]["name"] = name
    with pytest.raises(ConfigError) as refused:
        load_stack_config(raw)
    assert "tenants[0].workers[0].name" in str(refused.value)


def test_valid_names_pass():
    raw = _tenant_named("team-0a")
    raw["tenants"][0]["workers"][0]["name"] = "gpu-01"
    assert load_stack_config(raw).tenants[0].name == "team-0a"


# --------------------------------------------------------------------------- #
# One definition per shared name
# --------------------------------------------------------------------------- #

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ["__main__.py", "naming.py", "sdk.py", "components", "config", "ops"]
# Each group is one thing under all the names it has had: at most one module may define any of them.
SHARED_NAMES = [
    {"KAMAJI_NAMESPACE"},
    {"DEFAULT_DATASTORE", "SHARED_DATASTORE"},
    {"LABEL_STACK"}, {"LABEL_TENANT"}, {"LABEL_WORKER"}, {"LABEL_ROLE"}, {"LABEL_PREFIX", "DOCKER_LABEL_PREFIX"},
    {"VGPU_NODE_ANNOTATION", "VGPU_NODE"}, {"DEVICES_ALLOCATED_ANNOTATION", "VGPU_DEVICES"},
    {"HAMI_SCHEDULER_NAME"}, {"HAMI_NAMESPACE"}, {"DNS1035_LABEL"},
    {"sdk_field", "_field"},
    {"DEFAULT_NODE_POLICY", "CHART_NODE_POLICY"}, {"DEFAULT_GPU_POLICY", "CHART_GPU_POLICY"}, {"PROJECT"},
    {"GPU_RESOURCE"}, {"GPU_MEMORY_RESOURCE"}, {"GPU_CORES_RESOURCE"}, {"QUOTA_GPUS"}, {"PART_OF_LABEL"}, {"PART_OF"},
    {"JOIN_ANNOTATION"}, {"NAMESPACE_NAME_LABEL"}, {"CERT_MANAGER_NAMESPACE"}, {"METALLB_NAMESPACE"},
    {"CALICO_OPERATOR_NAMESPACE", "CALICO_NAMESPACE"}, {"PROJECT", "NAMESPACE"},
    {"WEBHOOK_EXEMPT_NAMESPACES", "SYSTEM_NAMESPACES", "TENANT_SYSTEM_NAMESPACES"},
    {"BOOTSTRAP_TOKEN_GROUP", "NODE_BOOTSTRAP_TOKEN_GROUP"},
]
# A literal spelt out twice is the same duplicate under two names: each of these may be written once in the
# product, anywhere (a constant, a dict key, a set member), docstrings aside.
SHARED_VALUES = [
    "kamaji-system", "metallb-system", "hami.io/vgpu-node", "hami.io/vgpu-devices-allocated", "hami-scheduler",
    "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "app.kubernetes.io/part-of",
    "kubernetes.io/metadata.name", "gpu-tenancy.io/join", "system:bootstrappers:kubeadm:default-node-token",
    "calico-apiserver",
]


def product_modules() -> dict[str, ast.Module]:
    paths = [ROOT / p for p in PRODUCT if (ROOT / p).is_file()]
    paths += [f for p in PRODUCT if (ROOT / p).is_dir() for f in sorted((ROOT / p).rglob("*.py"))]
    return {str(path.relative_to(ROOT)): ast.parse(path.read_text()) for path in paths}


def module_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    """Names a module binds at top level (constants, functions, classes), with the value of plain assignments."""
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names[node.target.id] = node.value
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
    return names


def string_literals(tree: ast.Module) -> list[tuple[str, int]]:
    """Every string literal of a module with its line, docstrings (a string standing alone as a statement) aside."""
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [(node.value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


@pytest.mark.repo
def test_each_shared_name_and_value_is_defined_in_one_module():
    trees = product_modules()
    modules = {path: module_level_names(tree) for path, tree in trees.items()}
    assert "naming.py" in modules and len(modules) > 30
    for group in SHARED_NAMES:
        defining = sorted(path for path, names in modules.items() if group & set(names))
        assert len(defining) == 1, f"{sorted(group)} defined in {defining}: import it from one place"
    literals = {path: string_literals(tree) for path, tree in trees.items()}
    places = {value: sorted(f"{path}:{line}" for path, found in literals.items() for text, line in found
                            if text == value) for value in SHARED_VALUES}
    repeated = {value: where for value, where in places.items() if len(where) != 1}
    assert not repeated, f"define each once and import it: {repeated}"
