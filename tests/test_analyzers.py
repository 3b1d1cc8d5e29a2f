"""Unit tests per analyzer: each runs on a small timeline of real log lines and is checked on its facts."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl
import pytest

from postmortem.analyzers import (
    ANALYZERS,
    UnknownAnalyzer,
    clock_skew,
    collective_mismatch,
    collective_sequence,
    end_of_data,
    exit_codes,
    first_failure,
    get,
    hccl_ranktable,
    job_status,
    peer_reports,
    progress,
    stack_groups,
    unexplained_errors,
)
from postmortem.analyzers._common import event_times, rank_nodes, signal_name
from postmortem.analyzers.base import AnalyzerContext, AnalyzerResult
from postmortem.config import extract_config
from postmortem.model import Evidence, Finding, JobInfo
from postmortem.ranges import format_ranks, parse_ranks, plural_ranks
from postmortem.schema import conform
from postmortem.verdict.primary import Cascade, cascade, finding_time

T0 = datetime(2024, 12, 6, 18, 30, 0)


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Timeline rows; ``line`` defaults to the row's position in its file."""
    counters: dict[str, int] = {}
    out = []
    for row in rows:
        row = {"file": "console.log", "kind": "info", **row}
        counters[row["file"]] = counters.get(row["file"], 0) + 1
        row.setdefault("line", counters[row["file"]])
        out.append(row)
    keys = sorted({k for r in out for k in r})
    return conform(pl.DataFrame([{k: r.get(k) for k in keys} for r in out], infer_schema_length=None))


def context(rows: list[dict[str, Any]], *, findings: list[Finding] | None = None, run: tuple[str, ...] = (),
            **job: Any) -> AnalyzerContext:
    """A context with the named analyzers already run, in registry order."""
    ctx = AnalyzerContext(timeline=frame(rows), job=JobInfo(path="job", **job), rule_findings=findings or [])
    for aid, module in ANALYZERS.items():
        if aid in run:
            ctx.results[module.Result] = module.run(ctx)
    return ctx


def steps(ranks: range | list[int], upto: int, *, cadence: float = 10.0, node: str = "node-0",
          offset_s: float = 0.0, max_steps: int = 100) -> list[dict[str, Any]]:
    return [
        {"file": f"rank{r}.log", "rank": r, "node": node, "kind": "progress", "step": s, "max_steps": max_steps,
         "ts": T0 + timedelta(seconds=s * cadence + offset_s + r * 0.01),
         "message": f"{{'loss': 1.2, 'global_step/max_steps': '{s}/{max_steps}'}}"}
        for s in range(1, upto + 1)
        for r in ranks
    ]


# --- registry and ranges -----------------------------------------------------------------------


def test_registry_order_and_protocol() -> None:
    assert list(ANALYZERS) == [
        "progress", "exit-codes", "stack-groups", "clock-skew", "collective-sequence", "collective-mismatch",
        "hccl-ranktable", "peer-reports", "end-of-data", "flight-recorder", "unexplained-errors", "first-failure",
        "job-status",
    ]
    seen: set[str] = set()
    for aid, module in ANALYZERS.items():
        assert aid == module.ID == module.__name__.rsplit(".", 1)[-1].replace("_", "-")
        assert module.TITLE and module.__doc__ and callable(module.run)
        assert set(module.NEEDS) <= seen, f"{aid} runs before what it needs"
        assert issubclass(module.Result, AnalyzerResult) and module.Result().findings == ()
        seen.add(aid)
    assert get("progress") is progress
    with pytest.raises(UnknownAnalyzer, match='no such analyzer: "nope"'):
        get("nope")


@pytest.mark.parametrize(
    ("ranks", "text"),
    [([], ""), ([5], "5"), ([0, 1, 2, 3, 5], "0-3, 5"), ([0, 1, 2, 3, 4, 6, 7], "0-4, 6, 7"), ([7, 6, 6], "6, 7"),
     ([1, 3, 5, 7], "1, 3, 5, 7"), ([0, 1, 2, 10, 11, 12, 13], "0-2, 10-13")],
)
def test_format_ranks_and_back(ranks: list[int], text: str) -> None:
    assert format_ranks(ranks) == text
    assert parse_ranks(text) == sorted(set(ranks))


def test_plural_ranks() -> None:
    assert plural_ranks([5]) == "rank 5"
    assert plural_ranks([0, 1, 2, 4]) == "ranks 0-2, 4"
    with pytest.raises(ValueError, match="backwards"):
        parse_ranks("5-3")


# --- progress ----------------------------------------------------------------------------------


def test_progress_last_step_cadence_and_ranks_behind() -> None:
    rows = steps(range(3), 20, cadence=12.5) + steps([3], 17, cadence=12.5)
    res = progress.run(context(rows))
    ranks = res.ranks
    assert {r: e.last_step for r, e in ranks.items()} == {0: 20, 1: 20, 2: 20, 3: 17}
    assert ranks[0].cadence_s == pytest.approx(12.5)
    assert res.majority_last_step == 20
    assert res.behind == [3]
    assert res.max_steps == 100
    (f,) = res.findings
    assert (f.id, f.ranks, f.rule_role) == ("progress:behind", [3], "context")
    assert f.evidence[0].rank == 3


def test_progress_without_ranks_still_gives_job_progress() -> None:
    rows = [{k: v for k, v in r.items() if k != "rank"} for r in steps([0], 5)]
    res = progress.run(context(rows))
    assert res.ranks == {}
    assert res.last_step == 5
    assert res.cadence_s == pytest.approx(10.0)


# --- exit codes --------------------------------------------------------------------------------


def test_signal_names() -> None:
    assert [signal_name(c) for c in (-9, -6, -11, -15, 137, 1, None)] == [
        "SIGKILL", "SIGABRT", "SIGSEGV", "SIGTERM", "SIGKILL", None, None,
    ]


