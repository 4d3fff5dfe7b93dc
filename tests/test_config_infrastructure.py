"""Config for real infrastructure: an existing management cluster and SSH-joined workers.

The security rules on these keys (host keys, credential plugins, open source ranges, ...) are in
test_validate_security.py.
"""

import copy
import ipaddress

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from config import ConfigError, load_stack_config
from config.cidrs import automatic_block
from tests.support.fixtures import kubeconfig_yaml
from tests.support.mockrun import load_stack_file, reference_stack

PRIVATE_KEY = ed25519.Ed25519PrivateKey.generate().private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
).decode()
KUBECONFIG = kubeconfig_yaml("https://10.20.0.10:6443", "prod-mgmt")
SECRET_FRAGMENT = PRIVATE_KEY.splitlines()[1][:20]
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOd0c6S6k8Z1c2xYqRrn1FZ2bq3k5GZ2y3Vn5eXh0b5Q"
SECRETS = {"management", "tenants"}


def ssh(host="10.20.1.11", **extra):
    return {"host": host, "user": "ubuntu", "privateKey": PRIVATE_KEY, "hostKey": HOST_KEY, **extra}


def card(uuid, memory=81920):
    return {"uuid": uuid, "model": "NVIDIA-H100", "memoryMiB": memory}


def adopted(**management):
    return {
        "management": {"kubeconfig": KUBECONFIG, "workerCidrs": ["10.20.0.0/16"], **management},
        "gpuMode": "nvidia",
        "tenants": [
            {"name": "team-a", "workers": [{"name": "gpu-0", "ssh": ssh(), "gpus": [card("GPU-0")]}]},
        ],
    }


def issues(raw, secret_keys=SECRETS):
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw, secret_keys)
    return {issue.path: issue for issue in caught.value.issues}, str(caught.value)


def prod_example_with_secrets():
    """Pulumi.prod.example.yaml with the secrets its header tells users to set."""
    raw = copy.deepcopy(load_stack_file("prod.example"))
    raw["management"]["kubeconfig"] = KUBECONFIG
    for tenant in raw["tenants"]:
        for worker in tenant["workers"]:
            worker["ssh"]["privateKey"] = PRIVATE_KEY
    return raw


def test_adopted_cluster_with_ssh_workers_validates():
    config = load_stack_config(adopted(loadBalancerPool="10.20.255.200-10.20.255.250"), SECRETS)
    assert config.management.adopts_existing_cluster
    assert config.management.load_balancer_pool == "10.20.255.200-10.20.255.250"
    worker = config.tenants[0].workers[0]
    assert (worker.ssh.host, worker.ssh.user, worker.ssh.port, worker.ssh.host_key) == (
        "10.20.1.11", "ubuntu", 22, HOST_KEY)
    # Neither credential shows in a repr (e.g. in a traceback).
    assert SECRET_FRAGMENT not in repr(config)
    assert "client-key-data" not in repr(config)


def test_container_and_ssh_workers_are_not_mixed_in_one_tenant():
    # Docker masquerades what the containers send off the kind network (kind network.go enable_ip_masquerade) and
    # felix drops VXLAN from an address that is no Calico node (calico felix/rules/static.go): no pod traffic.
    raw = copy.deepcopy(reference_stack())
    raw["tenants"][0]["workers"].append({"name": "gpu-server", "ssh": ssh(), "gpus": [card("GPU-REAL-0", 8192)]})
    found, _ = issues(raw, {"tenants"})
    message = found["tenants[0].workers[1].ssh"].message
    assert "masquerades" in message and "a tenant of their own" in message
    # In a tenant of their own, the server joins the kind lab.
    raw["tenants"][0]["workers"].pop()
    raw["tenants"].append({"name": "team-gpu", "workers": [{"name": "gpu-server", "ssh": ssh(),
                                                           "gpus": [card("GPU-REAL-0", 8192)]}]})
    assert load_stack_config(raw, {"tenants"}).tenants[2].workers[0].ssh is not None


POD = automatic_block("team-a", "podCidr")


