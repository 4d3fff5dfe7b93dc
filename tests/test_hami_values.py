"""HAMi's Helm values, checked against the vendored chart (HAMi v2.10.0 charts/hami, no values schema)."""

import json
import re

import pytest
import yaml

from components.gpu.values import (
    device_config_yaml,
    hami_pod_policy,
    hami_token_policy,
    hami_values,
    nvidia_device_config,
)
from components.images import HAMI_WEBHOOK_CERTGEN
from config import ConfigError, Versions, load_stack_config
from naming import TENANT_SYSTEM_NAMESPACES
from tests.support.cel import admits
from tests.support.chart_values import load_chart_values, unknown_value_keys
from tests.support.mockrun import reference_stack

VERSIONS = Versions()


@pytest.fixture(scope="module")
def chart(vendor_dir):
    return load_chart_values(vendor_dir / "hami" / "values.yaml")


@pytest.fixture(scope="module")
def webhook_template(vendor_dir):
    return (vendor_dir / "hami" / "templates" / "scheduler" / "webhook.yaml").read_text()


@pytest.mark.parametrize(("mode", "runtime_class"), [("mock", None), ("nvidia", None), ("nvidia", "nvidia")])
def test_every_value_key_exists_in_the_vendored_chart(chart, mode, runtime_class):
    assert unknown_value_keys(hami_values(mode, "v1.35.0", VERSIONS, runtime_class), chart) == []


def test_unknown_gpu_mode_is_refused():
    with pytest.raises(ValueError, match="gpuMode"):
        hami_values("amd", "v1.35.0", VERSIONS)


# --------------------------------------------------------------------------- #
# Device plugins and the node lock
# --------------------------------------------------------------------------- #


def test_node_lock_timeout_is_added_to_the_chart_default_args_in_mock_mode_only(chart):
    defaults = chart["scheduler"]["extender"]["extraArgs"]
    mock = hami_values("mock", "v1.35.0", VERSIONS)["scheduler"]["extender"]["extraArgs"]
    nvidia = hami_values("nvidia", "v1.35.0", VERSIONS)["scheduler"]["extender"]["extraArgs"]
    # Setting the list replaces the chart's: its own arguments must stay.
    assert mock == [*defaults, "--node-lock-timeout=15s"]
    # The real plugin finds its pod through the lock: a short timeout would hand one pod's devices to the next.
    assert nvidia == defaults
    assert not any(arg.startswith("--node-lock-timeout") for arg in nvidia)


def test_mock_mode_runs_only_the_mock_plugin_with_a_config_it_can_parse(chart):
    values = hami_values("mock", "v1.35.0", VERSIONS, runtime_class_name="nvidia")
    assert values["devicePlugin"] == {"enabled": False}
    assert values["mockDevicePlugin"] == {"enabled": True, "image": {"tag": VERSIONS.mock_device_plugin}}
    # The chart pins the same mock image; no newer one exists (Project-HAMi/mock-device-plugin tags).
    assert chart["mockDevicePlugin"]["image"]["tag"] == VERSIONS.mock_device_plugin
    content = values["device-config"]["content"]
    assert content == device_config_yaml()
    # mock-device-plugin 1.0.1 cannot parse the v2.9+ `vnpus` map: only the nvidia section goes in.
    assert list(yaml.safe_load(content)) == ["nvidia"]
    assert "vnpus" not in content


def test_device_config_keeps_the_charts_nvidia_names_and_defaults(chart):
    nvidia = nvidia_device_config()["nvidia"]
    assert nvidia["resourceCountName"] == chart["resourceName"]
    assert nvidia["resourceMemoryName"] == chart["resourceMem"]
    assert nvidia["resourceMemoryPercentageName"] == chart["resourceMemPercentage"]
    assert nvidia["resourceCoreName"] == chart["resourceCores"]
    assert nvidia["resourcePriorityName"] == chart["resourcePriority"]
    assert nvidia["deviceSplitCount"] == chart["devicePlugin"]["deviceSplitCount"]
    assert nvidia["deviceMemoryScaling"] == chart["devicePlugin"]["deviceMemoryScaling"]
    assert nvidia["deviceCoreScaling"] == chart["devicePlugin"]["deviceCoreScaling"]
    assert nvidia["gpuCorePolicy"] == chart["devices"]["nvidia"]["gpuCorePolicy"]
    assert nvidia["libCudaLogLevel"] == chart["devices"]["nvidia"]["libCudaLogLevel"]
    assert nvidia["runtimeClassName"] == chart["devicePlugin"]["runtimeClassName"]


