"""PyTorch Flight Recorder dumps (pickle or JSON) as timeline rows.

A dump is one rank's ring buffer of collectives: ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` writes it to
``$TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`` (``TORCH_FR_DUMP_TEMP_FILE`` in newer releases), and
``torch._C._distributed_c10d._dump_fr_trace()`` / ``_dump_fr_trace_json()`` return it.

Pickles are untrusted input. :func:`load_dump` unpickles with an unpickler whose
``find_class`` refuses every global, so no class can be built and no function called:
only dicts, lists, tuples, sets, strings, bytes, numbers, booleans and None come out. A pickle
that asks for anything else (``os.system``, a class, a persistent id) is rejected with a
reason before any of it is used. The loaded object is then walked with a budget, so a
pickle that expands into far more objects than its size (shared references) is rejected too.

Rows (kind ``collective``, family ``flight_recorder``), one per entry, in dump order:

* ``line``: the entry's 1-based position in the dump; per process-group summary rows follow
  the entries (kind ``info``).
* ``ts``: ``time_created_ns`` (epoch, shown in UTC: the dump carries no time zone).
* rank: the timeline reads it from the path (``rank3``, ``nccl_trace_rank_3``); the rows also
  carry ``_line_rank``, the dump's own ``rank`` key or else the digits the file name ends with
  (torchfrtrace's convention, ``fr_dump_3``), used when the path says nothing.
* ``pg``: ``<name>:<desc>`` (``<pg_id>`` when the name is empty, as gloo dumps of torch 2.13
  write it), ``seq``: ``collective_seq_id`` (``p2p_seq_id`` for send/recv),
  ``op_type``: the profiling name (``nccl:all_reduce``, ``gloo:broadcast``, ``nccl:send 1->2``),
  ``numel``: elements of all input tensors, ``ran_ms``: discovered started -> completed.
* ``frame``: the call site, the innermost Python frame outside ``torch/``; ``frame_depth``
  its position in the stack (0 = innermost).
* ``thread``: ``<thread_name> <thread_id>`` (the ``thread_id`` is the one ``py-spy dump
  --json`` prints).
* ``message``: the entry as ``key=value`` tokens (the format :data:`FIELD_PATTERNS` reads back)
  and, for the last entries of each group and every entry still pending, the whole stack::

      gloo:all_reduce seq=92 pg=0:default_pg in=[[49728]] in_dtypes=Float out=[[49728]]
      out_dtypes=Float state=scheduled retired=no p2p=no record=91 [started=+3ms completed=+40ms]
      at allreduce_gradients (/workspace/job/text_trainer.py:92) | stack: all_reduce (...) < ...
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Iterable
from datetime import timedelta
from pathlib import PurePosixPath
from typing import Any

import polars as pl

#: Entries of each process group, counted from the end of the dump, whose full stack goes
#: into the message (plus every entry not retired); the others keep only their call site,
#: so a 2000-entry buffer of a large job does not fill memory with repeated stacks.
STACK_TAIL = 16
#: Objects a dump may unpack into, per byte of its size (plus a floor): a real dump is a tree
#: about as large as its bytes; a pickle that shares references can expand far beyond that.
OBJECTS_PER_BYTE = 4
OBJECTS_FLOOR = 1_000_000
#: Deepest nesting a dump has (dict > entries > entry > frames > frame > value is 6).
MAX_DEPTH = 32

#: How :func:`entry_fields` reads the fields back out of an entry row's message.
FIELD_PATTERNS: dict[str, str] = {
    "in_sizes": r" in=(\S+)",
    "in_dtypes": r" in_dtypes=(\S+)",
    "out_sizes": r" out=(\S+)",
    "out_dtypes": r" out_dtypes=(\S+)",
    "state": r" state=(\S+)",
    "retired": r" retired=(yes|no|\?)",
    "p2p": r" p2p=(yes|no)",
    "record_id": r" record=(-?\d+)",
    "stack": r" \| stack: (.*)$",
}
#: A process-group summary row's fields.
PG_PATTERNS: dict[str, str] = {
    "pg_ranks": r" ranks=(\[[\d,]*\]|\?)",
    "pg_last_enqueued": r" last_enqueued=(-?\d+)",
    "pg_last_completed": r" last_completed=(-?\d+)",
    "dump_first_record": r" first_record=(-?\d+)",
    "dump_version": r" version=(\S+)",
}
PG_ROW_PREFIX = "flight recorder process group"

_TORCH_FRAME = re.compile(r"^torch/|/torch/|c10d_logger")
_LIB_PREFIX = re.compile(r"^.*?/(?:site|dist)-packages/")
_NAME_RANK = re.compile(r"(\d+)$")
_NAME_SUFFIX = re.compile(r"(?:\.(?:gz|zst|bz2|xz))?$")
_DUMP_SUFFIX = re.compile(r"\.(?:pkl|pickle|json|bin|dump|trace|txt|log|out)$", re.IGNORECASE)


class RejectedDump(ValueError):
    """The file is not a usable flight-recorder dump; ``str(exc)`` says why (a skipped-file reason)."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle opcodes build on their own: containers and scalars."""

    def find_class(self, module: str, name: str) -> Any:
        raise RejectedDump(
            f"unsafe pickle: it asks for {module}.{name}; only plain containers and scalars are loaded "
            "from a flight-recorder dump, so it was not loaded"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise RejectedDump("unsafe pickle: it uses persistent ids; only plain containers and scalars are loaded")


def load_dump(data: bytes) -> dict[str, Any]:
    """The dump in ``data`` (pickle or JSON) as plain Python data; raises :class:`RejectedDump`.

    Never executes anything from the data: see the module docstring.
    """
    head = data[:64].lstrip()
    if head[:1] == b"{":
        try:
            dump = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise RejectedDump(f"not a valid flight-recorder JSON dump: {type(exc).__name__}: {_first_line(exc)}") from None
    elif data[:1] == b"\x80":
        try:
            dump = _PlainUnpickler(io.BytesIO(data)).load()
        except RejectedDump:
            raise
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
                OverflowError, MemoryError, RecursionError, UnicodeDecodeError) as exc:
            raise RejectedDump(f"unreadable pickle: {type(exc).__name__}: {_first_line(exc)}") from None
    else:
        raise RejectedDump("not a flight-recorder dump (neither a pickle nor JSON)")
    _check_plain(dump, max(OBJECTS_FLOOR, OBJECTS_PER_BYTE * len(data)))
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise RejectedDump("not a flight-recorder dump: no 'entries' list at the top level")
    return dump


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:200]


