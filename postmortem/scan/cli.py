"""The ``postmortem scan`` command (registered by :mod:`postmortem.cli`: ``app.command("scan")(scan_command)``)."""

from __future__ import annotations

from pathlib import Path

import typer

from postmortem.scan import DEFAULT_TIMEOUT_S, scan


def scan_command(
    roots: list[Path] = typer.Argument(..., help="Directories that hold job directories (searched recursively)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output directory: runs.parquet, findings.parquet, index.html."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1, help="Parallel analyses (default: CPU count, or the Ray cluster's CPUs)."),
    reports: bool = typer.Option(False, "--reports", help="Also write an HTML report per job (reports/) and link it from the index."),
    pattern: str | None = typer.Option(None, "--pattern", help="Glob (relative to each root) naming the job directories, e.g. '*/job'; replaces the built-in detection."),
    force: bool = typer.Option(False, "--force", help="Re-analyze every job, ignoring the cache."),
    executor: str = typer.Option("local", "--executor", help="local (worker processes) or ray (tasks on a Ray cluster; pip install 'postmortem[ray]')."),
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (with --executor ray; default: RAY_ADDRESS or a local instance)."),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", min=0.001, help="Per-job time limit in seconds; a job past it becomes an error row."),
    rules: list[Path] = typer.Option([], "--rules", help="Extra rule directory (repeatable); same ids replace built-in rules."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
) -> None:
    """Analyze every job directory under ROOT... into one table of what failed, how, and how often."""
    if executor not in ("local", "ray"):
        raise typer.BadParameter(f"{executor!r}: use local or ray", param_hint="--executor")
    if address and executor != "ray":
        raise typer.BadParameter("--address goes with --executor ray", param_hint="--address")
    result = scan(
        roots, out, jobs=jobs, reports=reports, pattern=pattern, force=force,
        executor=executor,  # type: ignore[arg-type]
        address=address, timeout_s=timeout, rules_dirs=rules, progress="none" if quiet else "auto",
    )
    statuses = result.runs["status"].value_counts(sort=True).iter_rows() if result.jobs else []
    by_status = ", ".join(f"{n} {status}" for status, n in statuses)
    typer.echo(
        f"scanned {result.jobs} jobs in {result.elapsed_s:.1f} s "
        f"({result.analyzed} analyzed, {result.cached} unchanged){': ' + by_status if by_status else ''}"
    )
    if result.timed_out:
        typer.echo(f"{result.timed_out} jobs hit the {timeout:g} s time limit (see the error column)")
    if not result.jobs:
        typer.echo("no job directory found (use --pattern to name them)", err=True)
    typer.echo(f"wrote {result.runs_path}, {result.findings_path}, {result.index_path}")
