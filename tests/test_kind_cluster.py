"""ManagementCluster in kind mode: the kind config on stdin, the stack marker, what kind-create.sh prints and
how it is read, the IPv4 subnet, worker networks, what the component registers (plain mocks), and the cluster
command's lifecycle (the simulator).

The scripts themselves run against stub binaries in test_kind_scripts.py; adopt mode is in test_adopt_cluster.py.
"""

from __future__ import annotations

import re

import pulumi
import pytest
import yaml

from components import shell
from components.management import cluster as kind_cluster
from components.management.cluster import (
    CHECKOUT_LABEL,
    STACK_LABEL,
    KindOutput,
    KubeconfigCluster,
    ManagementCluster,
    ManagementClusterArgs,
    checkout_id,
    current_cluster,
    ipv4_subnet,
    kind_config,
    kind_config_yaml,
    parse_create_output,
    stack_marker,
    worker_networks,
)
from components.management.kamaji import Kamaji, KamajiArgs
from config import Versions
from naming import COMPONENT_PREFIX, KIND_NETWORK
from ops.registrations import KIND_SUBNET_V4 as MOCKED_KIND_SUBNET
from tests.support.fixtures import KIND_SUBNET_V4, KIND_SUBNET_V6, kubeconfig_yaml
from tests.support.mockrun import PROJECT, registered, run_program
from tests.support.sim import Lifecycle, engine
from tests.support.sim import scripts as sim_scripts
from tests.support.sim.lab import lab_world
from tests.support.sim.state import plain

NAME = "gpu-tenancy"
IMAGE = "kindest/node:v1.35.0"
MARKER = stack_marker(PROJECT, "dev")
COMMAND = "command:local:Command"
PROVIDER = "pulumi:providers:kubernetes"

# Label syntax from k8s.io/apimachinery pkg/util/validation/validation.go (qualifiedNameFmt, labelValueFmt,
# DNS-1123 subdomain prefix).
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}")
LABEL_VALUE = re.compile(rf"({_NAME})?")


# --------------------------------------------------------------------------- #
# kind config, checked against kind v1alpha4 as the vendored kind README writes it out
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def kind_facts(vendor_dir) -> str:
    return (vendor_dir / "kind" / "README.txt").read_text()


def _section(facts: str, struct: str) -> str:
    match = re.search(rf"^- {struct} \(l\.\d+\):(.*?)(?=^- |\Z)", facts, re.M | re.S)
    assert match, f"the kind README no longer describes {struct}"
    return match.group(1)


def _fields(facts: str, struct: str) -> set[str]:
    """Field names of a v1alpha4 struct: `name (25)`, `labels map[string]string (111)`, ..."""
    found = set(re.findall(r"\b([A-Za-z0-9]+)(?: [^\s,()]+)? \(\d+\)", _section(facts, struct)))
    assert found, struct
    return found


def test_kind_config_uses_only_fields_that_kinds_strict_decoder_accepts(kind_facts):
    # kind decodes its config with KnownFields(true): an unknown key fails `kind create cluster`.
    config = kind_config(NAME, IMAGE, MARKER)
    api_version, kind = re.search(r'accepts only apiVersion "([^"]+)" with kind\s+"([^"]+)"', kind_facts).groups()
    assert (config["apiVersion"], config["kind"]) == (api_version, kind)
    assert set(config) - {"apiVersion", "kind"} <= _fields(kind_facts, "Cluster")
    assert set(config["networking"]) <= _fields(kind_facts, "Networking")
    (node,) = config["nodes"]
    assert set(node) <= _fields(kind_facts, "Node")
    assert f'"{node["role"]}"' in _section(kind_facts, "Node")  # a NodeRole value
    name_rule = re.search(r"cluster name must match (\S+)", kind_facts).group(1)
    assert re.fullmatch(name_rule.strip("^$"), config["name"])


def test_kind_config_is_one_labelled_control_plane_node_with_the_api_on_loopback(kind_facts):
    config = kind_config(NAME, IMAGE, MARKER)
    assert config["name"] == NAME
    assert config["nodes"] == [{"role": "control-plane", "image": IMAGE, "labels": {STACK_LABEL: MARKER}}]
    # kind's own default for IPv4, spelled out: the management API is not exposed to the LAN.
    default = re.search(r"apiServerAddress (\S+) \(::1 for ipv6\)", kind_facts).group(1)
    assert config["networking"] == {"apiServerAddress": default} == {"apiServerAddress": "127.0.0.1"}
    assert LABEL_KEY.fullmatch(STACK_LABEL)


