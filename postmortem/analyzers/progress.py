"""Per-rank training progress: last step, last event, step cadence, ranks behind the majority.

## What it means
For every rank that prints progress lines, the last step it reported, when, and the median
seconds per step. Ranks whose last step is below the step most ranks reached are *behind*.

Two more readings of the same lines:

* the first step whose loss or gradient norm is NaN/inf (numerical instability), and the rank
  that went bad first when one did (an earlier step, or its own ``local_loss``);
* a rank that spends far longer than the others in data loading or compute every step
  (``data_time``, ``compute_time`` fields), while the others wait for it in communication:
  the straggler that sets the whole job's pace.

## What a match does not prove
Many trainers print progress on rank 0 only; a rank without progress lines is not behind.
A rank one step behind at the moment of a crash may simply not have printed its line yet.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from postmortem.analyzers._common import evidence_rows, grep, make_finding, most_common
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.ranges import format_ranks, plural_ranks

ID = "progress"
TITLE = "Per-rank training progress"
NEEDS: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankProgress:
    """One rank's progress: its last line and, when it prints steps, its last step and cadence."""

    last_ts: datetime | None = None
    events: int = 0
    last_step: int | None = None
    last_step_ts: datetime | None = None
    first_step: int | None = None
    cadence_s: float | None = None
    step_interval: int | None = None
    max_steps: int | None = None


@dataclass(frozen=True)
class Result(AnalyzerResult):
    ranks: dict[int, RankProgress] = field(default_factory=dict)
    majority_last_step: int | None = None
    behind: list[int] = field(default_factory=list)
    #: the job's last step and its time, also when the progress lines carry no rank (one trainer log)
    last_step: int | None = None
    last_progress_ts: datetime | None = None
    max_steps: int | None = None
    cadence_s: float | None = None
    step_interval: int | None = None
    #: per-rank mean seconds per step by what they measure (data, compute, comm), when printed
    timing: dict[int, dict[str, float | None]] = field(default_factory=dict)
    first_nan_step: int | None = None
    #: file -> the line of its last step, for the files whose last step reached max_steps: where
    #: training ended, for logs whose lines carry no time
    finished_at: dict[str, int] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """The last step reached the planned number of steps."""
        return self.last_step is not None and self.max_steps is not None and self.last_step >= self.max_steps


