"""components/management/scripts/kind-create.sh and kind-delete.sh, run with bash against stub `kind` and `docker`.

The stubs keep a tiny model of the host in a state directory: the kind clusters, the owner label on each
cluster's control-plane node, which control-plane containers run, and every kubeconfig file kind writes.
They record their argv. The scripts' PATH holds only the stubs, bash, mktemp and rm (the stubs add the
coreutils they need themselves), so the scripts use nothing else from the host. The scripts run as pulumi-command
runs them on the Pulumi host: `bash -c <script>`, the kind config on stdin, the values in the environment.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from components import shell as ns
from components.management.image_cache import stack_mirrors
from tests.support.sim.world import proxy_for
from tests.support.stub_calls import recorded_calls

NAME = "gpu-tenancy"
CONTROL_PLANE = f"{NAME}-control-plane"
MARKER = "dev-4f2a"
CHECKOUT = "0a1b2c3d4e5f"
LABEL_JSONPATH = r"jsonpath={.metadata.labels.gpu-tenancy\.io/stack}/{.metadata.labels.gpu-tenancy\.io/checkout}"
ADMIN = ["exec", CONTROL_PLANE, "kubectl", "--kubeconfig=/etc/kubernetes/admin.conf"]
IPAM = '[{"Subnet":"fc00:f853:ccd:e793::/64"},{"Subnet":"172.18.0.0/16","Gateway":"172.18.0.1"}]'
USER_KUBECONFIG = "apiVersion: v1\nkind: Config\ncurrent-context: my-prod\n"


def kind_config(marker: str = MARKER, checkout: str = CHECKOUT) -> str:
    return yaml.safe_dump(
        {
            "kind": "Cluster",
            "apiVersion": "kind.x-k8s.io/v1alpha4",
            "name": NAME,
            "nodes": [
                {"role": "control-plane", "image": "kindest/node:v1.35.0", "labels": {"gpu-tenancy.io/stack": marker,
                                                                            "gpu-tenancy.io/checkout": checkout}}
            ],
        },
        sort_keys=False,
    )


def admin_kubeconfig(name: str) -> str:
    return f"apiVersion: v1\nkind: Config\ncurrent-context: kind-{name}\nusers:\n- name: kind-{name}\n"


# All the scripts need from the host besides kind and docker; the stubs get more tools on their own PATH.
SCRIPT_TOOLS = ("bash", "mktemp", "rm")
STUB_TOOLS = ("cat", "sed", "mkdir", "touch", "grep", "mv", "tr", "dirname")

PRELUDE = r"""#!/bin/bash
set -u
PATH="$PATH:$STUB_TOOLS"
rec() { local name=$1; shift; { printf '%s' "$#"; printf '\x1f%s' "$@"; printf '\n'; } >>"$KIND_STUB/$name.argv"; }
flag() { local want=$1; shift; while (( $# )); do [[ "$1" == "$want" ]] && { echo "$2"; return; }; shift; done; }
"""

STUB_KIND = r"""
rec kind "$@"
[[ "${KIND_EXPERIMENTAL_PROVIDER:-}" == docker ]] || { echo "stub kind: provider is not docker" >&2; exit 3; }
name="$(flag --name "$@")"
kubeconfig="$(flag --kubeconfig "$@")"
kubeconfig="${kubeconfig:-$HOME/.kube/config}"
case "$1 $2" in
  "get clusters")
    if [[ -n "${KIND_STUB_DOCKER_DOWN:-}" ]]; then
      echo "ERROR: failed to list clusters: command \"docker ps -a --filter label=io.x-k8s.kind.cluster\" failed" >&2; exit 1
    fi
    if [[ -s "$KIND_STUB/clusters" ]]; then cat "$KIND_STUB/clusters"; else echo "No kind clusters found." >&2; fi ;;
  "create cluster")
    cat >"$KIND_STUB/config-$name"
    for var in HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
      [[ -n "${!var+set}" ]] && printf '%s=%s\n' "$var" "${!var}"
    done >"$KIND_STUB/proxy-$name"
    echo "Creating cluster \"$name\" ..." >&2
    echo " • Ensuring node image (kindest/node:v1.35.0) 🖼"   # kind's progress, on stdout here
    [[ -n "${KIND_STUB_CREATE_FAILS:-}" ]] && { echo "ERROR: failed to create cluster: node(s) already exist" >&2; exit 1; }
    echo "$name" >>"$KIND_STUB/clusters"
    sed -n 's/^ *gpu-tenancy\.io\/stack: *//p' "$KIND_STUB/config-$name" | tr -d '\n' >"$KIND_STUB/label-$name"
    sed -n 's/^ *gpu-tenancy\.io\/checkout: *//p' "$KIND_STUB/config-$name" | tr -d '\n' >"$KIND_STUB/checkout-$name"
    touch "$KIND_STUB/running-$name-control-plane"
    # kind merges the new context into the kubeconfig file and makes it current.
    mkdir -p "$(dirname "$kubeconfig")"
    printf '# context kind-%s (current)\n' "$name" >>"$kubeconfig"
    echo "$kubeconfig" >>"$KIND_STUB/kubeconfig-paths"
    echo "Set kubectl context to \"kind-$name\"" ;;
  "delete cluster")
    echo "Deleting cluster \"$name\" ..." >&2
    echo "$kubeconfig" >>"$KIND_STUB/kubeconfig-paths"
    if ! grep -q "kind-$name" "$kubeconfig" 2>/dev/null; then
      echo "ERROR: failed to update kubeconfig: Cluster not found" >&2   # kind logs it and goes on
    fi
    [[ -f "$kubeconfig" ]] && sed -i "/kind-$name/d" "$kubeconfig"
    grep -vxF -- "$name" "$KIND_STUB/clusters" >"$KIND_STUB/clusters.new" || true
    mv "$KIND_STUB/clusters.new" "$KIND_STUB/clusters"
    rm -f "$KIND_STUB/label-$name" "$KIND_STUB/checkout-$name" "$KIND_STUB/running-$name-control-plane" ;;
  "get kubeconfig")
    grep -qxF -- "$name" "$KIND_STUB/clusters" || { echo "ERROR: could not locate any control plane nodes for cluster named '$name'" >&2; exit 1; }
    printf 'apiVersion: v1\nkind: Config\ncurrent-context: kind-%s\nusers:\n- name: kind-%s\n' "$name" "$name" ;;
  *) echo "stub kind: unexpected call: $*" >&2; exit 2 ;;
