"""The GPU planner (components/gpu/capacity.py) against HAMi v2.10.0's own unit tests, translated into
tests/data/hami_scheduler_cases.json, and against worked scenarios of our own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from components.gpu import capacity
from components.gpu.capacity import DEFAULT_GPU_POLICY, DEFAULT_NODE_POLICY, Device, NamespaceQuota, Request, Weights
from config.models import Scheduling

CASES = json.loads((Path(__file__).parent / "data" / "hami_scheduler_cases.json").read_text())


def _ids(group: str) -> list[str]:
    return [case["name"] for case in CASES[group]["cases"]]


def _device(data: dict) -> Device:
    fields = {k: v for k, v in data.items() if k != "score"}
    fields.setdefault("id", "dev")
    fields.setdefault("count", 0)
    fields.setdefault("totalmem", 0)
    fields.setdefault("totalcore", 0)
    return Device(**fields)


# --------------------------------------------------------------------------- #
# HAMi's own tests
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("case", CASES["fit"]["cases"], ids=_ids("fit"))
def test_fit_follows_hamis_fit_tests(case):
    if "skip" in case:
        pytest.skip(case["skip"])
    ok, grants, reason = capacity.fit([_device(d) for d in case["devices"]], Request(**case["request"]),
                                      gpu_policy=case.get("gpuPolicy", ""))
    assert ok is case["fit"]
    if case["fit"]:
        assert [g.uuid for g in grants] == case["cards"]
    if "reason" in case:
        assert reason == case["reason"]


@pytest.mark.parametrize("case", CASES["deviceLess"]["cases"], ids=_ids("deviceLess"))
def test_device_order_follows_hamis_less_tests(case):
    a, b = case["a"], case["b"]
    assert capacity.device_less(case["policy"], _device(a), a["score"], _device(b), b["score"],
                                case["numaBind"]) is case["less"]


@pytest.mark.parametrize("case", CASES["deviceScore"]["cases"], ids=_ids("deviceScore"))
def test_device_score_follows_hamis_compute_score_tests(case):
    requests = [Request(**r) for r in case["requests"]]
    assert capacity.device_score(_device(case["device"]), requests) == case["score"]


@pytest.mark.parametrize("case", CASES["weightedScore"]["cases"], ids=_ids("weightedScore"))
def test_weighted_scores_and_the_card_fit_takes(case):
    weights = Weights(*case["weights"])
    devices = [_device(d) for d in case["devices"]]
    scores = [capacity.device_score(d, [Request(**case["request"])], weights) for d in devices]
    assert scores == case["scores"]
    for policy, last in case.get("last", {}).items():
        # Fit takes cards from the end of the sorted list.
        assert capacity.sort_devices(devices, scores, policy)[-1].id == last


@pytest.mark.parametrize("case", CASES["nodeLess"]["cases"], ids=_ids("nodeLess"))
def test_node_order_follows_hamis_less_tests(case):
    assert capacity.node_less(case["policy"], case["a"], case["b"]) is case["less"]


@pytest.mark.parametrize("case", CASES["nodeDefaultScore"]["cases"], ids=_ids("nodeDefaultScore"))
def test_node_score_follows_hamis_default_score_tests(case):
    assert capacity.node_default_score([_device(d) for d in case["devices"]]) == case["score"]


@pytest.mark.parametrize("case", CASES["quota"]["cases"], ids=_ids("quota"))
def test_quota_follows_hamis_fit_quota_tests(case):
    memory, cores = case["memory"], case["cores"]
    quota = NamespaceQuota()
    if memory:
        quota.memory = capacity.Limit(used=memory[0], limit=memory[1], limit_set=True)
    if cores:
        quota.cores = capacity.Limit(used=cores[0], limit=cores[1], limit_set=True)
    assert quota.fits(case["memreq"], case["coresreq"], case["factor"]) is case["fits"]


@pytest.mark.parametrize("case", CASES["containerQuota"]["cases"], ids=_ids("containerQuota"))
def test_a_pods_cards_count_together_against_the_quota_as_in_hamis_tests(case):
    quota = NamespaceQuota.of(memory_mib=CASES["containerQuota"]["limit"], cores=None)
    assert quota.fits(sum(case["taken"]) + case["memreq"], 1) is case["fits"]


@pytest.mark.parametrize("case", CASES["calcScore"]["cases"], ids=_ids("calcScore"))
def test_node_scoring_follows_hamis_calc_score_tests(case):
    for node, want in case["want"].items():
        result = capacity.score_node(node, [_device(d) for d in case["nodes"][node]], Request(**case["request"]),
                                     gpu_policy="spread")
        if "reason" in want:
            assert result.reason == want["reason"]
        else:
            assert result.fits, result.reason
            assert [g.uuid for g in result.grants] == want["cards"]
            assert result.score == want["score"]


# --------------------------------------------------------------------------- #
# What the webhook makes of a request, and the defaults
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(("kwargs", "expected"), [
    # Only nvidia.com/gpu: the whole memory, and so the card exclusively (defaultExclusiveCoreIfNeeded).
    ({}, Request(nums=1, memreq=0, mem_percentagereq=100, coresreq=100)),
    ({"memory_percent": 100}, Request(nums=1, mem_percentagereq=100, coresreq=100)),
    # A share of memory and no cores: defaultCores 0.
    ({"memory_mib": 2000}, Request(nums=1, memreq=2000, coresreq=0)),
    ({"memory_percent": 25}, Request(nums=1, mem_percentagereq=25, coresreq=0)),
    ({"memory_mib": 2000, "cores": 30}, Request(nums=1, memreq=2000, coresreq=30)),
])
def test_container_request_applies_hamis_defaults(kwargs, expected):
    assert capacity.container_request(1, **kwargs) == expected


def test_planner_policies_default_to_the_vendored_charts(vendor_dir):
    chart = yaml.safe_load((vendor_dir / "hami" / "values.yaml").read_text())
    policy = chart["scheduler"]["defaultSchedulerPolicy"]
    assert (policy["nodeSchedulerPolicy"], policy["gpuSchedulerPolicy"]) \
        == (DEFAULT_NODE_POLICY, DEFAULT_GPU_POLICY) \
        == (Scheduling().node_policy, Scheduling().gpu_policy)


def test_scores_are_go_float32():
    # 33% of the cores in use: Go computes float32(33)/float32(100) = 0.33000001, times 10 = 3.3000002; the double
    # 10 x 0.33 rounded once would be 3.2999999. Ties between scores are float32 ties.
    score = capacity.device_score(Device("a", count=10, totalmem=8192, totalcore=100, usedcores=33), [])
    assert score == 3.3000001907348633
    assert score != capacity.f32(10 * (33 / 100))


# --------------------------------------------------------------------------- #
# Worked scenarios
# --------------------------------------------------------------------------- #


def card(uuid: str, memory: int = 8000, slots: int = 10, index: int = 0, model: str = "NVIDIA-A100") -> Device:
    return Device(uuid, count=slots, totalmem=memory, totalcore=100, index=index, type=capacity.device_type(model))


def place(nodes, requests, node_policy="binpack", gpu_policy="spread", quota=None):
    decisions = []
    for index, request in enumerate(requests):
        decision = capacity.schedule(nodes, request, quota, node_policy, gpu_policy)
        capacity.commit(nodes, decision, f"pod/{index}", quota)
        decisions.append(decision)
    return decisions


def quarter() -> Request:
    return capacity.container_request(1, memory_percent=25, cores=25)


def test_gpu_binpack_and_spread_put_the_second_pod_on_different_cards():
    def two_cards():
        return {"n": [card("GPU-0", index=0), card("GPU-1", index=1)]}

    spread = place(two_cards(), [quarter(), quarter()], gpu_policy="spread")
    binpack = place(two_cards(), [quarter(), quarter()], gpu_policy="binpack")
    # Equal empty cards keep registration order and Fit walks from the end: the first pod takes GPU-1 either way.
    assert [d.grants[0].uuid for d in spread] == ["GPU-1", "GPU-0"]
    assert [d.grants[0].uuid for d in binpack] == ["GPU-1", "GPU-1"]


def test_node_binpack_fills_the_used_node_and_spread_the_empty_one():
    def two_nodes():
        return {"n0": [card("GPU-0")], "n1": [card("GPU-1")]}

    binpack = place(two_nodes(), [quarter(), quarter()], node_policy="binpack")
    spread = place(two_nodes(), [quarter(), quarter()], node_policy="spread")
    assert [d.node for d in binpack] == ["n0", "n0"]
    assert [d.node for d in spread] == ["n0", "n1"]
    # The first pod sees two empty nodes: HAMi's choice between them is arbitrary, the plan says so.
    assert binpack[0].tied_with == ["n1"] and binpack[1].tied_with == []


def test_split_count_exhausted():
    nodes = {"n": [card("GPU-0", slots=2)]}
    tiny = capacity.container_request(1, memory_mib=100, cores=1)
    decisions = place(nodes, [tiny, tiny, tiny])
    assert [d.node for d in decisions] == ["n", "n", None]
    assert decisions[2].reason == "no available node, 1 nodes do not meet (n: 1/1 CardTimeSlicingExhausted)"


def test_a_two_gpu_pod_fits_only_on_the_node_with_two_free_cards():
    nodes = {"small": [card("S-0")], "big": [card("B-0", index=0), card("B-1", index=1)]}
    decision = capacity.schedule(nodes, capacity.container_request(2, memory_mib=4000, cores=50))
    assert decision.node == "big"
    assert sorted(g.uuid for g in decision.grants) == ["B-0", "B-1"]
    assert decision.failed == {"small": capacity.NODE_INSUFFICIENT_DEVICE}


def test_memory_quota_counts_every_gpu_of_a_pod():
    nodes = {"n": [card("GPU-0", index=0), card("GPU-1", index=1)]}
    quota = NamespaceQuota.of(memory_mib=6000, cores=None)
    # 2 GPUs x 4000 MiB = 8000 MiB > 6000: the second card breaks the quota, on every card HAMi tries.
    decision = capacity.schedule(nodes, capacity.container_request(2, memory_mib=4000, cores=10), quota)
    assert decision.node is None
    assert decision.failed == {"n": "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit"}
    # One GPU of 2000 MiB fits, twice; the namespace's usage adds up, so 2500 more (6500) does not.
    small = capacity.container_request(1, memory_mib=2000, cores=10)
    placed = place(nodes, [small, small], quota=quota)
    assert [d.node for d in placed] == ["n", "n"] and quota.memory.used == 4000
    third = capacity.schedule(nodes, capacity.container_request(1, memory_mib=2500, cores=10), quota)
    assert third.failed == {"n": "2/2 ResourceQuotaNotFit"}


def test_a_whole_card_pod_takes_the_card_exclusively():
    nodes = {"n": [card("GPU-0")]}
    decisions = place(nodes, [capacity.container_request(1, memory_mib=100, cores=10), capacity.container_request(1)])
    assert decisions[1].failed == {"n": "1/1 CardInsufficientMemory"}
    free = {"n": [card("GPU-0")]}
    decisions = place(free, [capacity.container_request(1), capacity.container_request(1, memory_mib=100, cores=0)])
    assert decisions[0].node == "n"
    assert decisions[1].failed == {"n": "1/1 CardInsufficientMemory"}
    cores_only = {"n": [card("GPU-0")]}
    decisions = place(cores_only, [capacity.container_request(1, memory_mib=100, cores=10),
                                   capacity.container_request(1, memory_mib=100, cores=100)])
    assert decisions[1].failed == {"n": "1/1 CardInsufficientCore"}
    empty_cores_left = {"n": [card("GPU-0")]}
    decisions = place(empty_cores_left, [capacity.container_request(1, memory_mib=100, cores=100),
                                         capacity.container_request(1, memory_mib=100, cores=0)])
    assert decisions[1].failed == {"n": "1/1 CardComputeUnitsExhausted"}


def test_percentage_memory_is_a_share_of_each_card():
    nodes = {"n": [card("GPU-0", memory=10000)]}
    decision = capacity.schedule(nodes, capacity.container_request(1, memory_percent=30, cores=10))
    assert decision.grants[0].usedmem == 3000


def test_the_planner_is_pure_python():
    # No Pulumi and no configuration package: it runs anywhere, from data alone.
    import subprocess
    import sys

    code = "import sys, components.gpu.capacity; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
           "('pulumi', 'config', 'pydantic')))"
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "[]"
