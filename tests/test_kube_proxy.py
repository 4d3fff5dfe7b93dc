"""kube-proxy objects: kubeadm's addon at v1.35, with conntrack.maxPerCore 0 and the tenant's endpoint and pod CIDR."""

from __future__ import annotations

import copy
import re

import kubernetes_validate
import pytest
import yaml

from components import kube
from components.tenant import kube_proxy
from naming import PART_OF, PART_OF_LABEL

ENDPOINT = "172.18.255.200:6443"
POD_CIDR = "10.244.0.0/16"
VERSIONS = ("v1.35.0", "v1.36.2")
XTABLES_LOCK = "/run/xtables.lock"
LIB_MODULES = "/lib/modules"  # config/models.py accepts >= v1.35.0, < v1.37.0

# kubernetes/kube-proxy (the published k8s.io/kube-proxy) tag v0.35.0 = Kubernetes v1.35.0,
# commit 1f06271b043795505c2620ed11cc8f9452721058, config/v1alpha1/types.go: the json names of
# KubeProxyConfiguration (L164-249) and of KubeProxyConntrackConfiguration (L101-127).
KUBE_PROXY_CONFIGURATION_FIELDS = {
    "apiVersion", "kind",  # metav1.TypeMeta `json:",inline"`
    "featureGates", "clientConnection", "logging", "hostnameOverride", "bindAddress", "healthzBindAddress",
    "metricsBindAddress", "bindAddressHardFail", "enableProfiling", "showHiddenMetricsForVersion", "mode",
    "iptables", "ipvs", "nftables", "winkernel", "detectLocalMode", "detectLocal", "clusterCIDR",
    "nodePortAddresses", "oomScoreAdj", "conntrack", "configSyncPeriod", "portRange", "windowsRunAsService",
}
KUBE_PROXY_CONNTRACK_FIELDS = {
    "maxPerCore", "min", "tcpEstablishedTimeout", "tcpCloseWaitTimeout", "tcpBeLiberal", "udpTimeout",
    "udpStreamTimeout",
}
# kubernetes/component-base tag v0.35.0 (commit 4e6b4ebd59c9c1fa40170362fa277a769ef0c544),
# config/v1alpha1/types.go L69-82: ClientConnectionConfiguration.
CLIENT_CONNECTION_FIELDS = {"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"}
# kube-proxy v0.35.0 config/v1alpha1/register.go L25/L28.
KUBE_PROXY_CONFIG_API_VERSION = "kubeproxy.config.k8s.io/v1alpha1"
# The label Kamaji puts on the objects it owns (clastix/kamaji internal/constants ProjectNameLabelKey; e.g.
# internal/resources/konnectivity/agent.go CleanUp deletes only what carries it). Ours never do, so Kamaji leaves them
# alone.
KAMAJI_PROJECT_LABEL = "kamaji.clastix.io/project"

# The names kubeadm v1.35 uses: cmd/kubeadm/app/constants/constants.go and phases/addons/proxy/proxy.go,
# the same as kubeadm's own e2e test (test/e2e_kubeadm/proxy_addon_test.go). (kind, namespace, name) in
# the order proxy.go's printOrCreateKubeProxyObjects prints them.
KUBEADM_OBJECTS = [
    ("ServiceAccount", "kube-system", "kube-proxy"),
    ("ClusterRoleBinding", None, "kubeadm:node-proxier"),
    ("Role", "kube-system", "kube-proxy"),
    ("RoleBinding", "kube-system", "kube-proxy"),
    ("ConfigMap", "kube-system", "kube-proxy"),
    ("DaemonSet", "kube-system", "kube-proxy"),
]


def _objects(version="v1.35.0", **overrides):
    args = {"endpoint": ENDPOINT, "kubernetes_version": version, "pod_cidr": POD_CIDR, **overrides}
    return kube_proxy.kube_proxy_objects(**args)


def _by_kind(objects):
    return {obj["kind"]: obj for obj in objects}


def _schema_version(kubernetes_version: str) -> str:
    """'1.35.0' (the schema kubernetes_validate ships for that minor) from 'v1.35.4'."""
    major, minor, _ = kubernetes_version.removeprefix("v").split(".")
    return f"{major}.{minor}.0"


def _config(objects):
    return yaml.safe_load(_by_kind(objects)["ConfigMap"]["data"]["config.conf"])


def _kubeconfig(objects):
    return yaml.safe_load(_by_kind(objects)["ConfigMap"]["data"]["kubeconfig.conf"])


# --------------------------------------------------------------------------- #
# Kubernetes schemas
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_is_valid_for_the_tenant_version(version):
    for obj in _objects(version):
        kubernetes_validate.validate(obj, _schema_version(version), strict=True)


