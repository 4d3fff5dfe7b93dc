"""Validation rules that keep a stack from being unsafe or from failing half-way (config/validate.py).

Host keys for SSH workers, kindest/node images that exist, container names that cannot collide, system
namespaces, open source ranges, what the adopted cluster's kubeconfig may do, malformed input answered with a
message, and credentials never repeated in one.
"""

import copy

import pytest
import yaml

from config import ConfigError, load_stack_config
from config.models import KIND_NODE_IMAGES, MAX_SOURCE_RANGES
from tests.support.mockrun import reference_stack
from tests.support.sim import Lifecycle
from tests.support.sim.lab import lab_world
from tests.test_config_infrastructure import HOST_KEY, KUBECONFIG, PRIVATE_KEY, SECRET_FRAGMENT, adopted, ssh

SECRETS = {"management", "tenants"}


def dev():
    return copy.deepcopy(reference_stack())


def problems(raw, secret_keys=SECRETS):
    """{path: [messages]} and the whole message of the ConfigError `raw` must raise."""
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw, secret_keys)
    found: dict[str, list[str]] = {}
    for issue in caught.value.issues:
        found.setdefault(issue.path, []).append(str(issue))
    return found, str(caught.value)


def valid(raw, secret_keys=SECRETS):
    return load_stack_config(raw, secret_keys)


# --------------------------------------------------------------------------- #
# SSH workers: the server's host key is required
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("port, keyscan", [(22, "ssh-keyscan -t ed25519 10.20.1.11"),
                                           (2222, "ssh-keyscan -p 2222 -t ed25519 10.20.1.11")])
def test_an_ssh_worker_without_host_key_is_refused_with_the_command_to_read_it(port, keyscan):
    raw = adopted()
    del raw["tenants"][0]["workers"][0]["ssh"]["hostKey"]
    raw["tenants"][0]["workers"][0]["ssh"]["port"] = port
    found, message = problems(raw)
    assert list(found) == ["tenants[0].workers[0].ssh.hostKey"]
    assert keyscan in message
    assert "pulumi config set --path 'gpu-tenancy:tenants[0].workers[0].ssh.hostKey'" in message


def test_ed25519_and_ecdsa_host_keys_are_accepted():
    for key in (HOST_KEY, "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY="):
        raw = adopted()
        raw["tenants"][0]["workers"][0]["ssh"]["hostKey"] = key
        assert valid(raw).tenants[0].workers[0].ssh.host_key == key


# --------------------------------------------------------------------------- #
# What can run where
# --------------------------------------------------------------------------- #


def test_nvidia_mode_refuses_gpus_on_container_workers():
    raw = dev()
    raw["gpuMode"] = "nvidia"
    found, message = problems(raw, set())
    assert set(found) == {"tenants[0].workers[0].gpus", "tenants[1].workers[0].gpus"}
    assert "HAMi's device plugin cannot start" in message


def test_nvidia_options_only_with_nvidia_mode():
    raw = dev()
    raw["nvidia"] = {"runtimeClassName": "nvidia"}
    found, _ = problems(raw, set())
    assert list(found) == ["nvidia"]


def test_container_names_may_not_collide_across_tenants():
    raw = dev()
    # tenant-a + worker-0 and tenant-a-worker + 0 are both the container (and Node) tenant-a-worker-0.
    raw["tenants"][1]["name"] = "tenant-a-worker"
    raw["tenants"][1]["workers"][0]["name"] = "0"
    found, message = problems(raw, set())
    assert list(found) == ["tenants[1].workers[0].name"]
    assert "'tenant-a-worker-0'" in message and "tenants[0].workers[0]" in message


def test_a_container_worker_may_not_take_the_kind_nodes_name():
    raw = dev()
    raw["tenants"][0]["name"] = "gpu-tenancy"
    raw["tenants"][0]["workers"][0]["name"] = "control-plane"
    found, message = problems(raw, set())
    assert list(found) == ["tenants[0].workers[0].name"]
    assert "kind node of management.clusterName 'gpu-tenancy'" in message
    # Another cluster name, another kind node: no collision.
    raw["management"] = {"clusterName": "lab"}
    assert valid(raw, set())


def test_an_ssh_worker_may_not_share_its_node_name_with_a_container_worker():
    # Not a Docker clash, but the same Node name and the same WorkerNode resource name (a duplicate URN).
    raw = dev()
    raw["tenants"][1]["name"] = "tenant-a-worker"
    raw["tenants"][1]["workers"][0]["name"] = "0"
    raw["tenants"][1]["workers"][0]["ssh"] = ssh()
    found, message = problems(raw, {"tenants"})
    assert list(found) == ["tenants[1].workers[0].name"] and "'tenant-a-worker-0'" in message