def test_kind_config_yaml_round_trips_and_changes_only_with_its_inputs():
    text = kind_config_yaml(NAME, IMAGE, MARKER)
    assert yaml.safe_load(text) == kind_config(NAME, IMAGE, MARKER)
    assert kind_config_yaml(NAME, IMAGE, MARKER) == text  # deterministic: no spurious replacement
    others = {
        kind_config_yaml(NAME, "kindest/node:v1.35.5", MARKER),
        kind_config_yaml("other-lab", IMAGE, MARKER),
        kind_config_yaml(NAME, IMAGE, stack_marker(PROJECT, "prod")),
    }
    assert text not in others and len(others) == 3


# --------------------------------------------------------------------------- #
# The stack marker (node label gpu-tenancy.io/stack)
# --------------------------------------------------------------------------- #


def _script_marker_rule() -> re.Pattern[str]:
    """The check kind-create.sh applies to KIND_STACK_MARKER before doing anything."""
    script = shell.script_text(shell.KIND_CREATE)
    return re.compile(re.search(r'\[\[ "\$marker" =~ (\S+) \]\]', script).group(1))


@pytest.mark.parametrize(
    "stack",
    ["dev", "prod", "Team_A.lab-2", "my stack/with spaces", "ünïcödé", "---", "x" * 120, "a" * 50 + "-" * 20],
)
def test_stack_marker_is_a_label_value_that_kind_create_accepts(stack):
    marker = stack_marker(PROJECT, stack)
    assert marker and LABEL_VALUE.fullmatch(marker) and len(marker) <= 63
    assert _script_marker_rule().fullmatch(marker), marker


def test_stack_markers_tell_stacks_apart_and_are_stable():
    assert stack_marker(PROJECT, "dev") == stack_marker(PROJECT, "dev") == "gpu-tenancy.dev"
    assert stack_marker(PROJECT, "dev") != stack_marker(PROJECT, "prod")
    assert stack_marker("other-project", "dev") != stack_marker(PROJECT, "dev")


# --------------------------------------------------------------------------- #
# What kind-create.sh prints: one JSON line of IPAM entries, then the kubeconfig
# --------------------------------------------------------------------------- #

# `docker network inspect kind --format '{{json .IPAM.Config}}'` for kind's network (IPv6 ULA first).
IPAM_LINE = (
    '[{"Subnet":"fc00:f853:ccd:e793::/64","Gateway":"fc00:f853:ccd:e793::1"},'
    '{"Subnet":"172.18.0.0/16","Gateway":"172.18.0.1"}]'
)
KUBECONFIG = kubeconfig_yaml("https://127.0.0.1:41234", f"kind-{NAME}")


def test_parse_create_output_reads_the_ipam_line_and_keeps_the_kubeconfig_verbatim():
    parsed = parse_create_output(f"{IPAM_LINE}\n{KUBECONFIG}")
    assert parsed == KindOutput(subnets=["fc00:f853:ccd:e793::/64", "172.18.0.0/16"], kubeconfig=KUBECONFIG)
    assert current_cluster(parsed.kubeconfig) == KubeconfigCluster(f"kind-{NAME}", "https://127.0.0.1:41234")
    assert ipv4_subnet(parsed.subnets) == "172.18.0.0/16"


@pytest.mark.parametrize(
    ("line", "subnets"),
    [
        ("null", []),  # docker prints null for a network without IPAM config
        ("[]", []),
        ('[{"Gateway":"172.18.0.1"},{"Subnet":""},{"Subnet":"10.89.0.0/24"}]', ["10.89.0.0/24"]),
    ],
)
def test_parse_create_output_skips_ipam_entries_without_a_subnet(line, subnets):
    assert parse_create_output(f"{line}\n{KUBECONFIG}").subnets == subnets


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        (KUBECONFIG, "no IPAM line"),  # something printed the kubeconfig first
        ("", "no IPAM line"),
        (f"Creating cluster ...\n{KUBECONFIG}", "no IPAM line"),
        (IPAM_LINE, "no kubeconfig"),
        (f"{IPAM_LINE}\n\n", "no kubeconfig"),
    ],
)
def test_parse_create_output_fails_clearly_without_echoing_the_output(stdout, message):
    with pytest.raises(ValueError, match=message) as raised:
        parse_create_output(stdout)
    assert "BEGIN" not in str(raised.value) and "client-key" not in str(raised.value)
    assert KUBECONFIG.splitlines()[0] not in str(raised.value)