def run(ctx: AnalyzerContext) -> Result:
    """Compute per-rank progress facts and flag ranks behind the majority's last step."""
    tl = ctx.timeline
    last_ts = (
        tl.lazy()
        .filter(pl.col("rank").is_not_null() & pl.col("ts").is_not_null())
        .group_by("rank")
        .agg(pl.col("ts").max().alias("last_ts"), pl.len().alias("events"))
        .collect()
    )
    # (the columns read here: the progress rows are most of a big job's timeline)
    prog = progress_rows(tl.select("file", "line", "rank", "ts", "step", "max_steps", "message", "loss", "grad_norm"))
    per_rank = _per_key(prog.filter(pl.col("rank").is_not_null()), "rank")
    lines = {int(row["rank"]): (row["last_ts"], int(row["events"])) for row in last_ts.iter_rows(named=True)}
    steps = {int(row["rank"]): row for row in per_rank.iter_rows(named=True)}
    ranks: dict[int, RankProgress] = {}
    for rank in sorted(set(lines) | set(steps)):
        when, events = lines.get(rank, (None, 0))
        row = steps.get(rank, {})
        ranks[rank] = RankProgress(
            last_ts=when,
            events=events,
            last_step=row.get("last_step"),
            last_step_ts=row.get("last_step_ts"),
            first_step=row.get("first_step"),
            cadence_s=row.get("cadence_s"),
            step_interval=row.get("step_interval"),
            max_steps=row.get("max_steps"),
        )

    stepped = {r: e.last_step for r, e in ranks.items() if e.last_step is not None}
    majority = most_common(list(stepped.values()))
    behind = sorted(r for r, s in stepped.items() if majority is not None and s < majority)
    cadences = [e.cadence_s for e in ranks.values() if e.cadence_s is not None]

    # Job-level view, also for logs whose progress lines carry no rank (one trainer log).
    job_prog = _per_key(prog.with_columns(pl.lit(0).alias("_all")), "_all")
    job: dict[str, Any] = {"last_step": None, "last_step_ts": None, "cadence_s": None, "max_steps": None}
    if not job_prog.is_empty():
        row = job_prog.row(0, named=True)
        job = {k: row[k] for k in ("last_step", "last_step_ts", "cadence_s", "max_steps", "step_interval")}
    cadence = _median(cadences) if cadences else job["cadence_s"]

    findings = []
    if behind:
        rows = (
            prog.filter(pl.col("rank").is_in(behind))
            .sort(["rank", "step", "ts"], descending=[False, True, True], nulls_last=True)
            .unique(subset=["rank"], keep="first", maintain_order=True)
        )
        steps = ", ".join(f"{r}: {stepped[r]}" for r in behind[:8])
        findings.append(
            make_finding(
                ID,
                suffix="behind",
                category="straggler",
                severity="warning",
                title=f"Ranks {format_ranks(behind)} stopped behind the majority's step {majority}",
                rule_role="context",
                ranks=behind,
                evidence=evidence_rows(rows),
                count=len(behind),
                explanation=(
                    f"Most ranks last reported step {majority}; these ranks last reported an earlier step "
                    f"({steps}). A rank that stops early is either the one that failed or stalled, or it "
                    "simply stopped printing (progress on some ranks only)."
                ),
                fix="Look at what these ranks did after their last step: their last lines, exit codes and stacks.",
                fields={"majority_last_step": majority, "last_steps": {str(r): stepped[r] for r in behind}},
            )
        )
    slow = _slow_rank_finding(prog)
    if slow is not None:
        findings.append(slow)
    nan = _nan_finding(prog)
    if nan is not None:
        findings.append(nan)
    return Result(
        findings=tuple(findings),
        ranks=ranks,
        majority_last_step=majority,
        behind=behind,
        last_step=job["last_step"],
        last_progress_ts=job["last_step_ts"],
        max_steps=job["max_steps"],
        cadence_s=cadence,
        step_interval=job.get("step_interval"),
        timing=slow.fields["means"] if slow is not None else {},
        first_nan_step=nan.fields["first_bad_step"] if nan is not None else None,
        finished_at=_finished_at(prog, job["max_steps"]),
    )


def _finished_at(prog: pl.DataFrame, max_steps: int | None) -> dict[str, int]:
    """Each file's last progress line, where that line's step reached ``max_steps`` (the last line,
    not the first to reach it: a bar that restarts every epoch reaches its total many times)."""
    if max_steps is None or prog.is_empty():
        return {}
    last = prog.sort("file", "line").group_by("file").agg(pl.col("line").last(), pl.col("step").last())
    done = last.filter(pl.col("step") >= max_steps)
    return {str(f): int(n) for f, n in zip(done["file"], done["line"], strict=True)}


#: A metric printed as nan/inf in text the parser could not read as a number ("loss nan").
_NAN_TEXT = r"(?i)\b(?:loss|grad_norm|gnorm|grad norm)\b['\"]?\s*[:=]?\s*'?[-+]?(?:nan|inf)\b"


#: Per-step timing fields trainers print, by what they measure.
_TIMINGS: dict[str, str] = {
    "data": r"(?i)\b(?:data_time|data time|dataloader_time|fetch_data|data_wait|time_data)['\"]?\s*[:=]\s*'?([0-9.]+)",
    "compute": r"(?i)\b(?:compute_time|fwd_bwd_time|forward_backward_time)['\"]?\s*[:=]\s*'?([0-9.]+)",
    "comm": r"(?i)\b(?:comm_time|allreduce_time|sync_time|wait_time)['\"]?\s*[:=]\s*'?([0-9.]+)",
}
#: A row with any of the timings (the lines that print one; HF's 'elapsed_time' is not one)
_ANY_TIMING = "|".join(f"(?:{p})" for p in _TIMINGS.values())
_TIMING_HINTS = ["_time", "fetch_data", "data time", "data_wait", "time_data"]
#: A rank is slow when its mean time is this many times the other ranks' median, and at least SLOW_MIN_S.
SLOW_FACTOR = 5.0
SLOW_MIN_S = 0.05


