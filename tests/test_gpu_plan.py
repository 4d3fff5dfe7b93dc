"""Declared workloads and scheduling policies: their validation, the `gpuPlan` output, the HAMi chart values they
set, and strictCapacity (warning vs error before any resource exists)."""

from __future__ import annotations

import copy

import pytest

from components.gpu.values import hami_values
from components.plan import capacity_issues, check_capacity, gpu_plan
from config import ConfigError, Versions, load_stack_config
from tests.support.mockrun import ProgramFailedError, reference_stack, registered


def card(uuid, memory=8192, cores=100, slots=10):
    return {"uuid": uuid, "model": "NVIDIA-A100", "memoryMiB": memory, "cores": cores, "slots": slots}


def stack(workloads, quota=None, **tenant_keys):
    raw = copy.deepcopy(reference_stack())
    tenant = raw["tenants"][0]
    tenant["workloads"] = workloads
    if quota is not None:
        tenant["quota"] = quota
    tenant.update(tenant_keys)
    return raw


def issues_of(raw):
    with pytest.raises(ConfigError) as error:
        load_stack_config(raw)
    return {issue.path: issue.message for issue in error.value.issues}


# --------------------------------------------------------------------------- #
# Validation: requests no card could ever take
# --------------------------------------------------------------------------- #


def test_workload_defaults_are_hamis():
    workload = load_stack_config(stack([{"name": "w"}])).tenants[0].workloads[0]
    assert (workload.replicas, workload.gpus, workload.memory_mib, workload.memory_percent, workload.cores,
            workload.namespace) == (1, 1, None, None, None, None)


def test_memory_larger_than_every_card_names_the_key_and_the_largest_card():
    issues = issues_of(stack([{"name": "w", "memoryMiB": 9000}]))
    message = issues["tenants[0].workloads[0].memoryMiB"]
    assert "largest: GPU-MOCK-A0 on worker 'worker-0', 8192 MiB" in message


def test_more_gpus_than_one_worker_has_is_refused():
    raw = stack([{"name": "w", "gpus": 2}])
    raw["tenants"][0]["workers"].append({"name": "worker-1", "gpus": [card("GPU-MOCK-A1")]})
    issues = issues_of(raw)
    assert "the most on one worker is 1 (worker 'worker-0')" in issues["tenants[0].workloads[0].gpus"]


def test_cores_above_every_card_and_the_implied_whole_card():
    raw = stack([{"name": "explicit", "memoryMiB": 100, "cores": 80}, {"name": "implied"}])
    raw["tenants"][0]["workers"][0]["gpus"][0]["cores"] = 50
    issues = issues_of(raw)
    assert "most: GPU-MOCK-A0 on worker 'worker-0', 50%" in issues["tenants[0].workloads[0].cores"]
    assert "HAMi makes it 100" in issues["tenants[0].workloads[1].cores"]


def test_no_single_worker_with_enough_matching_cards():
    raw = stack([{"name": "w", "gpus": 2, "memoryMiB": 6000}])
    raw["tenants"][0]["workers"][0]["gpus"] = [card("BIG", 8192), card("SMALL", 4096)]
    raw["tenants"][0]["workers"].append({"name": "worker-1", "gpus": [card("B2", 8192)]})
    assert "no worker has 2 cards with at least 6000 MiB" in issues_of(raw)["tenants[0].workloads[0]"]


def test_workload_keys_checked_across_fields():
    raw = stack([{"name": "w", "memoryMiB": 100, "memoryPercent": 10, "namespace": "ml"}, {"name": "w"}])
    issues = issues_of(raw)
    assert "not both" in issues["tenants[0].workloads[0].memoryPercent"]
    assert "not one of tenants[0].namespaces (default)" in issues["tenants[0].workloads[0].namespace"]
    assert "unique" in issues["tenants[0].workloads[1].name"]


def test_a_tenant_without_cards_cannot_declare_workloads():
    raw = stack([{"name": "w"}])
    raw["tenants"][0]["workers"][0]["gpus"] = []
    raw["smokeTest"]["enabled"] = False
    assert "no GPU cards" in issues_of(raw)["tenants[0].workloads[0]"]


def test_scheduling_policies_are_a_closed_set():
    issues = issues_of(stack([], scheduling={"nodePolicy": "random"}))
    assert "tenants[0].scheduling.nodePolicy" in issues


# --------------------------------------------------------------------------- #
# The plan, and what happens with what does not fit
# --------------------------------------------------------------------------- #


