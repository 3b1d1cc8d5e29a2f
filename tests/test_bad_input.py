"""Bad input is normal input: never a traceback, always a reason."""

from __future__ import annotations

import contextlib
import gzip
import os
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem.api import load_timeline
from postmortem.errors import InputError
from postmortem.parsers.structured import parse_elastic_error, parse_pyspy_json
from postmortem.reading import text_lines
from postmortem.schema import TIMELINE_COLUMNS
from postmortem.timeline import timeline_from_text

REAL_LINES = [
    "[default3]:[E527 19:52:42.485388340 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated with exception: x",
    "[rank1]: Traceback (most recent call last):",
    "[rank1]:   File \"a.py\", line 1, in <module>",
    "[rank1]: KeyError: 'x'",
    "  exitcode  : -9 (pid: 12)",
    "[0]:",
    "Train:   3%|▎         | 12/400 [00:36<19:24,  3.00s/it]",
    "        Solution: check HCCL_CONNECT_TIMEOUT",
    "Process 12: python x.py",
    'Thread 12 (idle): "MainThread"',
    "    barrier (torch/distributed/distributed_c10d.py:4888)",
    "kolyoz1:27255:27906 [0] NCCL INFO NCCL version 2.14.3+cuda11.7",
    "0: [rank0]:step 3",
    "",
    "\x1b[31m[ERROR]\x1b[0m",
]


def test_binary_truncated_gzip_gbk_crlf_redraws_empty_and_unreadable(write_job, tmp_path):
    redraws = "\r".join(f"Train: {i}%|#| {i}/400 [00:0{i % 10}<01:00, 1.0it/s]" for i in range(1, 40000)) + "\n"
    good = gzip.compress(("2024-01-01 10:00:00,000 INFO step 1 loss=1.0\n" * 2000).encode())
    job = write_job({
        "binary.log": os.urandom(4096) + b"\x00" * 200,
        "truncated.log.gz": good[: len(good) // 2],
        "gbk.log": "2024-01-01 10:00:00,000 ERROR 数据加载失败 rank 3\n".encode("gbk"),
        "bad_utf8.log": b"2024-01-01 10:00:00,000 INFO ok \xff\xfe broken\n",
        "crlf.log": b"2024-01-01 10:00:00,000 INFO step 2 loss=1.5\r\n2024-01-01 10:00:01,000 INFO step 3 loss=1.4\r\n",
        "tqdm.log": redraws,
        "empty.log": "",
        "locked.log": "2024-01-01 10:00:00,000 INFO secret\n",
        "attempt_0/0/error.json": '{"message": {"message": "KeyError: x", "extraInfo": {"py_callstack": "Traceback',
    })
    locked = job / "locked.log"
    locked.chmod(0)
    try:
        timeline = load_timeline(job)
    finally:
        locked.chmod(0o644)
    frame = timeline.frame
    skipped = {s.rel: s.reason for s in timeline.inventory.skipped}
    notes = {n.rel: n.reason for n in timeline.notes}
    assert skipped["binary.log"].startswith("binary file")
    assert skipped["empty.log"] == "empty file"
    if os.geteuid() != 0:  # root reads anything
        assert skipped["locked.log"].startswith("cannot")
    assert notes["truncated.log.gz"].startswith("truncated gzip archive")
    assert frame.filter(pl.col("file") == "truncated.log.gz").height > 100
    assert "GB18030" in notes["gbk.log"]
    assert "数据加载失败" in frame.filter(pl.col("file") == "gbk.log")["message"][0]
    assert "replaced" in notes["bad_utf8.log"]
    crlf = frame.filter(pl.col("file") == "crlf.log")
    assert crlf["step"].to_list() == [2, 3] and not any("\r" in m for m in crlf["message"].to_list())
    bar = frame.filter(pl.col("file") == "tqdm.log").row(0, named=True)
    assert bar["step"] == 39999 and len(bar["message"]) < 200
    assert "not valid elastic_error" in notes["attempt_0/0/error.json"]


def test_missing_path_and_empty_dir_are_input_errors(tmp_path: Path):
    with pytest.raises(InputError, match="no such file"):
        load_timeline(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty"):
        load_timeline(tmp_path / "empty")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "a.bin").write_bytes(b"\x00" * 100)
    with pytest.raises(InputError, match="no readable log file"):
        load_timeline(tmp_path / "junk")


def test_symlink_loop_is_not_followed(write_job):
    job = write_job({"rank0.log": "step 1 loss=1\n"})
    (job / "loop").symlink_to(job, target_is_directory=True)
    (job / "dangling.log").symlink_to(job / "nowhere.log")
    timeline = load_timeline(job)
    assert [f.rel for f in timeline.inventory.files] == ["rank0.log"]


def test_job_directory_is_not_written(write_job):
    job = write_job({"rank0.log": "step 1 loss=1\n", "sub/rank1.log": "step 2 loss=1\n"})
    before = sorted((p.relative_to(job), p.stat().st_mtime_ns) for p in job.rglob("*"))
    load_timeline(job)
    assert sorted((p.relative_to(job), p.stat().st_mtime_ns) for p in job.rglob("*")) == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=3000))
def test_random_bytes_never_raise(data: bytes):
    text = data.decode("utf-8", errors="replace")
    for name in ("console.log", "attempt_0/1/stderr.log", "pyspy/rank2.txt", "plog-1_20240101000000000.log", "error.json"):
        frame = timeline_from_text(text, file=name)
        assert tuple(frame.columns) == TIMELINE_COLUMNS


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(REAL_LINES), max_size=40), st.sampled_from(["\n", "\r\n"]))
def test_random_mixes_of_real_lines_keep_line_numbers(lines: list[str], newline: str):
    text = newline.join(lines)
    frame = timeline_from_text(text, file="console.log")
    assert tuple(frame.columns) == TIMELINE_COLUMNS
    assert frame["line"].is_sorted()
    assert frame.height <= max(1, len(lines))


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=500))
def test_structured_parsers_reject_garbage_with_value_errors_only(text: str):
    for parser in (parse_pyspy_json, parse_elastic_error):
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            parser(text)


def test_megabyte_line_is_cut():
    frame = text_lines("x" * 3_000_000 + "\nshort\n")
    assert frame["raw"].str.len_chars().to_list() == [4096, 5]
