"""Preflight checks against faked host probes."""

from tools import preflight
from tools.preflight import Probes, required_conntrack_max, run_checks

HEALTHY_FILES = {
    "/proc/sys/fs/inotify/max_user_watches": "524288\n",
    "/proc/sys/fs/inotify/max_user_instances": "8192\n",
    "/proc/swaps": "Filename\tType\tSize\tUsed\tPriority\n",
    "/proc/sys/net/netfilter/nf_conntrack_max": "262144\n",
}


def fake(files=None, tools=("docker", "kind", "pulumi"), docker=(0, "28.2.2"), cores=4):
    files = {**HEALTHY_FILES, **(files or {})}
    calls = []

    def run(argv):
        calls.append(list(argv))
        return docker

    probes = Probes(
        which=lambda name: f"/usr/local/bin/{name}" if name in tools else None,
        run=run,
        read=lambda path: files.get(path),
        cpu_count=lambda: cores,
    )
    return probes, calls


def by_name(results):
    return {r.name: r for r in results}


def test_healthy_host_passes(capsys):
    probes, calls = fake()
    assert preflight.main([], probes) == 0
    out = capsys.readouterr().out
    assert "preflight passed" in out
    assert "FAIL" not in out
    assert calls == [["docker", "info", "--format", "{{.ServerVersion}}"]]


def test_docker_daemon_down_says_how_to_start_it(capsys):
    probes, _ = fake(docker=(1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock"))
    assert preflight.main([], probes) == 1
    result = by_name(run_checks(probes))["Docker daemon answers"]
    assert not result.ok
    assert "Cannot connect" in result.detail
    assert result.fix == "sudo systemctl start docker"
    assert "fix: sudo systemctl start docker" in capsys.readouterr().out


def test_docker_permission_denied_suggests_the_group():
    probes, _ = fake(docker=(1, "permission denied while trying to connect to the Docker daemon socket"))
    result = by_name(run_checks(probes))["Docker daemon answers"]
    assert "usermod -aG docker" in result.fix


def test_missing_docker_cli():
    probes, calls = fake(tools=("kind", "pulumi"))
    result = by_name(run_checks(probes))["Docker daemon answers"]
    assert not result.ok and "not on PATH" in result.detail
    assert calls == []


def test_missing_kind_and_pulumi_give_install_commands():
    probes, _ = fake(tools=("docker",))
    results = by_name(run_checks(probes))
    assert "sigs.k8s.io/kind" in results["kind on PATH"].fix
    assert "get.pulumi.com" in results["pulumi on PATH"].fix


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


def test_swap_on_fails_with_swapoff():
    probes, _ = fake(files={"/proc/swaps": "Filename Type Size Used Priority\n/swap.img file 2097148 0 -2\n"})
    result = by_name(run_checks(probes))["swap off"]
    assert not result.ok and "/swap.img" in result.detail
    assert result.fix.startswith("sudo swapoff -a")


def test_conntrack_threshold_scales_with_cores():
    assert required_conntrack_max(2) == 131072
    assert required_conntrack_max(16) == 524288


def test_conntrack_too_low_for_the_cores():
    probes, _ = fake(files={"/proc/sys/net/netfilter/nf_conntrack_max": "262144\n"}, cores=16)
    result = by_name(run_checks(probes))["net.netfilter.nf_conntrack_max"]
    assert not result.ok
    assert "524288" in result.detail
    assert result.fix.startswith("sudo sysctl -w net.netfilter.nf_conntrack_max=524288")


def test_conntrack_module_not_loaded():
    probes, _ = fake(files={"/proc/sys/net/netfilter/nf_conntrack_max": None})
    result = by_name(run_checks(probes))["net.netfilter.nf_conntrack_max"]
    assert not result.ok
    assert result.fix.startswith("sudo modprobe nf_conntrack")


def test_every_failure_has_a_fix():
    probes, _ = fake(
        files={path: None for path in HEALTHY_FILES} | {"/proc/swaps": "h\n/dev/sda2 partition 1 0 -1\n"},
        tools=(),
    )
    results = run_checks(probes)
    assert all(not r.ok for r in results)
    assert all(r.fix for r in results)


def test_existing_cluster_stack_needs_only_the_pulumi_cli():
    probes, calls = fake(tools=("pulumi",), docker=(1, "no daemon"))
    results = run_checks(probes, local_lab=False)
    assert [(r.name, r.ok) for r in results] == [("pulumi on PATH", True)]
    assert calls == []


def test_which_stacks_need_a_local_lab():
    from tools.preflight import needs_local_lab

    ssh_only = {"config": {
        "gpu-tenancy:management": {"kubeconfig": {"secure": "v1:abc"}},
        "gpu-tenancy:tenants": [{"name": "a", "workers": [{"name": "w", "ssh": {"host": "h"}}]}],
    }}
    assert not needs_local_lab(ssh_only)
    mixed = {"config": {**ssh_only["config"], "gpu-tenancy:tenants": [
        {"name": "a", "workers": [{"name": "w", "ssh": {"host": "h"}}, {"name": "local"}]}]}}
    assert needs_local_lab(mixed)
    assert needs_local_lab({"config": {"gpu-tenancy:tenants": []}})


def test_main_reads_the_stack_file(capsys):
    probes, _ = fake()
    assert preflight.main(["--stack", "dev"], probes) == 0
    assert "no local lab" not in capsys.readouterr().out


def test_credentials_in_plain_text_in_a_stack_file_are_flagged():
    from tools.preflight import check_stack_secrets

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
    assert result.fix == "pulumi config set --secret --path 'gpu-tenancy:tenants[0].workers[1].ssh.privateKey' \"$(cat <file>)\""
    stack["config"]["gpu-tenancy:tenants"][0]["workers"][1]["ssh"]["privateKey"] = {"secure": "v1:ghi"}
    assert check_stack_secrets("prod", stack).ok
