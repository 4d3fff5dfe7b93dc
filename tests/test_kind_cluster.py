"""KindManagementCluster (kind mode): kind config, create/delete scripts against a stub `kind`, subnet picking,
kubeconfig parsing, worker networks, wiring. Adopt mode is in test_adopt_cluster.py."""

import os
import stat
import subprocess

import pulumi
import pytest
import yaml

from components.kind_cluster import (
    KIND_ENVIRONMENT,
    KindManagementCluster,
    KindManagementClusterArgs,
    KubeconfigCluster,
    create_script,
    current_cluster,
    delete_script,
    ipv4_subnet,
    kind_config,
    kind_config_yaml,
    worker_networks,
)
from components.naming import COMPONENT_PREFIX, KIND_NETWORK
from tests.fixtures import KIND_SUBNET_V4, KIND_SUBNET_V6, kubeconfig_yaml
from tools import mockrun as harness
from tools.mockrun import run_program

NAME = "gpu-tenancy"
IMAGE = "kindest/node:v1.35.0"


# --------------------------------------------------------------------------- #
# kind config
# --------------------------------------------------------------------------- #


def test_kind_config_is_one_control_plane_node_with_the_configured_image():
    config = kind_config(NAME, IMAGE)
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert config["name"] == NAME
    assert config["nodes"] == [{"role": "control-plane", "image": IMAGE}]
    # The management API stays on the loopback interface.
    assert config["networking"] == {"apiServerAddress": "127.0.0.1"}


def test_kind_config_yaml_round_trips_and_changes_with_its_inputs():
    text = kind_config_yaml(NAME, IMAGE)
    assert yaml.safe_load(text) == kind_config(NAME, IMAGE)
    assert kind_config_yaml(NAME, IMAGE) == text  # deterministic: no spurious replacement
    assert kind_config_yaml(NAME, "kindest/node:v1.36.0") != text
    assert kind_config_yaml("other-lab", IMAGE) != text


# --------------------------------------------------------------------------- #
# create / delete scripts, run by bash against a stub `kind` on PATH
# --------------------------------------------------------------------------- #

STUB_KIND = r"""#!/usr/bin/env bash
# Stub kind: clusters live in $KIND_STUB/clusters, every call is logged to $KIND_STUB/calls.
set -euo pipefail
echo "$*" >> "$KIND_STUB/calls"
name=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [[ "${args[$i]}" == "--name" ]]; then name="${args[$((i + 1))]}"; fi
done
touch "$KIND_STUB/clusters"
case "$1 $2" in
  "get clusters")
    if [[ -n "${KIND_STUB_DOCKER_DOWN:-}" ]]; then
      echo "ERROR: failed to list clusters: command \"docker ps\" failed" >&2; exit 1
    fi
    if [[ -s "$KIND_STUB/clusters" ]]; then cat "$KIND_STUB/clusters"; else echo "No kind clusters found." >&2; fi ;;
  "create cluster")
    cat > "$KIND_STUB/config-$name"
    echo "Creating cluster \"$name\" ..."
    echo "$name" >> "$KIND_STUB/clusters" ;;
  "delete cluster")
    echo "Deleting cluster \"$name\" ..." >&2
    grep -vxF -- "$name" "$KIND_STUB/clusters" > "$KIND_STUB/clusters.new" || true
    mv "$KIND_STUB/clusters.new" "$KIND_STUB/clusters" ;;
  "get kubeconfig")
    grep -qxF -- "$name" "$KIND_STUB/clusters" || { echo "ERROR: could not locate any control plane nodes for cluster named '$name'" >&2; exit 1; }
    printf 'apiVersion: v1\nkind: Config\ncurrent-context: kind-%s\n' "$name" ;;
  *) echo "stub kind: unexpected call: $*" >&2; exit 2 ;;
esac
"""


