"""Seed 000: the data-exhaustion deadlock on Ascend (single node 8 ranks, four nodes 32 ranks).

Story (from the seed): the token-budget batcher gives every rank its own shard of a dataset that
supports fewer steps than ``train_iters``. At the first step past the data, some ranks catch
StopIteration, log "Dataloader finished", and block in ``destroy_distributed``'s world barrier;
the others are in that step's forward. Nothing errors and nothing exits: a silent hang, seen
through per-rank logs that stop and py-spy dumps taken half an hour later.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime

import verbatim as V
from common import (
    Job,
    Stream,
    Thread,
    after,
    expected,
    jitter,
    loss_curve,
    pyspy_dump,
    torchrun_banner,
)

PY = "/usr/local/python3.11.10/bin/python3.11"
PY_VERSION = "3.11.10"
SITE = "/usr/local/python3.11.10/lib/python3.11/site-packages"
MODEL = "/data/models/Qwen3-30B-A3B"
DATA = "dataset/qwen3-30b-a3b/data/raw/wikitext-2-raw-v1-train.jsonl"
TOTAL_TOKENS = 2_517_232
TOTAL_LINES = 36_718
SEQ = 4096
# Activated parameters of Qwen3-30B-A3B and the bf16 peak used for the MFU figure.
FLOPS_PER_STEP_PER_RANK = 6 * 3.34e9 * SEQ * 1.12
PEAK_TFLOPS = 313.0

FINISHED_FRAMES = (
    V.S000_FRAME_BARRIER,
    "wrapper (torch/distributed/c10d_logger.py:81)",
    V.S000_FRAME_DESTROY,
    "on_train_end (hyper_parallel/auto_models/trainer/base.py:748)",
    "fit (hyper_parallel/auto_models/trainer/text_trainer.py:330)",
    "main (train_lm.py:71)",
    "<module> (train_lm.py:75)",
)

FORWARD_FRAMES = (
    V.S000_FRAME_PACKED,
    "create_causal_mask (transformers/masking_utils.py:851)",
    "forward (transformers/models/qwen3_moe/modeling_qwen3_moe.py:218)",
    "_call_impl (torch/nn/modules/module.py:1762)",
    "_wrapped_call_impl (torch/nn/modules/module.py:1751)",
    "forward (transformers/models/qwen3_moe/modeling_qwen3_moe.py:362)",
    "__call__ (transformers/modeling_layers.py:94)",
    "_call_impl (torch/nn/modules/module.py:1857)",
    "_wrapped_call_impl (torch/nn/modules/module.py:1751)",
    "forward (transformers/models/qwen3_moe/modeling_qwen3_moe.py:497)",
    "wrapper (transformers/utils/generic.py:1064)",
    "_call_impl (torch/nn/modules/module.py:1762)",
    "_wrapped_call_impl (torch/nn/modules/module.py:1751)",
    "forward (transformers/models/qwen3_moe/modeling_qwen3_moe.py:664)",
    "wrapper (transformers/utils/generic.py:940)",
    "_call_impl (torch/nn/modules/module.py:1857)",
    "_wrapped_call_impl (torch/nn/modules/module.py:1751)",
    "forward_backward_step (hyper_parallel/auto_models/trainer/text_trainer.py:268)",
    "train_step (hyper_parallel/auto_models/trainer/text_trainer.py:289)",
    "fit (hyper_parallel/auto_models/trainer/text_trainer.py:318)",
    "main (train_lm.py:71)",
    "<module> (train_lm.py:75)",
)


@dataclass
class Spec:
    name: str
    source: str
    hosts: list[str]
    gbs: int
    train_iters: int
    last_step: int
    exhausted: list[int]  # global ranks whose iterator ends first, in console order
    launch: datetime
    agent_pids: list[int]
    step_time: float
    seed: int
    nnodes_flags: bool  # multi-node command (node folders, --nnodes/--node_rank)


def _overrides(spec: Spec) -> list[str]:
    out = [
        f"--model.pretrained_model_name_or_path={MODEL}",
        f"--dataset.model_assets.tokenizer.pretrained_model_name_or_path={MODEL}",
        f"--dataset.data_path={DATA}",
        "--dataset.data_config.hf_dataset_name=null",
    ]
    if spec.nnodes_flags:
        out.append(f"--training.global_batch_size={spec.gbs}")
    out.append(f"--training.train_iters={spec.train_iters}")
    return out


def _run_script(spec: Spec, node_rank: int) -> list[str]:
    """The launch script as the seed shows it, with MODEL (and the node rank) filled in."""
    head = ["#!/bin/bash", f"MODEL={MODEL}"]
    if spec.nnodes_flags:
        head += [f"RANK={node_rank}", "MASTER_ADDR=10.90.3.11"]
        launch = [
            "torchrun --nnodes=4 --nproc_per_node=8 --node_rank=${RANK} \\",
            "    --master_addr=${MASTER_ADDR} --master_port=29581 \\",
        ]
    else:
        launch = [V.S000_SINGLE_NODE_CMD]
    body = [
        "    scripts/train_lm.py examples/demo_trainer/train.yaml \\",
        "    --model.pretrained_model_name_or_path=${MODEL} \\",
        "    --dataset.model_assets.tokenizer.pretrained_model_name_or_path=${MODEL} \\",
        f"    --dataset.data_path={DATA} \\",
        "    --dataset.data_config.hf_dataset_name=null \\",
    ]
    if spec.nnodes_flags:
        body.append(f"    --training.global_batch_size={spec.gbs} \\")
    body.append(f"    --training.train_iters={spec.train_iters}")
    return [*head, "", *launch, *body]


def _lr(step: int, total: int) -> float:
    if step <= 10:
        return 1e-5 * step / 10
    return 1e-6 + 0.5 * (1e-5 - 1e-6) * (1 + math.cos(math.pi * (step - 10) / (total - 10)))


def build(spec: Spec) -> Job:
    rng = random.Random(spec.seed)
    world = len(spec.hosts) * 8
    job = Job(spec.name)
    multi = spec.nnodes_flags
    cmdline = " ".join([PY, "-u", "scripts/train_lm.py", "examples/demo_trainer/train.yaml", *_overrides(spec)])

    # Synchronous training: every rank ends step k at (about) the same time.
    t_first_step = after(spec.launch, 211.4 + 4.0 * (len(spec.hosts) - 1))
    step_end = [t_first_step]
    for _ in range(1, spec.last_step):
        step_end.append(after(step_end[-1], jitter(rng, spec.step_time, 0.025)))
    step_durations = [47.93] + [
        (step_end[i] - step_end[i - 1]).total_seconds() for i in range(1, spec.last_step)
    ]
    losses = loss_curve(rng, spec.last_step, 2.47, 1.96, 0.018)
    gnorms = [jitter(rng, 0.85 + 3.4 * math.exp(-i / 9), 0.08) for i in range(spec.last_step)]
    t_exhaust = after(step_end[-1], 0.41)
    t_dump = after(step_end[-1], 35 * 60 + 12)

    files: dict[str, str] = {}
    last_step: dict[int, int | None] = {}
    for node, host in enumerate(spec.hosts):
        base = f"{host}/" if multi else ""
        console = Stream()
        agent = spec.agent_pids[node]
        console.extend(spec.launch, torchrun_banner(spec.launch, agent, "torch/distributed/run.py:766"))
        for lr in range(8):
            rank = node * 8 + lr
            pid = agent + 68 + lr
            log: list[str] = []

            def emit(ts: datetime, text: str, log: list[str] = log, console: Stream = console) -> None:
                log.append(text)
                console.add(ts, text)

            t0 = after(spec.launch, jitter(rng, 9.2, 0.05))
            console.add(
                after(t0, -2.1),
                f"{SITE}/torch_npu/utils/path_manager.py:82: UserWarning: Warning: The "
                "/usr/local/Ascend/ascend-toolkit/latest owner does not match the current owner.",
                '  warnings.warn(f"Warning: The {path} owner does not match the current owner.")',
            )
            emit(t0, f"[INFO|train_lm.py:38] Parsed examples/demo_trainer/train.yaml with {len(_overrides(spec))} command-line overrides")
            t = after(t0, jitter(rng, 14.0, 0.1))
            emit(
                t,
                f"[INFO|base.py:212] Initialized torch.distributed: backend=hccl, world_size={world}, "
                f"rank={rank}, local_rank={lr}, device=npu:{lr}, host={host}",
            )
            emit(
                t,
                f"[INFO|base.py:219] Versions: python {PY_VERSION}, torch 2.7.1+cpu, torch_npu 2.7.1, "
                "CANN 9.0.0, transformers 4.57.1",
            )
            emit(t, f"[INFO|base.py:305] Parallel config: dp_shard={world}, ep=1, tp=1, pp=1, cp=1, fsdp=FSDP2")
            emit(
                t,
                f"[INFO|text_trainer.py:142] Training config: max_seq_len={SEQ}, micro_batch_size=1, "
                f"global_batch_size={spec.gbs}, gradient_accumulation_steps=1, train_iters={spec.train_iters}, "
                "lr=1e-05, lr_warmup_iters=10, lr_decay_style=cosine",
            )
            t = after(t, jitter(rng, 3.0, 0.2))
            emit(t, f"[INFO|text_dataset.py:96] Loading jsonl dataset from {DATA}")
            t = after(t, jitter(rng, 21.0, 0.05))
            emit(
                t,
                f"[INFO|text_dataset.py:131] Dataset statistics: {TOTAL_LINES:,} lines, {TOTAL_TOKENS:,} tokens "
                "(mean 68.6 tokens/line, median 10, empty lines 12,851 / 35.0%)",
            )
            emit(
                t,
                "[INFO|dataloader.py:77] Built DynamicBatchDataLoader: batcher=TextTokenBatcher, token budget "
                f"per micro batch = {SEQ} (max_seq_len {SEQ} x micro_batch_size 1), drop_last=True, "
                f"shard {rank}/{world}",
            )
            t = after(t, jitter(rng, 1.5, 0.2))
            emit(
                t,
                f"[INFO|base.py:402] Loading model Qwen3MoeForCausalLM from {MODEL} "
                "(48 layers, 128 experts, 8 activated per token)",
            )
            t = after(t, jitter(rng, 118.0, 0.03))
            emit(
                t,
                "[INFO|base.py:455] Model parameters: total 30.53B, activated 3.34B; "
                "fully_shard applied to 48 decoder layers and the root module",
            )
            emit(
                after(t, 0.2),
                f"[INFO|text_trainer.py:201] ***** Running training ***** train_iters={spec.train_iters}, "
                f"global_batch_size={spec.gbs}, tokens per step={spec.gbs * SEQ:,}",
            )
            for i in range(spec.last_step):
                step = i + 1
                ts = after(step_end[i], rng.uniform(0.002, 0.09))
                dt = step_durations[i] + rng.uniform(-0.004, 0.004)
                tflops = FLOPS_PER_STEP_PER_RANK / dt / 1e12
                emit(
                    ts,
                    f"[INFO|text_trainer.py:356] [{ts:%Y-%m-%d %H:%M:%S}] step: {step}/{spec.train_iters}, "
                    f"loss: {losses[i]:.4f}, grad_norm: {gnorms[i]:.3f}, lr: {_lr(step, spec.train_iters):.2e}, "
                    f"tokens: {SEQ}, step_time: {dt:.3f}s, tflops: {tflops:.1f}, MFU: {100 * tflops / PEAK_TFLOPS:.2f}%",
                )
            if rank in spec.exhausted:
                # console order of the exhausted ranks follows their order in spec.exhausted
                emit(after(t_exhaust, 0.05 * spec.exhausted.index(rank)), V.S000_DATALOADER_FINISHED)
            last_step[rank] = spec.last_step
            files[f"{base}logs/rank_{rank}.log"] = "".join(f"{x}\n" for x in log)
            job.must_contain(f"{base}logs/rank_{rank}.log", [V.S000_DATALOADER_FINISHED] if rank in spec.exhausted else [])

            finished = rank in spec.exhausted
            dump = pyspy_dump(
                pid,
                cmdline,
                PY_VERSION,
                PY,
                [
                    Thread(
                        pid,
                        "idle" if finished else "active",
                        "MainThread",
                        FINISHED_FRAMES if finished else FORWARD_FRAMES,
                    )
                ],
            )
            files[f"{base}pyspy/rank{rank}.txt"] = "".join(f"{x}\n" for x in dump)
            job.must_contain(
                f"{base}pyspy/rank{rank}.txt",
                [V.S000_FRAME_BARRIER, V.S000_FRAME_DESTROY] if finished else [V.S000_FRAME_PACKED],
            )
        files[f"{base}console.log"] = "".join(f"{x}\n" for x in console.lines())
        files[f"{base}run.sh"] = "".join(f"{x}\n" for x in _run_script(spec, node))
        node_exhausted = [r for r in spec.exhausted if node * 8 <= r < node * 8 + 8]
        job.must_contain(f"{base}console.log", [V.S000_DATALOADER_FINISHED] * len(node_exhausted))
    job.files.update(files)

    families = {
        k: (
            "torchrun_console"
            if k.endswith("console.log")
            else "trainer_log"
            if "/logs/" in f"/{k}"
            else "pyspy"
            if "/pyspy/" in f"/{k}"
            else "generic"
        )
        for k in files
    }
    per_node = [sum(1 for r in spec.exhausted if n * 8 <= r < n * 8 + 8) for n in range(len(spec.hosts))]
    others = [r for r in range(world) if r not in spec.exhausted]
    supported = TOTAL_TOKENS / (world * SEQ)
    facts = [
        f"every rank's last progress line is step {spec.last_step}/{spec.train_iters}; no rank logged step {spec.last_step + 1}",
        f"data supports {TOTAL_TOKENS:,} / ({world} x {SEQ}) = {supported:.1f} steps < train_iters {spec.train_iters}",
        f"ranks {_ranks(spec.exhausted)} printed 'epoch:0 Dataloader finished with drop_last True' "
        f"after step {spec.last_step}; the other {len(others)} ranks did not",
        f"py-spy: ranks {_ranks(spec.exhausted)} wait in barrier (distributed_c10d.py:4888) called from "
        "destroy_distributed (base.py:776)",
        f"py-spy: ranks {_ranks(others)} are in find_packed_sequence_indices (masking_utils.py:788), "
        f"i.e. in the forward of step {spec.last_step + 1}",
        "no error line and no process exit: a silent hang (HCCL_EXEC_TIMEOUT does not cover the c10d barrier)",
    ]
    if multi:
        facts.insert(3, "per-node 'Dataloader finished' counts " + "/".join(str(c) for c in per_node))
    first = None if multi else spec.exhausted[0]
    job.expected = expected(
        source=spec.source,
        status="hung",
        category="data_exhaustion_desync",
        culprit_ranks=spec.exhausted,
        first_failing_rank=first,
        first_failing_step=spec.last_step + 1,
        world_size=world,
        nodes=spec.hosts,
        last_step=last_step,
        files=families,
        facts=facts,
    )
    job.readme = _readme(spec, per_node, supported, t_dump)
    return job


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def _readme(spec: Spec, per_node: list[int], supported: float, t_dump: datetime) -> str:
    world = len(spec.hosts) * 8
    multi = spec.nnodes_flags
    layout = (
        "\n".join(
            f"    {h}/console.log, {h}/run.sh, {h}/logs/rank_<N>.log, {h}/pyspy/rank<N>.txt   (ranks {i * 8}-{i * 8 + 7})"
            for i, h in enumerate(spec.hosts)
        )
        if multi
        else "    console.log        the terminal, captured with `| tee`: torchrun's banner plus every rank's unprefixed output\n"
        "    run.sh             the launch command from the seed, MODEL filled in\n"
        "    logs/rank_<N>.log  the trainer's per-rank file handler (same lines as the console)\n"
        "    pyspy/rank<N>.txt  `py-spy dump --pid <pid>` of every rank"
    )
    first = (
        "null, because the 'Dataloader finished' line carries no timestamp and the nodes' consoles cannot be ordered"
        if multi
        else f"{spec.exhausted[0]}, the first exhausted rank in console order"
    )
    return f"""