def test_exit_codes_from_child_failed_error_block() -> None:
    block = [
        ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", {}),
        ("Failures:", {}),
        ("[1]:", {}),
        ("  rank      : 0 (local_rank: 0)", {"rank": 0}),
        ("  exitcode  : -15 (pid: 1798)  (SIGTERM)", {"rank": 0, "exit_code": -15, "pid": 1798, "signal": "SIGTERM"}),
        ("Root Cause (first observed failure):", {}),
        ("[0]:", {}),
        ("  time      : 2025-07-09_17:05:39", {}),
        ("  rank      : 1 (local_rank: 1)", {"rank": 1}),
        ("  exitcode  : -11 (pid: 5277)", {"rank": 1, "exit_code": -11, "pid": 5277}),
        ("  traceback : Signal 11 (SIGSEGV) received by PID 5277", {"rank": 1, "signal": "SIGSEGV", "pid": 5277}),
    ]
    rows = [{"message": m, "kind": "error", "record": 1, "ts": datetime(2025, 7, 9, 17, 5, 39), **c} for m, c in block]
    res = exit_codes.run(context(rows))
    ranks = res.ranks
    assert (ranks[0].exit_code, ranks[0].signal, ranks[0].root_cause) == (-15, "SIGTERM", False)
    assert (ranks[1].exit_code, ranks[1].signal, ranks[1].root_cause) == (-11, "SIGSEGV", True)
    assert res.root_cause_rank == 1
    by_id = {f.id: f for f in res.findings}
    assert by_id["exit-codes:SIGSEGV"].category == "native_crash"
    assert by_id["exit-codes:SIGSEGV"].rule_role == "root"
    assert by_id["exit-codes:SIGTERM"].rule_role == "symptom"


def test_exit_codes_sigabrt_after_watchdog_is_a_symptom_and_agent_sigterm_maps_pid_to_rank() -> None:
    rows = [
        {"rank": 0, "kind": "error", "message": "[Rank 0] To avoid data inconsistency, we are taking the entire "
         "process down.", "pid": 4710},
        {"rank": 1, "kind": "info", "message": "[PID:4711] worker ready", "pid": 4711},
        {"kind": "lifecycle", "message": "W0801 13:23:17.366000 140 torch/distributed/elastic/multiprocessing/api.py:"
         "897] Sending process 4711 closing signal SIGTERM", "pid": 4711, "signal": "SIGTERM"},
        {"rank": 0, "kind": "error", "message": "  exitcode  : -6 (pid: 4710)", "exit_code": -6, "pid": 4710},
        {"rank": 1, "kind": "error", "message": "  exitcode  : -15 (pid: 4711)", "exit_code": -15, "pid": 4711},
    ]
    res = exit_codes.run(context(rows))
    assert res.terminated_by_agent == [1]
    abort = next(f for f in res.findings if f.id == "exit-codes:SIGABRT")
    assert (abort.rule_role, abort.category) == ("symptom", "collective_timeout")


def test_agent_death_signal_is_a_cancellation() -> None:
    rows = [{"kind": "lifecycle", "message": "torch.distributed.elastic.multiprocessing.api:Received 15 death signal, "
             "shutting down workers", "signal": "received 15", "ts": T0}]
    (f,) = exit_codes.run(context(rows)).findings
    assert (f.id, f.category, f.rule_role) == ("exit-codes:agent-SIGTERM", "job_cancelled", "root")


# --- stack groups ------------------------------------------------------------------------------


def pyspy(rank: int, frames: list[str], *, thread: str = "MainThread", record: int | None = None) -> list[dict]:
    header = f'Thread {100 + rank} (idle): "{thread}"'
    rec = record if record is not None else rank
    return [{"file": f"pyspy/rank{rank}.txt", "rank": rank, "kind": "stack", "record": rec, "thread": header,
             "frame": f, "frame_depth": d, "message": "    " + f} for d, f in enumerate(frames)]


BARRIER = ["barrier (torch/distributed/distributed_c10d.py:4888)",
           "destroy_distributed (hyper_parallel/auto_models/trainer/base.py:776)"]
FORWARD = ["find_packed_sequence_indices (transformers/masking_utils.py:788)",
           "create_causal_mask (transformers/masking_utils.py:840)",
           "Qwen3MoeAttention.forward (transformers/models/qwen3_moe/modeling_qwen3_moe.py:301)"]


def test_stack_groups_seed000() -> None:
    rows = [row for r in range(8) for row in pyspy(r, BARRIER if r in (3, 5) else FORWARD)]
    # a background thread with a different stack must not split the groups
    rows += pyspy(0, ["_recv_msg (torch/_inductor/compile_worker/subproc_pool.py:55)"], thread="Thread-1", record=99)
    res = stack_groups.run(context(rows))
    groups = res.groups
    assert [(g.id, g.ranks, g.waits_in, g.minority) for g in groups] == [
        (0, [0, 1, 2, 4, 6, 7], "forward", False),
        (1, [3, 5], "barrier", True),
    ]
    assert groups[1].frames == ["barrier (torch/distributed/distributed_c10d.py)",
                                "destroy_distributed (hyper_parallel/auto_models/trainer/base.py)"]
    assert res.rank_group[5] == 1
    (f,) = res.findings
    assert f.ranks == [3, 5]


