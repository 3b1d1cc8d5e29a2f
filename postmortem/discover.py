"""Find a job's files and decide each one's family from its name and its first few KB.

Never writes into the job directory and never follows a directory symlink (no loops).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from postmortem.errors import InputError
from postmortem.reading import HEAD_BYTES, Unreadable, decode, looks_binary, read_bytes

_COMPRESSED_SUFFIX = re.compile(r"\.(gz|zst|bz2|xz)$")
_LOGDIR_PATH = re.compile(r"(?:^|/)attempt_\d+/\d+/(?:stdout|stderr)\.log$")
_ERROR_JSON_PATH = re.compile(r"(?:^|/)error\.json$")
_PICKLE_NAME = re.compile(r"\.(?:pkl|pickle)$", re.IGNORECASE)
_PLOG_NAME = re.compile(r"(?:^|/)(?:plog|device)-\d+_\d+\.log$")
_IP_ADDR_DUMP = re.compile(r"^\d+: [\w@.-]+: <[A-Z_,]*(?:LOOPBACK|BROADCAST|POINTOPOINT)", re.MULTILINE)  # `ip addr`, not srun -l
_POD_NAME = re.compile(r"-(?:master|worker|launcher)-\d+(?:[._-][\w.-]*)?$")
_IGNORED_NAMES = re.compile(
    r"(?:^|/)(?:expected\.json|README(?:\.md)?|\.DS_Store)$|\.(?:png|jpe?g|gif|svg|pdf|pt|pth|bin|safetensors|ckpt|npy|npz|so|pyc)$",
    re.IGNORECASE,
)

_HEAD_PATTERNS: dict[str, re.Pattern[str]] = {
    "pyspy": re.compile(r"^Process \d+: .*\n(?:.*\n){0,3}?Python v\d", re.MULTILINE),
    "pyspy_thread": re.compile(r"^Thread (?:0[xX][0-9A-Fa-f]+|\d+) \((?:active\+gil|active|idle|gil)\)", re.MULTILINE),
    "torchrun_prefix": re.compile(r"^(?:\S+ )?\[(?:default|rank)\d+\]:", re.MULTILINE),
    "elastic": re.compile(
        r"torch\.distributed\.(?:run|elastic)|torch/distributed/(?:run|elastic)|ChildFailedError|"
        r"Starting elastic_operator|\bWARNING:__main__:\n\*{5}"
    ),
    "srun": re.compile(r"^\d+: ", re.MULTILINE),
    "nccl": re.compile(r"^(?:\S+ )?[^\s:]+:\d+:\d+ \[\d+\] (?:[\w./-]+:\d+ )?NCCL (?:INFO|WARN|TRACE)", re.MULTILINE),
    "plog": re.compile(r"^\[(?:ERROR|WARNING|INFO|DEBUG|EVENT)\] [A-Z_0-9]+\(\d+,[^)]*\):\d{4}-\d\d-\d\d", re.MULTILINE),
    "npu": re.compile(r"\(PID:\d+, Device:-?\d+, RankID:-?\d+\) ERR\d{5}|\bE[IJHEZ]\d{4}\b|torch_npu|CANN"),
    "trainer": re.compile(
        r"\{'loss': |[\"']global_step/max_steps[\"']|\{\"loss\": |\biteration\s+\d+/\s*\d+ \||train_inner|\[INFO\|[\w.]+:\d+\]|"
        r"\[(?:INFO|WARNING):swift\]|\[Rank \d+\] step=|\bstep[ =:]+\d+|\d+/\d+ \[\d+:\d+<|\[[\d-]+ [\d:,]+\] \[(?:INFO|WARNING)\] \[[\w.]+:\d+:\w+\]"
    ),
}


# Literals one of which every match of the pattern contains: Python's ``re`` scans heads
# slowly, so a head with none of these is not searched at all (and a pattern that must match
# on a share of the lines is not searched when the literals occur too rarely).
_HEAD_LITERALS: dict[str, tuple[str, ...]] = {
    "pyspy": ("Python v",),
    "pyspy_thread": ("Thread ",),
    "torchrun_prefix": ("[default", "[rank"),
    "elastic": ("torch.distributed.", "torch/distributed/", "ChildFailedError", "Starting elastic_operator", "WARNING:__main__:"),
    "srun": (": ",),
    "nccl": ("NCCL ",),
    "plog": ("ERROR] ", "WARNING] ", "INFO] ", "DEBUG] ", "EVENT] "),
    "npu": ("(PID:", "EI", "EJ", "EH", "EE", "EZ", "torch_npu", "CANN"),
    "trainer": (
        "'loss': ", '"loss": ', "global_step/max_steps", "iteration", "train_inner", "[INFO|", ":swift]", "step", "<",
        "] [INFO] [", "] [WARNING] [",
    ),
}
# Alternatives of a pattern that are plain literals: found by ``in``, the pattern need not run.
_HEAD_EXACT: dict[str, tuple[str, ...]] = {"trainer": ("{'loss': ", '{"loss": ', "train_inner")}


def _head_search(name: str, head: str) -> bool:
    if any(lit in head for lit in _HEAD_EXACT.get(name, ())):
        return True
    if not any(lit in head for lit in _HEAD_LITERALS[name]):
        return False
    return _HEAD_PATTERNS[name].search(head) is not None


def _dominates(name: str, head: str, share: float) -> bool:
    """True when the pattern ``name`` matches on at least ``share`` of the head's lines."""
    needed = max(1, int(max(1, head.count("\n")) * share))
    # each matching line holds one of the literals at least once
    if sum(head.count(lit) for lit in _HEAD_LITERALS[name]) < needed:
        return False
    return len(_LINE_START_PATTERNS[name].findall("\n" + head)) >= needed


