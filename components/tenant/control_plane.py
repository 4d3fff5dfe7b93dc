"""One tenant's hosted control plane: namespace + isolation (and, if chosen, its own etcd) on the management
cluster, the Kamaji TenantControlPlane, its credentials, and inside the tenant kube-proxy, the workload
namespaces, the restricted user credential and the GPU quota. Calico is `TenantCni` (components/tenant/cni.py),
installed after the joins.

Pure builders live in `components.tenant.spec`; this module only wires them to resources. Everything inside
the tenant is `deleted_with` the TenantControlPlane: when the control plane goes, its cluster goes with it, so
tear-down never waits on (or fails against) an API that no longer exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

import config
from components.helm import helm_release
from components.tenant import kube_proxy
from components.tenant import spec as tenant_spec
from naming import COMPONENT_PREFIX

# Kamaji needs a few minutes for certificates, datastore schema, the Deployment and the LB address.
TCP_TIMEOUT = "20m"
ETCD_TIMEOUT_SECONDS = 10 * 60


@dataclass
class TenantControlPlaneArgs:
    tenant: config.Tenant
    management_provider: k8s.Provider
    # The management cluster's kubeconfig (secret), for the host-side checks of a tenant that stops answering.
    management_kubeconfig: pulumi.Input[str]
    # IPv4 networks the workers (and load-balancer traffic) come from: the kind network in the lab.
    worker_networks: pulumi.Input[list[str]]
    # Where operators reach tenant API servers from, besides the worker networks.
    operator_cidrs: Sequence[str]
    # The shared DataStore (used unless the tenant has a dedicated one).
    shared_datastore: pulumi.Input[str]
    # Kamaji readiness: its webhooks (failurePolicy Fail) answer and the DataStore exists; a TCP naming a missing
    # DataStore is rejected (clastix/kamaji internal/webhook/handlers/tcp_datastore.go).
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    # Kind mode: the cluster command; everything on the management cluster goes with it.
    deleted_with: pulumi.Resource | None = None
    # What must be in place before this tenant's first image pull on the management cluster (the kind node
    # pulling through the image cache); Kamaji readiness implies it, a dedicated etcd does not wait for that.
    images_ready: list[pulumi.Resource] = field(default_factory=list)


class _CustomResourceWithStatus(pulumi.CustomResource):
    """A Kubernetes custom resource whose live `.status` is an output: pulumi-kubernetes' CustomResource registers
    only apiVersion, kind, metadata and spec (pulumi-kubernetes#1836), so this registers the same type with status."""

    metadata: pulumi.Output[Any]
    status: pulumi.Output[Any]

    def __init__(self, resource_name: str, api_version: str, kind: str, metadata: Any, spec: Any,
                 opts: pulumi.ResourceOptions) -> None:
        props = {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec, "status": None}
        super().__init__(f"kubernetes:{api_version}:{kind}", resource_name, props, opts)


def _secret_value(data: pulumi.Output[Any], key: str, secret: str) -> pulumi.Output[str]:
    return pulumi.Output.secret(data.apply(lambda d: tenant_spec.decode_secret_value(d, key, secret)))


class TenantControlPlane(pulumi.ComponentResource):
    tenant_name: str
    namespace: pulumi.Output[str]
    tcp: pulumi.CustomResource
    endpoint: pulumi.Output[str]
    # admin.conf: what the operator gets. super-admin.conf: what this program writes with.
    admin_kubeconfig: pulumi.Output[str]
    operator_kubeconfig: pulumi.Output[str]
    # The restricted credential for the tenant's users (namespaced `edit`).
    user_kubeconfig: pulumi.Output[str]
    ca_certificate: pulumi.Output[str]
    discovery_hash: pulumi.Output[str]
    datastore: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(self, name: str, args: TenantControlPlaneArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{COMPONENT_PREFIX}:TenantControlPlane", name, None, opts)
        tenant = args.tenant
        tenant_spec.resolved_cidrs(tenant)  # fail now, with a clear message, not inside an apply
        tcp_name = tenant.name
        self.tenant_name = tcp_name
        management = pulumi.ResourceOptions(parent=self, provider=args.management_provider,
                                            deleted_with=args.deleted_with)

        # --- management cluster: namespace, isolation, data store, the TenantControlPlane ------------- #
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": tcp_name, "labels": tenant_spec.namespace_labels(tcp_name)},
            opts=management,
        )
        self.namespace = namespace.metadata.name
        networks = pulumi.Output.from_input(args.worker_networks)
        policy = networks.apply(
            lambda networks: tenant_spec.isolation_network_policy(tcp_name, networks, args.operator_cidrs)
        )
        isolation = k8s.networking.v1.NetworkPolicy(
            f"{name}-isolation",
            metadata=policy.apply(lambda p: p["metadata"]),
            spec=policy.apply(lambda p: p["spec"]),
            opts=pulumi.ResourceOptions.merge(management, pulumi.ResourceOptions(depends_on=[namespace])),
        )
        self.datastore, datastore_ready = self._datastore(name, args, namespace, management)

        # The same networks the isolation policy admits on the API and Konnectivity ports.
        source_ranges = networks.apply(lambda networks: tenant_spec.api_source_ranges(networks, args.operator_cidrs))
        self.source_ranges = source_ranges
        spec = pulumi.Output.all(self.datastore, source_ranges).apply(
            lambda values: tenant_spec.tenant_control_plane_spec(tenant, values[0], values[1])
        )
        self.tcp = _CustomResourceWithStatus(
            f"{name}-tcp",
            api_version=tenant_spec.TCP_API_VERSION,
            kind=tenant_spec.TCP_KIND,
            metadata=tenant_spec.tenant_control_plane_metadata(tenant),
            spec=spec,
            opts=pulumi.ResourceOptions.merge(management, pulumi.ResourceOptions(
                # The fence is up before the control-plane pods start.
                depends_on=[namespace, isolation, *datastore_ready, *args.depends_on],
                custom_timeouts=pulumi.CustomTimeouts(create=TCP_TIMEOUT, update=TCP_TIMEOUT),
                replace_on_changes=list(tenant_spec.CIDR_REPLACE_ON_CHANGES),
                # A fixed name: a replacement (a changed range, a targeted replace) must delete the old control
                # plane first. pulumi-kubernetes only asks for that itself when its own diff replaces
                # (provider.go L1645-1657), not for replace_on_changes or --replace (step_generator.go SG:2891).
                delete_before_replace=True,
            )),
        )
        self.endpoint = self.tcp.status.apply(lambda status: tenant_spec.control_plane_endpoint(status, tcp_name))

        # --- credentials Kamaji wrote (internal/resources/kubeconfig.go), read by the Secret name in its status --- #
        admin_id = pulumi.Output.all(self.tcp.metadata, self.tcp.status).apply(
            lambda parts: tenant_spec.admin_secret_id(parts[0], parts[1], tcp_name)
        )
        admin = k8s.core.v1.Secret.get(
            f"{name}-admin-kubeconfig", admin_id,
            opts=pulumi.ResourceOptions(parent=self, provider=args.management_provider, depends_on=[self.tcp],
                                        additional_secret_outputs=["data", "stringData"]),
        )
        secret_name = tenant_spec.admin_kubeconfig_secret_name(tcp_name)
        self.admin_kubeconfig = _secret_value(admin.data, tenant_spec.ADMIN_KUBECONFIG_KEY, secret_name)
        self.operator_kubeconfig = _secret_value(admin.data, tenant_spec.SUPER_ADMIN_KUBECONFIG_KEY, secret_name)
        # The CA certificate (not its key) is all a worker needs to trust the control plane: public.
        self.ca_certificate = pulumi.Output.unsecret(self.admin_kubeconfig.apply(tenant_spec.ca_certificate))
        self.discovery_hash = self.ca_certificate.apply(tenant_spec.discovery_hash)

        # Identified by the TenantControlPlane's UID: a CA rotation or a new address updates the provider; only a
        # re-created control plane (a new cluster) replaces it and what it manages (pulumi-kubernetes DiffConfig).
        identity = pulumi.Output.all(self.tcp.id, self.tcp.metadata).apply(lambda parts: (parts[1] or {}).get("uid"))
        self.provider = k8s.Provider(
            f"{name}-tenant",
            kubeconfig=self.operator_kubeconfig,
            cluster_identifier=identity,
            opts=pulumi.ResourceOptions(parent=self),
        )

        # --- inside the tenant -------------------------------------------------------------------------- #
        inside = pulumi.ResourceOptions(parent=self, provider=self.provider, deleted_with=self.tcp)
        _, pod_cidr = tenant_spec.resolved_cidrs(tenant)
        def proxy_objects(endpoint: str) -> list[dict[str, Any]]:
            return kube_proxy.kube_proxy_objects(
                endpoint=endpoint, kubernetes_version=tenant.kubernetes_version, pod_cidr=pod_cidr)

        # Kinds and names do not depend on the endpoint; the content does.
        live = self.endpoint.apply(proxy_objects)
        self.kube_proxy = [
            _object(f"{name}-kube-proxy-{shape['kind'].lower()}", shape, live.apply(lambda objs, i=i: objs[i]), inside)
            for i, shape in enumerate(proxy_objects("endpoint.invalid:6443"))
        ]
        self.workload_namespaces = [
            k8s.core.v1.NamespacePatch(
                f"{name}-namespace-{namespace_name}",
                metadata=tenant_spec.workload_namespace(namespace_name)["metadata"],
                opts=inside,
            )
            for namespace_name in tenant.namespaces
        ]
        after_namespaces = pulumi.ResourceOptions.merge(inside, pulumi.ResourceOptions(
            depends_on=list(self.workload_namespaces)))
        service_account, *grants = tenant_spec.tenant_user_objects(tenant.namespaces)
        account = _object(f"{name}-user-{service_account['kind'].lower()}-{service_account['metadata']['namespace']}",
                          service_account, service_account, after_namespaces)
        # After the ServiceAccount: kube-controller-manager deletes a token Secret whose account does not exist yet
        # (pkg/controller/serviceaccount/tokens_controller.go syncSecret).
        after_account = pulumi.ResourceOptions.merge(after_namespaces, pulumi.ResourceOptions(depends_on=[account]))
        user = [account] + [
            _object(f"{name}-user-{obj['kind'].lower()}-{obj['metadata']['namespace']}", obj, obj, after_account)
            for obj in grants
        ]
        token_secret = user[1]
        user_token = pulumi.Output.secret(token_secret.data.apply(
            lambda d: tenant_spec.decode_secret_value(d, "token", tenant_spec.TENANT_USER_TOKEN)
        ))
        self.user_kubeconfig = pulumi.Output.secret(pulumi.Output.all(self.endpoint, self.ca_certificate, user_token)
                                                    .apply(lambda parts: tenant_spec.tenant_user_kubeconfig(
                                                        parts[0], parts[1], parts[2], tcp_name, tenant.namespaces[0])))
        self.quotas = []
        for namespace_name in tenant.namespaces:
            objects = tenant_spec.object_resource_quota(tenant.quota, namespace_name)
            self.quotas.append(k8s.core.v1.ResourceQuota(
                f"{name}-object-quota-{namespace_name}", metadata=objects["metadata"], spec=objects["spec"],
                opts=after_namespaces))
            quota = tenant_spec.gpu_resource_quota(tenant.quota, namespace_name)
            if quota is not None:
                self.quotas.append(k8s.core.v1.ResourceQuota(
                    f"{name}-gpu-quota-{namespace_name}", metadata=quota["metadata"], spec=quota["spec"],
                    opts=after_namespaces))

        self.register_outputs(
            {
                "namespace": self.namespace,
                "endpoint": self.endpoint,
                "adminKubeconfig": self.admin_kubeconfig,
                "userKubeconfig": self.user_kubeconfig,
                "discoveryHash": self.discovery_hash,
                "dataStore": self.datastore,
            }
        )

    def _datastore(self, name: str, args: TenantControlPlaneArgs, namespace: k8s.core.v1.Namespace,
                   management: pulumi.ResourceOptions) -> tuple[pulumi.Output[str], list[pulumi.Resource]]:
        """The shared DataStore, or a dedicated etcd in the tenant's namespace with its own DataStore."""
        tenant = args.tenant
        store = tenant.data_store
        if not store.dedicated:
            return pulumi.Output.from_input(args.shared_datastore), []
        chart = tenant_spec.ETCD_CHART
        # The chart's hook Jobs call the management API server, which the isolation policy does not admit unless
        # it happens to lie in a worker network: read where in-cluster clients reach it, on every run.
        read = pulumi.ResourceOptions(parent=self, provider=args.management_provider)
        api_service = k8s.core.v1.Service.get(f"{name}-management-api-service", "default/kubernetes", opts=read)
        api_endpoints = k8s.discovery.v1.EndpointSlice.get(f"{name}-management-api-endpoints", "default/kubernetes",
                                                           opts=read)
        setup_policy = pulumi.Output.all(api_service.spec, api_endpoints.endpoints, api_endpoints.ports).apply(
            lambda parts: tenant_spec.etcd_setup_network_policy(
                tenant.name, chart.release, tenant_spec.management_api_destinations(
                    {"spec": parts[0]}, {"endpoints": parts[1], "ports": parts[2]})))
        setup_access = k8s.networking.v1.NetworkPolicy(
            f"{name}-etcd-setup",
            metadata=setup_policy.apply(lambda p: p["metadata"]),
            spec=setup_policy.apply(lambda p: p["spec"]),
            opts=pulumi.ResourceOptions.merge(management, pulumi.ResourceOptions(depends_on=[namespace])),
        )
        etcd = helm_release(
            f"{name}-etcd",
            dataclasses.replace(tenant_spec.ETCD_CHART, namespace=tenant.name),
            values=tenant_spec.dedicated_etcd_values(store),
            timeout=ETCD_TIMEOUT_SECONDS,
            # After the policy its hooks need; on removal the release (and its pre-delete hook) goes first.
            opts=pulumi.ResourceOptions.merge(management, pulumi.ResourceOptions(
                depends_on=[namespace, setup_access, *args.images_ready])),
        )
        datastore_name = tenant_spec.dedicated_datastore_name(tenant.name)
        manifest = tenant_spec.datastore_manifest(
            datastore_name, tenant_spec.dedicated_datastore_spec(tenant.name, store.replicas), tenant.name)
        datastore = k8s.apiextensions.CustomResource(
            f"{name}-datastore", api_version=manifest["apiVersion"], kind=manifest["kind"],
            metadata=manifest["metadata"], spec=manifest["spec"],
            opts=pulumi.ResourceOptions.merge(management, pulumi.ResourceOptions(depends_on=[etcd, *args.depends_on])),
        )
        return datastore.metadata.apply(lambda m: m["name"]), [datastore]


# Kubernetes kinds this module creates from plain data: the resource class and its top-level fields.
_KINDS: dict[str, tuple[Any, tuple[tuple[str, str], ...]]] = {
    "ServiceAccount": (k8s.core.v1.ServiceAccount, ()),
    "ConfigMap": (k8s.core.v1.ConfigMap, (("data", "data"),)),
    "Secret": (k8s.core.v1.Secret, (("type", "type"), ("data", "data"), ("string_data", "stringData"))),
    "ClusterRole": (k8s.rbac.v1.ClusterRole, (("rules", "rules"),)),
    "ClusterRoleBinding": (k8s.rbac.v1.ClusterRoleBinding, (("role_ref", "roleRef"), ("subjects", "subjects"))),
    "Role": (k8s.rbac.v1.Role, (("rules", "rules"),)),
    "RoleBinding": (k8s.rbac.v1.RoleBinding, (("role_ref", "roleRef"), ("subjects", "subjects"))),
    "DaemonSet": (k8s.apps.v1.DaemonSet, (("spec", "spec"),)),
}


def _object(resource_name: str, shape: dict[str, Any], obj: pulumi.Input[dict[str, Any]],
            opts: pulumi.ResourceOptions) -> Any:
    """One Kubernetes object given as plain data (possibly an output), as the typed resource of its kind.

    `shape` is the object as far as it is known now: its kind and which top-level fields it sets.
    """
    resource_class, fields = _KINDS[shape["kind"]]
    value = pulumi.Output.from_input(obj)
    arguments = {arg: value.apply(lambda o, key=key: o[key]) for arg, key in fields if key in shape}
    return resource_class(resource_name, metadata=value.apply(lambda o: o["metadata"]), opts=opts, **arguments)
