"""Batch scan of historical runs: many job directories in, one table of what failed and how out.

:func:`scan` finds the jobs under each root (:mod:`~postmortem.scan.discover_jobs`), skips those
whose files, rules and code are unchanged since the last scan (:mod:`~postmortem.scan.cache`),
analyzes the rest in parallel with a per-job time limit (:mod:`~postmortem.scan.runner`), and
writes ``runs.parquet``, ``findings.parquet`` and ``index.html`` (:mod:`~postmortem.scan.outputs`),
plus ``reports/<job>.html`` per job with ``reports=True``. Each job is analyzed by the same
:func:`postmortem.api.analyze` as a single ``postmortem analyze``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import polars as pl

from postmortem import __version__
from postmortem.errors import InputError
from postmortem.rule_engine import load_rules
from postmortem.scan.cache import Cache, JobStat, code_version, job_key, rules_version, stat_job
from postmortem.scan.discover_jobs import JobDir, Unlistable, find_jobs
from postmortem.scan.outputs import (
    FINDINGS_FILE,
    INDEX_FILE,
    REPORTS_DIR,
    RUNS_FILE,
    job_id,
    report_file,
    write_outputs,
)
from postmortem.scan.runner import CACHEABLE_KINDS, LocalRunner, RayRunner, Task

#: Per-job time limit (seconds) when none is given: generous for a multi-GB job on one core.
DEFAULT_TIMEOUT_S = 600.0
Executor = Literal["local", "ray"]
ProgressMode = Literal["auto", "rich", "plain", "none"]


@dataclass
class ScanResult:
    """What a scan wrote and how it went."""

    out: Path
    runs: pl.DataFrame
    findings: pl.DataFrame
    jobs: int  # jobs found (rows in runs)
    analyzed: int  # analyzed in this scan
    cached: int  # taken from the cache
    errors: int  # rows with status "error" (from this scan or the cache)
    timed_out: int  # analyzed in this scan and stopped by the time limit
    elapsed_s: float
    rules_version: str
    tool_version: str

    @property
    def runs_path(self) -> Path:
        return self.out / RUNS_FILE

    @property
    def findings_path(self) -> Path:
        return self.out / FINDINGS_FILE

    @property
    def index_path(self) -> Path:
        return self.out / INDEX_FILE


class Progress(Protocol):
    """How a scan reports progress (a rich bar, plain lines, or nothing)."""

    def start(self, total: int, cached: int) -> None: ...
    def advance(self, name: str, status: str) -> None: ...
    def finish(self) -> None: ...


def scan(
    roots: Sequence[Path],
    out: Path,
    jobs: int | None = None,
    reports: bool = False,
    pattern: str | None = None,
    force: bool = False,
    executor: Executor = "local",
    address: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    rules_dirs: Sequence[Path] = (),
    progress: ProgressMode | Progress = "none",
) -> ScanResult:
    """Scan every job under ``roots`` into ``out``; see the module docstring.

    ``jobs``: worker processes (local) or tasks in flight (Ray); default: the CPU count
    (local) or the cluster's CPUs (Ray). ``timeout_s``: per-job time limit. ``force``: ignore
    the cache. Raises :class:`InputError` for a missing root and :class:`RuleError` for a bad
    rule file; a job's own failure never raises, it becomes a row with ``status == "error"``.

    The local executor starts its workers with ``spawn``: a script that calls this function
    needs the usual ``if __name__ == "__main__":`` guard (the ``postmortem`` command has it).
    """
    started = time.perf_counter()
    if executor not in ("local", "ray"):
        raise InputError(f"unknown executor {executor!r} (use local or ray)")
    if timeout_s <= 0:
        raise InputError(f"the per-job time limit must be positive (got {timeout_s})")
    out = Path(os.path.abspath(out))
    out.mkdir(parents=True, exist_ok=True)
    ruleset = load_rules(list(rules_dirs))
    rules_ver = rules_version(ruleset)
    code_ver = code_version()
    found = find_jobs(list(roots), pattern=pattern, exclude=[out])
    reporter = _progress(progress)

    rows: dict[str, dict[str, Any]] = {}  # path -> runs row
    finding_rows: dict[str, list[dict[str, Any]]] = {}
    keys: dict[str, str] = {}
    tasks: list[Task] = []
    cached_n = analyzed_n = timed_out = 0
    with Cache(out) as cache:
        hits = {} if force else cache.lookup(str(item.path) for item in found)
        for index, item in enumerate(found):
            path = str(item.path)
            base = {"job_id": job_id(path), "path": path, "root": str(item.root), "name": item.name,
                    "tool_version": __version__, "rules_version": rules_ver}
            if isinstance(item, Unlistable):
                rows[path] = {**base, "status": "error", "error": item.reason, "from_cache": False}
                continue
            try:
                st = stat_job(item.path)
            except OSError as exc:
                rows[path] = {**base, "status": "error", "from_cache": False,
                              "error": f"cannot list directory: {exc.strerror or exc}"}
                continue
            base.update(_stat_columns(st))
            rows[path] = base
            keys[path] = job_key(st, rules_ver, code_ver)
            hit = hits.get(path)
            if hit is not None and hit.key == keys[path] and _usable(hit.result, out, reports, timeout_s):
                _merge(rows[path], hit.result, out, from_cache=True)
                finding_rows[path] = hit.result.get("findings", [])
                cached_n += 1
            else:
                tasks.append(Task(index, path))

        reporter.start(len(found), cached_n)
        runner = _runner(executor, jobs, timeout_s, address, rules_dirs, reports)
        by_index = {t.index: found[t.index] for t in tasks}
        try:
            for task, result in runner.run(tasks):
                item = by_index[task.index]
                assert isinstance(item, JobDir)
                analyzed_n += 1
                timed_out += result["kind"] == "timeout"
                html = result.pop("html", None)
                if html is not None:
                    rel = report_file(item.name, rows[task.path]["job_id"])
                    _write_report(out, rel, html, result["run"])
                if result["kind"] in CACHEABLE_KINDS:
                    cache.store(task.path, keys[task.path], result)
                _merge(rows[task.path], result, out, from_cache=False)
                finding_rows[task.path] = result["findings"]
                reporter.advance(item.name, rows[task.path]["status"])
        finally:
            reporter.finish()

    runs_list = [rows[str(item.path)] for item in found]
    findings_list = [
        {**f, "job_id": rows[p]["job_id"], "path": p} for p, fs in finding_rows.items() for f in fs
    ]
    errors = sum(1 for r in runs_list if r.get("status") == "error")
    elapsed = time.perf_counter() - started
    meta = {
        "generated_at": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        "roots": [str(Path(os.path.abspath(r))) for r in roots],
        "tool_version": __version__,
        "code_version": code_ver,
        "rules_version": rules_ver,
        "rules": len(ruleset),
        "jobs": len(found),
        "analyzed": analyzed_n,
        "cached": cached_n,
        "errors": errors,
        "timed_out": timed_out,
        "elapsed_s": round(elapsed, 2),
        "executor": executor,
        "pattern": pattern,
        "reports": reports,
    }
    runs_df, findings_df = write_outputs(out, runs_list, findings_list, meta)
    return ScanResult(
        out=out, runs=runs_df, findings=findings_df, jobs=len(found), analyzed=analyzed_n, cached=cached_n,
        errors=errors, timed_out=timed_out, elapsed_s=time.perf_counter() - started,
        rules_version=rules_ver, tool_version=__version__,
    )


def _stat_columns(st: JobStat) -> dict[str, Any]:
    mtime = datetime.fromtimestamp(st.newest_mtime_ns / 1e9) if st.newest_mtime_ns is not None else None
    return {"files": st.files, "bytes": st.bytes, "newest_mtime": mtime.isoformat() if mtime else None}


def _merge(row: dict[str, Any], result: dict[str, Any], out: Path, *, from_cache: bool) -> None:
    """Fill a job's runs row from its result (fresh or cached)."""
    row.update(result["run"])
    row["from_cache"] = from_cache
    if row.get("report") and not (out / row["report"]).is_file():
        row["report"] = None  # deleted since: no dead link in the index
    if not row.get("job_ts"):
        row["job_ts"] = row.get("newest_mtime")  # no time in the logs: when the files were last written


