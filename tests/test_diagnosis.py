"""End-to-end diagnosis over hand-built timelines made of real log lines (seeds, log-formats.md).

Each scenario builds the rows a parser would produce (``postmortem.schema.conform``), runs
:func:`postmortem.verdict.diagnose` and checks the verdict a person would write.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import polars as pl
import pytest

import postmortem
import postmortem.api
from postmortem.config import extract_config
from postmortem.model import CATEGORIES, Evidence, Finding, JobInfo, Report
from postmortem.schema import conform
from postmortem.verdict import diagnose

SCHEMA = json.loads((Path(postmortem.__file__).parent / "report.schema.json").read_text(encoding="utf-8"))
T0 = datetime(2026, 5, 22, 12, 0, 0)


class Rows:
    """Collects timeline rows; ``line`` numbers count per file like a parser's."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._lines: dict[str, int] = {}

    def add(self, file: str, message: str, *, kind: str = "info", **cols: Any) -> dict[str, Any]:
        line = self._lines.get(file, 0) + 1
        self._lines[file] = line
        row = {"file": file, "line": line, "message": message, "kind": kind, **cols}
        self.rows.append(row)
        return row

    def frame(self) -> pl.DataFrame:
        keys = sorted({k for r in self.rows for k in r})
        return conform(pl.DataFrame([{k: r.get(k) for k in keys} for r in self.rows], infer_schema_length=None))


def rank_file(rank: int) -> str:
    return f"logs/attempt_0/{rank}/stderr.log"


def progress(rows: Rows, ranks: range | list[int], steps: range, *, max_steps: int, cadence: float = 10.0,
             node_of=lambda r: "node-0", skew: dict[str, float] | None = None) -> None:
    for step in steps:
        for rank in ranks:
            node = node_of(rank)
            ts = T0 + timedelta(seconds=step * cadence + (skew or {}).get(node, 0.0))
            rows.add(
                rank_file(rank),
                f"{ts:%Y-%m-%d %H:%M:%S},000 - INFO - step {step}/{max_steps} loss=2.31",
                kind="progress", rank=rank, node=node, ts=ts, step=step, max_steps=max_steps, loss=2.31,
            )


def watchdog_timeout(rows: Rows, rank: int, ts: datetime, *, seq: int, enq: int, done: int, node: str = "node-0",
                     op: str = "ALLREDUCE", timeout_ms: int = 600000, ran_ms: int = 600061) -> None:
    hdr = f"[rank{rank}]:[E{ts:%m%d %H:%M:%S}.715298746 ProcessGroupNCCL.cpp:607] "
    rows.add(
        rank_file(rank),
        hdr + f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
        f"NumelIn=1, NumelOut=1, Timeout(ms)={timeout_ms}) ran for {ran_ms} milliseconds before timing out.",
        kind="error", level="ERROR", rank=rank, node=node, ts=ts, seq=seq, op_type=op, numel=1,
        timeout_ms=timeout_ms, ran_ms=ran_ms,
    )
    rows.add(
        rank_file(rank),
        hdr + f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]  failure detected by watchdog at work sequence id: "
        f"{seq} PG status: last enqueued work: {enq}, last completed work: {done}",
        kind="error", level="ERROR", rank=rank, node=node, ts=ts, seq=seq, last_enqueued=enq, last_completed=done,
        pg="0(default_pg)",
    )


def run(rows: Rows, findings: list[Finding] | None = None, **job: Any) -> Report:
    frame = rows.frame()
    job.setdefault("config", extract_config(frame))  # as api.analyze does
    report = diagnose(frame, findings or [], JobInfo(path="job", **job), "0.1.0")
    jsonschema.validate(report.to_dict(), SCHEMA)
    return report


def finding(report: Report, fid: str) -> Finding:
    return next(f for f in report.findings if f.id == fid)


# --- rank exception, then timeouts -------------------------------------------------------------


def rank_exception_job() -> Rows:
    rows = Rows()
    node_of = lambda r: "node-0" if r < 4 else "node-1"  # noqa: E731
    progress(rows, range(8), range(1, 7), max_steps=100, node_of=node_of)
    t_err = T0 + timedelta(seconds=61)
    rows.add(rank_file(5), f"[rank5]: {t_err:%Y-%m-%d %H:%M:%S},117 - ERROR - Traceback (most recent call last):",
             kind="error", rank=5, node="node-1", ts=t_err, record=1, level="ERROR")
    rows.add(rank_file(5), '[rank5]:   File "/workspace/train.py", line 160, in main', kind="error", rank=5,
             node="node-1", record=1, ts=t_err, ts_inferred=True)
    rows.add(rank_file(5), "[rank5]: KeyError: 'labels'", kind="error", rank=5, node="node-1", record=1,
             exc_type="KeyError", ts=t_err, ts_inferred=True)
    t_to = t_err + timedelta(seconds=604)
    for r in [0, 1, 2, 3, 4, 6, 7]:
        watchdog_timeout(rows, r, t_to, seq=58, enq=58, done=57, node=node_of(r))
    # ChildFailedError summary of node-1's agent
    t_cfe = t_err + timedelta(seconds=2)
    cfe = "logs/node-1/console.log"
    rows.add(cfe, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", kind="error",
             record=900, node="node-1", exc_type="ChildFailedError")
    rows.add(cfe, "Root Cause (first observed failure):", kind="error", record=900, node="node-1")
    rows.add(cfe, "  exitcode  : 1 (pid: 4711)", kind="error", record=900, node="node-1", rank=5, exit_code=1,
             pid=4711, ts=t_cfe)
    return rows


