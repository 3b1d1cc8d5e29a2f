"""Run the per-job analysis in parallel: local worker processes, or tasks on a Ray cluster.

Both executors run the same function, :func:`run_task`, which never raises: an analysis that
fails becomes a result with an error. What a worker cannot report itself — running past the
time limit, dying (a segfault, the kernel's OOM killer) — the executor turns into an error
result too, so one pathological job never aborts or stalls the scan.

Local executor: ``jobs`` long-lived worker processes (``spawn``: no fork of a multi-threaded
polars parent), each loading the rules once and taking one job at a time over its own pipe. The
parent waits on every pipe and process sentinel with the earliest deadline as timeout; a worker
past its job's deadline is killed and replaced by a fresh one. A time limit therefore costs a
process start only when it fires, not per job.

Ray executor: the same function as a Ray task (``num_cpus=1``, no retries), at most as many in
flight as the cluster has CPUs so a task's deadline starts when it can run; an overdue task is
cancelled with ``force=True`` (which kills its worker process). Job paths (and extra rule
directories) must be visible to the Ray workers under the same names: a shared file system.
"""

from __future__ import annotations

import os
import time
import traceback
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from multiprocessing import connection, get_context
from pathlib import Path
from typing import Any

from postmortem.analyzers._common import signal_name

#: Result kinds: ``ok`` and ``error`` (deterministic, cached), ``timeout`` (cached with its
#: limit), ``crash`` (not cached: could be memory pressure from elsewhere).
CACHEABLE_KINDS = ("ok", "error", "timeout")
#: Extra time a fresh worker gets to import and compile the rules before its first job's limit starts.
START_GRACE_S = 120.0
#: Workers in a row dying before they take their job: then the remaining jobs are not tried.
MAX_START_FAILURES = 3


@dataclass(frozen=True)
class Task:
    """One job to analyze; ``index`` is the caller's handle for it."""

    index: int
    path: str


# --------------------------------------------------------------------------- the per-job work


@lru_cache(maxsize=4)
def _ruleset(rules_dirs: tuple[str, ...]) -> Any:
    # once per worker process (and per distinct rule directories), not once per job
    from postmortem.rule_engine import load_rules

    return load_rules([Path(d) for d in rules_dirs])


def run_task(path: str, rules_dirs: Sequence[str] = (), reports: bool = False) -> dict[str, Any]:
    """Analyze one job; return its result (never raises).

    The result is ``{"kind", "run", "findings", "html"}``: ``run`` the report-derived part of
    the runs row plus ``analysis_s``/``analyzed_at``/``error``, ``findings`` the findings rows,
    ``html`` the per-job report when ``reports`` (written by the caller, which owns the output
    directory — on a Ray cluster the workers may not see it).
    """
    from postmortem.api import analyze
    from postmortem.errors import PostmortemError
    from postmortem.scan.outputs import error_row, report_rows

    started = time.perf_counter()
    analyzed_at = datetime.now().isoformat(timespec="seconds")
    html: str | None = None
    try:
        analysis = analyze(Path(path), rules=_ruleset(tuple(rules_dirs)))
        run, findings = report_rows(analysis.report)
        kind = "ok"
        if reports:
            try:
                from postmortem.render.html import html_text

                html = html_text(analysis.report, analysis.timeline.frame)
            except Exception as exc:  # the analysis stands even when its page can't be drawn
                run["error"] = f"report not written: {_describe(exc)}"
    except PostmortemError as exc:
        run, findings, kind = error_row(str(exc)), [], "error"
    except Exception as exc:  # a bug or a pathological input: one row, not a dead scan
        run, findings, kind = error_row(_describe(exc)), [], "error"
    run["analysis_s"] = round(time.perf_counter() - started, 4)
    run["analyzed_at"] = analyzed_at
    return {"kind": kind, "run": run, "findings": findings, "html": html}


