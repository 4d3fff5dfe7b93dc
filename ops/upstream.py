"""Download and check what the project pins upstream (standard library only): `make charts`, `make upstream`.

Charts: the program's list, components/charts.json (components/charts.py says what each field means). One request
per repository and commit, for GitHub's archive of the commit, <base>/<repo>/tar.gz/<commit>; only each chart's
directory is extracted, into a staging directory beside .cache/charts/<dir>, checked against the chart's one
sha256 and then renamed into place, replacing what was there (a chart with subcharts is fetched with them). The pin
is over the extracted files, not the archive: GitHub generates archives on request and does not promise the same
bytes twice. Published packages are not used: `helm package` writes Chart.yaml anew from its parsed fields (HAMi's
hami-2.10.0.tgz drops the comments of charts/hami/Chart.yaml), so a package is not the pinned files and every
release's description, which is the pin, would change; Kamaji publishes only a moving 0.0.0+latest.

Reference files (ops/upstream_manifest.json: repo, ref, path, dest, sha256 per file) are what the tests compare
generated manifests with, laid out as ../shared/vendor under .cache/upstream/vendor, one request each for
<base>/<repo>/<ref>/<path>, checked before an atomic write.

<base> is $GPU_TENANCY_UPSTREAM_URL when set (a test server or a file:// mirror with both layouts), else
https://codeload.github.com for charts and https://raw.githubusercontent.com for reference files. HTTP 429 and
5xx are retried, waiting what Retry-After says (up to MAX_WAIT); $GITHUB_TOKEN goes to GitHub's hosts only. An
unreachable host stops the fetch at once, in one line.

    python -m ops.upstream fetch|verify [--group reference|chart|all] [--dest DIR]

With --dest DIR the charts land in DIR/charts/<dir> and the reference files in DIR/vendor/...
"""

from __future__ import annotations

import argparse
import email.utils
import errno
import hashlib
import http.client
import io
import json
import os
import secrets
import shutil
import socket
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from components.charts import CHARTS, tree_digest

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = Path(__file__).resolve().parent / "upstream_manifest.json"
GROUPS = ("reference", "chart")
# Default destination roots per group, relative to the project root (see the module docstring).
DEFAULT_ROOTS = {"reference": Path(".cache") / "upstream", "chart": Path(".cache")}
# How the user regenerates each group.
MAKE_TARGETS = {"reference": "make upstream", "chart": "make charts"}
DEFAULT_BASES = {"reference": "https://raw.githubusercontent.com", "chart": "https://codeload.github.com"}
URL_ENV = "GPU_TENANCY_UPSTREAM_URL"
TOKEN_ENV = "GITHUB_TOKEN"
GITHUB_HOSTS = {"github.com", "codeload.github.com", "raw.githubusercontent.com", "api.github.com"}
# The longest Retry-After worth waiting for; a longer one (GitHub's hourly limit) fails with the hint to set a token.
MAX_WAIT = 120.0


class UpstreamError(Exception):
    """A download or an archive is not what the pins say."""


class UnreachableError(UpstreamError):
    """No connection to the download host (or the proxy in front of it): every other request would fail the same way."""


def load_manifest(manifest: Path | str | None = None) -> list[dict]:
    """The reference files' entries."""
    return json.loads(Path(manifest or MANIFEST).read_text(encoding="utf-8"))


def group_root(group: str, dest: Path | str | None = None) -> Path:
    """The directory a group's files are under: `dest` when given, else the group's default root."""
    return Path(dest) if dest is not None else ROOT / DEFAULT_ROOTS[group]


def chart_root(dest: Path | str | None = None) -> Path:
    """Where `make charts` puts the chart directories (default .cache/charts)."""
    return group_root("chart", dest) / "charts"


def vendor_dir(dest: Path | str | None = None) -> Path:
    """Where `make upstream` puts the reference files (default .cache/upstream/vendor)."""
    return group_root("reference", dest) / "vendor"


def _base(group: str, base_url: str | None) -> str:
    return (base_url or os.environ.get(URL_ENV) or DEFAULT_BASES[group]).rstrip("/")


def url_for(entry: dict, base_url: str | None = None) -> str:
    """`<base>/<repo>/<ref>/<path>` of a reference file."""
    repo, path = (urllib.parse.quote(entry[key], safe="/") for key in ("repo", "path"))
    return f"{_base('reference', base_url)}/{repo}/{entry['ref']}/{path}"


def archive_url(repo: str, commit: str, base_url: str | None = None) -> str:
    """`<base>/<repo>/tar.gz/<commit>`: GitHub's archive of the commit (codeload.github.com)."""
    return f"{_base('chart', base_url)}/{urllib.parse.quote(repo, safe='/')}/tar.gz/{commit}"


