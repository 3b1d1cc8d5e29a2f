"""Cross-rank diagnosis: run the analyzers, pick the cause, write the verdict.

:func:`diagnose` is the one entry point: timeline + rule findings + job in, :class:`Report`
out. The verdict follows from the cascade analyzer's primary finding:

* the category is the primary's category; when a rank's death or a collective mismatch
  explains the timeouts, it is that cause, and the timeouts are secondary;
* a hang with no cause is ``straggler`` when py-spy shows a minority group elsewhere, else
  ``hang_unknown``; a completed job is ``healthy``;
* culprit ranks come from the analyzer that knows them best for the category (the fingerprint
  diff for a mismatch, the ranks that ran out of data, the ranks that never connected, the
  ranks that never entered the collective) and otherwise from the primary's own lines;
* the first failure is the primary's earliest line on a culprit rank.

Everything is ordered explicitly, so the same input gives the same report.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from postmortem.analyzers import ANALYZERS, clock_skew
from postmortem.analyzers._common import (
    CASCADE_TEXT,
    SEVERE,
    event_time,
    event_times,
    hms,
    rank_nodes,
    tied_across_nodes,
    world_ranks,
)
from postmortem.analyzers.base import AnalyzerContext
from postmortem.analyzers.progress import progress_rows
from postmortem.model import (
    CATEGORIES,
    SEVERITY_ORDER,
    Finding,
    FirstFailure,
    JobInfo,
    RankState,
    Report,
    StackGroup,
    Verdict,
)
from postmortem.ranges import format_ranks, plural_ranks
from postmortem.schema import TIMELINE_COLUMNS, conform

#: Leading launcher prefixes, log headers and ``[Rank N]`` tags, stripped from a line quoted in a summary.
_HEADERS = re.compile(
    r"^(?:\s*(?:\[(?:rank|default)?\d+\]:?|\[[IWEFC]\d{3,4} [^\]]*\]|[IWEFC]\d{3,4} \S+ \d+ \S+\]|"
    r"\[(?:PG [^\]]*|Rank \d+|ERROR|WARNING|INFO)\]|\[\d{4}-\d\d-\d\d[^\]]*\](?:\[[^\]]*\])*(?: -)?|"
    r"\d{4}-\d\d-\d\d[- ]\d\d:\d\d:\d\d\S*)\s*)+"
)
#: A progress line printed while its step is still running.
_MID_STEP = re.compile(r"(?i)\b(?:forward|backward)\b(?! ?(?:and backward )?(?:time|ms|s\b))|\bstart(?:ing|ed)? step\b|\bbegin")
#: The exception type at the start of an exception line (``torch.OutOfMemoryError: ...`` -> OutOfMemoryError).
_EXC_NAME = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))\b")
#: A py-spy frame inside an evaluation loop.
_EVAL_FRAME = re.compile(r"(?i)^(?:\w+\.)*\w*eval\w* \(")
#: Rank lists longer than this many characters are summarised by their count in the summary.
_LONG = 40
#: Categories whose culprit is "nobody in particular".
_NO_CULPRIT = {"healthy", "hang_unknown", "job_cancelled", "unknown_failure"}
#: Categories whose culprits come from cross-rank structure (fingerprints, data counts, connection
#: lists, collective state, stacks), not from who printed an error first.
_STRUCTURAL = {
    "collective_mismatch", "data_exhaustion_desync", "comm_init_failure", "straggler", "collective_timeout",
    "hang_unknown", "healthy",
}
#: Generic categories that become ``teardown_failure`` when they happen after training finished.
_TEARDOWN_GENERIC = {
    "rank_exception", "unknown_failure", "collective_timeout", "accelerator_error", "network_failure", "native_crash",
}
#: Categories a job can have and still complete every step (NaN weights, a rank that set a slow pace).
_COMPLETED_BUT_BROKEN = {"numerical_instability", "straggler"}
#: Categories that rest on inference rather than on an error line naming the cause.
_INFERRED = {"straggler", "collective_timeout", "hang_unknown", "unknown_failure"}


def diagnose(timeline: pl.DataFrame, rule_findings: list[Finding], job: JobInfo, tool_version: str) -> Report:
    """Analyze ``timeline`` across ranks and return the full report.

    Args:
        timeline: the job's events (``postmortem.schema`` columns; missing columns are filled).
        rule_findings: findings of the data rules; they are copied, never modified.
        job: what is known about the job; empty ``ranks``/``nodes``/``start``/``end`` are filled in.
        tool_version: written into the report.
    """
    tl = timeline if tuple(timeline.columns) == TIMELINE_COLUMNS else conform(timeline)
    job = _complete_job(job, tl)
    findings = [copy.deepcopy(f) for f in rule_findings]
    taken: set[str] = set()
    _unique_ids(findings, taken)
    ctx = AnalyzerContext(timeline=tl, job=job, rule_findings=findings)
    for analyzer_id, module in ANALYZERS.items():
        result = module.run(ctx)
        _unique_ids(result.findings, taken)
        ctx.results[analyzer_id] = result

    cascade = ctx.result("cascade").data
    roles: dict[str, tuple[str, str | None]] = cascade.get("roles", {})
    all_findings = ctx.findings()
    for f in all_findings:
        f.role, f.caused_by = roles.get(f.id, ("context", None))  # type: ignore[assignment]
    primary: Finding | None = cascade.get("primary")
    verdict, notes = _verdict(ctx, primary, cascade.get("tier"))
    groups: list[StackGroup] = ctx.result("stack-groups").data.get("groups", [])
    facts: dict[str, Any] = {aid: res.facts for aid, res in ctx.results.items()}
    facts["verdict"] = notes
    return Report(
        tool_version=tool_version,
        job=job,
        verdict=verdict,
        ranks=_rank_states(ctx, verdict),
        findings=_ordered(all_findings, primary, cascade.get("times", {})),
        stack_groups=groups,
        facts=facts,
    )


def _complete_job(job: JobInfo, tl: pl.DataFrame) -> JobInfo:
    """Fill the job's ranks, nodes, start and end from the timeline where the caller left them empty."""
    ranks = job.ranks or world_ranks(job, tl)
    nodes = job.nodes or sorted(str(n) for n in tl.get_column("node").drop_nulls().unique())
    start = job.start if job.start is not None else tl.get_column("ts").min()
    end = job.end if job.end is not None else tl.get_column("ts").max()
    return dataclasses.replace(job, ranks=list(ranks), nodes=list(nodes), start=start, end=end)