@pytest.fixture
def stub_kind(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kind = bin_dir / "kind"
    kind.write_text(STUB_KIND)
    kind.chmod(kind.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "state"
    state.mkdir()
    (state / "calls").touch()
    (state / "clusters").touch()

    def run(script: str, stdin: str = "", **extra_env: str) -> subprocess.CompletedProcess:
        env = {**os.environ, **KIND_ENVIRONMENT, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KIND_STUB": str(state), **extra_env}
        return subprocess.run(["/bin/bash", "-c", script], input=stdin, capture_output=True, text=True, env=env)

    run.state = state
    run.calls = lambda: (state / "calls").read_text().splitlines()
    run.clusters = lambda: (state / "clusters").read_text().split()
    return run


def test_create_makes_the_cluster_from_stdin_and_prints_only_the_kubeconfig(stub_kind):
    config = kind_config_yaml(NAME, IMAGE)
    done = stub_kind(create_script(NAME), stdin=config)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"apiVersion: v1\nkind: Config\ncurrent-context: kind-{NAME}\n"
    assert (stub_kind.state / f"config-{NAME}").read_text() == config
    create_calls = [c for c in stub_kind.calls() if c.startswith("create cluster")]
    assert create_calls == [f"create cluster --name {NAME} --config - --wait 5m"]
    assert "Creating cluster" in done.stderr  # kind's progress goes to stderr, not into the kubeconfig


def test_create_is_idempotent_and_reuses_an_existing_cluster(stub_kind):
    config = kind_config_yaml(NAME, IMAGE)
    first = stub_kind(create_script(NAME), stdin=config)
    second = stub_kind(create_script(NAME), stdin=config)
    assert first.returncode == second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert "already exists: reusing it" in second.stderr
    assert sum(c.startswith("create cluster") for c in stub_kind.calls()) == 1
    assert stub_kind.clusters() == [NAME]


def test_create_matches_the_cluster_name_exactly(stub_kind):
    (stub_kind.state / "clusters").write_text(f"{NAME}-old\nlab\n")
    done = stub_kind(create_script(NAME), stdin=kind_config_yaml(NAME, IMAGE))
    assert done.returncode == 0, done.stderr
    assert f"create cluster --name {NAME} --config - --wait 5m" in stub_kind.calls()


def test_create_fails_loudly_when_kind_cannot_list_clusters(stub_kind):
    done = stub_kind(create_script(NAME), stdin=kind_config_yaml(NAME, IMAGE), KIND_STUB_DOCKER_DOWN="1")
    assert done.returncode != 0
    assert "docker ps" in done.stderr
    assert not any(c.startswith("create cluster") for c in stub_kind.calls())
    assert done.stdout == ""


def test_delete_removes_an_existing_cluster(stub_kind):
    (stub_kind.state / "clusters").write_text(f"{NAME}\nlab\n")
    done = stub_kind(delete_script(NAME))
    assert done.returncode == 0, done.stderr
    assert f"delete cluster --name {NAME}" in stub_kind.calls()
    assert stub_kind.clusters() == ["lab"]


def test_delete_tolerates_a_missing_cluster(stub_kind):
    done = stub_kind(delete_script(NAME))
    assert done.returncode == 0, done.stderr
    assert "does not exist: nothing to delete" in done.stderr
    assert not any(c.startswith("delete cluster") for c in stub_kind.calls())


def test_scripts_quote_the_cluster_name():
    assert "--name 'lab; rm -rf ~'" in create_script("lab; rm -rf ~")
    assert "--name 'lab; rm -rf ~'" in delete_script("lab; rm -rf ~")


# --------------------------------------------------------------------------- #
# IPv4 subnet of the kind network
# --------------------------------------------------------------------------- #


def test_ipv4_subnet_skips_the_ipv6_entry_listed_first():
    assert ipv4_subnet([KIND_SUBNET_V6, KIND_SUBNET_V4]) == KIND_SUBNET_V4


def test_ipv4_subnet_with_only_ipv4():
    assert ipv4_subnet(["172.19.0.0/16"]) == "172.19.0.0/16"


def test_ipv4_subnet_ignores_empty_entries():
    assert ipv4_subnet(["", None, "10.89.0.0/24"]) == "10.89.0.0/24"


@pytest.mark.parametrize("subnets", [[KIND_SUBNET_V6], [], ["", None]])
def test_ipv4_subnet_without_ipv4_explains_the_fix(subnets):
    with pytest.raises(ValueError, match=r"docker network 'kind' has no IPv4 subnet") as raised:
        ipv4_subnet(subnets)
    assert "docker network rm kind" in str(raised.value)
    if subnets and subnets[0]:
        assert KIND_SUBNET_V6 in str(raised.value)


# --------------------------------------------------------------------------- #
# The kubeconfig's current cluster (adopt mode reads it for display and identity)
# --------------------------------------------------------------------------- #

TOKEN = "s3cr3t-token-value"


def _kubeconfig(**changes) -> str:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "other", "cluster": {"server": "https://10.0.0.9:6443"}},
            {"name": "prod-mgmt", "cluster": {"server": "https://mgmt.example.net:6443"}},
        ],
        "users": [{"name": "admin", "user": {"token": TOKEN}}],
        "contexts": [
            {"name": "old", "context": {"cluster": "other", "user": "admin"}},
            {"name": "ops", "context": {"cluster": "prod-mgmt", "user": "admin"}},
        ],
        "current-context": "ops",
    }
    document.update(changes)
    return yaml.safe_dump(document)


