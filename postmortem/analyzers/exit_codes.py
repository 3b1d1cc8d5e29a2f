"""Per-rank exit codes and signals from ChildFailedError blocks, agent lines and error.json.

## What it means
How each worker process ended: exit code, the signal for negative codes (``-9`` = SIGKILL),
whether the elastic agent sent it SIGTERM, and which entry the agent called the root cause.

## What a match does not prove
SIGTERM (-15) on most ranks is the agent stopping the survivors after another rank failed.
SIGABRT (-6) after a collective timeout is the watchdog taking the process down, not a crash.
SIGKILL (-9) is most often the kernel OOM killer, but a scheduler or a person can send it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from postmortem.analyzers._common import evidence_rows, first_by_rank, grep, make_finding, signal_name
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.model import Finding
from postmortem.ranges import plural_ranks

ID = "exit-codes"
TITLE = "Exit codes and signals per rank"
NEEDS: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankExit:
    """How one worker process ended, and the line that says so."""

    exit_code: int | None = None
    signal: str | None = None
    #: the launcher sent it the signal (torchrun's "Sending process N closing signal SIGTERM")
    terminated_by_agent: bool = False
    #: torchrun's ChildFailedError names it "Root Cause (first observed failure)"
    root_cause: bool = False
    ts: datetime | None = None
    file: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class Result(AnalyzerResult):
    ranks: dict[int, RankExit] = field(default_factory=dict)
    root_cause_rank: int | None = None
    terminated_by_agent: list[int] = field(default_factory=list)

_NATIVE = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"}
_WATCHDOG_ABORT = (
    r"taking the entire process down|watchdog thread terminated|Watchdog caught collective|"
    r"terminate called after throwing an instance of 'c10::DistBackendError'"
)


def run(ctx: AnalyzerContext) -> Result:
    """Collect exit codes per rank and turn signal deaths into findings."""
    tl = ctx.timeline
    rows = tl.filter(pl.col("exit_code").is_not_null() | pl.col("signal").is_not_null())
    if rows.is_empty():
        return Result()
    rows = _attach_ranks(tl, rows)
    sent = rows.filter(
        pl.col("exit_code").is_null() & pl.col("message").str.contains(r"(?i)closing signal|via signal")
    )
    by_agent: dict[int, str] = {
        int(r): str(s) for r, s in zip(sent["rank"], sent["signal"], strict=True) if r is not None
    }
    root_rows = _root_cause_rows(tl, rows)
    exits = rows.filter(pl.col("exit_code").is_not_null() & pl.col("rank").is_not_null()).with_columns(
        (pl.col("exit_code") != 0).alias("_bad")
    )
    exits = exits.sort(["rank", "_bad", "ts", "file", "line"], descending=[False, True, False, False, False], nulls_last=True)
    per_rank = exits.unique(subset=["rank"], keep="first", maintain_order=True)

    ranks: dict[int, RankExit] = {}
    for row in per_rank.iter_rows(named=True):
        rank = int(row["rank"])
        code = int(row["exit_code"])
        sig = row["signal"] if row["signal"] and str(row["signal"]).startswith("SIG") else signal_name(code)
        ranks[rank] = RankExit(
            exit_code=code,
            signal=sig,
            terminated_by_agent=rank in by_agent,
            root_cause=(row["file"], row["line"]) in root_rows,
            ts=row["ts"],
            file=row["file"],
            line=row["line"],
        )
    for rank, sig in by_agent.items():
        ranks.setdefault(rank, RankExit(signal=sig, terminated_by_agent=True))
    root_rank = min((r for r, e in ranks.items() if e.root_cause), default=None)

    aborted = set(
        int(r)
        for r in grep(tl, _WATCHDOG_ABORT, ["process down", "watchdog", "DistBackendError"]).filter(pl.col("rank").is_not_null())
        .get_column("rank")
        .unique()
    )
    findings = _findings(ranks, per_rank, aborted)
    findings.extend(_agent_signals(rows))
    return Result(
        findings=tuple(findings), ranks=ranks, root_cause_rank=root_rank, terminated_by_agent=sorted(by_agent)
    )


def _attach_ranks(tl: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """Give rank-less rows (agent lines naming a pid) the rank that pid belonged to."""
    pids = (
        tl.filter(pl.col("pid").is_not_null() & pl.col("rank").is_not_null())
        .group_by("pid", "rank")
        .agg(pl.len().alias("n"))
        .sort(["pid", "n", "rank"], descending=[False, True, False])
        .unique(subset=["pid"], keep="first", maintain_order=True)
        .select("pid", pl.col("rank").alias("_pid_rank"))
    )
    return (
        rows.join(pids, on="pid", how="left")
        .with_columns(pl.coalesce("rank", "_pid_rank").alias("rank"))
        .drop("_pid_rank")
    )


def _root_cause_rows(tl: pl.DataFrame, rows: pl.DataFrame) -> set[tuple[str, int]]:
    """(file, line) of exit rows inside a ChildFailedError 'Root Cause (first observed failure)' entry."""
    marks = grep(tl, r"Root Cause \(first observed failure\)", ["Root Cause"]).select(
        "file", "record", pl.col("line").alias("_root_line")
    )
    if marks.is_empty():
        return set()
    hit = rows.join(marks, on=["file", "record"], how="inner").filter(pl.col("line") > pl.col("_root_line"))
    return {(f, int(n)) for f, n in zip(hit["file"], hit["line"], strict=True)}


def _findings(ranks: dict[int, RankExit], per_rank: pl.DataFrame, aborted: set[int]) -> list[Finding]:
    """One finding per kind of ending (a signal or an exit code), grouping ranks."""
    groups: dict[str, list[int]] = {}
    for rank, e in sorted(ranks.items()):
        code = e.exit_code
        if code is None or code == 0:
            continue
        key = e.signal or f"code {code}"
        groups.setdefault(key, []).append(rank)
    findings = []
    for key, members in sorted(groups.items()):
        ev_rows = first_by_rank(per_rank.filter(pl.col("rank").is_in(members)))
        evidence = evidence_rows(ev_rows)
        code = ranks[members[0]].exit_code
        who = plural_ranks(members)
        fields: dict[str, Any] = {"signal": key if key.startswith("SIG") else None, "exit_code": code}
        if key in _NATIVE:
            watchdog = key == "SIGABRT" and set(members) <= aborted
            findings.append(
                make_finding(
                    ID,
                    suffix=key,
                    category="collective_timeout" if watchdog else "native_crash",
                    severity="error" if watchdog else "critical",
                    title=f"{who.capitalize()} died with {key} (exit code {code})",
                    rule_role="symptom" if watchdog else "root",
                    ranks=members,
                    evidence=evidence,
                    count=len(members),
                    explanation=(
                        "The process was aborted by the NCCL/HCCL watchdog after a collective failed or timed out."
                        if watchdog
                        else f"{key} kills a process from native code: a segfault, bus error or abort in a C/C++/CUDA "
                        "extension, the interpreter or a driver. Python never saw an exception."
                    ),
                    fix=(
                        "Find the collective failure that came first; the abort is its consequence."
                        if watchdog
                        else "Rerun with PYTHONFAULTHANDLER=1 (and TORCH_SHOW_CPP_STACKTRACES=1) to get the stack; "
                        "check for core dumps and the last native frames; try without custom extensions."
                    ),
                    fields=fields,
                )
            )
        elif key == "SIGKILL":
            agent = all(ranks[r].terminated_by_agent for r in members)
            findings.append(
                make_finding(
                    ID,
                    suffix=key,
                    category="job_cancelled" if agent else "host_oom",
                    severity="error",
                    title=f"{who.capitalize()} killed by SIGKILL (exit code {code})",
                    rule_role="symptom" if agent else "root",
                    ranks=members,
                    evidence=evidence,
                    count=len(members),
                    explanation=(
                        "SIGKILL cannot be caught, so the process left no traceback. Without a sender in the logs "
                        "it is most often the kernel OOM killer (host memory exhausted); a scheduler enforcing a "
                        "limit or a person can send it too."
                    ),
                    fix="Check `dmesg -T | grep -i -E 'killed process|out of memory'` on the node and the job's "
                    "memory limit (cgroup, Slurm --mem, Kubernetes limits); reduce dataloader workers or "
                    "pinned memory, or shard the data loading.",
                    fields={**fields, "inferred": True},
                )
            )
        elif key in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"):
            interrupt = key in ("SIGINT", "SIGHUP")
            findings.append(
                make_finding(
                    ID,
                    suffix=key,
                    category="job_cancelled",
                    severity="error" if interrupt else "warning",
                    title=f"{who.capitalize()} stopped by {key} (exit code {code})",
                    rule_role="root" if interrupt else "symptom",
                    ranks=members,
                    evidence=evidence,
                    count=len(members),
                    explanation=(
                        "The process was interrupted (Ctrl-C or a closed terminal)."
                        if interrupt
                        else "SIGTERM is how torchrun stops the surviving workers once one worker failed, and how "
                        "schedulers cancel or preempt a job. On its own it says who was stopped, not why."
                    ),
                    fix="Look for the first failure on another rank, or for a cancellation/preemption "
                    "message from the scheduler.",
                    fields=fields,
                )
            )
        else:
            findings.append(
                make_finding(
                    ID,
                    suffix=key.replace(" ", "-"),
                    # an exit status names no cause: the process's own lines (its traceback) do, and
                    # whatever finding reads them outranks this one
                    category="unknown_failure",
                    severity="error",
                    title=f"{who.capitalize()} exited with code {code}",
                    rule_role="symptom",
                    ranks=members,
                    evidence=evidence,
                    count=len(members),
                    explanation="A non-zero exit without a signal: the process raised an exception or called "
                    "sys.exit with an error. The cause is in its own output before the exit; when these logs do "
                    "not hold it, the failure cannot be named.",
                    fix="Read this rank's traceback: its stderr (torchrun --log-dir with --redirects 3 --tee 3 keeps "
                    "one file per rank) or error.json (decorate the entry point with "
                    "torch.distributed.elastic.multiprocessing.errors.record).",
                    fields=fields,
                )
            )
    return findings


def _agent_signals(rows: pl.DataFrame) -> list[Finding]:
    """The elastic agent itself received a death signal: the job was stopped from outside."""
    got = rows.filter(pl.col("signal").str.starts_with("received ")).sort(["ts", "file", "line"], nulls_last=True)
    if got.is_empty():
        return []
    num = int(str(got["signal"][0]).split()[-1])
    name = signal_name(-num) or f"signal {num}"
    return [
        make_finding(
            ID,
            suffix="agent-" + name,
            category="job_cancelled",
            severity="error",
            title=f"The torchrun agent received {name}: the job was stopped from outside",
            rule_role="root",
            evidence=evidence_rows(got, limit=4),
            count=got.height,
            explanation="The launcher got a termination signal from its environment (scancel, a time limit, "
            "preemption, a Kubernetes eviction, Ctrl-C) and stopped all workers.",
            fix="Check the scheduler's record for the job (sacct -j, kubectl describe pod) for time limits, "
            "preemption or a manual cancel.",
            fields={"signal": name},
        )
    ]