def _unique_ids(findings: list[Finding], taken: set[str]) -> None:
    """Suffix ``#2``, ``#3`` ... onto ids already used, in order."""
    for f in findings:
        if f.id in taken:
            n = 2
            while f"{f.id}#{n}" in taken:
                n += 1
            f.id = f"{f.id}#{n}"
        taken.add(f.id)


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


# --- the verdict -----------------------------------------------------------------------------


def _verdict(ctx: AnalyzerContext, primary: Finding | None, tier: str | None) -> tuple[Verdict, dict[str, Any]]:
    status: str = ctx.result("job-status").facts.get("status", "unknown")
    groups: list[StackGroup] = ctx.result("stack-groups").data.get("groups", [])
    category = _category(status, primary, groups)
    finished = ctx.result("job-status").facts.get("training_finished_ts")
    when = (ctx.result("cascade").data.get("times") or {}).get(primary.id) if primary else None
    if category in _TEARDOWN_GENERIC and finished is not None and when is not None and when > finished:
        # training had finished: a generic failure after that is a teardown failure
        category = "teardown_failure"
    culprits = _culprits(ctx, category, primary, groups)
    first = _first_failure(ctx, category, primary, culprits)
    order = ctx.result("first-failure").facts
    ambiguous = (
        bool(order.get("ambiguous"))
        and first is not None
        and first.rank is not None  # no rank claimed first, nothing to doubt
        and category not in _STRUCTURAL
        and _ambiguity_applies(order, first)
    )
    # doubt about who was first lowers confidence only if the other candidate is not a culprit too
    doubt = ambiguous and (order.get("runner_up") or {}).get("rank") not in culprits
    confidence = _confidence(ctx, category, primary, tier, doubt, culprits)
    summary = _summary(ctx, status, category, primary, culprits, first, groups)
    if ambiguous and order.get("clause"):
        summary = summary.rstrip(".") + f"; order uncertain: {order['clause']}."
    notes = {
        "primary": primary.id if primary else None,
        "tier": tier,
        "ordering_ambiguous": ambiguous,
        "ordering_note": order.get("note") if ambiguous else "",
        "status_reason": ctx.result("job-status").facts.get("reason"),
    }
    verdict = Verdict(
        status=status,  # type: ignore[arg-type]
        category=category,
        summary=summary,
        culprit_ranks=culprits,
        first_failure=first,
        confidence=confidence,  # type: ignore[arg-type]
    )
    return verdict, notes