def test_frame_normalization_and_waits_in() -> None:
    s = pl.Series(["all_gather_into_tensor (/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py:4193)",
                   "0x7caaa50b1a9b (?)", "pthread_cond_wait (libc.so.6)"])
    out = pl.DataFrame({"f": s}).select(stack_groups.normalize_frame(pl.col("f")).alias("f"))["f"].to_list()
    assert out == ["all_gather_into_tensor (torch/distributed/distributed_c10d.py)", None, "pthread_cond_wait (libc.so.6)"]
    assert stack_groups.waits_in(["pthread_cond_wait (libc.so.6)", out[0]]) == "all_gather"
    assert stack_groups.waits_in(["__next__ (torch/utils/data/dataloader.py)"]) == "dataloader"
    assert stack_groups.waits_in(["_save (torch/serialization.py)", "save_checkpoint (trainer.py)"]) == "checkpoint"
    # activation checkpointing is compute, not a checkpoint save
    assert stack_groups.waits_in(["checkpoint (torch/utils/checkpoint.py)", "forward (model.py)"]) == "forward"
    assert stack_groups.waits_in(["recv_pyobj (zmq/sugar/socket.py)"]) == "unknown"


# --- clock skew --------------------------------------------------------------------------------


def test_clock_skew_from_shared_steps() -> None:
    rows = steps([0, 1], 10, node="node-a") + steps([2, 3], 10, node="node-b", offset_s=3.0)
    res = clock_skew.run(context(rows))
    assert res.reference == "node-a"
    # each node's first print of a step: rank 0 on node-a, rank 2 (+0.02 s) on node-b
    assert res.offsets_s == {"node-a": 0.0, "node-b": 3.02}
    assert res.uncertainty_s == 0.001
    assert res.corrections_s == {"node-b": 3.02}
    assert clock_skew.corrected(T0, "node-b", res) == T0 - timedelta(seconds=3.02)
    (f,) = res.findings
    assert f.nodes == ["node-b"]


