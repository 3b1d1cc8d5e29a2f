"""``--format md``: the report as Markdown to paste into a GitHub or Jira ticket.

Verdict, summary and key facts first, then the top findings with their fixes, the per-rank facts
that matter (ranks collapsed into groups), and the evidence in ``<details>`` blocks. Log text only
ever appears inside code spans or fences sized to outlast any backticks in it; other text has
HTML and Markdown punctuation escaped, so nothing from a log can become a link, a tag or markup.
"""

from __future__ import annotations

import re

from postmortem.model import Evidence, Finding, Report
from postmortem.render import view

#: Findings shown in full; the rest are listed by title.
TOP_FINDINGS = 5
#: Rank groups shown in the table; large worlds rarely have more distinct groups than this.
MAX_RANK_GROUPS = 20

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")
_BLOCK_START = re.compile(r"^(\s*)([#>+=-]|\d+(?=[.)]))")


def render_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown (deterministic for the same report)."""
    v, job = report.verdict, report.job
    out: list[str] = []
    out.append(f"## postmortem: {v.status.upper()} — `{v.category}` (confidence: {v.confidence})")
    out.append("")
    if v.summary:
        out.append(f"**{text(v.summary)}**")
        out.append("")
    facts = [
        ("Culprit ranks", text(view.ranks_text(v.culprit_ranks))),
        ("First failure", _first_failure(report)),
        ("World", _world(report)),
        ("Logs cover", _span(report)),
        ("Job", code(job.path)),
    ]
    out.append("| | |")
    out.append("|---|---|")
    out.extend(f"| {k} | {cell} |" for k, cell in facts)
    out.append("")
    ff = v.first_failure
    if ff is not None and ff.text:
        out.append(f"First failure, {code(view.where_text(ff.file, ff.line))}:")
        out.append("")
        out.extend(fence([view.clip(ff.text, 2000)]))
        out.append("")

    ordered = view.ordered_findings(report)
    if ordered:
        out.append("### Findings")
        out.append("")
        for i, fv in enumerate(ordered[:TOP_FINDINGS], 1):
            out.extend(_finding(i, fv.finding, fv.children))
        rest = ordered[TOP_FINDINGS:]
        if rest:
            titles = "; ".join(f"{text(fv.finding.title)} ({fv.finding.severity})" for fv in rest)
            out.append(f"Also found: {titles}.")
            out.append("")

    if report.ranks:
        out.extend(_ranks(report))
    if report.stack_groups:
        out.append("### Stack groups (py-spy)")
        out.append("")
        for g in sorted(report.stack_groups, key=lambda g: (not g.minority, g.id)):
            tag = " — minority" if g.minority else ""
            out.append(
                f"- **Group {g.id}**{tag}: waits in {text(g.waits_in)}, "
                f"{len(g.ranks)} rank{'s' if len(g.ranks) != 1 else ''} ({text(view.ranks_text(g.ranks))}); "
                f"innermost frames: {', '.join(code(f) for f in g.frames[:3]) or '—'}"
            )
        out.append("")
    out.append(f"<sub>postmortem {text(report.tool_version)} · full details in the HTML or JSON report</sub>")
    return "\n".join(out).rstrip() + "\n"


def _first_failure(report: Report) -> str:
    ff = report.verdict.first_failure
    if ff is None:
        return "none found"
    parts = [f"rank {ff.rank}" if ff.rank is not None else "rank unknown"]
    if ff.step is not None:
        parts.append(f"step {ff.step}")
    if ff.ts is not None:
        parts.append(view.ts_text(ff.ts))
    return text(", ".join(parts)) + f" at {code(view.where_text(ff.file, ff.line))}"


def _world(report: Report) -> str:
    nodes = report.job.nodes or sorted({r.node for r in report.ranks if r.node})
    size = report.job.world_size or len(report.ranks) or None
    world = f"{size} ranks" if size else "unknown size"
    if nodes:
        world += f" on {len(nodes)} node{'s' if len(nodes) != 1 else ''} ({view.hostlist(nodes)})"
    return text(world)


def _span(report: Report) -> str:
    job = report.job
    if job.start is None:
        return "unknown"
    if job.end is None:
        return text(f"from {view.ts_text(job.start)}")
    return text(
        f"{view.ts_text(job.start)} to {view.ts_text(job.end)} "
        f"({view.duration_text((job.end - job.start).total_seconds())})"
    )


def _finding(index: int, f: Finding, children: list[Finding]) -> list[str]:
    out = [f"#### {index}. [{f.severity}] {text(f.title)}", ""]
    meta = [f"ranks {text(view.ranks_text(f.ranks))}", f"role {f.role}", f"rule {code(f.rule)}"]
    if f.first_ts is not None:
        meta.append(f"first {text(view.ts_text(f.first_ts))}")
    if f.count:
        meta.append(f"seen {f.count}×")
    out.append(" · ".join(meta))
    out.append("")
    if f.message and f.message != f.title:
        out.extend([code(f.message), ""])
    sections = view.prose(f.explanation)
    if sections:  # the lead section only: the ticket needs what it means, the HTML has the rest
        for para in sections[0].paragraphs:
            out.extend([_paragraph(para, start=True), ""])
    fix = [p for s in view.prose(f.fix) for p in s.paragraphs]
    for i, para in enumerate(fix):
        out.extend([("**Fix:** " if i == 0 else "") + _paragraph(para, start=i > 0), ""])
    if f.evidence:
        shown = f.evidence[: view.EVIDENCE_SHOWN]
        label = f"Evidence ({len(shown)} of {len(f.evidence)} line{'s' if len(f.evidence) != 1 else ''})"
        out.extend(["<details>", f"<summary>{label}</summary>", ""])
        for ev in shown:
            out.extend(_evidence(ev))
        out.extend(["</details>", ""])
    if f.references:
        out.extend(["References: " + ", ".join(code(r) for r in f.references), ""])
    if children:
        ranks: set[int] = set()
        for c in children:
            ranks.update(c.ranks)
        out.append(
            f"Consequences ({len(children)}, on ranks {text(view.ranks_text(sorted(ranks)))}): "
            + "; ".join(text(c.title) for c in children)
        )
        out.append("")
    return out


def _paragraph(para: view.Paragraph, *, start: bool = False) -> str:
    """One prose paragraph: code spans as code, the rest escaped; items as list items."""
    body = "".join(code(t) if is_code else text(t) for is_code, t in para.spans)
    if para.item:
        return "- " + body
    if start and para.spans and not para.spans[0][0]:
        body = text(para.spans[0][1], paragraph=True) + "".join(
            code(t) if is_code else text(t) for is_code, t in para.spans[1:]
        )
    return body


def _evidence(ev: Evidence) -> list[str]:
    where = view.where_text(ev.file, ev.line) + (f" (rank {ev.rank})" if ev.rank is not None else "")
    lines = []
    for lv in view.evidence_lines(ev):
        marker = ">" if lv.hit else " "
        lines.append(f"{marker}{lv.number:>6} | {lv.before}{lv.match}{lv.after}")
    return [code(where), "", *fence(lines), ""]


def _ranks(report: Report) -> list[str]:
    groups = view.rank_groups(report.ranks)
    majority = view.majority_last_step(report.ranks)
    culprits = set(report.verdict.culprit_ranks)
    out = ["### Ranks", ""]
    if majority is not None:
        out.extend([f"Most ranks stopped at step {majority}.", ""])
    out.append("| Ranks | Nodes | Last step | State | Exit code | Stack group | Silent for |")
    out.append("|---|---|---|---|---|---|---|")
    ordered = view.odd_first(groups, culprits, majority)
    for g in ordered[:MAX_RANK_GROUPS]:
        ranks = text(g.ranks_text)
        if culprits.intersection(g.ranks):
            ranks = f"**{ranks}**"
        out.append(
            f"| {ranks} | {text(g.nodes_text)} | {g.last_step if g.last_step is not None else '—'} | {text(g.state)} "
            f"| {text(view.exit_text(g.exit_code))} | {g.stack_group if g.stack_group is not None else '—'} "
            f"| {view.duration_text(g.silent_s_max)} |"
        )
    if len(groups) > MAX_RANK_GROUPS:
        out.append(f"| … {len(groups) - MAX_RANK_GROUPS} more groups | | | | | | |")
    out.append("")
    return out


def text(value: str, *, paragraph: bool = False) -> str:
    """Plain text made inert: Markdown and HTML punctuation escaped, newlines kept as line breaks.

    ``paragraph`` says the text starts a block, where a leading '#', '>', '-' or '1.' also needs escaping.
    """
    escaped = _MD_SPECIAL.sub(r"\\\1", value.replace("&", "&amp;"))
    if not paragraph:
        return escaped.replace("\r", "").replace("\n", "<br>")
    # a leading '#', '>', '-', '1.' would turn the paragraph into a heading, quote or list
    escaped = _BLOCK_START.sub(
        lambda m: m.group(1) + (m.group(2) + "\\" if m.group(2)[0].isdigit() else "\\" + m.group(2)), escaped
    )
    return escaped.replace("\r", "").replace("\n", "<br>")


def code(value: str) -> str:
    """An inline code span that survives backticks inside ``value`` (and newlines, as spaces)."""
    value = value.replace("\r", "").replace("\n", " ")
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or not value.strip() else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def fence(lines: list[str], lang: str = "text") -> list[str]:
    """A fenced code block longer than any backtick run in ``lines``."""
    longest = max((len(run) for line in lines for run in re.findall(r"`{3,}", line)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [f"{ticks}{lang}", *(line.replace("\r", "") for line in lines), ticks]
