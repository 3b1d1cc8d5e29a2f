"""Presentation helpers shared by the HTML, Markdown and terminal renderers.

Everything here is a pure function of the :class:`~postmortem.model.Report`: the order findings
are shown in, how ranks collapse into groups, how an evidence line splits around its match.
Renderers format these views; they never re-run analysis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from postmortem.analyzers._common import signal_name
from postmortem.model import SEVERITY_ORDER, Evidence, Finding, RankState, Report
from postmortem.ranges import format_ranks

#: Show at most this many evidence lines per finding up front; the rest go behind a toggle.
EVIDENCE_SHOWN = 3
#: Never render more than this many evidence lines per finding (the JSON has them all).
EVIDENCE_MAX = 25
#: A log line longer than this is cut in the report (one line of a tensor dump can be megabytes).
LINE_MAX_CHARS = 4000

_ROLE_ORDER = {"primary": 0, "context": 1, "secondary": 2}


@dataclass
class FindingView:
    """A top-level finding and the secondary findings it caused (shown collapsed under it)."""

    finding: Finding
    children: list[Finding] = field(default_factory=list)


@dataclass
class RankGroup:
    """Ranks that share every fact the per-rank table shows except their node and time."""

    ranks: list[int]
    nodes: list[str]
    last_step: int | None
    state: str
    exit_code: int | None
    stack_group: int | None
    last_ts_min: datetime | None
    last_ts_max: datetime | None
    silent_s_max: float | None

    @property
    def ranks_text(self) -> str:
        return format_ranks(self.ranks)

    @property
    def nodes_text(self) -> str:
        return nodes_text(self.nodes)


@dataclass
class LineView:
    """One line of evidence context, split around the highlighted match."""

    number: int
    before: str
    match: str
    after: str
    hit: bool  # the evidence line itself, as opposed to its context


def ordered_findings(report: Report) -> list[FindingView]:
    """Findings in reading order: primary, then context, each with its secondary echoes nested.

    A secondary finding is nested under the root of its ``caused_by`` chain; one whose cause is
    missing from the report stays at the top level so nothing disappears.
    """
    by_id = {f.id: f for f in report.findings}

    def root_of(f: Finding) -> Finding | None:
        seen: set[str] = set()
        cur = f
        while cur.role == "secondary" and cur.caused_by and cur.caused_by not in seen:
            seen.add(cur.id)
            parent = by_id.get(cur.caused_by)
            if parent is None:
                return None
            cur = parent
        return cur if cur is not f and cur.role != "secondary" else None

    top: list[Finding] = []
    children: dict[str, list[Finding]] = {}
    for f in report.findings:
        root = root_of(f) if f.role == "secondary" else None
        if root is None:
            top.append(f)
        else:
            children.setdefault(root.id, []).append(f)
    top.sort(key=lambda f: (_ROLE_ORDER.get(f.role, 3), -SEVERITY_ORDER.get(f.severity, 0)))
    return [FindingView(f, children.get(f.id, [])) for f in top]


def rank_groups(ranks: list[RankState]) -> list[RankGroup]:
    """Collapse ranks with the same last step, state, exit code and stack group into one row each.

    Groups are ordered by their lowest rank, so a 1,024-rank job with one odd rank reads as
    two or three rows instead of a thousand.
    """
    groups: dict[tuple[object, ...], list[RankState]] = {}
    for r in sorted(ranks, key=lambda r: r.rank):
        groups.setdefault((r.last_step, r.state, r.exit_code, r.stack_group), []).append(r)
    out = []
    for (last_step, state, exit_code, stack_group), members in groups.items():
        times = [m.last_ts for m in members if m.last_ts is not None]
        silent = [m.silent_s for m in members if m.silent_s is not None]
        out.append(
            RankGroup(
                ranks=[m.rank for m in members],
                nodes=sorted({m.node for m in members if m.node}),
                last_step=last_step,  # type: ignore[arg-type]
                state=state,  # type: ignore[arg-type]
                exit_code=exit_code,  # type: ignore[arg-type]
                stack_group=stack_group,  # type: ignore[arg-type]
                last_ts_min=min(times) if times else None,
                last_ts_max=max(times) if times else None,
                silent_s_max=max(silent) if silent else None,
            )
        )
    out.sort(key=lambda g: g.ranks[0])
    return out


def odd_first(groups: list[RankGroup], culprits: set[int], majority: int | None) -> list[RankGroup]:
    """Rank groups with the culprits and the ranks behind the majority first, then by lowest rank.

    Readers look for the odd ranks; when a table is cut to its first rows they must survive.
    """

    def odd(g: RankGroup) -> bool:
        behind = majority is not None and g.last_step is not None and g.last_step < majority
        return behind or bool(culprits.intersection(g.ranks))

    return sorted(groups, key=lambda g: (not odd(g), g.ranks[0]))


def evidence_lines(ev: Evidence) -> list[LineView]:
    """The evidence line with its context, in file order, the match split out for highlighting.

    ``Evidence.context`` may or may not contain the evidence line itself; either way it appears
    exactly once, with ``Evidence.text`` (the text the span refers to).
    """
    rows = [(n, t) for n, t in ev.context if n != ev.line]
    rows.append((ev.line, ev.text))
    rows.sort(key=lambda nt: nt[0])
    out = []
    for number, text in rows:
        if number == ev.line:
            before, match, after = split_span(text, ev.span)
            out.append(LineView(number, before, match, after, hit=True))
        else:
            out.append(LineView(number, clip(text), "", "", hit=False))
    return out


def split_span(text: str, span: tuple[int, int] | None) -> tuple[str, str, str]:
    """``text`` cut into (before, match, after) by ``span``; a bad or missing span highlights nothing."""
    if span is not None:
        start, end = max(0, span[0]), min(len(text), span[1])
        if start < end:
            return clip(text[:start]), text[start:end][:LINE_MAX_CHARS], clip(text[end:])
    return clip(text), "", ""


def clip(text: str, limit: int = LINE_MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … [{len(text) - limit} more characters]"


def nodes_text(nodes: list[str], limit: int = 3) -> str:
    """A short list of node names: all of them when few, else folded ranges or the first ones, and a count."""
    if not nodes:
        return "—"
    if len(nodes) <= limit:
        return ", ".join(nodes)
    folded = hostlist(nodes)
    if len(folded) <= 48:
        return f"{folded} ({len(nodes)} nodes)"
    return f"{', '.join(nodes[:2])} … ({len(nodes)} nodes)"


def exit_text(code: int | None) -> str:
    """An exit code with its signal name when it is negative (-9 → '-9 (SIGKILL)')."""
    if code is None:
        return "—"
    name = signal_name(code) if code < 0 else None
    return f"{code} ({name})" if name else str(code)


def duration_text(seconds: float | None) -> str:
    """A duration for people: '45s', '31m 20s', '2h 05m', '3d 4h'."""
    if seconds is None:
        return "—"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h {m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d {h}h"


def ts_text(ts: datetime | None, *, date: bool = True) -> str:
    """A timestamp as printed in the report: ISO date and time to the millisecond, no 'T'."""
    if ts is None:
        return "—"
    text = ts.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    if ts.microsecond:
        text += f".{ts.microsecond // 1000:03d}"
    return text


def ranks_text(ranks: list[int]) -> str:
    """Ranks as ranges ('0-3, 5'), or a dash for none."""
    return format_ranks(ranks) if ranks else "—"


def where_text(file: str, line: int | None) -> str:
    """'file:line' as editors and terminals understand it."""
    return f"{file}:{line}" if line else file


def majority_last_step(ranks: list[RankState]) -> int | None:
    """The last step most ranks reached (ties go to the higher step)."""
    counts: dict[int, int] = {}
    for r in ranks:
        if r.last_step is not None:
            counts[r.last_step] = counts.get(r.last_step, 0) + 1
    if not counts:
        return None
    return max(counts, key=lambda s: (counts[s], s))


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def hostlist(nodes: list[str]) -> str:
    """Node names with numbered runs folded, as Slurm writes them: 'gpu-node-[000-127], login-a'."""
    by_prefix: dict[str, list[str]] = {}
    plain: list[str] = []
    for name in sorted(set(nodes)):
        m = _NUMBERED.match(name)
        if m:
            by_prefix.setdefault(m.group(1), []).append(m.group(2))
        else:
            plain.append(name)
    runs: dict[tuple[str, int], list[int]] = {}
    for prefix, digits in by_prefix.items():
        # zero-padded names fold only with names of the same width; unpadded ones all fold together
        padded = any(d.startswith("0") and len(d) > 1 for d in digits)
        for d in digits:
            runs.setdefault((prefix, len(d) if padded else 0), []).append(int(d))
    parts = []
    for (prefix, width), numbers in runs.items():
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        spans = []
        for text in format_ranks(numbers).split(", "):
            lo, _, hi = text.partition("-")
            spans.append(f"{int(lo):0{width}d}" + (f"-{int(hi):0{width}d}" if hi else ""))
        parts.append(f"{prefix}[{','.join(spans)}]")
    return ", ".join(sorted(parts + plain))


@dataclass
class Paragraph:
    """A paragraph of rule or analyzer prose: text spans, each plain or inline code."""

    spans: list[tuple[bool, str]]  # (is_code, text)
    item: bool = False  # a bullet-list item


@dataclass
class Section:
    """A '## Heading' of rule prose and the paragraphs under it (heading None before any)."""

    heading: str | None
    paragraphs: list[Paragraph] = field(default_factory=list)


_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*$")
_BULLET = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
_CODE = re.compile(r"(`[^`\n]+`)")


def prose(text: str) -> list[Section]:
    """Explanations and fixes as written in rule files (light Markdown) split into sections.

    '## Heading' lines start sections, blank lines end paragraphs, hard-wrapped lines are joined,
    bullet lines are items, and `code` spans are kept apart. Everything stays plain text: the
    renderers escape it, so a rule or a log line quoted in it cannot inject markup.
    """
    sections = [Section(None)]
    lines: list[str] = []
    item = False

    def flush() -> None:
        nonlocal item
        if lines:
            joined = " ".join(line.strip() for line in lines)
            sections[-1].paragraphs.append(Paragraph(inline_code(joined), item))
            lines.clear()
        item = False

    for raw in text.splitlines():
        line = raw.strip()
        heading = _HEADING.match(line)
        if heading:
            flush()
            sections.append(Section(heading.group(1)))
        elif not line:
            flush()
        elif _BULLET.match(line):
            flush()
            item = True
            lines.append(_BULLET.sub("", line, count=1))
        else:
            lines.append(line)
    flush()
    return [s for s in sections if s.heading or s.paragraphs]


def inline_code(text: str) -> list[tuple[bool, str]]:
    """``text`` split into (is_code, part) around `backtick` spans."""
    out = []
    for part in _CODE.split(text):
        if not part:
            continue
        if len(part) > 2 and part.startswith("`") and part.endswith("`"):
            out.append((True, part[1:-1]))
        else:
            out.append((False, part))
    return out


def prose_text(text: str) -> str:
    """Rule prose flattened to one line of plain text (hard wraps joined, `code` kept as written)."""
    parts = []
    for section in prose(text):
        for para in section.paragraphs:
            body = "".join(f"`{t}`" if is_code else t for is_code, t in para.spans)
            parts.append(("• " if para.item else "") + body)
    return " ".join(parts)
