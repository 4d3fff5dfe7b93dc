"""Secrets written on the operator's host: `ops.private_file`, `make backend` (ops.passphrase) and
`make kubeconfig` (ops.kubeconfig, against a stub `pulumi` CLI on PATH)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ops import hostcheck, kubeconfig, passphrase
from ops.private_file import write_private

ROOT = Path(__file__).resolve().parent.parent


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask():
    """The most permissive umask, so a mode that is right is right by the code, not by the umask."""
    previous = os.umask(0)
    yield
    os.umask(previous)


# --------------------------------------------------------------------------- #
# write_private
# --------------------------------------------------------------------------- #


def test_new_file_is_private_and_so_is_its_new_directory(tmp_path, open_umask):
    target = tmp_path / "config" / "gpu-tenancy" / "dev.passphrase"
    assert write_private(target, "secret\n") == target
    assert target.read_text() == "secret\n"
    assert mode(target) == 0o600
    assert mode(target.parent) == 0o700  # (missing grandparents are made like `mkdir -p`: umask's mode)
    assert sorted(p.name for p in target.parent.iterdir()) == ["dev.passphrase"]  # no temporary left


def test_existing_wider_file_is_replaced_with_mode_600(tmp_path, open_umask):
    target = tmp_path / "tenant.kubeconfig"
    target.write_text("old")
    target.chmod(0o644)
    before = target.stat().st_ino
    write_private(target, "new")
    assert target.read_text() == "new"
    assert mode(target) == 0o600
    assert target.stat().st_ino != before, "written in place, not replaced atomically (rename over the old file)"


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "tenant.kubeconfig"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_private(target, "half \ud800 written")  # fails while writing
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tenant.kubeconfig"]


# --------------------------------------------------------------------------- #
# ops.passphrase (`make backend`)
# --------------------------------------------------------------------------- #


def test_passphrase_is_generated_once_random_and_private(tmp_path, open_umask):
    first, second = tmp_path / "a" / "dev.passphrase", tmp_path / "b" / "dev.passphrase"
    assert passphrase.ensure_passphrase(first).startswith(f"generated {first}")
    passphrase.ensure_passphrase(second)
    value = first.read_text()
    assert value.endswith("\n") and len(value.strip()) >= 43  # secrets.token_urlsafe(32): 256 bits
    assert set(value.strip()) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert value != second.read_text()
    assert (mode(first), mode(first.parent)) == (0o600, 0o700)
    # Kept: it is the only key to the state's secrets.
    assert passphrase.ensure_passphrase(first) == ""
    assert first.read_text() == value


def test_passphrase_of_the_operator_is_kept_and_made_private(tmp_path):
    path = tmp_path / "dev.passphrase"
    path.write_text("my own passphrase\n")
    path.chmod(0o644)
    assert passphrase.ensure_passphrase(path) == f"{path}: was readable by others; now mode 600"
    assert path.read_text() == "my own passphrase\n"
    assert mode(path) == 0o600


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_empty_passphrase_file_is_filled(tmp_path, content):
    # What `umask 077 && cmd > file` leaves behind when cmd fails: a file holding nothing.
    path = tmp_path / "dev.passphrase"
    path.write_text(content)
    path.chmod(0o644)
    assert passphrase.ensure_passphrase(path).startswith("generated")
    assert len(path.read_text().strip()) >= 43
    assert mode(path) == 0o600


def test_passphrase_cli(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as usage:
        passphrase.main(["--no-such-option"])
    assert usage.value.code == 2
    assert "usage: python -m ops.passphrase" in capsys.readouterr().err
    monkeypatch.setenv("HOME", str(tmp_path))
    assert passphrase.main(["~/.config/gpu-tenancy/dev.passphrase"]) == 0
    path = tmp_path / ".config" / "gpu-tenancy" / "dev.passphrase"
    assert capsys.readouterr().out.startswith(f"generated {path}")
    assert mode(path) == 0o600
    # As the Makefile runs it: `$(PY) -m ops.passphrase "$PULUMI_CONFIG_PASSPHRASE_FILE"`.
    done = subprocess.run([sys.executable, "-m", "ops.passphrase", str(path)], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_without_a_path_the_exported_passphrase_file_is_used(tmp_path, monkeypatch, capsys):
    # As `make backend` runs it: the Makefile exports PULUMI_CONFIG_PASSPHRASE_FILE.
    path = tmp_path / "config" / "dev-abc.passphrase"
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE_FILE", str(path))
    assert passphrase.main(["--project-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"generated {path}")
    assert mode(path) == 0o600


@pytest.mark.parametrize("exported", [None, ""])
def test_an_operator_passphrase_in_the_environment_needs_no_file(tmp_path, monkeypatch, capsys, exported):
    # PULUMI_CONFIG_PASSPHRASE exported: the Makefile exports no file name, and nothing is written.
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    if exported is not None:
        monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE_FILE", exported)
    (tmp_path / passphrase.LEGACY_FILE).write_text("old\n")
    assert passphrase.main(["--project-dir", str(tmp_path)]) == 0
    assert capsys.readouterr() == ("", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == [passphrase.LEGACY_FILE]


def test_an_older_checkouts_passphrase_in_the_project_is_refused_with_the_command_that_moves_it(tmp_path, monkeypatch,
                                                                                                capsys):
    project, path = tmp_path / "project", tmp_path / "my config" / "dev-abc.passphrase"
    project.mkdir()
    (project / passphrase.LEGACY_FILE).write_text("the old key\n")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE_FILE", str(path))

    assert passphrase.main(["--project-dir", str(project), "--stack", "dev", "--state-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        "make backend: found .pulumi-passphrase in the project directory: move it out, next to nothing it protects:\n"
        f"  mkdir -p '{path.parent}' && mv .pulumi-passphrase '{path}'\n")
    assert not path.exists(), "a new passphrase would not decrypt the state the old one protects"
    # Once moved as told, it is the stack's passphrase (made private), and nothing new is generated.
    subprocess.run(f"mkdir -p '{path.parent}' && mv .pulumi-passphrase '{path}'", shell=True, cwd=project, check=True)
    assert passphrase.main(["--project-dir", str(project)]) == 0
    assert path.read_text() == "the old key\n" and mode(path) == 0o600


@pytest.mark.parametrize("legacy", ["", "kept\n"])
def test_a_project_passphrase_file_that_is_empty_or_already_moved_is_no_obstacle(tmp_path, monkeypatch, legacy):
    path = tmp_path / "dev.passphrase"
    if legacy:
        path.write_text("the stack's key\n")
    (tmp_path / passphrase.LEGACY_FILE).write_text(legacy)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE_FILE", str(path))
    assert passphrase.main(["--project-dir", str(tmp_path)]) == 0
    assert path.read_text().strip()


# --------------------------------------------------------------------------- #
# ops.kubeconfig (`make kubeconfig TENANT=<name> [ADMIN=1]`) against a stub pulumi CLI
# --------------------------------------------------------------------------- #

USER_KUBECONFIGS = {"alpha": "alpha user kubeconfig\n", "beta": "beta user kubeconfig\n"}
ADMIN_KUBECONFIGS = {"alpha": "alpha admin kubeconfig\n", "beta": "beta admin kubeconfig\n"}

STUB = """\
#!{python}
import json, os, sys
state = {state!r}
with open(os.path.join(state, "calls"), "a") as calls:
    calls.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd()}}) + "\\n")
