"""The culprit ranks: the ranks the failure started on, from the evidence that knows them best.

For each category, the analyzer that sees the cross-rank structure names them: the fingerprint
diff for a mismatch, the ranks that ran out of data, the ranks that never connected, the ranks
that never entered the collective the others waited in, the py-spy minority. Otherwise they are
the primary finding's own ranks — those of its lines that are not echoes of another rank's
failure. Categories without a culprit (a healthy job, a hang with no cause) name nobody.
"""

from __future__ import annotations

from postmortem.analyzers import (
    collective_mismatch,
    collective_sequence,
    end_of_data,
    hccl_ranktable,
    peer_reports,
)
from postmortem.analyzers._common import CASCADE_TEXT
from postmortem.analyzers.base import AnalyzerContext
from postmortem.model import Finding, StackGroup

#: Categories whose culprit is "nobody in particular".
NO_CULPRIT = {"healthy", "hang_unknown", "job_cancelled", "unknown_failure"}


def culprits_of(ctx: AnalyzerContext, category: str, primary: Finding | None, groups: list[StackGroup]) -> list[int]:
    """The culprit ranks of a verdict of ``category`` led by ``primary``."""
    if category in NO_CULPRIT:
        return []
    minority = sorted(r for g in groups if g.minority for r in g.ranks)
    if category == "collective_mismatch":
        deviants = ctx.get(collective_mismatch.Result).deviants
        if deviants:
            return sorted(deviants)
    if category == "data_exhaustion_desync":
        drained = ctx.get(end_of_data.Result).drained
        if drained:
            return sorted(drained)
        if minority:
            return minority
    if category == "comm_init_failure":
        never = ctx.get(hccl_ranktable.Result).never_connected
        if never:
            return sorted(never)
    if category in ("straggler", "collective_timeout"):
        main = ctx.get(collective_sequence.Result).main
        if main is not None and main.stragglers:
            return sorted(main.stragglers)
        named = ctx.get(peer_reports.Result).culprits  # the rank the others say they wait for
        if named:
            return sorted(named)
        if minority:
            return minority
        if category == "collective_timeout":
            return []
    if primary is None:
        return []
    named = primary.fields.get("culprit_ranks")
    if named is not None:  # an analyzer that names no culprit means it: none stands out
        return sorted(int(r) for r in named)
    direct = sorted({e.rank for e in primary.evidence if e.rank is not None and not CASCADE_TEXT.search(e.text or "")})
    return direct or sorted(primary.ranks)
