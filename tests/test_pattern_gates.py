"""The literal gates in front of slow patterns are supersets: a line a gate turns away is one
the pattern behind it would not have matched."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from postmortem.parsers import patterns as P
from postmortem.timeline import timeline_from_text


@settings(max_examples=300, deadline=None)
@given(st.from_regex(P.LIFECYCLE_LINE, fullmatch=False))
def test_every_lifecycle_line_contains_a_lowercase_anchor(line: str):
    assert re.search(P.LIFECYCLE_ANCHORS, line.lower()), line


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