def _category(status: str, primary: Finding | None, groups: list[StackGroup]) -> str:
    if status == "completed":
        # a run that finished with NaN weights still failed its purpose
        if primary is not None and primary.category in _COMPLETED_BUT_BROKEN:
            return primary.category
        return "healthy"
    if primary is None:
        if status == "hung":
            return "straggler" if any(g.minority for g in groups) else "hang_unknown"
        return "unknown_failure"
    category = primary.category if primary.category in CATEGORIES else "unknown_failure"
    if category == "hang_unknown" and any(g.minority for g in groups):
        return "straggler"
    if primary.rule == "stack-groups" and _extra_collective(groups):
        return "data_exhaustion_desync"
    if category == "healthy":  # a rule cannot make a failed or hung job healthy
        return "hang_unknown" if status == "hung" else "unknown_failure"
    return category


_COLLECTIVE_WAITS = {"barrier", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "collective"}


def _extra_collective(groups: list[StackGroup]) -> bool:
    """The minority waits in a collective the majority is not in: the ranks disagree on how many
    collectives to run (one rank ran out of data, or has one more eval batch), not a slow rank."""
    minority = [g for g in groups if g.minority]
    majority = [g for g in groups if not g.minority]
    return bool(minority and majority) and all(
        g.waits_in in _COLLECTIVE_WAITS and all(g.frames[:1] != m.frames[:1] for m in majority) for g in minority
    )


def _culprits(ctx: AnalyzerContext, category: str, primary: Finding | None, groups: list[StackGroup]) -> list[int]:
    if category in _NO_CULPRIT:
        return []
    collective = ctx.result("collective-sequence").facts.get("main") or {}
    if category == "collective_mismatch":
        deviants = ctx.result("collective-mismatch").facts.get("deviants")
        if deviants:
            return sorted(deviants)
    if category == "data_exhaustion_desync":
        drained = ctx.result("end-of-data").facts.get("drained")
        if drained:
            return sorted(drained)
        minority = sorted(r for g in groups if g.minority for r in g.ranks)
        if minority:
            return minority
    if category == "comm_init_failure":
        never = ctx.result("hccl-ranktable").facts.get("never_connected")
        if never:
            return sorted(never)
    if category in ("straggler", "collective_timeout"):
        if collective.get("stragglers"):
            return sorted(collective["stragglers"])
        minority = sorted(r for g in groups if g.minority for r in g.ranks)
        if minority:
            return minority
        if category == "collective_timeout":
            return []
    if primary is None:
        return []
    named = primary.fields.get("culprit_ranks") if isinstance(primary.fields, dict) else None
    if named is not None:  # an analyzer that names no culprit means it: none stands out
        return sorted(int(r) for r in named)
    direct = sorted({e.rank for e in primary.evidence if e.rank is not None and not CASCADE_TEXT.search(e.text or "")})
    return direct or sorted(primary.ranks)


