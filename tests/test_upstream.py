"""ops/upstream.py: `make charts` (one GitHub archive per repository and commit; each chart pinned by one sha256
over its files) and `make upstream` (reference files, one pin each), and the consistency of the real pins.

No test here touches the network: downloads go to a threaded http.server on 127.0.0.1 started by the test, or to a
fake urlopen, and the default bases point at a closed local port.
"""

import hashlib
import http.client
import http.server
import io
import json
import os
import re
import shutil
import socket
import tarfile
import threading
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

import pytest

from components import charts as program_charts
from components.charts import CHARTS, tree_digest
from config import Versions
from ops import upstream
from tests.conftest import SHARED, UPSTREAM_MISSING, locate_vendor_dir
from tests.support.readme import all_text

COMMIT_A = "a" * 40
COMMIT_B = "b" * 40
# Synthetic repositories at one commit each: path -> bytes, or ("link", target) for a symlink.
TREES = {
    ("example/charts", COMMIT_A): {
        "charts/demo/Chart.yaml": b"apiVersion: v2\nname: demo\n# set by the release tool\nversion: v0.0\n",
        "charts/demo/values.yaml": b"replicas: 1\n",
        "charts/demo/templates/cm.yaml": b"kind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n",
        "charts/demo/templates/crds": ("link", "../../../crds"),
        "charts/demo/tests/cm_test.yaml": b"suite: left out of the package\n",
        "charts/demo/Makefile": b"all:\n",
        "charts/demo/crds/things.yaml": b"kind: CustomResourceDefinition\n",
        "charts/other/Chart.yaml": b"apiVersion: v2\nname: other\nversion: 1.0.0\n",
        "charts/other/path with space+plus.txt": b"odd name\n",
        "charts/other/empty.yaml": b"",
        "crds/linked.yaml": b"kind: CustomResourceDefinition\n" * 50,
        "README.md": b"not part of any chart\n",
    },
    ("example/sub", COMMIT_B): {
        "charts/sub/Chart.yaml": b"apiVersion: v2\nname: sub\nversion: 0.1.0\n",
        "charts/sub/templates/sts.yaml": b"kind: StatefulSet\n",
    },
}
EDITED = b"apiVersion: v2\nname: demo\n# set by the release tool\nversion: v1.2.3\nappVersion: v1.2.3\n"
SUB = {"Chart.yaml": TREES["example/sub", COMMIT_B]["charts/sub/Chart.yaml"],
       "templates/sts.yaml": TREES["example/sub", COMMIT_B]["charts/sub/templates/sts.yaml"]}
# What each chart directory holds once fetched: tests/ and the Makefile left out, the link filled, Chart.yaml edited,
# the subchart inside its parent.
EXPECTED = {
    "demo": {
        "Chart.yaml": EDITED,
        "values.yaml": b"replicas: 1\n",
        "templates/cm.yaml": TREES["example/charts", COMMIT_A]["charts/demo/templates/cm.yaml"],
        "templates/crds/linked.yaml": TREES["example/charts", COMMIT_A]["crds/linked.yaml"],
        "crds/things.yaml": b"kind: CustomResourceDefinition\n",
        **{f"charts/sub/{name}": data for name, data in SUB.items()},
    },
    "demo/charts/sub": SUB,
    "other": {name.removeprefix("charts/other/"): data for name, data in TREES["example/charts", COMMIT_A].items()
              if name.startswith("charts/other/")},
}
REFERENCE = {"vendor/demo/values.yaml": ("example/charts", COMMIT_A, "charts/demo/values.yaml"),
             "vendor/demo/linked.yaml": ("example/charts", COMMIT_A, "crds/linked.yaml")}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pin(files: dict[str, bytes]) -> str:
    """A chart's pin from its files, written out independently of components/charts.py."""
    return sha256("\n".join(sorted(f"{name}\0{sha256(data)}" for name, data in files.items())).encode())


