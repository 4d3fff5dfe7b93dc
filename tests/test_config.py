"""The stack configuration contract: defaults, and one clear error per bad key, every problem in one round."""

import copy

import pulumi
import pytest

from config import ConfigError, load_stack_config
from config.models import KIND_NODE_IMAGES, MAX_SIMULATED_MEMORY_MIB_PER_WORKER, Management
from tests.support.mockrun import ProgramFailedError, reference_stack, run_program


def card(uuid, memory=8192, cores=100, slots=10, model="NVIDIA-A100"):
    return {"uuid": uuid, "model": model, "memoryMiB": memory, "cores": cores, "slots": slots}


def base():
    return copy.deepcopy(reference_stack())


def test_dev_stack_validates_to_the_reference_lab():
    config = load_stack_config(base())
    assert [t.name for t in config.tenants] == ["tenant-a", "tenant-b"]
    a, b = config.tenants
    assert (a.service_cidr, a.pod_cidr) == ("10.96.0.0/16", "10.244.0.0/16")
    assert (b.service_cidr, b.pod_cidr) == ("10.97.0.0/16", "10.245.0.0/16")
    assert a.kubernetes_version == b.kubernetes_version == "v1.35.0"
    only_card = a.workers[0].gpus[0]
    assert (only_card.uuid, only_card.model, only_card.memory_mib, only_card.cores, only_card.slots) == (
        "GPU-MOCK-A0", "NVIDIA-A100", 8192, 100, 10)
    assert b.workers[0].gpus[0].uuid == "GPU-MOCK-B0"
    assert config.gpu_mode == "mock"
    assert not config.management.adopts_existing_cluster
    assert config.management.cluster_name == "gpu-tenancy"
    assert (config.smoke_test.gpus, config.smoke_test.memory_mib, config.smoke_test.cores) == (1, 3000, 30)
    assert [config.smoke_test.worker_in(t).name for t in config.tenants] == ["worker-0", "worker-0"]


def test_defaults_fill_optional_keys():
    config = load_stack_config(
        {"tenants": [{"name": "team", "workers": [{"name": "w", "gpus": [{"uuid": "G0", "model": "A", "memoryMiB": 4096}]}]}]}
    )
    tenant = config.tenants[0]
    assert tenant.kubernetes_version == "v1.35.0"
    assert (tenant.workers[0].gpus[0].cores, tenant.workers[0].gpus[0].slots) == (100, 10)
    assert tenant.service_cidr and tenant.pod_cidr
    assert tenant.namespaces == ["default"]
    assert tenant.data_store.dedicated is False and tenant.node_image is None
    assert config.smoke_test.enabled is True
    assert config.versions.hami == "2.10.0"
    # The kind node runs a kindest/node image kind publishes (by digest): the newest patch of its minor version.
    default = Management().node_image
    assert config.management.node_image == default and default in KIND_NODE_IMAGES.values()
    minor = [version for version, image in KIND_NODE_IMAGES.items() if image == default][0].rsplit(".", 1)[0]
    assert default == KIND_NODE_IMAGES[max((v for v in KIND_NODE_IMAGES if v.startswith(minor + ".")),
                                           key=lambda v: int(v.rsplit(".", 1)[1]))]
    management = config.management
    assert (management.allow_any_source, management.allow_exec_credentials) == (False, False)
    assert management.worker_cidrs == management.operator_cidrs == []


def test_published_kind_node_versions_are_accepted_for_container_workers():
    for version in KIND_NODE_IMAGES:
        raw = base()
        raw["tenants"][0]["kubernetesVersion"] = version
        assert load_stack_config(raw).tenants[0].kubernetes_version == version


def _set(path, value):
    """Return a mutator that sets a dotted/indexed path in the raw config."""

    def mutate(raw):
        target = raw
        parts = path.replace("[", ".").replace("]", "").split(".")
        for part in parts[:-1]:
            target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
        last = parts[-1]
        if last.isdigit() and int(last) == len(target):
            target.append(value)
        elif last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value

    return mutate


