"""Container images this program sets itself, pinned by digest next to their tags where the digest is known.

A digest pins the bytes: a re-pushed tag cannot change what runs. Sources (multi-arch index digests):
- kindest/node: kind's own `pkg/apis/config/defaults/image.go` (v0.31.0, v0.32.0) and kind v0.32.0's release list
  (config.models.KIND_NODE_IMAGES).
- registry.k8s.io images: the Kubernetes image promoter manifest (kubernetes/k8s.io
  registry.k8s.io/images/k8s-staging-kubernetes/images.yaml), which records every promoted tag's digest.
- Chart images replaced or pinned through chart values: HAMi's certificate generator and kamaji-etcd's cfssl (below).
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


# --------------------------------------------------------------------------- #
# What each node pulls: the inventory `make bench` counts and the image mirror's tests check
# --------------------------------------------------------------------------- #
# Every image a node of the platform runs and does not already hold, for the pinned versions, with where its
# reference comes from (chart values or controller code at the pinned tag). kindest/node preloads the
# kube-* images of its version, etcd, CoreDNS of its version, pause:3.10 (the sandbox image), kindnetd and the
# local-path images (kind v0.31.0 pkg/build/nodeimage/buildcontext.go); a reference pinned by digest is looked up
# by that digest, which the preloaded copies (imported from release tarballs) do not carry, so it is pulled.

# Helm charts' images (registry/repository:tag), by component.
CERT_MANAGER_IMAGES = ("controller", "webhook", "cainjector", "startupapicheck")  # quay.io/jetstack/cert-manager-*
# charts/tigera-operator values.yaml tigeraOperator.version, per Calico release.
TIGERA_OPERATOR_VERSIONS = {"v3.32.1": "v1.42.3"}
# kamaji-etcd v0.15.0 (the subchart of Kamaji 26.8.2-edge): the etcd StatefulSet (appVersion 3.5.17) and its
# post-install setup Job (clastix/kubectl:v<management minor>, etcd v3.5.6); cfssl only where it signs its own
# certificates (a dedicated etcd; pullPolicy Always via the `latest` tag).
KAMAJI_ETCD_IMAGES = ("quay.io/coreos/etcd:v3.5.17", "quay.io/coreos/etcd:v3.5.6")
KAMAJI_ETCD_KUBECTL = "docker.io/clastix/kubectl:v{minor}"
# The chart's `cfssl/cfssl:latest` (jobs.cfssl.tag "" -> "latest", etcd_job_preinstall_1.yaml) generates a dedicated
# etcd's CA and keys and is pulled Always. Pinned instead: v1.6.5 at a digest recorded in a public Dockerfile
# (`FROM cfssl/cfssl:v1.6.5@sha256:c901...`, found by code search; the cfssl project publishes no digests). A digest
# only resolves in the repository that holds it, docker.io/cfssl/cfssl, so a wrong one fails the pull and cannot run
# anyone else's image. Re-pin with `crane digest cfssl/cfssl:<tag>`.
CFSSL_REPOSITORY = "docker.io/cfssl/cfssl"
CFSSL_TAG = "v1.6.5@sha256:c9018c2ddf0b1f8dbef166057cc751d1becd5c3b0b7014cb9fe06972f725106f"
DEDICATED_ETCD_IMAGES = (f"{CFSSL_REPOSITORY}:{CFSSL_TAG}",)
# Kamaji renders CoreDNS with the kubeadm library it is built with (go.mod k8s.io/kubernetes v1.36.3), not the
# tenant's version: kubeadm 1.36's CoreDNS, two replicas.
TENANT_COREDNS = ("registry.k8s.io/coredns/coredns:v1.14.2", 2)
# HAMi v2.10.0's certificate hook Jobs default to `liangjw/kube-webhook-certgen:v1.1.1` (values.yaml
# scheduler.patch.imageNew), a personal Docker Hub namespace, whose Job may update every MutatingWebhookConfiguration
# (templates/scheduler/job-patch/clusterrole.yaml). Replaced with the Kubernetes project's own build, which takes the
# same arguments (kubernetes/ingress-nginx controller-v1.15.1 images/kube-webhook-certgen/rootfs/cmd/create.go and
# patch.go: --host, --namespace, --secret-name, --cert-name, --key-name; --webhook-name, --patch-validating),
# at the digest ingress-nginx's own manifest pins (deploy/static/provider/cloud/deploy.yaml at controller-v1.15.1).
HAMI_CERTGEN_REGISTRY = "registry.k8s.io"
HAMI_CERTGEN_REPOSITORY = "ingress-nginx/kube-webhook-certgen"
HAMI_CERTGEN_TAG = "v1.6.9@sha256:01038e7de14b78d702d2849c3aad72fd25903c4765af63cf16aa3398f5d5f2dd"
HAMI_WEBHOOK_CERTGEN = f"{HAMI_CERTGEN_REGISTRY}/{HAMI_CERTGEN_REPOSITORY}:{HAMI_CERTGEN_TAG}"
# What kindest/node preloads besides its version's kube-* images (kubeadm's CoreDNS for that version).
PRELOADED_COREDNS = {"v1.35": "registry.k8s.io/coredns/coredns:v1.13.1",
                     "v1.36": "registry.k8s.io/coredns/coredns:v1.14.2"}


def _major(version: str) -> int:
    return int(version.lstrip("v").split(".")[0])


def _minor(version: str) -> int:
    return int(version.lstrip("v").split(".")[1])


def image_tag(reference: str) -> str:
    """The tag of an image reference (`registry:5000/repo:tag@sha256:...` -> `tag`)."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else "latest"


