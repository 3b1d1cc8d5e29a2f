"""How sure the verdict is: high when a line names the cause, lower when it rests on inference.

* high: the primary is a root cause at error level and names its culprits (or a healthy run
  printed its completion);
* medium: the category is inferred (a straggler, a timeout with no rank-level cause), the
  primary is not a root cause, its culprit is inferred, or the dumps alone name the culprit;
* low: nothing explains the failure (``unknown_failure``, ``hang_unknown``).

Then one level down for each doubt: the first failure's order across nodes is within the clock
uncertainty, no culprit could be named, or the logs and the flight-recorder dumps disagree.
"""

from __future__ import annotations

from postmortem.analyzers import collective_sequence, end_of_data, job_status, stack_groups
from postmortem.analyzers.base import AnalyzerContext
from postmortem.model import Finding
from postmortem.verdict.culprits import NO_CULPRIT

LEVELS = ("low", "medium", "high")
#: Categories that rest on inference rather than on an error line naming the cause.
INFERRED = {"straggler", "collective_timeout", "hang_unknown", "unknown_failure"}


def confidence_of(
    ctx: AnalyzerContext,
    category: str,
    primary: Finding | None,
    tier: str | None,
    culprits: list[int],
    *,
    doubts: int = 0,
    any_findings: bool = True,
) -> str:
    """``low`` / ``medium`` / ``high``, lowered one level per doubt."""
    if category == "healthy":
        completion = ctx.get(job_status.Result).completion_lines
        return LEVELS[2 if completion or not any_findings else 1]
    if category in ("hang_unknown", "unknown_failure") or primary is None:
        return "low"
    level = 2
    if category in INFERRED or tier not in ("root", "flight-recorder"):
        level = 1
    if tier == "flight-recorder" or primary.fields.get("inferred"):
        level = min(level, 1)
    main = ctx.get(collective_sequence.Result).main
    if category == "straggler" and main is not None and main.straggler_evidence == "status":
        level = 2
    if category == "data_exhaustion_desync":
        supply = ctx.get(end_of_data.Result).supply
        corroborated = bool(supply.get("supported_steps")) or any(
            g.minority or g.waits_in == "barrier" for g in ctx.get(stack_groups.Result).groups
        )
        level = 2 if corroborated else 1
    level -= doubts
    if not culprits and category not in NO_CULPRIT:
        level = min(level, 1)
    return LEVELS[max(level, 0)]
