"""Dropping chatter before extraction is only a speed-up: the kept rows are exactly those that
parsing every line and then keeping the notable ones gives."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from postmortem.parsers import patterns as P
from postmortem.parsers.text import _inherit_dropped_times, _keep_rows, parse_files
from postmortem.rule_engine import load_rules

LINES = [
    # progress in several formats, each repeated so that "same step as the line before" matters
    "Train:  12%|#         | 12/100 [00:36<19:24,  3.00s/it]",
    "Train:  12%|#         | 12/100 [00:36<19:24,  3.00s/it]\rTrain:  13%|#         | 13/100 [00:37<19:20,  3.00s/it]",
    "Train:  13%|#         | 13/100 [00:37<19:20,  3.00s/it]\r{'loss': 1.25, 'grad_norm': 0.5, 'learning_rate': 1e-05}",
    "[2026-11-20 10:00:03,517] [INFO] [logging.py:96:log_dist] [Rank 0] step=12, skipped=0, lr=[1e-05]",
    "[2026-11-20 10:00:03,517] [INFO] [logging.py:96:log_dist] [Rank 0] step=13, skipped=0, lr=[1e-05]",
    "{'loss': 2.4, 'grad_norm': 1.1, 'learning_rate': 1e-05, 'global_step/max_steps': '12/100'}",
    " iteration       12/     100 | consumed samples: 96 | lm loss: 2.41E+00 |",
    "[rank3] step 12 loss 2.5",
    "2026-11-20 10:00:04,001 - INFO - swift - rank: 3, local_rank: 3, world_size: 8",
    # chatter: what the prefilter drops
    "2026-11-20 10:00:05,001 - INFO - swift - data loader fetched batch of 32768 tokens in 0.03s",
    "2026-11-20 10:00:05,002 - DEBUG - transformers.modeling_utils - attention mask cache hit for bucket 3",
    "some plain text without anything in it",
    "",
    # prefixed consoles, errors, records
    "[default0]:2026-11-20 10:00:06,000 - INFO - train - step 12",
    "[default1]:2026-11-20 10:00:06,000 - INFO - train - step 12",
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "train.py", line 9, in <module>',
    "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "W1120 10:00:00.000000 1234 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable",
    "[W1120 10:00:07.000000000 ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 3] using GPU 3",
    "gpu-node-001:4003:4003 [3] NCCL INFO NCCL version 2.21.5+cuda12.4",
    "[ERROR] 2026-05-27-19:52:41 (PID:227, Device:5, RankID:5) ERR02008 DIST call hccl api failed.",
    "torchrun --nnodes=2 --nproc_per_node=8 --node_rank=1 train.py",
    "2026-11-20 10:00:08,000 - WARNING - swift - gradient overflow at step 40, skipping update",
]
KEEP = load_rules().keep_pattern()


def _files(texts: dict[str, str]) -> pl.DataFrame:
    family = {"console.log": "torchrun_console", "logs/rank_3.log": "trainer_log", "plog-1_2026.log": "ascend_plog"}
    return pl.DataFrame(
        {"_fid": list(range(len(texts))), "family": [family[name] for name in texts], "text": list(texts.values())}
    )


def _same_rows(files: pl.DataFrame, keep: str | None) -> None:
    # a record is named by its first row's index, which dropping renumbers: compare the grouping
    same_records = pl.col("_rec_row").rank("dense")
    fast = parse_files(files, keep=keep, keep_all=False).with_columns(same_records)
    slow = _inherit_dropped_times(_keep_rows(parse_files(files, keep_all=True), keep)).with_columns(same_records)
    assert sorted(fast.columns) == sorted(slow.columns)
    slow = slow.select(fast.columns)
    assert fast.equals(slow), (fast.select("_fid", "line", "message"), slow.select("_fid", "line", "message"))


texts = st.lists(st.sampled_from(LINES), max_size=60).map("\n".join)


@settings(max_examples=80, deadline=None)
@given(texts, texts, texts, st.booleans())
def test_dropping_chatter_early_keeps_exactly_the_notable_rows(console: str, trainer: str, plog: str, with_rules: bool):
    files = _files({"console.log": console, "logs/rank_3.log": trainer, "plog-1_2026.log": plog})
    _same_rows(files, KEEP if with_rules else None)


def test_chatter_between_two_lines_of_one_step_keeps_both():
    # the second bar repeats step 12, but a dropped chatter line stood between them
    trainer = "\n".join([LINES[0], LINES[9], LINES[0], LINES[0]])
    files = _files({"logs/rank_3.log": trainer})
    kept = parse_files(files, keep_all=False)
    assert kept["line"].to_list() == [1, 3]
    _same_rows(files, None)


def test_the_prefilter_pattern_covers_every_kept_kind():
    # outside records (whose files are kept whole) and redraws, every line the full parser keeps
    # is one the prefilter lets through, and every line it drops is chatter
    plain = [line for line in LINES if "\r" not in line and not line.startswith("[rank1]")]
    files = _files({"logs/rank_3.log": "\n".join(plain)})
    parsed = parse_files(files, keep_all=True)
    kept = _keep_rows(parsed, None)
    assert kept["message"].str.contains(P.KEPT_SUPERSET).all()
    dropped = parsed.join(kept.select("line"), on="line", how="anti")["message"].to_list()
    # the log_dist line repeats the bar's step 12 and carries no metric; the rest is chatter
    assert dropped == [LINES[3], LINES[9], LINES[10], LINES[11], ""]
    assert kept.height == len(plain) - len(dropped)


@settings(max_examples=60, deadline=None)
@given(texts, texts, texts)
def test_a_batch_parses_each_file_as_it_would_alone(trainer: str, console: str, plog: str):
    # only the files with a prefix hint take the prefix path, and their rows are written back in
    # place: a batch of mixed files gives each file's rows as parsing it alone does
    files = _files({"logs/rank_3.log": trainer, "console.log": console, "plog-1_2026.log": plog})
    same_records = pl.col("_rec_row").rank("dense").over("_fid")
    batch = parse_files(files, keep_all=False).with_columns(same_records)
    alone = pl.concat(
        [parse_files(files.slice(i, 1), keep_all=False) for i in range(files.height)], how="diagonal_relaxed"
    ).with_columns(same_records)
    assert batch.select(alone.columns).equals(alone), (batch.select("_fid", "line", "message"), alone.select("_fid", "line", "message"))


def test_prefixed_lines_between_unprefixed_files_are_stripped_in_place():
    files = _files({"logs/rank_3.log": LINES[11], "console.log": f"{LINES[13]}\n{LINES[15]}", "plog-1_2026.log": LINES[11]})
    parsed = parse_files(files, keep_all=True)
    assert parsed.select("_fid", "line", "pfx_local", "pfx_rank").rows() == [
        (0, 1, None, None), (1, 1, 0, None), (1, 2, None, 1), (2, 1, None, None)
    ]
    assert parsed["message"].to_list() == [LINES[11], LINES[13].removeprefix("[default0]:"), "Traceback (most recent call last):", LINES[11]]


def test_a_kept_line_inherits_the_time_of_the_dropped_line_before_it():
    # per step: a tqdm bar (no time), DeepSpeed's log_dist (a time, dropped: it repeats the
    # bar's step), ms-swift's metrics (no time), chatter (a time, dropped)
    trainer = "\n".join([
        "2026-11-20 10:00:01,000 - INFO - swift - data loader fetched batch of 32768 tokens in 0.03s",
        "Train:  12%|#         | 12/100 [00:36<19:24,  3.00s/it]",
        "[2026-11-20 10:00:03,517] [INFO] [logging.py:96:log_dist] [Rank 0] step=12, skipped=0, lr=[1e-05]",
        "{'loss': 2.4, 'grad_norm': 1.1, 'learning_rate': 1e-05, 'global_step/max_steps': '12/100'}",
        "2026-11-20 10:00:05,001 - INFO - swift - data loader fetched batch of 32768 tokens in 0.03s",
        "2026-11-20 10:00:06,002 - DEBUG - transformers.modeling_utils - attention mask cache hit for bucket 3",
        "Train:  13%|#         | 13/100 [00:39<19:20,  3.00s/it]",
    ])
    files = _files({"logs/rank_3.log": trainer})
    kept = parse_files(files, keep_all=False)
    assert kept.select("line", "step", pl.col("ts").dt.strftime("%H:%M:%S%.3f"), "_carried").rows() == [
        (2, 12, "10:00:01.000", True),
        (4, 12, "10:00:03.517", True),
        (7, 13, "10:00:06.002", True),
    ]
    _same_rows(files, None)