def _kubernetes_image(component: str, version: str) -> str:
    return f"registry.k8s.io/{component}:{kubernetes_image_tag(component, version)}"


def management_node_images(versions, management_version: str, tenants) -> list[str]:
    """Images the kind management node pulls: cert-manager, MetalLB, Kamaji and its etcd, and each tenant's
    control-plane pod (Kamaji: kube-* at the tenant's version; konnectivity-server v0.<minor>.0)."""
    images = [f"quay.io/jetstack/cert-manager-{name}:{versions.cert_manager}" for name in CERT_MANAGER_IMAGES]
    images += [f"quay.io/metallb/{name}:v{versions.metallb}" for name in ("controller", "speaker")]
    images += [f"docker.io/clastix/kamaji:{versions.kamaji_image}", *KAMAJI_ETCD_IMAGES,
               KAMAJI_ETCD_KUBECTL.format(minor=f"{_major(management_version)}.{_minor(management_version)}")]
    for tenant in tenants:
        version = tenant.kubernetes_version
        if version != management_version:  # the node preloads its own version's kube-* images
            images += [f"registry.k8s.io/{c}:{version}" for c in
                       ("kube-apiserver", "kube-controller-manager", "kube-scheduler")]
        images.append(f"registry.k8s.io/kas-network-proxy/proxy-server:v0.{_minor(version)}.0")
        if tenant.data_store.dedicated:
            images += list(DEDICATED_ETCD_IMAGES)
    return list(dict.fromkeys(images))


def worker_images(versions, version: str, gpu_mode: str) -> list[str]:
    """Images every worker of a tenant pulls (DaemonSets): kube-proxy, the Konnectivity agent, calico-node's three
    images, and the device plugin."""
    calico = versions.calico
    images = [_kubernetes_image("kube-proxy", version),
              f"registry.k8s.io/kas-network-proxy/proxy-agent:v0.{_minor(version)}.0",
              *(f"quay.io/calico/{name}:{calico}" for name in ("node", "cni", "pod2daemon-flexvol"))]
    images.append(f"docker.io/projecthami/mock-device-plugin:{versions.mock_device_plugin}" if gpu_mode == "mock"
                  else f"docker.io/projecthami/hami:v{versions.hami}")
    return images


def tenant_replica_images(versions, version: str, workers: int) -> list[str]:
    """Images of a tenant's Deployments and Jobs, one entry per pod (each lands on one worker)."""
    typha = 1 if workers <= 2 else 2 if workers <= 4 else 3  # tigera/operator pkg/common/autoscale.go
    coredns, coredns_replicas = TENANT_COREDNS
    images = [f"quay.io/tigera/operator:{TIGERA_OPERATOR_VERSIONS.get(versions.calico, 'unknown')}"]
    images += [f"quay.io/calico/typha:{versions.calico}"] * typha
    images += [f"quay.io/calico/kube-controllers:{versions.calico}"]
    preloaded = PRELOADED_COREDNS.get(f"v1.{_minor(version)}")
    images += [coredns] * coredns_replicas if coredns != preloaded else []
    images += [f"docker.io/projecthami/hami:v{versions.hami}", _kubernetes_image("kube-scheduler", version)]
    images += [HAMI_WEBHOOK_CERTGEN] * 2
    images.append(PAUSE_IMAGE)
    return images


def node_images(config) -> dict[str, list[str]]:
    """Node name -> the images its containerd pulls, for every node of the kind lab (the kind node and the
    container workers; SSH workers are outside the lab). A tenant's per-pod images are placed round-robin over its
    workers, an estimate of where the scheduler puts them."""
    from naming import node_name

    nodes: dict[str, list[str]] = {}
    if not config.management.adopts_existing_cluster:
        management_version = image_tag(config.management.node_image)
        nodes[f"{config.management.cluster_name}-control-plane"] = management_node_images(
            config.versions, management_version, config.tenants)
    for tenant in config.tenants:
        workers = [w for w in tenant.workers if w.ssh is None]
        if not workers:
            continue
        names = [node_name(tenant.name, w.name) for w in workers]
        for name in names:
            nodes[name] = worker_images(config.versions, tenant.kubernetes_version, config.gpu_mode)
        for index, image in enumerate(tenant_replica_images(config.versions, tenant.kubernetes_version, len(names))):
            pulls = nodes[names[index % len(names)]]
            if image not in pulls:
                pulls.append(image)
    return nodes

