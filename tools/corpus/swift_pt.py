"""An ms-swift-like continued-pretraining script (HF Trainer style), run under ``torchrun``.

It accepts the ``swift pt`` command line of project seed 004 (duplicates included: argparse
keeps the last ``--dataloader_num_workers``), echoes its settings the way ms-swift and the HF
Trainer do (``[INFO:swift] ...`` lines, ``***** Running training *****``, one log dict per
step, tqdm bars on rank 0, ``logging.jsonl`` in the output directory) and trains a tiny
stand-in model with DDP over gloo on CPU. DeepSpeed is not used: the ``--deepspeed`` value is
only recorded.

Data handling follows what the eval hang needs to be real: each node reads its own slice of
the jsonl, packs it and splits ``--split_dataset_ratio`` off for evaluation *per node*, and
every rank evaluates its own share without padding. When the nodes' eval splits differ in
size, one rank runs one more evaluation batch than the others, i.e. one more collective.

``--style hf`` prints plain HF Trainer output (no ms-swift keys) for a healthy-run sample.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import math
import os
import re
import resource
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from data_utils import VOCAB, node_split
from fr_watchdog import StallWatchdog
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

logger = logging.getLogger("swift")
hf_logger = logging.getLogger("transformers.trainer")

DEEPSPEED_PRESETS: dict[str, dict[str, Any]] = {
    "zero2": {"zero_optimization": {"stage": 2, "overlap_comm": False, "contiguous_gradients": True}},
    "zero3": {
        "zero_optimization": {
            "stage": 3,
            "overlap_comm": False,
            "stage3_gather_16bit_weights_on_model_save": True,
        }
    },
    "zero3_offload": {
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu", "pin_memory": True},
            "overlap_comm": False,
            "contiguous_gradients": True,
            "sub_group_size": 1e9,
            "stage3_gather_16bit_weights_on_model_save": True,
        }
    },
}


class TinyCausalLM(nn.Module):
    """Embedding, one residual MLP block and an LM head: a stand-in for the real model."""

    def __init__(self, vocab: int = VOCAB, dim: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.fc_in = nn.Linear(dim, hidden)
        self.fc_out = nn.Linear(hidden, dim)
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = h + self.fc_out(F.gelu(self.fc_in(self.norm(h))))
        return self.lm_head(h)


def str2bool(v: str) -> bool:
    return v.lower() in ("1", "true", "yes", "y")


def lenient_dict(text: str) -> dict[str, Any]:
    """Parse ``{"a": 1}`` or the shell-mangled ``{ a: 1, b: 2}`` that unescaped quotes leave."""
    try:
        return dict(json.loads(text))
    except json.JSONDecodeError:
        return {k: float(v) if "." in v else int(v) for k, v in re.findall(r"(\w+)\s*:\s*([-\d.]+)", text)}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="ms-swift-like pt stand-in")
    a = ap.add_argument
    a("--model", required=True)
    a("--model_type", default=None)
    a("--dataset", required=True)
    a("--output_dir", default="output")
    a("--dataloader_num_workers", type=int, default=0)
    a("--dataset_num_proc", type=int, default=1)
    a("--attn_impl", default=None)
    a("--max_steps", type=int, default=-1)
    a("--num_train_epochs", type=float, default=3.0)
    a("--max_length", type=int, default=2048)
    a("--per_device_train_batch_size", type=int, default=1)
    a("--per_device_eval_batch_size", type=int, default=1)
    a("--sequence_parallel_size", type=int, default=1)
    a("--learning_rate", type=float, default=1e-5)
    a("--warmup_ratio", type=float, default=0.0)
    a("--weight_decay", type=float, default=0.1)
    a("--max_grad_norm", type=float, default=1.0)
    a("--gradient_accumulation_steps", type=int, default=1)
    a("--save_strategy", default="steps")
    a("--save_steps", type=int, default=500)
    a("--save_total_limit", type=int, default=None)
    a("--train_type", default="lora")
    a("--deepspeed", default=None)
    a("--eval_strategy", default="steps")
    a("--eval_steps", type=int, default=None)
    a("--split_dataset_ratio", type=float, default=0.0)
    a("--lr_scheduler_type", default="cosine")
    a("--lr_scheduler_kwargs", type=lenient_dict, default={})
    a("--packing", type=str2bool, default=False)
    a("--dataset_shuffle", type=str2bool, default=True)
    a("--train_dataloader_shuffle", type=str2bool, default=True)
    a("--truncation_strategy", default="delete")
    a("--model_author", default=None)
    a("--model_name", default=None)
    a("--log_level", default="passive")
    a("--logging_steps", type=int, default=5)
    a("--report_to", nargs="*", default=["tensorboard"])
    a("--ddp_timeout", type=int, default=1800)
    a("--seed", type=int, default=42)
    a("--style", choices=("swift", "hf"), default="swift")
    return ap


def lr_at(step: int, args: argparse.Namespace) -> float:
    """warmup_stable_decay (ms-swift/HF) or linear decay after warmup."""
    warm = max(1, math.ceil(args.warmup_ratio * args.max_steps))
    if step <= warm:
        return args.learning_rate * step / warm
    if args.lr_scheduler_type == "warmup_stable_decay":
        stable = int(args.lr_scheduler_kwargs.get("num_stable_steps", args.max_steps - warm))
        decay = int(args.lr_scheduler_kwargs.get("num_decay_steps", 0))
        if step <= warm + stable or decay <= 0:
            return args.learning_rate
        return args.learning_rate * max(0.0, 1 - (step - warm - stable) / decay)
    return args.learning_rate * max(0.0, (args.max_steps - step) / max(1, args.max_steps - warm))


def fmt_elapsed(s: float) -> str:
    s = int(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return (f"{h}h " if h else "") + (f"{m}m " if m or h else "") + f"{sec}s"


def batch_tensors(seq: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.tensor(seq)
    return t[:-1].unsqueeze(0), t[1:].unsqueeze(0)


def lm_loss(model: nn.Module, seq: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    ids, labels = batch_tensors(seq)
    logits = model(ids)
    loss = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1))
    correct = (logits.argmax(-1) == labels).sum()
    return loss, correct, labels.numel()


def evaluate(
    model: nn.Module,
    val: list[list[int]],
    n_total: int,
    args: argparse.Namespace,
    rank: int,
    world: int,
    wd: StallWatchdog | None,
    step: int,
) -> dict[str, float]:
    """Each rank walks its own eval shard; every batch's metrics are gathered (gather_for_metrics).

    ``n_total`` is the size of this node's eval split, which is what rank 0 reports.
    """
    if rank == 0:
        hf_logger.info("\n***** Running Evaluation *****")
        hf_logger.info("  Num examples = %d", n_total)
        hf_logger.info("  Batch size = %d", args.per_device_eval_batch_size)
    t0 = time.time()
    totals = torch.zeros(3)
    bar = tqdm(
        total=len(val),
        desc="Val" if args.style == "swift" else None,
        disable=rank != 0,
        leave=False,
        dynamic_ncols=False,
        ncols=100,
    )
    model.eval()
    with torch.no_grad():
        for seq in val:
            loss, correct, n = lm_loss(model, seq)
            mine = torch.tensor([loss.item() * n, float(correct), float(n)])
            gathered = [torch.zeros(3) for _ in range(world)]
            dist.all_gather(gathered, mine)
            totals += torch.stack(gathered).sum(0)
            bar.update(1)
            if wd:
                wd.beat(step)
    bar.close()
    model.train()
    runtime = time.time() - t0
    return {
        "eval_loss": round(totals[0].item() / totals[2].item(), 8),
        "eval_token_acc": round(totals[1].item() / totals[2].item(), 8),
        "eval_runtime": round(runtime, 4),
        "eval_samples_per_second": round(n_total / runtime, 3),
        "eval_steps_per_second": round(len(val) / runtime, 3),
    }


def train(args: argparse.Namespace) -> None:
    global logger
    if args.style == "hf":
        logger = logging.getLogger("__main__")
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    node_rank = int(os.environ.get("GROUP_RANK", "0"))
    nnodes = world // local_world
    # ms-swift logs INFO on the local master of every node, warnings everywhere
    logging.basicConfig(
        level=logging.INFO if local_rank == 0 else logging.WARNING,
        stream=sys.stdout,
        format="[%(levelname)s:%(name)s] %(message)s"
        if args.style == "swift"
        else "%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
    )
    hf_logger.handlers = [logging.StreamHandler(sys.stdout)]  # the HF Trainer prints bare messages
    hf_logger.propagate = False
    hf_logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)

    logger.info("Start time of running main: %s", dt.datetime.now())
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.ddp_timeout))
    # every rank says where it is, as ms-swift does
    if args.style == "swift":
        print(
            f"[INFO:swift] rank: {rank}, local_rank: {local_rank}, world_size: {world}, "
            f"local_world_size: {local_world}",
            flush=True,
        )
    if local_rank == 0:
        launcher = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
        logger.info("launcher: %s", " ".join(x.decode() for x in launcher if x))
        logger.info("sys.argv: %s", sys.argv)
    ds_config = DEEPSPEED_PRESETS.get(args.deepspeed or "", {})
    if args.style == "swift":
        shown = {k: v for k, v in vars(args).items() if k != "style"}
        shown["deepspeed"] = ds_config or args.deepspeed
        shown["local_rank"], shown["global_world_size"], shown["local_world_size"] = (
            local_rank,
            world,
            local_world,
        )
        logger.info("args: TrainArguments(%s)", ", ".join(f"{k}={v!r}" for k, v in shown.items()))
        if ds_config:
            logger.info("Using DeepSpeed: %s", ds_config)
            logger.info(
                "zero stage: %d, offload_optimizer: %s, offload_param: %s",
                ds_config["zero_optimization"]["stage"],
                ds_config["zero_optimization"].get("offload_optimizer", {}).get("device", "none"),
                ds_config["zero_optimization"].get("offload_param", {}).get("device", "none"),
            )
        if "wandb" in (args.report_to or []):
            logger.warning(
                "report_to=['wandb'] requested but wandb is not installed; metrics go to logging.jsonl only"
            )
        logger.info(
            "Loading the model using model_dir: %s (stand-in: TinyCausalLM, DDP over gloo)", args.model
        )

    records = [json.loads(line) for line in Path(args.dataset).read_text(encoding="utf-8").splitlines()]
    train_seqs, val_seqs = node_split(
        records, nnodes, node_rank, args.max_length, args.split_dataset_ratio, args.seed
    )
    logger.info(
        "Loading dataset %s: node %d of %d reads %d of %d lines",
        args.dataset,
        node_rank,
        nnodes,
        len(records[node_rank::nnodes]),
        len(records),
    )
    if args.packing:
        logger.info(
            "Packing: %d sequences of at most %d tokens (dataset_num_proc=%d)",
            len(train_seqs) + len(val_seqs),
            args.max_length,
            args.dataset_num_proc,
        )
    logger.info("train_dataset: Dataset({features: ['input_ids', 'labels'], num_rows: %d})", len(train_seqs))
    logger.info("val_dataset: Dataset({features: ['input_ids', 'labels'], num_rows: %d})", len(val_seqs))
    my_train = train_seqs[local_rank::local_world]
    my_val = val_seqs[local_rank::local_world]

    fr_dir = os.environ.get("FR_DUMP_DIR")
    wd = StallWatchdog(rank, Path(fr_dir), 5.0, logger) if fr_dir else None
    if wd:
        wd.start()

    torch.manual_seed(args.seed)
    model = DDP(TinyCausalLM())
    opt = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    n_params = sum(p.numel() for p in model.parameters())
    total_bs = args.per_device_train_batch_size * args.gradient_accumulation_steps * world
    steps_per_epoch = max(1, len(my_train) // args.gradient_accumulation_steps)
    n_epochs = math.ceil(args.max_steps / steps_per_epoch)
    hf_logger.info("***** Running training *****")
    hf_logger.info(f"  Num examples = {len(train_seqs) * nnodes:,}")
    hf_logger.info(f"  Num Epochs = {n_epochs:,}")
    hf_logger.info(f"  Instantaneous batch size per device = {args.per_device_train_batch_size:,}")
    hf_logger.info(f"  Total train batch size (w. parallel, distributed & accumulation) = {total_bs:,}")
    hf_logger.info(f"  Gradient Accumulation steps = {args.gradient_accumulation_steps:,}")
    hf_logger.info(f"  Total optimization steps = {args.max_steps:,}")
    hf_logger.info(f"  Number of trainable parameters = {n_params:,}")

    run_dir = Path(args.output_dir) / f"v0-{dt.datetime.now():%Y%m%d-%H%M%S}"
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        logger.info("output_dir: %s", run_dir)
    jsonl = open(run_dir / "logging.jsonl", "a") if rank == 0 else None  # noqa: SIM115
    bar = tqdm(
        total=args.max_steps,
        desc="Train" if args.style == "swift" else None,
        disable=rank != 0,
        dynamic_ncols=False,
        ncols=100,
    )
    t_start = time.time()
    micro = 0
    tr_loss_sum, tr_losses = 0.0, []
    for step in range(1, args.max_steps + 1):
        loss_acc, correct_acc, tok_acc = 0.0, 0, 0
        for k in range(args.gradient_accumulation_steps):
            seq = my_train[micro % len(my_train)]
            micro += 1
            sync = k == args.gradient_accumulation_steps - 1
            ctx = model.no_sync() if not sync else contextlib.nullcontext()
            with ctx:
                loss, correct, n = lm_loss(model, seq)
                (loss / args.gradient_accumulation_steps).backward()
            loss_acc += loss.item() / args.gradient_accumulation_steps
            correct_acc += int(correct)
            tok_acc += n
            if wd:
                wd.beat(step - 1)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm).item()
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        bar.update(1)
        if wd:
            wd.beat(step)
        if step % args.logging_steps == 0:
            # the Trainer gathers the training loss from every rank before it logs it
            t = torch.tensor([loss_acc])
            gathered = [torch.zeros(1) for _ in range(world)]
            dist.all_gather(gathered, t)
            mean_loss = torch.cat(gathered).mean().item()
            tr_losses.append(mean_loss)
            tr_loss_sum += mean_loss
            elapsed = time.time() - t_start
            logs: dict[str, Any] = {
                "loss": round(mean_loss, 8),
                "grad_norm": round(grad_norm, 8),
                "learning_rate": lr,
            }
            if args.style == "swift":
                logs["token_acc"] = round(correct_acc / tok_acc, 8)
            logs["epoch"] = round(step / steps_per_epoch, 2)
            if args.style == "swift":
                logs.update(
                    {
                        "global_step/max_steps": f"{step}/{args.max_steps}",
                        "percentage": f"{100 * step / args.max_steps:.2f}%",
                        "elapsed_time": fmt_elapsed(elapsed),
                        "remaining_time": fmt_elapsed(elapsed / step * (args.max_steps - step)),
                        "memory(GiB)": round(
                            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024, 2
                        ),
                        "train_speed(iter/s)": round(step / elapsed, 6),
                    }
                )
            if rank == 0:
                bar.write(str(logs))
                jsonl.write(json.dumps(logs) + "\n")
                jsonl.flush()
        if args.eval_strategy == "steps" and args.eval_steps and step % args.eval_steps == 0:
            metrics = evaluate(model, my_val, len(val_seqs), args, rank, world, wd, step)
            metrics["epoch"] = round(step / steps_per_epoch, 2)
            if args.style == "swift":
                metrics["global_step/max_steps"] = f"{step}/{args.max_steps}"
            if rank == 0:
                bar.write(str(metrics))
                jsonl.write(json.dumps(metrics) + "\n")
                jsonl.flush()
        if args.save_strategy == "steps" and step % args.save_steps == 0:
            dist.barrier()
            if rank == 0:
                ckpt = run_dir / f"checkpoint-{step}"
                ckpt.mkdir(parents=True, exist_ok=True)
                torch.save(model.module.state_dict(), ckpt / "model.pt")
                logger.info("Saving model checkpoint to %s", ckpt)
    bar.close()
    runtime = time.time() - t_start
    final = {
        "train_runtime": round(runtime, 4),
        "train_samples_per_second": round(args.max_steps * total_bs / runtime, 3),
        "train_steps_per_second": round(args.max_steps / runtime, 3),
        "train_loss": round(tr_loss_sum / max(1, len(tr_losses)), 8),
        "epoch": round(args.max_steps / steps_per_epoch, 2),
    }
    if rank == 0:
        print(final, flush=True)
        jsonl.write(json.dumps(final) + "\n")
        jsonl.close()
        if args.style == "swift":
            logger.info("last_model_checkpoint: %s", run_dir / f"checkpoint-{args.max_steps}")
            logger.info("best_model_checkpoint: None")
            logger.info("End time of running main: %s", dt.datetime.now())
    dist.destroy_process_group()


def main() -> None:
    train(build_parser().parse_args())


if __name__ == "__main__":
    main()
