"""The line parser for every text family: prefixes, time, level, kind, step, records, fields.

All of it is vectorized polars over a batch of files' lines, and it is built so that the
bulk of a big log costs only a few passes:

* lines that differ only in their digits are classified once (:mod:`parsers.shapes`): one line
  of each digit shape goes through the patterns that decide its kind, level, progress format,
  the fields it carries and whether it is chatter, and every line of the shape gets the
  answer; the values (step, metrics, times) are then read from each line by the one pattern
  its shape named;
* whole-file hints (one search per file's text) skip the prefix and record stages for the
  files that cannot have them;
* lines that cannot be kept (chatter) are dropped right after they are classified, before any
  value is read (:func:`_drop_chatter`);
* the extractors that few lines need run on a filtered copy of those lines, scattered back by
  row index (no join, no re-sort);
* what only the kept lines need (timestamps) is read after the rest are dropped.
"""

from __future__ import annotations

import functools
import threading

import polars as pl
import regex

from postmortem.exprs import matches, matches_any, scatter_rows
from postmortem.parsers import patterns as P
from postmortem.parsers.shapes import digit_blind, is_digit_blind, shape_column
from postmortem.reading import collapse_redraws, split_raw

_HEAD = 64  # characters of a message searched for its timestamp and level


def parse_files(
    files: pl.DataFrame, *, keep: str | None = None, keep_all: bool = True, book: ShapeBook | None = None
) -> pl.DataFrame:
    """Parse a batch of text files: one row per file with ``_fid`` (an integer file id),
    ``family``, ``text`` and, optionally, ``shape``: the text's digit shape
    (:func:`parsers.shapes.digit_shape`), computed here when missing. Rows carry ``_fid``, not
    the family (nor any other per-file column, which would be repeated on every line).

    With ``keep_all`` False only notable lines are returned (see :func:`_keep_rows`); ``keep``
    is a regex of further lines to keep (the rule set's patterns). ``book``: see :func:`parse_text`.
    """
    if "shape" not in files.columns:
        files = files.with_columns(shape_column(files.get_column("text")))
    hinted = files.with_columns(
        ((pl.col("family") == "slurm") | pl.col("text").str.contains(P.literals(P.PREFIX_HINTS))).alias("_has_pfx"),
        matches_any(pl.col("text"), P.RECORD_ANY).alias("_has_rec"),
    )
    return parse_text(split_raw(hinted), keep=keep, keep_all=keep_all, book=book)


def parse_text(
    lines: pl.DataFrame,
    *,
    keep: str | None = None,
    keep_all: bool = True,
    exact_shapes: bool = False,
    book: ShapeBook | None = None,
) -> pl.DataFrame:
    """Parse a batch of lines.

    ``lines`` are :func:`parse_files`' lines as written (:func:`reading.split_raw`): ``line``,
    ``raw``, ``shape``, the per-file columns and the whole-file hints ``_has_pfx`` /
    ``_has_rec``. Returns timeline
    columns (see :mod:`postmortem.schema`) plus ``stream`` and ``srun`` helpers.
    ``exact_shapes`` groups lines by their shapes' text instead of its hash (the same result);
    ``book`` is what is known of the job's shapes so far (see :class:`ShapeBook`).
    """
    book = book or ShapeBook(keep)
    assert book.keep == keep, "a shape book is for one keep pattern"
    frame, shapes = book.keyed(lines, exact=exact_shapes)
    if not keep_all:
        frame = _drop_chatter(frame, book.keep_per_line)
    frame, ambiguous, found = book.classified(frame, shapes)
    # the per-line extraction as lazy queries: polars then shares common subexpressions and
    # runs them in morsels on the streaming engine
    lazy = _kinds(_progress(frame.lazy().with_row_index("_row"), ambiguous, found), found)
    frame = _fields(lazy.collect(engine="streaming"), found)
    frame = _records(frame)
    frame = _child_failed_entries(frame)
    frame = frame if keep_all else _keep_rows(frame, keep)
    # what deciding which lines to keep does not need is read from the kept lines only (and
    # the times from the dropped lines the kept ones inherit them from)
    frame = _timestamps(frame)
    frame = frame if keep_all else _inherit_dropped_times(frame)
    args = pl.when(pl.col("_c_args")).then(pl.col("message"))
    frame = frame.lazy().with_columns(
        (args.str.extract(pattern, 1).cast(pl.Int64, strict=False) if "_c_args" in found else pl.lit(None, pl.Int64)).alias(name)
        for name, pattern in (("_arg_node_rank", P.NODE_RANK_ARG), ("_arg_nproc", P.NPROC_ARG))
    ).drop("_row", "_has_pfx", "_rec_kind", "family", "_shape", "_c_kept", "_c_stamped", *_CLASS_COLUMNS).collect(engine="streaming")
    # most extracted fields are null on every line of a batch: a constant costs no memory
    empty = [name for name, column in frame.to_dict().items() if column.null_count() == frame.height]
    return frame.with_columns(pl.lit(None, frame.schema[name]).alias(name) for name in empty)


def _exact(gate: str, pattern: str, found: frozenset[str]) -> pl.Expr:
    """Whether each line's message matches ``pattern``, given the column ``gate``: whether
    the line's shape matches the pattern's digit-blind version (see :class:`ShapeBook`), and
    ``found``: the gates true on some line of the batch."""
    if gate not in found:
        return pl.lit(False)
    if is_digit_blind(pattern):
        return pl.col(gate)
    return matches(pl.when(pl.col(gate)).then(pl.col("message")), pattern)


def _blind(pattern: str) -> str:
    blind = digit_blind(pattern)
    assert blind is not None, pattern  # the parser's own patterns are all seen through
    return blind


# The progress formats in the order of trust, each with the text it reads: the first three
# (which always carry a total), a training tqdm bar in the line or hidden behind a redraw,
# then the looser step formats.
_STEP_SOURCES: tuple[tuple[str, str], ...] = (
    *(("message", p) for p in P.PROGRESS_FORMATS[:3]),
    ("message", P.TQDM),
    ("redraw_bar", P.TQDM),
    *(("message", p) for p in P.PROGRESS_FORMATS[3:]),
)
_BAR_IN_LINE, _BAR_REDRAWN = 3, 4
_REDRAWN_BAR = "redrawn bar"  # (in the classes found: some line's step is in its redraw-hidden bar)
# The values read from every line at a place its shape fixes (a byte offset and a length,
# found on one line of the shape): "_o_<value>" and "_n_<value>".
_VALUES = ("step", "max_steps", *P.METRICS, "dated", "glog")
_GATE_COLUMNS = ("_c_error", "_c_lifecycle", "_c_collective", "_c_fields", "_c_args")
_CLASS_COLUMNS = (
    "_c_step", "_c_total", "_c_ambiguous", "_c_error", "_c_lifecycle", "_c_collective", "_c_fields",
    "_c_args", *(f"_{part}_{value}" for value in _VALUES for part in "on"),
)


