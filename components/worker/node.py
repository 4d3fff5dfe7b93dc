"""WorkerNode: a worker joined to a tenant's hosted control plane -- a local container or a real machine.

A worker without `ssh` is a kindest/node container on the kind network, started the way kind starts its own
nodes (kubernetes-sigs/kind pkg/cluster/internal/providers/docker/provision.go), described as plain data by
`node_container_spec` and wired to `pulumi_docker.Container`. A worker with `ssh` is an existing machine.

A worker that pulls through image mirrors first gets `<node>-mirrors` (components/management/image_cache.py: its
containerd's hosts.toml files). Either way, membership is three resources, in this order:

1. `<node>-membership` (Pulumi host, components/worker/operations.py): mints a one-time join token for this worker;
   when the worker leaves, it removes the Node object from the tenant.
2. `<node>-join` (on the node, components/worker/scripts/node-join.sh and node-leave.sh): `kubeadm join`, and
   `kubeadm reset -f` when the worker leaves. It needs no credential beyond the join token.
3. `<node>-registered` (Pulumi host): waits for the Node to register, then revokes the token.

An SSH worker also gets `<node>-upgrade` (components/worker/scripts/node-upgrade.sh) after its join: on a version
change it checks the server's kubeadm and kubelet packages, runs `kubeadm upgrade node` and restarts the kubelet,
between the worker's drain and its `<node>-ready`. (A container worker is replaced by one of the new version.)

Removal runs them backwards: `<node>-ready` drains the Node (not when its whole tenant goes), the node stops being
a member (reset), then its Node object is removed, so a running kubelet cannot register it again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pulumi
import pulumi_command as command
import pulumi_docker as docker

import config
from components import host_operations, shell
from components.gpu.hami import GpuCards, GpuCardsArgs
from components.management import image_cache
from components.worker.access import NodeAccess, NodeScript, node_access, run_on_node
from components.worker.operations import (
    NodeDrainProvider,
    NodeMembershipProvider,
    NodeReadyProvider,
    NodeRegistrationProvider,
)
from config import upgrade
from config.models import KIND_NODE_IMAGES
from naming import (
    COMPONENT_PREFIX,
    KIND_NETWORK,
    LABEL_ROLE,
    LABEL_STACK,
    LABEL_TENANT,
    LABEL_WORKER,
    node_name,
)


def worker_image(tenant: config.Tenant) -> str:
    """The tenant's `nodeImage`, or the kindest/node image published for its version (pinned by digest)."""
    if tenant.node_image is not None:
        return tenant.node_image
    try:
        return KIND_NODE_IMAGES[tenant.kubernetes_version]
    except KeyError:
        raise ValueError(
            f"tenant {tenant.name}: no kindest/node image is known for {tenant.kubernetes_version}; set nodeImage"
        ) from None


@dataclass(frozen=True)
class NodeContainerSpec:
    """A node container as `docker run` flags would describe it (kind's provision.go, as data).

    Not mirrored: kind's host-specific flags (--userns=host under userns-remap, the /dev/mapper bind on btrfs/zfs,
    /dev/fuse when rootless; provision.go commonArgs). Preflight refuses those hosts instead (ops/preflight.py).
    """

    name: str
    hostname: str
    image: str
    network: str
    labels: dict[str, str]
    # Nested containerd/systemd need it; it also sets up mounts docker would otherwise restrict.
    privileged: bool = True
    security_opts: tuple[str, ...] = ("seccomp=unconfined", "apparmor=unconfined")
    # Various things need a working /tmp; systemd wants a writable /run.
    tmpfs: dict[str, str] = field(default_factory=lambda: {"/tmp": "", "/run": ""})
    # Pods, images and logs live on an anonymous volume, not on the container filesystem.
    anonymous_volumes: tuple[str, ...] = ("/var",)
    # Some Kubernetes components read kernel modules; read-only from the host.
    read_only_binds: tuple[str, ...] = ("/lib/modules",)
    cgroupns_mode: str = "private"
    # Allocates a tty for the entrypoint's logs.
    tty: bool = True
    # The entrypoint must be PID 1 (systemd), never docker-init, even if the daemon defaults to it.
    init: bool = False
    # Restart on host/dockerd reboot but not in a loop on real failures (kind's choice).
    restart: str = "on-failure"
    max_retry_count: int = 1


def node_container_spec(
    *, tenant: str, worker: str, image: str, network: str = KIND_NETWORK, stack: str
) -> NodeContainerSpec:
    """How to run worker `worker` of `tenant`: container name = hostname = Node name."""
    name = node_name(tenant, worker)
    return NodeContainerSpec(
        name=name,
        hostname=name,
        image=image,
        network=network,
        labels={LABEL_STACK: stack, LABEL_TENANT: tenant, LABEL_WORKER: worker, LABEL_ROLE: "worker"},
    )


