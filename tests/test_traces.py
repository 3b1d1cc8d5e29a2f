"""Flight-recorder dumps and py-spy stacks beside the logs (issue 8).

The dumps under ``tests/data/fr/`` are real: torch 2.13 (CPU, gloo, ``TORCH_FR_BUFFER_SIZE``) wrote
them from 4-rank runs of ``tests/fixtures_src/fr_scenarios.py`` (see its docstring for what each
scenario does). ``sample_logs/real/uneven_data_hang`` is the corpus hang with logs, py-spy dumps
and flight-recorder dumps of 8 ranks.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import jsonschema
import polars as pl
import pytest

import postmortem
from postmortem.analyzers import flight_recorder
from postmortem.analyzers.base import AnalyzerContext
from postmortem.analyzers.flight_recorder import match_traces, stack_frame_membership, trace_findings
from postmortem.api import analyze
from postmortem.discover import discover
from postmortem.model import JobInfo
from postmortem.parsers.flight_recorder import (
    RejectedDump,
    align_trace_clock,
    entry_fields,
    load_dump,
    parse_flight_recorder,
)
from postmortem.parsers.structured import parse_pyspy_json
from postmortem.render.html import html_text
from postmortem.timeline import build_timeline

REPO = Path(__file__).resolve().parent.parent
FR = REPO / "tests" / "data" / "fr"
UNEVEN = REPO / "sample_logs" / "real" / "uneven_data_hang" / "job"
SCHEMA = json.loads((Path(postmortem.__file__).parent / "report.schema.json").read_text(encoding="utf-8"))

needs_uneven = pytest.mark.skipif(
    not (UNEVEN / "fr").is_dir() or not (UNEVEN / "pyspy").is_dir(),
    reason="the corpus hang has no flight-recorder or py-spy dumps",
)


def _match(path: Path, world: list[int] | None = None, **kw) -> dict:
    return match_traces(build_timeline(path).frame, world=world, **kw)


def _group(match: dict, pg: str) -> dict:
    return next(g for g in match["groups"] if g["pg"] == pg)


def _copy(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.name not in skip:
            shutil.copy(path, dst / path.name)
    return dst


# --- one dump -> rows ------------------------------------------------------------------------


def test_pickle_and_json_forms_give_the_same_entry_rows():
    pkl = parse_flight_recorder((FR / "hang_missing/pkl/nccl_trace_rank_0").read_bytes(), "pkl/nccl_trace_rank_0")
    js = parse_flight_recorder((FR / "hang_missing/json/node-a-rank0.json").read_bytes(), "json/node-a-rank0.json")
    cols = ["line", "kind", "pg", "seq", "op_type", "numel", "ts", "thread"]
    entries_pkl = pkl.filter(pl.col("kind") == "collective")
    assert entries_pkl.select(cols).equals(js.filter(pl.col("kind") == "collective").select(cols))
    # rank 0: 6 steps of the default group (the 6th pending) and 5 of the pair group, in dump order
    assert entries_pkl.height == 11
    last = entries_pkl.row(-1, named=True)
    assert (last["seq"], last["op_type"], last["pg"], last["numel"]) == (6, "gloo:all_reduce", "0:default_pg", 16)
    assert entries_pkl.filter(pl.col("pg") == "1").get_column("seq").to_list() == [1, 2, 3, 4, 5]
    # the pickle carries Python frames: the call site outside torch, and the stack of the pending entry
    assert last["frame"].startswith("worker (/workspace/job/fr_scenarios.py:")
    assert last["frame_depth"] == 2
    assert " | stack: all_reduce (torch/distributed/distributed_c10d.py:" in last["message"]
    assert js.filter(pl.col("kind") == "collective").get_column("frame").null_count() == 11
    # the time is time_created_ns, in UTC
    raw = json.loads((FR / "hang_missing/json/node-a-rank0.json").read_text())["entries"][-1]["time_created_ns"]
    expected = datetime.fromtimestamp(raw // 1000 / 1e6, tz=timezone.utc).replace(tzinfo=None)
    assert last["ts"] == expected


def test_entry_fields_read_back_from_the_message():
    rows = entry_fields(parse_flight_recorder((FR / "mismatch/pkl/nccl_trace_rank_1").read_bytes()))
    third = rows.filter((pl.col("pg") == "0:default_pg") & (pl.col("seq") == 3)).row(0, named=True)
    assert (third["in_sizes"], third["out_sizes"], third["in_dtypes"], third["state"]) == (
        "[[4,4]]", "[[4,4]]", "Float", "scheduled")
    assert third["retired"] is True and third["p2p"] is False and isinstance(third["record_id"], int)
    rows3 = entry_fields(parse_flight_recorder((FR / "mismatch/json/node-a-rank3.json").read_bytes()))
    assert rows3.filter((pl.col("pg") == "0:default_pg") & (pl.col("seq") == 5))["in_dtypes"].to_list() == ["Int"]


def test_process_group_rows_carry_members_and_status():
    rows = parse_flight_recorder((FR / "hang_missing/pkl/nccl_trace_rank_2").read_bytes())
    info = rows.filter(pl.col("kind") == "info")
    assert info["message"].to_list() == [
        "flight recorder process group pg=0:default_pg ranks=[0,1,2,3] last_enqueued=6 last_started=-1 "
        "last_completed=5 first_record=0 version=2.10"
    ]


def test_dumps_are_found_by_content_whatever_their_names(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(FR / "hang_missing/pkl/nccl_trace_rank_0", job / "trace_host-a_rank0")  # torch's prefix + host
    shutil.copy(FR / "hang_missing/pkl/nccl_trace_rank_1", job / "fr_dump_1")  # no "rank": digits at the end
    shutil.copy(FR / "hang_missing/json/node-a-rank2.json", job / "dump2.txt")  # JSON named .txt
    shutil.copy(FR / "hang_missing/pkl/nccl_trace_rank_3", job / "worker3.dump")
    (job / "notes.txt").write_text("nothing to see\n")
    inv = discover(job)
    assert {f.rel: f.family for f in inv.files} == {
        "trace_host-a_rank0": "flight_recorder", "fr_dump_1": "flight_recorder", "dump2.txt": "flight_recorder",
        "worker3.dump": "flight_recorder", "notes.txt": "generic",
    }
    frame = build_timeline(job).frame.filter(pl.col("family") == "flight_recorder")
    ranks = dict(frame.group_by("file").agg(pl.col("rank").unique().first()).iter_rows())
    assert ranks == {"trace_host-a_rank0": 0, "fr_dump_1": 1, "dump2.txt": 2, "worker3.dump": 3}
    sources = dict(frame.group_by("file").agg(pl.col("rank_source").first()).iter_rows())
    assert sources["trace_host-a_rank0"] == "path" and sources["fr_dump_1"] == "content"


def _shift_logs(src: Path, dst: Path, hours: int) -> None:
    """Copy trainer logs with their printed times moved by ``hours``: logs in local time east of UTC."""
    dst.mkdir(parents=True)
    for path in src.iterdir():
        lines = []
        for line in path.read_text().splitlines():
            stamp = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line)
            if stamp:
                moved = datetime.strptime(stamp.group(0), "%Y-%m-%d %H:%M:%S") + timedelta(hours=hours)
                line = line.replace(stamp.group(0), moved.strftime("%Y-%m-%d %H:%M:%S"))
            lines.append(line)
        (dst / path.name).write_text("\n".join(lines) + "\n")


def test_dump_times_move_onto_the_logs_clock(tmp_path):
    job = tmp_path / "job"
    _shift_logs(FR / "hang_missing" / "logs", job / "logs", hours=8)  # e.g. logs in Beijing time
    shutil.copytree(FR / "hang_missing" / "pkl", job / "fr")
    timeline = build_timeline(job)  # aligns the dumps' clock as it builds
    moved = timeline.frame
    assert [n.reason for n in timeline.notes if n.rel == "(flight recorder dumps)"] == [
        "flight-recorder times moved from UTC to the logs' clock (+08:00)"
    ]
    fr = pl.col("family") == "flight_recorder"
    # rank 0's last collective (step 6's all_reduce) comes right after its last step line
    last_step = moved.filter(~fr & (pl.col("rank") == 0) & pl.col("step").is_not_null())["ts"].max()
    assert timedelta(0) <= moved.filter(fr & (pl.col("rank") == 0))["ts"].max() - last_step < timedelta(seconds=5)
    # aligning again changes nothing, and logs already in UTC move nothing
    again, note = align_trace_clock(moved)
    assert note is None and again is moved
    same = build_timeline(FR / "hang_missing")
    assert not [n for n in same.notes if n.rel == "(flight recorder dumps)"]


# --- matching across ranks --------------------------------------------------------------------


@pytest.mark.parametrize("form", ["pkl", "json"])
def test_missing_rank_is_named_at_the_collective_it_never_joined(form):
    m = _match(FR / "hang_missing" / form)
    g = _group(m, "0:default_pg")
    assert g["members"] == [0, 1, 2, 3] and g["members_from"] == "pg_config"
    assert g["last_seq"] == {"0": 6, "1": 6, "2": 6, "3": 5}
    assert g["incomplete"] == [{
        "seq": 6, "op": "gloo:all_reduce", "missing": [3], "joined": [0, 1, 2], "missing_last": {"3": 5},
        "stack": g["incomplete"][0]["stack"],
    }]
    assert g["waiting"] == [0, 1, 2]
    assert _group(m, "1")["incomplete"] == [] and _group(m, "1")["members"] == [0, 1]
    assert m["verdict"]["culprits"] == [3] and m["verdict"]["basis"] == "missing"
    [finding] = trace_findings(m)
    assert finding.rule == "fr-missing-ranks" and finding.ranks == [3]
    assert finding.title == ("Flight recorder: rank 3 never joined collective 6 (gloo:all_reduce) "
                             "of process group 0:default_pg")
    assert "Not all ranks joining collective, sequence number: 6" in finding.explanation
    # evidence: rank 3's last entry (collective 5), then the entry of collective 6 on a rank that joined
    assert [(e.rank, e.line) for e in finding.evidence] == [(3, 5), (0, 11)]
    if form == "pkl":
        assert "called from worker (/workspace/job/fr_scenarios.py:" in m["verdict"]["text"]


@pytest.mark.parametrize("form", ["pkl", "json"])
def test_wrapped_ring_buffers_are_aligned_per_process_group(form):
    m = _match(FR / "wrapped" / form)
    g = _group(m, "0:default_pg")
    # ranks 0-1 ran 3 extra pair collectives per step: with 12 slots their buffers start at collective 4
    assert g["wrapped"] == [0, 1] and g["window_start"] == 4
    assert g["last_seq"] == {"0": 6, "1": 6, "2": 5, "3": 6}
    # collectives 1-3 are gone from ranks 0-1 but nobody is "missing" from them, nor mismatched
    assert [(i["seq"], i["missing"]) for i in g["incomplete"]] == [(6, [2])]
    assert g["mismatches"] == []
    pair = _group(m, "1")
    assert pair["window_start"] == 7 and pair["last_seq"] == {"0": 15, "1": 15} and pair["incomplete"] == []
    assert m["verdict"]["culprits"] == [2]


def test_size_and_dtype_mismatches_name_the_odd_rank():
    m = _match(FR / "mismatch" / "pkl")
    g = _group(m, "0:default_pg")
    assert g["incomplete"] == []
    assert [(x["seq"], x["kind"], x["error_type"], x["culprits"]) for x in g["mismatches"]] == [
        (3, "size", "SIZE_OR_SYNTAX_MISMATCH", [1]),
        (5, "dtype", "COLLECTIVE_DTYPE_MISMATCH", [3]),
    ]
    size = g["mismatches"][0]
    assert [(s["ranks"], s["in_sizes"], s["majority"]) for s in size["sides"]] == [
        ([0, 2, 3], "[[16]]", True), ([1], "[[4,4]]", False)]
    # the earliest mismatch decides the dumps' culprit
    assert m["verdict"]["culprits"] == [1] and m["verdict"]["kind"] == "size"
    rules = {f.rule: f.ranks for f in trace_findings(m)}
    assert rules == {"fr-size-mismatch": [1], "fr-dtype-mismatch": [3]}


def test_type_mismatch_in_a_hang():
    m = _match(FR / "type_mismatch" / "json")
    g = _group(m, "0:default_pg")
    [mm] = g["mismatches"]
    assert (mm["seq"], mm["kind"], mm["culprits"]) == (3, "type", [2])
    assert [(s["ranks"], s["op"]) for s in mm["sides"]] == [([0, 1, 3], "gloo:all_reduce"), ([2], "gloo:broadcast")]
    assert g["waiting"] == [0, 1, 2, 3]
    assert m["verdict"]["text"] == ("rank 2 ran collective 3 of process group 0:default_pg with a different op "
                                    "(gloo:broadcast) than ranks 0, 1, 3 (gloo:all_reduce)")


def test_mismatch_cap_counts_what_it_does_not_report():
    m = _match(FR / "mismatch" / "json", cap=1)
    g = _group(m, "0:default_pg")
    assert [x["seq"] for x in g["mismatches"]] == [3]
    assert g["mismatches_total"] == 2 and g["capped"] is True


def _nccl_entry(seq: int, state: str, *, rank: int, op: str = "nccl:all_reduce", p2p: bool = False) -> dict:
    """An entry shaped like torch's NCCL writer (no GPU here: the states are the point)."""
    t0 = 1_700_000_000_000_000_000 + seq * 10_000_000 + rank
    return {
        "record_id": seq, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 0 if p2p else seq,
        "p2p_seq_id": seq if p2p else 0, "op_id": seq, "profiling_name": op, "time_created_ns": t0,
        "time_discovered_started_ns": t0 + 3_000_000 if state != "scheduled" else None,
        "time_discovered_completed_ns": t0 + 40_000_000 if state == "completed" else None,
        "input_sizes": [[1024]], "input_dtypes": ["BFloat16"], "output_sizes": [[1024]], "output_dtypes": ["BFloat16"],
        "state": state, "retired": state == "completed", "is_p2p": p2p, "timeout_ms": 600000, "frames": [],
    }


