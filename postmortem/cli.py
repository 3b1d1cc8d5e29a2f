"""The ``postmortem`` command: a thin typer layer over :mod:`postmortem.api`.

Exit codes: 0 ok, 1 findings at or above ``--fail-on``, 2 usage or input error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from postmortem import __version__, api
from postmortem.errors import PostmortemError

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
    keep_all: bool = typer.Option(False, "--keep-all", help="Keep every log line in the timeline, not only notable ones."),
) -> None:
    """Read every log a job left behind and say what was found: files, nodes, ranks, progress."""
    timeline = api.load_timeline(job, keep_all=keep_all)
    api.print_inventory(timeline, Console(highlight=False, soft_wrap=True))


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


def main() -> None:
    """Console entry point: one error boundary, one line per user error."""
    try:
        app(standalone_mode=False)
    except PostmortemError as exc:
        typer.echo(f"postmortem: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("Aborted.", err=True)
        sys.exit(EXIT_ERROR)
    except Exception as exc:  # click usage errors come through here in non-standalone mode
        from typer._click.exceptions import ClickException

        if isinstance(exc, ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