# {spec.name}: data exhaustion desync, {"4 nodes x 8" if multi else "single node, 8"} Ascend NPUs (reconstruction)

**Reconstruction** of seed 000 ({"4-node 32-rank" if multi else "single-node 8-rank"} reproduction). Ascend
hardware is not available here, so this job directory was written by `tools/reconstruct/build.py`
(`seed000.py`), not produced by a run.

## What happened

`torchrun {"--nnodes=4" if multi else "--standalone"} --nproc_per_node=8 scripts/train_lm.py examples/demo_trainer/train.yaml`
with CANN 9.0.0, torch 2.7.1 + torch_npu 2.7.1, Qwen3-30B-A3B, max_seq_len {SEQ}, micro batch 1,
GBS {spec.gbs}, train_iters {spec.train_iters}. The wikitext jsonl has {TOTAL_LINES:,} lines / {TOTAL_TOKENS:,}
tokens, so the data supports {TOTAL_TOKENS:,} / ({world} x {SEQ}) = {supported:.1f} steps. All ranks log
progress to step {spec.last_step}. At step {spec.last_step + 1} the token-budget batcher's shards run dry
on ranks {_ranks(spec.exhausted)}{" (per node " + "/".join(map(str, per_node)) + ")" if multi else ""}: they log
`epoch:0 Dataloader finished with drop_last True` and block in `destroy_distributed`'s world barrier,
while the other ranks are in the forward of step {spec.last_step + 1}. Nothing else is ever printed and
no process exits. py-spy dumps were taken about 35 minutes later ({t_dump:%H:%M}).