def _first_failure(
    ctx: AnalyzerContext, category: str, primary: Finding | None, culprits: list[int]
) -> FirstFailure | None:
    if category in ("healthy", "hang_unknown") or primary is None:
        return None
    skew = ctx.result(clock_skew.ID).data
    nodes = rank_nodes(ctx.timeline)
    evidence = [e for e in primary.evidence if e.file]
    on_culprit = [e for e in evidence if e.rank in culprits]
    pool = on_culprit or evidence
    if not pool:
        return None
    file_nodes = _file_nodes(ctx.timeline, {e.file for e in pool})
    times = event_times(ctx.timeline, ctx.cache)

    def where(e) -> tuple[datetime | None, str | None]:
        node = nodes.get(e.rank) if e.rank is not None else None
        node = node or file_nodes.get(e.file)
        return clock_skew.corrected(event_time(e, times), node, skew), node

    def key(e) -> tuple:
        t = where(e)[0]
        return (t is None, t.isoformat() if t is not None else "", e.file, e.line)

    ordered = sorted(pool, key=key)
    e = ordered[0]
    rank = e.rank
    if not culprits and len({o.rank for o in ordered if o.rank is not None}) > 1:
        rank = None  # several ranks and none singled out (a reduced NaN loss, a fabric timeout)
    elif tied_across_nodes(where(e), [where(o) for o in ordered[1:] if o.rank != e.rank], skew.get("margin_s")):
        rank = None  # another node's culprit may have been first: the clocks cannot tell
    # a rank stuck in an evaluation is still in the step it evaluates after
    groups: list[StackGroup] = ctx.result("stack-groups").data.get("groups", [])
    in_eval = primary.rule == "stack-groups" and any(
        rank in g.ranks and any(_EVAL_FRAME.search(f) for f in g.frames) for g in groups
    )
    step = _failing_step(ctx, rank, e.ts, e.file, e.line, in_step=in_eval)
    return FirstFailure(rank=rank, ts=e.ts, file=e.file, line=e.line, text=e.text, step=step)


def _file_nodes(tl: pl.DataFrame, files: set[str]) -> dict[str, str]:
    """The node each of ``files`` belongs to (its most common node), for evidence without a rank."""
    rows = (
        tl.filter(pl.col("file").is_in(sorted(files)) & pl.col("node").is_not_null())
        .group_by("file", "node")
        .agg(pl.len().alias("n"))
        .sort(["file", "n", "node"], descending=[False, True, False])
        .unique(subset=["file"], keep="first", maintain_order=True)
    )
    return {f: n for f, n in zip(rows["file"], rows["node"], strict=True)}


def _failing_step(
    ctx: AnalyzerContext, rank: int | None, ts: datetime | None, file: str, line: int, *, in_step: bool = False
) -> int | None:
    """The step a failure happened in: the line's own step, else the step after the last one reported
    before it (the last one itself when ``in_step``: the failure is known to be inside it)."""
    tl = ctx.timeline
    own = tl.filter((pl.col("file") == file) & (pl.col("line") == line)).get_column("step").drop_nulls()
    if own.len():
        return int(own[0])
    prog = progress_rows(tl.select("rank", "ts", "step", "max_steps", "message"))  # (no copy of the other columns)
    if prog.is_empty():
        return None
    mine = prog.filter(pl.col("rank") == rank) if rank is not None else prog.clear()
    pool = mine if not mine.is_empty() else prog
    if ts is not None:
        # a time printed in whole seconds (error.json, ChildFailedError) covers its whole second
        bound = ts + timedelta(seconds=1) if ts.microsecond == 0 else ts
        before = pool.filter(pl.col("ts").is_null() | (pl.col("ts") < bound) | (pl.col("ts") == ts))
        pool = before if not before.is_empty() else pool.clear()
    if pool.is_empty():
        return None
    last = int(pool.get_column("step").max())  # type: ignore[arg-type]
    # "step 1: forward done" is printed inside step 1, not after it
    latest = pool.filter(pl.col("step") == last).get_column("message").drop_nulls()
    if in_step or (latest.len() and _MID_STEP.search(latest[-1])):
        return last
    facts = ctx.result("progress").facts
    interval = facts.get("step_interval")
    max_steps = facts.get("max_steps")
    finished = ctx.result("job-status").facts.get("training_finished_ts")
    if (max_steps is not None and last >= max_steps) or (finished is not None and ts is not None and ts > finished):
        return None  # failed after training finished (teardown, final save): no training step failed
    return last + 1 if interval in (None, 1) else None


def _ambiguity_applies(order: dict[str, Any], first: FirstFailure) -> bool:
    """The first-failure analyzer's doubt matters when its earliest event is the verdict's first failure."""
    earliest = order.get("earliest") or {}
    runner = order.get("runner_up") or {}
    return (earliest.get("file"), earliest.get("line")) == (first.file, first.line) or runner.get("rank") == first.rank


