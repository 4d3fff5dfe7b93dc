"""Container images this program sets itself, pinned by digest next to their tags where the digest is known.

A digest pins the bytes: a re-pushed tag cannot change what runs. Sources (multi-arch index digests):
- kindest/node: kind's own `pkg/apis/config/defaults/image.go` (v0.31.0, v0.32.0) and kind v0.32.0's release list
  (config.models.KIND_NODE_IMAGES).
- registry.k8s.io images: the Kubernetes image promoter manifest (kubernetes/k8s.io
  registry.k8s.io/images/k8s-staging-kubernetes/images.yaml), which records every promoted tag's digest.
- Not pinned, because no digest could be confirmed from the project's own records: clastix/kamaji:26.8.2-edge
  (published by Kamaji's CI only) and projecthami/mock-device-plugin:1.0.1. Pin them here once read from the
  registry (`crane digest <image>`), and other tenant versions' kube-scheduler/kube-proxy likewise.
"""

from __future__ import annotations

PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1@sha256:278fb9dbcca9518083ad1e11276933a2e96f23de604a3a08cc3c80002767d24c"

# (component, Kubernetes version) -> index digest.
KUBERNETES_IMAGE_DIGESTS = {
    ("kube-scheduler", "v1.35.0"): "sha256:0ab622491a82532e01876d55e365c08c5bac01bcd5444a8ed58c1127ab47819f",
    ("kube-proxy", "v1.35.0"): "sha256:c818ca1eff765e35348b77e484da915175cdf483f298e1f9885ed706fcbcb34c",
}


def kubernetes_image_tag(component: str, version: str) -> str:
    """`<version>@sha256:...` when the digest is known, else `<version>` (a tag, as a chart's image.tag expects)."""
    digest = KUBERNETES_IMAGE_DIGESTS.get((component, version))
    return f"{version}@{digest}" if digest else version
