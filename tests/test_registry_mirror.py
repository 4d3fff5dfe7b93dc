"""The lab's pull-through image caches (components/management/image_cache.py).

What the program registers is read from a plain-mocks run; each lifecycle test is one operation a user runs on the
simulator, whose Docker host shows where the caches, their volume and each node's containerd configuration end up.
"""

from __future__ import annotations

import copy

import pytest

from components.management.image_cache import (
    CACHE_PATH,
    CACHE_TTL,
    DEBUG_ADDRESS,
    MIRRORED_REGISTRIES,
    REGISTRY_IMAGE,
    cache_container_name,
    cache_volume_name,
    carries_credentials,
    hosts_toml,
    registries_of,
    stack_mirrors,
)
from components.shell import CONFIGURE_CONTAINERD_ENV
from config.models import KIND_NODE_IMAGES
from ops.graph import generated_config
from tests.support.lifecycle_support import adopt_lab, kind_lab, one_tenant_stack, running_kind_lab
from tests.support.mockrun import reference_stack, registered
from tests.support.sim.state import plain
from tests.support.sim.world import MIRROR_MARKER
from tests.support.ssh_worker import program_values

CLUSTER = "gpu-tenancy"
CERTS_D = "/etc/containerd/certs.d"


def mirror_files(machine) -> dict[str, str]:
    return {path: text for path, text in machine.files.items() if path.startswith(CERTS_D)}


def cache_containers(world) -> dict[str, object]:
    return {name: c for name, c in world.docker.containers.items() if c.labels.get("gpu-tenancy.role") == "image-mirror"}


@pytest.fixture(scope="module")
def running():
    return running_kind_lab()


@pytest.fixture(scope="module")
def lab():
    """What the program registers for the reference lab (plain mocks)."""
    return registered(reference_stack())


def test_every_node_pulls_through_a_cache_on_the_kind_network(running):
    world = running.world
    caches = cache_containers(world)
    assert set(caches) == {cache_container_name(CLUSTER, registry) for registry in MIRRORED_REGISTRIES}
    for cache in caches.values():
        assert cache.network == "kind" and cache.volumes == (cache_volume_name(CLUSTER),)
    nodes = [f"{CLUSTER}-control-plane"] + [f"{t['name']}-{w['name']}" for t in running.config["tenants"]
                                             for w in t["workers"]]
    for node in nodes:
        files = mirror_files(world.machines[node])
        assert set(files) == {f"{CERTS_D}/{registry}/hosts.toml" for registry in MIRRORED_REGISTRIES}, node
        for registry in MIRRORED_REGISTRIES:
            text = files[f"{CERTS_D}/{registry}/hosts.toml"]
            mirror = f"http://{cache_container_name(CLUSTER, registry)}:5000"
            assert f'[host."{mirror}"]' in text and text == hosts_toml(registry, mirror)


def test_the_output_names_every_node_with_mirror_files_for_verify(running):
    configured = sorted(name for name, machine in running.world.machines.items() if mirror_files(machine))
    output = running.output("imageMirror")
    assert sorted(output["nodes"]) == configured and configured
    assert {registry: cache["url"] for registry, cache in output["caches"].items()} == stack_mirrors(CLUSTER)


def test_the_caches_are_exactly_the_registries_the_platform_pulls_from():
    from config import load_stack_config
    from tests.test_images import platform_images

    dev = reference_stack()
    images = platform_images(load_stack_config(dev))
    assert images, "the inventory is empty"
    # Every cache serves some image of the lab (a cache nobody uses only adds an upstream it needs at start) ...
    assert registries_of(images) == set(MIRRORED_REGISTRIES)
    # ... and no variant of the lab pulls from a registry without one.
    variant = copy.deepcopy(dev)
    variant["tenants"][1]["dataStore"] = {"dedicated": True}
    assert registries_of(platform_images(load_stack_config(variant))) <= set(MIRRORED_REGISTRIES)


def test_registries_of_normalises_like_containerd():
    assert registries_of(["calico/node:v3", "nginx", "quay.io/x/y:1", "registry.k8s.io/pause:3.10.1",
                          "localhost:5000/a", "ghcr.io/o/i@sha256:" + "0" * 64]) == {
        "docker.io", "quay.io", "registry.k8s.io", "localhost:5000", "ghcr.io"}