_SCALARS = frozenset({str, bytes, bytearray, int, float, bool, type(None)})
_CONTAINERS = frozenset({dict, list, tuple, set, frozenset})


def _check_plain(root: Any, budget: int) -> None:
    """Reject anything but plain data, nesting deeper than :data:`MAX_DEPTH`, or more than ``budget`` objects.

    Exact types, not ``isinstance``: without ``find_class`` no subclass can exist, and if one
    ever did, it would be rejected rather than trusted.
    """
    level: list[Any] = [root]
    seen = 0
    for depth in range(MAX_DEPTH + 1):
        if not level:
            return
        if depth == MAX_DEPTH:
            raise RejectedDump(f"not a flight-recorder dump: nested deeper than {MAX_DEPTH} levels")
        below: list[Any] = []
        for value in level:
            kind = type(value)
            if kind is dict:
                children: Any = (*value.keys(), *value.values())
            elif kind in _CONTAINERS:
                children = value
            elif kind in _SCALARS:
                continue
            else:  # cannot happen without find_class; kept so the guarantee does not rest on one place
                raise RejectedDump(f"unsafe pickle: it holds a {kind.__name__}")
            seen += len(children)
            if seen > budget:
                raise RejectedDump("unsafe pickle: it expands into far more objects than its size (shared references)")
            below.extend(c for c in children if type(c) not in _SCALARS)
        level = below