# --------------------------------------------------------------------------------------------------- download


def unreachable(err: urllib.error.URLError) -> bool:
    """Whether `err` says the host (or proxy) cannot be reached at all: its name does not resolve, nothing listens,
    there is no route, or the connection timed out. Retrying then only repeats the wait."""
    reason = err.reason
    if isinstance(reason, (socket.gaierror, ConnectionRefusedError, TimeoutError)):
        return True
    return isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)


def request_for(url: str) -> urllib.request.Request:
    """A GET with $GITHUB_TOKEN for GitHub's hosts; unredirected, so a redirect elsewhere does not carry it."""
    request = urllib.request.Request(url, headers={"User-Agent": "gpu-tenancy-upstream/2"})
    token = os.environ.get(TOKEN_ENV)
    if token and urllib.parse.urlsplit(url).hostname in GITHUB_HOSTS:
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    return request


def retry_wait(retry_after: str | None, attempt: int) -> float:
    """Seconds before the next try: Retry-After (seconds or an HTTP date) when given, else 1, 2, 4, ... s."""
    if retry_after:
        if retry_after.strip().isdigit():
            return float(retry_after)
        try:
            return max(0.0, email.utils.parsedate_to_datetime(retry_after).timestamp() - time.time())
        except (TypeError, ValueError):
            pass
    return float(2 ** (attempt - 1))


def download(url: str, timeout: float = 60.0, attempts: int = 4) -> bytes:
    """The body of `url`. Retries HTTP 429 and 5xx (honouring Retry-After up to MAX_WAIT) and dropped connections,
    `attempts` tries in all; not other 4xx, nor an unreachable host (see `unreachable`). Raises OSError subclasses."""
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(request_for(url), timeout=timeout) as response:
                return response.read()
        except urllib.error.HTTPError as err:
            err.close()  # the error carries the open response; code, reason and headers stay readable
            wait = retry_wait(err.headers.get("Retry-After"), attempt)
            if (err.code != 429 and err.code < 500) or attempt == attempts or wait > MAX_WAIT:
                raise
        except urllib.error.URLError as err:
            if unreachable(err) or attempt == attempts:
                raise
            wait = retry_wait(None, attempt)
        except (TimeoutError, ConnectionError, http.client.HTTPException):  # e.g. IncompleteRead: the body broke off
            if attempt == attempts:
                raise
            wait = retry_wait(None, attempt)
        time.sleep(wait)
    raise AssertionError("unreachable")


def _failed(url: str, err: OSError, group: str, dest: Path | str | None) -> str:
    """"download failed: ..." for `err`; raises UnreachableError when the host cannot be reached at all."""
    if isinstance(err, urllib.error.HTTPError):
        hint = f" (export {TOKEN_ENV} to raise GitHub's limit)" if err.code in (403, 429) else ""
        return f"download failed: HTTP {err.code} {err.reason} from {url}{hint}"
    if isinstance(err, urllib.error.URLError) and unreachable(err):
        raise UnreachableError(unreachable_message(url, err, group, dest)) from None
    return f"download failed: {err} ({url})"


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def unreachable_message(url: str, err: urllib.error.URLError, group: str, dest: Path | str | None = None) -> str:
    """One line: which host (or proxy) did not answer, why, and the two ways out."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or url
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.netloc):
        proxy_parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        shown = f"{proxy_parts.scheme}://{proxy_parts.hostname}" + (f":{proxy_parts.port}" if proxy_parts.port else "")
        where = f"the proxy {shown} ({parts.scheme.upper()}_PROXY) for {host}"
        way_out = f"check {parts.scheme.upper()}_PROXY / NO_PROXY"
    else:
        where = host
        way_out = f"if this machine reaches the internet through a proxy, export {parts.scheme.upper()}_PROXY"
    copy_from = chart_root(dest) if group == "chart" else vendor_dir(dest)
    return (f"cannot reach {where} ({err.reason}): {way_out}, or copy {_shown(copy_from)}/ from a machine that has "
            f"it (`{MAKE_TARGETS[group]}` then checks every file)")


# --------------------------------------------------------------------------------------------------- charts


def tree_problem(directory: Path, chart: dict) -> str | None:
    """None when `directory` holds exactly the chart's pinned files, else what differs."""
    if not directory.is_dir():
        return "missing"
    try:
        actual = tree_digest(directory)
    except (OSError, ValueError) as err:
        return str(err)
    if actual != chart["sha256"]:
        return f"sha256 {actual}, pinned {chart['sha256']}"
    crds = sorted(path.name for path in (directory / "crds").glob("*"))
    return None if crds == chart.get("crds", []) else f"crds/ holds {crds}, not the listed {chart.get('crds', [])}"


