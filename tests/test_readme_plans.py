"""The worked examples of docs/capacity.md (their `make plan` output is a generated block that tests/test_readme.py
keeps current): what each example is there to show holds."""

from __future__ import annotations

import pytest

from components.plan import gpu_plan
from config import load_stack_config
from tests.support.readme import PLAN_EXAMPLES, plan_example

pytestmark = pytest.mark.repo


def plan(name):
    return gpu_plan(load_stack_config(plan_example(name)))


def pods(plan, tenant):
    return {f"{p['workload']}/{p['replica']}": p for p in plan["tenants"][tenant]["placements"]}


def test_every_example_is_a_valid_stack():
    for name in PLAN_EXAMPLES:
        assert plan(name)["tenants"]


def test_a_quota_exceeded_by_memory_times_gpus():
    team_a = pods(plan("plan-two-teams"), "team-a")
    assert all(team_a[f"quarter/{i}"]["node"] == "team-a-server-1" for i in range(4))
    # 40960 MiB of quarters + 2 x 8000 > 50000: HAMi's webhook refuses the pod before it exists.
    assert team_a["pair/0"]["unplaced"] == 'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'
    # A percentage passes the webhook as 0 MiB; the scheduler resolves it and no card passes the quota.
    assert "team-a-server-1: 2/2 ResourceQuotaNotFit" in team_a["extra/0"]["unplaced"]
    quota = plan("plan-two-teams")["tenants"]["team-a"]["quota"]["namespaces"]["default"]
    # The Pending extra counts against requests.nvidia.com/gpu, the refused pair does not.
    assert quota["gpus"]["used"] == 5 and quota["memoryMiB"]["used"] == 40960


def test_a_multi_gpu_pod_fits_only_on_the_node_with_two_cards():
    wide = pods(plan("plan-two-teams"), "team-b")["wide/0"]
    assert wide["node"] == "team-b-server-1" and sorted(wide["cards"]) == ["GPU-B1-0", "GPU-B1-1"]


def test_binpack_and_spread_place_the_same_pods_differently():
    binpack = pods(plan("plan-two-teams"), "team-a")
    spread = pods(plan("plan-spread"), "team-a")
    assert binpack["quarter/1"]["node"] == "team-a-server-1"
    assert spread["quarter/1"]["node"] == "team-a-server-2"
    # Card binpack stacks on the fullest card, card spread alternates.
    assert [spread[f"quarter/{i}"]["cards"] for i in (0, 2, 3)] == [["GPU-A1-1"]] * 3
    assert [binpack[f"quarter/{i}"]["cards"] for i in range(4)] == [["GPU-A1-1"], ["GPU-A1-0"]] * 2
    assert spread["quarter/3"]["tiedWith"] == ["team-a-server-2"]


def test_a_split_count_exhausted():
    team_c = pods(plan("plan-slots"), "team-c")
    assert team_c["smokeTest/0"]["node"] == "team-c-server-1"
    assert [team_c[f"notebook/{i}"]["node"] for i in range(3)] == ["team-c-server-1"] * 3
    assert team_c["notebook/3"]["unplaced"] == ("no available node, 1 nodes do not meet "
                                               "(team-c-server-1: 1/1 CardTimeSlicingExhausted)")


def test_the_prod_example_plans_every_declared_pod():
    # It sets strictCapacity: a pod it could not place would stop its preview.
    from components.plan import capacity_issues
    from tests.test_config_infrastructure import SECRETS, prod_example_with_secrets

    config = load_stack_config(prod_example_with_secrets(), SECRETS)
    assert config.strict_capacity and config.tenants[0].workloads
    result = gpu_plan(config)
    assert result["unplaced"] == 0 and capacity_issues(config, result) == []
    train = [p for p in result["tenants"]["team-vision"]["placements"] if p["workload"] == "train"]
    assert [len(p["cards"]) for p in train] == [2, 2]
