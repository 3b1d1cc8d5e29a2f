"""The per-rank table: each rank's last step, last line, exit, stack group and state.

A rank's state is what the report can say of it: ``completed``, ``failed`` (a culprit, or a
rank that erred on its own), ``killed`` (stopped by the launcher after another rank failed),
``hung``, ``silent`` (it stopped printing in a failed job without an error of its own),
``running`` or ``unknown``.
"""

from __future__ import annotations

from postmortem.analyzers import collective_sequence, exit_codes, job_status, progress, stack_groups
from postmortem.analyzers._common import SEVERE, rank_nodes, world_ranks
from postmortem.analyzers.base import AnalyzerContext
from postmortem.model import Finding, RankState, Verdict


def rank_states(ctx: AnalyzerContext, verdict: Verdict, findings: list[Finding]) -> list[RankState]:
    """One row per rank of the world, in rank order."""
    world = world_ranks(ctx.job, ctx.timeline)
    steps = ctx.get(progress.Result).ranks
    exits = ctx.get(exit_codes.Result).ranks
    rank_group = ctx.get(stack_groups.Result).rank_group
    status = ctx.get(job_status.Result)
    silent = status.silent_s
    threshold = status.silence_threshold_s
    nodes = rank_nodes(ctx.timeline)
    erring = {
        r for f in findings
        if f.severity in SEVERE and f.rule_role != "context" and f.role != "context"
        for r in f.ranks
    }
    culprits = set(verdict.culprit_ranks)
    # ranks that left a collective loop on purpose finished; the others then waited for them
    main = ctx.get(collective_sequence.Result).main
    left_early = set(main.left_early) if main is not None else set()
    out = []
    for rank in sorted(set(world) | set(steps) | set(exits)):
        p = steps.get(rank, progress.RankProgress())
        e = exits.get(rank, exit_codes.RankExit())
        code = e.exit_code
        stopped = code == -15 or (code == -9 and e.terminated_by_agent)
        if code == 0 or rank in left_early:
            state = "completed"
        elif code is not None and rank not in culprits and stopped:
            state = "killed"
        elif code is not None:
            state = "failed"
        elif e.terminated_by_agent:
            state = "killed"
        elif verdict.status == "hung":
            state = "hung"
        elif verdict.status == "completed":
            state = "completed"
        elif verdict.status == "failed":
            quiet = silent.get(rank) is None or silent[rank] > threshold
            state = "failed" if rank in culprits or rank in erring else ("silent" if quiet else "unknown")
        else:
            state = "running" if p.last_step is not None else "unknown"
        out.append(
            RankState(
                rank=rank,
                node=nodes.get(rank),
                last_step=p.last_step,
                last_ts=p.last_ts,
                exit_code=code,
                state=state,
                stack_group=rank_group.get(rank),
                silent_s=silent.get(rank),
                step_cadence_s=p.cadence_s,
            )
        )
    return out