def test_nccl_states_started_and_completed(write_job):
    dumps = {}
    for rank in range(3):
        entries = [_nccl_entry(s, "completed", rank=rank) for s in range(1, 5)]
        entries.append(_nccl_entry(5, "scheduled" if rank == 2 else "started", rank=rank))
        entries.append(_nccl_entry(1, "completed", rank=rank, op=f"nccl:send {rank}->{(rank + 1) % 3}", p2p=True))
        dumps[f"fr/nccl_trace_rank_{rank}"] = pickle.dumps(
            {"version": "2.4", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
             "pg_status": {}, "entries": entries}, protocol=2)
    job = write_job(dumps)
    frame = build_timeline(job).frame
    send = entry_fields(frame.filter(pl.col("op_type") == "nccl:send 0->1")).row(0, named=True)
    assert (send["seq"], send["p2p"], send["ran_ms"]) == (1, True, 37)
    assert "started=+3ms completed=+40ms" in send["message"]
    m = match_traces(frame)
    g = _group(m, "0:default_pg")
    assert g["members_from"] == "pg_config" and g["waiting"] == [0, 1, 2]
    [mm] = g["mismatches"]
    assert (mm["seq"], mm["error_type"], mm["culprits"]) == (5, "COLLECTIVE_STATE_MISMATCH", [2])
    assert m["dumps"]["p2p_entries"] == 3
    assert m["verdict"]["culprits"] == [2] and m["verdict"]["kind"] == "state"
    [finding] = trace_findings(m)
    assert (finding.rule, finding.severity, finding.ranks) == ("fr-state-mismatch", "warning", [2])


