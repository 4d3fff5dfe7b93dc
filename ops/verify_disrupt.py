"""`make verify DISRUPTIVE=1`: cut one tenant's Konnectivity tunnel, prove a GPU pod is then rejected, restore it.

The tenant API server reaches HAMi's webhook only through the Konnectivity tunnel (Kamaji 26.8.2-edge
internal/resources/konnectivity/egress_selector_configuration_resource.go: one egress selection `cluster`, gRPC
over the konnectivity-server's socket, no direct fallback). With no agent connected, konnectivity-server answers
every dial with "No agent available" (kubernetes-sigs/apiserver-network-proxy v0.35.0 pkg/server/
backend_manager.go ErrNotFound), the webhook call fails, and HAMi's `failurePolicy: Fail` must turn that into a
rejected pod; `Ignore`, or no webhook at all, lets the GPU pod through to the default scheduler.

How the tunnel is cut: a NetworkPolicy in the tenant's kube-system denying all egress of the agent pods (label
`k8s-app: konnectivity-agent`, agent.go), enforced by the tenant's Calico, then the agent pods are deleted so that
their open connections close (a new policy leaves established flows up: Kubernetes calls it implementation-defined,
docs concepts/services-networking/network-policies "NetworkPolicy's impact on existing connections", and Calico
keeps them, projectcalico/calico issue 6399) and the replacements cannot connect. No NetworkPolicy selects a
host-network pod, so agents with `hostNetwork` cannot be cut this way. Editing the agents instead does not hold:
they are a DaemonSet (nothing to scale to zero), and Kamaji's agent.go `mutate` rewrites the pod template
(nodeSelector, containers, hostNetwork) on every reconcile. Restoring
removes the policy and deletes the agents again; it runs whatever happens in between (a failure, Ctrl-C), and the
tunnel counts as restored only when a server-side dry-run GPU pod comes back mutated by HAMi again (bounded).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from components.kube import ApiError, Connect, Json, KubeClient
from naming import HAMI_SCHEDULER_NAME, PART_OF, PART_OF_LABEL
from ops.verify_checks import (
    HAMI_WEBHOOK,
    KONNECTIVITY_AGENT,
    PROBE_NAMESPACE,
    CheckResult,
    Platform,
    TenantTarget,
    Waiting,
    probe_pod,
    skip,
)

# Kamaji 26.8.2-edge internal/resources/konnectivity/constants.go AgentNamespace (kube-system); agent.go puts
# `k8s-app: konnectivity-agent` on the pod template (the DaemonSet's or Deployment's selector).
AGENT_NAMESPACE = "kube-system"
AGENT_LABELS = {"k8s-app": KONNECTIVITY_AGENT}
CUT_POLICY_NAME = "gpu-tenancy-verify-cut-konnectivity"
CUT_LABELS = {PART_OF_LABEL: PART_OF, "app.kubernetes.io/component": "verify-tunnel-cut"}
# What the API server says when a webhook call fails (k8s.io/apiserver pkg/admission/plugin/webhook/errors:
# `failed calling webhook "<name>": ...`); failurePolicy Fail returns it as the rejection.
WEBHOOK_CALL_FAILED = "failed calling webhook"

REJECTED_ROW = "tunnel cut: GPU pod rejected"
RESTORED_ROW = "tunnel restored"

Say = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cut_policy() -> Json:
    """Deny every egress of the agent pods: no Egress rule at all."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": CUT_POLICY_NAME, "namespace": AGENT_NAMESPACE, "labels": dict(CUT_LABELS)},
        "spec": {"podSelector": {"matchLabels": dict(AGENT_LABELS)}, "policyTypes": ["Egress"], "egress": []},
    }


def undo_commands(tenant: str) -> str:
    """What the operator runs by hand when the restore failed (with the tenant's admin kubeconfig)."""
    return (f"make kubeconfig TENANT={tenant} ADMIN=1, then with it: kubectl -n {AGENT_NAMESPACE} delete "
            f"networkpolicy {CUT_POLICY_NAME}; kubectl -n {AGENT_NAMESPACE} delete pod -l "
            f"k8s-app={KONNECTIVITY_AGENT}")


