"""ops/upstream.py: fetch/verify against a local HTTP server, and the consistency of the real manifest.

No test here touches the network: downloads go to a threaded http.server on 127.0.0.1 started by the test,
and the default base URL is pointed at a closed local port.
"""

import hashlib
import http.server
import json
import os
import re
import socket
import threading
import urllib.error
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

import pytest

from config import Versions
from ops import upstream
from tests.conftest import SHARED, UPSTREAM_MISSING, locate_vendor_dir
from tests.support.readme import all_text

REF_A = "a" * 40
REF_B = "b" * 40
# Synthetic upstream content: repo -> ref -> path -> bytes.
CONTENT = {
    "example/data": {
        REF_A: {
            "charts/demo/values.yaml": b"replicas: 1\n",
            "crds/demo.example.io_things.yaml": b"kind: CustomResourceDefinition\n" * 50,
            "config.toml": b"",  # empty file: a legal upstream file too
        }
    },
    "example/chart": {
        REF_B: {
            "charts/demo/Chart.yaml": b"apiVersion: v2\nname: demo\nversion: 1.2.3\n",
            "charts/demo/templates/cm.yaml": b"kind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n",
            "charts/demo/path with space+plus.txt": b"odd name\n",
        }
    },
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def synthetic_manifest() -> list[dict]:
    data = CONTENT["example/data"][REF_A]
    chart = CONTENT["example/chart"][REF_B]
    entries = [
        {"group": "reference", "repo": "example/data", "ref": REF_A, "path": path, "dest": f"vendor/demo/{dest}"}
        | {"sha256": sha256(data[path])}
        for path, dest in (
            ("charts/demo/values.yaml", "values.yaml"),
            ("crds/demo.example.io_things.yaml", "crds/things.yaml"),
            ("config.toml", "config.toml"),
        )
    ]
    entries += [
        {"group": "chart", "repo": "example/chart", "ref": REF_B, "path": path, "dest": path}
        | {"git_blob": blob(chart[path])}
        for path in chart
    ]
    return entries


class Upstream:
    """A threaded HTTP server on 127.0.0.1 serving /<repo>/<ref>/<path> from a dict; counts requests."""

    def __init__(self):
        self.files = {
            f"/{repo}/{ref}/{path}": body
            for repo, refs in CONTENT.items()
            for ref, paths in refs.items()
            for path, body in paths.items()
        }
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                path = unquote(self.path)
                outer.requests.append(path)
                body = outer.files.get(path)
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def serve(self, repo: str, ref: str, path: str, body: bytes | None) -> None:
        key = f"/{repo}/{ref}/{path}"
        if body is None:
            self.files.pop(key, None)
        else:
            self.files[key] = body


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Whatever a test forgets to pass, nothing leaves this machine: the default base URL is a closed local port."""
    monkeypatch.delenv(upstream.URL_ENV, raising=False)
    monkeypatch.setattr(upstream, "DEFAULT_BASE_URL", "http://127.0.0.1:9")


@pytest.fixture
def server():
    srv = Upstream()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()
    srv.thread.join(timeout=5)


@pytest.fixture
def manifest():
    return synthetic_manifest()


def run_fetch(manifest, dest, server, group="all"):
    return upstream.fetch(group, dest, manifest, base_url=server.url, timeout=5, attempts=1, log=lambda _: None)


def stray_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.name.endswith(".tmp")]


def expected_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


# ----------------------------------------------------------------------------------------------- fetch / verify


def test_good_download_writes_verified_files_with_normal_modes(manifest, server, tmp_path):
    assert run_fetch(manifest, tmp_path, server) == []
    for entry in manifest:
        target = tmp_path / entry["dest"]
        assert target.read_bytes() == CONTENT[entry["repo"]][entry["ref"]][entry["path"]]
        assert target.stat().st_mode & 0o777 == expected_mode()
    assert upstream.verify("all", tmp_path, manifest) == []
    assert stray_files(tmp_path) == []
    # The URL template keeps repo, ref and path (quoted on the wire, so odd names survive).
    assert "/example/chart/" + REF_B + "/charts/demo/path with space+plus.txt" in server.requests


def test_groups_select_their_entries(manifest, server, tmp_path):
    assert run_fetch(manifest, tmp_path, server, group="chart") == []
    assert upstream.verify("chart", tmp_path, manifest) == []
    assert not (tmp_path / "vendor").exists()
    assert sorted(upstream.verify("reference", tmp_path, manifest)) == [
        "vendor/demo/config.toml: missing",
        "vendor/demo/crds/things.yaml: missing",
        "vendor/demo/values.yaml: missing",
    ]


def test_hash_mismatch_is_reported_with_both_hashes_and_not_written(manifest, server, tmp_path):
    tampered = b"replicas: 100\n"
    server.serve("example/data", REF_A, "charts/demo/values.yaml", tampered)
    failures = run_fetch(manifest, tmp_path, server)
    assert len(failures) == 1
    [failure] = failures
    expected = sha256(CONTENT["example/data"][REF_A]["charts/demo/values.yaml"])
    assert failure.startswith("vendor/demo/values.yaml: sha256 mismatch")
    assert f"expected {expected}, actual {sha256(tampered)}" in failure
    assert not (tmp_path / "vendor/demo/values.yaml").exists()
    assert (tmp_path / "vendor/demo/config.toml").exists()  # the others are still fetched
    assert stray_files(tmp_path) == []


def test_git_blob_id_is_checked_for_chart_files(manifest, server, tmp_path):
    server.serve("example/chart", REF_B, "charts/demo/Chart.yaml", b"apiVersion: v2\nname: demo\nversion: 9.9.9\n")
    [failure] = run_fetch(manifest, tmp_path, server, group="chart")
    good = CONTENT["example/chart"][REF_B]["charts/demo/Chart.yaml"]
    assert failure.startswith("charts/demo/Chart.yaml: git blob id mismatch: expected " + blob(good))
    assert not (tmp_path / "charts/demo/Chart.yaml").exists()


TEMPLATED = b"apiVersion: v2\nname: demo\n# set by the release tool\nversion: v0.0\nkeywords: [version: v0.0x]\n"
EDITED = b"apiVersion: v2\nname: demo\n# set by the release tool\nversion: v1.2.3\nappVersion: v1.2.3\nkeywords: [version: v0.0x]\n"


def templated_entry(**change) -> dict:
    """A Chart.yaml kept with a placeholder version upstream, edited to the release's version when fetched."""
    entry = {"group": "chart", "repo": "example/chart", "ref": REF_B, "path": "charts/templated/Chart.yaml",
             "dest": "charts/templated/Chart.yaml", "sha256": sha256(TEMPLATED),
             "edits": [{"line": "version: v0.0", "with": ["version: v1.2.3", "appVersion: v1.2.3"]}],
             "result_sha256": sha256(EDITED)}
    return entry | change


def test_edits_turn_the_git_copy_into_the_released_file_and_verify_checks_the_result(server, tmp_path):
    server.serve("example/chart", REF_B, "charts/templated/Chart.yaml", TEMPLATED)
    manifest = [templated_entry()]
    assert run_fetch(manifest, tmp_path, server) == []
    target = tmp_path / "charts/templated/Chart.yaml"
    # Only the whole line is replaced: "version: v0.0x" inside another line stays.
    assert target.read_bytes() == EDITED
    assert upstream.verify("chart", tmp_path, manifest) == []
    # Deterministic: a second fetch finds the edited file valid and downloads nothing.
    requests = len(server.requests)
    assert run_fetch(manifest, tmp_path, server) == []
    assert len(server.requests) == requests
    # The unedited upstream file on disk is not the pinned result.
    target.write_bytes(TEMPLATED)
    [problem] = upstream.verify("chart", tmp_path, manifest)
    assert problem.startswith("charts/templated/Chart.yaml: sha256 mismatch after the manifest's edits")


@pytest.mark.parametrize(
    ("edits", "result", "failure"),
    [
        ([{"line": "version: v9.9", "with": ["version: v1.2.3"]}], EDITED,
         "the line 'version: v9.9' to edit occurs 0 times, not once; not written"),
        ([{"line": "version: v0.0", "with": ["version: v1.2.4"]}], EDITED,
         "sha256 mismatch after the manifest's edits: expected " + sha256(EDITED)),
    ],
)
def test_an_edit_that_does_not_apply_or_a_wrong_result_writes_nothing(server, tmp_path, edits, result, failure):
    server.serve("example/chart", REF_B, "charts/templated/Chart.yaml", TEMPLATED)
    manifest = [templated_entry(edits=edits, result_sha256=sha256(result))]
    [problem] = run_fetch(manifest, tmp_path, server)
    assert problem.startswith("charts/templated/Chart.yaml: ") and failure in problem
    assert not (tmp_path / "charts/templated/Chart.yaml").exists()
    assert stray_files(tmp_path) == []


def test_a_line_that_occurs_twice_is_not_edited():
    entry = templated_entry()
    with pytest.raises(upstream.UpstreamError, match="occurs 2 times, not once"):
        upstream.apply_edits(entry, TEMPLATED + b"version: v0.0\n")
    assert upstream.apply_edits({"dest": "x"}, TEMPLATED) == TEMPLATED  # no edits: the file as it is


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"result_sha256": None}, "edits and result_sha256 go together"),
        ({"edits": None}, "edits and result_sha256 go together"),
        ({"edits": []}, "edits must be a non-empty list"),
        ({"edits": [{"line": "a\nb", "with": []}]}, "edit 0 must be"),
        ({"edits": [{"line": "a", "with": "b"}]}, "edit 0 must be"),
        ({"result_sha256": "X"}, "result_sha256 must be 64 lower-case hex digits"),
    ],
)
def test_edit_entries_are_validated(change, problem):
    entry = {key: value for key, value in (templated_entry() | change).items() if value is not None}
    with pytest.raises(upstream.UpstreamError, match=re.escape(problem)):
        upstream.load_manifest([entry])


