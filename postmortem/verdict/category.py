"""The verdict's category: what kind of failure this was.

It is the primary finding's category, with three readings of the job as a whole: a job that
completed — or whose logs simply end with no error, no bad exit and no stall — is ``healthy``
unless it ran broken (NaN weights, a straggler's pace); a hang
whose py-spy stacks split is a ``straggler`` (or a ``data_exhaustion_desync`` when the odd ranks
wait in a collective the others never entered); a generic failure after training finished is
a ``teardown_failure``.
"""

from __future__ import annotations

from datetime import datetime

from postmortem.model import CATEGORIES, Finding, StackGroup

#: Generic categories that become ``teardown_failure`` when they happen after training finished.
TEARDOWN_GENERIC = {
    "rank_exception", "unknown_failure", "collective_timeout", "accelerator_error", "network_failure", "native_crash",
}
#: Categories a job can have and still complete every step (NaN weights, a rank that set a slow pace).
COMPLETED_BUT_BROKEN = {"numerical_instability", "straggler"}
#: What a py-spy frame in a collective wait is called (stack-groups' ``waits_in``).
COLLECTIVE_WAITS = {"barrier", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "collective"}


def status_and_category(
    status: str,
    primary: Finding | None,
    groups: list[StackGroup],
    *,
    primary_ts: datetime | None = None,
    training_finished_ts: datetime | None = None,
    last_progress_ts: datetime | None = None,
    finished_at: dict[str, int] | None = None,
    empty: bool = False,
) -> tuple[str, str]:
    """The status and category for a job of ``status`` whose primary finding is ``primary``. A job of
    unknown status whose logs end on its primary's error lines failed: the status says so. ``empty``: the logs
    held no line at all (nothing ran that we can see, so nothing is healthy either). Training
    finished at ``training_finished_ts`` or, in logs without times, at the ``finished_at`` lines
    (file -> the line of its last step, which reached max_steps)."""
    if empty:
        return status, "unknown_failure"
    # a job whose status is unknown (no error line, no bad exit, no stall) and that trained on after
    # what the primary finding reports survived it; a log that ends on its primary's lines — an
    # error, or a root/symptom warning such as NCCL's connect retries — reads as that failure
    # (benign warnings are context, never primary)
    survived = primary is None or (
        primary_ts is not None and last_progress_ts is not None and primary_ts < last_progress_ts
    )
    if status == "unknown" and not survived:
        status = "failed"  # the logs end on the primary's lines: read them as the failure they report
    category = _base_category(status, primary, groups)
    if category in TEARDOWN_GENERIC and primary is not None and _after_training(
        primary, primary_ts, training_finished_ts, finished_at
    ):
        return status, "teardown_failure"  # training had finished: a generic failure after that is a teardown failure
    return status, category


def _after_training(
    primary: Finding, primary_ts: datetime | None, finished_ts: datetime | None, finished_at: dict[str, int] | None
) -> bool:
    """The primary finding comes after training finished: by time, or, where the lines carry no
    time, by its place after the last step of the file that printed it."""
    if primary_ts is not None and finished_ts is not None:
        return primary_ts > finished_ts
    if not finished_at or not primary.evidence:
        return False
    return all(e.file in finished_at and e.line > finished_at[e.file] for e in primary.evidence)


def _base_category(status: str, primary: Finding | None, groups: list[StackGroup]) -> str:
    if status in ("completed", "unknown"):
        # a run that finished with NaN weights still failed its purpose
        if primary is not None and primary.category in COMPLETED_BUT_BROKEN:
            return primary.category
        # "unknown": no error, no bad exit, no stall — the log ends while the job runs (a job still
        # running, or the part a user pasted): nothing failed, so no failure category
        return "healthy"
    if primary is None:
        if status == "hung":
            return "straggler" if any(g.minority for g in groups) else "hang_unknown"
        return "unknown_failure"
    category = primary.category if primary.category in CATEGORIES else "unknown_failure"
    if category == "hang_unknown" and any(g.minority for g in groups):
        return "straggler"
    if primary.rule == "stack-groups" and extra_collective(groups):
        return "data_exhaustion_desync"
    if category == "healthy":  # a rule cannot make a failed or hung job healthy
        return "hang_unknown" if status == "hung" else "unknown_failure"
    return category


def extra_collective(groups: list[StackGroup]) -> bool:
    """The minority waits in a collective the majority is not in: the ranks disagree on how many
    collectives to run (one rank ran out of data, or has one more eval batch), not a slow rank."""
    minority = [g for g in groups if g.minority]
    majority = [g for g in groups if not g.minority]
    return bool(minority and majority) and all(
        g.waits_in in COLLECTIVE_WAITS and all(g.frames[:1] != m.frames[:1] for m in majority) for g in minority
    )
