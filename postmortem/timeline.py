"""Build one polars timeline from a job directory: discover → read → parse → attribute ranks.

Files are read in parallel threads and parsed in batches, so polars' vectorized string
kernels run over many files at once and memory stays bounded by the batch size.
"""

from __future__ import annotations

import calendar
import re
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import polars as pl

from postmortem.discover import Inventory, JobFile, Skipped, classify_head, discover
from postmortem.parsers.flight_recorder import RejectedDump, align_trace_clock, parse_flight_recorder
from postmortem.parsers.shapes import digit_shape
from postmortem.parsers.structured import parse_elastic_error, parse_pyspy_json, parse_pyspy_text
from postmortem.parsers.text import ShapeBook, parse_files
from postmortem.reading import Unreadable, decode, looks_binary, read_bytes
from postmortem.schema import RANK_SOURCES, conform

# Text parsed per batch: large enough that polars' per-call costs vanish (16 MB and 32 MB run
# equally fast), small enough that the batches in flight, whose working memory the allocator
# keeps, stay a small part of the peak (1 GB benchmark: 1.75 GB peak at 16 MB, 2.03 GB at 32 MB).
BATCH_BYTES = 16 << 20
# Batches read and parsed at once. More threads than cores pays: each batch's stages have
# serial parts (Python glue, single-threaded kernels, reading) that other batches fill.
PARSE_THREADS = 4

_PATH_RANK = re.compile(r"(?:^|[/_.-])(?:rank|proc|process)[_-]?(\d+)(?=[/_.-]|$)", re.IGNORECASE)
_PATH_LOCAL_RANK = re.compile(r"(?:^|/)attempt_\d+/(\d+)/")
_POD = re.compile(r"^(?P<job>.+)-(?P<rtype>master|worker|launcher)-(?P<idx>\d+)$")
_NODE_DIR = re.compile(
    r"^(?:node|host|worker|master|server|machine|gpu|npu|ip)[\w.-]*$|^[A-Za-z][\w-]*?\d+$|^\d+\.\d+\.\d+\.\d+$",
    re.IGNORECASE,
)
_PLOG_PID = re.compile(r"(?:plog|device)-(\d+)_\d+\.log")


@dataclass
class Timeline:
    """The parsed job: the event frame plus what was read, skipped and noticed."""

    frame: pl.DataFrame
    inventory: Inventory
    notes: list[Skipped] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.inventory.root

    def families(self) -> dict[str, int]:
        return dict(Counter(f.family for f in self.inventory.files))


@dataclass
class _Read:
    """One file as read: its text (text families) or its rows (dumps, error files).

    A text file's bytes are decoded with the rest of its batch (``data``; polars checks at once
    that they are UTF-8, see :func:`_text_batch`); ``text`` is text decoded already."""

    file: JobFile
    text: str | None
    rows: pl.DataFrame | None
    notes: list[str]
    error: str | None = None
    data: bytes | None = None


def build_timeline(
    job: Path,
    *,
    keep: str | None = None,
    keep_all: bool = False,
    workers: int | None = None,
) -> Timeline:
    """Parse every file under ``job`` into one timeline.

    Plain informational lines are kept only when they look notable (errors, lifecycle,
    versions, env vars ...) or match ``keep`` (the rule set's patterns), so a gigabyte of
    chatter does not become a gigabyte of rows; ``keep_all`` keeps every line.
    """
    inventory = discover(Path(job))
    notes: list[Skipped] = []
    skipped = list(inventory.skipped)
    frames: list[pl.DataFrame] = []
    facts = _path_facts(inventory.files)
    fids = {f.rel: i for i, f in enumerate(inventory.files)}

    book = ShapeBook(keep)  # what the batches find of the job's line shapes, shared

    def read_and_parse(files: list[JobFile]) -> _Batch:
        return _read_and_parse(files, fids, keep, keep_all, book)

    # Each batch is read, decoded and parsed by one task, and several run at once so that their
    # polars kernels and numpy passes (which release the GIL) keep the cores busy; a task holds
    # its batch's text only while it runs, so at most ``workers`` batches are in memory.
    with ThreadPoolExecutor(max_workers=workers or PARSE_THREADS) as pool:
        for batch in pool.map(read_and_parse, _batches(inventory.files)):
            notes.extend(batch.notes)
            skipped.extend(batch.skipped)
            if batch.frame is not None:
                frames.append(batch.frame)
    inventory.skipped[:] = sorted(skipped, key=lambda s: s.rel)
    parsed_files = {f.rel for f in inventory.files} - {s.rel for s in skipped}
    inventory.files[:] = [f for f in inventory.files if f.rel in parsed_files]
    if not frames:
        return Timeline(conform(pl.DataFrame()), inventory, notes)
    frame, clock_note = align_trace_clock(_finish(frames, inventory, facts))
    if clock_note:
        notes.append(Skipped("(flight recorder dumps)", clock_note))
    return Timeline(frame, inventory, notes)