def test_installs_on_the_management_cluster_wait_for_the_kind_node_to_use_the_caches(lab):
    run = lab
    node_config = run.named("image-mirror-kind-node")
    for release in run.of_type("kubernetes:helm.sh/v3:Release"):
        if release.name.startswith("kamaji"):
            assert run.depends_on(release, node_config), release.name
    for worker in ("tenant-a-worker-0", "tenant-b-worker-0"):
        assert run.depends_on(run.named(f"{worker}-join"), run.named(f"{worker}-mirrors"))


def test_the_cache_count_does_not_grow_with_tenants():
    def caches(tenants: int) -> int:
        run = registered(generated_config(tenants), preview=True)
        return len([r for r in run.of_type("docker:index/container:Container") if r.name.startswith("image-mirror")])

    # Four times the tenants is enough to show a per-tenant cache (a run of 32 costs 8 s of CPU, 8 a quarter).
    assert caches(2) == caches(8) == len(MIRRORED_REGISTRIES)


def test_the_cache_image_is_pinned_and_the_registry_config_is_set_by_environment(lab):
    run = lab
    image = run.named("image-mirror-image")
    assert image.inputs["name"] == REGISTRY_IMAGE and "@sha256:" in REGISTRY_IMAGE
    docker_io = run.named("image-mirror-docker-io")
    env = dict(entry.split("=", 1) for entry in docker_io.inputs["envs"])
    assert env["REGISTRY_PROXY_REMOTEURL"] == "https://registry-1.docker.io"
    assert env["REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY"] == f"{CACHE_PATH}/docker.io"
    assert not any(key.startswith("REGISTRY_PROXY_USERNAME") for key in env)
    assert not docker_io.inputs.get("ports"), "the caches answer on the kind network only"


def test_destroy_keeps_the_cache_volume_and_the_next_up_uses_it_again():
    sim = running_kind_lab(one_tenant=True)
    sim.destroy()
    # Exactly what docs/operations.md says stays (the network is kind's, the images are kept for the next up).
    assert sim.world.leftovers() == [
        "network kind", f"image {REGISTRY_IMAGE}", f"image {KIND_NODE_IMAGES['v1.35.0']}",
        f"volume {cache_volume_name(CLUSTER)}",
    ]
    plan = sim.up()
    assert plan.ok and "image-mirror-cache" in plan.names("create")
    assert sim.up().changed() == {}


def test_a_cache_volume_another_stack_left_is_adopted_not_replaced_on_every_up():
    # A stack of the same clusterName made the volume (labelled with its name) and was destroyed; Docker
    # answers this stack's create with that volume, labels and all.
    sim = kind_lab(one_tenant_stack())
    sim.world.docker.volumes[cache_volume_name(CLUSTER)] = {"gpu-tenancy.stack": "lab-a"}
    assert "image-mirror-cache" in sim.up(env=NO_PROXY_ENV).names("create")
    assert sim.up(env=NO_PROXY_ENV).changed() == {}
    assert sim.world.docker.volumes[cache_volume_name(CLUSTER)] == {"gpu-tenancy.stack": "lab-a"}


def test_switching_the_mirror_off_removes_the_caches_and_every_nodes_files():
    sim = running_kind_lab()
    sim.config.setdefault("management", {})["imageMirror"] = False
    plan = sim.up()
    assert plan.names("delete") and not (plan.names("create") | plan.names("replace")), plan.render()
    assert all("mirror" in name for name in plan.names("delete") | plan.names("update"))
    assert cache_containers(sim.world) == {}
    for node in ("tenant-a-worker-0", "tenant-b-worker-0"):
        assert mirror_files(sim.world.machines[node]) == {}
    assert sim.up().changed() == {}


def test_docker_hub_credentials_reach_only_the_docker_io_cache_as_a_secret():
    config = copy.deepcopy(reference_stack())
    config.setdefault("management", {})["dockerHub"] = {"username": "platform-team", "token": "dckr_pat_s3cr3t"}
    run = registered(config, secret_keys=["management"])
    docker_io = run.named("image-mirror-docker-io")
    assert docker_io.is_secret("envs")
    assert "REGISTRY_PROXY_PASSWORD=dckr_pat_s3cr3t" in docker_io.inputs["envs"]
    for resource in run.resources:
        if resource.name != "image-mirror-docker-io":
            assert "dckr_pat_s3cr3t" not in repr(resource.inputs), resource.name