def stand_in_charts() -> dict[str, dict]:
    return {
        "demo": {"dir": "demo", "repo": "example/charts", "commit": COMMIT_A, "path": "charts/demo",
                 "exclude": ["tests", "Makefile"], "links": {"templates/crds": "crds"},
                 "edits": {"Chart.yaml": [{"line": "version: v0.0", "with": ["version: v1.2.3", "appVersion: v1.2.3"]}]},
                 "crds": ["things.yaml"], "sha256": pin(EXPECTED["demo"])},
        "demo/charts/sub": {"dir": "demo/charts/sub", "repo": "example/sub", "commit": COMMIT_B, "path": "charts/sub",
                            "sha256": pin(SUB)},
        "other": {"dir": "other", "repo": "example/charts", "commit": COMMIT_A, "path": "charts/other",
                  "sha256": pin(EXPECTED["other"])},
    }


def archive(repo: str, commit: str, members: dict | None = None) -> bytes:
    """GitHub's archive of a commit: a tar.gz whose one folder <name>-<commit>/ holds the tree."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for path, body in (members if members is not None else TREES[repo, commit]).items():
            info = tarfile.TarInfo(path if path.startswith(("/", "..")) else f"{repo.split('/')[1]}-{commit}/{path}")
            if isinstance(body, tuple):
                info.type = tarfile.SYMTYPE if body[0] == "link" else tarfile.LNKTYPE
                info.linkname = body[1]
                tar.addfile(info)
            else:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


class Upstream:
    """A threaded HTTP server on 127.0.0.1: archives at /<repo>/tar.gz/<commit>, files at /<repo>/<ref>/<path>.
    Records every request with its headers; `replies` are (status, headers) answered, in order, before any body."""

    def __init__(self):
        self.files = {f"/{repo}/tar.gz/{commit}": archive(repo, commit) for repo, commit in TREES}
        self.files |= {f"/{repo}/{ref}/{path}": TREES[repo, ref][path] for repo, ref, path in REFERENCE.values()}
        self.requests: list[tuple[str, dict]] = []
        self.replies: list[tuple[int, dict]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                path = unquote(self.path)
                outer.requests.append((path, dict(self.headers)))
                status, headers = outer.replies.pop(0) if outer.replies else (200, {})
                body = outer.files.get(path)
                if status != 200 or body is None:
                    self.send_response(status if body is not None else 404)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
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

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Whatever a test forgets to pass, nothing leaves this machine: the default bases are a closed local port."""
    monkeypatch.delenv(upstream.URL_ENV, raising=False)
    monkeypatch.delenv(upstream.TOKEN_ENV, raising=False)
    monkeypatch.setattr(upstream, "DEFAULT_BASES", dict.fromkeys(upstream.GROUPS, "http://127.0.0.1:9"))


@pytest.fixture
def sleeps(monkeypatch):
    waited: list[float] = []
    monkeypatch.setattr(upstream.time, "sleep", waited.append)
    return waited


@pytest.fixture
def server():
    srv = Upstream()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()
    srv.thread.join(timeout=5)


@pytest.fixture
def charts():
    return stand_in_charts()


def fetch(charts, dest, server, attempts=1):
    failures, _ = upstream.fetch_charts(dest, charts, base_url=server.url, timeout=5, attempts=attempts)
    return failures


def tree(directory: Path) -> dict[str, bytes]:
    return {path.relative_to(directory).as_posix(): path.read_bytes()
            for path in directory.rglob("*") if path.is_file()}


def leftovers(root: Path) -> list[str]:
    return [path.name for path in root.rglob(".*")]


# ----------------------------------------------------------------------------------------------- the pin


def test_a_charts_pin_is_recomputed_from_a_stand_in_tree(tmp_path):
    for name, files in EXPECTED.items():
        for path, data in files.items():
            (tmp_path / name / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / path).write_bytes(data)
    for name, chart in stand_in_charts().items():
        assert tree_digest(tmp_path / name) == chart["sha256"], name
    (tmp_path / "other" / "empty.yaml").write_bytes(b"\n")  # any changed, added or removed file changes it
    assert tree_digest(tmp_path / "other") != pin(EXPECTED["other"])
    (tmp_path / "other" / "link.yaml").symlink_to(tmp_path / "demo" / "values.yaml")
    with pytest.raises(ValueError, match="link.yaml is not a regular file"):
        tree_digest(tmp_path / "other")


