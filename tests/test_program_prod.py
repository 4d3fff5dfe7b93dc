"""The example production stack under mocks: an existing cluster and SSH-joined real GPU servers."""

import json

import pytest

from tests.test_config_infrastructure import KUBECONFIG, PRIVATE_KEY, prod_example_with_secrets
from tools.mockrun import run_program

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module")
def prod():
    return run_program(prod_example_with_secrets(), stack="prod", secret_keys=["management", "tenants"])


def test_no_kind_or_docker_resources(prod):
    assert [r for r in prod.resources if r.type.startswith("docker:")] == []
    assert [r for r in prod.of_type("command:local:Command")] == []
    assert [c.token for c in prod.calls if c.token.startswith("docker:")] == []


def test_metallb_only_because_a_pool_is_given(prod):
    pools = [r for r in prod.resources if r.type.endswith(":IPAddressPool")]
    assert [p.inputs["spec"]["addresses"] for p in pools] == [["10.20.255.200-10.20.255.250"]]


def test_a_pinned_host_key_reaches_the_connection():
    raw = prod_example_with_secrets()
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOd0c6S6k8Z1c2xYqRrn1FZ2bq3k5GZ2y3Vn5eXh0b5Q"
    raw["tenants"][0]["workers"][0]["ssh"]["hostKey"] = host_key
    run = run_program(raw, stack="prod", secret_keys=["management", "tenants"])
    join = run.named("team-vision-gpu-01-join")
    assert join.inputs["connection"]["hostKey"] == host_key
    assert "hostKey" not in run.named("team-vision-gpu-02-join").inputs["connection"]


def test_ssh_workers_join_with_secret_inputs(prod):
    joins = [r for r in prod.of_type("command:remote:Command") if r.name.endswith("-join")]
    assert sorted(j.name for j in joins) == [
        "team-speech-gpu-01-join", "team-speech-gpu-02-join", "team-vision-gpu-01-join", "team-vision-gpu-02-join"]
    for join in joins:
        assert join.is_secret("connection")
        assert join.is_secret("stdin")
        assert join.inputs["connection"]["host"].startswith("10.20.")
        for key in ("create", "delete"):
            assert not join.is_secret(key)
            assert "BEGIN OPENSSH PRIVATE KEY" not in join.inputs[key]


def test_no_secret_in_plain_text_anywhere(prod):
    secrets = [json.dumps(value)[1:-1] for value in (KUBECONFIG, PRIVATE_KEY)]
    for resource in prod.resources:
        for key, value in resource.raw_inputs.items():
            if not resource.is_secret(key):
                text = json.dumps(value, default=str)
                assert not any(secret in text for secret in secrets), f"{resource.name}.{key}"
    for name, output in prod.outputs.items():
        if not output.secret:
            text = json.dumps(output.value, default=str)
            assert not any(secret in text for secret in secrets), name


def test_hami_uses_the_real_device_plugin_and_labels_gpu_nodes(prod):
    hami = [r for r in prod.of_type(RELEASE) if r.inputs["name"] == "hami"]
    assert len(hami) == 2
    for release in hami:
        values = release.inputs["values"]
        assert values["devicePlugin"]["enabled"] is True
        assert values["mockDevicePlugin"]["enabled"] is False
    labels = sorted(r.inputs["metadata"]["name"] for r in prod.resources if r.name.endswith("-gpu-label"))
    assert labels == ["team-speech-gpu-01", "team-speech-gpu-02", "team-vision-gpu-01", "team-vision-gpu-02"]
    assert [r for r in prod.resources if r.name.endswith("-gpu-register") or r.name.endswith("-gpu-capacity")] == []


def test_tenant_isolation_admits_the_worker_cidrs(prod):
    policies = prod.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert len(policies) == 2
    for policy in policies:
        blocks = [peer["ipBlock"]["cidr"] for rule in policy.inputs["spec"]["ingress"] for peer in rule["from"]
                  if "ipBlock" in peer]
        assert blocks == ["10.20.0.0/16"]


def test_quotas_per_team(prod):
    quotas = {r.name: r.inputs["spec"]["hard"] for r in prod.of_type("kubernetes:core/v1:ResourceQuota")}
    assert quotas["team-vision-gpu-quota"]["requests.nvidia.com/gpu"] == "8"
    assert quotas["team-speech-gpu-quota"]["requests.nvidia.com/gpumem"] == "163840"


def test_outputs_hide_the_adopted_kubeconfig(prod):
    assert prod.outputs["managementKubeconfig"].secret
    assert prod.outputs["kindSubnet"].value is None
    assert prod.outputs["workerNetworks"].value == ["10.20.0.0/16"]