A correct analysis says: hung (no error), data exhaustion desync, culprits = the exhausted ranks
(first failing rank {first}), last step {spec.last_step} everywhere, the barrier/forward split of the py-spy stacks, and that
train_iters exceeds what the data supports.

## Layout

{layout}

## Verbatim from the seed

- `{V.S000_DATALOADER_FINISHED}`
- the py-spy frames `{V.S000_FRAME_BARRIER}` <- `{V.S000_FRAME_DESTROY}` and
  `{V.S000_FRAME_PACKED}` <- `create_causal_mask` <- the Qwen3-MoE attention `forward`
- the launch command (run.sh), the dataset figures ({TOTAL_LINES:,} lines, {TOTAL_TOKENS:,} tokens, mean 68.6,
  median 10, ~35% empty lines), the exhaustion step{" and the per-node counts 2/3/3/4" if multi else ""}.

## Invented (consistent, but not from the seed)

- host names, PIDs, times (launch {spec.launch:%Y-%m-%d %H:%M:%S}), loss/grad-norm/lr/MFU values, the other
  trainer lines (`base.py`, `text_dataset.py`, `dataloader.py` messages and line numbers), and which ranks
  run dry (the seed gives {"only the per-node counts" if multi else "none"}).
- The progress line format `[INFO|text_trainer.py:356] [<time>] step: N/M, loss: ...` (the seed only says
  MFU lines in the `[INFO|file:line]` format); it embeds the wall time because the header has none.