def test_the_plan_places_the_smoke_pod_first_and_then_each_replica_in_order():
    config = load_stack_config(stack([{"name": "quarter", "replicas": 3, "memoryPercent": 25, "cores": 25}]))
    plan = gpu_plan(config)["tenants"]["tenant-a"]
    placements = plan["placements"]
    assert [(p["workload"], p["replica"], p["node"], p["cards"]) for p in placements[:3]] == [
        ("smokeTest", 0, "tenant-a-worker-0", ["GPU-MOCK-A0"]),
        ("quarter", 0, "tenant-a-worker-0", ["GPU-MOCK-A0"]),
        ("quarter", 1, "tenant-a-worker-0", ["GPU-MOCK-A0"]),
    ]
    # 3000 (smoke) + 2 x 2048 = 7096 MiB; a third quarter (2048) no longer fits the 8192 MiB card.
    assert placements[3]["unplaced"] == ("no available node, 1 nodes do not meet "
                                         "(tenant-a-worker-0: 1/1 CardInsufficientMemory)")
    assert plan["cards"]["GPU-MOCK-A0"]["memoryMiB"] == {"used": 7096, "free": 1096, "total": 8192}
    assert plan["cards"]["GPU-MOCK-A0"]["slots"] == {"used": 3, "free": 7, "total": 10}


def test_quota_is_checked_at_admission_by_hami_and_the_api_server_and_at_scheduling():
    raw = stack([{"name": "pair", "gpus": 2, "memoryMiB": 1000, "cores": 10},
                 {"name": "again", "gpus": 2, "memoryMiB": 1000, "cores": 10},
                 {"name": "share", "memoryPercent": 25, "cores": 10, "replicas": 2},
                 {"name": "late", "memoryPercent": 10, "cores": 10}],
                quota={"gpus": 4, "memoryMiB": 3000})
    raw["tenants"][0]["workers"][0]["gpus"].append(card("GPU-MOCK-A1"))
    plan = gpu_plan(load_stack_config(raw))
    tenant = plan["tenants"]["tenant-a"]
    pods = {f"{p['workload']}/{p['replica']}": p for p in tenant["placements"]}
    assert pods["pair/0"]["node"] == "tenant-a-worker-0"
    assert sorted(pods["pair/0"]["cards"]) == ["GPU-MOCK-A0", "GPU-MOCK-A1"]
    # 2000 held + 2 GPUs x 1000 > 3000: HAMi's webhook denies the next workload's pair; it never exists.
    assert pods["again/0"]["unplaced"] == 'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'
    # A percentage is 0 MiB to the webhook; the scheduler makes it 2048 MiB, and 2000 + 2048 > 3000 on every card.
    for name in ("share/0", "share/1"):
        assert pods[name]["unplaced"] == ("no available node, 1 nodes do not meet "
                                          "(tenant-a-worker-0: 2/2 ResourceQuotaNotFit)")
    # The two Pending shares count against requests.nvidia.com/gpu with the pair: 4 of 4, so `late` is refused.
    assert pods["late/0"]["unplaced"] == ("forbidden by the API server in namespace default: exceeded quota: gpu-quota, "
                                          "requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, "
                                          "limited: requests.nvidia.com/gpu=4")
    figures = tenant["quota"]["namespaces"]["default"]
    assert figures == {"gpus": {"used": 4, "limit": 4}, "memoryMiB": {"used": 2000, "limit": 3000},
                       "cores": {"used": 20, "limit": None}}
    # Quota granted against the tenant's cards: 4 of 20 shares, 3000 of 16384 MiB; cores unlimited.
    assert tenant["quota"]["overcommit"] == {"gpus": 0.2, "memoryMiB": 0.18, "cores": None}
    # tenant-b sets no quota, so the pool's sums are unbounded.
    assert plan["pool"]["granted"] == {"gpus": None, "memoryMiB": None, "cores": None}


def test_a_workloads_replicas_pass_the_webhook_together_and_the_surplus_stays_pending():
    """A ReplicaSet creates its pods back to back, before HAMi schedules any; the webhook compares each with what
    HAMi has scheduled (pkg/scheduler/webhook.go fitResourceQuota, usage added in Filter): none is denied."""
    raw = stack([{"name": "pair", "gpus": 2, "memoryMiB": 1000, "replicas": 2}], quota={"gpus": 4, "memoryMiB": 3000})
    raw["tenants"][0]["workers"][0]["gpus"].append(card("GPU-MOCK-A1"))
    tenant = gpu_plan(load_stack_config(raw))["tenants"]["tenant-a"]
    pods = {f"{p['workload']}/{p['replica']}": p for p in tenant["placements"]}
    assert pods["pair/0"]["node"] == "tenant-a-worker-0"
    assert pods["pair/1"]["unplaced"] == ("no available node, 1 nodes do not meet (tenant-a-worker-0: "
                                          "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit)")
    # The Pending pod exists, so the API server counts its GPUs.
    assert tenant["quota"]["namespaces"]["default"]["gpus"] == {"used": 4, "limit": 4}