def _confidence(
    ctx: AnalyzerContext,
    category: str,
    primary: Finding | None,
    tier: str | None,
    ambiguous: bool,
    culprits: list[int],
) -> str:
    levels = ["low", "medium", "high"]
    if category == "healthy":
        completion = ctx.result("job-status").facts.get("completion_lines", 0)
        level = 2 if completion or not ctx.findings() else 1
        return levels[level]
    if category in ("hang_unknown", "unknown_failure") or primary is None:
        return "low"
    level = 2
    if category in _INFERRED or tier != "root":
        level = 1
    if isinstance(primary.fields, dict) and primary.fields.get("inferred"):
        level = min(level, 1)
    if category == "straggler" and (ctx.result("collective-sequence").facts.get("main") or {}).get(
        "straggler_evidence"
    ) == "status":
        level = 2
    if category == "data_exhaustion_desync":
        eod = ctx.result("end-of-data").facts
        corroborated = bool(eod.get("supply", {}).get("supported_steps")) or any(
            g.minority or g.waits_in == "barrier" for g in ctx.result("stack-groups").data.get("groups", [])
        )
        level = 2 if corroborated else 1
    if ambiguous:
        level -= 1
    if not culprits and category not in _NO_CULPRIT:
        level = min(level, 1)
    return levels[max(level, 0)]


# --- the one-sentence summary ----------------------------------------------------------------


