"""The first failure: the earliest error event, its rank, file and line.

## What it means
Error events are the timeline's error rows (one per multi-line record: a traceback, a C++
abort, a CANN EI block) and the evidence of error-level findings. They are ordered by time
on the reference node's clock (see clock-skew), then by collective sequence number, then by
file order where times are missing. The earliest is the first failure. When the runner-up on
another node is closer than the clock uncertainty, the order is reported as uncertain.

## What a match does not prove
The first error printed is not always the cause: a rank can fail silently (SIGKILL, a hang)
before another rank prints an error about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from postmortem.analyzers import clock_skew, unexplained_errors
from postmortem.analyzers._common import (
    SEVERE,
    event_times,
    hms,
    rank_nodes,
)
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.model import Finding

ID = "first-failure"
TITLE = "First failure across ranks"
#: it orders the error lines of every finding: every finding source first
NEEDS: tuple[str, ...] = (unexplained_errors.ID,)


@dataclass(frozen=True)
class Result(AnalyzerResult):
    #: the earliest error event and the earliest on another rank (dicts: rank, node, ts, ts_adj, file, line, text)
    earliest: dict[str, Any] | None = None
    runner_up: dict[str, Any] | None = None
    margin_s: float | None = None
    gap_s: float | None = None
    #: the runner-up may have been first: the clocks cannot order them
    ambiguous: bool = False
    note: str = ""
    clause: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)

def run(ctx: AnalyzerContext) -> Result:
    """Order error events across ranks; turn unexplained exceptions into findings."""
    tl = ctx.timeline
    skew = ctx.get(clock_skew.Result)
    events = _events(tl, skew, ctx.findings(), event_times(tl, ctx.cache))
    if not events:
        return Result(margin_s=skew.uncertainty_s)
    first = events[0]
    other = next((e for e in events[1:] if e["rank"] != first["rank"] and e["rank"] is not None), None)
    return Result(
        earliest=first,
        runner_up=other,
        margin_s=skew.uncertainty_s,
        events=events[:20],
        **_ordering_note(first, other, skew),
    )


def _events(
    tl: pl.DataFrame, skew: clock_skew.Result, findings: list[Finding], times: Mapping[tuple[str, int], datetime]
) -> list[dict[str, Any]]:
    """Error events, earliest first: error rows (one per record) plus error findings' evidence.

    ``ts`` is the line's time as printed or inherited; ``ts_adj`` the time used for ordering
    (inherited times moved to the next printed time, then onto the reference clock)."""
    nodes = rank_nodes(tl)
    errors = tl.filter(
        (pl.col("kind") == "error")
        & ~pl.col("exc_type").fill_null("").str.ends_with("Warning")
        & (pl.col("level").fill_null("ERROR") != "WARNING")
    ).with_columns(clock_skew.corrected_expr(skew))
    one_per_record = pl.concat(
        [
            errors.filter(pl.col("record").is_null()),
            errors.filter(pl.col("record").is_not_null())
            .sort(["ts", "line"], nulls_last=True)
            .unique(subset=["file", "record"], keep="first", maintain_order=True),
        ]
    )
    events: dict[tuple[str, int], dict[str, Any]] = {}
    for row in one_per_record.iter_rows(named=True):
        key = (row["file"], int(row["line"]))
        node = row["node"] or nodes.get(row["rank"])
        adj = clock_skew.corrected(times[key], node, skew) if key in times else row["ts_adj"]
        events[key] = {
            "rank": row["rank"], "node": node, "ts": row["ts"],
            "ts_adj": adj, "file": row["file"], "line": int(row["line"]), "text": row["message"] or "",
            "seq": row["seq"], "source": "timeline",
        }
    for f in findings:
        if f.severity not in SEVERE or f.rule_role == "context":
            continue
        for e in f.evidence:
            if not e.file or (e.file, e.line) in events:
                continue
            node = nodes.get(e.rank) if e.rank is not None else None
            events[(e.file, e.line)] = {
                "rank": e.rank, "node": node, "ts": e.ts or f.first_ts,
                "ts_adj": clock_skew.corrected(times.get((e.file, e.line), e.ts or f.first_ts), node, skew),
                "file": e.file, "line": e.line,
                "text": e.text, "seq": None, "source": f.id,
            }
    return sorted(events.values(), key=event_key)


def event_key(e: dict[str, Any]) -> tuple:
    """Order: corrected time (missing last), then sequence number, then file order."""
    ts = e.get("ts_adj") or e.get("ts")
    seq = e.get("seq")
    return (
        ts is None,
        ts.isoformat() if ts is not None else "",
        seq is None,
        seq if seq is not None else 0,
        e.get("file") or "",
        e.get("line") or 0,
    )


def _ordering_note(first: dict[str, Any], other: dict[str, Any] | None, skew: clock_skew.Result) -> dict[str, Any]:
    """Is the first failure first by more than the clock uncertainty?

    ``note`` is a full sentence for the report; ``clause`` fits after the verdict's summary.
    """
    if other is None:
        return {"gap_s": None, "ambiguous": False, "note": "", "clause": ""}
    r1, r2 = first["rank"], other["rank"]
    t1 = first.get("ts_adj") or first.get("ts")
    t2 = other.get("ts_adj") or other.get("ts")
    if t1 is None or t2 is None:
        return {
            "gap_s": None,
            "ambiguous": True,
            "note": "Times are missing on some error lines; those were ordered by sequence number and file order.",
            "clause": f"rank {r1} comes before rank {r2} by file order only (times are missing)",
        }
    gap = (t2 - t1).total_seconds()
    cross_node = first.get("node") != other.get("node")
    margin = skew.uncertainty_s
    if cross_node and margin is None:
        return {
            "gap_s": round(gap, 3),
            "ambiguous": True,
            "note": (
                f"Rank {r1} failed {gap:.3f} s before rank {r2} on another node, but the nodes' clocks could not "
                "be compared; the order across nodes is uncertain."
            ),
            "clause": f"rank {r1} was first by {gap:.3f} s over rank {r2} on a node whose clock could not be compared",
        }
    if cross_node and gap <= margin:
        return {
            "gap_s": round(gap, 3),
            "ambiguous": True,
            "note": (
                f"Rank {r1} ({hms(t1)}) is first by only {gap:.3f} s, within the ±{margin} s clock uncertainty "
                f"between nodes; rank {r2} may have failed first."
            ),
            "clause": f"rank {r1} was first by only {gap:.3f} s over rank {r2}, within the ±{margin} s clock uncertainty",
        }
    if not cross_node and margin and margin >= 1.0 and gap < margin:
        return {
            "gap_s": round(gap, 3),
            "ambiguous": True,
            "note": (
                f"Rank {r1} and rank {r2} failed within the same {margin:g} s clock tick; they were ordered by "
                "file order."
            ),
            "clause": f"rank {r2} failed in the same {margin:g} s clock tick",
        }
    return {"gap_s": round(gap, 3), "ambiguous": False, "note": "", "clause": ""}
