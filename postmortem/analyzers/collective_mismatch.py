"""Collective fingerprint mismatch: a field-by-field diff table and the likely cause.

## What it means
With ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` the process-group wrapper compares every collective's
fingerprint across ranks and raises ``Detected mismatch between collectives on ranks. Rank A
is running collective: CollectiveFingerPrint(SequenceNumber=…, OpType=…, TensorShape=[…],
TensorDtypes=…, TensorDeviceTypes=…), but Rank B is running collective: …``. Each message is
parsed into rank -> SequenceNumber, OpType, TensorShape, dtype, device, and the fields that
differ name the cause: a different sequence number means a rank skipped or added a collective;
the same sequence with a different op means ranks took different code paths; a different
shape means data-dependent sizes or uneven padding; dtype or device differences mean the
ranks' tensors were built differently.

## What a match does not prove
The ranks in the message are ranks of the failing process group. The reporting rank is not
necessarily right: with two ranks, the one named after "but" is reported as the deviant.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from postmortem.analyzers._common import evidence_rows, grep, make_finding
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.ranges import plural_ranks

ID = "collective-mismatch"
TITLE = "Collective fingerprint mismatch between ranks"
NEEDS: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result(AnalyzerResult):
    #: rank -> its collective fingerprint (seq, op_type, shape, dtypes, device)
    table: dict[int, dict[str, Any]] = field(default_factory=dict)
    pairs: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)
    likely_cause: str | None = None
    #: the ranks whose fingerprint differs from the others'
    deviants: list[int] = field(default_factory=list)

_HEADER = re.compile(r"Rank (\d+) is running collective: (CollectiveFinger[Pp]rint\()", re.IGNORECASE)
_FIELDS = ("seq", "op_type", "shape", "dtypes", "device")


def run(ctx: AnalyzerContext) -> Result:
    """Parse mismatch messages into a diff table and name the deviating ranks."""
    rows = grep(ctx.timeline, r"(?i)Detected mismatch between collectives", ["mismatch between collectives"]).sort(
        ["ts", "file", "line"], nulls_last=True
    )
    if rows.is_empty():
        return Result()
    table: dict[int, dict[str, Any]] = {}
    pairs: list[dict[str, Any]] = []
    seen_pairs: set[tuple[int, int]] = set()
    for row in rows.iter_rows(named=True):
        parsed = parse_mismatch(row["message"] or "")
        if parsed is None:
            continue
        (rank_a, fp_a), (rank_b, fp_b) = parsed
        table.setdefault(rank_a, fp_a)
        table.setdefault(rank_b, fp_b)
        if (rank_a, rank_b) not in seen_pairs:
            seen_pairs.add((rank_a, rank_b))
            pairs.append({"reporter": rank_a, "other": rank_b, "reporting_rank": row["rank"], "file": row["file"],
                          "line": row["line"], "ts": row["ts"]})
    if not table:
        return Result()

    differ = [f for f in _FIELDS if len({str(fp.get(f)) for fp in table.values()}) > 1]
    deviants = _deviants(table, pairs)
    cause = likely_cause(differ)
    diff_rows = [{"rank": r, **{f: table[r].get(f) for f in _FIELDS}} for r in sorted(table)]
    summary = ", ".join(
        f"rank {r}: " + " ".join(f"{k}={table[r].get(k)}" for k in ("seq", "op_type") if table[r].get(k) is not None)
        for r in sorted(table)
    )
    evidence = evidence_rows(rows, limit=4)
    finding = make_finding(
        ID,
        category="collective_mismatch",
        severity="critical",
        title=f"Collective mismatch: {plural_ranks(deviants)} ran a different collective ({', '.join(differ) or 'fields'} differ)",
        rule_role="root",
        ranks=sorted(table),
        evidence=evidence,
        count=rows.height,
        explanation=(
            f"The ranks issued different collectives at the same point ({summary}). {cause} "
            "A mismatch deadlocks the group or fails fast under TORCH_DISTRIBUTED_DEBUG=DETAIL; every "
            "timeout that follows is a consequence."
        ),
        fix=(
            "Make every rank issue the same collectives in the same order with the same shapes: look for "
            "rank-dependent branches around collectives (if rank == 0: all_reduce ...), early exits or skipped "
            "batches on some ranks, uneven last batches (drop_last), and tensors created on the wrong device."
        ),
        fields={"culprit_ranks": deviants, "differs": differ, "likely_cause": cause, "table": diff_rows},
    )
    return Result(
        findings=(finding,), table=table, rows=diff_rows, differs=differ, likely_cause=cause, deviants=deviants,
        pairs=pairs,
    )


def parse_mismatch(message: str) -> tuple[tuple[int, dict[str, Any]], tuple[int, dict[str, Any]]] | None:
    """The two (rank, fingerprint) of the first mismatch sentence in ``message``."""
    found: list[tuple[int, dict[str, Any]]] = []
    pos = 0
    while len(found) < 2:
        m = _HEADER.search(message, pos)
        if m is None:
            break
        # the seed-003 transcription drops a closing parenthesis: a body also ends where the next begins
        nxt = _HEADER.search(message, m.end())
        limit = nxt.start() if nxt else len(message)
        body, end = _balanced(message[:limit], m.end(2))
        found.append((int(m.group(1)), parse_fingerprint(body)))
        pos = min(end, limit)
    if len(found) < 2:
        return None
    return found[0], found[1]


def parse_fingerprint(body: str) -> dict[str, Any]:
    """Fields of one ``CollectiveFingerPrint(...)`` body, including the seed-003 ``SequenceNumber=0OpType=GATHER``."""
    fp: dict[str, Any] = dict.fromkeys(_FIELDS)
    if m := re.search(r"SequenceNumber=(\d+)", body):
        fp["seq"] = int(m.group(1))
    if m := re.search(r"OpType=(\w+)", body):
        fp["op_type"] = m.group(1)
    if m := re.search(r"TensorShape=\[([^\]]*)\]", body):
        fp["shape"] = "[" + m.group(1).strip() + "]"
    if m := re.search(r"TensorDtypes=([^,)]*)", body):
        fp["dtypes"] = m.group(1).strip()
    if (m := re.search(r"TensorDeviceTypes=.*?device=(\w+)", body)) or (m := re.search(r"TensorDeviceTypes=(\w+)", body)):
        fp["device"] = m.group(1)
    return fp


def likely_cause(differ: list[str]) -> str:
    """One sentence naming the probable cause from the fields that differ."""
    if "seq" in differ:
        return ("The sequence numbers differ: one rank skipped or added a collective (a rank-dependent branch, "
                "an early exit, an extra barrier or logging all_reduce).")
    if "op_type" in differ:
        return "Same position, different operation: the ranks took different code paths."
    if "shape" in differ:
        return "The tensor shapes differ: data-dependent sizes or uneven padding across ranks."
    if "dtypes" in differ:
        return "The dtypes differ: ranks built their tensors with different precision settings."
    if "device" in differ:
        return "The devices differ: a tensor on one rank lives on another device (CPU vs accelerator, wrong index)."
    return "The message does not say which field differs."


def _balanced(text: str, start: int) -> tuple[str, int]:
    """Text from ``start`` up to the parenthesis closing the one just before it."""
    depth = 1
    i = start
    while i < len(text) and depth:
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
        i += 1
    return text[start : i - 1 if depth == 0 else i], i


def _deviants(table: dict[int, dict[str, Any]], pairs: list[dict[str, Any]]) -> list[int]:
    """Ranks whose fingerprint is not the majority's.

    With no majority (two ranks that each report the other): the ranks at the lowest sequence
    number, which fell behind or skipped collectives (seed 003: rank 1 at ``SequenceNumber=0``
    against 12); failing that, the ranks only ever named after "but".
    """
    keys = {r: tuple(str(fp.get(f)) for f in ("seq", "op_type", "shape", "dtypes")) for r, fp in table.items()}
    counts = Counter(keys.values())
    top = max(counts.values())
    if list(counts.values()).count(top) == 1 and len(counts) > 1:
        majority = next(k for k, c in counts.items() if c == top)
        return sorted(r for r, k in keys.items() if k != majority)
    seqs = {r: fp["seq"] for r, fp in table.items() if fp.get("seq") is not None}
    if len(set(seqs.values())) > 1:
        low = min(seqs.values())
        return sorted(r for r, s in seqs.items() if s == low)
    return sorted({p["other"] for p in pairs} - {p["reporter"] for p in pairs}) or sorted({p["other"] for p in pairs})
