"""The report's two charts, drawn with matplotlib (Agg) and returned as inline SVG text.

Each chart is drawn from data built by a public function here, so tests assert on the data
rather than on pixels:

* :func:`lanes_frame`, :func:`progress_frame`, :func:`error_frame` and the grids of
  :func:`step_matrix` / :func:`lag_matrix` feed :func:`step_timeline_svg`: one lane per rank over
  wall time, coloured by how many steps the rank is behind the leading rank (so a healthy job is
  one calm colour and a lagging rank stands out), its errors, the silent tail of a hang and the
  first failure; a top axis names the leading step. Up to :data:`LANE_LIMIT` ranks every rank
  gets its own labelled lane; above that each image row covers a few ranks and shows the worst
  of them (:func:`shrink_rows`), so a single lagging rank of 4,096 still shows.
* :func:`last_step_frame` feeds :func:`last_step_svg`: where each rank stopped, grouped by node.

SVG output is deterministic: fixed ``svg.hashsalt``, no date metadata, text kept as text.
"""

from __future__ import annotations

import io
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from postmortem.model import RankState, Report
from postmortem.render.view import majority_last_step, ts_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Worlds up to this size get one labelled lane per rank; larger ones get the aggregated heat map.
LANE_LIMIT = 64
#: A rank silent this long (and this many step cadences) before the logs end gets its tail shaded.
SILENCE_MIN_S = 60.0
SILENCE_STEPS = 20
#: Heat-map resolution: at most this many time columns and rank rows.
TIME_BINS = 480
RANK_ROWS = 128

# Colours: one palette for every chart and the page (report.css uses the same values).
RED = "#c62828"
SILENT = "#b9b9c3"
GREY = "#9e9e9e"
UNKNOWN_NODE = "unknown node"
NODE_TONES = ("#4c78a8", "#86aad3")
NODE_COLORS = ("#4c78a8", "#72b7b2", "#54a24b", "#b279a2", "#9d755d", "#79706e", "#5f8fbf", "#88b04b")

_RC = {
    "svg.fonttype": "none",  # text stays text: smaller, crisp, selectable
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#666666",
    "xtick.color": "#444444",
    "ytick.color": "#444444",
    "hatch.linewidth": 0.6,
    "image.interpolation": "none",
}


# --------------------------------------------------------------------------- data


def progress_frame(timeline: pl.DataFrame) -> pl.DataFrame:
    """When each rank first reported each step: columns rank, step, ts (sorted by rank, ts)."""
    return (
        timeline.lazy()
        .filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null() & pl.col("ts").is_not_null())
        .group_by("rank", "step")
        .agg(pl.col("ts").min())
        .sort("rank", "ts", "step")
        .select("rank", "step", "ts")
        .collect()
    )


def error_frame(
    timeline: pl.DataFrame, *, first_only: bool = False, every: timedelta = timedelta(seconds=1)
) -> pl.DataFrame:
    """Error events per rank, one row per rank and ``every`` (a traceback is one marker).

    Columns rank, ts (the earliest in its interval), count. ``first_only`` keeps each rank's
    earliest error (large worlds). A chart passes its column width as ``every``, so a rank that
    printed 100,000 errors still draws at most one marker per column.
    """
    step_us = max(1, int(every / timedelta(microseconds=1)))
    errors = (
        timeline.lazy()
        .with_columns(_settled_ts())
        .filter((pl.col("kind") == "error") & pl.col("rank").is_not_null() & pl.col("ts").is_not_null())
        .group_by("rank", pl.col("ts").dt.truncate(f"{step_us}us").alias("bucket"))
        .agg(pl.col("ts").min(), pl.len().alias("count"))
        .sort("rank", "ts")
        .select("rank", "ts", pl.col("count").cast(pl.Int64))
    )
    if first_only:
        errors = errors.group_by("rank").agg(pl.all().first()).sort("rank")
    return errors.collect()