def test_adopt_mode_creates_no_cache_and_ssh_workers_use_the_configured_mirrors():
    sim = adopt_lab(one_tenant=True)
    mirrors = {"docker.io": "http://mirror.corp.example:5000", "quay.io": "https://quay-cache.corp.example"}
    sim.config["management"]["registryMirrors"] = mirrors
    sim.config["management"]["allowHttpMirrors"] = True
    sim.up()
    assert cache_containers(sim.world) == {}
    assert not [r for r in sim.resources() if r.name.startswith("image-mirror")]
    hosts = [host for host in sim.world.ssh.values()]
    assert hosts
    for host in hosts:
        assert mirror_files(host.machine) == {f"{CERTS_D}/{r}/hosts.toml": hosts_toml(r, m, machine=True)
                                              for r, m in mirrors.items()}
        # The plain-HTTP mirror serves layers only; tags are resolved at the registry over HTTPS.
        assert 'capabilities = ["pull"]\n' in host.machine.files[f"{CERTS_D}/docker.io/hosts.toml"]
    sim.destroy()
    assert sim.world.leftovers() == []
    assert all(not any(t.startswith(MIRROR_MARKER) for t in h.machine.files.values()) for h in hosts)


@pytest.mark.parametrize("configure", [True, False])
def test_configure_containerd_reaches_the_mirror_command_of_ssh_workers_only_when_set(configure):
    sim = adopt_lab(one_tenant=True)
    sim.config["management"]["registryMirrors"] = {"docker.io": "https://mirror.corp.example"}
    if configure:
        sim.config["management"]["configureContainerd"] = True
    sim.up()
    commands = [r for r in sim.resources() if r.name.endswith("-mirrors")]
    assert commands
    for command in commands:
        values = program_values(plain(command.inputs["stdin"]))
        assert values["create"].get(CONFIGURE_CONTAINERD_ENV) == ("true" if configure else None)
        assert CONFIGURE_CONTAINERD_ENV not in values["delete"]


def test_an_ssh_worker_with_its_own_hosts_toml_fails_the_up_with_the_fix():
    sim = adopt_lab(one_tenant=True)
    sim.config["management"]["registryMirrors"] = {"docker.io": "https://mirror.corp.example"}
    host = next(iter(sim.world.ssh.values()))
    host.machine.files[f"{CERTS_D}/docker.io/hosts.toml"] = 'server = "https://registry-1.docker.io"\n'
    plan = sim.up(expect_error=True)
    assert not plan.ok and "was not written by gpu-tenancy" in plan.render()
    assert host.machine.files[f"{CERTS_D}/docker.io/hosts.toml"] == 'server = "https://registry-1.docker.io"\n'


def test_adopt_mode_refuses_a_plain_http_mirror_before_anything_runs():
    sim = adopt_lab(one_tenant=True)
    sim.config["management"]["registryMirrors"] = {"docker.io": "http://mirror.corp.example:5000"}
    plan = sim.up(expect_error=True)
    assert not plan.ok and "management.registryMirrors.docker.io" in plan.render()
    assert "management.allowHttpMirrors" in plan.render()
    assert all(not any(t.startswith(MIRROR_MARKER) for t in h.machine.files.values()) for h in sim.world.ssh.values())


def test_stack_mirrors_name_one_cache_per_registry():
    assert stack_mirrors("lab") == {
        "docker.io": "http://lab-mirror-docker-io:5000",
        "quay.io": "http://lab-mirror-quay-io:5000",
        "registry.k8s.io": "http://lab-mirror-registry-k8s-io:5000",
    }


def test_the_debug_server_listens_on_each_caches_loopback_where_verify_reads_it(lab):
    # expvar, pprof and metrics are unauthenticated (distribution registry/registry.go configureDebugServer,
    # Go's default mux); the image's own config binds them to every interface (:5001).
    from ops.verify import MIRROR_DEBUG_URL

    run = lab
    for registry in MIRRORED_REGISTRIES:
        env = dict(entry.split("=", 1) for entry in run.named(f"image-mirror-{registry.replace('.', '-')}").inputs["envs"])
        assert env["REGISTRY_HTTP_DEBUG_ADDR"] == DEBUG_ADDRESS == "127.0.0.1:5001"
    assert MIRROR_DEBUG_URL.startswith(f"http://{DEBUG_ADDRESS}/")


def test_the_caches_evict_what_they_hold_after_a_week(lab):
    # distribution configuration.go Proxy.TTL 0 "will never expire cache". Expiry deletes through the local
    # storage (registry/proxy/proxyregistry.go OnBlobExpire), which refuses unless storage.delete.enabled.
    run = lab
    for registry in MIRRORED_REGISTRIES:
        cache = run.named(f"image-mirror-{registry.replace('.', '-')}")
        env = dict(entry.split("=", 1) for entry in cache.inputs["envs"])
        assert env["REGISTRY_PROXY_TTL"] == CACHE_TTL == "168h"
        assert env["REGISTRY_STORAGE_DELETE_ENABLED"] == "true"


