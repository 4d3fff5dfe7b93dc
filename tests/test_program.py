"""The whole program on the dev lab (tests/fixtures/reference-stack.yaml): what a first `pulumi up` registers and leaves behind.

One simulated `up` is shared by the module (`lab`): its registrations, its stack outputs, the engine's state
(every resource's outputs) and the simulated machine it built. Tests that ask only what is registered read one
plain-mocks run (`registrations`), which is checked to register what the simulated `up` does.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from components.gpu.cards import REGISTER_ANNOTATION, register_annotation
from components.shell import CONTAINER_ENV, GONE_HINT_ENV
from components.tenant.spec import ADMIN_KUBECONFIG_KEY, admin_kubeconfig_secret_name, discovery_hash
from config import load_stack_config
from config.models import KIND_NODE_IMAGES, Management
from ops.graph import evaluate, generated_config, graph_nodes, tenant_owners
from ops.graph_analysis import analyse
from tests.support.crd_schema import crd_json_schema, schema_errors
from tests.support.fixtures import KIND_SUBNET_V4
from tests.support.mockrun import (
    ProgramRun,
    StackOutput,
    reference_stack,
    registered,
    registration,
    unwrap,
)
from tests.support.sim import Lifecycle, World, pki
from tests.support.sim.lab import lab_world
from tests.support.sim.state import is_secret, plain

RELEASE = "kubernetes:helm.sh/v3:Release"
COMMAND = "command:local:Command"
TCP = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"
TENANTS = ("tenant-a", "tenant-b")

STACK_OUTPUTS = {"plan", "gpuPlan", "managementKubeconfig", "kindSubnet", "workerNetworks", "lbPoolRange", "tenants",
                 "imageMirror", "tenantKubeconfigs", "tenantAdminKubeconfigs"}
SECRET_OUTPUTS = {"managementKubeconfig", "tenantKubeconfigs", "tenantAdminKubeconfigs"}


# --------------------------------------------------------------------------- #
# A first `up`, kept as a Lifecycle (shared with test_program_prod)
# --------------------------------------------------------------------------- #


@dataclass
class FirstUp:
    sim: Lifecycle
    run: ProgramRun

    @property
    def world(self) -> World:
        return self.sim.world


def first_up(config: dict[str, Any], world: World, *, stack: str = "dev", secret_keys: tuple[str, ...] = ()) -> FirstUp:
    """What `tests.support.mockrun.run_program` does (an `up` without preview), keeping the engine for its state."""
    sim = Lifecycle(copy.deepcopy(config), world=world, stack=stack, secret_keys=secret_keys)
    plan = sim.up(skip_preview=True)
    resources = [registration(r) for r in sim.engine.last_operation.registered.values()]
    outputs = {name: StackOutput(unwrap(value), name in plan.secret_outputs) for name, value in plan.outputs.items()}
    return FirstUp(sim, ProgramRun(resources=resources, outputs=outputs))


def credential_parts(kubeconfig: str) -> set[str]:
    """What must never be readable in a kubeconfig: the whole document (also base64-encoded), its client keys
    and tokens."""
    parts = {kubeconfig, base64.b64encode(kubeconfig.encode()).decode()}
    for user in yaml.safe_load(kubeconfig).get("users") or []:
        entry = user.get("user") or {}
        parts |= {entry[key] for key in ("client-key-data", "token") if entry.get(key)}
    return parts


def plain_strings(value: Any) -> Iterator[str]:
    """Every string in `value` outside a secret marker (Helm value files count by their text)."""
    if is_secret(value):
        return
    if isinstance(value, dict):
        for item in value.values():
            yield from plain_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from plain_strings(item)
    elif isinstance(value, str):
        yield value
    elif isinstance(getattr(value, "text", None), str):
        yield value.text


def readable_places(up: FirstUp) -> Iterator[tuple[str, str]]:
    """(where, text) for everything `pulumi stack export` or the console shows without decrypting: resource
    inputs and outputs outside secret markers (outputs named in additionalSecretOutputs are encrypted), and
    the stack outputs that are not secret."""
    for resource in up.run.resources:
        for key, value in resource.raw_inputs.items():
            for text in plain_strings(value):
                yield f"{resource.name} input {key}", text
    for resource in up.sim.engine.state.values():
        for key, value in resource.outputs.items():
            if key not in resource.additional_secret_outputs:
                for text in plain_strings(value):
                    yield f"{resource.name} output {key}", text
    for name, output in up.run.outputs.items():
        if not output.secret:
            for text in plain_strings(output.value):
                yield f"stack output {name}", text


def leaks(up: FirstUp, secrets: set[str]) -> list[str]:
    return sorted({where for where, text in readable_places(up) for secret in secrets if secret in text})


# --------------------------------------------------------------------------- #
# The dev lab
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def lab() -> FirstUp:
    return first_up(reference_stack(), lab_world())


@pytest.fixture(scope="module")
def dev(lab) -> ProgramRun:
    return lab.run


@pytest.fixture(scope="module")
def registrations() -> ProgramRun:
    """What the program registers for the dev lab, under plain mocks."""
    return registered(reference_stack())


def test_management_plane_is_built_in_dependency_order(dev, lab):
    kind = dev.named("management-kind", COMMAND)
    kind_config = yaml.safe_load(kind.inputs["stdin"])
    assert kind_config["name"] == "gpu-tenancy"
    assert [node["image"] for node in kind_config["nodes"]] == [Management().node_image]
    cert_manager, metallb, kamaji = (dev.named(f"kamaji-{name}", RELEASE) for name in ("cert-manager", "metallb",
                                                                                         "kamaji"))
    datastore, webhook, pool = (dev.named(f"kamaji-{name}") for name in ("datastore", "webhook-ready", "ip-pool"))
    assert (kamaji.inputs["name"], kamaji.inputs["namespace"]) == ("kamaji", "kamaji-system")
    assert kamaji.inputs["values"]["image"]["tag"] == "26.8.2-edge"
    assert dev.depends_on(cert_manager, kind)
    assert dev.depends_on(kamaji, cert_manager)
    assert dev.depends_on(webhook, datastore) and dev.depends_on(datastore, kamaji)
    assert dev.depends_on(pool, metallb)
    for tcp in dev.of_type(TCP):
        for needed in (webhook, datastore, pool):
            assert dev.depends_on(tcp, needed), (tcp.name, needed.name)
    # The pool lies in the kind network the simulated Docker created; every tenant got an address from it.
    first, last = (ipaddress.ip_address(a) for a in pool.inputs["spec"]["addresses"][0].split("-"))
    assert first in ipaddress.ip_network(KIND_SUBNET_V4) and last in ipaddress.ip_network(KIND_SUBNET_V4)
    assert lab.world.docker.networks["kind"][-1] == KIND_SUBNET_V4 == dev.outputs["kindSubnet"].value
    for tenant in dev.outputs["tenants"].value.values():
        host, _, port = tenant["endpoint"].rpartition(":")
        assert first <= ipaddress.ip_address(host) <= last and port == "6443"


def test_every_tenant_gets_a_schema_valid_control_plane_with_all_addons(registrations, vendor_dir):
    schema = crd_json_schema(vendor_dir / "kamaji" / "kamaji.clastix.io_tenantcontrolplanes.yaml")
    tcps = {r.inputs["metadata"]["name"]: r for r in registrations.of_type(TCP)}
    assert sorted(tcps) == list(TENANTS)
    for tcp in tcps.values():
        manifest = {k: tcp.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}
        assert schema_errors(manifest, schema) == []
        # kube-proxy is not Kamaji's addon: the program runs its own (components/tenant/kube_proxy.py).
        assert set(manifest["spec"]["addons"]) == {"coreDNS", "konnectivity"}
        tenant = manifest["metadata"]["name"]
        assert registrations.named(f"{tenant}-kube-proxy-daemonset").inputs["metadata"]["namespace"] == "kube-system"
    assert tcps["tenant-b"].inputs["spec"]["networkProfile"]["podCidrs"] == ["10.245.0.0/16"]


def test_stack_outputs_and_which_are_secret(dev, lab):
    assert set(dev.outputs) == STACK_OUTPUTS
    assert {name for name, output in dev.outputs.items() if output.secret} == SECRET_OUTPUTS
    assert dev.outputs["managementKubeconfig"].value == lab.world.kind_admin_kubeconfig("gpu-tenancy")
    assert dev.outputs["workerNetworks"].value == [KIND_SUBNET_V4]
    assert set(dev.outputs["tenants"].value) == set(dev.outputs["tenantKubeconfigs"].value) == set(TENANTS)
    assert dev.outputs["plan"].value["tenants"]["tenant-a"]["serviceCidr"] == "10.96.0.0/16"


def test_tenant_admin_kubeconfigs_are_kamajis_admin_conf_and_pin_the_ca_workers_trust(dev, lab):
    host = lab.world.kind["gpu-tenancy"].api
    for name, tenant in dev.outputs["tenants"].value.items():
        api = lab.world.tenant_api(name)
        admin = dev.outputs["tenantAdminKubeconfigs"].value[name]
        stored = host.find("Secret", name, admin_kubeconfig_secret_name(name))
        assert admin == base64.b64decode(stored["data"][ADMIN_KUBECONFIG_KEY]).decode()
        parsed = pki.parse_kubeconfig(admin)
        assert parsed.server == api.server == f"https://{tenant['endpoint']}"
        # kubeadm's admin.conf identity (kubeadm:cluster-admins), not system:masters.
        assert pki.identity_of(parsed.client_certificate).groups == ("kubeadm:cluster-admins",)
        assert api.authenticate(admin).user == "kubernetes-admin"
        assert tenant["discoveryHash"] == discovery_hash(api.ca.pem)


def test_tenant_kubeconfigs_are_the_restricted_user_credential(dev, lab):
    for name, tenant in dev.outputs["tenants"].value.items():
        document = yaml.safe_load(dev.outputs["tenantKubeconfigs"].value[name])
        (user,) = [entry["user"] for entry in document["users"]]
        (cluster,) = [entry["cluster"] for entry in document["clusters"]]
        (context,) = [entry["context"] for entry in document["contexts"]]
        # A service-account token only: no client certificate, so no kubeadm or system group.
        assert set(user) == {"token"}
        token_secret = lab.world.tenant_api(name).find("Secret", "kube-system", "tenant-user-token")
        assert user["token"] == base64.b64decode(token_secret["data"]["token"]).decode()
        assert cluster["server"] == f"https://{tenant['endpoint']}"
        assert base64.b64decode(cluster["certificate-authority-data"]) == lab.world.tenant_api(name).ca.pem
        assert context["namespace"] == "default"
        # What that account may do: `edit` in its workload namespace, nothing cluster-wide.
        binding = dev.named(f"{name}-user-rolebinding-default")
        assert binding.inputs["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                             "name": "edit"}
        assert binding.inputs["subjects"] == [{"kind": "ServiceAccount", "name": "tenant-user",
                                               "namespace": "kube-system"}]
        cluster_wide = [r for r in dev.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")
                        if any(s.get("name") == "tenant-user" for s in r.inputs.get("subjects") or [])]
        assert cluster_wide == []


def test_no_secret_is_readable_in_any_input_output_or_state(lab):
    host = lab.world.kind["gpu-tenancy"].api
    secrets = credential_parts(lab.run.outputs["managementKubeconfig"].value)
    for name in TENANTS:
        # Every credential Kamaji wrote (admin.conf, super-admin.conf, ...), the user token, each join token.
        stored = host.find("Secret", name, admin_kubeconfig_secret_name(name))
        for encoded in stored["data"].values():
            secrets |= credential_parts(base64.b64decode(encoded).decode())
        secrets |= credential_parts(lab.run.outputs["tenantKubeconfigs"].value[name])
        token = plain(lab.sim.resource(f"{name}-worker-0-membership").outputs["token"])
        secrets |= {token, token.split(".")[1], base64.b64encode(token.encode()).decode()}
    assert leaks(lab, secrets) == []
    # The scan sees these values: the join token does reach the node, inside the secret stdin.
    join = lab.run.named("tenant-a-worker-0-join")
    token = plain(lab.sim.resource("tenant-a-worker-0-membership").outputs["token"])
    assert join.is_secret("stdin") and base64.b64encode(token.encode()).decode() in join.inputs["stdin"]


def test_commands_that_carry_credentials_never_log_them(registrations):
    kind = registrations.named("management-kind", COMMAND)
    # stdout is the kubeconfig: kept secret, and only stderr is logged.
    assert kind.inputs["logging"] == "stderr" and kind.additional_secret_outputs == ["stdout"]
    joins = [c for c in registrations.of_type(COMMAND) if c.name.endswith("-join")]
    assert sorted(j.name for j in joins) == ["tenant-a-worker-0-join", "tenant-b-worker-0-join"]
    for join in joins:
        assert join.is_secret("stdin") and join.inputs["logging"] == "none"
        assert {"stdout", "stderr"} <= set(join.additional_secret_outputs)
        # The command line names the action only; the environment names the container only.
        assert (join.inputs["create"], join.inputs["delete"]) == ("create", "delete")
        assert set(join.inputs["environment"]) == {CONTAINER_ENV, GONE_HINT_ENV}
        assert join.inputs["environment"][CONTAINER_ENV] == join.name.removesuffix("-join")


def test_workers_are_kind_node_containers_joined_through_their_membership(dev, lab):
    kind = dev.named("management-kind", COMMAND)
    for tenant in TENANTS:
        node = f"{tenant}-worker-0"
        image = dev.named(f"{node}-image")
        container = dev.named(f"{node}-container")
        assert image.inputs["name"] == KIND_NODE_IMAGES["v1.35.0"]
        assert (container.inputs["name"], container.inputs["hostname"]) == (node, node)
        assert container.inputs["networksAdvanced"] == [{"name": "kind"}]
        assert dev.depends_on(container, kind) and dev.depends_on(container, image)
        membership, join, registered = (dev.named(f"{node}-{step}") for step in ("membership", "join", "registered"))
        assert dev.depends_on(membership, container) and dev.depends_on(membership, dev.named(f"{tenant}-tcp"))
        assert dev.depends_on(join, membership) and dev.depends_on(registered, join)
        # On the machine: the container runs on the kind network, its kubelet is joined, the Node exists.
        assert lab.world.docker.containers[node].network == "kind"
        assert lab.world.machines[node].kubelet_conf == f"https://{dev.outputs['tenants'].value[tenant]['endpoint']}"
        assert lab.world.tenant_api(tenant).find("Node", None, node) is not None
        assert dev.outputs["tenants"].value[tenant]["nodes"] == [node]


def test_hami_per_tenant_after_joins_cni_and_the_tunnel(registrations):
    hami = {r.name: r for r in registrations.of_type(RELEASE) if r.inputs["name"] == "hami"}
    assert sorted(hami) == ["tenant-a-hami", "tenant-b-hami"]
    for tenant in TENANTS:
        release = hami[f"{tenant}-hami"]
        values = release.inputs["values"]
        # The local chart of `make charts` (its version is the chart's own, set by the provider's Check).
        assert release.inputs["namespace"] == "kube-system" and release.inputs["chart"].endswith("/hami")
        assert values["scheduler"]["admissionWebhook"]["failurePolicy"] == "Fail"
        assert values["mockDevicePlugin"]["enabled"] is True and values["devicePlugin"]["enabled"] is False
        # Workers joined -> CNI -> Konnectivity agents -> HAMi (the order components/gpu/hami.py explains).
        assert registrations.depends_on(registrations.named(f"{tenant}-calico-crds"),
                                        registrations.named(f"{tenant}-worker-0-registered"))
        for needed in ("worker-0-registered", "calico", "konnectivity-ready"):
            assert registrations.depends_on(release, registrations.named(f"{tenant}-{needed}")), needed


def test_simulated_cards_capacity_and_the_smoke_test_per_tenant(dev, lab):
    config = load_stack_config(reference_stack())
    for tenant, worker in ((t.name, t.workers[0]) for t in config.tenants):
        node = f"{tenant}-{worker.name}"
        patch = dev.named(f"{node}-gpu-register")
        assert patch.inputs["metadata"]["annotations"][REGISTER_ANNOTATION] == register_annotation(worker.gpus)
        assert dev.named(f"{node}-gpu-capacity").inputs["capacity"] == 10
        live = lab.world.tenant_api(tenant).find("Node", None, node)
        assert live["metadata"]["annotations"][REGISTER_ANNOTATION] == register_annotation(worker.gpus)
        assert live["status"]["allocatable"]["nvidia.com/gpu"] == "10"
        pod = dev.named(f"{tenant}-gpu-smoke-test")
        limits = pod.inputs["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}
        assert "schedulerName" not in pod.inputs["spec"]
        assert pod.inputs["spec"]["nodeSelector"] == {"kubernetes.io/hostname": node}
        assert dev.depends_on(pod, dev.named(f"{tenant}-hami"))
        evidence = dev.outputs["tenants"].value[tenant]["smokeTest"]
        assert (evidence["schedulerName"], evidence["node"]) == ("hami-scheduler", node)
        assert evidence["nodeResources"] == {"nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "100"}
        assert dev.outputs["tenants"].value[tenant]["gpuCapacity"] == {node: 10}


def test_the_smoke_pod_is_pinned_to_the_first_worker_its_request_fits():
    raw = reference_stack()
    small = {"uuid": "GPU-MOCK-A9", "model": "NVIDIA-T4", "memoryMiB": 2048}
    raw["tenants"][0]["podCidr"] = "10.244.0.0/16"
    raw["tenants"][0]["workers"].insert(0, {"name": "small", "gpus": [small]})
    config = load_stack_config(raw)
    assert config.smoke_test.worker_in(config.tenants[0]).name == "worker-0"
    run = registered(raw, preview=True)
    pod = run.named("tenant-a-gpu-smoke-test")
    assert pod.inputs["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "tenant-a-worker-0"}
    assert run.depends_on(pod, run.named("tenant-a-worker-0-registered"))


def test_the_program_reads_like_the_picture_one_tenant_component_each(dev):
    """Top level: the management layer and one `Tenant` per tenant, which holds everything of that tenant."""
    stack = next(r.parent for r in dev.resources if r.name == "kamaji")
    top = {(r.type.rpartition(":")[2], r.name) for r in dev.resources if r.parent == stack}
    assert top == {("ManagementCluster", "management"), ("RegistryMirror", "image-mirror"), ("Kamaji", "kamaji"),
                   *(("Tenant", name) for name in TENANTS)}
    for name in TENANTS:
        tenant = dev.named(name, "gpu-tenancy:index:Tenant")
        parts = {(r.type.rpartition(":")[2], r.name) for r in dev.children(tenant)}
        assert parts == {("TenantVersion", f"{name}-version"), ("TenantControlPlane", name),
                         ("WorkerNode", f"{name}-worker-0"), ("TenantCni", name), ("TenantGpus", name),
                         ("ValidatingAdmissionPolicy", f"{name}-node-label-policy"),
                         ("ValidatingAdmissionPolicyBinding", f"{name}-node-label-policy-binding")}
        mine = {r.name for r in dev.descendants(tenant) if r.custom}
        assert mine == {r.name for r in dev.resources if r.custom and r.name.startswith(f"{name}-")}


# Inputs a provider's Check adds to what the program sent (the simulator keeps checked inputs, as the engine does;
# plain mocks run no Check): a Release's version, from its local chart's Chart.yaml (helm_release.go Check).
CHECK_ADDS = {RELEASE: {"version"}}


def _shape(run: ProgramRun) -> dict[str, tuple]:
    """Per URN: what a registration says apart from values a provider computed (ids, addresses, credentials)."""
    return {r.urn: (r.type, r.parent, r.custom, r.read, sorted(r.dependencies),
                    {key: sorted(urns) for key, urns in r.property_dependencies.items()},
                    r.provider.rsplit("::", 1)[0], sorted(r.additional_secret_outputs), r.retain_on_delete,
                    r.delete_before_replace, r.ignore_changes, r.replace_on_changes, r.deleted_with,
                    {k: v for k, v in r.custom_timeouts.items() if v},
                    {key: r.is_secret(key) for key in r.raw_inputs if key not in CHECK_ADDS.get(r.type, ())})
            for r in run.resources}


def test_plain_mocks_register_what_the_simulated_up_registers(registrations, dev):
    # ops/registrations.py answers just enough for the program to go on: the same resources, parents, dependencies,
    # options and secret inputs as a first `up` against the simulated machine.
    plain = registrations
    assert _shape(plain) == _shape(dev)
    assert set(plain.outputs) == STACK_OUTPUTS
    assert {name for name, output in plain.outputs.items() if output.secret} == SECRET_OUTPUTS


def test_tenants_do_not_depend_on_each_other(registrations):
    report = analyse(graph_nodes(registrations), tenant_owners(load_stack_config(reference_stack())))
    assert report.cross_tenant == []
    assert {t for t in report.tenant_of.values() if t} == set(TENANTS)


def test_more_tenants_do_not_lengthen_the_critical_path(registrations):
    owners = tenant_owners(load_stack_config(reference_stack()))
    two = analyse(graph_nodes(registrations), owners)
    four = evaluate(generated_config(4)).report
    assert len(four.longest_chain) == len(two.longest_chain)
    assert four.resource_count > two.resource_count