def test_clock_skew_from_collective_timeouts() -> None:
    rows = []
    for r, node, shift in ((0, "node-a", 0.0), (1, "node-a", 0.0), (2, "node-b", -7.0), (3, "node-b", -7.0)):
        ts = T0 + timedelta(seconds=600 + shift, milliseconds=61 + r)
        rows.append({"rank": r, "node": node, "kind": "error", "ts": ts, "seq": 58, "op_type": "ALLREDUCE",
                     "timeout_ms": 600000, "ran_ms": 600061,
                     "message": f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=58, ..."})
    res = clock_skew.run(context(rows))
    assert res.method["node-b"] == "collective timeouts"
    assert res.offsets_s["node-b"] == pytest.approx(-7.0, abs=0.01)


def test_clock_skew_single_node_and_second_resolution() -> None:
    rows = [{"rank": 0, "node": "n", "ts": datetime(2026, 5, 27, 19, 52, s), "message": "x"} for s in range(5)]
    res = clock_skew.run(context(rows))
    assert (res.uncertainty_s, res.resolution_s) == (1.0, 1.0)


# --- collective sequence -----------------------------------------------------------------------


def watchdog(rank: int, ts: datetime, seq: int, enq: int, done: int) -> list[dict[str, Any]]:
    return [
        {"file": f"rank{rank}.log", "rank": rank, "kind": "error", "ts": ts, "seq": seq, "op_type": "ALLREDUCE",
         "numel": 1, "timeout_ms": 1800000, "ran_ms": 1800781,
         "message": f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                    "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800781 milliseconds "
                    "before timing out."},
        {"file": f"rank{rank}.log", "rank": rank, "kind": "error", "ts": ts, "seq": seq, "last_enqueued": enq,
         "last_completed": done, "pg": "0(default_pg)",
         "message": f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]  failure detected by watchdog at work sequence id: "
                    f"{seq} PG status: last enqueued work: {enq}, last completed work: {done}"},
    ]


def test_collective_sequence_states_and_start_time() -> None:
    t = T0 + timedelta(hours=1)
    rows = watchdog(0, t, 48490, 48490, 48489) + watchdog(1, t, 48490, 48491, 48489)
    rows += [{"file": "rank2.log", "rank": 2, "kind": "error", "ts": t, "last_enqueued": 48489,
              "last_completed": 48489,
              "message": "[PG ID 0 PG GUID 0(default_pg) Rank 2] Received a dump signal due to a collective timeout "
                         "from  rank 0 and we will try our best to dump the debug info. Last enqueued NCCL work: "
                         "48489, last completed NCCL work: 48489."},
             {"file": "rank3.log", "rank": 3, "kind": "progress", "step": 9, "ts": T0, "message": "step 9"},
             {"file": "rank0.log", "rank": 0, "kind": "error", "ts": t,
              "message": "[PG ID 0 PG GUID 0(default_pg) Rank 0] First PG on this rank to signal dumping."}]
    res = collective_sequence.run(context(rows, world_size=5))
    main = res.main
    assert (main.seq, main.op_type, main.numel, main.timeout_ms) == (48490, "ALLREDUCE", 1, 1800000)
    assert main.start_ts == t - timedelta(milliseconds=1800781)
    assert main.ranks_inside == [0, 1]
    assert main.ranks_not_entered == [2]
    assert main.ranks_without_watchdog_line == [3]
    assert main.ranks_no_logs == [4]
    assert main.laggards == [2]
    # a rank whose own status says it never entered is certain; the silent rank 3 is not blamed
    assert main.stragglers == [2]
    assert res.diagnosis == "straggler"
    assert res.first_signal["rank"] == 0
    assert res.ranks[2]["state"] == "not_entered"
    straggler = next(f for f in res.findings if f.id == "collective-sequence:straggler")
    assert (straggler.rule_role, straggler.fields["culprit_ranks"]) == ("root", [2])


def test_watchdogs_that_disagree_name_the_rank_behind_and_the_rank_in_another_collective() -> None:
    t = T0 + timedelta(hours=1)

    def fired(rank: int, seq: int, op: str) -> dict[str, Any]:
        return {"file": f"rank{rank}.log", "rank": rank, "kind": "error", "ts": t, "seq": seq, "op_type": op,
                "numel": 1, "timeout_ms": 600000, "ran_ms": 600012, "pg": "0(default_pg)",
                "message": f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught collective operation timeout: "
                           f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
                           "600012 milliseconds before timing out."}

    # rank 5 is still in SeqNum 2801 while the seven others wait in 2802
    behind = [fired(r, 2802, "_ALLGATHER_BASE") for r in range(8) if r != 5] + [fired(5, 2801, "ALLREDUCE")]
    res = collective_sequence.run(context(behind, world_size=8))
    assert (res.main.seq, res.main.stragglers, res.diagnosis) == (2802, [5], "straggler")
    assert res.ranks[5]["state"] == "not_entered"
    # rank 2 runs ALLREDUCE as SeqNum 2802 while the others run _ALLGATHER_BASE: a desync
    other = [fired(r, 2802, "_ALLGATHER_BASE") for r in range(8) if r != 2] + [fired(2, 2802, "ALLREDUCE")]
    res = collective_sequence.run(context(other, world_size=8))
    finding = next(f for f in res.findings if f.id == "collective-sequence:other-op")
    assert (finding.category, finding.ranks, finding.fields["culprit_ranks"]) == ("collective_mismatch", [2], [2])
    assert finding.title == "Rank 2 ran ALLREDUCE as SeqNum=2802 while the others ran _ALLGATHER_BASE"
    assert res.diagnosis == "mismatch"


def test_peer_reports_name_the_rank_the_others_wait_for() -> None:
    t = T0 + timedelta(minutes=30)
    # monitored_barrier(wait_all_ranks=True) on rank 0 (ProcessGroupGloo.cpp's wording)
    barrier = [{"file": "rank0.log", "rank": 0, "kind": "error", "ts": t,
                "message": "[rank0]: RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms"}]
    res = peer_reports.run(context(barrier, world_size=4))
    assert (res.culprits, res.waits_for, res.kinds) == ([1, 3], {0: [1, 3]}, ["monitored_barrier"])
    finding = res.findings[0]
    assert (finding.category, finding.rule_role, finding.fields["culprit_ranks"]) == ("straggler", "root", [1, 3])
    # HCCL notify waits along a ring: 0 waits for 1, 1 for 2, 3 for 2; rank 2 waits for nobody
    hccl = [{"file": f"rank{r}.log", "rank": r, "kind": "error", "ts": t,
             "message": f"EI0002: [PID: {100 + r}] 2026-11-02-07:41:10.204.517 The wait execution of the Notify register "
                        f"times out. Reason: The Notify register has not received the Notify record from remote rank: [{peer}]."}
            for r, peer in ((0, 1), (1, 2), (3, 2))]
    res = peer_reports.run(context(hccl, world_size=4))
    assert (res.culprits, res.waits_for) == ([2], {0: [1], 1: [2], 3: [2]})
    # HCCL's placeholder for an unknown peer (4294967295, -1 as u32) names nobody
    unknown = [{**hccl[0], "message": hccl[0]["message"].replace("[1]", "[4294967295]")}]
    assert peer_reports.run(context(unknown)).culprits == []
    # a named rank that raised its own exception explains the wait: context, not the cause
    died = [*barrier, {"file": "rank1.log", "rank": 1, "kind": "error", "ts": t - timedelta(minutes=1),
                       "exc_type": "KeyError", "message": "[rank1]: KeyError: 'labels'"}]
    finding = peer_reports.run(context(died, world_size=4, run=("exit-codes",))).findings[0]
    assert (finding.rule_role, finding.fields["own_failure"]) == ("context", [1])


def test_straggler_that_died_is_context_not_cause() -> None:
    t = T0 + timedelta(hours=1)
    rows = [*watchdog(0, t, 10, 10, 9), {"file": "rank1.log", "rank": 1, "kind": "error", "ts": T0, "exc_type": "KeyError", "message": "KeyError: 'labels'"}]
    res = collective_sequence.run(context(rows))
    straggler = next(f for f in res.findings if f.id == "collective-sequence:straggler")
    assert straggler.ranks == [1]
    assert straggler.rule_role == "context"
    assert straggler.fields["own_failure"] == [1]


# --- collective mismatch -----------------------------------------------------------------------


def test_parse_fingerprint_variants() -> None:
    assert collective_mismatch.parse_fingerprint("SequenceNumber=0OpType=GATHER") == {
        "seq": 0, "op_type": "GATHER", "shape": None, "dtypes": None, "device": None,
    }
    old = collective_mismatch.parse_fingerprint("OpType=ALLGATHER, TensorShape=[4], TensorDtypes=Float, "
                                        "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, ...")
    assert old == {"seq": None, "op_type": "ALLGATHER", "shape": "[4]", "dtypes": "Float", "device": "cuda"}


def test_mismatch_shape_only_names_uneven_sizes() -> None:
    msg = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
           "CollectiveFingerPrint(SequenceNumber=40, OpType=ALLREDUCE, TensorShape=[1024, 4], TensorDtypes=Float, "
           "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)), but Rank 2 is running collective: "
           "CollectiveFingerPrint(SequenceNumber=40, OpType=ALLREDUCE, TensorShape=[1000, 4], TensorDtypes=Float, "
           "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)).")
    res = collective_mismatch.run(context([{"rank": 0, "kind": "error", "message": msg, "ts": T0}]))
    assert res.differs == ["shape"]
    assert res.deviants == [2]
    assert res.likely_cause.startswith("The tensor shapes differ: data-dependent sizes or uneven padding")
    assert [r["shape"] for r in res.rows] == ["[1024, 4]", "[1000, 4]"]


