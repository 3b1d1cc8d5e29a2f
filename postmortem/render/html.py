"""The self-contained HTML report: one file to attach to a ticket and open offline weeks later.

The renderer builds a plain context from the :class:`~postmortem.model.Report` (and the timeline,
for the charts only) and fills ``templates/report.html.j2``; all markup lives in the templates.
Every piece of log text goes through jinja2's autoescaping; the only raw inserts are our own CSS
and JS and the matplotlib SVG (whose text matplotlib escapes). A Content-Security-Policy with a
hash of the one script keeps the page from loading anything or running anything else, even if
some text slipped through unescaped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import polars as pl
from markupsafe import Markup

from postmortem.errors import ReportError
from postmortem.model import Report, StackGroup
from postmortem.render import view
from postmortem.resources import templates_dir

#: Findings rows, skipped files and fact-table rows beyond these limits are counted, not listed.
TABLE_ROW_LIMIT = 300
#: Worlds above this size get the per-rank table collapsed by default.
COLLAPSE_RANKS_ABOVE = 64


def render_html(report: Report, timeline: pl.DataFrame, out: Path) -> None:
    """Write the report for ``report`` (charts from ``timeline``) to ``out`` as one HTML file."""
    text = html_text(report, timeline)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write the HTML report to {out}: {exc.strerror or exc}") from exc


def html_text(report: Report, timeline: pl.DataFrame) -> str:
    """The report as an HTML document (a string), deterministic for the same input."""
    from postmortem.render import plots  # matplotlib is heavy: only the HTML report needs it

    env = _environment(str(templates_dir()))
    css = (templates_dir() / "report.css").read_text(encoding="utf-8")
    js = (templates_dir() / "report.js").read_text(encoding="utf-8")
    steps_svg = plots.step_timeline_svg(report, timeline)
    last_svg = plots.last_step_svg(report)
    context = build_context(report)
    context.update(
        css=Markup(css),
        js=Markup(js),
        csp=_csp(js),
        steps_svg=Markup(steps_svg) if steps_svg else None,
        last_step_svg=Markup(last_svg) if last_svg else None,
        large_plot=len(report.ranks) > plots.LANE_LIMIT,
    )
    return env.get_template("report.html.j2").render(context)


@lru_cache(maxsize=4)
def _environment(path: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(path),
        autoescape=True,  # always, not by extension: log lines are full of < > &
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        ranks_text=view.ranks_text,
        ts_text=view.ts_text,
        duration_text=view.duration_text,
        exit_text=view.exit_text,
        where_text=view.where_text,
        nodes_text=view.nodes_text,
        hostlist=view.hostlist,
        evidence_lines=view.evidence_lines,
        prose=view.prose,
        clip=view.clip,
    )
    env.filters["thousands"] = lambda n: f"{n:,}"
    return env


def build_context(report: Report) -> dict[str, Any]:
    """Everything the templates show, except the charts and assets (tests assert on this)."""
    job, verdict = report.job, report.verdict
    ordered = view.ordered_findings(report)
    anchors = {f.id: f"finding-{i}-{_slug(f.id)}" for i, f in enumerate(report.findings)}
    titles = {f.id: f.title for f in report.findings}
    ranks = sorted(report.ranks, key=lambda r: r.rank)
    nodes = job.nodes or sorted({r.node for r in ranks if r.node})
    world = job.world_size or (len(ranks) or None)
    span_s = (job.end - job.start).total_seconds() if job.start and job.end else None
    majority = view.majority_last_step(ranks)
    by_role: dict[str, int] = {}
    for f in report.findings:
        by_role[f.role] = by_role.get(f.role, 0) + 1
    return {
        "report": report,
        "job": job,
        "verdict": verdict,
        "first_failure": verdict.first_failure,
        "world_size": world,
        "nodes": nodes,
        "span_s": span_s,
        "findings": ordered,
        "finding_counts": by_role,
        "anchors": anchors,
        "titles": titles,
        "evidence_shown": view.EVIDENCE_SHOWN,
        "evidence_max": view.EVIDENCE_MAX,
        "ranks": ranks,
        "culprits": set(verdict.culprit_ranks),
        "rank_groups": view.odd_first(view.rank_groups(ranks), set(verdict.culprit_ranks), majority),
        "majority_step": majority,
        "collapse_ranks": len(ranks) > COLLAPSE_RANKS_ABOVE,
        "stacks": stack_columns(report.stack_groups),
        "traces": _traces(report),
        "facts": facts_view(report.facts),
        "skipped": job.skipped[:TABLE_ROW_LIMIT],
        "skipped_more": max(0, len(job.skipped) - TABLE_ROW_LIMIT),
        "config_json": json.dumps(job.config, indent=2, sort_keys=True, default=str) if job.config else "",
        "row_limit": TABLE_ROW_LIMIT,
    }


def _traces(report: Report) -> dict[str, Any]:
    """The flight-recorder analyzer's facts and the verdict's weighing of them, when there are dumps."""
    fr = report.facts.get("flight-recorder") or {}
    if not fr.get("dumps"):
        return {"stack_membership": fr.get("stack_membership") or []}
    return {**fr, "agreement": (report.facts.get("verdict") or {}).get("agreement") or {}}


def stack_columns(groups: list[StackGroup]) -> list[dict[str, Any]]:
    """Stack groups for side-by-side display; a frame missing from any other group is flagged."""
    frame_sets = [set(g.frames) for g in groups]
    columns = []
    for g in sorted(groups, key=lambda g: (not g.minority, g.id)):
        others = [s for s, h in zip(frame_sets, groups, strict=True) if h is not g]
        frames = [(fr, bool(others) and not all(fr in s for s in others)) for fr in g.frames]
        columns.append({"group": g, "frames": frames})
    return columns


def facts_view(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """Analyzer facts as titled tables where they are tabular, else pretty JSON.

    The facts are free-form (each analyzer adds its own), so the shape decides the display:
    a list of flat dicts or a dict of flat dicts is a table, a flat dict is a key/value table.
    """
    out = []
    for key in sorted(facts, key=str):
        value = facts[key]
        title = str(key).replace("_", " ").strip().capitalize()
        item: dict[str, Any] = {"key": str(key), "title": title}
        rows = _rows(value)
        if rows is not None:
            columns: list[str] = []
            for row in rows:
                columns.extend(c for c in row if c not in columns)
            item.update(
                kind="table",
                columns=columns,
                rows=[[_cell(row.get(c)) for c in columns] for row in rows[:TABLE_ROW_LIMIT]],
                more=max(0, len(rows) - TABLE_ROW_LIMIT),
                total=len(rows),
            )
        elif isinstance(value, dict) and all(_scalar(v) or _flat_list(v) for v in value.values()):
            item.update(kind="pairs", pairs=[(str(k), _cell(v)) for k, v in value.items()])
        elif _scalar(value):
            item.update(kind="pairs", pairs=[("value", _cell(value))])
        else:
            text = json.dumps(value, indent=1, sort_keys=True, default=_json_default)
            item.update(kind="json", text=view.clip(text, 20000))
        out.append(item)
    return out


def _rows(value: Any) -> list[dict[str, Any]] | None:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        rows = value
    elif isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        rows = [{"": k, **v} for k, v in value.items()]
    else:
        return None
    if all(all(_scalar(c) or _flat_list(c) for c in r.values()) for r in rows):
        return rows
    return None


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool, datetime))


def _flat_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(_scalar(x) for x in v)


def _cell(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, datetime):
        return view.ts_text(v)
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        if v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return view.ranks_text(list(v))
        shown = ", ".join(_cell(x) for x in v[:50])
        return shown + (f" … ({len(v)} items)" if len(v) > 50 else "")
    return view.clip(str(v), 1000)


def _json_default(v: Any) -> str:
    return v.isoformat() if isinstance(v, datetime) else str(v)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")[:60] or "x"


def _csp(js: str) -> str:
    """The page may load nothing and run only its own script; images only from data: URIs."""
    digest = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    return (
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
