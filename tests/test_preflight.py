"""Preflight checks against faked host probes (no Docker, no network)."""

import sys
import textwrap

import pytest
import yaml

from ops import preflight
from ops.preflight import (
    DOCKER_INFO,
    KIND_NETWORK,
    Probes,
    check_stack_config,
    check_stack_secrets,
    needs_local_lab,
    run_checks,
)
from tests.support.mockrun import REFERENCE_STACK

CONTEXT_INSPECT = ("docker", "context", "inspect", "--format", "{{.Endpoints.docker.Host}}")
DEFAULT_SOCKET = "unix:///var/run/docker.sock"

HEALTHY_FILES = {
    "/proc/sys/fs/inotify/max_user_watches": "524288\n",
    "/proc/sys/fs/inotify/max_user_instances": "8192\n",
}
# `docker info` of Docker Engine 28 on Ubuntu 24.04 (rootful, overlay2 on ext4).
DOCKER_INFO_LINE = ('28.2.2\tUbuntu 24.04.2 LTS\t["name=apparmor","name=seccomp,profile=builtin","name=cgroupns"]\t'
                    'overlay2\t[["Backing Filesystem","extfs"],["Supports d_type","true"],["Using metacopy","false"]]\n')
# What a healthy Linux host with Docker Engine, kind v0.31.0 and pulumi v3.272.0 answers.
HEALTHY_ANSWERS = {
    tuple(DOCKER_INFO): (0, DOCKER_INFO_LINE, ""),
    CONTEXT_INSPECT: (0, DEFAULT_SOCKET + "\n", ""),
    tuple(KIND_NETWORK): (0, '[{"Subnet":"fc00:f853:ccd:e793::/64"},{"Subnet":"172.18.0.0/16","Gateway":"172.18.0.1"}]\n', ""),
    ("kind", "version"): (0, "kind v0.31.0 go1.25.5 linux/amd64\n", ""),
    ("pulumi", "version"): (0, "v3.272.0\n", ""),
    tuple(preflight.DOCKER_CGROUP): (0, "2\n", ""),
}
NO_SUCH_NETWORK = (1, "", "Error response from daemon: network kind not found\n")


def fake(answers=None, files=None, tools=("docker", "kind", "pulumi"), env=None, system="Linux",
         python=(3, 11, 7), links=None):
    answers = {**HEALTHY_ANSWERS, **(answers or {})}
    files = {**HEALTHY_FILES, **(files or {})}
    env = env or {}
    calls = []

    def run(argv):
        calls.append(tuple(argv))
        return answers.get(tuple(argv), (127, "", f"unexpected command {list(argv)}"))

    probes = Probes(
        which=lambda name: f"/usr/local/bin/{name}" if name in tools else None,
        run=run,
        read=files.get,
        env=env.get,
        system=lambda: system,
        python_version=lambda: python,
        realpath=lambda path: (links or {}).get(path, path),
    )
    return probes, calls


def by_name(results):
    return {r.name: r for r in results}


def check(name, **kwargs):
    return by_name(run_checks(fake(**kwargs)[0]))[name]


# --- the whole run -------------------------------------------------------------------------------------------------

def test_healthy_host_passes(capsys):
    probes, calls = fake()
    assert preflight.main([], probes) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert out.rstrip().endswith("preflight passed")
    assert set(calls) == set(HEALTHY_ANSWERS)
    assert [r.name for r in run_checks(probes)] == [
        "Linux host", "Python >= 3.10", "Docker daemon answers", "Docker Engine, not Docker Desktop",
        "rootful Docker (not rootless)", "no user-namespace remapping in dockerd",
        "Docker storage the worker kubelets can use", "one Docker daemon for kind and Pulumi", "kind network subnet", "kind >= v0.31.0", "pulumi >= v3.260.0",
        "fs.inotify.max_user_watches", "fs.inotify.max_user_instances", "cgroup v2 on the Docker host",
    ]


def test_render_format():
    text = preflight.render([
        preflight.CheckResult("a", True, "fine"),
        preflight.CheckResult("b", False, "broken", "do this"),
    ])
    assert text.splitlines() == [
        "[ok  ] a: fine",
        "[FAIL] b: broken",
        "       fix: do this",
        "preflight failed: 1 check(s) above need fixing",
    ]


def test_render_marks_skipped_and_informational_results_and_counts_neither():
    text = preflight.render([
        preflight.CheckResult("a", False, "broken", "do this"),
        preflight.skipped("b", "a"),
        preflight.CheckResult("c", True, "later", "not shown", state="info"),
    ])
    assert text.splitlines() == [
        "[FAIL] a: broken",
        "       fix: do this",
        "[skip] b: not checked: needs a, which failed above",
        "[info] c: later",
        "preflight failed: 1 check(s) above need fixing",
    ]


def test_swap_and_conntrack_are_no_longer_checked():
    probes, _ = fake(files={"/proc/swaps": "Filename Type Size Used Priority\n/swap.img file 2097148 0 -2\n",
                            "/proc/sys/net/netfilter/nf_conntrack_max": "65536\n"})
    read = []
    probes = Probes(**{**probes.__dict__, "read": lambda path: read.append(path) or HEALTHY_FILES.get(path)})
    names = [r.name for r in run_checks(probes)]
    assert all(r.ok for r in run_checks(probes))
    assert not any("swap" in name or "conntrack" in name for name in names)
    assert "/proc/swaps" not in read and not any("conntrack" in path for path in read)
    assert "failSwapOn: false" in preflight.__doc__ and "conntrack.maxPerCore: 0" in preflight.__doc__