def _summary(
    ctx: AnalyzerContext,
    status: str,
    category: str,
    primary: Finding | None,
    culprits: list[int],
    first: FirstFailure | None,
    groups: list[StackGroup],
) -> str:
    progress = ctx.result("progress").facts
    nodes = rank_nodes(ctx.timeline)
    world = world_ranks(ctx.job, ctx.timeline)
    collective = ctx.result("collective-sequence").facts.get("main") or {}
    what = _collective_text(collective)

    if category == "healthy":
        steps = progress.get("last_step")
        of = f" of {progress['max_steps']}" if progress.get("max_steps") else ""
        where = f" on {len(world)} rank{'s' if len(world) != 1 else ''}" if world else ""
        return (f"The job completed{where}" + (f", reaching step {steps}{of}" if steps is not None else "")
                + " with no failure.")
    if category == "hang_unknown":
        step = progress.get("last_step")
        when = progress.get("last_progress_ts")
        silent = ctx.result("job-status").facts.get("silence_after_last_step_s")
        text = "The job stopped making progress"
        text += f" after step {step}" if step is not None else ""
        text += f" at {hms(when)}" if when is not None else ""
        text += " with no error and no exit"
        text += f" ({silent:.0f} s of silence before the logs end)" if silent else ""
        return text + "; no cause was found in the logs."

    who = _who(culprits or ([first.rank] if first and first.rank is not None else []), nodes)
    at_step = f" at step {first.step}" if first and first.step is not None else ""
    at_time = f" at {hms(first.ts)}" if first and first.ts is not None else ""
    tail = _consequence(ctx, culprits, collective, what)

    if category == "collective_mismatch":
        fp = ctx.result("collective-mismatch").facts
        table = fp.get("table") or {}
        deviants = fp.get("deviants") or culprits
        others = sorted(r for r in table if r not in deviants)
        head = f"{_who(deviants, nodes) if deviants else who} ran a different collective"
        head += f" than {_ranks_text(others)}" if others else ""
        diff = _fp_diff(table, deviants, others, fp.get("differs") or [])
        return head + (f" ({diff})" if diff else "") + at_time + tail + "."
    if category == "data_exhaustion_desync" and primary is not None and primary.rule == "stack-groups":
        minority = [g for g in groups if g.minority]
        majority = [g for g in groups if not g.minority]
        caller = next((f for f in minority[0].frames[1:] if not f.startswith("_")), None) if minority else None
        text = f"{who} waited in an extra {minority[0].waits_in}" if minority else f"{who} waited in a collective"
        text += f" (from {caller.split(' (')[0]})" if caller else ""
        if majority:
            text += f" that {_ranks_text(majority[0].ranks)} never entered (they were in {majority[0].waits_in})"
        text += f"{at_step}{at_time}"
        return (text + "; the ranks ran different numbers of collectives, typically because their data splits "
                "differ in size" + (", and the job hung." if status == "hung" else f"{tail}."))
    if category == "data_exhaustion_desync":
        eod = ctx.result("end-of-data").facts
        drained = eod.get("drained") or culprits
        first_rank = first.rank if first is not None else None
        step = first.step if first else None
        head = f"{_who(drained, nodes)} ran out of data" if drained else "Ranks ran out of data at different times"
        if first_rank is not None and len(drained) > 1:
            head += f" (rank {first_rank} first{f', at step {step}' if step is not None else ''}{at_time})"
        elif step is not None or at_time:
            head += f"{at_step}{at_time}"
        others = [r for r in world if r not in drained]
        waits = _group_waits(groups, drained, others)
        if others:
            head += f" while {_ranks_text(others, other=True)} kept training{waits}"
        supply = eod.get("supply", {})
        if supply.get("supported_steps") is not None and supply.get("train_iters") is not None:
            head += f"; the data supports {supply['supported_steps']} of train_iters {supply['train_iters']} steps"
        elif eod.get("counts_text", "").startswith("per-node"):
            head += f"; {eod['counts_text']}"
        end = " and the job hung" if status == "hung" else ""
        return head + end + (tail if status != "hung" else "") + "."
    if category == "straggler" and primary is not None and primary.id == "progress:slow-rank":
        f = primary.fields
        field = {"data": "data loading", "compute": "compute"}.get(f.get("kind"), f.get("kind"))
        text = (f"{who} was the straggler: {f['mean_slow_s']:.3f} s per step in {field} against "
                f"{f['mean_others_s']:.3f} s on the other ranks")
        text += ", which waited for it in communication" if f.get("corroborated") else ""
        if status == "completed":
            last = progress.get("last_step")
            return text + (f"; the job completed {last} steps at its pace." if last else "; the job completed at its pace.")
        return text + tail + "."
    if category == "straggler":
        if collective.get("stragglers"):
            return (f"{who} never entered {what}" + (f" (started {hms(collective.get('start_ts'))})"
                    if collective.get("start_ts") else "") + tail + ".")
        minority = [g for g in groups if g.minority]
        majority = [g for g in groups if not g.minority]
        if minority:
            text = f"{who} sat in {minority[0].waits_in} ({minority[0].frames[0] if minority[0].frames else '?'})"
            if majority:
                text += f" while {plural_ranks(majority[0].ranks)} waited in {majority[0].waits_in}"
            return text + (" and the job hung." if status == "hung" else ".")
        return f"{who} fell behind the other ranks{at_step}{at_time}{tail}."
    if category == "collective_timeout" and collective.get("left_early"):
        line = _HEADERS.sub("", first.text).strip() if first is not None else ""
        quote = f" ('{line}')" if line else ""
        after = f" after step {first.step - 1}" if first is not None and first.step else ""
        return f"{who} left the loop early{after}{at_time}{quote}{tail}."
    if category == "collective_timeout":
        timed = collective.get("timed_out") or (primary.ranks if primary else [])
        head = f"{plural_ranks(timed).capitalize()} timed out in {what}" if timed else "Collectives timed out"
        diagnosis = ctx.result("collective-sequence").facts.get("diagnosis")
        if diagnosis == "fabric":
            return head + at_time + " with every rank inside and none missing; suspect the fabric or a device hang."
        return head + at_time + "; no rank-level cause was found."
    if category == "comm_init_failure":
        rt = ctx.result("hccl-ranktable").facts
        if rt.get("never_connected"):
            return (f"{plural_ranks(rt['never_connected']).capitalize()} never connected to the communicator"
                    + (f" ({rt['connected']} of {rt['expected']} connected)" if rt.get("expected") else "")
                    + at_time + "; communicator initialisation failed.")
        if rt.get("missing_count"):
            return (f"{rt['missing_count']} of {rt['expected']} ranks never connected to the communicator{at_time}; "
                    "communicator initialisation failed.")
    if category == "numerical_instability" and primary is not None and primary.rule == "progress":
        metric = primary.fields.get("metric", "loss")
        step = primary.fields.get("first_bad_step")
        ranks = primary.ranks
        if culprits:
            head = f"{who} produced the first non-finite {metric} at step {step}{at_time}; the all-reduce spread it"
            head += " to every rank"
        else:
            head = f"The {metric} became NaN/inf at step {step}{at_time}"
            head += f" on {_ranks_text(ranks)} at once" if ranks else ""
        if status == "completed":
            last = progress.get("last_step")
            return head + (f"; the job still ran to step {last}." if last is not None else "; the job still completed.")
        return head + tail + "."
    if category == "job_cancelled":
        title = primary.title if primary else "the job was stopped"
        return f"The job was cancelled from outside ({_lower_first(title)}){at_time}."
    if category == "unknown_failure" and primary is None:
        if status == "failed":
            return "The job failed, but no failure signature or error line explains why."
        return "The logs show no error, no exit and no completion; the outcome is unknown."
    if category == "teardown_failure":
        last = progress.get("last_step")
        at_step = f" after step {last}" if last is not None else " after training"
    did, note = _what_happened(category, primary, first)
    return f"{who} {did}{at_step}{at_time}{note}{tail}."