def test_a_dedicated_etcd_pulls_its_images_through_the_cache_too():
    config = copy.deepcopy(reference_stack())
    config["tenants"][1]["dataStore"] = {"dedicated": True}
    run = registered(config)
    assert run.depends_on(run.named("tenant-b-etcd"), run.named("image-mirror-kind-node"))


# --------------------------------------------------------------------------- #
# A cache fails soft: it never takes `pulumi up` down with it
# --------------------------------------------------------------------------- #

# No proxy in the environment `pulumi up` runs in, whatever the test runner's own environment holds.
NO_PROXY_ENV = {name: "" for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                                      "no_proxy")}
CORPORATE_PROXY = "http://proxy.corp.example:3128"
KIND_NODE = f"{CLUSTER}-control-plane"


def test_a_cache_whose_upstream_is_down_at_start_does_not_fail_the_up_and_nodes_fall_back():
    sim = kind_lab(one_tenant_stack())
    sim.world.docker.blocked_hosts.add("quay.io")  # an outage during the first `make up`
    plan = sim.up(env=NO_PROXY_ENV)
    assert plan.ok, plan.render()
    quay = sim.world.docker.containers[cache_container_name(CLUSTER, "quay.io")]
    assert quay.restarting and quay.logs[-1].startswith('panic: Get "https://quay.io/v2/"')
    assert all(c.up for r, c in cache_containers(sim.world).items() if r != quay.name)
    # The outage ends. Until Docker restarts the cache, the node pulls quay.io from quay.io itself ...
    sim.world.docker.blocked_hosts.clear()
    assert sim.world.pull_source(KIND_NODE, "quay.io") == "https://quay.io"
    # ... and through the cache once it is back, with no `make up` in between.
    sim.world.end_of_operation()
    assert quay.up and sim.world.pull_source(KIND_NODE, "quay.io") == stack_mirrors(CLUSTER)["quay.io"]
    assert sim.up(env=NO_PROXY_ENV).changed() == {}


def test_behind_a_proxy_the_caches_get_the_proxy_of_the_up_and_start():
    sim = kind_lab(one_tenant_stack())
    sim.world.docker.proxy_only = True
    sim.world.docker.proxies.add(CORPORATE_PROXY)
    env = {**NO_PROXY_ENV, "HTTPS_PROXY": CORPORATE_PROXY, "no_proxy": "localhost,.corp.example"}
    assert sim.up(env=env).ok
    caches = cache_containers(sim.world)
    assert caches and all(cache.up for cache in caches.values())
    for cache in caches.values():
        # Both spellings, as kind gives them to its node (pkg/cluster/internal/providers/common/proxy.go).
        assert {f"HTTPS_PROXY={CORPORATE_PROXY}", f"https_proxy={CORPORATE_PROXY}",
                "NO_PROXY=localhost,.corp.example", "no_proxy=localhost,.corp.example"} <= set(cache.env)
        assert not any(entry.lower().startswith("http_proxy=") for entry in cache.env)
    assert sim.up(env=env).changed() == {}


def test_a_proxy_password_keeps_the_cache_environments_secret():
    from tests.support.sim.state import contains_secret

    sim = kind_lab(one_tenant_stack())
    proxy = "http://svc:pr0xy-pw@proxy.corp.example:3128"
    sim.world.docker.proxies.add(proxy)  # it forwards (the chart repositories are reached through it too)
    sim.up(env={**NO_PROXY_ENV, "HTTPS_PROXY": proxy})
    for registry in MIRRORED_REGISTRIES:
        assert contains_secret(sim.resource(f"image-mirror-{registry.replace('.', '-')}").inputs["envs"]), registry
    caches = {f"image-mirror-{registry.replace('.', '-')}" for registry in MIRRORED_REGISTRIES}
    plain_inputs = [repr(r.inputs) for r in sim.resources() if r.name not in caches]
    assert not any("pr0xy-pw" in text for text in plain_inputs)
    # Without a password the environment stays readable (`pulumi preview` shows it).
    assert not carries_credentials(["HTTPS_PROXY=http://proxy.corp.example:3128", "NO_PROXY=localhost"])
    assert carries_credentials(["https_proxy=svc:pw@proxy:3128"])