def test_git_blob_id_matches_git():
    # Known ids from git itself (`git hash-object`): the empty file and "hello\n".
    assert upstream.git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert upstream.git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_missing_upstream_file_is_reported_as_404(manifest, server, tmp_path):
    server.serve("example/chart", REF_B, "charts/demo/templates/cm.yaml", None)
    [failure] = run_fetch(manifest, tmp_path, server)
    assert failure.startswith("charts/demo/templates/cm.yaml: download failed: HTTP 404")
    assert f"{server.url}/example/chart/{REF_B}/charts/demo/templates/cm.yaml" in failure
    assert not (tmp_path / "charts/demo/templates/cm.yaml").exists()


def test_an_unreachable_host_stops_the_fetch_at_the_first_file_without_retries(manifest, tmp_path, monkeypatch):
    # Offline, 3 attempts per file took minutes and printed a line per file.
    calls, sleeps = [], []
    monkeypatch.setattr(upstream.time, "sleep", sleeps.append)

    def urlopen(request, timeout):
        calls.append(request.full_url)
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(upstream.urllib.request, "urlopen", urlopen)
    with pytest.raises(upstream.UnreachableError) as caught:
        upstream.fetch("chart", tmp_path, manifest, base_url="https://raw.githubusercontent.com", attempts=3)
    assert len(calls) == 1 and sleeps == []
    assert str(caught.value) == (
        "cannot reach raw.githubusercontent.com ([Errno -2] Name or service not known): if this machine reaches the "
        f"internet through a proxy, export HTTPS_PROXY, or copy {tmp_path / 'charts'}/ from a machine that has it "
        "(`make charts` then checks every file)")
    assert not (tmp_path / "charts").exists()


