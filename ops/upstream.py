"""Pinned upstream files: download them, check them, find them (standard library only).

`ops/upstream_manifest.json` lists every file this project takes from upstream repositories, pinned to a
full commit id and checked by hash. Each entry is

    {"group": "reference" | "chart", "repo": "owner/name", "ref": "<40-hex commit>",
     "path": "<path in the repository>", "dest": "<relative destination>",
     "sha256": "<64 hex>"  or  "git_blob": "<40 hex git blob id>",   (exactly one of the two)
     "edits": [{"line": "<a whole line>", "with": ["<line>", ...]}, ...],   (optional, with result_sha256)
     "result_sha256": "<64 hex>"}

`sha256` / `git_blob` pin the upstream file as the repository holds it. `edits` are the release step a chart
repository applies before it publishes a package and that its git copy lacks (cert-manager and Calico keep a
placeholder `version:` in Chart.yaml and set the real one at `helm package` time): each `line` must occur exactly
once, as a whole line, and is replaced by the lines of `with`. `result_sha256` pins the file as written after
the edits, so the edit step is deterministic and `verify` checks the edited file.

Groups and where they land (relative to the project root unless `--dest DIR` is given):

    reference  .cache/upstream/vendor/<folder>/<file>
               The upstream reference files the tests compare generated manifests with; the same layout as
               ../shared/vendor (tests/conftest.py uses this copy when ../shared is absent). Checked by sha256.
    chart      .cache/charts/<chart>/...
               Every Helm chart the program installs, as a chart directory taken file by file from the chart's
               git repository at the release tag of the pinned version, checked by sha256:
                 kamaji                    clastix/kamaji charts/kamaji, tag 26.8.2-edge (the pinned image), with
                                           kamaji-etcd (clastix/kamaji-etcd charts/kamaji-etcd, tag v0.15.0, the
                                           version Kamaji's Chart.lock locks) as its subchart charts/kamaji-etcd
                 cert-manager              cert-manager/cert-manager deploy/charts/cert-manager, tag v1.21.1
                 metallb                   metallb/metallb charts/metallb, tag v0.15.3
                 crd.projectcalico.org.v1  projectcalico/calico charts/crd.projectcalico.org.v1, tag v3.32.1 (its
                                           templates/calico symlink is libcalico-go/config/crd, as `helm package`
                                           follows it)
                 tigera-operator           projectcalico/calico charts/tigera-operator, tag v3.32.1
                 hami                      Project-HAMi/HAMi charts/hami, tag v2.10.0
               The files are those the published package holds (not the repositories' tests or build files);
               Chart.yaml of cert-manager and of both Calico charts gets the version its release step sets (see
               `edits` above). The Pulumi program installs these directories, so neither a preview nor `pulumi
               up` downloads a chart; they are fetched by `make charts` and never committed.

    With `--dest DIR` the selected groups land under DIR instead (DIR/vendor/..., DIR/charts/<chart>/...).

Command line:

    python -m ops.upstream fetch  [--group reference|chart|all] [--dest DIR] [--manifest FILE]
    python -m ops.upstream verify [--group reference|chart|all] [--dest DIR] [--manifest FILE]

`fetch` downloads `<base>/<repo>/<ref>/<path>` for every entry that is missing or does not match its hash, with
<base> = $GPU_TENANCY_UPSTREAM_URL or https://raw.githubusercontent.com (any URL urllib opens, e.g. a test
server or file:///path/to/mirror laid out as <repo>/<ref>/<path>). Each download is verified before it is
written; the file is written atomically (temporary file in the same directory, then rename) with the usual
umask-derived mode, so a failed or corrupted download never leaves a partial or unverified file behind.
Files already present and valid are skipped. `verify` only checks what is on disk. Both exit 0 when every
selected file is present and valid, and 1 otherwise, naming each failing file (expected vs actual hash,
download error, missing, or a file in the chart directory that the manifest does not list).

Callers: `chart_dir(name)` is where a chart is, `missing_or_invalid("chart")` lists what is wrong with the charts
(empty = fine; preflight), and `require("chart")` raises UpstreamError ("... run `make charts`"). The Pulumi program
itself only checks that each chart is there (components/helm.py require_charts) and reads the manifest's pins to
describe each release's chart files (chart_digest).
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import re
import secrets
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = Path(__file__).resolve().parent / "upstream_manifest.json"
GROUPS = ("reference", "chart")
# Default destination roots per group, relative to the project root (see the module docstring).
DEFAULT_ROOTS = {"reference": Path(".cache") / "upstream", "chart": Path(".cache")}
# How the user regenerates each group.
MAKE_TARGETS = {"reference": "make upstream", "chart": "make charts"}
DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
URL_ENV = "GPU_TENANCY_UPSTREAM_URL"

_SHA256 = re.compile(r"[0-9a-f]{64}")
_GIT_ID = re.compile(r"[0-9a-f]{40}")
_TEXT_KEYS = ("group", "repo", "ref", "path", "dest")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


class UpstreamError(Exception):
    """The manifest is malformed, or pinned files are missing or modified."""


class UnreachableError(UpstreamError):
    """No connection to the download host (or the proxy in front of it): every other file would fail the same way."""


# --------------------------------------------------------------------------------------------------- manifest


# A manifest file's validated entries, by the sha256 of its bytes: a program run asks for them once per Helm release
# and per chart's CRDs (components/helm.py), three dozen times, and parsing and validating costs ~9 ms each time,
# reading and hashing the file well under one.
_VALIDATED: dict[str, list[dict]] = {}


def load_manifest(manifest: Path | str | Sequence[dict] | None = None) -> list[dict]:
    """The manifest entries, validated. `manifest` is a path, a ready list of entries, or None (the default).
    Every caller gets its own copy of the entries."""
    if manifest is None or isinstance(manifest, (str, Path)):
        path = Path(manifest) if manifest is not None else MANIFEST
        try:
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest not in _VALIDATED:
                _VALIDATED[digest] = _validated(json.loads(data.decode("utf-8")))
        except (OSError, ValueError) as err:
            raise UpstreamError(f"cannot read manifest {path}: {err}") from err
        return [_copied(entry) for entry in _VALIDATED[digest]]
    return _validated(list(manifest))


def _copied(entry: dict) -> dict:
    """A validated entry's own copy: its values are strings but `edits`, a list of {"line": str, "with": [str]}."""
    if "edits" not in entry:
        return dict(entry)
    return {**entry, "edits": [{"line": edit["line"], "with": list(edit["with"])} for edit in entry["edits"]]}