def test_nvidia_mode_runs_the_real_plugin_with_the_charts_device_config():
    values = hami_values("nvidia", "v1.35.0", VERSIONS)
    assert values["devicePlugin"] == {"enabled": True, "service": {"type": "ClusterIP"}}
    assert values["mockDevicePlugin"] == {"enabled": False}
    assert "device-config" not in values


def test_a_runtime_class_is_created_and_used_in_nvidia_mode(chart):
    # templates/device-plugin/runtime-class.yaml creates it only with both keys; the chart sets neither.
    assert (chart["devicePlugin"]["runtimeClassName"], chart["devicePlugin"]["createRuntimeClass"]) == ("", False)
    plugin = hami_values("nvidia", "v1.35.0", VERSIONS, runtime_class_name="nvidia")["devicePlugin"]
    assert plugin == {"enabled": True, "service": {"type": "ClusterIP"}, "runtimeClassName": "nvidia",
                      "createRuntimeClass": True}
    # Mock mode never uses one: the mock plugin runs no GPU containers.
    assert "runtimeClassName" not in hami_values("mock", "v1.35.0", VERSIONS, "nvidia")["devicePlugin"]


# --------------------------------------------------------------------------- #
# The scheduler and the admission webhook
# --------------------------------------------------------------------------- #


def test_kube_scheduler_matches_the_tenant_version_pinned_by_digest(chart):
    image = hami_values("mock", "v1.35.0", VERSIONS)["scheduler"]["kubeScheduler"]["image"]
    # The chart's default is a mirror: both parts are overridden.
    assert chart["scheduler"]["kubeScheduler"]["image"]["registry"] != "registry.k8s.io"
    assert (image["registry"], image["repository"]) == ("registry.k8s.io", "kube-scheduler")
    # _helpers.tpl joins registry/repository:tag, so `tag@digest` is a digest-pinned reference.
    assert re.fullmatch(r"v1\.35\.0@sha256:[0-9a-f]{64}", image["tag"])
    # Without a recorded digest the tenant version alone.
    other = hami_values("mock", "v1.34.2", VERSIONS)["scheduler"]["kubeScheduler"]["image"]
    assert other["tag"] == "v1.34.2"


def test_webhook_fails_closed_and_the_template_reads_those_values(chart, webhook_template):
    webhook = hami_values("mock", "v1.35.0", VERSIONS)["scheduler"]["admissionWebhook"]
    # The chart's Ignore admits GPU pods unmutated when the tunnel is down (templates/scheduler/webhook.yaml).
    assert chart["scheduler"]["admissionWebhook"]["failurePolicy"] == "Ignore"
    assert webhook["failurePolicy"] == "Fail"
    # Both keys are what the vendored MutatingWebhookConfiguration template renders.
    assert "failurePolicy: {{ .Values.scheduler.admissionWebhook.failurePolicy }}" in webhook_template
    assert "toYaml .Values.scheduler.admissionWebhook.whitelistNamespaces" in webhook_template
    assert re.search(r"key: kubernetes\.io/metadata\.name\s+operator: NotIn", webhook_template)
    assert webhook["whitelistNamespaces"] == list(TENANT_SYSTEM_NAMESPACES)