def _usable(result: dict[str, Any], out: Path, reports: bool, timeout_s: float) -> bool:
    """Whether a cached result (under the right key) answers this scan."""
    kind = result.get("kind")
    if kind not in CACHEABLE_KINDS:
        return False
    if kind == "timeout":
        # a raised limit deserves another try; the same or a lower one would time out again
        return float(result.get("timeout_s", 0)) >= timeout_s
    if reports and kind == "ok":
        rel = result["run"].get("report")
        return bool(rel) and (out / rel).is_file()
    return True


def _write_report(out: Path, rel: str, html: str, run: dict[str, Any]) -> None:
    path = out / rel
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        run["error"] = f"report not written: {exc.strerror or exc}"
        return
    run["report"] = rel


def _runner(
    executor: Executor, jobs: int | None, timeout_s: float, address: str | None,
    rules_dirs: Sequence[Path], reports: bool,
) -> LocalRunner | RayRunner:
    dirs = tuple(os.path.abspath(d) for d in rules_dirs)
    if executor == "ray":
        return RayRunner(jobs=jobs, timeout_s=timeout_s, address=address, rules_dirs=dirs, reports=reports)
    return LocalRunner(jobs=jobs or os.cpu_count() or 1, timeout_s=timeout_s, rules_dirs=dirs, reports=reports)


