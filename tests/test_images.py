"""The inventory of images each node pulls (components/images.py) and `make bench`'s pull counts.

Image references are compared with the charts' own values (../shared/vendor) where the charts set them.
"""

from __future__ import annotations

import copy

import yaml

from bench.image_pulls import pull_counts, table
from components.images import HAMI_WEBHOOK_CERTGEN, PAUSE_IMAGE, node_images
from components.management.image_cache import MIRRORED_REGISTRIES, registries_of
from config import StackConfig, load_stack_config
from ops.graph import generated_config
from tests.support.mockrun import reference_stack


def dev():
    return load_stack_config(reference_stack())


def platform_images(config: StackConfig) -> set[str]:
    """Every image some node of the lab pulls."""
    return {image for images in node_images(config).values() for image in images}


def values(vendor_dir, chart):
    return yaml.safe_load((vendor_dir / chart / "values.yaml").read_text())


def test_chart_images_are_the_charts_own(vendor_dir):
    images = platform_images(dev())
    calico = values(vendor_dir, "calico")["tigeraOperator"]
    assert f"{calico['registry']}/{calico['image']}:{calico['version']}" in images
    hami = values(vendor_dir, "hami")
    mock = hami["mockDevicePlugin"]["image"]
    assert f"{mock['registry']}/{mock['repository']}:{mock['tag']}" in images
    # Except HAMi's certificate generator, which we replace (a personal Docker Hub namespace in the chart).
    certgen = hami["scheduler"]["patch"]["imageNew"]
    assert certgen["repository"].startswith("liangjw/")
    assert f"{certgen['registry']}/{certgen['repository']}:{certgen['tag']}" not in images
    assert HAMI_WEBHOOK_CERTGEN in images
    assert f"docker.io/projecthami/hami:{hami['global']['imageTag']}" in images
    metallb = values(vendor_dir, "metallb")
    metallb_version = yaml.safe_load((vendor_dir / "metallb/Chart.yaml").read_text())["appVersion"]
    for part in ("controller", "speaker"):
        assert f"{metallb[part]['image']['repository']}:{metallb_version}" in images
    cert_manager = values(vendor_dir, "cert-manager")
    prefix = f"{cert_manager['imageRegistry']}/{cert_manager['imageNamespace']}/"
    assert {i for i in images if i.startswith(prefix)} == {
        f"{prefix}cert-manager-{n}:v1.21.1" for n in ("controller", "webhook", "cainjector", "startupapicheck")}


def test_every_worker_pulls_its_daemonsets_and_the_management_node_the_control_planes():
    nodes = node_images(dev())
    management = nodes["gpu-tenancy-control-plane"]
    # Kamaji's konnectivity-server is v0.<tenant minor>.0 (internal/builders/controlplane/konnectivity_server.go).
    assert "registry.k8s.io/kas-network-proxy/proxy-server:v0.35.0" in management
    # kamaji-etcd v0.15.0 _helpers.tpl: the setup Job's kubectl tag is v<major>.<minor> of the cluster Helm talks to.
    assert "docker.io/clastix/kubectl:v1.35" in management
    # The node preloads its own version's kube-* images (v1.35.5): the v1.35.0 tenants' control planes pull theirs.
    assert [i for i in management if "/kube-apiserver:" in i] == ["registry.k8s.io/kube-apiserver:v1.35.0"]
    for worker in ("tenant-a-worker-0", "tenant-b-worker-0"):
        assert "registry.k8s.io/kas-network-proxy/proxy-agent:v0.35.0" in nodes[worker]
        assert PAUSE_IMAGE in nodes[worker]  # the smoke pod, pinned to the only worker
        assert any(i.startswith("registry.k8s.io/kube-proxy:v1.35.0@sha256:") for i in nodes[worker])


def test_a_tenant_on_another_version_pulls_its_control_plane_images_on_the_management_node():
    raw = copy.deepcopy(reference_stack())
    raw["tenants"][1]["kubernetesVersion"] = "v1.36.1"
    nodes = node_images(load_stack_config(raw))
    management = nodes["gpu-tenancy-control-plane"]
    assert "registry.k8s.io/kube-apiserver:v1.36.1" in management
    assert "registry.k8s.io/kas-network-proxy/proxy-server:v0.36.0" in management
    # kindest/node v1.36.1 preloads CoreDNS v1.14.2, the version Kamaji's kubeadm library renders.
    assert not any("coredns" in i for i in nodes["tenant-b-worker-0"])
    assert any("coredns" in i for i in nodes["tenant-a-worker-0"])


def test_only_mirrored_registries_are_pulled_from():
    images = platform_images(dev())
    assert images, "the inventory is empty"
    assert registries_of(sorted(images)) <= set(MIRRORED_REGISTRIES)


def test_with_the_mirror_upstream_pulls_do_not_grow_with_tenants():
    small, large = (pull_counts(load_stack_config(generated_config(n))) for n in (2, 32))
    assert large.without_mirror > 10 * small.without_mirror // 2
    assert small.first_up == large.first_up == len(platform_images(load_stack_config(generated_config(2))))
    assert small.again == large.again == 0  # what the first up pulled stays cached (TTL 0)
    # An empty cache (a cleared volume) pulls everything again, once.
    assert pull_counts(load_stack_config(generated_config(32)), cached=set()).again == large.first_up
    assert large.first_up_docker_hub < large.without_mirror_docker_hub


def test_the_bench_table_has_one_row_per_size():
    rows = [pull_counts(load_stack_config(generated_config(n))) for n in (2, 8)]
    text = table(rows)
    assert text.count("\n") == 3 and "| 2 | 3 |" in text and "| 8 | 9 |" in text
