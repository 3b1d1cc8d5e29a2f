"""Job status: completed, failed, hung or unknown, and how long each rank was silent.

## What it means
* failed: a worker exited non-zero or was killed, or an error was printed (an exception, a
  collective timeout, a fatal runtime error);
* completed: all known exits are zero, a completion line was printed, or the last step
  reached the planned number of steps, with no failure;
* hung: progress stopped with no error and no exit: py-spy dumps were taken, the last step is
  below the planned steps, or the logs go on far longer than the step cadence after the last
  step. Also hung: py-spy dumps of an unfinished job whose only errors are timeouts and echoes
  (the collective timeout that finally ended the stall is not its cause);
* unknown: none of these (the logs end while training was running).

Each rank's silence is the time between its last line and the job's last line.

## What a match does not prove
A log copied while the job was still running looks like a hang. A job killed by the scheduler
after a hang shows as failed (exit codes) or cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from postmortem.analyzers import end_of_data, exit_codes, first_failure, progress, stack_groups
from postmortem.analyzers._common import CASCADE_TEXT, SEVERE, evidence_rows, grep, hms, make_finding
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.parsers.patterns import TRAINING_FINISHED, TRAINING_FINISHED_HINTS
from postmortem.ranges import format_ranks

ID = "job-status"
TITLE = "Job status and silent ranks"
#: a job is failed when an error line stands behind a finding: every finding source first
NEEDS: tuple[str, ...] = (first_failure.ID,)


@dataclass(frozen=True)
class Result(AnalyzerResult):
    status: str = "unknown"  # completed | failed | hung | unknown
    reason: str = ""
    job_end: datetime | None = None
    last_progress_ts: datetime | None = None
    silence_after_last_step_s: float | None = None
    silence_threshold_s: float = 0.0
    #: seconds between each rank's last line and the job's last line
    silent_s: dict[int, float] = field(default_factory=dict)
    completion_lines: int = 0
    bad_exits: list[int] = field(default_factory=list)
    training_finished_ts: datetime | None = None
    stalled_with_stacks: bool = False

#: Analyzer findings that infer a state rather than report an error line.
_INFERENCES = {"progress", "stack-groups", "end-of-data", "clock-skew", "job-status"}
#: Categories that describe a stall, not an error: they do not make a job "failed".
_STALL = {"data_exhaustion_desync", "straggler", "hang_unknown", "healthy"}
#: Silence after the last step, as a multiple of the step cadence, that counts as a hang.
SILENCE_FACTOR = 10.0
SILENCE_MIN_S = 120.0


def run(ctx: AnalyzerContext) -> Result:
    """Decide the job's status from errors, exits, completion lines, progress and silence."""
    tl = ctx.timeline
    prog = ctx.get(progress.Result)
    exits = ctx.get(exit_codes.Result).ranks
    groups = ctx.get(stack_groups.Result).groups
    findings = ctx.findings()

    # a finding makes the job "failed" only when it stands on an error line: a rule matching a
    # py-spy frame or an info line describes a stall, not a failure
    cited = {(e.file, e.line) for f in findings for e in f.evidence}
    error_keys = _error_lines(tl, cited)
    fatal = [
        f for f in findings
        if f.severity in SEVERE and f.rule_role != "context" and f.category not in _STALL and f.rule not in _INFERENCES
        and any((e.file, e.line) in error_keys for e in f.evidence)
    ]
    codes = {r: e.exit_code for r, e in exits.items() if e.exit_code is not None}
    bad_exits = sorted(r for r, c in codes.items() if c != 0)
    end = tl.get_column("ts").max()
    last_prog_ts = prog.last_progress_ts
    last_step = prog.last_step
    max_steps = prog.max_steps
    completion = grep(tl, TRAINING_FINISHED, TRAINING_FINISHED_HINTS).filter(pl.col("kind") != "stack")
    finished_ts = completion.get_column("ts").min()
    if finished_ts is None and prog.finished:
        finished_ts = prog.last_progress_ts
    cadence = prog.cadence_s
    silence = (end - last_prog_ts).total_seconds() if end is not None and last_prog_ts is not None else None
    threshold = max(SILENCE_MIN_S, SILENCE_FACTOR * cadence) if cadence else SILENCE_MIN_S
    reached = max_steps is not None and last_step is not None and last_step >= max_steps
    stopped_short = max_steps is not None and last_step is not None and last_step < max_steps
    desync = ctx.get(end_of_data.Result).desync
    frozen = _frozen_bar(tl) if stopped_short else None
    # py-spy dumps are taken of live, stuck processes: with no real cause among the errors (only
    # timeouts and echoes that ended the stall), the job hung, whatever killed it afterwards
    real_causes = [
        f for f in fatal
        if f.rule_role == "root" and not (f.evidence and all(CASCADE_TEXT.search(e.text or "") for e in f.evidence))
    ]
    stalled = bool(groups) and not real_causes and (stopped_short or desync or not prog.finished)

    if stalled:
        status = "hung"
        reason = "py-spy dumps of the stuck processes and no error other than the timeouts that ended the stall"
    elif bad_exits:
        status, reason = "failed", f"ranks {format_ranks(bad_exits)} exited non-zero"
    elif fatal and not (codes and not bad_exits and not completion.is_empty()):
        status, reason = "failed", f"{fatal[0].title}"
    elif not completion.is_empty() or (codes and not bad_exits) or reached:
        status = "completed"
        reason = (
            "a completion line was printed" if not completion.is_empty()
            else "every known exit code is 0" if codes else f"the last step reached max_steps {max_steps}"
        )
    elif groups or desync or frozen or (silence is not None and silence > threshold):
        # a log that ends short of max_steps is not a hang by itself: a running job, or the part a
        # user pasted, ends there too; only silence after the last step, stacks, a desync or a
        # new progress bar that never left 0 say so
        status = "hung"
        bits = []
        if stopped_short:
            bits.append(f"progress stopped at step {last_step} of {max_steps}")
        if frozen:
            bits.append(f"a progress bar started after the last step and never moved ('{frozen}')")
        if silence is not None and silence > threshold:
            bits.append(f"{silence:.0f} s of silence after the last step (cadence {cadence or 0:.1f} s/step)")
        if groups:
            bits.append("py-spy dumps were taken of live processes")
        if desync:
            bits.append("ranks ran out of data at different times")
        reason = "no error and no exit; " + "; ".join(bits)
    else:
        status = "unknown"
        reason = "no error, no exit and no completion line; the logs may end while the job was running"

    # each rank's last time, as the progress analyzer found it
    silent_s = {
        r: round((end - e.last_ts).total_seconds(), 3)
        for r, e in prog.ranks.items()
        if end is not None and e.last_ts is not None
    }
    out = []
    if status == "hung":
        last_rows = (
            # (lazy: only the columns evidence_rows reads, from what may be millions of rows)
            tl.lazy()
            .filter(pl.col("step").is_not_null())
            .select("file", "line", "rank", "ts", "message")
            .sort(["ts", "file", "line"], descending=True, nulls_last=True)
            .unique(subset=["rank"], keep="first", maintain_order=True)
            .sort("rank", nulls_last=True)
            .collect()
        )
        step_text = f" after step {last_step}" if last_step is not None else ""
        when = f" ({hms(last_prog_ts)})" if last_prog_ts is not None else ""
        out.append(
            make_finding(
                ID,
                suffix="hung",
                category="hang_unknown",
                severity="error",
                title=f"The job stopped making progress{step_text}{when} with no error and no exit",
                rule_role="symptom",
                ranks=sorted(silent_s) or [],
                evidence=evidence_rows(last_rows, limit=4),
                count=1,
                explanation=f"The job hung: {reason}.",
                fix="Take py-spy dumps of every rank (py-spy dump --pid PID) while it hangs and compare where "
                "they wait; set collective timeouts so a hang becomes an error.",
                fields={"last_step": last_step, "silence_s": silence, "silent_s": silent_s},
                # the hang becomes a fact when the logs end, not at the last step
                first_ts=end,
            )
        )
    return Result(
        findings=tuple(out), status=status, reason=reason, job_end=end, last_progress_ts=last_prog_ts,
        silence_after_last_step_s=silence, silence_threshold_s=threshold, silent_s=silent_s,
        completion_lines=completion.height, bad_exits=bad_exits, training_finished_ts=finished_ts,
        stalled_with_stacks=stalled,
    )


