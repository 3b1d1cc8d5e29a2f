"""The verdict: one pass over all the evidence, after every analyzer has run.

:func:`diagnose` runs the analyzers over the timeline and the rule findings, then
:func:`decide` weighs everything once, in this order, each step a module of this package:

1. ``primary``: the earliest cause among the findings, and what follows from it (the cascade);
2. the job's status (job-status analyzer) and the ``category`` it makes of the primary;
3. the ``culprits`` the category's best witness names;
4. the flight-recorder dumps weighed against the logs (``agreement``): adopted when the logs
   name nobody, a finding and a doubt when they disagree;
5. the ``first`` failure, the ``confidence``, the ``summary`` and the per-rank table (``ranks``).

Nothing changes the report after :func:`decide` returns it, and each piece of evidence is
counted once. Everything is ordered explicitly: the same input gives the same report.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime
from types import ModuleType
from typing import Any

import polars as pl

from postmortem.analyzers import (
    ANALYZERS,
    clock_skew,
    exit_codes,
    first_failure,
    flight_recorder,
    job_status,
    progress,
    run_all,
    stack_groups,
)
from postmortem.analyzers._common import event_times, rank_nodes, world_ranks
from postmortem.analyzers.base import AnalyzerContext, claim_ids
from postmortem.model import SEVERITY_ORDER, Finding, FirstFailure, JobInfo, Report, SkippedFile, Verdict
from postmortem.schema import TIMELINE_COLUMNS, conform
from postmortem.verdict.agreement import adopted_category, agreement_of, disagreement_finding, lead_finding
from postmortem.verdict.category import status_and_category
from postmortem.verdict.confidence import confidence_of
from postmortem.verdict.culprits import culprits_of
from postmortem.verdict.first import first_failure as first_failure_of
from postmortem.verdict.primary import cascade, finding_time
from postmortem.verdict.ranks import rank_states
from postmortem.verdict.summary import summary_of

#: Categories whose culprits come from cross-rank structure (fingerprints, data counts, connection
#: lists, collective state, stacks), not from who printed an error first: the order of the first
#: errors does not put them in doubt.
STRUCTURAL = {
    "collective_mismatch", "data_exhaustion_desync", "comm_init_failure", "straggler", "collective_timeout",
    "hang_unknown", "healthy",
}


def diagnose(
    timeline: pl.DataFrame,
    rule_findings: list[Finding],
    job: JobInfo,
    tool_version: str,
    *,
    analyzers: dict[str, ModuleType] | None = None,
) -> Report:
    """Analyze ``timeline`` across ranks and return the full report.

    Args:
        timeline: the job's events (``postmortem.schema`` columns; missing columns are filled).
        rule_findings: findings of the data rules; they are copied, never modified.
        job: what is known about the job; empty ``ranks``/``nodes``/``start``/``end`` are filled in.
        tool_version: written into the report.
        analyzers: the analyzers to run (default: all of them, in registry order).
    """
    tl = timeline if tuple(timeline.columns) == TIMELINE_COLUMNS else conform(timeline)
    job = _complete_job(job, tl)
    ctx = AnalyzerContext(timeline=tl, job=job, rule_findings=[copy.deepcopy(f) for f in rule_findings])
    failures = run_all(ctx, analyzers)
    if failures:
        notes = [SkippedFile(path=f"analyzer {aid}", reason=f"failed on this job: {why}") for aid, why in failures]
        ctx.job = dataclasses.replace(job, notes=[*job.notes, *notes])
    return decide(ctx, tool_version)


def decide(ctx: AnalyzerContext, tool_version: str) -> Report:
    """The verdict over everything in ``ctx`` (whose analyzers have run), as a finished report."""
    fr = ctx.get(flight_recorder.Result)
    dump_ids = {f.id for f in fr.findings}
    findings = ctx.findings()
    log_findings = [f for f in findings if f.id not in dump_ids]  # the dumps are weighed separately (step 4)
    skew = ctx.get(clock_skew.Result)
    nodes = rank_nodes(ctx.timeline)
    lines = event_times(ctx.timeline, ctx.cache)
    times = {f.id: finding_time(f, skew, nodes, lines) for f in findings}
    status_facts = ctx.get(job_status.Result)
    groups = ctx.get(stack_groups.Result).groups

    # 1-3: what the logs say
    status = status_facts.status
    chain = cascade(log_findings, times, hung=status == "hung", margin_s=skew.uncertainty_s)
    status, category = status_and_category(
        status, chain.primary, groups, primary_ts=chain.times.get(chain.primary.id) if chain.primary else None,
        training_finished_ts=status_facts.training_finished_ts,
        last_progress_ts=ctx.get(progress.Result).last_progress_ts, finished_at=ctx.get(progress.Result).finished_at,
        empty=_nothing_read(ctx),
    )
    culprits = culprits_of(ctx, category, chain.primary, groups)
    roles = dict(chain.roles)

    # 4: what the dumps say, against it
    agreement = agreement_of(culprits, category, status, fr)
    primary, tier = chain.primary, chain.tier
    extra: list[Finding] = []
    if agreement.adopted:
        culprits = fr.culprits
        if status == "unknown" and fr.waiting:
            status = "hung"  # the dumps were taken while ranks waited in collectives
        category = adopted_category(category, fr)
        lead = lead_finding(fr)
        if lead is not None:
            for fid, (role, _) in roles.items():
                if role == "primary":
                    roles[fid] = ("secondary", lead.id)
            roles[lead.id] = ("primary", None)
            primary, tier = lead, "flight-recorder"
    elif agreement.conflict:
        extra.append(disagreement_finding(category, fr, agreement))
        claim_ids(extra, {f.id for f in findings})
    for f in findings:
        if f.id in roles:
            f.role, f.caused_by = roles[f.id]  # type: ignore[assignment]
        elif f.id not in dump_ids:
            f.role, f.caused_by = "context", None

    # 5: where it began, how sure we are, in words
    first = first_failure_of(ctx, category, primary, culprits)
    order = ctx.get(first_failure.Result)
    ambiguous = (
        order.ambiguous
        and first is not None
        and first.rank is not None  # no rank claimed first, nothing to doubt
        and category not in STRUCTURAL
        and _ambiguity_applies(order, first)
        # torchrun's "Root Cause (first observed failure)" settles the order the clocks cannot
        and first.rank != ctx.get(exit_codes.Result).root_cause_rank
    )
    # doubt about who was first lowers confidence only if the other candidate is not a culprit too
    doubt = ambiguous and (order.runner_up or {}).get("rank") not in culprits
    confidence = confidence_of(
        ctx, category, primary, tier, culprits, doubts=int(doubt) + int(agreement.conflict),
        any_findings=bool(findings),
    )
    if agreement.adopted:
        text = fr.verdict.get("text") or ""
        summary = text[:1].upper() + text[1:] + ("; the job hung." if status == "hung" else ".")
    else:
        summary = summary_of(ctx, status, category, primary, culprits, first, groups)
        if ambiguous and order.clause:
            summary = summary.rstrip(".") + f"; order uncertain: {order.clause}."
        if agreement.conflict:
            summary = summary.rstrip() + " " + agreement.note
    verdict = Verdict(
        status=status,  # type: ignore[arg-type]
        category=category,
        summary=summary,
        culprit_ranks=culprits,
        first_failure=first,
        confidence=confidence,  # type: ignore[arg-type]
    )
    all_findings = findings + extra
    facts: dict[str, Any] = {aid: ctx.get(module.Result).facts() for aid, module in ANALYZERS.items()}
    facts["verdict"] = {
        "primary": primary.id if primary else None,
        "tier": tier,
        "ordering_ambiguous": ambiguous,
        "ordering_note": order.note if ambiguous else "",
        "status_reason": status_facts.reason,
        "agreement": dataclasses.asdict(agreement) if fr.dumps else None,
    }
    return Report(
        tool_version=tool_version,
        job=ctx.job,
        verdict=verdict,
        ranks=rank_states(ctx, verdict, all_findings),
        findings=_ordered(all_findings, primary, times),
        stack_groups=groups,
        facts=facts,
    )


def _nothing_read(ctx: AnalyzerContext) -> bool:
    """No line at all: no file was parsed and the timeline is empty. Files whose every line was
    plain chatter (dropped before the timeline) were read: their job ran and said nothing wrong."""
    return ctx.job.files_parsed == 0 and ctx.timeline.filter(pl.col("message").is_not_null()).is_empty()


def _ambiguity_applies(order: first_failure.Result, first: FirstFailure) -> bool:
    """The first-failure analyzer's doubt matters when its earliest event is the verdict's first failure."""
    earliest = order.earliest or {}
    runner = order.runner_up or {}
    return (earliest.get("file"), earliest.get("line")) == (first.file, first.line) or runner.get("rank") == first.rank


def _complete_job(job: JobInfo, tl: pl.DataFrame) -> JobInfo:
    """Fill the job's ranks, nodes, start and end from the timeline where the caller left them empty."""
    ranks = job.ranks or world_ranks(job, tl)
    nodes = job.nodes or sorted(str(n) for n in tl.get_column("node").drop_nulls().unique())
    start = job.start if job.start is not None else tl.get_column("ts").min()
    end = job.end if job.end is not None else tl.get_column("ts").max()
    return dataclasses.replace(job, ranks=list(ranks), nodes=list(nodes), start=start, end=end)


def _ordered(findings: list[Finding], primary: Finding | None, times: dict[str, datetime | None]) -> list[Finding]:
    """Primary first, then by severity, role (secondary before context), time and id."""
    role_rank = {"primary": 0, "secondary": 1, "context": 2}

    def key(f: Finding) -> tuple:
        t = times.get(f.id) or f.first_ts
        return (
            0 if primary is not None and f.id == primary.id else 1,
            -SEVERITY_ORDER.get(f.severity, 0),
            role_rank.get(f.role, 3),
            t is None,
            t.isoformat() if t is not None else "",
            f.id,
        )

    return sorted(findings, key=key)