def test_a_closed_port_is_unreachable_too(manifest, tmp_path):
    with pytest.raises(upstream.UnreachableError, match=r"^cannot reach 127\.0\.0\.1 \(.*refused"):
        upstream.fetch("reference", tmp_path, manifest, base_url="http://127.0.0.1:9", timeout=5, attempts=3)
    assert not (tmp_path / "vendor").exists()


def test_an_unreachable_proxy_is_named_without_its_credentials(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://me:secret@proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    err = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    message = upstream.unreachable_message("https://raw.githubusercontent.com/a/b/c", err, "reference")
    assert message.startswith("cannot reach the proxy http://proxy.example:3128 (HTTPS_PROXY) for "
                              "raw.githubusercontent.com ([Errno 111] Connection refused): check HTTPS_PROXY / NO_PROXY")
    assert "secret" not in message and ".cache/upstream/vendor/" in message


def test_a_dropped_connection_is_still_retried(monkeypatch):
    calls = []
    monkeypatch.setattr(upstream.time, "sleep", lambda _: None)

    def urlopen(request, timeout):
        calls.append(request.full_url)
        raise urllib.error.URLError(ConnectionResetError(104, "Connection reset by peer"))

    monkeypatch.setattr(upstream.urllib.request, "urlopen", urlopen)
    with pytest.raises(urllib.error.URLError):
        upstream.download("https://example.invalid/x", attempts=3)
    assert len(calls) == 3


def test_cli_prints_one_line_for_an_unreachable_host(manifest, tmp_path, capsys):
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(manifest))
    assert upstream.main(["fetch", "--dest", str(tmp_path / "out"), "--manifest", str(manifest_file)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("upstream: cannot reach 127.0.0.1 (")


def test_cli_names_every_failed_file_and_exits_non_zero(manifest, server, tmp_path, monkeypatch, capsys):
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(manifest))
    monkeypatch.setenv(upstream.URL_ENV, server.url + "/")
    server.serve("example/data", REF_A, "config.toml", b"not empty")
    server.serve("example/chart", REF_B, "charts/demo/Chart.yaml", None)
    out = tmp_path / "out"
    args = ["--dest", str(out), "--manifest", str(manifest_file)]

    assert upstream.main(["fetch", *args]) == 1
    err = capsys.readouterr().err
    assert "FAILED vendor/demo/config.toml: sha256 mismatch: expected " + sha256(b"") in err
    assert "FAILED charts/demo/Chart.yaml: download failed: HTTP 404" in err
    assert "2 file(s) failed" in err
    assert upstream.main(["verify", *args]) == 1
    err = capsys.readouterr().err
    assert "vendor/demo/config.toml: missing" in err and "charts/demo/Chart.yaml: missing" in err

    server.serve("example/data", REF_A, "config.toml", b"")
    server.serve(
        "example/chart", REF_B, "charts/demo/Chart.yaml", CONTENT["example/chart"][REF_B]["charts/demo/Chart.yaml"]
    )
    assert upstream.main(["fetch", *args]) == 0
    assert "2 downloaded, 4 already present and valid, 0 failed" in capsys.readouterr().out
    assert upstream.main(["verify", "--group", "chart", *args]) == 0
    assert "3 files present and valid" in capsys.readouterr().out


def test_files_already_present_and_valid_are_skipped(manifest, server, tmp_path):
    assert run_fetch(manifest, tmp_path, server) == []
    first = len(server.requests)
    assert first == len(manifest)
    assert run_fetch(manifest, tmp_path, server) == []
    assert len(server.requests) == first  # nothing downloaded again

    modified = tmp_path / "charts/demo/templates/cm.yaml"
    modified.write_text("kind: Secret\n")
    [problem] = upstream.verify("chart", tmp_path, manifest)
    assert problem.startswith("charts/demo/templates/cm.yaml: git blob id mismatch: expected ")
    assert upstream.missing_or_invalid("chart", tmp_path, manifest) == [problem]
    assert run_fetch(manifest, tmp_path, server) == []
    assert server.requests[first:] == [f"/example/chart/{REF_B}/charts/demo/templates/cm.yaml"]
    assert modified.read_bytes() == CONTENT["example/chart"][REF_B]["charts/demo/templates/cm.yaml"]


def test_a_bad_download_leaves_an_existing_copy_untouched(manifest, server, tmp_path):
    """Atomicity from the outside: a failed replacement neither truncates nor half-writes the file."""
    target = tmp_path / "vendor/demo/crds/things.yaml"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"locally edited\n")
    server.serve("example/data", REF_A, "crds/demo.example.io_things.yaml", b"kind: CustomResourceDefinition\n")
    [failure] = run_fetch(manifest, tmp_path, server, group="reference")
    assert "sha256 mismatch" in failure and failure.endswith("not written")
    assert target.read_bytes() == b"locally edited\n"
    assert stray_files(tmp_path) == []