esac
"""

STUB_DOCKER = r"""
rec docker "$@"
case "$1" in
  exec)
    container="$2"
    [[ -e "$KIND_STUB/running-$container" ]] || {
      echo "Error response from daemon: container 1f0c2e of $container is not running" >&2; exit 1; }
    [[ "$3 $4" == "kubectl --kubeconfig=/etc/kubernetes/admin.conf" ]] || { echo "stub docker: unexpected $*" >&2; exit 2; }
    case "$5" in
      get)
        # kubectl prints a jsonpath result without a newline; a missing label is an empty string.
        cat "$KIND_STUB/label-${container%-control-plane}" 2>/dev/null || true
        printf /
        cat "$KIND_STUB/checkout-${container%-control-plane}" 2>/dev/null || true ;;
      wait)
        case "${DOCKER_WAIT:-ok}" in
          ok) echo "node/$container condition met" ;;
          timeout) echo "error: timed out waiting for the condition on nodes/$container" >&2; exit 1 ;;
        esac ;;
      *) echo "stub docker: unexpected $*" >&2; exit 2 ;;
    esac ;;
  network)
    [[ "$*" == "network inspect kind --format {{json .IPAM.Config}}" ]] || { echo "stub docker: unexpected $*" >&2; exit 2; }
    printf '%s\n' "$STUB_IPAM" ;;
  *) echo "stub docker: unexpected $*" >&2; exit 2 ;;