def test_mismatch_majority_decides_the_deviant() -> None:
    def line(other: int, seq: int) -> str:
        return ("Detected mismatch between collectives on ranks. Rank 0 is running collective: "
                "CollectiveFingerPrint(SequenceNumber=12, OpType=BROADCAST), but Rank "
                f"{other} is running collective: CollectiveFingerPrint(SequenceNumber={seq}, OpType=BROADCAST).")

    rows = [{"rank": 0, "kind": "error", "message": line(1, 12), "ts": T0},
            {"rank": 0, "kind": "error", "message": line(2, 11), "ts": T0}]
    res = collective_mismatch.run(context(rows))
    assert res.deviants == [2]


# --- HCCL ranktable ----------------------------------------------------------------------------


def test_ranktable_counts_without_agent_list() -> None:
    rows = [{"rank": 0, "kind": "error", "message": "        Failed to collect cluster information of the communicator "
             "based on rootInfo detection. Reason: rank num[8]is different with rank list size[1] in total topo rank "
             "info..", "ts": T0}]
    res = hccl_ranktable.run(context(rows))
    assert (res.expected, res.connected, res.missing_count) == (8, 1, 7)
    assert res.never_connected == []
    assert res.findings[0].title == "HCCL ranktable detection failed: 7 of 8 ranks never connected (1 of 8 connected)"


def test_ranktable_agent_list() -> None:
    rows = [{"rank": 0, "kind": "error", "ts": T0,
             "message": "[ERROR] HCCL(575229,python): total connected num is [4], need connect rankNum is [8]"},
            {"rank": 0, "kind": "error", "ts": T0, "message": "[ERROR] HCCL(575229,python): Failed to connect "
             "agent[1,3,5,7,]"}]
    res = hccl_ranktable.run(context(rows))
    assert res.never_connected == [1, 3, 5, 7]
    assert res.findings[0].fields["culprit_ranks"] == [1, 3, 5, 7]


# --- end of data -------------------------------------------------------------------------------


def test_data_supply_arithmetic_seed000() -> None:
    rows = [{"message": "--training.train_iters=100 --model.max_seq_len=4096"},
            {"message": "micro_batch_size: 1"},
            {"message": "wikitext-2-raw-v1-train.jsonl: 36,718 lines, 2,517,232 tokens"},
            {"message": "{'loss': 1.1, 'global_step/max_steps': '5/100'}", "kind": "progress", "step": 5}]
    # the prose token count is a config fact ("N lines, M tokens" says it is the data's size)
    supply = end_of_data.data_supply(frame(rows), extract_config(frame(rows)), list(range(8)))
    assert supply["supported_steps"] == 76.8
    assert supply["formula"] == "2,517,232 / (8 x 4096) = 76.8"
    assert supply["train_iters"] == 100


def test_end_of_data_lines_in_every_wording_and_not_metrics_with_an_epoch() -> None:
    texts = ["[rank3] end of epoch", "END-OF-EPOCH reached", "epoch 3 finished", "epoch:0 Dataloader finished",
             "StopIteration", "dataset is exhausted", "rank 2 ran out of data",
             "{'loss': 2.2, 'epoch': 0.28}", "epoch 3 loss 2.1", "stopiteration_count=0"]
    rows = end_of_data._end_rows(frame([{"file": "r.log", "message": t} for t in texts]))
    assert rows.get_column("message").to_list() == texts[:7]


def test_data_supply_from_job_config() -> None:
    config = {"training": {"global_batch_size": 32, "train_iters": 25}, "data": {"max_seq_len": 4096,
              "total_tokens": 2517232}}
    supply = end_of_data.data_supply(frame([{"message": "x"}]), config, list(range(32)))
    assert (supply["supported_steps"], supply["train_iters"]) == (19.2, 25)


def test_end_of_data_counts_per_rank_and_node() -> None:
    rows = steps(range(4), 76, node="node-0")
    for r, n in ((1, 1), (2, 2)):
        for i in range(n):
            rows.append({"file": f"rank{r}.log", "rank": r, "node": "node-0", "kind": "lifecycle",
                         "ts": T0 + timedelta(seconds=765 + r + i),
                         "message": "[INFO|text_trainer.py:311] epoch:0 Dataloader finished with drop_last True"})
    rows.append({"file": "rank1.log", "rank": 1, "kind": "error", "record": 7, "exc_type": "StopIteration",
                 "message": "StopIteration"})
    rows.append({"file": "rank1.log", "rank": 1, "kind": "error", "record": 7, "message": "StopIteration caught"})
    ctx = context(rows, run=("progress",), world_size=4)
    res = end_of_data.run(ctx)
    assert res.per_rank == {1: 2, 2: 2}  # the StopIteration record counts once
    assert res.desync is True
    assert res.drained == [1, 2]
    assert res.first_drained_rank == 1
    (f,) = res.findings
    assert (f.category, f.rule_role) == ("data_exhaustion_desync", "root")


def test_even_end_of_epoch_is_not_a_desync() -> None:
    rows = steps(range(2), 10)
    rows += [{"file": f"rank{r}.log", "rank": r, "kind": "lifecycle", "ts": T0 + timedelta(seconds=101),
              "message": "end of epoch 0"} for r in range(2)]
    res = end_of_data.run(context(rows, run=("progress",)))
    assert res.desync is False
    assert res.findings == ()


# --- first failure -----------------------------------------------------------------------------


def test_first_failure_orders_by_time_and_falls_back_on_exceptions() -> None:
    rows = [
        {"file": "rank1.log", "rank": 1, "kind": "error", "record": 3, "ts": T0 + timedelta(seconds=5),
         "message": "Traceback (most recent call last):"},
        {"file": "rank1.log", "rank": 1, "kind": "error", "record": 3, "exc_type": "MemoryError",
         "message": "MemoryError"},
        {"file": "rank0.log", "rank": 0, "kind": "error", "record": 4, "ts": T0 + timedelta(seconds=9),
         "exc_type": "RuntimeError", "message": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] "
         "Connection closed by peer [10.0.0.2]:30872"},
    ]
    ctx = context(rows, run=("clock-skew", "unexplained-errors"))
    by_id = {f.id: f for f in ctx.findings()}
    oom = by_id["unexplained-errors:MemoryError"]
    assert (oom.category, oom.rule_role, oom.ranks) == ("host_oom", "root", [1])
    assert oom.first_ts == T0 + timedelta(seconds=5)  # the traceback's time
    echo = by_id["unexplained-errors:RuntimeError:network_failure:echo"]
    assert (echo.rule_role, echo.category) == ("symptom", "network_failure")
    res = first_failure.run(ctx)
    assert res.earliest["rank"] == 1
    assert res.runner_up["rank"] == 0


