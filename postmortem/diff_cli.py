"""``postmortem diff RUN_A RUN_B``: the typer command (registered by ``postmortem/cli.py``).

A thin layer: analyze both jobs with the same rules, compare them (:mod:`postmortem.diff`), print
or write the comparison. Exit codes follow ``postmortem analyze``: 0 ok, 2 usage or input error.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console


class DiffFormat(str, Enum):
    text = "text"
    json = "json"
    md = "md"
    html = "html"


def diff_command(
    run_a: Path = typer.Argument(..., help="The first run's log directory, usually the failing one."),
    run_b: Path = typer.Argument(..., help="The second run's log directory, usually the working one."),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write the comparison here (.html, .md or .json by extension)."),
    fmt: DiffFormat | None = typer.Option(None, "--format", "-f", help="Print to stdout as text (default), json or md."),
    rules: list[Path] | None = typer.Option(
        None, "--rules", help="Extra rule directory (repeatable); overrides built-in rules by id. Also $POSTMORTEM_RULES."
    ),
    keep_all: bool = typer.Option(False, "--keep-all", help="Keep every log line in the timelines, not only notable ones."),
) -> None:
    """Put two runs side by side: configuration differences with their risks, progress by step,
    the first event one run has and the other does not, and findings in one run only."""
    from postmortem import api
    from postmortem.diff import diff_runs, render_markdown, render_terminal, write_diff

    if fmt is DiffFormat.html:
        raise typer.BadParameter("HTML goes to a file: use -o diff.html", param_hint="--format")
    ruleset = api.rules(rules or ())
    a = api.analyze(run_a, rules=ruleset, keep_all=keep_all)
    b = api.analyze(run_b, rules=ruleset, keep_all=keep_all)
    result = diff_runs(a, b, rules=ruleset)
    if output is not None:
        write_diff(result, output)
        typer.echo(f"wrote {output}", err=True)
    if fmt is DiffFormat.json:
        typer.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    elif fmt is DiffFormat.md:
        typer.echo(render_markdown(result), nl=False)
    elif output is None or fmt is DiffFormat.text:
        render_terminal(result, Console(highlight=False, soft_wrap=False))


__all__ = ["DiffFormat", "diff_command"]