def test_every_failure_has_a_fix():
    probes, _ = fake(
        answers={
            tuple(DOCKER_INFO): (0, "28.2.2\tDocker Desktop\n", ""),
            CONTEXT_INSPECT: (0, "unix:///home/me/.docker/desktop/docker.sock\n", ""),
            tuple(KIND_NETWORK): (0, '[{"Subnet":"172.18.0.0/28"}]', ""),
            ("kind", "version"): (0, "kind v0.20.0 go1.20.4 linux/amd64\n", ""),
            ("pulumi", "version"): (0, "v3.200.0\n", ""),
        },
        files={path: None for path in HEALTHY_FILES},
        python=(3, 9, 18),
    )
    results = run_checks(probes)
    assert [r.name for r in results if r.ok] == [
        "Linux host", "Docker daemon answers", "rootful Docker (not rootless)", "no user-namespace remapping in dockerd",
        "Docker storage the worker kubelets can use", "cgroup v2 on the Docker host"]
    assert all(r.fix for r in results if not r.ok)


# --- run: stdout and stderr apart ----------------------------------------------------------------------------------

def test_run_keeps_stdout_and_stderr_apart():
    code, stdout, stderr = preflight._run(
        [sys.executable, "-c", "import sys; print('v3.272.0'); print('warning: update available', file=sys.stderr)"]
    )
    assert (code, stdout, stderr) == (0, "v3.272.0\n", "warning: update available\n")


def test_run_reports_a_missing_program():
    code, stdout, stderr = preflight._run(["/nonexistent/program"])
    assert code == 127 and stdout == "" and stderr


# --- Linux host ----------------------------------------------------------------------------------------------------

def test_linux_host_passes():
    assert check("Linux host").ok


def test_macos_fails_and_skips_the_linux_only_checks():
    probes, calls = fake(system="Darwin", tools=())
    results = run_checks(probes)
    assert [r.name for r in results] == ["Linux host", "Python >= 3.10", "pulumi >= v3.260.0"]
    host = results[0]
    assert not host.ok
    assert "Darwin" in host.detail and "`kind` Docker bridge" in host.detail
    assert "Linux machine" in host.fix and "docs.docker.com/engine/install" in host.fix
    assert calls == []


# --- Python --------------------------------------------------------------------------------------------------------

def test_python_310_passes():
    result = check("Python >= 3.10", python=(3, 10, 0))
    assert result.ok and result.detail == "3.10.0"


def test_python_39_fails_with_a_rebuilt_venv():
    result = check("Python >= 3.10", python=(3, 9, 18))
    assert not result.ok and "3.9.18" in result.detail
    assert result.fix.endswith("rm -rf .venv && make up PYTHON=python3.12")


# --- Docker daemon -------------------------------------------------------------------------------------------------

def test_docker_daemon_answers_with_its_version():
    assert check("Docker daemon answers").detail == "server 28.2.2"


def test_docker_warning_on_stderr_is_not_the_server_version():
    result = check("Docker daemon answers", answers={tuple(DOCKER_INFO): (
        0, "28.2.2\tUbuntu 24.04.2 LTS\n", "WARNING: bridge-nf-call-iptables is disabled\n")})
    assert result.ok and result.detail == "server 28.2.2"


def test_docker_daemon_down_says_how_to_start_it(capsys):
    answers = {tuple(DOCKER_INFO): (1, "\t\n", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                                                "Is the docker daemon running?\n")}
    probes, calls = fake(answers=answers)
    assert preflight.main([], probes) == 1
    result = by_name(run_checks(probes))["Docker daemon answers"]
    assert not result.ok and "Cannot connect" in result.detail
    assert result.fix == "sudo systemctl start docker"
    out = capsys.readouterr().out
    assert "fix: sudo systemctl start docker" in out
    # Nothing else asks the daemon once it does not answer, and what depends on it is a skip, not an "ok" printed
    # under the failure.
    assert tuple(KIND_NETWORK) not in calls and CONTEXT_INSPECT not in calls
    assert "[skip] one Docker daemon for kind and Pulumi: not checked: needs the Docker daemon, which failed above" in out
    assert "[skip] Docker Engine, not Docker Desktop: not checked" in out and "[skip] kind network subnet" in out
    assert out.rstrip().endswith("preflight failed: 1 check(s) above need fixing")


def test_docker_zero_exit_with_the_error_on_stderr_fails():
    result = check("Docker daemon answers", answers={tuple(DOCKER_INFO): (
        0, "", "error during connect: Get \"http://%2Fvar%2Frun%2Fdocker.sock/v1.51/info\": EOF\n")})
    assert not result.ok and "error during connect" in result.detail


def test_docker_permission_denied_suggests_the_group():
    result = check("Docker daemon answers", answers={tuple(DOCKER_INFO): (
        1, "", "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock\n")})
    assert not result.ok
    assert result.fix == 'sudo usermod -aG docker "$USER" && newgrp docker'


def test_missing_docker_cli():
    probes, calls = fake(tools=("kind", "pulumi"))
    results = by_name(run_checks(probes))
    result = results["Docker daemon answers"]
    assert not result.ok and "not on PATH" in result.detail
    assert "docs.docker.com/engine/install" in result.fix
    assert not any(argv[0] == "docker" for argv in calls)
    assert results["one Docker daemon for kind and Pulumi"].state == "skip"
    assert [r.name for r in results.values() if r.state == "skip"] == [*preflight.NEEDS_THE_DAEMON, preflight.CGROUP_V2]


# --- Docker Engine, not Docker Desktop -----------------------------------------------------------------------------