def _slow_rank_finding(prog: pl.DataFrame):
    """A rank that spends far longer than the others in data loading or compute every step, while
    the others wait for it in communication: the straggler that sets the job's pace."""
    rows = grep(prog, _ANY_TIMING, _TIMING_HINTS).filter(pl.col("rank").is_not_null())
    if rows.is_empty():
        return None
    rows = rows.with_columns(
        *(pl.col("message").str.extract(p, 1).cast(pl.Float64, strict=False).alias(k) for k, p in _TIMINGS.items())
    )
    means = rows.group_by("rank").agg(pl.col(k).mean() for k in _TIMINGS).sort("rank")
    if means.height < 2:
        return None
    table = {int(r["rank"]): {k: r[k] for k in _TIMINGS} for r in means.iter_rows(named=True)}
    slow: dict[int, str] = {}
    for kind in ("data", "compute"):
        values = sorted(m[kind] for m in table.values() if m[kind] is not None)
        middle = (len(values) - 1) // 2  # the median's index among the others (one value fewer)
        for rank, m in table.items():
            mine = m[kind]
            if mine is None or len(values) < 2:
                continue
            # the others' median: without this rank's value, the ones after it move down one place
            typical = values[middle + 1] if bisect_left(values, mine) <= middle else values[middle]
            if mine >= SLOW_MIN_S and mine >= SLOW_FACTOR * typical:
                slow.setdefault(rank, kind)
    if not slow or len(slow) > len(table) // 2:
        return None
    culprits = sorted(slow)
    kind = slow[culprits[0]]
    theirs = [m[kind] for r, m in table.items() if r not in slow and m[kind] is not None]
    waits = [m["comm"] for r, m in table.items() if r not in slow and m["comm"] is not None]
    mine_comm = [table[r]["comm"] for r in culprits if table[r]["comm"] is not None]
    corroborated = bool(waits and mine_comm) and min(waits) > max(mine_comm)
    field = {"data": "data loading", "compute": "compute"}[kind]
    first_rows = (
        rows.filter(pl.col("rank").is_in(culprits) & pl.col(kind).is_not_null())
        .sort(["step", "ts", "file", "line"], nulls_last=True)
        .unique(subset=["rank"], keep="first", maintain_order=True)
    )
    mean_slow = sum(table[r][kind] for r in culprits) / len(culprits)
    mean_rest = sum(theirs) / len(theirs) if theirs else 0.0
    return make_finding(
        ID,
        suffix="slow-rank",
        category="straggler",
        severity="warning",
        title=f"{plural_ranks(culprits).capitalize()} spent {mean_slow:.3f} s per step in {field} against "
        f"{mean_rest:.3f} s on the other ranks",
        rule_role="root",
        ranks=culprits,
        evidence=evidence_rows(first_rows),
        count=rows.height,
        explanation=(
            f"Every step, {plural_ranks(culprits)} took far longer in {field} than the other ranks"
            + (f"; the others spent the difference waiting in communication (comm time {sum(waits) / len(waits):.3f} s"
               f" against {sum(mine_comm) / len(mine_comm):.3f} s)" if corroborated else "")
            + ". In synchronous training the slowest rank sets the pace of the whole job."
        ),
        fix=(
            "Look at what this rank does differently: its data shard or disk (slow storage, a larger or "
            "harder shard, fewer dataloader workers), its host (CPU contention, thermal throttling) or its device."
        ),
        fields={"culprit_ranks": culprits, "kind": kind, "means": table, "corroborated": corroborated,
                "mean_slow_s": round(mean_slow, 4), "mean_others_s": round(mean_rest, 4)},
    )


#: A rank's own loss (before the all-reduce) printed as nan/inf.
_LOCAL_BAD = r"(?i)\blocal[_ ]loss['\"]?\s*[:=]\s*'?[-+]?(?:nan|inf)\b"