def _validated(entries: object) -> list[dict]:
    problems = manifest_problems(entries)
    if problems:
        raise UpstreamError("invalid upstream manifest:\n  " + "\n  ".join(problems))
    return entries  # type: ignore[return-value]


def manifest_problems(entries: object) -> list[str]:
    """Everything wrong with a list of manifest entries (empty list = valid)."""
    if not isinstance(entries, list):
        return ["the manifest must be a JSON list of entries"]
    problems: list[str] = []
    seen: dict[str, int] = {}
    allowed = {"group", "repo", "ref", "path", "dest", "sha256", "git_blob", "edits", "result_sha256"}
    for index, entry in enumerate(entries):
        where = f"entry {index}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: not an object")
            continue
        where = f"entry {index} ({entry.get('dest', '?')})"
        extra = set(entry) - allowed
        if extra:
            problems.append(f"{where}: unknown keys {sorted(extra)}")
        bad = [key for key in _TEXT_KEYS if not isinstance(entry.get(key), str) or not entry[key]]
        if bad:
            problems.append(f"{where}: {', '.join(bad)} must be non-empty strings")
            continue
        if entry["group"] not in GROUPS:
            problems.append(f"{where}: group must be one of {GROUPS}, not {entry['group']!r}")
        if not _REPO.fullmatch(entry["repo"]):
            problems.append(f"{where}: repo must be owner/name, not {entry['repo']!r}")
        if not _GIT_ID.fullmatch(entry["ref"]):
            problems.append(f"{where}: ref must be a full 40-hex commit id, not {entry['ref']!r}")
        if not _safe_relative(entry["path"]):
            problems.append(f"{where}: path must be a relative path inside the repository: {entry['path']!r}")
        if not _safe_relative(entry["dest"]):
            problems.append(f"{where}: dest must be a relative path without '..': {entry['dest']!r}")
        hashes = [key for key in ("sha256", "git_blob") if key in entry]
        if len(hashes) != 1:
            problems.append(f"{where}: needs exactly one of sha256 / git_blob, has {hashes or 'none'}")
        elif "sha256" in entry and not (isinstance(entry["sha256"], str) and _SHA256.fullmatch(entry["sha256"])):
            problems.append(f"{where}: sha256 must be 64 lower-case hex digits")
        elif "git_blob" in entry and not (isinstance(entry["git_blob"], str) and _GIT_ID.fullmatch(entry["git_blob"])):
            problems.append(f"{where}: git_blob must be 40 lower-case hex digits")
        problems += [f"{where}: {problem}" for problem in _edit_problems(entry)]
        key = f"{entry['group']}:{PurePosixPath(entry['dest'])}"
        if key in seen:
            problems.append(f"{where}: same destination as entry {seen[key]}")
        seen.setdefault(key, index)
    return problems


