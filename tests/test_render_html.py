from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import replace
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from postmortem.model import Evidence, Finding, FirstFailure, JobInfo, RankState, Report, StackGroup, Verdict
from postmortem.render import render_html
from postmortem.render.html import build_context, facts_view, html_text, stack_columns
from postmortem.schema import empty_timeline
from tests.test_render_fixtures import T0, seed000_hang, watchdog_1024

EVIL = '<script>alert(1)</script> </textarea><img src=x onerror=alert(2)> <a href="javascript:alert(3)">x</a>'


class Page(HTMLParser):
    """The tags and attributes of a page, for structural assertions."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for t, attrs in self.tags if t == tag]

    def urls(self) -> list[str]:
        return [
            v or ""
            for _, attrs in self.tags
            for k, v in attrs.items()
            if k in ("src", "href", "xlink:href", "action")
        ]


@pytest.fixture(scope="module")
def seed_html() -> str:
    report, timeline = seed000_hang()
    return html_text(report, timeline)


@pytest.fixture(scope="module")
def big_html() -> str:
    report, timeline = watchdog_1024()
    return html_text(report, timeline)


def test_verdict_banner(seed_html: str) -> None:
    banner = seed_html[seed_html.index('<section id="verdict"') : seed_html.index("</section>")]
    assert 'class="verdict status-hung"' in banner
    assert ">HUNG<" in banner
    assert ">data_exhaustion_desync<" in banner
    assert "Ranks 2, 5 and 6 ran out of data at step 77" in banner
    assert '<dd class="culprits">2, 5, 6 <span class="dim">(3 of 8)</span></dd>' in banner
    assert "<code>console.log:742</code> · rank 2" in banner
    assert "confidence: high" in banner


def test_findings_primary_first_secondary_folded(seed_html: str) -> None:
    section = seed_html[seed_html.index('<section id="findings"') :]
    section = section[: section.index("</section>")]
    titles = re.findall(r"<h[34]>(.*?)</h[34]>", section)
    assert titles == [
        "Ranks 2, 5, 6 ran out of data at step 77 and wait in the teardown barrier",
        "Ranks block in torch.distributed.barrier() inside destroy_distributed",
        "Ranks 0, 1, 3, 4, 7 are still in the forward pass (find_packed_sequence_indices)",
        "The data supports 76.8 steps but train_iters is 100",
    ]
    echoes = section[section.index('<details class="echoes">') : section.index("</details>")]
    assert "2 consequences of this, on ranks 0-7" in echoes
    assert "Ranks block in torch.distributed.barrier()" in echoes
    # evidence: file:line, context lines and the match highlighted
    assert "<code>console.log:742</code> · rank 2" in section
    assert (
        '<span class="ln hit"><span class="no">742</span><span class="tx">[rank2]: [INFO|text_trainer.py:311] '
        "<mark>epoch:0 Dataloader finished</mark> with drop_last True</span></span>"
    ) in section
    assert '<span class="ln"><span class="no">741</span>' in section
    # references are text, never links
    assert "<code>https://github.com/pytorch/pytorch/issues/82582</code>" in section


def test_plots_are_inline_svg_without_urls(seed_html: str) -> None:
    svgs = re.findall(r"<svg\b[^>]*>", seed_html)
    assert len(svgs) == 2
    assert all('class="chart"' in s and "viewBox" in s and "xmlns" not in s for s in svgs)
    assert '<figure class="chart-box" id="plot-steps">' in seed_html
    assert '<figure class="chart-box" id="plot-laststep">' in seed_html


def test_rank_table_and_stacks(seed_html: str) -> None:
    page = Page(seed_html)
    table = [a for a in page.named("table") if a.get("id") == "rank-table"]
    assert table and "sortable" in (table[0]["class"] or "")
    rows = re.findall(r'<tr class="state-hung( culprit)?"><td class="num" data-v="(\d+)">', seed_html)
    assert [(int(r), bool(c)) for c, r in rows] == [(r, r in (2, 5, 6)) for r in range(8)]
    assert '<details class="rank-table" open>' in seed_html  # small world: open
    # stack groups side by side, the minority first, differing frames marked
    stacks = seed_html[seed_html.index('<section id="stacks"') :]
    assert stacks.index("Group 2") < stacks.index("Group 1")
    assert '<li class="differs"><code>barrier (torch/distributed/distributed_c10d.py)</code></li>' in stacks
    assert "<li><code>fit (text_trainer.py)</code></li>" in stacks


def test_inventory(seed_html: str) -> None:
    inv = seed_html[seed_html.index('<section id="inventory"') :]
    for text in (
        "<th>torchrun_console</th><td>1</td>",
        "<th>pyspy</th><td>8</td>",
        "<th>CANN</th><td><code>9.0.0</code></td>",
        "<th><code>HCCL_EXEC_TIMEOUT</code></th><td><code>1800</code></td>",
        "<code>checkpoints/iter_0000050/model.safetensors</code></td><td>binary file</td>",
        '1: <span class="nodes">node-a</span>',
        "&#34;train_iters&#34;: 100",
    ):
        assert text in inv, text


def test_self_contained_no_external_reference(seed_html: str, big_html: str) -> None:
    for text in (seed_html, big_html):
        page = Page(text)
        assert page.named("link") == []
        assert page.named("iframe") == [] and page.named("object") == [] and page.named("embed") == []
        for url in page.urls():
            assert url.startswith(("#", "data:")), url
        assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.IGNORECASE)
        assert "@import" not in text and "url(http" not in text
        assert not re.search(
            r"https?://",
            text.replace("https://github.com/pytorch/pytorch/issues/82582", "")
            .replace("https://pytorch.org/docs/stable/", "")
            .replace("https://github.com/pytorch/pytorch/blob/main/", ""),
        ), "only reference text may name a URL"


def test_csp_allows_only_the_page_script(seed_html: str) -> None:
    page = Page(seed_html)
    scripts = page.named("script")
    assert len(scripts) == 1 and "src" not in scripts[0]
    digest = base64.b64encode(hashlib.sha256(page.scripts[0].encode()).digest()).decode()
    csp = next(a["content"] for a in page.named("meta") if a.get("http-equiv") == "Content-Security-Policy")
    assert f"script-src 'sha256-{digest}'" in csp
    assert "default-src 'none'" in csp and "img-src data:" in csp


def test_deterministic(seed_html: str) -> None:
    report, timeline = seed000_hang()
    assert html_text(report, timeline) == seed_html


def test_1024_ranks_under_5_mb_and_collapsed(big_html: str, tmp_path: Path) -> None:
    report, timeline = watchdog_1024()
    out = tmp_path / "report.html"
    render_html(report, timeline, out)
    size = out.stat().st_size
    assert size < 5 * 1024 * 1024, size
    assert out.read_text(encoding="utf-8") == big_html
    assert '<details class="rank-table">' in big_html  # large world: collapsed
    assert big_html.count('<tr class="state-failed"><td class="num"') == 1023
    assert big_html.count('<tr class="state-killed culprit"><td class="num" data-v="517">') == 1
    # 1,023 evidence lines: 3 shown, 22 behind a toggle, the rest counted
    assert "22 more evidence lines</summary>" in big_html
    assert "… and 998 more evidence lines in the JSON report." in big_html
    # the heat map is one embedded image, not thousands of vector lanes
    steps_svg = big_html[big_html.index('id="plot-steps"') : big_html.index('id="plot-laststep"')]
    assert steps_svg.count("data:image/png;base64,") == 2  # step lag + silent tail layers
    assert "one row per 8 ranks, the worst shown" in steps_svg
    # the group table shows the odd rank as its own row
    assert '<td class="rk">517</td>' in big_html and '<td class="rk">0-516, 518-1023</td>' in big_html


def test_log_text_is_inert(tmp_path: Path) -> None:
    report, timeline = seed000_hang()
    ev = Evidence(
        file=f"logs/{EVIL}.log", line=3, rank=1, text=f"ERROR {EVIL}", context=[(2, EVIL)], span=(6, 20)
    )
    report = replace(
        report,
        verdict=replace(
            report.verdict,
            summary=EVIL,
            first_failure=FirstFailure(rank=1, ts=T0, file=EVIL, line=3, text=EVIL),
        ),
        findings=[
            Finding(
                id=EVIL,
                rule=EVIL,
                category="rank_exception",
                severity="critical",
                title=EVIL,
                ranks=[1],
                nodes=[EVIL],
                evidence=[ev],
                explanation=EVIL,
                fix=EVIL,
                references=["javascript:alert(4)", EVIL],
                message=EVIL,
                role="primary",
            ),
            Finding(
                id="b", rule="r", category="c", severity="error", title="t", role="secondary", caused_by=EVIL
            ),
        ],
        ranks=[*report.ranks[:-1], replace(report.ranks[-1], node=EVIL, state=EVIL)],
        stack_groups=[StackGroup(id=1, ranks=[0], frames=[EVIL], waits_in=EVIL)],
        facts={EVIL: {EVIL: EVIL}, "rows": [{EVIL: EVIL}], "blob": {"x": [{"y": {EVIL: 1}}]}},
        job=replace(report.job, path=EVIL, env={EVIL: EVIL}, versions={"torch": EVIL}, nodes=[EVIL]),
    )
    timeline = timeline.with_columns(
        pl.when(pl.col("rank") == 7).then(pl.lit(EVIL)).otherwise(pl.col("node")).alias("node")
    )
    text = html_text(report, timeline)
    assert "<script>alert" not in text
    assert "</textarea>" not in text
    assert "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    page = Page(text)
    assert len(page.named("script")) == 1
    assert page.named("textarea") == [] and page.named("img") == []
    for _, attrs in page.tags:
        assert not any(k.startswith("on") for k in attrs), attrs
        assert not any(
            "javascript:" in (v or "") for k, v in attrs.items() if k in ("href", "src", "action")
        ), attrs
    # the anchor built from a hostile finding id stays a plain fragment
    assert all(u.startswith(("#", "data:")) for u in page.urls())
    render_html(report, timeline, tmp_path / "evil.html")


def test_sparse_report_renders() -> None:
    report = Report(tool_version="0.1.0", job=JobInfo(path="empty"), verdict=Verdict())
    text = html_text(report, empty_timeline())
    assert "No event has both a rank and a timestamp" in text
    assert "No rank reported a training step." in text
    assert "No rule or analyzer produced a finding." in text
    assert "No rank could be identified in the logs." in text
    assert ">UNKNOWN<" in text


def test_ranks_without_steps_or_times() -> None:
    report = Report(
        tool_version="0.1.0",
        job=JobInfo(path="j", world_size=2),
        verdict=Verdict(status="failed", category="rank_exception", culprit_ranks=[1]),
        ranks=[RankState(rank=0), RankState(rank=1, exit_code=-11, state="failed")],
    )
    text = html_text(report, empty_timeline())
    assert "-11 (SIGSEGV)" in text
    assert "No rank reported a training step." in text


def test_build_context_and_helpers() -> None:
    report, _ = watchdog_1024()
    ctx = build_context(report)
    assert ctx["world_size"] == 1024 and len(ctx["nodes"]) == 128
    assert ctx["majority_step"] == 1200 and ctx["collapse_ranks"] is True
    assert [(c["group"].id, [d for _, d in c["frames"]]) for c in stack_columns(report.stack_groups)] == [
        (2, [True, True, True, True, False, False, False, False]),
        (1, [True, True, False, False, False, False]),
    ]
    facts = {f["key"]: f for f in facts_view(report.facts)}
    assert facts["clock_skew"]["kind"] == "table" and facts["clock_skew"]["total"] == 128
    assert facts["clock_skew"]["columns"] == ["node", "offset_s", "uncertainty_s"]
    pairs = dict(facts["collective"]["pairs"])
    assert pairs["waiting_ranks"] == "0-516, 518-1023" and pairs["missing_ranks"] == "517"
    assert pairs["started"] == "2025-06-26 16:29:59.988"
    assert facts_view({"x": {"a": [{"deep": 1}]}})[0]["kind"] == "json"


def test_report_error_on_unwritable_path(tmp_path: Path) -> None:
    from postmortem.errors import ReportError

    report, timeline = seed000_hang()
    with pytest.raises(ReportError, match="cannot write the HTML report"):
        render_html(report, timeline, tmp_path / "missing-dir" / "r.html")


def test_first_failure_without_time() -> None:
    report, timeline = seed000_hang()
    report = replace(
        report, verdict=replace(report.verdict, first_failure=FirstFailure(None, None, "a.log", 0, "x"))
    )
    text = html_text(report, timeline)
    assert "rank unknown" in text and "<code>a.log</code>" in text
    assert isinstance(T0, datetime)


def test_4096_ranks_stay_under_5_mb() -> None:
    report, timeline = watchdog_1024(4096)
    text = html_text(report, timeline)
    assert len(text.encode()) < 5 * 1024 * 1024
    assert "one row per 32 ranks, the worst shown" in text
    assert text.count('<tr class="state-failed"><td class="num"') == 4095


def test_assets_cannot_close_their_own_tags() -> None:
    from postmortem.resources import templates_dir

    assert "</script" not in (templates_dir() / "report.js").read_text(encoding="utf-8").lower()
    assert "</style" not in (templates_dir() / "report.css").read_text(encoding="utf-8").lower()


def test_rule_prose_renders_as_sections() -> None:
    report, timeline = seed000_hang()
    finding = replace(
        report.findings[0],
        explanation="## What it means\nA rank raised `KeyError`.\n\n## Why it happens\nBad <data>.\n\n## What a match does not prove\nx",
        fix="Read the traceback\nof the `earliest` exception.",
    )
    text = html_text(replace(report, findings=[finding]), timeline)
    assert re.search(r"<h5>What it means</h5>\s*<p>A rank raised <code>KeyError</code>.</p>", text)
    assert re.search(
        r'<details class="more-expl">\s*<summary>Why it happens · What a match does not prove</summary>', text
    )
    assert "<p>Bad &lt;data&gt;.</p>" in text
    assert (
        '<span class="fix-label">Fix</span><div><p>Read the traceback of the <code>earliest</code> exception.</p>'
        in text
    )