def _settled_ts() -> pl.Expr:
    """A line that inherited its time (a traceback) happened at or before the next line of its
    file that prints a time of its own; that time is closer than the inherited one, which can be
    minutes older (a timeout's traceback after a long silence)."""
    own = pl.when(~pl.col("ts_inferred").fill_null(False)).then(pl.col("ts"))
    return (
        pl.when(pl.col("ts_inferred").fill_null(False))
        .then(pl.coalesce(own.backward_fill().over("file", order_by="line"), pl.col("ts")))
        .otherwise(pl.col("ts"))
        .alias("ts")
    )


def lanes_frame(report: Report, timeline: pl.DataFrame) -> pl.DataFrame:
    """One row per rank: node, first and last event time, last step, state, silent tail.

    ``silent_from``/``silent_to`` bound the tail in which the rank printed nothing before the
    logs end; it is set for every rank of a hung job and for ranks whose state is hung/silent.
    """
    timed = timeline.filter(pl.col("rank").is_not_null() & pl.col("ts").is_not_null())
    spans = timed.group_by("rank").agg(
        pl.col("ts").min().alias("first_ts"), pl.col("ts").max().alias("tl_last_ts")
    )
    first = dict(zip(spans["rank"].to_list(), spans["first_ts"].to_list(), strict=True))
    tl_last = dict(zip(spans["rank"].to_list(), spans["tl_last_ts"].to_list(), strict=True))
    # a hang's silence starts at the last step a rank reported, not at the timeout that ended it
    progressed = timed.filter(pl.col("step").is_not_null()).group_by("rank").agg(pl.col("ts").max())
    last_progress = dict(zip(progressed["rank"].to_list(), progressed["ts"].to_list(), strict=True))
    end = job_end(report, timeline)
    states = {r.rank: r for r in report.ranks}
    ranks = sorted(set(states) | set(first))
    hung = report.verdict.status == "hung"
    rows: list[dict[str, Any]] = []
    for rank in ranks:
        st = states.get(rank)
        last_ts = (st.last_ts if st else None) or tl_last.get(rank)
        if hung and last_progress.get(rank) is not None:
            last_ts = last_progress[rank]
        silent = st is not None and (hung or st.state in ("hung", "silent") or _long_silence(st))
        tail = silent and last_ts is not None and end is not None and end > last_ts
        rows.append(
            {
                "rank": rank,
                "node": st.node if st else None,
                "first_ts": first.get(rank),
                "last_ts": last_ts,
                "last_step": st.last_step if st else None,
                "state": st.state if st else "unknown",
                "silent_from": last_ts if tail else None,
                "silent_to": end if tail else None,
            }
        )
    schema = {
        "rank": pl.Int64(),
        "node": pl.String(),
        "first_ts": pl.Datetime("us"),
        "last_ts": pl.Datetime("us"),
        "last_step": pl.Int64(),
        "state": pl.String(),
        "silent_from": pl.Datetime("us"),
        "silent_to": pl.Datetime("us"),
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def _long_silence(st: RankState) -> bool:
    """A rank of a failed job that printed nothing for far longer than its step cadence before the end."""
    if st.silent_s is None:
        return False
    return st.silent_s > max(SILENCE_MIN_S, SILENCE_STEPS * (st.step_cadence_s or 0.0))


def last_step_frame(report: Report) -> pl.DataFrame:
    """Where each rank stopped: rank, node, last_step, culprit, behind (below the majority's step)."""
    majority = majority_last_step(report.ranks)
    culprits = set(report.verdict.culprit_ranks)
    rows = [
        {
            "rank": r.rank,
            "node": r.node,
            "last_step": r.last_step,
            "culprit": r.rank in culprits,
            "behind": majority is not None and r.last_step is not None and r.last_step < majority,
        }
        for r in sorted(report.ranks, key=lambda r: r.rank)
    ]
    schema = {
        "rank": pl.Int64(),
        "node": pl.String(),
        "last_step": pl.Int64(),
        "culprit": pl.Boolean(),
        "behind": pl.Boolean(),
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def job_end(report: Report, timeline: pl.DataFrame) -> datetime | None:
    """The end of the logs: the job's end, else the last timestamp anywhere."""
    if report.job.end is not None:
        return report.job.end
    ts = timeline["ts"].drop_nulls()
    if len(ts):
        return ts.max()  # type: ignore[return-value]
    times = [r.last_ts for r in report.ranks if r.last_ts is not None]
    return max(times) if times else None


def log_interval_s(progress: pl.DataFrame) -> float | None:
    """Median seconds between a rank's consecutive progress lines (how often ranks log a step)."""
    gaps = (
        progress.sort("rank", "ts")
        .with_columns(pl.col("ts").diff().over("rank").dt.total_microseconds().alias("gap_us"))
        .filter(pl.col("gap_us") > 0)["gap_us"]
    )
    return float(gaps.median()) / 1e6 if len(gaps) else None  # type: ignore[arg-type]


def step_matrix(
    progress: pl.DataFrame, lanes: pl.DataFrame, t0: datetime, t1: datetime, *, bins: int = TIME_BINS
) -> tuple[np.ndarray, np.ndarray]:
    """Rank-by-time grids behind the step timeline, one row per rank of ``lanes``, in rank order.

    Returns ``(steps, silent)``: ``steps[row, col]`` is the step the rank had reached (NaN before
    its first progress line and after its last event of any kind); ``silent[row, col]`` is 1
    inside the rank's silent tail. Rows are positions, not rank numbers, so a stray huge rank
    number in a log cannot make the grid huge; for ranks 0..N-1 the two are the same.
    """
    row_of = _row_map(lanes["rank"])
    n_ranks = len(lanes)
    span_us = max((t1 - t0) / timedelta(microseconds=1), 1.0)

    def col_of(expr: pl.Expr) -> pl.Expr:
        return (
            ((expr - pl.lit(t0)).dt.total_microseconds() / span_us * bins)
            .floor()
            .clip(0, bins - 1)
            .cast(pl.Int64)
        )

    dense = np.full((n_ranks, bins), -1.0)
    if len(progress):
        binned = (
            progress.filter(pl.col("rank").is_in(lanes["rank"].implode()))
            .group_by(row_of(pl.col("rank")).alias("row"), col_of(pl.col("ts")).alias("col"))
            .agg(pl.col("step").max())
        )
        dense[binned["row"].to_numpy(), binned["col"].to_numpy()] = binned["step"].to_numpy()
    # a rank stays at its step until it reports the next one
    dense = np.maximum.accumulate(dense, axis=1)
    steps = np.where(dense < 0, np.nan, dense)
    silent = np.zeros((n_ranks, bins))
    cols = np.arange(bins)
    timed = lanes.filter(pl.col("last_ts").is_not_null()).with_columns(
        col_of(pl.col("last_ts")).alias("last_col"), col_of(pl.col("silent_from")).alias("silent_col")
    )
    timed = timed.with_columns(row_of(pl.col("rank")).alias("row"))
    for row, last_col, silent_col in timed.select("row", "last_col", "silent_col").iter_rows():
        steps[row, cols > last_col] = np.nan  # it printed nothing after its last event
        if silent_col is not None:
            silent[row, cols > silent_col] = 1.0
    return steps, silent


def _row_map(ranks: pl.Series) -> Any:
    """An expression builder mapping rank numbers to their row (position in ``ranks``, sorted)."""
    old = ranks.to_list()
    new = list(range(len(old)))
    return lambda expr: expr.replace_strict(old, new, default=None, return_dtype=pl.Int64)


def lag_matrix(steps: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Steps each rank is behind the leading rank, and the leading step per column.

    A rank is compared with where the leader was ``window`` columns earlier, so ranks that print
    the same step a moment apart (clock skew, logging jitter) do not count as lagging; only a
    rank more than one logging interval behind does. NaN where the rank has no step.
    """
    with np.errstate(all="ignore"):
        lead = np.where(
            np.isnan(steps).all(axis=0), np.nan, np.nanmax(np.nan_to_num(steps, nan=-np.inf), axis=0)
        )
    lead = np.where(np.isinf(lead), np.nan, lead)
    window = max(1, window)
    earlier = (
        np.concatenate([np.full(window, np.nan), lead[:-window]])
        if len(lead) > window
        else np.full_like(lead, np.nan)
    )
    lag = np.clip(np.nan_to_num(earlier[None, :], nan=-np.inf) - steps, 0, None)
    lag = np.where(np.isnan(steps), np.nan, lag)
    return lag, lead


def stall_spans(lead: np.ndarray, window: int, min_cols: int) -> list[tuple[int, int]]:
    """Column ranges in which no rank advanced a step: ``[(first_col, last_col)]``.

    A run of equal leading steps longer than ``min_cols`` is a stall, counted from one logging
    interval (``window`` columns) after the step was reached, when the next one was due.
    """
    spans = []
    finite = np.isfinite(lead)
    start = 0
    for col in range(1, len(lead) + 1):
        if col == len(lead) or not finite[col] or not finite[start] or lead[col] != lead[start]:
            if finite[start] and col - start > max(min_cols, window):
                spans.append((start + window, col - 1))
            start = col
    return spans


def dilate_rows(matrix: np.ndarray, radius: int) -> np.ndarray:
    """Spread each row's positive cells over ``radius`` rows either side, so one odd row is seen.

    Cells that are NaN (no data) stay NaN unless a neighbour spreads a positive value into them.
    """
    if radius <= 0 or matrix.shape[0] < 2:
        return matrix
    filled = np.nan_to_num(matrix, nan=0.0)
    padded = np.pad(filled, ((radius, radius), (0, 0)))
    n = matrix.shape[0]
    spread = np.max([padded[k : k + n] for k in range(2 * radius + 1)], axis=0)
    return np.where(spread > 0, spread, matrix)


def shrink_rows(matrix: np.ndarray, per_row: int) -> np.ndarray:
    """Merge each ``per_row`` consecutive rows into one, keeping the maximum (the worst rank)."""
    if per_row <= 1:
        return matrix
    n, bins = matrix.shape
    rows = -(-n // per_row)
    padded = np.pad(matrix, ((0, rows * per_row - n), (0, 0)), constant_values=np.nan).reshape(
        rows, per_row, bins
    )
    with np.errstate(all="ignore"):
        worst = np.nanmax(np.nan_to_num(padded, nan=-np.inf), axis=1)
    return np.where(np.isinf(worst), np.nan, worst)


#: Steps behind the leader, in classes: small lags must stand out as clearly as large ones.
LAG_BOUNDS = (-0.5, 0.5, 1.5, 5.5, 20.5, 100.5, 1e18)
LAG_LABELS = ("0", "1", "2-5", "6-20", "21-100", ">100")
LAG_COLORS = ("#d6e6f4", "#ffe08a", "#fdb863", "#f07c3a", "#d7301f", "#7f0000")


# --------------------------------------------------------------------------- charts


def step_timeline_svg(report: Report, timeline: pl.DataFrame) -> str | None:
    """Per-rank step timeline as inline SVG, or None when nothing has both a rank and a time."""
    lanes = lanes_frame(report, timeline)
    timed = lanes.filter(pl.col("first_ts").is_not_null() | pl.col("last_ts").is_not_null())
    if not len(timed):
        return None
    t0 = timed["first_ts"].drop_nulls().min() or timed["last_ts"].drop_nulls().min()
    end = job_end(report, timeline)
    t1 = max(x for x in (end, timed["last_ts"].drop_nulls().max()) if x is not None)
    if t1 <= t0:  # type: ignore[operator]
        t1 = t0 + timedelta(seconds=1)  # type: ignore[operator]
    ranks = lanes["rank"].to_list()
    row_of = dict(zip(ranks, range(len(ranks)), strict=True))
    n_ranks = len(ranks)
    large = n_ranks > LANE_LIMIT
    per_row = max(1, -(-n_ranks // RANK_ROWS)) if large else 1
    progress = progress_frame(timeline)
    steps, silent = step_matrix(progress, lanes, t0, t1)  # type: ignore[arg-type]
    bin_s = (t1 - t0).total_seconds() / TIME_BINS  # type: ignore[operator]
    errors = error_frame(timeline, first_only=large, every=timedelta(seconds=max(1.0, bin_s)))
    interval = log_interval_s(progress) or bin_s
    window = int(np.ceil(interval / bin_s)) if bin_s > 0 else 1
    lag, lead = lag_matrix(steps, window)
    stalls = stall_spans(
        lead, window, int(np.ceil(max(SILENCE_MIN_S, 5 * interval) / bin_s)) if bin_s > 0 else 1
    )
    lag, silent = shrink_rows(lag, per_row), shrink_rows(silent, per_row)
    if large:  # one row of 128 is 4 px: widen anything abnormal so it cannot be missed
        lag, silent = dilate_rows(lag, 1), dilate_rows(silent, 1)

    import matplotlib

    with matplotlib.rc_context(_RC | {"svg.hashsalt": "postmortem-steps"}):
        from matplotlib import dates as mdates
        from matplotlib import transforms
        from matplotlib.colors import BoundaryNorm, ListedColormap
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        height = 5.8 if large else max(2.8, 1.7 + 0.34 * n_ranks)
        fig = Figure(figsize=(11, height), layout="constrained")
        ax = fig.add_subplot()
        x0, x1 = mdates.date2num(t0), mdates.date2num(t1)
        extent = (x0, x1, n_ranks - 0.5, -0.5)
        legend: list[Any] = []
        if np.isfinite(lag).any():
            img = ax.imshow(
                lag,
                aspect="auto",
                extent=extent,
                origin="upper",
                cmap=ListedColormap(LAG_COLORS),
                norm=BoundaryNorm(LAG_BOUNDS, len(LAG_COLORS)),
                interpolation="none",
            )
            if np.nanmax(lag) > 0:
                bar = fig.colorbar(img, ax=ax, pad=0.01, fraction=0.025, aspect=25)
                bar.set_ticks([0, 1, 3, 13, 60, 1000], labels=list(LAG_LABELS))
                bar.set_label("steps behind the leading rank")
                bar.ax.tick_params(length=0)
            else:  # nobody lagged: a six-class colour bar would only explain the absence of colour
                legend.append(Patch(facecolor=LAG_COLORS[0], label="in step with the leading rank"))
        if silent.any():
            ax.imshow(
                np.where(silent > 0, 1.0, np.nan),
                aspect="auto",
                extent=extent,
                origin="upper",
                cmap=ListedColormap([SILENT]),
                interpolation="none",
            )
            legend.append(Patch(facecolor=SILENT, label="silent until the logs end"))
        col_days = (x1 - x0) / TIME_BINS
        for a, b in stalls:
            ax.axvspan(
                x0 + a * col_days,
                x0 + (b + 1) * col_days,
                facecolor="none",
                edgecolor="#555555",
                hatch="////",
                lw=0,
                zorder=1.5,
            )
        if stalls:
            legend.append(
                Patch(
                    facecolor="white",
                    edgecolor="#555555",
                    hatch="////",
                    lw=0,
                    label="no rank advanced a step",
                )
            )
        culprits = sorted(set(report.verdict.culprit_ranks) & set(row_of))
        if not large:
            _lane_decorations(ax, lanes, set(culprits))
        if len(errors):
            ax.scatter(
                mdates.date2num(errors["ts"].to_list()),
                [row_of[r] for r in errors["rank"].to_list()],
                marker="x",
                s=10 if large else 36,
                linewidths=0.7 if large else 1.6,
                color=RED,
                zorder=4,
            )
            legend.append(
                Line2D(
                    [], [], marker="x", ls="", color=RED, label="first error of a rank" if large else "error"
                )
            )
        if culprits and large:
            edge = transforms.blended_transform_factory(ax.transAxes, ax.transData)
            ax.scatter(
                [1.0] * len(culprits),
                [row_of[r] for r in culprits],
                marker="<",
                s=45,
                color=RED,
                transform=edge,
                clip_on=False,
                zorder=5,
            )
            legend.append(Line2D([], [], marker="<", ls="", color=RED, label="culprit rank"))
        ff = report.verdict.first_failure
        if ff is not None and ff.ts is not None and ff.rank in row_of and t0 <= ff.ts <= t1:  # type: ignore[operator]
            fx = mdates.date2num(ff.ts)
            ax.axvline(fx, color=RED, lw=1.0, ls="--", zorder=3)
            ax.plot([fx], [row_of[ff.rank]], marker="*", ms=15, color=RED, mec="white", mew=1.0, zorder=6)
            left = fx < (x0 + x1) / 2
            ax.annotate(
                f"first failure: rank {ff.rank} at {ts_text(ff.ts, date=False)}",
                xy=(fx, 0),
                xycoords=("data", "axes fraction"),
                xytext=(5 if left else -5, 5),
                textcoords="offset points",
                color=RED,
                fontsize=8.5,
                ha="left" if left else "right",
                bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85},
                zorder=7,
            )
            legend.append(Line2D([], [], marker="*", ls="", ms=10, color=RED, label="first failure"))
        # a little room on the right so markers at the very end (the final errors) are not cut in half
        ax.set_xlim(x0, x1 + 0.012 * (x1 - x0))
        ax.set_ylim(n_ranks - 0.5, -0.5)
        locator = mdates.AutoDateLocator(maxticks=9)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        ax.set_xlabel("wall time (as logged)")
        _lead_axis(ax, lead, x0, x1)
        if large:
            ax.set_ylabel(f"rank (one row per {per_row} ranks, the worst shown)" if per_row > 1 else "rank")
            ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=12, integer=True))
            if ranks != list(range(n_ranks)):  # rows are positions: label them with their rank
                ax.yaxis.set_major_formatter(
                    matplotlib.ticker.FuncFormatter(
                        lambda y, _: str(ranks[round(y)]) if 0 <= round(y) < n_ranks else ""
                    )
                )
        else:
            ax.set_ylabel("rank")
        if legend:
            fig.legend(handles=legend, loc="outside upper left", ncol=len(legend), frameon=False)
        return _svg(fig, "Per-rank step timeline")


def _lead_axis(ax: Axes, lead: np.ndarray, x0: float, x1: float) -> None:
    """A top axis naming the leading rank's step at a few moments, so the time axis reads as progress."""
    finite = np.isfinite(lead)
    if not finite.any():
        return
    # label the moments a new step was first reached: a stall repeats nothing
    previous = np.concatenate([[np.nan], lead[:-1]])
    cols = np.flatnonzero(finite & ((lead != previous) | ~np.isfinite(previous)))
    # at most ~7 labels, never closer than a tenth of the axis, so a burst of steps stays readable
    gap = max(1, len(lead) // 10)
    picks: list[int] = []
    for c in cols[:: max(1, len(cols) // 7)] if len(cols) > 7 else cols:
        if not picks or c - picks[-1] >= gap:
            picks.append(int(c))
    if int(cols[-1]) - picks[-1] >= gap:
        picks.append(int(cols[-1]))
    elif picks[-1] != int(cols[-1]) and len(picks) > 1:
        picks[-1] = int(cols[-1])  # the last step reached matters more than the one before it
    width = (x1 - x0) / len(lead)
    top = ax.secondary_xaxis("top")
    top.set_xticks([x0 + (c + 0.5) * width for c in picks])
    top.set_xticklabels([f"{int(lead[c])}" for c in picks])
    top.set_xlabel("step of the leading rank", fontsize=8, color="#444444")
    top.tick_params(labelsize=8, length=2)


def _lane_decorations(ax: Axes, lanes: pl.DataFrame, culprits: set[int]) -> None:
    """Small worlds: a label per lane (culprits in red), gaps between lanes, last step at the right."""
    ranks = lanes["rank"].to_list()
    nodes = lanes["node"].to_list()
    rows = range(len(ranks))
    several = len({n for n in nodes if n}) > 1
    ax.set_yticks(rows)
    ax.set_yticklabels(
        [f"{_short(n or '?', 16)}  {r}" if several else str(r) for r, n in zip(ranks, nodes, strict=True)]
    )
    for label, r in zip(ax.get_yticklabels(), ranks, strict=True):
        if r in culprits:
            label.set_color(RED)
            label.set_fontweight("bold")
    ax.tick_params(axis="y", length=0)
    for row in rows[:-1]:
        same = nodes[row] == nodes[row + 1]  # a dark rule where the node changes
        ax.axhline(row + 0.5, color="white" if same else "#333333", lw=2.5 if same else 1.2, zorder=2)
    right = ax.secondary_yaxis("right")
    right.set_yticks(rows)
    right.set_yticklabels([f"step {s}" if s is not None else "no step" for s in lanes["last_step"].to_list()])
    right.tick_params(length=0)
    right.spines["right"].set_visible(False)


def last_step_svg(report: Report) -> str | None:
    """Last step by rank, bars grouped and coloured by node, ranks behind the majority in red."""
    frame = last_step_frame(report)
    known = frame.filter(pl.col("last_step").is_not_null())
    if not len(known):
        return None
    majority = majority_last_step(report.ranks)
    large = len(frame) > LANE_LIMIT
    groups = _node_groups(frame)
    lo, hi = int(known["last_step"].min()), int(known["last_step"].max())  # type: ignore[arg-type]
    # When every rank is near the top, zoom in: a rank 3 steps behind out of 120,000 must show.
    base = 0 if lo == hi or lo <= 0.5 * hi else max(0, lo - max(1, round(0.25 * (hi - lo))))
    top = hi + max(1, round(0.12 * (hi - base)))

    import matplotlib

    with matplotlib.rc_context(_RC | {"svg.hashsalt": "postmortem-laststep"}):
        from matplotlib.figure import Figure

        fig = Figure(figsize=(11, 3.0 if not large else 3.4), layout="constrained")
        ax = fig.add_subplot()
        for i, (_node, start, stop) in enumerate(groups):
            sub = frame.filter(pl.col("rank").is_between(start, stop))
            # many nodes: two alternating tones read as groups; a rainbow of 128 would read as noise
            if not large:
                color = NODE_COLORS[i % len(NODE_COLORS)]
            else:  # past ~64 nodes, stripes only shimmer: one tone, the labels below name the nodes
                color = NODE_TONES[i % 2] if len(groups) <= 64 else NODE_TONES[0]
            values = sub["last_step"].fill_null(base).to_numpy().astype(float)
            if large:
                # edges at rank ± 0.5 so neighbouring node groups touch (no white seams)
                edges = np.append(sub["rank"].to_numpy() - 0.5, stop + 0.5)
                ax.fill_between(edges, np.append(values, values[-1]), base, step="post", color=color, lw=0)
            else:
                ax.bar(sub["rank"].to_numpy(), values - base, bottom=base, width=0.72, color=color)
            if i and not large:
                ax.axvline(start - 0.5, color="#333333", lw=0.8)
        odd = frame.filter(pl.col("behind") | pl.col("culprit"))
        if len(odd):
            ys = odd["last_step"].fill_null(base).to_numpy()
            if large and majority is not None:  # one rank is a hairline among 1,000: draw its shortfall
                ax.vlines(odd["rank"].to_numpy(), ys, np.maximum(ys, majority), color=RED, lw=2.0, zorder=4)
            ax.scatter(odd["rank"].to_numpy(), ys, marker="v", color=RED, s=28 if large else 40, zorder=4)
            if len(odd) <= 12:
                for rank, y in zip(odd["rank"].to_list(), ys, strict=True):
                    ax.annotate(
                        f"r{rank}",
                        (rank, y),
                        xytext=(5, 0) if large else (0, 6),
                        textcoords="offset points",
                        ha="left" if large else "center",
                        fontsize=8,
                        color=RED,
                    )
        missing = frame.filter(pl.col("last_step").is_null())
        if len(missing):
            ax.scatter(
                missing["rank"].to_numpy(),
                [base] * len(missing),
                marker="x",
                color=GREY,
                s=20,
                zorder=4,
                clip_on=False,
            )
        if not large:
            for rank, step in known.select("rank", "last_step").iter_rows():
                ax.annotate(
                    str(step),
                    (rank, base),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    color="white",
                )
        if majority is not None:
            ax.axhline(majority, color="#333333", lw=0.8, ls="--", zorder=3)
            ax.annotate(
                f"majority: step {majority}",
                (1.0, majority),
                xycoords=("axes fraction", "data"),
                xytext=(-2, 3),
                textcoords="offset points",
                ha="right",
                fontsize=8,
                color="#333333",
            )
        ax.set_ylim(base, top)
        ax.set_xlim(frame["rank"].min() - 0.6, frame["rank"].max() + 0.6)  # type: ignore[operator]
        ax.set_ylabel("last step" + (f" (axis starts at {base})" if base else ""))
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, nbins=5))
        _node_axis(ax, groups, large)
        return _svg(fig, "Last step by rank, grouped by node")


def _node_groups(frame: pl.DataFrame) -> list[tuple[str, int, int]]:
    """Runs of consecutive ranks on one node: (node, first rank, last rank)."""
    groups: list[tuple[str, int, int]] = []
    for rank, node in frame.select("rank", "node").iter_rows():
        name = node or UNKNOWN_NODE
        if groups and groups[-1][0] == name and groups[-1][2] == rank - 1:
            groups[-1] = (name, groups[-1][1], rank)
        else:
            groups.append((name, rank, rank))
    return groups


def _node_axis(ax: Axes, groups: list[tuple[str, int, int]], large: bool) -> None:
    """Rank ticks on the x axis and, under them, the node each run of ranks ran on."""
    import matplotlib

    if large:
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=16, integer=True))
    else:
        ax.set_xticks([r for _, a, b in groups for r in range(a, b + 1)])
    ax.tick_params(axis="x", length=2)
    if all(n == UNKNOWN_NODE for n, _, _ in groups):
        ax.set_xlabel("rank (no node names in the logs)")
        return
    every = max(1, -(-len(groups) // 12))  # at most ~12 node labels
    shown = groups[::every]
    nodes = ax.secondary_xaxis(-0.16 if not large else -0.2)
    nodes.set_xticks([(a + b) / 2 for _, a, b in shown])
    nodes.set_xticklabels([_short(n, 18) for n, _, _ in shown], fontsize=8, color="#333333")
    nodes.tick_params(length=0)
    nodes.spines["bottom"].set_visible(False)
    count = len({n for n, _, _ in groups})
    label = "rank, grouped by node" + (f" ({count} nodes, one labelled in {every})" if every > 1 else "")
    nodes.set_xlabel(label)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_ROOT_ATTRS = re.compile(r'\s(?:xmlns(?::xlink)?|width|height|version)="[^"]*"')


def _svg(fig: Figure, label: str) -> str:
    """The figure as an ``<svg>`` element fit for inlining: no XML prolog, no namespace URLs, no size."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = _PROLOG.sub("", buf.getvalue(), count=1)
    head, _, rest = text.partition(">")
    # an inline <svg> in HTML needs no xmlns; without width/height it scales with its container
    head = _ROOT_ATTRS.sub("", head)
    return f'{head} role="img" aria-label="{label}" class="chart">{rest}'.strip()