def test_no_namespace_the_webhook_exempts_may_hold_the_users_gpu_pods():
    # The webhook (failurePolicy Fail) must not block the tenant's system, and must see every pod of its users:
    # validation refuses each exempt namespace in tenants[].namespaces, and a namespace it does not exempt passes.
    exempt = hami_values("mock", "v1.35.0", VERSIONS)["scheduler"]["admissionWebhook"]["whitelistNamespaces"]
    assert "kube-system" in exempt and "default" not in exempt
    for namespace in [*exempt, "default"]:
        stack = reference_stack()
        stack["tenants"][0]["namespaces"] = [namespace]
        if namespace == "default":
            assert load_stack_config(stack).tenants[0].namespaces == ["default"]
            continue
        with pytest.raises(ConfigError) as refused:
            load_stack_config(stack)
        assert "tenants[0].namespaces[0]" in str(refused.value), namespace


# --------------------------------------------------------------------------- #
# HAMi's Services stay inside the tenant (issue 22 #1: its NodePorts reached every worker's network)
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("mode", ["mock", "nvidia"])
def test_the_extender_and_the_plugin_metrics_are_cluster_ip_services(chart, mode):
    values = hami_values(mode, "v1.35.0", VERSIONS)
    # The chart publishes both as NodePorts (31998/31993, and 31992 with the real plugin) on every node: the
    # extender's /filter and /bind take no credential.
    assert (chart["scheduler"]["service"]["type"], chart["devicePlugin"]["service"]["type"]) == ("NodePort",) * 2
    assert values["scheduler"]["service"] == {"type": "ClusterIP"}
    # The device-plugin Service is rendered only with the real plugin (templates/device-plugin/monitorservice.yaml).
    assert values["devicePlugin"].get("service") == (None if mode == "mock" else {"type": "ClusterIP"})


def test_the_webhook_still_calls_the_scheduler_service_on_its_port(chart, webhook_template):
    # The API server reaches the webhook on the Service's port (a ClusterIP has it too), not on a nodePort.
    assert "port: {{ .Values.scheduler.service.httpPort }}" in webhook_template
    assert "nodePort" not in webhook_template
    assert "httpPort" not in hami_values("mock", "v1.35.0", VERSIONS)["scheduler"]["service"]
    assert chart["scheduler"]["service"]["httpPort"] == 443


@pytest.mark.parametrize("mode", ["mock", "nvidia"])
def test_the_certificate_jobs_run_the_kubernetes_projects_certgen_by_digest(chart, mode):
    # HAMi v2.10.0 values.yaml: scheduler.patch.imageNew is liangjw/kube-webhook-certgen (a personal namespace) and
    # its Job may update every MutatingWebhookConfiguration (templates/scheduler/job-patch/clusterrole.yaml).
    assert chart["scheduler"]["patch"]["imageNew"]["repository"].startswith("liangjw/")
    patch = hami_values(mode, "v1.35.0", Versions())["scheduler"]["patch"]
    for key in ("image", "imageNew"):
        image = patch[key]
        # _commons.tpl common.images.image: registry/repository:tag.
        assert f"{image['registry']}/{image['repository']}:{image['tag']}" == HAMI_WEBHOOK_CERTGEN
        assert image["registry"] == "registry.k8s.io" and image["repository"] == "ingress-nginx/kube-webhook-certgen"
        assert re.fullmatch(r"v[0-9.]+@sha256:[0-9a-f]{64}", image["tag"])


def test_hamis_tokens_are_narrowed_for_the_main_resources_only(chart):
    spec = hami_token_policy()[0]["spec"]
    rule, configmaps = spec["matchConstraints"]["resourceRules"]
    # The main resources only: pods/binding (the scheduler's bind) stays allowed.
    assert rule["resources"] == ["pods", "nodes"] and rule["operations"] == ["CREATE", "UPDATE"]
    assert configmaps["resources"] == ["configmaps"] and configmaps["operations"] == ["CREATE", "UPDATE", "DELETE"]


