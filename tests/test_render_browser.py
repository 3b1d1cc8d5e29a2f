"""The HTML report in a real browser: headless Chromium from Debian, driven by playwright-python.

Opens the report from file:// with the network unused, checks what a person sees first (verdict,
charts, findings), that nothing was requested and nothing logged an error, that the rank table
sorts and filters, and saves full-page screenshots to tests/actual/ (git-ignored) for a look.
Skips only when Chromium or playwright is missing; .ci/run installs both.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from postmortem.render import render_html
from tests.test_render_fixtures import seed000_hang, watchdog_1024

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ACTUAL = Path(__file__).resolve().parent / "actual"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

if not Path(CHROMIUM).exists():
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _open(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on(
        "console",
        lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.goto(path.as_uri(), wait_until="load")
    return page, requests, problems


def _check_common(page: Any, requests: list[str], problems: list[str], url: str) -> None:
    assert [u for u in requests if u != url and not u.startswith("data:")] == []
    assert problems == []
    assert page.locator("#verdict").is_visible()
    for chart in ("#plot-steps svg.chart", "#plot-laststep svg.chart"):
        box = page.locator(chart).bounding_box()
        assert box is not None and box["width"] > 800 and box["height"] > 150, (chart, box)
    assert page.locator("article.finding.role-primary").first.is_visible()


def test_seed000_in_chromium(browser: Any, tmp_path: Path) -> None:
    report, timeline = seed000_hang()
    out = tmp_path / "seed000.html"
    render_html(report, timeline, out)
    page, requests, problems = _open(browser, out)
    _check_common(page, requests, problems, out.as_uri())
    assert page.locator(".status-pill").inner_text() == "HUNG"
    assert page.locator(".culprits").inner_text().startswith("2, 5, 6")
    assert (
        "Ranks 2, 5, 6 ran out of data" in page.locator("article.finding.role-primary h3").first.inner_text()
    )
    # secondary findings are folded until opened
    echoes = page.locator("details.echoes").first
    assert not echoes.locator("article.finding").first.is_visible()
    echoes.locator("summary").click()
    assert echoes.locator("article.finding").first.is_visible()
    # the heat-map image of the lanes is drawn (the SVG <image> has a size)
    image = page.locator("#plot-steps svg image").first.bounding_box()
    assert image is not None and image["width"] > 500
    ACTUAL.mkdir(exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")  # else the sticky header is captured mid-page
    page.screenshot(path=str(ACTUAL / "render_seed000.png"), full_page=True)
    page.close()


def test_1024_ranks_in_chromium(browser: Any, tmp_path: Path) -> None:
    report, timeline = watchdog_1024()
    out = tmp_path / "watchdog1024.html"
    render_html(report, timeline, out)
    page, requests, problems = _open(browser, out)
    _check_common(page, requests, problems, out.as_uri())
    assert page.locator(".status-pill").inner_text() == "FAILED"
    table = page.locator("#rank-table")
    assert not table.is_visible()  # collapsed for a large world
    page.locator("details.rank-table > summary").click()
    assert table.is_visible()
    # sort by last step: the straggler (1190) comes first; again: it goes last
    header = table.locator("thead th", has_text="Last step")
    header.click()
    assert table.locator("tbody tr").first.locator("td").first.inner_text() == "517"
    header.click()
    assert table.locator("tbody tr").last.locator("td").first.inner_text() == "517"
    # the filter (shown only with JS) narrows to one node's 8 ranks
    box = page.locator("input.filter")
    assert box.is_visible()
    box.fill("gpu-node-064")
    assert table.locator("tbody tr:visible").count() == 8
    box.fill("")
    ACTUAL.mkdir(exist_ok=True)
    page.screenshot(path=str(ACTUAL / "render_watchdog1024.png"), full_page=False)
    page.locator("details.rank-table > summary").click()  # fold the 1,024 rows again for the full page
    page.evaluate("window.scrollTo(0, 0)")  # else the sticky header is captured mid-page
    page.screenshot(path=str(ACTUAL / "render_watchdog1024_full.png"), full_page=True)
    page.close()


def test_page_reads_without_javascript(browser: Any, tmp_path: Path) -> None:
    report, timeline = seed000_hang()
    out = tmp_path / "nojs.html"
    render_html(report, timeline, out)
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(out.as_uri())
    assert page.locator("#verdict").is_visible()
    assert page.locator("#rank-table tbody tr").count() == 8
    assert not page.locator("input.filter").is_visible()  # useless without JS, so hidden
    assert (
        page.locator("article.finding.role-primary pre.ctx mark").first.inner_text()
        == "epoch:0 Dataloader finished"
    )
    context.close()