def test_rank_exception_is_the_cause_and_timeouts_are_secondary() -> None:
    report = run(rank_exception_job())
    v = report.verdict
    assert v.status == "failed"
    assert v.category == "rank_exception"
    assert v.culprit_ranks == [5]
    assert v.first_failure is not None
    assert (v.first_failure.rank, v.first_failure.step) == (5, 7)
    assert v.first_failure.file == rank_file(5)
    assert v.first_failure.text == "[rank5]: KeyError: 'labels'"
    assert v.summary == (
        "Rank 5 (node-1) raised KeyError at step 7 at 12:01:01; ranks 0-4, 6, 7 then timed out in ALLREDUCE SeqNum=58."
    )
    assert v.confidence == "high"
    timeouts = finding(report, "collective-sequence:timeouts")
    assert timeouts.role == "secondary"
    assert timeouts.caused_by == "unexplained-errors:KeyError"
    assert report.findings[0].id == "unexplained-errors:KeyError"
    assert report.findings[0].role == "primary"
    states = {r.rank: r.state for r in report.ranks}
    assert states[5] == "failed"
    assert {r.rank: r.last_step for r in report.ranks}[5] == 6


def test_rule_finding_for_the_exception_wins_over_the_fallback() -> None:
    rows = rank_exception_job()
    t_err = T0 + timedelta(seconds=61)
    rule = Finding(
        id="pytorch-rank-python-exception", rule="pytorch-rank-python-exception", category="rank_exception",
        severity="error", title="A rank raised a Python exception", ranks=[5], first_ts=t_err, count=1,
        evidence=[Evidence(file=rank_file(5), line=9, rank=5, text="[rank5]: KeyError: 'labels'", ts=t_err)],
        rule_role="root", fields={"exc_name": "KeyError"},
    )
    report = run(rows, [rule])
    assert report.verdict.category == "rank_exception"
    assert report.findings[0].id == "pytorch-rank-python-exception"
    # the rule explained the traceback, so no generic exception finding duplicates it
    assert not [f for f in report.findings if f.id.startswith("unexplained-errors:KeyError")]
    assert report.verdict.summary.startswith("Rank 5 (node-1) raised KeyError at step 7 at 12:01:01;")


# --- seed 000: data exhaustion desync ------------------------------------------------------------


def seed000_single_node() -> Rows:
    rows = Rows()
    rows.add("console.log", "[INFO] train_iters: 100, max_seq_len: 4096, micro_batch_size: 1", kind="info",
             ts=T0 - timedelta(seconds=30))
    rows.add("console.log", "[INFO] tokenized wikitext-2-raw-v1-train.jsonl: 36,718 lines, 2,517,232 tokens",
             kind="info", ts=T0 - timedelta(seconds=20))
    progress(rows, range(8), range(1, 77), max_steps=100)
    for i, r in enumerate([3, 5]):
        ts = T0 + timedelta(seconds=76 * 10 + 4 + i)
        rows.add(rank_file(r), f"[INFO|text_trainer.py:311] {ts:%Y-%m-%d %H:%M:%S},5 >> epoch:0 Dataloader finished "
                 "with drop_last True", kind="lifecycle", rank=r, node="node-0", ts=ts)
    for r in range(8):
        f = f"pyspy/rank{r}.txt"
        rows.add(f, f'Thread {900 + r} (idle): "MainThread"', kind="stack", rank=r, record=r,
                 thread=f'Thread {900 + r} (idle): "MainThread"')
        if r in (3, 5):
            frames = ["barrier (torch/distributed/distributed_c10d.py:4888)",
                      "destroy_distributed (hyper_parallel/auto_models/trainer/base.py:776)",
                      "train (text_trainer.py:330)"]
        else:
            frames = ["find_packed_sequence_indices (transformers/masking_utils.py:788)",
                      "create_causal_mask (transformers/masking_utils.py:840)",
                      "Qwen3MoeAttention.forward (transformers/models/qwen3_moe/modeling_qwen3_moe.py:301)",
                      "train (text_trainer.py:300)"]
        for depth, frame in enumerate(frames):
            rows.add(f, "    " + frame, kind="stack", rank=r, record=r, frame=frame, frame_depth=depth,
                     thread=f'Thread {900 + r} (idle): "MainThread"')
    return rows