@pytest.mark.parametrize("mode", ["mock", "nvidia"])
def test_the_scheduler_and_certificate_jobs_run_on_system_workers_when_the_tenant_has_some(chart, mode):
    selector = {"node-restriction.kubernetes.io/gpu-tenancy-system": "true"}
    plain = hami_values(mode, "v1.35.0", VERSIONS)["scheduler"]
    assert "nodeSelector" not in plain and "nodeSelector" not in plain["patch"]
    values = hami_values(mode, "v1.35.0", VERSIONS, system_nodes=selector)
    assert values["scheduler"]["nodeSelector"] == selector == values["scheduler"]["patch"]["nodeSelector"]
    # scheduler.nodeSelector is read by templates/scheduler/deployment.yaml but not listed in values.yaml.
    assert unknown_value_keys(values, chart) == ["scheduler.nodeSelector"]


SA = "system:serviceaccount:kube-system:hami-"
POD = {"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
NODE = {"metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.0.0/24"}}


def _with(obj, **parts):
    changed = json.loads(json.dumps(obj))
    for path, value in parts.items():
        *keys, last = path.split("__")
        node = changed
        for key in keys:
            node = node.setdefault(key, {})
        node[last] = value
    return changed


CONFIGMAP = {"metadata": {"name": "kube-proxy", "namespace": "kube-system"}, "data": {"config.conf": "x"}}


@pytest.mark.parametrize("user, operation, resource, new, old, allowed", [
    # What HAMi itself writes: annotations on pods and nodes, its scheduler's leader label on its own pod.
    (SA + "device-plugin", "UPDATE", "pods", _with(POD, metadata__annotations={"hami.io/vgpu-node": "n"}), POD, True),
    (SA + "scheduler", "UPDATE", "pods", _with(POD, metadata__labels={"hami.io/role": "leader"}), POD, True),
    (SA + "scheduler", "UPDATE", "nodes", _with(NODE, metadata__annotations={"hami.io/mutex.lock": "t"}), NODE, True),
    (SA + "scheduler", "UPDATE", "nodes", {"metadata": {"name": "n", "annotations": {"a": "b"}}},
     {"metadata": {"name": "n"}}, True),
    (SA + "device-plugin", "UPDATE", "pods", _with(POD, metadata__annotations={"a": "b"}),
     _with(POD, metadata__ownerReferences=[{"kind": "ReplicaSet", "name": "r", "uid": "u"}]), False),
    # What would make root on a GPU worker tenant admin, or draw the controllers to it.
    (SA + "device-plugin", "CREATE", "pods", POD, None, False),
    (SA + "scheduler", "UPDATE", "pods", _with(POD, spec__containers=[{"name": "c", "image": "evil"}]), POD, False),
    (SA + "mock-device-plugin", "UPDATE", "nodes",
     _with(NODE, metadata__labels={"node-restriction.kubernetes.io/gpu-tenancy-system": "true"}), NODE, False),
    (SA + "device-plugin", "UPDATE", "nodes", _with(NODE, spec__taints=[{"key": "x", "effect": "NoExecute"}]), NODE,
     False),
    # An owner that does not exist has the garbage collector delete the pod or Node; a finalizer blocks deletion.
    (SA + "device-plugin", "UPDATE", "pods",
     _with(POD, metadata__ownerReferences=[{"apiVersion": "v1", "kind": "Node", "name": "gone", "uid": "x"}]), POD,
     False),
    (SA + "mock-device-plugin", "UPDATE", "nodes",
     _with(NODE, metadata__ownerReferences=[{"apiVersion": "v1", "kind": "Node", "name": "gone", "uid": "x"}]), NODE,
     False),
    (SA + "scheduler", "UPDATE", "nodes", _with(NODE, metadata__finalizers=["x/y"]), NODE, False),
    # HAMi's code writes no ConfigMap; its scheduler's role may patch every one (templates/scheduler/clusterrole.yaml).
    (SA + "scheduler", "UPDATE", "configmaps", _with(CONFIGMAP, data={"config.conf": "evil"}), CONFIGMAP, False),
    (SA + "scheduler", "CREATE", "configmaps", CONFIGMAP, None, False),
    (SA + "scheduler", "DELETE", "configmaps", None, CONFIGMAP, False),
    # Anyone else is not this policy's business.
    ("kubernetes-admin", "CREATE", "pods", POD, None, True),
    ("kubernetes-admin", "UPDATE", "configmaps", _with(CONFIGMAP, data={}), CONFIGMAP, True),
])
def test_the_token_policy_admits_what_hami_writes_and_refuses_the_rest(user, operation, resource, new, old, allowed):
    assert admits(hami_token_policy()[0]["spec"], user, operation, resource, new, old) is allowed