@dataclass
class _Batch:
    """One batch of files as parsed: its rows, and what was noticed and skipped on the way."""

    frame: pl.DataFrame | None
    notes: list[Skipped]
    skipped: list[Skipped]


def _read_and_parse(files: list[JobFile], fids: dict[str, int], keep: str | None, keep_all: bool, book: ShapeBook) -> _Batch:
    notes: list[Skipped] = []
    skipped: list[Skipped] = []
    texts: list[_Read] = []
    structured: list[pl.DataFrame] = []
    for read in map(_read_file, files):
        notes.extend(Skipped(read.file.rel, n) for n in read.notes)
        if read.error is not None:
            skipped.append(Skipped(read.file.rel, read.error))
        elif read.rows is not None:
            structured.append(_tag(read.rows, fids[read.file.rel]))
        else:
            texts.append(read)
    batch_texts, decoded = _text_batch(texts, fids)
    return _Batch(_parse_batch(batch_texts, structured, keep, keep_all, book), notes + decoded, skipped)


def _parse_batch(
    texts: pl.DataFrame | None, structured: list[pl.DataFrame], keep: str | None, keep_all: bool, book: ShapeBook
) -> pl.DataFrame | None:
    """One batch's rows: parsed text lines (notable ones) and structured dump rows, in file order."""
    parts = list(structured)
    if texts is not None:
        parts.append(parse_files(texts, keep=keep, keep_all=keep_all, book=book))
    if not parts:
        return None
    merged = pl.concat(parts, how="diagonal_relaxed")
    # batches follow file order, so only a batch with dumps in it needs sorting
    return merged.sort(["_fid", "line"], maintain_order=True) if structured else merged


def _text_batch(reads: list[_Read], fids: dict[str, int]) -> tuple[pl.DataFrame | None, list[Skipped]]:
    """One row per text file: its id, family, text and the text's digit shape (the other
    per-file facts are attached by id at the end, not repeated on every line); and notes on
    the files that were not UTF-8.

    The bytes become text in polars, which checks that they are UTF-8 far faster than Python
    decodes them; only the files that are not are decoded by :func:`reading.decode`."""
    reads = [r for r in reads if r.text is not None or r.data is not None]
    if not reads:
        return None, []
    data = [r.text.encode() if r.data is None else r.data for r in reads]
    notes: list[Skipped] = []
    try:
        texts = pl.Series("text", data, dtype=pl.Binary).cast(pl.String)
    except pl.exceptions.ComputeError:  # some file is not UTF-8: find which, one by one
        for i, read in enumerate(reads):
            if not _is_utf8(data[i]):
                raw = decode(data[i])
                notes.extend(Skipped(read.file.rel, n) for n in raw.notes)
                data[i] = raw.text.encode()
        texts = pl.Series("text", data, dtype=pl.Binary).cast(pl.String)
    frame = pl.DataFrame(
        {
            "_fid": pl.Series([fids[r.file.rel] for r in reads], dtype=pl.Int64),
            "family": pl.Series([r.file.family for r in reads], dtype=pl.String),
            "text": texts,
            "shape": pl.Series([digit_shape(d) for d in data], dtype=pl.Binary).cast(pl.String),
        }
    )
    return frame, notes


def _is_utf8(data: bytes) -> bool:
    try:
        pl.Series([data], dtype=pl.Binary).cast(pl.String)
    except pl.exceptions.ComputeError:
        return False
    return True


