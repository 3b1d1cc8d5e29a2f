"""The first failure: the primary finding's earliest line on a culprit rank, and the step it broke.

Times are compared on the reference node's clock (clock-skew); a line whose time was inherited
is placed at its file's next printed time. When another culprit on another node is too close
to tell apart, or several ranks failed with none singled out, no rank is named first.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import polars as pl

from postmortem.analyzers import clock_skew, exit_codes, job_status, progress, stack_groups
from postmortem.analyzers._common import event_time, event_times, rank_nodes, tied_across_nodes
from postmortem.analyzers.base import AnalyzerContext
from postmortem.analyzers.progress import progress_rows
from postmortem.model import Evidence, Finding, FirstFailure

#: A progress line printed while its step is still running.
_MID_STEP = re.compile(r"(?i)\b(?:forward|backward)\b(?! ?(?:and backward )?(?:time|ms|s\b))|\bstart(?:ing|ed)? step\b|\bbegin")
#: A py-spy frame inside an evaluation loop.
_EVAL_FRAME = re.compile(r"(?i)^(?:\w+\.)*\w*eval\w* \(")


def first_failure(
    ctx: AnalyzerContext, category: str, primary: Finding | None, culprits: list[int]
) -> FirstFailure | None:
    """Where the failure began, or None for a healthy job or a hang with no cause."""
    if category in ("healthy", "hang_unknown") or primary is None:
        return None
    skew = ctx.get(clock_skew.Result)
    nodes = rank_nodes(ctx.timeline)
    evidence = [e for e in primary.evidence if e.file]
    on_culprit = [e for e in evidence if e.rank in culprits]
    pool = on_culprit or evidence
    if not pool:
        return None
    file_nodes = _file_nodes(ctx.timeline, {e.file for e in pool})
    times = event_times(ctx.timeline, ctx.cache)

    def where(e: Evidence) -> tuple[datetime | None, str | None]:
        node = nodes.get(e.rank) if e.rank is not None else None
        node = node or file_nodes.get(e.file)
        return clock_skew.corrected(event_time(e, times), node, skew), node

    def key(e: Evidence) -> tuple:
        t = where(e)[0]
        return (t is None, t.isoformat() if t is not None else "", e.file, e.line)

    ordered = sorted(pool, key=key)
    # torchrun's summary singles one out: its "Root Cause (first observed failure)" entry
    root = ctx.get(exit_codes.Result).root_cause_rank
    if not culprits and root is not None and any(o.rank == root for o in ordered):
        ordered = sorted(ordered, key=lambda o: o.rank != root)
    e = ordered[0]
    rank = e.rank
    if not culprits and rank != root and len({o.rank for o in ordered if o.rank is not None}) > 1:
        rank = None  # several ranks and none singled out (a reduced NaN loss, a fabric timeout)
    elif tied_across_nodes(where(e), [where(o) for o in ordered[1:] if o.rank != e.rank], skew.uncertainty_s):
        rank = None  # another node's culprit may have been first: the clocks cannot tell
    # a rank stuck in an evaluation is still in the step it evaluates after
    groups = ctx.get(stack_groups.Result).groups
    in_eval = primary.rule == "stack-groups" and any(
        rank in g.ranks and any(_EVAL_FRAME.search(f) for f in g.frames) for g in groups
    )
    step = failing_step(ctx, rank, e.ts, e.file, e.line, in_step=in_eval)
    return FirstFailure(rank=rank, ts=e.ts, file=e.file, line=e.line, text=e.text, step=step)


def _file_nodes(tl: pl.DataFrame, files: set[str]) -> dict[str, str]:
    """The node each of ``files`` belongs to (its most common node), for evidence without a rank."""
    rows = (
        tl.filter(pl.col("file").is_in(sorted(files)) & pl.col("node").is_not_null())
        .group_by("file", "node")
        .agg(pl.len().alias("n"))
        .sort(["file", "n", "node"], descending=[False, True, False])
        .unique(subset=["file"], keep="first", maintain_order=True)
    )
    return {f: n for f, n in zip(rows["file"], rows["node"], strict=True)}


def failing_step(
    ctx: AnalyzerContext, rank: int | None, ts: datetime | None, file: str, line: int, *, in_step: bool = False
) -> int | None:
    """The step a failure happened in: the line's own step, else the step after the last one reported
    before it (the last one itself when ``in_step``: the failure is known to be inside it)."""
    tl = ctx.timeline
    own = tl.filter((pl.col("file") == file) & (pl.col("line") == line)).get_column("step").drop_nulls()
    if own.len():
        return int(own[0])
    prog = progress_rows(tl.select("rank", "ts", "step", "max_steps", "message"))  # (no copy of the other columns)
    if prog.is_empty():
        return None
    mine = prog.filter(pl.col("rank") == rank) if rank is not None else prog.clear()
    pool = mine if not mine.is_empty() else prog
    if ts is not None:
        # a time printed in whole seconds (error.json, ChildFailedError) covers its whole second
        bound = ts + timedelta(seconds=1) if ts.microsecond == 0 else ts
        before = pool.filter(pl.col("ts").is_null() | (pl.col("ts") < bound) | (pl.col("ts") == ts))
        pool = before if not before.is_empty() else pool.clear()
    if pool.is_empty():
        return None
    last = int(pool.get_column("step").max())  # type: ignore[arg-type]
    # "step 1: forward done" is printed inside step 1, not after it
    latest = pool.filter(pl.col("step") == last).get_column("message").drop_nulls()
    if in_step or (latest.len() and _MID_STEP.search(latest[-1])):
        return last
    facts = ctx.get(progress.Result)
    finished = ctx.get(job_status.Result).training_finished_ts
    if (facts.max_steps is not None and last >= facts.max_steps) or (
        finished is not None and ts is not None and ts > finished
    ):
        return None  # failed after training finished (teardown, final save): no training step failed
    return last + 1 if facts.step_interval in (None, 1) else None
