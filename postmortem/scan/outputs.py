"""The scan's outputs: ``runs.parquet``, ``findings.parquet`` and a self-contained ``index.html``.

A job's result travels (between processes, into the cache) as plain JSON-able rows:
:func:`report_rows` turns one :class:`~postmortem.model.Report` into its runs row and findings
rows; :func:`error_row` makes the row of a job that could not be analyzed. :func:`write_outputs`
turns all rows into the two tables (typed by :data:`RUN_SCHEMA` and :data:`FINDING_SCHEMA`, so
an empty or all-error scan still writes well-typed files) and renders the index page.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import jinja2
import polars as pl

from postmortem.model import CATEGORIES, SEVERITY_ORDER, Finding, Report
from postmortem.ranges import format_ranks
from postmortem.render.view import duration_text
from postmortem.resources import templates_dir
from postmortem.scan.fingerprint import fingerprint

RUNS_FILE = "runs.parquet"
FINDINGS_FILE = "findings.parquet"
INDEX_FILE = "index.html"
REPORTS_DIR = "reports"
#: Rule ids kept in ``top_rules``.
TOP_RULES = 5
#: Runs listed per recurring fingerprint in the index.
FINGERPRINT_EXAMPLES = 5
#: Runs listed in the index table (newest first); all of them are in runs.parquet. Keeps the
#: page usable (and a few MB) for scans of tens of thousands of jobs.
INDEX_RUN_LIMIT = 5000

_DT = pl.Datetime("us")
_INTS = pl.List(pl.Int64)
_STRS = pl.List(pl.String)

#: One row per job. Time columns are naive, like the report's (the logs' own clock).
RUN_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String,  # sha1 of the absolute path, 16 hex digits
    "path": pl.String,  # absolute job directory
    "root": pl.String,  # the scan root it was found under
    "name": pl.String,  # path relative to the root
    "status": pl.String,  # completed | failed | hung | unknown | error
    "category": pl.String,
    "summary": pl.String,
    "confidence": pl.String,
    "culprit_ranks": _INTS,
    "culprit_nodes": _STRS,
    "first_failure_ts": _DT,
    "first_failure_rank": pl.Int64,
    "first_failure_step": pl.Int64,
    "first_failure_text": pl.String,
    "world_size": pl.Int64,
    "nodes": _STRS,
    "last_step": pl.Int64,  # the furthest step any rank logged
    "start_ts": _DT,
    "end_ts": _DT,
    "duration_s": pl.Float64,
    "job_ts": _DT,  # when the job ran: first failure, else end, else start, else newest file mtime
    "top_rules": _STRS,
    "fingerprint": pl.String,
    "fingerprint_text": pl.String,
    "n_findings": pl.Int64,
    "files_parsed": pl.Int64,
    "files_skipped": pl.Int64,
    "files": pl.Int64,  # files in the job directory
    "bytes": pl.Int64,
    "newest_mtime": _DT,
    "error": pl.String,  # why the job has no analysis (status "error")
    "analysis_s": pl.Float64,
    "analyzed_at": _DT,
    "from_cache": pl.Boolean,
    "report": pl.String,  # per-job report, relative to the output directory
    "tool_version": pl.String,
    "rules_version": pl.String,
}

#: One row per finding of every analyzed job.
FINDING_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String,
    "path": pl.String,
    "finding_id": pl.String,
    "rule": pl.String,
    "category": pl.String,
    "severity": pl.String,
    "role": pl.String,  # primary | secondary | context
    "caused_by": pl.String,
    "title": pl.String,
    "message": pl.String,
    "ranks": _INTS,
    "nodes": _STRS,
    "first_ts": _DT,
    "count": pl.Int64,
    "evidence_file": pl.String,
    "evidence_line": pl.Int64,
    "evidence_text": pl.String,
    "fields": pl.String,  # the finding's extracted fields, as JSON
}
_TIME_COLUMNS = {name for name, dtype in {**RUN_SCHEMA, **FINDING_SCHEMA}.items() if dtype == _DT}
_EVIDENCE_CHARS = 2000


def job_id(path: str) -> str:
    """A stable id for a job directory: the SHA-1 of its absolute path, 16 hex digits."""
    return hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def report_file(name: str, jid: str) -> str:
    """The per-job report's path inside the output directory: readable and unique."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:80] or "job"
    return f"{REPORTS_DIR}/{slug}-{jid[:8]}.html"