def test_the_schema_check_rejects_a_broken_daemon_set():
    daemon_set = copy.deepcopy(_by_kind(_objects())["DaemonSet"])
    daemon_set["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemon_set, "1.35.0", strict=True)


# --------------------------------------------------------------------------- #
# config.conf: KubeProxyConfiguration
# --------------------------------------------------------------------------- #


def test_config_conf_only_uses_fields_of_the_v1alpha1_type():
    config = _config(_objects())
    assert config["apiVersion"] == KUBE_PROXY_CONFIG_API_VERSION
    assert config["kind"] == "KubeProxyConfiguration"
    assert set(config) <= KUBE_PROXY_CONFIGURATION_FIELDS, set(config) - KUBE_PROXY_CONFIGURATION_FIELDS
    assert set(config["conntrack"]) <= KUBE_PROXY_CONNTRACK_FIELDS
    assert set(config["clientConnection"]) <= CLIENT_CONNECTION_FIELDS


def test_conntrack_max_per_core_is_zero_so_kube_proxy_writes_no_nf_conntrack_max():
    conntrack = _config(_objects())["conntrack"]
    # 0, not null: null is defaulted to 32768 (pkg/proxy/apis/config/v1alpha1/defaults.go).
    assert conntrack["maxPerCore"] == 0 and type(conntrack["maxPerCore"]) is int
    # The per-namespace TCP timeouts keep kube-proxy's defaults (see the module docstring).
    assert "tcpEstablishedTimeout" not in conntrack and "tcpCloseWaitTimeout" not in conntrack


def test_config_conf_keeps_kubeadm_defaults_and_sets_the_tenant_values():
    config = _config(_objects(pod_cidr="10.250.0.0/16"))
    assert config["bindAddress"] == "0.0.0.0"
    assert config["clusterCIDR"] == "10.250.0.0/16"
    assert config["mode"] == "iptables"
    # kubeadm componentconfigs/kubeproxy.go kubeproxyKubeConfigFileName: where the DaemonSet mounts kubeconfig.conf.
    assert config["clientConnection"] == {"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"}


# --------------------------------------------------------------------------- #
# kubeconfig.conf
# --------------------------------------------------------------------------- #


def test_kubeconfig_points_at_the_endpoint_with_the_service_account_credentials():
    kubeconfig = _kubeconfig(_objects())
    context = kube.current_context(kubeconfig)
    assert context.server == f"https://{ENDPOINT}"
    # manifests.go KubeProxyConfigMap19: the projected service-account CA and token.
    assert context.cluster["certificate-authority"] == "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    assert context.user == {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
    assert kubeconfig["apiVersion"] == "v1" and kubeconfig["kind"] == "Config"


@pytest.mark.parametrize(
    "endpoint",
    ["https://172.18.255.200:6443", "172.18.255.200", "172.18.255.200:https", ""],
)
def test_an_endpoint_that_is_not_host_port_is_refused(endpoint):
    with pytest.raises(ValueError):
        _objects(endpoint=endpoint)


# --------------------------------------------------------------------------- #
# Names and bindings, as kubeadm creates them
# --------------------------------------------------------------------------- #


def test_object_names_and_order_equal_kubeadms():
    objects = _objects()
    assert [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects] == KUBEADM_OBJECTS


# What an API server does with these objects, written out from its rules rather than from kubeadm's text:
# RBAC (kubernetes/kubernetes pkg/apis/rbac/v1/evaluation_helpers.go: VerbMatches, ResourceMatches,
# ResourceNameMatches; a RoleBinding grants its Role in the binding's namespace, a ClusterRoleBinding everywhere),
# taints and tolerations (pkg/apis/core/v1/helper: an Exists toleration with no key tolerates every taint) and
# label selectors (matchLabels: every pair present). The object shapes are the schema's (test above).
BOOTSTRAP_GROUP = "system:bootstrappers:kubeadm:default-node-token"  # kubeadm constants NodeBootstrapTokenAuthGroup
# The ClusterRole the API server creates for kube-proxy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go
# "system:node-proxier"), and the PriorityClass it creates for node agents (scheduling/types.go
# SystemNodeCritical): both exist in every cluster, the objects only refer to them.
NODE_PROXIER = "system:node-proxier"
SYSTEM_NODE_CRITICAL = "system-node-critical"
# Taints a worker can carry while kube-proxy must run on it (the node lifecycle controller's not-ready and
# unreachable taints, kubeadm's control-plane taint, and one of the cluster owner's).
TAINTS = [
    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
    {"key": "gpu", "value": "a100", "effect": "NoSchedule"},
]


def _subject_matches(subject, user_kind, name, namespace=None):
    if subject["kind"] != user_kind or subject["name"] != name:
        return False
    return user_kind != "ServiceAccount" or subject.get("namespace") == namespace


def _allowed(objects, verb, resource, name, namespace, *, group=None, service_account=None):
    """Whether the Roles and RoleBindings among `objects` let a member of `group` (or the service account
    `(namespace, name)`) `verb` the core-group `resource` named `name` in `namespace`."""
    roles = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects if o["kind"] == "Role"}
    for binding in (o for o in objects if o["kind"] == "RoleBinding"):
        if binding["metadata"].get("namespace") != namespace or binding["roleRef"]["kind"] != "Role":
            continue
        subjects = binding["subjects"]
        if not any(_subject_matches(s, "Group", group) if group else
                   _subject_matches(s, "ServiceAccount", service_account[1], service_account[0]) for s in subjects):
            continue
        role = roles.get((namespace, binding["roleRef"]["name"]))
        for rule in (role or {}).get("rules", []):
            if ("" in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
                    and (not rule.get("resourceNames") or name in rule["resourceNames"])):
                return True
    return False


