"""Traces beside logs: flight-recorder dumps matched across ranks, py-spy stacks by rank membership.

## What it means
Every flight-recorder entry row of the timeline (see :mod:`postmortem.parsers.flight_recorder`)
is one collective as one rank enqueued it. Per process group, sequence ids count the same
collectives on every member, so matching is by (process group, ``collective_seq_id``), in the
words ``torchfrtrace`` uses:

* **Not all ranks joining collective N** (``fr-missing-ranks``): a member's last entry is
  before N while others reached N. The *missing ranks* are those that stopped lowest; the
  others wait for them. Ranks that are missing somewhere and wait nowhere themselves are the
  culprits (a rank stuck in a TP collective is missing from the DP one, but it is waiting).
* **Collective type / size / dtype / state mismatch** (``fr-type-mismatch``,
  ``fr-size-mismatch``, ``fr-dtype-mismatch``, ``fr-state-mismatch``): the members' entries for
  N differ. The majority's entry is the expected one and the ranks that differ are named, as
  ``torchfrtrace`` names "Culprit rank"; with no majority, no rank is named. Sizes follow
  torchfrtrace's exceptions (all_to_all, scatter and gather may differ per rank). At most
  :data:`MISMATCH_CAP` mismatched collectives are reported per group; the rest are counted.
* Ring buffers are aligned per group: each rank's buffer may have wrapped at a different point
  (other groups filled it), so sequences are compared only from the highest first sequence id
  any rank still holds; a member whose buffer holds nothing of the group cannot be placed.
* Members without a dump are listed (``fr-missing-dumps``): when every dumped rank waits in the
  same collective, the ranks without a dump are the suspects.

The ``wavefront`` fact is, per process group, the last sequence id each rank reached, the
collective it was in, whether it was still waiting in it, and the missing ranks.

The verdict (:mod:`postmortem.verdict`) weighs the dumps' culprits against the logs': when the
logs name none, the dumps' culprits become the verdict's; when they disagree, a finding says so.

## What a match does not prove
A dump is a snapshot, taken when each rank dumped: a rank that dumped earlier than the others
looks behind. Gloo never marks entries started or completed (only retired), so gloo dumps show
no state mismatch. Point-to-point entries are listed, not matched.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.analyzers.stack_groups import normalize_frame, waits_in
from postmortem.model import Evidence, Finding
from postmortem.parsers.flight_recorder import PG_ROW_PREFIX, entry_fields, pg_fields
from postmortem.ranges import format_ranks, plural_ranks

ID = "flight-recorder"
TITLE = "Flight-recorder dumps matched across ranks"
NEEDS: tuple[str, ...] = ()

#: Mismatched collectives reported per process group (torchfrtrace's ``--mismatch-cap``).
MISMATCH_CAP = 10
#: Per-rank cells of the wavefront view are listed up to this group size; larger groups only by range.
PER_RANK_LIMIT = 256
_KIND_ERROR = {
    "type": "COLLECTIVE_TYPE_MISMATCH",
    "size": "SIZE_OR_SYNTAX_MISMATCH",
    "dtype": "COLLECTIVE_DTYPE_MISMATCH",
    "state": "COLLECTIVE_STATE_MISMATCH",
}
_KIND_TITLE = {"type": "collective type", "size": "size", "dtype": "dtype", "state": "state"}
REFERENCES = [
    "https://pytorch.org/docs/stable/torch.distributed.flight_recorder.html",
    "https://github.com/pytorch/pytorch/tree/main/torch/distributed/flight_recorder",
]


# --- reading the dump rows back ------------------------------------------------------------


def fr_rows(timeline: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, dict[int, str]]:
    """(entry rows, process-group rows, chosen file per rank) of the job's flight-recorder dumps.

    A rank with several dumps (the pickle and the JSON of one dump, or dumps taken at
    different times) is read from one: the one that reaches furthest (highest record id), then
    the one with more entries, then the one with Python frames (pickles have them, JSON not).
    """
    rows = timeline.filter((pl.col("family") == "flight_recorder") & pl.col("rank").is_not_null())
    if rows.is_empty():
        return rows, rows, {}
    entries = entry_fields(rows.filter(pl.col("kind") == "collective"))
    choice = (
        entries.group_by("rank", "file")
        .agg(
            pl.col("record_id").max().fill_null(-1).alias("_last"),
            pl.len().alias("_n"),
            pl.col("frame").is_not_null().sum().alias("_frames"),
        )
        .sort(["rank", "_last", "_n", "_frames", "file"], descending=[False, True, True, True, False])
        .unique(subset=["rank"], keep="first", maintain_order=True)
    )
    # a dump with no entries at all still says the rank dumped
    empty = (
        rows.select("rank", "file").unique().join(choice.select("rank"), on="rank", how="anti")
        .sort("rank", "file").unique(subset=["rank"], keep="first", maintain_order=True)
    )
    chosen = {int(r): f for r, f in zip(choice["rank"], choice["file"], strict=True)}
    chosen.update({int(r): f for r, f in zip(empty["rank"], empty["file"], strict=True)})
    keys = pl.DataFrame({"rank": list(chosen), "file": list(chosen.values())}, schema={"rank": pl.Int64, "file": pl.String})
    entries = entries.join(keys, on=["rank", "file"], how="semi")
    groups = pg_fields(
        rows.filter((pl.col("kind") == "info") & pl.col("message").str.starts_with(PG_ROW_PREFIX))
        .join(keys, on=["rank", "file"], how="semi")
    )
    return entries, groups, chosen


# --- matching -------------------------------------------------------------------------------


@dataclasses.dataclass
class _Entry:
    rank: int
    seq: int
    op: str
    in_sizes: str
    out_sizes: str
    in_dtypes: str
    out_dtypes: str
    state: str
    retired: bool | None
    file: str
    line: int
    message: str
    frame: str | None
    stack: str | None
    ts: datetime | None

    @property
    def pending(self) -> bool:
        """Still in the collective: not retired (gloo and NCCL), or not completed when retirement is unknown."""
        if self.retired is not None:
            return not self.retired
        return self.state != "completed"

    @property
    def kind(self) -> str:
        """``all_reduce`` from ``nccl:all_reduce``; ``send`` from ``nccl:send 1->2``."""
        return self.op.split(":", 1)[-1].split(" ", 1)[0]


def match_traces(timeline: pl.DataFrame, world: list[int] | None = None, cap: int = MISMATCH_CAP) -> dict[str, Any]:
    """Match the flight-recorder entries of ``timeline`` across ranks (see the module docstring).

    ``world`` is the job's ranks, used as the members of the default process group when the
    dumps do not list them. Returns JSON-safe data: ``groups`` (per process group: members,
    per-rank last entry, incomplete collectives, mismatches), ``wavefront`` (the view of it the
    report shows), ``verdict`` (the ranks the dumps blame, and why) and ``dumps``.
    """
    entries, pg_rows, chosen = fr_rows(timeline)
    if not chosen:
        return {"groups": [], "wavefront": [], "verdict": _no_verdict(), "dumps": {}}
    dumped = sorted(chosen)
    coll = (
        entries.filter(~pl.col("p2p").fill_null(False) & pl.col("seq").is_not_null() & pl.col("pg").is_not_null())
        .sort("rank", "line")
        # a coalesced group shares one sequence id: keep its last entry (the one that closes it)
        .unique(subset=["pg", "rank", "seq"], keep="last", maintain_order=True)
        .with_columns(_size_signature().alias("_size"), (pl.col("in_dtypes") + "/" + pl.col("out_dtypes")).alias("_dtype"))
    )
    by_pg = {str(k[0]): _GroupEntries(part) for k, part in coll.partition_by("pg", as_dict=True).items()}
    members, wrapped_dump = _members(pg_rows, by_pg, dumped, world)
    p2p = entries.filter(pl.col("p2p").fill_null(False))
    groups = [
        _match_group(pg, by_pg.get(pg) or _GroupEntries(coll.clear()), members[pg], dumped, wrapped_dump, cap)
        for pg in sorted(members, key=_pg_order)
    ]
    unattributed = (
        timeline.filter((pl.col("family") == "flight_recorder") & pl.col("rank").is_null())
        .get_column("file").unique().sort().to_list()
    )
    dumps = {
        "ranks": dumped,
        "files": {str(r): chosen[r] for r in dumped},
        "unattributed": unattributed,  # dumps whose rank neither the path nor the file name tells
        "p2p_entries": p2p.height,
        "entries": coll.height,
    }
    return {
        "groups": [g["public"] for g in groups],
        "wavefront": [_wavefront(g["public"]) for g in groups],
        "verdict": _fr_verdict(groups),
        "dumps": dumps,
        "_internal": groups,
    }


def _size_signature() -> pl.Expr:
    """Sizes that must agree across ranks; torchfrtrace lets all_to_all and scatter inputs and
    all_to_all and gather outputs differ per rank."""
    kind = pl.col("op_type").str.replace(r"^[^:]*:", "").str.replace(r" .*$", "")
    ins = pl.when(kind.is_in(["all_to_all", "all_to_all_base", "scatter"])).then(pl.lit("")).otherwise(pl.col("in_sizes"))
    outs = pl.when(kind.is_in(["all_to_all", "all_to_all_base", "gather"])).then(pl.lit("")).otherwise(pl.col("out_sizes"))
    return ins.fill_null("?") + "/" + outs.fill_null("?")


class _GroupEntries:
    """One process group's collective entries (a polars frame), read a few at a time.

    The bulk work (first and last sequence ids per rank, which collectives differ) is
    vectorized; only the entries a finding cites become Python objects.
    """

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame
        stats = frame.group_by("rank").agg(pl.col("seq").min().alias("first"), pl.col("seq").max().alias("last"))
        self.first = {int(r): int(f) for r, f in zip(stats["rank"], stats["first"], strict=True)}
        self.last = {int(r): int(v) for r, v in zip(stats["rank"], stats["last"], strict=True)}

    def ranks(self) -> set[int]:
        return set(self.first)

    def entries(self, condition: pl.Expr) -> list[_Entry]:
        return [_entry(row) for row in self.frame.filter(condition).iter_rows(named=True)]

    def at(self, seq: int, ranks: list[int] | None = None) -> dict[int, _Entry]:
        cond = pl.col("seq") == seq
        if ranks is not None:
            cond = cond & pl.col("rank").is_in(ranks)
        return {e.rank: e for e in self.entries(cond)}

    def last_entries(self, ranks: list[int]) -> dict[int, _Entry]:
        keys = pl.DataFrame({"rank": ranks, "seq": [self.last[r] for r in ranks]}, schema={"rank": pl.Int64, "seq": pl.Int64})
        rows = self.frame.join(keys, on=["rank", "seq"], how="semi")
        return {e.rank: e for e in (_entry(row) for row in rows.iter_rows(named=True))}

    def before(self, rank: int, seq: int, n: int = 2) -> list[_Entry]:
        return self.entries((pl.col("rank") == rank) & (pl.col("seq") < seq) & (pl.col("seq") >= seq - n))

    def differing(self, window: int, frontier: int) -> pl.DataFrame:
        """Sequence ids in [window, frontier] whose entries differ across ranks, with the first field that differs."""
        per_seq = (
            self.frame.filter(pl.col("seq").is_between(window, frontier))
            .group_by("seq")
            .agg(
                pl.len().alias("n"),
                pl.col("op_type").n_unique().alias("type"),
                pl.col("_size").n_unique().alias("size"),
                pl.col("_dtype").n_unique().alias("dtype"),
                pl.col("state").n_unique().alias("state"),
            )
            .filter(pl.col("n") >= 2)
        )
        kind = (
            pl.when(pl.col("type") > 1).then(pl.lit("type"))
            .when(pl.col("size") > 1).then(pl.lit("size"))
            .when(pl.col("dtype") > 1).then(pl.lit("dtype"))
            .when(pl.col("state") > 1).then(pl.lit("state"))
        )
        return per_seq.with_columns(kind.alias("kind")).filter(pl.col("kind").is_not_null()).sort("seq").select("seq", "kind")


def _entry(row: dict[str, Any]) -> _Entry:
    return _Entry(
        rank=int(row["rank"]), seq=int(row["seq"]), op=row["op_type"] or "?", in_sizes=row["in_sizes"] or "?",
        out_sizes=row["out_sizes"] or "?", in_dtypes=row["in_dtypes"] or "?", out_dtypes=row["out_dtypes"] or "?",
        state=row["state"] or "?", retired=row["retired"], file=row["file"], line=int(row["line"]),
        message=row["message"] or "", frame=row["frame"], stack=row["stack"], ts=row["ts"],
    )


def _pg_order(pg: str) -> tuple[int, str]:
    head = pg.split(":", 1)[0]
    return (int(head) if head.isdigit() else 1 << 30, pg)


def _members(
    pg_rows: pl.DataFrame, by_pg: dict[str, _GroupEntries], dumped: list[int], world: list[int] | None
) -> tuple[dict[str, tuple[list[int], str]], set[int]]:
    """Each group's members and where they come from, and the ranks whose buffer wrapped."""
    listed: dict[str, set[int]] = {}
    wrapped: set[int] = set()
    for row in pg_rows.iter_rows(named=True):
        if row["dump_first_record"] is not None and row["dump_first_record"] > 0:
            wrapped.add(int(row["rank"]))
        text = row["pg_ranks"]
        if text and text != "?":
            listed.setdefault(row["pg"], set()).update(int(v) for v in text.strip("[]").split(",") if v)
    everyone = sorted(set(world or []) | set(dumped))
    pgs = set(by_pg) | {p for p in pg_rows.get_column("pg").drop_nulls().unique()}
    out: dict[str, tuple[list[int], str]] = {}
    for pg in pgs:
        if listed.get(pg):
            out[pg] = (sorted(listed[pg]), "pg_config")
        elif pg.endswith(":default_pg") or len(pgs) == 1:
            out[pg] = (everyone, "world")
        else:
            out[pg] = (sorted(by_pg[pg].ranks()) if pg in by_pg else [], "entries")
    return out, wrapped


