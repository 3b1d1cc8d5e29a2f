"""Hand-built reports and timelines for the renderer tests (no analysis runs here).

* :func:`seed000_hang` — seed 000 on one node: 8 ranks reach step 76, ranks 2, 5 and 6 run out
  of data at step 77 and wait in the teardown barrier while the others sit in the forward pass.
* :func:`watchdog_1024` — 1,024 ranks on 128 nodes: rank 517 never enters ALLREDUCE SeqNum=24031
  (stuck in its dataloader); the other 1,023 time out after 600 s and abort.

The builders are imported by the test_render* modules; this module holds no test of its own
except a check that the fixtures are consistent.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl

from postmortem.model import (
    Evidence,
    Finding,
    FirstFailure,
    JobInfo,
    RankState,
    Report,
    SkippedFile,
    StackGroup,
    Verdict,
)
from postmortem.schema import conform

T0 = datetime(2025, 6, 26, 16, 0, 0)


def _frame(columns: dict[str, list | np.ndarray]) -> pl.DataFrame:
    return conform(pl.DataFrame(columns))


# --------------------------------------------------------------------------- seed 000 hang

SEED_NODE = "node-a"
SEED_CULPRITS = [2, 5, 6]


def seed000_timeline() -> pl.DataFrame:
    """Progress lines for steps 1-76 on every rank, then 'Dataloader finished' on ranks 2, 5, 6."""
    ranks, steps, ts, lines, msgs = [], [], [], [], []
    for r in range(8):
        for s in range(1, 77):
            ranks.append(r)
            steps.append(s)
            ts.append(T0 + timedelta(seconds=7.2 * s + 0.05 * r))
            lines.append(100 + s * 8 + r)
            msgs.append(f"[rank{r}]: [INFO|text_trainer.py:402] step {s}/100 loss=2.{s:03d} MFU=41.2%")
    progress = _frame(
        {
            "file": ["console.log"] * len(ranks),
            "line": lines,
            "family": ["torchrun_console"] * len(ranks),
            "node": [SEED_NODE] * len(ranks),
            "rank": ranks,
            "ts": ts,
            "kind": ["progress"] * len(ranks),
            "level": ["INFO"] * len(ranks),
            "step": steps,
            "message": msgs,
        }
    )
    finished = _frame(
        {
            "file": ["console.log"] * 3,
            "line": [742, 745, 748],
            "family": ["torchrun_console"] * 3,
            "node": [SEED_NODE] * 3,
            "rank": SEED_CULPRITS,
            "ts": [T0 + timedelta(seconds=7.2 * 76 + 3.1 + 0.2 * i) for i in range(3)],
            "kind": ["lifecycle"] * 3,
            "level": ["INFO"] * 3,
            "step": [77] * 3,
            "message": ["[INFO|text_trainer.py:311] epoch:0 Dataloader finished with drop_last True"] * 3,
        }
    )
    return pl.concat([progress, finished]).sort("ts")


def seed000_hang() -> tuple[Report, pl.DataFrame]:
    timeline = seed000_timeline()
    last_ts = T0 + timedelta(seconds=7.2 * 76)
    end = T0 + timedelta(minutes=42, seconds=10)
    ranks = []
    for r in range(8):
        lt = last_ts + timedelta(seconds=0.05 * r)
        if r in SEED_CULPRITS:
            lt = T0 + timedelta(seconds=7.2 * 76 + 3.1 + 0.2 * SEED_CULPRITS.index(r))
        ranks.append(
            RankState(
                rank=r,
                node=SEED_NODE,
                last_step=76,
                last_ts=lt,
                state="hung",
                stack_group=2 if r in SEED_CULPRITS else 1,
                silent_s=(end - lt).total_seconds(),
                step_cadence_s=7.2,
            )
        )
    finished_ev = [
        Evidence(
            file="console.log",
            line=742 + 3 * i,
            rank=r,
            text=f"[rank{r}]: [INFO|text_trainer.py:311] epoch:0 Dataloader finished with drop_last True",
            ts=T0 + timedelta(seconds=7.2 * 76 + 3.1 + 0.2 * i),
            context=[
                (
                    741 + 3 * i,
                    f"[rank{r}]: [INFO|text_trainer.py:308] StopIteration caught in epoch 0, iteration 77",
                ),
                (743 + 3 * i, f"[rank{r}]: [INFO|base.py:770] destroy_distributed: waiting for all ranks"),
            ],
            span=(
                len(f"[rank{r}]: [INFO|text_trainer.py:311] "),
                len(f"[rank{r}]: [INFO|text_trainer.py:311] epoch:0 Dataloader finished"),
            ),
        )
        for i, r in enumerate(SEED_CULPRITS)
    ]
    findings = [
        Finding(
            id="data-exhaustion-desync",
            rule="end_of_data",
            category="data_exhaustion_desync",
            severity="critical",
            title="Ranks 2, 5, 6 ran out of data at step 77 and wait in the teardown barrier",
            ranks=SEED_CULPRITS,
            nodes=[SEED_NODE],
            first_ts=finished_ev[0].ts,
            count=3,
            evidence=finished_ev,
            explanation=(
                "The dataset holds 2,517,232 tokens; at 8 ranks x 4,096 tokens per step it supports 76.8 steps, "
                "but train_iters is 100.\nRanks whose shard ran dry first caught StopIteration, finished the epoch "
                "and entered destroy_distributed(), whose world barrier the other ranks - still in step 77's "
                "forward pass - never reach."
            ),
            fix=(
                "Set train_iters to at most 76 for this dataset and world size, or make every rank stop together: "
                "all_reduce a 'data exhausted' flag each step and break on any rank's exhaustion."
            ),
            references=["https://github.com/pytorch/pytorch/issues/82582"],
            role="primary",
            rule_role="root",
            message="3 of 8 ranks printed 'Dataloader finished' at step 77; 5 did not",
        ),
        Finding(
            id="pytorch-teardown-barrier-hang",
            rule="pytorch-teardown-barrier-hang",
            category="teardown_failure",
            severity="error",
            title="Ranks block in torch.distributed.barrier() inside destroy_distributed",
            ranks=SEED_CULPRITS,
            nodes=[SEED_NODE],
            first_ts=end,
            count=3,
            evidence=[
                Evidence(
                    file="pyspy/rank2.txt",
                    line=5,
                    rank=2,
                    text="    barrier (torch/distributed/distributed_c10d.py:4888)",
                    ts=end,
                    context=[
                        (4, 'Thread 4121 (idle): "MainThread"'),
                        (6, "    destroy_distributed (hyper_parallel/auto_models/trainer/base.py:776)"),
                        (7, "    fit (text_trainer.py:320)"),
                    ],
                    span=(4, 11),
                )
            ],
            explanation="A barrier in teardown waits for every rank; one that never gets there hangs the job.",
            fix="Bound the teardown barrier with a timeout (monitored_barrier) or skip it on abnormal exit.",
            references=[
                "https://pytorch.org/docs/stable/distributed.html#torch.distributed.monitored_barrier"
            ],
            role="secondary",
            caused_by="data-exhaustion-desync",
            rule_role="symptom",
        ),
        Finding(
            id="stack-minority",
            rule="stack_groups",
            category="data_exhaustion_desync",
            severity="warning",
            title="Ranks 0, 1, 3, 4, 7 are still in the forward pass (find_packed_sequence_indices)",
            ranks=[0, 1, 3, 4, 7],
            nodes=[SEED_NODE],
            first_ts=end,
            count=5,
            explanation="They never reach the barrier: they wait for a collective in step 77 that ranks 2, 5, 6 left.",
            role="secondary",
            caused_by="data-exhaustion-desync",
        ),
        Finding(
            id="data-budget",
            rule="end_of_data",
            category="data_exhaustion_desync",
            severity="warning",
            title="The data supports 76.8 steps but train_iters is 100",
            ranks=list(range(8)),
            count=1,
            explanation="2,517,232 tokens / (8 ranks x 1 micro-batch x 4,096 tokens) = 76.8 steps.",
            fix="Lower train_iters or add data; validate the token budget before training starts.",
            role="context",
        ),
    ]
    stack_groups = [
        StackGroup(
            id=1,
            ranks=[0, 1, 3, 4, 7],
            frames=[
                "find_packed_sequence_indices (transformers/masking_utils.py)",
                "create_causal_mask (transformers/masking_utils.py)",
                "forward (transformers/models/qwen3_moe/modeling_qwen3_moe.py)",
                "train_step (text_trainer.py)",
                "fit (text_trainer.py)",
                "main (scripts/train_lm.py)",
            ],
            waits_in="forward",
        ),
        StackGroup(
            id=2,
            ranks=SEED_CULPRITS,
            frames=[
                "barrier (torch/distributed/distributed_c10d.py)",
                "destroy_distributed (hyper_parallel/auto_models/trainer/base.py)",
                "fit (text_trainer.py)",
                "main (scripts/train_lm.py)",
            ],
            waits_in="barrier",
            minority=True,
        ),
    ]
    job = JobInfo(
        path="jobs/seed000",
        world_size=8,
        nodes=[SEED_NODE],
        ranks=list(range(8)),
        files_parsed=10,
        skipped=[SkippedFile("checkpoints/iter_0000050/model.safetensors", "binary file")],
        start=T0,
        end=end,
        versions={"torch": "2.6.0", "torch_npu": "2.6.0.post5", "CANN": "9.0.0"},
        env={"HCCL_EXEC_TIMEOUT": "1800", "HCCL_CONNECT_TIMEOUT": "1200", "MASTER_ADDR": "10.20.30.41"},
        families={"torchrun_console": 1, "pyspy": 8, "trainer_log": 1},
        config={"train_iters": 100, "micro_batch_size": 1, "max_seq_len": 4096, "global_batch_size": 8},
    )
    verdict = Verdict(
        status="hung",
        category="data_exhaustion_desync",
        summary=(
            "Ranks 2, 5 and 6 ran out of data at step 77 and entered the teardown barrier while ranks 0, 1, 3, 4, 7 "
            "were still in step 77's forward pass; the job has printed nothing for 33 minutes."
        ),
        culprit_ranks=SEED_CULPRITS,
        first_failure=FirstFailure(
            rank=2,
            ts=finished_ev[0].ts,
            file="console.log",
            line=742,
            text=finished_ev[0].text,
            step=77,
        ),
        confidence="high",
    )
    report = Report(
        tool_version="0.1.0",
        job=job,
        verdict=verdict,
        ranks=ranks,
        findings=findings,
        stack_groups=stack_groups,
        facts={
            "end_of_data": {
                "dataset_tokens": 2517232,
                "tokens_per_step": 32768,
                "supported_steps": 76.8,
                "train_iters": 100,
            },
            "dataloader_finished_by_node": {SEED_NODE: 3},
        },
    )
    return report, timeline


# --------------------------------------------------------------------------- 1,024-rank watchdog

WORLD = 1024
STRAGGLER = 517
LAST_STEP = 1200
TIMEOUT_MS = 600_000


def node_of(rank: int) -> str:
    return f"gpu-node-{rank // 8:03d}"


def watchdog_timeline(world: int = WORLD) -> pl.DataFrame:
    """Progress every 10 steps on 1,024 ranks, 3 error lines per timed-out rank (vectorised)."""
    step_s = 1.5
    logged = np.arange(10, LAST_STEP + 1, 10)
    rank = np.repeat(np.arange(world), len(logged))
    step = np.tile(logged, world)
    keep = ~((rank == STRAGGLER) & (step > LAST_STEP - 10))  # the straggler never logs the last one
    rank, step = rank[keep], step[keep]
    # node-local clocks differ by up to ~0.8 s: a little jitter per node
    offset_us = ((rank // 8) * 7919 % 800_000).astype("int64")
    base = np.datetime64(T0, "us")
    ts = (
        base
        + (step * step_s * 1e6).astype("int64").astype("timedelta64[us]")
        + offset_us.astype("timedelta64[us]")
    )
    progress = _frame(
        {
            "file": [f"logs/{node_of(r)}/rank{r}.log" for r in rank.tolist()],
            "line": (step // 10 * 3 + 40).tolist(),
            "family": ["trainer_log"] * len(rank),
            "node": [node_of(r) for r in rank.tolist()],
            "rank": rank.tolist(),
            "ts": ts,
            "kind": ["progress"] * len(rank),
            "step": step.tolist(),
            "message": [
                f" iteration {s}/ 5000 | elapsed time per iteration (ms): 1500.2 | lm loss: 2.31E+00"
                for s in step.tolist()
            ],
        }
    )
    others = [r for r in range(world) if r != STRAGGLER]
    t_timeout = T0 + timedelta(seconds=LAST_STEP * step_s + 600.4)
    err_rank, err_ts, err_line, err_msg = [], [], [], []
    for r in others:
        t = t_timeout + timedelta(microseconds=(r // 8) * 7919 % 800_000 + r * 37)
        for k, msg in enumerate(
            (
                f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=24031, OpType=ALLREDUCE, NumelIn=262144000, NumelOut=262144000, Timeout(ms)=600000) ran for 600412 milliseconds before timing out.",
                f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]  failure detected by watchdog at work sequence id: 24031 PG status: last enqueued work: 24031, last completed work: 24030",
                "terminate called after throwing an instance of 'c10::DistBackendError'",
            )
        ):
            err_rank.append(r)
            err_ts.append(t + timedelta(milliseconds=k))
            err_line.append(405 + k)
            err_msg.append(msg)
    errors = _frame(
        {
            "file": [f"logs/{node_of(r)}/rank{r}.log" for r in err_rank],
            "line": err_line,
            "family": ["trainer_log"] * len(err_rank),
            "node": [node_of(r) for r in err_rank],
            "rank": err_rank,
            "ts": err_ts,
            "kind": ["error"] * len(err_rank),
            "level": ["ERROR"] * len(err_rank),
            "message": err_msg,
        }
    )
    return pl.concat([progress, errors]).sort("ts")


def watchdog_1024(world: int = WORLD) -> tuple[Report, pl.DataFrame]:
    """The 1,024-rank job (or the same story at another ``world`` size)."""
    timeline = watchdog_timeline(world)
    t_timeout = T0 + timedelta(seconds=LAST_STEP * 1.5 + 600.4)
    end = t_timeout + timedelta(seconds=32)
    ranks = []
    for r in range(world):
        straggler = r == STRAGGLER
        last_ts = T0 + timedelta(seconds=(LAST_STEP - (10 if straggler else 0)) * 1.5)
        if not straggler:
            last_ts = t_timeout + timedelta(microseconds=(r // 8) * 7919 % 800_000 + r * 37 + 2000)
        ranks.append(
            RankState(
                rank=r,
                node=node_of(r),
                last_step=LAST_STEP - 10 if straggler else LAST_STEP,
                last_ts=last_ts,
                exit_code=-15 if straggler else -6,
                state="killed" if straggler else "failed",
                stack_group=2 if straggler else 1,
                silent_s=(end - last_ts).total_seconds(),
                step_cadence_s=1.5,
            )
        )
    others = [r for r in range(world) if r != STRAGGLER]

    def wd_evidence(r: int) -> Evidence:
        text = (
            f"[rank{r}]:[E626 16:40:00.412 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=24031, OpType=ALLREDUCE, NumelIn=262144000, NumelOut=262144000, "
            "Timeout(ms)=600000) ran for 600412 milliseconds before timing out."
        )
        start = text.index("Watchdog caught")
        return Evidence(
            file=f"logs/{node_of(r)}/rank{r}.log",
            line=405,
            rank=r,
            text=text,
            ts=t_timeout,
            context=[
                (404, f"[rank{r}]: iteration 1200/ 5000 | elapsed time per iteration (ms): 1500.2"),
                (
                    406,
                    f"[rank{r}]:[E626 16:40:00.413 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  failure detected by watchdog at work sequence id: 24031 PG status: last enqueued work: 24031, last completed work: 24030",
                ),
            ],
            span=(start, text.index(" ran for")),
        )

    findings = [
        Finding(
            id="collective-straggler",
            rule="collective_sequence",
            category="straggler",
            severity="critical",
            title=f"Rank 517 never entered ALLREDUCE SeqNum=24031; {world - 1:,} ranks waited in it for 600 s",
            ranks=[STRAGGLER],
            nodes=[node_of(STRAGGLER)],
            first_ts=T0 + timedelta(seconds=LAST_STEP * 1.5),
            count=1,
            evidence=[
                Evidence(
                    file="pyspy/rank517.txt",
                    line=5,
                    rank=STRAGGLER,
                    text="    read (ssl.py:1134)",
                    context=[
                        (4, 'Thread 88172 (active): "MainThread"'),
                        (6, "    _next_data (torch/utils/data/dataloader.py:1316)"),
                        (7, "    __next__ (torch/utils/data/dataloader.py:631)"),
                    ],
                    span=(4, 8),
                )
            ],
            explanation=(
                "Every other rank's watchdog reports last enqueued work 24031 and last completed 24030: they are inside "
                "SeqNum 24031. Rank 517 printed no timeout, its last step is 1190, and py-spy shows its main thread "
                "reading from the network inside the dataloader: it never issued the collective."
            ),
            fix="Find why rank 517's data loading blocked (remote storage, a stuck worker); add a timeout to the data "
            "read and set TORCH_NCCL_ASYNC_ERROR_HANDLING so a stuck rank fails fast.",
            references=["https://pytorch.org/docs/stable/torch_nccl_environment_variables.html"],
            role="primary",
            rule_role="root",
        ),
        Finding(
            id="nccl-watchdog-timeout",
            rule="nccl-watchdog-timeout",
            category="collective_timeout",
            severity="error",
            title="NCCL watchdog timed out in ALLREDUCE SeqNum=24031 after 600,000 ms",
            ranks=others,
            nodes=sorted({node_of(r) for r in others}),
            first_ts=t_timeout,
            count=len(others),
            evidence=[wd_evidence(r) for r in others],
            explanation="The collective did not complete within the process group timeout on these ranks.",
            fix="Look at the rank that did not join (the primary finding), not at these ranks.",
            references=[
                "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
            ],
            role="secondary",
            caused_by="collective-straggler",
            rule_role="symptom",
        ),
        Finding(
            id="watchdog-abort",
            rule="pytorch-watchdog-abort",
            category="collective_timeout",
            severity="error",
            title="Process group watchdog took the process down (SIGABRT, exit code -6)",
            ranks=others,
            count=len(others),
            role="secondary",
            caused_by="collective-straggler",
        ),
        Finding(
            id="agent-sigterm",
            rule="elastic-sigterm",
            category="job_cancelled",
            severity="warning",
            title="The elastic agent sent SIGTERM to rank 517 after the others failed",
            ranks=[STRAGGLER],
            count=1,
            role="secondary",
            caused_by="collective-straggler",
        ),
        Finding(
            id="clock-skew",
            rule="clock_skew",
            category="unknown_failure",
            severity="info",
            title="Node clocks differ by up to 0.8 s",
            ranks=list(range(world)),
            explanation="Estimated from the simultaneous watchdog timeouts; orderings closer than 0.8 s are uncertain.",
            role="context",
        ),
    ]
    stack_groups = [
        StackGroup(
            id=1,
            ranks=others,
            frames=[
                "all_reduce (torch/distributed/distributed_c10d.py)",
                "reduce_grads (megatron/core/distributed/param_and_grad_buffer.py)",
                "train_step (megatron/training/training.py)",
                "train (megatron/training/training.py)",
                "pretrain (megatron/training/training.py)",
                "main (pretrain_gpt.py)",
            ],
            waits_in="all_reduce",
        ),
        StackGroup(
            id=2,
            ranks=[STRAGGLER],
            frames=[
                "read (ssl.py)",
                "_next_data (torch/utils/data/dataloader.py)",
                "__next__ (torch/utils/data/dataloader.py)",
                "get_batch (pretrain_gpt.py)",
                "train_step (megatron/training/training.py)",
                "train (megatron/training/training.py)",
                "pretrain (megatron/training/training.py)",
                "main (pretrain_gpt.py)",
            ],
            waits_in="dataloader",
            minority=True,
        ),
    ]
    nodes = sorted({node_of(r) for r in range(world)})
    job = JobInfo(
        path="jobs/gpt-1t-run7",
        world_size=world,
        nodes=nodes,
        ranks=list(range(world)),
        files_parsed=world + world // 8,
        skipped=[SkippedFile(f"logs/{n}/core.12345", "binary file") for n in nodes[:5]],
        start=T0,
        end=end,
        versions={"torch": "2.7.1+cu126", "NCCL": "2.26.2", "CUDA": "12.6"},
        env={"NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"},
        families={"trainer_log": world, "torchrun_console": world // 8, "pyspy": world},
    )
    verdict = Verdict(
        status="failed",
        category="straggler",
        summary=(
            "Rank 517 (gpu-node-064) stopped at step 1190 inside its dataloader and never entered ALLREDUCE "
            f"SeqNum=24031; ranks 0-516, 518-{world - 1} timed out in it after 600 s and aborted."
        ),
        culprit_ranks=[STRAGGLER],
        first_failure=FirstFailure(
            rank=3,
            ts=t_timeout,
            file="logs/gpu-node-000/rank3.log",
            line=405,
            text=wd_evidence(3).text,
            step=1200,
        ),
        confidence="high",
    )
    facts = {
        "collective": {
            "pg": "0 (default_pg)",
            "op": "ALLREDUCE",
            "seq": 24031,
            "numel": 262144000,
            "timeout_ms": TIMEOUT_MS,
            "started": t_timeout - timedelta(milliseconds=600412),
            "waiting_ranks": others,
            "missing_ranks": [STRAGGLER],
        },
        "clock_skew": [
            {"node": n, "offset_s": round((i * 7919 % 800_000) / 1e6, 3), "uncertainty_s": 0.05}
            for i, n in enumerate(nodes)
        ],
    }
    report = Report(
        tool_version="0.1.0",
        job=job,
        verdict=verdict,
        ranks=ranks,
        findings=findings,
        stack_groups=stack_groups,
        facts=facts,
    )
    return report, timeline


def test_fixtures_are_consistent() -> None:
    report, timeline = seed000_hang()
    assert [r.rank for r in report.ranks] == list(range(8))
    assert timeline.filter(pl.col("step") == 76)["rank"].n_unique() == 8
    big, big_tl = watchdog_1024()
    assert len(big.ranks) == WORLD
    assert big_tl.filter(pl.col("kind") == "error")["rank"].n_unique() == WORLD - 1
