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


# A container node's network tools: `ip` answers as on a worker on the kind network, `iptables` keeps its rules in
# a file and answers -C from it (as iptables does), `systemctl` only logs; every call lands in $CALLS.
NODE_TOOLS = {
    "ip": """#!/bin/bash
echo "ip $*" >>"$CALLS"
case "$*" in
  "-4 route show default") echo "default via 172.18.0.1 dev eth0" ;;
  "-4 -o addr show dev eth0") echo "2: eth0    inet 172.18.0.5/16 brd 172.18.255.255 scope global eth0" ;;
esac
""",
    "iptables": r"""#!/bin/bash
echo "iptables $*" >>"$CALLS"
rules="$CALLS.rules"; touch "$rules"
all="$*"; args="${all#-w -t mangle }"
case "$args" in
  -N*) grep -qx -- ":${args#-N }" "$rules" && exit 1; echo ":${args#-N }" >>"$rules" ;;
  -F\ *) chain="${args#-F }"; grep -v -- "^-A $chain " "$rules" >"$rules.new" || true; mv "$rules.new" "$rules" ;;
  -X\ *) grep -vx -- ":${args#-X }" "$rules" >"$rules.new" || true; mv "$rules.new" "$rules" ;;
  -C\ *) grep -qx -- "-A ${args#-C }" "$rules" ;;
  -A\ *) echo "$args" >>"$rules" ;;
  -I\ *) set -- ${args#-I }; chain="$1"; shift 2; echo "-A $chain $*" >>"$rules" ;;
  -D\ *) grep -qx -- "-A ${args#-D }" "$rules" || exit 1
        grep -vx -- "-A ${args#-D }" "$rules" >"$rules.new" || true; mv "$rules.new" "$rules" ;;
esac
""",
    "systemctl": """#!/bin/bash
echo "systemctl $*" >>"$CALLS"
""",
}


def node_tools(root: Path) -> tuple[str, Path]:
    """A PATH with NODE_TOOLS in front, and the file their calls are logged to."""
    bin_dir = root / "_tools"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in NODE_TOOLS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}", root / "_tools.calls"