def _delete(path):
    def mutate(raw):
        target = raw
        parts = path.replace("[", ".").replace("]", "").split(".")
        for part in parts[:-1]:
            target = target[int(part)] if part.isdigit() else target[part]
        del target[parts[-1]]

    return mutate


def _rename(path, new_key):
    def mutate(raw):
        target = raw
        parts = path.replace("[", ".").replace("]", "").split(".")
        for part in parts[:-1]:
            target = target[int(part)] if part.isdigit() else target[part]
        target[new_key] = target.pop(parts[-1])

    return mutate


def _many(*mutators):
    def mutate(raw):
        for m in mutators:
            m(raw)

    return mutate


T0 = "tenants[0]"
C00 = "tenants[0].workers[0].gpus[0]"
C10 = "tenants[1].workers[0].gpus[0]"

INVALID = [
    # (id, mutation, key path the message must name, extra text the message must contain)
    ("seed-podCIDR-typo", _rename("tenants[0].podCidr", "podCIDR"), "tenants[0].podCIDR", "did you mean 'podCidr'"),
    ("unknown-top-level-key", _set("gpuMod", "mock"), "gpuMod", "unknown key"),
    ("snake-case-key", _rename("tenants[0].podCidr", "pod_cidr"), "tenants[0].pod_cidr", "did you mean 'podCidr'"),
    ("unknown-card-key", _set(f"{C00}.device_uuid", "x"), f"{C00}.device_uuid", "unknown key"),
    ("unknown-management-key", _set("management.kubeconfigPath", "/x"), "management.kubeconfigPath", "unknown key"),
    ("no-tenants", _set("tenants", []), "tenants", "at least 1"),
    ("tenants-missing", _delete("tenants"), "tenants", "required"),
    ("tenant-name-uppercase", _set(f"{T0}.name", "Tenant-A"), f"{T0}.name", "DNS-1035"),
    ("tenant-name-digit-first", _set(f"{T0}.name", "1tenant"), f"{T0}.name", "DNS-1035"),
    ("tenant-name-too-long", _set(f"{T0}.name", "t" * 31), f"{T0}.name", "at most 30"),
    ("tenant-name-reserved", _set(f"{T0}.name", "kube-system"), f"{T0}.name", "already uses"),
    ("tenant-name-duplicate", _set("tenants[1].name", "tenant-a"), "tenants[1].name", "unique"),
    ("version-too-old", _set(f"{T0}.kubernetesVersion", "v1.29.0"), f"{T0}.kubernetesVersion", "older kubelets"),
    ("version-too-new", _set(f"{T0}.kubernetesVersion", "v1.37.0"), f"{T0}.kubernetesVersion", "v1.36.x"),
    ("version-malformed", _set(f"{T0}.kubernetesVersion", "1.35"), f"{T0}.kubernetesVersion", "v1.35.0"),
    ("service-cidr-not-a-network", _set(f"{T0}.serviceCidr", "10.96.0.1/16"), f"{T0}.serviceCidr", "IPv4 network"),
    ("service-cidr-garbage", _set(f"{T0}.serviceCidr", "ten.96/16"), f"{T0}.serviceCidr", "CIDR"),
    ("pod-cidr-ipv6", _set(f"{T0}.podCidr", "fd00::/64"), f"{T0}.podCidr", "IPv4"),
    ("service-cidr-too-large", _set(f"{T0}.serviceCidr", "10.0.0.0/8"), f"{T0}.serviceCidr", "/12"),
    ("pod-cidr-too-small", _set(f"{T0}.podCidr", "10.244.0.0/25"), f"{T0}.podCidr", "/24"),
    ("service-overlaps-own-pods", _set(f"{T0}.serviceCidr", "10.244.0.0/20"), f"{T0}.podCidr", "overlaps tenants[0].serviceCidr"),
    ("pods-overlap-other-tenant", _set("tenants[1].podCidr", "10.244.128.0/17"), "tenants[1].podCidr", "overlaps tenants[0].podCidr"),
    ("service-overlaps-other-tenant-pods", _set("tenants[1].serviceCidr", "10.244.0.0/16"), "tenants[1].serviceCidr", "overlaps"),
    ("pod-range-too-small-for-workers",
     _many(_set(f"{T0}.podCidr", "10.244.0.0/24"),
           _set(f"{T0}.workers[1]", {"name": "worker-1", "gpus": [card("GPU-MOCK-A1")]})),
     f"{T0}.podCidr", "room for 1 node"),
    ("no-workers", _set(f"{T0}.workers", []), f"{T0}.workers", "at least 1"),
    ("worker-name-invalid", _set(f"{T0}.workers[0].name", "Worker_0"), f"{T0}.workers[0].name", "DNS label"),
    ("worker-name-duplicate",
     _set(f"{T0}.workers[1]", {"name": "worker-0", "gpus": [card("GPU-MOCK-A1")]}),
     f"{T0}.workers[1].name", "unique within a tenant"),
    ("node-name-too-long",
     _many(_set(f"{T0}.name", "t" * 30), _set(f"{T0}.workers[0].name", "w" * 40)),
     f"{T0}.workers[0].name", "63"),
    ("card-uuid-duplicate-across-tenants", _set(f"{C10}.uuid", "GPU-MOCK-A0"), f"{C10}.uuid", "unique across the whole stack"),
    ("card-uuid-with-comma", _set(f"{C00}.uuid", "GPU,0"), f"{C00}.uuid", "separators"),
    ("card-model-with-colon", _set(f"{C00}.model", "NVIDIA:A100"), f"{C00}.model", "separators"),
    ("card-model-with-semicolon", _set(f"{C00}.model", "A100;x"), f"{C00}.model", "';'"),
    ("card-memory-zero", _set(f"{C00}.memoryMiB", 0), f"{C00}.memoryMiB", "greater than or equal to 1"),
    ("card-memory-not-a-number", _set(f"{C00}.memoryMiB", "lots"), f"{C00}.memoryMiB", "integer"),
    ("card-cores-over-100", _set(f"{C00}.cores", 101), f"{C00}.cores", "less than or equal to 100"),
    ("card-cores-zero", _set(f"{C00}.cores", 0), f"{C00}.cores", "greater than or equal to 1"),
    ("card-slots-zero", _set(f"{C00}.slots", 0), f"{C00}.slots", "greater than or equal to 1"),
    ("card-memory-missing", _delete(f"{C00}.memoryMiB"), f"{C00}.memoryMiB", "required"),
    ("worker-memory-over-mock-limit",
     _set("tenants[0].workers[0].gpus", [card("G1", memory=60000), card("G2", memory=40000)]),
     "tenants[0].workers[0].gpus", str(MAX_SIMULATED_MEMORY_MIB_PER_WORKER)),
    ("quota-negative", _set(f"{T0}.quota", {"gpus": -1}), f"{T0}.quota.gpus", "greater than or equal to 0"),
    ("quota-objects-unknown-kind", _set(f"{T0}.quota", {"objects": {"secret": 5}}), f"{T0}.quota.objects",
     "unknown kind 'secret': use one of pods, services, secrets"),
    ("quota-objects-negative", _set(f"{T0}.quota", {"objects": {"secrets": -1}}), f"{T0}.quota.objects.secrets",
     "greater than or equal to 0"),
    ("namespace-of-the-smoke-test", _set(f"{T0}.namespaces", ["default", "gpu-tenancy-smoke"]), f"{T0}.namespaces[1]",
     "namespace of the GPU smoke test"),
    ("gpu-mode-unknown", _set("gpuMode", "amd"), "gpuMode", "'mock' or 'nvidia'"),
    ("smoke-test-does-not-fit", _set("smokeTest", {"memoryMiB": 9000}), "smokeTest", "tenants[0]"),
    ("smoke-test-needs-two-cards", _set("smokeTest", {"gpus": 2}), "smokeTest", "2 card(s) on one worker"),
    ("smoke-test-cores-over-100", _set("smokeTest", {"cores": 150}), "smokeTest.cores", "100"),
    ("smoke-test-unknown-key", _set("smokeTest", {"memory": 1}), "smokeTest.memory", "did you mean 'memoryMiB'"),
    ("management-cluster-name-invalid", _set("management", {"clusterName": "My Cluster"}), "management.clusterName", "DNS label"),
    ("versions-unknown-key", _set("versions", {"hamiChart": "2.10.0"}), "versions.hamiChart", "unknown key"),
    ("namespace-not-a-label", _set(f"{T0}.namespaces", ["ML_team"]), f"{T0}.namespaces[0]", "DNS label"),
    ("namespaces-empty", _set(f"{T0}.namespaces", []), f"{T0}.namespaces", "at least 1"),
    ("data-store-replicas", _set(f"{T0}.dataStore", {"dedicated": True, "replicas": 2}), f"{T0}.dataStore.replicas",
     "1 or 3"),
    ("data-store-size", _set(f"{T0}.dataStore", {"dedicated": True, "storageSize": "10GB"}),
     f"{T0}.dataStore.storageSize", "pattern"),
    ("data-store-quota-tiny", _set(f"{T0}.dataStore", {"dedicated": True, "quotaMiB": 10}), f"{T0}.dataStore.quotaMiB",
     "greater than or equal to 64"),
    ("node-image-with-spaces", _set(f"{T0}.nodeImage", "kindest/node v1.35.0"), f"{T0}.nodeImage", "pattern"),
    ("nvidia-runtime-class-not-a-label", _many(_set("gpuMode", "nvidia"), _set("nvidia", {"runtimeClassName": "N V"})),
     "nvidia.runtimeClassName", "DNS label"),
    ("configure-containerd-without-mirrors", _set("management", {"configureContainerd": True}),
     "management.configureContainerd", "only applies with management.registryMirrors"),
]



