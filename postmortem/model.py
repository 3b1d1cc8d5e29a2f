"""The report's data model: what analysis produces and every renderer consumes.

Renderers (terminal, JSON, Markdown, HTML) take a :class:`Report` and nothing else but
the timeline for plots; they never re-run analysis. ``Report.to_dict()`` is the JSON
contract (``schema_version`` 1, validated by ``postmortem/report.schema.json``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

Severity = Literal["critical", "error", "warning", "info"]
Role = Literal["primary", "secondary", "context"]
Status = Literal["completed", "failed", "hung", "unknown"]
Confidence = Literal["high", "medium", "low"]

SEVERITY_ORDER: dict[str, int] = {"critical": 3, "error": 2, "warning": 1, "info": 0}

#: verdict.category ids (documented one line each in the README).
CATEGORIES: tuple[str, ...] = (
    "data_exhaustion_desync",
    "collective_mismatch",
    "collective_timeout",
    "rank_exception",
    "host_oom",
    "device_oom",
    "accelerator_error",
    "native_crash",
    "comm_init_failure",
    "network_failure",
    "storage_error",
    "teardown_failure",
    "numerical_instability",
    "straggler",
    "environment_config",
    "job_cancelled",
    "hang_unknown",
    "unknown_failure",
    "healthy",
)


def iso(ts: datetime | None) -> str | None:
    """ISO-8601 text for a timestamp, or None."""
    return ts.isoformat() if ts is not None else None


@dataclass
class Evidence:
    """One log line that supports a finding."""

    file: str
    line: int
    rank: int | None
    text: str
    ts: datetime | None = None
    #: a few lines around the evidence line: [(line_no, text)], for the report
    context: list[tuple[int, str]] = field(default_factory=list)
    #: (start, end) character span of the match inside ``text``, for highlighting
    span: tuple[int, int] | None = None


@dataclass
class Finding:
    """A rule or analyzer result: what was seen, on which ranks, why it matters, what to do."""

    id: str  # unique within the report, e.g. "nccl-watchdog-timeout" or "nccl-watchdog-timeout#2"
    rule: str  # rule or analyzer id
    category: str
    severity: Severity
    title: str
    ranks: list[int] = field(default_factory=list)
    first_ts: datetime | None = None
    count: int = 0
    evidence: list[Evidence] = field(default_factory=list)
    explanation: str = ""
    fix: str = ""
    references: list[str] = field(default_factory=list)
    role: Role = "context"
    caused_by: str | None = None
    #: rule role from the rule file: root (a cause) | symptom (an echo) | context
    rule_role: str = "context"
    #: the rule's status: stable, or experimental (examples written here only: it never leads alone)
    rule_status: str = "stable"
    message: str = ""  # rendered one-line message with extracted fields
    fields: dict[str, Any] = field(default_factory=dict)  # extracted named groups and analyzer facts
    nodes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "rule": self.rule,
            "category": self.category,
            "severity": self.severity,
            "title": self.title,
            "ranks": sorted(self.ranks),
            "nodes": sorted(self.nodes),
            "first_ts": iso(self.first_ts),
            "count": self.count,
            "message": self.message,
            "evidence": [
                {
                    "file": e.file,
                    "line": e.line,
                    "rank": e.rank,
                    "text": e.text,
                    "ts": iso(e.ts),
                    "context": [[n, t] for n, t in e.context],
                    "span": list(e.span) if e.span else None,
                }
                for e in self.evidence
            ],
            "explanation": self.explanation,
            "fix": self.fix,
            "references": list(self.references),
            "role": self.role,
            "caused_by": self.caused_by,
            "rule_status": self.rule_status,
            "fields": jsonable(self.fields),
        }


@dataclass
class FirstFailure:
    rank: int | None
    ts: datetime | None
    file: str
    line: int
    text: str
    step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "ts": iso(self.ts),
            "file": self.file,
            "line": self.line,
            "text": self.text,
            "step": self.step,
        }


@dataclass
class Verdict:
    status: Status = "unknown"
    category: str = "unknown_failure"
    summary: str = ""
    culprit_ranks: list[int] = field(default_factory=list)
    first_failure: FirstFailure | None = None
    confidence: Confidence = "low"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "category": self.category,
            "summary": self.summary,
            "culprit_ranks": sorted(self.culprit_ranks),
            "first_failure": self.first_failure.to_dict() if self.first_failure else None,
            "confidence": self.confidence,
        }


@dataclass
class RankState:
    rank: int
    node: str | None = None
    last_step: int | None = None
    last_ts: datetime | None = None
    exit_code: int | None = None
    state: str = "unknown"  # running | completed | failed | killed | hung | silent | unknown
    stack_group: int | None = None
    silent_s: float | None = None  # seconds between this rank's last event and the job's last event
    step_cadence_s: float | None = None  # median seconds per step

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["last_ts"] = iso(self.last_ts)
        return d


@dataclass
class SkippedFile:
    path: str
    reason: str


@dataclass
class JobInfo:
    path: str
    world_size: int | None = None
    nodes: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    files_parsed: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    start: datetime | None = None
    end: datetime | None = None
    versions: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    families: dict[str, int] = field(default_factory=dict)  # files by family
    #: non-fatal notes about how the input was read (partly decoded files, truncated archives ...)
    notes: list[SkippedFile] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "world_size": self.world_size,
            "nodes": list(self.nodes),
            "ranks": list(self.ranks),
            "files": {
                "parsed": self.files_parsed,
                "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
                "notes": [{"path": s.path, "reason": s.reason} for s in self.notes],
                "by_family": dict(sorted(self.families.items())),
            },
            "start": iso(self.start),
            "end": iso(self.end),
            "versions": dict(sorted(self.versions.items())),
            "env": dict(sorted(self.env.items())),
            "config": jsonable(self.config),
        }


@dataclass
class StackGroup:
    """Ranks whose main-thread py-spy stacks are the same after normalisation."""

    id: int
    ranks: list[int]
    frames: list[str]  # innermost first, normalised
    waits_in: str  # barrier | all_reduce | forward | dataloader | checkpoint | ... | unknown
    minority: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Report:
    tool_version: str
    job: JobInfo
    verdict: Verdict
    ranks: list[RankState] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    stack_groups: list[StackGroup] = field(default_factory=list)
    #: free-form analyzer facts for renderers (collective wavefront, fingerprint diff table ...)
    facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": "1",
            "tool": {"name": "postmortem", "version": self.tool_version},
            "job": self.job.to_dict(),
            "verdict": self.verdict.to_dict(),
            "ranks": [r.to_dict() for r in sorted(self.ranks, key=lambda r: r.rank)],
            "findings": [f.to_dict() for f in self.findings],
            "stack_groups": [g.to_dict() for g in self.stack_groups],
            "facts": jsonable(self.facts),
        }


def jsonable(value: Any) -> Any:
    """Make analyzer facts JSON-safe and deterministic (datetimes to ISO, sets sorted, dataclasses as dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [jsonable(v) for v in sorted(value, key=str)]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value
