"""Per-family parsing on real-format lines (quoted from shared/reference/log-formats.md and the seeds)."""

from __future__ import annotations

import gzip
from datetime import datetime

import polars as pl
import pytest

from postmortem.api import load_timeline
from postmortem.timeline import timeline_from_text


def row(frame: pl.DataFrame, line: int) -> dict:
    return frame.filter(pl.col("line") == line).row(0, named=True)


def test_torchrun_console_tee_prefix_gives_local_rank_and_single_node_global_rank():
    text = (
        "[default5]:[E527 19:52:41.491119810 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.\n"
        "[default5]:[ERROR] 2026-05-27-19:52:41 (PID:227, Device:5, RankID:5) ERR02008\n"
        "W0527 19:52:50.852000 281467089262240 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 222 closing signal SIGTERM\n"
    )
    tl = timeline_from_text(text)
    first = row(tl, 1)
    assert first["family"] == "torchrun_console"
    assert first["local_rank"] == 5 and first["rank"] == 5 and first["rank_source"] == "inferred"
    assert first["message"].startswith("[E527 19:52:41")
    # c10 headers carry no year: it comes from the job's other lines; the 9-digit fraction is not wall time
    assert first["ts"] == datetime(2026, 5, 27, 19, 52, 41)
    assert first["level"] == "ERROR" and first["kind"] == "error"
    second = row(tl, 2)
    assert second["rank"] == 5 and second["rank_source"] == "content"
    assert second["error_code"] == "ERR02008" and second["pid"] == 227
    agent = row(tl, 3)
    assert agent["rank"] is None
    assert agent["signal"] == "SIGTERM" and agent["pid"] == 222
    assert agent["ts"] == datetime(2026, 5, 27, 19, 52, 50, 852000)


def test_rank_prefix_traceback_is_one_record_per_rank_even_when_interleaved():
    text = (
        "[rank0]: Traceback (most recent call last):\n"
        "[rank1]: Traceback (most recent call last):\n"
        '[rank0]:   File "/app/train.py", line 96, in <module>\n'
        '[rank1]:   File "/app/train.py", line 12, in <module>\n'
        "[rank0]: RuntimeError: NCCL Error 3: internal error\n"
        "[rank1]: KeyError: 'labels'\n"
    )
    tl = timeline_from_text(text)
    records = tl.group_by("rank").agg(pl.col("record").unique()).sort("rank")
    assert [len(r) for r in records["record"].to_list()] == [1, 1]
    assert records["record"].to_list()[0] != records["record"].to_list()[1]
    assert row(tl, 5)["exc_type"] == "RuntimeError" and row(tl, 5)["rank"] == 0
    assert row(tl, 6)["exc_type"] == "KeyError" and row(tl, 6)["rank"] == 1


def test_nccl_watchdog_fields():
    text = (
        "[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.\n"
        "[rank5]:[E626 16:48:25.440238649 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank 5]  failure detected by watchdog at work sequence id: 120049 PG status: last enqueued work: 120051, last completed work: 120048\n"
    )
    tl = timeline_from_text(text)
    a, b = row(tl, 1), row(tl, 2)
    assert (a["rank"], a["seq"], a["op_type"], a["numel"], a["timeout_ms"], a["ran_ms"]) == (
        0, 7753, "_REDUCE_SCATTER_BASE", 544997376, 600000, 600061,
    )
    assert (b["rank"], b["seq"], b["last_enqueued"], b["last_completed"], b["pg"]) == (5, 120049, 120051, 120048, "0(default_pg)")


def test_child_failed_error_block_attributes_exit_code_to_rank_and_host():
    text = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
trainer.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-07-09_17:05:39
  host      : distributed-training.us-central1-a.c.lance-dev-ayush.internal
  rank      : 3 (local_rank: 3)
  exitcode  : -6 (pid: 56213)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 56213