def test_joining_nodes_may_read_the_kube_proxy_config_map_and_nothing_else():
    objects = _objects()
    config_map = _by_kind(objects)["ConfigMap"]["metadata"]
    kube_system = config_map["namespace"]
    # kubeadm join fetches kube-system/kube-proxy with its bootstrap token (see kube_proxy.py).
    assert _allowed(objects, "get", "configmaps", config_map["name"], kube_system, group=BOOTSTRAP_GROUP)
    for verb, resource, name in (("list", "configmaps", config_map["name"]), ("update", "configmaps", config_map["name"]),
                                 ("get", "configmaps", "kubeadm-config"), ("get", "secrets", config_map["name"])):
        assert not _allowed(objects, verb, resource, name, kube_system, group=BOOTSTRAP_GROUP), (verb, resource, name)
    assert not _allowed(objects, "get", "configmaps", config_map["name"], kube_system, group="system:authenticated")
    # The check has teeth: a rule without resourceNames would open every ConfigMap.
    opened = copy.deepcopy(objects)
    del _by_kind(opened)["Role"]["rules"][0]["resourceNames"]
    assert _allowed(opened, "get", "configmaps", "kubeadm-config", kube_system, group=BOOTSTRAP_GROUP)


def test_the_pods_service_account_has_the_clusters_node_proxier_role_and_only_that():
    objects = _by_kind(_objects())
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    account = objects["ServiceAccount"]["metadata"]
    assert pod["serviceAccountName"] == account["name"]
    assert account["namespace"] == objects["DaemonSet"]["metadata"]["namespace"]
    binding = objects["ClusterRoleBinding"]
    assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) == ("ClusterRole", NODE_PROXIER)
    assert [s for s in binding["subjects"] if _subject_matches(s, "ServiceAccount", account["name"],
                                                               account["namespace"])] == binding["subjects"]
    assert len(binding["subjects"]) == 1
    # The namespaced Role is for joining nodes, not for the pods.
    assert not _allowed(list(objects.values()), "get", "configmaps", "kube-proxy", account["namespace"],
                        service_account=(account["namespace"], account["name"]))


def _tolerates(tolerations, taint):
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint["effect"]):
            continue
        if toleration.get("operator") == "Exists" and not toleration.get("key"):
            return True
        if toleration.get("key") == taint["key"] and (toleration.get("operator") == "Exists"
                                                      or toleration.get("value") == taint.get("value")):
            return True
    return False


def test_kube_proxy_runs_on_every_linux_node_whatever_its_taints_and_before_other_pods():
    daemon_set = _by_kind(_objects())["DaemonSet"]
    template = daemon_set["spec"]["template"]
    pod = template["spec"]
    assert all(_tolerates(pod["tolerations"], taint) for taint in TAINTS)
    assert not _tolerates([{"key": "gpu", "operator": "Exists"}], TAINTS[0]), "the check has teeth"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}  # the kubelet's own well-known label
    assert pod["priorityClassName"] == SYSTEM_NODE_CRITICAL
    # The DaemonSet owns the pods of its template (an apps/v1 selector must match the template's labels).
    selector = daemon_set["spec"]["selector"]["matchLabels"]
    assert selector and selector.items() <= template["metadata"]["labels"].items()