def timeout_result(timeout_s: float) -> dict[str, Any]:
    """The result of a job that ran past the time limit."""
    return {
        "kind": "timeout",
        "timeout_s": timeout_s,
        "run": {"status": "error", "error": f"timed out after {timeout_s:g} s (per-job time limit)",
                "analysis_s": timeout_s, "analyzed_at": datetime.now().isoformat(timespec="seconds")},
        "findings": [],
        "html": None,
    }


def crash_result(why: str, elapsed_s: float) -> dict[str, Any]:
    """The result of a job whose worker died or could not run it."""
    return {
        "kind": "crash",
        "run": {"status": "error", "error": why, "analysis_s": round(elapsed_s, 4),
                "analyzed_at": datetime.now().isoformat(timespec="seconds")},
        "findings": [],
        "html": None,
    }


def _describe(exc: BaseException) -> str:
    # the innermost frame says where a bug is without a whole traceback in a table cell
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


# --------------------------------------------------------------------------- local processes


def _worker_main(conn: connection.Connection, rules_dirs: tuple[str, ...], reports: bool) -> None:
    """A worker process: take (index, path) from the pipe, send back (index, result), until None."""
    # Warm up before the first job so its analysis time (and time limit) is not charged with
    # imports and rule compilation.
    import postmortem.api

    _ruleset(rules_dirs)
    if reports:
        import postmortem.render.html
        import postmortem.render.plots  # noqa: F401
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, path = message
        conn.send((index, None))  # started: the time limit counts from here
        conn.send((index, run_task(path, rules_dirs, reports)))


@dataclass
class _Worker:
    process: Any
    conn: connection.Connection
    task: Task | None = None
    started: float = 0.0
    deadline: float = 0.0
    acked: bool = False  # the worker said it started the current task


