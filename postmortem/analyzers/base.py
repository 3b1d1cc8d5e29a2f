"""What every analyzer receives and returns.

An analyzer is a module with ``ID``, ``TITLE`` and ``run(ctx) -> AnalyzerResult``
(yamllint's protocol). Analyzers run in registry order; each sees the results of the
ones before it in ``ctx.results``, so later analyzers build on earlier facts (job
status reads progress and exit codes, cascade reads everything).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from postmortem.model import Finding, JobInfo


@dataclass
class AnalyzerResult:
    """One analyzer's output: findings in the rule engine's shape, plus facts.

    ``facts`` is JSON-safe (dicts, lists, numbers, strings, datetimes) and lands in
    ``Report.facts[ID]`` for renderers; ``data`` holds typed objects for later
    analyzers and the verdict and is not serialized.
    """

    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnalyzerContext:
    """The input of one diagnosis: the timeline, the job, the rule findings, earlier results."""

    timeline: pl.DataFrame
    job: JobInfo
    rule_findings: list[Finding] = field(default_factory=list)
    results: dict[str, AnalyzerResult] = field(default_factory=dict)
    #: derived tables shared by analyzers (computed once per diagnosis)
    cache: dict[str, Any] = field(default_factory=dict)

    def result(self, analyzer_id: str) -> AnalyzerResult:
        """An earlier analyzer's result, or an empty one when it did not run."""
        return self.results.get(analyzer_id) or AnalyzerResult()

    def findings(self) -> list[Finding]:
        """Rule findings followed by every analyzer finding produced so far, in run order."""
        out = list(self.rule_findings)
        for res in self.results.values():
            out.extend(res.findings)
        return out
