"""Polars expression helpers shared by the stages."""

from __future__ import annotations

import polars as pl


def matches(text: pl.Expr, pattern: str, *, literal: bool = False) -> pl.Expr:
    """Whether ``text`` matches ``pattern``: False where ``text`` is null, and free there.

    For a column masked to a few rows (``pl.when(mask).then(col)``), ``str.contains`` still runs
    its regex on the values behind the nulls, so it costs what an unmasked search does;
    ``str.find`` skips null rows (measured with polars 2.1: 190 vs 5 ns per masked row).
    """
    return text.str.find(pattern, literal=literal).is_not_null()


def matches_any(text: pl.Expr, patterns: tuple[str, ...]) -> pl.Expr:
    """Whether ``text`` matches any of ``patterns``, one search each (for gates whose union would
    defeat the regex engine's literal search); for unmasked columns."""
    return pl.any_horizontal(text.str.contains(p) for p in patterns)
