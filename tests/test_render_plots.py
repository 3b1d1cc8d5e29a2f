from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from postmortem.model import JobInfo, RankState, Report, Verdict
from postmortem.render import plots
from postmortem.schema import conform
from tests.test_render_fixtures import STRAGGLER, T0, WORLD, seed000_hang, watchdog_1024


def _progress(rows: list[tuple[int, int, float]]) -> pl.DataFrame:
    """Timeline of progress lines from (rank, step, seconds after T0)."""
    return conform(
        pl.DataFrame(
            {
                "rank": [r for r, _, _ in rows],
                "step": [s for _, s, _ in rows],
                "ts": [T0 + timedelta(seconds=t) for _, _, t in rows],
                "kind": ["progress"] * len(rows),
            }
        )
    )


def test_progress_frame_keeps_first_time_of_each_step() -> None:
    tl = _progress([(0, 1, 1.0), (0, 1, 1.5), (0, 2, 2.0), (1, 1, 1.1)])
    frame = plots.progress_frame(tl)
    assert frame.rows() == [
        (0, 1, T0 + timedelta(seconds=1)),
        (0, 2, T0 + timedelta(seconds=2)),
        (1, 1, T0 + timedelta(seconds=1.1)),
    ]


def test_seed_lanes_every_rank_has_a_silent_tail() -> None:
    report, timeline = seed000_hang()
    lanes = plots.lanes_frame(report, timeline)
    assert lanes["rank"].to_list() == list(range(8))
    assert lanes["last_step"].to_list() == [76] * 8
    assert lanes["silent_to"].to_list() == [report.job.end] * 8
    assert lanes.filter(pl.col("rank") == 2)["silent_from"].item() == T0 + timedelta(seconds=7.2 * 76 + 3.1)
    assert plots.progress_frame(timeline).height == 8 * 76 + 3


def test_1024_only_the_straggler_is_silent() -> None:
    report, timeline = watchdog_1024()
    lanes = plots.lanes_frame(report, timeline)
    assert lanes.filter(pl.col("silent_from").is_not_null())["rank"].to_list() == [STRAGGLER]
    errors = plots.error_frame(timeline, first_only=True)
    assert errors.height == WORLD - 1 and STRAGGLER not in errors["rank"].to_list()
    frame = plots.last_step_frame(report)
    assert frame.filter(pl.col("behind"))["rank"].to_list() == [STRAGGLER]
    assert frame.filter(pl.col("culprit"))["rank"].to_list() == [STRAGGLER]


def test_step_matrix_lag_and_stall() -> None:
    # ranks 0 and 1 step every 10 s; rank 2 falls behind from step 5 on, then all stop at t=100
    rows = [(r, s, 10.0 * s) for r in (0, 1) for s in range(1, 11)]
    rows += [(2, s, 10.0 * s if s <= 5 else 10.0 * s + 5.0 * (s - 5) * 3) for s in range(1, 8)]
    tl = _progress(rows)
    report = Report(
        tool_version="t",
        job=JobInfo(path="j", end=T0 + timedelta(seconds=400)),
        verdict=Verdict(status="failed"),
        ranks=[RankState(rank=r, last_ts=T0 + timedelta(seconds=100 if r < 2 else 130)) for r in range(3)],
    )
    lanes = plots.lanes_frame(report, tl)
    progress = plots.progress_frame(tl)
    t0, t1 = T0 + timedelta(seconds=10), T0 + timedelta(seconds=400)
    steps, silent = plots.step_matrix(progress, lanes, t0, t1, bins=39)  # 10 s per column
    assert steps.shape == (3, 39)
    assert steps[0, 0] == 1 and steps[0, 9] == 10 and np.isnan(steps[0, 10])  # nothing after its last event
    assert silent.sum() == 0  # a failed job, silences under SILENCE_MIN_S are not shaded
    lag, lead = plots.lag_matrix(steps, window=1)
    assert np.nanmax(lag[0]) == 0 and np.nanmax(lag[1]) == 0
    assert np.nanmax(lag[2]) >= 3  # rank 2 ends several steps behind
    assert lead[9] == 10
    assert plots.stall_spans(lead, window=1, min_cols=5) == []
    flat = np.array([1, 2, 3, 3, 3, 3, 3, 3, 3, 3, np.nan, np.nan])
    assert plots.stall_spans(flat, window=1, min_cols=5) == [(3, 9)]


def test_shrink_and_dilate_keep_one_odd_rank_visible() -> None:
    lag = np.zeros((1024, 4))
    lag[517, 2] = 7
    small = plots.shrink_rows(lag, 8)
    assert small.shape == (128, 4) and small[64, 2] == 7 and small.sum() == 7
    wide = plots.dilate_rows(small, 1)
    assert [r for r in range(128) if wide[r, 2] == 7] == [63, 64, 65]
    assert np.isnan(plots.shrink_rows(np.full((4, 2), np.nan), 2)).all()


def test_svgs_deterministic_and_clean() -> None:
    report, timeline = seed000_hang()
    a = plots.step_timeline_svg(report, timeline)
    assert a is not None and a == plots.step_timeline_svg(report, timeline)
    b = plots.last_step_svg(report)
    assert b is not None and b == plots.last_step_svg(report)
    for svg in (a, b):
        assert svg.startswith("<svg ") and "<?xml" not in svg and "DOCTYPE" not in svg
        assert "http" not in svg
    assert ">first failure: rank 2 at 16:09:10.300<" in a
    assert ">step 76<" in a


def test_large_world_draws_an_image_not_lanes() -> None:
    report, timeline = watchdog_1024()
    svg = plots.step_timeline_svg(report, timeline)
    assert svg is not None
    assert svg.count("<image ") == 2  # lag layer + silent layer
    assert len(svg) < 400_000
    assert "one row per 8 ranks, the worst shown" in svg
    last = plots.last_step_svg(report)
    assert last is not None and ">r517<" in last and "axis starts at 1188" in last


def test_node_names_are_escaped_in_svg() -> None:
    report, _ = seed000_hang()
    evil = "<script>alert(1)</script>"
    report = replace(report, ranks=[replace(r, node=evil if r.rank == 3 else r.node) for r in report.ranks])
    svg = plots.last_step_svg(report)
    assert svg is not None and "<script>" not in svg and "&lt;script&gt;" in svg


def test_nothing_to_plot() -> None:
    report = Report(tool_version="t", job=JobInfo(path="j"), verdict=Verdict(), ranks=[RankState(rank=0)])
    empty = conform(pl.DataFrame({"rank": [0], "message": ["x"]}))
    assert plots.step_timeline_svg(report, empty) is None
    assert plots.last_step_svg(report) is None


def test_single_timestamp_does_not_crash() -> None:
    ts = datetime(2025, 1, 1, 0, 0, 0)
    report = Report(
        tool_version="t",
        job=JobInfo(path="j"),
        verdict=Verdict(),
        ranks=[RankState(rank=0, last_step=3, last_ts=ts)],
    )
    tl = conform(pl.DataFrame({"rank": [0], "ts": [ts], "step": [3], "kind": ["progress"]}))
    assert plots.step_timeline_svg(report, tl) is not None
    assert plots.last_step_svg(report) is not None
