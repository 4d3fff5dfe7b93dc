"""RegistryMirror: one pull-through cache per upstream registry on the Docker host, shared by every node.

Every kindest/node container starts with an empty image store, so without a cache each node pulls Calico,
HAMi, kube-proxy, CoreDNS, the Konnectivity agent and pause from the internet by itself. In the kind lab this
component runs, on the kind network, one CNCF distribution registry in proxy mode per upstream registry (a
registry instance mirrors exactly one upstream: distribution docs/content/recipes/mirror.md, and
configuration.go's single `Proxy` struct). Their cache lives in one named Docker volume that `pulumi destroy`
keeps (retain_on_delete), so the next `make up` pulls from the internet only what the cache does not hold.

Nodes use the caches through containerd's registry host configuration, written by
components/worker/scripts/node-mirrors.sh: `/etc/containerd/certs.d/<registry>/hosts.toml` tries the cache first and
falls back to the registry itself (containerd docs/hosts.md, "server" as fallback). kindest/node's containerd
2.x reads that directory without any config change (its default config_path) and re-reads it on every pull.

The caches are an optimisation, never a dependency: `pulumi up` does not wait for them, and a node whose cache
does not answer pulls from the registry itself. A cache needs its upstream at start-up (distribution panics when
`GET <remoteurl>/v2/` fails, then Docker restarts it until it can), so it gets the proxy variables of the
environment `pulumi up` runs in, as kind gives them to its node.

The number of caches does not depend on the number of tenants: three containers and one volume per lab.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import pulumi
import pulumi_docker as docker

import config
from components import shell
from components.worker.access import NodeAccess, NodeScript, run_on_node
from naming import COMPONENT_PREFIX, KIND_NETWORK, LABEL_ROLE, LABEL_STACK, node_name

# Registry host -> the upstream URL its cache proxies: exactly the registries the platform's images come from
# (components/images.py lists them per node; tests/test_registry_mirror.py checks both ways). A cache nobody
# pulls through would only add a container that needs one more upstream at start.
MIRRORED_REGISTRIES: dict[str, str] = {
    "docker.io": "https://registry-1.docker.io",
    "quay.io": "https://quay.io",
    "registry.k8s.io": "https://registry.k8s.io",
}
# kind pkg/cluster/internal/providers/common/proxy.go: these, each read upper case first, then lower case, and
# passed in both spellings. distribution's upstream client is net/http's default transport, which reads them.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
# The Docker official image of distribution, pinned by the digest docker-library/repo-info records for
# registry:3.1.2 (repos/registry/remote/3.md).
REGISTRY_IMAGE = (
    "docker.io/library/registry:3.1.2@sha256:852b3e4d378c426dda6b318fe9d9bfe8e92a0eccb9926671ec3d3ea17a196696"
)
PORT = 5000
# The image's default config (distribution-library-image config-example.yml) serves Prometheus metrics and
# expvar JSON (`registry.proxy.*` hits and misses) on this debug port, with Go's default mux, so pprof too
# (distribution registry/registry.go configureDebugServer). It listens on the container's loopback only
# (DEBUG_ADDRESS): nothing on the kind network reaches it; `make verify` reads it with `docker exec`.
DEBUG_PORT = 5001
DEBUG_ADDRESS = f"127.0.0.1:{DEBUG_PORT}"
CACHE_PATH = "/var/lib/registry"
# How long a cache keeps a blob or manifest after pulling it (distribution's own default).
CACHE_TTL = "168h"
# Where a node's own registry configuration lives (containerd's default config_path, first entry).
CERTS_D = "/etc/containerd/certs.d"


def upstream_server(registry: str) -> str:
    """The URL containerd falls back to for `registry` (docker.io's API lives at registry-1.docker.io)."""
    return MIRRORED_REGISTRIES.get(registry, f"https://{registry}")


def cache_container_name(cluster: str, registry: str) -> str:
    """`<cluster>-mirror-docker-io`: a DNS label, which the kind network's DNS resolves on every node."""
    return f"{cluster}-mirror-{registry.replace('.', '-').replace(':', '-')}"


def cache_volume_name(cluster: str) -> str:
    return f"{cluster}-image-cache"


def stack_mirrors(cluster: str) -> dict[str, str]:
    """Registry host -> the URL of this lab's cache for it, as nodes on the kind network reach it."""
    return {registry: f"http://{cache_container_name(cluster, registry)}:{PORT}" for registry in MIRRORED_REGISTRIES}


def mirror_lines(mirrors: Mapping[str, str]) -> str:
    """node-mirrors.sh's REGISTRY_MIRRORS: "<registry> <upstream server> <mirror URL>" per line, sorted."""
    return "".join(f"{registry} {upstream_server(registry)} {mirrors[registry]}\n" for registry in sorted(mirrors))


def mirror_resolves(mirror: str, machine: bool) -> bool:
    """Whether containerd may take tag -> digest answers from `mirror` (the `resolve` capability): never from a
    plain-HTTP mirror on a real machine, where anyone on the path could answer (containerd docs/hosts.md); blobs are
    still pulled from it by digest, which containerd verifies. The lab's caches (`machine` False) are on the
    Docker host's own bridge."""
    return not (machine and mirror.startswith("http://"))


def hosts_toml(registry: str, mirror: str, machine: bool = False) -> str:
    """The hosts.toml node-mirrors.sh writes for `registry` (its marker line first)."""
    capabilities = '"pull", "resolve"' if mirror_resolves(mirror, machine) else '"pull"'
    return (
        "# gpu-tenancy image mirror: written by node-mirrors.sh, removed with it\n"
        f'server = "{upstream_server(registry)}"\n\n'
        f'[host."{mirror}"]\n'
        f"  capabilities = [{capabilities}]\n"
    )


def proxy_environment(environ: Mapping[str, str]) -> list[str]:
    """The proxy variables a cache gets from `environ` (the Pulumi host's), as kind passes them to its node."""
    env = []
    for name in PROXY_VARIABLES:
        value = environ.get(name) or environ.get(name.lower())
        if value:
            env += [f"{name}={value}", f"{name.lower()}={value}"]
    return env


def carries_credentials(env: Sequence[str]) -> bool:
    """Whether an environment holds a secret: a Docker Hub token or a proxy URL with a password in it."""
    for entry in env:
        name, _, value = entry.partition("=")
        if name == "REGISTRY_PROXY_PASSWORD":
            return True
        if name.upper() in ("HTTP_PROXY", "HTTPS_PROXY"):
            try:
                if urlsplit(value if "://" in value else f"http://{value}").password is not None:
                    return True
            except ValueError:
                return True  # unparsable: treat as secret rather than print it
    return False


def cache_environment(registry: str, credentials: config.models.DockerHubCredentials | None,
                      proxy: Sequence[str] = ()) -> list[str]:
    """The registry's configuration, as distribution's REGISTRY_<SECTION>_<KEY> environment overrides, and the
    proxy variables (`proxy_environment`)."""
    env = [
        f"REGISTRY_PROXY_REMOTEURL={MIRRORED_REGISTRIES[registry]}",
        # One volume for all caches, one directory each.
        f"REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY={CACHE_PATH}/{registry}",
        # Tracing is off in the official image's Dockerfile; the registry would otherwise try to export spans.
        "OTEL_TRACES_EXPORTER=none",
        # The debug server (expvar, pprof, metrics) on the container's loopback, not on the kind network.
        f"REGISTRY_HTTP_DEBUG_ADDR={DEBUG_ADDRESS}",
        # Evict what was pulled a week ago, so that what anyone pulls through the cache does not stay on the host disk
        # for good (configuration.go Proxy.TTL: "if set to zero, will never expire cache"). Tags are resolved
        # upstream first (registry/proxy/proxytagservice.go), so a moved tag is followed either way.
        f"REGISTRY_PROXY_TTL={CACHE_TTL}",
        # Expiry deletes through the local storage, which refuses unless deletes are enabled
        # (registry/proxy/proxyregistry.go OnBlobExpire -> linkedBlobStore.Delete: ErrUnsupported), so without
        # this nothing would ever be evicted. Clients still cannot delete: a cache answers DELETE with UNSUPPORTED
        # (registry/handlers/manifests.go isCache; registry/proxy/proxyblobstore.go Delete).
        "REGISTRY_STORAGE_DELETE_ENABLED=true",
    ]
    if credentials is not None and registry == "docker.io":
        env += [f"REGISTRY_PROXY_USERNAME={credentials.username}", f"REGISTRY_PROXY_PASSWORD={credentials.token}"]
    return env + list(proxy)


def configure_node(
    name: str,
    access: NodeAccess,
    mirrors: Mapping[str, str],
    *,
    machine: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    configure_containerd: bool = False,
) -> pulumi.Resource:
    """A Command writing the node's hosts.toml files for `mirrors` (and removing them on delete).

    `machine` identifies the node's machine (a container id, an SSH host): a new machine is configured again.
    `configure_containerd` (SSH workers, management.configureContainerd) lets the script point a containerd 2.x
    that ignores /etc/containerd/certs.d at it and restart containerd; its delete takes that back.
    """
    script = shell.NODE_MIRRORS
    kind = shell.NODE_KIND_MACHINE if access.is_ssh else shell.NODE_KIND_CONTAINER
    create = {shell.NODE_NAME_ENV: access.node_name, shell.REGISTRY_MIRRORS_ENV: mirror_lines(mirrors),
              shell.NODE_KIND_ENV: kind}
    if configure_containerd and access.is_ssh:
        create[shell.CONFIGURE_CONTAINERD_ENV] = "true"
    return run_on_node(
        name,
        access,
        create=NodeScript(script, create),
        delete=NodeScript(script, {shell.NODE_NAME_ENV: access.node_name,
                                   shell.REGISTRY_MIRRORS_ENV: ""}),
        triggers=[machine],
        opts=opts,
    )


@dataclass
class RegistryMirrorArgs:
    cluster_name: str
    # The kind cluster command: the kind network exists once it has run, and its node is configured after.
    cluster: pulumi.Resource
    # The docker.io cache's Docker Hub account (secret token), or None to pull anonymously.
    docker_hub: config.models.DockerHubCredentials | None = None
    network_name: str = KIND_NETWORK


class RegistryMirror(pulumi.ComponentResource):
    """The lab's pull-through caches and the kind node's use of them.

    `mirrors` is what container workers configure (registry -> cache URL); `node_ready` is what installs on the
    management cluster wait for (the kind node pulls through the caches).
    """

    mirrors: dict[str, str]
    caches: list[docker.Container]
    node_ready: list[pulumi.Resource]

    def __init__(self, name: str, args: RegistryMirrorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{COMPONENT_PREFIX}:RegistryMirror", name, None, opts)
        cluster = args.cluster_name
        stack = pulumi.get_stack()
        labels = [docker.ContainerLabelArgs(label=LABEL_STACK, value=stack),
                  docker.ContainerLabelArgs(label=LABEL_ROLE, value="image-mirror")]
        image = docker.RemoteImage(
            f"{name}-image",
            name=REGISTRY_IMAGE,
            # Another stack's caches on this host may run the same image.
            keep_locally=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        volume = docker.Volume(
            f"{name}-cache",
            # The name alone identifies it: any stack of this cluster name uses the same cache.
            name=cache_volume_name(cluster),
            opts=pulumi.ResourceOptions(
                parent=self,
                # The point of the cache: it outlives `make down`. `docker volume rm <name>` clears it; creating a
                # volume whose name exists returns that volume (the next `make up` finds the cache again).
                retain_on_delete=True,
                # `labels` forces a new volume, and Create stores the labels Docker reports, which for a volume
                # that exists are its own (terraform-provider-docker v4.5.0 resource_docker_volume.go; moby
                # volume/service/store.go returns the existing volume). A volume an older version of this
                # program or another stack labelled would otherwise be "replaced" on every `up`.
                # `name` is kept as first stored: a `management.clusterName` change would otherwise replace the
                # volume, and the retained old one, full of layers, would never be named again. The renamed lab
                # keeps pulling through the cache it has (step_generator.go processIgnoreChanges keeps ignored
                # inputs from the old state).
                ignore_changes=["labels", "name"],
            ),
        )
        self.mirrors = stack_mirrors(cluster)
        self.caches = []
        # Registry -> cache container name, resolved once the container exists.
        self.containers: dict[str, pulumi.Output[str]] = {}
        # The environment `pulumi up` runs in (a change replaces the caches: docker_container `env` is ForceNew).
        proxy = proxy_environment(os.environ)
        for registry in MIRRORED_REGISTRIES:
            env = cache_environment(registry, args.docker_hub, proxy)
            self.caches.append(docker.Container(
                f"{name}-{registry.replace('.', '-')}",
                name=cache_container_name(cluster, registry),
                image=image.image_id,
                envs=pulumi.Output.secret(env) if carries_credentials(env) else env,
                volumes=[docker.ContainerVolumeArgs(volume_name=volume.name, container_path=CACHE_PATH)],
                networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=args.network_name)],
                # A cache whose upstream does not answer at start exits (distribution registry/handlers/app.go
                # panics on NewRegistryPullThroughCache's error); Docker starts it again until it stays up.
                restart="unless-stopped",
                # `docker ps` shows (healthy) once it answers the registry API (busybox wget is in the image).
                # No `wait`: a cache is an optimisation, and containerd falls back to the registry itself while
                # its cache does not answer (hosts.toml `server`; containerd core/remotes/docker/resolver.go
                # "trying next host"), so a dead cache must not fail `pulumi up`
                # (terraform-provider-docker v4.5.0 resource_docker_container_funcs.go: wait fails the create).
                healthcheck=docker.ContainerHealthcheckArgs(
                    tests=["CMD", "wget", "-q", "--spider", f"http://127.0.0.1:{PORT}/v2/"],
                    interval="2s", timeout="2s", retries=30,
                ),
                labels=labels,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    # The kind network exists once the cluster does.
                    depends_on=[args.cluster],
                    # Fixed name: the old container must be gone before its replacement starts.
                    delete_before_replace=True,
                ),
            ))
            self.containers[registry] = self.caches[-1].name
        node = f"{cluster}-control-plane"
        self.node_ready = [configure_node(
            f"{name}-kind-node",
            NodeAccess(node_name=node, container_name=node),
            self.mirrors,
            # A replaced cluster is a new node: configure it again.
            machine=args.cluster.id,  # type: ignore[attr-defined]
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.caches, deleted_with=args.cluster),
        )]
        self.register_outputs({"mirrors": self.mirrors, "volume": volume.name})


