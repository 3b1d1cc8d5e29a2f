"""The flight-recorder answer without a flight recorder: who never entered the collective.

## What it means
From the watchdog lines (``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=…,
OpType=…, NumelIn=…, Timeout(ms)=…) ran for …``, ``failure detected by watchdog at work
sequence id: N PG status: last enqueued work: E, last completed work: C``, the dump-signal
lines and their ``WorkHCCL``/Gloo equivalents) every rank gets: the collective it timed out in,
its size, when that collective started (timeout time minus ``ran for`` or ``Timeout(ms)``),
the last enqueued and completed sequence numbers, and who signalled the dump first.
Then, over every rank of the job:

* enqueued = completed: the rank never entered the collective the others wait in. It is the
  straggler, stuck on the CPU side (data loading, I/O, a Python exception, a different path).
* enqueued > completed: the rank is inside the collective, waiting.
* a rank with logs but no watchdog line while the others time out: it was not waiting; it
  is the straggler (or it died: see its exit code).
* every rank inside and none missing: no rank is late; suspect the fabric or a device hang.

## What a match does not prove
Sequence numbers count per process group; ranks in different groups are not comparable.
Ranks with no log files at all cannot be told apart from stragglers.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from postmortem.analyzers import exit_codes
from postmortem.analyzers._common import (
    evidence_rows,
    first_by_rank,
    grep,
    make_finding,
    observed_ranks,
    rank_errors,
    world_ranks,
)
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.model import Finding
from postmortem.ranges import plural_ranks

ID = "collective-sequence"
TITLE = "Collective sequence across ranks"
NEEDS: tuple[str, ...] = (exit_codes.ID,)


@dataclass(frozen=True)
class Collective:
    """The collective most ranks timed out in, and where every rank stood against it."""

    seq: int
    op_type: str | None = None
    numel: int | None = None
    timeout_ms: int | None = None
    start_ts: datetime | None = None
    first_timeout_ts: datetime | None = None
    pgs: list[str] = field(default_factory=list)
    ranks_inside: list[int] = field(default_factory=list)
    ranks_not_entered: list[int] = field(default_factory=list)
    ranks_without_watchdog_line: list[int] = field(default_factory=list)
    ranks_no_logs: list[int] = field(default_factory=list)
    laggards: list[int] = field(default_factory=list)
    stragglers: list[int] = field(default_factory=list)
    timed_out: list[int] = field(default_factory=list)
    #: "status": a rank's own watchdog status says it never entered; "absence": it printed no watchdog line
    straggler_evidence: str | None = None
    #: stragglers that finished their loop and left while the others waited
    left_early: list[int] = field(default_factory=list)

    @property
    def text(self) -> str:
        return f"{self.op_type} SeqNum={self.seq}" if self.op_type else f"SeqNum={self.seq}"


@dataclass(frozen=True)
class Result(AnalyzerResult):
    #: per-rank watchdog state: the collective it timed out in, its start, last enqueued/completed work
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)
    first_signal: dict[str, Any] | None = None
    collectives: list[Collective] = field(default_factory=list)
    #: mismatch | straggler | fabric | incomplete | unclear, or None without watchdog lines
    diagnosis: str | None = None

    @property
    def main(self) -> Collective | None:
        return self.collectives[0] if self.collectives else None

_FIRST_SIGNAL = (
    r"First PG on this rank to signal dumping|"
    r"Received a dump signal due to a collective timeout from this local rank"
)
_OBSERVED_SIGNAL = r"Observed flight recorder dump signal from another rank|Received a dump signal due to a collective timeout from\s+rank (\d+)"


def run(ctx: AnalyzerContext) -> Result:
    """Build per-rank collective state and decide straggler / inside / fabric."""
    tl = ctx.timeline
    timeouts = (
        tl.filter(pl.col("seq").is_not_null() & pl.col("timeout_ms").is_not_null() & pl.col("rank").is_not_null())
        .sort(["ts", "file", "line"], nulls_last=True)
        .unique(subset=["rank", "seq", "op_type"], keep="first", maintain_order=True)
    )
    status = tl.filter(
        pl.col("last_enqueued").is_not_null() & pl.col("last_completed").is_not_null() & pl.col("rank").is_not_null()
    ).sort(["ts", "file", "line"], nulls_last=True)
    signals = grep(tl, _FIRST_SIGNAL + "|" + _OBSERVED_SIGNAL, ["signal dumping", "dump signal"]).sort(
        ["ts", "file", "line"], nulls_last=True
    )
    if timeouts.is_empty() and status.is_empty():
        return Result()

    per_rank = _per_rank(timeouts, status)
    main = _main_collective(timeouts)
    world = world_ranks(ctx.job, tl)
    seen = set(observed_ranks(tl))
    first_signal = _first_signal(signals)
    findings: list[Finding] = []
    if main is None:
        return Result(ranks=per_rank, first_signal=first_signal)

    seq, op = main
    main_rows = timeouts.filter((pl.col("seq") == seq) & (pl.col("op_type").eq_missing(op)))
    states: dict[int, str] = {}
    main_pgs = {str(p) for p in main_rows["pg"].drop_nulls()}
    for rank in sorted(set(world) | set(per_rank)):
        states[rank] = _state(per_rank.get(rank), seq, op, main_pgs, rank in seen)
        if rank in per_rank:
            per_rank[rank]["state"] = states[rank]
    inside = sorted(r for r, s in states.items() if s == "inside")
    not_entered = sorted(r for r, s in states.items() if s == "not_entered")
    silent = sorted(r for r, s in states.items() if s == "no_watchdog_line")
    no_logs = sorted(r for r, s in states.items() if s == "no_logs")
    enq = {r: e["last_enqueued"] for r, e in per_rank.items() if e.get("last_enqueued") is not None}
    laggards = sorted(r for r, v in enq.items() if len(set(enq.values())) > 1 and v == min(enq.values()))
    # a rank whose own status says it never entered is certain; a rank that merely printed no
    # watchdog line may have been stopped by the agent before its watchdog fired
    stragglers = not_entered or silent
    if any(s == "other_op" for s in states.values()):
        diagnosis = "mismatch"
    elif stragglers:
        diagnosis = "straggler"
    elif inside and not no_logs and set(inside) >= set(world):
        diagnosis = "fabric"
    elif no_logs:
        diagnosis = "incomplete"
    else:
        diagnosis = "unclear"

    first = main_rows.row(0, named=True)
    numel = first["numel"]
    timeout_ms = first["timeout_ms"]
    starts = [e["start_ts"] for r, e in per_rank.items() if e.get("seq") == seq and e.get("start_ts") is not None]
    start_ts = min(starts) if starts else None
    collective = Collective(
        seq=seq, op_type=op, numel=numel, timeout_ms=timeout_ms, start_ts=start_ts,
        first_timeout_ts=first["ts"], pgs=sorted({str(p) for p in main_rows["pg"].drop_nulls()}),
        ranks_inside=inside, ranks_not_entered=not_entered, ranks_without_watchdog_line=silent,
        ranks_no_logs=no_logs, laggards=laggards, stragglers=stragglers,
        timed_out=sorted(int(r) for r in main_rows["rank"].unique()),
        straggler_evidence="status" if not_entered else ("absence" if silent else None),
    )
    what = collective.text
    timed_out = collective.timed_out
    findings.append(
        make_finding(
            ID,
            suffix="timeouts",
            category="collective_timeout",
            severity="error",
            title=f"{plural_ranks(timed_out).capitalize()} timed out in {what}"
            + (f" after {timeout_ms} ms" if timeout_ms else ""),
            rule_role="symptom",
            ranks=timed_out,
            evidence=evidence_rows(first_by_rank(main_rows)),
            count=main_rows.height,
            explanation=(
                f"The watchdog aborted {what}"
                + (f" (NumelIn={numel})" if numel is not None else "")
                + (f", started around {start_ts:%H:%M:%S}" if start_ts else "")
                + ". A timeout says a rank waited, not why: the rank(s) it waited for are the lead."
            ),
            fix="Find the ranks that never entered this collective (stragglers) and what they did instead.",
            fields={"seq": seq, "op_type": op, "numel": numel, "timeout_ms": timeout_ms, "start_ts": start_ts},
        )
    )
    other_op = sorted(r for r, s in states.items() if s == "other_op")
    if other_op:
        findings.append(_other_op_finding(collective, other_op, per_rank, tl))
    if stragglers:
        straggler, collective = _straggler_finding(ctx, collective, per_rank, tl)
        findings.append(straggler)
    elif diagnosis == "fabric":
        findings.append(
            make_finding(
                ID,
                suffix="fabric",
                category="network_failure",
                severity="warning",
                title=f"Every rank was inside {what} and none was missing: suspect the fabric",
                rule_role="context",
                ranks=inside,
                evidence=evidence_rows(first_by_rank(main_rows), limit=4),
                count=len(inside),
                explanation="All ranks enqueued the collective and waited in it; no rank stayed behind on the CPU "
                "side. That points at the transport (NIC, switch, IB/RoCE link), a device hang, or a "
                "communicator problem rather than at one rank's code.",
                fix="Check NCCL_DEBUG=INFO/WARN output and the NICs (ibstat, link flaps), run nccl-tests "
                "all_reduce_perf across the same nodes, and check device health (Xid, ECC).",
                fields={"seq": seq, "op_type": op},
            )
        )
    return Result(
        findings=tuple(findings), ranks=per_rank, first_signal=first_signal, collectives=[collective],
        diagnosis=diagnosis,
    )


def _per_rank(timeouts: pl.DataFrame, status: pl.DataFrame) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for row in timeouts.iter_rows(named=True):
        rank = int(row["rank"])
        if rank in out:  # the earliest timeout of a rank is the one that matters; list the others
            out[rank]["timeouts"].append({"pg": row["pg"], "seq": row["seq"], "op_type": row["op_type"], "ts": row["ts"]})
            continue
        ms = row["ran_ms"] if row["ran_ms"] is not None else row["timeout_ms"]
        start = row["ts"] - timedelta(milliseconds=ms) if row["ts"] is not None and ms is not None else None
        out[rank] = {
            "pg": row["pg"], "seq": row["seq"], "op_type": row["op_type"], "numel": row["numel"],
            "timeout_ms": row["timeout_ms"], "ran_ms": row["ran_ms"], "ts": row["ts"], "start_ts": start,
            "last_enqueued": None, "last_completed": None, "file": row["file"], "line": row["line"],
            "timeouts": [{"pg": row["pg"], "seq": row["seq"], "op_type": row["op_type"], "ts": row["ts"]}],
        }
    for row in status.iter_rows(named=True):
        rank = int(row["rank"])
        entry = out.setdefault(
            rank,
            {"pg": row["pg"], "seq": None, "op_type": None, "numel": None, "timeout_ms": None, "ran_ms": None,
             "ts": row["ts"], "start_ts": None, "last_enqueued": None, "last_completed": None,
             "file": row["file"], "line": row["line"], "timeouts": []},
        )
        if entry["last_enqueued"] is None:
            entry["last_enqueued"] = row["last_enqueued"]
            entry["last_completed"] = row["last_completed"]
            entry["status_file"], entry["status_line"] = row["file"], row["line"]
            entry["pg"] = entry["pg"] or row["pg"]
    return out


def _main_collective(timeouts: pl.DataFrame) -> tuple[int, str | None] | None:
    """The (seq, op) most ranks timed out in (ties: the lowest seq)."""
    if timeouts.is_empty():
        return None
    counts = (
        timeouts.group_by("seq", "op_type")
        .agg(pl.col("rank").n_unique().alias("n"))
        .sort(["n", "seq"], descending=[True, False])
    )
    row = counts.row(0, named=True)
    return int(row["seq"]), row["op_type"]


def _state(entry: dict[str, Any] | None, seq: int, op: str | None, pgs: set[str], has_logs: bool) -> str:
    """Where a rank stood against the main collective (``seq``/``op`` of the process groups ``pgs``)."""
    if entry is None:
        return "no_watchdog_line" if has_logs else "no_logs"
    enq, done = entry.get("last_enqueued"), entry.get("last_completed")
    own = entry.get("seq")
    same_group = not pgs or entry.get("pg") is None or str(entry["pg"]) in pgs
    if own == seq:
        # the same sequence number with another operation: this rank issued a different collective
        return "other_op" if same_group and op and entry.get("op_type") and entry["op_type"] != op else "inside"
    if own is not None and own < seq and same_group:
        return "not_entered"  # its watchdog fired in an earlier collective: it never got to this one
    if enq is not None and done is not None:
        if enq < seq or (enq == done and done < seq):
            return "not_entered"
        if done < seq <= enq:
            return "inside"
        return "past"
    return "other_collective"


def _first_signal(signals: pl.DataFrame) -> dict[str, Any] | None:
    if signals.is_empty():
        return None
    first = signals.filter(pl.col("message").str.contains(_FIRST_SIGNAL) & pl.col("rank").is_not_null())
    if not first.is_empty():
        row = first.row(0, named=True)
        return {"rank": row["rank"], "ts": row["ts"], "file": row["file"], "line": row["line"], "how": "self"}
    named = signals.with_columns(
        pl.col("message").str.extract(r"from\s+rank (\d+)", 1).cast(pl.Int64, strict=False).alias("_src")
    ).filter(pl.col("_src").is_not_null())
    if not named.is_empty():
        row = named.row(0, named=True)
        return {"rank": row["_src"], "ts": row["ts"], "file": row["file"], "line": row["line"], "how": "named by peer"}
    return None


def _straggler_finding(
    ctx: AnalyzerContext, col: Collective, per_rank: dict[int, dict[str, Any]], tl: pl.DataFrame
) -> tuple[Finding, Collective]:
    """The finding naming the ranks that never entered ``col``, and ``col`` with its ranks that left early."""
    stragglers = col.stragglers
    what = col.text
    own = rank_errors(ctx.findings(), tl, stragglers)
    exits = ctx.get(exit_codes.Result).ranks
    died = {r for r in stragglers if r in exits and exits[r].exit_code not in (None, 0, -15)}
    explained = sorted(own | died)
    # evidence: the status lines of ranks that never entered, else each silent rank's last line
    ev = tl.filter(pl.col("rank").is_in(stragglers))
    status_rows = ev.filter(pl.col("last_enqueued").is_not_null())
    last_rows = (
        ev.sort(["ts", "file", "line"], descending=True, nulls_last=True)
        .unique(subset=["rank"], keep="first", maintain_order=True)
        .sort("rank")
    )
    evidence = evidence_rows(first_by_rank(status_rows)) if not status_rows.is_empty() else evidence_rows(last_rows)
    detail = []
    for r in stragglers[:8]:
        e = per_rank.get(r)
        if e and e.get("last_enqueued") is not None:
            detail.append(f"rank {r}: last enqueued {e['last_enqueued']}, last completed {e['last_completed']}")
        else:
            detail.append(f"rank {r}: no watchdog line")
    waiting = [r for r in col.ranks_inside if r not in stragglers]
    # a rank whose watchdog printed its status was alive; only silent ranks can have left
    left = _left_early(stragglers, exits, last_rows) if col.straggler_evidence == "absence" else []
    if left and left == stragglers and not explained:
        return make_finding(
            ID,
            suffix="left-early",
            # nobody was stuck: the timeout itself is the failure, the early ranks its cause
            category="collective_timeout",
            severity="error",
            title=f"{plural_ranks(left).capitalize()} left before {what}"
            + (f" that {plural_ranks(waiting)} then waited in" if waiting else ""),
            rule_role="root",
            ranks=left,
            evidence=evidence_rows(last_rows),
            explanation=(
                "These ranks finished their loop and exited normally while the others went on into one more "
                "collective and waited for them until the timeout. The ranks disagreed on how many collectives to "
                "run: a stop condition evaluated per rank (a wall-clock budget, a per-rank data count, an early "
                "break) instead of one agreed across ranks."
            ),
            fix="Decide when to stop on all ranks together: a fixed iteration count, or all_reduce the stop flag "
            "every iteration before leaving the loop.",
            fields={"seq": col.seq, "op_type": col.op_type, "culprit_ranks": left, "left_early": left},
        ), dataclasses.replace(col, left_early=left)
    return make_finding(
        ID,
        suffix="straggler",
        category="straggler",
        severity="warning" if explained else "error",
        title=f"{plural_ranks(stragglers).capitalize()} never entered {what}"
        + (f" that {plural_ranks(waiting)} waited in" if waiting else ""),
        rule_role="context" if explained else "root",
        ranks=stragglers,
        evidence=evidence,
        first_ts=col.start_ts or col.first_timeout_ts,
        explanation=(
            "These ranks had no pending work in the collective the others timed out in ("
            + "; ".join(detail)
            + "). They were stuck on the CPU side (data loading, I/O, a Python exception, a different code "
            "path) or had died."
            + (f" {plural_ranks(explained).capitalize()} failed on their own first: that failure is the cause." if explained else "")
        ),
        fix="Look at what the straggler ranks printed last and at their stacks (py-spy dump); "
        "for data-dependent stalls check uneven data shards and dataloader workers.",
        fields={
            "seq": col.seq, "op_type": col.op_type, "culprit_ranks": stragglers, "own_failure": explained,
            "inferred": col.straggler_evidence != "status",
        },
    ), col



def _other_op_finding(col: Collective, ranks: list[int], per_rank: dict[int, dict[str, Any]], tl: pl.DataFrame) -> Finding:
    """Ranks whose watchdog fired at the main collective's sequence number in another operation:
    the ranks disagree on which collective comes next (a different code path, a skipped call)."""
    theirs = sorted({str(per_rank[r]["op_type"]) for r in ranks})
    rows = tl.filter(pl.col("rank").is_in(ranks) & (pl.col("seq") == col.seq) & pl.col("timeout_ms").is_not_null())
    return make_finding(
        ID,
        suffix="other-op",
        category="collective_mismatch",
        severity="error",
        title=f"{plural_ranks(ranks).capitalize()} ran {'/'.join(theirs)} as SeqNum={col.seq} while the others ran "
        f"{col.op_type}",
        rule_role="root",
        ranks=ranks,
        evidence=evidence_rows(first_by_rank(rows)),
        explanation=(
            f"At sequence number {col.seq} of the same process group these ranks' watchdogs timed out in "
            f"{'/'.join(theirs)}, the others' in {col.op_type}. Collectives are matched by their order: the ranks "
            "took different code paths (a collective called on some ranks only, or in another order), so each "
            "side waits for a partner that is in a different collective."
        ),
        fix="Find the call that differs: run with TORCH_DISTRIBUTED_DEBUG=DETAIL (it reports the mismatched "
        "collective and its shapes), and make every rank issue the same collectives in the same order "
        "(no collective inside a rank-dependent branch or an uneven data loop).",
        fields={"seq": col.seq, "op_type": col.op_type, "other_ops": theirs, "culprit_ranks": ranks},
    )


#: A last line that says the process left on purpose.
_LEFT = re.compile(
    r"(?i)\bexit(?:ing|ed)\b|\bshutting down\b|\bbye\b|\b(?:training|loop|run|job|test)s?\s+(?:is\s+)?"
    r"(?:completed?|finished|done|passed)\b"
)


def _left_early(stragglers: list[int], exits: dict[int, exit_codes.RankExit], last_rows: pl.DataFrame) -> list[int]:
    """Stragglers that exited on purpose: exit code 0, or a last line saying they are leaving."""
    last = {int(r): m or "" for r, m in zip(last_rows["rank"], last_rows["message"], strict=True) if r is not None}
    return sorted(
        r for r in stragglers
        if (r in exits and exits[r].exit_code == 0) or (_LEFT.search(last.get(r, "")) and r not in exits)
    )