def test_exceptions_explained_by_a_rule_are_not_repeated() -> None:
    rows = [{"file": "rank1.log", "rank": 1, "kind": "error", "record": 3, "ts": T0,
             "message": "Traceback (most recent call last):"},
            {"file": "rank1.log", "rank": 1, "kind": "error", "record": 3, "exc_type": "OutOfMemoryError",
             "message": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}]
    rule = Finding(id="pytorch-cuda-oom", rule="pytorch-cuda-oom", category="device_oom", severity="error",
                   title="CUDA OOM", ranks=[1], rule_role="root",
                   evidence=[Evidence(file="rank1.log", line=2, rank=1, text="torch.OutOfMemoryError: ...", ts=T0)])
    res = unexplained_errors.run(context(rows, findings=[rule], run=("clock-skew",)))
    assert res.findings == ()


# --- job status --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ([{"rank": 0, "kind": "lifecycle", "message": "Training completed. Do not forget to share your model",
           "ts": T0 + timedelta(seconds=1000)}], "completed"),
        ([{"rank": 0, "kind": "error", "exit_code": 1, "message": "  exitcode  : 1 (pid: 5)"}], "failed"),
        # a log that ends short of max_steps, with no error and no silence: still running (or pasted in part)
        ([], "unknown"),
        # ... but an evaluation bar started after the last step that never left 0 is where a job hangs
        ([{"file": "rank0.log", "rank": 0, "line": 999, "kind": "info", "ts": T0 + timedelta(seconds=401),
           "message": "Val:   0%|          | 0/35 [00:00<?, ?it/s]"}], "hung"),
        # a bar at 0 before the last step is a phase that went on
        ([{"file": "rank0.log", "rank": 0, "line": 0, "kind": "info", "ts": T0,
           "message": "Train:   0%|          | 0/100 [00:00<?, ?it/s]"}], "unknown"),
    ],
    ids=["completion-line", "exit-1", "stopped-short", "frozen-bar", "bar-before-steps"],
)
def test_job_status(extra: list[dict[str, Any]], status: str) -> None:
    rows = steps(range(2), 40) + extra
    ctx = context(rows, run=("progress", "exit-codes", "stack-groups", "clock-skew", "first-failure"))
    res = job_status.run(ctx)
    assert res.status == status


def test_job_status_silence_per_rank() -> None:
    rows = steps([0], 40) + steps([1], 20)
    ctx = context(rows, run=("progress", "exit-codes", "stack-groups"))
    res = job_status.run(ctx)
    assert res.silent_s[0] == 0.0
    assert res.silent_s[1] == pytest.approx(200.0 - 0.01, abs=0.02)


# --- cascade -----------------------------------------------------------------------------------


def run_cascade(ctx: AnalyzerContext) -> Cascade:
    """The verdict's choice of primary over the context's findings, as ``decide`` makes it."""
    skew = ctx.get(clock_skew.Result)
    lines = event_times(ctx.timeline)
    findings = ctx.findings()
    times = {f.id: finding_time(f, skew, rank_nodes(ctx.timeline), lines) for f in findings}
    return cascade(findings, times, hung=False, margin_s=skew.uncertainty_s)


def test_cascade_prefers_specific_cause_for_the_same_event_and_marks_echoes() -> None:
    t = T0 + timedelta(seconds=30)
    line = Evidence(file="rank0.log", line=3, rank=0, text="RuntimeError: Detected mismatch between collectives", ts=t)
    generic = Finding(id="pytorch-rank-python-exception", rule="r", category="rank_exception", severity="error",
                      title="exception", ranks=[0], first_ts=t, evidence=[line], rule_role="root")
    mismatch = Finding(id="pytorch-collective-mismatch", rule="r", category="collective_mismatch",
                       severity="critical", title="mismatch", ranks=[0], first_ts=t, evidence=[line], rule_role="root")
    later = t + timedelta(minutes=10)
    timeout = Finding(id="nccl-watchdog-timeout", rule="r", category="collective_timeout", severity="error",
                      title="timeout", ranks=[1], first_ts=later, rule_role="symptom",
                      evidence=[Evidence(file="rank1.log", line=9, rank=1, text="Watchdog caught ...", ts=later)])
    peer = Finding(id="gloo-peer-closed", rule="r", category="rank_exception", severity="error",
                   title="closed", ranks=[2], first_ts=later, rule_role="root",
                   evidence=[Evidence(file="rank2.log", line=4, rank=2, ts=later,
                                      text="RuntimeError: [pair.cc:598] Connection closed by peer [10.0.0.2]:30872")])
    ctx = context([{"message": "x"}], findings=[generic, mismatch, timeout, peer], run=("clock-skew",))
    res = run_cascade(ctx)
    assert res.primary.id == "pytorch-collective-mismatch"
    roles = res.roles
    assert roles["nccl-watchdog-timeout"] == ("secondary", "pytorch-collective-mismatch")
    assert roles["gloo-peer-closed"] == ("secondary", "pytorch-collective-mismatch")
    assert roles["pytorch-rank-python-exception"] == ("secondary", "pytorch-collective-mismatch")