def chart_problems(dest: Path | str | None = None, charts: dict[str, dict] = CHARTS) -> list[str]:
    """One line per chart that is missing under .cache/charts (or `dest`/charts) or is not the pinned files."""
    problems = []
    for name, chart in charts.items():
        problem = tree_problem(chart_root(dest) / name, chart)
        if problem == "missing":
            problems.append(f"charts/{name}: missing")
        elif problem:
            problems.append(f"charts/{name}: the files differ from the pin in components/charts.json ({problem}): "
                            f"run `make charts` to fetch it again")
    return problems


def _top(name: str, charts: dict[str, dict]) -> str:
    """The outermost chart directory `name` is in (itself for a chart that is no subchart)."""
    return min((top for top in charts if name == top or name.startswith(top + "/")), key=len)


def extract(data: bytes, targets: Sequence[tuple[dict, Path]]) -> None:
    """Write each chart's files from GitHub's archive `data` into its target directory.

    The archive holds one folder, <name>-<commit>/, with the repository's tree. A path with `..` or a link, device
    or other special file among a chart's files raise UpstreamError: the archive is not what the pin was made from.
    """
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            parts = member.name.split("/")
            if member.name.startswith("/") or ".." in parts:
                raise UpstreamError(f"archive member {member.name!r} points outside the archive")
            inside = "/".join(parts[1:])
            for chart, target in targets:
                sources = [(chart["path"], ""), *((source, link) for link, source in chart.get("links", {}).items())]
                for source, into in sources:
                    if not inside.startswith(source + "/"):
                        continue
                    rel = PurePosixPath(into, inside.removeprefix(source + "/")).as_posix()
                    left_out = chart.get("exclude", []) + list(chart.get("links", {})) if not into else []
                    if any(rel == skip or rel.startswith(skip + "/") for skip in left_out) or member.isdir():
                        continue
                    if not member.isfile():
                        raise UpstreamError(f"{inside} in the archive is a link or special file, not extracted")
                    path = target.joinpath(*rel.split("/"))
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(tar.extractfile(member).read())


def apply_edits(chart: dict, directory: Path) -> None:
    """Replace each edit's `line` (exactly once, as a whole line) by its `with` lines, in the chart's files."""
    for name, edits in chart.get("edits", {}).items():
        path = directory / name
        lines = path.read_text(encoding="utf-8").split("\n")
        for edit in edits:
            found = [number for number, line in enumerate(lines) if line == edit["line"]]
            if len(found) != 1:
                raise UpstreamError(f"{name}: the line {edit['line']!r} to edit occurs {len(found)} times, not once")
            lines[found[0]:found[0] + 1] = edit["with"]
        path.write_text("\n".join(lines), encoding="utf-8")


def _replace(staged: Path, target: Path) -> None:
    """Rename `staged` to `target`, the old directory out of the way first, then removed."""
    old = None
    if target.exists() or target.is_symlink():
        old = target.with_name(f".{target.name}.{secrets.token_hex(6)}.old")
        os.rename(target, old)
    os.rename(staged, target)
    if old is not None:
        shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()


def fetch_charts(
    dest: Path | str | None = None,
    charts: dict[str, dict] = CHARTS,
    base_url: str | None = None,
    timeout: float = 60.0,
    attempts: int = 4,
) -> tuple[list[str], str]:
    """Download, check and put in place every chart that is missing or not its pin, with the chart it is in and its
    subcharts (their directory is replaced whole), one request per repository and commit.

    Returns the problems (empty = success) and a summary. What a failed chart had on disk stays as it was.
    """
    root = chart_root(dest)
    tops = sorted({_top(name, charts) for name, chart in charts.items() if tree_problem(root / name, chart)})
    todo = [name for name in charts if _top(name, charts) in tops]
    archives: dict[tuple[str, str], list[str]] = {}
    for name in todo:
        archives.setdefault((charts[name]["repo"], charts[name]["commit"]), []).append(name)
    failures: list[str] = []
    failed: set[str] = set()
    if tops:
        root.mkdir(parents=True, exist_ok=True)
    staging = {top: Path(tempfile.mkdtemp(prefix=".fetch-", dir=root)) for top in tops}

    def staged(name: str) -> Path:
        return staging[_top(name, charts)] / os.path.relpath(name, _top(name, charts))

    try:
        for (repo, commit), names in archives.items():
            url = archive_url(repo, commit, base_url)
            try:
                extract(download(url, timeout=timeout, attempts=attempts), [(charts[n], staged(n)) for n in names])
                continue
            except OSError as err:
                problem = _failed(url, err, "chart", dest)
            except (EOFError, ValueError, tarfile.TarError, UpstreamError, http.client.HTTPException) as err:
                problem = f"{err}, from {url}; not written"
            failures += [f"charts/{name}: {problem}" for name in names]
            failed |= {_top(name, charts) for name in names}
        for name in todo:
            try:
                if _top(name, charts) not in failed:
                    apply_edits(charts[name], staged(name))
            except (OSError, UpstreamError) as err:
                failures.append(f"charts/{name}: {err}; not written")
                failed.add(_top(name, charts))
        for name in todo:  # once every archive is in and edited: a chart's pin covers its subcharts
            if _top(name, charts) not in failed and (problem := tree_problem(staged(name), charts[name])):
                url = archive_url(charts[name]["repo"], charts[name]["commit"], base_url)
                failures.append(f"charts/{name}: the files from {url} differ from the pin in components/charts.json "
                                f"({problem}); not written")
                failed.add(_top(name, charts))
        for top in tops:
            if top not in failed:
                _replace(staging.pop(top), root / top)
    finally:
        for path in staging.values():
            shutil.rmtree(path, ignore_errors=True)
    summary = (f"{len(tops) - len(failed)} chart directories fetched ({len(archives)} downloads), "
               f"{len(charts) - len(todo)} charts already present and valid, {len(failures)} failed")
    return failures, summary


