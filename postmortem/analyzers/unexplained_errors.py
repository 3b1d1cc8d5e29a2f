"""Errors no rule explains, classified by what they say: uncaught exceptions and late error lines.

## What it means
Every Python exception that no rule or earlier analyzer explained becomes a finding of its
own, so a KeyError on one rank is never lost among a thousand timeouts. Its category comes
from ``rules/_tables`` (:mod:`postmortem.knowledge`): a type that names a cause decides
(``OutOfMemoryError``, ``DistStoreError``, ``ModuleNotFoundError`` ...); any other exception is
read by its words — its message and those of the exceptions it was raised from
(``The above exception was the direct cause of ...``) — so a ``RuntimeError: CUDA error:
uncorrectable ECC error`` is an accelerator error; an exception whose words say nothing is a
``rank_exception``, a bug in the job's own code or data. Exceptions that report a failure
elsewhere (``ChildFailedError``, ``DistBackendError``, "Connection closed by peer") are echoes.

Error lines after the last training step that nothing explains are the floor under the
verdict: the last error block of the first rank that printed one is classified by its words,
so that a failure grep could name is never left ``unknown_failure``.

## What a match does not prove
Words are not causes: an error that mentions a timeout may be the echo of a crash elsewhere.
A finding classified by words alone says so (``fields.basis``) and yields to any rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from postmortem.analyzers import (
    clock_skew,
    collective_mismatch,
    collective_sequence,
    end_of_data,
    exit_codes,
    flight_recorder,
    hccl_ranktable,
    peer_reports,
    progress,
    stack_groups,
)
from postmortem.analyzers._common import CASCADE_PATTERN, make_finding, records_of
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.knowledge import DEFAULT_EXCEPTION_CATEGORY, Classification, exception_category, text_category
from postmortem.model import Evidence, Finding
from postmortem.ranges import plural_ranks

ID = "unexplained-errors"
TITLE = "Errors no rule explains, classified by what they say"
#: it explains what every other finding source left unexplained: all of them first
NEEDS: tuple[str, ...] = (
    progress.ID, exit_codes.ID, stack_groups.ID, clock_skew.ID, collective_sequence.ID, collective_mismatch.ID,
    hccl_ranktable.ID, peer_reports.ID, end_of_data.ID, flight_recorder.ID,
)

#: Exception types that only report a failure elsewhere (the launcher, the watchdog, a signal,
#: torch.multiprocessing.spawn wrapping a child's exception or exit).
ECHO_TYPES = re.compile(
    r"^(?:ChildFailedError|DistBackendError|SignalException|CalledProcessError|ProcessRaisedException|ProcessExitedException)$"
)
#: The line between an exception and the one raised from it.
_CHAINED = re.compile(r"The above exception was the direct cause|During handling of the above exception")
#: The header of a Python traceback.
_TRACEBACK = r"Traceback \(most recent call last\)"
#: Lines of a rank's last error block read for its words, and lines after its last error line.
BLOCK_LINES = 40
FOLLOWING_LINES = 10


@dataclass(frozen=True)
class Result(AnalyzerResult):
    pass


def run(ctx: AnalyzerContext) -> Result:
    """Findings for the exceptions and the late error lines that no finding so far explains."""
    tl = ctx.timeline
    prior = ctx.findings()
    covered = {(e.file, e.line) for f in prior for e in f.evidence}
    covered_records = records_of(tl, covered)
    # findings cite a few lines each; the same line on other ranks (digits aside) is explained too
    templates = {_template(e.text) for f in prior for e in f.evidence}
    findings = _exception_findings(tl, covered, covered_records, templates)
    explained = covered | {(e.file, e.line) for f in findings for e in f.evidence}
    templates |= {_template(e.text) for f in findings for e in f.evidence}
    late = _late_errors(tl, explained, records_of(tl, explained), templates, ctx.get(progress.Result).last_progress_ts)
    if late is not None:
        findings.append(late)
    return Result(findings=tuple(findings))


def _template(text: str | None) -> str:
    return re.sub(r"\d+", "#", text or "")


def _exception_findings(
    tl: pl.DataFrame, covered: set[tuple[str, int]], covered_records: set[tuple[str, int]], templates: set[str]
) -> list[Finding]:
    """One finding per kind of exception (type, category, echo or not) that nothing explained."""
    exc = tl.filter(
        pl.col("exc_type").is_not_null() & ~pl.col("exc_type").str.ends_with("Warning") & (pl.col("kind") != "stack")
    )
    if exc.is_empty():
        return []
    # a traceback's time is its first timed line: the exception line itself rarely has one
    rec_ts = (
        tl.filter(pl.col("record").is_not_null() & pl.col("ts").is_not_null())
        .group_by("file", "record")
        .agg(pl.col("ts").min().alias("_rec_ts"))
    )
    exc = exc.join(rec_ts, on=["file", "record"], how="left").with_columns(pl.coalesce("ts", "_rec_ts").alias("ts"))
    causes = _causes(tl, exc)
    groups: dict[tuple[str, str, bool], list[tuple[dict[str, Any], Classification]]] = {}
    seen_records: set[tuple[str, Any]] = set()
    for row in exc.sort(["ts", "file", "line"], nulls_last=True).iter_rows(named=True):
        key = (row["file"], int(row["line"]))
        key_rec = (row["file"], row["record"])
        if key in covered or (row["record"] is not None and key_rec in covered_records):
            continue
        if _template(row["message"]) in templates or key in causes["raised_again"]:
            continue  # explained, or the cause of an exception raised from it (classified with that one)
        if row["record"] is not None:
            if key_rec in seen_records:  # one finding per traceback
                continue
            seen_records.add(key_rec)
        text = row["message"] or ""
        messages = [text, *causes["chain"].get(key, [])]
        found = exception_category(row["exc_type"], messages)
        echo = bool(ECHO_TYPES.search(row["exc_type"].rsplit(".", 1)[-1])) or bool(re.search(CASCADE_PATTERN, text))
        if echo and found.basis != "words":
            found = Classification(_echo_category(text), "echo", row["exc_type"])
        groups.setdefault((row["exc_type"], found.category, echo), []).append((row, found))
    findings = []
    for (exc_type, category, echo), items in sorted(groups.items(), key=lambda kv: (_first_ts_key(kv[1]), kv[0])):
        rows = [r for r, _ in items]
        found = items[0][1]
        ranks = sorted({int(r["rank"]) for r in rows if r["rank"] is not None})
        who = plural_ranks(ranks) if ranks else "a process"
        evidence = [
            Evidence(file=r["file"], line=int(r["line"]), rank=r["rank"], text=r["message"] or "", ts=r["ts"])
            for r in rows[:8]
        ]
        said = f" ({found.evidence!r})" if found.basis == "words" else ""
        findings.append(
            make_finding(
                ID,
                suffix=exc_type + (f":{category}" if found.basis == "words" else "") + (":echo" if echo else ""),
                category=category,
                severity="error",
                title=f"{who[0].upper() + who[1:]} raised {exc_type}"
                + (" (an echo of a failure elsewhere)" if echo else "")
                + (f": {category.replace('_', ' ')}" if found.basis == "words" and not echo else ""),
                rule_role="symptom" if echo else "root",
                ranks=ranks,
                evidence=evidence,
                count=len(rows),
                explanation=(
                    f"{exc_type} reports that a peer, the watchdog or the launcher stopped this process."
                    if echo
                    else f"An uncaught {exc_type} ended the training process" + (f" on {who}" if ranks else "")
                    + (f". Its words{said} say {category.replace('_', ' ')}" if found.basis == "words"
                       else ". No failure signature explains it; the exception text and traceback are the cause")
                    + "."
                ),
                fix=(
                    "Find the first failure on another rank."
                    if echo
                    else "Read the traceback on the first rank that raised it; fix the code, data or environment it "
                    "points at. If only some ranks raise it, look for what differs on them (data shards, a bad "
                    "sample, a node)."
                ),
                fields={"exc_type": exc_type, "first_text": rows[0]["message"], "basis": found.basis,
                        "keyword": found.evidence if found.basis == "words" else None},
            )
        )
    return findings


def _causes(tl: pl.DataFrame, exc: pl.DataFrame) -> dict[str, Any]:
    """For each exception raised from another (``The above exception was the direct cause ...``):
    ``chain`` (file, line) -> the messages of the exceptions before it, nearest first; and
    ``raised_again``: the (file, line) of those earlier exceptions."""
    markers = tl.filter(pl.col("message").str.contains(_CHAINED.pattern)).select("file", "line")
    if markers.is_empty():
        return {"chain": {}, "raised_again": set()}
    chain: dict[tuple[str, int], list[str]] = {}
    raised_again: set[tuple[str, int]] = set()
    marks: dict[str, list[int]] = {}
    for f, n in markers.iter_rows():
        marks.setdefault(f, []).append(int(n))
    for file, part in exc.sort("line").partition_by("file", as_dict=True).items():
        name = str(file[0])
        if name not in marks:
            continue
        lines = part.get_column("line").to_list()
        texts = [t or "" for t in part.get_column("message").to_list()]
        pending: list[str] = []
        for i, (line, text) in enumerate(zip(lines, texts, strict=True)):
            if pending:
                chain[(name, int(line))] = list(pending)
            nxt = lines[i + 1] if i + 1 < len(lines) else None
            if nxt is not None and any(line < m < nxt for m in marks[name]):
                raised_again.add((name, int(line)))
                pending = [text, *pending]
            else:
                pending = []
    return {"chain": chain, "raised_again": raised_again}


def _late_errors(
    tl: pl.DataFrame,
    covered: set[tuple[str, int]],
    covered_records: set[tuple[str, int]],
    templates: set[str],
    last_progress: datetime | None,
) -> Finding | None:
    """Error lines at the end of the job (after the last step) that nothing explains, classified by the
    words of the first erring rank's last error block; ``unknown_failure`` when they say nothing."""
    # the cheap filters first: the template test rewrites every message it sees
    rows = tl.filter(
        (pl.col("kind") == "error") & (pl.col("level").fill_null("ERROR") != "WARNING") & pl.col("exc_type").is_null()
    ).filter(
        ~pl.col("message").fill_null("").str.replace_all(r"\d+", "#").is_in(sorted(templates))
        # watchdog and exit lines belong to the collective-sequence and exit-codes analyzers
        & pl.col("seq").is_null()
        & pl.col("last_enqueued").is_null()
        & pl.col("exit_code").is_null()
        & pl.col("signal").is_null()
    )
    if last_progress is not None:
        rows = rows.filter(pl.col("ts").is_null() | (pl.col("ts") >= last_progress))
    if rows.is_empty():
        return None
    keep = [
        (f, n) not in covered and (r is None or (f, int(r)) not in covered_records)
        for f, n, r in zip(rows["file"], rows["line"], rows["record"], strict=True)
    ]
    rows = rows.filter(pl.Series(keep, dtype=pl.Boolean)).sort(["ts", "file", "line"], nulls_last=True)
    if rows.is_empty():
        return None
    firsts = rows.unique(subset=["rank"], keep="first", maintain_order=True).head(8)
    ranks = sorted(int(r) for r in rows.get_column("rank").drop_nulls().unique())
    found = text_category(_last_block(tl, rows))
    if found is None and rows.get_column("message").str.contains(_TRACEBACK).any():
        # a Python traceback cut before its exception line (a paste, a killed writer) is still an
        # uncaught exception: what exceptions_category gives an exception whose words say nothing
        found = Classification(DEFAULT_EXCEPTION_CATEGORY, "traceback", "Traceback (most recent call last)")
    category = found.category if found is not None else "unknown_failure"
    said = f"'{found.evidence}'" if found is not None else ""
    if found is None:
        reading, why = "", ", and their words name no known failure."
    elif found.basis == "traceback":
        reading = "; a Python traceback ends without its exception: an uncaught exception"
        why = "; a Python traceback among them ends before its exception line, so what was raised is not shown."
    else:
        reading = f"; their words ({said}) say {category.replace('_', ' ')}"
        why = (f"; the last error block of the first rank that printed one says {said}, which names "
               f"{category.replace('_', ' ')}.")
    return make_finding(
        ID,
        suffix="error-lines",
        category=category,
        severity="error",
        title=f"{rows.height} error line(s) at the end of the job that no rule explains{reading}",
        rule_role="symptom",
        ranks=ranks,
        evidence=[
            Evidence(file=r["file"], line=int(r["line"]), rank=r["rank"], text=r["message"] or "", ts=r["ts"])
            for r in firsts.iter_rows(named=True)
        ],
        count=rows.height,
        explanation="These error-level lines come after the last training step and match no failure signature" + why,
        fix="Read the first of them; if it is a known failure, a rule for it makes the next diagnosis exact."
        + (" Find the whole traceback (the rank's own log, not a console that interleaves ranks): its last line "
           "names the exception." if found is not None and found.basis == "traceback" else ""),
        # the summary's words for a cut traceback (the line itself says nothing: "Traceback (most ...")
        message="an uncaught Python exception, its traceback cut before the exception line"
        if found is not None and found.basis == "traceback" else "",
        fields={"first_text": firsts["message"][0], "basis": found.basis if found is not None else None,
                "keyword": found.evidence if found is not None else None, "inferred": True},
    )