def _edit_problems(entry: dict) -> list[str]:
    """What is wrong with an entry's `edits` / `result_sha256` (both or neither)."""
    if "edits" not in entry and "result_sha256" not in entry:
        return []
    if ("edits" in entry) != ("result_sha256" in entry):
        return ["edits and result_sha256 go together (the edited file needs its own hash)"]
    problems = []
    result = entry["result_sha256"]
    if not (isinstance(result, str) and _SHA256.fullmatch(result)):
        problems.append("result_sha256 must be 64 lower-case hex digits")
    edits = entry["edits"]
    if not isinstance(edits, list) or not edits:
        return [*problems, "edits must be a non-empty list of {\"line\": ..., \"with\": [...]}"]
    for number, edit in enumerate(edits):
        ok = (
            isinstance(edit, dict) and set(edit) == {"line", "with"}
            and isinstance(edit["line"], str) and edit["line"] and "\n" not in edit["line"]
            and isinstance(edit["with"], list)
            and all(isinstance(line, str) and "\n" not in line for line in edit["with"])
        )
        if not ok:
            problems.append(f"edit {number} must be {{\"line\": \"<one line>\", \"with\": [\"<line>\", ...]}}")
    return problems


def _safe_relative(value: str) -> bool:
    path = PurePosixPath(value)
    return (
        not path.is_absolute()
        and "\\" not in value
        and all(part not in ("", ".", "..") for part in value.split("/"))
        and not re.match(r"^[A-Za-z]:", value)
    )


def select(entries: Iterable[dict], group: str) -> list[dict]:
    """The entries of `group` ("reference", "chart" or "all")."""
    if group != "all" and group not in GROUPS:
        raise UpstreamError(f"unknown group {group!r}: use one of {(*GROUPS, 'all')}")
    return [entry for entry in entries if group == "all" or entry["group"] == group]


# --------------------------------------------------------------------------------------------------- layout


def group_root(group: str, dest: Path | str | None = None) -> Path:
    """The directory an entry's `dest` is relative to: `dest` when given, else the group's default root."""
    if dest is not None:
        return Path(dest)
    return ROOT / DEFAULT_ROOTS[group]


def target_path(entry: dict, dest: Path | str | None = None) -> Path:
    return group_root(entry["group"], dest).joinpath(*PurePosixPath(entry["dest"]).parts)


def chart_dir(name: str = "kamaji", dest: Path | str | None = None) -> Path:
    """Where `make charts` puts the chart directory `name` (default .cache/charts/<name>)."""
    return group_root("chart", dest) / "charts" / name


def vendor_dir(dest: Path | str | None = None) -> Path:
    """Where `make upstream` puts the reference files (default .cache/upstream/vendor)."""
    return group_root("reference", dest) / "vendor"