def test_write_is_atomic_temp_file_then_rename(tmp_path, monkeypatch):
    target = tmp_path / "dir" / "file.yaml"
    target.parent.mkdir()
    target.write_bytes(b"old\n")
    renames = []
    real_replace = os.replace

    def spy_replace(src, dst):
        src, dst = Path(src), Path(dst)
        # At the rename the complete new content is in a temporary file beside the target; the target is intact.
        renames.append((src.parent == dst.parent, src != dst, src.read_bytes(), dst.read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy_replace)
    upstream.write_atomic(target, b"new content\n" * 1000)
    assert renames == [(True, True, b"new content\n" * 1000, b"old\n")]
    assert target.read_bytes() == b"new content\n" * 1000

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        upstream.write_atomic(target, b"never seen\n")
    assert target.read_bytes() == b"new content\n" * 1000
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.yaml"]  # no temporary file left


def test_unexpected_file_in_a_chart_directory_is_reported(manifest, server, tmp_path):
    assert run_fetch(manifest, tmp_path, server) == []
    (tmp_path / "charts/demo/templates/extra.yaml").write_text("kind: Namespace\n")
    (tmp_path / "vendor/demo/README.txt").write_text("notes beside reference files are fine\n")
    assert upstream.verify("all", tmp_path, manifest) == [
        "charts/demo/templates/extra.yaml: not in the upstream manifest: remove it (fetch never deletes files)"
    ]
    with pytest.raises(upstream.UpstreamError, match="run `make charts`"):
        upstream.require("chart", tmp_path, manifest)
    upstream.require("reference", tmp_path, manifest)


def test_require_names_the_make_target(manifest, server, tmp_path):
    with pytest.raises(upstream.UpstreamError) as raised:
        upstream.require("chart", tmp_path, manifest)
    message = str(raised.value)
    assert "chart files are not there (3 files expected under" in message and "run `make charts`" in message
    with pytest.raises(upstream.UpstreamError, match="run `make upstream`"):
        upstream.require("reference", tmp_path, manifest)

    assert run_fetch(manifest, tmp_path, server, group="chart") == []
    upstream.require("chart", tmp_path, manifest)
    (tmp_path / "charts/demo/Chart.yaml").unlink()
    with pytest.raises(upstream.UpstreamError) as raised:
        upstream.require("chart", tmp_path, manifest)
    assert "missing or modified" in str(raised.value) and "charts/demo/Chart.yaml: missing" in str(raised.value)


def test_url_template_and_override(monkeypatch):
    entry = {"repo": "clastix/kamaji", "ref": REF_A, "path": "charts/kamaji/values.yaml"}
    monkeypatch.setattr(upstream, "DEFAULT_BASE_URL", "https://raw.githubusercontent.com")
    assert (
        upstream.url_for(entry) == f"https://raw.githubusercontent.com/clastix/kamaji/{REF_A}/charts/kamaji/values.yaml"
    )
    monkeypatch.setenv(upstream.URL_ENV, "file:///srv/mirror/")
    assert upstream.url_for(entry) == f"file:///srv/mirror/clastix/kamaji/{REF_A}/charts/kamaji/values.yaml"
    assert (
        upstream.url_for(entry, "http://127.0.0.1:8000")
        == f"http://127.0.0.1:8000/clastix/kamaji/{REF_A}/charts/kamaji/values.yaml"
    )


def test_default_layout():
    assert upstream.vendor_dir() == upstream.ROOT / ".cache" / "upstream" / "vendor"
    assert upstream.chart_dir() == upstream.ROOT / ".cache" / "charts" / "kamaji"
    entry = {"group": "chart", "dest": "charts/kamaji/charts/kamaji-etcd/values.yaml"}
    assert upstream.target_path(entry) == upstream.chart_dir() / "charts" / "kamaji-etcd" / "values.yaml"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"dest": "/etc/passwd"}, "dest must be a relative path"),
        ({"dest": "vendor/../../x"}, "dest must be a relative path"),
        ({"path": "../x"}, "path must be a relative path"),
        ({"ref": "v1.0.0"}, "ref must be a full 40-hex commit id"),
        ({"repo": "no-owner"}, "repo must be owner/name"),
        ({"group": "other"}, "group must be one of"),
        ({"git_blob": "0" * 40}, "needs exactly one of sha256 / git_blob"),
        ({"sha256": "ABC"}, "sha256 must be 64 lower-case hex digits"),
        ({"extra": 1}, "unknown keys"),
    ],
)
def test_manifest_validation(manifest, change, problem):
    manifest[0] = manifest[0] | change
    with pytest.raises(upstream.UpstreamError, match=re.escape(problem)):
        upstream.load_manifest(manifest)


