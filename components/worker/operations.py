"""The worker layer's operations on its tenant's API, from the Pulumi host (dynamic resources, see
components/host_operations.py): a worker's one-time join token and its Node removed when it leaves
(NodeMembership), waiting for the Node to register (NodeRegistration), draining it before its node is upgraded
(NodeDrain) and waiting for it to be back and schedulable with its cards (NodeReady), which drains it when it leaves."""

from __future__ import annotations

import datetime
import secrets
from typing import Any

from pulumi import log as pulumi_log
from pulumi.dynamic import CheckResult, CreateResult, DiffResult, UpdateResult

from components import kube
from components.gpu.cards import REGISTER_ANNOTATION
from components.host_operations import HostOperationProvider, declare, inputs_changed, on_tenant, poll
from components.kube import ApiError, UnreachableError
from components.tenant.kube_proxy import NODE_BOOTSTRAP_TOKEN_GROUP
from naming import GPU_RESOURCE, JOIN_ANNOTATION, PART_OF, PART_OF_LABEL

# --------------------------------------------------------------------------- #
# Join tokens (kubeadm bootstrap tokens) and Node objects
# --------------------------------------------------------------------------- #

BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"
# kubeadm's default token lifetime (`kubeadm token create --ttl`); the token is revoked as soon as the Node it
# was minted for has registered, so this only bounds a join that never happens.
TOKEN_TTL = datetime.timedelta(hours=24)
_TOKEN_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
NODE_LABEL = "gpu-tenancy.io/node"


