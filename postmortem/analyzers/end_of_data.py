"""End of data: which ranks ran out of data, and how many steps the data supports.

## What it means
Counts end-of-data lines (``Dataloader finished``, ``StopIteration``, end of epoch) per rank
and per node and sets them against each rank's last step. When ranks run out at different
times (seed 000: per-node counts 2/3/3/4), the ranks that ran out leave the training loop and
wait in teardown (a barrier) while the others wait for them in the next step: a desync that
hangs or times out. When the logs print the dataset's token count, world size (or global
batch), micro-batch and sequence length, the steps the data supports are computed
(2,517,232 / (8 x 4096) = 76.8) and compared with ``train_iters``.

## What a match does not prove
One end-of-epoch line per rank at the same step is a normal epoch boundary. Token budgets
packed per rank make the per-rank supply uneven even when the total looks sufficient.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from postmortem.analyzers import clock_skew, progress
from postmortem.analyzers._common import (
    evidence_rows,
    grep,
    make_finding,
    rank_nodes,
    tied_across_nodes,
    world_ranks,
)
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.ranges import format_ranks, plural_ranks

ID = "end-of-data"
TITLE = "End of data across ranks"
NEEDS: tuple[str, ...] = (progress.ID, clock_skew.ID)


@dataclass(frozen=True)
class Result(AnalyzerResult):
    per_rank: dict[int, int] = field(default_factory=dict)
    per_node: dict[str, int] = field(default_factory=dict)
    #: the data-supply arithmetic: tokens, batch, sequence length, supported steps vs train_iters
    supply: dict[str, Any] = field(default_factory=dict)
    #: ranks ran out of data at different times
    desync: bool = False
    drained: list[int] = field(default_factory=list)
    first_drained_rank: int | None = None
    first_drained_step: int | None = None
    counts_text: str = ""
    rows: int = 0
    ranks_with_end: str = ""

END_OF_DATA = (
    r"(?i)Dataloader finished|^\s*StopIteration\b|\bStopIteration caught|end of epoch|end-of-epoch|"
    r"\bepoch \d+ (?:finished|done|ended|complete)|data(?:set|loader)? (?:is )?exhausted|ran out of data"
)

# (not "epoch" alone: every HF metrics line has an 'epoch' key)
_END_HINTS = ["dataloader finished", "stopiteration", "of epoch", "-epoch", "epoch ", "exhausted", "ran out of data"]

#: Config keys that carry the numbers of the data-supply arithmetic, by role.
_KEYS: dict[str, tuple[str, ...]] = {
    # not num_tokens: trainers print it per batch
    "tokens": ("total_tokens", "dataset_tokens", "total tokens", "tokens in dataset", "dataset tokens"),
    "world_size": ("world_size", "WORLD_SIZE", "world size"),
    "global_batch": (
        "global_batch_size", "gbs", "train_batch_size",
        "Total train batch size (w. parallel, distributed & accumulation)",
    ),
    "micro_batch": (
        "micro_batch_size", "per_device_train_batch_size", "train_micro_batch_size_per_gpu", "mbs",
        "Instantaneous batch size per device",
    ),
    "seq_len": ("max_seq_len", "max_seq_length", "seq_length", "seq_len", "max_length", "cutoff_len"),
    "train_iters": (
        "train_iters", "max_steps", "train_steps", "total_steps", "max_update", "max_iters",
        "Total optimization steps",
    ),
    "grad_accum": ("gradient_accumulation_steps", "grad_accum_steps", "accumulate_grad_batches", "Gradient Accumulation steps"),
}
# "train_iters=100", "max_seq_len: 4096", "'max_steps': 100" but not "'global_step/max_steps': '5/100'"
_NUM = r"[\"']?\s*(?:[:=]|\bis\b)\s*[\"']?([0-9][0-9,_]*)(?![\d,_/.])"


def run(ctx: AnalyzerContext) -> Result:
    """Count end-of-data lines per rank and node; do the data-supply arithmetic."""
    tl = ctx.timeline
    eod = _end_rows(tl)
    ranks = ctx.get(progress.Result).ranks
    last_steps = {r: e.last_step for r, e in ranks.items() if e.last_step is not None}
    world = world_ranks(ctx.job, tl)
    nodes_of = rank_nodes(tl)
    supply = data_supply(tl, ctx.job.config, world)
    per_rank, per_node = _counts(eod, nodes_of)
    found: dict[str, Any] = {}
    findings = []
    ranks_known = [r for r in world if r in last_steps or r in per_rank]
    rank_counts = [per_rank.get(r, 0) for r in ranks_known]
    node_names = sorted(set(nodes_of.values()) | set(per_node))
    node_counts = [per_node.get(n, 0) for n in node_names]
    uneven_ranks = bool(per_rank) and len(ranks_known) > 1 and len(set(rank_counts)) > 1
    uneven_nodes = bool(per_node) and len(node_names) > 1 and len(set(node_counts)) > 1
    short = (
        supply.get("supported_steps") is not None
        and supply.get("train_iters") is not None
        and supply["supported_steps"] < supply["train_iters"]
    )
    if not eod.is_empty() and (uneven_ranks or uneven_nodes):
        found["desync"] = True
        top = max(rank_counts) if rank_counts else 0
        drained = sorted(r for r in ranks_known if per_rank.get(r, 0) == top and top > 0)
        first_rows = eod.filter(pl.col("rank").is_in(drained)) if drained else eod
        first_rows = first_rows.sort(["ts", "file", "line"], nulls_last=True)
        skew = ctx.get(clock_skew.Result)
        placed = [
            (clock_skew.corrected(r["ts"], r["node"] or nodes_of.get(r["rank"]), skew), r["node"] or nodes_of.get(r["rank"]))
            for r in first_rows.iter_rows(named=True)
        ]
        first = first_rows.row(0, named=True)
        first_rank = first["rank"]
        if tied_across_nodes(placed[0], placed[1:], skew.uncertainty_s):
            first_rank = None  # nodes ran dry too close together for their clocks to order them
        step = last_steps.get(first_rank) if first_rank is not None else None
        found.update(drained=drained, first_drained_rank=first_rank, first_drained_step=step)
        others = [r for r in ranks_known if r not in drained]
        counts_text = (
            "per-node counts " + "/".join(str(c) for c in node_counts) + f" ({', '.join(node_names)})"
            if uneven_nodes
            else "per-rank counts " + ", ".join(f"{r}: {per_rank.get(r, 0)}" for r in ranks_known[:16])
        )
        found["counts_text"] = counts_text
        title = (
            f"{plural_ranks(drained).capitalize()} ran out of data while {plural_ranks(others)} kept training"
            if drained and others
            else f"Ranks ran out of data at different times ({counts_text})"
        )
        supply_text = _supply_text(supply)
        findings.append(
            make_finding(
                ID,
                suffix="desync",
                category="data_exhaustion_desync",
                severity="error",
                title=title,
                rule_role="root",
                ranks=drained or sorted(int(r) for r in eod.get_column("rank").drop_nulls().unique()),
                evidence=evidence_rows(first_rows.unique(subset=["file", "rank"], keep="first", maintain_order=True)),
                count=eod.height,
                nodes=[n for n in node_names if per_node.get(n)],
                explanation=(
                    f"End-of-data lines are uneven across the job ({counts_text}). The ranks that ran out leave "
                    "the loop and enter teardown (a barrier or destroy_process_group) while the others wait for them "
                    "in the next step's collective: nobody can finish."
                    + (f" {supply_text}" if supply_text else "")
                ),
                fix=(
                    "Make every rank run the same number of steps: check before training that the packed dataset "
                    "yields at least train_iters x global batch micro-batches on every rank, stop all ranks together "
                    "when any rank runs out (all_reduce a 'done' flag each step), or lower train_iters; give the "
                    "teardown barrier a timeout."
                ),
                fields={
                    "culprit_ranks": drained, "per_rank": per_rank, "per_node": per_node,
                    "first_drained_rank": first_rank, "first_drained_step": step, "supply": supply,
                },
            )
        )
    elif short:
        findings.append(
            make_finding(
                ID,
                suffix="supply",
                category="data_exhaustion_desync",
                severity="warning",
                title=f"The data supports {supply['supported_steps']:.1f} steps but train_iters is {supply['train_iters']}",
                rule_role="context",
                evidence=[],
                explanation=_supply_text(supply),
                fix="Lower train_iters to what the data supports, or add data; make the loop stop on all ranks together.",
                fields={"supply": supply},
            )
        )
    return Result(
        findings=tuple(findings),
        per_rank=per_rank,
        per_node=per_node,
        supply=supply,
        rows=eod.height,
        ranks_with_end=format_ranks(per_rank),
        **found,
    )


def _counts(eod: pl.DataFrame, nodes_of: dict[int, str]) -> tuple[dict[int, int], dict[str, int]]:
    """End-of-data lines per rank and per node, each event counted once.

    A tee'd console repeats what the per-rank logs say, so a rank's count is its largest count
    in any one file, and a node's count is the sum over its ranks; lines without a rank count
    for their node only where no rank of that node is known.
    """
    by_file = eod.filter(pl.col("rank").is_not_null()).group_by("rank", "file").agg(pl.len().alias("n"))
    per_rank = {int(r): int(n) for r, n in by_file.group_by("rank").agg(pl.col("n").max()).iter_rows()}
    per_node: dict[str, int] = {}
    for rank, n in per_rank.items():
        node = nodes_of.get(rank)
        if node is not None:
            per_node[node] = per_node.get(node, 0) + n
    anonymous = (
        eod.filter(pl.col("rank").is_null() & pl.col("node").is_not_null())
        .group_by("node", "file")
        .agg(pl.len().alias("n"))
        .group_by("node")
        .agg(pl.col("n").max())
    )
    for node, n in anonymous.iter_rows():
        per_node.setdefault(str(node), int(n))
    return per_rank, dict(sorted(per_node.items()))


def _end_rows(tl: pl.DataFrame) -> pl.DataFrame:
    """End-of-data rows, one per multi-line record (a StopIteration traceback counts once)."""
    rows = grep(tl, END_OF_DATA, _END_HINTS).filter(pl.col("kind") != "stack")
    with_rec = rows.filter(pl.col("record").is_not_null()).unique(subset=["file", "record"], keep="first", maintain_order=True)
    return pl.concat([rows.filter(pl.col("record").is_null()), with_rec]).sort(["file", "line"])


def data_supply(tl: pl.DataFrame, config: dict[str, Any], world: list[int]) -> dict[str, Any]:
    """Steps the data supports: tokens / (global batch x seq len), from config and printed key=value pairs."""
    values: dict[str, float] = {}
    flat = _flatten(config)
    for role, keys in _KEYS.items():
        for key in keys:
            if key in flat and _number(flat[key]) is not None:
                values[role] = _number(flat[key])  # type: ignore[assignment]
                break
    found = _printed_values(tl)
    for role, value in found.items():
        values.setdefault(role, value)
    if "world_size" not in values and world:
        values["world_size"] = float(len(world))
    out: dict[str, Any] = {k: (int(v) if float(v).is_integer() else v) for k, v in values.items()}
    tokens, seq_len = values.get("tokens"), values.get("seq_len")
    batch = values.get("global_batch")
    if batch is None and values.get("micro_batch") is not None and values.get("world_size") is not None:
        batch = values["world_size"] * values["micro_batch"] * values.get("grad_accum", 1.0)
    out["supported_steps"] = round(tokens / (batch * seq_len), 1) if tokens and seq_len and batch else None
    if out["supported_steps"] is not None:
        out["formula"] = f"{int(tokens):,} / ({int(batch)} x {int(seq_len)}) = {out['supported_steps']}"
    return out


def _printed_values(tl: pl.DataFrame) -> dict[str, float]:
    """First value printed for each role's keys (``train_iters=100``, ``max_seq_len: 4096`` ...)."""
    keys = sorted({k for ks in _KEYS.values() for k in ks}, key=len, reverse=True)
    alternation = "|".join(re.escape(k) for k in keys)
    # polars has no look-ahead: a loose filter there, the strict pattern in Python on the few hits
    loose = rf"(?i)(?:{alternation})[\"']?\s*(?:[:=]|\bis\b)\s*[\"']?[0-9]"
    rows = grep(tl, loose, keys).filter(pl.col("kind") != "stack").head(2000)
    found: dict[str, float] = {}
    matcher = re.compile(rf"(?:^|\W)({alternation}){_NUM}", re.IGNORECASE)
    for text in rows.get_column("message"):
        for m in matcher.finditer(text or ""):
            key = m.group(1).lower()
            role = next((r for r, ks in _KEYS.items() if key in {k.lower() for k in ks}), None)
            value = _number(m.group(2))
            if role and value is not None and role not in found:
                found[role] = value
    return found


def _supply_text(supply: dict[str, Any]) -> str:
    if supply.get("supported_steps") is None:
        return ""
    text = f"The data supports {supply['formula']} steps"
    if supply.get("train_iters") is not None:
        text += f", but train_iters is {supply['train_iters']}"
    return text + "."


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        out.setdefault(str(key), value)
        out[f"{prefix}{key}"] = value
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).replace(",", "").replace("_", ""))
    except ValueError:
        return None