def test_kube_proxy_programs_the_nodes_own_netfilter_under_its_node_name():
    pod = _by_kind(_objects())["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # iptables rules and conntrack of the node, not of a pod network namespace.
    assert pod["hostNetwork"] is True and container["securityContext"]["privileged"] is True
    # --hostname-override names the Node it serves: the variable it expands is the pod's node.
    (override,) = [arg for arg in container["command"] if arg.startswith("--hostname-override=")]
    variable = re.fullmatch(r"--hostname-override=\$\((\w+)\)", override).group(1)
    (env,) = [e for e in container["env"] if e["name"] == variable]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def _mounts(pod):
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {m["mountPath"]: (volumes[m["name"]], m.get("readOnly", False)) for m in container["volumeMounts"]}


def test_every_volume_is_mounted_and_the_hosts_files_appear_where_the_host_has_them():
    pod = _by_kind(_objects())["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {m["name"] for m in container["volumeMounts"]} == {v["name"] for v in pod["volumes"]}
    host_paths = {path: (volume["hostPath"], read_only) for path, (volume, read_only) in _mounts(pod).items()
                  if "hostPath" in volume}
    # iptables serialises every writer of the node's tables with a lock file (iptables XT_LOCK_NAME,
    # /run/xtables.lock): kube-proxy must take the host's lock, so the file is the host's, writable, created if
    # the host has none yet.
    lock, read_only = host_paths[XTABLES_LOCK]
    assert lock["path"] == XTABLES_LOCK and lock.get("type") == "FileOrCreate" and not read_only
    # Kernel modules kube-proxy may load or probe: the host's, read-only.
    modules, read_only = host_paths[LIB_MODULES]
    assert modules["path"] == LIB_MODULES and read_only
    assert set(host_paths) == {XTABLES_LOCK, LIB_MODULES}, "no other host path reaches the pod"


def test_the_files_kube_proxy_reads_are_the_config_map_keys():
    objects = _by_kind(_objects())
    keys = set(objects["ConfigMap"]["data"])
    assert keys == {"config.conf", "kubeconfig.conf"}
    (container,) = objects["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "kube-proxy")
    config_flag = next(arg for arg in container["command"] if arg.startswith("--config="))
    assert config_flag == f"--config={mount}/config.conf"
    assert _config(_objects())["clientConnection"]["kubeconfig"] == f"{mount}/kubeconfig.conf"


@pytest.mark.parametrize(
    ("registry", "version", "image"),
    [
        # The digest registry.k8s.io's promoter manifest records for v1.35.0 (k8s.io/k8s.io
        # registry.k8s.io/images/k8s-staging-kubernetes/images.yaml).
        ("registry.k8s.io", "v1.35.0",
         "registry.k8s.io/kube-proxy:v1.35.0@sha256:c818ca1eff765e35348b77e484da915175cdf483f298e1f9885ed706fcbcb34c"),
        # No recorded digest for this version: the tag alone.
        ("mirror.example:5000/k8s/", "v1.36.2", "mirror.example:5000/k8s/kube-proxy:v1.36.2"),
    ],
)
def test_image_is_registry_kube_proxy_version(registry, version, image):
    daemon_set = _by_kind(_objects(version, image_registry=registry))["DaemonSet"]
    assert daemon_set["spec"]["template"]["spec"]["containers"][0]["image"] == image


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kubernetes_version": "1.35.0"}, "v1.35.0"),
        ({"kubernetes_version": "latest"}, "v1.35.0"),
        ({"pod_cidr": "10.244.0.1/16"}, "host bits"),
        ({"pod_cidr": "fd00::/64"}, "IPv4"),
        ({"image_registry": "/"}, "empty"),
    ],
)
def test_bad_input_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        _objects(**overrides)


# --------------------------------------------------------------------------- #
# Labels: ours, never Kamaji's
# --------------------------------------------------------------------------- #


def _all_labels(value):
    """Every `labels` mapping anywhere in an object (metadata, pod template, selectors' own keys excluded)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "labels" and isinstance(item, dict):
                yield item
            else:
                yield from _all_labels(item)
    elif isinstance(value, list):
        for item in value:
            yield from _all_labels(item)


def test_every_object_is_part_of_gpu_tenancy_and_none_carries_kamajis_label():
    for obj in _objects():
        assert obj["metadata"]["labels"][PART_OF_LABEL] == PART_OF, obj["kind"]
        for labels in _all_labels(obj):
            assert KAMAJI_PROJECT_LABEL not in labels, obj["kind"]
        assert KAMAJI_PROJECT_LABEL not in yaml.safe_dump(obj)


def test_kubeadms_own_labels_are_kept():
    objects = _by_kind(_objects())
    assert objects["ConfigMap"]["metadata"]["labels"]["app"] == "kube-proxy"
    assert objects["DaemonSet"]["metadata"]["labels"]["k8s-app"] == "kube-proxy"