def _match_group(
    pg: str,
    ge: _GroupEntries,
    members_src: tuple[list[int], str],
    dumped: list[int],
    wrapped_dump: set[int],
    cap: int,
) -> dict[str, Any]:
    members, source = members_src
    have = [r for r in members if r in ge.first]
    no_dump = [r for r in members if r not in dumped]
    # a dumped member with nothing of this group: it never ran one, or its buffer lost them
    unplaced = [r for r in members if r in dumped and r not in ge.first and r in wrapped_dump]
    never = [r for r in members if r in dumped and r not in ge.first and r not in wrapped_dump]
    last: dict[int, int] = {r: ge.last[r] for r in have}
    last.update({r: 0 for r in never})
    first = {r: ge.first[r] for r in have}
    window = max(first.values()) if first else None
    frontier = max(last.values()) if last else None
    last_entry = ge.last_entries(have) if have else {}
    waiting = sorted(r for r, e in last_entry.items() if e.pending)

    incomplete: list[dict[str, Any]] = []
    internal_incomplete: list[dict[str, Any]] = []
    if last and frontier is not None:
        levels = sorted({v for v in last.values() if v < frontier})
        for level in levels[:cap]:
            seq = level + 1
            missing = sorted(r for r, v in last.items() if v <= level)
            joined = sorted(r for r, v in last.items() if v >= seq)
            sample = _sample(ge.at(seq, joined[:64]))
            item = {
                "seq": seq,
                "op": sample.op if sample else None,
                "missing": missing,
                "joined": joined,
                "missing_last": {str(r): last[r] for r in missing},
                "stack": (sample.stack or sample.frame) if sample else None,
            }
            incomplete.append(item)
            internal_incomplete.append({**item, "sample": sample})

    mismatches, internal_mismatches, total = _mismatches(ge, [r for r in have], window, frontier, cap)
    frontier_ops = Counter(e.op for r, e in last_entry.items() if last.get(r) == frontier)
    public = {
        "pg": pg,
        "members": members,
        "members_from": source,
        "dumped": [r for r in members if r in dumped],
        "no_dump": no_dump,
        "unplaced": unplaced,
        "wrapped": sorted(r for r in have if r in wrapped_dump or first[r] > 1),
        "window_start": window,
        "frontier_seq": frontier,
        "frontier_op": frontier_ops.most_common(1)[0][0] if frontier_ops else None,
        "last_seq": {str(r): v for r, v in sorted(last.items())},
        "waiting": waiting,
        "ranks": [
            {
                "rank": r,
                "last_seq": last.get(r),
                "op": last_entry[r].op if r in last_entry else None,
                "state": _rank_state(r, last_entry, never, unplaced, no_dump),
                "call_site": last_entry[r].frame if r in last_entry else None,
                "file": last_entry[r].file if r in last_entry else None,
                "line": last_entry[r].line if r in last_entry else None,
            }
            for r in members
        ],
        "incomplete": incomplete,
        "mismatches": mismatches,
        "mismatches_total": total,
        "capped": total > len(mismatches),
    }
    return {
        "public": public,
        "entries": ge,
        "last_entry": last_entry,
        "incomplete": internal_incomplete,
        "mismatches": internal_mismatches,
    }