def test_container_workers_need_a_published_kindest_node_image():
    raw = dev()
    raw["tenants"][0]["kubernetesVersion"] = "v1.36.0"
    found, message = problems(raw, set())
    assert list(found) == ["tenants[0].kubernetesVersion"]
    assert f"known: {', '.join(KIND_NODE_IMAGES)}" in message and "tenants[0].nodeImage" in message
    # An image of one's own (kind build node-image) ...
    raw["tenants"][0]["nodeImage"] = "registry.example/kindest-node:v1.36.0@sha256:" + "a" * 64
    assert valid(raw, set()).tenants[0].node_image.startswith("registry.example/")
    # ... or no container workers at all.
    del raw["tenants"][0]["nodeImage"]
    raw["tenants"][0]["workers"][0]["ssh"] = ssh()
    assert valid(raw, {"tenants"}).tenants[0].kubernetes_version == "v1.36.0"


def test_node_image_only_with_container_workers():
    raw = adopted()
    raw["tenants"][0]["nodeImage"] = KIND_NODE_IMAGES["v1.35.0"]
    found, _ = problems(raw)
    assert list(found) == ["tenants[0].nodeImage"]


def test_published_images_are_the_ones_kind_lists(vendor_dir):
    """KIND_NODE_IMAGES against kind's own record of its pre-built images (vendored kind README)."""
    text = (vendor_dir / "kind" / "README.txt").read_text()
    for version, image in KIND_NODE_IMAGES.items():
        name, _, digest = image.partition("@sha256:")
        assert name == f"kindest/node:{version}" and len(digest) == 64
        assert image in text or f"{version}@sha256:{digest[:8]}..." in text, image


# --------------------------------------------------------------------------- #
# Data stores and namespaces
# --------------------------------------------------------------------------- #


def test_data_store_settings_only_for_a_dedicated_store():
    raw = dev()
    raw["tenants"][0]["dataStore"] = {"replicas": 3, "storageSize": "5Gi", "quotaMiB": 2048}
    found, message = problems(raw, set())
    assert set(found) == {f"tenants[0].dataStore.{key}" for key in ("replicas", "storageSize", "quotaMiB")}
    assert "dataStore.dedicated: true" in message
    raw["tenants"][0]["dataStore"]["dedicated"] = True
    store = valid(raw, set()).tenants[0].data_store
    assert (store.replicas, store.storage_size, store.quota_mib) == (3, "5Gi", 2048)


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease", "kube-anything",
                                       "tigera-operator", "calico-system", "calico-apiserver"])
def test_system_namespaces_are_no_workload_namespaces(namespace):
    raw = dev()
    raw["tenants"][0]["namespaces"] = ["default", namespace]
    found, _ = problems(raw, set())
    assert list(found) == ["tenants[0].namespaces[1]"]


def test_workload_namespaces_are_listed_once():
    raw = dev()
    raw["tenants"][0]["namespaces"] = ["default", "ml", "default"]
    found, message = problems(raw, set())
    assert list(found) == ["tenants[0].namespaces[2]"]
    assert "listed twice" in message
    raw["tenants"][0]["namespaces"] = ["default", "ml"]
    assert valid(raw, set()).tenants[0].namespaces == ["default", "ml"]


# --------------------------------------------------------------------------- #
# Who may reach the tenant API servers
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("key", ["workerCidrs", "operatorCidrs"])
def test_any_source_is_refused_unless_allowed(key):
    raw = adopted()
    raw["management"][key] = ["0.0.0.0/0"]
    found, message = problems(raw)
    assert list(found) == [f"management.{key}[0]"]
    assert "management.allowAnySource: true" in message
    raw["management"]["allowAnySource"] = True
    assert valid(raw).management.allow_any_source


def test_nearly_any_source_is_refused_too_also_in_a_tenants_own_networks():
    raw = adopted()
    raw["management"]["operatorCidrs"] = ["0.0.0.0/1", "128.0.0.0/1"]
    raw["tenants"][0]["workerCidrs"] = ["10.0.0.0/7"]
    found, message = problems(raw)
    assert set(found) == {"management.operatorCidrs[0]", "management.operatorCidrs[1]", "tenants[0].workerCidrs[0]"}
    raw["tenants"][0]["workerCidrs"] = ["10.0.0.0/8"]
    raw["management"]["operatorCidrs"] = ["10.30.0.0/24"]
    assert valid(raw).tenants[0].worker_cidrs == ["10.0.0.0/8"]


