"""Helm values of the HAMi release in a tenant, as plain data.

The chart (`hami` 2.10.0) has no values schema, so every key here is checked
against the vendored `values.yaml` in the tests. Upstream files referred to
are in Project-HAMi/HAMi at tag v2.10.0.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml

from components import kube
from components.gpu.capacity import DEFAULT_GPU_POLICY, DEFAULT_NODE_POLICY
from components.helm import Chart
from components.images import (
    HAMI_CERTGEN_REGISTRY,
    HAMI_CERTGEN_REPOSITORY,
    HAMI_CERTGEN_TAG,
    kubernetes_image_tag,
)
from config import Versions
from naming import (
    GPU_CORES_RESOURCE,
    GPU_MEMORY_RESOURCE,
    GPU_RESOURCE,
    HAMI_SCHEDULER_NAME,
    NAMESPACE_NAME_LABEL,
    TENANT_SYSTEM_NAMESPACES,
)

# The chart derives its object names from the release name (`hami-scheduler`, `hami-webhook`, and the mock
# plugin's ConfigMap `<fullname>-scheduler-device`, templates/device-plugin/daemonsetmock.yaml); the docs and
# every kubectl hint use these names.
HAMI_RELEASE = "hami"
HAMI_NAMESPACE = "kube-system"
HAMI_CHART = Chart(HAMI_RELEASE, "hami", HAMI_NAMESPACE)

GpuMode = Literal["mock", "nvidia"]


# charts/hami/values.yaml `scheduler.extender.extraArgs`; setting the list replaces it, so keep these.
EXTENDER_DEFAULT_ARGS = ("--debug", "-v=4")
# The mock plugin never finishes the bind phase, so HAMi's node lock is only released by
# its timeout (5m by default); `scheduler.nodeLockExpire` is overwritten by this flag
# in cmd/scheduler/main.go.
NODE_LOCK_TIMEOUT = "15s"


def nvidia_device_config() -> dict[str, Any]:
    """HAMi's default `nvidia:` device config (charts/hami/templates/scheduler/device-configmap.yaml).

    Rendered with the chart's default values. Only the nvidia section is kept:
    mock-device-plugin 1.0.1 cannot parse the v2.9+ `vnpus` map, and the HAMi
    scheduler needs one non-empty device section (pkg/scheduler/config/config.go
    `validateConfig`). The MIG profile allowlist is left out: simulated cards
    are always in `hami-core` mode.
    """
    return {
        "nvidia": {
            "resourceCountName": GPU_RESOURCE,
            "resourceMemoryName": GPU_MEMORY_RESOURCE,
            "resourceMemoryPercentageName": f"{GPU_MEMORY_RESOURCE}-percentage",
            "resourceCoreName": GPU_CORES_RESOURCE,
            "resourcePriorityName": "nvidia.com/priority",
            "overwriteEnv": False,
            "defaultMemory": 0,
            "defaultCores": 0,
            "defaultGPUNum": 1,
            "preConfiguredDeviceMemory": 0,
            "memoryFactor": 1,
            "deviceSplitCount": 10,
            "deviceMemoryScaling": 1,
            "deviceCoreScaling": 1,
            "enableNumaTopology": False,
            "gpuCorePolicy": "default",
            "libCudaLogLevel": 1,
            "runtimeClassName": "",
        }
    }


def device_config_yaml() -> str:
    """`device-config.yaml` content for the `hami-scheduler-device` ConfigMap (mock mode)."""
    return yaml.safe_dump(nvidia_device_config(), sort_keys=False)


# Service accounts of the chart's pods that run on GPU workers or anywhere (templates/_helpers.tpl: the fullname is
# the release name, which contains the chart name): their projected tokens sit on the node that runs them.
HAMI_SERVICE_ACCOUNTS = tuple(f"system:serviceaccount:{HAMI_NAMESPACE}:{HAMI_RELEASE}-{name}"
                              for name in ("scheduler", "device-plugin", "mock-device-plugin"))
HAMI_TOKEN_POLICY = "gpu-tenancy-hami-tokens"


def _unchanged(field: str) -> str:
    """CEL: `field` is the same in the new and the old object; absent in both counts as the same (selecting an
    absent field is an error in CEL, which failurePolicy Fail would turn into a refusal)."""
    new, old = f"object.{field}", f"oldObject.{field}"
    return f"((!has({new}) && !has({old})) || (has({new}) && has({old}) && {new} == {old}))"


def hami_token_policy() -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30, on by default) and its
    binding that narrow what HAMi's tokens can do below what its chart's RBAC grants.

    The chart's ClusterRoles give the nvidia device plugin pods `create, update, patch` and nodes `update, patch`
    (templates/device-plugin/monitorrole.yaml), the scheduler pods `patch` and nodes `patch`
    (templates/scheduler/clusterrole.yaml), the mock plugin nodes `update, patch`: with its token, root on a GPU
    worker could start a pod under any service account or swap a running pod's image, i.e. become tenant admin.
    What HAMi itself writes is metadata only: pod annotations (allocations) and labels (the scheduler's leader
    label), node annotations (node locks, device registration) (pkg/util/nodelock, pkg/device-plugin/.../server.go,
    cmd/scheduler). So for these users: no pod is created, and an update may not change a pod's or node's `spec`
    or a node's labels (the platform's controllers are placed by a node label), owner references or finalizers (an
    owner that does not exist has the garbage collector delete the object), and no ConfigMap is written (HAMi's
    code writes none; the scheduler's role may patch every one). Subresources (pods/binding, which the scheduler
    needs) are not matched.
    """
    users = ", ".join(f"'{user}'" for user in HAMI_SERVICE_ACCOUNTS)
    return kube.admission_policy(HAMI_TOKEN_POLICY, {
        "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
             "resources": ["pods", "nodes"]},
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
             "resources": ["configmaps"]},
        ]},
        "matchConditions": [{"name": "hami-service-accounts",
                             "expression": f"request.userInfo.username in [{users}]"}],
        "validations": [
            {"expression": "request.resource.resource != 'configmaps'",
             "message": "HAMi's service accounts may not write ConfigMaps"},
            {"expression": "request.operation != 'CREATE' || request.resource.resource != 'pods'",
             "message": "HAMi's service accounts may not create pods"},
            {"expression": f"request.operation != 'UPDATE' || {_unchanged('spec')}",
             "message": "HAMi's service accounts may change only the metadata of pods and nodes"},
            {"expression": f"request.operation != 'UPDATE' || request.resource.resource != 'nodes' || "
                           f"{_unchanged('metadata.labels')}",
             "message": "HAMi's service accounts may not change node labels"},
            {"expression": f"request.operation != 'UPDATE' || ({_unchanged('metadata.ownerReferences')} && "
                           f"{_unchanged('metadata.finalizers')})",
             "message": "HAMi's service accounts may not change owner references or finalizers"},
        ],
    })