def _what_happened(category: str, primary: Finding | None, first: FirstFailure | None) -> tuple[str, str]:
    """(what the culprit did, a note that goes after the time) for the summary sentence."""
    fields = primary.fields if primary and isinstance(primary.fields, dict) else {}
    # the exception on the first failure's own line, not the first one a rule happened to capture
    own = _EXC_NAME.search(_HEADERS.sub("", first.text)) if first is not None else None
    exc = (own.group(1) if own else None) or fields.get("exc_type") or fields.get("exc_name")
    signal = fields.get("signal")
    detail = _detail(primary)
    if category == "host_oom" and signal:
        return f"was killed by {signal}", " (most likely the host OOM killer)"
    phrases = {
        "rank_exception": f"raised {exc}" if exc else f"failed ({detail})",
        "device_oom": "ran out of device memory",
        "host_oom": "ran out of host memory",
        "native_crash": f"crashed with {signal}" if signal else f"crashed in native code ({detail})",
        "accelerator_error": f"hit an accelerator error ({detail})",
        "comm_init_failure": f"failed to initialise the communicator ({detail})",
        "network_failure": f"lost its network connection ({detail})",
        "storage_error": f"hit a storage error ({detail})",
        "teardown_failure": f"failed during teardown ({detail})",
        "numerical_instability": f"went numerically unstable ({detail})",
        "environment_config": f"failed on its environment or configuration ({detail})",
    }
    return phrases.get(category, f"failed ({detail})"), ""


def _detail(primary: Finding | None, width: int = 100) -> str:
    """The primary's own words: its rendered message, else its first line without launcher prefixes."""
    if primary is None:
        return "no details"
    text = primary.message if primary.message and primary.message != primary.title else ""
    if not text and primary.rule == "first-failure" and primary.evidence:
        text = _HEADERS.sub("", primary.evidence[0].text).strip()
    text = text or _lower_first(primary.title)
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _consequence(ctx: AnalyzerContext, culprits: list[int], collective: dict[str, Any], what: str) -> str:
    """'; ranks 0-4, 6, 7 then timed out in ALLREDUCE SeqNum=58' or the agent's SIGTERM."""
    timed = [r for r in collective.get("timed_out", []) if r not in culprits]
    if timed:
        return f"; {_ranks_text(timed, other=True)} then timed out in {what}"
    exits = ctx.result("exit-codes").data.get("ranks", {})
    stopped = sorted(
        r for r, e in exits.items()
        if r not in culprits and ((e.get("signal") in ("SIGTERM", "SIGKILL") and e.get("terminated_by_agent"))
                                  or e.get("exit_code") == -15)
    )
    if stopped:
        return f"; the agent then stopped {_ranks_text(stopped, other=True)} (SIGTERM)"
    return ""


def _who(ranks: list[int], nodes: dict[int, str]) -> str:
    """'Rank 5 (node-1)', 'Ranks 0-3 (node-0)', '12 ranks on 4 nodes' for long lists."""
    if not ranks:
        return "A rank"
    where = sorted({nodes[r] for r in ranks if r in nodes})
    if len(format_ranks(ranks)) > _LONG:
        return f"{len(ranks)} ranks" + (f" on {len(where)} nodes" if len(where) > 1 else "")
    node_text = f" ({', '.join(where[:3])}{', ...' if len(where) > 3 else ''})" if where else ""
    return plural_ranks(ranks).capitalize() + node_text