def test_every_tenant_needs_some_worker_network_in_adopt_mode():
    raw = adopted()
    raw["management"].pop("workerCidrs", None)
    found, _ = problems(raw)
    assert "management.workerCidrs" in found
    for tenant in raw["tenants"]:
        tenant["workerCidrs"] = ["10.20.7.0/24"]
    assert valid(raw)


def _networks(count, third=40):
    return [f"10.{third}.{i}.0/24" for i in range(count)]


def test_more_source_networks_than_a_tenant_control_plane_takes_is_a_config_error():
    # loadBalancerSourceRanges has MaxItems=16 in Kamaji's CRD: the 17th network was refused by the API server at
    # `up`, after the management cluster and every tenant before it existed.
    raw = adopted(operatorCidrs=["10.30.0.0/24"])  # with management.workerCidrs: 2 networks every tenant admits
    raw["tenants"][0]["workerCidrs"] = _networks(15)
    found, message = problems(raw)
    assert list(found) == ["tenants[0].workerCidrs"]
    assert "makes 17 networks that tenants[0] ('team-a') admits" in message
    assert "at most 16" in message and "10.20.0.0/23" in message
    assert "kind network" not in message  # an existing cluster adds none
    # The same network in two lists is one source range; 16 fit.
    raw["tenants"][0]["workerCidrs"] = [*_networks(14), "10.30.0.0/24"]
    assert len(valid(raw).tenants[0].worker_cidrs) == 15


def test_the_lab_counts_the_kind_network_and_names_the_shared_key_once():
    raw = dev()
    raw.setdefault("management", {}).update(workerCidrs=_networks(10), operatorCidrs=_networks(6, third=41))  # 16 with the kind network: every tenant is over
    found, message = problems(raw, set())
    assert list(found) == ["management.operatorCidrs"]
    assert "management.workerCidrs and management.operatorCidrs and the kind network are 17 networks" in message
    raw["management"]["operatorCidrs"] = _networks(5, third=41)
    assert valid(raw, set())


def test_too_many_source_networks_stop_the_first_lab_run_before_the_kind_cluster_exists():
    raw = dev()
    raw.setdefault("management", {})["workerCidrs"] = _networks(16)
    sim = Lifecycle(raw, world=lab_world())
    plan = sim.up(expect_error=True)
    assert not plan.ok and "management.workerCidrs" in plan.error and "at most 16" in plan.error, plan.render()
    assert (sim.world.kind, sim.world.docker.containers, sim.resources()) == ({}, {}, [])