def test_seed000_data_exhaustion_hang() -> None:
    report = run(seed000_single_node(), world_size=8)
    v = report.verdict
    assert v.status == "hung"
    assert v.category == "data_exhaustion_desync"
    assert v.culprit_ranks == [3, 5]
    assert v.first_failure is not None
    assert (v.first_failure.rank, v.first_failure.step) == (3, 77)
    assert "Dataloader finished" in v.first_failure.text
    assert v.confidence == "high"
    assert v.summary.startswith("Ranks 3, 5 (node-0) ran out of data (rank 3 first, at step 77 at 12:12:44)")
    assert "ranks 0-2, 4, 6, 7 kept training (stacks: barrier vs forward)" in v.summary
    assert "the data supports 76.8 of train_iters 100 steps" in v.summary
    groups = [(g.ranks, g.waits_in, g.minority) for g in report.stack_groups]
    assert groups == [([0, 1, 2, 4, 6, 7], "forward", False), ([3, 5], "barrier", True)]
    supply = report.facts["end-of-data"]["supply"]
    assert supply["supported_steps"] == 76.8
    assert supply["formula"] == "2,517,232 / (8 x 4096) = 76.8"
    assert {r.rank: r.stack_group for r in report.ranks} == {0: 0, 1: 0, 2: 0, 3: 1, 4: 0, 5: 1, 6: 0, 7: 0}
    assert all(r.state == "hung" for r in report.ranks)


def test_seed000_four_nodes_counts_2_3_3_4() -> None:
    rows = Rows()
    rows.add("node-0/console.log", "--training.global_batch_size=32 --training.train_iters=25 max_seq_len: 4096",
             ts=T0 - timedelta(seconds=60), node="node-0")
    rows.add("node-0/console.log", "total tokens: 2,517,232", ts=T0 - timedelta(seconds=50), node="node-0")
    node_of = lambda r: f"node-{r // 8}"  # noqa: E731
    progress(rows, range(32), range(1, 20), max_steps=25, node_of=node_of)
    drained = {0: [1, 6], 1: [9, 12, 14], 2: [17, 20, 23], 3: [24, 26, 28, 31]}
    for node, ranks in drained.items():
        for i, r in enumerate(ranks):
            ts = T0 + timedelta(seconds=19 * 10 + 3 + node * 5 + i * 0.5)
            rows.add(f"node-{node}/console.log", "[INFO|text_trainer.py:311] epoch:0 Dataloader finished with "
                     "drop_last True", kind="lifecycle", rank=r, node=f"node-{node}", ts=ts)
    report = run(rows, world_size=32)
    eod = report.facts["end-of-data"]
    assert eod["per_node"] == {"node-0": 2, "node-1": 3, "node-2": 3, "node-3": 4}
    assert eod["desync"] is True
    assert eod["supply"]["supported_steps"] == 19.2
    assert eod["supply"]["train_iters"] == 25
    assert report.verdict.category == "data_exhaustion_desync"
    assert report.verdict.status == "hung"
    assert report.verdict.summary.startswith(
        "12 ranks on 4 nodes ran out of data (rank 1 first, at step 20 at 12:03:13) while the other 20 ranks kept "
        "training; the data supports 19.2 of train_iters 25 steps and the job hung."
    )
    assert report.verdict.culprit_ranks == [1, 6, 9, 12, 14, 17, 20, 23, 24, 26, 28, 31]
    assert report.verdict.first_failure is not None and report.verdict.first_failure.rank == 1


# --- seed 003: collective mismatch, HCCL ranktable ----------------------------------------------

SEED003_MISMATCH = (
    "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
    "CollectiveFingerprint(SequenceNumber=12, OpType=_REDUCE_SCATTER_BASE, TensorShape=[56623104], "
    "TensorDtypes=Float Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=npu, layout=Strided "
    "(default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullptr)), but Rank 1 "
    "is running collective: CollectiveFingerprint(SequenceNumber=0OpType=GATHER).Collectives differ in the "
    "following aspects: Sequence number: 12vs 0 Op type: REDUCE SCATTER BASEvs GATHER"
)


def test_seed003_collective_mismatch() -> None:
    rows = Rows()
    progress(rows, [0, 1], range(1, 4), max_steps=50)
    t = T0 + timedelta(seconds=35)
    rows.add(rank_file(0), "[rank0]: Traceback (most recent call last):", kind="error", rank=0, record=5, ts=t)
    rows.add(rank_file(0), '[rank0]:   File "torch/distributed/distributed_c10d.py", line 4286, in '
             "reduce_scatter_tensor", kind="error", rank=0, record=5, ts=t, ts_inferred=True)
    rows.add(rank_file(0), "[rank0]: " + SEED003_MISMATCH, kind="error", rank=0, record=5, exc_type="RuntimeError",
             ts=t, ts_inferred=True)
    report = run(rows)
    v = report.verdict
    assert v.category == "collective_mismatch"
    assert v.culprit_ranks == [1]
    assert v.first_failure is not None and v.first_failure.rank == 0
    assert v.summary == (
        "Rank 1 (node-0) ran a different collective than rank 0 (SequenceNumber 0 vs 12, OpType GATHER vs "
        "_REDUCE_SCATTER_BASE, TensorShape none vs [56623104]) at 12:00:35."
    )
    diff = report.facts["collective-mismatch"]
    assert diff["rows"] == [
        {"rank": 0, "seq": 12, "op_type": "_REDUCE_SCATTER_BASE", "shape": "[56623104]", "dtypes": "Float Float",
         "device": "npu"},
        {"rank": 1, "seq": 0, "op_type": "GATHER", "shape": None, "dtypes": None, "device": None},
    ]
    assert diff["differs"] == ["seq", "op_type", "shape", "dtypes", "device"]
    assert diff["likely_cause"].startswith("The sequence numbers differ: one rank skipped or added a collective")
    # the generic RuntimeError fallback is the same event: the mismatch is the more specific cause
    assert report.findings[0].id == "collective-mismatch"


