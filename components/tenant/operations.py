"""The tenant layer's operations, from the Pulumi host (dynamic resources, see components/host_operations.py):
waiting for a tenant's Konnectivity agents (KonnectivityReady), and the version of its control plane kept in the
state, with the changes to it refused in every preview that cannot be made (TenantVersion, which calls no API)."""

from __future__ import annotations

from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, UpdateResult

from components.host_operations import HostOperationProvider, declare, inputs_changed, poll
from config import upgrade

KONNECTIVITY_TIMEOUT = 300.0


class KonnectivityReadyProvider(HostOperationProvider):
    """Waits until Kamaji's konnectivity-agent DaemonSet has a ready pod on every joined node: every call from
    the tenant API server into its nodes (HAMi's admission webhook included) goes through these agents."""

    def _wait(self, props: dict[str, Any]) -> None:
        expected = int(props["nodes"])
        with self._api(props["kubeconfig"]) as tenant:
            def ready() -> str | None:
                agents = tenant.find("DaemonSet", "konnectivity-agent", "kube-system")
                if agents is None:
                    return "daemonset/konnectivity-agent does not exist (is spec.addons.konnectivity set?)"
                have = int((agents.get("status") or {}).get("numberReady") or 0)
                return None if have >= expected else f"{have} of {expected} konnectivity agents ready"

            try:
                poll(ready, self.clock, timeout=KONNECTIVITY_TIMEOUT)
            except TimeoutError as error:
                raise RuntimeError(
                    f"{error}. The agent pods need the CNI; check: kubectl -n kube-system get ds,pods "
                    "-l k8s-app=konnectivity-agent (in the tenant)") from None

    def create(self, props: dict[str, Any]) -> CreateResult:
        self._wait(props)
        return CreateResult(id_="konnectivity-agent", outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=inputs_changed(olds, news))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self._wait(news)
        return UpdateResult(outs=dict(news))


class TenantVersionProvider(HostOperationProvider):
    """The Kubernetes version of a tenant's control plane, as the stack last deployed it.

    Its diff sees the version in the state (olds) and the one the config asks for (news): the engine diffs every
    resource that has a state in a preview as well as in an update (pulumi/pulumi v3.259.0
    pkg/resource/deploy/step_generator.go generateSteps -> sg.diff -> prov.Diff), and the dynamic provider host
    hands both to this diff (sdk/python/lib/pulumi/dynamic/__main__.py Diff). A change `config.upgrade`
    refuses is raised there, so the preview fails with the config key and the allowed next step, and the tenant's
    control plane and workers, which depend on this resource, are never reached. No live cluster is asked."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=props["tenant"], outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        current, wanted = olds.get("control_plane"), news.get("control_plane")
        if isinstance(current, str) and isinstance(wanted, str):
            problem = upgrade.version_change_problem(str(news.get("version_key")), current, wanted)
            if problem is not None:
                raise RuntimeError(problem)
        # The key moves when tenants are reordered; only the version is a change.
        return DiffResult(changes=current != wanted)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=dict(news))


# --------------------------------------------------------------------------- #
# The resources the program declares
# --------------------------------------------------------------------------- #

KonnectivityReady = declare(KonnectivityReadyProvider, "KonnectivityReady")
TenantVersion = declare(TenantVersionProvider, "TenantVersion")