def test_manifest_validation_rejects_duplicates_and_missing_hashes(manifest):
    manifest.append(dict(manifest[0]))
    bad = {k: v for k, v in manifest[1].items() if k != "sha256"}
    manifest.append(bad | {"dest": "vendor/demo/other.yaml"})
    problems = upstream.manifest_problems(manifest)
    assert any("same destination as entry 0" in p for p in problems)
    assert any("needs exactly one of sha256 / git_blob, has none" in p for p in problems)


def test_a_manifest_file_is_read_again_when_it_changes_and_each_caller_gets_its_own_copy(manifest, tmp_path):
    """load_manifest keeps a file's validated entries while the file is unchanged (a program run asks for them once
    per Helm release): an edited file is read and validated again, and no caller can change another's entries."""
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    first = upstream.load_manifest(path)
    first[0]["dest"] = "changed/by/a/caller"
    assert upstream.load_manifest(path) == manifest
    edited = [dict(manifest[0], ref="1" * 40), *manifest[1:]]
    path.write_text(json.dumps(edited))
    assert upstream.load_manifest(path)[0]["ref"] == "1" * 40
    path.write_text(json.dumps([dict(manifest[0], ref="v1")]))
    with pytest.raises(upstream.UpstreamError, match="ref must be a full 40-hex commit id"):
        upstream.load_manifest(path)