def timeline_from_text(text: str, file: str = "console.log") -> pl.DataFrame:
    """The timeline of one in-memory log text, as if it were the file ``file`` of a job.

    Used by rule examples and tests: the same parser and rank attribution as a real job.
    """
    family = _family_for_text(text, file)
    job_file = JobFile(Path(file), file, len(text), family)
    read = _read_text(job_file, text, [])
    texts, _ = _text_batch([read], {file: 0})
    frame = _tag(read.rows, 0) if texts is None else parse_files(texts)
    inventory = Inventory(root=Path("."), files=[job_file], skipped=[])
    return _finish([frame], inventory, _path_facts([job_file]))


def _tag(rows: pl.DataFrame, fid: int) -> pl.DataFrame:
    """Give a structured file's rows its file id."""
    return rows.with_columns(pl.lit(fid, pl.Int64).alias("_fid"))


def _family_for_text(text: str, file: str) -> str:
    return classify_head(text.encode("utf-8", errors="replace"), file) or "generic"


def _batches(files: list[JobFile]) -> Iterable[list[JobFile]]:
    batch: list[JobFile] = []
    size = 0
    for f in files:
        batch.append(f)
        size += f.size
        if size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


_STRUCTURED_FAMILIES = frozenset({"pyspy", "pyspy_json", "elastic_error"})


def _structured(family: str, text: str) -> pl.DataFrame | None:
    if family == "pyspy":
        return parse_pyspy_text(text)
    if family == "pyspy_json":
        return parse_pyspy_json(text)
    if family == "elastic_error":
        return parse_elastic_error(text)
    return None


def _read_file(job_file: JobFile) -> _Read:
    if job_file.family == "flight_recorder":
        return _read_flight_recorder(job_file)
    try:
        data, notes = read_bytes(job_file.path)
    except Unreadable as exc:
        return _Read(job_file, None, None, [], str(exc))
    if looks_binary(data):
        return _Read(job_file, None, None, notes, "binary file (not log text)")
    if job_file.family not in _STRUCTURED_FAMILIES:
        return _Read(job_file, None, None, notes, data=data)
    raw = decode(data)
    return _read_text(job_file, raw.text, notes + raw.notes)


def _read_flight_recorder(job_file: JobFile) -> _Read:
    """A flight-recorder dump (pickle or JSON): entry rows, or a skipped file with the reason."""
    try:
        data, notes = read_bytes(job_file.path)
    except Unreadable as exc:
        return _Read(job_file, None, None, [], str(exc))
    try:
        rows = parse_flight_recorder(data, job_file.rel)
    except RejectedDump as exc:
        return _Read(job_file, None, None, notes, str(exc))
    return _Read(job_file, None, rows, notes)


def _read_text(job_file: JobFile, text: str, notes: list[str]) -> _Read:
    """Structured rows for dumps and error files, the text itself for everything else."""
    family = job_file.family
    try:
        rows = _structured(family, text)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        # a truncated or foreign JSON file: fall back to reading it as text
        return _Read(job_file, text, None, [*notes, f"not valid {family} ({type(exc).__name__}); read as plain text"])
    return _Read(job_file, text if rows is None else None, rows, notes)


def _path_facts(files: list[JobFile]) -> pl.DataFrame:
    """What each file's path tells: one row per file, row ``i`` for file id ``i``: ``file``,
    ``family``, ``path_rank``, ``path_local_rank``, ``path_node``, ``path_node_rank``, ``path_pid``."""
    top_dirs = {f.rel.split("/", 1)[0] for f in files if "/" in f.rel}
    node_dirs = len(top_dirs) >= 2 and all(_NODE_DIR.match(d) for d in top_dirs)
    rows: list[dict[str, object]] = []
    for f in files:
        rank = _PATH_RANK.search(f.rel)
        local = _PATH_LOCAL_RANK.search(f.rel)
        node = f.rel.split("/", 1)[0] if node_dirs and "/" in f.rel else None
        pod = _POD.match(Path(re.sub(r"\.(log|txt|out)(\.gz|\.zst)?$", "", f.rel)).name)
        node_rank = None
        if pod:
            node = pod.group(0)
            node_rank = int(pod.group("idx")) + (1 if pod.group("rtype") == "worker" else 0)
        rows.append({
            "file": f.rel,
            "family": f.family,
            "path_rank": int(rank.group(1)) if rank and not local else None,
            "path_local_rank": int(local.group(1)) if local else None,
            "path_node": node,
            "path_node_rank": node_rank,
            "path_pid": int(plog.group(1)) if (plog := _PLOG_PID.search(f.rel)) else None,
        })
    return pl.DataFrame(rows, schema=_FACT_SCHEMA)