def test_docker_engine_passes():
    assert check("Docker Engine, not Docker Desktop").detail == "Ubuntu 24.04.2 LTS"


def test_docker_desktop_fails():
    result = check("Docker Engine, not Docker Desktop",
                   answers={tuple(DOCKER_INFO): (0, "28.3.2\tDocker Desktop\n", "")})
    assert not result.ok and "VM" in result.detail
    assert "docker context use default" in result.fix and "docs.docker.com/engine/install" in result.fix


# --- rootless, userns-remap, storage: each hides the kind bridge or breaks the worker containers ------------------

def docker_info(security='["name=seccomp,profile=builtin"]', driver="overlay2",
                status='[["Backing Filesystem","extfs"]]'):
    return {tuple(DOCKER_INFO): (0, f"29.1.0\tUbuntu 24.04.3 LTS\t{security}\t{driver}\t{status}\n", "")}


def test_a_healthy_daemon_reports_its_storage():
    assert check("Docker storage the worker kubelets can use").detail == "overlay2 on extfs"
    assert check("rootful Docker (not rootless)").ok and check("no user-namespace remapping in dockerd").ok


def test_rootless_docker_fails_because_the_kind_bridge_is_unreachable():
    result = check("rootful Docker (not rootless)",
                   answers=docker_info('["name=seccomp,profile=builtin","name=rootless","name=cgroupns"]'))
    assert not result.ok and "RootlessKit's network namespace" in result.detail and "MetalLB" in result.detail
    assert "sudo systemctl enable --now docker" in result.fix and "docker context use default" in result.fix


def test_a_rootless_name_inside_another_option_is_not_rootless():
    assert check("rootful Docker (not rootless)", answers=docker_info('["name=seccomp,profile=/x/name=rootlessish"]')).ok


def test_userns_remap_fails_because_the_workers_are_privileged():
    result = check("no user-namespace remapping in dockerd",
                   answers=docker_info('["name=apparmor","name=seccomp,profile=builtin","name=userns"]'))
    assert not result.ok and "privileged mode is incompatible with user namespaces" in result.detail
    assert result.fix.startswith('remove "userns-remap" from /etc/docker/daemon.json')


@pytest.mark.parametrize(("driver", "status", "shown"), [
    ("btrfs", '[["Build Version","Btrfs v6.6.3"]]', "btrfs"),
    ("zfs", "[]", "zfs"),
    ("devicemapper", "null", "devicemapper"),
    ("overlay2", '[["Backing Filesystem","btrfs"]]', "overlay2 on btrfs"),
    ("overlay2", '[["Backing Filesystem","zfs"]]', "overlay2 on zfs"),
])


def test_storage_where_kind_binds_dev_mapper_fails(driver, status, shown):
    result = check("Docker storage the worker kubelets can use", answers=docker_info(driver=driver, status=status))
    assert not result.ok and result.detail.startswith(f"storage {shown}: kind binds /dev/mapper")
    assert "data-root" in result.fix and "ext4" in result.fix


def test_xfs_backing_is_reported_not_refused():
    result = check("Docker storage the worker kubelets can use",
                   answers=docker_info(status='[["Backing Filesystem","xfs"]]'))
    assert result.ok and result.state == "info" and "failed to get rootfs info" in result.detail


def test_the_containerd_image_store_passes():
    # Docker 29's default store: driver overlayfs, no Backing Filesystem entry.
    result = check("Docker storage the worker kubelets can use",
                   answers=docker_info(driver="overlayfs", status='[["driver-type","io.containerd.snapshotter.v1"]]'))
    assert result.ok and result.state == "" and result.detail == "overlayfs"


# --- one Docker daemon for kind and Pulumi -------------------------------------------------------------------------

ONE_DOCKER = "one Docker daemon for kind and Pulumi"


def inspect(context, endpoint):
    return {("docker", "context", "inspect", context, "--format", "{{.Endpoints.docker.Host}}"): (0, endpoint + "\n", "")}


def test_default_socket_for_both_passes():
    result = check(ONE_DOCKER)
    assert result.ok and result.detail == f"both use {DEFAULT_SOCKET}"


def test_cli_on_another_context_than_the_providers_default_fails():
    rootless = "unix:///run/user/1000/docker.sock"
    result = check(ONE_DOCKER, answers={CONTEXT_INSPECT: (0, rootless + "\n", "")})
    assert not result.ok
    assert rootless in result.detail and DEFAULT_SOCKET in result.detail
    assert result.fix == f"export DOCKER_HOST={rootless}"


def test_docker_host_is_used_by_both():
    host = "tcp://10.0.0.5:2375"
    result = check(ONE_DOCKER, env={"DOCKER_HOST": host}, answers={CONTEXT_INSPECT: (
        0, host + "\n", "Warning: DOCKER_HOST environment variable overrides the active context.\n")})
    assert result.ok and result.detail == f"both use {host}"


def test_docker_context_is_used_by_both():
    remote = "ssh://me@gpu-box"
    result = check(ONE_DOCKER, env={"DOCKER_CONTEXT": "box"},
                   answers={CONTEXT_INSPECT: (0, remote + "\n", ""), **inspect("box", remote)})
    assert result.ok


def test_docker_context_wins_over_docker_host_in_the_provider():
    # The CLI takes DOCKER_HOST first; pulumi-docker takes its context (DOCKER_CONTEXT) first.
    host, remote = "tcp://10.0.0.5:2375", "ssh://me@gpu-box"
    result = check(ONE_DOCKER, env={"DOCKER_HOST": host, "DOCKER_CONTEXT": "box"},
                   answers={CONTEXT_INSPECT: (0, host + "\n", ""), **inspect("box", remote)})
    assert not result.ok and remote in result.detail and "DOCKER_CONTEXT=box" in result.detail
    assert result.fix == f"unset DOCKER_CONTEXT && export DOCKER_HOST={host}"


