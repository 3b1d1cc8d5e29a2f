"""Generate the small, real PyTorch flight-recorder dumps under ``tests/data/fr/``.

Run with a Python that has torch (a dev-only dependency, never one of the tool)::

    python tests/fixtures_src/fr_scenarios.py            # every scenario
    python tests/fixtures_src/fr_scenarios.py wrapped     # one scenario

Each scenario starts ``torchrun --standalone`` with 4 gloo ranks running this same file as
the worker. ``TORCH_FR_BUFFER_SIZE`` makes the CPU build of torch record flight-recorder
entries for gloo process groups. A stall watchdog thread in every rank dumps the recorder
(pickle and JSON) once its loop stops advancing, while the ranks are still blocked, then
the process exits. Every rank also writes a small trainer log with one line per step.

Scenarios (world size 4, a subgroup ``pair`` of ranks 0 and 1 beside the default group):

* ``hang_missing``: rank 3 sleeps in its data loader at step 6 and never calls the step's
  all_reduce; ranks 0-2 block in it (collective 6 + setup). Dumps from every rank.
* ``wrapped``: as ``hang_missing`` with rank 2 stuck, but ``TORCH_FR_BUFFER_SIZE=12`` and
  ranks 0-1 run extra ``pair`` collectives, so their ring buffers wrapped further back than
  ranks 2-3's.
* ``mismatch``: at step 3 rank 1 all-reduces a [4, 4] tensor where the others reduce [16]; at
  step 5 rank 3 reduces int32 where the others reduce float32. The byte counts agree, so gloo
  completes both (a different byte count makes gloo abort the process before any dump) and
  the job runs to its end; the dump is taken once the loop is over.
* ``type_mismatch``: at step 3 rank 2 broadcasts while the others all-reduce, and they hang.

Machine paths are rewritten before the files are kept: this directory becomes ``/workspace/job``
and the Python prefix ``/opt/conda``, in the JSON text and in the pickles (which are re-written
with pickle protocol 2, the protocol torch itself writes, holding the same plain containers).

Output layout, per scenario: ``pkl/nccl_trace_rank_<r>`` (pickles, torch's default file
prefix, no extension), ``json/node-a-rank<r>.json`` and ``logs/train_rank<r>.log``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "fr"
WORLD = 4
STEPS = 8
SCENARIOS: dict[str, dict[str, str]] = {
    "hang_missing": {"TORCH_FR_BUFFER_SIZE": "2000"},
    "wrapped": {"TORCH_FR_BUFFER_SIZE": "12"},
    "mismatch": {"TORCH_FR_BUFFER_SIZE": "2000"},
    "type_mismatch": {"TORCH_FR_BUFFER_SIZE": "2000"},
}


def _log(handle, text: str) -> None:
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now * 1000) % 1000:03d}"
    handle.write(f"[INFO|fr_scenarios.py:60] {stamp} >> {text}\n")
    handle.flush()


class Watchdog(threading.Thread):
    """Dump the flight recorder once the loop has not advanced for ``stall_s`` seconds, then exit."""

    def __init__(self, rank: int, out: Path, log, stall_s: float = 2.5) -> None:
        super().__init__(daemon=True)
        self.rank, self.out, self.log, self.stall_s = rank, out, log, stall_s
        self.last = time.monotonic()
        self.lock = threading.Lock()
        self.dumped = False

    def beat(self) -> None:
        self.last = time.monotonic()

    def dump(self, why: str) -> None:
        with self.lock:
            if self.dumped:
                return
            self.dumped = True
            from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

            (self.out / "pkl").mkdir(parents=True, exist_ok=True)
            (self.out / "json").mkdir(parents=True, exist_ok=True)
            (self.out / "pkl" / f"nccl_trace_rank_{self.rank}").write_bytes(_dump_fr_trace())
            (self.out / "json" / f"node-a-rank{self.rank}.json").write_bytes(_dump_fr_trace_json())
            _log(self.log, f"{why}: flight recorder dumped")
            (self.out / f".done{self.rank}").touch()

    def run(self) -> None:
        while time.monotonic() - self.last < self.stall_s:
            time.sleep(0.2)
        self.dump("no progress")
        # wait until every rank has dumped (its peers are still blocked), then leave
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(list(self.out.glob(".done*"))) < WORLD:
            time.sleep(0.2)
        self.log.close()
        os._exit(0)


def worker(scenario: str, out: Path) -> None:
    """One rank of ``scenario``: a few steps of all_reduce, with the scenario's fault."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    (out / "logs").mkdir(parents=True, exist_ok=True)
    log = open(out / "logs" / f"train_rank{rank}.log", "w", encoding="utf-8")  # noqa: SIM115 - closed by the watchdog
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    pair = dist.new_group([0, 1])
    _log(log, f"rank {rank}/{WORLD} pid {os.getpid()} backend=gloo")
    wd = Watchdog(rank, out, log)
    wd.start()
    stuck = {"hang_missing": 3, "wrapped": 2}.get(scenario)
    try:
        for step in range(1, STEPS + 1):
            grad = torch.ones(16)
            if step == 6 and rank == stuck:
                _log(log, "data loader: waiting for the next batch")
                time.sleep(120)  # a stuck data loader: never reaches the all_reduce
            if step == 3 and scenario == "mismatch" and rank == 1:
                grad = torch.ones(4, 4)
            if step == 5 and scenario == "mismatch" and rank == 3:
                grad = torch.ones(16, dtype=torch.int32)
            if step == 3 and scenario == "type_mismatch" and rank == 2:
                dist.broadcast(grad, src=0)
            else:
                dist.all_reduce(grad)
            if rank in (0, 1):
                extra = 3 if scenario == "wrapped" else 1
                for _ in range(extra):
                    dist.all_reduce(torch.ones(4), group=pair)
            _log(log, f"epoch:0 step:{step}/{STEPS} | loss: {1.0 / step:.4f}")
            wd.beat()
            time.sleep(0.05)
    except Exception as exc:  # a mismatch may raise instead of hanging
        _log(log, f"RuntimeError: {exc}".splitlines()[0])
        wd.dump("exception")
    time.sleep(120)  # the watchdog ends the process