HAMI_POD_POLICY = "gpu-tenancy-gpu-pods-through-hami"
# charts/hami/templates/scheduler/webhook.yaml: the webhook skips pods and namespaces carrying this label and value.
HAMI_WEBHOOK_LABEL, HAMI_WEBHOOK_IGNORE = "hami.io/webhook", "ignore"


def _requests_gpu(containers: str) -> str:
    """CEL: a container of the list `containers` limits or requests an `nvidia.com/` resource."""
    return "(" + " || ".join(f"{containers}.exists(c, has(c.resources) && has(c.resources.{kind}) && "
                             f"c.resources.{kind}.exists(r, r.startsWith('nvidia.com/')))"
                             for kind in ("limits", "requests")) + ")"


def hami_pod_policy() -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and binding: a pod asking for `nvidia.com/` resources is admitted only as HAMi's
    webhook left it, so HAMi's quota (pkg/scheduler/webhook.go fitResourceQuota) and card accounting see it.

    HAMi v2.10.0 lets a pod past its webhook three ways: the `hami.io/webhook: ignore` label (the webhook's
    objectSelector), a `schedulerName` other than its own (webhook.go Handle: "Pod already has different scheduler
    assigned", allowed unmutated, which with `nodeName` set runs on a GPU node without any scheduler), and a
    namespace HAMi's webhook does not cover (which the tenant user cannot label or enter). Validating admission runs
    after every mutating webhook, so in the namespaces HAMi's webhook covers this refuses the first two.
    """
    gpu = (f"{_requests_gpu('object.spec.containers')} || "
           f"(has(object.spec.initContainers) && {_requests_gpu('object.spec.initContainers')})")
    ignored = (f"has(object.metadata.labels) && '{HAMI_WEBHOOK_LABEL}' in object.metadata.labels && "
               f"object.metadata.labels['{HAMI_WEBHOOK_LABEL}'] == '{HAMI_WEBHOOK_IGNORE}'")
    return kube.admission_policy(HAMI_POD_POLICY, {
        "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
        "matchConditions": [{"name": "requests-gpu", "expression": gpu}],
        "validations": [
            {"expression": f"!({ignored})",
             "message": f"a GPU pod may not carry the label {HAMI_WEBHOOK_LABEL}={HAMI_WEBHOOK_IGNORE}: "
                        "HAMi's quota and card accounting must see it"},
            {"expression": f"has(object.spec.schedulerName) && object.spec.schedulerName == '{HAMI_SCHEDULER_NAME}'",
             "message": f"a GPU pod must be scheduled by {HAMI_SCHEDULER_NAME}: leave schedulerName unset"},
        ],
    },  # the namespaces HAMi's webhook covers (the same selector as templates/scheduler/webhook.yaml)
        {"namespaceSelector": {"matchExpressions": [
            {"key": HAMI_WEBHOOK_LABEL, "operator": "NotIn", "values": [HAMI_WEBHOOK_IGNORE]},
            {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": list(TENANT_SYSTEM_NAMESPACES)}]}})


def _certgen_image() -> dict[str, str]:
    # charts/hami _commons.tpl common.images.image joins registry/repository:tag, so a tag@digest pins it.
    return {"registry": HAMI_CERTGEN_REGISTRY, "repository": HAMI_CERTGEN_REPOSITORY, "tag": HAMI_CERTGEN_TAG,
            "pullPolicy": "IfNotPresent"}


def hami_values(
    gpu_mode: GpuMode, kubernetes_version: str, versions: Versions, runtime_class_name: str | None = None,
    node_policy: str = DEFAULT_NODE_POLICY, gpu_policy: str = DEFAULT_GPU_POLICY,
    system_nodes: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Values for the `hami` chart in a tenant running `kubernetes_version`, scheduling with the tenant's
    `scheduling` policies (only written when they differ from the chart's, so a stack that sets none keeps its
    release values); `system_nodes`: the node selector of the tenant's workers without GPUs, where the scheduler
    (pods patch, binding) and the certificate Jobs (update on every MutatingWebhookConfiguration) then run instead
    of on a GPU worker."""
    if gpu_mode not in ("mock", "nvidia"):
        raise ValueError(f"gpuMode must be 'mock' or 'nvidia', got {gpu_mode!r}")
    mock = gpu_mode == "mock"
    # The real device plugin finds the pod it allocates for through the node lock (pkg/device-plugin/.../
    # server.go getPendingPod -> util.GetAllocatePodByNode): a short timeout would hand one pod's lock, and
    # devices, to the next. Only the mock plugin, which never releases the lock, needs it short.
    extender_args = [*EXTENDER_DEFAULT_ARGS, *([f"--node-lock-timeout={NODE_LOCK_TIMEOUT}"] if mock else [])]
    values: dict[str, Any] = {
        "scheduler": {
            "kubeScheduler": {
                # The scheduler must match the tenant's API server version.
                "image": {"registry": "registry.k8s.io", "repository": "kube-scheduler",
                          # charts/hami _helpers.tpl joins registry/repository:tag, so a tag@digest pins it.
                          "tag": kubernetes_image_tag("kube-scheduler", kubernetes_version)},
            },
            "extender": {"extraArgs": extender_args},
            # The chart's NodePort publishes the extender (/filter, /bind, no authentication) and its metrics on
            # every node (templates/scheduler/service.yaml; nodePort only for type NodePort). Nothing outside the
            # tenant needs it: kube-scheduler calls the extender on 127.0.0.1 (templates/scheduler/configmap.yaml)
            # and the API server the webhook through this Service's port (templates/scheduler/webhook.yaml).
            "service": {"type": "ClusterIP"},
            # The certificate hook Jobs (templates/scheduler/job-patch/): `imageNew` on Kubernetes >= 1.22, `image`
            # below; both the Kubernetes project's certgen by digest instead of the chart's (components/images.py).
            "patch": {"image": _certgen_image(), "imageNew": _certgen_image()},
            "admissionWebhook": {
                # The chart's Ignore (charts/hami/values.yaml) admits GPU pods unmutated when the tunnel is down.
                "failurePolicy": "Fail",
                "whitelistNamespaces": list(TENANT_SYSTEM_NAMESPACES),
            },
        },
        # Its metrics Service, also a NodePort by default (templates/device-plugin/monitorservice.yaml).
        "devicePlugin": {"enabled": not mock, **({} if mock else {"service": {"type": "ClusterIP"}})},
        "mockDevicePlugin": {"enabled": mock},
    }
    if (node_policy, gpu_policy) != (DEFAULT_NODE_POLICY, DEFAULT_GPU_POLICY):
        values["scheduler"]["defaultSchedulerPolicy"] = {"nodeSchedulerPolicy": node_policy,
                                                         "gpuSchedulerPolicy": gpu_policy}
    if system_nodes:
        # templates/scheduler/deployment.yaml and job-patch/*.yaml read these.
        values["scheduler"]["nodeSelector"] = dict(system_nodes)
        values["scheduler"]["patch"]["nodeSelector"] = dict(system_nodes)
    if mock:
        values["mockDevicePlugin"]["image"] = {"tag": versions.mock_device_plugin}
        values["device-config"] = {"content": device_config_yaml()}
    elif runtime_class_name:
        # templates/device-plugin/runtime-class.yaml creates it with handler `nvidia`; the webhook puts it on GPU
        # pods and the device plugin runs with it (daemonsetnvidia.yaml).
        values["devicePlugin"].update(runtimeClassName=runtime_class_name, createRuntimeClass=True)
    return values