@dataclass
class _Answer:
    """One GPU pod sent to the tenant API: mutated (HAMi's schedulerName), admitted without HAMi, or rejected."""

    verdict: str  # "mutated" | "unmutated" | "rejected" | "refused" (another error: quota, RBAC, no answer)
    detail: str
    pod: Json | None = None


def _send(api: KubeClient, platform: Platform, dry_run: bool) -> _Answer:
    try:
        pod = api.create(probe_pod(platform.probe), dry_run=dry_run)
    except ApiError as error:
        if error.status is not None and WEBHOOK_CALL_FAILED in error.message:
            return _Answer("rejected", str(error))
        return _Answer("refused", str(error))
    scheduler = (pod.get("spec") or {}).get("schedulerName")
    if scheduler == HAMI_SCHEDULER_NAME:
        return _Answer("mutated", f"schedulerName {scheduler}", pod)
    return _Answer("unmutated", f"schedulerName {scheduler or 'unset'}", pod)


def _poll(api: KubeClient, platform: Platform, waiting: Waiting, done: Callable[[_Answer], bool]
          ) -> tuple[_Answer, float]:
    """Dry-run GPU pods until `done` or the timeout; the last answer and the seconds it took."""
    start = waiting.now()
    while True:
        answer = _send(api, platform, dry_run=True)
        if done(answer) or waiting.now() - start >= waiting.timeout:
            return answer, waiting.now() - start
        waiting.sleep(waiting.interval)


@dataclass
class _Cut:
    api: KubeClient
    tenant: str
    say: Say
    policy_created: bool = False
    problems: list[str] = field(default_factory=list)

    def agents(self) -> list[Json]:
        pods = self.api.list("Pod", AGENT_NAMESPACE)
        return [pod for pod in pods if all(((pod.get("metadata") or {}).get("labels") or {}).get(key) == value
                                           for key, value in AGENT_LABELS.items())]

    def restart_agents(self) -> list[str]:
        """Delete every agent pod (its controller makes new ones); the names of those that could not be."""
        failed = []
        for pod in self.agents():
            name = pod["metadata"]["name"]
            try:
                self.api.delete("Pod", name, AGENT_NAMESPACE)
            except ApiError as error:
                failed.append(f"{name} ({error})")
        return failed

    def cut(self) -> None:
        self.say(f"verify: cutting {self.tenant}'s Konnectivity tunnel (NetworkPolicy {AGENT_NAMESPACE}/"
                 f"{CUT_POLICY_NAME} in the tenant, agents restarted); it is restored when this check ends, on "
                 f"failure and on Ctrl-C too. If verify is killed instead: {undo_commands(self.tenant)}")
        self.api.create(cut_policy())
        self.policy_created = True
        failed = self.restart_agents()
        if failed:
            raise ApiError(None, f"could not delete the agent pods {', '.join(failed)}")

    def restore(self) -> bool:
        """Remove the policy and restart the agents; False (and `problems`) when the policy could not be removed."""
        if not self.policy_created:
            return True  # nothing was changed
        removed = True
        try:
            self.api.delete("NetworkPolicy", CUT_POLICY_NAME, AGENT_NAMESPACE)
        except ApiError as error:
            removed = False
            self.problems.append(f"NetworkPolicy {AGENT_NAMESPACE}/{CUT_POLICY_NAME} could not be removed "
                                 f"({error}): the tunnel stays cut")
        try:
            failed = self.restart_agents()
        except ApiError as error:
            failed = [f"(cannot list them: {error})"]
        if failed:
            self.problems.append(f"agent pods not restarted: {', '.join(failed)} (they retry on their own)")
        return removed


