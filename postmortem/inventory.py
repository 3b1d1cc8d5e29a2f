"""What a job is made of, read off its timeline: files, nodes, ranks, progress, versions, env."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from postmortem.config import extract_config
from postmortem.model import JobInfo, SkippedFile
from postmortem.timeline import Timeline

_WORLD = r"(?i)\bworld[_ ]size\s*[:=]\s*(\d+)|\bnranks (\d+)|\bWORLD_SIZE=(\d+)"


def job_info(timeline: Timeline) -> JobInfo:
    """The job inventory: files, skipped files, nodes, ranks, world size, span, versions, env."""
    frame = timeline.frame
    ranks = sorted(int(r) for r in frame["rank"].drop_nulls().unique().to_list())
    nodes = sorted(str(n) for n in frame["node"].drop_nulls().unique().to_list())
    span = frame.select(pl.col("ts").min().alias("start"), pl.col("ts").max().alias("end")).row(0)
    facts = extract_config(frame)  # versions and environment variables, with where they were printed
    return JobInfo(
        path=str(timeline.root),
        world_size=_world_size(frame, ranks),
        nodes=nodes,
        ranks=ranks,
        files_parsed=len(timeline.inventory.files),
        skipped=[SkippedFile(s.rel, s.reason) for s in timeline.inventory.skipped],
        notes=[SkippedFile(s.rel, s.reason) for s in timeline.notes],
        start=span[0],
        end=span[1],
        versions={k: str(v) for k, v in (facts.get("versions") or {}).items()},
        env={k: str(v) for k, v in (facts.get("env") or {}).items()},
        families=timeline.families(),
    )


def _world_size(frame: pl.DataFrame, ranks: list[int]) -> int | None:
    stated = (
        frame.select(pl.col("message").str.extract_groups(_WORLD).alias("w"))
        .unnest("w")
        .select(pl.max_horizontal(pl.all().cast(pl.Int64, strict=False)).max())
        .item()
    )
    launched = (
        frame.select(
            pl.col("message").str.extract(r"--nnodes[= ](\d+)", 1).cast(pl.Int64, strict=False).max().fill_null(1)
            * pl.col("message").str.extract(r"--nproc[_-]per[_-]node[= ](\d+)", 1).cast(pl.Int64, strict=False).max()
        ).item()
    )
    seen = max(ranks) + 1 if ranks else None
    candidates = [v for v in (stated, launched, seen) if v]
    return max(candidates) if candidates else None


def rank_progress(frame: pl.DataFrame) -> pl.DataFrame:
    """Per rank: node, last step, last timestamp, number of events."""
    return (
        frame.filter(pl.col("rank").is_not_null())
        .group_by("rank")
        .agg(
            pl.col("node").drop_nulls().first().alias("node"),
            pl.col("step").max().alias("last_step"),
            pl.col("ts").max().alias("last_ts"),
            pl.len().alias("events"),
        )
        .sort("rank")
    )


def fmt_ts(ts: datetime | None) -> str:
    return ts.isoformat(sep=" ", timespec="seconds") if ts else "-"
