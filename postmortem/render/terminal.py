"""The default terminal summary: what failed, where it started, what to do, in one screen.

Verdict and culprit ranks, the first failure with its line, the top findings with their fixes,
and a per-rank table whose rows are groups of identical ranks, so a 4,096-rank job stays short.
All log text goes into :class:`rich.text.Text` objects, never through console markup, so a line
containing ``[bold]`` or ``[/]`` prints as it is.
"""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from postmortem.model import Report
from postmortem.render import view

#: Findings printed in full (with fix); the rest are counted.
TOP_FINDINGS = 3
#: Rank groups printed; a world with more distinct groups gets a count of the rest.
MAX_RANK_ROWS = 12

_STATUS_STYLE = {
    "failed": "bold white on red",
    "hung": "bold black on yellow",
    "completed": "bold white on green",
}
_SEVERITY_STYLE = {"critical": "bold red", "error": "red", "warning": "yellow", "info": "dim"}


def render_terminal(report: Report, console: Console, written: Path | None = None) -> None:
    """Print the short summary of ``report`` to ``console``; ``written`` is the full report's file, if any."""
    console.print(_verdict(report))
    ordered = view.ordered_findings(report)
    if ordered:
        console.print(_findings(ordered))
    if report.ranks:
        console.print(_ranks(report))
    hidden = len(ordered) - TOP_FINDINGS
    tail = Text("Full report: ", style="dim")
    tail.append(str(written) if written else "postmortem analyze JOB -o report.html", style="dim bold")
    if hidden > 0:
        tail.append(f"  ({hidden} more finding{'s' if hidden != 1 else ''} there)", style="dim")
    console.print(tail)


def _verdict(report: Report) -> Panel:
    v = report.verdict
    head = Text()
    head.append(f" {v.status.upper()} ", style=_STATUS_STYLE.get(v.status, "bold reverse"))
    head.append("  ")
    head.append(v.category, style="bold")
    head.append(f"   confidence {v.confidence}", style="dim")
    lines: list[Text] = [head]
    if v.summary:
        lines.append(Text(v.summary))
    facts = Text()
    facts.append("Culprit ranks: ", style="dim")
    facts.append(view.ranks_text(v.culprit_ranks), style="bold red" if v.culprit_ranks else "")
    size = report.job.world_size or len(report.ranks)
    nodes = report.job.nodes or sorted({r.node for r in report.ranks if r.node})
    if size:
        facts.append(f"   World: {size} rank{'s' if size != 1 else ''}", style="dim")
        if nodes:
            facts.append(f" on {len(nodes)} node{'s' if len(nodes) != 1 else ''}", style="dim")
    lines.append(facts)
    ff = v.first_failure
    if ff is not None:
        first = Text()
        first.append("First failure: ", style="dim")
        first.append(f"rank {ff.rank}" if ff.rank is not None else "rank unknown", style="bold")
        if ff.step is not None:
            first.append(f", step {ff.step}")
        if ff.ts is not None:
            first.append(f", {view.ts_text(ff.ts)}")
        first.append("  ")
        first.append(view.where_text(ff.file, ff.line), style="cyan")
        lines.append(first)
        if ff.text:
            lines.append(Text("  " + view.clip(ff.text, 400), style="italic", overflow="fold"))
    return Panel(Group(*lines), title="postmortem", title_align="left", border_style=_border(v.status))


def _border(status: str) -> str:
    return {"failed": "red", "hung": "yellow", "completed": "green"}.get(status, "white")


def _findings(ordered: list[view.FindingView]) -> Group:
    rows: list[Text | Padding] = [Text("Findings", style="bold underline")]
    for i, fv in enumerate(ordered[:TOP_FINDINGS], 1):
        f = fv.finding
        line = Text(f"{i}. ")
        line.append(f"{f.severity.upper():10}", style=_SEVERITY_STYLE.get(f.severity, ""))
        line.append(f.title, style="bold")
        rows.append(line)
        meta = Text(f"ranks {view.ranks_text(f.ranks)}", style="dim")
        if f.role != "primary":
            meta.append(f" · {f.role}")
        rows.append(_indent(meta))
        if f.evidence:
            ev = f.evidence[0]
            where = Text(view.where_text(ev.file, ev.line), style="cyan")
            where.append("  ")
            where.append(view.clip(ev.text.strip(), 160), style="dim")
            rows.append(_indent(where))
        if f.fix:
            fix = Text("fix: ", style="green")
            fix.append(view.prose_text(f.fix))
            rows.append(_indent(fix))
        if fv.children:
            ranks: set[int] = set()
            for c in fv.children:
                ranks.update(c.ranks)
            rows.append(
                _indent(
                    Text(
                        f"+ {len(fv.children)} consequence{'s' if len(fv.children) != 1 else ''} "
                        f"on ranks {view.ranks_text(sorted(ranks))}",
                        style="dim",
                    )
                )
            )
    return Group(*rows, Text(""))


def _nodes(nodes: list[str]) -> str:
    if len(nodes) <= 2:
        return ", ".join(nodes) or "—"
    folded = view.hostlist(nodes)
    return folded if len(folded) <= 24 else f"{len(nodes)} nodes"


def _indent(text: Text) -> Padding:
    # wrapped lines stay under the finding they belong to
    return Padding(text, (0, 0, 0, 3))


def _ranks(report: Report) -> Table:
    groups = view.rank_groups(report.ranks)
    culprits = set(report.verdict.culprit_ranks)
    majority = view.majority_last_step(report.ranks)
    table = Table(
        title=f"Ranks ({len(report.ranks)} in {len(groups)} group{'s' if len(groups) != 1 else ''})",
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    widest = max(len(g.ranks_text) for g in groups)
    table.add_column("ranks", overflow="fold", min_width=min(widest, 32))
    table.add_column("nodes", overflow="ellipsis", no_wrap=True)
    table.add_column("last step", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("exit", no_wrap=True)
    table.add_column("stack", justify="right", no_wrap=True)
    table.add_column("silent", justify="right", no_wrap=True)
    ordered = view.odd_first(groups, culprits, majority)
    for g in ordered[:MAX_RANK_ROWS]:
        style = "red" if culprits.intersection(g.ranks) else ""
        table.add_row(
            Text(g.ranks_text, style=style),
            Text(_nodes(g.nodes)),
            Text(str(g.last_step) if g.last_step is not None else "—"),
            Text(g.state),
            Text(view.exit_text(g.exit_code)),
            Text(str(g.stack_group) if g.stack_group is not None else "—"),
            Text(view.duration_text(g.silent_s_max)),
        )
    if len(groups) > MAX_RANK_ROWS:
        table.add_row(Text(f"… {len(groups) - MAX_RANK_ROWS} more groups", style="dim"), *[Text("")] * 6)
    return table