def parse_flight_recorder(data: bytes, name: str = "") -> pl.DataFrame:
    """Timeline rows for one dump (see the module docstring); raises :class:`RejectedDump`.

    ``name`` is the file's path: when the path does not say the rank (``rank3``), the digits at
    the end of the file name do, as ``torchfrtrace`` reads them (``nccl_trace_3``).
    """
    dump = load_dump(data)
    entries = [e for e in dump["entries"] if isinstance(e, dict)]
    version = _text(dump.get("version")) or "?"
    own_rank = _int(dump.get("rank"))
    file_rank = own_rank if own_rank is not None else _name_rank(name)
    pg_cache: dict[Any, str] = {}
    pgs = [_pg_cached(e, pg_cache) for e in entries]
    tail = _stack_tail(entries, pgs)
    columns = ("line", "message", "pg", "seq", "op_type", "numel", "ran_ms", "frame", "frame_depth", "thread", "_created_ns")
    rows: dict[str, list[Any]] = {k: [] for k in columns}
    stacks: dict[Any, tuple[int | None, str | None, str]] = {}
    threads: dict[Any, str | None] = {}
    for index, (entry, pg) in enumerate(zip(entries, pgs, strict=True)):
        get = entry.get
        op = _text(get("profiling_name")) or "?"
        p2p = bool(get("is_p2p")) or ":send" in op or ":recv" in op
        seq = _int(get("p2p_seq_id") if p2p else get("collective_seq_id"))
        depth, site, stack = _stack_cached(get("frames"), stacks)
        retired = get("retired")
        in_text, numel = _shapes(get("input_sizes"))
        message = (
            f"{op} seq={_num(seq)} pg={pg} in={in_text} in_dtypes={_dtypes(get('input_dtypes'))} "
            f"out={_shapes(get('output_sizes'))[0]} out_dtypes={_dtypes(get('output_dtypes'))} "
            f"state={_text(get('state')) or '?'} retired={'yes' if retired is True else 'no' if retired is False else '?'} "
            f"p2p={'yes' if p2p else 'no'} record={_num(_int(get('record_id')))}"
        )
        started = _int(get("time_discovered_started_ns")) or None
        completed = _int(get("time_discovered_completed_ns")) or None
        created = _int(get("time_created_ns")) or None
        if created and started:
            message += f" started=+{(started - created) // 1_000_000}ms"
        if created and completed:
            message += f" completed=+{(completed - created) // 1_000_000}ms"
        if site:
            message += f" at {site}"
        if stack and (retired is not True or index in tail):
            message += " | stack: " + stack
        key = (get("thread_name"), get("thread_id"))
        if key not in threads:
            threads[key] = " ".join(t for t in (_text(key[0]), _text(key[1])) if t) or None
        rows["line"].append(index + 1)
        rows["message"].append(message)
        rows["pg"].append(pg)
        rows["seq"].append(seq)
        rows["op_type"].append(op)
        rows["numel"].append(numel)
        rows["ran_ms"].append((completed - started) // 1_000_000 if started and completed and completed >= started else None)
        rows["frame"].append(site)
        rows["frame_depth"].append(depth)
        rows["thread"].append(threads[key])
        rows["_created_ns"].append(created)
    n_entries = len(entries)
    for n, text in enumerate(_pg_rows(dump, entries, pgs, version), start=n_entries + 1):
        row = dict.fromkeys(columns)
        row.update(line=n, message=text, pg=_pg_of_row(text))
        for key, value in row.items():
            rows[key].append(value)
    frame = pl.DataFrame(
        rows,
        schema={
            "line": pl.Int64, "message": pl.String, "pg": pl.String, "seq": pl.Int64, "op_type": pl.String,
            "numel": pl.Int64, "ran_ms": pl.Int64, "frame": pl.String, "frame_depth": pl.Int64, "thread": pl.String,
            "_created_ns": pl.Int64,
        },
    )
    return frame.with_columns(
        pl.when(pl.col("line") <= n_entries).then(pl.lit("collective")).otherwise(pl.lit("info")).alias("kind"),
        pl.lit("INFO").alias("level"),
        pl.from_epoch(pl.col("_created_ns"), time_unit="ns").cast(pl.Datetime("us")).alias("ts"),
        pl.lit(file_rank, dtype=pl.Int64).alias("_line_rank"),
    ).drop("_created_ns")


def entry_fields(frame: pl.DataFrame) -> pl.DataFrame:
    """Add the fields of flight-recorder entry rows (:data:`FIELD_PATTERNS`) as columns.

    ``retired`` and ``p2p`` become booleans, ``record_id`` an integer; the others stay text.
    """
    msg = pl.col("message")
    return frame.with_columns(
        *(msg.str.extract(p, 1).alias(k) for k, p in FIELD_PATTERNS.items() if k not in ("retired", "p2p", "record_id")),
        msg.str.extract(FIELD_PATTERNS["retired"], 1).replace_strict({"yes": True, "no": False}, default=None,
                                                                     return_dtype=pl.Boolean).alias("retired"),
        (msg.str.extract(FIELD_PATTERNS["p2p"], 1) == "yes").alias("p2p"),
        msg.str.extract(FIELD_PATTERNS["record_id"], 1).cast(pl.Int64, strict=False).alias("record_id"),
    )


def pg_fields(frame: pl.DataFrame) -> pl.DataFrame:
    """Add the fields of process-group summary rows (:data:`PG_PATTERNS`) as columns."""
    msg = pl.col("message")
    return frame.with_columns(
        msg.str.extract(PG_PATTERNS["pg_ranks"], 1).alias("pg_ranks"),
        *(msg.str.extract(PG_PATTERNS[k], 1).cast(pl.Int64, strict=False).alias(k)
          for k in ("pg_last_enqueued", "pg_last_completed", "dump_first_record")),
        msg.str.extract(PG_PATTERNS["dump_version"], 1).alias("dump_version"),
    )


# --- entry fields ----------------------------------------------------------------------------


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value.strip()):
        return int(value)
    return None


