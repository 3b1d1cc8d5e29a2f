"""Building blocks shared by the reconstruction job modules.

A job is assembled in memory (:class:`Job`): its files, its ground truth and its README, plus
the seed lines it promises to contain. Log text is produced by small formatters that follow the
formats documented in the project's log-format reference (torchrun/elastic headers, c10 headers,
torch_npu ERR suffixes, CANN plog lines, py-spy text dumps, ChildFailedError blocks).

Everything is deterministic: times come from fixed datetimes, "random" jitter from
``random.Random`` instances seeded with constants, and files are written in sorted order.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- the job container


@dataclass
class Job:
    """One reconstructed scenario: ``<name>/README.md``, ``expected.json`` and ``job/``."""

    name: str
    readme: str = ""
    expected: dict[str, Any] = field(default_factory=dict)
    #: path relative to the scenario's ``job/`` directory -> file text
    files: dict[str, str] = field(default_factory=dict)
    #: (path relative to ``job/``, text) pairs: seed text that must appear in that file
    verbatim: list[tuple[str, str]] = field(default_factory=list)

    def add(self, rel: str, lines: Iterable[str]) -> None:
        """Store a text file made of ``lines`` (each written with a trailing newline)."""
        text = "".join(f"{line}\n" for line in lines)
        self.files[rel] = self.files.get(rel, "") + text

    def must_contain(self, rel: str, texts: Iterable[str]) -> None:
        """Record seed lines that ``rel`` must contain verbatim (checked by ``build.py --check``)."""
        self.verbatim.extend((rel, t) for t in texts)

    def write(self, out_dir: Path) -> Path:
        """Write the scenario under ``out_dir``, replacing a previous copy of this scenario only."""
        root = out_dir / self.name
        if root.exists():
            shutil.rmtree(root)
        (root / "job").mkdir(parents=True)
        (root / "README.md").write_text(self.readme.strip() + "\n", encoding="utf-8")
        expected = {**self.expected, "rules": curated_rules("reconstructed", self.name)}
        (root / "expected.json").write_text(dumps(expected) + "\n", encoding="utf-8")
        for rel in sorted(self.files):
            path = root / "job" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            # newline="" keeps the carriage returns of tqdm refreshes as they were "printed"
            with path.open("w", encoding="utf-8", newline="") as fh:
                fh.write(self.files[rel])
        return root


def dumps(value: Any, indent: int = 0) -> str:
    """JSON with two-space indentation, but lists of scalars kept on one line (easier to review)."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f'{pad}  {json.dumps(str(k))}: {dumps(v, indent + 2)}' for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = [f"{pad}  {dumps(v, indent + 2)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    if isinstance(value, list) and sum(len(json.dumps(v, ensure_ascii=False)) for v in value) > 90:
        items = [f"{pad}  {json.dumps(v, ensure_ascii=False)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value, ensure_ascii=False)


def expected(
    *,
    source: str,
    status: str,
    category: str,
    culprit_ranks: Sequence[int],
    first_failing_rank: int | None,
    first_failing_step: int | None,
    world_size: int,
    nodes: Sequence[str],
    last_step: dict[int, int | None],
    files: dict[str, str],
    facts: Sequence[str],
) -> dict[str, Any]:
    """The expected.json document, keys in the order sample_logs/README.md shows."""
    return {
        "origin": "reconstruction",
        "source": source,
        "status": status,
        "category": category,
        "culprit_ranks": sorted(culprit_ranks),
        "first_failing_rank": first_failing_rank,
        "first_failing_step": first_failing_step,
        "world_size": world_size,
        "nodes": list(nodes),
        "ranks": list(range(world_size)),
        "last_step": {str(r): s for r, s in sorted(last_step.items())},
        "files": {f"job/{k}": v for k, v in sorted(files.items())},
        "rules": [],
        "facts": list(facts),
    }


# --------------------------------------------------------------------------- event streams


def curated_rules(kind: str, name: str) -> list[str]:
    """The hand-curated rule ids of one corpus job (sample_logs/expected_rules.json)."""
    curated = Path(__file__).resolve().parents[2] / "sample_logs" / "expected_rules.json"
    return json.loads(curated.read_text(encoding="utf-8")).get(f"{kind}/{name}", []) if curated.exists() else []


class Stream:
    """Lines with timestamps from several writers, merged in time order like a shared console.

    Lines with equal times keep the order in which they were added, so a multi-line record
    (a traceback, an EI block) added in one call stays contiguous when given one time.
    """

    def __init__(self) -> None:
        self._events: list[tuple[datetime, int, str]] = []

    def add(self, ts: datetime, *lines: str) -> None:
        for line in lines:
            self._events.append((ts, len(self._events), line))

    def extend(self, ts: datetime, lines: Iterable[str]) -> None:
        self.add(ts, *lines)

    def lines(self) -> list[str]:
        return [text for _, _, text in sorted(self._events, key=lambda e: (e[0], e[1]))]


# --------------------------------------------------------------------------- time formats


def glog(level: str, ts: datetime, ident: int, src: str) -> str:
    """torch._logging / elastic header (torch >= 2.3): ``W0801 13:23:17.366000 32974 path:line] ``.

    ``ident`` is the thread id (torch 2.3-2.4) or the process id (>= 2.5); the microsecond field
    has millisecond precision, as ``int(record.msecs * 1000)`` gives.
    """
    usec = ts.microsecond // 1000 * 1000
    return f"{level}{ts:%m%d %H:%M:%S}.{usec:06d} {ident} {src}] "


def c10(level: str, ts: datetime, ns: int, src: str) -> str:
    """c10 MessageLogger header: ``[E527 19:52:41.491119810 compiler_depend.ts:1047] ``.

    The month/day field is not zero padded and the nanoseconds are CLOCK_MONOTONIC, not wall time.
    """
    return f"[{level}{ts.month * 100 + ts.day} {ts:%H:%M:%S}.{ns:09d} {src}] "


def cann_ts(ts: datetime) -> str:
    """CANN plog / EI time: ``2026-05-22-12:08:27.088.244`` (milliseconds.microseconds)."""
    return f"{ts:%Y-%m-%d-%H:%M:%S}.{ts.microsecond // 1000:03d}.{ts.microsecond % 1000:03d}"


def plog(level: str, module: str, pid: int, pname: str, ts: datetime, src: str, msg: str) -> str:
    """CANN application log line: ``[ERROR] HCCL(pid,pname):<ts> [file.cc:line]<msg>``."""
    return f"[{level}] {module}({pid},{pname}):{cann_ts(ts)} [{src}]{msg}"


def plog_name(pid: int, created: datetime) -> str:
    """plog file name: ``plog-<pid>_<yyyymmddHHMMSSmmm>.log``."""
    return f"plog-{pid}_{created:%Y%m%d%H%M%S}{created.microsecond // 1000:03d}.log"


def asctime(ts: datetime) -> str:
    """stdlib logging ``%(asctime)s``: ``2026-05-27 19:49:13,414``."""
    return f"{ts:%Y-%m-%d %H:%M:%S},{ts.microsecond // 1000:03d}"


def hms(seconds: float) -> str:
    """tqdm elapsed/remaining field: ``MM:SS`` or ``H:MM:SS``."""
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def swift_duration(seconds: float) -> str:
    """ms-swift ``elapsed_time`` / ``remaining_time``: ``1h 2m 3s`` without zero leading units."""
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h {m}m {sec}s"
    if m:
        return f"{m}m {sec}s"
    return f"{sec}s"


def after(ts: datetime, seconds: float) -> datetime:
    return ts + timedelta(seconds=seconds)


# --------------------------------------------------------------------------- torchrun pieces


def torchrun_banner(ts: datetime, ident: int, src: str) -> list[str]:
    """The OMP_NUM_THREADS warning every torchrun prints at start, one header per line."""
    head = glog("W", ts, ident, src)
    return [
        head,
        head + "*****************************************",
        head
        + "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
        "your system being overloaded, please further tune the variable for optimal performance in "
        "your application as needed. ",
        head + "*****************************************",
    ]


@dataclass
class Failure:
    """One entry of a ChildFailedError summary."""

    rank: int
    local_rank: int
    pid: int
    exitcode: int
    time: datetime
    host: str
    message: str = ""  # traceback field; computed from the exit code when empty

    def text(self) -> str:
        if self.message:
            return self.message
        if self.exitcode < 0:
            sig = SIGNALS.get(-self.exitcode, f"SIG{-self.exitcode}")
            return f"Signal {-self.exitcode} ({sig}) received by PID {self.pid}"
        return "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


SIGNALS: dict[int, str] = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


def child_failed_error(
    *,
    python: str,
    site: str,
    py311: bool,
    entry: str,
    failures: Sequence[Failure],
    root_rank: int,
    launcher_lines: tuple[int, int, int, int, int] = (355, 892, 883, 139, 270),
) -> list[str]:
    """torchrun's final traceback and the ChildFailedError summary (root cause last).

    ``failures`` are in the agent's dict order (by local rank); indices follow that order, as
    ``ChildFailedError.format_msg`` enumerates them.
    """
    wrap, main_ln, run_ln, call_ln, agent_ln = launcher_lines
    tb = [
        "Traceback (most recent call last):",
        f'  File "{python.rsplit("/", 1)[0]}/torchrun", line 8, in <module>',
        "    sys.exit(main())",
    ]
    if py311:
        tb.append("             ^^^^^^")
    tb += [
        f'  File "{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", line {wrap}, in wrapper',
        "    return f(*args, **kwargs)",
    ]
    if py311:
        tb.append("           ^^^^^^^^^^^^^^^^^^")
    tb += [
        f'  File "{site}/torch/distributed/run.py", line {main_ln}, in main',
        "    run(args)",
        f'  File "{site}/torch/distributed/run.py", line {run_ln}, in run',
        "    elastic_launch(",
        f'  File "{site}/torch/distributed/launcher/api.py", line {call_ln}, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
    ]
    if py311:
        tb.append("           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^")
    tb += [
        f'  File "{site}/torch/distributed/launcher/api.py", line {agent_ln}, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]
    title = f"{entry} FAILED"
    blocks: dict[int, list[str]] = {}
    width = len(title)
    for idx, f in enumerate(failures):
        block = [
            f"[{idx}]:",
            f"  time      : {f.time:%Y-%m-%d_%H:%M:%S}",
            f"  host      : {f.host}",
            f"  rank      : {f.rank} (local_rank: {f.local_rank})",
            f"  exitcode  : {f.exitcode} (pid: {f.pid})",
            "  error_file: <N/A>",
            f"  traceback : {f.text()}",
        ]
        blocks[f.rank] = block
        width = max(width, *(len(x) for x in block))
    width = min(width, 60)
    others = [line for f in failures if f.rank != root_rank for line in blocks[f.rank]]
    return [
        *tb,
        "=" * width,
        title,
        "-" * width,
        "Failures:",
        *(others or ["  <NO_OTHER_FAILURES>"]),
        "-" * width,
        "Root Cause (first observed failure):",
        *blocks[root_rank],
        "=" * width,
    ]


@dataclass(frozen=True)
class Torchrun:
    """Version-dependent details of the torchrun agent's own lines.

    ``ident`` is what the elastic log header shows in its third field: a thread id for torch
    2.3-2.4, the agent's pid from 2.5 on. Line numbers are plausible for each release.
    """

    ident: int
    run_line: int
    sigterm_line: int
    failed_line: int
    launcher_lines: tuple[int, int, int, int, int]
    python: str
    site: str
    py311: bool

    def banner(self, ts: datetime) -> list[str]:
        return torchrun_banner(ts, self.ident, f"torch/distributed/run.py:{self.run_line}")

    def sigterm(self, ts: datetime, pid: int) -> str:
        src = f"torch/distributed/elastic/multiprocessing/api.py:{self.sigterm_line}"
        return glog("W", ts, self.ident, src) + f"Sending process {pid} closing signal SIGTERM"

    def failed(self, ts: datetime, first: Failure) -> str:
        src = f"torch/distributed/elastic/multiprocessing/api.py:{self.failed_line}"
        return glog("E", ts, self.ident, src) + (
            f"failed (exitcode: {first.exitcode}) local_rank: {first.local_rank} (pid: {first.pid}) "
            f"of binary: {self.python}"
        )

    def child_failed(self, entry: str, failures: Sequence[Failure]) -> list[str]:
        """The final traceback plus summary; the root cause is the min-timestamp failure (first on ties)."""
        root = min(failures, key=lambda f: f.time.replace(microsecond=0))
        return child_failed_error(
            python=self.python,
            site=self.site,
            py311=self.py311,
            entry=entry,
            failures=failures,
            root_rank=root.rank,
            launcher_lines=self.launcher_lines,
        )

    def end_of_job(self, ts: datetime, entry: str, failures: Sequence[Failure], sigterm_pids: Sequence[int] = ()) -> Stream:
        """Agent lines after a failure: SIGTERM to survivors, the failed line, the ChildFailedError."""
        s = Stream()
        for pid in sigterm_pids:
            s.add(ts, self.sigterm(ts, pid))
        t_failed = after(ts, 1.2 if sigterm_pids else 0.05)
        first = min(failures, key=lambda f: f.time.replace(microsecond=0))
        s.add(t_failed, self.failed(t_failed, first))
        s.extend(after(t_failed, 0.01), self.child_failed(entry, failures))
        return s


# --------------------------------------------------------------------------- stacks and tracebacks


@dataclass
class Thread:
    """One thread of a py-spy text dump; ``frames`` innermost first, as ``func (file:line)``."""

    tid: int
    status: str  # idle | active | active+gil
    name: str
    frames: Sequence[str]


def pyspy_dump(pid: int, cmdline: str, version: str, exe: str, threads: Sequence[Thread]) -> list[str]:
    """py-spy ``dump`` text output (no colours, as when redirected to a file)."""
    out = [f"Process {pid}: {cmdline}", f"Python v{version} ({exe})", ""]
    for t in threads:
        out.append(f'Thread {t.tid} ({t.status}): "{t.name}"')
        out.extend(f"    {fr}" for fr in t.frames)
    return out


def tb_frame(path: str, line: int, func: str, code: str, caret: str | None = None) -> list[str]:
    """One standard traceback frame; ``caret`` is the Python 3.11+ marker line, indentation included."""
    out = [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    if caret:
        out.append(caret)
    return out


def prefixed(prefix: str, lines: Iterable[str], *, tee: bool = False) -> list[str]:
    """Add a line prefix: torch's excepthook (``[rankN]: ``) skips empty lines, torchrun's tee does not."""
    return [f"{prefix}{x}" if x or tee else x for x in lines]


# --------------------------------------------------------------------------- numbers


def jitter(rng: random.Random, value: float, rel: float) -> float:
    """``value`` times a uniform factor in [1-rel, 1+rel]."""
    return value * (1.0 + rng.uniform(-rel, rel))


def loss_curve(rng: random.Random, steps: int, start: float, end: float, noise: float) -> list[float]:
    """A decaying loss with multiplicative noise; index 0 is step 1."""
    out = []
    for i in range(steps):
        frac = i / max(1, steps - 1)
        base = end + (start - end) * (1.0 - frac) ** 2.2
        out.append(base * (1.0 + rng.uniform(-noise, noise)))
    return out


class Mono:
    """One process's CLOCK_MONOTONIC: wall time plus a constant offset, for c10 header fractions.

    c10 prints the wall-clock second but the monotonic clock's nanoseconds; successive lines of one
    process therefore have increasing fractions that are unrelated to the printed second.
    """

    def __init__(self, rng: random.Random) -> None:
        self._offset_ns = rng.randrange(0, 10**12)
        self._extra_ns = rng.randrange(0, 1000)

    def ns(self, ts: datetime) -> int:
        wall_ns = (ts - EPOCH) // timedelta(microseconds=1) * 1000
        return (wall_ns + self._offset_ns + self._extra_ns) % 1_000_000_000


#: A fixed epoch for tz-free arithmetic on naive local datetimes.
EPOCH = datetime(1970, 1, 1)


def epoch_us(ts: datetime, utc_offset_h: int = 8) -> int:
    """Microseconds since the Unix epoch for a naive local time in a fixed UTC offset (no host tz)."""
    return (ts - EPOCH) // timedelta(microseconds=1) - utc_offset_h * 3_600_000_000
