"""What an error says: exception types and error words, classified by two tables of data.

``rules/_tables/keywords.toml`` is an ordered list of (category, pattern): the first pattern
found in a text gives its category. ``rules/_tables/exceptions.toml`` maps Python exception
types to categories. :func:`exception_category` reads an exception's words first (its message
and those of the exceptions it was raised from), then its type; :func:`text_category` is the
floor under the verdict: any error text, by its words alone.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

from postmortem.errors import RuleError
from postmortem.model import CATEGORIES
from postmortem.resources import rules_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Where the tables live, beside the rules.
TABLES = "_tables"
#: The category of an exception whose words and type say nothing more: a bug in the job's code or data.
DEFAULT_EXCEPTION_CATEGORY = "rank_exception"


@dataclass(frozen=True)
class Keyword:
    category: str
    pattern: regex.Pattern[str]
    source: tuple[str, ...]
    examples: tuple[str, ...]
    quiet: tuple[str, ...]


@dataclass(frozen=True)
class ExceptionType:
    names: tuple[str, ...]
    category: str
    source: str
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Classification:
    """A category and what gave it: ``words`` (the keyword that matched) or ``type`` (the exception name)."""

    category: str
    basis: str  # words | type | default
    evidence: str  # the keyword text matched, or the exception type


@functools.cache
def keywords(directory: Path | None = None) -> tuple[Keyword, ...]:
    """The keyword table, in order."""
    data = _load(directory, "keywords.toml")
    out = []
    for i, item in enumerate(data.get("keywords", [])):
        where = f"keywords.toml: entry {i + 1}"
        category = _category(item, where)
        try:
            pattern = regex.compile(item["pattern"])
        except (KeyError, regex.error) as exc:
            raise RuleError(f"{where}: bad or missing pattern ({exc})") from None
        source = item.get("source", ())
        out.append(
            Keyword(
                category=category,
                pattern=pattern,
                source=(source,) if isinstance(source, str) else tuple(source),
                examples=tuple(item.get("examples", ())),
                quiet=tuple(item.get("quiet", ())),
            )
        )
    return tuple(out)


@functools.cache
def exception_types(directory: Path | None = None) -> tuple[ExceptionType, ...]:
    """The exception-type table."""
    data = _load(directory, "exceptions.toml")
    out = []
    for i, item in enumerate(data.get("types", [])):
        where = f"exceptions.toml: entry {i + 1}"
        names = item.get("names")
        if not isinstance(names, list) or not names:
            raise RuleError(f'{where}: "names" should be a non-empty list of exception names')
        out.append(
            ExceptionType(
                names=tuple(names),
                category=_category(item, where),
                source=str(item.get("source", "")),
                examples=tuple(item.get("examples", ())),
            )
        )
    return tuple(out)


def text_category(text: str, table: tuple[Keyword, ...] | None = None) -> Classification | None:
    """The category of the first keyword entry found in ``text``, or None."""
    for kw in table if table is not None else keywords():
        m = kw.pattern.search(text, timeout=1.0)
        if m:
            return Classification(kw.category, "words", m.group(0))
    return None


def exception_category(exc_type: str, messages: list[str]) -> Classification:
    """An exception's category.

    A type that names a cause (``OutOfMemoryError``, ``DistStoreError``, ``ModuleNotFoundError``)
    decides. Any other type — ``RuntimeError``, and the bug types (``ValueError``, ``KeyError``)
    too — is read by its words first (``messages``: its line and those of the exceptions it was
    raised from), so that a ValueError naming CUDA memory is not a bug in the job's code.
    """
    name = exc_type.rsplit(".", 1)[-1]
    # a dotted name in the table is read first (ray.exceptions.OutOfMemoryError is host memory,
    # torch's OutOfMemoryError device memory), then the last part of the name; the timeline keeps
    # the last part only, so the full name is read back from the exception's own line
    dotted = regex.search(rf"((?:[A-Za-z_]\w*\.)+{regex.escape(name)})\b", messages[0]) if messages else None
    full = dotted.group(1) if dotted else exc_type
    entry = next((e for e in exception_types() if full in e.names), None) or next(
        (e for e in exception_types() if name in e.names), None
    )
    if entry is not None and entry.category != DEFAULT_EXCEPTION_CATEGORY:
        return Classification(entry.category, "type", name)
    for text in messages:
        found = text_category(text)
        if found is not None:
            return found
    return Classification(DEFAULT_EXCEPTION_CATEGORY, "type" if entry is not None else "default", name)


def _load(directory: Path | None, name: str) -> dict[str, Any]:
    path = (directory or rules_dir() / TABLES) / name
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, RecursionError) as exc:
        raise RuleError(f"{path}: {exc}") from None


def _category(item: dict[str, Any], where: str) -> str:
    category = item.get("category")
    if category not in CATEGORIES:
        raise RuleError(f'{where}: "category" should be one of the verdict categories (got {category!r})')
    return str(category)