def _num(value: int | None) -> str:
    return "?" if value is None else str(value)


def _text(value: Any) -> str:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return str(value)[:200]
    return ""


def _shapes(value: Any) -> tuple[str, int | None]:
    """(``[[49728],[3,4]]``, total elements): tensor shapes as one token, ``?`` when malformed."""
    if type(value) not in (list, tuple) or len(value) > 4096:
        return "?", None
    parts = []
    total = 0
    for shape in value:
        if type(shape) not in (list, tuple) or len(shape) > 64 or any(type(d) is not int for d in shape):
            return "?", None
        parts.append("[" + ",".join(map(str, shape)) + "]")
        n = 1
        for d in shape:
            n *= d
        total += n
    return "[" + ",".join(parts) + "]", total if 0 <= total < 2**63 else None


def _dtypes(value: Any) -> str:
    if not isinstance(value, (list, tuple)):
        return "?"
    names = [re.sub(r"[^\w.]", "", _text(v)) or "?" for v in value[:4096]]
    return ",".join(names) if names else "-"


def _pg_cached(entry: dict[str, Any], cache: dict[Any, str]) -> str:
    group = entry.get("process_group")
    key = (tuple(group) if type(group) in (list, tuple) and all(type(g) is str for g in group) else id(group),
           entry.get("pg_id") if type(entry.get("pg_id")) in (int, str) else None)
    if key not in cache:
        cache[key] = _pg_text(entry)
    return cache[key]


def _pg_text(entry: dict[str, Any]) -> str:
    group = entry.get("process_group")
    name, desc = "", ""
    if isinstance(group, (list, tuple)) and group:
        name = _text(group[0])
        desc = _text(group[1]) if len(group) > 1 else ""
    if not name:
        pg_id = _int(entry.get("pg_id"))
        name = str(pg_id) if pg_id is not None else "?"
    return _token(f"{name}:{desc}" if desc and desc != "undefined" else name)


def _token(text: str) -> str:
    """``text`` as one message token (no whitespace)."""
    return re.sub(r"\s+", "_", text)


