"""What every analyzer receives and returns.

An analyzer is a module with ``ID`` (its module name with ``-`` for ``_``), ``TITLE``,
``NEEDS`` (the analyzer modules whose results it reads), a frozen ``Result`` dataclass and
``run(ctx) -> Result`` — yamllint's protocol with typed results. The registry
(:mod:`postmortem.analyzers`) orders analyzers by their needs; each reads earlier results with
``ctx.get(other.Result)``, typed, never by string keys.

A result's fields are its facts: :meth:`AnalyzerResult.facts` serialises them (without the
findings) into ``Report.facts[ID]`` for the report. An analyzer that raises does not take the
analysis down: its result is the empty default and the report gets a note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import polars as pl

from postmortem.model import Finding, JobInfo, jsonable


@dataclass(frozen=True)
class AnalyzerResult:
    """One analyzer's output: findings in the rule engine's shape, and typed facts (subclass fields).

    Every field of a subclass has a default, so that an analyzer that found nothing — or failed —
    has a well-defined empty result.
    """

    findings: tuple[Finding, ...] = ()

    def facts(self) -> dict[str, Any]:
        """The result's fields but the findings, JSON-safe, for ``Report.facts``."""
        return {
            f.name: jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name != "findings" and f.metadata.get("report", True)
        }


def internal(default: Any = None, *, factory: Any = None) -> Any:
    """A result field other analyzers read but the report does not carry (objects, big maps)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"report": False})
    return field(default=default, metadata={"report": False})


R = TypeVar("R", bound=AnalyzerResult)


def claim_ids(findings: Iterable[Finding], taken: set[str]) -> None:
    """Suffix ``#2``, ``#3`` ... onto ids already in ``taken``, in order, and add them to it."""
    for f in findings:
        if f.id in taken:
            n = 2
            while f"{f.id}#{n}" in taken:
                n += 1
            f.id = f"{f.id}#{n}"
        taken.add(f.id)


@dataclass
class AnalyzerContext:
    """The input of one analysis: the timeline, the job, the rule findings, earlier results."""

    timeline: pl.DataFrame
    job: JobInfo
    rule_findings: list[Finding] = field(default_factory=list)
    results: dict[type[AnalyzerResult], AnalyzerResult] = field(default_factory=dict)
    #: derived tables shared by analyzers (computed once per analysis)
    cache: dict[str, Any] = field(default_factory=dict)

    def get(self, kind: type[R]) -> R:
        """An earlier analyzer's result, or the empty result when it did not run (or failed)."""
        found = self.results.get(kind)
        return found if isinstance(found, kind) else kind()

    def findings(self) -> list[Finding]:
        """Rule findings followed by every analyzer finding produced so far, in run order."""
        out = list(self.rule_findings)
        for res in self.results.values():
            out.extend(res.findings)
        return out