def test_seed003_ranktable_never_connected() -> None:
    rows = Rows()
    t = datetime(2026, 5, 22, 12, 8, 27, 88244)
    f = "plog/plog-575229_20260522120827.log"
    rows.add(f, "[ERROR] HCCL(575229,python):2026-05-22-12:08:20.001.002 [rank_table_detect.cc:210] total connected "
             "num is [4], need connect rankNum is [8]", kind="error", rank=0, ts=t - timedelta(seconds=7))
    rows.add(f, "[ERROR] HCCL(575229,python):2026-05-22-12:08:20.001.100 [rank_table_detect.cc:230] Failed to "
             "connect agent[1,3,5,7,]", kind="error", rank=0, ts=t - timedelta(seconds=7))
    rows.add("console.log", "[PID: 575229] 2026-05-22-12:08:27.088.244 Ranktable_Detect_Failed(EI0015): Failed to "
             "collect cluster information of the communicator based on rootInfo detection. Reason: Within the "
             "timeout period, all ranks in the communication domain failed to connect to the server..",
             kind="error", rank=0, ts=t, error_code="EI0015", record=3)
    rows.add("console.log", "        Failed to collect cluster information of the communicator based on rootInfo "
             "detection. Reason: rank num[8]is different with rank list size[1] in total topo rank info..",
             kind="error", rank=0, ts=t, ts_inferred=True, record=3)
    report = run(rows, world_size=8)
    assert report.facts["hccl-ranktable"]["never_connected"] == [1, 3, 5, 7]
    assert report.facts["hccl-ranktable"]["expected"] == 8
    v = report.verdict
    assert v.category == "comm_init_failure"
    assert v.culprit_ranks == [1, 3, 5, 7]
    assert v.status == "failed"
    assert v.summary.startswith("Ranks 1, 3, 5, 7 never connected to the communicator (4 of 8 connected)")


# --- collective sequence: straggler vs fabric ------------------------------------------------------


def test_straggler_that_never_entered_the_collective() -> None:
    rows = Rows()
    progress(rows, range(4), range(1, 5), max_steps=100)
    t = T0 + timedelta(seconds=650)
    for r in (0, 1, 3):
        watchdog_timeout(rows, r, t + timedelta(milliseconds=r), seq=120049, enq=120051, done=120048)
    rows.add(rank_file(2), "[rank2]:[E626 16:48:25.440238649 ProcessGroupNCCL.cpp:1890] [PG ID 0 PG GUID "
             "0(default_pg) Rank 2] Received a dump signal due to a collective timeout from  rank 0 and we will try "
             "our best to dump the debug info. Last enqueued NCCL work: 120048, last completed NCCL work: 120048.",
             kind="error", rank=2, ts=t + timedelta(seconds=1), last_enqueued=120048, last_completed=120048)
    report = run(rows, world_size=4)
    v = report.verdict
    assert v.category == "straggler"
    assert v.culprit_ranks == [2]
    assert v.confidence == "high"
    main = report.facts["collective-sequence"]["collectives"][0]
    assert main["ranks_inside"] == [0, 1, 3]
    assert main["ranks_not_entered"] == [2]
    assert main["start_ts"] == (t - timedelta(milliseconds=600061)).isoformat()
    assert v.summary.startswith("Rank 2 (node-0) never entered ALLREDUCE SeqNum=120049 (started 12:00:49.939)")
    assert v.summary.endswith("; ranks 0, 1, 3 then timed out in ALLREDUCE SeqNum=120049.")
    assert finding(report, "collective-sequence:timeouts").role == "secondary"


def test_every_rank_inside_points_at_the_fabric() -> None:
    rows = Rows()
    progress(rows, range(4), range(1, 5), max_steps=100)
    t = T0 + timedelta(seconds=650)
    for r in range(4):
        watchdog_timeout(rows, r, t, seq=7753, enq=7755, done=7752, op="_REDUCE_SCATTER_BASE")
    report = run(rows, world_size=4)
    v = report.verdict
    assert report.facts["collective-sequence"]["diagnosis"] == "fabric"
    assert v.category == "collective_timeout"
    assert v.culprit_ranks == []
    assert v.confidence == "medium"
    assert v.summary == (
        "Ranks 0-3 timed out in _REDUCE_SCATTER_BASE SeqNum=7753 at 12:10:50 with every rank inside and none "
        "missing; suspect the fabric or a device hang."
    )


# --- exits, hangs, completion --------------------------------------------------------------------