def test_the_webhook_counts_cores_times_gpus_too():
    raw = stack([{"name": "pair", "gpus": 2, "memoryMiB": 100, "cores": 30}], quota={"cores": 50})
    raw["tenants"][0]["workers"][0]["gpus"].append(card("GPU-MOCK-A1"))
    placement = gpu_plan(load_stack_config(raw))["tenants"]["tenant-a"]["placements"][1]
    assert placement["unplaced"] == 'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'


def test_pool_overcommit_sums_every_namespace_of_every_tenant():
    raw = stack([], quota={"gpus": 15, "memoryMiB": 8192, "cores": 100}, namespaces=["default", "ml"])
    raw["tenants"][1]["quota"] = {"gpus": 10, "memoryMiB": 8192, "cores": 100}
    pool = gpu_plan(load_stack_config(raw))["pool"]
    assert (pool["cards"], pool["slots"], pool["memoryMiB"], pool["cores"]) == (2, 20, 16384, 200)
    assert pool["granted"] == {"gpus": 40, "memoryMiB": 24576, "cores": 300}
    assert pool["overcommit"] == {"gpus": 2.0, "memoryMiB": 1.5, "cores": 1.5}


def test_a_workload_that_does_not_fit_is_a_warning_by_default():
    config = load_stack_config(stack([{"name": "w", "replicas": 3, "memoryMiB": 4000, "cores": 10}]))
    warnings: list[str] = []
    check_capacity(config, gpu_plan(config), "dev", warnings.append)
    assert len(warnings) == 1
    assert warnings[0].startswith("GPU plan: tenants[0].workloads[0]: 2 of 3 pod(s) of 'w' would not be placed; "
                                  "replica 1: no available node")


def test_strict_capacity_makes_it_an_error_naming_the_workload():
    raw = stack([{"name": "w", "replicas": 3, "memoryMiB": 4000, "cores": 10}])
    raw["strictCapacity"] = True
    config = load_stack_config(raw)
    with pytest.raises(ConfigError) as error:
        check_capacity(config, gpu_plan(config), "dev", lambda message: None)
    assert [issue.path for issue in error.value.issues] == ["tenants[0].workloads[0]"]
    assert "Pulumi.dev.yaml" in str(error.value)


def test_strict_capacity_stops_the_program_before_any_resource():
    raw = stack([{"name": "w", "replicas": 3, "memoryMiB": 4000, "cores": 10}])
    raw["strictCapacity"] = True
    with pytest.raises(ProgramFailedError, match=r"tenants\[0\]\.workloads\[0\]: 2 of 3 pod"):
        registered(raw, preview=True)


def test_preview_exports_the_plan():
    run = registered(stack([{"name": "quarter", "memoryPercent": 25, "cores": 25}]), preview=True)
    plan = run.outputs["gpuPlan"].value
    assert not run.outputs["gpuPlan"].secret
    assert [p["workload"] for p in plan["tenants"]["tenant-a"]["placements"]] == ["smokeTest", "quarter"]
    assert plan["unplaced"] == 0


def test_a_placed_plan_raises_nothing():
    config = load_stack_config(stack([{"name": "w", "memoryMiB": 1000, "cores": 10}]))
    assert capacity_issues(config, gpu_plan(config)) == []


# --------------------------------------------------------------------------- #
# The same policy in the plan and in the tenant's HAMi
# --------------------------------------------------------------------------- #


def test_a_tenants_policies_reach_its_hami_chart_values():
    values = hami_values("mock", "v1.35.0", Versions(), node_policy="spread", gpu_policy="binpack")
    assert values["scheduler"]["defaultSchedulerPolicy"] == {"nodeSchedulerPolicy": "spread",
                                                             "gpuSchedulerPolicy": "binpack"}
    # The chart's own policies are not written: a stack that sets none keeps its release values.
    assert "defaultSchedulerPolicy" not in hami_values("mock", "v1.35.0", Versions())["scheduler"]


def test_the_program_passes_the_tenants_scheduling_to_its_hami_release():
    run = registered(stack([], scheduling={"nodePolicy": "spread", "gpuPolicy": "binpack"}), preview=True)
    releases = {r.name: r for r in run.resources if r.type == "kubernetes:helm.sh/v3:Release"}
    policy = releases["tenant-a-hami"].inputs["values"]["scheduler"].get("defaultSchedulerPolicy")
    assert policy == {"nodeSchedulerPolicy": "spread", "gpuSchedulerPolicy": "binpack"}
    assert "defaultSchedulerPolicy" not in releases["tenant-b-hami"].inputs["values"]["scheduler"]