def test_docker_context_default_cannot_be_resolved_by_the_provider():
    result = check(ONE_DOCKER, env={"DOCKER_CONTEXT": "default"})
    assert not result.ok and "`default`" in result.detail
    assert result.fix == f"unset DOCKER_CONTEXT && export DOCKER_HOST={DEFAULT_SOCKET}"


def test_unknown_docker_context_fails():
    result = check(ONE_DOCKER, env={"DOCKER_CONTEXT": "gone"}, answers={CONTEXT_INSPECT: (
        1, "", "context \"gone\": context not found: open /home/me/.docker/contexts/meta/x/meta.json: no such file\n")})
    assert not result.ok and "context not found" in result.detail
    assert result.fix.startswith("unset DOCKER_CONTEXT")


def test_cli_endpoint_on_stderr_only_fails():
    result = check(ONE_DOCKER, answers={CONTEXT_INSPECT: (0, "", "unix:///var/run/docker.sock\n")})
    assert not result.ok and result.fix == "docker context use default"


def test_symlinked_socket_paths_are_the_same_daemon():
    result = check(ONE_DOCKER, answers={CONTEXT_INSPECT: (0, "unix:///run/docker.sock\n", "")},
                   links={"/var/run/docker.sock": "/run/docker.sock"})
    assert result.ok


def test_docker_host_in_the_stack_file_is_the_providers():
    probes, _ = fake()
    result = by_name(run_checks(probes, provider_config={"host": "tcp://10.0.0.9:2375"}, stack="lab"))[ONE_DOCKER]
    assert not result.ok and "`docker:host` in Pulumi.lab.yaml" in result.detail
    assert result.fix == (f"pulumi config set docker:host {DEFAULT_SOCKET} --stack lab && "
                          f"export DOCKER_HOST={DEFAULT_SOCKET}")