def test_sigkill_root_cause_with_sigterm_cascade() -> None:
    rows = Rows()
    progress(rows, range(4), range(1, 31), max_steps=100)
    f = "console.log"
    t = T0 + timedelta(seconds=305)
    rows.add(f, "W0522 12:05:05.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending process "
             "4712 closing signal SIGTERM", kind="lifecycle", ts=t, pid=4712, signal="SIGTERM")
    rows.add(f, "[rank1]: worker pid", kind="info", rank=1, pid=4712)
    for r, code in ((0, -15), (1, -15), (2, -15)):
        rows.add(f, f"  exitcode  : {code} (pid: {4710 + r})", kind="error", rank=r, exit_code=code, record=50,
                 ts=t + timedelta(seconds=1))
    rows.add(f, "Root Cause (first observed failure):", kind="error", record=50)
    rows.add(f, "  exitcode  : -9 (pid: 4713)", kind="error", rank=3, exit_code=-9, record=50,
             ts=t - timedelta(seconds=1))
    rows.add(f, "  traceback : Signal 9 (SIGKILL) received by PID 4713", kind="error", rank=3, signal="SIGKILL",
             record=50, pid=4713)
    report = run(rows, world_size=4)
    exits = report.facts["exit-codes"]["ranks"]
    assert exits["3"]["signal"] == "SIGKILL" and exits["3"]["root_cause"] is True
    assert exits["0"]["signal"] == "SIGTERM"
    assert report.facts["exit-codes"]["root_cause_rank"] == 3
    v = report.verdict
    assert (v.status, v.category, v.culprit_ranks) == ("failed", "host_oom", [3])
    assert v.confidence == "medium"  # SIGKILL alone does not prove the OOM killer
    assert v.summary == (
        "Rank 3 (node-0) was killed by SIGKILL at step 31 at 12:05:04 (most likely the host OOM killer); "
        "the agent then stopped ranks 0-2 (SIGTERM)."
    )
    assert {r.rank: r.state for r in report.ranks} == {0: "killed", 1: "killed", 2: "killed", 3: "failed"}
    assert finding(report, "exit-codes:SIGTERM").caused_by == "exit-codes:SIGKILL"


def test_hang_without_cause() -> None:
    rows = Rows()
    progress(rows, range(2), range(1, 51), max_steps=100)
    # the processes are alive (they still print) but no step follows for half an hour
    rows.add(rank_file(0), "[I] NCCL heartbeat ok", rank=0, node="node-0", ts=T0 + timedelta(seconds=500 + 1800))
    report = run(rows, world_size=2)
    v = report.verdict
    assert (v.status, v.category, v.confidence) == ("hung", "hang_unknown", "low")
    assert v.first_failure is None
    assert v.summary == (
        "The job stopped making progress after step 50 at 12:08:20 with no error and no exit "
        "(1800 s of silence before the logs end); no cause was found in the logs."
    )


def test_steady_progress_that_simply_ends_is_healthy_not_a_failure() -> None:
    # a job still running, or the part of its log a user pasted: no error, no exit, no silence
    rows = Rows()
    progress(rows, range(2), range(1, 51), max_steps=100)
    v = run(rows, world_size=2).verdict
    assert (v.status, v.category, v.culprit_ranks, v.first_failure) == ("unknown", "healthy", [], None)
    assert v.summary == (
        "Training ran on 2 ranks to step 50 of 100 with no error, no failed exit and no stall; no completion "
        "line seen, so the logs may end while the job was still running."
    )


def test_healthy_completed_job() -> None:
    rows = Rows()
    progress(rows, range(2), range(1, 101), max_steps=100)
    rows.add(rank_file(0), "Training completed. Do not forget to share your model on huggingface.co/models =)",
             kind="lifecycle", rank=0, ts=T0 + timedelta(seconds=1001))
    report = run(rows, world_size=2)
    v = report.verdict
    assert (v.status, v.category, v.confidence, v.culprit_ranks) == ("completed", "healthy", "high", [])
    assert v.summary == "The job completed on 2 ranks, reaching step 100 of 100 with no failure."
    assert {r.state for r in report.ranks} == {"completed"}


# --- clock skew ----------------------------------------------------------------------------------


def test_clock_skew_reorders_the_first_failure_across_nodes() -> None:
    rows = Rows()
    node_of = lambda r: "node-0" if r < 2 else "node-1"  # noqa: E731
    # node-1's clock runs 5 s ahead: the same steps print 5 s later there
    progress(rows, range(4), range(1, 11), max_steps=100, node_of=node_of, skew={"node-1": 5.0})
    t = T0 + timedelta(seconds=105)
    rows.add(rank_file(0), "[rank0]: ValueError: bad shard", kind="error", rank=0, node="node-0", ts=t + timedelta(seconds=2),
             exc_type="ValueError")
    rows.add(rank_file(2), "[rank2]: OSError: [Errno 28] No space left on device", kind="error", rank=2,
             node="node-1", ts=t + timedelta(seconds=5), exc_type="OSError")
    report = run(rows, world_size=4)
    skew = report.facts["clock-skew"]
    assert skew["offsets_s"] == {"node-0": 0.0, "node-1": 5.0}
    assert skew["method"]["node-1"] == "progress steps"
    v = report.verdict
    # on node-0's clock rank 2 failed at t+0 s, rank 0 at t+2 s
    assert v.first_failure is not None and v.first_failure.rank == 2
    assert v.category == "storage_error"
    assert v.summary == (
        "Rank 2 (node-1) hit a storage error (OSError: [Errno 28] No space left on device) at step 11 at 12:01:50."
    )
    assert report.facts["first-failure"]["earliest"]["rank"] == 2