@dataclass
class LocalRunner:
    """Analyze jobs in ``jobs`` worker processes with a per-job time limit."""

    jobs: int
    timeout_s: float
    rules_dirs: tuple[str, ...] = ()
    reports: bool = False
    _ctx: Any = field(default=None, init=False, repr=False)

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[Task, dict[str, Any]]]:
        """Yield (task, result) for every task, in completion order."""
        if not tasks:
            return
        self._ctx = get_context("spawn")
        pending = deque(tasks)
        workers: list[_Worker] = []
        start_failures = 0  # workers in a row that died before taking their job
        try:
            for _ in range(max(1, min(self.jobs, len(tasks)))):
                workers.append(self._start())
            while pending or any(w.task for w in workers):
                if start_failures >= MAX_START_FAILURES:
                    # workers die before taking a job (broken install, no memory for one more
                    # process ...): every further start would too; say so on each remaining row
                    while pending:
                        yield pending.popleft(), crash_result(
                            "analysis workers die at start (see the errors printed above)", 0.0)
                    if not any(w.task for w in workers):
                        break
                for i, w in enumerate(workers):
                    if w.task is None and pending:
                        if w.process is None or not w.process.is_alive():
                            self._retire(w)
                            workers[i] = w = self._start()
                        self._assign(w, pending.popleft())
                busy = [w for w in workers if w.task is not None]
                wait_s = max(0.0, min(w.deadline for w in busy) - time.monotonic())
                ready = set(connection.wait([w.conn for w in busy] + [w.process.sentinel for w in busy], wait_s))
                now = time.monotonic()
                for w in busy:
                    task = w.task
                    assert task is not None
                    if w.conn in ready:
                        try:
                            index, result = w.conn.recv()
                        except (EOFError, OSError):
                            pass  # the worker died mid-send: handled as a crash below
                        else:
                            if index == task.index and result is None:
                                w.deadline = now + self.timeout_s
                                w.acked = True
                                start_failures = 0
                                continue
                            if index == task.index:
                                w.task = None
                                yield task, result
                                continue
                    if not w.process.is_alive():
                        w.task = None
                        code = w.process.exitcode
                        start_failures += not w.acked
                        yield task, crash_result(_death(code), now - w.started)
                        self._retire(w)
                    elif now >= w.deadline:
                        w.task = None
                        self._retire(w)
                        yield task, timeout_result(self.timeout_s)
        finally:
            for w in workers:
                self._stop(w)

    def _start(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main, args=(child, self.rules_dirs, self.reports), daemon=True, name="postmortem-scan"
        )
        with _polars_threads(max(1, (os.cpu_count() or 1) // max(1, self.jobs))):
            process.start()
        child.close()
        return _Worker(process, parent)

    def _assign(self, w: _Worker, task: Task) -> None:
        w.task = task
        w.acked = False
        w.started = time.monotonic()
        # until the worker says it started (after its warm-up), allow for a slow process start
        w.deadline = w.started + self.timeout_s + START_GRACE_S
        w.conn.send((task.index, task.path))

    def _retire(self, w: _Worker) -> None:
        """Kill a worker (stuck or dead) and leave a slot to be refilled on demand."""
        if w.process is not None:
            if w.process.is_alive():
                w.process.kill()
            w.process.join(timeout=5)
            w.conn.close()
        w.process = None

    def _stop(self, w: _Worker) -> None:
        if w.process is None:
            return
        try:
            if w.task is None and w.process.is_alive():
                w.conn.send(None)
                w.process.join(timeout=2)
        except OSError:
            pass
        self._retire(w)


def _death(code: int | None) -> str:
    if code is not None and code < 0:
        return f"analysis worker died ({signal_name(code)}); the job may need more memory than is available"
    return f"analysis worker exited unexpectedly (exit code {code})"


@contextmanager
def _polars_threads(n: int) -> Iterator[None]:
    # A spawned child copies os.environ at start. jobs workers x all-cores polars pools would
    # oversubscribe the machine, so each worker gets its share. The parent's own pool is
    # already sized; the variable is restored right after the start.
    old = os.environ.get("POLARS_MAX_THREADS")
    os.environ["POLARS_MAX_THREADS"] = str(n)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("POLARS_MAX_THREADS", None)
        else:
            os.environ["POLARS_MAX_THREADS"] = old


# --------------------------------------------------------------------------- ray


@dataclass
class RayRunner:
    """Analyze jobs as tasks on a Ray cluster (``address``; an already initialized Ray is reused)."""

    jobs: int | None
    timeout_s: float
    address: str | None = None
    rules_dirs: tuple[str, ...] = ()
    reports: bool = False

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[Task, dict[str, Any]]]:
        """Yield (task, result) for every task, in completion order."""
        if not tasks:
            return
        try:
            import ray
        except ImportError:
            from postmortem.errors import InputError

            raise InputError(
                "--executor ray needs Ray: pip install 'postmortem[ray]'"
            ) from None
        own = not ray.is_initialized()
        if own:
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
        try:
            yield from self._run(ray, tasks)
        finally:
            if own:
                ray.shutdown()

    def _run(self, ray: Any, tasks: Sequence[Task]) -> Iterator[tuple[Task, dict[str, Any]]]:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
        width = self.jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))
        pending = deque(tasks)
        running: dict[Any, tuple[Task, float]] = {}
        while pending or running:
            while pending and len(running) < width:
                task = pending.popleft()
                ref = remote.remote(task.path, self.rules_dirs, self.reports)
                running[ref] = (task, time.monotonic())
            first_deadline = min(started + self.timeout_s for _, started in running.values())
            wait_s = max(0.05, first_deadline - time.monotonic())
            done, _ = ray.wait(list(running), num_returns=1, timeout=wait_s)
            for ref in done:
                task, started = running.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # worker crashed, node lost, task cancelled ...
                    result = crash_result(f"ray task failed: {type(exc).__name__}: {exc}"[:500],
                                          time.monotonic() - started)
                yield task, result
            now = time.monotonic()
            for ref, (task, started) in list(running.items()):
                if now - started >= self.timeout_s:
                    running.pop(ref)
                    ray.cancel(ref, force=True)
                    yield task, timeout_result(self.timeout_s)
