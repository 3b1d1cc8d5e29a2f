"""Clock skew between nodes, from events that must be simultaneous.

## What it means
Each node prints its own wall clock. Before ordering failures across nodes we estimate each
node's offset against a reference node (the node of the lowest rank) from, in this order:
the same training step printed on both nodes (synchronous steps end together), the start of a
collective that timed out (timeout time minus ``ran for``/``Timeout(ms)``; ranks waiting in one
collective entered it together), and the rendezvous completion every agent prints.
The uncertainty is the spread of those estimates (at least the timestamp resolution).

## What a match does not prove
An offset only corrects ordering to within its uncertainty; nodes without a shared event
cannot be compared at all, and their order stays unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import polars as pl

from postmortem.analyzers._common import grep, make_finding, rank_nodes
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult

ID = "clock-skew"
TITLE = "Clock skew between nodes"
NEEDS: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result(AnalyzerResult):
    nodes: list[str] = field(default_factory=list)
    reference: str | None = None
    #: estimated offset of each node's clock against the reference (None: no shared event)
    offsets_s: dict[str, float | None] = field(default_factory=dict)
    #: how far apart two events on different nodes must be to be ordered; None when some node is unknown
    uncertainty_s: float | None = None
    node_uncertainty_s: dict[str, float] = field(default_factory=dict)
    resolution_s: float = 0.001
    method: dict[str, str] = field(default_factory=dict)
    unknown_nodes: list[str] = field(default_factory=list)
    #: the offsets that were large enough to correct times by
    corrections_s: dict[str, float] = field(default_factory=dict)

    @property
    def applied(self) -> bool:
        return bool(self.corrections_s)

_RDZV = r"(?i)rendezvous complete|Rendezvous'ing worker group|Done waiting for other agents"
#: Minimum uncertainty of rendezvous-based offsets: agents return from the rendezvous within ~1 s.
_RDZV_SLACK_S = 1.0


def run(ctx: AnalyzerContext) -> Result:
    """Estimate per-node clock offsets and the ordering uncertainty across nodes."""
    tl = ctx.timeline.filter(pl.col("ts").is_not_null())
    timed = tl.filter(~pl.col("ts_inferred").fill_null(False))
    nodes = sorted(str(n) for n in timed.get_column("node").drop_nulls().unique())
    resolution = _resolution(timed)
    if len(nodes) <= 1:
        return Result(
            nodes=nodes, reference=nodes[0] if nodes else None, offsets_s=dict.fromkeys(nodes, 0.0),
            uncertainty_s=resolution, resolution_s=resolution, method={n: "single node" for n in nodes},
        )

    rn = rank_nodes(ctx.timeline)
    reference = rn[min(rn)] if rn else nodes[0]
    if reference not in nodes:
        reference = nodes[0]
    estimates: dict[str, tuple[float, float, str]] = {reference: (0.0, resolution, "reference")}
    for method, points in (
        ("progress steps", _progress_points(timed)),
        ("collective timeouts", _collective_points(timed)),
        ("rendezvous", _rendezvous_points(timed)),
    ):
        for node in nodes:
            if node in estimates:
                continue
            est = _offset(points, node, reference)
            if est is not None:
                slack = _RDZV_SLACK_S if method == "rendezvous" else 0.0
                estimates[node] = (est[0], max(est[1], resolution, slack), method)

    unknown = [n for n in nodes if n not in estimates]
    offsets = {n: round(estimates[n][0], 3) if n in estimates else None for n in nodes}
    margin = None if unknown else round(max(e[1] for e in estimates.values()), 3)
    # correct a node's times only when its offset is larger than what we cannot resolve
    applied = {n: o for n, o in offsets.items() if o is not None and abs(o) > estimates[n][1]}
    findings = []
    big = {n: o for n, o in applied.items() if abs(o) >= 1.0}
    if big:
        worst = max(big, key=lambda n: (abs(big[n]), n))
        findings.append(
            make_finding(
                ID,
                category="environment_config",
                severity="warning",
                title=f"Node clocks disagree: {worst} is {big[worst]:+.1f} s against {reference}",
                rule_role="context",
                count=len(big),
                message="; ".join(f"{n}: {o:+.3f} s" for n, o in sorted(big.items())),
                explanation=(
                    "Times from these nodes were shifted by the estimated offsets before ordering failures "
                    f"across nodes (uncertainty ±{margin if margin is not None else '?'} s)."
                ),
                fix="Run chrony/NTP on every node; cross-node timelines are unreliable otherwise.",
                fields={"offsets_s": offsets, "uncertainty_s": margin},
                nodes=sorted(big),
            )
        )
    return Result(
        findings=tuple(findings),
        nodes=nodes,
        reference=reference,
        offsets_s=offsets,
        uncertainty_s=margin,
        node_uncertainty_s={n: round(estimates[n][1], 3) for n in estimates},
        resolution_s=resolution,
        method={n: estimates[n][2] for n in estimates},
        unknown_nodes=unknown,
        corrections_s=applied,
    )


def corrected(ts: datetime | None, node: str | None, skew: Result) -> datetime | None:
    """``ts`` moved onto the reference node's clock (unchanged when the offset is not significant)."""
    if ts is None or node is None:
        return ts
    offset = skew.corrections_s.get(node)
    return ts - timedelta(seconds=offset) if offset else ts