@pytest.mark.parametrize("change, key, other", [
    # A network of the servers inside the automatic pod range of team-a.
    (lambda r: r["management"].update(workerCidrs=[str(next(ipaddress.ip_network(POD).subnets(new_prefix=24)))]),
     "podCidr", "management.workerCidrs[0]"),
    (lambda r: r["tenants"][0].update(workerCidrs=[POD]), "podCidr", "tenants[0].workerCidrs[0]"),
    (lambda r: r["tenants"][0].update(serviceCidr="10.20.255.0/24"), "serviceCidr", "management.loadBalancerPool"),
    (lambda r: r["tenants"][0].update(serviceCidr="10.20.1.0/24"), "serviceCidr", "tenants[0].workers[0].ssh.host"),
])
def test_tenant_ranges_stay_clear_of_the_networks_the_stack_knows(change, key, other):
    raw = adopted(loadBalancerPool="10.20.255.200-10.20.255.250")
    raw["management"]["workerCidrs"] = ["10.20.0.0/16"] if key == "podCidr" else ["172.16.0.0/16"]
    change(raw)
    found, message = issues(raw)
    assert list(found) == [f"tenants[0].{key}"], message
    text = found[f"tenants[0].{key}"].message
    assert other in text and f"set tenants[0].{key}" in text
    # The free range offered is clear of everything the stack knows.
    free = ipaddress.ip_network(text.rsplit(f"{key}: ", 1)[1].split()[0])
    raw["tenants"][0][key] = str(free)
    load_stack_config(raw, SECRETS)


def test_allow_lists_wider_than_a_tenant_range_and_operators_networks_are_no_collision():
    """A corporate 10.0.0.0/8 in workerCidrs or operatorCidrs only admits sources: tenant nodes route to neither."""
    raw = adopted()
    raw["management"].update(workerCidrs=["10.0.0.0/8"], operatorCidrs=["10.0.0.0/8", POD])
    raw["tenants"][0]["workerCidrs"] = [str(ipaddress.ip_network(POD).supernet(2))]
    load_stack_config(raw, SECRETS)


def test_kubeconfig_must_be_a_secret():
    found, message = issues(adopted(), secret_keys={"tenants"})
    assert "make secret" in found["management.kubeconfig"].message
    # The value from its file on stdin (make secret), never "$(cat file)" on a command line.
    assert "make secret STACK=<stack> KEY='management.kubeconfig' FILE=<file>" in message and "$(cat" not in message


def test_private_key_must_be_a_secret():
    found, message = issues(adopted(), secret_keys={"management"})
    assert "tenants[*].workers[*].ssh.privateKey" in found
    assert "make secret" in message


def test_one_machine_is_one_worker():
    raw = adopted()
    raw["tenants"].append({"name": "team-b", "workers": [{"name": "gpu-0", "ssh": ssh(host="10.20.1.11")}]})
    found, _ = issues(raw)
    assert "tenants[0].workers[0].ssh.host" in found["tenants[1].workers[0].ssh.host"].message


def test_kind_only_keys_are_refused_with_an_existing_cluster():
    found, _ = issues(adopted(clusterName="lab", nodeImage="kindest/node:v1.35.0"))
    assert "only applies to the kind cluster" in found["management.clusterName"].message
    assert "management.nodeImage" in found


def test_worker_cidrs_required_with_an_existing_cluster():
    raw = adopted()
    del raw["management"]["workerCidrs"]
    found, _ = issues(raw)
    assert "GPU servers" in found["management.workerCidrs"].message


def test_container_workers_need_the_kind_lab():
    raw = adopted()
    raw["gpuMode"] = "mock"
    raw["tenants"][0]["workers"].append({"name": "local", "gpus": [card("GPU-1", 8192)]})
    found, _ = issues(raw)
    assert "kind network" in found["tenants[0].workers[1].ssh"].message


SSH = "tenants[0].workers[0].ssh"


