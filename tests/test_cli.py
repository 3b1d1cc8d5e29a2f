"""The CLI is a thin layer: exit codes, one-line errors, help on every command."""

from __future__ import annotations

import json
import os
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


def _allocator_setting(code: str, env: dict[str, str]) -> str:
    script = f"{code}; import os; print(os.environ.get('_RJEM_MALLOC_CONF'))"
    clean = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env={**clean, **env}, check=True)
    return result.stdout.strip()


def test_allocator_returns_freed_pages_unless_told_otherwise():
    # set before polars loads (postmortem first; polars appends it to its own defaults, and the
    # last setting wins), never over the user's setting, and not when polars was loaded already
    assert _allocator_setting("import postmortem.timeline", {}).endswith(",muzzy_decay_ms:0")
    assert _allocator_setting("import postmortem", {"_RJEM_MALLOC_CONF": "narenas:2"}) == "narenas:2"
    assert "muzzy_decay_ms:0" not in _allocator_setting("import polars; import postmortem", {})


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


SEED000 = REPO / "sample_logs" / "reconstructed" / "seed000_single_node" / "job"


def test_analyze_prints_the_verdict_and_writes_reports(tmp_path):
    result = run("analyze", str(SEED000), "-o", str(tmp_path / "report.html"), "--json", str(tmp_path / "r.json"), "--format", "text")
    assert result.returncode == 0, result.stderr
    assert "HUNG" in result.stdout and "data_exhaustion_desync" in result.stdout
    html = (tmp_path / "report.html").read_text()
    assert "data_exhaustion_desync" in html and "<svg" in html
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"]["culprit_ranks"] == [2, 5, 6]


def test_analyze_json_and_markdown_on_stdout():
    as_json = run("analyze", str(SEED000), "--format", "json")
    assert json.loads(as_json.stdout)["verdict"]["status"] == "hung"
    as_md = run("analyze", str(SEED000), "--format", "md")
    assert as_md.returncode == 0 and as_md.stdout.lstrip().startswith("#") and "data_exhaustion_desync" in as_md.stdout


def test_fail_on_sets_the_exit_code():
    assert run("analyze", str(SEED000), "--fail-on", "info", "--format", "json").returncode == 1
    healthy = REPO / "sample_logs" / "real" / "healthy" / "job"
    assert run("analyze", str(healthy), "--fail-on", "error", "--format", "json").returncode == 0


def test_rules_commands(tmp_path):
    listed = run("rules", "list")
    assert listed.returncode == 0 and "nccl-watchdog-timeout" in listed.stdout
    shown = run("rules", "show", "nccl-watchdog-timeout")
    assert shown.returncode == 0 and "## What it means" in shown.stdout and "Example fires-1" in shown.stdout
    tested = run("rules", "test")
    assert tested.returncode == 0 and tested.stdout.strip().endswith("0 failed")
    broken = tmp_path / "mine"
    broken.mkdir()
    (broken / "my-rule.toml").write_text(
        'id = "my-rule"\ntitle = "t"\ncategory = "unknown_failure"\nseverity = "fatal"\nrole = "root"\n'
        'explanation = "x"\nfix = "y"\nreferences = ["z"]\n[match]\nany = ["boom"]\n'
    )
    bad = run("rules", "test", str(broken))
    assert bad.returncode == 2 and "my-rule.toml" in bad.stderr and "severity" in bad.stderr
