"""The expression helpers give what the plain polars expressions they stand for give."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from postmortem.exprs import matches
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
