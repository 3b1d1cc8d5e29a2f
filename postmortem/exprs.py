"""Polars helpers shared by the stages."""

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


def scatter_rows(frame: pl.DataFrame, values: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    """Write ``values``' columns into ``frame`` at the rows ``values["_row"]`` names (``_row`` is
    ``frame``'s row index); the other rows keep what they had, or null for a new column. No
    join, no re-sort."""
    rows = values.get_column("_row")
    out = []
    for name, dtype in columns.items():
        present = name in frame.columns
        if values.get_column(name).null_count() == values.height and (
            not present or frame.get_column(name).null_count() == frame.height
        ):
            # nulls written over nulls: the column is a constant null (no buffer, free to filter)
            out.append(pl.col(name).cast(dtype) if present else pl.lit(None, dtype).alias(name))
            continue
        column = frame.get_column(name).cast(dtype).clone() if present else pl.repeat(None, frame.height, dtype=dtype, eager=True).alias(name)
        out.append(column.scatter(rows, values.get_column(name).cast(dtype)))
    return frame.with_columns(out)