@pytest.mark.parametrize("mutate, path, text", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_config_names_the_key(mutate, path, text):
    raw = base()
    mutate(raw)
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    message = str(caught.value)
    assert any(issue.path == path for issue in caught.value.issues), message
    assert f"  - {path}" in message
    assert text in message


def test_error_shows_the_bad_value_and_the_fix_location():
    raw = base()
    raw["tenants"][1]["workers"][0]["gpus"][0]["cores"] = 250
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    message = str(caught.value)
    assert "tenants[1].workers[0].gpus[0].cores = 250" in message
    assert "less than or equal to 100" in message
    assert "Pulumi.<stack>.yaml" in message


def test_the_fix_line_names_the_stack_when_it_is_known():
    # The validator once printed `Pulumi.<stack>.yaml` although the stack was known.
    raw = base()
    raw["tenants"][0]["workers"][0]["gpus"][0]["cores"] = 250
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw, stack="lab")
    error = caught.value
    assert str(error) == f"{error.problems}\n{error.fix}"
    assert error.fix.startswith("Fix these keys in Pulumi.lab.yaml under 'gpu-tenancy:' (or with `pulumi config set "
                                "--stack lab --path 'gpu-tenancy:<key path>' <value>`)")
    assert "<stack>" not in str(error) and "Fix these keys" not in error.problems
    assert str(error.for_stack("prod")).endswith(ConfigError(error.issues, "prod").fix)


