"""Benchmark: build the timeline of a synthetic 1,024-rank job of about 1 GB of mixed-format logs.

    python tools/bench_timeline.py [--ranks 1024] [--mb 1024] [--keep DIR] [--analyze REPORT.html]

Prints input size, wall time, MB/s and peak RSS; with --analyze, also the time of a whole
analysis and its HTML report. Not a test: numbers go into the README.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from postmortem import api
from postmortem.timeline import build_timeline

NODE_PROCS = 8


def _rank_log(rank: int, ranks: int, target_bytes: int) -> str:
    """One rank's trainer log: HF/ms-swift dict lines, tqdm redraws, DeepSpeed, NCCL chatter, warnings."""
    node = rank // NODE_PROCS
    host = f"gpu-node-{node:03d}"
    head = [
        f"{host}:{4000 + rank}:{4000 + rank} [{rank % NODE_PROCS}] NCCL INFO Bootstrap : Using eth0:10.0.{node}.{rank % 250}<0>",
        f"{host}:{4000 + rank}:{4000 + rank} [{rank % NODE_PROCS}] NCCL INFO NCCL version 2.21.5+cuda12.4",
        f"{host}:{4000 + rank}:{4100 + rank} [{rank % NODE_PROCS}] NCCL INFO ncclCommInitRank comm 0x55d{rank:05x} rank {rank} nranks {ranks} cudaDev {rank % NODE_PROCS} nvmlDev {rank % NODE_PROCS} busId 1b000 commId 0x996ee6f117cb8e1e - Init START",
    ]
    for channel in range(32):
        head.append(
            f"{host}:{4000 + rank}:{4100 + rank} [{rank % NODE_PROCS}] NCCL INFO Channel {channel:02d}/32 : {rank}[{rank % NODE_PROCS}] -> {(rank + 1) % ranks}[{(rank + 1) % NODE_PROCS}] via P2P/CUMEM/read"
        )
    lines = head
    step = 0
    size = sum(len(x) + 1 for x in lines)
    while size < target_bytes:
        step += 1
        minute, second = divmod(step * 3, 60)
        hour, minute = divmod(minute, 60)
        stamp = f"2026-11-20 {10 + hour:02d}:{minute:02d}:{second:02d},{rank % 1000:03d}"
        bar = "\r".join(
            f"Train:  {step * 100 // 5000:2d}%|##        | {step}/5000 [{hour:02d}:{minute:02d}<10:00:00, {2.9 + k / 10:.2f}s/it]"
            for k in range(3)
        )
        block = [
            bar,
            f"[{stamp}] [INFO] [logging.py:96:log_dist] [Rank {rank}] step={step}, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]",
            f"{{'loss': {2.5 - step / 5000:.4f}, 'grad_norm': 1.{step % 97:02d}, 'learning_rate': 1e-05, 'epoch': {step / 5000:.4f}, 'global_step/max_steps': '{step}/5000', 'percentage': '{step / 50:.2f}%', 'elapsed_time': '{hour}h {minute}m {second}s', 'remaining_time': '9h 0m 0s', 'memory(GiB)': 61.2, 'train_speed(iter/s)': 0.33}}",
            f"{stamp} - INFO - swift - data loader fetched batch of 32768 tokens in 0.0{step % 9}s",
            f"{stamp} - DEBUG - transformers.modeling_utils - attention mask cache hit for bucket {step % 13}",
        ]
        if step % 500 == 0:
            block.append(f"{stamp} - WARNING - swift - gradient overflow at step {step}, skipping update")
        if rank == 517 and step == 4000:
            block += [
                "Traceback (most recent call last):",
                '  File "/workspace/train.py", line 88, in <module>',
                "    main()",
                "RuntimeError: CUDA error: an illegal memory access was encountered",
            ]
        text = "\n".join(block) + "\n"
        lines.append(text.rstrip("\n"))
        size += len(text)
    return "\n".join(lines) + "\n"


def _console(node: int, ranks: int) -> str:
    out = [
        "W1120 10:00:00.000000 1234 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
        f"torchrun --nnodes={ranks // NODE_PROCS} --nproc_per_node={NODE_PROCS} --node_rank={node} --master_addr=10.0.0.1 train.py",
    ]
    for local in range(NODE_PROCS):
        out.append(f"[default{local}]:[W1120 10:00:0{local}.000000000 ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank {node * NODE_PROCS + local}] using GPU {local}")
    return "\n".join(out) + "\n"


def generate(root: Path, ranks: int, total_mb: int) -> int:
    per_rank = total_mb * (1 << 20) // ranks
    # most ranks share one content shape; render a few distinct texts and reuse them with the rank swapped in
    for rank in range(ranks):
        node = rank // NODE_PROCS
        path = root / f"gpu-node-{node:03d}" / "logs" / f"rank_{rank}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_rank_log(rank, ranks, per_rank))
        if rank % NODE_PROCS == 0:
            (path.parent.parent / "console.log").write_text(_console(node, ranks))
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--keep", type=Path, help="generate into this directory and keep it")
    parser.add_argument("--analyze", type=Path, metavar="REPORT", help="then analyze the job as the CLI does and write REPORT")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="postmortem-bench-"))
    try:
        t0 = time.perf_counter()
        if not any(root.glob("*")):
            generate(root, args.ranks, args.mb)
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        gen = time.perf_counter() - t0
        t1 = time.perf_counter()
        timeline = build_timeline(root)
        elapsed = time.perf_counter() - t1
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        frame = timeline.frame
        print(f"input: {size / 1e6:.0f} MB in {len(timeline.inventory.files)} files ({args.ranks} ranks); generated in {gen:.1f}s")
        print(f"timeline: {frame.height} events, {frame['rank'].n_unique()} ranks, max step {frame['step'].max()}")
        print(f"build: {elapsed:.1f}s = {size / 1e6 / elapsed:.0f} MB/s; peak RSS {peak_mb:.0f} MB")
        if args.analyze:
            del timeline, frame
            t2 = time.perf_counter()
            analysis = api.analyze(root)
            t3 = time.perf_counter()
            api.write_report(analysis.report, analysis.timeline.frame, args.analyze)
            t4 = time.perf_counter()
            peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"analyze: {t3 - t2:.1f}s (timeline with the rules' keep pattern, rules, analyzers), "
                  f"report {t4 - t3:.1f}s; verdict {analysis.report.verdict.status} "
                  f"{analysis.report.verdict.category}; peak RSS {peak_mb:.0f} MB")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