def test_main_passes_the_stack_files_docker_settings(tmp_path, capsys):
    stack = yaml.safe_load(LAB_STACK)
    stack["config"]["docker:context"] = "box"
    (tmp_path / "Pulumi.lab.yaml").write_text(yaml.safe_dump(stack))
    probes, _ = fake(answers=inspect("box", "ssh://me@gpu-box"))
    assert preflight.main(["--stack", "lab"], probes, root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "fix: pulumi config rm docker:context --stack lab && export DOCKER_HOST=unix:///var/run/docker.sock" in out


# --- kind network --------------------------------------------------------------------------------------------------

NETWORK = "kind network subnet"


@pytest.mark.parametrize("answer", [
    NO_SUCH_NETWORK,
    (1, "", "Error: No such network: kind\n"),
])


def test_absent_kind_network_is_fine(answer):
    result = check(NETWORK, answers={tuple(KIND_NETWORK): answer})
    assert result.ok and "kind creates it" in result.detail


@pytest.mark.parametrize("subnet", ["172.18.0.0/16", "192.168.64.0/20", "10.99.0.0/24"])
def test_kind_network_of_a_24_or_larger_passes(subnet):
    result = check(NETWORK, answers={tuple(KIND_NETWORK): (0, f'[{{"Subnet":"{subnet}"}}]', "")})
    assert result.ok and result.detail == subnet


@pytest.mark.parametrize("subnet", ["10.99.0.0/25", "172.18.0.0/28"])
def test_kind_network_smaller_than_a_24_fails(subnet):
    result = check(NETWORK, answers={tuple(KIND_NETWORK): (
        0, f'[{{"Subnet":"fc00:f853:ccd:e793::/64"}},{{"Subnet":"{subnet}"}}]', "")})
    assert not result.ok and subnet in result.detail and "/24" in result.detail
    assert result.fix.startswith("make down (in every checkout whose lab uses it), then docker network rm kind")
    assert "default-address-pools" in result.fix


@pytest.mark.parametrize("config", ['[{"Subnet":"fc00:f853:ccd:e793::/64"}]', "null", "[]"])
def test_kind_network_without_ipv4_fails(config):
    result = check(NETWORK, answers={tuple(KIND_NETWORK): (0, config, "")})
    assert not result.ok and "no IPv4 subnet" in result.detail
    assert "docker network rm kind" in result.fix


# --- kind ----------------------------------------------------------------------------------------------------------

KIND = "kind >= v0.31.0"


def test_kind_031_passes():
    result = check(KIND)
    assert result.ok and result.detail == "v0.31.0 at /usr/local/bin/kind"


def test_missing_kind_gives_the_checksummed_release_binary():
    result = check(KIND, tools=("docker", "pulumi"))
    assert not result.ok and "not found on PATH" in result.detail
    fix = result.fix
    assert "https://kind.sigs.k8s.io/dl/v0.31.0/kind-linux-$arch " in fix
    assert "https://kind.sigs.k8s.io/dl/v0.31.0/kind-linux-$arch.sha256sum" in fix
    assert "sha256sum -c kind-linux-$arch.sha256sum" in fix
    assert "install -m 0755 kind-linux-$arch /usr/local/bin/kind" in fix
    assert "uname -m" in fix and "go install" not in fix
    # Checksum before install.
    assert fix.index("sha256sum -c") < fix.index("/usr/local/bin/kind")


def test_kind_fix_picks_the_architecture_with_uname():
    import subprocess

    fix = check(KIND, tools=()).fix
    arch_step = fix.split(" && ")[0].removeprefix("(")
    for machine, arch in (("x86_64", "amd64"), ("aarch64", "arm64")):
        script = f"uname() {{ echo {machine}; }}; {arch_step}; echo $arch"
        assert subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout.strip() == arch


def test_old_kind_fails():
    result = check(KIND, answers={("kind", "version"): (0, "kind v0.30.0 go1.24.6 linux/amd64\n", "")})
    assert not result.ok and "v0.30.0" in result.detail
    assert "sha256sum -c" in result.fix


def test_kind_version_on_stderr_only_fails():
    result = check(KIND, answers={("kind", "version"): (0, "", "kind v0.31.0 go1.25.5 linux/amd64\n")})
    assert not result.ok and "printed no version" in result.detail


def test_kind_warning_on_stderr_is_ignored():
    result = check(KIND, answers={("kind", "version"): (
        0, "kind v0.32.0 go1.26.1 linux/arm64\n", "WARNING: v1.0.0 of something is available\n")})
    assert result.ok and result.detail.startswith("v0.32.0")


# --- pulumi --------------------------------------------------------------------------------------------------------

PULUMI = "pulumi >= v3.260.0"
PULUMI_FIX = 'curl -fsSL https://get.pulumi.com | sh -s -- --version 3.272.0 && export PATH="$HOME/.pulumi/bin:$PATH"'


@pytest.mark.parametrize("version", ["v3.260.0", "v3.272.0", "v3.300.1-dev.0"])
def test_recent_pulumi_passes(version):
    result = check(PULUMI, answers={("pulumi", "version"): (0, version + "\n", "")})
    assert result.ok


def test_missing_pulumi():
    result = check(PULUMI, tools=("docker", "kind"))
    assert not result.ok and result.fix == PULUMI_FIX


def test_pulumi_before_deleted_with_replacement_fails():
    result = check(PULUMI, answers={("pulumi", "version"): (0, "v3.259.0\n", "")})
    assert not result.ok and "v3.259.0" in result.detail and "deletedWith" in result.detail
    assert result.fix == PULUMI_FIX


def test_pulumi_update_warning_on_stderr_is_not_the_version():
    result = check(PULUMI, answers={("pulumi", "version"): (
        0, "v3.255.0\n", "warning: A new version of Pulumi is available: v3.272.0\n")})
    assert not result.ok and "v3.255.0" in result.detail


def test_pulumi_error_on_stderr_with_zero_exit_fails():
    result = check(PULUMI, answers={("pulumi", "version"): (0, "", "error: v3.272.0 could not be loaded\n")})
    assert not result.ok and "printed no version" in result.detail


# --- inotify -------------------------------------------------------------------------------------------------------

def test_inotify_limits_pass():
    results = by_name(run_checks(fake()[0]))
    assert results["fs.inotify.max_user_watches"].ok and results["fs.inotify.max_user_instances"].detail == "8192"


def test_low_inotify_limits_fail_with_sysctl_fix():
    probes, _ = fake(files={
        "/proc/sys/fs/inotify/max_user_watches": "8192\n",
        "/proc/sys/fs/inotify/max_user_instances": "128\n",
    })
    results = by_name(run_checks(probes))
    watches = results["fs.inotify.max_user_watches"]
    instances = results["fs.inotify.max_user_instances"]
    assert not watches.ok and "8192" in watches.detail
    assert watches.fix.startswith("sudo sysctl -w fs.inotify.max_user_watches=524288")
    assert not instances.ok
    assert instances.fix.startswith("sudo sysctl -w fs.inotify.max_user_instances=512")


# --- which checks run ----------------------------------------------------------------------------------------------

def test_existing_cluster_stack_needs_only_python_and_the_pulumi_cli():
    probes, calls = fake(tools=("pulumi",), system="Darwin")
    results = run_checks(probes, local_lab=False)
    assert [(r.name, r.ok) for r in results] == [("Python >= 3.10", True), ("pulumi >= v3.260.0", True)]
    assert calls == [("pulumi", "version")]


def test_which_stacks_need_a_local_lab():
    ssh_only = {"config": {
        "gpu-tenancy:management": {"kubeconfig": {"secure": "v1:abc"}},
        "gpu-tenancy:tenants": [{"name": "a", "workers": [{"name": "w", "ssh": {"host": "h"}}]}],
    }}
    assert not needs_local_lab(ssh_only)
    mixed = {"config": {**ssh_only["config"], "gpu-tenancy:tenants": [
        {"name": "a", "workers": [{"name": "w", "ssh": {"host": "h"}}, {"name": "local"}]}]}}
    assert needs_local_lab(mixed)
    assert needs_local_lab({"config": {"gpu-tenancy:tenants": []}})


# --- the stack file ------------------------------------------------------------------------------------------------

ADOPT_STACK = textwrap.dedent("""\
    config:
      gpu-tenancy:gpuMode: nvidia
      gpu-tenancy:management:
        kubeconfig:
          secure: v1:AAAAkubeconfig
        workerCidrs: [10.20.0.0/16]
      gpu-tenancy:tenants:
        - name: team-a
          workers:
            - name: gpu-01
              ssh:
                host: 10.20.1.11
                hostKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAID3ChGOEB0YOLW1IE8mTEqhH9/5+XtFQOoIzCYcZLUym
                privateKey:
                  secure: v1:AAAAkey1
              gpus:
                - {uuid: GPU-1, model: NVIDIA-H100, memoryMiB: 81920}
""")


LAB_STACK = textwrap.dedent("""\
    config:
      gpu-tenancy:tenants:
        - name: tenant-a
          podCidr: 10.244.0.0/16
          workers:
            - name: worker-0
              gpus:
                - {uuid: GPU-MOCK-A0, model: NVIDIA-A100, memoryMiB: 8192}
        - name: tenant-b
          workers:
            - name: worker-0
              gpus:
                - {uuid: GPU-MOCK-B0, model: NVIDIA-A100, memoryMiB: 8192}
""")


def write_stack(tmp_path, name, text):
    (tmp_path / f"Pulumi.{name}.yaml").write_text(text)
    return tmp_path


def test_main_reads_the_dev_stack_file(tmp_path, capsys):
    # Pulumi.dev.yaml as shipped: the reference lab (the user's own copy is never read by a test).
    write_stack(tmp_path, "dev", REFERENCE_STACK.read_text())
    assert preflight.main(["--stack", "dev"], fake()[0], root=tmp_path) == 0
    out = capsys.readouterr().out
    assert "[ok  ] secrets of Pulumi.dev.yaml encrypted" in out
    assert "[ok  ] configuration of Pulumi.dev.yaml valid: " in out
    assert "no local lab" not in out


def test_missing_stack_file_says_how_to_create_it(tmp_path, capsys):
    assert preflight.main(["--stack", "staging"], fake()[0], root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "[FAIL] Pulumi.staging.yaml exists: Pulumi.staging.yaml does not exist" in out
    assert "fix: cp Pulumi.dev.yaml Pulumi.staging.yaml" in out
    assert "pulumi config set --stack staging --path 'gpu-tenancy:tenants[0].name'" in out
    # The host checks still run.
    assert "[ok  ] Docker daemon answers" in out


def test_missing_stack_file_with_an_example_suggests_the_example(tmp_path, capsys):
    write_stack(tmp_path, "prod.example", ADOPT_STACK)
    assert preflight.main(["--stack", "prod"], fake()[0], root=tmp_path) == 1
    assert "fix: cp Pulumi.prod.example.yaml Pulumi.prod.yaml" in capsys.readouterr().out


def test_unparsable_stack_file(tmp_path, capsys):
    write_stack(tmp_path, "bad", "config:\n  gpu-tenancy:tenants: [\n")
    assert preflight.main(["--stack", "bad"], fake()[0], root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "[FAIL] Pulumi.bad.yaml readable: Pulumi.bad.yaml is not valid YAML:" in out
    assert 'in "Pulumi.bad.yaml", line 3, column 1' in out


def test_without_stack_the_stack_file_is_not_read(tmp_path, capsys):
    assert preflight.main([], fake()[0], root=tmp_path) == 0
    assert "Pulumi." not in capsys.readouterr().out


def test_stack_file_checks_run_for_an_adopting_stack_too(tmp_path, capsys):
    write_stack(tmp_path, "prod", ADOPT_STACK)
    probes, calls = fake(tools=("pulumi",), system="Darwin")
    assert preflight.main(["--stack", "prod"], probes, root=tmp_path) == 0
    out = capsys.readouterr().out
    assert "no local lab to check" in out
    assert "[ok  ] secrets of Pulumi.prod.yaml encrypted" in out
    assert "[ok  ] configuration of Pulumi.prod.yaml valid: 1 tenant(s), 1 worker(s)" in out
    assert calls == [("pulumi", "version")]


def test_credentials_in_plain_text_in_a_stack_file_are_flagged():
    stack = {"config": {
        "gpu-tenancy:management": {"kubeconfig": {"secure": "v1:abc"}},
        "gpu-tenancy:tenants": [{"name": "a", "workers": [
            {"name": "w0", "ssh": {"host": "h", "privateKey": {"secure": "v1:def"}}},
            {"name": "w1", "ssh": {"host": "h2", "privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----"}},
        ]}],
    }}
    result = check_stack_secrets("prod", stack)
    assert not result.ok
    assert result.detail.startswith("tenants[0].workers[1].ssh.privateKey in plain text")
    assert "BEGIN" not in result.detail + result.fix
    # The value from its file on stdin (the Makefile's `secret` target), never on a command line.
    assert result.fix == "make secret STACK=prod KEY='tenants[0].workers[1].ssh.privateKey' FILE=<file>"
    stack["config"]["gpu-tenancy:tenants"][0]["workers"][1]["ssh"]["privateKey"] = {"secure": "v1:ghi"}
    assert check_stack_secrets("prod", stack).ok


def test_encrypted_credentials_are_validated_with_placeholders():
    result = check_stack_config("prod", yaml.safe_load(ADOPT_STACK))
    assert result.ok, result.detail
    assert result.detail == "1 tenant(s), 1 worker(s)"


def test_lab_configuration_passes():
    result = check_stack_config("lab", yaml.safe_load(LAB_STACK))
    assert result.ok and result.detail == "2 tenant(s), 2 worker(s)"


def test_invalid_configuration_reports_every_problem_at_once():
    stack = yaml.safe_load(LAB_STACK)
    tenants = stack["config"]["gpu-tenancy:tenants"]
    tenants[0]["podCIDR"] = tenants[0].pop("podCidr")
    tenants[1]["workers"][0]["gpus"][0]["cores"] = 250
    result = check_stack_config("lab", stack)
    assert not result.ok
    assert result.detail.startswith("invalid 'gpu-tenancy' stack configuration (2 problems):")
    assert "tenants[0].podCIDR: unknown key 'podCIDR'" in result.detail and "did you mean 'podCidr'?" in result.detail
    assert "tenants[1].workers[0].gpus[0].cores = 250" in result.detail
    assert "Pulumi.lab.yaml" in result.fix and "make preflight STACK=lab" in result.fix
    # One fix line per problem: preflight's, not the validator's as well.
    assert "Fix these keys" not in result.detail and "<stack>" not in result.detail


def test_unencrypted_stack_credentials_fail_once_not_twice():
    stack = yaml.safe_load(ADOPT_STACK)
    stack["config"]["gpu-tenancy:tenants"][0]["workers"][0]["ssh"]["privateKey"] = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----")
    assert not check_stack_secrets("prod", stack).ok
    assert check_stack_config("prod", stack).ok


def test_the_validators_cross_key_rules_apply_around_encrypted_values():
    stack = yaml.safe_load(ADOPT_STACK)
    stack["config"]["gpu-tenancy:management"].pop("workerCidrs")
    result = check_stack_config("prod", stack)
    assert not result.ok and "management.workerCidrs" in result.detail


def test_other_encrypted_values_are_left_to_pulumi_up_but_unknown_keys_are_not():
    stack = yaml.safe_load(ADOPT_STACK)
    ssh = stack["config"]["gpu-tenancy:tenants"][0]["workers"][0]["ssh"]
    ssh["host"] = {"secure": "v1:AAAAhost"}
    result = check_stack_config("prod", stack)
    assert result.ok, result.detail
    assert "tenants[0].workers[0].ssh.host" in result.detail
    ssh["hots"] = {"secure": "v1:AAAAtypo"}
    result = check_stack_config("prod", stack)
    assert not result.ok and "unknown key 'hots'" in result.detail


def test_non_project_keys_are_not_validated():
    stack = yaml.safe_load(LAB_STACK)
    stack["config"]["docker:host"] = "unix:///var/run/docker.sock"
    stack["config"]["kubernetes:enableServerSideApply"] = "true"
    assert check_stack_config("lab", stack).ok


# --- the Helm charts -------------------------------------------------------------------------------------------------

def test_a_chart_not_fetched_yet_is_information_since_make_up_fetches_it(tmp_path, capsys):
    # A fresh clone: `make preflight` used to FAIL with "make charts", which `make up` runs anyway.
    assert preflight.main(["--charts"], fake()[0], root=tmp_path) == 0
    out = capsys.readouterr().out
    assert ("[info] Helm charts (pinned, verified): not fetched yet (`make up` fetches them into .cache/charts; "
            "`make charts` fetches them now)") in out
    assert out.rstrip().endswith("preflight passed")


CHART_FILES = {"kamaji": {"Chart.yaml": b"apiVersion: v2\nname: kamaji\n", "values.yaml": b"{}\n"},
               "hami": {"Chart.yaml": b"apiVersion: v2\nname: hami\n"}}


@pytest.fixture
def chart_manifest(tmp_path, monkeypatch):
    """Two stand-in charts in place of components/charts.json's; returns where their directories go."""
    from components.charts import CHARTS, tree_digest

    for name in list(CHARTS):
        monkeypatch.delitem(CHARTS, name)
    for name, files in CHART_FILES.items():
        put(tmp_path / "pin" / name, files)
        monkeypatch.setitem(CHARTS, name, {"sha256": tree_digest(tmp_path / "pin" / name)})
    return tmp_path / ".cache" / "charts"


def put(directory, files):
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)


def test_a_chart_file_that_differs_from_its_pin_fails(tmp_path, chart_manifest):
    put(chart_manifest / "kamaji", CHART_FILES["kamaji"] | {"values.yaml": b"changed by hand\n"})
    result = preflight.check_charts(tmp_path)
    assert not result.ok and result.state == ""
    assert result.detail.startswith("charts/kamaji: the files differ from the pin in components/charts.json")
    assert "hami" not in result.detail  # not fetched yet is not the problem
    assert result.fix.startswith("make charts")


def test_a_partly_fetched_chart_tree_is_information_too(tmp_path, chart_manifest):
    put(chart_manifest / "kamaji", CHART_FILES["kamaji"])
    result = preflight.check_charts(tmp_path)
    assert result.ok and result.state == "info" and result.detail.startswith("1 of 2 charts not fetched yet")


def test_fetched_charts_pass(tmp_path, chart_manifest):
    for name, files in CHART_FILES.items():
        put(chart_manifest / name, files)
    result = preflight.check_charts(tmp_path)
    assert result.ok and result.state == "" and result.detail.endswith(".cache/charts")


def test_a_file_the_pin_does_not_cover_fails(tmp_path, chart_manifest):
    for name, files in CHART_FILES.items():
        put(chart_manifest / name, files)
    put(chart_manifest / "hami", {"templates/extra.yaml": b"kind: Secret\n"})
    result = preflight.check_charts(tmp_path)
    assert not result.ok and result.detail.startswith("charts/hami: the files differ from the pin")


# --- kind against management.nodeImage -----------------------------------------------------------------------------

KIND_FOR_IMAGE = "kind can create management.nodeImage"
V1_37 = "kindest/node:v1.37.0@sha256:" + "ab" * 32


def lab_with_node_image(tmp_path, image):
    document = yaml.safe_load(REFERENCE_STACK.read_text())
    management = document["config"].setdefault("gpu-tenancy:management", {})
    management.update({"nodeImage": image, "allowUnpinnedNodeImages": "@" not in image})
    return write_stack(tmp_path, "dev", yaml.safe_dump(document))


def kind_answer(version):
    return {("kind", "version"): (0, f"kind {version} go1.25.5 linux/amd64\n", "")}


def test_a_node_image_of_137_needs_the_kind_that_writes_kubeadm_v1beta4(tmp_path, capsys):
    lab_with_node_image(tmp_path, V1_37)
    assert preflight.main(["--stack", "dev"], fake(answers=kind_answer("v0.31.0"))[0], root=tmp_path) == 1
    out = capsys.readouterr().out
    assert f"[FAIL] {KIND_FOR_IMAGE}: kind v0.31.0 writes kubeadm v1beta3 for v1.37.0" in out
    assert "https://kind.sigs.k8s.io/dl/v0.32.0/kind-linux-$arch" in out and "management.nodeImage" in out
    assert preflight.main(["--stack", "dev"], fake(answers=kind_answer("v0.32.0"))[0], root=tmp_path) == 0
    assert f"[ok  ] {KIND_FOR_IMAGE}: kind v0.32.0, Kubernetes v1.37.0" in capsys.readouterr().out


def test_the_default_node_image_is_checked_without_a_stack(capsys):
    assert preflight.main([], fake()[0]) == 0
    assert f"[ok  ] {KIND_FOR_IMAGE}: kind v0.31.0, Kubernetes v1.35." in capsys.readouterr().out


def test_a_node_image_without_a_version_tag_is_not_judged(tmp_path, capsys):
    lab_with_node_image(tmp_path, "registry.local/node:dev")
    assert preflight.main(["--stack", "dev"], fake()[0], root=tmp_path) == 0
    assert f"[info] {KIND_FOR_IMAGE}: registry.local/node:dev names no Kubernetes version" in capsys.readouterr().out


def test_an_adopted_cluster_has_no_node_image_to_check(tmp_path, capsys):
    write_stack(tmp_path, "prod", ADOPT_STACK)
    preflight.main(["--stack", "prod"], fake()[0], root=tmp_path)
    assert KIND_FOR_IMAGE not in capsys.readouterr().out


# --- cgroup v2 -----------------------------------------------------------------------------------------------------

def test_a_cgroup_v1_docker_host_is_refused_naming_the_kernel_argument():
    result = check("cgroup v2 on the Docker host", answers={tuple(preflight.DOCKER_CGROUP): (0, "1\n", "")})
    assert not result.ok
    assert "cgroup v1" in result.detail and "failCgroupV1" in result.detail
    assert "systemd.unified_cgroup_hierarchy=1" in result.fix


def test_cgroup_v2_passes_and_an_unanswered_daemon_skips_it():
    assert check("cgroup v2 on the Docker host").detail == "cgroup v2"
    answers = {tuple(DOCKER_INFO): (1, "", "Cannot connect to the Docker daemon\n")}
    assert check("cgroup v2 on the Docker host", answers=answers).state == "skip"


# --- SSH workers in the kind lab -------------------------------------------------------------------------------------

# The adopting stack's server, joined to the kind lab instead (its own tenant, no management.kubeconfig).
LAB_WITH_SERVER = ADOPT_STACK.replace(
    "  gpu-tenancy:management:\n    kubeconfig:\n      secure: v1:AAAAkubeconfig\n    workerCidrs: [10.20.0.0/16]\n", "")
ROUTED = "SSH workers reach the kind network"
DOCKER_VERSION = ("docker", "version", "--format", "{{.Server.Version}}")
KIND_OPTIONS = ("docker", "network", "inspect", "kind", "--format", "{{json .Options}}")
KIND_DEFAULT_OPTIONS = (0, '{"com.docker.network.bridge.enable_ip_masquerade":"true"}\n', "")


def routed_check(tmp_path, capsys, version, options=KIND_DEFAULT_OPTIONS, stack=LAB_WITH_SERVER):
    write_stack(tmp_path, "lab", stack)
    probes, _ = fake(answers={DOCKER_VERSION: (0, f"{version}\n", ""), KIND_OPTIONS: options})
    code = preflight.main(["--stack", "lab"], probes, root=tmp_path)
    return code, capsys.readouterr().out


def test_docker_28_refuses_ssh_workers_in_the_kind_lab(tmp_path, capsys):
    # moby setDefaultForwardRule (28.0+): `-A DOCKER ! -i <bridge> -o <bridge> -j DROP` unless nat-unprotected, so a
    # routed server never reaches the MetalLB address of its tenant's API.
    code, out = routed_check(tmp_path, capsys, "28.2.2")
    assert code == 1
    line = next(line for line in out.splitlines() if ROUTED in line)
    assert line.startswith("[FAIL]") and "Docker 28.2.2 drops" in line and "tenants[0].workers[0]" in line
    assert "management.kubeconfig" in out and "gateway_mode_ipv4=nat-unprotected" in out
    # Not created yet: kind creates it in the default (protected) mode.
    code, out = routed_check(tmp_path, capsys, "29.1.0", options=NO_SUCH_NETWORK)
    assert code == 1 and f"[FAIL] {ROUTED}" in out


@pytest.mark.parametrize("version, options, shown", [
    ("27.5.1", KIND_DEFAULT_OPTIONS, "Docker 27.5.1 forwards"),
    ("28.2.2", (0, '{"com.docker.network.bridge.gateway_mode_ipv4":"nat-unprotected"}\n', ""), "nat-unprotected"),
])


def test_ssh_workers_in_the_kind_lab_pass_where_docker_forwards(tmp_path, capsys, version, options, shown):
    code, out = routed_check(tmp_path, capsys, version, options)
    assert code == 0, out
    assert f"[ok  ] {ROUTED}" in out and shown in out


def test_the_routed_check_concerns_only_ssh_workers_in_the_kind_lab(tmp_path, capsys):
    for stack in (ADOPT_STACK, LAB_STACK):
        code, out = routed_check(tmp_path, capsys, "28.2.2", stack=stack)
        assert ROUTED not in out