# --------------------------------------------------------------------------------------------------- reference files


def _file_problem(entry: dict, path: Path) -> str | None:
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return "not a regular file"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        return f"unreadable: {err}"
    return _hash_problem(entry, data)


def _hash_problem(entry: dict, data: bytes) -> str | None:
    actual = hashlib.sha256(data).hexdigest()
    if actual == entry["sha256"]:
        return None
    return f"sha256 mismatch: expected {entry['sha256']}, actual {actual} ({len(data)} bytes)"


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory and a rename (mode 0666 & ~umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def reference_problems(dest: Path | str | None = None, manifest: Path | str | None = None) -> list[str]:
    """One line per reference file that is missing or not its pin (empty = all present and valid)."""
    root = group_root("reference", dest)
    return [f"{entry['dest']}: {problem}" for entry in load_manifest(manifest)
            if (problem := _file_problem(entry, root / entry["dest"]))]


def fetch_reference(
    dest: Path | str | None = None,
    manifest: Path | str | None = None,
    base_url: str | None = None,
    timeout: float = 60.0,
    attempts: int = 4,
) -> tuple[list[str], str]:
    """Download each reference file that is missing or not its pin, check it, write it atomically."""
    root = group_root("reference", dest)
    failures: list[str] = []
    fetched = skipped = 0
    for entry in load_manifest(manifest):
        path = root / entry["dest"]
        if _file_problem(entry, path) is None:
            skipped += 1
            continue
        url = url_for(entry, base_url)
        try:
            data = download(url, timeout=timeout, attempts=attempts)
        except OSError as err:
            failures.append(f"{entry['dest']}: {_failed(url, err, 'reference', dest)}")
            continue
        if problem := _hash_problem(entry, data):
            failures.append(f"{entry['dest']}: {problem} from {url}; not written")
            continue
        write_atomic(path, data)
        fetched += 1
    return failures, f"{fetched} reference files downloaded, {skipped} present and valid, {len(failures)} failed"


# --------------------------------------------------------------------------------------------------- CLI


def verify(group: str, dest: Path | str | None = None) -> list[str]:
    """What is wrong on disk with `group` ("reference", "chart" or "all"); empty = present and valid."""
    return ((reference_problems(dest) if group != "chart" else [])
            + (chart_problems(dest) if group != "reference" else []))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.upstream",
        description="Download (fetch) or check (verify) the pinned charts (components/charts.json) and reference "
                    "files (ops/upstream_manifest.json).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("fetch", "download what is missing or invalid"), ("verify", "check what is on disk")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--group", choices=(*GROUPS, "all"), default="all")
        cmd.add_argument("--dest", type=Path, default=None,
                         help="destination root (default: .cache/upstream for reference, .cache for chart)")
    args = parser.parse_args(argv)
    groups = GROUPS if args.group == "all" else (args.group,)
    problems = []
    try:
        for group in groups:
            if args.command == "fetch":
                found, summary = (fetch_charts if group == "chart" else fetch_reference)(args.dest)
                print(f"upstream fetch: {summary}")
                problems += found
            else:
                problems += verify(group, args.dest)
    except UnreachableError as err:
        print(f"upstream: {err}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"upstream: FAILED {problem}", file=sys.stderr)
    if problems:
        hint = " / ".join(f"`{MAKE_TARGETS[g]}`" for g in groups)
        print(f"upstream {args.command}: {len(problems)} failed (fix with {hint})", file=sys.stderr)
        return 1
    if args.command == "verify":
        print(f"upstream verify ({args.group}): present and valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
