"""The verdict's one-paragraph summary: who did what, when, and what followed, in the job's own numbers.

One sentence per category, built from the same facts the verdict rests on (culprits, first
failure, the collective the others waited in, the data arithmetic). Long rank lists become
counts; quoted lines lose their launcher prefixes.
"""

from __future__ import annotations

import re
from typing import Any

from postmortem.analyzers import (
    collective_mismatch,
    collective_sequence,
    end_of_data,
    exit_codes,
    hccl_ranktable,
    job_status,
    progress,
)
from postmortem.analyzers._common import hms, rank_nodes, world_ranks
from postmortem.analyzers.base import AnalyzerContext
from postmortem.analyzers.collective_sequence import Collective
from postmortem.model import Finding, FirstFailure, StackGroup
from postmortem.ranges import format_ranks, plural_ranks

#: Leading launcher prefixes, log headers and ``[Rank N]`` tags, stripped from a line quoted in a summary.
HEADERS = re.compile(
    r"^(?:\s*(?:\[(?:rank|default)?\d+\]:?|\[[IWEFC]\d{3,4} [^\]]*\]|[IWEFC]\d{3,4} \S+ \d+ \S+\]|"
    r"\[(?:PG [^\]]*|Rank \d+|ERROR|WARNING|INFO)\]|\[\d{4}-\d\d-\d\d[^\]]*\](?:\[[^\]]*\])*(?: -)?|"
    r"\d{4}-\d\d-\d\d[- ]\d\d:\d\d:\d\d\S*)\s*)+"
)
#: The exception type at the start of an exception line (``torch.OutOfMemoryError: ...`` -> OutOfMemoryError).
_EXC_NAME = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))\b")
#: Rank lists longer than this many characters are summarised by their count in the summary.
_LONG = 40