def _nan_finding(prog: pl.DataFrame):
    """Loss or gradient norm turning NaN/inf: the first step, and the ranks that got there first."""
    bad_value = pl.col("loss").is_nan() | pl.col("loss").is_infinite()
    bad_value = bad_value | pl.col("grad_norm").is_nan() | pl.col("grad_norm").is_infinite()
    text_bad = grep(prog, _NAN_TEXT, ["nan", "inf"]).filter(~bad_value.fill_null(False))
    bad = pl.concat([prog.filter(bad_value.fill_null(False)), text_bad])
    if bad.is_empty():
        return None
    first_step = int(bad.get_column("step").min())  # type: ignore[arg-type]
    firsts = bad.sort(["step", "ts", "file", "line"], nulls_last=True).unique(subset=["rank"], keep="first",
                                                                             maintain_order=True)
    per_rank = {int(r): int(s) for r, s in zip(firsts["rank"], firsts["step"], strict=True) if r is not None}
    # the loss is usually reduced across ranks: only a rank that went bad strictly earlier stands
    # out, or one whose own (local) loss is bad while the other ranks' are finite
    culprits = sorted(r for r, s in per_rank.items() if s == first_step) if len(set(per_rank.values())) > 1 else []
    at_first = bad.filter(pl.col("step") == first_step)
    local_bad = at_first.filter(pl.col("message").str.contains(_LOCAL_BAD)).get_column("rank").drop_nulls()
    local_bad_ranks = sorted({int(r) for r in local_bad})
    if not culprits and local_bad_ranks and len(local_bad_ranks) < len(per_rank):
        culprits = local_bad_ranks
    loss_bad = (pl.col("loss").is_nan() | pl.col("loss").is_infinite()).fill_null(False) | pl.col(
        "message"
    ).str.contains(r"(?i)\bloss\b['\"]?\s*[:=]?\s*'?[-+]?(?:nan|inf)\b")
    which = "loss" if at_first.select(loss_bad.any()).item() else "grad_norm"
    return make_finding(
        ID,
        suffix="nan",
        category="numerical_instability",
        severity="error",
        title=f"The {which} became NaN/inf at step {first_step}",
        rule_role="root",
        ranks=sorted(per_rank),
        evidence=evidence_rows(
            at_first.unique(subset=["rank"], keep="first", maintain_order=True)
            .with_columns(pl.col("rank").is_in(culprits).alias("_culprit"))
            .sort(["_culprit", "ts", "file", "line"], descending=[True, False, False, False], nulls_last=True)
        ),
        count=bad.height,
        explanation=(
            f"Training metrics are NaN or infinite from step {first_step} on. Once the loss or the gradient norm "
            "is NaN the weights are corrupt; later steps only propagate it. A run can finish all its steps "
            "like this and still be useless."
        ),
        fix=(
            "Find what changed at that step: the batch (bad sample, empty sequence), the learning rate, "
            "loss scaling (fp16 overflow), or a communication bug corrupting gradients (stream sync, "
            "memory reuse across streams). Enable anomaly detection or NaN checks on that step."
        ),
        fields={"first_bad_step": first_step, "metric": which, "culprit_ranks": culprits, "per_rank": per_rank},
    )


def progress_rows(tl: pl.DataFrame) -> pl.DataFrame:
    """Rows that report a training step; a step above the planned total is not a step
    (``tokens per step=131,072`` read as step 131)."""
    prog = tl.filter(pl.col("step").is_not_null())
    planned = prog.get_column("max_steps").max()
    return prog if planned is None else prog.filter(pl.col("step") <= planned)


def _per_key(prog: pl.DataFrame, key: str) -> pl.DataFrame:
    """Last step, its time, median seconds per step and typical step interval per ``key``."""
    if prog.is_empty():
        return pl.DataFrame(
            schema={
                key: pl.Int64, "last_step": pl.Int64, "last_step_ts": pl.Datetime("us"), "first_step": pl.Int64,
                "max_steps": pl.Int64, "cadence_s": pl.Float64, "step_interval": pl.Int64,
            }
        )
    summary = prog.group_by(key).agg(
        pl.col("step").max().alias("last_step"),
        pl.col("step").min().alias("first_step"),
        pl.col("max_steps").max().alias("max_steps"),
        pl.col("ts").filter(pl.col("step") == pl.col("step").max()).max().alias("last_step_ts"),
    )
    # cadence: first time each step was seen, then seconds per step between consecutive steps
    firsts = (
        prog.filter(pl.col("ts").is_not_null())
        .group_by(key, "step")
        .agg(pl.col("ts").min())
        .sort([key, "step"])
        .with_columns(
            pl.col("step").diff().over(key).alias("d_step"),
            (pl.col("ts").diff().over(key).dt.total_microseconds() / 1e6).alias("d_s"),
        )
        .filter((pl.col("d_step") > 0) & (pl.col("d_s") >= 0))
        .group_by(key)
        .agg(
            (pl.col("d_s") / pl.col("d_step")).median().alias("cadence_s"),
            pl.col("d_step").median().cast(pl.Int64).alias("step_interval"),
        )
    )
    return summary.join(firsts, on=key, how="left").sort(key)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
