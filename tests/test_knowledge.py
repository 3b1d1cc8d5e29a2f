"""The two classification tables (rules/_tables): every entry's examples get its category, its near misses do not."""

from __future__ import annotations

import re

import pytest

from postmortem.knowledge import exception_category, exception_types, keywords, text_category
from postmortem.model import CATEGORIES

_EXC_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?P<name>[A-Za-z_]\w*)(?::\s*(?P<msg>.*))?$")


def _keyword_cases() -> list:
    return [
        pytest.param(kw, text, fires, id=f"{kw.category}-{'fires' if fires else 'quiet'}-{i}")
        for kw in keywords()
        for fires, texts in ((True, kw.examples), (False, kw.quiet))
        for i, text in enumerate(texts, 1)
    ]


@pytest.mark.parametrize(("kw", "text", "fires"), _keyword_cases())
def test_keyword_examples(kw, text: str, fires: bool) -> None:
    found = text_category(text)
    if fires:
        assert found is not None and found.category == kw.category, f"{text!r} -> {found}"
    else:
        assert found is None or found.category != kw.category, f"{text!r} -> {found}"


def _type_cases() -> list:
    return [
        pytest.param(entry, text, id=f"{entry.category}-{entry.names[0]}-{i}")
        for entry in exception_types()
        for i, text in enumerate(entry.examples, 1)
    ]


@pytest.mark.parametrize(("entry", "line"), _type_cases())
def test_exception_type_examples(entry, line: str) -> None:
    m = _EXC_LINE.match(line)
    assert m is not None, line
    assert exception_category(line.split(":", 1)[0], [line]).category == entry.category


def test_every_entry_is_sourced_and_exemplified() -> None:
    offenders = [f"keywords: {kw.category}" for kw in keywords() if not (kw.source and kw.examples and kw.quiet)]
    offenders += [f"exceptions: {e.names[0]}" for e in exception_types() if not (e.source and e.examples)]
    assert offenders == []
    assert {kw.category for kw in keywords()} <= set(CATEGORIES)
    names = [n for e in exception_types() for n in e.names]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


@pytest.mark.parametrize(
    ("exc_type", "messages", "category", "basis"),
    [
        # the words win over the type: a RuntimeError that names device memory is a device OOM
        ("RuntimeError", ["RuntimeError: CUDA error: uncorrectable ECC error encountered"], "accelerator_error", "words"),
        ("ValueError", ["ValueError: bad things", "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"],
         "device_oom", "words"),
        ("torch.OutOfMemoryError", ["torch.OutOfMemoryError: Tried to allocate 20 MiB"], "device_oom", "type"),
        ("KeyError", ["KeyError: 'text'"], "rank_exception", "type"),
        ("SomeLibraryError", ["SomeLibraryError: the widget is sad"], "rank_exception", "default"),
    ],
)
def test_exception_words_before_type(exc_type: str, messages: list[str], category: str, basis: str) -> None:
    found = exception_category(exc_type, messages)
    assert (found.category, found.basis) == (category, basis)
