"""The library API the CLI and tests call: load a job, export its timeline, analyze it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

from postmortem import __version__
from postmortem.config import extract_config
from postmortem.errors import InputError
from postmortem.inventory import fmt_ts, job_info, rank_progress
from postmortem.model import SEVERITY_ORDER, Report
from postmortem.ranges import format_ranks
from postmortem.rule_engine import ExampleResult, RuleSet, load_rules, match_rules, run_examples
from postmortem.timeline import Timeline, build_timeline
from postmortem.verdict import diagnose


@dataclass
class Analysis:
    """The result of analyzing one job: the report and the timeline it was drawn from."""

    report: Report
    timeline: Timeline


def analyze(
    job: Path,
    *,
    rules_dirs: Sequence[Path] = (),
    rules: RuleSet | None = None,
    keep_all: bool = False,
) -> Analysis:
    """Parse ``job``, match the rules, reason across ranks and return the report.

    ``rules_dirs`` add to (and override by id) the built-in rules and ``$POSTMORTEM_RULES``;
    a ready ``rules`` set is used as is. Raises :class:`InputError` or :class:`RuleError`.
    """
    ruleset = rules if rules is not None else load_rules(rules_dirs)
    timeline = load_timeline(job, keep=ruleset.keep_pattern(), keep_all=keep_all)
    findings = match_rules(timeline.frame, ruleset)
    info = job_info(timeline)
    info.config = extract_config(timeline.frame)  # collected once: job_info asked for the same facts
    report = diagnose(timeline.frame, findings, info, __version__)
    return Analysis(report, timeline)


def rules(rules_dirs: Sequence[Path] = ()) -> RuleSet:
    """The built-in rules plus ``rules_dirs`` and ``$POSTMORTEM_RULES`` (later ids override)."""
    return load_rules(rules_dirs)


def test_rules(directory: Path | None = None) -> list[ExampleResult]:
    """Run the inline examples of every rule (or only of the rules in ``directory``)."""
    ruleset = load_rules() if directory is None else load_rules([directory], builtin=False)
    return run_examples(ruleset)


def write_report(report: Report, frame: pl.DataFrame, output: Path, fmt: str | None = None) -> None:
    """Write the report as HTML, Markdown or JSON, chosen by ``fmt`` or by ``output``'s extension."""
    from postmortem.render import render_html, render_markdown

    kind = fmt or {".html": "html", ".htm": "html", ".md": "md", ".json": "json"}.get(output.suffix.lower())
    if kind is None:
        raise InputError(f"{output}: unknown report format {output.suffix!r} (use .html, .md or .json)")
    output.parent.mkdir(parents=True, exist_ok=True)
    if kind == "html":
        render_html(report, frame, output)
    elif kind == "md":
        output.write_text(render_markdown(report), encoding="utf-8")
    else:
        output.write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def worst_severity_at_least(report: Report, severity: str) -> bool:
    """True when some finding is at least as severe as ``severity``."""
    return any(SEVERITY_ORDER[f.severity] >= SEVERITY_ORDER[severity] for f in report.findings)


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
    console.print(f"world size: {info.world_size or '-'}; ranks seen: {format_ranks(info.ranks) or '-'}")
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


__all__ = [
    "Analysis", "Timeline", "analyze", "export_timeline", "load_timeline", "print_inventory", "rules", "test_rules",
    "worst_severity_at_least", "write_report",
]