# --------------------------------------------------------------------------- #
# IPv4 subnet of the kind network
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("subnets", "expected"),
    [
        ([KIND_SUBNET_V6, KIND_SUBNET_V4], KIND_SUBNET_V4),  # kind lists its IPv6 range first
        (["172.19.0.0/16"], "172.19.0.0/16"),
        (["", None, "not-a-cidr", "10.89.0.0/24"], "10.89.0.0/24"),
        (["172.18.5.0/16"], "172.18.0.0/16"),  # normalised
    ],
)
def test_ipv4_subnet_picks_the_first_ipv4_range(subnets, expected):
    assert ipv4_subnet(subnets) == expected


@pytest.mark.parametrize("subnets", [[KIND_SUBNET_V6], [], ["", None]])
def test_ipv4_subnet_on_an_ipv6_only_network_explains_the_fix(subnets):
    with pytest.raises(ValueError, match=r"docker network 'kind' has no IPv4 subnet") as raised:
        ipv4_subnet(subnets)
    message = str(raised.value)
    assert "docker network rm kind" in message and "make down" in message
    # One line for the operator, not a traceback, also raised in an apply.
    assert isinstance(raised.value, pulumi.RunError)
    with pytest.raises(pulumi.RunError, match="overlaps the `kind` network"):
        kind_cluster.clear_of_tenants("10.97.0.0/16", {"tenants[0].podCidr": "10.97.0.0/20"})
    assert f"found: {KIND_SUBNET_V6}" in message if subnets and subnets[0] else "found: none" in message


# --------------------------------------------------------------------------- #
# The kubeconfig's current cluster (adopt mode reads it for the provider's identity)
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


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"current-context": ""}, "has no current-context"),
        ({"current-context": "missing"}, "has no context named 'missing'"),
        ({"contexts": [{"name": "ops", "context": {"user": "admin"}}]}, "has a context 'ops' that names no cluster"),
        ({"clusters": [{"name": "other", "cluster": {"server": "https://x"}}]}, "has no cluster named 'prod-mgmt'"),
        ({"clusters": [{"name": "prod-mgmt", "cluster": {}}]}, "has no server in its cluster 'prod-mgmt'"),
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


def test_worker_networks_put_the_kind_subnet_first_then_the_configured_cidrs_once_each():
    assert worker_networks(KIND_SUBNET_V4, ["10.20.0.0/16", "192.168.7.0/24"]) == [
        KIND_SUBNET_V4, "10.20.0.0/16", "192.168.7.0/24"]
    assert worker_networks("172.18.5.0/16", ["172.18.0.0/16", "10.20.0.0/16", "10.20.0.0/16"]) == [
        "172.18.0.0/16", "10.20.0.0/16"]
    assert worker_networks(None, ["10.20.0.0/16"]) == ["10.20.0.0/16"]


def test_worker_networks_need_an_ipv4_network():
    with pytest.raises(ValueError, match="management.workerCidrs is empty"):
        worker_networks(None, [])
    with pytest.raises(ValueError, match="management.workerCidrs: 'fd00::/64' is not an IPv4 network"):
        worker_networks(KIND_SUBNET_V4, ["fd00::/64"])


# --------------------------------------------------------------------------- #
# What the component registers (plain mocks), and what the simulated Docker host makes of it
# --------------------------------------------------------------------------- #


def _program(created: dict | None = None, worker_cidrs: list[str] | None = None, image: dict | None = None,
             tenant_ranges: dict[str, str] | None = None):
    def program():
        cluster = ManagementCluster(
            "management",
            ManagementClusterArgs(cluster_name=NAME, node_image=(image or {}).get("image", IMAGE),
                                  worker_cidrs=worker_cidrs or [], tenant_ranges=tenant_ranges or {}),
        )
        if created is not None:
            created["cluster"] = cluster
        pulumi.export("kubeconfig", cluster.kubeconfig)
        pulumi.export("kind_subnet", cluster.kind_subnet)
        pulumi.export("worker_networks", cluster.worker_networks)

    return program