def mirrored_nodes(stack: config.StackConfig) -> list[str]:
    """The lab's nodes that pull through its caches, as Docker names their containers: the kind node, then every
    container worker (`make verify` reads their hosts.toml)."""
    if not stack.management.runs_image_mirror:
        return []
    return [f"{stack.management.cluster_name}-control-plane",
            *(node_name(tenant.name, worker.name) for tenant in stack.tenants for worker in tenant.workers
              if worker.ssh is None)]


def mirror_outputs(mirror: RegistryMirror, stack: config.StackConfig) -> dict[str, object]:
    """The `imageMirror` stack output: each cache (registry -> container, URL) and the nodes using them."""
    return {
        "caches": {registry: {"container": container, "url": mirror.mirrors[registry]}
                   for registry, container in mirror.containers.items()},
        "nodes": mirrored_nodes(stack),
    }


def worker_mirrors(management: config.Management, worker: config.Worker) -> dict[str, str]:
    """The mirrors a worker pulls through: the lab's caches (container workers), `registryMirrors` (SSH)."""
    if worker.ssh is not None:
        return dict(management.registry_mirrors)
    return stack_mirrors(management.cluster_name) if management.runs_image_mirror else {}


def registries_of(images: Sequence[str]) -> set[str]:
    """The registry hosts of image references (`calico/node:v3` is docker.io's, as containerd normalises it)."""
    hosts = set()
    for image in images:
        first, _, rest = image.partition("/")
        hosts.add(first if rest and ("." in first or ":" in first or first == "localhost") else "docker.io")
    return hosts