def test_the_program_names_its_own_stack_in_the_fix_line():
    raw = base()
    raw["tenantz"] = []
    with pytest.raises(ProgramFailedError) as failed:
        run_program(raw, stack="lab")
    assert "Fix these keys in Pulumi.lab.yaml" in str(failed.value) and "<stack>" not in str(failed.value)


def test_field_errors_and_checks_across_fields_are_reported_in_one_round():
    raw = base()
    # Field errors ...
    raw["tenants"][0]["podCIDR"] = raw["tenants"][0].pop("podCidr")
    raw["tenants"][0]["workers"][0]["gpus"][0]["cores"] = 0
    raw["tenants"][1]["kubernetesVersion"] = "v1.29.0"
    raw["gpuMode"] = "amd"
    # ... and checks across fields, of what did validate.
    raw["tenants"][1]["workers"][0]["gpus"][0]["uuid"] = "GPU-MOCK-A0"
    raw["tenants"][1]["namespaces"] = ["ml", "ml"]
    raw["tenants"][0]["namespaces"] = ["gpu-tenancy-smoke"]
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    paths = [issue.path for issue in caught.value.issues]
    assert sorted(paths) == sorted([
        "tenants[0].podCIDR",
        "tenants[0].workers[0].gpus[0].cores",
        "tenants[1].kubernetesVersion",
        "gpuMode",
        "tenants[1].workers[0].gpus[0].uuid",
        "tenants[1].namespaces[1]",
        "tenants[0].namespaces[0]",
    ])
    assert "(7 problems)" in str(caught.value)