def test_vendor_dir_fixture_order(manifest, server, tmp_path):
    """../shared/vendor first, else a complete verified .cache copy, else nothing (the fixture then skips)."""
    shared = tmp_path / "shared"
    cache = tmp_path / "cache"
    assert locate_vendor_dir(shared, cache, manifest) is None
    assert run_fetch(manifest, cache, server, group="reference") == []
    assert locate_vendor_dir(shared, cache, manifest) == cache / "vendor"
    (cache / "vendor/demo/values.yaml").write_text("replicas: 2\n")
    assert locate_vendor_dir(shared, cache, manifest) is None
    (shared / "vendor").mkdir(parents=True)
    assert locate_vendor_dir(shared, cache, manifest) == shared / "vendor"
    assert "make upstream" in UPSTREAM_MISSING and "../shared" in UPSTREAM_MISSING


# ----------------------------------------------------------------------------------------------- the real manifest

KAMAJI_COMMIT = "ddbabd87ed0e8d7c319414383e153c46f21733a9"  # clastix/kamaji tag 26.8.2-edge
KAMAJI_ETCD_COMMIT = "c81ce280ea3c200df1617635d0842387460f927e"  # clastix/kamaji-etcd tag v0.15.0
NEED_SHARED = pytest.mark.skipif(
    not (SHARED / "vendor").is_dir(),
    reason=f"{SHARED / 'vendor'} is absent (clone with ../shared beside the project to compare the pinned sums)",
)


@pytest.fixture(scope="module")
def real():
    return upstream.load_manifest()


# Every chart directory under .cache/charts: (repository, commit of the release tag, chart directory in it).
CHARTS = {
    "kamaji": ("clastix/kamaji", KAMAJI_COMMIT, "charts/kamaji"),
    "kamaji/charts/kamaji-etcd": ("clastix/kamaji-etcd", KAMAJI_ETCD_COMMIT, "charts/kamaji-etcd"),
    # tag v1.21.1
    "cert-manager": ("cert-manager/cert-manager", "24e33194fb39488eff2bbf10c6dc640f407cad44",
                     "deploy/charts/cert-manager"),
    # tag v0.15.3 (the tag metallb-chart-0.15.3 points at a later commit whose Chart.yaml says 0.0.0)
    "metallb": ("metallb/metallb", "85bfb4f0e0d35090c514e1e5e1a21a8bbd253518", "charts/metallb"),
    # tag v3.32.1
    "crd.projectcalico.org.v1": ("projectcalico/calico", "0ca9d1b93644778cafdf1812f3dda02ac0c361e8",
                                 "charts/crd.projectcalico.org.v1"),
    "tigera-operator": ("projectcalico/calico", "0ca9d1b93644778cafdf1812f3dda02ac0c361e8", "charts/tigera-operator"),
    # tag v2.10.0
    "hami": ("Project-HAMi/HAMi", "4707fb02c91c545bc7343ce26dba4c32919f9a3e", "charts/hami"),
}
# The crd.projectcalico.org.v1 chart's templates/calico is a symlink to this directory; `helm package` follows it.
CALICO_CRD_LINK = ("templates/calico/", "libcalico-go/config/crd/")