def test_a_missing_dump_file_makes_its_rank_the_suspect(tmp_path):
    job = _copy(FR / "hang_missing" / "pkl", tmp_path / "job", skip=("nccl_trace_rank_3",))
    m = _match(job)
    g = _group(m, "0:default_pg")
    assert g["no_dump"] == [3] and g["incomplete"] == [] and g["waiting"] == [0, 1, 2]
    assert m["verdict"]["culprits"] == [] and m["verdict"]["suspects"] == [3] and m["verdict"]["basis"] == "no_dump"
    [finding] = [f for f in trace_findings(m) if f.rule == "fr-missing-dumps"]
    assert finding.ranks == [3] and finding.fields["suspects"] == [3]


def test_a_missing_dump_of_a_waiting_rank_does_not_hide_the_culprit(tmp_path):
    job = _copy(FR / "hang_missing" / "pkl", tmp_path / "job", skip=("nccl_trace_rank_0",))
    m = _match(job)
    g = _group(m, "0:default_pg")
    assert g["no_dump"] == [0] and [(i["seq"], i["missing"]) for i in g["incomplete"]] == [(6, [3])]
    assert m["verdict"]["culprits"] == [3]
    assert {f.rule for f in trace_findings(m)} == {"fr-missing-ranks", "fr-missing-dumps"}