def test_cross_field_errors_are_collected_together():
    raw = base()
    raw["tenants"][1]["name"] = "tenant-a"
    raw["tenants"][1]["workers"][0]["gpus"][0]["uuid"] = "GPU-MOCK-A0"
    raw["tenants"][1]["podCidr"] = "10.244.0.0/16"
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    paths = {issue.path for issue in caught.value.issues}
    assert {"tenants[1].name", "tenants[1].workers[0].gpus[0].uuid", "tenants[1].podCidr"} <= paths


def test_config_error_is_a_pulumi_run_error():
    # `pulumi up` prints a RunError as its message, without a Python traceback.
    with pytest.raises(ConfigError) as caught:
        load_stack_config({"tenants": []})
    assert isinstance(caught.value, pulumi.RunError)


def test_nvidia_mode_lifts_the_simulated_memory_limit_on_gpu_servers():
    raw = base()
    raw["gpuMode"] = "nvidia"
    for index, tenant in enumerate(raw["tenants"]):
        server = tenant["workers"][0]
        server["gpus"] = [card(f"G{index}-0", memory=81920), card(f"G{index}-1", memory=81920)]
        server["ssh"] = {"host": f"10.20.1.{index + 1}", "privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n"
                         "-----END OPENSSH PRIVATE KEY-----", "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINJAVk8cjC8aGmQSu4AT5Q2uZbbNS910g/eS4N8FDn+r"}
    assert sum(c["memoryMiB"] for c in raw["tenants"][0]["workers"][0]["gpus"]) >= MAX_SIMULATED_MEMORY_MIB_PER_WORKER
    assert load_stack_config(raw, {"tenants"}).gpu_mode == "nvidia"


def test_disabled_smoke_test_needs_no_fitting_card():
    raw = base()
    raw["smokeTest"] = {"enabled": False, "memoryMiB": 99999}
    assert load_stack_config(raw).smoke_test.enabled is False


@pytest.mark.parametrize("mutate, path, text", [c[1:] for c in INVALID[:4]], ids=[c[0] for c in INVALID[:4]])
def test_the_program_fails_on_invalid_config_before_any_resource(mutate, path, text):
    raw = base()
    mutate(raw)
    with pytest.raises(ProgramFailedError) as failed:
        run_program(raw)
    plan = str(failed.value)
    assert "error: program failed: ConfigError: invalid 'gpu-tenancy' stack configuration" in plan
    assert f"  - {path}" in plan and text in plan
    # Nothing was registered, so nothing is planned.
    assert "to create" not in plan and "    0 unchanged" in plan


