"""What a job is made of, read off its timeline: files, nodes, ranks, progress, versions, env."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from postmortem.model import JobInfo, SkippedFile
from postmortem.timeline import Timeline

_VERSION_PATTERNS: dict[str, str] = {
    "torch": r"(?i)\btorch(?:==|\s+version\s*[:=]?\s*|:\s+|\s+)v?(\d+\.\d+\.\d+[\w.+]*)",
    "torch_npu": r"(?i)\btorch[_-]npu(?:==|\s+version\s*[:=]?\s*|:\s+|\s+)v?(\d+\.\d+\.\d+[\w.+]*)",
    "PTA": r"\bPTA (\d+\.\d+\.\d+[\w.+]*)",
    "CANN": r"\bCANN[- _]?(?:version)?\s*[:=]?\s*(\d+\.\d+\.[\w.]+)",
    "NCCL": r"\bNCCL version (\d+\.\d+\.\d+[\w.+]*)",
    "deepspeed": r"(?i)\bdeepspeed(?:==|\s+version\s*[:=]?\s*|\s+info: version=)(\d+\.\d+\.\d+[\w.+]*)",
    "transformers": r"(?i)\btransformers(?:==|\s+version\s*[:=]?\s*)(\d+\.\d+\.\d+[\w.]*)",
    "ms-swift": r"(?i)\b(?:ms-)?swift(?:==|\s+version\s*[:=]?\s*)(\d+\.\d+\.\d+[\w.]*)",
    "python": r"\bPython v?(\d+\.\d+\.\d+)\b",
}
_ENV = (
    r"\b((?:NCCL|HCCL|GLOO|TORCH|TORCHELASTIC|CUDA|ASCEND|PYTORCH|HF|SLURM)_[A-Z0-9_]+|OMP_NUM_THREADS|"
    r"MASTER_ADDR|MASTER_PORT|WORLD_SIZE|LOCAL_WORLD_SIZE)=([^\s,;'\"]+)"
)
_WORLD = r"(?i)\bworld[_ ]size\s*[:=]\s*(\d+)|\bnranks (\d+)|\bWORLD_SIZE=(\d+)"


def job_info(timeline: Timeline) -> JobInfo:
    """The job inventory: files, skipped files, nodes, ranks, world size, span, versions, env."""
    frame = timeline.frame
    ranks = sorted(int(r) for r in frame["rank"].drop_nulls().unique().to_list())
    nodes = sorted(str(n) for n in frame["node"].drop_nulls().unique().to_list())
    span = frame.select(pl.col("ts").min().alias("start"), pl.col("ts").max().alias("end")).row(0)
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
        versions=_versions(frame),
        env=_env(frame),
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


def _versions(frame: pl.DataFrame) -> dict[str, str]:
    versions: dict[str, str] = {}
    for name, pattern in _VERSION_PATTERNS.items():
        found = frame.select(pl.col("message").str.extract(pattern, 1).drop_nulls().mode().sort().first()).item()
        if found:
            versions[name] = found
    return versions


def _env(frame: pl.DataFrame) -> dict[str, str]:
    hits = (
        frame.filter(pl.col("message").str.contains("=", literal=True))
        .select(pl.col("message").str.extract_all(_ENV).alias("kv"))
        .explode("kv")
        .drop_nulls()
    )
    env: dict[str, str] = {}
    for pair in hits["kv"].to_list():
        key, _, value = pair.partition("=")
        env.setdefault(key, value)
    return env


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