# --- hostile and broken dumps -----------------------------------------------------------------


class _Payload:
    """Unpickling this runs ``command`` in a shell: what a hostile dump would do."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class _Exec:
    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        import builtins

        return (builtins.exec, (self.code,))


def _hostile(marker: Path) -> dict[str, bytes]:
    fr_like = {"version": "2.10", "pg_config": {}, "pg_status": {},
               "entries": [{"profiling_name": "nccl:all_reduce", "frames": _Payload(f"touch {marker}")}]}
    return {
        "fr/rank0.pkl": pickle.dumps(fr_like, protocol=2),  # looks like a dump: "entries" in the head
        "fr/rank1.pkl": pickle.dumps(_Payload(f"touch {marker}"), protocol=4),  # STACK_GLOBAL
        "fr/rank2.pkl": pickle.dumps({"entries": [_Exec(f"open({str(marker)!r}, 'w').close()")]}, protocol=5),
        "fr/rank3.pkl": f"cos\nsystem\n(S'touch {marker}'\ntR.".encode(),  # protocol 0: text, never unpickled
    }


def test_hostile_pickles_are_skipped_and_never_run(tmp_path):
    marker = tmp_path / "pwned"
    job = tmp_path / "job"
    for rel, data in _hostile(marker).items():
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_bytes(data)
    shutil.copy(FR / "hang_missing/pkl/nccl_trace_rank_0", job / "fr" / "good_rank0")
    timeline = build_timeline(job)
    skipped = {s.rel: s.reason for s in timeline.inventory.skipped}
    assert skipped["fr/rank0.pkl"].startswith("unsafe pickle: it asks for posix.system")
    assert skipped["fr/rank1.pkl"].startswith("unsafe pickle: it asks for posix.system")
    assert skipped["fr/rank2.pkl"].startswith("unsafe pickle: it asks for builtins.exec")
    # a protocol-0 "pickle" is plain text to the tool: read as a log, never unpickled
    assert {f.rel: f.family for f in timeline.inventory.files}["fr/rank3.pkl"] == "generic"
    assert not marker.exists()
    # the good dump next to them is still read
    assert timeline.frame.filter(pl.col("file") == "fr/good_rank0")["kind"].to_list().count("collective") == 11
    # and the whole analysis runs without ever touching the payload
    analyze(job)
    assert not marker.exists()


def _persistent() -> bytes:
    import io

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return "weights" if obj == "PERSIST" else None

    out = io.BytesIO()
    Pickler(out, protocol=2).dump({"entries": ["PERSIST"], "version": "2.10"})
    return out.getvalue()


def _expanding() -> bytes:
    node: list = ["x"]
    for _ in range(40):  # 40 levels of [a, a]: a few hundred bytes that expand to 2**40 objects
        node = [node, node]
    return pickle.dumps({"entries": [node], "version": "2.10"}, protocol=2)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_persistent(), "unsafe pickle: it uses persistent ids"),
        (_expanding(), "unsafe pickle: it expands into far more objects than its size"),
        (b"\x80\x02\x82\x01.", "unreadable pickle: ValueError"),  # EXT1: an extension-registry lookup
        (pickle.dumps({"entries": []}, protocol=2)[:-3], "unreadable pickle"),  # truncated
        (pickle.dumps({"version": "2.10"}, protocol=2), "not a flight-recorder dump: no 'entries' list"),
        (b"[" * 100_000, "not a flight-recorder dump (neither a pickle nor JSON)"),
        (b"{" + b'"a":[' * 50_000, "not a valid flight-recorder JSON dump"),
        (b'{"entries": ' + b"[" * 40 + b"1" + b"]" * 40 + b"}", "not a flight-recorder dump: nested deeper than 32 levels"),
    ],
    ids=["persistent-id", "expanding", "ext-opcode", "truncated", "no-entries", "not-a-dump", "deep-json",
         "deep-nesting"],
)
def test_broken_or_unsafe_dumps_are_rejected_with_a_reason(data, reason):
    with pytest.raises(RejectedDump) as info:
        load_dump(data)
    assert str(info.value).startswith(reason)


def test_malformed_fields_do_not_break_a_dump():
    dump = {"version": 2, "pg_config": "junk", "entries": [
        {"profiling_name": ["not", "text"], "collective_seq_id": "7", "input_sizes": [["a"]], "frames": "junk",
         "process_group": None, "pg_id": 3, "time_created_ns": "soon", "retired": "maybe"},
        "not an entry",
    ]}
    rows = entry_fields(parse_flight_recorder(pickle.dumps(dump, protocol=2), "fr/rank5.pkl"))
    row = rows.filter(pl.col("kind") == "collective").row(0, named=True)
    assert (row["op_type"], row["seq"], row["pg"], row["in_sizes"], row["retired"], row["ts"], row["_line_rank"]) == (
        "?", 7, "3", "?", None, None, 5)


# --- py-spy ----------------------------------------------------------------------------------


def test_pyspy_json_thread_status_says_gil_and_activity():
    threads = [
        {"pid": 7, "thread_id": 1, "os_thread_id": 11, "thread_name": "MainThread", "active": True, "owns_gil": True,
         "frames": [{"name": "forward", "short_filename": "model.py", "line": 3}]},
        {"pid": 7, "thread_id": 2, "os_thread_id": 12, "thread_name": "pin", "active": True, "owns_gil": False,
         "frames": [{"name": "all_reduce", "short_filename": "torch/distributed/distributed_c10d.py", "line": 9}]},
        {"pid": 7, "thread_id": 3, "os_thread_id": 13, "active": False, "owns_gil": False, "frames": []},
    ]
    rows = parse_pyspy_json(json.dumps(threads))
    headers = rows.filter(pl.col("frame").is_null())["thread"].to_list()
    assert headers == ['Thread 11 (active+gil): "MainThread"', 'Thread 12 (active): "pin"', "Thread 13 (idle)"]


@needs_uneven
def test_stack_frames_are_labelled_with_the_ranks_in_and_not_in_them():
    frame = build_timeline(UNEVEN).frame
    by_frame = {m["frame"]: m for m in stack_frame_membership(frame)}
    odd = by_frame["destroy_distributed (text_trainer.py)"]
    assert odd["label"] == "in: 2, 3; not in: 0, 1, 4-7"
    assert odd["others_wait_in"]["activity"] == "all_reduce"
    assert re.fullmatch(r"gloo:all_reduce #\d+ \(pg 0:default_pg\)", odd["others_wait_in"]["collective"])
    usual = by_frame["allreduce_gradients (text_trainer.py)"]
    assert usual["label"] == "in: 0, 1, 4-7; not in: 2, 3"
    assert re.fullmatch(r"gloo:barrier #\d+ \(pg 0:default_pg\)", usual["others_wait_in"]["collective"])
    assert by_frame["train (text_trainer.py)"]["label"] == "in: 0-7 (all)" and by_frame["train (text_trainer.py)"]["shared"]


# --- logs and dumps together ------------------------------------------------------------------


def _analyze(job: Path):
    analysis = analyze(job)  # fuses the dumps into the report
    jsonschema.validate(analysis.report.to_dict(), SCHEMA)
    return analysis.report


@needs_uneven
def test_hang_names_the_same_culprits_from_logs_dumps_or_both(tmp_path):
    logs_only = tmp_path / "logs"
    shutil.copytree(UNEVEN, logs_only, ignore=shutil.ignore_patterns("fr"))
    from_logs = _analyze(logs_only)
    from_dumps = _analyze(UNEVEN / "fr")
    both = _analyze(UNEVEN)
    assert from_logs.verdict.culprit_ranks == [2, 3]
    assert from_dumps.verdict.culprit_ranks == [2, 3]
    assert from_dumps.facts["verdict"]["agreement"]["status"] == "fr_only"
    assert from_dumps.verdict.category == "collective_mismatch"
    assert both.verdict.culprit_ranks == [2, 3]
    agreement = both.facts["verdict"]["agreement"]
    assert (agreement["status"], agreement["logs"], agreement["flight_recorder"]) == ("agree", [2, 3], [2, 3])
    assert not any(f.rule == "fr-disagrees-with-logs" for f in both.findings)
    # the pickle and the JSON of one dump: the pickle is read (it has the Python frames)
    assert both.facts["flight-recorder"]["dumps"]["files"]["2"] == "fr/rank2.pkl"
    wave = both.facts["flight-recorder"]["wavefront"][0]
    seq = wave["frontier_seq"]
    assert [(r["ranks_text"], r["last_seq"], r["op"], r["state"]) for r in wave["rows"]] == [
        ("0, 1, 4-7", seq, "gloo:all_reduce", "waiting"), ("2, 3", seq, "gloo:barrier", "waiting")]


@needs_uneven
def test_the_verdict_says_so_when_logs_and_dumps_disagree(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(UNEVEN, job)
    # rank 5's dumps lose their last entry: the dumps now say rank 5 never joined collective 92
    for path in (job / "fr").glob("rank5.*"):
        dump = load_dump(path.read_bytes())
        dump["entries"] = dump["entries"][:-1]
        dump["entries"][-1]["retired"] = True
        path.write_bytes(pickle.dumps(dump, protocol=2) if path.suffix == ".pkl" else json.dumps(dump).encode())
    logs_only = _analyze(_logs_copy(tmp_path))
    report = _analyze(job)
    assert report.verdict.culprit_ranks == [2, 3]  # the log diagnosis stands
    agreement = report.facts["verdict"]["agreement"]
    assert (agreement["status"], agreement["flight_recorder"]) == ("disagree", [5])
    [finding] = [f for f in report.findings if f.rule == "fr-disagrees-with-logs"]
    assert finding.title == ("The logs and the flight-recorder dumps blame different ranks: 2, 3 (logs) vs 5 (dumps)")
    seq = report.facts["flight-recorder"]["groups"][0]["frontier_seq"]
    note = report.verdict.summary[report.verdict.summary.index("The flight-recorder dumps disagree"):]
    assert note.startswith(f"The flight-recorder dumps disagree: rank 5 never joined collective {seq} (gloo:all_reduce "
                           "of process group 0:default_pg, called from allreduce_gradients (/workspace/job/text_trainer.py:")
    assert note.endswith("that ranks 0-4, 6, 7 entered (the logs blame ranks 2, 3).")
    levels = ["low", "medium", "high"]
    assert levels.index(report.verdict.confidence) == levels.index(logs_only.verdict.confidence) - 1


def _logs_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "logs_only"
    shutil.copytree(UNEVEN, dst, ignore=shutil.ignore_patterns("fr"))
    return dst


def test_dumps_name_the_culprit_the_logs_cannot(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(FR / "hang_missing" / "logs", job / "logs")
    shutil.copytree(FR / "hang_missing" / "pkl", job / "fr")
    report = _analyze(job)
    logs_only = _analyze(job / "logs")
    assert logs_only.verdict.culprit_ranks == []
    assert report.verdict.culprit_ranks == [3]
    assert report.facts["verdict"]["agreement"]["status"] == "fr_only"
    assert (report.verdict.status, report.verdict.category) == ("hung", "straggler")
    assert report.verdict.summary.startswith("Rank 3 never joined collective 6 (gloo:all_reduce")
    assert report.findings[0].rule == "fr-missing-ranks" and report.findings[0].role == "primary"


def test_analyzer_protocol_reports_without_touching_the_verdict():
    frame = build_timeline(FR / "wrapped" / "pkl").frame
    result = flight_recorder.run(AnalyzerContext(timeline=frame, job=JobInfo(path="job", ranks=[0, 1, 2, 3])))
    assert flight_recorder.ID == "flight-recorder"
    assert [f.rule for f in result.findings] == ["fr-missing-ranks"]
    assert result.culprits == [2]
    assert [w["pg"] for w in result.wavefront] == ["0:default_pg", "1"]


# --- the report -------------------------------------------------------------------------------


def test_html_report_shows_the_wavefront_only_with_dumps(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(FR / "hang_missing" / "logs", job / "logs")
    shutil.copytree(FR / "hang_missing" / "json", job / "fr")
    analysis = analyze(job)
    html = html_text(analysis.report, analysis.timeline.frame)
    assert 'id="wavefront"' in html and 'href="#wavefront"' in html
    section = html[html.index('id="wavefront"'):]
    section = section[: section.index("</section>")]
    assert "Never joined collective 6" in section
    assert '<td class="rk">3 <span class="tag">missing</span></td>' in section
    assert 'title="rank 3: done, last collective 5"' in section

    logs_only = analyze(job / "logs")
    assert 'id="wavefront"' not in html_text(logs_only.report, logs_only.timeline.frame)


@needs_uneven
def test_html_report_with_pyspy_but_no_dumps(tmp_path):
    job = _logs_copy(tmp_path)
    analysis = analyze(job)
    assert analysis.report.facts["flight-recorder"]["wavefront"] == []
    assert analysis.report.facts["flight-recorder"]["stack_membership"]
    html = html_text(analysis.report, analysis.timeline.frame)
    assert 'id="wavefront"' not in html and 'id="stacks"' in html