def test_the_program_reads_unknown_top_level_keys_from_the_pulumi_config():
    raw = base()
    raw["tenantz"] = []
    with pytest.raises(ProgramFailedError, match=r"tenantz: unknown key 'tenantz'.*did you mean 'tenants'"):
        run_program(raw)


def test_the_smoke_test_fits_a_worker_only_with_enough_cards_on_that_worker():
    raw = base()
    del raw["tenants"][1]
    tenant = raw["tenants"][0]
    tenant["workers"] = [
        {"name": "one-big", "gpus": [card("G-1", memory=8192)]},
        {"name": "two-slow", "gpus": [card("G-2", memory=8192, cores=20), card("G-3", memory=8192, cores=20)]},
        {"name": "two-exact", "gpus": [card("G-4", memory=3000, cores=30), card("G-5", memory=3000, cores=30)]},
    ]
    raw["smokeTest"] = {"gpus": 2, "memoryMiB": 3000, "cores": 30}
    config = load_stack_config(raw)
    smoke, workers = config.smoke_test, config.tenants[0].workers
    # Two cards on one worker, each with the memory and cores asked for (exactly enough counts).
    assert [smoke.fits(worker) for worker in workers] == [False, False, True]
    assert smoke.worker_in(config.tenants[0]).name == "two-exact"
    # Cards spread over two workers do not add up.
    tenant["workers"] = tenant["workers"][:1] + [{"name": "other", "gpus": [card("G-6")]}]
    with pytest.raises(ConfigError, match=r"fits on no worker of tenants\[0\]"):
        load_stack_config(raw)


# --- one problem, one message ------------------------------------------------------------------------------------

def problems(raw):
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    return [str(issue) for issue in caught.value.issues]


def test_a_misspelt_required_key_is_one_problem():
    raw = base()
    gpu = raw["tenants"][0]["workers"][0]["gpus"][0]
    gpu["memoryMib"] = gpu.pop("memoryMiB")
    (only,) = problems(raw)
    assert only.startswith("tenants[0].workers[0].gpus[0].memoryMib: unknown key 'memoryMib'")
    assert only.endswith("did you mean 'memoryMiB'?")


def test_a_refused_card_does_not_also_fail_the_smoke_test_fit():
    raw = base()
    raw["tenants"][0]["workers"][0]["gpus"][0]["memoryMiB"] = 0
    assert problems(raw) == [
        "tenants[0].workers[0].gpus[0].memoryMiB = 0: Input should be greater than or equal to 1"]


def test_the_smoke_test_fit_is_still_judged_for_the_other_tenants():
    raw = base()
    raw["tenants"][0]["workers"][0]["gpus"][0]["memoryMiB"] = 0
    raw["tenants"][1]["workers"][0]["gpus"][0]["memoryMiB"] = 1024
    paths = [p.split(":")[0].split(" = ")[0] for p in problems(raw)]
    assert paths == ["tenants[0].workers[0].gpus[0].memoryMiB", "smokeTest"]
    assert "fits on no worker of tenants[1] ('tenant-b')" in problems(raw)[1]


@pytest.mark.parametrize("quota", [{"gpus": 0}, {"memoryMiB": 1000}, {"cores": 10}, {"gpus": 1, "memoryMiB": 3000}])
def test_a_quota_is_not_judged_against_the_smoke_test_whose_namespace_it_does_not_cover(quota):
    # A quota applies to the tenant's namespaces only, and the smoke pod runs in its own namespace, which
    # cannot be one of them: a quota below (or equal to) the request neither blocks the proof nor is spent by it.
    raw = base()
    raw["tenants"][0]["quota"] = quota
    config = load_stack_config(raw)
    assert config.smoke_test.enabled and (config.smoke_test.memory_mib, config.smoke_test.cores) == (3000, 30)
    assert config.tenants[0].quota.model_dump(by_alias=True, exclude_none=True) == quota