# ----------------------------------------------------------------------------------------------- fetch / verify


def test_one_request_per_repository_and_commit_writes_the_pinned_trees(charts, server, tmp_path):
    assert fetch(charts, tmp_path, server) == []
    # demo and other share one archive; the subchart comes from its own.
    assert sorted(server.paths()) == [f"/example/charts/tar.gz/{COMMIT_A}", f"/example/sub/tar.gz/{COMMIT_B}"]
    for name, files in EXPECTED.items():
        assert tree(tmp_path / "charts" / name) == files, name
    assert upstream.chart_problems(tmp_path, charts) == [] and leftovers(tmp_path) == []
    mode = (tmp_path / "charts/other/empty.yaml").stat().st_mode & 0o777
    assert mode == 0o666 & ~_umask()
    # Present and valid: nothing is downloaded again.
    assert fetch(charts, tmp_path, server) == [] and len(server.requests) == 2


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_copied_cache_is_checked_and_a_changed_chart_is_named_in_one_line_with_the_fix(charts, server, tmp_path):
    fetch(charts, tmp_path / "elsewhere", server)
    shutil.copytree(tmp_path / "elsewhere" / "charts", tmp_path / "here" / "charts")  # from another machine
    here = tmp_path / "here"
    assert upstream.chart_problems(here, charts) == []
    (here / "charts/other/empty.yaml").write_text("changed\n")
    [line] = upstream.chart_problems(here, charts)
    assert re.fullmatch(r"charts/other: the files differ from the pin in components/charts\.json \(sha256 [0-9a-f]{64}, "
                        r"pinned [0-9a-f]{64}\): run `make charts` to fetch it again", line)
    # An extra file in a subchart: the subchart and the chart it is in.
    (here / "charts/demo/charts/sub/templates/extra.yaml").write_text("kind: Secret\n")
    assert [line.split(":")[0] for line in upstream.chart_problems(here, charts)] == [
        "charts/demo", "charts/demo/charts/sub", "charts/other"]
    requests = len(server.requests)
    assert fetch(charts, here, server) == []
    assert len(server.requests) == requests + 2  # one archive per repository again, not one per chart
    assert upstream.chart_problems(here, charts) == [] and leftovers(here) == []
    assert not (here / "charts/demo/charts/sub/templates/extra.yaml").exists()


def test_only_the_chart_that_changed_is_fetched_again_with_the_chart_it_is_in(charts, server, tmp_path):
    fetch(charts, tmp_path, server)
    other = (tmp_path / "charts/other").stat().st_ino
    (tmp_path / "charts/demo/charts/sub/Chart.yaml").unlink()
    assert fetch(charts, tmp_path, server) == []
    assert server.paths()[2:] == [f"/example/charts/tar.gz/{COMMIT_A}", f"/example/sub/tar.gz/{COMMIT_B}"]
    assert (tmp_path / "charts/other").stat().st_ino == other  # not replaced
    assert tree(tmp_path / "charts/demo") == EXPECTED["demo"]


