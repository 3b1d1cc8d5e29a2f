"""Find the job directories under a scan root from directory listings only (no file is opened).

A directory is **one job** when

* it holds log files directly (``console.log``, ``rank_3.log``, ``slurm-1.out``, ``error.json`` ...);
* some of its children are the per-rank / per-node / per-artifact folders a distributed job
  leaves: ``attempt_0/``, ``rank_3/``, ``node-a/``, ``h20-node-17/``, ``trainer-worker-0/``,
  ``10.0.0.7/``, ``pyspy/``, ``fr/``, ``nccl/`` ...;
* it wraps such a tree, or its logs, in a ``logs/`` folder (``job/logs/<run>_<id>/attempt_0/...``,
  ``run-11/logs/rank_0.log``);
* its children are node folders named after arbitrary hosts (``atlas800-11/``, ``atlas800-12/``),
  told apart from a directory of jobs by their rank-numbered files: disjoint global ranks.

A job is never descended into: its rank folders belong to it. Any other directory is searched
further. Hidden directories, directory symlinks and the scan's own output are skipped.

``pattern`` (a glob relative to each root, e.g. ``"*/job"`` or ``"**/run-*"``) replaces the
heuristic: every matching directory is a job, nested matches folded into the outermost one.

A directory that cannot be listed is reported (as :class:`Unlistable`) rather than dropped, so
a permission problem shows up as a row of the scan instead of a silently missing job.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.errors import InputError

#: File names that are log text (with an optional rotation number and compression suffix).
_LOG_FILE = re.compile(
    r"""(?ix)
    (?: \.(?:log|txt|out|err|stdout|stderr|trace|dump)     # train.log, rank0.txt, slurm-1.out
      | ^(?:stdout|stderr|console|output|nohup|log)         # bare stdout / console
      | ^(?:plog|device)-\d+_\d+\.log
      | (?:^|[._-])(?:error|errors|rank_?\d+|pyspy|stacks?)[\w.-]*\.json   # error.json, rank0.json
      | (?:^|_)trace_rank_\d+                                 # flight-recorder dumps
    )
    (?:\.\d+)?                   # logrotate: train.log.1
    (?:\.(?:gz|zst|bz2|xz))?$
    """
)
#: Text files that sit next to code, never next to a job's logs alone.
_NOT_LOG_FILE = re.compile(
    r"(?i)^(?:requirements[\w.-]*\.txt|license(?:\.txt)?|readme(?:\.\w+)?|cmakelists\.txt|notes?\.txt|"
    r"expected\.json)$|tfevents"
)
#: Children that make their parent one job: rank, node, attempt and artifact folders.
_JOB_PART_DIR = re.compile(
    r"""(?ix)^(?:
        attempt_\d+
      | (?:local_)?rank[_-]?\d+
      | (?:node|host|worker|master|launcher|pod)(?:[-_.]?[a-z]{0,3}\d+|[-_.][a-z])?   # node-a, node12, worker-3, pod-a
      | [\w.-]*[-_.](?:node|host)(?:[-_.]?\d+|[-_.][a-z])              # h20-node-17, gpu.host3, x-node-b
      | [\w.-]+-(?:master|worker|launcher)-\d+(?:[._-][\w.-]*)?       # k8s pod names
      | \d{1,3}(?:\.\d{1,3}){3}(?::\d+)?                              # node folders named by IP
      | py-?spy | pystack | stacks? | fr | flight_?recorder | nccl | plog | device-\d+
    )$"""
)
#: Wrapper folders a job may keep its rank tree in (``logs/``, a torchrun ``--log-dir``) ...
_WRAPPER_DIR = re.compile(r"(?i)^(?:logs?|outputs?|torchelastic_\w+)$")
#: ... and, inside one, torchrun's run directory ``<run_id>_<8 random chars>``.
_RUN_DIR = re.compile(r"^[\w-]+_[a-z0-9_]{8}$")
WRAP_DEPTH = 2
#: A global rank in a file name: rank_3.log, rank12.txt, train_rank7.log, rank0.json.
_RANK_IN_NAME = re.compile(r"(?i)(?:^|[^a-z])rank[_-]?(\d+)")
#: Node folders named after arbitrary hosts are recognized by their disjoint rank files only up
#: to this many siblings (a larger directory is a directory of jobs, not of nodes).
MAX_HOST_DIRS = 256


@dataclass(frozen=True)
class JobDir:
    """One job found under ``root``."""

    path: Path  # absolute
    root: Path  # the scan root it was found under (absolute)

    @property
    def name(self) -> str:
        """The job's path relative to its root ('.' for the root itself)."""
        rel = self.path.relative_to(self.root).as_posix()
        return rel or "."


@dataclass(frozen=True)
class Unlistable:
    """A directory the scan could not list: it becomes an error row."""

    path: Path
    root: Path
    reason: str

    @property
    def name(self) -> str:
        return self.path.relative_to(self.root).as_posix() or "."


@dataclass(frozen=True)
class _Listing:
    files: list[str]
    dirs: list[str]