class ShapeBook:
    """What the patterns say of each digit shape of a job, found on one line of the shape and
    remembered for the job's later batches: after the first few batches of a big job, nearly
    every line's shape is known, and nothing is classified at all.

    :meth:`keyed` gives every line of a batch its message, ``_key`` (its shape's id) and
    ``_c_kept``: whether a line of the shape can be kept at all. :meth:`classified` adds, to
    the lines it is given, ``level`` and the class columns: ``_c_step`` / ``_c_total`` (the
    index in ``_STEP_SOURCES`` of the format that names the step, and the one that names the
    total); ``_c_error`` / ``_c_collective`` (gates: their exact patterns are not digit-blind,
    see :func:`_exact`), ``_c_lifecycle``, ``_c_fields`` (the field extractors' gate),
    ``_c_args`` (launcher arguments); and where each value of ``_VALUES`` lies
    (``_c_ambiguous`` where the step or total could not be placed: those lines search their
    format themselves). A book is shared by the threads parsing one job's batches.
    """

    def __init__(self, keep: str | None) -> None:
        self.keep = keep
        kept = _blind(P.KEPT_SUPERSET)
        keep_gate = digit_blind(keep) if keep else None
        self.kept = kept if keep_gate is None else f"{kept}|{keep_gate}"
        # a keep pattern this cannot see through is searched in every line not kept already
        self.keep_per_line = keep if keep and keep_gate is None else None
        self._known = pl.DataFrame()
        self._lock = threading.Lock()

    def keyed(self, lines: pl.DataFrame, *, exact: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
        """``lines`` (as written) with their messages (:func:`_messages`), ``_key`` and
        ``_c_kept``; and the batch's shapes, for :meth:`classified`. ``exact`` numbers the
        shapes by their text instead of their hash (the same result, slower; nothing is
        remembered: the numbers are the batch's own)."""
        # lines of a prefixed file lose a prefix the line's shape does not show: the key
        # tells such lines apart (srun labels are stripped only in srun output)
        flag = pl.col("_has_pfx").cast(pl.UInt64) * (1 + (pl.col("family") == "slurm").cast(pl.UInt64))
        lines = lines.with_columns(flag.alias("_flag"))
        if not exact:
            hashed = self._keyed(lines.with_columns((pl.col("shape").hash() + pl.col("_flag")).alias("_key")))
            if hashed is not None:
                return hashed
        codes = lines.unique(["shape", "_flag"], keep="first", maintain_order=True).select("shape", "_flag").with_row_index("_key")
        keyed = ShapeBook(self.keep)._keyed(
            lines.join(codes.with_columns(pl.col("_key").cast(pl.UInt64)), on=["shape", "_flag"], how="left", maintain_order="left")
        )
        assert keyed is not None  # numbered by their text, two shapes never share a key
        return keyed[0], keyed[1].with_columns(pl.lit(False).alias("_remember"))

    def _keyed(self, lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame] | None:
        """See :meth:`keyed`; None when two shapes share a key.

        A line's message is a span of what was written that its shape fixes (the redrawn
        segment shown, less trailing blanks, cut at MAX_LINE_CHARS): found on one line of the
        shape, cut from the others. Lines with a launcher prefix or a redraw-hidden bar are
        worked out line by line."""
        firsts = lines.filter(pl.col("_key").is_first_distinct())
        known = self._known.join(firsts.select("_key"), on="_key", how="semi") if self._known.height else None
        new = firsts if known is None else firsts.join(known.select("_key"), on="_key", how="anti")
        if known is None:
            shapes = _first_look(new, self.kept)
        else:
            shapes = pl.concat([known, _first_look(new, self.kept)], how="diagonal_relaxed") if new.height else known
        # the batch's shapes in a fixed order; each line is numbered by its shape's place in it
        shapes = shapes.with_row_index("_shape").with_columns(pl.lit(True).alias("_remember"))
        codes = lines.select(pl.col("_key").replace_strict(shapes.get_column("_key"), shapes.get_column("_shape")).alias("_shape"))
        per_line = shapes.select("_rep_shape", "_o_message", "_n_message", "_c_kept", "_c_stamped", "_by_line")[codes.to_series()]
        keyed = lines.hstack(codes).hstack(per_line)
        if not keyed.select((pl.col("shape") == pl.col("_rep_shape")).all()).item():
            return None  # two shapes with one hash
        frame = keyed.with_columns(
            _cut_out(pl.col("raw"), pl.col("_o_message"), pl.col("_n_message")).alias("message"),
            pl.lit(None, pl.String).alias("redraw_bar"),
            pl.lit(None, pl.Int64).alias("pfx_rank"),
            pl.lit(None, pl.Int64).alias("pfx_local"),
            pl.lit(None, pl.Int64).alias("srun"),
            pl.lit(None, pl.Datetime("us")).alias("_k8s_time"),
            pl.col("_fid").cast(pl.UInt64).alias("stream"),
        )
        by_line = keyed.get_column("_by_line")
        if by_line.any():  # the few such lines are worked out alone and written back by row
            own = _messages(keyed.filter(by_line)).with_columns(by_line.arg_true().alias("_row"))
            frame = scatter_rows(frame, own, {name: own.schema[name] for name in ("redraw_bar", *_PREFIX_COLUMNS)})
        frame = frame.drop("raw", "shape", "_flag", "_key", "_rep_shape", "_o_message", "_n_message", "_by_line")
        if new.height:
            self._remember(shapes.join(new.select("_key"), on="_key", how="semi").drop("_shape"))
        return frame, shapes

    def classified(self, frame: pl.DataFrame, shapes: pl.DataFrame) -> tuple[pl.DataFrame, list[int], frozenset[str]]:
        """``frame``'s lines with the class columns of their ``shapes`` (from :meth:`keyed`);
        the formats that lines whose shape left the step's place unknown must search; and the
        gate columns true on some line (a pattern no line can match is not searched at all)."""
        needed = pl.col("_shape").is_in(frame.get_column("_shape").unique().implode())
        todo = shapes.filter(needed & ~pl.col("_classified"))
        if todo.height or "_c_step" not in shapes.columns:  # (then, with no shape at all to classify, for the columns)
            classified = _classify(todo).with_columns(pl.lit(True).alias("_classified"))
            self._remember(classified.drop("_shape"))
            shapes = pl.concat([shapes.filter(~(needed & ~pl.col("_classified"))), classified], how="diagonal_relaxed").sort("_shape")
        used = shapes.filter(needed)
        ambiguous = used.filter("_c_ambiguous").select(pl.concat_list("_c_step", "_c_total").explode().drop_nulls().unique())
        gates = used.select(
            *(pl.col(name).any() for name in _GATE_COLUMNS),
            ((pl.col("_c_step") == _BAR_REDRAWN) | (pl.col("_c_total") == _BAR_REDRAWN)).any().alias(_REDRAWN_BAR),
        ).row(0, named=True) if used.height else {}
        frame = frame.hstack(shapes.select("level", *_CLASS_COLUMNS)[frame.get_column("_shape")])
        return frame, sorted(ambiguous.to_series().to_list()), frozenset(name for name, any_true in gates.items() if any_true)

    def _remember(self, shapes: pl.DataFrame) -> None:
        """Keep what was found of ``shapes`` for later batches (up to MAX_SHAPES of them)."""
        shapes = shapes.filter(pl.col("_remember")).drop("_remember")
        if not shapes.height:
            return
        with self._lock:
            known = self._known
            if known.height + shapes.height > MAX_SHAPES:
                return
            if not known.height:
                self._known = shapes
                return
            # (a shape another batch has classified meanwhile is not written over by a first look)
            shapes = shapes.filter(pl.col("_classified") | ~pl.col("_key").is_in(known.get_column("_key").implode()))
            rest = known.join(shapes.select("_key"), on="_key", how="anti")
            self._known = pl.concat([rest, shapes], how="diagonal_relaxed")


# Shapes a book remembers: beyond that (a job whose lines are nearly all unlike), each batch
# works out its own shapes.
MAX_SHAPES = 50_000


def _first_look(reps: pl.DataFrame, kept: str) -> pl.DataFrame:
    """What a first look at one line of each shape finds: its message and where it stands in
    what was written (``_o_message``, ``_n_message``), whether the shape is worked out line by
    line (``_by_line``), whether it can be kept (``_c_kept``) and whether it has a timestamp
    (``_c_stamped``: as :func:`_classify` finds it, so that a dropped line's time can be handed on)."""
    raw = pl.col("raw").str.strip_chars_end()
    shown = raw.str.split("\r").list.last()
    reps = reps.with_columns((raw.str.len_bytes() - shown.str.len_bytes()).alias("_o_message"), pl.col("shape").alias("_rep_shape"))
    return _messages(reps).select(
        "_key", "_rep_shape", "message", "redraw_bar", "_o_message",
        pl.col("message").str.len_bytes().alias("_n_message"),
        (pl.col("_has_pfx") | pl.col("redraw_bar").is_not_null()).alias("_by_line"),
        pl.col("message").str.contains(kept).alias("_c_kept"),
        _stamped(pl.col("message").str.slice(0, _HEAD)).alias("_c_stamped"),
        pl.lit(False).alias("_classified"),
    )


def _stamped(head: pl.Expr) -> pl.Expr:
    """Whether a message whose first characters are ``head`` has a timestamp (see :func:`_classify`)."""
    return head.str.contains(P.DATED_TIMESTAMP) | head.str.contains(P.GLOG_TIMESTAMP)


def _classify(reps: pl.DataFrame) -> pl.DataFrame:
    """The class columns of one line per shape (see :class:`ShapeBook`)."""
    msg = pl.col("message")
    head = msg.str.slice(0, _HEAD)
    reps = _step_spans(_progress_sources(reps))
    columns = [
        *_tail_span("dated", head, P.DATED_TIMESTAMP),
        *_tail_span("glog", head, P.GLOG_TIMESTAMP, head.str.extract(P.GLOG_TIMESTAMP, 1)),
        # a metric's value is the longest suffix of the match that is one (patterns.METRICS)
        *(
            span
            for name, (key, value) in P.METRICS.items()
            for span in _tail_span(name, msg, key + value, msg.str.extract(key + value, 0).str.extract(f"(?:{value})$", 0))
        ),
        _level(head).alias("level"),
        msg.str.contains(_blind(P.ERROR_LINE)).alias("_c_error"),
        msg.str.contains(P.LIFECYCLE_LINE).alias("_c_lifecycle"),
        msg.str.contains(_blind(P.COLLECTIVE_LINE)).alias("_c_collective"),
        _field_gate(msg).alias("_c_fields"),
        msg.str.contains(P.union(P.NODE_RANK_ARG, P.NPROC_ARG)).alias("_c_args"),
    ]
    reps = reps.with_columns(columns)
    step, total = pl.col("_c_step"), pl.col("_c_total")
    ambiguous = (step.is_not_null() & pl.col("_o_step").is_null()) | (total.is_not_null() & pl.col("_o_max_steps").is_null())
    return reps.with_columns(ambiguous.alias("_c_ambiguous"))


def _step_spans(reps: pl.DataFrame) -> pl.DataFrame:
    """``_o_step`` / ``_n_step`` and ``_o_max_steps`` / ``_n_max_steps``: where the step and the
    total stand in each line of the shape (byte offset and length), or null where unknown.

    The regex engine in polars gives a group's text, not its place ("500/5000": which 500?), so
    the place is found by Python's regex on these few lines, and kept only where it agrees with
    polars on the match's start, the match and the group's text."""
    checks = []
    for value, source, group in (("step", pl.col("_c_step"), "step"), ("max_steps", pl.col("_c_total"), "total")):
        text = pl.when(source == _BAR_REDRAWN).then(pl.col("redraw_bar")).otherwise(pl.col("message"))
        found = [
            (text.str.find(pattern), text.str.extract(pattern, 0), text.str.extract_groups(pattern).struct.field(group))
            for _, pattern in _STEP_SOURCES
        ]
        checks += [
            text.alias(f"_t_{value}"),
            *(pl.coalesce(pl.when(source == i).then(f[k]) for i, f in enumerate(found)).alias(f"_{k}_{value}") for k in range(3)),
        ]
    rows = reps.select(pl.col("_c_step").alias("_step"), pl.col("_c_total").alias("_max_steps"), *checks).to_dict(as_series=False)
    spans: dict[str, list[int | None]] = {}
    for value, group in (("step", "step"), ("max_steps", "total")):
        columns = (rows[f"_{value}"], rows[f"_t_{value}"], rows[f"_0_{value}"], rows[f"_1_{value}"], rows[f"_2_{value}"])
        places = [
            None if source is None else _place(_STEP_PATTERNS[source], text, start, whole, found, group)
            for source, text, start, whole, found in zip(*columns, strict=True)
        ]
        spans[f"_o_{value}"] = [None if p is None else p[0] for p in places]
        spans[f"_n_{value}"] = [None if p is None else p[1] for p in places]
    return reps.with_columns(pl.Series(name, values, dtype=pl.UInt32) for name, values in spans.items())


_STEP_PATTERNS = [regex.compile(pattern) for _, pattern in _STEP_SOURCES]


def _place(pattern: regex.Pattern[str], text: str, start: int, whole: str, found: str, group: str) -> tuple[int, int] | None:
    """Byte offset and length of ``group`` in ``text``, where Python's regex agrees with
    polars' (``start``, ``whole`` and ``found``: the match's byte offset, the match, the group)."""
    match = pattern.search(text)
    if match is None or match.group(0) != whole or match.group(group) != found:
        return None
    prefix = len(text[: match.start()].encode())
    if prefix != start:
        return None
    return prefix + len(text[match.start() : match.start(group)].encode()), len(found.encode())


def _tail_span(name: str, text: pl.Expr, pattern: str, tail: pl.Expr | None = None) -> tuple[pl.Expr, pl.Expr]:
    """``_o_<name>`` and ``_n_<name>``: byte offset and length of ``tail`` (the match itself
    when None), a text that ends ``pattern``'s first match in ``text``."""
    start = text.str.find(pattern)
    whole = text.str.extract(pattern, 0)
    length = (whole if tail is None else tail).str.len_bytes()
    return (start + whole.str.len_bytes() - length).alias(f"_o_{name}"), length.alias(f"_n_{name}")


def _value(text: pl.Expr, value: str) -> pl.Expr:
    """Each line's ``value`` (see ``_VALUES``), cut from ``text`` where its shape says."""
    return _cut_out(text, pl.col(f"_o_{value}"), pl.col(f"_n_{value}"))


def _cut_out(text: pl.Expr, offset: pl.Expr, length: pl.Expr) -> pl.Expr:
    """The bytes ``offset`` to ``offset + length`` of ``text`` (on UTF-8 character boundaries)."""
    return text.cast(pl.Binary).bin.slice(offset, length).cast(pl.String)


def _messages(lines: pl.DataFrame) -> pl.DataFrame:
    """Lines as written made messages, line by line: redraws collapsed (``redraw_bar``), then
    launcher prefixes stripped into ``pfx_rank``, ``pfx_local``, ``srun``, ``_k8s_time`` and
    ``stream`` where the whole-file hint says a file may have them (each other file is one stream)."""
    lines = collapse_redraws(lines)
    hinted = lines.get_column("_has_pfx")
    if hinted.all():
        return _prefixed(lines)
    frame = _without_prefixes(lines)
    if not hinted.any():
        return frame
    prefixed = _prefixed(lines.filter(hinted)).with_columns(hinted.arg_true().alias("_row"))
    return scatter_rows(frame, prefixed, {name: prefixed.schema[name] for name in _PREFIX_COLUMNS})


_PREFIX_COLUMNS = ("message", "pfx_rank", "pfx_local", "srun", "_k8s_time", "stream")


def _without_prefixes(lines: pl.DataFrame) -> pl.DataFrame:
    """Lines of files without launcher prefixes: each file is one stream."""
    return lines.with_columns(
        pl.col("raw").str.strip_chars_end().alias("message"),
        pl.lit(None, pl.Int64).alias("pfx_rank"),
        pl.lit(None, pl.Int64).alias("pfx_local"),
        pl.lit(None, pl.Int64).alias("srun"),
        pl.lit(None, pl.Datetime("us")).alias("_k8s_time"),
        pl.col("_fid").cast(pl.UInt64).alias("stream"),
    ).drop("raw")


def _prefixed(lines: pl.DataFrame) -> pl.DataFrame:
    """Lines of files that may have launcher prefixes (§0, §7), stripped from the outside in."""
    outer = pl.col("raw").str.extract_groups(P.OUTER_PREFIX)
    frame = lines.with_columns(outer.alias("_o")).unnest("_o")
    # An srun label is only a label in srun output; elsewhere "12: " is text.
    is_slurm = pl.col("family") == "slurm"
    cut = pl.col("k8s_ts").str.len_chars().fill_null(-1) + 1
    cut = pl.when(is_slurm & pl.col("srun").is_not_null()).then(pl.col("pfx").str.len_chars()).otherwise(cut)
    frame = frame.with_columns(
        pl.col("k8s_ts").str.strptime(pl.Datetime("us"), "%Y-%m-%dT%H:%M:%S%.fZ", strict=False).alias("_k8s_time"),
        pl.col("raw").str.slice(cut).alias("_rest"),
        pl.when(is_slurm).then(pl.col("srun").cast(pl.Int64, strict=False)).alias("srun"),
    ).drop("pfx", "k8s_ts")
    inner = pl.col("_rest").str.extract_groups(P.RANK_PREFIX)
    frame = frame.with_columns(inner.alias("_i")).unnest("_i")
    # "[0]:" alone on a line is a ChildFailedError entry header, not a rank template prefix
    bare_entry = (
        pl.col("role1").is_null() & pl.col("n1").is_not_null()
        & (pl.col("_rest").str.len_chars() == pl.col("pfx").str.len_chars())
    )
    frame = frame.with_columns(
        pl.when(bare_entry).then(pl.lit("")).otherwise(pl.col("pfx").fill_null("")).alias("pfx"),
        *(pl.when(bare_entry).then(pl.lit(None, pl.String)).otherwise(pl.col(c)).alias(c) for c in ("n1", "n2", "role1", "role2")),
    )
    n1 = pl.col("n1").cast(pl.Int64, strict=False)
    n2 = pl.col("n2").cast(pl.Int64, strict=False)
    # [rankN]: and template [N]: carry the global rank; [defaultN]: (any other role) the local rank.
    global1 = pl.col("role1").is_null() | (pl.col("role1") == "rank")
    global2 = pl.col("role2").is_null() | (pl.col("role2") == "rank")
    pfx_rank = pl.coalesce(
        pl.when(n2.is_not_null() & global2).then(n2),
        pl.when(n1.is_not_null() & global1).then(n1),
        pl.col("mpi_rank").cast(pl.Int64, strict=False),
    )
    pfx_local = pl.coalesce(
        pl.when(n1.is_not_null() & ~global1).then(n1),
        pl.when(n2.is_not_null() & ~global2).then(n2),
    )
    message = pl.col("_rest").str.slice(pl.col("pfx").str.len_chars()).str.strip_chars_end()
    # the excepthook's "[rank0]: " adds one space of its own ("[rank0]:   File" is "  File")
    hook = ((pl.col("role1") == "rank") | (pl.col("role2") == "rank")) & message.str.starts_with(" ")
    unprefixed = pl.col("role1").is_null() & pl.col("n1").is_null() & pl.col("role2").is_null() & pl.col("n2").is_null()
    return frame.with_columns(
        pl.when(hook).then(message.str.slice(1)).otherwise(message).alias("message"),
        pfx_rank.alias("pfx_rank"),
        pfx_local.alias("pfx_local"),
        # interleaved consoles: a "stream" is one prefix's lines inside one file
        # (an integer: the file's id, or a hash of the file and the prefix)
        pl.when(unprefixed).then(pl.col("_fid").cast(pl.UInt64)).otherwise(
            pl.concat_str(
                [pl.col("_fid").cast(pl.String), pl.col("role1").fill_null(""), pl.col("n1").fill_null(""), pl.col("n2").fill_null("")],
                separator="|",
            ).hash()
        ).alias("stream"),
    ).drop("_rest", "pfx", "mpi_rank", "role1", "n1", "role2", "n2", "raw")


def _drop_chatter(frame: pl.DataFrame, keep_per_line: str | None) -> pl.DataFrame:
    """Drop the lines :func:`_keep_rows` would drop whatever their fields turn out to be.

    A line survives when its shape matches :data:`patterns.KEPT_SUPERSET` or the keep pattern
    (their digit-blind versions: a superset), carries a redrawn progress bar, or belongs to a
    file with a record in it (record continuation lines look like anything); so does the last
    stamped line before each of those, whose time the next one may inherit (see
    :func:`_time_givers`). ``_gap`` counts the lines before each line of its stream that are
    not kept for themselves, so that "the previous line repeats this step" still sees a dropped
    line in between.
    """
    candidate = pl.col("_c_kept") | pl.col("redraw_bar").is_not_null() | pl.col("_has_rec")
    if keep_per_line:
        candidate = candidate | matches(pl.when(~candidate).then(pl.col("message")), keep_per_line)
    frame = frame.with_columns(candidate.alias("_candidate"))
    frame = frame.with_columns(
        (~pl.col("_candidate")).cast(pl.UInt32).cum_sum().over("stream").alias("_gap"),
        _time_givers(pl.col("_candidate"), pl.col("_c_stamped")).alias("_giver"),
    )
    return frame.filter(pl.col("_candidate") | pl.col("_giver")).drop("_candidate", "_giver")


def _time_givers(kept: pl.Expr, stamped: pl.Expr) -> pl.Expr:
    """True on the dropped lines whose time a kept line inherits: in each stream, the last
    stamped line before a kept one without a time of its own (with no other stamped line in
    between). A line without a time inherits the previous line's time in its file, dropped or not."""
    return ~kept & stamped & _next_in_stream(kept | stamped, kept & ~stamped).fill_null(False)


def _next_in_stream(marked: pl.Expr, value: pl.Expr) -> pl.Expr:
    """On each line, ``value`` on the next ``marked`` line of its stream (null after the last)."""
    return pl.when(marked).then(value).shift(-1).backward_fill().over("stream")


def _inherit_dropped_times(frame: pl.DataFrame) -> pl.DataFrame:
    """The kept lines with no time of their own that follow a dropped line's time
    (:func:`_given_times`) take it (``ts``, ``_no_year``; ``_carried`` marks them: their time
    is inferred)."""
    if "_given_ts" not in frame.columns:
        return frame
    given = pl.col("ts").is_null() & pl.col("_given_ts").is_not_null()
    return frame.with_columns(
        pl.when(given).then(pl.col("_given_ts")).otherwise(pl.col("ts")).alias("ts"),
        pl.when(given).then(pl.col("_given_no_year")).otherwise(pl.col("_no_year")).alias("_no_year"),
        pl.when(given).then(True).alias("_carried"),  # (null elsewhere, as in a batch without givers)
    ).drop("_given_ts", "_given_no_year")


def _timestamps(frame: pl.DataFrame) -> pl.DataFrame:
    """``ts`` and ``_no_year`` (a c10/glog header's time, in the leap year 2000), worked out on
    the lines whose shape has a stamp and written back by row."""
    stamped = _has_stamp()
    rows = frame.select(stamped).to_series().arg_true()
    times = _stamp_times(frame.lazy().filter(stamped)).select(rows.alias("_row"), "ts", "_no_year").collect()
    frame = scatter_rows(frame, times, {"ts": pl.Datetime("us"), "_no_year": pl.Boolean})
    return frame.with_columns(pl.col("_no_year").fill_null(False))


def _has_stamp() -> pl.Expr:
    """Whether each classified line's shape has a timestamp (where it stands: ``_VALUES``)."""
    return pl.col("_o_dated").is_not_null() | pl.col("_o_glog").is_not_null()


def _stamp_times(frame: pl.LazyFrame) -> pl.LazyFrame:
    # The stamp is cut where the line's shape has it (see ShapeBook); each form is then parsed
    # by strptime, which is far cheaper than one regex with two dozen capture groups.
    frame = frame.with_columns(_value(pl.col("message"), "dated").alias("_dated"), _value(pl.col("message"), "glog").alias("_glog"))
    dated, glog = pl.col("_dated"), pl.col("_glog")
    # c10 headers: MMDD is not zero-padded, there is no year, and a 9-digit fraction is
    # CLOCK_MONOTONIC nanoseconds, not part of the wall-clock second
    nanos = (glog.str.len_chars() - glog.str.find(".", literal=True)) == 10
    glog_text = pl.when(nanos).then(glog.str.slice(0, glog.str.len_chars() - 10)).otherwise(glog)
    # 2000 is a leap year, so 29 February parses; the real year is filled in later
    glog_ts = pl.when(glog_text.str.find(" ") == 3).then(pl.lit("20000") + glog_text).otherwise(pl.lit("2000") + glog_text)
    # Each form is parsed only where the ones before found no time: first Python logging's own
    # (2026-11-20 10:00:03,517) as written, then the ISO forms with their separators made one.
    # A fraction of any length (%.f) costs five times a fixed one, so the common lengths are
    # tried first with theirs; a failed strptime costs as much as three that succeed, so the
    # logging form is tried only where there is a comma.
    logging_form = pl.when((dated.str.len_bytes() == 23) & dated.str.contains(",", literal=True)).then(dated)
    logging_form = logging_form.str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S,%3f", strict=False)
    frame = frame.with_columns(
        glog_ts.str.strptime(pl.Datetime("us"), "%Y%m%d %H:%M:%S%.f", strict=False).alias("_glog_ts"),
        logging_form.alias("_iso_ts"),
    )
    iso = pl.when(pl.col("_iso_ts").is_null()).then(dated).str.replace_many(["T", "_", ","], [" ", " ", "."])
    frame = frame.with_columns(iso.alias("_iso"))
    iso = pl.col("_iso")
    fixed = pl.coalesce(
        pl.col("_iso_ts"),
        *(
            pl.when(dated.str.len_bytes() == length).then(iso).str.strptime(pl.Datetime("us"), form, strict=False)
            for length, form in ((23, "%Y-%m-%d %H:%M:%S.%3f"), (19, "%Y-%m-%d %H:%M:%S"), (26, "%Y-%m-%d %H:%M:%S.%6f"))
        ),
    )
    frame = frame.with_columns(fixed.alias("_iso_ts"))
    untimed = pl.col("_glog_ts").is_null() & pl.col("_iso_ts").is_null()
    frame = frame.with_columns(
        pl.coalesce("_iso_ts", pl.when(untimed).then(iso).str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f", strict=False))
    )
    # CANN's 2025-10-24-11:18:29.499.235 is milliseconds.microseconds
    cann_text = pl.when(dated.str.len_chars() == 27).then(dated.str.slice(0, 23) + dated.str.slice(24, 3)).otherwise(dated)
    cann = pl.when(untimed).then(cann_text).str.strptime(pl.Datetime("us"), "%Y-%m-%d-%H:%M:%S%.f", strict=False)
    frame = frame.with_columns(pl.coalesce("_iso_ts", cann))
    us = pl.when(untimed).then(dated).str.strptime(pl.Datetime("us"), "%m/%d/%Y %H:%M:%S", strict=False)
    return frame.with_columns(
        pl.coalesce(pl.col("_glog_ts"), pl.col("_iso_ts"), us).alias("ts"),
        pl.col("_glog_ts").is_not_null().alias("_no_year"),
    ).drop("_dated", "_glog", "_glog_ts", "_iso", "_iso_ts")


_GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL", "C": "CRITICAL"}
_WORD_LEVELS = {
    "DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARNING", "WARN": "WARNING", "Warning": "WARNING",
    "ERROR": "ERROR", "Error": "ERROR", "CRITICAL": "CRITICAL", "FATAL": "CRITICAL",
}


def _level(head: pl.Expr) -> pl.Expr:
    """The level of a line from its first characters: a c10/glog header's letter, else the
    first level word between delimiters."""
    glog = head.str.extract(P.GLOG_LEVEL, 0).str.strip_chars_start("[").str.slice(0, 1)
    word = head.str.extract(P.LEVEL_WORD, 0).str.extract(P.LEVEL_WORDS, 0)
    return pl.coalesce(glog.replace_strict(_GLOG_LEVELS, default=None), word.replace_strict(_WORD_LEVELS, default=None))


def _progress_sources(reps: pl.DataFrame) -> pl.DataFrame:
    """``_c_step`` and ``_c_total``: which of ``_STEP_SOURCES`` names each line's step and its
    total (on one line per shape).

    The first format that matches names the step, and the total comes from the first format
    that has one; each later format counts only where no earlier one that always carries a
    total (the first three, then a training tqdm bar) matched.
    """
    msg = pl.col("message")
    found = reps.select(
        *(msg.str.extract_groups(p).alias(f"_f{i}") for i, p in enumerate(P.PROGRESS_FORMATS)),
        msg.str.extract_groups(P.TQDM).alias("_in_line"),
        pl.col("redraw_bar").str.extract_groups(P.TQDM).alias("_hidden"),
    )
    step = {name: pl.col(name).struct.field("step") for name in found.columns}
    # a bar in the line itself, else the one a redraw hid; nested bars (evaluation inside
    # training) are not training steps, and are drawn one line up, with ESC[A
    bar_text = pl.when(step["_in_line"].is_not_null()).then(msg).otherwise(pl.col("redraw_bar"))
    train_bar = ~matches(bar_text.str.slice(0, 40), P.NON_TRAIN_BAR) & ~matches(bar_text, "\x1b[A", literal=True)
    in_line = step["_in_line"].is_not_null() & train_bar
    hidden = step["_in_line"].is_null() & step["_hidden"].is_not_null() & train_bar
    # "tokens per step=131,072" is a rate, not a step
    vetoed = pl.col("_f4").struct.field("per").is_not_null() | pl.col("_f4").struct.field("thousands").is_not_null()
    # (source index, whether it counts, its struct), in _STEP_SOURCES' order
    first = pl.coalesce(step[f"_f{i}"] for i in range(3)).is_null()
    bar = in_line | hidden
    sources = [
        *((i, pl.lit(True), pl.col(f"_f{i}")) for i in range(3)),
        (_BAR_IN_LINE, first & in_line, pl.col("_in_line")),
        (_BAR_REDRAWN, first & hidden, pl.col("_hidden")),
        *((i + 2, first & ~bar & (~vetoed if i == 4 else pl.lit(True)), pl.col(f"_f{i}")) for i in range(3, 6)),
    ]

    def first_with(field: str) -> pl.Expr:
        return pl.coalesce(
            pl.when(counts & struct.struct.field(field).is_not_null()).then(pl.lit(index, pl.Int8)) for index, counts, struct in sources
        )

    return reps.with_columns(found).with_columns(
        first_with("step").alias("_c_step"), first_with("total").alias("_c_total")
    ).drop(found.columns)


def _progress(frame: pl.LazyFrame, ambiguous: list[int], found: frozenset[str]) -> pl.LazyFrame:
    """Step and total steps, cut from each line where its shape says; the lines whose shape left
    that unknown search the format themselves (``ambiguous``: the formats such lines need)."""

    def text(source: pl.Expr) -> pl.Expr:
        if _REDRAWN_BAR not in found:
            return pl.col("message")
        return pl.when(source == _BAR_REDRAWN).then(pl.col("redraw_bar")).otherwise(pl.col("message"))

    step_source, total_source = pl.col("_c_step"), pl.col("_c_total")
    step = [_value(text(step_source), "step")]
    total = [_value(text(total_source), "max_steps")]
    names = [f"_s{i}" for i in ambiguous]
    for i, name in zip(ambiguous, names, strict=True):
        needs = pl.col("_c_ambiguous") & ((step_source == i) | (total_source == i))
        found = pl.when(needs).then(pl.col(_STEP_SOURCES[i][0])).str.extract_groups(_STEP_SOURCES[i][1])
        frame = frame.with_columns(found.alias(name))
        step.append(pl.when(step_source == i).then(pl.col(name).struct.field("step")))
        total.append(pl.when(total_source == i).then(pl.col(name).struct.field("total")))
    return frame.with_columns(
        pl.coalesce(step).cast(pl.Int64, strict=False).alias("step"),
        pl.coalesce(total).cast(pl.Int64, strict=False).alias("max_steps"),
    ).drop("redraw_bar", *names)


# struct column -> the extractor run on the hinted rows
_EXTRACTORS: dict[str, str] = {
    "_exc": P.EXC_TYPE, "_ec": P.ERROR_CODE, "_ex": P.EXIT, "_pid": P.PID, "_nh": P.NCCL_HEADER, "_w": P.WORK,
    "_ps": P.PG_STATUS, "_pg": P.PG, "_nr": P.NCCL_RANK, "_self": P.LINE_RANK,
}
# A cheap literal search in front of the extractors whose patterns the regex engine cannot
# prefilter itself (alternatives that start with a class or an anchor); a superset of each.
_GATES: dict[str, str] = {"_ec": rf"ERR\d|{P.CANN_CODE}|nccl[A-Z]", "_pid": r"PID|\(\d+,"}


def _gated(name: str) -> pl.Expr:
    gate = _GATES.get(name)
    return pl.col("_hinted") if gate is None else pl.when(pl.col("_hinted").str.contains(gate)).then(pl.col("_hinted"))


def _fields(frame: pl.DataFrame, found: frozenset[str]) -> pl.DataFrame:
    """Training metrics, and error and collective fields on the rows that can carry them.

    The error and collective extractors run on a filtered copy of the few hinted rows, and
    their values are scattered back: over a whole batch even a column masked to those rows
    costs twenty times more (each extractor builds a struct the batch's length).
    """
    msg = pl.col("message")
    frame = frame.with_columns(
        # the whole match, then its value (no capture group: see patterns.METRICS)
        _value(msg, name).cast(pl.Float64, strict=False).alias(name)  # (casting reads NaN, Inf)
        for name in P.METRICS
    )
    if "_c_fields" not in found:
        return frame.with_columns(pl.lit(None, dtype).alias(name) for name, dtype in _field_schema().items())
    rows = frame.lazy().filter(pl.col("_c_fields")).select("_row", msg.alias("_hinted")).collect()
    rows = rows.with_columns(*(_gated(name).str.extract_groups(p).alias(name) for name, p in _EXTRACTORS.items()))
    values = rows.select("_row", *_field_values())
    return scatter_rows(frame, values, values.drop("_row").schema)


@functools.cache
def _field_schema() -> pl.Schema:
    """The fields' columns and types (as :func:`_fields` gives them)."""
    rows = pl.DataFrame({"_hinted": [""]}).with_columns(pl.col("_hinted").str.extract_groups(p).alias(n) for n, p in _EXTRACTORS.items())
    return rows.select(_field_values()).schema


def _field_gate(text: pl.Expr) -> pl.Expr:
    """The rows the error and collective extractors run on (a superset of their matches, and
    digit-blind: it is decided once per digit shape)."""
    return (
        matches_any(text, tuple(_blind(gate) for gate in P.FIELD_GATES))
        | pl.any_horizontal(text.str.starts_with(h) for h in P.FIELD_LINE_STARTS)
    )


def _field_values() -> list[pl.Expr]:
    """The fields, from the extractors' struct columns."""

    def f(struct: str, name: str) -> pl.Expr:
        return pl.col(struct).struct.field(name)

    def as_int(struct: str, *names: str) -> pl.Expr:
        return pl.coalesce([f(struct, n) for n in names]).cast(pl.Int64, strict=False)

    pg_name = pl.coalesce(
        pl.concat_str([f("_pg", "pg_id"), pl.lit("("), f("_pg", "pg_desc"), pl.lit(")")]),
        pl.concat_str([f("_pg", "pg"), pl.lit("("), f("_pg", "pg_desc2"), pl.lit(")")]),
        f("_pg", "pg"),
    )
    signum_name = pl.when(f("_ex", "death").is_not_null()).then(pl.lit("received ") + f("_ex", "death"))
    pid = pl.coalesce(
        f("_ex", "cfe_pid"), f("_ex", "agent_pid"), f("_ex", "sig_pid"), f("_ex", "term_pid"),
        *(f("_pid", n) for n in ("npu_pid", "cann_pid", "plog_pid", "plog_pid2")), f("_nh", "pid"),
    )
    return [
        f("_exc", "exc").alias("exc_type"),
        pl.coalesce(f("_ec", "err"), f("_ec", "ei"), f("_ec", "ei2"), f("_ec", "nccl")).alias("error_code"),
        as_int("_ex", "cfe_code", "agent_code").alias("exit_code"),
        pl.coalesce(f("_ex", "cfe_sig"), f("_ex", "sig_name"), f("_ex", "term_sig"), signum_name).alias("signal"),
        pid.cast(pl.Int64, strict=False).alias("pid"),
        f("_nh", "host").alias("host"),
        pg_name.alias("pg"),
        pl.coalesce(f("_w", "seq"), f("_ps", "ps_seq")).cast(pl.Int64, strict=False).alias("seq"),
        f("_w", "op").alias("op_type"),
        as_int("_w", "numel").alias("numel"),
        as_int("_w", "tmo").alias("timeout_ms"),
        as_int("_w", "ran").alias("ran_ms"),
        as_int("_ps", "enq", "enq2").alias("last_enqueued"),
        as_int("_ps", "done", "done2").alias("last_completed"),
        f("_pid", "npu_rank").cast(pl.Int64, strict=False).alias("_npu_rank"),
        f("_nr", "rank").cast(pl.Int64, strict=False).alias("_nccl_rank"),
        pl.coalesce(f("_self", n) for n in ("rank", "swift", "of")).cast(pl.Int64, strict=False).alias("_line_rank"),
        f("_ex", "agent_lr").cast(pl.Int64, strict=False).alias("_agent_lr"),
    ]


def _kinds(frame: pl.LazyFrame, found: frozenset[str]) -> pl.LazyFrame:
    level = pl.col("level")
    is_error = _exact("_c_error", P.ERROR_LINE, found) | level.is_in(["ERROR", "CRITICAL"])
    kind = (
        pl.when(is_error).then(pl.lit("error"))
        .when(level == "WARNING").then(pl.lit("warning"))
        # "Stopping training due to num_updates: 10" names a step but is the end of training
        .when(_exact("_c_lifecycle", P.LIFECYCLE_LINE, found)).then(pl.lit("lifecycle"))
        .when(pl.col("step").is_not_null()).then(pl.lit("progress"))
        .when(_exact("_c_collective", P.COLLECTIVE_LINE, found)).then(pl.lit("collective"))
        .otherwise(pl.lit("info"))
    )
    return frame.with_columns(kind.alias("kind"))


def _records(frame: pl.DataFrame) -> pl.DataFrame:
    """Give the lines of one multi-line record (traceback, C++ abort, CANN EI block,
    ChildFailedError summary) a shared id, per stream so interleaved ranks stay apart."""
    frame = frame.with_columns(pl.lit(None, pl.Int64).alias("_rec_row"), pl.lit(None, pl.String).alias("_rec_kind"))
    if not frame.get_column("_has_rec").any():
        return frame.drop("_has_rec")
    starts = P.union(*P.RECORD_STARTS.values())
    has_start = matches_any(pl.col("message"), P.RECORD_GATES) & pl.col("message").str.contains(starts)
    lazy = frame.lazy()
    with_records = (
        lazy.filter(pl.col("_has_rec")).group_by("_fid").agg(has_start.any().alias("_start")).filter("_start").collect()
    ).get_column("_fid")
    subset = lazy.filter(pl.col("_fid").is_in(with_records.implode())).select("_row", "stream", "message").collect()
    if subset.is_empty():
        return frame.drop("_has_rec")
    ids = _record_ids(subset)
    return scatter_rows(frame, ids, {"_rec_row": pl.Int64, "_rec_kind": pl.String}).drop("_has_rec")


def _record_ids(frame: pl.DataFrame) -> pl.DataFrame:
    msg = pl.col("message")
    record = pl.lit(None, dtype=pl.Int64)
    kind_of = pl.lit(None, dtype=pl.String)
    for name, start in P.RECORD_STARTS.items():
        is_start = msg.str.contains(start)
        is_cont = msg.str.contains(P.RECORD_CONTINUES[name]) & ~is_start
        # a run breaks at every line that neither starts nor continues the record
        brk = (is_start | ~is_cont).cast(pl.Int64)
        run = brk.cum_sum().over("stream")
        started = is_start.first().over(["stream", run])
        rid = pl.when(started).then(pl.col("_row").min().over(["stream", run]))
        record = pl.coalesce(record, rid)
        kind_of = pl.coalesce(kind_of, pl.when(started).then(pl.lit(name)))
    frame = frame.with_columns(record.cast(pl.Int64).alias("_rec_row"), kind_of.alias("_rec_kind"))
    # a record is identified by its first row; blank trailing lines do not extend it
    return frame.with_columns(
        pl.when(pl.col("message").str.len_bytes() > 0).then(pl.col("_rec_row")).alias("_rec_row")
    ).select("_row", "_rec_row", "_rec_kind")


def _child_failed_entries(frame: pl.DataFrame) -> pl.DataFrame:
    """Attach host, rank, local rank and time of each ChildFailedError entry to its exitcode line."""
    out = frame.with_columns(
        pl.lit(None, pl.String).alias("_cfe_host"),
        pl.lit(None, pl.Int64).alias("_cfe_rank"),
        pl.lit(None, pl.Int64).alias("_cfe_lr"),
        pl.lit(None, pl.Datetime("us")).alias("_cfe_time"),
    )
    cfe = frame.filter(pl.col("_rec_kind") == "cfe")
    if cfe.is_empty():
        return out
    fields = pl.col("message").str.extract_groups(P.CFE_FIELD)
    entry = pl.col("message").str.contains(r"^\[\d+\]:$").cast(pl.Int64).cum_sum().over("_rec_row")
    cfe = cfe.with_columns(fields.alias("_f"), entry.alias("_entry")).unnest("_f")
    keys = ["_rec_row", "_entry"]
    cfe = cfe.select(
        "_row",
        pl.col("cfe_host").forward_fill().over(keys).alias("_cfe_host"),
        pl.col("cfe_rank").cast(pl.Int64, strict=False).forward_fill().over(keys).alias("_cfe_rank"),
        pl.col("cfe_lr").cast(pl.Int64, strict=False).forward_fill().over(keys).alias("_cfe_lr"),
        pl.col("cfe_time").str.strptime(pl.Datetime("us"), "%Y-%m-%d_%H:%M:%S", strict=False)
        .forward_fill().over(keys).alias("_cfe_time"),
    )
    return scatter_rows(
        out, cfe, {"_cfe_host": pl.String, "_cfe_rank": pl.Int64, "_cfe_lr": pl.Int64, "_cfe_time": pl.Datetime("us")}
    )


def _keep_rows(frame: pl.DataFrame, keep: str | None) -> pl.DataFrame:
    """The notable rows: errors, warnings, lifecycle, progress, collectives, records, lines
    that name a setting or a failure word (``NOTABLE_INFO``) and lines matching ``keep``.

    After :func:`_drop_chatter` (``_gap`` present) or over every parsed line of a batch. The
    times the kept lines inherit from dropped ones ride along (:func:`_given_times`) until
    :func:`_inherit_dropped_times`."""
    msg = pl.col("message")
    plain = (pl.col("kind") == "info") & pl.col("step").is_null() & pl.col("_rec_row").is_null()
    chatter = pl.when(plain).then(msg)
    notable = ~plain | matches(chatter, P.NOTABLE_INFO)
    if keep:
        notable = notable | matches(chatter, keep)
    # Several progress lines per step (a tqdm redraw, a log_dist line, a metrics dict) say the
    # same step; keep the first of each and every one that carries a metric. A line dropped as
    # chatter in between (``_gap`` grew) breaks the run, as it did before it was dropped.
    same_step = pl.col("step") == pl.col("step").shift(1).over("stream", "_line_rank")
    if "_gap" in frame.columns:
        same_step = same_step & (
            pl.col("_line_rank").is_not_null() | (pl.col("_gap") == pl.col("_gap").shift(1).over("stream", "_line_rank"))
        )
    repeated_step = (
        (pl.col("kind") == "progress")
        & pl.col("loss").is_null() & pl.col("grad_norm").is_null() & pl.col("lr").is_null()
        & same_step
    )
    frame = _given_times(frame.with_columns((notable & ~repeated_step.fill_null(False)).alias("_kept")))
    # A filtered message column still points into the whole batch's text buffers; copying the
    # kept messages lets those buffers go, so memory follows what is kept, not what was read.
    return frame.filter("_kept").drop("_kept", "_gap", strict=False).with_columns(pl.col("message") + "")


def _given_times(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with ``_given_ts`` and ``_given_no_year`` on the lines to keep (``_kept``)
    that follow a line that gives its time (see :func:`_time_givers`), worked out on the
    givers alone."""
    kept = pl.col("_kept")
    # (over every parsed line, the times are known; after the chatter drop, where they stand)
    timed = "ts" in frame.columns
    stamped = pl.col("ts").is_not_null() if timed else _has_stamp()
    needed = ["ts", "_no_year"] if timed else ["message", *(f"_{part}_{value}" for value in ("dated", "glog") for part in "on")]
    givers = (
        frame.lazy().with_row_index("_i").select("_i", "stream", "_kept", *needed)
        .with_columns(_next_in_stream(kept | stamped, pl.col("_i")).alias("_row"))
        .filter(_time_givers(kept, stamped))
        .collect()
    )
    if not givers.height:
        return frame
    times = givers.lazy() if timed else _stamp_times(givers.lazy())
    given = times.select("_row", pl.col("ts").alias("_given_ts"), pl.col("_no_year").alias("_given_no_year")).collect()
    return scatter_rows(frame, given, {"_given_ts": pl.Datetime("us"), "_given_no_year": pl.Boolean})
