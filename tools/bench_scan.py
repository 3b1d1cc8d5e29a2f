"""Benchmark: scan 1,000 generated small job directories, then rescan them unchanged.

    python tools/bench_scan.py [--jobs-dirs 1000] [--workers 2] [--reports] [--keep DIR]

Prints the single-job analysis time (in process, warm), the first scan's jobs/s and the
unchanged rescan's wall time. Not a test: the numbers go into docs/scan.md. The target on a
2-core machine: a rescan of 1,000 unchanged jobs under 5 s; a first scan near
``single-job time x jobs / workers``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from postmortem.api import analyze
from postmortem.rule_engine import load_rules
from postmortem.scan import scan

KINDS = ("oom", "watchdog", "exception", "healthy")


def make_job(job: Path, kind: str, *, seed: int, ranks: int = 4, nodes: int = 2, steps: int = 20) -> None:
    """A small two-node job: per-rank trainer logs under node-*/logs/, one failure of ``kind``."""
    t0 = datetime(2026, 1, 1, 8, 0, 0) + timedelta(hours=seed * 7)
    per_node = ranks // nodes
    bad = seed % ranks
    for rank in range(ranks):
        node = f"node-{chr(97 + rank // per_node)}"
        last = steps if kind == "healthy" or rank != bad else steps - 3
        max_steps = steps if kind == "healthy" else 100
        lines = [
            f"{t0 + timedelta(seconds=10 * s):%Y-%m-%d %H:%M:%S},000 - INFO - step {s}/{max_steps} loss={2.5 - s / 100:.3f}"
            for s in range(1, last + 1)
        ]
        ts = t0 + timedelta(seconds=10 * (last + 1))
        if kind == "oom" and rank == bad:
            lines += [
                "Traceback (most recent call last):",
                f'  File "/home/u{seed}/train.py", line 88, in <module>',
                "    loss.backward()",
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {seed % 7 + 1}.00 GiB "
                f"(GPU {rank % per_node}; 79.15 GiB total capacity)",
            ]
        elif kind == "exception" and rank == bad:
            lines += [
                "Traceback (most recent call last):",
                f'  File "/data/job{seed}/train.py", line 12, in <module>',
                "    main()",
                f"KeyError: 'input_ids_{seed}'",
            ]
        elif kind == "watchdog" and rank != bad:
            lines.append(
                f"[rank{rank}]:[E{ts:%m%d %H:%M:%S}.715298746 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught "
                f"collective operation timeout: WorkNCCL(SeqNum={40 + seed % 9}, OpType=ALLREDUCE, NumelIn=1, "
                "NumelOut=1, Timeout(ms)=600000) ran for 600061 milliseconds before timing out."
            )
        path = job / node / "logs" / f"rank_{rank}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def generate(root: Path, count: int) -> None:
    """``count`` jobs under root/<month>/<job>, kinds in rotation."""
    for i in range(count):
        make_job(root / f"2026-{i % 12 + 1:02d}" / f"job-{i:05d}", KINDS[i % len(KINDS)], seed=i)


def _cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of its finished children (the workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job-dirs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reports", action="store_true", help="also render a per-job HTML report")
    parser.add_argument("--keep", type=Path, help="generate into (and keep) this directory")
    args = parser.parse_args()

    base = args.keep or Path(tempfile.mkdtemp(prefix="bench_scan_"))
    root, out = base / "jobs", base / "out"
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    generate(root, args.job_dirs)
    print(f"generated {args.job_dirs} job dirs in {time.perf_counter() - t:.1f} s under {root}")

    rules = load_rules()
    sample = sorted(p for p in root.glob("*/*") if p.is_dir())[:20]
    analyze(sample[0], rules=rules)  # warm
    t = time.perf_counter()
    for job in sample:
        analyze(job, rules=rules)
    single = (time.perf_counter() - t) / len(sample)
    print(f"single-job analysis (in process, warm): {single * 1000:.0f} ms/job")

    try:
        own0, kids0 = _cpu()
        first = scan([root], out, jobs=args.workers, reports=args.reports, progress="plain")
        own1, kids1 = _cpu()
        print(f"first scan: {first.jobs} jobs in {first.elapsed_s:.1f} s = {first.jobs / first.elapsed_s:.1f} jobs/s "
              f"({first.errors} errors; bound single x jobs / workers = {single * first.jobs / args.workers:.1f} s)")
        print(f"  CPU: workers {kids1 - kids0:.1f} s ({(kids1 - kids0) / first.jobs * 1000:.0f} ms/job), "
              f"scan driver {own1 - own0:.1f} s; load average {os.getloadavg()[0]:.1f}")
        for _ in range(3):
            again = scan([root], out, jobs=args.workers, reports=args.reports)
            print(f"unchanged rescan: {again.jobs} jobs in {again.elapsed_s:.2f} s ({again.cached} from the cache, "
                  f"{again.analyzed} analyzed)")
            if not again.analyzed:
                break
            # the analysis source changed during the first scan (a checkout being edited): rescan again
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
