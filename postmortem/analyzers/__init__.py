"""Cross-rank analyzers: Python checks over the whole timeline, beside the data rules.

Each analyzer is a module named after its id (``collective-sequence`` is
``collective_sequence.py``) with ``ID``, ``TITLE``, ``NEEDS``, a frozen ``Result`` and
``run(ctx) -> Result`` (see :mod:`postmortem.analyzers.base`). :data:`ANALYZERS` lists them in
an order that satisfies every ``NEEDS`` (checked when this module loads); :func:`run_all` runs
them and keeps an analyzer that raises from taking the analysis down.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from types import ModuleType

from postmortem.analyzers import (
    clock_skew,
    collective_mismatch,
    collective_sequence,
    end_of_data,
    exit_codes,
    first_failure,
    flight_recorder,
    hccl_ranktable,
    job_status,
    peer_reports,
    progress,
    stack_groups,
    unexplained_errors,
)
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult, claim_ids

_MODULES: tuple[ModuleType, ...] = (
    progress,
    exit_codes,
    stack_groups,
    clock_skew,
    collective_sequence,
    collective_mismatch,
    hccl_ranktable,
    peer_reports,
    end_of_data,
    flight_recorder,
    unexplained_errors,
    first_failure,
    job_status,
)


class UnknownAnalyzer(KeyError):
    """No analyzer has this id."""


def ordered(modules: Sequence[ModuleType]) -> dict[str, ModuleType]:
    """``modules`` by id, each after everything it needs (stable: otherwise in the given order).

    Raises ValueError naming the analyzer whose need is unknown or part of a cycle.
    """
    by_id = {m.ID: m for m in modules}
    done: dict[str, ModuleType] = {}
    visiting: set[str] = set()

    def visit(m: ModuleType) -> None:
        if m.ID in done:
            return
        if m.ID in visiting:
            raise ValueError(f"analyzer {m.ID!r}: its NEEDS form a cycle")
        visiting.add(m.ID)
        for need in m.NEEDS:
            if need not in by_id:
                raise ValueError(f"analyzer {m.ID!r} needs {need!r}, which is not registered")
            visit(by_id[need])
        visiting.discard(m.ID)
        done[m.ID] = m

    for m in modules:
        visit(m)
    return done


ANALYZERS: dict[str, ModuleType] = ordered(_MODULES)


def get(analyzer_id: str) -> ModuleType:
    """The analyzer module with this id; raises :class:`UnknownAnalyzer` naming the known ids."""
    try:
        return ANALYZERS[analyzer_id]
    except KeyError:
        known = ", ".join(ANALYZERS)
        raise UnknownAnalyzer(f'no such analyzer: "{analyzer_id}" (known: {known})') from None


def run_all(ctx: AnalyzerContext, analyzers: dict[str, ModuleType] | None = None) -> list[tuple[str, str]]:
    """Run every analyzer in order, storing each result in ``ctx``; returns (analyzer id, why) for
    each analyzer that failed on this job (its result is then the empty default).

    Finding ids are made unique as they arrive (``#2``, ``#3`` ... onto an id already used).
    """
    failed: list[tuple[str, str]] = []
    taken: set[str] = set()
    claim_ids(ctx.rule_findings, taken)
    for analyzer_id, module in (analyzers or ANALYZERS).items():
        try:
            result = module.run(ctx)
        except Exception as exc:  # one analyzer's bug must not cost the whole report
            where = traceback.extract_tb(exc.__traceback__)[-1]
            failed.append((analyzer_id, f"{type(exc).__name__}: {exc} ({where.filename.rsplit('/', 1)[-1]}:{where.lineno})"))
            result = module.Result()
        claim_ids(result.findings, taken)
        ctx.results[module.Result] = result
    return failed


__all__ = ["ANALYZERS", "AnalyzerContext", "AnalyzerResult", "UnknownAnalyzer", "get", "ordered", "run_all"]
