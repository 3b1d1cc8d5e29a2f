"""The line parser for every text family: prefixes, time, level, kind, step, records, fields.

All of it is vectorized polars over a batch of files' lines, and it is built so that the
bulk of a big log costs only a few passes:

* whole-file hints (one search per file's text) skip the prefix and record stages for the
  files that cannot have them;
* lines that cannot be kept (chatter) are dropped right after the prefixes are stripped,
  before any extraction (:func:`_drop_chatter`);
* the extractors that few lines need run on a filtered copy of those lines, scattered back by
  row index (no join, no re-sort); the others on columns masked to the rows that can match;
* what only the kept lines need (timestamps) is extracted after the rest are dropped.
"""

from __future__ import annotations

import polars as pl

from postmortem.exprs import matches, matches_any, scatter_rows
from postmortem.parsers import patterns as P
from postmortem.reading import split_lines

_HEAD = 64  # characters of a message searched for its timestamp and level


def parse_files(files: pl.DataFrame, *, keep: str | None = None, keep_all: bool = True) -> pl.DataFrame:
    """Parse a batch of text files: one row per file with ``_fid`` (an integer file id),
    ``family`` and ``text``. Rows carry ``_fid``, not the family (nor any other per-file
    column, which would be repeated on every line).

    With ``keep_all`` False only notable lines are returned (see :func:`_keep_rows`); ``keep``
    is a regex of further lines to keep (the rule set's patterns).
    """
    hinted = files.with_columns(
        ((pl.col("family") == "slurm") | pl.col("text").str.contains(P.literals(P.PREFIX_HINTS))).alias("_has_pfx"),
        matches_any(pl.col("text"), P.RECORD_ANY).alias("_has_rec"),
    )
    return parse_text(split_lines(hinted), keep=keep, keep_all=keep_all)


def parse_text(lines: pl.DataFrame, *, keep: str | None = None, keep_all: bool = True) -> pl.DataFrame:
    """Parse a batch of lines.

    ``lines`` are :func:`parse_files`' split lines: ``line``, ``raw``, ``redraw_bar``, the
    per-file columns and the whole-file hints ``_has_pfx`` / ``_has_rec``. Returns timeline
    columns (see :mod:`postmortem.schema`) plus ``stream`` and ``srun`` helpers.
    """
    frame = _strip_prefixes(lines)
    if not keep_all:
        frame = _drop_chatter(frame, keep)
    # the per-line extraction as lazy queries: polars then shares common subexpressions and
    # runs them in morsels on the streaming engine
    lazy = _kinds(_progress(_levels(frame.lazy().with_row_index("_row"))))
    frame = _fields(lazy.collect(engine="streaming"))
    frame = _records(frame)
    frame = _child_failed_entries(frame)
    frame = frame if keep_all else _keep_rows(frame, keep)
    # what deciding which lines to keep does not need is extracted from the kept lines only
    frame = _timestamps(frame.lazy()).with_columns(
        pl.col("message").str.extract(P.NODE_RANK_ARG, 1).cast(pl.Int64, strict=False).alias("_arg_node_rank"),
        pl.col("message").str.extract(P.NPROC_ARG, 1).cast(pl.Int64, strict=False).alias("_arg_nproc"),
    ).drop("_row", "_has_pfx", "_rec_kind", "family").collect(engine="streaming")
    # most extracted fields are null on every line of a batch: a constant costs no memory
    empty = [name for name, column in frame.to_dict().items() if column.null_count() == frame.height]
    return frame.with_columns(pl.lit(None, frame.schema[name]).alias(name) for name in empty)


def _strip_prefixes(lines: pl.DataFrame) -> pl.DataFrame:
    """Launcher prefixes stripped into ``pfx_rank``, ``pfx_local``, ``srun``, ``_k8s_time`` and
    ``stream``; only the lines of files whose whole-file hint says they may have one are searched."""
    hinted = lines.get_column("_has_pfx")
    if hinted.all():
        return _prefixed(lines)
    frame = _without_prefixes(lines)
    if not hinted.any():
        return frame
    # the few hinted files' lines are parsed alone and written back by row (no merge, no sort)
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


def _drop_chatter(frame: pl.DataFrame, keep: str | None) -> pl.DataFrame:
    """Drop the lines :func:`_keep_rows` would drop whatever their fields turn out to be.

    A line survives when it matches :data:`patterns.KEPT_SUPERSET` or ``keep``, carries a
    redrawn progress bar, or belongs to a file with a record in it (record continuation lines
    look like anything). ``_gap`` counts the dropped lines before each line of its stream, so
    that "the previous line repeats this step" still sees a dropped line in between.
    """
    pattern = P.KEPT_SUPERSET if keep is None else f"{P.KEPT_SUPERSET}|{keep}"
    candidate = pl.col("message").str.contains(pattern) | pl.col("redraw_bar").is_not_null() | pl.col("_has_rec")
    frame = frame.with_columns(candidate.alias("_candidate"))
    frame = frame.with_columns((~pl.col("_candidate")).cast(pl.UInt32).cum_sum().over("stream").alias("_gap"))
    return frame.filter(pl.col("_candidate")).drop("_candidate")


