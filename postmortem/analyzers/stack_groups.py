"""Group ranks by their py-spy main-thread stack and name where each group waits.

## What it means
Frames are normalised (line numbers, addresses and site-packages prefixes dropped), the main
thread of each rank is taken, and ranks with the same stack form a group. Each group is named
by the innermost frame that says what it is doing: ``barrier``, ``all_reduce`` (and the other
collectives), ``forward``, ``backward``, ``dataloader``, ``checkpoint`` ... Groups smaller than
the largest are flagged as *minority*: in a hang, the ranks that are somewhere else.

## What a match does not prove
A dump is a snapshot: a rank in ``forward`` may be making slow progress rather than stuck.
Ranks without a dump are not in any group.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import polars as pl

from postmortem.analyzers._common import make_finding
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.model import Evidence, Finding, StackGroup
from postmortem.ranges import format_ranks, plural_ranks

ID = "stack-groups"
TITLE = "Ranks grouped by main-thread stack"
NEEDS: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result(AnalyzerResult):
    groups: list[StackGroup] = field(default_factory=list)
    rank_group: dict[int, int] = field(default_factory=dict)
    #: py-spy thread stacks whose rank is not known (not grouped)
    unattributed_stacks: int = 0

    @property
    def minority(self) -> list[StackGroup]:
        return [g for g in self.groups if g.minority]

    @property
    def majority(self) -> list[StackGroup]:
        return [g for g in self.groups if not g.minority]

    @property
    def minority_ranks(self) -> list[int]:
        return sorted(r for g in self.minority for r in g.ranks)

#: (name, pattern on the normalised frame ``func (file)``), tried on each frame innermost first.
WAIT_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("barrier", r"^(?:\w+\.)*(?:barrier|monitored_barrier|_barrier|wait_for_everyone) \("),
        ("all_reduce", r"^(?:\w+\.)*(?:all_reduce\w*|allreduce\w*|_all_reduce\w*) \("),
        ("all_gather", r"^(?:\w+\.)*(?:all_gather\w*|allgather\w*|_all_gather\w*|_allgather_base) \("),
        ("reduce_scatter", r"^(?:\w+\.)*(?:reduce_scatter\w*|_reduce_scatter\w*) \("),
        ("broadcast", r"^(?:\w+\.)*(?:broadcast\w*|_broadcast\w*) \("),
        ("all_to_all", r"^(?:\w+\.)*(?:all_to_all\w*|alltoall\w*) \("),
        ("collective", r"^(?:\w+\.)*(?:wait|synchronize|send|recv|isend|irecv|gather|scatter) \(.*distributed"),
        ("init", r"^(?:\w+\.)*(?:init_process_group|new_group|_new_process_group_helper|init_device_mesh) \("),
        # not torch/utils/checkpoint.py: that is activation checkpointing inside forward/backward
        ("checkpoint", r"(?i)^(?:\w+\.)*\w*(?:save_checkpoint|save_model|save_pretrained|save_state|save_file)\w* \(|"
                       r"^(?:\w+\.)*_?save \((?:torch/serialization|safetensors)|"
                       r"\((?:\S*/)?(?:checkpoint_utils|checkpointing|distributed/checkpoint/\S*)\.py\)"),
        ("dataloader", r"(?i)\((?:.*/)?(?:dataloader|fetch|_utils/fetch|dataset)\.py\)|"
                       r"^(?:\w+\.)*(?:_next_data|_get_data|_try_get_data|__next__) \(.*data"),
        ("backward", r"^(?:\w+\.)*(?:backward|run_backward|_engine_run_backward|_backward) \("),
        ("optimizer", r"^(?:\w+\.)*step \(.*optim"),
        ("forward", r"^(?:\w+\.)*forward \("),
    )
)


def run(ctx: AnalyzerContext) -> Result:
    """Group ranks by normalised main-thread stack; flag minority groups."""
    stacks = ctx.timeline.filter(
        (pl.col("kind") == "stack") & pl.col("frame").is_not_null() & pl.col("record").is_not_null()
    )
    if stacks.is_empty():
        return Result()
    unattributed = stacks.filter(pl.col("rank").is_null()).select("file", "record").unique().height
    stacks = stacks.filter(pl.col("rank").is_not_null()).with_columns(normalize_frame(pl.col("frame")).alias("norm"))
    stacks = stacks.filter(pl.col("norm").is_not_null())
    threads = stacks.group_by("rank", "file", "record").agg(
        pl.col("thread").drop_nulls().first().alias("thread"),
        pl.col("norm").sort_by("frame_depth").alias("frames"),
        pl.col("line").min().alias("line"),
        pl.len().alias("depth"),
    )
    main = threads.with_columns(
        pl.col("thread").fill_null("").str.contains(r"MainThread").alias("_main")
    ).sort(
        ["rank", "_main", "depth", "file", "record"],
        descending=[False, True, True, True, True],
    )
    main = main.unique(subset=["rank"], keep="first", maintain_order=True)

    by_stack: dict[tuple[str, ...], list[int]] = {}
    where: dict[int, tuple[str, int, str]] = {}
    for row in main.iter_rows(named=True):
        frames = tuple(row["frames"])
        by_stack.setdefault(frames, []).append(int(row["rank"]))
        where[int(row["rank"])] = (row["file"], int(row["line"]), row["thread"] or "")
    ordered = sorted(by_stack.items(), key=lambda kv: (-len(kv[1]), min(kv[1]), kv[0]))
    largest = len(ordered[0][1])
    groups: list[StackGroup] = []
    for gid, (frames, members) in enumerate(ordered):
        groups.append(
            StackGroup(
                id=gid,
                ranks=sorted(members),
                frames=list(frames),
                waits_in=waits_in(frames),
                minority=len(ordered) > 1 and len(members) < largest,
            )
        )
    rank_group = {r: g.id for g in groups for r in g.ranks}
    findings = []
    if len(groups) > 1:
        findings.append(_split_finding(groups, where))
    return Result(findings=tuple(findings), groups=groups, rank_group=rank_group, unattributed_stacks=unattributed)


def normalize_frame(frame: pl.Expr) -> pl.Expr:
    """``func (path/to/site-packages/pkg/file.py:123)`` -> ``func (pkg/file.py)``; addresses -> null."""
    norm = (
        frame.str.strip_chars()
        .str.replace(r":\d+\)$", ")")
        .str.replace(r"\((?:[^()]*/)?(?:site|dist)-packages/", "(")
        .str.replace(r"\+0x[0-9a-fA-F]+\)$", ")")
    )
    # unresolved native frames carry nothing but an address
    return pl.when(norm.str.contains(r"^0x[0-9a-fA-F]+ \(\?\)$")).then(pl.lit(None, pl.String)).otherwise(norm)


def waits_in(frames: tuple[str, ...] | list[str]) -> str:
    """Name the activity of a stack from its innermost frame that says anything."""
    for frame in frames:
        for name, pattern in WAIT_KINDS:
            if pattern.search(frame):
                return name
    return "unknown"


def _split_finding(groups: list[StackGroup], where: dict[int, tuple[str, int, str]]) -> Finding:
    minority = [g for g in groups if g.minority]
    major = [g for g in groups if not g.minority]
    parts = "; ".join(f"{plural_ranks(g.ranks)} in {g.waits_in} ({g.frames[0] if g.frames else '?'})" for g in groups)
    evidence = []
    for g in groups[:6]:
        r = g.ranks[0]
        file, line, thread = where[r]
        evidence.append(Evidence(file=file, line=line, rank=r, text=f"{thread} {g.frames[0] if g.frames else ''}".strip()))
    flagged = sorted(r for g in minority for r in g.ranks)
    title = (
        f"py-spy stacks split into {len(groups)} groups; "
        + (f"ranks {format_ranks(flagged)} are elsewhere" if flagged else "no majority")
    )
    return make_finding(
        ID,
        suffix="split",
        category="straggler",
        severity="warning",
        title=title,
        rule_role="context",
        ranks=flagged or sorted(r for g in groups for r in g.ranks),
        evidence=evidence,
        count=len(groups),
        explanation=(
            f"Main threads at the time of the dump: {parts}. In a healthy synchronous job every rank sits in "
            "the same place; ranks stuck somewhere else than the majority are the ones the others wait for."
        ),
        fix="Compare what the groups wait in: a group in a barrier or collective waits for the other group; "
        "the other group is still computing, loading data or stuck.",
        fields={
            "groups": [{"id": g.id, "ranks": g.ranks, "waits_in": g.waits_in, "minority": g.minority} for g in groups],
            "majority_waits_in": [g.waits_in for g in major],
            "minority_ranks": flagged,
            "culprit_ranks": flagged,
        },
        first_ts=None,
    )