def bootstrap_token_secret(token_id: str, token_secret: str, expiration: datetime.datetime,
                           node: str) -> dict[str, Any]:
    """The kube-system Secret kubeadm authenticates a join with (format of kubeadm's `token create`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": BOOTSTRAP_TOKEN_TYPE,
        "metadata": {
            # The API server looks tokens up by this exact name.
            "name": f"bootstrap-token-{token_id}",
            "namespace": "kube-system",
            "labels": {PART_OF_LABEL: PART_OF, NODE_LABEL: node},
        },
        "stringData": {
            "description": f"gpu-tenancy: one-time join token of node {node}",
            "token-id": token_id,
            "token-secret": token_secret,
            "expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": NODE_BOOTSTRAP_TOKEN_GROUP,
        },
    }


def _random(length: int) -> str:
    return "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(length))


# --------------------------------------------------------------------------- #
# Providers
# --------------------------------------------------------------------------- #


class NodeMembershipProvider(HostOperationProvider):
    """A worker's membership of its tenant, tenant side: a one-time join token minted for the worker, and its
    Node removed when the worker leaves (after the node-side `kubeadm reset`, which depends on this resource).

    Replaced when the worker becomes another machine or the tenant another control plane; also when the token
    expired before the Node ever registered (so a join retried after a day gets a fresh token).
    """

    IDENTITY = ("node_name", "machine", "endpoint", "ca_cert_hash")

    def create(self, props: dict[str, Any]) -> CreateResult:
        node = props["node_name"]
        with self._api(props["kubeconfig"]) as tenant:
            expiration = self.clock.now() + TOKEN_TTL
            for _ in range(5):
                token_id, token_secret = _random(6), _random(16)
                try:
                    tenant.create(bootstrap_token_secret(token_id, token_secret, expiration, node))
                    break
                except ApiError as error:
                    if error.status != 409:  # an id collision: draw again
                        raise RuntimeError(f"cannot create the join token of node {node}: {error}") from None
            else:
                raise RuntimeError(f"cannot create the join token of node {node}: five id collisions")
        outs = {**props, "token": f"{token_id}.{token_secret}", "token_id": token_id,
                "expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ")}
        return CreateResult(id_=f"{node}/{token_id}", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [key for key in self.IDENTITY if olds.get(key) != news.get(key)]
        if not replaces and self._expired_unused(olds, news):
            replaces = ["expiration"]
        changes = bool(replaces) or any(olds.get(k) != news.get(k) for k in news if k != "__provider")
        return DiffResult(changes=changes, replaces=replaces, delete_before_replace=True)

    def _expired_unused(self, olds: dict[str, Any], news: dict[str, Any]) -> bool:
        expiration = olds.get("expiration")
        if not expiration or datetime.datetime.fromisoformat(expiration.replace("Z", "+00:00")) > self.clock.now():
            return False
        kubeconfig = news.get("kubeconfig")
        if not isinstance(kubeconfig, str):
            return False  # unknown in this preview: nothing to decide with
        try:
            with self._api(kubeconfig) as tenant:
                return tenant.find("Node", olds["node_name"]) is None
        except (ApiError, kube.KubeconfigError):
            return False

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        keep = {k: olds[k] for k in ("token", "token_id", "expiration") if k in olds}
        return UpdateResult(outs={**news, **keep})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        node = props["node_name"]

        def remove(kubeconfig: str) -> None:
            with self._api(kubeconfig) as tenant:
                tenant.delete("Node", node)
                tenant.delete("Secret", f"bootstrap-token-{props['token_id']}", "kube-system")

        try:
            on_tenant(self, props, remove)
        except ApiError as error:
            raise RuntimeError(f"cannot remove Node {node} from tenant {props['control_plane_name']}: {error}") \
                from None


NODE_REGISTER_TIMEOUT = 180.0


class NodeRegistrationProvider(HostOperationProvider):
    """Waits (bounded) until the joined worker's Node object exists, then revokes its join token.

    `kubeadm join` can return before the kubelet has registered the Node; everything that patches the Node
    waits for this resource instead. Its id is `<node>/<the Node's uid>`: a rejoined worker is a fresh Node
    object (the old one was deleted with the old membership), so what depends on the id (the card patches, the
    smoke pod bound to the node) sees the change and is applied again.
    """

    def create(self, props: dict[str, Any]) -> CreateResult:
        node = props["node_name"]
        with self._api(props["kubeconfig"]) as tenant:
            uid: list[str] = []

            def registered() -> str | None:
                found = tenant.find("Node", node)
                if found is None:
                    return f"Node {node} has not registered"
                uid.append(found["metadata"]["uid"])
                return None

            try:
                poll(registered, self.clock, timeout=NODE_REGISTER_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(f"{error}: check the kubelet on the worker (journalctl -u kubelet)") from None
            tenant.delete("Secret", f"bootstrap-token-{props['token_id']}", "kube-system")
        return CreateResult(id_=f"{node}/{uid[-1]}", outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in ("node_name", "join", "token_id") if olds.get(k) != news.get(k)]
        changes = bool(replaces) or olds.get("kubeconfig") != news.get("kubeconfig")
        return DiffResult(changes=changes, replaces=replaces)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=dict(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        return None


# kubectl drain's default is no timeout; a blocked eviction must stop the update with the pod named instead.
DRAIN_TIMEOUT = 300.0
DRAIN_INTERVAL = 5.0  # kubectl drain retries a refused eviction after 5 s
# A static pod's mirror on the API server (kubernetes pkg/kubelet/types/pod_update.go ConfigMirrorAnnotationKey).
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


def _drained_pods(pods: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    """The pods `kubectl drain --ignore-daemonsets --delete-emptydir-data --force` evicts from `node`: all bound to
    it but DaemonSet pods (their controller ignores the cordon and would put them back) and static pods' mirrors
    (the kubelet owns them). Pods without a controller are evicted too: they would not survive the node anyway."""
    drained = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if any(owner.get("kind") == "DaemonSet" for owner in metadata.get("ownerReferences") or []):
            continue
        if MIRROR_POD_ANNOTATION in (metadata.get("annotations") or {}):
            continue
        drained.append(pod)
    return drained


def one_worker_warning(tenant: str, node: str, current: Any, wanted: Any) -> str:
    """What the preview says when the only worker of a tenant is about to be drained for an upgrade."""
    return (f"tenant {tenant} has one worker, {node}: its upgrade from {current} to {wanted} drains it, so every "
            f"workload of tenant {tenant} stops until {node} is back in service (Ready, its cards advertised). Add a "
            "worker first to keep them running")


class NodeDrainProvider(HostOperationProvider):
    """Before a worker moves to another Kubernetes version: its Node cordoned, then its pods evicted.

    Evictions go through the Eviction API, so the API server applies each pod's PodDisruptionBudget and answers
    429 while it allows no disruption (kubernetes pkg/registry/core/pod/storage/eviction.go checkAndDecrement);
    a refused eviction is retried, bounded by DRAIN_TIMEOUT, and then the update stops naming the pod. The Node
    stays cordoned, and this resource keeps its old version in the state, so the next `up` drains again and goes
    on from this worker. A first build (or a new worker) has nothing to drain; neither has a Node that is gone.
    """

    # Inputs that only say what to tell the operator; no change by themselves. The worker count is one: the check
    # reads it from the state (olds), which a `same` step would leave at an old count.
    NOT_A_CHANGE = ("tenant", "warning")

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=props["node_name"], outs={**props, "warning": None})

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        """`warning`: what the program shows on this resource when it drains a tenant's only worker. Check sees the
        stored inputs, and a preview's outputs are the checked inputs (the provider host runs no Update in a
        preview, pulumi provider_plugin.go), so the preview shows it; the update's outputs do not hold it."""
        # The workers there while this one is drained are those of the state: a worker added in the same `up` is
        # created only after this one is back (components/tenant/tenant.py: each worker after the one before), and
        # a removed one is deleted at the end of the update. A state from before the count was kept has the config's.
        workers = olds.get("tenant_workers", news.get("tenant_workers"))
        warning = None
        if olds and olds.get("version") != news.get("version") and workers == 1:
            warning = one_worker_warning(str(news.get("tenant")), str(news.get("node_name")), olds.get("version"),
                                         news.get("version"))
        return CheckResult({**news, "warning": warning}, [])

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # A state from before the count was kept is no change for it: a running stack previews none.
        ignored = dict.fromkeys((*self.NOT_A_CHANGE, *(() if "tenant_workers" in olds else ("tenant_workers",))))
        return DiffResult(changes=inputs_changed({**olds, **ignored}, {**news, **ignored}))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if olds.get("version") != news.get("version"):
            self._drain(news)
        return UpdateResult(outs={**news, "warning": None})

    def _drain(self, props: dict[str, Any]) -> None:
        with self._api(props["kubeconfig"]) as tenant:
            drain(tenant, self.clock, props["node_name"], f"before its upgrade to {props['version']}",
                  "The Node stays cordoned and the worker keeps its version", "drains this worker again and goes "
                  "on from here")