@pytest.fixture(scope="module")
def kind_run():
    created: dict = {}
    run = registered({}, program=_program(created, worker_cidrs=["10.20.0.0/16"]))
    return run, created["cluster"]


def _command(run):
    (command,) = run.of_type(COMMAND)
    return command


def test_component_holds_the_cluster_command_and_its_provider(kind_run):
    run, cluster = kind_run
    component = run.named("management", f"{COMPONENT_PREFIX}:ManagementCluster")
    assert sorted(r.type for r in run.children(component)) == [COMMAND, PROVIDER]
    assert cluster.cluster_name == NAME and cluster.network_name == KIND_NETWORK == "kind"
    assert cluster.adopted is False and cluster.cluster is not None


def test_cluster_command_runs_the_shipped_scripts_with_the_kind_config_on_stdin(kind_run):
    inputs = _command(kind_run[0]).inputs
    assert inputs["create"] == shell.script_text(shell.KIND_CREATE)
    assert inputs["delete"] == shell.script_text(shell.KIND_DELETE)
    assert inputs["interpreter"] == ["/bin/bash", "-c"]
    assert inputs["stdin"] == kind_config_yaml(NAME, IMAGE, MARKER, checkout_id())
    assert not inputs.get("update")  # a change of the scripts re-runs the idempotent create


def test_scripts_get_every_variable_they_require_and_the_label_they_check(kind_run):
    inputs = _command(kind_run[0]).inputs
    environment = inputs["environment"]
    for script in (inputs["create"], inputs["delete"]):
        required = re.search(r"for var in ([A-Z_ ]+); do", script).group(1).split()
        assert required and set(required) <= set(environment)
    assert environment[shell.KIND_CLUSTER_NAME_ENV] == NAME
    assert environment[shell.KIND_WAIT_SECONDS_ENV] == str(kind_cluster.KIND_WAIT_SECONDS)
    assert environment["KIND_EXPERIMENTAL_PROVIDER"] == "docker"
    # The script compares the label it reads on the node with KIND_STACK_MARKER: the label the kind config puts
    # there must be that same value, or the stack would refuse its own cluster on the next `up`.
    (node,) = yaml.safe_load(inputs["stdin"])["nodes"]
    assert node["labels"][STACK_LABEL] == environment[shell.KIND_STACK_MARKER_ENV] == MARKER
    assert node["labels"][CHECKOUT_LABEL] == environment[shell.KIND_CHECKOUT_ENV] == checkout_id()
    for label in (STACK_LABEL, CHECKOUT_LABEL):
        jsonpath = "{.metadata.labels." + label.replace(".", "\\.") + "}"
        assert jsonpath in inputs["create"] and jsonpath in inputs["delete"]


def test_each_stack_labels_its_cluster_with_its_own_marker():
    run = registered({}, program=_program(), stack="prod")
    inputs = _command(run).inputs
    marker = stack_marker(PROJECT, "prod")
    assert inputs["environment"][shell.KIND_STACK_MARKER_ENV] == marker != MARKER
    assert inputs["triggers"][0] == kind_config_yaml(NAME, IMAGE, marker)


def test_checkouts_tell_clones_apart_and_a_running_stack_keeps_its_own():
    assert checkout_id("/srv/a/gpu-tenancy") == checkout_id("/srv/a/gpu-tenancy/.") != checkout_id("/srv/b/gpu-tenancy")
    # A stack made before the checkout label, or moved, keeps the stdin and checkout it has: neither replaces it.
    assert {"stdin", f"environment.{shell.KIND_CHECKOUT_ENV}"} <= set(kind_cluster.IGNORED_KIND_INPUTS)


def test_only_the_kind_config_replaces_the_cluster_and_the_old_one_goes_first(kind_run):
    command = _command(kind_run[0])
    config = yaml.safe_load(command.inputs["stdin"])
    del config["nodes"][0]["labels"][CHECKOUT_LABEL]
    assert command.inputs["triggers"] == [yaml.safe_dump(config, sort_keys=False)]
    assert command.delete_before_replace  # same cluster name before and after