def run(root: Path, mirrors: str, kind: str = ns.NODE_KIND_CONTAINER, path: str | None = None,
        extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    tools, calls = node_tools(root)
    env = {"PATH": path or tools, "CALLS": str(calls), ns.NODE_NAME_ENV: NODE, ns.REGISTRY_MIRRORS_ENV: mirrors,
           ns.NODE_ROOT_ENV: str(root), ns.NODE_KIND_ENV: kind, **(extra or {})}
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


# containerd's own files (tests/fixtures/containerd/README.txt): 1.7's default configuration as its
# `config dump` prints it (double-quoted strings), 2.x's documented default (single-quoted, config version 3), and
# 2.3's dump (config version 4) built from v2.3.4's sources.
FIXTURES = Path(__file__).parent / "fixtures" / "containerd"
DUMP_1_7 = (FIXTURES / "1.7-config-default.toml").read_text()
DUMP_2 = (FIXTURES / "2.x-cri-config-default.toml").read_text()
DUMP_2_3 = (FIXTURES / "2.3-config-dump.toml").read_text()
V2_REGISTRY = '[plugins."io.containerd.grpc.v1.cri".registry]\n      config_path = ""\n'
V3_REGISTRY = "[plugins.'io.containerd.cri.v1.images'.registry]\n      config_path = ''\n"
DROP_IN = "etc/containerd/conf.d/99-gpu-tenancy-mirrors.toml"


def with_config_path(dump: str, value: str) -> str:
    """`dump` with the CRI registry's config_path set to `value`: the one line an operator changes."""
    for section in (V2_REGISTRY, V3_REGISTRY):
        if section in dump:
            quote = section[section.index("=") + 2]
            return dump.replace(section, section.replace(f"{quote}{quote}", f"{quote}{value}{quote}"))
    raise AssertionError("no registry section in the dump")


def _node(tmp_path: Path, dump: str, *, imports_conf_d: bool = True) -> str:
    """A PATH with a `containerd` whose `config dump` prints `dump` -- with our drop-in's config_path merged in once
    the file exists, if config.toml exists and imports conf.d -- and a `systemctl` that records what it is asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "dump.toml").write_text(dump)
    stub = bin_dir / "containerd"
    drop_in, main = tmp_path / "root" / DROP_IN, tmp_path / "root/etc/containerd/config.toml"
    # containerd v2.3.4 cmd/containerd/server/config/config.go LoadConfigWithPlugins: no import newer than the root.
    merge = (f"[[ -f '{drop_in}' && -f '{main}' && {int(imports_conf_d)} == 1 ]] || exec cat '{tmp_path}/dump.toml'\n"
             f"v() {{ sed -n 's/^version = //p' \"$1\"; }}\n"
             f"(( $(v '{drop_in}') <= $(v '{main}') )) || {{ echo 'drop-in config version higher' >&2; exit 1; }}\n"
             f"exec sed \"/^ *\\[plugins.'io.containerd.cri.v1.images'.registry\\]/{{n;s|config_path = .*|"
             f"config_path = '/etc/containerd/certs.d'|}}\" '{tmp_path}/dump.toml'\n")
    stub.write_text("#!/bin/bash\n[[ \"$1 $2\" == 'config dump' ]] || exit 2\n" + merge)
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(f"#!/bin/bash\necho \"$*\" >>'{tmp_path}/systemctl.log'\n")
    for tool in (stub, systemctl):
        tool.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def machine(tmp_path: Path, dump: str, mirrors: str | None = None, *, configure: bool = False,
            imports_conf_d: bool = True) -> subprocess.CompletedProcess[str]:
    env = {ns.CONFIGURE_CONTAINERD_ENV: "true"} if configure else {}
    return run(tmp_path / "root", mirror_lines(MIRRORS) if mirrors is None else mirrors, ns.NODE_KIND_MACHINE,
               _node(tmp_path, dump, imports_conf_d=imports_conf_d), env)


def systemctl_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "systemctl.log"
    return log.read_text().splitlines() if log.exists() else []


def ends_with(stderr: str, *lines: str) -> bool:
    """Whether a refusal ends with exactly these lines to change, indented."""
    return stderr.endswith("".join(f"    {line}\n" for line in lines))


V3_FIX = ("[plugins.'io.containerd.cri.v1.images'.registry]", "config_path = '/etc/containerd/certs.d'")


def with_main(tmp_path: Path, text: str) -> None:
    (tmp_path / "root/etc/containerd").mkdir(parents=True, exist_ok=True)
    (tmp_path / "root/etc/containerd/config.toml").write_text(text)


def test_containerd_1_7s_default_ignores_certs_d_and_is_refused_with_the_line_to_change(tmp_path):
    done = machine(tmp_path, DUMP_1_7)

    assert done.returncode == 1
    assert "its config_path is '', which does not name /etc/containerd/certs.d" in done.stderr
    assert ends_with(done.stderr, '[plugins."io.containerd.grpc.v1.cri".registry]',
                     'config_path = "/etc/containerd/certs.d"')
    assert "restart containerd" in done.stderr and "management.configureContainerd" not in done.stderr
    assert not (tmp_path / "root" / "etc").exists()


def test_containerd_1_7_with_certs_d_in_its_list_gets_the_files(tmp_path):
    done = machine(tmp_path, with_config_path(DUMP_1_7, "/etc/containerd/certs.d:/etc/docker/certs.d"))

    assert done.returncode == 0, done.stderr
    assert set(files(tmp_path / "root")) == {f"{registry}/hosts.toml" for registry in MIRRORS}


def test_containerd_2s_default_is_refused_with_the_single_quoted_line(tmp_path):
    done = machine(tmp_path, DUMP_2)

    assert done.returncode == 1
    assert "config_path is empty and it pulls through the transfer service" in done.stderr
    assert ends_with(done.stderr, *V3_FIX)
    assert "management.configureContainerd: true" in done.stderr
    assert not (tmp_path / "root" / "etc").exists()


def test_containerd_2_3s_default_is_refused_for_its_two_directory_default(tmp_path):
    # containerd 2.3 prints config version 4 and an empty config_path, which its CRI plugin reads as the list
    # /etc/containerd/certs.d:/etc/docker/certs.d (v2.3.0 plugins/cri/images/plugin.go).
    done = machine(tmp_path, DUMP_2_3)

    assert done.returncode == 1
    assert ("reads config_path as one directory, and config_path is '' (containerd 2.3 reads that as"
            " '/etc/containerd/certs.d:/etc/docker/certs.d')" in done.stderr)
    assert ends_with(done.stderr, *V3_FIX)
    assert "management.configureContainerd: true" in done.stderr


@pytest.mark.parametrize("dump", [DUMP_2, DUMP_2_3], ids=["2.x", "2.3"])
def test_containerd_2s_two_directory_list_is_refused_where_the_transfer_service_pulls(tmp_path, dump):
    # containerd 2.2.0's default: the transfer service takes the whole list as one directory (containerd#12415).
    done = machine(tmp_path, with_config_path(dump, "/etc/containerd/certs.d:/etc/docker/certs.d"))

    assert done.returncode == 1
    assert "reads config_path as one directory, and config_path is '/etc/containerd/certs.d:/etc/docker/certs.d'" \
        in done.stderr


@pytest.mark.parametrize("dump", [DUMP_2, DUMP_2_3], ids=["2.x", "2.3"])
@pytest.mark.parametrize("local_pull", ["use_local_image_pull = true", "discard_unpacked_layers = true"])
def test_containerd_2_pulling_locally_reads_the_list(tmp_path, local_pull, dump):
    dump = with_config_path(dump, "/etc/containerd/certs.d:/etc/docker/certs.d")
    key = local_pull.split(" = ")[0]
    dump = dump.replace(f"{key} = false", local_pull)
    assert local_pull in dump

    done = machine(tmp_path, dump)

    assert done.returncode == 0, done.stderr


def test_containerd_2_3_pulling_locally_reads_its_default(tmp_path):
    done = machine(tmp_path, DUMP_2_3.replace("use_local_image_pull = false", "use_local_image_pull = true"))

    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("dump", [DUMP_2, DUMP_2_3], ids=["2.x", "2.3"])
def test_containerd_2_with_certs_d_single_quoted_gets_the_files(tmp_path, dump):
    done = machine(tmp_path, with_config_path(dump, "/etc/containerd/certs.d"))

    assert done.returncode == 0, done.stderr
    assert set(files(tmp_path / "root")) == {f"{registry}/hosts.toml" for registry in MIRRORS}
    assert systemctl_calls(tmp_path) == []


def with_registry_table(dump: str, table: str, body: str) -> str:
    """`dump` with one entry under its CRI registry's `table`, as `config dump` prints it."""
    v2 = '      [plugins."io.containerd.grpc.v1.cri".registry.mirrors]\n'
    if v2 in dump:
        return dump.replace(v2, f'{v2}        [plugins."io.containerd.grpc.v1.cri".registry.{table}."docker.io"]\n'
                                f'          {body}\n')
    return dump.replace(V3_REGISTRY, f"{V3_REGISTRY}\n      [plugins.'io.containerd.cri.v1.images'.registry.{table}]\n"
                                     f"        [plugins.'io.containerd.cri.v1.images'.registry.{table}.'docker.io']\n"
                                     f"          {body}\n")


@pytest.mark.parametrize("dump", [DUMP_1_7, DUMP_2, DUMP_2_3], ids=["1.7", "2.x", "2.3"])
def test_registry_mirrors_in_config_toml_are_refused_and_never_configured(tmp_path, dump):
    # containerd refuses config_path next to registry.mirrors (v2.3.4 internal/cri/config/config.go
    # ValidateImageConfig; 1.7 pkg/cri/config/config.go), so a drop-in would stop its CRI image service.
    with_main(tmp_path, "version = 3\nimports = ['/etc/containerd/conf.d/*.toml']\n")
    quote = "'" if "'io.containerd" in dump else '"'
    done = machine(tmp_path, with_registry_table(dump, "mirrors", f"endpoint = [{quote}https://m.corp{quote}]"),
                   configure=True)

    assert done.returncode == 1
    assert "its CRI registry has mirrors of its own (registry.mirrors), and containerd refuses config_path" \
        in done.stderr
    assert ("Move each into /etc/containerd/certs.d/<registry>/hosts.toml and delete the registry.mirrors tables. Then"
            " make this change") in done.stderr
    assert ends_with(done.stderr, "config_path = '/etc/containerd/certs.d'" if quote == "'"
                     else 'config_path = "/etc/containerd/certs.d"')
    assert not (tmp_path / "root" / DROP_IN).exists() and systemctl_calls(tmp_path) == []


@pytest.mark.parametrize("table", ["configs", "auths"])
def test_registry_configs_or_auths_make_containerd_2_pull_locally(tmp_path, table):
    # v2.3.4 internal/cri/config/config.go CheckLocalImagePullConfigs: either falls back to the local pull, which
    # reads a list, so 2.3's default one names certs.d and 2.x's empty one does not.
    body = "username = 'u'"
    (tmp_path / "2.3").mkdir(), (tmp_path / "2.x").mkdir()
    assert machine(tmp_path / "2.3", with_registry_table(DUMP_2_3, table, body)).returncode == 0
    done = machine(tmp_path / "2.x", with_registry_table(DUMP_2, table, body))

    assert done.returncode == 1
    assert "its config_path is '', which does not name /etc/containerd/certs.d" in done.stderr


def test_a_config_version_newer_than_2_3s_is_refused_and_never_configured(tmp_path):
    # A future version may move the CRI settings, as 3 did (v2.3.0 cmd/containerd/server/config/config.go).
    with_main(tmp_path, "version = 5\nimports = ['/etc/containerd/conf.d/*.toml']\n")
    done = machine(tmp_path, with_config_path(DUMP_2_3, "/etc/containerd/certs.d").replace("version = 4", "version = 5"),
                   configure=True)

    assert done.returncode == 1
    assert "shows config version '5'; this script knows 2 (containerd 1.x) to 4 (2.3)" in done.stderr
    assert "Drop this setting, or use a gpu-tenancy release that knows config version 5:" in done.stderr
    assert ends_with(done.stderr, "management.registryMirrors")
    assert not (tmp_path / "root" / DROP_IN).exists() and systemctl_calls(tmp_path) == []


V2_SECTION = '[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n'
V3_SECTION = "[plugins.'io.containerd.cri.v1.images'.registry]\n  config_path = '/etc/containerd/certs.d'\n"


@pytest.mark.parametrize(("dump", "version"), [(DUMP_2, 3), (DUMP_2, 2), (DUMP_2_3, 4), (DUMP_2_3, 3), (DUMP_2_3, 2)])
def test_when_allowed_containerd_2_gets_a_drop_in_of_its_config_version_and_a_restart(tmp_path, dump, version):
    # An import may not have a newer config version than config.toml; an older one is migrated (containerd v2.3.4
    # cmd/containerd/server/config/config.go LoadConfigWithPlugins): the drop-in takes config.toml's.
    with_main(tmp_path, f"version = {version}\nimports = ['/etc/containerd/conf.d/*.toml']\n")

    done = machine(tmp_path, dump, configure=True)

    assert done.returncode == 0, done.stderr
    drop_in = (tmp_path / "root" / DROP_IN).read_text()
    assert drop_in.startswith("# gpu-tenancy image mirror:")
    assert drop_in.split("\n", 1)[1] == f"version = {version}\n\n" + (V2_SECTION if version == 2 else V3_SECTION)
    assert tomllib.loads(drop_in)["version"] == version
    assert systemctl_calls(tmp_path) == ["restart containerd", "is-active --quiet containerd"]
    assert set(files(tmp_path / "root")) == {f"{registry}/hosts.toml" for registry in MIRRORS}

    # Once containerd reads certs.d, a second run changes nothing and restarts nothing.
    done = run(
        tmp_path / "root", mirror_lines(MIRRORS), ns.NODE_KIND_MACHINE, f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        {ns.CONFIGURE_CONTAINERD_ENV: "true"})
    assert done.returncode == 0, done.stderr
    assert systemctl_calls(tmp_path) == ["restart containerd", "is-active --quiet containerd"]

    # The delete action takes the drop-in back and restarts containerd.
    done = run(tmp_path / "root", "", ns.NODE_KIND_MACHINE, f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "root" / DROP_IN).exists() and files(tmp_path / "root") == {}
    assert systemctl_calls(tmp_path)[2:] == ["restart containerd", "is-active --quiet containerd"]


def test_without_a_config_toml_no_drop_in_is_written_and_the_file_to_create_is_named(tmp_path):
    # containerd reads imports only from an existing config.toml (v2.3.4 cmd/containerd/command/main.go).
    done = machine(tmp_path, DUMP_2_3, configure=True)

    assert done.returncode == 1
    assert "There is no " in done.stderr
    assert ends_with(done.stderr, "version = 4", *V3_FIX)
    assert not (tmp_path / "root" / DROP_IN).exists() and systemctl_calls(tmp_path) == []


@pytest.mark.parametrize("main", ["imports = ['/etc/containerd/conf.d/*.toml']\n", "version = 5\n"])
def test_a_config_toml_version_no_drop_in_can_match_is_refused(tmp_path, main):
    with_main(tmp_path, main)

    done = machine(tmp_path, DUMP_2_3, configure=True)

    assert done.returncode == 1
    assert "not 2 to 4, so no drop-in of gpu-tenancy can go with it" in done.stderr
    assert ends_with(done.stderr, *V3_FIX)
    assert not (tmp_path / "root" / DROP_IN).exists()


def test_a_drop_in_containerd_does_not_import_is_taken_back_and_the_imports_line_named(tmp_path):
    with_main(tmp_path, "version = 4\n")
    done = machine(tmp_path, DUMP_2_3, configure=True, imports_conf_d=False)

    assert done.returncode == 1
    assert "does not import /etc/containerd/conf.d/*.toml" in done.stderr
    assert ends_with(done.stderr, "imports = ['/etc/containerd/conf.d/*.toml']")
    assert not (tmp_path / "root" / DROP_IN).exists()
    assert systemctl_calls(tmp_path) == []


def test_containerd_1_7_is_never_configured(tmp_path):
    done = machine(tmp_path, DUMP_1_7, configure=True)

    assert done.returncode == 1
    assert "management.configureContainerd cannot: a file it imports replaces its whole CRI section" in done.stderr
    assert not (tmp_path / "root" / DROP_IN).exists() and systemctl_calls(tmp_path) == []


def test_a_foreign_file_at_the_drop_ins_path_is_refused(tmp_path):
    with_main(tmp_path, "version = 3\n")
    foreign = tmp_path / "root" / DROP_IN
    foreign.parent.mkdir(parents=True)
    foreign.write_text("version = 3\n")

    # Someone else's file there (which this containerd does not import): never overwritten.
    done = machine(tmp_path, DUMP_2, configure=True, imports_conf_d=False)

    assert done.returncode == 1
    assert "was not written by gpu-tenancy" in done.stderr and ends_with(done.stderr, *V3_FIX)
    assert foreign.read_text() == "version = 3\n"


def test_removing_the_files_needs_no_containerd_check(tmp_path):
    done = machine(tmp_path, DUMP_1_7, mirrors="")

    assert done.returncode == 0, done.stderr
    assert systemctl_calls(tmp_path) == []


def test_both_node_scripts_read_containerd_dumps_with_the_same_parser():
    """node-join.sh and node-mirrors.sh each run alone on the node, so each carries toml_flat: the same text."""
    def parser(name: str) -> str:
        text = ns.script_text(name)
        start = text.index("toml_flat() {")
        return text[start:text.index("\n}\n", start)]

    assert parser(ns.NODE_JOIN) == parser(ns.NODE_MIRRORS)


def test_a_plain_http_mirror_on_a_server_is_never_asked_to_resolve_tags(tmp_path):
    # containerd docs/hosts.md: `resolve` takes the mirror's tag -> digest answer; over HTTP anyone on the path can
    # give it. An https mirror keeps both capabilities; the lab's own http caches (container nodes) too.
    mirrors = {"docker.io": "http://mirror.corp:5000", "quay.io": "https://quay-cache.corp"}
    done = machine(tmp_path, with_config_path(DUMP_2, "/etc/containerd/certs.d"), mirror_lines(mirrors))
    assert done.returncode == 0, done.stderr
    written = files(tmp_path / "root")
    docker = tomllib.loads(written["docker.io/hosts.toml"])
    assert docker["host"] == {"http://mirror.corp:5000": {"capabilities": ["pull"]}}
    assert docker["server"] == "https://registry-1.docker.io"
    assert tomllib.loads(written["quay.io/hosts.toml"])["host"] == {
        "https://quay-cache.corp": {"capabilities": ["pull", "resolve"]}}
    for registry, mirror in mirrors.items():
        assert written[f"{registry}/hosts.toml"] == hosts_toml(registry, mirror, machine=True)
    lab = run(tmp_path / "lab", mirror_lines(MIRRORS))
    assert lab.returncode == 0, lab.stderr
    assert all('["pull", "resolve"]' in text for text in files(tmp_path / "lab").values())


def fence_rules(root: Path) -> list[str]:
    rules = root / "_tools.calls.rules"
    return rules.read_text().splitlines() if rules.exists() else []


def test_a_container_node_drops_forwarded_pod_traffic_to_the_caches_and_keeps_its_own_pulls(tmp_path):
    # Pods' connections leave masqueraded to the node's address (Calico natOutgoing), so only the node can tell
    # them from containerd's pulls: forwarded (a pod) versus the node's own output (containerd).
    done = run(tmp_path, mirror_lines(MIRRORS))
    assert done.returncode == 0, done.stderr
    assert fence_rules(tmp_path) == [":GPU-TENANCY-MIRRORS",
                                     "-A GPU-TENANCY-MIRRORS -d 172.18.0.5/16 -p tcp --dport 5000 -j DROP",
                                     "-A FORWARD -j GPU-TENANCY-MIRRORS"]
    assert not any("OUTPUT" in rule for rule in fence_rules(tmp_path))
    # Applied again at every boot of the node container (its network namespace is new then).
    unit = (tmp_path / "etc/systemd/system/gpu-tenancy-mirror-fence.service").read_text()
    assert "ExecStart=/usr/local/sbin/gpu-tenancy-mirror-fence" in unit and "WantedBy=multi-user.target" in unit
    calls = (tmp_path / "_tools.calls").read_text()
    assert "systemctl enable --quiet gpu-tenancy-mirror-fence.service" in calls
    # A re-run leaves exactly one rule per port and one jump.
    assert run(tmp_path, mirror_lines(MIRRORS)).returncode == 0
    assert len(fence_rules(tmp_path)) == 3


def test_the_delete_action_removes_the_fence_with_the_files(tmp_path):
    assert run(tmp_path, mirror_lines(MIRRORS)).returncode == 0
    done = run(tmp_path, "")
    assert done.returncode == 0, done.stderr
    assert fence_rules(tmp_path) == []
    assert not (tmp_path / "etc/systemd/system/gpu-tenancy-mirror-fence.service").exists()
    assert not (tmp_path / "usr/local/sbin/gpu-tenancy-mirror-fence").exists()


def test_a_server_gets_no_fence(tmp_path):
    # SSH workers pull through the operator's own mirrors (management.registryMirrors), not the lab's caches.
    done = machine(tmp_path, with_config_path(DUMP_2, "/etc/containerd/certs.d"))
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "root/etc/systemd/system/gpu-tenancy-mirror-fence.service").exists()
    assert systemctl_calls(tmp_path) == []
