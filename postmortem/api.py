"""The library API the CLI and tests call: load a job, export its timeline, analyze it."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

from postmortem.errors import InputError
from postmortem.inventory import fmt_ts, job_info, rank_progress
from postmortem.timeline import Timeline, build_timeline


def load_timeline(job: Path, *, keep: str | None = None, keep_all: bool = False) -> Timeline:
    """Discover and parse every file of ``job`` into one timeline.

    Raises :class:`InputError` when the path is missing, empty, or nothing in it is readable.
    """
    built = build_timeline(Path(job), keep=keep, keep_all=keep_all)
    if not built.inventory.files:
        reasons = "; ".join(f"{s.rel}: {s.reason}" for s in built.inventory.skipped[:3])
        raise InputError(f"{job}: no readable log file ({reasons})")
    return built


def export_timeline(timeline: Timeline, output: Path) -> int:
    """Write the timeline as Parquet, CSV or JSON lines, chosen by ``output``'s extension."""
    frame = timeline.frame
    suffix = output.suffix.lower()
    output.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".parquet":
        frame.write_parquet(output)
    elif suffix == ".csv":
        frame.write_csv(output)
    elif suffix in (".jsonl", ".ndjson"):
        frame.write_ndjson(output)
    else:
        raise InputError(f"{output}: unknown timeline format {suffix!r} (use .parquet, .csv or .jsonl)")
    return frame.height


def print_inventory(timeline: Timeline, console: Console) -> None:
    """What was found in a job: files by family, nodes, ranks, per-rank progress, skipped files."""
    info = job_info(timeline)
    console.print(f"[bold]job[/bold] {info.path}")
    families = ", ".join(f"{name} {count}" for name, count in sorted(info.families.items()))
    console.print(f"files: {info.files_parsed} parsed ({families}), {len(info.skipped)} skipped")
    console.print(f"nodes: {', '.join(info.nodes) or '-'}")
    console.print(f"world size: {info.world_size or '-'}; ranks seen: {_ranges(info.ranks) or '-'}")
    console.print(f"time span: {fmt_ts(info.start)} .. {fmt_ts(info.end)}")
    if info.versions:
        console.print("versions: " + ", ".join(f"{k} {v}" for k, v in info.versions.items()))
    progress = rank_progress(timeline.frame)
    if progress.height:
        table = Table("rank", "node", "last step", "last time", "events", title="per-rank progress")
        for row in progress.iter_rows(named=True):
            step = "-" if row["last_step"] is None else str(row["last_step"])
            table.add_row(str(row["rank"]), row["node"] or "-", step, fmt_ts(row["last_ts"]), str(row["events"]))
        console.print(table)
    for item in info.skipped:
        console.print(f"skipped {item.path}: {item.reason}")
    for item in info.notes:
        console.print(f"note {item.path}: {item.reason}")


def _ranges(ranks: list[int]) -> str:
    try:
        from postmortem.ranges import format_ranks
    except ImportError:  # pragma: no cover - ranges.py arrives with the diagnosis
        return ", ".join(map(str, ranks))
    return format_ranks(ranks)


__all__ = ["Timeline", "export_timeline", "load_timeline", "pl", "print_inventory"]