def _timestamps(frame: pl.LazyFrame) -> pl.LazyFrame:
    head = pl.col("message").str.slice(0, _HEAD)
    # One capture-free search finds the stamp; each shape is then parsed by strptime, which
    # is far cheaper than one regex with two dozen capture groups.
    frame = frame.with_columns(head.alias("_head")).with_columns(
        pl.col("_head").str.extract(P.DATED_TIMESTAMP, 0).alias("_dated"),
        pl.col("_head").str.extract(P.GLOG_TIMESTAMP, 1).alias("_glog"),
    )
    dated, glog = pl.col("_dated"), pl.col("_glog")
    iso = dated.str.replace_many(["T", "_", ","], [" ", " ", "."]).str.strptime(
        pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f", strict=False
    )
    # CANN's 2025-10-24-11:18:29.499.235 is milliseconds.microseconds
    cann_text = pl.when(dated.str.len_chars() == 27).then(dated.str.slice(0, 23) + dated.str.slice(24, 3)).otherwise(dated)
    cann = cann_text.str.strptime(pl.Datetime("us"), "%Y-%m-%d-%H:%M:%S%.f", strict=False)
    us = dated.str.strptime(pl.Datetime("us"), "%m/%d/%Y %H:%M:%S", strict=False)
    # c10 headers: MMDD is not zero-padded, there is no year, and a 9-digit fraction is
    # CLOCK_MONOTONIC nanoseconds, not part of the wall-clock second
    nanos = (glog.str.len_chars() - glog.str.find(".", literal=True)) == 10
    glog_text = pl.when(nanos).then(glog.str.slice(0, glog.str.len_chars() - 10)).otherwise(glog)
    # 2000 is a leap year, so 29 February parses; the real year is filled in later
    glog_ts = pl.when(glog_text.str.find(" ") == 3).then(pl.lit("20000") + glog_text).otherwise(pl.lit("2000") + glog_text)
    return frame.with_columns(
        glog_ts.str.strptime(pl.Datetime("us"), "%Y%m%d %H:%M:%S%.f", strict=False).alias("_glog_ts"),
    ).with_columns(
        pl.coalesce(pl.col("_glog_ts"), iso, cann, us).alias("ts"),
        pl.col("_glog_ts").is_not_null().alias("_no_year"),
    ).drop("_dated", "_glog", "_glog_ts", "_head")


_GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL", "C": "CRITICAL"}
_WORD_LEVELS = {
    "DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARNING", "WARN": "WARNING", "Warning": "WARNING",
    "ERROR": "ERROR", "Error": "ERROR", "CRITICAL": "CRITICAL", "FATAL": "CRITICAL",
}


def _levels(frame: pl.LazyFrame) -> pl.LazyFrame:
    head = pl.col("message").str.slice(0, _HEAD)
    glog = head.str.extract(P.GLOG_LEVEL, 0).str.strip_chars_start("[").str.slice(0, 1)
    # (the words as plain literals first: most lines have none, and a literal search is cheap)
    word = pl.when(head.str.contains(P.LEVEL_WORDS)).then(head).str.extract(P.LEVEL_WORD, 0).str.extract(P.LEVEL_WORDS, 0)
    level = pl.coalesce(glog.replace_strict(_GLOG_LEVELS, default=None), word.replace_strict(_WORD_LEVELS, default=None))
    return frame.with_columns(level.alias("level"))