def test_a_tenant_refused_whole_keeps_the_others_paths():
    raw = base()
    del raw["tenants"][0]["name"]  # required: the whole tenant is set aside
    raw["tenants"][1]["namespaces"] = ["ml", "ml"]
    assert problems(raw) == ["tenants[0].name: required key is missing", "tenants[1].namespaces[1] = 'ml': is listed twice"]


def test_refused_tenants_are_removed_in_index_order_beyond_ten():
    raw = base()
    raw["tenants"] = [raw["tenants"][0]] + [
        {"name": f"t{i}", "workers": [{"name": "w", "gpus": [card(f"G-{i}")]}]} for i in range(1, 12)
    ]
    for index in (2, 10):
        del raw["tenants"][index]["name"]
    raw["tenants"][11]["namespaces"] = ["ml", "ml"]
    assert problems(raw) == ["tenants[2].name: required key is missing", "tenants[10].name: required key is missing",
                             "tenants[11].namespaces[1] = 'ml': is listed twice"]


def test_an_unquoted_version_says_to_write_it_as_a_string():
    # `kubernetesVersion: 1.35` is a float to YAML, and the error must say to quote it.
    raw = base()
    raw["tenants"][0]["kubernetesVersion"] = 1.35
    raw["versions"] = {"hami": 2.1}
    assert problems(raw) == [
        "tenants[0].kubernetesVersion = 1.35: YAML reads this as a number: write it as a string like v1.35.0",
        "versions.hami = 2.1: YAML reads this as a number: write it as a string like 2.10.0",
    ]


def test_an_unquoted_yes_or_number_without_a_default_says_to_quote_it():
    raw = base()
    raw["tenants"][0]["workers"][0]["name"] = True
    raw["tenants"][1]["name"] = 123
    assert problems(raw) == [
        "tenants[0].workers[0].name = True: YAML reads this as a boolean: write it as a string, in quotes",
        "tenants[1].name = 123: YAML reads this as a number: write it as a string, in quotes",
    ]


def _ssh_lab():
    raw = base()
    raw["tenants"][0]["workers"][0]["ssh"] = {
        "host": "10.20.1.1", "privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----",
        "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINJAVk8cjC8aGmQSu4AT5Q2uZbbNS910g/eS4N8FDn+r"}
    return raw


def test_a_plain_http_mirror_for_ssh_workers_is_refused_unless_allowed_explicitly():
    raw = _ssh_lab()
    raw["management"] = {"registryMirrors": {"docker.io": "http://mirror.corp:5000",
                                             "quay.io": "https://quay-cache.corp"}}
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw, {"tenants"})
    (issue,) = caught.value.issues
    assert issue.path == "management.registryMirrors.docker.io"
    assert "plain HTTP" in issue.message and "management.allowHttpMirrors: true" in issue.message
    raw["management"]["allowHttpMirrors"] = True
    assert load_stack_config(raw, {"tenants"}).management.allow_http_mirrors is True
    raw["management"] = {"registryMirrors": {"docker.io": "https://mirror.corp"}}
    assert load_stack_config(raw, {"tenants"}).management.registry_mirrors == {"docker.io": "https://mirror.corp"}


@pytest.mark.parametrize("path, key", [("management", "nodeImage"), ("tenants[0]", "nodeImage")])
def test_a_node_image_without_a_digest_is_refused_unless_unpinned_images_are_allowed(path, key):
    raw = base()
    target = raw.setdefault("management", {}) if path == "management" else raw["tenants"][0]
    target[key] = "kindest/node:v1.35.0"
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    (issue,) = caught.value.issues
    assert issue.path == f"{path}.{key}"
    assert "not pinned by digest" in issue.message and "management.allowUnpinnedNodeImages: true" in issue.message
    target[key] = KIND_NODE_IMAGES["v1.35.0"]
    load_stack_config(raw)
    target[key] = "kindest/node:v1.35.0"
    raw.setdefault("management", {})["allowUnpinnedNodeImages"] = True
    assert load_stack_config(raw).management.allow_unpinned_node_images is True
