"""Names we hand to Kubernetes and Docker, checked against what the systems themselves allow or already use.

Tenant names become namespaces on the management cluster: a tenant named like a namespace the platform itself
uses would share it (and its NetworkPolicies, quotas and deletion). The set of such namespaces is read from what a
simulated `up` really leaves on the management cluster, not from our constant.
"""

from __future__ import annotations

import copy

import pytest

from config import ConfigError, load_stack_config
from tests.support.lifecycle_support import running_kind_lab
from tests.support.mockrun import load_stack_file


@pytest.fixture(scope="module")
def management_namespaces() -> set[str]:
    sim = running_kind_lab()
    api = sim.world.kind["gpu-tenancy"].api
    tenants = {t["name"] for t in sim.config["tenants"]}
    return {ns["metadata"]["name"] for ns in api.list("Namespace")} - tenants


def _tenant_named(name: str) -> dict:
    raw = copy.deepcopy(load_stack_file("dev"))
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
    raw = copy.deepcopy(load_stack_file("dev"))
    raw["tenants"][0]["workers"][0]["name"] = name
    with pytest.raises(ConfigError) as refused:
        load_stack_config(raw)
    assert "tenants[0].workers[0].name" in str(refused.value)


def test_valid_names_pass():
    raw = _tenant_named("team-0a")
    raw["tenants"][0]["workers"][0]["name"] = "gpu-01"
    assert load_stack_config(raw).tenants[0].name == "team-0a"