@dataclass
class TenantAccess:
    """What a worker needs to know about its tenant (TenantControlPlane outputs)."""

    name: str
    namespace: pulumi.Input[str]
    kubernetes_version: str
    endpoint: pulumi.Input[str]  # "<LB IP>:6443"
    ca_certificate: pulumi.Input[str]  # tenant CA, PEM (public)
    discovery_hash: pulumi.Input[str]  # "sha256:<hex>"
    operator_kubeconfig: pulumi.Input[str]  # secret; used on the Pulumi host only
    management_kubeconfig: pulumi.Input[str]  # secret; to tell a dead tenant from a gone one
    control_plane: pulumi.Resource  # the TenantControlPlane: tenant-side objects go with it
    workers: int = 0  # how many workers the tenant has (a drain of its only one stops all its workloads)


@dataclass
class WorkerNodeArgs:
    tenant: TenantAccess
    # Configured worker; `worker.ssh` set means a real machine joined over SSH instead of a local container.
    worker: config.Worker
    # The worker image (containers only).
    image: str | None = None
    # The docker network "kind" exists only after the management cluster (containers only).
    management_cluster: pulumi.Resource | None = None
    network_name: str = KIND_NETWORK
    # Registry host -> pull-through mirror URL this node's containerd tries first (management/image_cache.py).
    mirrors: dict[str, str] = field(default_factory=dict)
    # management.configureContainerd: an SSH worker's containerd may be pointed at its hosts.toml files.
    configure_containerd: bool = False
    # gpuMode nvidia: the join checks what HAMi's device plugin needs on a worker that lists `gpus`.
    nvidia: NvidiaWorker | None = None
    # What must be done before this worker's first resource changes (the tenant's version check).
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    # What the drain before an upgrade waits for: the objects that follow the control plane's version (kube-proxy)
    # and the previous worker of the tenant back in service, so that workers roll one at a time.
    drain_after: list[pulumi.Resource] = field(default_factory=list)
    # How the worker's `gpus` reach its Node once it has registered (GpuCards; None: no cards): after an upgrade,
    # `<node>-ready` uncordons only once they are advertised again.
    cards: GpuCardsArgs | None = None


@dataclass(frozen=True)
class NvidiaWorker:
    """gpuMode nvidia: the RuntimeClass GPU pods use (`nvidia.runtimeClassName`), None when `nvidia` must be
    containerd's default runtime."""

    runtime_class_name: str | None = None


def nvidia_join_environment(worker: config.Worker, nvidia: NvidiaWorker | None) -> dict[str, str]:
    """The variables that make node-join.sh check a GPU server for HAMi's device plugin: only for a worker that
    lists `gpus` in nvidia mode (the program labels exactly those `gpu=on`, which the plugin's DaemonSet selects)."""
    if nvidia is None or not worker.gpus:
        return {}
    return {
        shell.GPU_MODE_ENV: "nvidia",
        shell.NVIDIA_RUNTIME_CLASS_ENV: nvidia.runtime_class_name or "",
        shell.GPU_UUIDS_ENV: " ".join(card.uuid for card in worker.gpus),
    }


