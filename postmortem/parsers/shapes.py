"""Lines that differ only in their digits are classified once.

A big log is a few line templates repeated with new numbers in them: every tqdm redraw, every
``log_dist`` step line, every metrics dict. A line's *digit shape* is the line with each ASCII
digit made ``0``; lines of one shape have the same length, and the same characters everywhere
but at their digits.

A pattern that cannot tell one ASCII digit from another (it has no literal digit and no class
holding some digits but not all) is *digit-blind*: it matches every line of a shape or none,
at the same places. The parser therefore classifies one line of each shape (which kind, which
level, which progress format, which fields to read) and hands the answer to the other lines of
that shape; only the values (the step, the loss, the time) are read from every line.

A pattern that is not digit-blind (``exitcode: [1-9]``, ``c10d``) is made into one that is,
:func:`digit_blind`, a superset: its answer for a shape is a gate, and the exact pattern then
runs on the gated lines alone.
"""

from __future__ import annotations

import re
import threading

import numpy as np
import polars as pl

_DIGITS = frozenset("0123456789")
ANY_DIGIT = "[0-9]"


def digit_shape(data: bytes) -> bytes:
    """``data`` with every ASCII digit made ``0``: line breaks and lengths are kept, so the
    shape of a text splits into the shapes of its lines. (UTF-8 never has an ASCII byte inside
    a multi-byte character.)"""
    # numpy releases the GIL and runs twice as fast as bytes.translate; its work arrays are
    # kept per thread, so a big job's files are not each paid for in fresh pages
    octets = np.frombuffer(data, dtype=np.uint8)
    value, is_digit = _work_arrays(len(data))
    np.subtract(octets, np.uint8(ord("0")), out=value)  # a digit's value; other bytes wrap past 9
    np.less(value, 10, out=is_digit)
    np.multiply(value, is_digit, out=value)
    return np.subtract(octets, value, out=value).tobytes()


_WORK = threading.local()
_WORK_KEPT = 64 << 20  # bytes of work arrays a thread keeps (a bigger file gets its own)


def _work_arrays(size: int) -> tuple[np.ndarray, np.ndarray]:
    if size > _WORK_KEPT:
        return np.empty(size, np.uint8), np.empty(size, np.bool_)
    if getattr(_WORK, "size", -1) < size:
        _WORK.value, _WORK.is_digit, _WORK.size = np.empty(size, np.uint8), np.empty(size, np.bool_), size
    return _WORK.value[:size], _WORK.is_digit[:size]


def is_digit_blind(pattern: str) -> bool:
    return digit_blind(pattern) == pattern


def digit_blind(pattern: str) -> str | None:
    """A digit-blind regex matching wherever ``pattern`` matches on any line of the same digit
    shape: each literal digit becomes ``[0-9]``, each class holding some digits gets them all.

    ``None`` for a construct this does not see through (a Unicode property, an octal escape,
    a nested class or a class set operation, a negated class that holds some digits but not
    all): the caller then runs the pattern on every line.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            escape, end = _escape(pattern, i)
            if escape is None:
                return None
            out.append(ANY_DIGIT if escape in _DIGITS else pattern[i:end])
            i = end
        elif char == "[":
            end = _class_end(pattern, i)
            if end is None:
                return None
            blind = _blind_class(pattern[i:end])
            if blind is None:
                return None
            out.append(blind)
            i = end
        elif char == "{" and (rep := _REPETITION.match(pattern, i)):
            out.append(rep.group())
            i = rep.end()
        elif char == "(" and (name := _GROUP_NAME.match(pattern, i)):
            out.append(name.group())
            i = name.end()
        else:
            out.append(ANY_DIGIT if char in _DIGITS else char)
            i += 1
    return "".join(out)


_REPETITION = re.compile(r"\{\d+(?:,\d*)?\}\??")
_GROUP_NAME = re.compile(r"\(\?P?<[A-Za-z_][\w.\[\]]*>")
_HEX = re.compile(r"\\(?:x\{([0-9A-Fa-f]+)\}|x([0-9A-Fa-f]{2})|u\{([0-9A-Fa-f]+)\}|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8}))")
_CONTROLS = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "e": "\x1b"}
# class escapes, by whether they hold every ASCII digit; assertions hold none
_ALL_DIGITS = frozenset("dwS")
_NO_DIGITS = frozenset("DWsbBAz<>")


def _escape(pattern: str, i: int) -> tuple[str | None, int]:
    """The escape at ``pattern[i]`` and where it ends: the character it stands for, or
    ``"\\"`` + its letter for a class escape or an assertion; ``None`` for one that might stand
    for a digit in a way this does not follow (octal, Unicode properties)."""
    if hex_escape := _HEX.match(pattern, i):
        code = next(g for g in hex_escape.groups() if g)
        return chr(int(code, 16)), hex_escape.end()
    if i + 1 >= len(pattern):
        return None, i + 1
    letter = pattern[i + 1]
    if letter in _CONTROLS:
        return _CONTROLS[letter], i + 2
    if letter in _ALL_DIGITS or letter in _NO_DIGITS:
        if letter == "b" and pattern.startswith("{", i + 2):  # \b{start} and the like
            end = pattern.find("}", i + 2)
            return (None, i + 2) if end < 0 else ("\\b", end + 1)
        return "\\" + letter, i + 2
    if letter.isalnum():
        return None, i + 2
    return letter, i + 2  # an escaped punctuation character stands for itself


def _class_end(pattern: str, start: int) -> int | None:
    """Where the bracketed class opening at ``start`` ends (one past its ``]``)."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):  # a leading ] is a literal
        i += 1
    depth = 1
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _blind_class(text: str) -> str | None:
    """A bracketed class made to hold every digit if it holds one (see :func:`digit_blind`)."""
    negated = text.startswith("[^")
    body = text[2:-1] if negated else text[1:-1]
    unescaped = re.sub(r"\\.", "", body)
    if "[" in unescaped[1:] or any(op in unescaped for op in ("&&", "--", "~~")):
        return None  # nested classes and set operations
    digits = _class_digits(body)
    if digits is None:
        return None
    if not digits or digits == _DIGITS:
        return text
    return None if negated else text[:-1] + "0-9]"


def _class_digits(body: str) -> frozenset[str] | None:
    """The ASCII digits a class body (between the brackets) holds."""
    held: set[str] = set()
    items: list[tuple[str, bool]] = []  # (character or class escape, written as an escape)
    i = 0
    while i < len(body):
        if body[i] == "\\":
            escape, end = _escape(body, i)
            if escape is None:
                return None
            if escape[1:] and escape[1] in _ALL_DIGITS:
                held |= _DIGITS
            items.append((escape, True))
            i = end
        else:
            items.append((body[i], False))
            i += 1
    # ranges: a character, an unescaped "-", a character (a - at either end is a literal)
    k = 0
    while k < len(items):
        if k + 2 < len(items) and items[k + 1] == ("-", False) and len(items[k][0]) == len(items[k + 2][0]) == 1:
            low, high = items[k][0], items[k + 2][0]
            held |= {d for d in _DIGITS if low <= d <= high}
            k += 3
        else:
            if items[k][0] in _DIGITS:
                held.add(items[k][0])
            k += 1
    return frozenset(held)


def shape_column(texts: pl.Series) -> pl.Series:
    """The digit shape of each text of ``texts``, as the column ``shape``."""
    shapes = [None if text is None else digit_shape(text.encode()) for text in texts]
    return pl.Series("shape", shapes, dtype=pl.Binary).cast(pl.String)