def _sample(found: dict[int, _Entry]) -> _Entry | None:
    """One rank's entry, preferring one with a Python stack."""
    ordered = [found[r] for r in sorted(found)]
    with_stack = [e for e in ordered if e.stack]
    return (with_stack or ordered or [None])[0]


def _rank_state(r: int, last_entry: dict[int, _Entry], never: list[int], unplaced: list[int], no_dump: list[int]) -> str:
    if r in no_dump:
        return "no dump"
    if r in unplaced:
        return "wrapped out"
    if r in never or r not in last_entry:
        return "no entries"
    return "waiting" if last_entry[r].pending else "done"


def _signature(e: _Entry, field: str) -> str:
    if field == "type":
        return e.op
    if field == "size":
        ins = "" if e.kind in ("all_to_all", "all_to_all_base", "scatter") else e.in_sizes
        outs = "" if e.kind in ("all_to_all", "all_to_all_base", "gather") else e.out_sizes
        return f"{ins}/{outs}"
    if field == "dtype":
        return f"{e.in_dtypes}/{e.out_dtypes}"
    return e.state


def _mismatches(
    ge: _GroupEntries, ranks: list[int], window: int | None, frontier: int | None, cap: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Collectives whose entries differ across ranks, from the aligned window start to the frontier.

    Only the first differing field of a collective is reported (type, then sizes, dtypes, state),
    as torchfrtrace does; at most ``cap`` collectives are detailed, all are counted.
    """
    if window is None or frontier is None or len(ranks) < 2:
        return [], [], 0
    differing = ge.differing(window, frontier)
    public: list[dict[str, Any]] = []
    internal: list[dict[str, Any]] = []
    for seq, kind in differing.head(cap).iter_rows():
        here = ge.at(seq)
        sigs = {r: _signature(e, kind) for r, e in here.items()}
        counts = Counter(sigs.values())
        (top, n), *rest = counts.most_common()
        majority = top if not rest or rest[0][1] < n else None
        sides = []
        for sig, _ in sorted(counts.items(), key=lambda kv: (-kv[1], min(r for r, s in sigs.items() if s == kv[0]))):
            side_ranks = sorted(r for r, s in sigs.items() if s == sig)
            e = here[side_ranks[0]]
            sides.append({
                "ranks": side_ranks, "op": e.op, "in_sizes": e.in_sizes, "out_sizes": e.out_sizes,
                "dtypes": f"{e.in_dtypes}/{e.out_dtypes}", "state": e.state, "call_site": e.frame,
                "majority": sig == majority,
            })
        culprits = sorted(r for r, s in sigs.items() if majority is not None and s != majority)
        item = {
            "seq": seq, "kind": kind, "error_type": _KIND_ERROR[kind], "culprits": culprits,
            "sides": sides, "op": here[min(here)].op,
        }
        public.append(item)
        internal.append({**item, "entries": here})
    return public, internal, differing.height


def _no_verdict() -> dict[str, Any]:
    return {"culprits": [], "basis": None, "pg": None, "seq": None, "op": None, "suspects": [], "text": ""}


def _fr_verdict(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks the dumps blame: missing ranks that wait nowhere, else the first mismatch's deviants,
    else (every dumped rank waiting) the ranks that left no dump, as suspects."""
    waiting_anywhere = {r for g in groups for r in g["public"]["waiting"]}
    firsts = [(g, g["incomplete"][0]) for g in groups if g["incomplete"]]
    if firsts:
        missing = sorted({r for _, inc in firsts for r in inc["missing"]})
        idle = [r for r in missing if r not in waiting_anywhere]
        culprits = idle or missing
        g, inc = next(((g, inc) for g, inc in firsts if set(inc["missing"]) & set(culprits)), firsts[0])
        pg = g["public"]["pg"]
        site = inc["sample"].frame if inc["sample"] is not None else None
        text = (f"{plural_ranks(culprits)} never joined collective {inc['seq']} ({inc['op'] or '?'} of process group "
                f"{pg}{f', called from {site}' if site else ''}) that {plural_ranks(inc['joined'])} entered")
        return {"culprits": culprits, "basis": "missing", "pg": pg, "seq": inc["seq"], "op": inc["op"],
                "suspects": [], "text": text}
    named = [(g, m) for g in groups for m in g["mismatches"] if m["culprits"] and m["kind"] != "state"]
    if not named:
        named = [(g, m) for g in groups for m in g["mismatches"] if m["culprits"]]
    if named:
        g, m = min(named, key=lambda gm: (_first_ts(gm[1]), gm[1]["seq"]))
        odd = next((s for s in m["sides"] if not s["majority"]), None)
        usual = next((s for s in m["sides"] if s["majority"]), None)
        what = {"type": "a different op", "size": "different sizes", "dtype": "different dtypes",
                "state": "a different state"}[m["kind"]]
        text = (f"{plural_ranks(m['culprits'])} ran collective {m['seq']} of process group {g['public']['pg']} with "
                f"{what} ({_side_text(odd, m['kind'])}) than {plural_ranks(usual['ranks']) if usual else 'the others'}"
                f" ({_side_text(usual, m['kind'])})")
        return {"culprits": m["culprits"], "basis": "mismatch", "kind": m["kind"], "pg": g["public"]["pg"],
                "seq": m["seq"], "op": m["op"], "suspects": [], "text": text}
    for g in groups:
        pub = g["public"]
        if pub["no_dump"] and pub["dumped"] and set(pub["dumped"]) <= set(pub["waiting"]):
            text = (f"every rank with a dump waits in collective {pub['frontier_seq']} ({pub['frontier_op']}) of process "
                    f"group {pub['pg']}; {plural_ranks(pub['no_dump'])} left no dump")
            return {**_no_verdict(), "basis": "no_dump", "pg": pub["pg"], "seq": pub["frontier_seq"],
                    "op": pub["frontier_op"], "suspects": pub["no_dump"], "text": text}
    return _no_verdict()


def _first_ts(m: dict[str, Any]) -> str:
    times = [e.ts for e in m["entries"].values() if e.ts is not None]
    return min(times).isoformat() if times else "~"


def _side_text(side: dict[str, Any] | None, kind: str) -> str:
    if side is None:
        return "?"
    if kind == "type":
        return side["op"]
    if kind == "size":
        return f"input {side['in_sizes']}, output {side['out_sizes']}"
    if kind == "dtype":
        return side["dtypes"]
    return side["state"]


# --- the wavefront view ------------------------------------------------------------------------


def _wavefront(g: dict[str, Any]) -> dict[str, Any]:
    """Ranks grouped by (last sequence id, op, state) for the report, missing ranks marked."""
    missing = set(g["incomplete"][0]["missing"]) if g["incomplete"] else set()
    rows: dict[tuple, list[int]] = {}
    for r in g["ranks"]:
        key = (r["last_seq"], r["op"], r["state"], r["call_site"])
        rows.setdefault(key, []).append(r["rank"])
    ordered = sorted(rows.items(), key=lambda kv: (kv[0][0] is None, -(kv[0][0] or 0), kv[1][0]))
    frontier = g["frontier_seq"]
    return {
        "pg": g["pg"],
        "members": g["members"],
        "members_text": format_ranks(g["members"]),
        "frontier_seq": frontier,
        "frontier_op": g["frontier_op"],
        "window_start": g["window_start"],
        "missing": sorted(missing),
        "missing_seq": g["incomplete"][0]["seq"] if g["incomplete"] else None,
        "missing_op": g["incomplete"][0]["op"] if g["incomplete"] else None,
        "no_dump": g["no_dump"],
        "wrapped": g["wrapped"],
        "rows": [
            {
                "ranks": ranks,
                "ranks_text": format_ranks(ranks),
                "last_seq": key[0],
                "behind": frontier - key[0] if frontier is not None and key[0] is not None else None,
                "op": key[1],
                "state": key[2],
                "call_site": key[3],
                "missing": bool(set(ranks) & missing),
            }
            for key, ranks in ordered
        ],
        "per_rank": [
            {"rank": r["rank"], "last_seq": r["last_seq"], "state": r["state"], "missing": r["rank"] in missing}
            for r in g["ranks"]
        ] if len(g["members"]) <= PER_RANK_LIMIT else [],
        "mismatches": [
            {"seq": m["seq"], "kind": m["kind"], "error_type": m["error_type"], "culprits": m["culprits"],
             "text": "; ".join(f"{format_ranks(s['ranks'])}: {_side_text(s, m['kind'])}" for s in m["sides"])}
            for m in g["mismatches"]
        ],
        "mismatches_total": g["mismatches_total"],
    }


# --- findings ----------------------------------------------------------------------------------


def trace_findings(match: dict[str, Any]) -> list[Finding]:
    """Findings for the matched dumps: missing ranks, mismatches by kind, members without a dump."""
    out: list[Finding] = []
    culprits = set(match["verdict"]["culprits"])
    for g in match.get("_internal", []):
        pub = g["public"]
        if g["incomplete"]:
            out.append(_missing_finding(pub, g, culprits))
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for m in g["mismatches"]:
            by_kind.setdefault(m["kind"], []).append(m)
        for kind, items in by_kind.items():
            out.append(_mismatch_finding(pub, kind, items, culprits))
        if pub["no_dump"]:
            out.append(_no_dump_finding(pub, match["verdict"]))
    return out


def _evidence(e: _Entry, context: list[_Entry] | None = None) -> Evidence:
    before = [(c.line, c.message) for c in sorted(context or [], key=lambda c: c.line)]
    return Evidence(file=e.file, line=e.line, rank=e.rank, text=e.message, ts=e.ts, context=before)


def _missing_finding(pub: dict[str, Any], g: dict[str, Any], culprits: set[int]) -> Finding:
    first = g["incomplete"][0]
    missing, joined, seq = first["missing"], first["joined"], first["seq"]
    ge: _GroupEntries = g["entries"]
    evidence = [_evidence(g["last_entry"][r], ge.before(r, g["last_entry"][r].seq)) for r in missing[:6]
                if r in g["last_entry"]]
    sample: _Entry | None = first["sample"]
    if sample is not None:
        evidence.append(_evidence(sample))
    others = [f"collective {i['seq']}: missing {format_ranks(i['missing'])}" for i in pub["incomplete"][1:]]
    waiting = sorted(set(joined) & set(pub["waiting"]))
    where = ", ".join(sorted({g["last_entry"][r].frame or "?" for r in missing if r in g["last_entry"]})[:3])
    lasts = sorted(set(first["missing_last"].values()))
    explanation = (
        f"Not all ranks joining collective, sequence number: {seq} (process group {pub['pg']}, "
        f"{first['op'] or '?'}). Missing ranks: {format_ranks(missing)}; their last entry in this group is collective "
        f"{format_ranks(lasts)}" + (f", called from {where}" if where else "") + ". "
        + (f"{plural_ranks(waiting).capitalize()} entered collective {seq} and still wait in it. " if waiting else "")
        + ("The collective they never reached was called from: " + first["stack"] + ". " if first.get("stack") else "")
        + (f"Further incomplete collectives: {'; '.join(others)}. " if others else "")
        + "A rank that never enqueues the collective the others are in is stuck before it (data loading, "
        "I/O, a Python exception, another process group) or took a different code path."
    )
    blamed = sorted(set(missing) & culprits) or missing
    return Finding(
        id=f"fr-missing-ranks:{pub['pg']}",
        rule="fr-missing-ranks",
        category="straggler",
        severity="error",
        title=(f"Flight recorder: {plural_ranks(missing)} never joined collective {seq} ({first['op'] or '?'}) "
               f"of process group {pub['pg']}"),
        ranks=blamed,
        first_ts=sample.ts if sample is not None else None,
        count=len(pub["incomplete"]),
        evidence=evidence,
        explanation=explanation,
        fix=("Look at what the missing ranks did instead: their py-spy stack, their last log lines, the last "
             "entry of their dump. Make every rank issue the same collectives in the same order."),
        references=list(REFERENCES),
        role="secondary",
        rule_role="root" if set(blamed) & culprits else "symptom",
        message=f"missing ranks {format_ranks(missing)} at collective {seq} of process group {pub['pg']}",
        fields={"pg": pub["pg"], "seq": seq, "op": first["op"], "missing_ranks": missing, "joined_ranks": joined,
                "culprit_ranks": blamed, "incomplete": pub["incomplete"]},
    )


def _mismatch_finding(pub: dict[str, Any], kind: str, items: list[dict[str, Any]], culprits: set[int]) -> Finding:
    first = items[0]
    named = sorted({r for m in items for r in m["culprits"]})
    evidence: list[Evidence] = []
    for m in items[:3]:
        for side in m["sides"][:3]:
            e = m["entries"][side["ranks"][0]]
            evidence.append(_evidence(e))
    lines = [
        f"Collective sequence number: {m['seq']} has errors ({m['error_type']}): "
        + "; ".join(f"{plural_ranks(s['ranks'])}{' (majority)' if s['majority'] else ''}: {_side_text(s, kind)}"
                    for s in m["sides"])
        for m in items[:5]
    ]
    more = pub["mismatches_total"] - len(pub["mismatches"])
    explanation = (
        ". ".join(lines) + "."
        + (f" … {len(items) - 5} more." if len(items) > 5 else "")
        + (f" {more} further mismatched collectives in this group were not reported (cap {MISMATCH_CAP})." if more > 0 else "")
        + (" The ranks that differ from the majority are named; with no majority, none is." if kind != "state" else
           " A state mismatch at the frontier means some ranks started or finished a collective the others have "
           "not: those behind are stuck before it.")
    )
    severity = "warning" if kind == "state" else "error"
    title = (f"Flight recorder: {_KIND_TITLE[kind]} mismatch in collective {first['seq']} of process group {pub['pg']}"
             + (f" ({plural_ranks(first['culprits'])} {'differs' if len(first['culprits']) == 1 else 'differ'})"
                if first["culprits"] else ""))
    return Finding(
        id=f"fr-{kind}-mismatch:{pub['pg']}",
        rule=f"fr-{kind}-mismatch",
        category="straggler" if kind == "state" else "collective_mismatch",
        severity=severity,  # type: ignore[arg-type]
        title=title,
        ranks=named,
        first_ts=min((e.ts for e in evidence if e.ts is not None), default=None),
        count=len(items),
        evidence=evidence,
        explanation=explanation,
        fix=("Make every rank call the same collective with the same shapes and dtypes at each step: look for "
             "rank-dependent branches, parameters that only some ranks use, and uneven data."),
        references=list(REFERENCES),
        role="secondary",
        rule_role="root" if set(named) & culprits else "symptom",
        message=lines[0],
        fields={"pg": pub["pg"], "seq": first["seq"], "error_type": first["error_type"], "culprit_ranks": named,
                "mismatches": [{k: v for k, v in m.items() if k != "entries"} for m in items]},
    )


def _no_dump_finding(pub: dict[str, Any], verdict: dict[str, Any]) -> Finding:
    suspects = verdict.get("basis") == "no_dump" and verdict.get("pg") == pub["pg"]
    text = (f"No flight-recorder dump from {plural_ranks(pub['no_dump'])} of process group {pub['pg']} "
            f"({len(pub['dumped'])} of {len(pub['members'])} members dumped)")
    explanation = (
        "Without a rank's dump its position in the collective sequence is unknown. "
        + (f"Every rank that dumped waits in collective {pub['frontier_seq']} ({pub['frontier_op']}), so the ranks "
           "without a dump are the ones to look at: they may be stuck elsewhere, dead, or their dump was not collected."
           if suspects else "The other ranks were matched without them.")
    )
    return Finding(
        id=f"fr-missing-dumps:{pub['pg']}",
        rule="fr-missing-dumps",
        category="hang_unknown",
        severity="warning",
        title=text,
        ranks=list(pub["no_dump"]),
        count=len(pub["no_dump"]),
        explanation=explanation,
        fix=("Collect every rank's dump (TORCH_NCCL_DUMP_ON_TIMEOUT=1 with TORCH_NCCL_DEBUG_INFO_TEMP_FILE or "
             "TORCH_FR_DUMP_TEMP_FILE on shared storage) and check the missing ranks' logs for a crash."),
        references=list(REFERENCES),
        role="context",
        rule_role="context",
        message=text,
        fields={"pg": pub["pg"], "no_dump": pub["no_dump"], "suspects": pub["no_dump"] if suspects else []},
    )


# --- py-spy stacks by rank membership --------------------------------------------------------


#: What py-spy's thread status says about a thread.
THREAD_STATES = {
    "active+gil": "running Python (holds the GIL)",
    "active": "blocked in native code without the GIL (a collective, I/O)",
    "idle": "idle (waiting)",
}


def stack_frame_membership(timeline: pl.DataFrame, match: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """For each frame of the ranks' py-spy main-thread stacks: the ranks in it and the ranks not in it.

    Returns one dict per normalised frame (``func (pkg/file.py)``), the frames of the largest
    stack group first, outermost first: ``frame``, ``in`` / ``not_in`` (rank lists), ``label``
    (``"in: 0-59, 61-143; not in: 60"``), ``shared`` (every rank with a stack has it),
    ``states`` (py-spy thread status -> ranks, see :data:`THREAD_STATES`) and, for a frame some
    ranks lack, ``others_wait_in``: what the ranks not in it wait in (their stack's activity,
    their innermost frame, and the collective their flight-recorder dump shows them waiting in).
    ``match`` is :func:`match_traces` of the same timeline, when already computed.
    """
    stacks = timeline.filter(
        (pl.col("kind") == "stack") & pl.col("frame").is_not_null() & pl.col("record").is_not_null()
        & pl.col("rank").is_not_null()
    )
    if stacks.is_empty():
        return []
    stacks = stacks.with_columns(normalize_frame(pl.col("frame")).alias("norm")).filter(pl.col("norm").is_not_null())
    threads = stacks.group_by("rank", "file", "record").agg(
        pl.col("thread").drop_nulls().first().alias("thread"),
        pl.col("norm").sort_by("frame_depth").alias("frames"),
        pl.len().alias("depth"),
    )
    # the same choice of thread as the stack-groups analyzer: MainThread, else the deepest stack
    main = (
        threads.with_columns(pl.col("thread").fill_null("").str.contains("MainThread").alias("_main"))
        .sort(["rank", "_main", "depth", "file", "record"], descending=[False, True, True, True, True])
        .unique(subset=["rank"], keep="first", maintain_order=True)
    )
    stack_of: dict[int, list[str]] = {int(r): list(f) for r, f in zip(main["rank"], main["frames"], strict=True)}
    state_of = {int(r): _thread_state(t) for r, t in zip(main["rank"], main["thread"], strict=True)}
    ranks = sorted(stack_of)
    waiting_fr = _fr_waiting(match if match is not None else match_traces(timeline))
    groups: dict[tuple[str, ...], list[int]] = {}
    for r in ranks:
        groups.setdefault(tuple(stack_of[r]), []).append(r)
    order: list[str] = []
    for frames, _members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0])):
        for fr in reversed(frames):  # outermost first, as people read a traceback
            if fr not in order:
                order.append(fr)
    out = []
    for fr in order:
        inside = [r for r in ranks if fr in stack_of[r]]
        outside = [r for r in ranks if fr not in stack_of[r]]
        states: dict[str, list[int]] = {}
        for r in inside:
            states.setdefault(state_of[r], []).append(r)
        item: dict[str, Any] = {
            "frame": fr,
            "in": inside,
            "not_in": outside,
            "label": f"in: {format_ranks(inside)}" + (f"; not in: {format_ranks(outside)}" if outside else " (all)"),
            "shared": not outside,
            "states": states,
            "others_wait_in": None,
        }
        if outside:
            item["others_wait_in"] = _others_wait(outside, stack_of, waiting_fr)
        out.append(item)
    return out