# --------------------------------------------------------------------------- progress


class _NoProgress:
    def start(self, total: int, cached: int) -> None:
        pass

    def advance(self, name: str, status: str) -> None:
        pass

    def finish(self) -> None:
        pass


class PlainProgress:
    """Progress as plain lines on stderr (logs, CI): at most one line every ``every_s`` seconds."""

    def __init__(self, every_s: float = 5.0, stream: Any = None) -> None:
        self.every_s = every_s
        self.stream = stream or sys.stderr
        self.total = self.done = self.errors = self.cached = 0
        self._t0 = self._last = 0.0

    def start(self, total: int, cached: int) -> None:
        self.total, self.cached = total, cached
        self._t0 = self._last = time.monotonic()
        self._line(f"scan: {total} jobs, {cached} unchanged (from the cache), {total - cached} to analyze")

    def advance(self, name: str, status: str) -> None:
        self.done += 1
        self.errors += status == "error"
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._line(self._status(now))

    def finish(self) -> None:
        self._line(self._status(time.monotonic()) + " - done")

    def _status(self, now: float) -> str:
        todo = self.total - self.cached
        rate = self.done / max(now - self._t0, 1e-9)
        return f"scan: analyzed {self.done}/{todo} ({self.errors} errors) {rate:.1f} jobs/s"

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


class RichProgress:
    """A rich progress bar on the terminal."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(
            TextColumn("[bold]scan[/bold]"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
            TimeRemainingColumn(), console=Console(stderr=True), transient=False,
        )
        self._task: Any = None
        self.errors = 0

    def start(self, total: int, cached: int) -> None:
        self._bar.start()
        self._task = self._bar.add_task("scan", total=total, completed=cached, note=f"{cached} cached")

    def advance(self, name: str, status: str) -> None:
        self.errors += status == "error"
        self._bar.update(self._task, advance=1, note=f"{self.errors} errors  {name[-40:]}")

    def finish(self) -> None:
        self._bar.stop()


def _progress(mode: ProgressMode | Progress) -> Progress:
    if not isinstance(mode, str):
        return mode
    if mode == "auto":
        mode = "rich" if sys.stderr.isatty() else "plain"
    return {"rich": RichProgress, "plain": PlainProgress}.get(mode, _NoProgress)()


__all__ = ["DEFAULT_TIMEOUT_S", "REPORTS_DIR", "PlainProgress", "Progress", "RichProgress", "ScanResult", "scan"]