#: A tqdm bar drawn at zero: ``Val:   0%|          | 0/35 [00:00<?, ?it/s]``.
_BAR_AT_ZERO = r"(?:^|[\r\s])(?P<bar>[A-Za-z][\w .-]{0,30}:\s+0%\|[^|]{0,60}\|\s*0/\d+)"


def _frozen_bar(tl: pl.DataFrame) -> str | None:
    """A progress bar at 0 that a file printed after its last training step, with no step after it: a
    phase (an evaluation, a save) that began and never advanced — where a hung job stops."""
    last = (
        tl.lazy()
        .filter(pl.col("step").is_not_null())
        .group_by("file")
        .agg(pl.col("line").max().alias("_last"))
    )
    bars = (
        tl.lazy()
        .filter(pl.col("message").str.contains(_BAR_AT_ZERO))
        .join(last, on="file", how="inner")
        .filter(pl.col("line") > pl.col("_last"))
        .select(pl.col("message").str.extract(_BAR_AT_ZERO, 1))
        .collect()
    )
    return bars.item(0, 0).strip() if bars.height else None


def _error_lines(tl: pl.DataFrame, keys: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """Which of the cited (file, line) are error rows of the timeline."""
    if not keys:
        return set()
    cited = pl.DataFrame(
        {"file": [f for f, _ in keys], "line": [n for _, n in keys]}, schema={"file": pl.String, "line": pl.Int64}
    )
    hit = tl.select("file", "line", "kind").join(cited, on=["file", "line"], how="inner").filter(
        pl.col("kind") == "error"
    )
    return {(f, int(n)) for f, n in zip(hit["file"], hit["line"], strict=True)}