def report_rows(report: Report) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The report-derived part of a job's runs row, and its findings rows (without job ids)."""
    verdict, job = report.verdict, report.job
    node_of = {r.rank: r.node for r in report.ranks if r.node}
    culprit_nodes = sorted({node_of[r] for r in verdict.culprit_ranks if r in node_of})
    first = verdict.first_failure
    steps = [r.last_step for r in report.ranks if r.last_step is not None]
    duration = (job.end - job.start).total_seconds() if job.start and job.end else None
    fp, fp_text = fingerprint(report)
    run = {
        "status": verdict.status,
        "category": verdict.category,
        "summary": verdict.summary,
        "confidence": verdict.confidence,
        "culprit_ranks": sorted(verdict.culprit_ranks),
        "culprit_nodes": culprit_nodes,
        "first_failure_ts": _iso(first.ts) if first else None,
        "first_failure_rank": first.rank if first else None,
        "first_failure_step": first.step if first else None,
        "first_failure_text": first.text[:_EVIDENCE_CHARS] if first else None,
        "world_size": job.world_size,
        "nodes": list(job.nodes),
        "last_step": max(steps) if steps else None,
        "start_ts": _iso(job.start),
        "end_ts": _iso(job.end),
        "duration_s": duration,
        "job_ts": _iso((first.ts if first else None) or job.end or job.start),
        "top_rules": top_rules(report.findings),
        "fingerprint": fp,
        "fingerprint_text": fp_text,
        "n_findings": len(report.findings),
        "files_parsed": job.files_parsed,
        "files_skipped": len(job.skipped),
    }
    return run, [_finding_row(f) for f in report.findings]


def error_row(error: str, status: str = "error") -> dict[str, Any]:
    """The runs row of a job that could not be analyzed."""
    return {"status": status, "error": error}


def top_rules(findings: list[Finding]) -> list[str]:
    """Rule ids, primary findings first, then by severity, each once, at most :data:`TOP_RULES`."""
    role_order = {"primary": 0, "context": 1, "secondary": 2}
    ranked = sorted(
        enumerate(findings),
        key=lambda item: (role_order.get(item[1].role, 3), -SEVERITY_ORDER.get(item[1].severity, 0), item[0]),
    )
    rules: list[str] = []
    for _, finding in ranked:
        if finding.rule not in rules:
            rules.append(finding.rule)
    return rules[:TOP_RULES]


def _finding_row(f: Finding) -> dict[str, Any]:
    ev = f.evidence[0] if f.evidence else None
    return {
        "finding_id": f.id,
        "rule": f.rule,
        "category": f.category,
        "severity": f.severity,
        "role": f.role,
        "caused_by": f.caused_by,
        "title": f.title,
        "message": f.message,
        "ranks": sorted(f.ranks),
        "nodes": sorted(f.nodes),
        "first_ts": _iso(f.first_ts),
        "count": f.count,
        "evidence_file": ev.file if ev else None,
        "evidence_line": ev.line if ev else None,
        "evidence_text": ev.text[:_EVIDENCE_CHARS] if ev else None,
        "fields": json.dumps(f.to_dict()["fields"], sort_keys=True, default=str),
    }


def _iso(ts: datetime | None) -> str | None:
    return ts.isoformat() if ts is not None else None


# --------------------------------------------------------------------------- tables