def find_jobs(
    roots: Sequence[Path], *, pattern: str | None = None, exclude: Iterable[Path] = ()
) -> list[JobDir | Unlistable]:
    """Every job under ``roots`` (in path order, each once), plus the directories that could not be listed.

    ``exclude`` directories (the scan's own output) are skipped. Raises :class:`InputError` when
    a root does not exist or is not a directory.
    """
    skip = {Path(os.path.abspath(p)) for p in exclude}
    found: dict[Path, JobDir | Unlistable] = {}
    for root in roots:
        root = Path(os.path.abspath(root))
        if not root.exists():
            raise InputError(f"{root}: no such directory")
        if not root.is_dir():
            raise InputError(f"{root}: not a directory (scan takes directories that hold jobs)")
        items = _by_pattern(root, pattern, skip) if pattern else _by_layout(root, skip)
        for item in items:
            found.setdefault(item.path, item)
    return [found[p] for p in sorted(found)]


def is_log_name(name: str) -> bool:
    """Whether a file name looks like log text a job leaves (by name only)."""
    return not name.startswith(".") and not _NOT_LOG_FILE.search(name) and bool(_LOG_FILE.search(name))


def _list(path: Path) -> _Listing:
    files: list[str] = []
    dirs: list[str] = []
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                # never follow a directory symlink: no loops, no jobs counted twice
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(entry.name)
                elif entry.is_file():
                    files.append(entry.name)
            except OSError:
                continue
    return _Listing(sorted(files), sorted(dirs))


def _by_layout(root: Path, skip: set[Path]) -> Iterable[JobDir | Unlistable]:
    stack = [root]
    while stack:
        directory = stack.pop()
        if directory in skip:
            continue
        try:
            listing = _list(directory)
        except OSError as exc:
            yield Unlistable(directory, root, f"cannot list directory: {exc.strerror or exc}")
            continue
        if _is_job(directory, listing, WRAP_DEPTH):
            yield JobDir(directory, root)
            continue
        # reversed so the stack pops children in name order
        stack.extend(directory / d for d in reversed(listing.dirs))


def _is_job(directory: Path, listing: _Listing, depth: int) -> bool:
    if any(is_log_name(f) for f in listing.files):
        return True
    return (
        _has_rank_tree(directory, listing, depth, inner=False)
        or _wrapped_logs(directory, listing)
        or _host_folders(directory, listing)
    )


def _wrapped_logs(directory: Path, listing: _Listing) -> bool:
    """``run-11/logs/rank_0.log``: a directory whose only folders are ``logs/`` and the like, holding logs."""
    if not listing.dirs or not all(_WRAPPER_DIR.match(d) for d in listing.dirs):
        return False
    for name in listing.dirs:
        try:
            if any(is_log_name(f) for f in _list(directory / name).files):
                return True
        except OSError:
            continue
    return False


def _host_folders(directory: Path, listing: _Listing) -> bool:
    """Whether the children are node folders named after hosts (``atlas800-11/``, ``atlas800-12/``).

    Names alone cannot tell them from a directory of jobs (``run-11/``, ``run-12/``); the files
    can: each node of one job logs its own *global* ranks (rank_0..7 on one, rank_8..15 on the
    next), while separate jobs each start again at rank 0. So: at least two children with
    rank-numbered files: every child has some, no rank is in two of them, and rank 0 is there.
    """
    if not 2 <= len(listing.dirs) <= MAX_HOST_DIRS:
        return False
    seen: set[int] = set()
    for name in listing.dirs:
        ranks = _ranks_in(directory / name, depth=2)
        if not ranks or ranks & seen:
            return False  # decided on the first or second child for a directory of jobs
        seen |= ranks
    return 0 in seen


def _ranks_in(directory: Path, depth: int) -> set[int]:
    try:
        listing = _list(directory)
    except OSError:
        return set()
    ranks = {int(m.group(1)) for f in listing.files if is_log_name(f) for m in [_RANK_IN_NAME.search(f)] if m}
    if depth > 0:
        for name in listing.dirs:
            ranks |= _ranks_in(directory / name, depth - 1)
    return ranks


def _has_rank_tree(directory: Path, listing: _Listing, depth: int, *, inner: bool) -> bool:
    # Bare numeric folders are not enough: they are torchrun's local ranks only under
    # attempt_N (which counts already), and elsewhere they are as often numbered jobs.
    if any(_JOB_PART_DIR.match(d) for d in listing.dirs):
        return True
    if depth <= 0:
        return False
    for name in listing.dirs:
        # Inside a wrapper only rank/node folders count, never plain log files: a logs/ folder
        # full of separate job directories must not merge them into one job.
        if not (_WRAPPER_DIR.match(name) or (inner and _RUN_DIR.match(name))):
            continue
        try:
            sub = _list(directory / name)
        except OSError:
            continue
        if _has_rank_tree(directory / name, sub, depth - 1, inner=True):
            return True
    return False


def _by_pattern(root: Path, pattern: str, skip: set[Path]) -> Iterable[JobDir]:
    matches = sorted(
        Path(os.path.abspath(p)) for p in root.glob(pattern) if p.is_dir() and not p.is_symlink()
    )
    kept: list[Path] = []
    for path in matches:
        if any(path == s or s in path.parents for s in skip):
            continue
        # a match inside an earlier match is part of that job (its rank folder, say)
        if kept and kept[-1] in path.parents:
            continue
        kept.append(path)
    return [JobDir(p, root) for p in kept]