script = json.load(open(os.path.join(state, "script.json")))
sys.stdout.write(script["stdout"].get(sys.argv[3], "") if isinstance(script["stdout"], dict) else script["stdout"])
sys.stderr.write(script["stderr"])
sys.exit(script["code"])
"""


class StubPulumi:
    """A `pulumi` on PATH that records its calls and answers `pulumi stack output <name> ...` from a script."""

    def __init__(self, directory: Path):
        self.bin = directory / "bin"
        self.bin.mkdir(parents=True)
        self.state = directory / "state"
        self.state.mkdir()
        stub = self.bin / "pulumi"
        stub.write_text(STUB.format(python=sys.executable, state=str(self.state)))
        stub.chmod(0o755)
        self.answer(stdout={"tenantKubeconfigs": json.dumps(USER_KUBECONFIGS, indent=4),
                            "tenantAdminKubeconfigs": json.dumps(ADMIN_KUBECONFIGS, indent=4)})

    def answer(self, stdout: dict[str, str] | str = "", stderr: str = "", code: int = 0) -> None:
        (self.state / "script.json").write_text(json.dumps({"stdout": stdout, "stderr": stderr, "code": code}))

    @property
    def calls(self) -> list[dict]:
        path = self.state / "calls"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def pulumi(tmp_path, monkeypatch) -> StubPulumi:
    stub = StubPulumi(tmp_path / "stub")
    monkeypatch.setenv("PATH", f"{stub.bin}{os.pathsep}{os.environ.get('PATH', '')}")
    return stub


@pytest.fixture
def out(tmp_path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


def test_user_kubeconfig_is_written_private_from_the_stack_output(pulumi, out, capsys, open_umask, monkeypatch):
    monkeypatch.chdir(out)  # `make -C` or a shell elsewhere: pulumi must still run in the project
    assert kubeconfig.main(["--stack", "dev", "--tenant", "alpha"], directory=out) == 0
    written = out / "alpha.kubeconfig"
    assert written.read_text() == USER_KUBECONFIGS["alpha"]
    assert mode(written) == 0o600
    assert sorted(p.name for p in out.iterdir()) == ["alpha.kubeconfig"]
    [call] = pulumi.calls
    assert call["argv"] == ["stack", "output", "tenantKubeconfigs", "--show-secrets", "--json", "--stack", "dev"]
    assert Path(call["cwd"]) == ROOT and (ROOT / "Pulumi.yaml").is_file()  # where the project is
    printed = capsys.readouterr().out
    assert "wrote alpha.kubeconfig (tenant user credentials" in printed
    assert "KUBECONFIG=alpha.kubeconfig kubectl get pods" in printed


def test_admin_kubeconfig_comes_from_the_admin_output(pulumi, out, capsys):
    assert kubeconfig.main(["--stack", "prod", "--tenant", "beta", "--admin"], directory=out) == 0
    assert (out / "beta-admin.kubeconfig").read_text() == ADMIN_KUBECONFIGS["beta"]
    assert mode(out / "beta-admin.kubeconfig") == 0o600
    assert pulumi.calls[0]["argv"][2:3] == ["tenantAdminKubeconfigs"]
    assert pulumi.calls[0]["argv"][-2:] == ["--stack", "prod"]
    assert "tenant ADMIN credentials" in capsys.readouterr().out


def test_an_existing_kubeconfig_readable_by_others_is_replaced_with_mode_600(pulumi, out):
    stale = out / "alpha.kubeconfig"
    stale.write_text("stale")
    stale.chmod(0o644)
    assert kubeconfig.main(["--stack", "dev", "--tenant", "alpha"], directory=out) == 0
    assert stale.read_text() == USER_KUBECONFIGS["alpha"]
    assert mode(stale) == 0o600


def test_unknown_tenant_lists_the_known_ones_and_writes_nothing(pulumi, out, capsys):
    kept = out / "gamma.kubeconfig"
    kept.write_text("from an earlier stack")
    assert kubeconfig.main(["--stack", "dev", "--tenant", "gamma"], directory=out) == 2
    assert capsys.readouterr().err == "make kubeconfig: stack 'dev' has no tenant 'gamma' (its tenants: alpha, beta)\n"
    assert kept.read_text() == "from an earlier stack"  # not truncated to 0 bytes
    assert sorted(p.name for p in out.iterdir()) == ["gamma.kubeconfig"]


def test_stack_without_tenants_says_none(pulumi, out, capsys):
    pulumi.answer(stdout="{}\n")
    assert kubeconfig.main(["--stack", "dev", "--tenant", "alpha"], directory=out) == 2
    assert "(its tenants: none)" in capsys.readouterr().err
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("stdout", ["", "null\n", "[]\n", "not json\n"])
def test_stack_without_the_output_asks_for_make_up(pulumi, out, capsys, stdout):
    pulumi.answer(stdout=stdout)
    assert kubeconfig.main(["--stack", "dev", "--tenant", "alpha"], directory=out) == 2
    assert capsys.readouterr().err == "make kubeconfig: stack 'dev' has no tenantKubeconfigs output yet: run `make up` first\n"
    assert list(out.iterdir()) == []


def test_failing_pulumi_shows_its_stderr_never_its_stdout(pulumi, out, capsys):
    pulumi.answer(stdout='{"alpha": "LEAKED-SECRET"}', stderr="error: no stack named 'dev' found\n", code=255)
    assert kubeconfig.main(["--stack", "dev", "--tenant", "alpha"], directory=out) == 2
    captured = capsys.readouterr()
    assert captured.err == ("make kubeconfig: `pulumi stack output tenantKubeconfigs` failed: "
                            "error: no stack named 'dev' found\n")
    assert "LEAKED-SECRET" not in captured.out + captured.err
    assert list(out.iterdir()) == []


def test_long_pulumi_errors_are_cut_to_their_end(pulumi, out, capsys):
    pulumi.answer(stderr="x" * 1000 + "\n  the cause", code=1)
    assert kubeconfig.main(["--stack", "dev", "--tenant", "alpha"], directory=out) == 2
    err = capsys.readouterr().err
    assert err.endswith("x the cause\n") and len(err) < 500


def test_no_pulumi_cli(out, monkeypatch, tmp_path, capsys):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert kubeconfig.main(["--stack", "dev", "--tenant", "alpha"], directory=out) == 2
    assert capsys.readouterr().err == f"make kubeconfig: {hostcheck.PULUMI_MISSING}\n"
    assert list(out.iterdir()) == []


def test_kubeconfig_cli_requires_stack_and_tenant(pulumi, out):
    # `python -m ops.kubeconfig` as the Makefile runs it; argparse refuses before anything is asked or written.
    done = subprocess.run([sys.executable, "-m", "ops.kubeconfig", "--stack", "dev"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "the following arguments are required: --tenant" in done.stderr
    assert pulumi.calls == []
    assert done.stderr.startswith("usage: make kubeconfig")


def test_no_new_passphrase_for_a_stack_that_already_has_state(tmp_path, capsys):
    """The file name carries a hash of the project path: after a move, a fresh passphrase would not open the state."""
    state = tmp_path / "project" / ".pulumi-state"
    (state / ".pulumi" / "stacks" / "gpu-tenancy").mkdir(parents=True)
    (state / ".pulumi" / "stacks" / "gpu-tenancy" / "dev.json").write_text("{}")
    config = tmp_path / "config"
    config.mkdir()
    old = config / "dev-aaaaaaaaaaaa.passphrase"
    old.write_text("the old one\n")
    new = config / "dev-bbbbbbbbbbbb.passphrase"
    assert passphrase.main([str(new), "--stack", "dev", "--state-dir", str(state)]) == 1
    err = capsys.readouterr().err
    assert "already has state" in err and str(old) in err and not new.exists()
    new.write_text("the old one\n")  # copied as told
    assert passphrase.main([str(new), "--stack", "dev", "--state-dir", str(state)]) == 0
    # Another stack without state gets its passphrase generated.
    assert passphrase.main([str(config / "prod-cccccccccccc.passphrase"), "--stack", "prod",
                            "--state-dir", str(state)]) == 0
