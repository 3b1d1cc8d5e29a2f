"""HCCL ranktable detection: which ranks never connected to the communicator's root.

## What it means
When an HCCL communicator is built from root info (``hcclCommInitRootInfoConfig``), every rank
connects to the root's server within ``HCCL_CONNECT_TIMEOUT``. The failure
(``Ranktable_Detect_Failed(EI0015)``) and the plog lines around it say how many ranks connected
(``total connected num is [4] … need connect rankNum is [8]``, ``rank num[8]is different with
rank list size[1]``) and sometimes which did not (``Failed to connect agent[1,3,5,7,]``).

## What a match does not prove
A rank that never connected may never have called the communicator creation (it crashed or
took another path), or its host cannot reach the root (HCCL_SOCKET_IFNAME, firewall).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from postmortem.analyzers._common import evidence_rows, grep, make_finding, world_ranks
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.ranges import format_ranks

ID = "hccl-ranktable"
TITLE = "HCCL ranktable detection: ranks that never connected"

_ROWS = (
    r"(?i)Ranktable_Detect_Failed|RanktableDetect|total connected num is|need connect rankNum|"
    r"Failed to connect agent|is different with rank list size"
)
_CONNECTED = re.compile(r"total connected num is\s*\[(\d+)\]", re.IGNORECASE)
_NEED = re.compile(r"need connect rankNum is\s*\[(\d+)\]", re.IGNORECASE)
_AGENTS = re.compile(r"Failed to connect agent\s*\[([\d,\s]*)\]", re.IGNORECASE)
_LIST_SIZE = re.compile(r"rank num\s*\[(\d+)\]\s*is different with rank list size\s*\[(\d+)\]", re.IGNORECASE)


NEEDS: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result(AnalyzerResult):
    expected: int | None = None
    connected: int | None = None
    missing_count: int | None = None
    never_connected: list[int] = field(default_factory=list)
    reporting_ranks: list[int] = field(default_factory=list)
    world_size: int | None = None


def run(ctx: AnalyzerContext) -> Result:
    """Compute the set (or count) of ranks that never connected."""
    rows = grep(ctx.timeline, _ROWS, ["ranktable", "connect", "rank list size"]).sort(
        ["ts", "file", "line"], nulls_last=True
    )
    if rows.is_empty():
        return Result()
    expected: int | None = None
    connected: int | None = None
    never: set[int] = set()
    for text in rows.get_column("message"):
        text = text or ""
        if m := _NEED.search(text):
            expected = max(expected or 0, int(m.group(1)))
        if m := _CONNECTED.search(text):
            connected = max(connected or 0, int(m.group(1)))
        if m := _LIST_SIZE.search(text):
            expected = max(expected or 0, int(m.group(1)))
            connected = max(connected or 0, int(m.group(2)))
        for m in _AGENTS.finditer(text):
            never.update(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
    missing = (expected - connected) if expected is not None and connected is not None else None
    if never:
        missing = max(missing or 0, len(never))
    reporters = sorted(int(r) for r in rows.get_column("rank").drop_nulls().unique())
    world = world_ranks(ctx.job, ctx.timeline)
    result = Result(
        expected=expected, connected=connected, missing_count=missing, never_connected=sorted(never),
        reporting_ranks=reporters, world_size=expected or (len(world) if world else None),
    )
    if never:
        title = f"HCCL ranktable detection failed: ranks {format_ranks(never)} never connected"
    elif missing:
        title = f"HCCL ranktable detection failed: {missing} of {expected} ranks never connected"
    else:
        title = "HCCL ranktable detection failed"
    if expected is not None and connected is not None:
        title += f" ({connected} of {expected} connected)"
    finding = make_finding(
        ID,
        category="comm_init_failure",
        severity="error",
        title=title,
        rule_role="root",
        ranks=sorted(never) or reporters,
        evidence=evidence_rows(rows, limit=6),
        count=rows.height,
        explanation=(
            "Building the HCCL communicator needs every rank to connect to the root rank's server before "
            "HCCL_CONNECT_TIMEOUT. "
            + (f"Ranks {format_ranks(never)} never did. " if never else "")
            + "The ranks that did connect then fail with EI0015; they are not the cause."
        ),
        fix=(
            "Check that every rank reaches the communicator creation (the missing ranks' own logs), that their "
            "hosts can reach the root (HCCL_SOCKET_IFNAME on every node, firewall, the root's IP), and raise "
            "HCCL_CONNECT_TIMEOUT (>= 300 s for large clusters)."
        ),
        fields={"culprit_ranks": sorted(never), **result.facts()},
    )
    return dataclasses.replace(result, findings=(finding,))