def drain(tenant: kube.KubeClient, clock: Any, node: str, why: str, meanwhile: str, again: str) -> None:
    """`kubectl drain --ignore-daemonsets --delete-emptydir-data --force` of `node`, bounded by DRAIN_TIMEOUT: cordon,
    then evict (`_drained_pods`) until none is left; else one line naming each refused pod with its budget."""
    found = tenant.find("Node", node)
    if found is None:
        return
    tenant.patch("Node", node, {"spec": {"unschedulable": True}})
    # A pod terminating on a Node whose kubelet does not post Ready never finishes there: not waited for (what
    # kubectl drain --skip-wait-for-delete-timeout is for, kubernetes/kubectl v0.36.1 pkg/drain/filters.go).
    posting = _condition(found, "Ready") == "True"
    refused: dict[str, str] = {}

    def drained() -> str | None:
        left = []
        for pod in _drained_pods(tenant.list("Pod"), node):
            name, namespace = pod["metadata"]["name"], pod["metadata"].get("namespace") or "default"
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                left += [pod] if posting else []  # evicted, still terminating
                continue
            left.append(pod)
            try:
                tenant.evict(name, namespace)
                refused.pop(f"{namespace}/{name}", None)
            except ApiError as error:
                if error.status == 404:
                    continue
                if error.status != 429:
                    raise RuntimeError(f"cannot evict pod {namespace}/{name} from Node {node}: {error}") from None
                refused[f"{namespace}/{name}"] = error.message
        if not left:
            return None
        return f"{len(left)} pod(s) left on Node {node}: {', '.join(sorted(refused) or ['terminating'])}"

    try:
        poll(drained, clock, timeout=DRAIN_TIMEOUT, interval=DRAIN_INTERVAL)
    except TimeoutError as error:
        blocking = ", ".join(f"pod {pod} ({message})" for pod, message in sorted(refused.items()))
        fix = (f"Let the PodDisruptionBudget allow one disruption (kubectl -n {min(refused).split('/')[0]} get pdb) "
               "or move the pod" if refused else f"Check why its pods do not end (journalctl -u kubelet on {node})")
        raise RuntimeError(f"the drain of Node {node} {why} is blocked: {blocking or error}. {meanwhile}. {fix}, then "
                           f"run `make up` again: it {again}") from None


def _condition(node: dict[str, Any], kind: str) -> str | None:
    conditions = ((node.get("status") or {}).get("conditions")) or []
    return next((c.get("status") for c in conditions if c.get("type") == kind), None)


NODE_READY_TIMEOUT = 300.0