def _cut_results(api: KubeClient, platform: Platform, cut: _Cut, waiting: Waiting) -> list[CheckResult]:
    """With the tunnel being cut: wait until a dry run is no longer mutated, then send a real GPU pod."""
    answer, took = _poll(api, platform, waiting, lambda a: a.verdict != "mutated")
    if answer.verdict == "mutated":
        return [CheckResult(
            REJECTED_ROW, False, f"not tested: {took:g} s after the cut GPU pods still come back mutated "
            "→ the agents still reach their server, the tunnel was never cut",
            f"the tenant's CNI must enforce NetworkPolicy (Calico) and the agents must not run with hostNetwork: "
            f"in the tenant, kubectl -n {AGENT_NAMESPACE} get pods -l k8s-app={KONNECTIVITY_AGENT} -o wide")]
    if answer.verdict == "refused":
        return [CheckResult(REJECTED_ROW, False, f"not tested: the dry-run GPU pod was refused for another reason "
                                                 f"({answer.detail})", "read the message; then verify again")]
    dry = answer
    real = _send(api, platform, dry_run=False)
    if real.pod is not None:
        name = real.pod["metadata"]["name"]
        try:
            api.delete("Pod", name, PROBE_NAMESPACE, grace_period_seconds=0)
        except ApiError as error:
            cut.problems.append(f"the admitted GPU pod {PROBE_NAMESPACE}/{name} could not be deleted ({error}): "
                                f"kubectl -n {PROBE_NAMESPACE} delete pod {name}")
    if real.verdict == "mutated":
        return [CheckResult(REJECTED_ROW, False, f"not tested: the dry run was rejected ({dry.detail}), but the real "
                                                 f"GPU pod right after came back with {real.detail}: the tunnel was "
                                                 "back already", "verify again")]
    admitted = [f"{what} GPU pod admitted with {a.detail}" for what, a in (("dry-run", dry), ("real", real))
                if a.verdict == "unmutated"]
    if admitted:
        return [CheckResult(
            REJECTED_ROW, False, f"with the tunnel cut, {' and '.join(admitted)} → HAMi's webhook was skipped: the "
            "default scheduler places GPU pods HAMi never saw (no GPU slice, no isolation)",
            f"MutatingWebhookConfiguration {HAMI_WEBHOOK} must exist with failurePolicy Fail "
            "(scheduler.admissionWebhook.failurePolicy=Fail in the HAMi release); run `make up`")]
    if real.verdict == "refused":
        return [CheckResult(REJECTED_ROW, False, f"dry run rejected ({dry.detail}), but the real GPU pod was refused "
                                                 f"for another reason ({real.detail})", "read the message")]
    return [CheckResult(REJECTED_ROW, True, f"{took:g} s after the cut, dry-run and real GPU pods rejected: "
                                            f"{real.detail}")]


def _restored(api: KubeClient, platform: Platform, cut: _Cut, removed: bool, waiting: Waiting) -> CheckResult:
    problems = "; ".join(cut.problems)
    if not removed:
        return CheckResult(RESTORED_ROW, False, f"NOT RESTORED: {problems}", undo_commands(cut.tenant))
    answer, took = _poll(api, platform, waiting, lambda a: a.verdict == "mutated")
    extra = f" ({problems})" if problems else ""
    if answer.verdict == "mutated":
        return CheckResult(RESTORED_ROW, True, f"policy removed, agents restarted; {took:g} s later a dry-run GPU "
                                               f"pod came back with {answer.detail}{extra}")
    return CheckResult(
        RESTORED_ROW, False, f"policy removed, agents restarted, but {took:g} s later a dry-run GPU pod still got "
        f"{answer.detail}{extra} → the tunnel has not come back",
        f"in the tenant: kubectl -n {AGENT_NAMESPACE} logs -l k8s-app={KONNECTIVITY_AGENT}; make sure "
        f"NetworkPolicy {AGENT_NAMESPACE}/{CUT_POLICY_NAME} is gone ({undo_commands(cut.tenant)}); verify again")


