"""`make plan` (ops/plan.py): the table per tenant, the picture, and its exit codes, from a stack file."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ElementTree

import yaml

from components.plan import gpu_plan
from config import load_stack_config
from ops import plan as plan_command
from tests.support.mockrun import reference_stack

SVG = "{http://www.w3.org/2000/svg}"


def write_stack(tmp_path, raw):
    path = tmp_path / "Pulumi.lab.yaml"
    path.write_text(yaml.safe_dump({"config": {f"gpu-tenancy:{key}": value for key, value in raw.items()}}))
    return path


def declared(replicas=2):
    raw = copy.deepcopy(reference_stack())
    raw["tenants"][0]["workloads"] = [{"name": "half", "replicas": replicas, "memoryPercent": 50, "cores": 30}]
    raw["tenants"][0]["quota"] = {"gpus": 4, "memoryMiB": 8192}
    return raw


def test_the_table_lists_every_pod_card_and_quota(capsys, tmp_path):
    assert plan_command.main(["--stack-file", str(write_stack(tmp_path, declared()))]) == 1
    out = capsys.readouterr().out
    assert "tenant tenant-a (nodePolicy binpack, gpuPolicy spread)" in out
    assert "  smokeTest/0  gpu-tenancy-smoke  tenant-a-worker-0  GPU-MOCK-A0" in out
    assert "  half/0       default            tenant-a-worker-0  GPU-MOCK-A0" in out
    # 3000 (smoke) + 4096 leaves 1096 MiB: the second half-card pod does not fit.
    assert ("  half/1       default            -                  -            no available node, 1 nodes do not "
            "meet (tenant-a-worker-0: 1/1 CardInsufficientMemory)") in out
    assert "  GPU-MOCK-A0  tenant-a-worker-0  2/10   7096/8192   60/100   1096" in out
    assert "  quota default: gpus 2/4, memoryMiB 4096/8192, cores 30/-" in out
    assert "1 pod(s) not placed" in out


def test_every_pod_placed_exits_0_and_writes_the_picture(capsys, tmp_path):
    picture = tmp_path / "build" / "plan.svg"
    assert plan_command.main(["--stack-file", str(write_stack(tmp_path, declared(1))), "--svg", str(picture)]) == 0
    assert "every pod placed" in capsys.readouterr().out
    root = ElementTree.fromstring(picture.read_text())
    titles = [title.text for title in root.iter(f"{SVG}title")]
    # One segment per holder on each of the card's three bars (slots, memory, cores).
    assert titles.count("half/0: 4096 MiB") == 1 and titles.count("half/0: 30 cores") == 1
    # Both tenants' smoke pods.
    assert titles.count("smokeTest/0: 3000 MiB") == 2 and titles.count("smokeTest/0: 1 slots") == 2


def test_picture_fills_bars_in_proportion_and_colours_per_workload():
    config = load_stack_config(declared(1))
    root = ElementTree.fromstring(plan_command.svg(gpu_plan(config)))
    segments = {rect.find(f"{SVG}title").text: rect for rect in root.iter(f"{SVG}rect")
                if rect.find(f"{SVG}title") is not None}
    memory = segments["half/0: 4096 MiB"]
    assert float(memory.get("width")) == plan_command.BAR * 4096 / 8192
    assert memory.get("fill") == plan_command.PALETTE[0]
    assert segments["smokeTest/0: 3000 MiB"].get("fill") == plan_command.SMOKE_COLOUR


def test_encrypted_values_do_not_stop_the_plan(capsys, tmp_path):
    raw = declared(1)
    raw["management"] = {"dockerHub": {"username": "someone", "token": {"secure": "v1:AAAA"}}}
    assert plan_command.main(["--stack-file", str(write_stack(tmp_path, raw))]) == 0
    assert "every pod placed" in capsys.readouterr().out


def test_bad_configuration_exits_2_naming_the_key(capsys, tmp_path):
    raw = declared(1)
    raw["tenants"][0]["workloads"][0]["memoryMiB"] = 99999
    raw["tenants"][0]["workloads"][0].pop("memoryPercent")
    assert plan_command.main(["--stack-file", str(write_stack(tmp_path, raw))]) == 2
    assert "tenants[0].workloads[0].memoryMiB = 99999" in capsys.readouterr().err


def test_a_missing_stack_file_says_how_to_create_it(capsys, tmp_path):
    assert plan_command.main(["--stack", "nope"], root=tmp_path) == 2
    assert "Pulumi.nope.yaml does not exist" in capsys.readouterr().err