def _quantity_value(value: Any) -> int | None:
    """A whole-number Kubernetes quantity as an int (None when absent or not a plain count)."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def cards_missing(node: dict[str, Any], cards: dict[str, Any] | None) -> str | None:
    """What of a worker's cards its Node does not show yet (None: all advertised, or no cards to wait for).

    mock: the program's own patches -- `nvidia.com/gpu` in capacity and allocatable equal to the cards' slots
    (GpuCapacityProvider; the kubelet copies each capacity entry into allocatable at its status update, kubernetes
    pkg/kubelet/nodestatus/setters.go MachineInfo), and the card annotation applied after this join (the join id
    next to it). nvidia: `nvidia.com/gpu` in allocatable above zero, which only HAMi's device plugin puts there
    (it registers the resource with the kubelet, Project-HAMi/HAMi v2.10.0
    pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go Register / ListAndWatch)."""
    if not cards:
        return None
    name = (node.get("metadata") or {}).get("name")
    status = node.get("status") or {}
    capacity = (status.get("capacity") or {}).get(GPU_RESOURCE)
    allocatable = (status.get("allocatable") or {}).get(GPU_RESOURCE)
    if cards.get("mode") == "nvidia":
        if kube.positive_quantity(allocatable):
            return None
        return (f"Node {name} advertises no {GPU_RESOURCE} (allocatable {allocatable!r}): HAMi's device plugin has "
                f"not registered its cards there (kubectl -n kube-system get pods -o wide -l "
                f"app.kubernetes.io/component=hami-device-plugin, in the tenant)")
    wanted = int(cards["gpu"])
    missing = [f"{GPU_RESOURCE} {part} {value!r}, not {wanted}" for part, value in
               (("capacity", capacity), ("allocatable", allocatable)) if _quantity_value(value) != wanted]
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if not annotations.get(REGISTER_ANNOTATION):
        missing.append(f"no {REGISTER_ANNOTATION} annotation")
    elif annotations.get(JOIN_ANNOTATION) != cards.get("join"):
        missing.append(f"its {REGISTER_ANNOTATION} annotation is not from this join ({JOIN_ANNOTATION} "
                       f"{annotations.get(JOIN_ANNOTATION)!r}, not {cards.get('join')!r})")
    if not missing:
        return None
    return f"Node {name} does not advertise its cards: {'; '.join(missing)}"


class NodeReadyProvider(HostOperationProvider):
    """After a worker moved to another Kubernetes version: its new Node Ready, its kubelet at that version (when
    `kubelet_version` is set), its cards advertised (when `cards` is set, see `cards_missing`), then uncordoned,
    before the next worker of the tenant is drained.

    On a first build nothing waits here (the Nodes become Ready only with the CNI, which is installed after every
    worker has joined); a changed registration alone (a rejoin at the same version) waits for nothing either. What
    `cards` holds is no change by itself: it only says what to wait for when the version changes."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=props["node_name"], outs={**props, "reported": self._reported(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=inputs_changed(
            olds, {**news, "reported": olds.get("reported"), "cards": olds.get("cards")}))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if olds.get("version") != news.get("version"):
            self._wait(news)
        return UpdateResult(outs={**news, "reported": self._reported(news)})

    def _reported(self, props: dict[str, Any]) -> str | None:
        """The kubelet version the Node reports (status.nodeInfo.kubeletVersion), for the tenant's outputs."""
        with self._api(props["kubeconfig"]) as tenant:
            found = tenant.find("Node", props["node_name"]) or {}
        return ((found.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")

    def _wait(self, props: dict[str, Any]) -> None:
        node, kubelet = props["node_name"], props.get("kubelet_version")
        uid = str(props.get("registration") or "").rpartition("/")[2]
        with self._api(props["kubeconfig"]) as tenant:
            def ready() -> str | None:
                found = tenant.find("Node", node)
                if found is None:
                    return f"Node {node} does not exist"
                if uid and (found.get("metadata") or {}).get("uid") != uid:
                    return f"Node {node} is not the one that registered after the upgrade"
                status = found.get("status") or {}
                running = ((status.get("nodeInfo") or {}).get("kubeletVersion"))
                if kubelet and running != kubelet:
                    return f"Node {node} runs kubelet {running}, not {kubelet}"
                if _condition(found, "Ready") != "True":
                    return f"Node {node} is not Ready"
                return cards_missing(found, props.get("cards"))

            try:
                poll(ready, self.clock, timeout=NODE_READY_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(
                    f"{error}. The next worker is not drained until this one is back; check the kubelet on {node} "
                    "(journalctl -u kubelet) and run `make up` again") from None
            if (tenant.find("Node", node) or {}).get("spec", {}).get("unschedulable"):
                tenant.patch("Node", node, {"spec": {"unschedulable": False}})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        """The worker leaves (this is deleted before its `-join`, whose delete resets the node): drained first, as
        kubeadm's docs remove a node (kubectl drain, then kubeadm reset, then kubectl delete node)."""
        node = props["node_name"]
        try:
            with self._api(props["kubeconfig"]) as tenant:
                drain(tenant, self.clock, node, "before it leaves", "The Node stays cordoned and the worker stays",
                      "drains it again and removes it")
        except UnreachableError as error:
            pulumi_log.warn(f"Node {node} leaves not drained: its tenant's API does not answer ({error.message})")


# --------------------------------------------------------------------------- #
# The resources the program declares
# --------------------------------------------------------------------------- #

NodeMembership = declare(NodeMembershipProvider, "NodeMembership")
NodeRegistration = declare(NodeRegistrationProvider, "NodeRegistration")
NodeDrain = declare(NodeDrainProvider, "NodeDrain")
NodeReady = declare(NodeReadyProvider, "NodeReady")