def test_cascade_echo_only_root_does_not_beat_a_later_real_cause() -> None:
    early = T0
    echo = Finding(id="peer", rule="r", category="rank_exception", severity="error", title="closed", ranks=[0],
                   first_ts=early, rule_role="root",
                   evidence=[Evidence(file="a", line=1, rank=0, ts=early, text="Connection reset by peer")])
    kill = Finding(id="sigkill", rule="r", category="host_oom", severity="error", title="SIGKILL", ranks=[3],
                   first_ts=early + timedelta(seconds=3), rule_role="root",
                   evidence=[Evidence(file="b", line=1, rank=3, ts=early + timedelta(seconds=3), text="exitcode: -9")])
    res = run_cascade(context([{"message": "x"}], findings=[echo, kill], run=("clock-skew",)))
    assert (res.primary.id, res.tier) == ("sigkill", "root")


def test_cascade_experimental_rule_leads_only_beside_a_stable_finding_of_its_category() -> None:
    t = T0 + timedelta(seconds=5)

    def found(fid: str, category: str, status: str, line: int) -> Finding:
        return Finding(id=fid, rule=fid, category=category, severity="error", title=fid, ranks=[1], first_ts=t,
                       rule_role="root", rule_status=status,
                       evidence=[Evidence(file="rank1.log", line=line, rank=1, ts=t, text=f"line {line}")])

    guess = found("hccl-guess", "accelerator_error", "experimental", 2)
    later = Finding(id="oom", rule="oom", category="device_oom", severity="error", title="oom", ranks=[1],
                    first_ts=t + timedelta(seconds=30), rule_role="root",
                    evidence=[Evidence(file="rank1.log", line=9, rank=1, ts=t + timedelta(seconds=30), text="OOM")])
    alone = run_cascade(context([{"message": "x"}], findings=[guess, later], run=("clock-skew",)))
    assert (alone.primary.id, alone.roles["hccl-guess"]) == ("oom", ("context", None))
    backed = found("cuda-fault", "accelerator_error", "stable", 3)
    res = run_cascade(context([{"message": "x"}], findings=[guess, backed, later], run=("clock-skew",)))
    assert res.primary.id == "cuda-fault"  # the same event: the stable reading leads


def test_cascade_without_findings() -> None:
    res = run_cascade(context([{"message": "x"}]))
    assert res.primary is None


# --- behaviours found on the reconstructed corpus ------------------------------------------------


def test_nan_loss_is_found_even_when_the_parser_could_not_read_it() -> None:
    rows = steps(range(2), 5)
    for r in range(2):
        rows.append({"file": f"rank{r}.log", "rank": r, "kind": "progress", "step": 6, "max_steps": 100,
                     "ts": T0 + timedelta(seconds=61 + r * 0.01),
                     "message": f"2026-04-16 10:15:41,006 - INFO - [rank {r}] step 6/100 | loss nan | grad_norm nan"})
    res = progress.run(context(rows))
    nan = next(f for f in res.findings if f.id == "progress:nan")
    assert (nan.category, nan.rule_role, nan.fields["first_bad_step"]) == ("numerical_instability", "root", 6)
    assert nan.fields["metric"] == "loss"
    # the same step on every rank: a reduced loss, no rank singled out
    assert nan.fields["culprit_ranks"] == []


def test_nan_on_one_rank_first_names_it() -> None:
    rows = steps(range(2), 5)
    rows.append({"file": "rank1.log", "rank": 1, "kind": "progress", "step": 4, "grad_norm": float("nan"),
                 "ts": T0 + timedelta(seconds=40.5), "message": "step: 4  loss: 2.1  grad_norm:     nan"})
    rows.append({"file": "rank0.log", "rank": 0, "kind": "progress", "step": 5, "grad_norm": float("nan"),
                 "ts": T0 + timedelta(seconds=50.5), "message": "step: 5  loss: 2.1  grad_norm:     nan"})
    nan = next(f for f in progress.run(context(rows)).findings if f.id == "progress:nan")
    assert (nan.fields["first_bad_step"], nan.fields["metric"], nan.fields["culprit_ranks"]) == (4, "grad_norm", [1])


def test_step_numbers_beyond_the_planned_total_are_ignored() -> None:
    rows = [*steps([0], 19, max_steps=25), {"file": "rank0.log", "rank": 0, "kind": "progress", "step": 131, "ts": T0, "message": "***** Running training ***** train_iters=25, global_batch_size=32, tokens per step=131,072"}]
    assert progress.run(context(rows)).ranks[0].last_step == 19


def test_inherited_times_move_to_the_next_printed_time() -> None:
    t_old, t_new = T0, T0 + timedelta(minutes=4)
    rows = [{"file": "console.log", "ts": t_old, "message": "[2024-12-06 18:30:00,000] hydra: starting"},
            {"file": "console.log", "ts": t_old, "ts_inferred": True, "kind": "error", "exc_type": "RuntimeError",
             "message": "RuntimeError: HCCL function error: hcclCommInitRootInfoConfig(...), error code is 1"},
            {"file": "console.log", "ts": t_new, "kind": "error",
             "message": "[ERROR] 2024-12-06-18:34:00 (PID:1, Device:0, RankID:0) ERR02200 DIST call hccl api failed."},
            {"file": "console.log", "ts": t_new, "ts_inferred": True, "message": "trailing line"}]
    times = event_times(frame(rows))
    assert times == {("console.log", 2): t_new}
    assert ("console.log", 2) in times and times[("console.log", 2)] == t_new
    assert ("console.log", 1) not in times and ("other.log", 2) not in times
    assert times.get(("console.log", 4), t_old) == t_old