def test_the_cli_fetches_and_verifies_the_programs_charts(charts, server, tmp_path, monkeypatch, capsys):
    for name in list(CHARTS):
        monkeypatch.delitem(CHARTS, name)
    for name, chart in charts.items():
        monkeypatch.setitem(CHARTS, name, chart)
    monkeypatch.setenv(upstream.URL_ENV, server.url + "/")
    args = ["--group", "chart", "--dest", str(tmp_path)]
    assert upstream.main(["verify", *args]) == 1
    assert "upstream: FAILED charts/demo: missing" in capsys.readouterr().err
    assert upstream.main(["fetch", *args]) == 0
    assert "2 chart directories fetched (2 downloads), 0 charts already present and valid, 0 failed" in (
        capsys.readouterr().out)
    assert upstream.main(["verify", *args]) == 0
    (tmp_path / "charts/other/Chart.yaml").write_text("changed\n")
    assert upstream.main(["verify", *args]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("upstream: FAILED charts/other: the files differ") and err[0].endswith("fetch it again")


@pytest.mark.parametrize(
    ("members", "failure"),
    [
        ({"charts/other/Chart.yaml": ("link", "/etc/passwd")}, "charts/other/Chart.yaml in the archive is a link"),
        ({"charts/other/Chart.yaml": ("hard", "other-x/README.md")}, "charts/other/Chart.yaml in the archive is a link"),
        ({"../../charts/other/Chart.yaml": b"x\n"}, "member '../../charts/other/Chart.yaml' points outside the archive"),
        ({"/etc/cron.d/x": b"x\n"}, "member '/etc/cron.d/x' points outside the archive"),
        ({"charts/other/../../../escape": b"x\n"}, f"'charts-{COMMIT_A}/charts/other/../../../escape' points outside"),
    ],
)
def test_extraction_refuses_links_and_paths_outside_the_chart(charts, server, tmp_path, members, failure):
    server.files[f"/example/charts/tar.gz/{COMMIT_A}"] = archive(
        "example/charts", COMMIT_A, {**TREES["example/charts", COMMIT_A], **members})
    [problem] = fetch({"other": charts["other"]}, tmp_path, server)
    assert problem.startswith("charts/other: ") and failure in problem
    assert problem.endswith(f", from {server.url}/example/charts/tar.gz/{COMMIT_A}; not written")
    assert not (tmp_path / "charts/other").exists() and leftovers(tmp_path) == []
    assert not (tmp_path.parent / "escape").exists()


def test_an_archive_that_is_not_the_pinned_files_leaves_the_copy_on_disk_as_it_was(charts, server, tmp_path):
    fetch(charts, tmp_path, server)
    (tmp_path / "charts/other/empty.yaml").write_text("edited here\n")
    server.files[f"/example/charts/tar.gz/{COMMIT_A}"] = archive(
        "example/charts", COMMIT_A, {**TREES["example/charts", COMMIT_A], "charts/other/empty.yaml": b"moved tag\n"})
    [failure] = fetch(charts, tmp_path, server)
    assert failure.startswith(f"charts/other: the files from {server.url}/example/charts/tar.gz/{COMMIT_A} differ "
                              "from the pin in components/charts.json (sha256 ")
    assert failure.endswith("; not written")
    assert (tmp_path / "charts/other/empty.yaml").read_text() == "edited here\n" and leftovers(tmp_path) == []


def test_a_crds_file_the_chart_does_not_list_fails_the_check(charts, server, tmp_path):
    fetch(charts, tmp_path, server)
    charts["demo"]["crds"] = []
    assert upstream.chart_problems(tmp_path, charts) == [
        "charts/demo: the files differ from the pin in components/charts.json (crds/ holds ['things.yaml'], not the "
        "listed []): run `make charts` to fetch it again"]


def test_an_edit_whose_line_does_not_occur_once_writes_nothing(charts, server, tmp_path):
    charts["demo"]["edits"] = {"Chart.yaml": [{"line": "version: v9.9", "with": ["version: v1.2.3"]}]}
    assert fetch(charts, tmp_path, server) == ["charts/demo: Chart.yaml: the line 'version: v9.9' to edit occurs 0 "
                                               "times, not once; not written"]
    assert not (tmp_path / "charts/demo").exists() and (tmp_path / "charts/other").is_dir()


# ----------------------------------------------------------------------------------------------- download


def test_429_and_5xx_are_retried_honouring_retry_after(charts, server, tmp_path, sleeps):
    server.replies = [(429, {"Retry-After": "7"}), (503, {}), (502, {"Retry-After": "Thu, 01 Jan 1970 00:00:00 GMT"})]
    assert fetch({"other": charts["other"]}, tmp_path, server, attempts=4) == []
    assert sleeps == [7.0, 2.0, 0.0]  # Retry-After, else 1, 2, 4 s by attempt; a past date waits nothing
    assert server.paths() == [f"/example/charts/tar.gz/{COMMIT_A}"] * 4


@pytest.mark.parametrize(
    ("replies", "waits", "failure"),
    [
        ([(503, {})] * 3, [1.0, 2.0], "HTTP 503 Service Unavailable"),  # bounded: 3 tries in all
        ([(429, {"Retry-After": "3600"})], [], "HTTP 429 Too Many Requests"),  # longer than MAX_WAIT: no wait
        ([(404, {})], [], "HTTP 404 Not Found"),  # not retried
    ],
)
def test_retries_are_bounded(charts, server, tmp_path, sleeps, replies, waits, failure):
    server.replies = list(replies)
    server.files.pop(f"/example/charts/tar.gz/{COMMIT_A}") if replies[0][0] == 404 else None
    [problem] = fetch({"other": charts["other"]}, tmp_path, server, attempts=3)
    assert problem.startswith(f"charts/other: download failed: {failure} from {server.url}")
    assert sleeps == waits and len(server.requests) == len(waits) + 1
    assert problem.endswith("(export GITHUB_TOKEN to raise GitHub's limit)") == (failure.startswith("HTTP 429"))


def test_github_token_goes_to_githubs_hosts_only_and_not_on_a_redirect(monkeypatch, server, charts, tmp_path):
    monkeypatch.setenv(upstream.TOKEN_ENV, "ghp_secret")
    for url in ("https://codeload.github.com/a/b/tar.gz/c", "https://raw.githubusercontent.com/a/b/c/d"):
        request = upstream.request_for(url)
        assert request.get_header("Authorization") == "Bearer ghp_secret"
        # Unredirected: urllib's redirect handler copies `headers` only, so another host never sees the token.
        assert "Authorization" not in request.headers
        new = urllib.request.HTTPRedirectHandler().redirect_request(request, None, 302, "Found", {}, "https://x.example/")
        assert new.get_header("Authorization") is None
    assert upstream.request_for("https://github.example.com/a").get_header("Authorization") is None
    fetch({"other": charts["other"]}, tmp_path, server)
    assert "Authorization" not in server.requests[0][1]  # 127.0.0.1 is not GitHub
    monkeypatch.delenv(upstream.TOKEN_ENV)
    assert upstream.request_for("https://codeload.github.com/a/b/tar.gz/c").get_header("Authorization") is None


def test_an_unreachable_host_stops_the_fetch_at_the_first_request_without_retries(charts, tmp_path, monkeypatch,
                                                                                   sleeps):
    calls = []

    def urlopen(request, timeout):
        calls.append(request.full_url)
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(upstream.urllib.request, "urlopen", urlopen)
    with pytest.raises(upstream.UnreachableError) as caught:
        upstream.fetch_charts(tmp_path, charts, base_url="https://codeload.github.com", attempts=3)
    assert calls == [f"https://codeload.github.com/example/charts/tar.gz/{COMMIT_A}"] and sleeps == []
    assert str(caught.value) == (
        "cannot reach codeload.github.com ([Errno -2] Name or service not known): if this machine reaches the "
        f"internet through a proxy, export HTTPS_PROXY, or copy {tmp_path / 'charts'}/ from a machine that has it "
        "(`make charts` then checks every file)")
    assert os.listdir(tmp_path / "charts") == []


def test_a_dropped_connection_is_still_retried(monkeypatch, sleeps):
    calls = []

    def urlopen(request, timeout):
        calls.append(request.full_url)
        raise urllib.error.URLError(ConnectionResetError(104, "Connection reset by peer"))

    monkeypatch.setattr(upstream.urllib.request, "urlopen", urlopen)
    with pytest.raises(urllib.error.URLError):
        upstream.download("https://example.invalid/x", attempts=3)
    assert len(calls) == 3 and sleeps == [1.0, 2.0]


def test_a_body_that_breaks_off_is_fetched_again(monkeypatch, sleeps):
    bodies = [http.client.IncompleteRead(b"half"), b"whole"]

    class Response(io.BytesIO):
        def read(self, *args):
            body = bodies.pop(0)
            if isinstance(body, Exception):
                raise body
            return body

    monkeypatch.setattr(upstream.urllib.request, "urlopen", lambda request, timeout: Response())
    assert upstream.download("https://example.invalid/x", attempts=2) == b"whole" and sleeps == [1.0]


def test_an_unreachable_proxy_is_named_without_its_credentials(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://me:secret@proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    err = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    message = upstream.unreachable_message("https://raw.githubusercontent.com/a/b/c", err, "reference")
    assert message.startswith("cannot reach the proxy http://proxy.example:3128 (HTTPS_PROXY) for "
                              "raw.githubusercontent.com ([Errno 111] Connection refused): check HTTPS_PROXY / NO_PROXY")
    assert "secret" not in message and ".cache/upstream/vendor/" in message


# ----------------------------------------------------------------------------------------------- reference files


@pytest.fixture
def manifest(tmp_path):
    entries = [{"repo": repo, "ref": ref, "path": path, "dest": dest, "sha256": sha256(TREES[repo, ref][path])}
               for dest, (repo, ref, path) in REFERENCE.items()]
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(entries))
    return path


def test_reference_files_are_fetched_checked_and_skipped_when_valid(manifest, server, tmp_path):
    dest = tmp_path / "out"
    failures, summary = upstream.fetch_reference(dest, manifest, base_url=server.url, timeout=5, attempts=1)
    assert failures == [] and summary == "2 reference files downloaded, 0 present and valid, 0 failed"
    assert (dest / "vendor/demo/values.yaml").read_bytes() == b"replicas: 1\n"
    assert upstream.reference_problems(dest, manifest) == []
    (dest / "vendor/demo/values.yaml").write_bytes(b"replicas: 2\n")
    server.files[f"/example/charts/{COMMIT_A}/charts/demo/values.yaml"] = b"replicas: 3\n"
    [failure] = upstream.fetch_reference(dest, manifest, base_url=server.url, timeout=5, attempts=1)[0]
    assert failure.startswith("vendor/demo/values.yaml: sha256 mismatch: expected " + sha256(b"replicas: 1\n"))
    assert failure.endswith("; not written") and (dest / "vendor/demo/values.yaml").read_bytes() == b"replicas: 2\n"
    assert len(server.requests) == 3  # the valid file was not downloaded again


def test_write_is_atomic_temp_file_then_rename(tmp_path, monkeypatch):
    target = tmp_path / "dir" / "file.yaml"
    target.parent.mkdir()
    target.write_bytes(b"old\n")

    def failing_replace(src, dst):
        assert Path(src).read_bytes() == b"new\n" and Path(dst).read_bytes() == b"old\n"
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        upstream.write_atomic(target, b"new\n")
    assert target.read_bytes() == b"old\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.yaml"]  # no temporary file left