def _thread_state(header: str | None) -> str:
    text = header or ""
    for state in ("active+gil", "active", "idle"):
        if f"({state})" in text:
            return state
    return "gil" if "(gil)" in text else "unknown"


def _others_wait(outside: list[int], stack_of: dict[int, list[str]], waiting_fr: dict[int, str]) -> dict[str, Any]:
    activities = Counter(waits_in(stack_of[r]) for r in outside)
    innermost = Counter(stack_of[r][0] for r in outside if stack_of[r])
    collectives = Counter(waiting_fr[r] for r in outside if r in waiting_fr)
    return {
        "activity": activities.most_common(1)[0][0],
        "frame": innermost.most_common(1)[0][0] if innermost else None,
        "collective": collectives.most_common(1)[0][0] if collectives else None,
        "ranks": outside,
    }


def _fr_waiting(match: dict[str, Any]) -> dict[int, str]:
    """Each rank's pending flight-recorder collective as ``gloo:all_reduce #92 (pg 0:default_pg)``."""
    out: dict[int, str] = {}
    for g in match.get("groups", []):
        for r in g["ranks"]:
            if r["state"] == "waiting" and r["rank"] not in out:
                out[r["rank"]] = f"{r['op']} #{r['last_seq']} (pg {g['pg']})"
    return out


