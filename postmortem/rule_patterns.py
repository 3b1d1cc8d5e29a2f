"""Rule patterns as text: their Python and polars forms, and the literals every match must contain.

Pure functions on pattern strings. The rule engine uses them to compile a whole rule set into
one literal prefilter pass (see ``rule_engine._Plan``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import regex

try:  # the parser of Python's re, used only to find literals in patterns
    from re import _parser as sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse  # type: ignore[no-redef]


def py_flags(ignore_case: bool) -> int:
    return regex.V0 | (regex.IGNORECASE if ignore_case else 0)


def py_compile(patterns: Iterable[str], ignore_case: bool) -> list[regex.Pattern[str]]:
    return [regex.compile(p, py_flags(ignore_case)) for p in patterns]


def polars_pattern(pattern: str, ignore_case: bool) -> str:
    return f"(?i){pattern}" if ignore_case else pattern


def unnamed(pattern: str) -> str:
    """The pattern with named groups made non-capturing, so several can share one regex."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            # a ']' right after '[' or '[^' is a literal member of the class
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            if pattern[j : j + 1] == "]":
                out.append(pattern[i : j + 1])
                i = j + 1
                continue
        elif c == "(" and pattern.startswith(("(?P<", "(?<"), i):
            start = i + (4 if pattern.startswith("(?P<", i) else 3)
            end = pattern.find(">", start)
            if end > start and pattern[start : end].isidentifier():
                out.append("(?:")
                i = end + 1
                continue
        out.append(c)
        i += 1
    return "".join(out)


def combined(patterns: Sequence[str], ignore_case: bool) -> str:
    flag = "(?i)" if ignore_case else ""
    return "|".join(f"(?:{flag}{unnamed(p)})" for p in patterns)


#: Shortest literal worth prefiltering on; shorter ones would let most lines through.
MIN_LITERAL = 4


def required_literals(pattern: str, ignore_case: bool) -> tuple[frozenset[str], bool] | None:
    """Literals one of which every match of ``pattern`` contains, and whether to compare them
    case-insensitively; None when the pattern has no usable literal (it then runs as a regex).

    Parsed with Python's regex parser, which reads the Rust patterns we allow (a pattern it
    cannot read simply falls back to the regex prefilter).
    """
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # Rust-only syntax; correctness is kept by the regex fallback
        return None
    ci = ignore_case or bool(parsed.state.flags & regex.IGNORECASE) or "(?i" in pattern
    found = _sequence_literals(list(parsed))
    if not found or min(len(x) for x in found) < MIN_LITERAL:
        return None
    return (frozenset(x.lower() for x in found) if ci else frozenset(found)), ci


#: Most strings a pattern piece may expand to (character classes, optional characters, literal alternations).
EXPAND_CAP = 512


def _expand(items: list[tuple[Any, Any]], cap: int = EXPAND_CAP) -> list[str] | None:
    """Every string a parsed sequence can match, if it is finite and small; else None."""
    out = [""]
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            options: list[str] | None = [chr(arg)]
        elif name == "IN":
            options = _class_chars(arg)
        elif name == "SUBPATTERN":
            options = _expand(list(arg[3]), cap)
        elif name == "BRANCH":
            parts = [_expand(list(b), cap) for b in arg[1]]
            options = None if any(p is None for p in parts) else [x for p in parts for x in p]  # type: ignore[union-attr]
        elif name in ("MAX_REPEAT", "MIN_REPEAT") and arg[1] <= 8:
            inner = _expand(list(arg[2]), cap)
            options = _repeat(inner, arg[0], arg[1], cap) if inner is not None else None
        elif name == "AT":
            continue
        else:
            return None
        if options is None or len(out) * len(options) > cap:
            return None
        out = [x + y for x in out for y in options]
    return out


def _repeat(inner: list[str], low: int, high: int, cap: int) -> list[str] | None:
    """Strings of ``inner`` repeated ``low`` to ``high`` times, within ``cap``."""
    result: list[str] = [""] if low == 0 else []
    current = [""]
    for count in range(1, high + 1):
        if len(current) * len(inner) > cap:
            return None
        current = [x + y for x in current for y in inner]
        if count >= low:
            result += current
        if len(result) > cap:
            return None
    return result


def _class_chars(items: list[tuple[Any, Any]]) -> list[str] | None:
    """The characters of a small positive character class (``[IEZ]``, ``\\d``), else None."""
    chars: list[str] = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            chars.append(chr(arg))
        elif name == "RANGE" and arg[1] - arg[0] < 16:
            chars += [chr(c) for c in range(arg[0], arg[1] + 1)]
        elif name == "CATEGORY" and str(arg) == "CATEGORY_DIGIT":
            chars += list("0123456789")
        else:
            return None
    return chars if len(chars) <= 16 else None


def _sequence_literals(items: list[tuple[Any, Any]]) -> frozenset[str] | None:
    """The best literal set of a parsed sequence: runs of expandable pieces, or a mandatory group."""
    best: frozenset[str] | None = None
    runs = [""]

    def keep(candidate: frozenset[str] | None) -> None:
        nonlocal best
        usable = bool(candidate) and all(x and "\n" not in x for x in candidate)  # type: ignore[union-attr]
        if usable and (best is None or min(map(len, candidate)) > min(map(len, best))):  # type: ignore[arg-type]
            best = candidate

    for op, arg in [*items, (None, None)]:
        name = str(op)
        if name == "AT":  # zero-width: the characters around it are adjacent in the text
            continue
        options = _expand([(op, arg)]) if op is not None else None
        if options is not None and len(runs) * len(options) <= EXPAND_CAP:
            runs = [x + y for x in runs for y in options]
            continue
        if name in ("MAX_REPEAT", "MIN_REPEAT") and arg[0] >= 1:
            inner = _expand(list(arg[2]))
            # a mandatory repeat extends the run as far as the cap allows (E[IEZ]\d{4} -> EI00 ...)
            for _ in range(arg[0] if inner else 0):
                if len(runs) * len(inner) > EXPAND_CAP:  # type: ignore[arg-type]
                    break
                runs = [x + y for x in runs for y in inner]  # type: ignore[union-attr]
        keep(frozenset(runs) if min(map(len, runs)) else None)
        runs = [""]
        if options is not None:  # expandable but too many combined: start a new run with it
            runs = options
            continue
        if name == "SUBPATTERN":
            keep(_sequence_literals(list(arg[3])))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and arg[0] >= 1:
            keep(_sequence_literals(list(arg[2])))
        elif name == "BRANCH":
            branches = [_sequence_literals(list(b)) for b in arg[1]]
            if all(branches):
                keep(frozenset().union(*branches))  # type: ignore[arg-type]
    return best
