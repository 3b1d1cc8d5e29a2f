"""The CLI is a thin layer: exit codes, one-line errors, help on every command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import REPO


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "postmortem", *args], capture_output=True, text=True, cwd=cwd or REPO, timeout=300
    )


def test_version():
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith("postmortem ")


@pytest.mark.parametrize("command", [[], ["analyze"], ["timeline"]])
def test_help_on_every_command(command):
    result = run(*command, "--help")
    assert result.returncode == 0 and "Usage:" in result.stdout


def test_missing_path_is_one_line_error(tmp_path):
    result = run("analyze", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"postmortem: error: {tmp_path / 'nope'}: no such file or directory"]
    assert "Traceback" not in result.stderr


def test_empty_directory_is_one_line_error(tmp_path):
    result = run("analyze", str(tmp_path))
    assert result.returncode == 2 and "the directory is empty" in result.stderr and "Traceback" not in result.stderr


def test_timeline_export_formats(write_job, tmp_path):
    job = write_job({"rank0.log": "2024-01-01 10:00:00,000 INFO step 1 loss=1.0\n2024-01-01 10:00:05,000 INFO step 2 loss=0.9\n"})
    for suffix in (".parquet", ".csv", ".jsonl"):
        out = tmp_path / f"events{suffix}"
        result = run("timeline", str(job), "-o", str(out))
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"wrote 2 events to {out}"
    frame = pl.read_parquet(tmp_path / "events.parquet")
    assert frame["step"].to_list() == [1, 2] and frame["rank"].to_list() == [0, 0]
    bad = run("timeline", str(job), "-o", str(tmp_path / "events.xlsx"))
    assert bad.returncode == 2 and "unknown timeline format" in bad.stderr