- py-spy prints the code object name, so `Qwen3MoeAttention.forward` from the seed appears as
  `forward (transformers/models/qwen3_moe/modeling_qwen3_moe.py:218)`; the frames between `create_causal_mask`
  and `train_lm.py` are plausible transformers 4.57 / torch 2.7 frames.
"""


SINGLE = Spec(
    name="seed000_single_node",
    source="seed 000 (single node)",
    hosts=["atlas800-01"],
    gbs=8,
    train_iters=100,
    last_step=76,
    exhausted=[2, 5, 6],
    launch=datetime(2026, 6, 2, 14, 10, 2, 913000),
    agent_pids=[1838211],
    step_time=3.12,
    seed=1000,
    nnodes_flags=False,
)

FOUR = Spec(
    name="seed000_four_nodes",
    source="seed 000 (four nodes)",
    hosts=["atlas800-11", "atlas800-12", "atlas800-13", "atlas800-14"],
    gbs=32,
    train_iters=25,
    last_step=19,
    exhausted=[3, 6, 9, 12, 14, 17, 20, 23, 24, 27, 29, 31],
    launch=datetime(2026, 6, 2, 16, 40, 11, 402000),
    agent_pids=[402117, 398842, 401936, 399410],
    step_time=3.46,
    seed=1001,
    nnodes_flags=True,
)


def jobs() -> list[Job]:
    """Both seed-000 scenarios."""
    return [build(SINGLE), build(FOUR)]