esac
"""


@dataclass
class Host:
    """The Pulumi host: stub kind and docker, their state, a HOME with the user's kubeconfig."""

    base: Path

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def tmp(self) -> Path:
        return self.base / "tmp"

    @property
    def user_kubeconfig(self) -> Path:
        return self.base / "home/.kube/config"

    def calls(self, name: str) -> list[list[str]]:
        return recorded_calls(self.state / f"{name}.argv")

    def kind_calls(self, verb: str) -> list[list[str]]:
        return [call for call in self.calls("kind") if call[:2] == verb.split()]

    def docker_calls(self, kubectl_verb: str) -> list[list[str]]:
        return [call for call in self.calls("docker") if call[:4] == ADMIN and call[4:5] == [kubectl_verb]]

    def kubeconfig_paths(self) -> list[str]:
        path = self.state / "kubeconfig-paths"
        return path.read_text().split() if path.exists() else []

    def clusters(self) -> list[str]:
        return (self.state / "clusters").read_text().split()

    def add_cluster(self, name: str = NAME, label: str | None = MARKER, running: bool = True,
                    checkout: str | None = CHECKOUT) -> None:
        with (self.state / "clusters").open("a") as clusters:
            clusters.write(f"{name}\n")
        if label is not None:
            (self.state / f"label-{name}").write_text(label)
        if checkout is not None:
            (self.state / f"checkout-{name}").write_text(checkout)
        if running:
            (self.state / f"running-{name}-control-plane").touch()

    def env(self, **overrides: str | None) -> dict[str, str]:
        env: dict[str, str | None] = {
            "PATH": f"{self.base / 'bin'}:{self.base / 'sysbin'}",
            "HOME": str(self.base / "home"),
            "TMPDIR": str(self.tmp),
            "KIND_STUB": str(self.state),
            "STUB_TOOLS": str(self.base / "stubtools"),
            "STUB_IPAM": IPAM,
            ns.KIND_CLUSTER_NAME_ENV: NAME,
            ns.KIND_STACK_MARKER_ENV: MARKER,
            ns.KIND_CHECKOUT_ENV: CHECKOUT,
        }
        env.update(overrides)
        return {k: v for k, v in env.items() if v is not None}

    def run(self, script: str, stdin: str = "", **env: str | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", ns.script_text(script)],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(**env),
            timeout=60,
        )

    def create(self, config: str | None = None, **env: str | None) -> subprocess.CompletedProcess[str]:
        return self.run(ns.KIND_CREATE, kind_config() if config is None else config, **env)

    def delete(self, **env: str | None) -> subprocess.CompletedProcess[str]:
        return self.run(ns.KIND_DELETE, **env)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    fake = Host(tmp_path)
    for directory in ("bin", "sysbin", "state", "tmp", "home/.kube"):
        (tmp_path / directory).mkdir(parents=True)
    (fake.state / "clusters").touch()
    fake.user_kubeconfig.write_text(USER_KUBECONFIG)
    for directory, tools in (("sysbin", SCRIPT_TOOLS), ("stubtools", STUB_TOOLS)):
        (tmp_path / directory).mkdir(exist_ok=True)
        for tool in tools:
            found = shutil.which(tool)
            assert found, f"{tool} is needed on the test host"
            (tmp_path / directory / tool).symlink_to(found)
    for name, body in (("kind", STUB_KIND), ("docker", STUB_DOCKER)):
        path = tmp_path / "bin" / name
        path.write_text(PRELUDE + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return fake


def label_read() -> list[str]:
    return [*ADMIN, "get", "node", CONTROL_PLANE, "-o", LABEL_JSONPATH]


def ready_wait(seconds: int = 300) -> list[str]:
    return [*ADMIN, "wait", "--for=condition=Ready", f"node/{CONTROL_PLANE}", f"--timeout={seconds}s"]


def assert_private_kubeconfig_used_and_removed(host: Host) -> None:
    [path] = host.kubeconfig_paths()
    assert Path(path).is_relative_to(host.tmp)
    assert not Path(path).exists()
    assert list(host.tmp.iterdir()) == []
    # The user's kubeconfig (and current context) is untouched.
    assert host.user_kubeconfig.read_text() == USER_KUBECONFIG


# --------------------------------------------------------------------------- #
# kind-create.sh
# --------------------------------------------------------------------------- #


def test_create_makes_the_cluster_with_a_private_kubeconfig_and_waits_for_the_node(host):
    config = kind_config()

    done = host.create(config)

    assert done.returncode == 0, done.stderr
    [create] = host.kind_calls("create cluster")
    assert create[:6] == ["create", "cluster", "--name", NAME, "--config", "-"]
    assert create[6] == "--kubeconfig" and len(create) == 8
    assert (host.state / f"config-{NAME}").read_text() == config
    assert_private_kubeconfig_used_and_removed(host)
    assert host.docker_calls("wait") == [ready_wait()]
    # The wait comes after the create.
    assert host.calls("docker")[0][4] == "wait"
    assert "Creating cluster" in done.stderr and "Ensuring node image" in done.stderr
    assert f"node/{CONTROL_PLANE} condition met" in done.stderr


def test_create_prints_only_the_ipam_json_line_and_the_kubeconfig(host):
    done = host.create()

    assert done.returncode == 0, done.stderr
    assert done.stdout == IPAM + "\n" + admin_kubeconfig(NAME)
    first, rest = done.stdout.split("\n", 1)
    assert [entry["Subnet"] for entry in json.loads(first)] == ["fc00:f853:ccd:e793::/64", "172.18.0.0/16"]
    assert yaml.safe_load(rest)["current-context"] == f"kind-{NAME}"
    assert ["network", "inspect", "kind", "--format", "{{json .IPAM.Config}}"] in host.calls("docker")


def test_create_reuses_a_cluster_that_carries_this_stacks_marker(host):
    host.add_cluster(label=MARKER)

    done = host.create()

    assert done.returncode == 0, done.stderr
    assert host.kind_calls("create cluster") == []
    assert host.docker_calls("get") == [label_read()]
    assert "already exists and belongs to this stack" in done.stderr and "reusing it" in done.stderr
    # A reused cluster is waited for too (e.g. just restarted with the host).
    assert host.docker_calls("wait") == [ready_wait()]
    assert done.stdout == IPAM + "\n" + admin_kubeconfig(NAME)
    assert list(host.tmp.iterdir()) == []


@pytest.mark.parametrize("label", ["prod-stack", "", f"{MARKER}-old", MARKER[:-1]])
def test_create_refuses_a_cluster_of_another_owner_before_touching_anything(host, label):
    host.add_cluster(label=label)

    done = host.create()

    assert done.returncode == 1
    assert done.stdout == ""
    assert host.kind_calls("create cluster") == [] and host.kind_calls("delete cluster") == []
    assert host.kind_calls("get kubeconfig") == []
    assert host.docker_calls("wait") == [] and host.docker_calls("get") == [label_read()]
    assert not any(call[0] == "network" for call in host.calls("docker"))
    message = done.stderr
    assert f"kind cluster {NAME}" in message
    assert f"gpu-tenancy.io/stack='{MARKER}'" in message and f"gpu-tenancy.io/stack='{label}'" in message
    assert f"kind delete cluster --name {NAME}" in message
    assert "management.clusterName" in message
    assert (
        "pulumi config set --secret --path 'gpu-tenancy:management.kubeconfig' "
        f'"$(kind get kubeconfig --name {NAME})"'
    ) in message
    assert host.clusters() == [NAME]


@pytest.mark.parametrize("checkout", ["ffffffffffff", None])
def test_create_and_delete_refuse_the_same_stack_of_another_checkout(host, checkout):
    """A second clone with a stack of the same name, or a cluster made before the checkout label."""
    host.add_cluster(checkout=checkout)

    for done in (host.create(), host.delete()):
        assert done.returncode == 1, done.stderr
        assert f"gpu-tenancy.io/checkout='{CHECKOUT}'" in done.stderr and "does not belong to this stack" in done.stderr
    assert host.kind_calls("create cluster") == [] and host.kind_calls("delete cluster") == []
    assert host.clusters() == [NAME]


def test_a_stack_made_before_the_checkout_label_keeps_its_cluster_whatever_the_checkout(host):
    host.add_cluster(checkout="ffffffffffff")

    assert host.create(**{ns.KIND_CHECKOUT_ENV: None}).returncode == 0
    assert host.delete(**{ns.KIND_CHECKOUT_ENV: None}).returncode == 0
    assert host.kind_calls("delete cluster") != []


def test_create_refuses_an_existing_cluster_whose_label_cannot_be_read(host):
    host.add_cluster(running=False)

    done = host.create()

    assert done.returncode == 1
    assert (
        f"start it (docker start {CONTROL_PLANE}) or delete it by hand: kind delete cluster --name {NAME}"
        in done.stderr
    )
    assert "is not running" in done.stderr
    assert host.kind_calls("create cluster") == [] and done.stdout == ""


def test_create_matches_the_cluster_name_exactly(host):
    host.add_cluster(f"{NAME}-old", label="someone")
    host.add_cluster(f"x{NAME}", label="someone")

    done = host.create()

    assert done.returncode == 0, done.stderr
    assert len(host.kind_calls("create cluster")) == 1
    assert host.docker_calls("get") == []


def test_create_stops_when_kind_cannot_list_clusters(host):
    done = host.create(KIND_STUB_DOCKER_DOWN="1")

    assert done.returncode != 0
    assert "docker ps" in done.stderr
    assert host.kind_calls("create cluster") == [] and host.calls("docker") == []
    assert done.stdout == ""


def test_create_fails_when_the_node_never_gets_ready(host):
    done = host.create(DOCKER_WAIT="timeout", **{ns.KIND_WAIT_SECONDS_ENV: "42"})

    assert done.returncode == 1
    assert host.docker_calls("wait") == [ready_wait(42)]
    assert "timed out waiting for the condition" in done.stderr
    assert f"node {CONTROL_PLANE} is not Ready after 42s" in done.stderr
    # No kubeconfig is handed on for a cluster that is not ready.
    assert done.stdout == ""
    assert host.kind_calls("get kubeconfig") == []
    assert list(host.tmp.iterdir()) == []


def test_create_reports_a_failing_kind_create(host):
    done = host.create(KIND_STUB_CREATE_FAILS="1")

    assert done.returncode == 1
    assert "node(s) already exist" in done.stderr and "kind create cluster failed" in done.stderr
    assert done.stdout == "" and host.docker_calls("wait") == []
    assert list(host.tmp.iterdir()) == []


def test_create_uses_the_docker_provider_whatever_the_caller_set(host):
    done = host.create(KIND_EXPERIMENTAL_PROVIDER="podman")

    assert done.returncode == 0, done.stderr


def kind_node_proxy(host: Host) -> dict[str, str]:
    """The proxy variables kind gives its node: each of HTTP_PROXY, HTTPS_PROXY, NO_PROXY, upper case first (kind
    pkg/cluster/internal/providers/common/proxy.go getProxyEnvs; docker/provision.go getProxyEnv only appends)."""
    seen = dict(line.split("=", 1) for line in (host.state / f"proxy-{NAME}").read_text().splitlines())
    return {name: value for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
            if (value := seen.get(name) or seen.get(name.lower()))}


@pytest.mark.parametrize("proxy", [
    {"HTTPS_PROXY": "http://proxy.corp:3128"},
    {"http_proxy": "http://proxy.corp:3128", "no_proxy": "localhost,.corp.example"},
    {"HTTP_PROXY": "http://proxy.corp:3128", "HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": "10.0.0.0/8"},
])
def test_behind_a_proxy_the_kind_node_reaches_the_caches_directly(host, proxy):
    done = host.create(**proxy)

    assert done.returncode == 0, done.stderr
    node = kind_node_proxy(host)
    # Go's net/http, as containerd on the node uses it, asks the proxy for every host NO_PROXY does not name.
    assert [url for url in stack_mirrors(NAME).values() if proxy_for(url, node) is not None] == []
    assert proxy_for("https://registry-1.docker.io/v2/", {**node, "HTTPS_PROXY": "http://proxy.corp:3128"})
    own = proxy.get("NO_PROXY") or proxy.get("no_proxy")
    assert node["NO_PROXY"].startswith(f"{own}," if own else NAME)


def test_without_a_proxy_kind_gets_no_proxy_variables(host):
    done = host.create()

    assert done.returncode == 0, done.stderr
    # kind passes proxy variables to its node as soon as any of the three is set.
    assert kind_node_proxy(host) == {}


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (ns.KIND_WAIT_SECONDS_ENV, "5m", "KIND_WAIT_SECONDS must be a positive integer"),
        (ns.KIND_STACK_MARKER_ENV, "has space", "KIND_STACK_MARKER must be a label value"),
        (ns.KIND_CLUSTER_NAME_ENV, "Bad_Name", "KIND_CLUSTER_NAME must match"),
    ],
)
def test_create_rejects_malformed_values_before_calling_anything(host, variable, value, message):
    done = host.create(**{variable: value})

    assert done.returncode == 1
    assert message in done.stderr
    assert host.calls("kind") == [] and host.calls("docker") == []