def test_inherited_times_are_looked_up_per_file_and_line_among_many() -> None:
    rows = [{"file": f"rank{r}.log", "ts": T0 + timedelta(seconds=i), "ts_inferred": i % 2 == 1, "message": "x"}
            for r in (10, 2) for i in range(2000)]
    times = event_times(frame(rows))
    assert len(times) == 1998
    # line 1000 (row 999) inherited its time; the next line prints its own, 1000 s after T0
    assert times[("rank2.log", 1000)] == times[("rank10.log", 1000)] == T0 + timedelta(seconds=1000)
    assert ("rank2.log", 999) not in times
    assert ("rank10.log", 2000) not in times  # the last line has no printed time after it


def test_two_ranks_reporting_each_other_blame_the_lower_sequence_number() -> None:
    def line(me: int, fp_me: str, other: int, fp_other: str) -> str:
        return (f"RuntimeError: Detected mismatch between collectives on ranks. Rank {me} is running collective: "
                f"CollectiveFingerprint({fp_me}), but Rank {other} is running collective: "
                f"CollectiveFingerprint({fp_other}).")

    a, b = "SequenceNumber=12, OpType=_REDUCE_SCATTER_BASE, TensorShape=[56623104]", "SequenceNumber=0OpType=GATHER"
    rows = [{"rank": 0, "kind": "error", "message": line(0, a, 1, b)},
            {"rank": 1, "kind": "error", "message": line(1, b, 0, a)}]
    assert collective_mismatch.run(context(rows)).deviants == [1]


def test_a_rule_on_a_stack_frame_does_not_make_a_hang_failed() -> None:
    rows = steps(range(2), 10) + pyspy(0, BARRIER) + pyspy(1, FORWARD)
    stack_rule = Finding(id="pytorch-teardown-barrier-hang", rule="r", category="teardown_failure", severity="error",
                         title="barrier in teardown", ranks=[0], rule_role="symptom",
                         evidence=[Evidence(file="pyspy/rank0.txt", line=1, rank=0, text="barrier (...)")])
    ctx = context(rows, findings=[stack_rule],
                  run=("progress", "exit-codes", "stack-groups", "clock-skew", "first-failure"))
    assert job_status.run(ctx).status == "hung"


def test_tee_console_lines_are_not_counted_twice() -> None:
    rows = steps(range(4), 5, node="n0")
    line = "[INFO|text_trainer.py:311] epoch:0 Dataloader finished with drop_last True"
    for r in (1, 3):
        rows.append({"file": f"logs/rank_{r}.log", "rank": r, "node": "n0", "kind": "lifecycle", "message": line,
                     "ts": T0 + timedelta(seconds=55)})
        rows.append({"file": "console.log", "node": "n0", "kind": "lifecycle", "message": line,
                     "ts": T0 + timedelta(seconds=55)})
    res = end_of_data.run(context(rows, run=("progress", "clock-skew"), world_size=4))
    assert res.per_rank == {1: 1, 3: 1}
    assert res.per_node == {"n0": 2}


def test_local_loss_names_the_rank_that_went_bad_first() -> None:
    rows = []
    for r in range(4):
        local = "inf" if r == 1 else "4.8913"
        rows.append({"file": "console.log", "rank": r, "kind": "progress", "step": 15, "max_steps": 30,
                     "ts": T0 + timedelta(milliseconds=r), "loss": float("inf"), "grad_norm": float("nan"),
                     "message": f"epoch:0 step:15/30 | loss: inf | local_loss: {local} | grad_norm: nan"})
    nan = next(f for f in progress.run(context(rows)).findings if f.id == "progress:nan")
    assert (nan.fields["first_bad_step"], nan.fields["metric"], nan.fields["culprit_ranks"]) == (15, "loss", [1])
    assert nan.evidence[0].rank == 1


def test_slow_rank_in_data_loading() -> None:
    rows = []
    for step in range(1, 11):
        for r in range(4):
            data, comm = (0.250, 0.010) if r == 3 else (0.000, 0.265)
            rows.append({"file": f"logs/train_rank{r}.log", "rank": r, "kind": "progress", "step": step,
                         "max_steps": 40, "ts": T0 + timedelta(seconds=step * 0.27),
                         "message": f"epoch:0 step:{step}/40 | loss: 5.80 | data_time: {data:.3f}s | "
                                    f"comm_time: {comm:.3f}s | step_time: 0.288s"})
    res = progress.run(context(rows))
    slow = next(f for f in res.findings if f.id == "progress:slow-rank")
    assert (slow.category, slow.rule_role, slow.ranks) == ("straggler", "root", [3])
    assert (slow.fields["kind"], slow.fields["corroborated"]) == ("data", True)
    assert slow.fields["mean_slow_s"] == pytest.approx(0.25)
    assert slow.evidence[0].rank == 3 and "step:1/40" in slow.evidence[0].text


def test_slow_rank_named_by_any_timing_key_among_many_ranks() -> None:
    # "data_wait" has no "_time" in it; with 64 ranks the others' median is that of 63 values
    rows = [{"file": f"r{r}.log", "rank": r, "kind": "progress", "step": s, "ts": T0 + timedelta(seconds=s),
             "message": f"step:{s}/40 | data_wait: {0.5 if r == 37 else 0.01 + r % 3 * 0.01:.3f}s"}
            for s in range(1, 6) for r in range(64)]
    slow = next(f for f in progress.run(context(rows)).findings if f.id == "progress:slow-rank")
    assert slow.ranks == [37] and slow.fields["mean_others_s"] == pytest.approx(0.02, abs=0.001)


def test_even_timings_name_no_slow_rank() -> None:
    rows = [{"file": f"r{r}.log", "rank": r, "kind": "progress", "step": s, "ts": T0 + timedelta(seconds=s),
             "message": f"step:{s}/40 | data_time: 0.010s | comm_time: 0.020s"} for s in range(1, 6) for r in range(4)]
    assert not [f for f in progress.run(context(rows)).findings if f.id == "progress:slow-rank"]
