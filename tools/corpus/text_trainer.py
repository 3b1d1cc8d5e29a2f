"""A tiny token-packed language-model trainer, run under ``torchrun`` by ``generate.py``.

It behaves like a small pre-training loop (think hyper_parallel's ``text_trainer.py``):
each rank streams its own shard of a jsonl file (line ``i`` goes to rank ``i % world``),
packs tokens into fixed-length micro-batches with ``drop_last``, all-reduces the gradients
itself over gloo and logs one progress line per step on every rank. Failures come from the
data (a record without ``text``, an out-of-vocabulary ``input_ids`` record, a huge
``loss_scale``, a ``source: code`` record that wakes an otherwise unused adapter, or a shard
that runs out early) or from ``--fault`` (SIGKILL, SIGSEGV, a slow rank). Nothing here is
faked: what the logs show is what torch printed.

CPU only; dev-only dependency of the corpus generator, never of postmortem itself.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from data_utils import VOCAB, iter_shard, packed_batches
from fr_watchdog import StallWatchdog
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

logger = logging.getLogger("text_trainer")

FORMATS = {
    # [INFO|text_trainer.py:311] 2026-11-29 23:14:02,118 >> epoch:0 Dataloader finished ...
    "tt": "[%(levelname)s|%(filename)s:%(lineno)d] %(asctime)s >> %(message)s",
    # 2026-11-29 23:14:02,118 - INFO - text_trainer - step ...
    "std": "%(asctime)s - %(levelname)s - %(name)s - %(message)s",
}


class TinyLM(nn.Module):
    """Embedding, one residual MLP block and an LM head; a code adapter used only on code data."""

    def __init__(self, vocab: int = VOCAB, dim: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.code_adapter = nn.Linear(dim, dim)
        self.fc_in = nn.Linear(dim, hidden)
        self.fc_out = nn.Linear(hidden, dim)
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor, code_mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        # the adapter only runs when the batch holds code tokens, so on other batches its
        # parameters get no gradient: the classic "unused parameter" divergence across ranks
        if bool(code_mask.any()):
            h = h + self.code_adapter(h) * code_mask.unsqueeze(-1)
        h = h + self.fc_out(F.gelu(self.fc_in(self.norm(h))))
        return self.lm_head(h)


def parse_faults(specs: list[str]) -> dict[str, tuple[int, float]]:
    """``kind:rank:value`` -> {kind: (rank, value)}; value is a step or a number of seconds."""
    out: dict[str, tuple[int, float]] = {}
    for spec in specs:
        kind, rank, value = spec.split(":")
        out[kind] = (int(rank), float(value))
    return out


def setup_logging(rank: int, fmt: str, log_file: str | None, console_rank0_only: bool) -> None:
    handlers: list[logging.Handler] = []
    if rank == 0 or not console_rank0_only:
        handlers.append(logging.StreamHandler(sys.stdout))
    if log_file:
        path = Path(log_file.format(rank=rank))
        path.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(path, mode="w"))
    logging.basicConfig(level=logging.INFO, format=FORMATS[fmt], handlers=handlers, force=True)


def allreduce_gradients(model: nn.Module, world: int) -> None:
    """One flat all_reduce over the gradients that exist on this rank (a tiny DDP bucket)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def destroy_distributed() -> None:
    """Teardown: wait for every rank, then tear the process group down."""
    dist.barrier()
    dist.destroy_process_group()


def train(args: argparse.Namespace) -> None:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    setup_logging(rank, args.log_format, args.log_file, args.console_rank0_only)
    faults = parse_faults(args.fault)

    dist.init_process_group("gloo", timeout=timedelta(seconds=args.pg_timeout))
    logger.info(
        "rank %d/%d local_rank %d pid %d host=%s backend=%s pg_timeout=%ss",
        rank,
        world,
        local_rank,
        os.getpid(),
        socket.gethostname(),
        dist.get_backend(),
        args.pg_timeout,
    )
    watchdog = None
    if args.fr_dir:
        watchdog = StallWatchdog(rank, Path(args.fr_dir), args.stall_seconds, logger)
        watchdog.start()

    torch.manual_seed(1234)
    model = TinyLM()
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(
        "model TinyLM params=%d train_iters=%d micro_batch_size=1 max_seq_len=%d global_batch_size=%d data=%s",
        n_params,
        args.train_iters,
        args.seq_len,
        world,
        args.data,
    )

    batches = packed_batches(iter_shard(args.data, rank, world), args.seq_len)
    step = 0
    try:
        while step < args.train_iters:
            t0 = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                logger.info("epoch:0 Dataloader finished with drop_last True")
                break
            if "slow" in faults and faults["slow"][0] == rank:
                time.sleep(faults["slow"][1])  # a rank whose data reads are slow every step
            t_data = time.perf_counter() - t0
            step += 1
            if "sigkill" in faults and faults["sigkill"] == (rank, step):
                os.kill(os.getpid(), signal.SIGKILL)  # what the host OOM killer does
            if "sigsegv" in faults and faults["sigsegv"] == (rank, step):
                ctypes.string_at(0)  # a native crash: read from address 0

            ids = torch.tensor(batch.tokens[:-1]).unsqueeze(0)
            labels = torch.tensor(batch.tokens[1:]).unsqueeze(0)
            weights = torch.tensor(batch.weights[1:], dtype=torch.float32).unsqueeze(0)
            code_mask = torch.tensor(batch.code[:-1], dtype=torch.float32).unsqueeze(0)

            lr = args.lr * min(1.0, step / args.warmup)
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad(set_to_none=True)
            logits = model(ids, code_mask)
            ce = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), reduction="none")
            loss = (ce * weights.view(-1)).mean()
            loss.backward()
            t_comm = time.perf_counter()
            allreduce_gradients(model, world)
            stats = torch.stack([loss.detach(), torch.tensor(float(len(batch.tokens)))])
            dist.all_reduce(stats)
            t_comm = time.perf_counter() - t_comm
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step_time = time.perf_counter() - t0
            logger.info(
                "epoch:0 step:%d/%d | loss: %.4f | local_loss: %.4f | grad_norm: %.3f | lr: %.2e | "
                "data_time: %.3fs | comm_time: %.3fs | step_time: %.3fs | tokens/s: %.0f",
                step,
                args.train_iters,
                stats[0].item() / world,
                loss.item(),
                grad_norm.item(),
                lr,
                t_data,
                t_comm,
                step_time,
                stats[1].item() / step_time,
            )
            if watchdog:
                watchdog.beat(step)
    except Exception:
        if watchdog:
            watchdog.dump(f"{sys.exc_info()[0].__name__} raised")
        raise
    logger.info("epoch:0 done: %d steps, entering destroy_distributed", step)
    destroy_distributed()
    logger.info("training finished")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--train-iters", type=int, default=50)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--pg-timeout", type=float, default=20.0)
    ap.add_argument("--log-format", choices=sorted(FORMATS), default="tt")
    ap.add_argument("--log-file", help="per-rank log file pattern, e.g. logs/rank{rank}.log")
    ap.add_argument("--console-rank0-only", action="store_true", help="other ranks log to their file only")
    ap.add_argument("--fr-dir", help="dump the flight recorder here when progress stalls")
    ap.add_argument("--stall-seconds", type=float, default=5.0)
    ap.add_argument("--fault", action="append", default=[], help="kind:rank:value (sigkill, sigsegv, slow)")
    ap.add_argument("--record", action="store_true", help="wrap the entry point in elastic @record")
    args = ap.parse_args()
    (record(train) if args.record else train)(args)


if __name__ == "__main__":
    main()