============================================================
"""
    tl = timeline_from_text(text)
    exit_row = tl.filter(pl.col("exit_code").is_not_null()).row(0, named=True)
    assert exit_row["line"] == 13
    assert (exit_row["rank"], exit_row["local_rank"], exit_row["exit_code"], exit_row["pid"]) == (3, 3, -6, 56213)
    assert exit_row["ts"] == datetime(2025, 7, 9, 17, 5, 39)
    assert exit_row["node"] == "distributed-training.us-central1-a.c.lance-dev-ayush.internal"
    assert tl.filter(pl.col("line").is_between(1, 16))["record"].n_unique() == 1
    assert row(tl, 15)["signal"] == "SIGABRT"


def test_trainer_progress_formats():
    text = "\n".join([
        " [2024-07-15 15:27:27] iteration      100/    1000 | consumed samples:          800 | elapsed time per iteration (ms): 742.5 | learning rate: 1.000000E-05 | global batch size:     8 | lm loss: 9.911994E-01 | loss scale: 1.0 | grad norm: 10.575 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        "[2026-05-27 19:49:13,414][train_inner][INFO] - epoch 001: 3 / 127485 loss=12.388, ce_loss=12.3729, zloss=151.206, ppl=5304.07, wps=9931.1, ups=0.04, wpb=262144, bsz=64, num_updates=3, lr=6e-07, gnorm=12.293, clip=100, train_wall=26.3889, wall=77.5745",
        "{'loss': 1.8234, 'grad_norm': 3.1, 'learning_rate': 9.8e-06, 'epoch': 0.25, 'global_step/max_steps': '12/400', 'elapsed_time': '8h 25m 20s'}",
        "Train:   3%|▎         | 12/400 [00:36<19:24,  3.00s/it]",
        "Val: 100%|██████████| 5/5 [00:02<00:00,  2.10it/s]",
        "2020-07-17 07:11:02 | INFO | train_inner | epoch 001:   2800 / 160368 loss=9.255, ppl=611.12, num_updates=2800, lr=2.8e-05, gnorm=3.23, wall=1236",
        "[2024-05-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=30, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]",
    ])
    tl = timeline_from_text(text, file="logs/rank_0.log")
    assert tl["step"].to_list() == [100, 3, 12, 12, None, 2800, 30]
    assert tl["max_steps"].to_list()[:4] == [1000, None, 400, 400]
    assert row(tl, 1)["loss"] == 0.9911994 and row(tl, 1)["lr"] == 1e-05 and row(tl, 1)["grad_norm"] == 10.575
    assert row(tl, 2)["loss"] == 12.388 and row(tl, 2)["grad_norm"] == 12.293
    assert row(tl, 3)["loss"] == 1.8234
    assert set(tl["rank"].to_list()) == {0} and set(tl["rank_source"].to_list()) == {"path"}
    assert row(tl, 1)["ts"] == datetime(2024, 7, 15, 15, 27, 27)
    assert row(tl, 2)["ts"] == datetime(2026, 5, 27, 19, 49, 13, 414000)


def test_nan_loss_is_parsed_as_nan():
    tl = timeline_from_text("2024-01-01 10:00:00,000 - INFO - step 7 loss=nan lr=1e-4\n", file="rank3.log")
    r = row(tl, 1)
    assert r["step"] == 7 and r["rank"] == 3 and r["loss"] != r["loss"]


@pytest.mark.parametrize(
    ("line", "loss", "grad_norm", "lr"),
    [
        ("{'loss': -inf, 'grad_norm': nan, 'learning_rate': 1e-05}", float("-inf"), "nan", 1e-05),
        ("{'loss': 'NaN', 'grad_norm': '12.', 'learning_rate': '+3E-4'}", "nan", 12.0, 3e-4),
        ("step 3 | lm loss: 9.911994E-01 | grad norm: 10.575 | learning rate: 1.000000E-05 |", 0.9911994, 10.575, 1e-05),
        ("step 3 loss=2.5e gnorm=Inf lr=-1", 2.5, float("inf"), -1.0),
        ("step 3 loss: x lossy=1 gnorm=",  None, None, None),
    ],
)
def test_metric_values(line: str, loss: object, grad_norm: object, lr: object):
    r = row(timeline_from_text(line + "\n", file="rank0.log"), 1)
    for name, want in (("loss", loss), ("grad_norm", grad_norm), ("lr", lr)):
        got = r[name]
        assert (got != got) if want == "nan" else got == want, (name, got)


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("[W1206 18:44:12.715298746 ProcessGroupNCCL.cpp:1071] Warning: oops", "WARNING"),
        ("F0801 13:23:17.366000 1 c10d.py:1] ERROR: fatal", "CRITICAL"),
        ("2024-01-01 10:00:00,000 - WARN - train - slow", "WARNING"),
        ("[2024-01-01 10:00:00] [FATAL] boom", "CRITICAL"),
        ("RuntimeError: Error: x", "ERROR"),
        ("model WARNINGS: none, INFO|x", "INFO"),
        ("Warning", "WARNING"),
        ("WARNINGS and DEBUGGING", None),
    ],
)
def test_levels(line: str, level: str | None):
    assert row(timeline_from_text(line + "\n", file="rank0.log"), 1)["level"] == level


def test_redrawn_lines_show_their_last_segment_and_keep_a_hidden_bar():
    text = (
        "2024-01-01 10:00:00,000 - INFO - start\r\n"  # CRLF
        "Train:  12%|#  | 12/100 [00:36<19:20,  3.00s/it]\rTrain:  13%|#  | 13/100 [00:37<19:20,  3.00s/it]\n"
        "Train:  13%|#  | 13/100 [00:37<19:20,  3.00s/it]\r{'loss': 1.25, 'grad_norm': 0.5, 'learning_rate': 1e-05}\n"
        "step 20 loss=1.0\r   \r\n"  # a trailing blank redraw shows the segment before it
    )
    tl = timeline_from_text(text, file="rank0.log")
    assert row(tl, 1)["message"] == "2024-01-01 10:00:00,000 - INFO - start"
    assert row(tl, 2)["message"].startswith("Train:  13%") and row(tl, 2)["step"] == 13 and row(tl, 2)["max_steps"] == 100
    dict_line = row(tl, 3)
    assert dict_line["message"].startswith("{'loss': 1.25") and dict_line["step"] == 13 and dict_line["loss"] == 1.25
    assert row(tl, 4)["message"] == "step 20 loss=1.0" and row(tl, 4)["step"] == 20


def test_ascend_ei_block_is_one_record_with_code():
    text = (
        "[ERROR] 2026-05-22-12:08:27 (PID:575229, Device:0, RankID:0) ERR02200 DIST call hccl api failed.\n"
        "[PID: 575229] 2026-05-22-12:08:27.088.244 Ranktable_Detect_Failed(EI0015): Failed to collect cluster information of the communicator based on rootInfo detection. Reason: Within the timeout period, all ranks in the communication domain failed to connect to the server..\n"
        "        Solution: 1. Check whether all ranks in the communicator have delivered the communicator creation interface.\n"
        "        TraceBack (most recent call last):\n"
        "        Failed to collect cluster information of the communicator based on rootInfo detection. Reason: rank num[8]is different with rank list size[1] in total topo rank info..\n"
    )
    tl = timeline_from_text(text, file="plog/plog-575229_20260522120800123.log")
    assert tl["family"][0] == "ascend_plog"
    header = row(tl, 2)
    assert header["error_code"] == "EI0015" and header["pid"] == 575229
    assert header["ts"] == datetime(2026, 5, 22, 12, 8, 27, 88244)
    assert tl.filter(pl.col("line") >= 2)["record"].n_unique() == 1
    assert row(tl, 1)["error_code"] == "ERR02200" and row(tl, 1)["rank"] == 0


def test_cann_code_at_the_start_of_a_line_is_an_error_line():
    # the code is the line's first word: no literal hint before it (torch_npu's ERR00100 line and
    # CANN's EI0002 text, as the error-code reference words them)
    text = (
        "[ERROR] 2026-11-02-07:41:10 (PID:48113, Device:3, RankID:101) ERR00100 PTA call acl api failed.\n"
        "EI0002: [PID: 48113] 2026-11-02-07:41:10.204.517 The wait execution of the Notify register times out. "
        "Reason: The Notify register has not received the Notify record from remote rank: [7].\n"
        "EK0001: some other component's code\n"
    )
    tl = timeline_from_text(text, file="rank101.log")
    ei = row(tl, 2)
    assert (ei["kind"], ei["error_code"], ei["pid"]) == ("error", "EI0002", 48113)
    assert ei["record"] is not None and ei["record"] != row(tl, 3)["record"]
    assert (row(tl, 3)["kind"], row(tl, 3)["error_code"]) == ("error", "EK0001")


def test_nccl_debug_file_host_and_pid():
    text = (
        "a100-st-p4d24xlarge-22:183006:183220 [1] NCCL INFO NCCL version 2.14.3+cuda11.7\n"
        "kolyoz1:27255:27906 [0] NCCL INFO ncclCommInitRank comm 0x555de9802860 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 42000 commId 0x996ee6f117cb8e1e - Init START\n"
        "kolyoz1:27255:27906 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer a100<47861>\n"
    )
    tl = timeline_from_text(text, file="nccl.kolyoz1.27255")
    assert tl["family"][0] == "nccl_debug"
    assert row(tl, 2)["host"] == "kolyoz1" and row(tl, 2)["pid"] == 27255 and row(tl, 2)["rank"] == 0
    assert row(tl, 3)["level"] == "WARNING"


def test_pyspy_text_dump_rows_are_frames_with_thread_records():
    text = (
        "Process 4321: python train.py --config a.yaml\n"
        "Python v3.11.7 (/usr/bin/python3.11)\n\n"
        'Thread 4321 (idle): "MainThread"\n'
        "    barrier (torch/distributed/distributed_c10d.py:4888)\n"
        "    destroy_distributed (hyper_parallel/auto_models/trainer/base.py:776)\n"
        "    <module> (train.py:40)\n"
        'Thread 4400 (active): "pt_autograd_0"\n'
        "    wait (threading.py:327)\n"
    )
    tl = timeline_from_text(text, file="pyspy/rank3.txt")
    frames = tl.filter(pl.col("frame").is_not_null())
    assert frames["frame"].to_list()[0] == "barrier (torch/distributed/distributed_c10d.py:4888)"
    assert frames["frame_depth"].to_list() == [0, 1, 2, 0]
    assert frames["record"].n_unique() == 2
    assert set(frames["rank"].to_list()) == {3}
    assert set(frames["kind"].to_list()) == {"stack"}
    assert frames["pid"].to_list() == [4321] * 4


def test_pyspy_json_dump():
    text = (
        '[{"pid": 11, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 11, "active": true, "owns_gil": false,'
        ' "frames": [{"name": "all_reduce", "filename": "/x/distributed_c10d.py", "module": null, "short_filename": "distributed_c10d.py",'
        ' "line": 2501, "locals": null, "is_entry": false}], "process_info": null}]'
    )
    tl = timeline_from_text(text, file="pyspy/rank_2.json")
    assert tl["family"][0] == "pyspy_json"
    frame = tl.filter(pl.col("frame").is_not_null()).row(0, named=True)
    assert frame["frame"] == "all_reduce (distributed_c10d.py:2501)" and frame["rank"] == 2
    assert "(active)" in frame["thread"]


def test_slurm_labels_and_kubectl_timestamps(write_job):
    job = write_job({
        "slurm-123.out": "0: [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] boom\n1: [rank9]:hello world\n0: step 5 loss=1.0\n",
        "pods/myjob-worker-1.log": "2024-02-27T21:35:32.106313123Z [default0]:step 3 loss 2.0\n",
        "pods/myjob-master-0.log": "2024-02-27T21:35:31.000000000Z [default0]:step 3 loss 2.0\n",
    })
    tl = load_timeline(job, keep_all=True).frame
    slurm = tl.filter(pl.col("file") == "slurm-123.out")
    assert slurm["family"][0] == "slurm"
    # torchrun inside srun: the label is the node index, the [rankN]: prefix the rank
    assert slurm["rank"].to_list() == [0, 9, None]
    assert slurm["message"][0].startswith("[E321")
    worker = tl.filter(pl.col("file") == "pods/myjob-worker-1.log").row(0, named=True)
    assert worker["family"] == "k8s_pod" and worker["node"] == "myjob-worker-1" and worker["node_rank"] == 2
    assert worker["ts"] == datetime(2024, 2, 27, 21, 35, 32, 106313) and worker["step"] == 3


def test_logdir_tree_on_two_nodes_gives_global_ranks(write_job):
    files = {}
    for node, node_rank in (("node-a", 0), ("node-b", 1)):
        files[f"{node}/console.log"] = f"torchrun --nnodes=2 --nproc_per_node=2 --node_rank={node_rank} train.py\n"
        for local in (0, 1):
            files[f"{node}/logs/none_abc/attempt_0/{local}/stderr.log"] = f"2024-01-01 10:00:0{local},000 INFO step {3 + node_rank} loss=1.0\n"
    tl = load_timeline(write_job(files), keep_all=True).frame
    ranks = (
        tl.filter(pl.col("file").str.ends_with("stderr.log"))
        .select("file", "node", "node_rank", "local_rank", "rank", "rank_source")
        .sort("rank")
    )
    assert ranks["rank"].to_list() == [0, 1, 2, 3]
    assert ranks["node"].to_list() == ["node-a", "node-a", "node-b", "node-b"]
    assert set(ranks["rank_source"].to_list()) == {"inferred"}


def test_gzip_file_is_read_transparently(write_job):
    job = write_job({"rank_4.log.gz": gzip.compress(b"2024-01-01 10:00:00,000 INFO step 9 loss=0.5\n")})
    tl = load_timeline(job).frame
    assert tl["rank"].to_list() == [4] and tl["step"].to_list() == [9]


def test_year_less_and_us_dates_and_inherited_times():
    text = "05/11/2024 10:00:00 - INFO - __main__ - start\n  continuation without time\n"
    tl = timeline_from_text(text, file="train.log")
    assert row(tl, 1)["ts"] == datetime(2024, 5, 11, 10, 0, 0)
    assert row(tl, 2)["ts"] == datetime(2024, 5, 11, 10, 0, 0) and row(tl, 2)["ts_inferred"] is True
    assert row(tl, 1)["ts_inferred"] is False


def test_year_less_header_on_29_february_of_a_common_year_inherits_a_time():
    # the dated lines say 2027, which has no 29 February: the c10 header's date cannot be it
    text = (
        "2027-02-28 23:59:00,000 - INFO - train - step 1 loss=2.0\n"
        "[W0229 00:00:01.000000000 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0 Rank 0] warning\n"
        "[W0301 00:00:02.000000000 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0 Rank 0] warning\n"
    )
    tl = timeline_from_text(text, file="train.log")
    assert row(tl, 2)["ts"] == datetime(2027, 2, 28, 23, 59) and row(tl, 2)["ts_inferred"] is True
    assert row(tl, 3)["ts"] == datetime(2027, 3, 1, 0, 0, 2) and row(tl, 3)["ts_inferred"] is False


def test_capitalised_rank_tag_at_line_start_names_each_lines_rank():
    # print-style "[Rank N] ..." lines of several ranks in one file: each line its own rank
    text = "[Rank 3] barrier reached\n[Rank 4] barrier reached\n[rank 5] barrier reached\n"
    tl = timeline_from_text(text, file="train.log")
    assert tl["rank"].to_list() == [3, 4, 5] and set(tl["rank_source"].to_list()) == {"content"}


def test_srun_label_alone_is_the_global_rank(write_job):
    job = write_job({"slurm-9.out": "00: step 1 loss=2.0\n13: step 1 loss=2.1\n"})
    tl = load_timeline(job, keep_all=True).frame
    assert tl["rank"].to_list() == [0, 13] and set(tl["rank_source"].to_list()) == {"prefix"}


def test_zstd_and_truncated_zstd_are_read(write_job):
    import zstandard

    body = b"".join(b"2024-01-01 10:00:0%d,000 INFO step %d loss=%d.5\n" % (i % 10, i, i) for i in range(1, 20001))
    packed = zstandard.ZstdCompressor().compress(body)
    job = write_job({
        "rank_6.log.zst": packed,
        "rank_7.log.zst": packed[: len(packed) // 2],  # cut after some complete blocks
        "rank_8.log.zst": packed[:100],  # cut inside the first block: nothing to read
    })
    timeline = load_timeline(job)
    whole = timeline.frame.filter(pl.col("file") == "rank_6.log.zst")
    assert whole["rank"].unique().to_list() == [6] and whole["step"].max() == 20000
    cut = timeline.frame.filter(pl.col("file") == "rank_7.log.zst")
    notes = {n.rel: n.reason for n in timeline.notes}
    assert cut.height > 100 and cut["step"].max() < 20000
    assert notes["rank_7.log.zst"].startswith("truncated zstd archive")
    skipped = {s.rel: s.reason for s in timeline.inventory.skipped}
    assert skipped["rank_8.log.zst"] == "truncated zstd archive: not one complete block"


def test_a_dropped_lines_time_is_inherited_but_never_over_a_time_of_the_lines_own(write_job):
    bar = "Train:  12%|#         | 12/100 [00:36<19:24,  3.00s/it]"
    chatter = "- INFO - swift - data loader fetched batch of 32768 tokens in 0.03s"
    job = write_job({
        # the kubelet's receive time is the bar's own: it wins over the dropped line's time
        "pods/myjob-worker-0.log": f"2024-02-27T21:35:30.000000000Z 2024-02-27 21:35:29,000 {chatter}\n2024-02-27T21:35:32.000000000Z {bar}\n",
        # a year-less c10 header handed on keeps its year-less handling (the job's year, 2026)
        "logs/rank_0.log": f"2026-11-20 09:00:00,000 - WARNING - swift - slow start\nI1120 10:00:05.000000 1234 loader.cpp:12] prefetched 4 shards\n{bar}\n",
    })
    tl = load_timeline(job).frame
    pod = tl.filter(pl.col("file") == "pods/myjob-worker-0.log").row(0, named=True)
    assert pod["line"] == 2 and pod["ts"] == datetime(2024, 2, 27, 21, 35, 32) and pod["ts_inferred"] is False
    rank = tl.filter((pl.col("file") == "logs/rank_0.log") & (pl.col("step") == 12)).row(0, named=True)
    assert rank["line"] == 3 and rank["ts"] == datetime(2026, 11, 20, 10, 0, 5) and rank["ts_inferred"] is True


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("2026-11-20 10:00:03,517", datetime(2026, 11, 20, 10, 0, 3, 517000)),  # Python logging
        ("2026-11-20 10:00:03.517", datetime(2026, 11, 20, 10, 0, 3, 517000)),
        ("2026-11-20T10:00:03.517123", datetime(2026, 11, 20, 10, 0, 3, 517123)),
        ("2026-11-20_10:00:03", datetime(2026, 11, 20, 10, 0, 3)),  # ChildFailedError's "time"
        ("2026-11-20 10:00:03,5", datetime(2026, 11, 20, 10, 0, 3, 500000)),
        ("2026-11-20T10:00:03.517123456", datetime(2026, 11, 20, 10, 0, 3, 517123)),
        ("2026-11-20 10:00:03,51x", datetime(2026, 11, 20, 10, 0, 3, 510000)),  # (the stamp ends at the digits)
        ("2025-10-24-11:18:29.499.235", datetime(2025, 10, 24, 11, 18, 29, 499235)),  # CANN
        ("11/20/2026 10:00:03", datetime(2026, 11, 20, 10, 0, 3)),
    ],
)
def test_every_dated_stamp_form_gives_its_time(stamp: str, expected: datetime):
    tl = timeline_from_text(f"{stamp} - WARNING - train - slow step\n", file="train.log")
    assert row(tl, 1)["ts"] == expected and row(tl, 1)["ts_inferred"] is False
