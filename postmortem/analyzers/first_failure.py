"""The first failure: the earliest error event, its rank, file and line; uncaught exceptions.

## What it means
Error events are the timeline's error rows (one per multi-line record: a traceback, a C++
abort, a CANN EI block) and the evidence of error-level findings. They are ordered by time
on the reference node's clock (see clock-skew), then by collective sequence number, then by
file order where times are missing. The earliest is the first failure. When the runner-up on
another node is closer than the clock uncertainty, the order is reported as uncertain.

Python exceptions that no rule explains become findings of their own (``rank_exception``, or a
more specific category for MemoryError, OutOfMemoryError, ImportError, OSError ...), so a
KeyError on one rank is never lost among a thousand timeouts.

## What a match does not prove
The first error printed is not always the cause: a rank can fail silently (SIGKILL, a hang)
before another rank prints an error about it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from postmortem.analyzers import (
    clock_skew,
    collective_mismatch,
    collective_sequence,
    end_of_data,
    exit_codes,
    flight_recorder,
    hccl_ranktable,
    progress,
    stack_groups,
)
from postmortem.analyzers._common import (
    CASCADE_PATTERN,
    SEVERE,
    event_times,
    hms,
    make_finding,
    rank_nodes,
    records_of,
)
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.model import Evidence, Finding
from postmortem.ranges import plural_ranks

ID = "first-failure"
TITLE = "First failure across ranks"
#: it turns exceptions no earlier finding explains into findings: every earlier analyzer first
NEEDS: tuple[str, ...] = (
    progress.ID, exit_codes.ID, stack_groups.ID, clock_skew.ID, collective_sequence.ID, collective_mismatch.ID,
    hccl_ranktable.ID, end_of_data.ID, flight_recorder.ID,
)


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

#: Exception types that only report a failure elsewhere (the launcher, the watchdog, a signal).
CASCADE_EXC = r"^(?:ChildFailedError|DistBackendError|SignalException|CalledProcessError)$"

#: Fallback categories for exceptions no rule matched, by exception type (and text).
_EXC_CATEGORY: tuple[tuple[str, str], ...] = (
    (r"^KeyboardInterrupt$", "job_cancelled"),
    (r"^MemoryError$", "host_oom"),
    (r"OutOfMemoryError$|out of memory", "device_oom"),
    (r"^(?:ModuleNotFoundError|ImportError)$", "environment_config"),
    (r"^(?:FileNotFoundError|PermissionError|IsADirectoryError|NotADirectoryError)$|No space left|Stale file handle",
     "storage_error"),
    (r"^(?:FloatingPointError)$|\bnan\b", "numerical_instability"),
    (r"^(?:DistStoreError|DistNetworkError|RendezvousTimeoutError|RendezvousConnectionError|RendezvousClosedError)$",
     "comm_init_failure"),
)


def run(ctx: AnalyzerContext) -> Result:
    """Order error events across ranks; turn unexplained exceptions into findings."""
    tl = ctx.timeline
    skew = ctx.get(clock_skew.Result)
    prior = ctx.findings()
    covered = {(e.file, e.line) for f in prior for e in f.evidence}
    covered_records = records_of(tl, covered)

    # findings cite a few lines each; the same line on other ranks (digits aside) is explained too
    prior_templates = {_template(e.text) for f in prior for e in f.evidence}
    findings = _exception_findings(tl, covered, covered_records, prior_templates)
    explained = covered | {(e.file, e.line) for f in findings for e in f.evidence}
    templates = prior_templates | {_template(e.text) for f in findings for e in f.evidence}
    unexplained = _unexplained_errors(
        tl, explained, records_of(tl, explained), templates, ctx.get(progress.Result).last_progress_ts
    )
    if unexplained is not None:
        findings.append(unexplained)
    events = _events(tl, skew, prior + findings, event_times(tl, ctx.cache))
    if not events:
        return Result(findings=tuple(findings), margin_s=skew.uncertainty_s)
    first = events[0]
    other = next((e for e in events[1:] if e["rank"] != first["rank"] and e["rank"] is not None), None)
    return Result(
        findings=tuple(findings),
        earliest=first,
        runner_up=other,
        margin_s=skew.uncertainty_s,
        events=events[:20],
        **_ordering_note(first, other, skew),
    )


def _exception_findings(
    tl: pl.DataFrame, covered: set[tuple[str, int]], covered_records: set[tuple[str, int]], templates: set[str]
) -> list[Finding]:
    """One finding per exception type that no rule or earlier analyzer explained."""
    exc = tl.filter(
        pl.col("exc_type").is_not_null()
        & ~pl.col("exc_type").str.ends_with("Warning")
        & (pl.col("kind") != "stack")
    ).sort(["ts", "file", "line"], nulls_last=True)
    if exc.is_empty():
        return []
    # a traceback's time is its first timed line: the exception line itself rarely has one
    rec_ts = (
        tl.filter(pl.col("record").is_not_null() & pl.col("ts").is_not_null())
        .group_by("file", "record")
        .agg(pl.col("ts").min().alias("_rec_ts"))
    )
    exc = exc.join(rec_ts, on=["file", "record"], how="left").with_columns(pl.coalesce("ts", "_rec_ts").alias("ts"))
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    seen_records: set[tuple[str, Any]] = set()
    for row in exc.sort(["ts", "file", "line"], nulls_last=True).iter_rows(named=True):
        key_rec = (row["file"], row["record"])
        if (row["file"], row["line"]) in covered or (row["record"] is not None and key_rec in covered_records):
            continue
        if _template(row["message"]) in templates:
            continue
        if row["record"] is not None:
            if key_rec in seen_records:  # chained exceptions: keep the first line of each record only
                continue
            seen_records.add(key_rec)
        text = row["message"] or ""
        cascade = bool(re.search(CASCADE_EXC, row["exc_type"])) or bool(re.search(CASCADE_PATTERN, text))
        groups.setdefault((row["exc_type"], cascade), []).append(row)
    findings = []
    for (exc_type, cascade), rows in sorted(groups.items(), key=lambda kv: (_first_ts_key(kv[1]), kv[0])):
        ranks = sorted({int(r["rank"]) for r in rows if r["rank"] is not None})
        category = "rank_exception"
        for pattern, cat in _EXC_CATEGORY:
            if re.search(pattern, exc_type) or re.search(pattern, rows[0]["message"] or "", re.IGNORECASE):
                category = cat
                break
        who = plural_ranks(ranks) if ranks else "a process"
        evidence = [
            Evidence(file=r["file"], line=int(r["line"]), rank=r["rank"], text=r["message"] or "", ts=r["ts"])
            for r in rows[:8]
        ]
        findings.append(
            make_finding(
                ID,
                suffix=exc_type + (":echo" if cascade else ""),
                category=_echo_category(rows[0]["message"] or "") if cascade and category == "rank_exception" else category,
                severity="error",
                title=f"{who[0].upper() + who[1:]} raised {exc_type}" + (" (an echo of a failure elsewhere)" if cascade else ""),
                rule_role="symptom" if cascade else "root",
                ranks=ranks,
                evidence=evidence,
                count=len(rows),
                explanation=(
                    f"An uncaught {exc_type} ended the training process"
                    + (f" on {who}" if ranks else "")
                    + ". No failure signature explains it; the exception text and traceback are the cause."
                    if not cascade
                    else f"{exc_type} reports that a peer, the watchdog or the launcher stopped this process."
                ),
                fix=(
                    "Read the traceback on the first rank that raised it; fix the code or the data it points at. "
                    "If only some ranks raise it, look for rank-dependent data (shards, a bad sample)."
                    if not cascade
                    else "Find the first failure on another rank."
                ),
                fields={"exc_type": exc_type, "first_text": rows[0]["message"]},
            )
        )
    return findings


def _template(text: str | None) -> str:
    return re.sub(r"\d+", "#", text or "")


def _unexplained_errors(
    tl: pl.DataFrame,
    covered: set[tuple[str, int]],
    covered_records: set[tuple[str, int]],
    templates: set[str],
    last_progress: datetime | None,
) -> Finding | None:
    """Error lines at the end of the job (after the last step) that nothing explains: the job
    failed, and we can at least point at where."""
    # the cheap filters first: the template test rewrites every message it sees
    rows = tl.filter(
        (pl.col("kind") == "error") & (pl.col("level").fill_null("ERROR") != "WARNING") & pl.col("exc_type").is_null()
    ).filter(
        ~pl.col("message").fill_null("").str.replace_all(r"\d+", "#").is_in(sorted(templates))
        # watchdog and exit lines belong to the collective-sequence and exit-codes analyzers
        & pl.col("seq").is_null()
        & pl.col("last_enqueued").is_null()
        & pl.col("exit_code").is_null()
        & pl.col("signal").is_null()
    )
    if last_progress is not None:
        rows = rows.filter(pl.col("ts").is_null() | (pl.col("ts") >= last_progress))
    if rows.is_empty():
        return None
    keep = [
        (f, n) not in covered and (r is None or (f, int(r)) not in covered_records)
        for f, n, r in zip(rows["file"], rows["line"], rows["record"], strict=True)
    ]
    rows = rows.filter(pl.Series(keep, dtype=pl.Boolean)).sort(["ts", "file", "line"], nulls_last=True)
    if rows.is_empty():
        return None
    firsts = rows.unique(subset=["rank"], keep="first", maintain_order=True).head(8)
    ranks = sorted(int(r) for r in rows.get_column("rank").drop_nulls().unique())
    return make_finding(
        ID,
        suffix="error-lines",
        category="unknown_failure",
        severity="error",
        title=f"{rows.height} error line(s) at the end of the job that no rule explains",
        rule_role="symptom",
        ranks=ranks,
        evidence=[
            Evidence(file=r["file"], line=int(r["line"]), rank=r["rank"], text=r["message"] or "", ts=r["ts"])
            for r in firsts.iter_rows(named=True)
        ],
        count=rows.height,
        explanation="These error-level lines come after the last training step and match no failure signature.",
        fix="Read the first of them; if it is a known failure, a rule for it makes the next diagnosis exact.",
        fields={"first_text": firsts["message"][0]},
    )


def _echo_category(text: str) -> str:
    """What an echo reports: a peer's connection going away, a timeout, or just the launcher."""
    if re.search(r"(?i)connection (?:closed|reset)|remote process|broken pipe|ncclRemoteError", text):
        return "network_failure"
    if re.search(r"(?i)time(?:d)? ?out|watchdog", text):
        return "collective_timeout"
    return "unknown_failure"


def _first_ts_key(rows: list[dict[str, Any]]) -> tuple[int, str]:
    ts = rows[0]["ts"]
    return (0, ts.isoformat()) if ts is not None else (1, "")


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