def _frame_text(frame: dict[str, Any]) -> str:
    path = _LIB_PREFIX.sub("", _text(frame.get("filename")) or "?")
    line = _int(frame.get("line"))
    return f"{_text(frame.get('name')) or '?'} ({path}{f':{line}' if line is not None else ''})"


def _stack_cached(frames: Any, cache: dict[Any, tuple[int | None, str | None, str]]) -> tuple[int | None, str | None, str]:
    """(call-site depth, call-site text, whole stack text) of an entry's frames, computed once per distinct stack."""
    if type(frames) not in (list, tuple) or not frames:
        return None, None, ""
    frames = [f for f in frames[:256] if type(f) is dict]
    key = tuple((f.get("name"), f.get("filename"), f.get("line")) for f in frames)
    try:
        hit = cache.get(key)
    except TypeError:  # unhashable values where strings belong: format without caching
        hit, key = None, None
    if hit is None:
        depth, site = _call_site(frames)
        hit = (depth, site, " < ".join(_frame_text(f) for f in frames))
        if key is not None:
            cache[key] = hit
    return hit


def _call_site(frames: list[dict[str, Any]]) -> tuple[int | None, str | None]:
    """(depth, text) of the innermost frame outside torch: where the program asked for the collective."""
    if not frames:
        return None, None
    for depth, frame in enumerate(frames):
        path = _LIB_PREFIX.sub("", _text(frame.get("filename")))
        if not _TORCH_FRAME.search(path):
            return depth, _frame_text(frame)
    return 0, _frame_text(frames[0])


def _stack_tail(entries: list[dict[str, Any]], pgs: list[str]) -> set[int]:
    """Indexes of the last :data:`STACK_TAIL` entries of each process group."""
    out: set[int] = set()
    counts: dict[str, int] = {}
    for index in range(len(entries) - 1, -1, -1):
        n = counts.get(pgs[index], 0)
        if n < STACK_TAIL:
            out.add(index)
            counts[pgs[index]] = n + 1
    return out


def _name_rank(name: str) -> int | None:
    """The rank in a dump's file name by torchfrtrace's convention: the digits it ends with."""
    base = PurePosixPath(name).name
    base = _DUMP_SUFFIX.sub("", _NAME_SUFFIX.sub("", base))
    m = _NAME_RANK.search(base)
    return int(m.group(1)) if m and len(m.group(1)) <= 7 else None


# --- process groups --------------------------------------------------------------------------


def _pg_rows(dump: dict[str, Any], entries: list[dict[str, Any]], pgs: list[str], version: str) -> Iterable[str]:
    """One summary row per process group: members (``pg_config``), status (``pg_status``), buffer start."""
    config = dump.get("pg_config") if isinstance(dump.get("pg_config"), dict) else {}
    status = dump.get("pg_status") if isinstance(dump.get("pg_status"), dict) else {}
    records = [r for r in (_int(e.get("record_id")) for e in entries) if r is not None]
    first_record = min(records) if records else None
    names: dict[str, tuple[str, int | None]] = {}
    for entry, pg in zip(entries, pgs, strict=True):
        group = entry.get("process_group")
        raw = _text(group[0]) if isinstance(group, (list, tuple)) and group else ""
        names.setdefault(pg, (raw, _int(entry.get("pg_id"))))
    configs = {_text(k): v for k, v in config.items() if isinstance(v, dict)}
    for pg, (raw, pg_id) in sorted(names.items()):
        conf = configs.get(raw)
        if conf is None and len(configs) == 1 and (len(names) == 1 or pg.endswith(":default_pg")):
            # gloo dumps of torch 2.13 key their only pg_config by an empty name while the
            # entries say "0": with one group on each side they are the same group
            conf = next(iter(configs.values()))
        ranks = _ranks(conf.get("ranks")) if conf else None
        st = status.get(str(pg_id)) if pg_id is not None else None
        st = st if isinstance(st, dict) else {}
        parts = [
            f"{PG_ROW_PREFIX} pg={pg} ranks={'[' + ','.join(map(str, ranks)) + ']' if ranks else '?'}",
            *(f"{k}={_int(st.get(f'{k}_collective'))}" for k in ("last_enqueued", "last_started", "last_completed")
              if _int(st.get(f"{k}_collective")) is not None),
            f"first_record={_num(first_record)}",
            f"version={_token(version)}",
        ]
        yield " ".join(parts)