def test_first_by_less_than_unknown_clock_margin_is_said() -> None:
    rows = Rows()
    t = T0 + timedelta(seconds=100)
    rows.add("node-0/rank0.log", "[rank0]: ValueError: bad shard", kind="error", rank=0, node="node-0", ts=t,
             exc_type="ValueError")
    rows.add("node-1/rank1.log", "[rank1]: KeyError: 'labels'", kind="error", rank=1, node="node-1",
             ts=t + timedelta(seconds=0.5), exc_type="KeyError")
    report = run(rows, world_size=2)
    assert report.facts["clock-skew"]["uncertainty_s"] is None
    assert report.facts["clock-skew"]["unknown_nodes"] == ["node-1"]
    v = report.verdict
    assert (v.category, v.culprit_ranks) == ("rank_exception", [0])
    assert report.facts["verdict"]["ordering_ambiguous"] is True
    assert v.summary == (
        "Rank 0 (node-0) raised ValueError at 12:01:40; order uncertain: rank 0 was first by 0.500 s over rank 1 "
        "on a node whose clock could not be compared."
    )
    assert v.confidence == "medium"


# --- contract ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build", [rank_exception_job, seed000_single_node], ids=["rank-exception", "seed000"]
)
def test_report_is_deterministic(build) -> None:
    a = json.dumps(run(build()).to_dict(), sort_keys=True)
    b = json.dumps(run(build()).to_dict(), sort_keys=True)
    assert a == b


def test_schema_categories_match_the_model() -> None:
    assert SCHEMA["properties"]["verdict"]["properties"]["category"]["enum"] == list(CATEGORIES)


def test_empty_timeline_gives_a_valid_unknown_report() -> None:
    report = run(Rows())
    assert (report.verdict.status, report.verdict.category, report.verdict.confidence) == (
        "unknown", "unknown_failure", "low"
    )
    assert report.verdict.summary == "The logs show no error, no exit and no completion; the outcome is unknown."


# --- seed 003 #9: failure after training finished -----------------------------------------------


def seed003_teardown() -> Rows:
    rows = Rows()
    f = "console.log"
    for step in range(3, 11):
        ts = datetime(2026, 5, 27, 19, 49, 13) + timedelta(seconds=(step - 3) * 25.9)
        rows.add(f, f"[{ts:%Y-%m-%d %H:%M:%S},414][train_inner][INFO] - epoch 001: {step} / 127485 loss=12.388, "
                 f"num_updates={step}, lr=6e-07", kind="progress", level="INFO", ts=ts, step=step, loss=12.388)
    done = datetime(2026, 5, 27, 19, 52, 14, 630000)
    rows.add(f, "[2026-05-27 19:52:14,630][hulk.train][INFO] - Stopping training due to num_updates: 10 >= "
             "max_update: 10", kind="lifecycle", level="INFO", ts=done)
    rows.add(f, "[2026-05-27 19:52:34,307][hulk.trainer][INFO] - Saving checkpoint to /train28/checkpoints/"
             "checkpoint-last/shard-0-0.pt", kind="lifecycle", level="INFO", ts=done + timedelta(seconds=20))
    order = [(5, 41), (2, 42), (7, 42), (4, 42), (1, 42), (3, 42), (6, 42)]
    for rank, sec in order:
        ts = datetime(2026, 5, 27, 19, 52, sec)
        rows.add(f, f"[E527 19:52:{sec}.491119810 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated "
                 "with exception: Open shared directory failed. Please check whether input path is valid.",
                 kind="error", level="ERROR", rank=rank, ts=ts)
        rows.add(f, f"[ERROR] 2026-05-27-19:52:{sec} (PID:{222 + rank}, Device:{rank}, RankID:{rank}) ERR02008",
                 kind="error", level="ERROR", rank=rank, ts=ts, pid=222 + rank, error_code="ERR02008")
    rows.add(f, "W0527 19:52:50.852000 281467089262240 torch/distributed/elastic/multiprocessing/api.py:858] "
             "Sending process 222 closing signal SIGTERM", kind="warning", level="WARNING",
             ts=datetime(2026, 5, 27, 19, 52, 50, 852000), pid=222, signal="SIGTERM")
    rows.add(f, "[default0]:Exception in thread Thread-1(default0)::", kind="info", rank=0,
             ts=datetime(2026, 5, 27, 19, 52, 50, 852000), ts_inferred=True)
    return rows


def test_seed003_failure_after_training_finished_is_teardown() -> None:
    report = run(seed003_teardown(), world_size=8)
    v = report.verdict
    assert (v.status, v.category) == ("failed", "teardown_failure")
    assert v.culprit_ranks == [1, 2, 3, 4, 5, 6, 7]
    assert v.summary == (
        "Ranks 1-7 failed during teardown (HCCL watchdog thread terminated with exception: Open shared directory "
        "failed. Please check whether…) after step 10 at 19:52:41."
    )
    assert v.first_failure is not None and (v.first_failure.rank, v.first_failure.step) == (5, None)
    assert v.first_failure.text.startswith("[E527 19:52:41.491119810 compiler_depend.ts:1047] [Rank 0] HCCL watchdog")
    assert report.facts["job-status"]["training_finished_ts"] == "2026-05-27T19:52:14.630000"
    # pid 222 (the agent's SIGTERM) belongs to no line with a rank, so rank 0 is not marked as killed
    assert report.facts["exit-codes"]["terminated_by_agent"] == []
    assert {r.rank: r.state for r in report.ranks} == {0: "unknown", **{r: "failed" for r in range(1, 8)}}