_FACT_SCHEMA: dict[str, pl.DataType] = {
    "file": pl.String(), "family": pl.String(), "path_rank": pl.Int64(), "path_local_rank": pl.Int64(),
    "path_node": pl.String(), "path_node_rank": pl.Int64(), "path_pid": pl.Int64(),
}


class _FileTable:
    """The job's files by id (row ``i`` of ``facts`` is file id ``i``), and what is known of a
    whole file handed to each of its rows: a gather by file id through an array with one slot
    per file, neither a join nor a hash lookup per row, and never a column carried on every row
    before it is needed."""

    def __init__(self, facts: pl.DataFrame) -> None:
        self.facts = facts

    def fact(self, name: str) -> pl.Expr:
        """Each row's file's path fact ``name`` (see :func:`_path_facts`)."""
        return pl.lit(self.facts.get_column(name)).gather(pl.col("_fid")).alias(name)

    def of_families(self, *families: str) -> pl.Expr:
        """True on the rows of files of one of ``families``."""
        fids = self.facts.with_row_index("_fid").filter(pl.col("family").is_in(families)).get_column("_fid")
        return pl.col("_fid").is_in(fids.cast(pl.Int64).implode())

    def gather(self, table: pl.DataFrame, value: str, dtype: pl.DataType) -> pl.Expr:
        """``table``'s ``value`` (one row per ``_fid``; files not in it are null) on each row."""
        slots = pl.Series(value, [None] * self.facts.height, dtype=dtype)
        if table.height:
            slots = slots.scatter(table.get_column("_fid").cast(pl.Int64), table.get_column(value).cast(dtype))
        return pl.lit(slots).gather(pl.col("_fid")).alias(value)


def _finish(parts: list[pl.DataFrame], inventory: Inventory, facts: pl.DataFrame) -> pl.DataFrame:
    """Job-level passes over the batches' rows: years, inherited times, ranks, nodes; then the
    timeline schema, with each row's file and family from ``facts`` (see :func:`_path_facts`).
    ``parts`` is emptied, so that columns replaced here are freed here."""
    frame = _concat_columnwise(parts)
    for col, dtype in (
        ("stream", pl.UInt64), ("pfx_rank", pl.Int64), ("pfx_local", pl.Int64), ("srun", pl.Int64),
        ("_no_year", pl.Boolean), ("_npu_rank", pl.Int64), ("_nccl_rank", pl.Int64), ("_agent_lr", pl.Int64),
        ("_cfe_rank", pl.Int64), ("_cfe_lr", pl.Int64), ("_cfe_host", pl.String), ("_cfe_time", pl.Datetime("us")),
        ("_k8s_time", pl.Datetime("us")), ("_arg_node_rank", pl.Int64), ("_arg_nproc", pl.Int64),
        ("_line_rank", pl.Int64), ("_rec_row", pl.Int64), ("ts", pl.Datetime("us")), ("level", pl.String), ("host", pl.String),
        ("pid", pl.Int64), ("step", pl.Int64), ("_carried", pl.Boolean),
    ):
        if col not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=dtype).alias(col))
    frame = frame.with_columns(pl.col("stream").fill_null(pl.col("_fid").cast(pl.UInt64)))
    frame = _fill_times(frame, inventory)
    # (an eager drop would realign every column's chunks, a copy of the whole frame: only when needed)
    if stale := [c for c in _ATTRIBUTION_OUTPUTS if c in frame.columns]:
        frame = frame.drop(stale)
    # lookups through small per-file, per-node and per-pid tables, never joins: the frame keeps
    # its row order and no column is copied
    by_file = _FileTable(facts)
    frame = _attribute_ranks(frame, by_file)
    # record ids, unique over the job: number the (file, first row) pairs of the few record rows
    key = pl.col("_fid") * (1 << 32) + pl.col("_rec_row")
    keys = frame.lazy().filter(pl.col("_rec_row").is_not_null()).select(key.alias("k")).unique(maintain_order=True).collect()
    numbered = {k: i for i, k in enumerate(keys.get_column("k").to_list(), start=1)}
    frame = frame.with_columns(
        key.replace_strict(numbered, default=None, return_dtype=pl.Int64).alias("record"),
        by_file.fact("file"),
        by_file.fact("family"),
    )
    return conform(frame)