def test_the_source_range_limit_is_the_tenant_control_plane_crds(vendor_dir):
    crd = yaml.safe_load((vendor_dir / "kamaji" / "kamaji.clastix.io_tenantcontrolplanes.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    ranges = spec["properties"]["networkProfile"]["properties"]["loadBalancerSourceRanges"]
    assert ranges["maxItems"] == MAX_SOURCE_RANGES == 16


@pytest.mark.parametrize("allow", [False, True])
def test_the_ipv6_any_range_is_refused_even_when_any_source_is_allowed(allow):
    raw = adopted(allowAnySource=allow)
    raw["management"]["operatorCidrs"] = ["::/0"]
    found, _ = problems(raw)
    assert list(found) == ["management.operatorCidrs[0]"]


# --------------------------------------------------------------------------- #
# The adopted cluster's kubeconfig
# --------------------------------------------------------------------------- #


def _kubeconfig(change) -> str:
    document = yaml.safe_load(KUBECONFIG)
    change(document)
    return yaml.safe_dump(document)


def _user(document):
    return document["users"][0]["user"]


def _cluster(document):
    return document["clusters"][0]["cluster"]


EXEC_PLUGIN = {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws", "args": ["eks", "get-token"]}


@pytest.mark.parametrize("plugin", [
    lambda d: _user(d).update({"exec": EXEC_PLUGIN}),
    lambda d: _user(d).update({"auth-provider": {"name": "oidc", "config": {}}}),
], ids=["exec", "auth-provider"])
def test_credential_plugins_are_refused_unless_allowed(plugin):
    raw = adopted(kubeconfig=_kubeconfig(plugin))
    found, message = problems(raw)
    assert list(found) == ["management.kubeconfig"]
    assert "management.allowExecCredentials: true" in message
    raw["management"]["allowExecCredentials"] = True
    assert valid(raw).management.allow_exec_credentials


def test_allow_exec_credentials_only_with_an_adopted_cluster():
    raw = dev()
    raw["management"] = {"allowExecCredentials": True}
    found, _ = problems(raw, set())
    assert list(found) == ["management.allowExecCredentials"]


@pytest.mark.parametrize("change, text", [
    (lambda d: _cluster(d).update({"insecure-skip-tls-verify": True}), "insecure-skip-tls-verify"),
    (lambda d: _cluster(d).update({"server": "http://10.20.0.10:8080"}), "plain-HTTP"),
], ids=["insecure-skip-tls-verify", "http-server"])
def test_an_unverified_or_plain_text_api_connection_is_refused(change, text):
    found, message = problems(adopted(kubeconfig=_kubeconfig(change)))
    assert list(found) == ["management.kubeconfig"]
    assert text in message
    assert "client-key-data" not in message and _user(yaml.safe_load(KUBECONFIG))["client-key-data"] not in message


MALFORMED_KUBECONFIGS = {
    "not-yaml": "clusters: [\n",
    "a-list": "- clusters\n- users\n",
    "clusters-a-string": _kubeconfig(lambda d: d.update(clusters="prod")),
    "contexts-a-number": _kubeconfig(lambda d: d.update(contexts=5)),
    "users-missing": _kubeconfig(lambda d: d.pop("users")),
    "a-mapping-not-text": yaml.safe_load(KUBECONFIG),
    "cluster-entry-a-string": _kubeconfig(lambda d: d["clusters"][0].update(cluster="prod")),
    "user-entry-a-string": _kubeconfig(lambda d: d["users"][0].update(user="admin")),
}


@pytest.mark.parametrize("kubeconfig", list(MALFORMED_KUBECONFIGS.values()), ids=list(MALFORMED_KUBECONFIGS))
def test_a_malformed_kubeconfig_gets_a_message_not_an_exception(kubeconfig):
    found, message = problems(adopted(kubeconfig=kubeconfig))
    assert "management.kubeconfig" in found, message
    assert "client-key-data" not in message and "BEGIN" not in message


MALFORMED_STRUCTURES = {
    "tenants-a-string": (lambda r: r.update(tenants="tenant-a"), "tenants"),
    "tenant-null": (lambda r: r["tenants"].__setitem__(0, None), "tenants[0]"),
    "workers-null": (lambda r: r["tenants"][0].update(workers=None), "tenants[0].workers"),
    "worker-a-string": (lambda r: r["tenants"][0]["workers"].__setitem__(0, "worker-0"), "tenants[0].workers[0]"),
    "gpus-a-mapping": (lambda r: r["tenants"][0]["workers"][0].update(gpus={"uuid": "G"}), "tenants[0].workers[0].gpus"),
    "namespaces-a-string": (lambda r: r["tenants"][0].update(namespaces="default"), "tenants[0].namespaces"),
    "management-a-list": (lambda r: r.update(management=[]), "management"),
    "smoke-test-a-number": (lambda r: r.update(smokeTest=5), "smokeTest"),
    "ssh-a-string": (lambda r: r["tenants"][0]["workers"][0].update(ssh="root@10.0.0.1"), "tenants[0].workers[0].ssh"),
}


@pytest.mark.parametrize("mutate, path", list(MALFORMED_STRUCTURES.values()), ids=list(MALFORMED_STRUCTURES))
def test_malformed_structure_gets_a_message_naming_the_key(mutate, path):
    raw = dev()
    mutate(raw)
    found, message = problems(raw, set())
    assert path in found, message


def test_security_rules_report_with_field_errors_in_one_round():
    raw = adopted(kubeconfig=_kubeconfig(lambda d: _user(d).update({"exec": EXEC_PLUGIN})), operatorCidrs=["0.0.0.0/0"])
    worker = raw["tenants"][0]["workers"][0]
    del worker["ssh"]["hostKey"]
    worker["ssh"]["port"] = 0
    raw["tenants"][0]["namespaces"] = ["default", "kube-system"]
    found, message = problems(raw)
    assert set(found) == {"management.kubeconfig", "management.operatorCidrs[0]", "tenants[0].workers[0].ssh.port",
                          "tenants[0].workers[0].ssh.hostKey", "tenants[0].namespaces[1]"}, message
    assert "(5 problems)" in message


def test_a_kubeconfig_whose_current_context_does_not_resolve_is_reported_with_the_rest():
    raw = adopted(kubeconfig=_kubeconfig(lambda d: d.update({"current-context": "elsewhere"})),
                  workerCidrs=["0.0.0.0/0"])
    found, message = problems(raw)
    assert {"management.kubeconfig", "management.workerCidrs[0]"} <= set(found), message


# --------------------------------------------------------------------------- #
# Credentials are never repeated in a message
# --------------------------------------------------------------------------- #


def test_a_private_key_pasted_as_host_key_is_not_echoed():
    raw = adopted()
    raw["tenants"][0]["workers"][0]["ssh"]["hostKey"] = PRIVATE_KEY
    found, message = problems(raw)
    assert "tenants[0].workers[0].ssh.hostKey" in found
    assert "[secret]" in message
    assert SECRET_FRAGMENT not in message and "PRIVATE KEY" not in message


def test_credential_looking_text_in_any_key_is_redacted():
    raw = dev()
    raw["tenants"][0]["workers"][0]["gpus"][0]["model"] = "token: s3cr3t"
    found, message = problems(raw, set())
    assert "tenants[0].workers[0].gpus[0].model = '[secret]'" in message
    assert "s3cr3t" not in message


def test_a_kubeconfig_under_a_misspelt_key_is_not_echoed():
    raw = adopted()
    raw["management"]["kubeConfig"] = raw["management"].pop("kubeconfig")
    found, message = problems(raw)
    assert "did you mean 'kubeconfig'" in message
    assert "client-key-data" not in message and "BEGIN" not in message


def test_a_bad_private_key_is_not_echoed():
    raw = adopted()
    raw["tenants"][0]["workers"][0]["ssh"]["privateKey"] = "hunter2-not-a-key"
    found, message = problems(raw)
    assert "tenants[0].workers[0].ssh.privateKey" in found
    assert "hunter2" not in message


def test_a_token_kubeconfig_is_accepted_and_never_echoed_with_other_errors():
    token_kubeconfig = _kubeconfig(lambda d: d["users"][0].update(user={"token": "sha256~s3cr3t-token"}))
    assert valid(adopted(kubeconfig=token_kubeconfig)).management.adopts_existing_cluster
    raw = adopted(kubeconfig=token_kubeconfig, workerCidrs=["0.0.0.0/0"], clusterName="lab")
    _, message = problems(raw)
    assert "s3cr3t" not in message


@pytest.mark.parametrize(("key", "why"), [
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyReplaceMe0000", "not a whole ssh-ed25519"),
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKey=ReplaceMe", "not valid base64"),
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA", "not a whole ssh-ed25519"),
    # An ECDSA key blob labelled ed25519 (RFC 4253 6.6: the blob names its own type).
    ("ssh-ed25519 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBA==", "its data names 'ecdsa-sha2-nistp256'"),
])
def test_a_host_key_that_cannot_be_a_servers_key_is_refused_at_validation(key, why):
    raw = adopted()
    raw["tenants"][0]["workers"][0]["ssh"]["hostKey"] = key
    found, message = problems(raw)
    assert "tenants[0].workers[0].ssh.hostKey" in found and why in message


def test_the_example_host_keys_are_well_formed():
    from tests.test_config_infrastructure import prod_example_with_secrets

    config = valid(prod_example_with_secrets())
    assert all(w.ssh.host_key for t in config.tenants for w in t.workers)


def test_a_docker_hub_token_is_never_repeated():
    raw = adopted()
    raw["management"]["dockerHub"] = "me:dckr_pat_S3CR3T"
    _, message = problems(raw)
    assert "S3CR3T" not in message


def test_ssh_workers_of_two_tenants_may_not_share_a_node_name():
    raw = adopted()
    second = copy.deepcopy(raw["tenants"][0])
    raw["tenants"].append(second)
    raw["tenants"][0]["name"], raw["tenants"][0]["workers"][0]["name"] = "team", "speech-gpu-01"
    second["name"], second["workers"][0]["name"] = "team-speech", "gpu-01"
    second["workers"][0]["ssh"]["host"] = "10.20.1.99"
    second["workers"][0]["gpus"][0]["uuid"] = "GPU-other"
    found, _ = problems(raw)
    assert list(found) == ["tenants[1].workers[0].name"]


def test_slots_are_refused_in_nvidia_mode_where_the_device_plugin_decides(vendor_dir):
    import yaml

    from config.validate import DEVICE_SPLIT_COUNT

    chart = yaml.safe_load((vendor_dir / "hami" / "values.yaml").read_text())
    assert DEVICE_SPLIT_COUNT == chart["devicePlugin"]["deviceSplitCount"]
    raw = adopted()
    raw["tenants"][0]["workers"][0]["gpus"][0]["slots"] = 4
    found, message = problems(raw)
    assert list(found) == ["tenants[0].workers[0].gpus[0].slots"] and "deviceSplitCount" in message
    raw["tenants"][0]["workers"][0]["gpus"][0]["slots"] = DEVICE_SPLIT_COUNT
    assert valid(raw)