def test_ranks_that_left_early_explain_the_timeout() -> None:
    rows = Rows()
    progress(rows, range(4), range(1, 241), max_steps=10_000, cadence=0.5)
    t_left = T0 + timedelta(seconds=120.3)
    for r in (3, 1):
        rows.add(rank_file(r), f"[rank{r}] time limit 120 s reached after 240 iterations (120.013 s), exiting",
                 kind="lifecycle", rank=r, ts=t_left + timedelta(seconds=0.002 * (r == 1)))
    t_to = t_left + timedelta(seconds=1800.5)
    for r in (0, 2):
        rows.add(rank_file(r), f"[rank{r}]:[E528 15:33:38.835597809 compiler_depend.ts:574] [Rank {r}] Watchdog caught "
                 "collective operation timeout: WorkHCCL(SeqNum=242, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for "
                 "1800485 milliseconds before timing out.", kind="error", level="ERROR", rank=r, ts=t_to, seq=242,
                 op_type="ALLREDUCE", timeout_ms=1800000, ran_ms=1800485)
    report = run(rows, world_size=4)
    v = report.verdict
    assert (v.status, v.category, v.culprit_ranks) == ("failed", "collective_timeout", [1, 3])
    assert v.first_failure is not None and (v.first_failure.rank, v.first_failure.step) == (3, 241)
    assert v.summary == (
        "Ranks 1, 3 (node-0) left the loop early after step 240 at 12:02:00.300 ('time limit 120 s reached after 240 "
        "iterations (120.013 s), exiting'); ranks 0, 2 then timed out in ALLREDUCE SeqNum=242."
    )
    assert finding(report, "collective-sequence:left-early").role == "primary"


def test_numerical_instability_in_a_completed_run() -> None:
    rows = Rows()
    progress(rows, range(2), range(1, 11), max_steps=20)
    for step in range(11, 21):
        for r in range(2):
            ts = T0 + timedelta(seconds=step * 10)
            rows.add(rank_file(r), f"{ts:%Y-%m-%d %H:%M:%S},006 - INFO - [rank {r}] step {step}/20 | loss nan | "
                     "grad_norm nan", kind="progress", rank=r, node="node-0", ts=ts, step=step, max_steps=20)
    report = run(rows, world_size=2)
    v = report.verdict
    assert (v.status, v.category, v.culprit_ranks) == ("completed", "numerical_instability", [])
    assert v.first_failure is not None and (v.first_failure.rank, v.first_failure.step) == (None, 11)
    assert v.summary == "The loss became NaN/inf at step 11 at 12:01:50 on ranks 0, 1 at once; the job still ran to step 20."


def test_first_failing_rank_is_unknown_when_nodes_tie() -> None:
    rows = Rows()
    node_of = lambda r: f"node-{r // 2}"  # noqa: E731
    progress(rows, range(4), range(1, 20), max_steps=25, node_of=node_of)
    t = T0 + timedelta(seconds=190)
    for r in (1, 2):
        rows.add(rank_file(r), "[INFO|text_trainer.py:311] epoch:0 Dataloader finished with drop_last True",
                 kind="lifecycle", rank=r, node=node_of(r), ts=t, ts_inferred=True)
    report = run(rows, world_size=4)
    v = report.verdict
    assert (v.category, v.culprit_ranks) == ("data_exhaustion_desync", [1, 2])
    assert v.first_failure is not None and (v.first_failure.rank, v.first_failure.step) == (None, 20)
    assert report.facts["end-of-data"]["first_drained_rank"] is None


def test_extra_collective_in_eval_hangs_as_a_desync() -> None:
    """Seed 004 (two nodes): one rank has one more eval batch, so one more all_gather."""
    rows = Rows()
    node_of = lambda r: "node-a" if r < 2 else "node-b"  # noqa: E731
    progress(rows, range(4), range(1, 11), max_steps=400, node_of=node_of)
    t = T0 + timedelta(seconds=150)
    for r in (1, 3):
        rows.add(rank_file(r), "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
                 "Connection closed by peer [127.0.0.1]:50918.", kind="error", rank=r, node=node_of(r), ts=t,
                 exc_type="RuntimeError")
    stacks = {
        0: ["_engine_run_backward (torch/autograd/graph.py:825)", "backward (torch/autograd/__init__.py:347)",
            "train (swift_pt.py:210)"],
        2: ["all_gather (torch/distributed/distributed_c10d.py:3800)",
            "_exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:81)",
            "evaluate (swift_pt.py:160)", "train (swift_pt.py:215)"],
    }
    for r in (0, 1, 3, 2):
        f = f"{node_of(r)}/pyspy/rank{r}.txt"
        for depth, frame in enumerate(stacks[2 if r == 2 else 0]):
            rows.add(f, "    " + frame, kind="stack", rank=r, node=node_of(r), record=r, frame=frame,
                     frame_depth=depth, thread=f'Thread {31150 + r} (idle): "MainThread"')
    report = run(rows, world_size=4)
    v = report.verdict
    assert (v.status, v.category, v.culprit_ranks) == ("hung", "data_exhaustion_desync", [2])
    assert v.first_failure is not None and (v.first_failure.rank, v.first_failure.step) == (2, 10)
    assert v.summary == (
        "Rank 2 (node-b) waited in an extra all_gather (from evaluate) that ranks 0, 1, 3 never entered (they were "
        "in backward) at step 10; the ranks ran different numbers of collectives, typically because their data "
        "splits differ in size, and the job hung."
    )
    assert report.findings[0].id == "stack-groups:split"