def frame(rows: list[dict[str, Any]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Rows (JSON-able, times as ISO text) as a frame with exactly ``schema``'s columns and types."""
    columns: dict[str, list[Any]] = {name: [] for name in schema}
    for row in rows:
        for name in schema:
            value = row.get(name)
            if name in _TIME_COLUMNS and isinstance(value, str):
                value = _parse_ts(value)
            columns[name].append(value)
    return pl.DataFrame(columns, schema=schema, strict=False)


def _parse_ts(text: str) -> datetime | None:
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        return None
    # report times are naive; an aware one (none today) is kept as its wall-clock time
    return ts.replace(tzinfo=None)


# --------------------------------------------------------------------------- writing


def write_outputs(
    out: Path, runs: list[dict[str, Any]], findings: list[dict[str, Any]], meta: dict[str, Any]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Write runs.parquet, findings.parquet and index.html into ``out``; return the two tables."""
    runs_df = frame(runs, RUN_SCHEMA).sort("path")
    findings_df = frame(findings, FINDING_SCHEMA).sort("path", "finding_id")
    _atomic_parquet(runs_df, out / RUNS_FILE)
    _atomic_parquet(findings_df, out / FINDINGS_FILE)
    html = index_html(runs_df, meta)
    tmp = out / f".{INDEX_FILE}.tmp"
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, out / INDEX_FILE)
    return runs_df, findings_df


def _atomic_parquet(df: pl.DataFrame, path: Path) -> None:
    # a reader (a dashboard polling the files) never sees half a file
    tmp = path.with_name(f".{path.name}.tmp")
    df.write_parquet(tmp)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- index.html

#: Colors for the category chart, in CATEGORIES order (colorblind-friendly cycle).
_PALETTE = (
    "#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb", "#332288",
    "#88ccee", "#44aa99", "#117733", "#999933", "#ddcc77", "#cc6677", "#882255", "#aa4499",
    "#661100", "#6699cc", "#888888",
)
_CHART_W = 760
_CHART_H = 220
_CHART_PAD = 36


def index_html(runs: pl.DataFrame, meta: dict[str, Any]) -> str:
    """The index page for ``runs`` (a runs table) and the scan's ``meta`` facts."""
    env = _environment(str(templates_dir()))
    return env.get_template("scan_index.html.j2").render(index_context(runs, meta))


def index_context(runs: pl.DataFrame, meta: dict[str, Any]) -> dict[str, Any]:
    """Everything the index template shows (tests assert on this)."""
    fingerprints = recurring_fingerprints(runs)
    seen = {f["fingerprint"]: f["count"] for f in fingerprints}
    statuses = Counter(runs["status"].to_list())
    newest = runs.sort(["job_ts", "path"], descending=[True, False], nulls_last=True).head(INDEX_RUN_LIMIT)
    return {
        "meta": meta,
        "total": runs.height,
        "listed": newest.height,
        "status_counts": sorted(statuses.items(), key=lambda kv: (-kv[1], kv[0])),
        "categories": sorted({c for c in runs["category"].to_list() if c}, key=_category_order),
        "run_rows": [_run_view(r, seen) for r in newest.iter_rows(named=True)],
        "fingerprints": fingerprints,
        "chart": category_chart(runs),
    }


def _category_order(category: str) -> tuple[int, str]:
    return (CATEGORIES.index(category) if category in CATEGORIES else len(CATEGORIES), category)


def _run_view(r: dict[str, Any], seen: dict[str, int]) -> dict[str, Any]:
    fp = r["fingerprint"]
    return {
        **r,
        "culprits_text": format_ranks(r["culprit_ranks"] or []),
        "nodes_text": ", ".join(r["nodes"] or []),
        "culprit_nodes_text": ", ".join(r["culprit_nodes"] or []),
        "rules_text": ", ".join(r["top_rules"] or []),
        "duration_text": duration_text(r["duration_s"]) if r["duration_s"] is not None else "",
        "seen": seen.get(fp, 0) if fp else 0,
        "new": bool(fp) and seen.get(fp) == 1,
        "ts_sort": r["job_ts"].isoformat() if r["job_ts"] else "",
        "ts_text": r["job_ts"].strftime("%Y-%m-%d %H:%M") if r["job_ts"] else "",
    }


def _failures(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.filter(pl.col("fingerprint").is_not_null() & ~pl.col("status").is_in(["completed", "error"]))


def recurring_fingerprints(runs: pl.DataFrame) -> list[dict[str, Any]]:
    """Failure fingerprints with their count, first and last seen time, ordered by count."""
    failures = _failures(runs).with_columns(
        pl.coalesce("job_ts", "newest_mtime").alias("seen_ts")
    ).sort("seen_ts", "path", nulls_last=True)
    if failures.is_empty():
        return []
    grouped = failures.group_by("fingerprint").agg(
        pl.len().alias("count"),
        pl.col("seen_ts").min().alias("first_seen"),
        pl.col("seen_ts").max().alias("last_seen"),
        pl.col("category").first(),
        pl.col("status").first(),
        pl.col("fingerprint_text").first(),
        pl.col("summary").last().alias("example"),
        pl.col("top_rules").first(),
        pl.struct("name", "report").tail(FINGERPRINT_EXAMPLES).alias("jobs"),
    )
    out = grouped.sort(["count", "last_seen", "fingerprint"], descending=[True, True, False], nulls_last=True)
    return out.to_dicts()


def category_chart(runs: pl.DataFrame) -> dict[str, Any]:
    """Counts per category over time (failures only): periods, a table, and stacked-bar rectangles."""
    failures = _failures(runs).with_columns(pl.coalesce("job_ts", "newest_mtime").alias("t"))
    failures = failures.filter(pl.col("t").is_not_null())
    if failures.is_empty():
        return {"unit": None, "periods": [], "series": [], "bars": [], "ticks": [], "width": _CHART_W, "height": _CHART_H}
    lo, hi = failures["t"].min(), failures["t"].max()
    span = hi - lo  # type: ignore[operator]
    unit, every = ("day", "1d") if span <= timedelta(days=45) else ("week", "1w") if span <= timedelta(days=200) else ("month", "1mo")
    counts = (
        failures.with_columns(pl.col("t").dt.truncate(every).alias("period"))
        .group_by("period", "category")
        .len()
    )
    # every period from the first to the last, empty ones too: a gap is information
    periods = pl.datetime_range(
        counts["period"].min(), counts["period"].max(), interval=every, eager=True, time_unit="us"
    ).to_list()
    categories = sorted(counts["category"].unique().to_list(), key=_category_order)
    table = {(row["period"], row["category"]): row["len"] for row in counts.iter_rows(named=True)}
    fmt = "%Y-%m" if unit == "month" else "%Y-%m-%d"
    labels = [p.strftime(fmt) for p in periods]
    colors = {c: _PALETTE[_category_order(c)[0] % len(_PALETTE)] for c in categories}
    totals = [sum(table.get((p, c), 0) for c in categories) for p in periods]
    peak = max(totals) or 1
    inner_w = _CHART_W - 2 * _CHART_PAD
    inner_h = _CHART_H - 2 * _CHART_PAD
    slot = inner_w / len(periods)
    bar_w = max(2.0, min(48.0, slot * 0.7))
    bars = []
    for i, p in enumerate(periods):
        y = _CHART_H - _CHART_PAD
        x = _CHART_PAD + i * slot + (slot - bar_w) / 2
        for c in categories:
            n = table.get((p, c), 0)
            if not n:
                continue
            h = inner_h * n / peak
            y -= h
            bars.append({"x": round(x, 1), "y": round(y, 1), "w": round(bar_w, 1), "h": round(h, 1),
                         "color": colors[c], "title": f"{labels[i]}: {c} {n}"})
    step = max(1, len(periods) // 12)
    ticks = [{"x": round(_CHART_PAD + i * slot + slot / 2, 1), "label": labels[i]} for i in range(0, len(periods), step)]
    series = [{"category": c, "color": colors[c], "counts": [table.get((p, c), 0) for p in periods],
               "total": sum(table.get((p, c), 0) for p in periods)} for c in categories]
    return {"unit": unit, "periods": labels, "totals": totals, "series": series, "bars": bars, "ticks": ticks,
            "peak": peak, "width": _CHART_W, "height": _CHART_H, "pad": _CHART_PAD}


def _csp(js: str) -> str:
    """The page loads nothing and runs only its own script (same policy as the job report)."""
    digest = base64.b64encode(hashlib.sha256(str(js).encode("utf-8")).digest()).decode("ascii")
    return (
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )


def _environment(path: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(path),
        autoescape=True,  # always: summaries and paths come from logs and file systems
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["csp"] = _csp
    env.filters["ts"] = lambda ts: ts.strftime("%Y-%m-%d %H:%M") if ts else ""
    env.filters["iso"] = lambda ts: ts.isoformat() if ts else ""
    return env