def _progress(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Step and total steps from every progress format, one simple pattern per format.

    The first format that matches names the step, and the total comes from the first format
    that has one; so each later format runs only where no earlier one that always carries a
    total (the first three, then a training tqdm bar) matched. Each struct is computed once
    into a column and its fields are read from there.
    """
    msg = pl.col("message")
    names = [f"_f{i}" for i in range(len(P.PROGRESS_FORMATS))]
    found = [pl.col(name) for name in names]
    # (no prefilter: after the chatter is dropped, most lines left are progress lines, and each
    # format's literals already prefilter its regex)
    frame = frame.with_columns(msg.str.extract_groups(p).alias(n) for n, p in zip(names[:3], P.PROGRESS_FORMATS[:3], strict=True))
    undecided = pl.coalesce(f.struct.field("step") for f in found[:3]).is_null()
    frame = frame.with_columns(
        pl.when(undecided).then(msg).alias("_p"), pl.when(undecided).then(pl.col("redraw_bar")).alias("redraw_bar")
    )
    # a bar in the line itself, else the one a redraw hid
    in_line = pl.col("_p").str.extract_groups(P.TQDM)
    frame = frame.with_columns(in_line.alias("_bar")).with_columns(
        pl.when(pl.col("_bar").struct.field("step").is_not_null()).then(msg).otherwise(pl.col("redraw_bar")).alias("_bar_text"),
    )
    frame = frame.with_columns(
        pl.when(pl.col("_bar").struct.field("step").is_not_null()).then(pl.col("_bar"))
        .otherwise(pl.col("redraw_bar").str.extract_groups(P.TQDM)).alias("_bar")
    )
    bar_text = pl.when(pl.col("_bar").struct.field("step").is_not_null()).then(pl.col("_bar_text"))
    # nested bars (evaluation inside training) are drawn one line up, with ESC[A
    train_bar = (
        pl.col("_bar").struct.field("step").is_not_null()
        & ~matches(bar_text.str.slice(0, 40), P.NON_TRAIN_BAR)
        & ~matches(bar_text, "\x1b[A", literal=True)
    )
    frame = frame.with_columns(pl.when(train_bar).then(pl.col("_bar")).alias("_bar"))
    # a training bar names the step and the total: the formats after it only run where there is none
    rest = pl.when(pl.col("_bar").struct.field("step").is_null()).then(pl.col("_p"))
    frame = frame.with_columns(
        rest.str.extract_groups(p).alias(n) for n, p in zip(names[3:], P.PROGRESS_FORMATS[3:], strict=True)
    )
    # "tokens per step=131,072" is a rate, not a step
    vetoed = found[4].struct.field("per").is_not_null() | found[4].struct.field("thousands").is_not_null()
    frame = frame.with_columns(pl.when(vetoed).then(pl.lit(None)).otherwise(found[4]).alias(names[4]))
    found = [*found[:3], pl.col("_bar"), *found[3:]]
    return frame.with_columns(
        pl.coalesce(f.struct.field("step") for f in found).cast(pl.Int64, strict=False).alias("step"),
        pl.coalesce(f.struct.field("total") for f in found).cast(pl.Int64, strict=False).alias("max_steps"),
    ).drop("redraw_bar", "_p", "_bar_text", "_bar", *names)


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


def _fields(frame: pl.DataFrame) -> pl.DataFrame:
    """Training metrics, and error and collective fields on the rows that can carry them.

    The error and collective extractors run on a filtered copy of the few hinted rows, and
    their values are scattered back: over a whole batch even a column masked to those rows
    costs twenty times more (each extractor builds a struct the batch's length).
    """
    msg = pl.col("message")
    metric = pl.when(msg.str.contains(P.METRIC_HINTS_RE)).then(msg)
    frame = frame.with_columns(metric.alias("_metric")).with_columns(
        # the whole match, then its value (no capture group: see patterns.METRICS)
        pl.col("_metric").str.extract(key + value, 0).str.extract(f"(?:{value})$", 0)
        .cast(pl.Float64, strict=False).alias(name)  # (casting reads NaN, Inf)
        for name, (key, value) in P.METRICS.items()
    ).drop("_metric")
    rows = frame.lazy().filter(_field_gate(msg)).select("_row", msg.alias("_hinted")).collect()
    rows = rows.with_columns(*(_gated(name).str.extract_groups(p).alias(name) for name, p in _EXTRACTORS.items()))
    values = rows.select("_row", *_field_values())
    return scatter_rows(frame, values, values.drop("_row").schema)


def _field_gate(text: pl.Expr) -> pl.Expr:
    """The rows the error and collective extractors run on (a superset of their matches)."""
    return (
        matches_any(text, P.FIELD_GATES)
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


def _kinds(frame: pl.LazyFrame) -> pl.LazyFrame:
    msg = pl.col("message")
    level = pl.col("level")
    error_line = matches(pl.when(matches_any(msg, P.ERROR_GATES)).then(msg), P.ERROR_LINE)
    is_error = error_line | level.is_in(["ERROR", "CRITICAL"])
    is_warning = level == "WARNING"
    lifecycle = matches(pl.when(msg.str.to_lowercase().str.contains(P.LIFECYCLE_ANCHORS)).then(msg), P.LIFECYCLE_LINE)
    kind = (
        pl.when(is_error).then(pl.lit("error"))
        .when(is_warning).then(pl.lit("warning"))
        # "Stopping training due to num_updates: 10" names a step but is the end of training
        .when(lifecycle).then(pl.lit("lifecycle"))
        .when(pl.col("step").is_not_null()).then(pl.lit("progress"))
        .when(msg.str.contains(P.COLLECTIVE_LINE)).then(pl.lit("collective"))
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

    After :func:`_drop_chatter` (``_gap`` present) or over every parsed line of a batch."""
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
    kept = frame.filter(notable & ~repeated_step.fill_null(False)).drop("_gap", strict=False)
    # A filtered message column still points into the whole batch's text buffers; copying the
    # kept messages lets those buffers go, so memory follows what is kept, not what was read.
    return kept.with_columns(pl.col("message") + "")
