"""The mocks harness itself: registrations, secret markers, dependencies, outputs."""

import pulumi
import pulumi_command as command

from tests.fixtures import KIND_SUBNET_V4, kubeconfig_yaml, tenant_ca_pem
from tools.mockrun import run_program


def _program():
    token = pulumi.Output.secret("abcdef.0123456789abcdef")
    cluster = command.local.Command(
        "cluster",
        create="kind get kubeconfig --name lab",
        opts=pulumi.ResourceOptions(additional_secret_outputs=["stdout"]),
    )
    join = command.local.Command(
        "join",
        create="join",
        environment={"JOIN_TOKEN": token},
        opts=pulumi.ResourceOptions(depends_on=[cluster]),
    )
    command.local.Command("unrelated", create="true")
    pulumi.export("kubeconfig", pulumi.Output.secret(cluster.stdout))
    pulumi.export("join_stdout", join.stdout)


def test_records_inputs_secrets_options_and_dependencies():
    run = run_program({}, program=_program)
    cluster, join, unrelated = (run.named(n) for n in ("cluster", "join", "unrelated"))
    assert sorted(r.name for r in run.of_type("command:local:Command")) == ["cluster", "join", "unrelated"]
    assert join.is_secret("environment")
    assert join.inputs["environment"] == {"JOIN_TOKEN": "abcdef.0123456789abcdef"}
    assert not cluster.is_secret("create")
    assert cluster.additional_secret_outputs == ["stdout"]
    assert run.depends_on(join, cluster)
    assert not run.depends_on(cluster, join)
    assert not run.depends_on(unrelated, cluster)


def test_stack_outputs_carry_value_and_secretness():
    run = run_program({}, program=_program)
    assert run.outputs["kubeconfig"].secret
    assert "certificate-authority-data" in run.outputs["kubeconfig"].value
    assert not run.outputs["join_stdout"].secret


def test_fixture_data_is_realistic():
    assert tenant_ca_pem().startswith(b"-----BEGIN CERTIFICATE-----")
    assert "server: https://10.0.0.1:6443" in kubeconfig_yaml("https://10.0.0.1:6443", "t")
    assert KIND_SUBNET_V4 == "172.18.0.0/16"
