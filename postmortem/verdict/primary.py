"""The primary finding, and what follows from it (the cascade).

## What it means
The primary finding is the earliest *cause* (a rule or analyzer finding whose role is
``root``), at error level if there is one, on the reference node's clock. When two causes are
the same event (a rule and the generic exception fallback on one traceback) the more specific
category wins, and the process's own lines win over the launcher's report of its exit. A root
whose every line is an echo ("Connection closed by peer", "Timed out waiting") only leads
when nothing else does. Without any cause, the earliest error-level symptom is primary (a
collective timeout with no known cause). In a hang whose errors are only the timeouts that
ended it, the py-spy split (the ranks that are elsewhere) leads, else the hang itself.

A finding of an experimental rule (whose examples were written here rather than copied from a
real log or built from the emitting code) leads only when a stable finding of the same category
stands beside it; alone it is context.

Times are the evidence lines' times on the reference clock; a line that inherited its time
from an earlier line is placed at its file's next printed time (it happened before that).

Findings after the primary that are its consequences become ``secondary`` with ``caused_by``
pointing at it: symptoms (collective timeouts, SIGTERM from the agent, "Connection closed by
peer", "remote process exited"), echoes of the same cause on other ranks, and anything the
primary's own ranks print afterwards. Other findings stay ``context``.

## What a match does not prove
"After" is only as good as the clocks: across nodes the order holds to within the clock
uncertainty (see clock-skew).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from postmortem.analyzers import clock_skew
from postmortem.analyzers._common import (
    CASCADE_TEXT,
    SEVERE,
    event_time,
    specificity,
)
from postmortem.model import SEVERITY_ORDER, Finding

#: Categories that are consequences when they follow another failure.
CONSEQUENCES = {
    "collective_timeout", "network_failure", "job_cancelled", "straggler", "hang_unknown", "teardown_failure",
    "unknown_failure",
}
#: The finding of the late error lines that no rule explains (analyzers/unexplained_errors.py).
FLOOR_ID = "unexplained-errors:error-lines"
#: Two causes this close (and on a shared rank) are one event seen twice.
SAME_EVENT_S = 1.0


@dataclass(frozen=True)
class Cascade:
    """The primary finding, how it was chosen, each finding's role, and the times they were ordered by."""

    primary: Finding | None
    #: root | root-warning | root-echo | symptom | symptom-warning | stall | None
    tier: str | None
    #: finding id -> (role, the id of the finding it follows from)
    roles: dict[str, tuple[str, str | None]]
    #: finding id -> its first time on the reference clock
    times: dict[str, datetime | None]


def cascade(
    findings: list[Finding],
    times: dict[str, datetime | None],
    *,
    hung: bool,
    margin_s: float | None,
    lead: Finding | None = None,
) -> Cascade:
    """Choose the primary finding (``lead`` when given) and give every finding its role."""
    if lead is not None:
        primary, tier = lead, "flight-recorder"
    else:
        primary, tier = choose_primary(findings, times)
        if hung and tier not in ("root", "root-warning"):
            # a hang with no cause among the errors: lead with where the ranks are stuck
            stall = _stall_lead(findings)
            if stall is not None:
                primary, tier = stall, "stall"
    roles: dict[str, tuple[str, str | None]] = {}
    margin = margin_s or 0.0
    for f in findings:
        if primary is None:
            roles[f.id] = ("context", None)
        elif f.id == primary.id:
            roles[f.id] = ("primary", None)
        elif _is_consequence(f, primary, times, margin):
            roles[f.id] = ("secondary", primary.id)
        else:
            roles[f.id] = ("context", None)
    return Cascade(primary=primary, tier=tier, roles=roles, times=times)


def finding_time(
    f: Finding, skew: clock_skew.Result, nodes: dict[int, str], times: Mapping[tuple[str, int], datetime] | None = None
) -> datetime | None:
    """The finding's first time on the reference node's clock.

    Evidence lines that inherited their time are placed at their file's next printed time
    (see :func:`event_times`); a ``first_ts`` the analyzer set apart from its evidence (the
    start of a collective, the end of a hang) is kept as is.
    """
    times = times or {}
    timed = [e for e in f.evidence if e.ts is not None]
    if timed and (f.first_ts is None or f.first_ts == min(e.ts for e in timed)):  # type: ignore[type-var]
        placed = []
        for e in timed:
            node = nodes.get(e.rank) if e.rank is not None else None
            placed.append(clock_skew.corrected(event_time(e, times), node, skew))
        return min(t for t in placed if t is not None)
    if f.first_ts is None:
        return None
    node = nodes.get(f.ranks[0]) if f.ranks else None
    return clock_skew.corrected(f.first_ts, node, skew)