def test_vendor_dir_fixture_order(manifest, server, tmp_path):
    """../shared/vendor first, else a complete verified .cache copy, else nothing (the fixture then skips)."""
    shared = tmp_path / "shared"
    cache = tmp_path / "cache"
    assert locate_vendor_dir(shared, cache, manifest) is None
    assert upstream.fetch_reference(cache, manifest, base_url=server.url, timeout=5, attempts=1)[0] == []
    assert locate_vendor_dir(shared, cache, manifest) == cache / "vendor"
    (cache / "vendor/demo/values.yaml").write_text("replicas: 2\n")
    assert locate_vendor_dir(shared, cache, manifest) is None
    (shared / "vendor").mkdir(parents=True)
    assert locate_vendor_dir(shared, cache, manifest) == shared / "vendor"
    assert "make upstream" in UPSTREAM_MISSING and "../shared" in UPSTREAM_MISSING


def test_default_layout():
    assert upstream.vendor_dir() == upstream.ROOT / ".cache" / "upstream" / "vendor"
    assert upstream.chart_root() == upstream.ROOT / ".cache" / "charts"
    assert upstream.archive_url("a/b", COMMIT_A, "https://codeload.github.com") == (
        f"https://codeload.github.com/a/b/tar.gz/{COMMIT_A}")
    entry = {"repo": "a/b", "ref": COMMIT_A, "path": "charts/x y+z.yaml"}
    assert upstream.url_for(entry, "file:///m") == f"file:///m/a/b/{COMMIT_A}/charts/x%20y%2Bz.yaml"