def chart_of(entry: dict) -> str:
    """The chart directory (a key of CHARTS) an entry's dest is in: the deepest one."""
    rel = entry["dest"].removeprefix("charts/")
    return max((name for name in CHARTS if rel.startswith(name + "/")), key=len)


def chart_files(real: list[dict], name: str) -> dict[str, dict]:
    """Entries of chart `name`, by path inside the chart directory (a subchart's files are not its own)."""
    return {e["dest"].removeprefix(f"charts/{name}/"): e for e in real if e["group"] == "chart" and chart_of(e) == name}


def test_real_manifest_entries_are_well_formed(real):
    assert upstream.manifest_problems(real) == []
    dests = [PurePosixPath(entry["dest"]) for entry in real]
    assert len(set(dests)) == len(dests)
    for entry in real:
        dest = PurePosixPath(entry["dest"])
        assert not dest.is_absolute() and ".." not in dest.parts
        # Every file, chart or reference, is pinned by sha256.
        assert set(entry) & {"sha256", "git_blob"} == {"sha256"} and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
        if entry["group"] == "reference":
            assert dest.parts[0] == "vendor" and len(dest.parts) >= 3
        else:
            assert dest.parts[0] == "charts" and len(dest.parts) >= 3
    # Reference and chart roots differ, but destinations never overlap even under one --dest DIR.
    assert not {e["dest"].split("/")[0] for e in real if e["group"] == "reference"} & {"charts"}


def test_every_chart_file_comes_from_its_chart_directory_at_the_release_tag(real):
    charts = [entry for entry in real if entry["group"] == "chart"]
    assert {chart_of(entry) for entry in charts} == set(CHARTS)
    for entry in charts:
        name = chart_of(entry)
        repo, commit, source = CHARTS[name]
        assert (entry["repo"], entry["ref"]) == (repo, commit), entry["dest"]
        inside = entry["dest"].removeprefix(f"charts/{name}/")
        if name == "crd.projectcalico.org.v1" and inside.startswith(CALICO_CRD_LINK[0]):
            assert entry["path"] == CALICO_CRD_LINK[1] + inside.removeprefix(CALICO_CRD_LINK[0])
        else:
            assert entry["path"] == f"{source}/{inside}", entry["dest"]
    for name in CHARTS:
        files = chart_files(real, name)
        assert {"Chart.yaml", "values.yaml"} <= set(files), name
        assert any(path.startswith("templates/") for path in files), name


def test_the_chart_files_are_the_published_packages(real):
    kamaji = chart_files(real, "kamaji")
    assert {"Chart.yaml", "Chart.lock", "values.yaml", "templates/_helpers.tpl"} <= set(kamaji)
    assert {
        "crds/kamaji.clastix.io_datastores.yaml",
        "crds/kamaji.clastix.io_kubeconfiggenerators.yaml",
        "crds/kamaji.clastix.io_tenantcontrolplanes.yaml",
    } == {name for name in kamaji if name.startswith("crds/")}
    # templates/*.yaml read these with .Files.Get: without them the webhooks and RBAC render empty.
    assert {
        "controller-gen/clusterrole.yaml",
        "controller-gen/mutating-webhook.yaml",
        "controller-gen/validating-webhook.yaml",
    } <= set(kamaji)
    assert len([name for name in kamaji if name.startswith("templates/")]) == 12  # all of upstream's templates/
    # Left out on purpose: what Kamaji's own .helmignore keeps out of its published package.
    assert not {"Makefile", "README.md.gotmpl", ".helmignore"} & set(kamaji)
    etcd = chart_files(real, "kamaji/charts/kamaji-etcd")
    assert {"templates/_helpers.tpl", "templates/etcd_sts.yaml", "templates/etcd_datastore.yaml"} <= set(etcd)
    assert len([name for name in etcd if name.startswith("templates/")]) == 18  # all of upstream's templates/
    # cert-manager's make/manifests.mk (v1.21.1) packages Chart.yaml, values.yaml, values.schema.json, .helmignore,
    # the README and templates/; its chart tests and release-tool inputs stay out.
    cert_manager = chart_files(real, "cert-manager")
    assert {".helmignore", "values.schema.json"} <= set(cert_manager)
    assert len([name for name in cert_manager if name.startswith("templates/crd-")]) == 6
    assert not any(name.startswith("tests/") or name in ("signkey_annotation.txt", "README.template.md")
                   for name in cert_manager)
    # MetalLB: loading a chart checks that every Chart.yaml dependency is in charts/, enabled or not
    # (pulumi-kubernetes helm_release.go checkChartDependencies -> action.CheckDependencies), so the vendored
    # frr-k8s package comes too; the CRDs are the crds subchart's templates.
    metallb = chart_files(real, "metallb")
    assert {"Chart.lock", "charts/frr-k8s-0.0.21.tgz", "charts/crds/Chart.yaml", "charts/crds/templates/crds.yaml",
            "values.schema.json"} <= set(metallb)
    calico_crds = chart_files(real, "crd.projectcalico.org.v1")
    assert len([name for name in calico_crds if name.startswith("templates/calico/")]) == 23
    assert len([name for name in calico_crds if name.startswith("templates/operator.tigera.io_")]) == 9
    # tigera-operator's .helmignore keeps its Makefile out of the package.
    assert "Makefile" not in chart_files(real, "tigera-operator")
    assert len(chart_files(real, "hami")) == 35