def summary_of(
    ctx: AnalyzerContext,
    status: str,
    category: str,
    primary: Finding | None,
    culprits: list[int],
    first: FirstFailure | None,
    groups: list[StackGroup],
) -> str:
    prog = ctx.get(progress.Result)
    nodes = rank_nodes(ctx.timeline)
    world = world_ranks(ctx.job, ctx.timeline)
    collective = ctx.get(collective_sequence.Result).main
    what = _collective_text(collective)

    if category == "healthy":
        steps = prog.last_step
        of = f" of {prog.max_steps}" if prog.max_steps else ""
        where = f" on {len(world)} rank{'s' if len(world) != 1 else ''}" if world else ""
        if status != "completed":
            ran = f"Training ran{where} to step {steps}{of}" if steps is not None else f"The job ran{where}"
            return (ran + " with no error, no failed exit and no stall; no completion line seen, so the logs may "
                    "end while the job was still running.")
        return (f"The job completed{where}" + (f", reaching step {steps}{of}" if steps is not None else "")
                + " with no failure.")
    if category == "hang_unknown":
        step = prog.last_step
        when = prog.last_progress_ts
        silent = ctx.get(job_status.Result).silence_after_last_step_s
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
        fp = ctx.get(collective_mismatch.Result)
        table = fp.table
        deviants = fp.deviants or culprits
        others = sorted(r for r in table if r not in deviants)
        head = f"{_who(deviants, nodes) if deviants else who} ran a different collective"
        head += f" than {_ranks_text(others)}" if others else ""
        diff = _fp_diff(table, deviants, others, fp.differs)
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
        eod = ctx.get(end_of_data.Result)
        drained = eod.drained or culprits
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
        supply = eod.supply
        if supply.get("supported_steps") is not None and supply.get("train_iters") is not None:
            head += f"; the data supports {supply['supported_steps']} of train_iters {supply['train_iters']} steps"
        elif eod.counts_text.startswith("per-node"):
            head += f"; {eod.counts_text}"
        end = " and the job hung" if status == "hung" else ""
        return head + end + (tail if status != "hung" else "") + "."
    if category == "straggler" and primary is not None and primary.id == "progress:slow-rank":
        f = primary.fields
        field = {"data": "data loading", "compute": "compute"}.get(f.get("kind"), f.get("kind"))
        text = (f"{who} was the straggler: {f['mean_slow_s']:.3f} s per step in {field} against "
                f"{f['mean_others_s']:.3f} s on the other ranks")
        text += ", which waited for it in communication" if f.get("corroborated") else ""
        if status == "completed":
            last = prog.last_step
            return text + (f"; the job completed {last} steps at its pace." if last else "; the job completed at its pace.")
        return text + tail + "."
    if category == "straggler" and primary is not None and primary.rule == "peer-reports":
        reporters = sorted(int(r) for r in primary.fields.get("waits_for", {}))
        them = "them" if len(culprits) > 1 else "it"
        by = f"{_ranks_text(reporters)} waited for {them}" if reporters else f"the other ranks waited for {them}"
        return f"{who} never arrived: {by} ({primary.fields.get('reported_by', 'their own reports')}){at_time}{tail}."
    if category == "straggler":
        if collective is not None and collective.stragglers:
            return (f"{who} never entered {what}" + (f" (started {hms(collective.start_ts)})"
                    if collective.start_ts else "") + tail + ".")
        minority = [g for g in groups if g.minority]
        majority = [g for g in groups if not g.minority]
        if minority:
            text = f"{who} sat in {minority[0].waits_in} ({minority[0].frames[0] if minority[0].frames else '?'})"
            if majority:
                text += f" while {plural_ranks(majority[0].ranks)} waited in {majority[0].waits_in}"
            return text + (" and the job hung." if status == "hung" else ".")
        return f"{who} fell behind the other ranks{at_step}{at_time}{tail}."
    if category == "collective_timeout" and collective is not None and collective.left_early:
        line = HEADERS.sub("", first.text).strip() if first is not None else ""
        quote = f" ('{line}')" if line else ""
        after = f" after step {first.step - 1}" if first is not None and first.step else ""
        return f"{who} left the loop early{after}{at_time}{quote}{tail}."
    if category == "collective_timeout":
        timed = (collective.timed_out if collective is not None else []) or (primary.ranks if primary else [])
        head = f"{plural_ranks(timed).capitalize()} timed out in {what}" if timed else "Collectives timed out"
        diagnosis = ctx.get(collective_sequence.Result).diagnosis
        if diagnosis == "fabric":
            return head + at_time + " with every rank inside and none missing; suspect the fabric or a device hang."
        return head + at_time + "; no rank-level cause was found."
    if category == "comm_init_failure":
        rt = ctx.get(hccl_ranktable.Result)
        if rt.never_connected:
            return (f"{plural_ranks(rt.never_connected).capitalize()} never connected to the communicator"
                    + (f" ({rt.connected} of {rt.expected} connected)" if rt.expected else "")
                    + at_time + "; communicator initialisation failed.")
        if rt.missing_count:
            return (f"{rt.missing_count} of {rt.expected} ranks never connected to the communicator{at_time}; "
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
            last = prog.last_step
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
        last = prog.last_step
        at_step = f" after step {last}" if last is not None else " after training"
    did, note = _what_happened(category, primary, first)
    return f"{who} {did}{at_step}{at_time}{note}{tail}."


def _what_happened(category: str, primary: Finding | None, first: FirstFailure | None) -> tuple[str, str]:
    """(what the culprit did, a note that goes after the time) for the summary sentence."""
    fields = primary.fields if primary and isinstance(primary.fields, dict) else {}
    # the exception on the first failure's own line, not the first one a rule happened to capture
    own = _EXC_NAME.search(HEADERS.sub("", first.text)) if first is not None else None
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
    if not text and primary.rule == "unexplained-errors" and primary.evidence:
        text = HEADERS.sub("", primary.evidence[0].text).strip()
    text = text or _lower_first(primary.title)
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _consequence(ctx: AnalyzerContext, culprits: list[int], collective: Collective | None, what: str) -> str:
    """'; ranks 0-4, 6, 7 then timed out in ALLREDUCE SeqNum=58' or the agent's SIGTERM."""
    timed = [r for r in (collective.timed_out if collective is not None else []) if r not in culprits]
    if timed:
        return f"; {_ranks_text(timed, other=True)} then timed out in {what}"
    exits = ctx.get(exit_codes.Result).ranks
    stopped = sorted(
        r for r, e in exits.items()
        if r not in culprits and ((e.signal in ("SIGTERM", "SIGKILL") and e.terminated_by_agent) or e.exit_code == -15)
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


def _collective_text(collective: Collective | None) -> str:
    return collective.text if collective is not None else "a collective"


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