# ----------------------------------------------------------------------------------------------- the real pins

NEED_SHARED = pytest.mark.skipif(
    not (SHARED / "vendor").is_dir(),
    reason=f"{SHARED / 'vendor'} is absent (clone with ../shared beside the project to compare the pinned sums)",
)


def _relative(value: str) -> bool:
    return not value.startswith("/") and all(part not in ("", ".", "..") for part in value.split("/"))


def test_the_real_charts_are_well_formed():
    assert program_charts.CHARTS is CHARTS
    for name, chart in CHARTS.items():
        assert chart["dir"] == name and _relative(name) and _relative(chart["path"]), name
        assert re.fullmatch(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", chart["repo"]), name
        assert re.fullmatch(r"[0-9a-f]{40}", chart["commit"]) and re.fullmatch(r"[0-9a-f]{64}", chart["sha256"]), name
        assert all(_relative(path) for path in [*chart.get("exclude", []), *chart.get("links", {}).values()]), name
        assert chart.get("versions") in (None, *Versions.model_fields), name
    assert len({chart["sha256"] for chart in CHARTS.values()}) == len(CHARTS)
    # A subchart sits in its parent's charts/ folder.
    assert [name for name in CHARTS if "/" in name] == ["kamaji/charts/kamaji-etcd"]


def test_only_placeholder_versions_are_edited_to_the_pinned_versions():
    """cert-manager (make/manifests.mk: yq .version/.appVersion) and Calico (Makefile: helm package --version
    --app-version) set the chart version at release time; the git copy says v0.0.0 / v0.0."""
    versions = Versions()
    calico = {"Chart.yaml": [{"line": "version: v0.0", "with": [f"version: {versions.calico}",
                                                                 f"appVersion: {versions.calico}"]}]}
    assert {name: chart["edits"] for name, chart in CHARTS.items() if "edits" in chart} == {
        "cert-manager": {"Chart.yaml": [
            {"line": "version: v0.0.0", "with": [f"version: {versions.cert_manager}"]},
            {"line": "appVersion: v0.0.0", "with": [f"appVersion: {versions.cert_manager}"]},
        ]},
        "crd.projectcalico.org.v1": calico,
        "tigera-operator": calico,
    }


def test_reference_files_from_a_charts_repository_are_at_the_charts_commit():
    """The vendored Chart.yaml, values.yaml, schemas and CRDs the tests compare with are the charts' own files."""
    commits = {chart["repo"]: chart["commit"] for chart in CHARTS.values()}
    reference = upstream.load_manifest()
    assert set(commits) - {"clastix/kamaji-etcd"} <= {entry["repo"] for entry in reference}
    for entry in reference:
        assert entry["ref"] == commits.get(entry["repo"], entry["ref"]), entry["dest"]
        dest = PurePosixPath(entry["dest"])
        assert dest.parts[0] == "vendor" and len(dest.parts) >= 3 and _relative(entry["dest"])
        assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])


@NEED_SHARED
def test_real_reference_sums_match_shared_vendor():
    reference = upstream.load_manifest()
    on_disk = {
        path.relative_to(SHARED).as_posix()
        for path in (SHARED / "vendor").rglob("*")
        if path.is_file() and path.name != "README.txt"
    }
    assert on_disk == {entry["dest"] for entry in reference}
    assert upstream.reference_problems(SHARED) == []


@NEED_SHARED
def test_real_reference_sums_match_the_vendor_readmes():
    sums = {entry["dest"]: entry["sha256"] for entry in upstream.load_manifest()}
    listed = 0
    for readme in (SHARED / "vendor").glob("*/README.txt"):
        for digest, name in re.findall(r"^([0-9a-f]{64})\s+(\S+)\s*$", readme.read_text(), re.M):
            assert sums[f"vendor/{readme.parent.name}/{name}"] == digest
            listed += 1
    assert listed >= 18


@pytest.mark.repo
def test_the_docs_show_the_offline_line_as_make_up_prints_it(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    err = urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))
    line = "upstream: " + upstream.unreachable_message("https://codeload.github.com/x/y/tar.gz/z", err, "chart")
    assert line in all_text().splitlines()