def run_scenario(name: str) -> None:
    """Run one scenario under torchrun and keep its dumps and logs."""
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", **SCENARIOS[name])
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--standalone", f"--nproc-per-node={WORLD}", __file__, "--worker", name, "--out", str(out)]
    subprocess.run(cmd, env=env, check=False, timeout=240, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for marker in out.glob(".done*"):
        marker.unlink()
    _neutral_paths(out)
    got = sorted(p.name for p in (out / "pkl").glob("*"))
    print(f"{name}: {len(got)} pickles, {len(list((out / 'json').glob('*')))} json")


def _neutral_paths(out: Path) -> None:
    """Replace this machine's paths in the dumps and logs with the corpus's neutral ones."""
    import pickle

    prefix = str(Path(sys.prefix).resolve())
    swaps = ((str(HERE), "/workspace/job"), (prefix, "/opt/conda"))

    def fix(value):
        if isinstance(value, str):
            for old, new in swaps:
                value = value.replace(old, new)
            return value
        if isinstance(value, dict):
            return {fix(k): fix(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(fix(v) for v in value)
        return value

    for path in (out / "pkl").glob("*"):
        # our own dump, written seconds ago by torch: trusted input
        path.write_bytes(pickle.dumps(fix(pickle.loads(path.read_bytes())), protocol=2))
    for path in [*(out / "json").glob("*"), *(out / "logs").glob("*")]:
        path.write_text(fix(path.read_text(encoding="utf-8")), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.out)
        return
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        ap.error(f"unknown scenario {', '.join(unknown)}")
    for name in args.scenarios or SCENARIOS:
        run_scenario(name)


if __name__ == "__main__":
    main()