def _preflight(api: KubeClient, platform: Platform, cut: _Cut) -> CheckResult | None:
    """Why the cut must not start (None: it may): a left-over policy, no agents, host-network agents, or GPU pods
    that are not mutated even with the tunnel up."""
    try:
        leftover = api.find("NetworkPolicy", CUT_POLICY_NAME, AGENT_NAMESPACE)
        agents = cut.agents()
    except ApiError as error:
        return CheckResult(REJECTED_ROW, False, f"not tested: cannot read the tenant's kube-system ({error})",
                           "see the tenant API row")
    if leftover is not None:
        return CheckResult(REJECTED_ROW, False, f"not tested: NetworkPolicy {AGENT_NAMESPACE}/{CUT_POLICY_NAME} is "
                                                "left over from an interrupted run: the tunnel is still cut",
                           undo_commands(cut.tenant))
    if not agents:
        return CheckResult(REJECTED_ROW, False, f"not tested: no pod labelled k8s-app={KONNECTIVITY_AGENT} in "
                                                f"{AGENT_NAMESPACE}", "see the Konnectivity agent row")
    hosted = [pod["metadata"]["name"] for pod in agents if (pod.get("spec") or {}).get("hostNetwork")]
    if hosted:
        return skip(REJECTED_ROW, f"not tested: {', '.join(hosted)} run with hostNetwork, which no NetworkPolicy "
                                  "selects, so this check cannot cut them (spec.addons.konnectivity.agent."
                                  "hostNetwork)")
    before = _send(api, platform, dry_run=True)
    if before.verdict != "mutated":
        return CheckResult(REJECTED_ROW, False, f"not tested: before any cut a dry-run GPU pod got {before.detail} "
                                                "→ HAMi's webhook does not mutate GPU pods even with the tunnel up",
                           "see the HAMi webhook and probe rows; nothing was cut")
    return None


def check_tunnel_cut(platform: Platform, tenant: TenantTarget, connect: Connect, waiting: Waiting,
                     say: Say = _stderr) -> list[CheckResult]:
    """Cut `tenant`'s Konnectivity tunnel, prove GPU pods are rejected, restore it and wait until HAMi mutates a
    dry run again. The restore runs on every way out of the cut (an error, KeyboardInterrupt); when an exception
    ends the check, what the restore did goes to `say`, since no table will show it."""
    try:
        api = connect(tenant.kubeconfig)
    except ValueError as error:
        return [CheckResult(REJECTED_ROW, False, f"not tested: the tenant kubeconfig is unusable ({error})",
                            "run `make up` to refresh the stack outputs")]
    try:
        cut = _Cut(api, tenant.name, say)
        blocked = _preflight(api, platform, cut)
        if blocked is not None:
            return [blocked]
        try:
            cut.cut()
            results = _cut_results(api, platform, cut, waiting)
        except BaseException as error:
            removed = cut.restore()
            state = ("nothing had been changed yet" if not cut.policy_created
                     else "restored (policy removed, agents restarted)" if removed
                     else f"NOT restored: {'; '.join(cut.problems)}. Run: {undo_commands(tenant.name)}")
            say(f"verify: stopped while {tenant.name}'s tunnel was cut ({type(error).__name__}): {state}")
            if not isinstance(error, ApiError):
                raise
            failed = CheckResult(REJECTED_ROW, False, f"not tested: the cut failed ({error})",
                                 "read the message; the tenant admin must be allowed to manage NetworkPolicies "
                                 "and pods in kube-system")
            if not cut.policy_created:
                return [failed]  # nothing was changed
            results = [failed]
        else:
            removed = cut.restore()
        return [*results, _restored(api, platform, cut, removed, waiting)]
    finally:
        api.close()


def disruptive_tenant(platform: Platform, requested: str | None) -> str:
    """The tenant to cut: `requested`, else the first complete one; ValueError naming the choice otherwise."""
    names = list(platform.tenants)
    if requested is None:
        if not names:
            raise ValueError("DISRUPTIVE=1: no tenant the outputs describe completely")
        return names[0]
    if requested not in platform.tenants:
        raise ValueError(f"TENANT={requested}: no such tenant in the stack outputs (tenants: "
                         f"{', '.join(names) or 'none'})")
    return requested

