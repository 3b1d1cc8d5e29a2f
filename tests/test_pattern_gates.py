"""The literal gates in front of slow patterns are supersets: a line a gate turns away is one
the pattern behind it would not have matched."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem.exprs import matches_any
from postmortem.parsers import patterns as P
from postmortem.parsers import text as X
from postmortem.timeline import timeline_from_text


def test_lifecycle_lines_in_any_case_are_lifecycle():
    lines = [
        "W0527 19:52:50.852000 281467089262240 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 222 closing signal SIGTERM",
        "2026-05-27 19:49:13 | INFO | fairseq_cli.train | Stopping training due to num_updates: 10 >= max_update: 10",
        "INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:",
        "DATALOADER FINISHED on rank 3",
        "Saving model checkpoint to /out/checkpoint-500",
        "{'train_runtime': 812.3, 'train_samples_per_second': 3.9, 'epoch': 1.0}",
        "process is eXiting now",
        "some line about a signal handler with nothing else",
    ]
    tl = timeline_from_text("\n".join(lines) + "\n", file="rank0.log")
    kinds = tl.sort("line")["kind"].to_list()
    assert kinds == ["warning", "lifecycle", "lifecycle", "lifecycle", "lifecycle", "lifecycle", "lifecycle", "info"]


def _line_from(pattern: str) -> st.SearchStrategy[str]:
    # one physical line: the parser never sees a newline or a carriage return inside a line
    return st.from_regex(pattern, fullmatch=False).filter(lambda s: "\n" not in s and "\r" not in s)


def _gate_misses(lines: list[str], pattern: str, gate: pl.Expr) -> list[str]:
    """The lines that match ``pattern`` (as polars matches it) but that ``gate`` turns away."""
    frame = pl.DataFrame({"message": lines}, schema={"message": pl.String})
    hit = frame.filter(pl.col("message").str.contains(pattern) & ~gate)
    return hit.get_column("message").to_list()


msg = pl.col("message")
GATED = {
    "record start": (P.union(*P.RECORD_STARTS.values()), matches_any(msg, P.RECORD_GATES)),
    "whole-file record hint": (P.union(*P.RECORD_STARTS.values()), matches_any(msg, P.RECORD_ANY)),
    "level word": (P.LEVEL_WORD, msg.str.contains(P.LEVEL_WORDS)),
    **{
        f"field {name}": (pattern, X._field_gate(msg) & (msg.str.contains(X._GATES[name]) if name in X._GATES else True))
        for name, pattern in X._EXTRACTORS.items()
    },
}


@pytest.mark.parametrize("name", sorted(GATED))
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_gate_lets_through_every_line_its_pattern_matches(name: str, data: st.DataObject):
    pattern, gate = GATED[name]
    lines = data.draw(st.lists(_line_from(pattern), min_size=1, max_size=10))
    assert _gate_misses(lines, pattern, gate) == []


def test_a_gate_check_fails_for_a_gate_that_is_not_a_superset():
    # the check itself can fail: CANN codes at the start of a line have no literal in front
    lines = ["EI0002: [PID: 2969] 2025-10-11-15:09:34.713.335 The wait execution of the Notify register times out."]
    starts = P.union(*P.RECORD_STARTS.values())
    assert _gate_misses(lines, starts, msg.str.contains(P.literals(P.RECORD_HINTS))) == lines
    assert _gate_misses(lines, starts, matches_any(msg, P.RECORD_GATES)) == []
