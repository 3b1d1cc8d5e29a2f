"""Turn one file's bytes into text lines, whatever state the file is in.

Bad input is normal input: truncated archives, binary junk, GBK or invalid UTF-8, CRLF,
tqdm bars redrawn with ``\\r`` into megabyte lines. Nothing here raises on content; a file
that cannot be used comes back as a :class:`Unreadable` with the reason, a file that was
used only in part carries a note.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from postmortem.exprs import matches, scatter_rows

#: Longest line text kept; the rest of a longer line is cut (progress bars, tensor dumps).
MAX_LINE_CHARS = 4096
#: Bytes looked at to decide a file's family.
HEAD_BYTES = 16384
_CHUNK = 1 << 20


class Unreadable(Exception):
    """The file cannot be used at all; ``str(exc)`` says why."""


@dataclass
class RawText:
    text: str
    notes: list[str] = field(default_factory=list)


def _read_compressed(path: Path, opener, what: str, limit: int | None) -> tuple[bytes, list[str]]:
    notes: list[str] = []
    chunks: list[bytes] = []
    total = 0
    try:
        with opener(path) as handle:
            while True:
                chunk = handle.read(_CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if limit is not None and total >= limit:
                    break
    except (EOFError, OSError, zlib.error, lzma.LZMAError, ValueError) as exc:
        if not chunks:
            raise Unreadable(f"corrupt {what} archive: {exc}") from exc
        notes.append(f"truncated {what} archive: read {total} bytes before: {exc}")
    return b"".join(chunks), notes


def _read_gzip(path: Path, limit: int | None) -> tuple[bytes, list[str]]:
    return _read_incremental(path, limit, "gzip", lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), zlib.error)


def _read_zstd(path: Path, limit: int | None) -> tuple[bytes, list[str]]:
    import zstandard

    return _read_incremental(path, limit, "zstd", lambda: zstandard.ZstdDecompressor().decompressobj(), zstandard.ZstdError)


def _read_incremental(
    path: Path, limit: int | None, what: str, new: Callable[[], Any], error: type[Exception]
) -> tuple[bytes, list[str]]:
    """Decompress chunk by chunk, so a truncated archive still yields every complete block.

    ``new`` makes a decompression object (``decompress``, ``flush``, ``eof``, ``unused_data``);
    concatenated members or frames are read one after the other.
    """
    out: list[bytes] = []
    total = 0
    decomp = new()
    try:
        with path.open("rb") as handle:
            while limit is None or total < limit:
                chunk = handle.read(_CHUNK)
                if not chunk:
                    break
                while chunk:
                    data = decomp.decompress(chunk)
                    out.append(data)
                    total += len(data)
                    chunk = b""
                    if decomp.eof and decomp.unused_data:
                        chunk = decomp.unused_data
                        decomp = new()
        out.append(decomp.flush())
    except error as exc:
        if not total:
            raise Unreadable(f"corrupt {what} archive: {exc}") from exc
        return b"".join(out), [f"corrupt {what} archive: read {total} bytes before: {exc}"]
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or exc}") from exc
    if not decomp.eof and (limit is None or total < limit):
        if not total:
            raise Unreadable(f"truncated {what} archive: not one complete block")
        return b"".join(out), [f"truncated {what} archive: read {total} bytes, the end of the stream is missing"]
    return b"".join(out), []


def read_bytes(path: Path, limit: int | None = None) -> tuple[bytes, list[str]]:
    """The file's (decompressed) bytes, up to ``limit``, and notes on anything lost.

    Compression is recognised by magic number, not by extension.
    """
    try:
        with path.open("rb") as handle:
            magic = handle.read(6)
    except OSError as exc:
        raise Unreadable(f"cannot open: {exc.strerror or exc}") from exc
    if magic[:2] == b"\x1f\x8b":
        return _read_gzip(path, limit)
    if magic[:4] == b"\x28\xb5\x2f\xfd":
        return _read_zstd(path, limit)
    if magic[:3] == b"BZh":
        return _read_compressed(path, bz2.open, "bzip2", limit)
    if magic[:6] == b"\xfd7zXZ\x00":
        return _read_compressed(path, lzma.open, "xz", limit)
    try:
        with path.open("rb") as handle:
            return handle.read() if limit is None else handle.read(limit), []
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or exc}") from exc


def looks_binary(data: bytes) -> bool:
    """True for data that is not log text: NUL bytes or mostly control bytes in the head."""
    head = data[:HEAD_BYTES]
    if not head:
        return False
    if head.count(b"\x00") > len(head) // 100:
        return True
    control = sum(1 for b in head if b < 9 or 13 < b < 32) if len(head) < 4096 else _control_count(head)
    return control > len(head) // 10


def _control_count(head: bytes) -> int:
    table = bytes(range(256))
    kept = head.translate(table, bytes([9, 10, 11, 12, 13, *range(32, 256)]))
    return len(kept)


def decode(data: bytes) -> RawText:
    """Decode log bytes: UTF-8, else GB18030 (GBK) when that decodes cleanly, else UTF-8 with replacement."""
    try:
        return RawText(data.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    try:
        text = data.decode("gb18030")
        return RawText(text, ["decoded as GB18030/GBK (not valid UTF-8)"])
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    return RawText(text, [f"{bad} invalid UTF-8 byte sequence(s) replaced"])


def text_lines(text: str) -> pl.DataFrame:
    """Split one text into physical lines: columns ``line`` (1-based), ``raw`` and ``redraw_bar``."""
    return split_lines(pl.DataFrame({"text": [text]}, schema={"text": pl.String})).select("line", "raw", "redraw_bar")


def split_lines(texts: pl.DataFrame) -> pl.DataFrame:
    """Split a batch of texts, one row per file in column ``text``, into one row per physical line.

    Adds ``line`` (1-based within its text), ``raw`` and ``redraw_bar`` and repeats the other
    columns (the file's id, family, whole-file hints) on each of its lines: :func:`split_raw`,
    then :func:`collapse_redraws`.
    """
    return collapse_redraws(split_raw(texts))


def split_raw(texts: pl.DataFrame) -> pl.DataFrame:
    """``texts`` (one row per file, column ``text``) split into lines as written: ``line``
    (1-based within its text) and ``raw``, the other columns repeated on each line; a ``shape``
    column is split alongside. One vectorized pass over the whole batch: per-file polars calls
    cost more than the splitting itself."""
    # a text's digit shape (see parsers.shapes) has its line breaks where the text has them
    split = [c for c in ("text", "shape") if c in texts.columns]
    return (
        texts.with_columns(pl.col(split).str.strip_suffix("\n").str.split("\n"))
        .with_columns(pl.int_ranges(1, pl.col("text").list.len() + 1, dtype=pl.Int64).alias("line"))
        .explode(*split, "line")
        .rename({"text": "raw"})
    )


def collapse_redraws(lines: pl.DataFrame) -> pl.DataFrame:
    """``raw`` as a person saw it, cut at :data:`MAX_LINE_CHARS`, and ``redraw_bar``.

    A ``\r`` inside a line is a terminal redraw: what a person saw is the last non-empty
    segment, so that is what is kept; ``redraw_bar`` keeps the last progress-bar segment
    (HF prints its metrics dict right after a ``\r`` of the bar, so the step is only in the
    bar).
    """
    if not lines.select(pl.col("raw").str.contains("\r", literal=True).any()).item():
        return lines.with_columns(_cut(pl.col("raw")), pl.lit(None, pl.String).alias("redraw_bar"))
    # What a person saw of a redrawn line is its last segment with text in it (trailing blanks
    # go: the message is stripped at its end anyway). Only the redrawn lines are worked on, and
    # written back by row.
    redrawn = lines.with_row_index("_i").filter(pl.col("raw").str.contains("\r", literal=True)).select(
        "_i", pl.col("raw").alias("_redrawn")
    )
    redrawn = redrawn.with_columns(pl.col("_redrawn").str.strip_chars_end().str.split("\r").list.last().alias("_shown"))
    # the bar hidden behind a later segment: only where what is shown is not the bar itself
    hidden_bar = matches(pl.when(~pl.col("_shown").str.contains(_BAR)).then(pl.col("_redrawn")), _BAR)
    segments = pl.when(hidden_bar).then(pl.col("_redrawn")).str.split("\r")
    bar = segments.list.eval(pl.element().filter(pl.element().str.contains(_BAR))).list.last()
    redrawn = redrawn.select(pl.col("_i").alias("_row"), pl.col("_shown").alias("raw"), bar.str.slice(0, 400).alias("redraw_bar"))
    return scatter_rows(lines, redrawn, {"raw": pl.String, "redraw_bar": pl.String}).with_columns(_cut(pl.col("raw")))


def _cut(line: pl.Expr) -> pl.Expr:
    """``line`` cut at MAX_LINE_CHARS characters (slicing reads every line; its byte length is free)."""
    return pl.when(line.str.len_bytes() > MAX_LINE_CHARS).then(line.str.slice(0, MAX_LINE_CHARS)).otherwise(line)


_BAR = r"\|\s*\d+/\d+ \["
