"""WorkerNode: a worker joined to a tenant's hosted control plane -- a local container or a real machine.

A worker without `ssh` is a kindest/node container on the kind network,
started the way kind starts its own nodes
(kubernetes-sigs/kind pkg/cluster/internal/providers/docker/provision.go),
described as plain data by `node_container_spec` and wired to
`pulumi_docker.Container`. A worker with `ssh` is an existing machine; no
docker resource is created for it. Either way the join is one pulumi-command
Command made by `components.node_access.run_on_node`, which runs
`components.join_script.join_script` on the node (docker exec or SSH); its
delete runs `leave_script`, which removes the Node object from the tenant.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_command as command
import pulumi_docker as docker

import config
from components import join_script
from components.container_exec import TENANT_KUBECONFIG_ENV
from components.naming import COMPONENT_PREFIX, KIND_NETWORK, node_name
from components.node_access import NodeAccess, NodeScript, node_access, run_on_node

# Worker image repository; the tag is the tenant's Kubernetes version (facts §1).
KIND_NODE_IMAGE_REPOSITORY = "kindest/node"
# Docker labels on every worker container, for `docker ps --filter label=...` and cleanup checks.
LABEL_PREFIX = "gpu-tenancy"
LABEL_STACK = f"{LABEL_PREFIX}.stack"
LABEL_TENANT = f"{LABEL_PREFIX}.tenant"
LABEL_WORKER = f"{LABEL_PREFIX}.worker"
LABEL_ROLE = f"{LABEL_PREFIX}.role"


def kind_node_image(kubernetes_version: str) -> str:
    """`kindest/node:<version>`: the worker image tag must equal the tenant version."""
    return f"{KIND_NODE_IMAGE_REPOSITORY}:{kubernetes_version}"


@dataclass(frozen=True)
class NodeContainerSpec:
    """A node container as `docker run` flags would describe it (kind's provision.go, as data)."""

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
    *, tenant: str, worker: str, kubernetes_version: str, network: str = KIND_NETWORK, stack: str
) -> NodeContainerSpec:
    """How to run worker `worker` of `tenant`: container name = hostname = Node name."""
    name = node_name(tenant, worker)
    return NodeContainerSpec(
        name=name,
        hostname=name,
        image=kind_node_image(kubernetes_version),
        network=network,
        labels={
            LABEL_STACK: stack,
            LABEL_TENANT: tenant,
            LABEL_WORKER: worker,
            LABEL_ROLE: "worker",
        },
    )


def join_scripts(node: str, kubernetes_version: str, *, over_ssh: bool) -> tuple[NodeScript, NodeScript]:
    """What the join Command runs on the node: (create = join, delete = leave), with the secrets each reads."""
    # A kindest/node container cannot pass kubeadm's kernel and host-tool checks (facts §5); a real
    # machine gets kubeadm's full preflight.
    ignored = () if over_ssh else join_script.IGNORED_PREFLIGHT_ERRORS
    join = NodeScript(join_script.join_script(node, kubernetes_version, ignored), join_script.JOIN_ENV_NAMES)
    leave = NodeScript(
        join_script.leave_script(node),
        (TENANT_KUBECONFIG_ENV,),
        gone_hint=f"If Node {node} remains in the tenant: kubectl delete node {node}",
    )
    return join, leave


@dataclass
class WorkerNodeArgs:
    tenant_name: str
    # Configured worker; `worker.ssh` set means a real machine joined over SSH instead of a local container.
    worker: config.Worker
    # Tenant version, e.g. "v1.35.0" -> image kindest/node:v1.35.0, and the newest kubelet an SSH machine may run.
    kubernetes_version: str
    # "<LB IP>:6443" of the tenant API server.
    endpoint: pulumi.Input[str]
    # Bootstrap token "<id>.<secret>" (secret).
    join_token: pulumi.Input[str]
    # "sha256:<hex>" of the tenant CA public key.
    discovery_hash: pulumi.Input[str]
    # Tenant admin kubeconfig (secret); the delete uses it to remove the Node.
    tenant_kubeconfig: pulumi.Input[str]
    # The docker network "kind" exists only after the management cluster: explicit depends_on of a container
    # worker (required for those; unused by SSH workers).
    management_cluster: pulumi.Resource | None = None
    network_name: str = KIND_NETWORK


class WorkerNode(pulumi.ComponentResource):
    """One worker joined with kubeadm to a Kamaji tenant control plane: a kindest/node container or an SSH machine."""

    node_name: pulumi.Output[str]
    access: NodeAccess
    container_name: str | None  # None for an SSH worker
    container: docker.Container | None  # None for an SSH worker
    join: command.local.Command | command.remote.Command

    def __init__(self, name: str, args: WorkerNodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{COMPONENT_PREFIX}:WorkerNode", name, None, opts)

        self.access = node_access(args.tenant_name, args.worker)
        node = self.access.node_name
        self.container_name = None
        self.container = None

        if self.access.ssh is None:
            self.container = self._container(name, args)
            self.container_name = self.access.container_name
            # A new container (new id) is a new machine.
            machine: pulumi.Input[str] = self.container.id
            depends_on: list[pulumi.Resource] = [self.container]
        else:
            # Another host is another machine.
            machine = self.access.ssh.host
            depends_on = []

        join, leave = join_scripts(node, args.kubernetes_version, over_ssh=self.access.is_ssh)
        self.join = run_on_node(
            f"{name}-join",
            self.access,
            create=join,
            delete=leave,
            # The bootstrap token and the admin kubeconfig: secret, never on a command line.
            secrets={
                join_script.ENDPOINT_ENV: args.endpoint,
                join_script.TOKEN_ENV: args.join_token,
                join_script.DISCOVERY_HASH_ENV: args.discovery_hash,
                TENANT_KUBECONFIG_ENV: args.tenant_kubeconfig,
            },
            # A new machine, or a new control plane (endpoint or CA) is a new cluster: leave and join again.
            # The token is not a trigger: a rotation needs no rejoin.
            triggers=[machine, args.endpoint, args.discovery_hash],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=depends_on,
                # Remove the old Node before the same name joins again.
                delete_before_replace=True,
            ),
        )

        # Resolves only once the join has succeeded, so whatever uses the name waits for the join.
        self.node_name = self.join.id.apply(lambda _: node)

        self.register_outputs({"node_name": self.node_name, "container_name": self.container_name})

    def _container(self, name: str, args: WorkerNodeArgs) -> docker.Container:
        """The kindest/node container of a local worker, run like kind runs its nodes."""
        if args.management_cluster is None:
            raise ValueError(
                f"worker {args.worker.name} of tenant {args.tenant_name} is a local container: "
                "WorkerNodeArgs.management_cluster is required (the kind network must exist first)"
            )
        spec = node_container_spec(
            tenant=args.tenant_name,
            worker=args.worker.name,
            kubernetes_version=args.kubernetes_version,
            network=args.network_name,
            stack=pulumi.get_stack(),
        )
        image = docker.RemoteImage(
            f"{name}-image",
            name=spec.image,
            # The management cluster and other workers use the same image: never delete it.
            keep_locally=True,
            opts=pulumi.ResourceOptions(parent=self),
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
                depends_on=[args.management_cluster],
                # The container name is fixed, so the old one must go before a replacement starts.
                delete_before_replace=True,
            ),
        )
