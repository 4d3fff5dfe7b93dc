"""The simulator's Docker host, each rule against the upstream behaviour it models (tests/support/sim/world.py
DockerHost, providers.py DockerContainerModel): how a container starts, restarts and reports its health, what
pulumi-docker's `wait` makes of that, how a Go program picks its proxy, and where containerd pulls from.

Small programs, not the project's: one rule per test, so a wrong rule fails here first.
"""

from __future__ import annotations

import pulumi
import pulumi_docker as docker
import pytest

from tests.support.sim import Lifecycle, World
from tests.support.sim.state import plain
from tests.support.sim.world import Container, Machine, UnreachableError, proxy_for

REGISTRY = "docker.io/library/registry:3.1.2"
QUAY = "https://quay.io"


def run_cache(world: World, env: tuple[str, ...] = (f"REGISTRY_PROXY_REMOTEURL={QUAY}",),
              restart: str = "unless-stopped") -> Container:
    """`docker run` of the registry image as a container `cache`."""
    cache = Container(name="cache", image=REGISTRY, network="kind", labels={}, env=env, restart=restart,
                      healthcheck=("CMD", "wget", "-q", "--spider", "http://127.0.0.1:5000/v2/"))
    world.docker.containers["cache"] = cache
    world.docker.start(cache)
    return cache


# --------------------------------------------------------------------------- #
# Start, exit, restart policy, health (moby daemon/start.go, monitor.go, health.go, container/state.go)
# --------------------------------------------------------------------------- #


def test_a_pull_through_cache_that_reaches_its_upstream_runs_and_is_healthy():
    world = World()
    cache = run_cache(world)
    assert cache.up and cache.health == "healthy" and cache.logs == []


def test_a_pull_through_cache_panics_at_start_without_its_upstream_and_waits_for_a_restart():
    # distribution registry/handlers/app.go: NewRegistryPullThroughCache's error (proxyauth.go getAuthURLs,
    # `GET <remoteurl>/v2/`) is a panic.
    world = World()
    world.docker.blocked_hosts.add("quay.io")
    cache = run_cache(world)
    assert cache.running and cache.restarting and not cache.up  # state.go SetRestarting: Running stays true
    assert cache.health == "starting" and cache.exit_code == 2
    assert cache.logs == ['panic: Get "https://quay.io/v2/": dial tcp: lookup quay.io: i/o timeout']
    world.end_of_operation()  # the back-off runs out: still no upstream, so it dies again
    assert cache.restarting and cache.restart_count == 1
    world.docker.blocked_hosts.clear()
    world.end_of_operation()
    assert cache.up and cache.health == "healthy" and cache.restart_count == 2


def test_without_a_restart_policy_a_dead_cache_stays_exited():
    world = World()
    world.docker.blocked_hosts.add("quay.io")
    cache = run_cache(world, restart="no")
    assert not cache.running and not cache.restarting
    world.end_of_operation()
    assert not cache.running and cache.restart_count == 0


def test_a_credential_helper_skips_the_start_up_probe():
    # proxyregistry.go: with Proxy.Exec set, configureExecAuth replaces configureAuth (and its GET /v2/).
    world = World()
    world.docker.blocked_hosts.add("quay.io")
    cache = run_cache(world, env=(f"REGISTRY_PROXY_REMOTEURL={QUAY}", "REGISTRY_PROXY_EXEC_COMMAND=/bin/helper"))
    assert cache.up


def test_only_the_registry_image_probes_an_upstream():
    world = World()
    world.docker.proxy_only = True
    node = Container(name="n", image="kindest/node:v1.35.0", network="kind", labels={},
                     env=(f"REGISTRY_PROXY_REMOTEURL={QUAY}",))
    world.docker.start(node)
    assert node.up and node.health is None


# --------------------------------------------------------------------------- #
# Proxies (golang.org/x/net/http/httpproxy)
# --------------------------------------------------------------------------- #


def test_go_takes_the_proxy_of_the_urls_scheme_upper_case_first():
    env = {"HTTPS_PROXY": "http://proxy:3128", "https_proxy": "http://other:3128", "http_proxy": "http://plain:80"}
    assert proxy_for("https://quay.io/v2/", env) == "http://proxy:3128"
    assert proxy_for("http://quay.io/v2/", env) == "http://plain:80"
    assert proxy_for("https://quay.io/v2/", {"https_proxy": "http://other:3128"}) == "http://other:3128"
    assert proxy_for("https://quay.io/v2/", {}) is None