@pytest.mark.parametrize(
    "mutate, path, text",
    [
        (lambda r: r["management"].update(kubeconfig="not: [a kubeconfig"), "management.kubeconfig", "kubeconfig document"),
        (lambda r: r["management"].update(loadBalancerPool="10.0.0.9-10.0.0.1"), "management.loadBalancerPool", "ends before"),
        (lambda r: r["management"].update(loadBalancerPool="pool"), "management.loadBalancerPool", "IPv4 range"),
        (lambda r: r["management"].update(workerCidrs=["10.0.0.1/8"]), "management.workerCidrs[0]", "IPv4 network"),
        (lambda r: r["management"].update(operatorCidrs=["office"]), "management.operatorCidrs[0]", "CIDR"),
        (lambda r: r["tenants"][0]["workers"][0]["ssh"].update(port=0), f"{SSH}.port", "greater than or equal to 1"),
        (lambda r: r["tenants"][0]["workers"][0]["ssh"].update(user="Bad User"), f"{SSH}.user", "pattern"),
        # Option injection through the host (`-oProxyCommand=...`) is refused by its pattern.
        (lambda r: r["tenants"][0]["workers"][0]["ssh"].update(host="-oProxyCommand=x"), f"{SSH}.host", "pattern"),
        (lambda r: r["tenants"][0]["workers"][0]["ssh"].update(keyFile="/x"), f"{SSH}.keyFile", "unknown key"),
        (lambda r: r["tenants"][0]["workers"][0]["ssh"].update(hostKey="10.20.1.11 ssh-ed25519 AAAA"), f"{SSH}.hostKey", "pattern"),
        # SHA-1 `ssh-rsa` is what pulumi-command would offer for an RSA key: OpenSSH >= 8.8 refuses it.
        (lambda r: r["tenants"][0]["workers"][0]["ssh"].update(hostKey="ssh-rsa AAAAB3NzaC1yc2E"), f"{SSH}.hostKey", "pattern"),
        (lambda r: r["tenants"][0]["workers"][0]["ssh"].update(privateKey="hunter2"), f"{SSH}.privateKey", "PEM"),
        (lambda r: r["tenants"][0]["workers"][0]["ssh"].pop("privateKey"), f"{SSH}.privateKey", "make secret"),
    ],
)
def test_invalid_infrastructure_keys_name_the_key(mutate, path, text):
    raw = adopted()
    mutate(raw)
    found, message = issues(raw)
    assert path in found, message
    assert text in message


def test_secrets_are_never_repeated_in_error_messages():
    raw = adopted()
    raw["management"]["kubeconfig"] = "clusters: []\nusers: []\ntoken: s3cr3t-value"
    raw["tenants"][0]["workers"][0]["ssh"]["privateKey"] = "-----BEGIN nope s3cr3t-key"
    # An error whose offending input is a whole mapping of workers, private key included.
    raw["tenants"].append({"name": "team-b", "workers": {"gpu-0": {"name": "gpu-0", "ssh": ssh()}}})
    found, message = issues(raw)
    assert "[secret]" in str(found["tenants[1].workers"])
    assert "s3cr3t" not in message
    assert SECRET_FRAGMENT not in message


def test_prod_example_needs_its_secrets_and_says_how_to_set_them():
    found, message = issues(copy.deepcopy(load_stack_file("prod.example")), secret_keys=set())
    keys = [f"tenants[{t}].workers[{w}].ssh.privateKey" for t in (0, 1) for w in (0, 1)]
    assert set(keys) <= set(found)
    assert "make secret STACK=<stack> KEY='tenants[1].workers[0].ssh.privateKey' FILE=<file>" in message


def test_prod_example_validates_once_its_secrets_are_set():
    config = load_stack_config(prod_example_with_secrets(), SECRETS)
    assert config.gpu_mode == "nvidia"
    assert config.management.adopts_existing_cluster
    assert config.management.operator_cidrs == ["10.30.0.0/24"]
    assert [t.name for t in config.tenants] == ["team-vision", "team-speech"]
    assert all(w.ssh and w.ssh.host_key for t in config.tenants for w in t.workers)
    assert all(t.quota and t.data_store.dedicated for t in config.tenants)
    assert config.tenants[0].namespaces == ["default", "training"]
    # The smoke test fits on each team's first server.
    assert [config.smoke_test.worker_in(t).name for t in config.tenants] == ["gpu-01", "gpu-01"]