def url_for(entry: dict, base_url: str | None = None) -> str:
    """`<base>/<repo>/<ref>/<path>`, base from the argument, $GPU_TENANCY_UPSTREAM_URL or raw.githubusercontent.com."""
    base = (base_url or os.environ.get(URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
    quote = urllib.parse.quote
    return f"{base}/{quote(entry['repo'], safe='/')}/{quote(entry['ref'], safe='')}/{quote(entry['path'], safe='/')}"


# --------------------------------------------------------------------------------------------------- hashes


def git_blob_id(data: bytes) -> str:
    """The id git gives a file with these bytes: sha1 of b"blob <len>\\0" + data."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hash_problem(entry: dict, data: bytes) -> str | None:
    """None when `data` matches the entry's pinned hash, else "sha256 mismatch: expected ..., actual ..."."""
    if "sha256" in entry:
        kind, expected, actual = "sha256", entry["sha256"], hashlib.sha256(data).hexdigest()
    else:
        kind, expected, actual = "git blob id", entry["git_blob"], git_blob_id(data)
    if actual == expected:
        return None
    return f"{kind} mismatch: expected {expected}, actual {actual} ({len(data)} bytes)"


def apply_edits(entry: dict, data: bytes) -> bytes:
    """The file as `fetch` writes it: `data` with the entry's `edits` applied (unchanged without edits).

    Raises UpstreamError when a line to replace does not occur exactly once (the upstream file is not the one
    the edits were written for).
    """
    edits = entry.get("edits")
    if not edits:
        return data
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise UpstreamError(f"{entry['dest']}: edits need a UTF-8 text file ({err})") from None
    for edit in edits:
        found = [number for number, line in enumerate(lines) if line == edit["line"]]
        if len(found) != 1:
            raise UpstreamError(f"{entry['dest']}: the line {edit['line']!r} to edit occurs {len(found)} times, "
                                "not once")
        lines[found[0]:found[0] + 1] = edit["with"]
    return "\n".join(lines).encode("utf-8")


def written_problem(entry: dict, data: bytes) -> str | None:
    """None when `data` is the file as `fetch` writes it: the pinned upstream file, or its edited form."""
    if "edits" not in entry:
        return hash_problem(entry, data)
    expected, actual = entry["result_sha256"], hashlib.sha256(data).hexdigest()
    if actual == expected:
        return None
    return f"sha256 mismatch after the manifest's edits: expected {expected}, actual {actual} ({len(data)} bytes)"


def _file_problem(entry: dict, path: Path) -> str | None:
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return "not a regular file"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        return f"unreadable: {err}"
    return written_problem(entry, data)


# --------------------------------------------------------------------------------------------------- verify


def verify(
    group: str = "all", dest: Path | str | None = None, manifest: Path | str | Sequence[dict] | None = None
) -> list[str]:
    """Problems of the files on disk, one string per file ("<dest>: <what>"); empty list = all present and valid.

    For charts it also reports files inside the chart directory that the manifest does not list: an extra
    template would change what Helm installs.
    """
    entries = select(load_manifest(manifest), group)
    problems = []
    for entry in entries:
        problem = _file_problem(entry, target_path(entry, dest))
        if problem:
            problems.append(f"{entry['dest']}: {problem}")
    return problems + _unexpected(entries, dest)


def missing_or_invalid(
    group: str, dest: Path | str | None = None, manifest: Path | str | Sequence[dict] | None = None
) -> list[str]:
    """What the Pulumi program (or a test fixture) must refuse to use: `verify(group)`; empty = ready to use."""
    return verify(group, dest, manifest)


def require(group: str, dest: Path | str | None = None, manifest: Path | str | Sequence[dict] | None = None) -> None:
    """Raise UpstreamError naming the problems and the make target that fixes them, if `group` is not ready."""
    if group not in GROUPS:
        raise UpstreamError(f"require() checks one group of {GROUPS}, not {group!r}")
    problems = missing_or_invalid(group, dest, manifest)
    if problems:
        where = group_root(group, dest)
        expected = len(select(load_manifest(manifest), group))
        if sum(problem.endswith(": missing") for problem in problems) == len(problems) == expected:
            what = f"the pinned upstream {group} files are not there ({expected} files expected under {where})"
        else:
            shown = "\n  ".join(problems[:10]) + (
                f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
            )
            what = f"the pinned upstream {group} files are missing or modified under {where}:\n  {shown}"
        raise UpstreamError(f"{what}\nrun `{MAKE_TARGETS[group]}` (downloads the pinned files and checks their hashes)")


def _unexpected(entries: list[dict], dest: Path | str | None) -> list[str]:
    """Problems for files under a chart directory (charts/<name>/ of a chart's dest) that the manifest does not list.

    Only charts are checked this way: Helm installs whatever the directory holds. Reference files are read by
    name, so extra files beside them (e.g. the README.txt files of ../shared/vendor) are fine.
    """
    chart_entries = [entry for entry in entries if entry["group"] == "chart"]
    known = {PurePosixPath(entry["dest"]).as_posix() for entry in chart_entries}
    tops = {
        PurePosixPath(*PurePosixPath(e["dest"]).parts[:2])
        for e in chart_entries
        if len(PurePosixPath(e["dest"]).parts) > 2
    }
    root = group_root("chart", dest)
    extra = []
    for top in sorted(tops):
        directory = root.joinpath(*top.parts)
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*")):
            if path.is_dir() and not path.is_symlink():
                continue
            rel = path.relative_to(root).as_posix()
            if rel not in known:
                extra.append(f"{rel}: not in the upstream manifest: remove it (fetch never deletes files)")
    return extra


# --------------------------------------------------------------------------------------------------- fetch


def unreachable(err: urllib.error.URLError) -> bool:
    """Whether `err` says the host (or proxy) cannot be reached at all: its name does not resolve, nothing listens,
    there is no route, or the connection timed out. Retrying then only repeats the wait, file after file."""
    reason = err.reason
    if isinstance(reason, (socket.gaierror, ConnectionRefusedError, TimeoutError)):
        return True
    return isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)


def download(url: str, timeout: float = 60.0, attempts: int = 3) -> bytes:
    """The body of `url`; retries server errors and dropped connections, not 4xx and not an unreachable host
    (see `unreachable`). Raises OSError subclasses."""
    for attempt in range(1, attempts + 1):
        try:
            request = urllib.request.Request(url, headers={"User-Agent": "gpu-tenancy-upstream/1"})
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.read()
        except urllib.error.HTTPError as err:
            err.close()  # the error carries the open response; code and reason stay readable
            if err.code < 500 or attempt == attempts:
                raise
        except urllib.error.URLError as err:
            if unreachable(err) or attempt == attempts:
                raise
        except (TimeoutError, ConnectionError):
            if attempt == attempts:
                raise
        time.sleep(attempt)
    raise AssertionError("unreachable")


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
    copy_from = group_root("chart", dest) / "charts" if group == "chart" else vendor_dir(dest)
    return (f"cannot reach {where} ({err.reason}): {way_out}, or copy {_shown(copy_from)}/ from a machine that has "
            f"it (`{MAKE_TARGETS[group]}` then checks every file)")


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


def fetch(
    group: str = "all",
    dest: Path | str | None = None,
    manifest: Path | str | Sequence[dict] | None = None,
    base_url: str | None = None,
    timeout: float = 60.0,
    attempts: int = 3,
    log=print,
) -> list[str]:
    """Download what is missing or invalid, verify it, write it atomically. Returns the problems (empty = success).

    A file that fails (download error or hash mismatch) is not written; a previously present invalid copy stays
    as it was and is still reported. An unreachable host (or proxy) stops the whole fetch at the first file:
    UnreachableError, one line naming it.
    """
    entries = select(load_manifest(manifest), group)
    failures: list[str] = []
    fetched = skipped = 0
    for entry in entries:
        path = target_path(entry, dest)
        if _file_problem(entry, path) is None:
            skipped += 1
            continue
        url = url_for(entry, base_url)
        try:
            data = download(url, timeout=timeout, attempts=attempts)
        except urllib.error.HTTPError as err:
            failures.append(f"{entry['dest']}: download failed: HTTP {err.code} {err.reason} from {url}")
            continue
        except urllib.error.URLError as err:
            if unreachable(err):
                raise UnreachableError(unreachable_message(url, err, entry["group"], dest)) from None
            failures.append(f"{entry['dest']}: download failed: {err} ({url})")
            continue
        except (OSError, ValueError) as err:  # URLError, timeouts, connection errors, bad URLs
            failures.append(f"{entry['dest']}: download failed: {err} ({url})")
            continue
        problem = hash_problem(entry, data)
        if problem:
            failures.append(f"{entry['dest']}: {problem} from {url}; not written")
            continue
        try:
            data = apply_edits(entry, data)
        except UpstreamError as err:
            failures.append(f"{err}; not written")
            continue
        problem = written_problem(entry, data)
        if problem:
            failures.append(f"{entry['dest']}: {problem}; not written")
            continue
        try:
            write_atomic(path, data)
        except OSError as err:
            failures.append(f"{entry['dest']}: cannot write {path}: {err}")
            continue
        fetched += 1
    failures.extend(_unexpected(entries, dest))
    log(f"upstream fetch ({group}): {fetched} downloaded, {skipped} already present and valid, {len(failures)} failed")
    return failures


# --------------------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.upstream",
        description="Download (fetch) or check (verify) the pinned upstream files of ops/upstream_manifest.json.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("fetch", "download missing or invalid files"), ("verify", "check the files on disk")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--group", choices=(*GROUPS, "all"), default="all")
        cmd.add_argument(
            "--dest",
            type=Path,
            default=None,
            help="destination root for the selected groups (default: .cache/upstream for reference, .cache for chart)",
        )
        cmd.add_argument("--manifest", type=Path, default=None, help=f"manifest file (default: {MANIFEST.name})")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            problems = fetch(args.group, args.dest, args.manifest)
        else:
            problems = verify(args.group, args.dest, args.manifest)
    except UnreachableError as err:
        print(f"upstream: {err}", file=sys.stderr)
        return 1
    except UpstreamError as err:
        print(f"upstream: {err}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"upstream: FAILED {problem}", file=sys.stderr)
    groups = GROUPS if args.group == "all" else (args.group,)
    if problems:
        hint = " / ".join(f"`{MAKE_TARGETS[g]}`" for g in groups)
        print(f"upstream {args.command}: {len(problems)} file(s) failed (fix with {hint})", file=sys.stderr)
        return 1
    if args.command == "verify":
        count = len(select(load_manifest(args.manifest), args.group))
        print(f"upstream verify ({args.group}): {count} files present and valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
