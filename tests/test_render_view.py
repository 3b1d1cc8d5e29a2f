from __future__ import annotations

from datetime import datetime

from postmortem.model import Evidence, Finding, JobInfo, RankState, Report, Verdict
from postmortem.ranges import format_ranks, parse_ranks
from postmortem.render import view
from tests.test_render_fixtures import seed000_hang, watchdog_1024


def _report(findings: list[Finding]) -> Report:
    return Report(tool_version="t", job=JobInfo(path="j"), verdict=Verdict(), findings=findings)


def test_format_ranks_collapses_runs() -> None:
    assert format_ranks([0, 1, 2, 3, 5]) == "0-3, 5"
    assert format_ranks([5, 3, 2, 1, 0, 5]) == "0-3, 5"
    assert format_ranks([0, 1]) == "0, 1"
    assert format_ranks([]) == ""
    assert format_ranks([r for r in range(1024) if r != 517]) == "0-516, 518-1023"
    assert parse_ranks("0-516, 518-1023") == [r for r in range(1024) if r != 517]


def test_secondary_findings_nest_under_their_root_cause() -> None:
    report, _ = seed000_hang()
    ordered = view.ordered_findings(report)
    assert [fv.finding.id for fv in ordered] == ["data-exhaustion-desync", "data-budget"]
    assert [c.id for c in ordered[0].children] == ["pytorch-teardown-barrier-hang", "stack-minority"]


def test_secondary_chain_and_orphan() -> None:
    findings = [
        Finding(
            id="echo2",
            rule="r",
            category="c",
            severity="error",
            title="t",
            role="secondary",
            caused_by="echo1",
        ),
        Finding(
            id="echo1",
            rule="r",
            category="c",
            severity="error",
            title="t",
            role="secondary",
            caused_by="root",
        ),
        Finding(id="root", rule="r", category="c", severity="critical", title="t", role="primary"),
        Finding(
            id="lost",
            rule="r",
            category="c",
            severity="warning",
            title="t",
            role="secondary",
            caused_by="gone",
        ),
        Finding(id="ctx", rule="r", category="c", severity="info", title="t", role="context"),
    ]
    ordered = view.ordered_findings(_report(findings))
    assert [fv.finding.id for fv in ordered] == ["root", "ctx", "lost"]
    assert [c.id for c in ordered[0].children] == ["echo2", "echo1"]


def test_rank_groups_collapse_identical_ranks() -> None:
    report, _ = watchdog_1024()
    groups = view.rank_groups(report.ranks)
    assert [(g.ranks_text, g.last_step, g.state, g.exit_code) for g in groups] == [
        ("0-516, 518-1023", 1200, "failed", -6),
        ("517", 1190, "killed", -15),
    ]
    assert groups[0].nodes_text == "gpu-node-[000-127] (128 nodes)"
    assert groups[1].nodes_text == "gpu-node-064"


def test_evidence_lines_split_the_match_and_keep_file_order() -> None:
    ev = Evidence(
        file="f.log",
        line=10,
        rank=0,
        text="abc MATCH def",
        context=[(11, "after"), (9, "before"), (10, "abc MATCH def")],
        span=(4, 9),
    )
    lines = view.evidence_lines(ev)
    assert [(lv.number, lv.hit) for lv in lines] == [(9, False), (10, True), (11, False)]
    assert (lines[1].before, lines[1].match, lines[1].after) == ("abc ", "MATCH", " def")


def test_evidence_line_without_context_or_with_bad_span() -> None:
    lines = view.evidence_lines(Evidence(file="f", line=3, rank=None, text="xyz", span=(5, 9)))
    assert [(lv.number, lv.before, lv.match) for lv in lines] == [(3, "xyz", "")]


def test_small_formatters() -> None:
    assert view.exit_text(-9) == "-9 (SIGKILL)"
    assert view.exit_text(1) == "1"
    assert view.exit_text(None) == "—"
    assert view.duration_text(45) == "45s"
    assert view.duration_text(1980) == "33m 00s"
    assert view.duration_text(7500) == "2h 05m"
    assert view.ts_text(datetime(2025, 1, 2, 3, 4, 5, 678000)) == "2025-01-02 03:04:05.678"
    assert view.hostlist(["node1", "node2", "node3", "node5", "login"]) == "login, node[1-3,5]"
    assert view.hostlist([f"gpu-{i:03d}" for i in range(8, 12)]) == "gpu-[008-011]"
    assert view.clip("x" * 10, 4) == "xxxx … [6 more characters]"


def test_majority_last_step() -> None:
    ranks = [RankState(rank=i, last_step=s) for i, s in enumerate([76, 76, 75, 76, None])]
    assert view.majority_last_step(ranks) == 76


def test_prose_sections_paragraphs_items_and_code() -> None:
    text = (
        "## What it means\nA traceback ended with (`KeyError: ...`,\n`ValueError`) on a rank.\n\n"
        "## Why it happens\n- bad data\n- a missing\n  file\n"
    )
    sections = view.prose(text)
    assert [s.heading for s in sections] == ["What it means", "Why it happens"]
    assert sections[0].paragraphs[0].spans == [
        (False, "A traceback ended with ("),
        (True, "KeyError: ..."),
        (False, ", "),
        (True, "ValueError"),
        (False, ") on a rank."),
    ]
    assert [(p.item, p.spans) for p in sections[1].paragraphs] == [
        (True, [(False, "bad data")]),
        (True, [(False, "a missing file")]),
    ]
    assert view.prose("") == []
    assert [s.heading for s in view.prose("plain\ntext")] == [None]
