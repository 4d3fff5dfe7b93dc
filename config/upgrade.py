"""Which Kubernetes versions a tenant may move to: the rules `TenantVersionProvider` (components/tenant/operations.py)
applies, in every preview, to the version the stack's state holds and the one the config asks for, and the kubelet
rule the validator applies to `nodeImage`.

Kamaji refuses on update of a TenantControlPlane (clastix/kamaji 26.8.2-edge internal/webhook/handlers/
tcp_version.go OnUpdate, patch versions ignored): a minor version newer than the Kubernetes its kubeadm library is
(internal/upgrade/kubeadm_version.go KubeadmVersion v1.36.0), a lower minor version, and a jump of more than one
minor version. We also refuse a lower patch version: Kubernetes supports no downgrade. A kubelet must never be
newer than its API server (kubernetes.io/releases/version-skew-policy, kubelet); older by up to three minor
versions is allowed, which is what lets the workers follow the control plane one at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .models import KIND_NODE_IMAGES, MAX_KUBERNETES_VERSION_EXCLUSIVE, MIN_KUBERNETES_VERSION, parse_version

Version = tuple[int, int, int]


def _text(version: Version) -> str:
    return "v{}.{}.{}".format(*version)


def next_versions(current: str, candidates: Iterable[str] | None = None) -> list[str]:
    """The versions a tenant at `current` may move to in one `pulumi up`: a newer patch of its minor or a version of
    the next minor, within what the pinned Kamaji accepts; from `candidates` (default: the published kindest/node
    images, what a container worker can run), newest first."""
    now = parse_version(current)
    found = []
    for candidate in KIND_NODE_IMAGES if candidates is None else candidates:
        version = parse_version(candidate)
        if not MIN_KUBERNETES_VERSION <= version < MAX_KUBERNETES_VERSION_EXCLUSIVE:
            continue
        if version[0] == now[0] and version > now and version[1] - now[1] <= 1:
            found.append(version)
    return [_text(v) for v in sorted(found, reverse=True)]


def _allowed(current: str, candidates: Iterable[str] | None) -> str:
    ahead = next_versions(current, candidates)
    stay = f"keep {current} (what the tenant runs)"
    return f"{stay}, or upgrade to {' or '.join(ahead)}" if ahead else f"{stay}; no newer version is known to work"


def version_change_problem(key: str, current: str, wanted: str, candidates: Iterable[str] | None = None) -> str | None:
    """Why the control plane of a tenant running `current` cannot be moved to `wanted`, naming the config `key` and
    the allowed next step; None when it can (or when nothing changes)."""
    now, new = parse_version(current), parse_version(wanted)
    if new == now:
        return None
    allowed = _allowed(current, candidates)
    if new < now:
        return (f"{key}: {wanted} is older than {current}, which the tenant runs; a control plane is never "
                f"downgraded (Kamaji refuses a lower minor version, and Kubernetes supports no downgrade). "
                f"Allowed: {allowed}")
    if new[0] != now[0] or new[1] - now[1] > 1:
        step = next_versions(current, candidates)
        first = next((v for v in step if parse_version(v)[1] == now[1] + 1), None)
        how = f"upgrade to {first} first, run `make up`, then to {wanted}" if first else f"allowed: {allowed}"
        return (f"{key}: {wanted} skips a minor version from {current}; Kamaji upgrades one minor version at a time "
                f"(its webhook refuses a non-sequential upgrade): {how}")
    if not MIN_KUBERNETES_VERSION <= new < MAX_KUBERNETES_VERSION_EXCLUSIVE:
        return (f"{key}: {wanted} is outside what the pinned Kamaji accepts (>= {_text(MIN_KUBERNETES_VERSION)} and "
                f"< {_text(MAX_KUBERNETES_VERSION_EXCLUSIVE)}). Allowed: {allowed}")
    return None


def kubelet_problems(control_plane_key: str, control_plane: str, kubelets: Mapping[str, str | None]) -> list[str]:
    """Each worker whose kubelet (its key -> version; None: unknown) would be newer than the control plane."""
    plane = parse_version(control_plane)
    problems = []
    for key, version in kubelets.items():
        if version is not None and parse_version(version)[:2] > plane[:2]:
            problems.append(f"{key}: runs kubelet {version}, newer than the control plane {control_plane} "
                            f"({control_plane_key}); a kubelet must not be newer than its API server. Use a node "
                            f"image of {control_plane} or older, or raise {control_plane_key} first")
    return problems


def image_version(image: str) -> str | None:
    """The Kubernetes version in a kindest/node image's tag (`kindest/node:v1.35.0@sha256:...`), None without one."""
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    try:
        parse_version(tag)
    except ValueError:
        return None
    return tag