# The line patterns that are counted, anchored at a newline instead of ``^``: ``re`` tries a
# multiline ``^`` at every position of the head, but looks for a leading literal quickly (a
# tenth of the time on a 16 KB head).
_LINE_START_PATTERNS: dict[str, re.Pattern[str]] = {
    name: re.compile("\n(?:" + _HEAD_PATTERNS[name].pattern.removeprefix("^") + ")") for name in ("plog", "srun", "nccl")
}
assert all(_HEAD_PATTERNS[name].pattern.startswith("^") for name in _LINE_START_PATTERNS)


@dataclass(frozen=True)
class JobFile:
    """One file of a job, with the family it was detected as."""

    path: Path  # absolute
    rel: str  # relative to the job root, '/'-separated
    size: int
    family: str


@dataclass(frozen=True)
class Skipped:
    rel: str
    reason: str


@dataclass
class Inventory:
    root: Path
    files: list[JobFile]
    skipped: list[Skipped]


def discover(job: Path) -> Inventory:
    """Walk ``job`` (a directory tree or a single file) and classify every file.

    Raises :class:`InputError` for a missing path or a directory with no files at all.
    """
    job = Path(job)
    if not job.exists():
        raise InputError(f"{job}: no such file or directory")
    if job.is_file():
        root = job.parent
        candidates = [job]
    else:
        root = job
        candidates = list(_walk(job))
        if not candidates:
            raise InputError(f"{job}: the directory is empty (no files to analyze)")
    files: list[JobFile] = []
    skipped: list[Skipped] = []
    for path in candidates:
        rel = path.relative_to(root).as_posix() if path != root else path.name
        if job.is_dir() and _IGNORED_NAMES.search(rel):
            skipped.append(Skipped(rel, "not a log (documentation, image or model file)"))
            continue
        try:
            size = path.stat().st_size
        except OSError as exc:
            skipped.append(Skipped(rel, f"cannot stat: {exc.strerror or exc}"))
            continue
        if size == 0:
            skipped.append(Skipped(rel, "empty file"))
            continue
        try:
            family = classify(path, rel)
        except Unreadable as exc:
            skipped.append(Skipped(rel, str(exc)))
            continue
        if family is None:
            skipped.append(Skipped(rel, "binary file (not log text)"))
            continue
        files.append(JobFile(path, rel, size, family))
    files.sort(key=lambda f: f.rel)
    skipped.sort(key=lambda s: s.rel)
    return Inventory(root=root, files=files, skipped=skipped)


def _walk(root: Path):
    # os.walk(followlinks=False) never descends into a directory symlink, so no loops;
    # file symlinks are read (they are often how schedulers publish logs).
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            if path.is_symlink() and not path.exists():
                continue
            yield path


def classify(path: Path, rel: str) -> str | None:
    """The family of one file, or None when it is binary. Raises Unreadable."""
    head_bytes, _ = read_bytes(path, limit=HEAD_BYTES)
    return classify_head(head_bytes, rel)


def classify_head(head_bytes: bytes, rel: str) -> str | None:
    """The family of a file named ``rel`` whose (decompressed) first bytes are ``head_bytes``."""
    head_bytes = head_bytes[:HEAD_BYTES]
    name = _COMPRESSED_SUFFIX.sub("", rel)
    if head_bytes[:1] == b"\x80" and head_bytes[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") and (
        any(k in head_bytes for k in (b"entries", b"pg_config", b"pg_status")) or _PICKLE_NAME.search(name)
    ):
        # a pickled flight-recorder dump (a large pg_config can push "entries" past the head); any
        # other .pkl goes to the same safe loader, which skips it with the reason it is not a dump
        return "flight_recorder"
    if looks_binary(head_bytes):
        return None
    head = decode(head_bytes).text
    stripped = head.lstrip()
    if stripped.startswith(("{", "[")):
        family = _json_family(stripped, name)
        if family:
            return family
    if _ERROR_JSON_PATH.search(name):
        return "elastic_error"
    if _head_search("pyspy", head) or _head_search("pyspy_thread", head):
        return "pyspy"
    if _LOGDIR_PATH.search(name):
        return "torchrun_logdir"
    if _PLOG_NAME.search(name) or _dominates("plog", head, 0.3):
        return "ascend_plog"
    if _dominates("srun", head, 0.6) and not _IP_ADDR_DUMP.search(head):
        return "slurm"
    if _POD_NAME.search(Path(name).stem) or _POD_NAME.search(Path(name).parent.name):
        return "k8s_pod"
    if _head_search("torchrun_prefix", head) or _head_search("elastic", head):
        return "torchrun_console"
    if _dominates("nccl", head, 0.3):
        return "nccl_debug"
    if _head_search("trainer", head):
        return "trainer_log"
    if _head_search("npu", head):
        return "ascend_plog"
    return "generic"


def _json_family(head: str, name: str) -> str | None:
    if head.startswith("[") and '"thread_id"' in head and '"frames"' in head:
        return "pyspy_json"
    if head.startswith("{"):
        if '"entries"' in head and any(
            k in head for k in ('"pg_config"', '"version"', '"pg_status"', '"collective_seq_id"', '"profiling_name"')
        ):
            # torch writes the JSON dump with sorted keys: "entries" comes first, "pg_config" last
            return "flight_recorder"
        if '"message"' in head and (_ERROR_JSON_PATH.search(name) or '"extraInfo"' in head or '"errorCode"' in head):
            return "elastic_error"
    return None
