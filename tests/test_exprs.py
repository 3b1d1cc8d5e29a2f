"""The expression helpers give what the plain polars expressions they stand for give."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from postmortem.exprs import matches, scatter_rows
from postmortem.parsers import patterns as P

PATTERNS = [P.ERROR_LINE, P.LIFECYCLE_LINE, P.NOTABLE_INFO, P.NON_TRAIN_BAR, r"^$", "x*"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=40), st.booleans()), max_size=20), st.sampled_from(PATTERNS))
def test_matches_is_contains_on_kept_rows_and_false_on_masked_ones(rows: list[tuple[str, bool]], pattern: str):
    frame = pl.DataFrame({"text": [t for t, _ in rows], "keep": [k for _, k in rows]}, schema={"text": pl.String, "keep": pl.Boolean})
    masked = pl.when(pl.col("keep")).then(pl.col("text"))
    got = frame.select(matches(masked, pattern)).to_series().to_list()
    want = frame.select(pl.col("keep") & pl.col("text").str.contains(pattern)).to_series().to_list()
    assert got == want


def test_matches_on_known_lines():
    frame = pl.DataFrame({"text": ["Traceback (most recent call last):", "all is well", None]})
    assert frame.select(matches(pl.col("text"), P.ERROR_LINE)).to_series().to_list() == [True, False, False]


def test_scatter_rows_writes_values_and_nulls_in_place():
    frame = pl.DataFrame({"a": [1, 2, 3, 4], "b": [None, None, None, None]}, schema={"a": pl.Int64, "b": pl.Int64})
    values = pl.DataFrame({"_row": [1, 3], "a": [None, None], "b": [20, 40], "c": [None, None]}, schema_overrides={"_row": pl.UInt32, "a": pl.Int64, "c": pl.String})
    out = scatter_rows(frame, values, {"a": pl.Int64, "b": pl.Int64, "c": pl.String})
    # nulls written over values are written; a new all-null column is a null column
    assert out.rows() == [(1, None, None), (None, 20, None), (3, None, None), (None, 40, None)]