def test_current_cluster_follows_the_current_context():
    assert current_cluster(_kubeconfig()) == KubeconfigCluster(name="prod-mgmt", server="https://mgmt.example.net:6443")
    assert current_cluster(_kubeconfig(**{"current-context": "old"})).server == "https://10.0.0.9:6443"


def test_current_cluster_reads_the_mocked_kind_kubeconfig():
    assert current_cluster(kubeconfig_yaml("https://127.0.0.1:41234", "kind-lab")) == KubeconfigCluster(
        "kind-lab", "https://127.0.0.1:41234"
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"current-context": ""}, "no current-context"),
        ({"current-context": "missing"}, "contexts has no entry named 'missing'"),
        ({"contexts": [{"name": "ops", "context": {"user": "admin"}}]}, "context 'ops' names no cluster"),
        ({"clusters": [{"name": "other", "cluster": {"server": "https://x"}}]}, "clusters has no entry named 'prod-mgmt'"),
        ({"clusters": [{"name": "prod-mgmt", "cluster": {}}]}, "cluster 'prod-mgmt' has no server"),
    ],
)
def test_current_cluster_explains_what_is_missing_without_echoing_credentials(changes, message):
    with pytest.raises(ValueError, match=message) as raised:
        current_cluster(_kubeconfig(**changes))
    assert str(raised.value).startswith("management.kubeconfig")
    assert TOKEN not in str(raised.value)


@pytest.mark.parametrize("text", ["", "just text", "- a\n- list\n", f"token: {TOKEN}\n  bad: [yaml"])
def test_current_cluster_rejects_non_kubeconfigs_without_echoing_them(text):
    with pytest.raises(ValueError, match="management.kubeconfig") as raised:
        current_cluster(text)
    assert TOKEN not in str(raised.value)


# --------------------------------------------------------------------------- #
# Networks tenant API servers accept workers from
# --------------------------------------------------------------------------- #


def test_worker_networks_put_the_kind_subnet_first_then_the_configured_cidrs():
    assert worker_networks(KIND_SUBNET_V4, ["10.20.0.0/16", "192.168.7.0/24"]) == [
        KIND_SUBNET_V4,
        "10.20.0.0/16",
        "192.168.7.0/24",
    ]


def test_worker_networks_without_a_kind_subnet_are_the_configured_cidrs():
    assert worker_networks(None, ["10.20.0.0/16"]) == ["10.20.0.0/16"]


def test_worker_networks_drop_duplicates_and_normalise():
    assert worker_networks("172.18.0.0/16", ["172.18.0.0/16", "10.20.0.0/16", "10.20.0.0/16"]) == [
        "172.18.0.0/16",
        "10.20.0.0/16",
    ]
    assert worker_networks("172.18.5.0/16", []) == ["172.18.0.0/16"]


def test_worker_networks_need_at_least_one_network():
    with pytest.raises(ValueError, match="management.workerCidrs is empty"):
        worker_networks(None, [])


def test_worker_networks_reject_ipv6():
    with pytest.raises(ValueError, match="management.workerCidrs: 'fd00::/64' is not an IPv4 network"):
        worker_networks(KIND_SUBNET_V4, ["fd00::/64"])


# --------------------------------------------------------------------------- #
# The component under mocks
# --------------------------------------------------------------------------- #