def _last_block(tl: pl.DataFrame, rows: pl.DataFrame) -> str:
    """The text of the last error block of the first rank (or file) with an unexplained error line:
    its last :data:`BLOCK_LINES` error lines, the lines of the records they belong to, and the
    :data:`FOLLOWING_LINES` after each (a message continued on the next lines: a JSON error record,
    a wrapped line, ``what():``)."""
    first = rows.row(0, named=True)
    if first["rank"] is not None:
        mine = rows.filter(pl.col("rank") == first["rank"])
    else:
        mine = rows.filter(pl.col("file") == first["file"])
    tail = mine.sort(["ts", "file", "line"], nulls_last=True).tail(BLOCK_LINES)
    records = tail.filter(pl.col("record").is_not_null()).select("file", "record").unique()
    context = tl.join(records, on=["file", "record"], how="semi") if not records.is_empty() else tl.clear()
    # each line of the error lines' files, with the nearest error line at or before it
    starts = tail.select("file", pl.col("line").alias("_start")).sort("file", "_start")
    following = (
        tl.select("file", "line", "message")
        .join(starts.select("file").unique(), on="file", how="semi")
        .sort("file", "line")
        .join_asof(starts, left_on="line", right_on="_start", by="file", strategy="backward", check_sortedness=False)
        .filter(pl.col("line") - pl.col("_start") <= FOLLOWING_LINES)
    )
    lines = pl.concat(
        [part.select("file", "line", "message") for part in (tail, context, following)]
    ).unique(subset=["file", "line"]).sort("file", "line")
    return "\n".join(m or "" for m in lines.get_column("message").to_list())


def _echo_category(text: str) -> str:
    """What an echo reports: a peer's connection going away, a timeout, or just the launcher."""
    if re.search(r"(?i)connection (?:closed|reset)|remote process|broken pipe|ncclRemoteError", text):
        return "network_failure"
    if re.search(r"(?i)time(?:d)? ?out|watchdog", text):
        return "collective_timeout"
    return "unknown_failure"


def _first_ts_key(items: list[tuple[dict[str, Any], Classification]]) -> tuple[int, str]:
    ts = items[0][0]["ts"]
    return (0, ts.isoformat()) if ts is not None else (1, "")