def _gpu_pod(labels=None, scheduler="hami-scheduler", node=None, where="containers", kind="limits",
             resource="nvidia.com/gpu"):
    """A pod as the validating admission sees it: after defaulting and HAMi's webhook (if it was called)."""
    pod = {"metadata": {"name": "p", "namespace": "team-a", **({"labels": labels} if labels else {})},
           "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "x"}]}}
    pod["spec"].setdefault(where, []).append({"name": "g", "image": "x", "resources": {kind: {resource: "1"}}})
    if node:
        pod["spec"]["nodeName"] = node
    return pod


@pytest.mark.parametrize("pod, allowed", [
    # As HAMi's webhook leaves a GPU pod.
    (_gpu_pod(), True),
    (_gpu_pod(labels={"hami.io/webhook": "keep"}), True),
    # Not a GPU pod: none of this policy's business, label or not.
    (_gpu_pod(labels={"hami.io/webhook": "ignore"}, scheduler="default-scheduler", resource="cpu"), True),
    # The webhook's objectSelector skipped it: unmutated, on default-scheduler by node allocatable.
    (_gpu_pod(labels={"hami.io/webhook": "ignore"}, scheduler="default-scheduler"), False),
    # Skipped, with HAMi's scheduler set by hand (the webhook's quota check never ran).
    (_gpu_pod(labels={"hami.io/webhook": "ignore"}), False),
    # webhook.go Handle allows "a different scheduler" unmutated; with nodeName no scheduler is involved at all.
    (_gpu_pod(scheduler="other", node="gpu-0"), False),
    (_gpu_pod(scheduler="default-scheduler", where="initContainers", resource="nvidia.com/gpumem"), False),
    (_gpu_pod(scheduler="default-scheduler", kind="requests"), False),
])
def test_a_gpu_pod_is_admitted_only_as_hamis_webhook_left_it(pod, allowed):
    assert admits(hami_pod_policy()[0]["spec"], "system:serviceaccount:kube-system:tenant-user", "CREATE", "pods",
                  pod, None) is allowed


def _selects(selector, labels):
    """A label selector's matchExpressions (In / NotIn) against a namespace's labels."""
    def holds(expression):
        inside = labels.get(expression["key"]) in expression["values"]
        return inside if expression["operator"] == "In" else not inside
    return all(holds(expression) for expression in selector["matchExpressions"])


def test_the_gpu_pod_policy_covers_the_namespaces_hamis_webhook_covers(webhook_template):
    binding = hami_pod_policy()[1]
    # templates/scheduler/webhook.yaml: both selectors exclude hami.io/webhook NotIn [ignore].
    assert webhook_template.count("- key: hami.io/webhook\n        operator: NotIn\n        values:\n"
                                  "        - ignore") == 2
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    workload = {"kubernetes.io/metadata.name": "team-a", "app.kubernetes.io/part-of": "gpu-tenancy"}
    assert _selects(selector, workload)
    assert not _selects(selector, {**workload, "hami.io/webhook": "ignore"})
    for namespace in TENANT_SYSTEM_NAMESPACES:
        assert not _selects(selector, {"kubernetes.io/metadata.name": namespace})


@pytest.mark.repo
def test_the_docs_say_a_broken_tunnel_blocks_every_pod_create_not_only_gpu_pods(webhook_template):
    from tests.support.readme import all_text

    # The rule matches every pod CREATE (templates/scheduler/webhook.yaml rules), and it fails closed.
    assert re.search(r"operations:\s+- CREATE\s+resources:\s+- pods\s", webhook_template)
    assert "no pod can be created in the tenant's other namespaces, GPU or not" in " ".join(all_text().split())