def _stall_lead(findings: list[Finding]) -> Finding | None:
    """The py-spy split naming the ranks that are elsewhere, else the hang itself."""
    split = next((f for f in findings if f.rule == "stack-groups" and f.fields.get("minority_ranks")), None)
    return split or next((f for f in findings if f.id == "job-status:hung"), None)


def choose_primary(findings: list[Finding], times: dict[str, datetime | None]) -> tuple[Finding | None, str | None]:
    """Earliest root at error level, else at warning level, else an echo-only root, else the earliest
    symptom (error, then warning). A finding of an experimental rule is a candidate only when a
    stable finding of the same category stands beside it.

    Within a tier, candidates less than :data:`SAME_EVENT_S` apart on a shared rank are one
    event, and the most specific category among them wins.
    """
    # an experimental rule (its examples were written here, not copied from a real log or built from
    # the emitting code) leads only beside a stable finding that reads the same category
    stable = {f.category for f in findings if f.rule_status != "experimental"}
    findings = [f for f in findings if f.rule_status != "experimental" or f.category in stable]
    # the floor under the verdict (error lines nothing explains) whose words name nothing — a bare
    # traceback cut before its exception, lines no keyword knows — leads only when no other finding
    # can; read by its words, it competes like any other finding
    if any(f.id != FLOOR_ID and f.rule_role != "context" and f.severity in SEVERE for f in findings):
        findings = [f for f in findings if f.id != FLOOR_ID or f.fields.get("basis") == "words"]
    roots = [f for f in findings if f.rule_role == "root"]
    # a "root" whose every line is an echo (Connection closed by peer ...) is a cause only
    # when nothing else is: peers often print these before the agent reports the real death
    echo = {f.id for f in roots if f.evidence and all(CASCADE_TEXT.search(e.text or "") for e in f.evidence)}
    tiers = (
        ("root", [f for f in roots if f.severity in SEVERE and f.id not in echo]),
        ("root-warning", [f for f in roots if f.severity == "warning" and f.id not in echo]),
        ("root-echo", [f for f in roots if f.severity in SEVERE and f.id in echo]),
        ("symptom", [f for f in findings if f.rule_role == "symptom" and f.severity in SEVERE]),
        ("symptom-warning", [f for f in findings if f.rule_role == "symptom" and f.severity == "warning"]),
    )
    for tier, candidates in tiers:
        if not candidates:
            continue
        ordered = sorted(candidates, key=lambda f: _key(f, times))
        first = ordered[0]
        t0 = times.get(first.id)
        same = [first]
        for f in ordered[1:]:
            t = times.get(f.id)
            if t0 is None or t is None or abs((t - t0).total_seconds()) > SAME_EVENT_S:
                continue
            if not f.ranks or not first.ranks or set(f.ranks) & set(first.ranks):
                same.append(f)
        # the same event seen twice: the process's own lines before the launcher's report of its
        # death, then the most specific reading, a stable rule's before an experimental one's, then
        # the one that knows its rank
        best = min(same, key=lambda f: (
            _exit_report(f), specificity(f.category), f.rule_status == "experimental", not f.ranks, _key(f, times)
        ))
        return best, tier
    return None, None


_EXIT_REPORT = re.compile(r"exitcode|Signal \d+ \(SIG\w+\) received|death signal", re.IGNORECASE)


def _exit_report(f: Finding) -> bool:
    """A finding made only of the launcher's exit lines (ChildFailedError, ``failed (exitcode: …)``)."""
    return bool(f.evidence) and all(_EXIT_REPORT.search(e.text or "") for e in f.evidence)


def _key(f: Finding, times: dict[str, datetime | None]) -> tuple:
    t = times.get(f.id)
    first = f.evidence[0] if f.evidence else None
    return (
        t is None,
        t.isoformat() if t is not None else "",
        specificity(f.category),
        -SEVERITY_ORDER.get(f.severity, 0),
        first.file if first else "",
        first.line if first else 0,
        f.id,
    )


def _is_consequence(f: Finding, primary: Finding, times: dict[str, datetime | None], margin: float) -> bool:
    if f.rule_role == "context":
        return False
    t, tp = times.get(f.id), times.get(primary.id)
    if t is not None and tp is not None and (tp - t).total_seconds() > margin:
        return False  # it happened before the primary
    if f.rule_role == "symptom":
        return True
    if f.category == primary.category or f.category in CONSEQUENCES:
        return True
    if primary.ranks and f.ranks and set(f.ranks) <= set(primary.ranks):
        return True
    return any(CASCADE_TEXT.search(e.text or "") for e in f.evidence[:4])
