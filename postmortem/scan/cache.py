"""The incremental cache: a job whose files, rules and analysis code did not change is not re-analyzed.

A job's **key** hashes the relative path, size and modification time (ns) of every file in it
(stat only, nothing is opened), the rules version (the rule files' contents) and the analysis
code version (the package's analysis source, see :func:`code_version`). Any new, removed, grown
or touched file, any rule edit and any change to the analysis changes the key.

The cache is one SQLite file in the scan's output directory (``scan-cache.sqlite``): per job
path, the key and the job's result (its runs row and findings rows as JSON). It is written as
results arrive, so an interrupted scan resumes where it stopped.

What is cached: analyses, analysis errors (an exception from the library is deterministic for
the same files) and time-outs (reused only while the time limit is not raised). What is not: a
worker that died (could be memory pressure from elsewhere) and jobs that could not be listed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from postmortem import __version__
from postmortem.rule_engine import RuleSet

CACHE_NAME = "scan-cache.sqlite"
#: Bumped when the shape of the cached rows changes, so old caches are ignored.
CACHE_FORMAT = "1"


@dataclass(frozen=True)
class JobStat:
    """What the cache key of one job is made of, plus totals the runs table keeps."""

    key_material: str  # sha1 of the sorted (path, size, mtime_ns) listing
    files: int
    bytes: int
    newest_mtime_ns: int | None


def stat_job(job: Path) -> JobStat:
    """Stat every file of ``job`` (not following directory symlinks). Raises OSError if ``job`` can't be listed."""
    digest = hashlib.sha1()
    files = 0
    total = 0
    newest: int | None = None
    for rel, size, mtime_ns in sorted(_walk_stats(job)):
        digest.update(f"{rel}\0{size}\0{mtime_ns}\n".encode("utf-8", "surrogateescape"))
        files += 1
        total += size
        newest = mtime_ns if newest is None else max(newest, mtime_ns)
    return JobStat(digest.hexdigest(), files, total, newest)


def _walk_stats(root: Path) -> Iterator[tuple[str, int, int]]:
    # os.scandir reuses the directory read's stat data where it can: a few µs per file.
    stack = [""]
    first = True
    while stack:
        rel_dir = stack.pop()
        try:
            entries = list(os.scandir(root / rel_dir if rel_dir else root))
        except OSError:
            if first:
                raise
            # an unreadable sub-folder still changes the key when it becomes readable
            yield (rel_dir + "/", -1, -1)
            continue
        first = False
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(rel)
                    continue
                st = entry.stat()  # follows file symlinks, like the analysis does
            except OSError:
                continue
            yield (rel, st.st_size, st.st_mtime_ns)


def rules_version(ruleset: RuleSet) -> str:
    """A short hash of the loaded rules' ids and file contents: changes when any rule changes."""
    digest = hashlib.sha1()
    for rule in sorted(ruleset, key=lambda r: r.id):
        digest.update(rule.id.encode())
        digest.update(b"\0")
        try:
            digest.update(rule.path.read_bytes())
        except OSError:
            digest.update(repr(rule).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:12]


#: Package parts that do not change what an analysis finds: the renderers, the CLI, the scan's
#: own driver. Editing them keeps the cache (``--force`` re-renders per-job reports after a
#: renderer upgrade); the scan modules that shape the cached rows are hashed.
_NOT_ANALYSIS = ("render/", "cli.py", "__main__.py", "scan/")
_SCAN_ROWS = ("scan/outputs.py", "scan/fingerprint.py", "scan/runner.py")


@lru_cache(maxsize=1)
def code_version() -> str:
    """The tool version plus a hash of the analysis source.

    A development checkout keeps version 0.1.0 across many analysis changes; hashing the
    source makes the cache follow them. An installed wheel hashes the same files every time.
    """
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha1(__version__.encode())
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if "__pycache__" in rel or (rel.startswith(_NOT_ANALYSIS) and rel not in _SCAN_ROWS):
            continue
        digest.update(rel.encode())
        digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:10]}"


def job_key(stat: JobStat, rules_ver: str, code_ver: str) -> str:
    """The cache key of one job: its files, the rules and the analysis code."""
    text = "\0".join((CACHE_FORMAT, stat.key_material, rules_ver, code_ver))
    return hashlib.sha1(text.encode()).hexdigest()


@dataclass
class Cached:
    """One cache entry: the result of a job under a key."""

    key: str
    result: dict[str, Any]


class Cache:
    """The SQLite cache file of one output directory. Use as a context manager."""

    def __init__(self, out: Path) -> None:
        self.path = out / CACHE_NAME
        self._db = sqlite3.connect(self.path, timeout=30.0)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS jobs (path TEXT PRIMARY KEY, key TEXT NOT NULL, result TEXT NOT NULL)"
        )
        # one fsync per batch, not per row; a crash loses at most the last batch
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._pending = 0

    def lookup(self, paths: Iterable[str]) -> dict[str, Cached]:
        """The entries stored for ``paths`` (whatever their key; the caller compares)."""
        wanted = list(paths)
        found: dict[str, Cached] = {}
        # one query per chunk, not per job: a rescan of thousands of jobs reads the cache in ms
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for path, key, result in self._db.execute(
                f"SELECT path, key, result FROM jobs WHERE path IN ({marks})", chunk
            ):
                try:
                    found[path] = Cached(key, json.loads(result))
                except ValueError:
                    continue  # a damaged entry is a miss
        return found

    def store(self, path: str, key: str, result: dict[str, Any]) -> None:
        """Remember ``result`` for ``path`` under ``key`` (committed in batches)."""
        self._db.execute(
            "INSERT OR REPLACE INTO jobs (path, key, result) VALUES (?, ?, ?)",
            (path, key, json.dumps(result, separators=(",", ":"), default=str)),
        )
        self._pending += 1
        if self._pending >= 50:
            self.commit()

    def commit(self) -> None:
        self._db.commit()
        self._pending = 0

    def close(self) -> None:
        self.commit()
        self._db.close()

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
