"""`make status`: the per-tenant table after `make up`, read from the outputs of a simulated `up`."""

from __future__ import annotations

import json
import subprocess

import pytest

from ops.status import main, render
from tests.support.mockrun import reference_stack, run_program


@pytest.fixture(scope="module")
def outputs():
    """The plain (non-secret) outputs a first `up` of the dev lab leaves, as `pulumi stack output --json`."""
    run = run_program(reference_stack())
    return {name: ("[secret]" if output.secret else output.value) for name, output in run.outputs.items()}


def test_one_table_per_tenant_with_its_nodes_cards_slots_and_proof(outputs):
    text = render(outputs)
    config = reference_stack()
    for tenant in config["tenants"]:
        name = tenant["name"]
        block = text.split(f"{name}  https://", 1)[1].split("\n\n", 1)[0]
        assert block.startswith(outputs["tenants"][name]["endpoint"])
        for worker in tenant["workers"]:
            node = f"{name}-{worker['name']}"
            row = next(line for line in block.splitlines() if line.strip().startswith(node))
            for card in worker["gpus"]:
                assert f"{card['uuid']} {card['model']} {card['memoryMiB']} MiB" in row
            assert row.split()[-1] == str(outputs["tenants"][name]["gpuCapacity"][node])
        smoke = outputs["tenants"][name]["smokeTest"]
        proof = next(line for line in block.splitlines() if "smoke test:" in line)
        card = smoke["devicesAllocated"].split(",")[0]
        assert f"placed by hami-scheduler on {smoke['node']}" in proof
        assert f"got {card} ({config['smokeTest']['memoryMiB']} MiB, {config['smokeTest']['cores']}% cores)" in proof


def test_no_secret_is_read_or_printed(outputs, capsys):
    calls = []
    # Even if a secret output came back in plain text, status prints none of it.
    leaked = {**outputs, "managementKubeconfig": "client-key-data: SECRET-KEY",
              "tenantKubeconfigs": {"tenant-a": "token: SECRET-TOKEN"}}

    def run(argv, **_):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, json.dumps(leaked), "")

    assert main(["--stack", "dev"], run=run) == 0
    assert "--show-secrets" not in calls[0]
    printed = capsys.readouterr().out
    assert "tenant-a" in printed and "SECRET" not in printed


def test_disabled_and_not_yet_run_smoke_tests_say_so(outputs):
    tenants = json.loads(json.dumps(outputs["tenants"]))
    tenants["tenant-a"]["smokeTest"] = None
    tenants["tenant-b"]["smokeTest"] = {"pod": "gpu-tenancy-smoke/gpu-smoke-test", "proves": "checked after the pod runs"}
    text = render({**outputs, "tenants": tenants})
    assert "smoke test: disabled" in text
    assert "smoke test: not run yet (gpu-tenancy-smoke/gpu-smoke-test)" in text


def test_a_stack_without_outputs_exits_2_with_the_next_step(capsys):
    def run(argv, **_):
        return subprocess.CompletedProcess(argv, 0, "{}", "")

    assert main(["--stack", "dev"], run=run) == 2
    assert "run `make up` first" in capsys.readouterr().err


def test_without_the_pulumi_cli_it_prints_the_one_install_line(capsys):
    from ops.hostcheck import PULUMI_INSTALL

    def run(argv, **_):
        raise FileNotFoundError(2, "No such file or directory", "pulumi")

    assert main(["--stack", "dev"], run=run) == 2
    err = capsys.readouterr().err
    assert err.startswith("make status: the pulumi CLI is not on PATH: ") and PULUMI_INSTALL in err