def corrected_expr(skew: Result) -> pl.Expr:
    """:func:`corrected` as a polars expression over ``ts`` and ``node`` (column ``ts_adj``)."""
    offsets = skew.corrections_s
    if not offsets:
        return pl.col("ts").alias("ts_adj")
    micro = pl.col("node").replace_strict(
        {n: round(o * 1e6) for n, o in offsets.items()}, default=0, return_dtype=pl.Int64
    )
    return (pl.col("ts") - pl.duration(microseconds=micro.fill_null(0))).alias("ts_adj")


def _resolution(timed: pl.DataFrame) -> float:
    """1 s when clocks print whole seconds (CANN ``[ERROR] 2026-05-27-19:52:41``), else 1 ms."""
    if timed.is_empty():
        return 1.0
    whole = timed.select((pl.col("ts").dt.microsecond() == 0).mean()).item()
    return 1.0 if (whole or 0) > 0.9 else 0.001


def _progress_points(timed: pl.DataFrame) -> pl.DataFrame:
    """(node, key, t) with key = step: the first time each node printed each step."""
    return (
        timed.filter(pl.col("step").is_not_null() & pl.col("node").is_not_null())
        .group_by("node", pl.col("step").cast(pl.String).alias("key"))
        .agg(pl.col("ts").min().alias("t"))
    )


def _collective_points(timed: pl.DataFrame) -> pl.DataFrame:
    """(node, key, t) with key = seq/op and t = the median start of the collective on the node."""
    rows = timed.filter(
        pl.col("seq").is_not_null() & pl.col("timeout_ms").is_not_null() & pl.col("node").is_not_null()
    )
    ms = pl.coalesce("ran_ms", "timeout_ms")
    return (
        rows.with_columns((pl.col("ts") - pl.duration(milliseconds=ms)).alias("start"))
        .group_by("node", pl.concat_str([pl.col("seq").cast(pl.String), pl.col("op_type").fill_null("")], separator="/").alias("key"))
        .agg(pl.col("start").sort().get(pl.len() // 2).alias("t"))
    )


def _rendezvous_points(timed: pl.DataFrame) -> pl.DataFrame:
    """(node, key, t): the first rendezvous completion each node's agent printed."""
    return (
        grep(timed, _RDZV, ["rendezvous", "Done waiting"]).filter(pl.col("node").is_not_null())
        .group_by("node")
        .agg(pl.col("ts").min().alias("t"))
        .with_columns(pl.lit("rdzv").alias("key"))
    )


def _offset(points: pl.DataFrame, node: str, reference: str) -> tuple[float, float] | None:
    """Median offset of ``node`` against ``reference`` over shared keys, and its spread."""
    if points.is_empty():
        return None
    mine = points.filter(pl.col("node") == node).select("key", pl.col("t").alias("t_n"))
    ref = points.filter(pl.col("node") == reference).select("key", pl.col("t").alias("t_r"))
    both = mine.join(ref, on="key", how="inner")
    if both.is_empty():
        return None
    deltas = sorted(
        (n - r).total_seconds() for n, r in zip(both["t_n"], both["t_r"], strict=True)
    )
    mid = len(deltas) // 2
    median = deltas[mid] if len(deltas) % 2 else (deltas[mid - 1] + deltas[mid]) / 2
    spread = max(abs(d - median) for d in deltas)
    return median, spread
