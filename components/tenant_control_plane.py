"""One tenant's hosted control plane: namespace + isolation on the management cluster,
the Kamaji TenantControlPlane, its credentials, a rotating join token, Calico and the GPU quota.

Pure builders live in `components.tenant_spec`; this module only wires them to resources.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

import config
from components import tenant_spec
from components.helm import helm_release
from components.naming import COMPONENT_PREFIX

# Kamaji needs a few minutes for certificates, datastore schema, the Deployment and the LB address.
TCP_TIMEOUT = "20m"
# Pulls the operator and calico-node images, then waits for the operator Deployment.
CALICO_TIMEOUT_SECONDS = 20 * 60
CRD_CHART_TIMEOUT_SECONDS = 5 * 60


@dataclass
class TenantControlPlaneArgs:
    tenant: config.Tenant
    management_provider: k8s.Provider
    # IPv4 networks the workers (and load-balancer traffic) come from: the kind network in the lab.
    worker_networks: pulumi.Input[list[str]]
    datastore_name: pulumi.Input[str]
    versions: config.Versions
    # Kamaji readiness: its release and DataStore must exist before any TCP (facts §2).
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    # Clock for the bootstrap-token rotation window; None means the current UTC time.
    now: datetime.datetime | None = None


class _CustomResourceWithStatus(k8s.apiextensions.CustomResource):
    """A CustomResource whose live `.status` is an output; the SDK class drops it (pulumi-kubernetes#1836)."""

    status: pulumi.Output[Any]

    def _internal_init(self, resource_name, api_version, kind, opts=None, metadata=None, spec=None, __props__=None):
        props = k8s.apiextensions.CustomResourceArgs.__new__(k8s.apiextensions.CustomResourceArgs)
        props.__dict__.update(api_version=api_version, kind=kind, metadata=metadata, spec=spec, status=None)
        super(k8s.apiextensions.CustomResource, self).__init__(
            f"kubernetes:{api_version}:{kind}", resource_name, props, opts
        )


class TenantControlPlane(pulumi.ComponentResource):
    tenant_name: str
    namespace: pulumi.Output[str]
    isolation: k8s.networking.v1.NetworkPolicy
    tcp: k8s.apiextensions.CustomResource
    kubeconfig: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    discovery_hash: pulumi.Output[str]
    provider: k8s.Provider
    join_token: pulumi.Output[str]
    token_expiration: str
    quota: k8s.core.v1.ResourceQuota | None

    def __init__(self, name: str, args: TenantControlPlaneArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{COMPONENT_PREFIX}:TenantControlPlane", name, None, opts)
        tenant = args.tenant
        tenant_spec.resolved_cidrs(tenant)  # fail now, with a clear message, not inside an apply
        tcp_name = tenant.name
        self.tenant_name = tcp_name
        mgmt = args.management_provider

        # --- management cluster: namespace, isolation, the TenantControlPlane ---------------- #
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": tcp_name, "labels": tenant_spec.namespace_labels(tcp_name)},
            opts=pulumi.ResourceOptions(parent=self, provider=mgmt),
        )
        self.namespace = namespace.metadata.name

        policy = pulumi.Output.from_input(args.worker_networks).apply(
            lambda networks: tenant_spec.isolation_network_policy(tcp_name, networks)
        )
        self.isolation = k8s.networking.v1.NetworkPolicy(
            f"{name}-isolation",
            metadata=policy.apply(lambda p: p["metadata"]),
            spec=policy.apply(lambda p: p["spec"]),
            opts=pulumi.ResourceOptions(parent=self, provider=mgmt, depends_on=[namespace]),
        )

        self.tcp = _CustomResourceWithStatus(
            f"{name}-tcp",
            api_version=tenant_spec.TCP_API_VERSION,
            kind=tenant_spec.TCP_KIND,
            metadata=tenant_spec.tenant_control_plane_metadata(tenant),
            spec=pulumi.Output.from_input(args.datastore_name).apply(
                lambda datastore: tenant_spec.tenant_control_plane_spec(tenant, datastore)
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=mgmt,
                # The fence is up before the control-plane pods start.
                depends_on=[namespace, self.isolation, *args.depends_on],
                custom_timeouts=pulumi.CustomTimeouts(create=TCP_TIMEOUT, update=TCP_TIMEOUT),
            ),
        )
        self.endpoint = self.tcp.status.apply(lambda status: tenant_spec.control_plane_endpoint(status, tcp_name))

        # --- credentials Kamaji wrote for the tenant (facts §4) ------------------------------ #
        read_opts = pulumi.ResourceOptions(
            parent=self,
            provider=mgmt,
            depends_on=[self.tcp],
            additional_secret_outputs=["data", "stringData"],
        )
        # The ids come from the TCP's outputs: in a preview where the TCP does not exist yet they are
        # unknown, so the engine skips the reads instead of failing on Secrets that do not exist yet
        # (depends_on alone does not hold back a read during preview).
        tcp_namespace = self.tcp.metadata.apply(lambda meta: meta["namespace"])
        admin_id = tcp_namespace.apply(lambda ns: f"{ns}/{tenant_spec.admin_kubeconfig_secret_name(tcp_name)}")
        admin = k8s.core.v1.Secret.get(f"{name}-admin-kubeconfig", admin_id, opts=read_opts)
        self.kubeconfig = pulumi.Output.secret(admin.data.apply(lambda d: tenant_spec.admin_kubeconfig(d, tcp_name)))
        ca_id = tcp_namespace.apply(lambda ns: f"{ns}/{tenant_spec.ca_secret_name(tcp_name)}")
        ca = k8s.core.v1.Secret.get(f"{name}-ca", ca_id, opts=read_opts)
        # The hash of the CA's public key is public by design (it is on every join command line).
        ca_hash = ca.data.apply(lambda d: tenant_spec.ca_discovery_hash(d, tcp_name))
        self.discovery_hash = pulumi.Output.unsecret(ca_hash)

        self.provider = k8s.Provider(
            f"{name}-tenant",
            kubeconfig=self.kubeconfig,
            # `pulumi destroy` after the tenant (or the whole kind cluster) is gone drops its objects
            # from the state instead of failing on every one of them.
            delete_unreachable=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        tenant_opts = pulumi.ResourceOptions(parent=self, provider=self.provider)

        # --- bootstrap token, replaced by the first `pulumi up` of each rotation window ----- #
        window = tenant_spec.token_window(args.now or datetime.datetime.now(datetime.timezone.utc))
        self.token_expiration = window.expiration_rfc3339
        keepers = {"rotationWindow": window.label}
        # `[a-z0-9]` only: upper case and special characters off (numbers stay on by default).
        token_id, token_secret = (
            random.RandomString(
                f"{name}-{part}",
                length=length,
                upper=False,
                special=False,
                keepers=keepers,
                opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=["result"]),
            )
            for part, length in (
                ("token-id", tenant_spec.TOKEN_ID_LENGTH),
                ("token-secret", tenant_spec.TOKEN_SECRET_LENGTH),
            )
        )
        token_parts = pulumi.Output.all(
            pulumi.Output.secret(token_id.result), pulumi.Output.secret(token_secret.result)
        )
        token_manifest = token_parts.apply(
            lambda parts: tenant_spec.bootstrap_token_secret(parts[0], parts[1], window.expiration_rfc3339)
        )
        self.token_secret = k8s.core.v1.Secret(
            f"{name}-bootstrap-token",
            metadata=token_manifest.apply(lambda m: m["metadata"]),
            type=tenant_spec.BOOTSTRAP_TOKEN_TYPE,
            string_data=pulumi.Output.secret(token_manifest.apply(lambda m: m["stringData"])),
            opts=tenant_opts,
        )
        # Resolves only once the Secret exists in the tenant, so joins never race its creation.
        self.join_token = pulumi.Output.secret(
            pulumi.Output.all(self.token_secret.id, token_parts).apply(lambda a: f"{a[1][0]}.{a[1][1]}")
        )

        # --- GPU quota in the tenant's default namespace --------------------------------- #
        quota = tenant_spec.gpu_resource_quota(tenant.quota)
        self.quota = None
        if quota is not None:
            self.quota = k8s.core.v1.ResourceQuota(
                f"{name}-gpu-quota",
                metadata=quota["metadata"],
                spec=quota["spec"],
                opts=tenant_opts,
            )

        self.register_outputs(
            {
                "namespace": self.namespace,
                "endpoint": self.endpoint,
                "kubeconfig": self.kubeconfig,
                "discovery_hash": self.discovery_hash,
                "join_token": self.join_token,
                "token_expiration": self.token_expiration,
            }
        )


@dataclass
class TenantCniArgs:
    tenant: config.Tenant
    tenant_provider: k8s.Provider
    endpoint: pulumi.Input[str]  # "<host>:<port>" of the tenant API server
    versions: config.Versions
    # The tenant's worker joins: Calico goes in after them (facts §6: workers joined -> CNI), so that
    # on destroy it is uninstalled while its nodes still exist (its pre-delete hook Job needs one).
    depends_on: list[pulumi.Resource]


class TenantCni(pulumi.ComponentResource):
    """Calico in one tenant: the CRD chart, then tigera-operator with one VXLAN pool over `podCidr`."""

    releases: list[pulumi.Resource]

    def __init__(self, name: str, args: TenantCniArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{COMPONENT_PREFIX}:TenantCni", name, None, opts)
        _, pod_cidr = tenant_spec.resolved_cidrs(args.tenant)
        workers = len(args.tenant.workers)
        calico_crds = helm_release(
            f"{name}-calico-crds",
            tenant_spec.CALICO_CRDS_CHART,
            version=args.versions.calico,
            create_namespace=True,
            timeout=CRD_CHART_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions(parent=self, provider=args.tenant_provider, depends_on=args.depends_on),
        )
        calico = helm_release(
            f"{name}-calico",
            tenant_spec.CALICO_OPERATOR_CHART,
            version=args.versions.calico,
            values=pulumi.Output.from_input(args.endpoint).apply(
                lambda endpoint: tenant_spec.calico_operator_values(pod_cidr, endpoint, workers)
            ),
            create_namespace=True,
            timeout=CALICO_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions(parent=self, provider=args.tenant_provider, depends_on=[calico_crds]),
        )
        self.releases = [calico_crds, calico]
        self.register_outputs({"releases": [release.name for release in self.releases]})