_ATTRIBUTION_OUTPUTS = ["rank", "local_rank", "rank_source", "node", "node_rank"]


def _concat_columnwise(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """``pl.concat(parts, how="diagonal_relaxed")`` in one chunk per column, emptying ``parts``.

    Eager polars realigns a frame whose columns are chunked differently (as soon as one column
    is computed over a window) by copying every column. Copying here instead, one column at a
    time while each batch's copy of that column is released, keeps the peak near one frame.
    """
    schema = pl.concat([p.clear() for p in parts], how="diagonal_relaxed").schema
    heights = [p.height for p in parts]
    pieces: dict[str, list[pl.Series]] = {}
    empty: list[pl.Expr] = []
    for name, dtype in schema.items():
        if all(name not in p.columns or p.get_column(name).null_count() == p.height for p in parts):
            # a column no row has a value in stays a constant: no memory behind it
            empty.append(pl.lit(None, dtype).alias(name))
            continue
        pieces[name] = [
            p.drop_in_place(name).cast(dtype) if name in p.columns else pl.repeat(None, h, dtype=dtype, eager=True)
            for p, h in zip(parts, heights, strict=True)
        ]
    parts.clear()

    def concat(name: str) -> pl.Series:
        return pl.concat(pieces.pop(name), rechunk=True).alias(name)

    # (columns copied side by side: each is one thread's work)
    with ThreadPoolExecutor(max_workers=PARSE_THREADS) as pool:
        columns = list(pool.map(concat, list(pieces)))
    return pl.DataFrame(columns).with_columns(empty).select(schema.names())


def _fill_times(frame: pl.DataFrame, inventory: Inventory) -> pl.DataFrame:
    # (lazy filters: only the columns named are read, not a filtered copy of the whole frame)
    carried = pl.col("_carried").fill_null(False)  # a time handed on from a dropped line
    own_time = ~pl.col("_no_year") & pl.col("ts").is_not_null() & ~carried
    years = frame.lazy().filter(own_time).select(pl.col("ts").dt.year()).collect()
    ref_year = int(years.to_series().mode().sort()[-1]) if years.height else _mtime_year(inventory)
    # kubectl --timestamps is the kubelet's receive time (UTC): used only when the line has no
    # time of its own; a time handed on from a dropped line (parsers.text._time_givers) only
    # when it has neither, and it is inferred
    other = pl.coalesce(pl.col("_cfe_time"), pl.col("_k8s_time"))
    from_ts = pl.col("ts").is_not_null() & ~(carried & other.is_not_null())
    stamp = pl.when(pl.col("_no_year")).then(_in_year(pl.col("ts"), ref_year)).otherwise(pl.col("ts"))
    frame = frame.with_columns(pl.when(from_ts).then(stamp).otherwise(other).alias("ts"))
    frame = frame.with_columns((pl.col("ts").is_null() | (carried & other.is_null())).alias("_untimed"))
    # Rows are in file order and, within a file, in line order (batches follow the file order;
    # dumps are sorted into theirs), so a file's rows are one run: the previous time in the same
    # file is the previous time overall when it came from this file. No window, no sort.
    timed = pl.col("ts").is_not_null()
    same_file = pl.when(timed).then(pl.col("_fid")).forward_fill() == pl.col("_fid")
    filled = pl.coalesce(
        pl.col("ts").forward_fill().over("stream"),
        pl.when(same_file).then(pl.col("ts").forward_fill()),
    )
    # (two steps: eager polars would compute ``filled`` twice if both used it)
    frame = frame.with_columns(filled.alias("ts"))
    return frame.with_columns((pl.col("_untimed") & pl.col("ts").is_not_null()).alias("ts_inferred")).drop("_untimed")


def _in_year(ts: pl.Expr, year: int) -> pl.Expr:
    """Year-less header times (parsed into the leap year 2000) moved into ``year``.

    By a constant shift on each side of 29 February, not per-row calendar arithmetic; a
    29 February that ``year`` does not have gives no time rather than a wrong one (the line
    then inherits one).
    """
    march = datetime(2000, 3, 1)
    before = datetime(year, 1, 1) - datetime(2000, 1, 1)
    after = datetime(year, 3, 1) - march
    shifted = pl.when(ts < march).then(ts + before).otherwise(ts + after)
    if calendar.isleap(year):
        return shifted
    return pl.when((ts >= datetime(2000, 2, 29)) & (ts < march)).then(None).otherwise(shifted)


def _mtime_year(inventory: Inventory) -> int:
    """The year of the job's files, for year-less headers when no line prints a full date."""
    for f in inventory.files:
        try:
            return datetime.fromtimestamp(f.path.stat().st_mtime).year
        except OSError:
            continue
    return datetime.now().year  # text with no file behind it (rule examples)


def _attribute_ranks(frame: pl.DataFrame, by_file: _FileTable) -> pl.DataFrame:
    """Global rank, local rank, node and node rank for every row, with ``rank_source``.

    What is known of a whole file or node is worked out on small per-file tables and handed
    to the rows by file id, never by a window or a join over every row.
    """
    npu_rank = pl.when(pl.col("_npu_rank") >= 0).then(pl.col("_npu_rank"))
    self_rank = pl.coalesce(pl.col("_line_rank"), npu_rank, pl.col("_nccl_rank"))
    frame = frame.with_columns(
        pl.coalesce(pl.col("pfx_local"), by_file.fact("path_local_rank"), pl.col("_cfe_lr"), pl.col("_agent_lr")).alias("local_rank"),
        pl.coalesce(pl.col("_cfe_rank"), self_rank).alias("_content_rank"),
        self_rank.alias("_self_rank"),
    )
    lazy = frame.lazy()
    prefixed = lazy.filter(pl.col("pfx_rank").is_not_null() | pl.col("pfx_local").is_not_null()).select(pl.col("_fid").unique())
    has_prefix = pl.col("_fid").is_in(prefixed.collect().to_series().implode())
    # A per-process file (trainer log, plog) whose lines name one rank only belongs to that rank.
    # Consoles never do: they interleave processes, and ChildFailedError rows describe others.
    file_rank = (
        lazy.filter(
            pl.col("_self_rank").is_not_null()
            & ~has_prefix
            & by_file.of_families("trainer_log", "ascend_plog", "nccl_debug", "generic", "torchrun_logdir")
        )
        .group_by("_fid")
        .agg(pl.col("_self_rank").n_unique().alias("_n"), pl.col("_self_rank").first().alias("_file_rank"))
        .filter(pl.col("_n") == 1)
        .collect()
    )
    # an srun label is the global rank when it is the only rank marker; with torchrun inside
    # srun (rank prefixes present) it is the node index instead
    srun_is_rank = by_file.of_families("slurm") & ~has_prefix
    frame = frame.with_columns(
        pl.coalesce(pl.col("pfx_rank"), pl.when(srun_is_rank).then(pl.col("srun"))).alias("pfx_rank"),
        by_file.gather(file_rank, "_file_rank", pl.Int64),
    )
    frame = _nodes(frame, by_file)
    path_rank = by_file.fact("path_rank")
    frame = frame.with_columns(
        pl.when(pl.col("pfx_rank").is_not_null()).then(pl.lit(_SOURCE["prefix"]))
        .when(path_rank.is_not_null()).then(pl.lit(_SOURCE["path"]))
        .when(pl.col("_content_rank").is_not_null() | pl.col("_file_rank").is_not_null()).then(pl.lit(_SOURCE["content"]))
        .cast(pl.UInt8)
        .alias("_source"),
        pl.coalesce(pl.col("pfx_rank"), path_rank, pl.col("_content_rank"), pl.col("_file_rank")).alias("rank"),
    )
    # A trainer log that names no rank at all is the main process's (HF/ms-swift/hydra write
    # their log and logging.jsonl from local rank 0 only); say so with rank_source "inferred".
    ranked = pl.col("rank").is_not_null() | pl.col("local_rank").is_not_null()
    ranked_files = frame.lazy().filter(ranked).select(pl.col("_fid").unique()).collect().to_series()
    rankless = ~pl.col("_fid").is_in(ranked_files.implode())
    # Likewise progress printed once per step by a process nobody names comes from the main
    # process (HF/ms-swift/DeepSpeed print progress on rank 0 only); when every rank prints its
    # own unprefixed progress, each step repeats and nothing is attributed.
    unranked_progress = pl.col("rank").is_null() & pl.col("local_rank").is_null() & pl.col("step").is_not_null()
    repeats = (
        frame.lazy().filter(unranked_progress)
        .select("_fid", pl.len().over("_fid", "step", pl.col("message").str.slice(0, 24)).alias("_n"))
        .group_by("_fid")
        .agg(pl.col("_n").median().alias("_repeats"))
        .collect()
    )
    main_process = unranked_progress & (by_file.gather(repeats, "_repeats", pl.Float64) <= 1)
    frame = frame.with_columns(
        pl.when((by_file.of_families("trainer_log") & rankless) | main_process)
        .then(pl.lit(0, pl.Int64))
        .otherwise(pl.col("local_rank"))
        .alias("local_rank")
    )
    # local rank + node rank + processes per node -> global rank, where the layout says enough
    inferred = pl.col("node_rank") * pl.col("_nproc") + pl.col("local_rank")
    frame = frame.with_columns(
        pl.when(pl.col("rank").is_null() & inferred.is_not_null()).then(pl.lit(_SOURCE["inferred"], pl.UInt8))
        .otherwise(pl.col("_source")).alias("_source"),
        pl.coalesce(pl.col("rank"), inferred).alias("rank"),
    )
    frame = _ranks_from_pids(frame, by_file)
    names = pl.Series([None, *RANK_SOURCES], dtype=pl.String)
    return frame.with_columns(pl.lit(names).gather(pl.col("_source")).alias("rank_source"))


# rank_source while ranks are worked out: a small code, named once at the end
_SOURCE: dict[str, int] = {name: code for code, name in enumerate(RANK_SOURCES, start=1)}


def _nodes(frame: pl.DataFrame, by_file: _FileTable) -> pl.DataFrame:
    """Node name, node rank and processes per node (all of them facts of a file's node)."""
    # a file's node: its path, else the host its agent/NCCL lines name most often
    hosts = (
        frame.lazy().filter(by_file.fact("path_node").is_null())
        .with_columns(pl.coalesce("_cfe_host", "host").alias("_h"))
        .filter(pl.col("_h").is_not_null())
        .group_by("_fid")
        .agg(pl.col("_h").mode().sort().first().alias("_file_host"))
        .collect()
    )
    # what each file tells of its node; files without rows in the timeline are left out
    files = (
        frame.lazy()
        .group_by("_fid")
        .agg(
            pl.col("_arg_node_rank").drop_nulls().first().alias("_arg_rank"),
            pl.col("_arg_nproc").drop_nulls().first().alias("_arg_nproc"),
            pl.col("local_rank").max().alias("_max_local"),
            (pl.col("_cfe_rank") - pl.col("_cfe_lr")).drop_nulls().first().alias("_cfe_base"),
        )
        .sort("_fid")
        .collect()
    )
    files = files.with_columns(
        pl.coalesce(
            by_file.fact("path_node"),
            pl.col("_fid").replace_strict(hosts.get_column("_fid"), hosts.get_column("_file_host"), default=None, return_dtype=pl.String),
        ).alias("node"),
        by_file.fact("path_node_rank").alias("_pod_rank"),
    )
    nodes = files.select(pl.col("node").drop_nulls().unique()).to_series().to_list()
    if len(nodes) == 1:
        files = files.with_columns(pl.col("node").fill_null(nodes[0]))
    # node rank: pod index, --node_rank printed by the node's launcher, the ChildFailedError ranks
    # (in file order, so "first" is the first line that says it)
    node_facts = files.group_by("node", maintain_order=True).agg(
        pl.col("_pod_rank").drop_nulls().first(),
        pl.col("_arg_rank").drop_nulls().first(),
        pl.col("_arg_nproc").drop_nulls().first(),
        (pl.col("_max_local").max() + 1).alias("_seen_nproc"),
        pl.col("_cfe_base").drop_nulls().first(),
    )
    node_facts = node_facts.with_columns(pl.coalesce("_arg_nproc", "_seen_nproc").alias("_nproc"))
    nproc = node_facts.select(pl.col("_nproc").max()).item() if node_facts.height else None
    named = node_facts.filter(pl.col("node").is_not_null()).sort("node")
    # sorted host names are only a guess at node order; used last
    order = {name: (i if named.height > 1 else 0) for i, name in enumerate(named["node"].to_list())}
    node_facts = node_facts.with_columns(
        pl.coalesce(
            pl.col("_pod_rank"),
            pl.col("_arg_rank"),
            (pl.col("_cfe_base") // pl.lit(nproc)) if nproc else pl.lit(None, pl.Int64),
            pl.col("node").replace_strict(order, default=None, return_dtype=pl.Int64),
            pl.when(pl.lit(len(nodes) <= 1)).then(pl.lit(0, pl.Int64)),
        ).alias("node_rank"),
    ).select("node", "node_rank")
    files = files.join(node_facts, on="node", how="left", nulls_equal=True)
    return frame.with_columns(
        by_file.gather(files, "node", pl.String),
        by_file.gather(files, "node_rank", pl.Int64),
        pl.lit(nproc, dtype=pl.Int64).alias("_nproc"),
    )


def _ranks_from_pids(frame: pl.DataFrame, by_file: _FileTable) -> pl.DataFrame:
    """Rows that know only their process id (py-spy dumps, plogs) take the rank of that pid."""
    known = (
        frame.lazy().filter(
            pl.col("pid").is_not_null() & pl.col("rank").is_not_null() & (pl.col("_source") != _SOURCE["inferred"])
        )
        .group_by("pid")
        .agg(pl.col("rank").n_unique().alias("_n"), pl.col("rank").first().alias("_pid_rank"))
        .filter(pl.col("_n") == 1)
        .collect()
    )
    # a whole file speaks for one process when it names exactly one pid (py-spy dump of one rank)
    file_pid = (
        frame.lazy().filter(pl.col("pid").is_not_null())
        .group_by("_fid")
        .agg(pl.col("pid").n_unique().alias("_n"), pl.col("pid").first().alias("_file_pid"))
        .filter(pl.col("_n") == 1)
        .collect()
    )
    # (only the rows without a rank look theirs up)
    unranked = pl.col("rank").is_null()
    any_pid = pl.when(unranked).then(
        pl.coalesce(pl.col("pid"), by_file.gather(file_pid, "_file_pid", pl.Int64), by_file.fact("path_pid"))
    )
    frame = frame.with_columns(_lookup("pid", known, "_pid_rank", pl.Int64, key_expr=any_pid))
    by_pid = unranked & pl.col("_pid_rank").is_not_null()
    return frame.with_columns(
        pl.when(by_pid).then(pl.lit(_SOURCE["inferred"], pl.UInt8)).otherwise(pl.col("_source")).alias("_source"),
        pl.coalesce("rank", "_pid_rank").alias("rank"),
    )


def _lookup(key: str, table: pl.DataFrame, value: str, dtype: pl.DataType, *, key_expr: pl.Expr | None = None) -> pl.Expr:
    """``table``'s ``value`` for each row's ``key`` (null where absent), named ``value``.

    The tables are small (one row per file, node or pid); mapping through them adds one column
    instead of copying every column of the frame the way a join would.
    """
    mapping = dict(zip(table.get_column(key).to_list(), table.get_column(value).to_list(), strict=True))
    return (pl.col(key) if key_expr is None else key_expr).replace_strict(mapping, default=None, return_dtype=dtype).alias(value)