def _pg_of_row(text: str) -> str | None:
    m = re.search(r" pg=(\S+)", text)
    return m.group(1) if m else None


def _ranks(value: Any) -> list[int] | None:
    """``'[0, 1, 2]'`` (how dumps write it) or a list, as ints; None when empty or malformed."""
    if isinstance(value, str):
        if len(value) > 10_000_000 or not re.fullmatch(r"\s*\[[\d,\s]*\]\s*", value):
            return None
        out = [int(v) for v in re.findall(r"\d+", value)]
    elif isinstance(value, (list, tuple)):
        out = [v for v in (_int(v) for v in value) if v is not None]
    else:
        return None
    return sorted(set(out)) or None


# --- clocks ----------------------------------------------------------------------------------

#: Time-zone offsets come in quarter hours; smaller differences are left alone (they are the
#: gap between a rank's last log line and its last collective, not a clock).
_QUARTER_S = 900
_MIN_SHIFT_S = 45 * 60
_MAX_SHIFT_S = 14 * 3600


def align_trace_clock(frame: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """Move flight-recorder times (UTC) onto the logs' clock (each node's local time) when they disagree.

    Runs on a finished timeline. When the dumps' times already fall inside the logs' time span,
    nothing changes. Otherwise the offset is the median over ranks of (the rank's last log time
    - its last collective's time), rounded to a quarter hour, and applied only when it is a
    plausible time-zone offset (45 min to 14 h) that puts the dumps inside the logs' span.
    Returns the frame and a note saying what was done (None when nothing was).
    """
    if "family" not in frame.columns or frame.is_empty():
        return frame, None
    is_fr = pl.col("family") == "flight_recorder"
    fr = frame.filter(is_fr & (pl.col("kind") == "collective") & pl.col("ts").is_not_null())
    logs = frame.filter(~is_fr & pl.col("ts").is_not_null() & ~pl.col("ts_inferred").fill_null(False))
    if fr.is_empty() or logs.is_empty():
        return frame, None
    slack = 300
    fmin, fmax = fr.get_column("ts").min(), fr.get_column("ts").max()
    lmin, lmax = logs.get_column("ts").min(), logs.get_column("ts").max()
    if (lmin - fmin).total_seconds() <= slack and (fmax - lmax).total_seconds() <= slack:
        return frame, None
    last_fr = fr.group_by("rank").agg(pl.col("ts").max().alias("fr"))
    last_log = logs.filter(pl.col("rank").is_not_null()).group_by("rank").agg(pl.col("ts").max().alias("log"))
    both = last_fr.join(last_log, on="rank", how="inner")
    if both.is_empty():
        return frame, "flight-recorder times (UTC) fall outside the logs' time span; no rank has both to align them"
    gap = both.select(((pl.col("log") - pl.col("fr")).dt.total_milliseconds() / 1000).median()).item()
    shift = round(gap / _QUARTER_S) * _QUARTER_S
    inside = (lmin - fmin).total_seconds() - shift <= _QUARTER_S and (fmax - lmax).total_seconds() + shift <= _QUARTER_S
    if not (_MIN_SHIFT_S <= abs(shift) <= _MAX_SHIFT_S) or not inside:
        return frame, "flight-recorder times (UTC) fall outside the logs' time span and were left as they are"
    moved = frame.with_columns(
        pl.when(is_fr).then(pl.col("ts") + timedelta(seconds=shift)).otherwise(pl.col("ts")).alias("ts")
    )
    sign = "+" if shift >= 0 else "-"
    hours, rest = divmod(abs(shift), 3600)
    return moved, f"flight-recorder times moved from UTC to the logs' clock ({sign}{hours:02d}:{rest // 60:02d})"
