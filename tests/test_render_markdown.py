from __future__ import annotations

import re
from dataclasses import replace

from postmortem.model import Evidence, Finding
from postmortem.render import render_markdown
from postmortem.render.markdown import code, fence, text
from tests.test_render_fixtures import seed000_hang, watchdog_1024


def test_seed_markdown() -> None:
    report, _ = seed000_hang()
    md = render_markdown(report)
    assert md.startswith("## postmortem: HUNG — `data_exhaustion_desync` (confidence: high)\n")
    assert "**Ranks 2, 5 and 6 ran out of data at step 77" in md
    assert "| Culprit ranks | 2, 5, 6 |" in md
    assert "| First failure | rank 2, step 77, 2025-06-26 16:09:10.300 at `console.log:742` |" in md
    assert (
        "#### 1. [critical] Ranks 2, 5, 6 ran out of data at step 77 and wait in the teardown barrier" in md
    )
    assert "**Fix:** Set train\\_iters to at most 76" in md
    assert "<details>\n<summary>Evidence (3 of 3 lines)</summary>" in md
    assert (
        ">   742 | [rank2]: [INFO|text_trainer.py:311] epoch:0 Dataloader finished with drop_last True" in md
    )
    assert (
        "Consequences (2, on ranks 0-7): Ranks block in torch.distributed.barrier() inside destroy\\_distributed"
        in md
    )
    assert "| **2, 5, 6** | node-a | 76 | hung | — | 2 | 33m 00s |" in md
    assert "- **Group 2** — minority: waits in barrier, 3 ranks (2, 5, 6)" in md
    assert md.count("<details>") == md.count("</details>") == 1  # only the primary finding has evidence
    assert md == render_markdown(report)


def test_1024_markdown_puts_the_odd_rank_first() -> None:
    report, _ = watchdog_1024()
    md = render_markdown(report)
    table = md[md.index("| Ranks | Nodes |") :].splitlines()
    assert table[2] == "| **517** | gpu-node-064 | 1190 | killed | -15 (SIGTERM) | 2 | 10m 47s |"
    assert (
        table[3]
        == "| 0-516, 518-1023 | gpu-node-\\[000-127\\] (128 nodes) | 1200 | failed | -6 (SIGABRT) | 1 | 32s |"
    )
    assert "<summary>Evidence (1 of 1 line)</summary>" in md
    assert "Consequences (3, on ranks 0-1023): NCCL watchdog timed out in ALLREDUCE" in md
    assert "| World | 1024 ranks on 128 nodes (gpu-node-\\[000-127\\]) |" in md
    assert len(md) < 20_000


def test_log_text_cannot_become_markup() -> None:
    report, _ = seed000_hang()
    evil = "<script>alert(1)</script> [click](javascript:alert(1)) ```\n# heading"
    finding = Finding(
        id="x",
        rule="r",
        category="c",
        severity="error",
        title=evil,
        explanation="> not a quote\n\n## Why\nhidden in the HTML only",
        evidence=[Evidence(file="a`b.log", line=1, rank=0, text="before ``` and ```` after")],
        role="primary",
    )
    md = render_markdown(replace(report, findings=[finding], verdict=replace(report.verdict, summary=evil)))
    assert "<script>" not in md
    assert not re.search(r"(?<!\\)\]\(javascript:", md)
    assert "\\[click\\](javascript:alert(1))" in md
    assert "\n\\> not a quote\n" in md
    assert "hidden in the HTML only" not in md
    # the evidence fence outlasts the backticks inside it
    block = re.search(r"\n(`{5,})text\n(.*?)\n\1\n", md, re.DOTALL)
    assert block is not None and "before ``` and ```` after" in block.group(2)
    assert "``a`b.log:1 (rank 0)``" in md


def test_helpers() -> None:
    assert text("a|b <c> & *d*") == "a\\|b \\<c\\> &amp; \\*d\\*"
    assert text("1. x", paragraph=True) == "1\\. x"
    assert text("line1\nline2") == "line1<br>line2"
    assert code("x`y") == "``x`y``"
    assert code("`x") == "`` `x ``"
    assert fence(["a", "```"]) == ["````text", "a", "```", "````"]