def test_the_kubeconfig_is_secret_in_state_logs_and_outputs(kind_run):
    run, _ = kind_run
    command = _command(run)
    assert "stdout" in command.additional_secret_outputs
    # pulumi-command logs only stderr (kind's progress), and does not hand stdout to the delete command.
    assert command.inputs["logging"] == "stderr"
    assert command.inputs["addPreviousOutputInEnv"] is False
    output = run.outputs["kubeconfig"]
    assert output.secret and current_cluster(output.value).name == f"kind-{NAME}"
    provider = run.named("management-provider", PROVIDER)
    assert provider.is_secret("kubeconfig") and provider.inputs["kubeconfig"] == output.value
    assert run.depends_on(provider, command)


def test_kind_subnet_and_worker_networks_come_from_the_created_clusters_network(kind_run):
    run, _ = kind_run
    # kind-create.sh's IPAM line lists IPv6 first, as kind creates the network.
    assert run.outputs["kind_subnet"].value == MOCKED_KIND_SUBNET and not run.outputs["kind_subnet"].secret
    assert run.outputs["worker_networks"].value == [MOCKED_KIND_SUBNET, "10.20.0.0/16"]


def test_an_ipv6_only_kind_network_fails_the_up_with_the_fix():
    world = lab_world()
    world.docker.networks["kind"] = [KIND_SUBNET_V6]
    with pytest.raises(AssertionError, match=r"docker network 'kind' has no IPv4 subnet.*docker network rm kind"):
        run_program({}, program=_program(), world=world)


def test_a_kind_network_a_tenant_range_overlaps_fails_the_up_naming_the_key():
    # Docker picks the subnet when kind creates the network (its default-address-pools may hand out 10.x).
    world = lab_world()
    world.docker.networks["kind"] = [KIND_SUBNET_V6, "10.97.0.0/16"]
    ranges = {"tenants[0].podCidr": "10.244.0.0/16", "tenants[1].serviceCidr": "10.97.0.0/16"}
    with pytest.raises(AssertionError, match=r"tenants\[1\].serviceCidr = '10.97.0.0/16' overlaps the `kind` network "
                                             r"10.97.0.0/16.*set tenants\[1\].serviceCidr to a range outside it"):
        run_program({}, program=_program(tenant_ranges=ranges), world=world)
    assert run_program({}, program=_program(tenant_ranges=ranges)).outputs["kind_subnet"].value == MOCKED_KIND_SUBNET


@pytest.fixture
def invokes(monkeypatch):
    """Every invoke token the program sends (the kind subnet used to come from docker:getNetwork)."""
    seen: list[str] = []
    original = engine.SimMonitor.Invoke

    def record(self, request):
        seen.append(request.tok)
        return original(self, request)

    monkeypatch.setattr(engine.SimMonitor, "Invoke", record)
    return seen


def test_a_fresh_preview_asks_docker_nothing_and_leaves_the_subnet_unknown(invokes):
    # pulumi-command gives a Command an id even in preview, so an invoke that depended on the cluster ran against
    # the real Docker daemon before the kind network existed and failed the first preview.
    def program():
        cluster = ManagementCluster("management", ManagementClusterArgs(cluster_name=NAME, node_image=IMAGE))
        kamaji = Kamaji("kamaji", KamajiArgs(provider=cluster.provider, kubeconfig=cluster.kubeconfig,
                                             kind_subnet=cluster.kind_subnet, versions=Versions(),
                                             deleted_with=cluster.cluster))
        pulumi.export("kind_subnet", cluster.kind_subnet)
        pulumi.export("worker_networks", cluster.worker_networks)
        pulumi.export("lb_pool_range", kamaji.lb_pool_range)

    world = lab_world(kind_network=False)
    run = run_program({}, program=program, preview=True, world=world)
    assert invokes == []
    assert {name: output.value for name, output in run.outputs.items()} == dict.fromkeys(
        ("kind_subnet", "worker_networks", "lb_pool_range"))
    assert "kind" not in world.docker.networks and not world.kind


def test_an_up_asks_docker_nothing_either(invokes):
    run = run_program({}, program=_program(), world=lab_world(kind_network=False))
    assert invokes == []
    assert run.outputs["kind_subnet"].value == KIND_SUBNET_V4


# --------------------------------------------------------------------------- #
# Lifecycle: reuse, replacement, another stack's cluster
# --------------------------------------------------------------------------- #