def _ranks_text(ranks: list[int], other: bool = False) -> str:
    """'ranks 0-2, 4' or, for a long list, 'the other 20 ranks' / '20 ranks'."""
    if len(format_ranks(ranks)) > _LONG:
        return f"the other {len(ranks)} ranks" if other else f"{len(ranks)} ranks"
    return plural_ranks(ranks)


def _collective_text(collective: dict[str, Any]) -> str:
    if not collective:
        return "a collective"
    op, seq = collective.get("op_type"), collective.get("seq")
    return f"{op} SeqNum={seq}" if op else f"SeqNum={seq}"


_FP_LABELS = {"seq": "SequenceNumber", "op_type": "OpType", "shape": "TensorShape", "dtypes": "dtypes", "device": "device"}


def _fp_diff(table: dict[int, dict[str, Any]], deviants: list[int], others: list[int], differs: list[str]) -> str:
    """'SequenceNumber 0 vs 12, OpType GATHER vs _REDUCE_SCATTER_BASE': the fields that differ, the
    deviant's value first (the others' most common value second)."""
    if not deviants or deviants[0] not in table:
        return ""
    mine = table[deviants[0]]
    parts = []
    for field in differs[:3]:
        theirs = [str(table[r].get(field)) for r in others if r in table]
        other = max(sorted(set(theirs)), key=theirs.count) if theirs else None
        value = mine.get(field)
        parts.append(f"{_FP_LABELS[field]} {value if value is not None else 'none'}"
                     + (f" vs {other if other != 'None' else 'none'}" if other is not None else ""))
    return ", ".join(parts)


def _group_waits(groups: list[StackGroup], drained: list[int], others: list[int]) -> str:
    """' (drained ranks wait in barrier, the others in forward)' from the stack groups."""
    def where(ranks: list[int]) -> str | None:
        kinds = sorted({g.waits_in for g in groups if set(g.ranks) & set(ranks)})
        return "/".join(kinds) if kinds else None

    a, b = where(drained), where(others)
    if a and b:
        return f" (stacks: {a} vs {b})"
    return ""


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text else text


# --- per-rank table --------------------------------------------------------------------------


def _rank_states(ctx: AnalyzerContext, verdict: Verdict) -> list[RankState]:
    world = world_ranks(ctx.job, ctx.timeline)
    progress = ctx.result("progress").facts.get("ranks", {})
    exits = ctx.result("exit-codes").data.get("ranks", {})
    rank_group = ctx.result("stack-groups").data.get("rank_group", {})
    silent = ctx.result("job-status").facts.get("silent_s", {})
    threshold = ctx.result("job-status").facts.get("silence_threshold_s") or 0.0
    nodes = rank_nodes(ctx.timeline)
    erring = {
        r for f in ctx.findings()
        if f.severity in SEVERE and f.rule_role != "context" and f.role != "context"
        for r in f.ranks
    }
    culprits = set(verdict.culprit_ranks)
    # ranks that left a collective loop on purpose finished; the others then waited for them
    left_early = set((ctx.result("collective-sequence").facts.get("main") or {}).get("left_early") or [])
    out = []
    for rank in sorted(set(world) | set(progress) | set(exits)):
        p = progress.get(rank, {})
        e = exits.get(rank, {})
        code = e.get("exit_code")
        stopped = code == -15 or (code == -9 and e.get("terminated_by_agent"))
        if code == 0 or rank in left_early:
            state = "completed"
        elif code is not None and rank not in culprits and stopped:
            state = "killed"
        elif code is not None:
            state = "failed"
        elif e.get("terminated_by_agent"):
            state = "killed"
        elif verdict.status == "hung":
            state = "hung"
        elif verdict.status == "completed":
            state = "completed"
        elif verdict.status == "failed":
            quiet = silent.get(rank) is None or silent[rank] > threshold
            state = "failed" if rank in culprits or rank in erring else ("silent" if quiet else "unknown")
        else:
            state = "running" if p.get("last_step") is not None else "unknown"
        out.append(
            RankState(
                rank=rank,
                node=nodes.get(rank),
                last_step=p.get("last_step"),
                last_ts=p.get("last_ts"),
                exit_code=code,
                state=state,
                stack_group=rank_group.get(rank),
                silent_s=silent.get(rank),
                step_cadence_s=p.get("cadence_s"),
            )
        )
    return out