# --------------------------------------------------------------------------- #
# kind-delete.sh
# --------------------------------------------------------------------------- #


def test_delete_removes_this_stacks_cluster_with_a_throwaway_kubeconfig(host):
    host.add_cluster(label=MARKER)
    host.add_cluster("lab", label="someone")

    done = host.delete()

    assert done.returncode == 0, done.stderr
    [delete] = host.kind_calls("delete cluster")
    assert delete[:4] == ["delete", "cluster", "--name", NAME] and delete[4] == "--kubeconfig" and len(delete) == 6
    assert_private_kubeconfig_used_and_removed(host)
    assert host.clusters() == ["lab"]
    # The throwaway file held the cluster's entry, so kind had something to remove: no ERROR line.
    assert "ERROR" not in done.stderr
    assert done.stdout == ""


def test_delete_tolerates_a_missing_cluster(host):
    host.add_cluster("lab", label="someone")

    done = host.delete()

    assert done.returncode == 0, done.stderr
    assert "does not exist: nothing to delete" in done.stderr
    assert host.kind_calls("delete cluster") == [] and host.calls("docker") == []
    assert host.clusters() == ["lab"]


@pytest.mark.parametrize("label", ["prod-stack", ""])
def test_delete_refuses_a_cluster_of_another_owner(host, label):
    host.add_cluster(label=label)

    done = host.delete()

    assert done.returncode == 1
    assert host.kind_calls("delete cluster") == []
    assert host.clusters() == [NAME]
    assert f"kind cluster {NAME}: does not belong to this stack" in done.stderr
    assert f"'{MARKER}'" in done.stderr
    assert f"kind delete cluster --name {NAME}" in done.stderr


