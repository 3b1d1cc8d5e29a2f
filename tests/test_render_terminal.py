from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from postmortem.model import Finding, JobInfo, RankState, Report, Verdict
from postmortem.render import render_terminal
from tests.test_render_fixtures import seed000_hang, watchdog_1024


def _render(report: Report, width: int = 100) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    render_terminal(report, console)
    # Padding fills lines to the console width: compare without trailing blanks
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())  # type: ignore[attr-defined]


def test_seed_summary() -> None:
    report, _ = seed000_hang()
    out = _render(report)
    assert "│  HUNG   data_exhaustion_desync   confidence high" in out
    assert "│ Culprit ranks: 2, 5, 6   World: 8 ranks on 1 node" in out
    assert "│ First failure: rank 2, step 77, 2025-06-26 16:09:10.300  console.log:742" in out
    assert "│   [rank2]: [INFO|text_trainer.py:311] epoch:0 Dataloader finished with drop_last True" in out
    assert (
        "1. CRITICAL  Ranks 2, 5, 6 ran out of data at step 77 and wait in the teardown barrier\n   ranks 2, 5, 6\n"
        in out
    )
    assert "   fix: Set train_iters to at most 76" in out
    assert "   + 2 consequences on ranks 0-7" in out
    assert "2. WARNING   The data supports 76.8 steps but train_iters is 100\n   ranks 0-7 · context" in out
    rows = [line.strip() for line in out.splitlines() if "node-a" in line]
    assert rows == [
        "2, 5, 6         node-a          76   hung    —          2   33m 00s",
        "0, 1, 3, 4, 7   node-a          76   hung    —          1   33m 03s",
    ]
    assert out == _render(report)


def test_1024_ranks_stay_short() -> None:
    report, _ = watchdog_1024()
    out = _render(report)
    assert len(out.splitlines()) < 40
    assert "Ranks (1024 in 2 groups)" in out
    table = out[out.index("Ranks (1024") :]
    assert table.index("517 ") < table.index("0-516, 518-1023")
    rows = [line.split("   ") for line in table.splitlines() if "SIG" in line]
    assert [[c.strip() for c in row if c.strip()] for row in rows] == [
        ["517", "gpu-node-064", "1190", "killed", "-15 (SIGTERM)", "2", "10m 47s"],
        ["0-516, 518-1023", "gpu-node-[000-127]", "1200", "failed", "-6 (SIGABRT)", "1", "32s"],
    ]
    assert "-15 (SIGTERM)" in table and "-6 (SIGABRT)" in table


def test_many_rank_groups_are_cut_with_a_count() -> None:
    ranks = [
        RankState(rank=r, last_step=90 if r == 25 else 100, exit_code=r, state="failed") for r in range(30)
    ]
    report = Report(tool_version="t", job=JobInfo(path="j"), verdict=Verdict(culprit_ranks=[29]), ranks=ranks)
    out = _render(report, width=120)
    assert "… 18 more groups" in out
    # the rank behind the majority and the culprit come first, so the cut never hides them
    rows = [
        line.split()[0] for line in out.splitlines() if line.strip().endswith("failed") or " failed " in line
    ]
    assert rows[:4] == ["25", "29", "0", "1"]


def test_markup_in_log_text_prints_literally() -> None:
    report, _ = seed000_hang()
    f = Finding(
        id="x",
        rule="r",
        category="c",
        severity="error",
        title="[bold red]boom[/] [link=x]y[/link]",
        role="primary",
    )
    out = _render(replace(report, findings=[f], verdict=replace(report.verdict, summary="[/]oops[red]")))
    assert "[bold red]boom[/] [link=x]y[/link]" in out
    assert "[/]oops[red]" in out


def test_minimal_report() -> None:
    out = _render(Report(tool_version="t", job=JobInfo(path="j"), verdict=Verdict()))
    assert "UNKNOWN" in out and "Culprit ranks: —" in out
