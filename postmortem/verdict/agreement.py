"""The flight-recorder dumps weighed against the logs.

The logs and the dumps are two witnesses of the same failure. When both name culprits, they
agree, partly agree or disagree (a finding and a sentence of the summary say so, and the
confidence drops); when only the dumps name one and the logs' verdict is open (a hang, a
timeout with no rank-level cause), the dumps' culprits become the verdict's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from postmortem.analyzers import flight_recorder
from postmortem.model import Finding
from postmortem.ranges import format_ranks, plural_ranks

#: Verdict categories whose culprit list the dumps may fill when the logs name nobody (and
#: ``healthy`` when it only means that the logs end with no error).
OPEN_CATEGORIES = {"hang_unknown", "unknown_failure", "collective_timeout", "straggler"}


@dataclass(frozen=True)
class Agreement:
    #: agree | partial | disagree | fr_only | dumps_only | logs_only | none
    status: str
    logs: list[int] = field(default_factory=list)
    flight_recorder: list[int] = field(default_factory=list)
    basis: str | None = None
    #: the sentence the summary gets (empty when there is nothing to say)
    note: str = ""

    @property
    def adopted(self) -> bool:
        """The dumps' culprits become the verdict's."""
        return self.status == "fr_only"

    @property
    def conflict(self) -> bool:
        return self.status in ("disagree", "partial")


def agreement_of(log_culprits: list[int], category: str, job_status: str, fr: flight_recorder.Result) -> Agreement:
    """How the culprits the logs name compare with the ones the dumps name."""
    verdict = fr.verdict
    logs = sorted(log_culprits)
    dumps = sorted(verdict.get("culprits") or verdict.get("suspects") or [])
    if logs and dumps:
        if set(logs) == set(dumps):
            status = "agree"
        elif set(logs) & set(dumps):
            status = "partial"
        else:
            status = "disagree"
    elif dumps:
        open_verdict = category in OPEN_CATEGORIES or (category == "healthy" and job_status == "unknown")
        status = "fr_only" if verdict.get("culprits") and open_verdict else "dumps_only"
    elif logs:
        status = "logs_only"
    else:
        status = "none"
    text = verdict.get("text") or ""
    note = ""
    if status == "agree":
        note = f"The flight-recorder dumps agree: {text}."
    elif status in ("disagree", "partial"):
        note = (f"The flight-recorder dumps {'partly ' if status == 'partial' else ''}disagree: {text} "
                f"(the logs blame {plural_ranks(logs)}).")
    elif status == "fr_only":
        note = f"From the flight-recorder dumps: {text}."
    return Agreement(status=status, logs=logs, flight_recorder=dumps, basis=verdict.get("basis"), note=note)


def adopted_category(category: str, fr: flight_recorder.Result) -> str:
    """The verdict's category once the dumps' culprits are adopted."""
    basis = fr.verdict.get("basis")
    if category in ("hang_unknown", "unknown_failure", "healthy") or (
        category == "collective_timeout" and basis == "mismatch"
    ):
        return "collective_mismatch" if basis == "mismatch" and fr.verdict.get("kind") != "state" else "straggler"
    return category


def lead_finding(fr: flight_recorder.Result) -> Finding | None:
    """The dumps' finding that names their culprits (not the list of missing dumps)."""
    culprits = set(fr.culprits)
    return next((f for f in fr.findings if set(f.ranks) & culprits and f.rule != "fr-missing-dumps"), None)


def disagreement_finding(category: str, fr: flight_recorder.Result, agreement: Agreement) -> Finding:
    logs, dumps = agreement.logs, agreement.flight_recorder
    title = (f"The logs and the flight-recorder dumps blame different ranks: {format_ranks(logs)} (logs) vs "
             f"{format_ranks(dumps)} (dumps)")
    return Finding(
        id="fr-disagrees-with-logs",
        rule="fr-disagrees-with-logs",
        category=category,
        severity="warning",
        title=title,
        ranks=sorted(set(logs) ^ set(dumps)),
        count=1,
        explanation=(
            f"The log diagnosis ({category}) names {plural_ranks(logs)}; the dumps say {fr.verdict.get('text')}. "
            "A dump is a snapshot taken when each rank dumped, and a log line is what a rank printed: a rank that "
            "dumped late, a process group the logs do not mention, or an echo mistaken for a cause can each explain "
            "the difference."
        ),
        fix="Read both: the ranks' last log lines around the dump time and the dumps' last entries for the ranks in question.",
        references=list(flight_recorder.REFERENCES),
        role="context",
        rule_role="context",
        message=title,
        fields={"logs": logs, "flight_recorder": dumps, "status": agreement.status, "basis": agreement.basis},
    )