def test_only_placeholder_versions_are_edited_to_the_pinned_versions(real):
    """cert-manager (make/manifests.mk: yq .version/.appVersion) and Calico (Makefile: helm package --version
    --app-version) set the chart version at release time; the git copy says v0.0.0 / v0.0."""
    versions = Versions()
    edited = {e["dest"]: e["edits"] for e in real if "edits" in e}
    assert edited == {
        "charts/cert-manager/Chart.yaml": [
            {"line": "version: v0.0.0", "with": [f"version: {versions.cert_manager}"]},
            {"line": "appVersion: v0.0.0", "with": [f"appVersion: {versions.cert_manager}"]},
        ],
        "charts/crd.projectcalico.org.v1/Chart.yaml": [
            {"line": "version: v0.0", "with": [f"version: {versions.calico}", f"appVersion: {versions.calico}"]},
        ],
        "charts/tigera-operator/Chart.yaml": [
            {"line": "version: v0.0", "with": [f"version: {versions.calico}", f"appVersion: {versions.calico}"]},
        ],
    }


def test_chart_files_that_are_also_reference_files_agree(real):
    """Chart.yaml, values.yaml, schemas and CRDs vendored for the tests are the very files of the charts (same
    commit): two independent pins of one file must agree."""
    charts = {(e["repo"], e["ref"], e["path"]): e["sha256"] for e in real if e["group"] == "chart"}
    shared = [e for e in real if e["group"] == "reference" and (e["repo"], e["ref"], e["path"]) in charts]
    assert len(shared) >= 18
    assert {e["repo"] for e in shared} == {r for r, _, _ in CHARTS.values()} - {"clastix/kamaji-etcd"}
    for entry in shared:
        assert charts[(entry["repo"], entry["ref"], entry["path"])] == entry["sha256"], entry["path"]


@NEED_SHARED
def test_real_reference_sums_match_shared_vendor(real):
    reference = [entry for entry in real if entry["group"] == "reference"]
    for entry in reference:
        data = (SHARED / entry["dest"]).read_bytes()
        assert sha256(data) == entry["sha256"], entry["dest"]
    on_disk = {
        path.relative_to(SHARED).as_posix()
        for path in (SHARED / "vendor").rglob("*")
        if path.is_file() and path.name != "README.txt"
    }
    assert on_disk == {entry["dest"] for entry in reference}
    assert upstream.verify("reference", SHARED) == []


@NEED_SHARED
def test_real_reference_sums_match_the_vendor_readmes(real):
    sums = {entry["dest"]: entry["sha256"] for entry in real if entry["group"] == "reference"}
    listed = 0
    for readme in (SHARED / "vendor").glob("*/README.txt"):
        for digest, name in re.findall(r"^([0-9a-f]{64})\s+(\S+)\s*$", readme.read_text(), re.M):
            assert sums[f"vendor/{readme.parent.name}/{name}"] == digest
            listed += 1
    assert listed >= 18


def test_the_docs_show_the_offline_line_as_make_up_prints_it(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    err = urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))
    line = "upstream: " + upstream.unreachable_message("https://raw.githubusercontent.com/x/y/z", err, "chart")
    assert line in all_text().splitlines()
