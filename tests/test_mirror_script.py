"""components/worker/scripts/node-mirrors.sh, run with bash on a temporary node root (GPU_TENANCY_NODE_ROOT).

The files it writes are compared with containerd's documented mirror layout (containerd docs/hosts.md @v2.2.0,
"Setup a Local Mirror for Docker": `server` is the fallback, each `[host."<mirror>"]` is tried first with
capabilities pull and resolve) and parsed as TOML.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from components import shell as ns
from components.management.image_cache import hosts_toml, mirror_lines, stack_mirrors

NODE = "tenant-a-worker-0"
MIRRORS = stack_mirrors("gpu-tenancy")


def run(root: Path, mirrors: str, kind: str = ns.NODE_KIND_CONTAINER, path: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path or os.environ["PATH"], ns.NODE_NAME_ENV: NODE, ns.REGISTRY_MIRRORS_ENV: mirrors,
           ns.NODE_ROOT_ENV: str(root), ns.NODE_KIND_ENV: kind}
    # As dispatch.sh runs it on a node: `bash -c <text> <name>`, stdin from /dev/null.
    return subprocess.run([shutil.which("bash"), "-c", ns.script_text(ns.NODE_MIRRORS), ns.NODE_MIRRORS],
                          stdin=subprocess.DEVNULL, env=env,
                          capture_output=True, text=True, timeout=30)


def files(root: Path) -> dict[str, str]:
    base = root / "etc/containerd/certs.d"
    return {str(p.relative_to(base)): p.read_text() for p in sorted(base.rglob("*")) if p.is_file()}


def test_one_hosts_toml_per_registry_mirror_first_upstream_as_fallback(tmp_path):
    done = run(tmp_path, mirror_lines(MIRRORS))
    assert done.returncode == 0, done.stderr
    written = files(tmp_path)
    assert set(written) == {f"{registry}/hosts.toml" for registry in MIRRORS}
    docker = tomllib.loads(written["docker.io/hosts.toml"])
    # containerd's docker.io mirror example: the fallback is registry-1.docker.io (hosts.go maps docker.io there).
    assert docker == {"server": "https://registry-1.docker.io",
                      "host": {MIRRORS["docker.io"]: {"capabilities": ["pull", "resolve"]}}}
    assert tomllib.loads(written["registry.k8s.io/hosts.toml"])["server"] == "https://registry.k8s.io"
    # A plain-http mirror with any TLS option makes containerd try HTTPS first (hosts.go): none is set.
    assert all("skip_verify" not in text and "ca =" not in text for text in written.values())
    for registry, text in written.items():
        assert text == hosts_toml(registry.split("/")[0], MIRRORS[registry.split("/")[0]])
        assert oct((tmp_path / "etc/containerd/certs.d" / registry).stat().st_mode & 0o777) == "0o644"


def test_rerun_is_idempotent_and_a_smaller_list_removes_only_our_stale_files(tmp_path):
    assert run(tmp_path, mirror_lines(MIRRORS)).returncode == 0
    foreign = tmp_path / "etc/containerd/certs.d/nvcr.io/hosts.toml"
    foreign.parent.mkdir(parents=True)
    foreign.write_text('server = "https://nvcr.io"\n')
    first = files(tmp_path)
    assert run(tmp_path, mirror_lines(MIRRORS)).returncode == 0
    assert files(tmp_path) == first
    smaller = {"docker.io": MIRRORS["docker.io"]}
    assert run(tmp_path, mirror_lines(smaller)).returncode == 0
    assert set(files(tmp_path)) == {"docker.io/hosts.toml", "nvcr.io/hosts.toml"}
    assert not (tmp_path / "etc/containerd/certs.d/quay.io").exists()


def test_the_delete_action_removes_every_file_of_ours_and_nothing_else(tmp_path):
    assert run(tmp_path, mirror_lines(MIRRORS)).returncode == 0
    foreign = tmp_path / "etc/containerd/certs.d/nvcr.io/hosts.toml"
    foreign.parent.mkdir(parents=True)
    foreign.write_text('server = "https://nvcr.io"\n')
    done = run(tmp_path, "")
    assert done.returncode == 0, done.stderr
    assert files(tmp_path) == {"nvcr.io/hosts.toml": 'server = "https://nvcr.io"\n'}


def test_a_foreign_hosts_toml_is_refused_not_overwritten(tmp_path):
    own = tmp_path / "etc/containerd/certs.d/docker.io/hosts.toml"
    own.parent.mkdir(parents=True)
    own.write_text('server = "https://registry-1.docker.io"\n[host."https://corp-mirror"]\n')
    done = run(tmp_path, mirror_lines(MIRRORS))
    assert done.returncode == 1
    assert "was not written by gpu-tenancy" in done.stderr and "management.registryMirrors" in done.stderr
    assert own.read_text().startswith('server = "https://registry-1.docker.io"\n[host."https://corp-mirror"]')


@pytest.mark.parametrize("line", [
    'docker.io https://registry-1.docker.io http://m:5000"\nx',
    "docker.io https://registry-1.docker.io",
    "../etc https://registry-1.docker.io http://m:5000",
    "docker.io https://registry-1.docker.io http://m:5000 extra",
    "docker.io ftp://registry-1.docker.io http://m:5000",
])
def test_malformed_entries_are_refused_before_any_file_is_written(tmp_path, line):
    done = run(tmp_path, line + "\n")
    assert done.returncode == 1
    assert "malformed mirror entry" in done.stderr
    assert not (tmp_path / "etc").exists() or files(tmp_path) == {}


def _containerd_stub(tmp_path: Path, dump: str) -> str:
    """A PATH with a `containerd` whose `config dump` prints `dump` (and the host's tools)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "containerd"
    stub.write_text(f"#!/bin/bash\n[[ \"$1 $2\" == 'config dump' ]] && cat <<'EOF'\n{dump}\nEOF\n")
    stub.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


# What `containerd config dump` prints for the registry section: 1.x's generated default, and 2.x's default
# (containerd docs/hosts.md; internal/cri/config/config_unix.go).
CONTAINERD_1 = '[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = ""'
CONTAINERD_2 = '[plugins."io.containerd.cri.v1.images".registry]\n  config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"'


def test_a_server_whose_containerd_ignores_certs_d_is_refused_with_the_change_to_make(tmp_path):
    done = run(tmp_path / "root", mirror_lines(MIRRORS), ns.NODE_KIND_MACHINE, _containerd_stub(tmp_path, CONTAINERD_1))
    assert done.returncode == 1
    assert 'config_path = "/etc/containerd/certs.d"' in done.stderr and "restart containerd" in done.stderr
    assert not (tmp_path / "root" / "etc").exists()


def test_a_server_whose_containerd_reads_certs_d_gets_the_files(tmp_path):
    done = run(tmp_path / "root", mirror_lines(MIRRORS), ns.NODE_KIND_MACHINE, _containerd_stub(tmp_path, CONTAINERD_2))
    assert done.returncode == 0, done.stderr
    assert set(files(tmp_path / "root")) == {f"{registry}/hosts.toml" for registry in MIRRORS}


def test_removing_the_files_needs_no_containerd_check(tmp_path):
    done = run(tmp_path / "root", "", ns.NODE_KIND_MACHINE, _containerd_stub(tmp_path, CONTAINERD_1))
    assert done.returncode == 0, done.stderr