def test_completed_job_with_a_slow_rank_is_a_straggler() -> None:
    rows = Rows()
    for step in range(1, 41):
        for r in range(4):
            data, comm = (0.250, 0.010) if r == 3 else (0.000, 0.265)
            ts = T0 + timedelta(seconds=step * 0.27, milliseconds=r)
            rows.add(f"logs/train_rank{r}.log", f"{ts:%Y-%m-%d %H:%M:%S},000 - INFO - text_trainer - epoch:0 "
                     f"step:{step}/40 | loss: 5.8 | data_time: {data:.3f}s | comm_time: {comm:.3f}s",
                     kind="progress", rank=r, ts=ts, step=step, max_steps=40, loss=5.8)
    report = run(rows, world_size=4)
    v = report.verdict
    assert (v.status, v.category, v.culprit_ranks) == ("completed", "straggler", [3])
    assert v.first_failure is not None and (v.first_failure.rank, v.first_failure.step) == (3, 1)
    assert v.summary == (
        "Rank 3 was the straggler: 0.250 s per step in data loading against 0.000 s on the other ranks, which "
        "waited for it in communication; the job completed 40 steps at its pace."
    )


# --- watchdogs that disagree across ranks --------------------------------------------------------


def test_watchdog_at_another_op_is_a_collective_mismatch_on_that_rank() -> None:
    rows = Rows()
    progress(rows, range(8), range(1, 5), max_steps=100)
    t = T0 + timedelta(seconds=700)
    for r in range(8):
        op = "ALLREDUCE" if r == 6 else "_ALLGATHER_BASE"
        watchdog_timeout(rows, r, t, seq=2802, enq=2802, done=2801, op=op)
    verdict = run(rows).verdict
    assert (verdict.status, verdict.category, verdict.culprit_ranks) == ("failed", "collective_mismatch", [6])


def test_watchdog_in_an_earlier_collective_names_the_rank_behind() -> None:
    rows = Rows()
    progress(rows, range(8), range(1, 5), max_steps=100)
    t = T0 + timedelta(seconds=700)
    for r in range(8):
        watchdog_timeout(rows, r, t, seq=2801 if r == 3 else 2802, enq=2801 if r == 3 else 2802,
                         done=2800 if r == 3 else 2801)
    verdict = run(rows).verdict
    assert (verdict.status, verdict.category, verdict.culprit_ranks) == ("failed", "straggler", [3])


def test_monitored_barrier_names_the_ranks_that_never_arrived(write_job) -> None:
    # rank 0's monitored_barrier(wait_all_ranks=True) gives up on ranks 1 and 3 (ProcessGroupGloo.cpp's wording)
    job = write_job({"rank0.log": "\n".join([
        "[rank0]:[I1203 10:00:00.000000000 ProcessGroupNCCL.cpp:905] [PG 0 Rank 0] ProcessGroupNCCL initialization "
        "options: size: 4, global rank: 0",
        "step 1/100 loss=2.1",
        "step 2/100 loss=2.0",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/workspace/train.py", line 88, in <module>',
        "[rank0]:     dist.monitored_barrier(group=gloo_group, timeout=timedelta(seconds=30), wait_all_ranks=True)",
        "[rank0]: RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms",
    ]) + "\n"})
    verdict = postmortem.api.analyze(job).report.verdict
    assert (verdict.status, verdict.category, verdict.culprit_ranks) == ("failed", "straggler", [1, 3])
    assert verdict.summary.startswith("Ranks 1, 3 never arrived: rank 0 waited for them (monitoredBarrier)")


def test_torchrun_root_cause_entry_names_the_first_failure(write_job) -> None:
    # the ChildFailedError summary of torch/distributed/elastic/multiprocessing/errors/__init__.py:
    # two ranks exited with code 1 in the same second, nothing else printed
    entry = ("  time      : 2026-11-30_08:12:44\n  host      : gpu-node-07\n  rank      : {r} (local_rank: {r})\n"
             "  exitcode  : 1 (pid: {pid})\n  error_file: <N/A>\n"
             "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n")
    job = write_job({"console.log": (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + "\ntrain.py FAILED\n"
        + "-" * 60 + "\nFailures:\n[1]:\n" + entry.format(r=1, pid=31878) + "-" * 60
        + "\nRoot Cause (first observed failure):\n[0]:\n" + entry.format(r=0, pid=31877) + "=" * 60 + "\n"
    )})
    verdict = postmortem.api.analyze(job).report.verdict
    # an exit status names no cause: unknown_failure; torchrun's root-cause entry names who was first
    assert (verdict.status, verdict.category, verdict.first_failure.rank) == ("failed", "unknown_failure", 0)
    assert "order uncertain" not in verdict.summary