@pytest.mark.parametrize(("no_proxy", "host", "bypassed"), [
    ("*", "quay.io", True),
    ("quay.io", "quay.io", True),
    ("quay.io", "cdn.quay.io", True),
    (".quay.io", "cdn.quay.io", True),
    (".quay.io", "quay.io", False),
    ("example.com, quay.io:443", "quay.io", True),
    ("example.com", "quay.io", False),
    ("ay.io", "quay.io", False),
    ("", "localhost", True),
    ("", "127.0.0.1", True),
])
def test_no_proxy_names_hosts_and_domains(no_proxy, host, bypassed):
    env = {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": no_proxy}
    assert (proxy_for(f"https://{host}/v2/", env) is None) == bypassed


def test_behind_a_proxy_only_a_program_given_it_gets_out():
    world = World()
    world.docker.proxy_only = True
    world.docker.proxies.add("http://proxy:3128")
    assert not world.docker.reaches(f"{QUAY}/v2/", {})
    assert world.docker.reaches(f"{QUAY}/v2/", {"HTTPS_PROXY": "http://proxy:3128"})
    assert not world.docker.reaches(f"{QUAY}/v2/", {"HTTPS_PROXY": "http://wrong:3128"})
    assert not world.docker.reaches(f"{QUAY}/v2/", {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "quay.io"})


# --------------------------------------------------------------------------- #
# pulumi-docker `wait` (terraform-provider-docker v4.5.0 resource_docker_container_funcs.go)
# --------------------------------------------------------------------------- #


def _cache_program(**container_args):
    def program():
        image = docker.RemoteImage("image", name=REGISTRY, keep_locally=True)
        docker.Container("cache", name="cache", image=image.image_id,
                         envs=[f"REGISTRY_PROXY_REMOTEURL={QUAY}"], restart="unless-stopped", **container_args)
    return program


HEALTHCHECK = docker.ContainerHealthcheckArgs(tests=["CMD", "wget", "-q", "--spider", "http://127.0.0.1:5000/v2/"])


def test_wait_on_a_cache_that_never_becomes_healthy_fails_the_up_and_keeps_the_container():
    world = World()
    world.docker.blocked_hosts.add("quay.io")
    sim = Lifecycle({}, world=world, program=_cache_program(healthcheck=HEALTHCHECK, wait=True, wait_timeout=120))
    plan = sim.up(expect_error=True)
    assert not plan.ok and "container failed to be in healthy state" in plan.render()
    assert world.docker.containers["cache"].restarting
    assert sim.resource("cache").init_error


def test_wait_needs_a_healthcheck():
    sim = Lifecycle({}, world=World(), program=_cache_program(wait=True))
    plan = sim.up(expect_error=True)
    assert "does not have a healthcheck defined" in plan.render()


def test_without_wait_a_restarting_cache_is_created():
    world = World()
    world.docker.blocked_hosts.add("quay.io")
    sim = Lifecycle({}, world=world, program=_cache_program(healthcheck=HEALTHCHECK))
    assert sim.up().ok
    assert world.docker.containers["cache"].restarting


# --------------------------------------------------------------------------- #
# containerd's registry hosts (core/remotes/docker/resolver.go, config/hosts.go)
# --------------------------------------------------------------------------- #

HOSTS_TOML = 'server = "https://quay.io"\n\n[host."http://cache:5000"]\n  capabilities = ["pull", "resolve"]\n'


def test_containerd_pulls_from_the_first_host_that_answers_then_the_server():
    world = World()
    world.machines["node"] = Machine(name="node", files={"/etc/containerd/certs.d/quay.io/hosts.toml": HOSTS_TOML})
    cache = run_cache(world)
    assert world.pull_source("node", "quay.io") == "http://cache:5000"
    cache.restarting = True
    assert world.pull_source("node", "quay.io") == QUAY
    del world.docker.containers["cache"]
    assert world.pull_source("node", "quay.io") == QUAY
    world.docker.blocked_hosts.add("quay.io")
    with pytest.raises(UnreachableError, match="tried http://cache:5000, https://quay.io"):
        world.pull_source("node", "quay.io")
    assert world.pull_source("node", "docker.io") == "https://registry-1.docker.io"  # no hosts.toml


# --------------------------------------------------------------------------- #
# Volumes (terraform-provider-docker v4.5.0 resource_docker_volume.go, moby volume/service/store.go)
# --------------------------------------------------------------------------- #


def _volume_program(ignore_changes: list[str]):
    def program():
        docker.Volume("v", name="cache", labels=[docker.VolumeLabelArgs(label="owner", value="me")],
                      opts=pulumi.ResourceOptions(ignore_changes=ignore_changes))
    return program


def test_a_volume_that_exists_comes_back_with_its_own_labels_which_force_a_new_one():
    world = World()
    world.docker.volumes["cache"] = {"owner": "other"}
    sim = Lifecycle({}, world=world, program=_volume_program([]))
    sim.up()
    assert plain(sim.resource("v").outputs["labels"]) == [{"label": "owner", "value": "other"}]
    assert "v" in sim.up().names("replace")  # the state's labels against the config's, every time


def test_ignore_changes_drops_the_labels_from_the_volumes_diff():
    world = World()
    world.docker.volumes["cache"] = {"owner": "other"}
    sim = Lifecycle({}, world=world, program=_volume_program(["labels"]))
    sim.up()
    assert sim.up().changed() == {}


def test_a_new_volume_keeps_the_labels_it_was_given():
    world = World()
    sim = Lifecycle({}, world=world, program=_volume_program([]))
    sim.up()
    assert world.docker.volumes["cache"] == {"owner": "me"} and sim.up().changed() == {}
