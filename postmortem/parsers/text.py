"""The line parser for every text family: prefixes, time, level, kind, step, records, fields.

All of it is vectorized polars over a batch of files' lines. The field extractors run only
on the rows whose text contains one of a few literal hints, so a gigabyte of progress bars
costs a handful of regex passes, not dozens.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers import patterns as P

_HEAD = 64  # characters of a message searched for its timestamp and level


def parse_text(lines: pl.DataFrame) -> pl.DataFrame:
    """Parse a batch of lines.

    ``lines`` has columns ``file``, ``family``, ``line``, ``raw`` and the per-file facts
    ``path_rank``, ``path_local_rank``, ``path_node`` (nullable). Returns timeline columns
    (see :mod:`postmortem.schema`) plus ``stream`` and ``srun`` helpers.
    """
    frame = _strip_prefixes(lines)
    frame = _timestamps_and_levels(frame)
    frame = _progress(frame)
    frame = _fields(frame)
    frame = _kinds(frame)
    frame = _records(frame)
    return _child_failed_entries(frame)


def _strip_prefixes(lines: pl.DataFrame) -> pl.DataFrame:
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
    # "[0]:" alone on a line is a ChildFailedError entry header, not a rank template prefix
    bare_entry = (
        pl.col("role1").is_null() & pl.col("n1").is_not_null()
        & (pl.col("_rest").str.len_chars() == pl.col("pfx").str.len_chars())
    )
    frame = frame.with_columns(
        pl.when(bare_entry).then(pl.lit("")).otherwise(pl.col("pfx")).alias("pfx"),
        *(pl.when(bare_entry).then(pl.lit(None, pl.String)).otherwise(pl.col(c)).alias(c) for c in ("n1", "n2", "role1", "role2")),
    )
    n1 = pl.col("n1").cast(pl.Int64, strict=False)
    n2 = pl.col("n2").cast(pl.Int64, strict=False)
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
    return frame.with_columns(
        pl.when(hook).then(message.str.slice(1)).otherwise(message).alias("message"),
        pfx_rank.alias("pfx_rank"),
        pfx_local.alias("pfx_local"),
        # interleaved consoles: a "stream" is one prefix's lines inside one file
        pl.concat_str(
            [pl.col("file"), pl.col("role1").fill_null(""), pl.col("n1").fill_null(""), pl.col("n2").fill_null("")],
            separator="|",
        ).alias("stream"),
    ).drop("_rest", "pfx", "mpi_rank", "role1", "n1", "role2", "n2", "raw")


def _timestamps_and_levels(frame: pl.DataFrame) -> pl.DataFrame:
    head = pl.col("message").str.slice(0, _HEAD)
    # One capture-free search finds the stamp; each shape is then parsed by strptime, which
    # is far cheaper than one regex with two dozen capture groups.
    frame = frame.with_columns(
        head.str.extract(P.DATED_TIMESTAMP, 1).alias("_dated"), head.str.extract(P.GLOG_TIMESTAMP, 1).alias("_glog")
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
    frame = frame.with_columns(
        glog_ts.str.strptime(pl.Datetime("us"), "%Y%m%d %H:%M:%S%.f", strict=False).alias("_glog_ts"),
    ).with_columns(
        pl.coalesce(pl.col("_glog_ts"), iso, cann, us).alias("ts"),
        pl.col("_glog_ts").is_not_null().alias("_no_year"),
    ).drop("_dated", "_glog", "_glog_ts")
    lv = head.str.extract_groups(P.LEVEL)
    frame = frame.with_columns(lv.alias("_l")).unnest("_l")
    word = pl.col("word").str.to_uppercase()
    level = (
        pl.when(pl.col("glog").is_not_null())
        .then(pl.col("glog").replace_strict({"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL", "C": "CRITICAL"}, default=None))
        .otherwise(word.replace({"WARN": "WARNING", "FATAL": "CRITICAL"}))
    )
    return frame.with_columns(level.alias("level")).drop("glog", "word")


def _progress(frame: pl.DataFrame) -> pl.DataFrame:
    """Step and total steps from every progress format, one simple pattern per format."""
    msg = pl.col("message")
    found = [msg.str.extract_groups(pattern) for pattern in P.PROGRESS_FORMATS]
    bar_text = pl.coalesce(pl.when(msg.str.contains(P.TQDM)).then(msg), pl.col("redraw_bar"))
    bar = bar_text.str.extract_groups(P.TQDM)
    # nested bars (evaluation inside training) are drawn one line up, with ESC[A
    train_bar = (
        bar.struct.field("step").is_not_null()
        & ~bar_text.str.slice(0, 40).str.contains(P.NON_TRAIN_BAR)
        & ~bar_text.str.contains("\x1b[A", literal=True)
    )
    vetoed = found[4].struct.field("per").is_not_null() | found[4].struct.field("thousands").is_not_null()
    found[4] = pl.when(vetoed).then(pl.lit(None)).otherwise(found[4])
    step = pl.coalesce(
        *(f.struct.field("step") for f in found[:3]),
        pl.when(train_bar).then(bar.struct.field("step")),
        *(f.struct.field("step") for f in found[3:]),
    )
    total = pl.coalesce(
        *(f.struct.field("total") for f in found[:3]),
        pl.when(train_bar).then(bar.struct.field("total")),
        *(f.struct.field("total") for f in found[3:]),
    )
    return frame.with_columns(
        step.cast(pl.Int64, strict=False).alias("step"), total.cast(pl.Int64, strict=False).alias("max_steps")
    ).drop("redraw_bar", strict=False)


def _number(col: str) -> pl.Expr:
    return pl.col(col).str.to_lowercase().cast(pl.Float64, strict=False)


def _fields(frame: pl.DataFrame) -> pl.DataFrame:
    """Extract error and collective fields on the rows that can carry them."""
    frame = frame.with_row_index("_row")
    hinted = frame.filter(pl.col("message").str.contains_any(list(P.FIELD_HINTS)))
    msg = pl.col("message")
    hinted = hinted.with_columns(
        msg.str.extract_groups(P.LOSS).struct.field("loss").alias("_loss"),
        msg.str.extract_groups(P.GRAD_NORM).struct.field("gn").alias("_gn"),
        msg.str.extract_groups(P.LR).struct.field("lr").alias("_lr"),
        msg.str.extract_groups(P.EXC_TYPE).struct.field("exc").alias("exc_type"),
        msg.str.extract_groups(P.ERROR_CODE).alias("_ec"),
        msg.str.extract_groups(P.EXIT).alias("_ex"),
        msg.str.extract_groups(P.PID).alias("_pid"),
        msg.str.extract_groups(P.NCCL_HEADER).alias("_nh"),
        msg.str.extract_groups(P.WORK).alias("_w"),
        msg.str.extract_groups(P.PG_STATUS).alias("_ps"),
        msg.str.extract_groups(P.PG).alias("_pg"),
        msg.str.extract_groups(P.NCCL_RANK).struct.field("rank").alias("_nccl_rank"),
        msg.str.extract_groups(P.LINE_RANK).alias("_self"),
    ).unnest("_ec", "_ex", "_pid", "_nh", "_w", "_ps", "_pg")
    as_int = lambda *names: pl.coalesce([pl.col(n) for n in names]).cast(pl.Int64, strict=False)  # noqa: E731
    pg_name = pl.coalesce(
        pl.concat_str([pl.col("pg_id"), pl.lit("("), pl.col("pg_desc"), pl.lit(")")]),
        pl.concat_str([pl.col("pg"), pl.lit("("), pl.col("pg_desc2"), pl.lit(")")]),
        pl.col("pg"),
    )
    signum_name = pl.when(pl.col("death").is_not_null()).then(pl.lit("received ") + pl.col("death"))
    hinted = hinted.select(
        "_row",
        _number("_loss").alias("loss"),
        _number("_gn").alias("grad_norm"),
        _number("_lr").alias("lr"),
        "exc_type",
        pl.coalesce("err", "ei", "ei2", "nccl").alias("error_code"),
        as_int("cfe_code", "agent_code").alias("exit_code"),
        pl.coalesce(pl.col("cfe_sig"), pl.col("sig_name"), pl.col("term_sig"), signum_name).alias("signal"),
        as_int("cfe_pid", "agent_pid", "sig_pid", "term_pid", "npu_pid", "cann_pid", "plog_pid", "plog_pid2", "pid").alias("pid"),
        pl.col("host"),
        pg_name.alias("pg"),
        as_int("seq", "ps_seq").alias("seq"),
        pl.col("op").alias("op_type"),
        as_int("numel").alias("numel"),
        as_int("tmo").alias("timeout_ms"),
        as_int("ran").alias("ran_ms"),
        as_int("enq", "enq2").alias("last_enqueued"),
        as_int("done", "done2").alias("last_completed"),
        pl.col("npu_rank").cast(pl.Int64, strict=False).alias("_npu_rank"),
        pl.col("_nccl_rank").cast(pl.Int64, strict=False),
        pl.coalesce(pl.col("_self").struct.field(f) for f in ("rank", "swift", "of")).cast(pl.Int64, strict=False).alias("_line_rank"),
        pl.col("agent_lr").cast(pl.Int64, strict=False).alias("_agent_lr"),
    )
    return frame.join(hinted, on="_row", how="left").sort("_row")


def _kinds(frame: pl.DataFrame) -> pl.DataFrame:
    msg = pl.col("message")
    level = pl.col("level")
    is_error = (msg.str.contains_any(list(P.ERROR_HINTS)) & msg.str.contains(P.ERROR_LINE)) | level.is_in(["ERROR", "CRITICAL"])
    is_warning = level == "WARNING"
    kind = (
        pl.when(is_error).then(pl.lit("error"))
        .when(is_warning).then(pl.lit("warning"))
        # "Stopping training due to num_updates: 10" names a step but is the end of training
        .when(msg.str.contains(P.LIFECYCLE_LINE)).then(pl.lit("lifecycle"))
        .when(pl.col("step").is_not_null()).then(pl.lit("progress"))
        .when(msg.str.contains(P.COLLECTIVE_LINE)).then(pl.lit("collective"))
        .otherwise(pl.lit("info"))
    )
    return frame.with_columns(kind.alias("kind"))


def _records(frame: pl.DataFrame) -> pl.DataFrame:
    """Give the lines of one multi-line record (traceback, C++ abort, CANN EI block,
    ChildFailedError summary) a shared id, per stream so interleaved ranks stay apart."""
    starts = "|".join(f"(?:{p})" for p in P.RECORD_STARTS.values())
    has_start = pl.col("message").str.contains_any(list(P.RECORD_HINTS)) & pl.col("message").str.contains(starts)
    frame = frame.with_columns(has_start.any().over("file").alias("_has_rec"))
    plain = frame.filter(~pl.col("_has_rec")).with_columns(
        pl.lit(None, pl.Int64).alias("_rec_row"), pl.lit(None, pl.String).alias("_rec_kind")
    )
    with_records = _record_ids(frame.filter(pl.col("_has_rec")))
    return pl.concat([plain, with_records], how="vertical_relaxed").sort("_row").drop("_has_rec")


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
    frame = frame.with_columns(record.alias("_rec_row"), kind_of.alias("_rec_kind"))
    # a record is identified by its first row; blank trailing lines do not extend it
    return frame.with_columns(
        pl.when(pl.col("message").str.len_bytes() > 0).then(pl.col("_rec_row")).alias("_rec_row")
    )


def _child_failed_entries(frame: pl.DataFrame) -> pl.DataFrame:
    """Attach host, rank, local rank and time of each ChildFailedError entry to its exitcode line."""
    in_cfe = pl.col("_rec_kind") == "cfe"
    cfe = frame.filter(in_cfe)
    if cfe.is_empty():
        return frame.with_columns(
            pl.lit(None, pl.String).alias("_cfe_host"),
            pl.lit(None, pl.Int64).alias("_cfe_rank"),
            pl.lit(None, pl.Int64).alias("_cfe_lr"),
            pl.lit(None, pl.Datetime("us")).alias("_cfe_time"),
        )
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
    return frame.join(cfe, on="_row", how="left").sort("_row")