# --- the analyzer ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Result(AnalyzerResult):
    #: per process group: the ranks grouped by (last sequence id, op, state), missing ranks marked
    wavefront: list[dict[str, Any]] = field(default_factory=list)
    #: per process group: members, per-rank last entry, incomplete collectives, mismatches
    groups: list[dict[str, Any]] = field(default_factory=list)
    #: which ranks left a dump and which file was read for each
    dumps: dict[str, Any] = field(default_factory=dict)
    #: the ranks the dumps blame and why: culprits, basis (missing | mismatch | no_dump), pg, seq, op, text
    verdict: dict[str, Any] = field(default_factory=_no_verdict)
    #: py-spy frames with the ranks in and not in them (see :func:`stack_frame_membership`)
    stack_membership: list[dict[str, Any]] = field(default_factory=list)

    @property
    def culprits(self) -> list[int]:
        return list(self.verdict.get("culprits") or [])

    @property
    def waiting(self) -> bool:
        """Some rank's dump shows it waiting in a collective (the dumps were taken during a hang)."""
        return any(g.get("waiting") for g in self.groups)


def run(ctx: AnalyzerContext) -> Result:
    """Match the dumps across ranks and report what they show; the verdict weighs them with the logs."""
    match = match_traces(ctx.timeline, world=list(ctx.job.ranks) or None)
    membership = stack_frame_membership(ctx.timeline, match)
    return Result(
        findings=tuple(trace_findings(match)) if match["dumps"] else (),
        wavefront=match["wavefront"],
        groups=match["groups"],
        dumps=match["dumps"],
        verdict=match["verdict"],
        stack_membership=membership,
    )