def _program(created: dict, worker_cidrs: list[str] | None = None):
    def program():
        cluster = KindManagementCluster(
            "management",
            KindManagementClusterArgs(cluster_name=NAME, node_image=IMAGE, worker_cidrs=worker_cidrs or []),
        )
        created["cluster"] = cluster
        pulumi.export("kubeconfig", cluster.kubeconfig)
        pulumi.export("kind_subnet", cluster.kind_subnet)
        pulumi.export("worker_networks", cluster.worker_networks)

    return program


@pytest.fixture
def kind_run():
    created: dict = {}
    run = run_program({}, program=_program(created))
    return run, created["cluster"]


def test_component_shape_and_plain_attributes(kind_run):
    run, cluster = kind_run
    component = run.named("management", f"{COMPONENT_PREFIX}:KindManagementCluster")
    children = run.children(component)
    assert sorted(r.type for r in children) == ["command:local:Command", "pulumi:providers:kubernetes"]
    assert cluster.cluster_name == NAME
    assert cluster.network_name == KIND_NETWORK == "kind"
    assert cluster.adopted is False


def test_cluster_command_runs_the_scripts_with_the_config_on_stdin(kind_run):
    run, _ = kind_run
    (command,) = run.of_type("command:local:Command")
    inputs = command.inputs
    assert inputs["create"] == create_script(NAME)
    assert inputs["delete"] == delete_script(NAME)
    assert inputs["stdin"] == kind_config_yaml(NAME, IMAGE)
    assert inputs["interpreter"] == ["/bin/bash", "-c"]
    assert inputs["environment"] == {"KIND_EXPERIMENTAL_PROVIDER": "docker"}
    assert "kind get clusters" in inputs["create"] and "kind get clusters" in inputs["delete"]


def test_config_change_replaces_the_cluster_deleting_the_old_one_first(kind_run):
    run, _ = kind_run
    (command,) = run.of_type("command:local:Command")
    assert command.inputs["triggers"] == [kind_config_yaml(NAME, IMAGE)]
    assert command.delete_before_replace


def test_kubeconfig_is_secret_everywhere(kind_run):
    run, _ = kind_run
    (command,) = run.of_type("command:local:Command")
    assert {"stdout", "stderr"} <= set(command.additional_secret_outputs)
    assert command.inputs["logging"] == "none"
    output = run.outputs["kubeconfig"]
    assert output.secret
    assert yaml.safe_load(output.value)["kind"] == "Config"
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    assert provider.is_secret("kubeconfig")
    assert run.depends_on(provider, command)


def test_kind_provider_forgets_objects_of_a_cluster_deleted_by_hand(kind_run):
    run, _ = kind_run
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    # Our own cluster: if it is gone, so is everything in it.
    assert provider.inputs["deleteUnreachable"] == "true"  # provider config travels as strings


def test_kind_subnet_is_the_ipv4_range_of_the_kind_network(kind_run):
    run, _ = kind_run
    assert run.outputs["kind_subnet"].value == KIND_SUBNET_V4
    (call,) = [c for c in run.calls if c.token == "docker:index/getNetwork:getNetwork"]
    assert call.args["name"] == "kind"


def test_worker_networks_are_the_kind_subnet_in_kind_mode(kind_run):
    run, _ = kind_run
    assert run.outputs["worker_networks"].value == [KIND_SUBNET_V4]


def test_worker_networks_add_configured_cidrs_after_the_kind_subnet():
    run = run_program({}, program=_program({}, worker_cidrs=["10.20.0.0/16"]))
    assert run.outputs["worker_networks"].value == [KIND_SUBNET_V4, "10.20.0.0/16"]


def test_subnet_lookup_waits_for_the_cluster(monkeypatch):
    """While the cluster command has no id yet (first preview), the network is not looked up."""
    original = harness.LabMocks.new_resource

    def cluster_not_created(self, args):
        resource_id, state = original(self, args)
        return ("" if args.typ == "command:local:Command" else resource_id), state

    monkeypatch.setattr(harness.LabMocks, "new_resource", cluster_not_created)
    run = run_program({}, program=_program({}), preview=True)
    assert not [c for c in run.calls if c.token == "docker:index/getNetwork:getNetwork"]
    assert run.outputs["kind_subnet"].value is None
    assert run.outputs["worker_networks"].value is None
