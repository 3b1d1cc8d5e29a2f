"""Parsers for the families that are not plain log lines: py-spy dumps (text and JSON) and
torchelastic ``error.json`` files. Each returns timeline-shaped rows for one file."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import polars as pl

from postmortem.reading import text_lines

_ANSI = r"\x1b\[[0-9;]*m"
_THREAD = r'^Thread (?P<tid>0[xX][0-9A-Fa-f]+|\d+)(?: \((?P<status>active\+gil|active|idle|gil)\))?(?:: "(?P<name>.*)")?$'
_FRAME = r"^    (?P<func>\S.*?) \((?P<where>[^()]*)\)$"


def parse_pyspy_text(text: str) -> pl.DataFrame:
    """py-spy ``dump`` text: one row per frame (kind ``stack``), one record per thread."""
    lines = text_lines(text).with_columns(pl.col("raw").str.replace_all(_ANSI, "").alias("message"))
    msg = pl.col("message")
    thread = msg.str.extract_groups(_THREAD)
    frame = msg.str.extract_groups(_FRAME)
    lines = lines.with_columns(
        msg.str.extract(r"^Process (\d+): ", 1).cast(pl.Int64, strict=False).alias("_proc_pid"),
        msg.str.starts_with("Process ").alias("_is_proc"),
        thread.alias("_t"),
        frame.alias("_f"),
    ).unnest("_t", "_f")
    is_thread = pl.col("tid").is_not_null()
    lines = lines.with_columns(
        pl.col("_proc_pid").forward_fill().alias("pid"),
        pl.when(is_thread).then(pl.col("line")).forward_fill().over(pl.col("_is_proc").cum_sum()).alias("_thread_line"),
        pl.when(is_thread).then(msg).forward_fill().over(pl.col("_is_proc").cum_sum()).alias("thread"),
    )
    in_stack = pl.col("func").is_not_null() & pl.col("_thread_line").is_not_null()
    depth = pl.int_range(pl.len()).over("_thread_line")
    frames = lines.filter(in_stack).with_columns(
        (pl.col("func") + " (" + pl.col("where") + ")").alias("frame"),
        depth.cast(pl.Int64).alias("frame_depth"),
        pl.col("_thread_line").alias("_rec_row"),
        pl.lit("stack").alias("kind"),
    )
    headers = lines.filter(is_thread | pl.col("_is_proc")).with_columns(
        pl.when(is_thread).then(pl.col("line")).alias("_rec_row"),
        pl.lit("stack").alias("kind"),
    )
    keep = ["line", "message", "pid", "thread", "frame", "frame_depth", "_rec_row", "kind"]
    return pl.concat([headers.select([*keep[:4], "_rec_row", "kind"]), frames.select(keep)], how="diagonal").sort("line")


def parse_pyspy_json(text: str) -> pl.DataFrame:
    """``py-spy dump --json``: a list of threads with ``active``/``owns_gil`` flags and frames."""
    threads = json.loads(text)
    if isinstance(threads, dict):
        threads = [threads]
    rows: list[dict[str, Any]] = []
    for index, thread in enumerate(threads, start=1):
        if not isinstance(thread, dict):
            continue
        status = "active+gil" if thread.get("owns_gil") else ("active" if thread.get("active") else "idle")
        name = thread.get("thread_name")
        header = f"Thread {thread.get('os_thread_id') or thread.get('thread_id')} ({status})" + (f': "{name}"' if name else "")
        pid = thread.get("pid")
        rows.append({"line": index, "message": header, "pid": pid, "thread": header, "_rec_row": index, "kind": "stack"})
        for depth, fr in enumerate(thread.get("frames") or []):
            where = fr.get("short_filename") or fr.get("filename") or fr.get("module") or "?"
            if fr.get("line"):
                where = f"{where}:{fr['line']}"
            text_frame = f"{fr.get('name', '?')} ({where})"
            rows.append({
                "line": index, "message": "    " + text_frame, "pid": pid, "thread": header, "frame": text_frame,
                "frame_depth": depth, "_rec_row": index, "kind": "stack",
            })
    return pl.DataFrame(rows, schema_overrides={"pid": pl.Int64, "frame_depth": pl.Int64, "_rec_row": pl.Int64})


def parse_elastic_error(text: str) -> pl.DataFrame:
    """A torchelastic ``error.json``: the exception, its timestamp, exit code and Python call stack."""
    doc = json.loads(text)
    message = doc.get("message") if isinstance(doc, dict) else None
    extra: dict[str, Any] = {}
    code = None
    if isinstance(message, dict):
        extra = message.get("extraInfo") or {}
        code = message.get("errorCode")
        message = message.get("message")
    stamp = extra.get("timestamp", doc.get("timestamp") if isinstance(doc, dict) else None)
    ts = None
    try:
        # epoch seconds (as a string in torch's writer); shown in UTC, the only zone we can know
        ts = datetime.fromtimestamp(int(stamp), tz=timezone.utc).replace(tzinfo=None) if stamp is not None else None
    except (TypeError, ValueError, OverflowError, OSError):
        ts = None
    text_msg = str(message) if message is not None else ""
    exc = text_msg.split(":", 1)[0].strip() if ":" in text_msg else None
    rows: list[dict[str, Any]] = [{
        "line": 1, "message": text_msg, "ts": ts, "kind": "error", "level": "ERROR",
        "exc_type": exc if exc and exc.replace(".", "").replace("_", "").isalnum() else None,
        "exit_code": code if isinstance(code, int) else None, "_rec_row": 1,
    }]
    callstack = extra.get("py_callstack")
    if isinstance(callstack, str):
        for n, line in enumerate(callstack.splitlines(), start=2):
            rows.append({"line": n, "message": line, "ts": ts, "kind": "error", "level": "ERROR", "_rec_row": 1})
    return pl.DataFrame(
        rows, schema_overrides={"ts": pl.Datetime("us"), "exit_code": pl.Int64, "exc_type": pl.String, "_rec_row": pl.Int64}
    )
