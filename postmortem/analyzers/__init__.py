"""Cross-rank analyzers: Python checks over the whole timeline, beside the data rules.

Each analyzer is a module with ``ID``, ``TITLE`` and ``run(ctx) -> AnalyzerResult``
(see :mod:`postmortem.analyzers.base`). They run in the order of :data:`ANALYZERS`; later
analyzers read earlier results (``ctx.result(ID)``), so the order is part of the contract:

progress -> exit-codes -> stack-groups -> clock-skew -> collective-sequence ->
collective-mismatch -> hccl-ranktable -> end-of-data -> first-failure -> job-status -> cascade
"""

from __future__ import annotations

from types import ModuleType

from postmortem.analyzers import (
    cascade,
    clock_skew,
    collectives,
    end_of_data,
    exit_codes,
    fingerprint,
    first_failure,
    job_status,
    progress,
    ranktable,
    stack_groups,
)
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult

ANALYZERS: dict[str, ModuleType] = {
    m.ID: m
    for m in (
        progress,
        exit_codes,
        stack_groups,
        clock_skew,
        collectives,
        fingerprint,
        ranktable,
        end_of_data,
        first_failure,
        job_status,
        cascade,
    )
}


class UnknownAnalyzer(KeyError):
    """No analyzer has this id."""


def get(analyzer_id: str) -> ModuleType:
    """The analyzer module with this id; raises :class:`UnknownAnalyzer` naming the known ids."""
    try:
        return ANALYZERS[analyzer_id]
    except KeyError:
        known = ", ".join(ANALYZERS)
        raise UnknownAnalyzer(f'no such analyzer: "{analyzer_id}" (known: {known})') from None


__all__ = ["ANALYZERS", "AnalyzerContext", "AnalyzerResult", "UnknownAnalyzer", "get"]