class WorkerNode(pulumi.ComponentResource):
    """One worker joined with kubeadm to a Kamaji tenant control plane: a kindest/node container or an SSH machine."""

    node_name: pulumi.Output[str]
    access: NodeAccess
    container: docker.Container | None  # None for an SSH worker
    mirrors: pulumi.Resource | None  # the node's image-mirror configuration, if it uses mirrors
    drain: pulumi.Resource  # cordon and drain before an upgrade
    membership: pulumi.Resource
    join: command.local.Command | command.remote.Command
    upgrade: command.remote.Command | None  # an SSH worker's upgrade to a new version (None: a container)
    registered: pulumi.Resource
    cards: GpuCards | None  # its `gpus` on its Node (None: no cards)
    ready: pulumi.Resource  # back in service after an upgrade; drains the Node when the worker leaves
    kubelet_version: pulumi.Input[str | None]  # the kubelet version its Node must report after an upgrade

    def __init__(self, name: str, args: WorkerNodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{COMPONENT_PREFIX}:WorkerNode", name, None, opts)
        tenant = args.tenant
        self.access = node_access(tenant.name, args.worker)
        node = self.access.node_name
        self.container = None

        host_side = pulumi.ResourceOptions(parent=self, deleted_with=tenant.control_plane)
        # Before the machine moves to another version: cordon and drain its Node (nothing to do on a first build).
        self.drain = host_operations.resource(
            NodeDrainProvider(),
            f"{name}-drain",
            {"kubeconfig": tenant.operator_kubeconfig, "node_name": node, "version": tenant.kubernetes_version,
             "tenant": tenant.name, "tenant_workers": tenant.workers},
            pulumi.ResourceOptions.merge(host_side, pulumi.ResourceOptions(
                depends_on=[*args.depends_on, *args.drain_after])),
            outputs=("warning",),
        )
        # Set by the drain's check in a preview only (NodeDrainProvider.check): said once, on this resource.
        self.drain.warning.apply(lambda text: text and pulumi.log.warn(text, resource=self.drain))
        args = dataclasses.replace(args, depends_on=[*args.depends_on, self.drain])

        if self.access.ssh is None:
            self.container = self._container(name, args)
            # A new container (new id) is a new machine.
            machine: pulumi.Input[str] = self.container.id
            depends_on: list[pulumi.Resource] = [self.container]
        else:
            # Another host is another machine.
            machine = self.access.ssh.host
            depends_on = list(args.depends_on)

        # A new machine or a new control plane (endpoint or CA) is a new membership: leave and join again.
        self.membership = host_operations.resource(
            NodeMembershipProvider(),
            f"{name}-membership",
            {
                "kubeconfig": tenant.operator_kubeconfig,
                "management_kubeconfig": tenant.management_kubeconfig,
                "control_plane_namespace": tenant.namespace,
                "control_plane_name": tenant.name,
                "node_name": node,
                "machine": machine,
                "endpoint": tenant.endpoint,
                "ca_cert_hash": tenant.discovery_hash,
            },
            pulumi.ResourceOptions.merge(host_side, pulumi.ResourceOptions(
                depends_on=depends_on,
                # Its delete removes the Node by name: it must run before the new join registers the Node again.
                # The provider's diff asks for this, but a targeted `up --replace` has no diff and takes it from
                # this option only (pulumi step_generator.go, the DeleteBeforeReplace of a targeted replace).
                delete_before_replace=True,
            )),
            outputs=("token", "token_id", "expiration"),
            secret_outputs=("token",),
        )

        self.mirrors = None
        if args.mirrors:
            # Before the join: the kubelet's first pulls (pause, kube-proxy, Calico) already go through the mirror.
            self.mirrors = image_cache.configure_node(
                f"{name}-mirrors", self.access, args.mirrors, machine=machine,
                # A container's files go with the container.
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on, deleted_with=self.container),
                configure_containerd=args.configure_containerd,
            )
            depends_on = [*depends_on, self.mirrors]

        node_kind = shell.NODE_KIND_MACHINE if self.access.is_ssh else shell.NODE_KIND_CONTAINER
        join = NodeScript(
            shell.NODE_JOIN,
            {
                shell.NODE_NAME_ENV: node,
                shell.TENANT_ENDPOINT_ENV: tenant.endpoint,
                shell.JOIN_TOKEN_ENV: self.membership.token,  # type: ignore[attr-defined]
                shell.CA_CERT_HASH_ENV: tenant.discovery_hash,
                shell.TENANT_CA_CERT_ENV: tenant.ca_certificate,
                shell.TENANT_VERSION_ENV: tenant.kubernetes_version,
                shell.NODE_KIND_ENV: node_kind,
                **nvidia_join_environment(args.worker, args.nvidia),
            },
        )
        # A machine's leave also removes what the tenant left on it; a container goes with everything in it.
        leave = NodeScript(
            shell.NODE_LEAVE, {shell.NODE_NAME_ENV: node, shell.NODE_KIND_ENV: node_kind}
        )
        self.join = run_on_node(
            f"{name}-join",
            self.access,
            create=join,
            delete=leave,
            gone_hint=f"If Node {node} remains in the tenant, the next removal of this worker deletes it.",
            # The membership's id first: when it is replaced (delete-before-replace) the join is a dependent
            # replacement and resets the node before the membership removes its Node object.
            triggers=[self.membership.id, machine, tenant.endpoint, tenant.discovery_hash],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=depends_on,
                # The same node name joins again only after the old membership is undone.
                delete_before_replace=True,
            ),
        )
        self.registered = host_operations.resource(
            NodeRegistrationProvider(),
            f"{name}-registered",
            {
                "kubeconfig": tenant.operator_kubeconfig,
                "node_name": node,
                "join": self.join.id,
                "token_id": self.membership.token_id,  # type: ignore[attr-defined]
            },
            host_side,
        )
        self.upgrade = None
        if self.access.is_ssh:
            self.upgrade = self._upgrade(name, tenant.kubernetes_version)
        # The cards first: the Node is back in service only with them.
        self.cards = cards = GpuCards(self, node, args.worker.gpus, self.registered, tenant, args.cards) \
            if args.cards is not None and args.worker.gpus else None
        # After an upgrade: the new Node Ready at its version with its cards advertised, uncordoned; the tenant's
        # next worker waits for it. A container's kubelet is its image's. An SSH worker's is the tenant's version when
        # `-upgrade` says it upgraded the server (node-upgrade.sh's last line); a server it only recorded keeps the
        # kubelet node-join.sh accepted, and nothing waits for another one.
        self.kubelet_version: pulumi.Input[str | None]
        if self.container is not None:
            self.kubelet_version = (upgrade.image_version(args.image) if args.image is not None else None) \
                or tenant.kubernetes_version
        elif self.upgrade is not None:
            version = tenant.kubernetes_version
            self.kubelet_version = self.upgrade.stdout.apply(
                lambda out: version if f" upgraded to {version}: " in (out or "") else None)
        else:
            self.kubelet_version = None
        self.ready = host_operations.resource(
            NodeReadyProvider(),
            f"{name}-ready",
            {"kubeconfig": tenant.operator_kubeconfig, "node_name": node, "version": tenant.kubernetes_version,
             "kubelet_version": self.kubelet_version, "registration": self.registered.id,
             "cards": cards.expected if cards is not None else None},
            pulumi.ResourceOptions.merge(host_side, pulumi.ResourceOptions(
                depends_on=[*([self.upgrade] if self.upgrade is not None else []),
                            *(cards.resources if cards is not None else [])])),
            outputs=("reported",),
        )
        # Resolves only once the Node has registered, so whatever uses the name waits for it.
        self.node_name = self.registered.id.apply(lambda _: node)

        self.register_outputs({"node_name": self.node_name})

    def _upgrade(self, name: str, version: str) -> command.remote.Command:
        """`<node>-upgrade` of an SSH worker, after its join (so after its drain) and before its `-ready`.

        pulumi-command runs `create` when the Command is created and `update` when its inputs change (v1.2.1
        provider/pkg/provider/remote/commandController.go Create/Update); `triggers` replaces it (create again).
        So: created with the worker's first join, or replaced with a rejoin (the join's id): node-upgrade.sh records
        the version the join brought and restarts nothing. A new TENANT_VERSION in the stdin is an update: it
        upgrades the drained server. A preview shows it as an update of `stdin` (secret, like every node command's).
        """
        node = self.access.node_name
        def script(mode: str) -> NodeScript:
            return NodeScript(shell.NODE_UPGRADE, {
                shell.NODE_NAME_ENV: node,
                shell.TENANT_VERSION_ENV: version,
                shell.UPGRADE_MODE_ENV: mode,
            })

        return run_on_node(  # type: ignore[return-value]
            f"{name}-upgrade",
            self.access,
            create=script(shell.UPGRADE_MODE_RECORD),
            update=script(shell.UPGRADE_MODE_UPGRADE),
            triggers=[self.join.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.join]),
        )

    def _container(self, name: str, args: WorkerNodeArgs) -> docker.Container:
        """The kindest/node container of a local worker, run like kind runs its nodes."""
        if args.management_cluster is None or args.image is None:
            raise ValueError(
                f"worker {args.worker.name} of tenant {args.tenant.name} is a local container: "
                "WorkerNodeArgs.management_cluster and image are required (the kind network must exist first)"
            )
        spec = node_container_spec(
            tenant=args.tenant.name, worker=args.worker.name, image=args.image, network=args.network_name,
            stack=pulumi.get_stack(),
        )
        image = docker.RemoteImage(
            f"{name}-image",
            name=spec.image,
            # The management cluster and other workers use the same image: never delete it.
            keep_locally=True,
            # Pulled while the worker still serves: only the container waits for its drain.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[d for d in args.depends_on if d is not self.drain]),
        )
        return docker.Container(
            f"{name}-container",
            name=spec.name,
            hostname=spec.hostname,
            # The image id, not its name: a name makes the provider replace the container on every run
            # (pulumi/pulumi-docker#325).
            image=image.image_id,
            privileged=spec.privileged,
            security_opts=list(spec.security_opts),
            tmpfs=dict(spec.tmpfs),
            volumes=[docker.ContainerVolumeArgs(container_path=path) for path in spec.anonymous_volumes],
            mounts=[
                docker.ContainerMountArgs(target=path, source=path, type="bind", read_only=True)
                for path in spec.read_only_binds
            ],
            cgroupns_mode=spec.cgroupns_mode,
            tty=spec.tty,
            init=spec.init,
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=spec.network)],
            restart=spec.restart,
            max_retry_count=spec.max_retry_count,
            labels=[docker.ContainerLabelArgs(label=key, value=value) for key, value in spec.labels.items()],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[args.management_cluster, *args.depends_on],
                # The container name is fixed, so the old one must go before a replacement starts.
                delete_before_replace=True,
            ),
        )