def test_delete_of_a_stopped_cluster_says_how_to_go_on(host):
    host.add_cluster(running=False)

    done = host.delete()

    assert done.returncode == 1
    assert host.kind_calls("delete cluster") == []
    assert (
        f"start it (docker start {CONTROL_PLANE}) or delete it by hand: kind delete cluster --name {NAME}"
        in done.stderr
    )
    assert "is not running" in done.stderr


def test_delete_stops_when_kind_cannot_list_clusters(host):
    host.add_cluster()

    done = host.delete(KIND_STUB_DOCKER_DOWN="1")

    assert done.returncode != 0
    assert host.kind_calls("delete cluster") == [] and host.calls("docker") == []


def test_create_then_delete_leaves_the_host_as_it_was(host):
    assert host.create().returncode == 0
    done = host.delete()

    assert done.returncode == 0, done.stderr
    assert host.clusters() == []
    assert host.user_kubeconfig.read_text() == USER_KUBECONFIG
    assert list(host.tmp.iterdir()) == []


# --------------------------------------------------------------------------- #
# Both: required variables, and what they need from the host
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("script", "variable"),
    [
        (script, variable)
        for script, names in ((ns.KIND_CREATE, ns.KIND_CREATE_ENV), (ns.KIND_DELETE, ns.KIND_DELETE_ENV))
        for variable in names
        if variable != ns.KIND_WAIT_SECONDS_ENV
    ],
)
def test_a_missing_required_variable_is_named(host, script, variable):
    host.add_cluster()

    done = host.run(script, kind_config(), **{variable: None})

    assert done.returncode == 1
    assert done.stderr == f"gpu-tenancy: {script}: required environment variable(s) not set: {variable}\n"
    assert host.calls("kind") == [] and host.calls("docker") == []


@pytest.mark.parametrize("script", [ns.KIND_CREATE, ns.KIND_DELETE])
def test_both_variables_missing_are_named_together(host, script):
    done = host.run(script, **{ns.KIND_CLUSTER_NAME_ENV: None, ns.KIND_STACK_MARKER_ENV: None})

    assert done.returncode == 1
    assert "not set: KIND_CLUSTER_NAME KIND_STACK_MARKER" in done.stderr
