"""Rank lists as people write them: ``[0, 1, 2, 3, 5, 6]`` <-> ``"0-3, 5, 6"``.

A run of three or more consecutive ranks collapses to ``a-b``; shorter runs stay
listed, so ``[6, 7]`` reads ``"6, 7"`` as in a ticket ("ranks 0-4, 6, 7 timed out").
"""

from __future__ import annotations

from collections.abc import Iterable


def format_ranks(ranks: Iterable[int]) -> str:
    """Write ranks as sorted, de-duplicated ranges: ``[5, 0, 1, 2, 3]`` -> ``"0-3, 5"``.

    An empty input gives ``""``.
    """
    values = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{values[i]}-{values[j]}")
        else:
            parts.extend(str(v) for v in values[i : j + 1])
        i = j + 1
    return ", ".join(parts)


def parse_ranks(text: str) -> list[int]:
    """Read ``"0-3, 5"`` back into ``[0, 1, 2, 3, 5]``; raises ``ValueError`` on anything else."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if sep:
            start, end = int(lo), int(hi)
            if end < start:
                raise ValueError(f"rank range {part!r} runs backwards")
            out.update(range(start, end + 1))
        else:
            out.add(int(part))
    return sorted(out)


def plural_ranks(ranks: Iterable[int]) -> str:
    """``"rank 5"`` or ``"ranks 0-4, 6, 7"``: the word agrees with the count."""
    values = sorted(set(ranks))
    word = "rank" if len(values) == 1 else "ranks"
    return f"{word} {format_ranks(values)}"
