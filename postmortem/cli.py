"""The ``postmortem`` command: a thin typer layer over :mod:`postmortem.api`.

Exit codes: 0 ok, 1 findings at or above ``--fail-on``, 2 usage or input error.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console

from postmortem import __version__, api
from postmortem.diff_cli import diff_command
from postmortem.errors import PostmortemError
from postmortem.scan.cli import scan_command

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2

app = typer.Typer(
    name="postmortem",
    help="Explain why a distributed training job crashed or hung: what happened, on which rank, first, and what to change.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
rules_app = typer.Typer(help="List, explain and test the failure signatures (rules).", no_args_is_help=True)
app.add_typer(rules_app, name="rules")
app.command("diff")(diff_command)
app.command("scan")(scan_command)


class Format(str, Enum):
    text = "text"
    json = "json"
    md = "md"
    html = "html"


class Severity(str, Enum):
    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"


RulesOption = typer.Option(
    None, "--rules", help="Extra rule directory (repeatable); overrides built-in rules by id. Also $POSTMORTEM_RULES."
)


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"postmortem {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Explain why a distributed training job crashed or hung."""


@app.command()
def analyze(
    job: Path = typer.Argument(..., help="The job's log directory (or a single log file)."),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write the report here (.html, .md or .json by extension)."),
    fmt: Format | None = typer.Option(None, "--format", "-f", help="Print the report to stdout as text (default), json or md."),
    json_file: Path | None = typer.Option(None, "--json", help="Also write the JSON report to this file."),
    rules: list[Path] | None = RulesOption,
    fail_on: Severity | None = typer.Option(None, "--fail-on", help="Exit 1 when a finding of this severity or worse is present."),
    redact: bool = typer.Option(False, "--redact", help="Replace hosts, IPs, user names and e-mails with stable placeholders."),
    keep_all: bool = typer.Option(False, "--keep-all", help="Keep every log line in the timeline, not only notable ones."),
    inventory: bool = typer.Option(False, "--inventory", help="Only say what was found: files, nodes, ranks, progress."),
) -> None:
    """Read every log a job left behind and say what happened, on which rank, first, and what to change."""
    if inventory:
        api.print_inventory(api.load_timeline(job, keep_all=keep_all), _console())
        return
    analysis = api.analyze(job, rules_dirs=rules or (), keep_all=keep_all)
    report, frame = analysis.report, analysis.timeline.frame
    if redact:
        from postmortem.render import redact as redact_report

        report, frame = redact_report(report, frame)
    if output is not None:
        api.write_report(report, frame, output)
    if json_file is not None:
        api.write_report(report, frame, json_file, fmt="json")
    if fmt is Format.json:
        typer.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    elif fmt is Format.md:
        from postmortem.render import render_markdown

        typer.echo(render_markdown(report))
    elif fmt is Format.html:
        raise typer.BadParameter("HTML goes to a file: use -o report.html", param_hint="--format")
    else:  # the terminal summary, also when a report file is written
        from postmortem.render import render_terminal

        render_terminal(report, _console(), written=output if output and output.suffix.lower() in (".html", ".htm") else None)
    if fail_on is not None and api.worst_severity_at_least(report, fail_on.value):
        raise typer.Exit(EXIT_FINDINGS)


@app.command()
def timeline(
    job: Path = typer.Argument(..., help="The job's log directory (or a single log file)."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write: .parquet, .csv or .jsonl (by extension)."),
    keep_all: bool = typer.Option(True, "--keep-all/--notable", help="Export every line, or only notable ones."),
) -> None:
    """Export the job's timeline (one row per event) for queries with polars or DuckDB."""
    built = api.load_timeline(job, keep_all=keep_all)
    rows = api.export_timeline(built, output)
    typer.echo(f"wrote {rows} events to {output}")


@rules_app.command("list")
def rules_list(
    rules: list[Path] | None = RulesOption,
    source: str | None = typer.Option(
        None, "--source", help="Only rules whose source (emitting code or thread) contains this text."
    ),
    status: str | None = typer.Option(None, "--status", help="Only rules of this status: stable or experimental."),
) -> None:
    """List every rule: id, category, severity, status, title."""
    listed = sorted(api.rules(rules or ()), key=lambda r: r.id)
    if source is not None:
        listed = [r for r in listed if any(source.lower() in s.lower() for s in r.sources)]
    if status is not None:
        listed = [r for r in listed if r.status == status]
    width = max((len(r.id) for r in listed), default=2)
    typer.echo(f"{'id':<{width}}  {'category':<22}  {'severity':<8}  {'status':<12}  title")
    for rule in listed:
        typer.echo(f"{rule.id:<{width}}  {rule.category:<22}  {rule.severity:<8}  {rule.status:<12}  {rule.title}")


@rules_app.command("show")
def rules_show(
    rule_id: str = typer.Argument(..., help="The rule id, e.g. nccl-watchdog-timeout."),
    rules: list[Path] | None = RulesOption,
) -> None:
    """Explain one rule: what it means, the fix, references and its examples."""
    rule = api.rules(rules or ()).get(rule_id)
    out = Console(highlight=False, soft_wrap=True)
    out.print(f"[bold]{rule.id}[/bold]: {rule.title}")
    out.print(f"category {rule.category}, severity {rule.severity}, role {rule.role}, status {rule.status}; {rule.label}", markup=False)
    for where in rule.sources:
        out.print(f"source: {where}", markup=False)
    out.print("[bold]Signature[/bold]")
    for line in _signature(rule):
        out.print(f"  {line}", markup=False)
    out.print(rule.explanation.strip(), markup=False)
    out.print("[bold]Fix[/bold]")
    out.print(rule.fix.strip(), markup=False)
    out.print("[bold]References[/bold]")
    for ref in rule.references:
        out.print(f"  {ref}", markup=False)
    for example in rule.examples:
        out.print(f"[bold]Example {example.name}[/bold] ({'fires' if example.fires else 'must not fire'})")
        for log in example.logs:
            out.print(f"  {log.file}:", markup=False)
            out.print(log.log.rstrip(), markup=False)


def _signature(rule) -> list[str]:
    check = getattr(rule, "check", None)
    if check is not None:  # a [config] rule: conditions over launch-configuration facts
        return check.describe()
    lines = [f"scope: {rule.match.scope}"]
    for kind in ("any", "all", "not"):
        lines += [f"{kind}: {p}" for p in getattr(rule.match, kind if kind != "not" else "not_", ()) or ()]
    if rule.aggregate is not None:
        lines.append(f"aggregate: {rule.aggregate.condition} by {rule.aggregate.by}")
    return lines


@rules_app.command("test")
def rules_test(
    directory: Path | None = typer.Argument(None, help="Test only the rules in this directory (default: all rules)."),
) -> None:
    """Run every rule's inline examples; exit 1 when one fires wrongly or stays quiet wrongly."""
    results = api.test_rules(directory)
    failed = [r for r in results if not r.ok]
    for r in failed:
        typer.echo(f"FAIL {r.id}: expected {'a finding' if r.expected else 'no finding'}; {r.detail or 'got the opposite'}")
    typer.echo(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    if failed:
        raise typer.Exit(EXIT_FINDINGS)


def main() -> None:
    """Console entry point: one error boundary, one line per user error."""
    from typer._click.exceptions import ClickException

    try:
        # without standalone mode click returns the exit code of typer.Exit instead of exiting
        code = app(standalone_mode=False)
    except PostmortemError as exc:
        typer.echo(f"postmortem: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("Aborted.", err=True)
        sys.exit(EXIT_ERROR)
    except ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