def test_a_new_node_image_replaces_the_cluster_deleting_the_old_one_first():
    image = {"image": IMAGE}
    sim = Lifecycle({}, world=lab_world(), program=_program(image=image))
    sim.up()
    assert not sim.up().changed()
    image["image"] = "kindest/node:v1.35.5"
    plan = sim.up()
    assert "management-kind" in plan.names("replace"), plan.render()
    assert sim.world.events[-2:] == [f"kind cluster {NAME} deleted", f"kind cluster {NAME} created"]
    assert sim.world.kind[NAME].node_image == "kindest/node:v1.35.5"
    assert current_cluster(sim.output("kubeconfig")).server == sim.world.kind[NAME].api.server


def test_a_change_of_the_script_text_changes_nothing_on_a_running_cluster(monkeypatch):
    """An update of the kind Command would make its stdout unknown in preview and the Provider built from it
    replaced (pulumi-go-provider: stdout unknown on update): the scripts stay as first stored."""
    sim = Lifecycle({}, world=lab_world(), program=_program())
    sim.up()
    server = sim.world.kind[NAME].api.server
    original = shell.script_text
    monkeypatch.setattr(shell, "script_text", lambda name: original(name) + "\n# reworded\n")
    for plan in (sim.preview(), sim.up()):
        assert plan.changed() == {}, plan.render()
    assert sim.world.kind[NAME].api.server == server


def test_a_replacement_runs_and_stores_the_current_scripts_and_wait(monkeypatch):
    """Ignored inputs are kept for an update only: a replacement is created from the program's inputs
    (pulumi step_generator.go, Check of goal.Properties when replacing)."""
    image = {"image": IMAGE}
    sim = Lifecycle({}, world=lab_world(), program=_program(image=image))
    sim.up()
    original, named = shell.script_text, sim_scripts._script_named
    monkeypatch.setattr(shell, "script_text", lambda name: original(name) + "\n# reworded\n")
    # The simulator still knows the stored (old) delete script, which deletes the old cluster.
    monkeypatch.setattr(sim_scripts, "_script_named", lambda text: named(text) or named(text + "\n# reworded\n"))
    monkeypatch.setattr(kind_cluster, "KIND_WAIT_SECONDS", 900)
    image["image"] = "kindest/node:v1.35.5"
    plan = sim.up()
    assert "management-kind" in plan.names("replace"), plan.render()
    inputs = plain(sim.resource("management-kind").inputs)
    assert inputs["create"].endswith("# reworded\n") and inputs["delete"].endswith("# reworded\n")
    assert inputs["environment"][shell.KIND_WAIT_SECONDS_ENV] == "900"


def test_a_renamed_cluster_is_created_under_the_new_name():
    """The name and the marker are not among the ignored inputs: an old KIND_CLUSTER_NAME would contradict the
    new kind config."""
    name = {"name": NAME}

    def program():
        cluster = ManagementCluster("management", ManagementClusterArgs(cluster_name=name["name"], node_image=IMAGE))
        pulumi.export("kubeconfig", cluster.kubeconfig)

    sim = Lifecycle({}, world=lab_world(), program=program)
    sim.up()
    name["name"] = "renamed"
    plan = sim.up()
    assert "management-kind" in plan.names("replace"), plan.render()
    assert set(sim.world.kind) == {"renamed"}
    environment = plain(sim.resource("management-kind").inputs["environment"])
    assert environment[shell.KIND_CLUSTER_NAME_ENV] == "renamed"


def test_another_stacks_cluster_of_the_same_name_is_neither_reused_nor_deleted():
    world = lab_world()
    Lifecycle({}, world=world, stack="prod", program=_program()).up()
    dev = Lifecycle({}, world=world, stack="dev", program=_program())
    plan = dev.up(expect_error=True)
    assert not plan.ok and "did not create it" in plan.error, plan.render()
    assert NAME in world.kind and f"kind cluster {NAME} deleted" not in world.events


@pytest.mark.parametrize(("one", "other"), [("x" * 60 + "a", "x" * 60 + "b"), ("team/prod", "team-prod"),
                                             ("a b", "a_b")])
def test_stacks_whose_names_only_differ_where_the_label_cannot_show_it_get_different_markers(one, other):
    assert stack_marker(PROJECT, one) != stack_marker(PROJECT, other)
