"""Ranks that other ranks name as the one they wait for.

## What it means
Some runtimes say outright which rank is missing. Each report is an edge "rank A waits for
rank B":

* c10d's ``monitored_barrier`` on rank 0: ``[Rank 0]: Rank 1 failed to pass monitoredBarrier in
  2000 ms`` (``Ranks 1, 2 failed ...`` with ``wait_all_ranks=True``) — torch/csrc/distributed/c10d
  ProcessGroupGloo.cpp;
* HCCL's notify wait on Ascend (EI0002 and the plog task exception): ``... has not received the
  Notify record from remote rank: [24]``, ``remote rank:[3]``, ``Waiting peer rank: 5;`` — the
  reporting rank's partner never signalled (hicann/hcomm task_exception_handler.cc);
* Horovod's stall inspector: ``[missing ranks: 1, 2]`` (horovod/common/stall_inspector.cc).

The ranks named that do not themselves wait for anyone are where the waits end: the culprits
(ring algorithms make every rank wait for its neighbour; only the head of the chain is stuck for
a reason of its own). When every named rank also waits (a cycle), the most named ones are.

## What a match does not prove
That the named rank is at fault for a reason of its own: it may have died (its own error or exit
says so) or be waiting itself in a group whose reports are not in the logs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import polars as pl

from postmortem.analyzers import exit_codes
from postmortem.analyzers._common import evidence_rows, first_by_rank, make_finding, rank_errors
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.ranges import format_ranks, plural_ranks

ID = "peer-reports"
TITLE = "Ranks that other ranks name as the one they wait for"
NEEDS: tuple[str, ...] = (exit_codes.ID,)

#: (kind, pattern with a ``named`` group of comma-separated ranks, literal hint); Rust regex.
REPORTS: tuple[tuple[str, str, str], ...] = (
    ("monitored_barrier", r"Ranks? (?P<named>\d+(?:, ?\d+)*) failed to pass monitoredBarrier in \d+ ?ms", "monitoredBarrier"),
    ("notify_wait", r"(?i)notify.*?(?:remote|peer) rank\s*:?\s*\[?(?P<named>\d+)", "otify"),
    ("horovod_stall", r"\[missing ranks: (?P<named>\d+(?:, ?\d+)*)\]", "missing ranks"),
)
#: No job has this many ranks: a larger number is a placeholder (HCCL's 4294967295 for "unknown").
_MAX_RANK = 1 << 20
#: monitoredBarrier is only ever reported by rank 0 (the barrier's coordinator)
_COORDINATOR = {"monitored_barrier": 0}


@dataclass(frozen=True)
class Result(AnalyzerResult):
    #: reporter rank -> the ranks it says it waits for
    waits_for: dict[int, list[int]] = field(default_factory=dict)
    #: the ranks where the waits end (named, and not waiting themselves)
    culprits: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)


def run(ctx: AnalyzerContext) -> Result:
    tl = ctx.timeline
    hint = "|".join(h for _, _, h in REPORTS)
    rows = tl.filter(pl.col("message").str.contains(hint)).select("file", "line", "rank", "ts", "message", "kind", "node")
    if rows.is_empty():
        return Result()
    parts = []
    for kind, pattern, _ in REPORTS:
        found = rows.with_columns(pl.col("message").str.extract(pattern, 1).alias("_named")).filter(
            pl.col("_named").is_not_null()
        )
        if found.is_empty():
            continue
        reporter = pl.lit(_COORDINATOR[kind], pl.Int64) if kind in _COORDINATOR else pl.col("rank")
        parts.append(found.with_columns(pl.lit(kind).alias("_kind"), pl.coalesce(pl.col("rank"), reporter).alias("_by")))
    if not parts:
        return Result()
    reports = pl.concat(parts, how="vertical_relaxed")
    edges = (
        reports.with_columns(pl.col("_named").str.split(",").list.eval(pl.element().str.strip_chars().cast(pl.Int64)))
        .explode("_named")
        .filter(pl.col("_named").is_not_null() & (pl.col("_by").is_null() | (pl.col("_named") != pl.col("_by"))))
        # HCCL writes an unknown peer as 4294967295 (-1 as u32); the world size the logs show may be
        # smaller than the job's (rank 0's log alone says world size 1), so it is no bound here
        .filter(pl.col("_named") < _MAX_RANK)
    )
    if edges.is_empty():
        return Result()
    waits: dict[int, set[int]] = {}
    named: Counter[int] = Counter()
    for by, who in edges.select("_by", "_named").iter_rows():
        named[int(who)] += 1
        if by is not None:
            waits.setdefault(int(by), set()).add(int(who))
    heads = sorted(r for r in named if r not in waits)
    if not heads:  # a cycle: every named rank waits too; the most named are where it ends
        top = max(named.values())
        heads = sorted(r for r, n in named.items() if n == top)
    kinds = sorted(set(edges.get_column("_kind").to_list()))
    own = rank_errors(ctx.findings(), tl, heads)
    exits = ctx.get(exit_codes.Result).ranks
    died = sorted(r for r in heads if r in own or (r in exits and exits[r].exit_code not in (None, 0, -15)))
    reporters = sorted(waits)
    evidence = evidence_rows(first_by_rank(edges.filter(pl.col("_named").is_in(heads)).sort("ts", "file", "line")))
    said = {"monitored_barrier": "monitoredBarrier", "notify_wait": "HCCL notify waits", "horovod_stall": "Horovod's stall inspector"}
    how = ", ".join(said[k] for k in kinds)
    finding = make_finding(
        ID,
        category="straggler",
        # a named rank that failed on its own is explained by that failure: this is then context
        severity="warning" if died else "error",
        title=f"{plural_ranks(reporters).capitalize() if reporters else 'Other ranks'} waited for "
        f"{plural_ranks(heads)}, which never arrived ({how})",
        rule_role="context" if died else "root",
        ranks=heads,
        evidence=evidence,
        count=edges.height,
        explanation=(
            f"{how[:1].upper() + how[1:]} name the rank each reporter waits for; the waits end at "
            f"{plural_ranks(heads)} (named, and not waiting for anyone themselves). That rank never reached the "
            "collective or barrier the others were in: it was stuck on the CPU side, in another collective, or dead."
            + (f" {plural_ranks(died).capitalize()} failed on their own: that failure is the cause." if died else "")
        ),
        fix=f"Look at what rank {format_ranks(heads)} did last: its final lines, exit code and py-spy stack "
        "(py-spy dump --pid PID on its host); check its node (devices, network links) if it printed nothing.",
        fields={"culprit_ranks": heads, "waits_for": {str(k): sorted(v) for k, v in sorted(waits.items())},
                "own_failure": died, "kinds": kinds, "reported_by": how},
    )
    return Result(
        findings=(finding,), waits_for={k: sorted(v) for k, v in sorted(waits.items())}, culprits=heads, kinds=kinds
    )
