#!/usr/bin/env python3
"""Regenerate ``sample_logs/real``: real ``torchrun`` jobs on CPU (gloo), with their ground truth.

Run it with the interpreter of the torch dev venv (torch is a dev-only dependency of this
generator, never of postmortem)::

    /path/to/venv-torch/bin/python tools/corpus/generate.py --out sample_logs/real [--only NAME]

Each scenario starts a real job in a temporary workspace, waits for it (a hang is sampled
with py-spy and left to the process-group timeout), copies what the job left behind into
``<out>/<scenario>/job`` with machine paths scrubbed, and writes ``README.md`` and
``expected.json`` from the produced logs (last steps, exit codes, culprit ranks), checking
on the way that the run did what the scenario is about. Scenarios run one at a time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from data_utils import batches_per_rank, doc_starting_in_batch, synth_records, tokenize, write_jsonl
from harness import (
    Launch,
    Workspace,
    count_in,
    dir_size,
    export_job,
    file_lines,
    free_port,
    last_steps,
    prefixed_lines,
    pyspy,
    torch_version,
    wait_until,
    write_json,
)

STEP_RE = r"epoch:0 step:(\d+)/"
SIZE_BUDGET = 12 * 1024 * 1024


class ScenarioError(RuntimeError):
    """The run did not do what the scenario is about; its output is not kept."""


def check(cond: bool, what: str) -> None:
    if not cond:
        raise ScenarioError(what)


@dataclass
class Outcome:
    """What a scenario hands back: ground truth plus the README's prose."""

    expected: dict[str, Any]
    commands: list[str]
    happened: str
    must_say: str
    env: dict[str, str] = field(default_factory=dict)
    notes: str = ""
    where: str = "Run from the job directory:"


Scenario = Callable[[Workspace], Outcome]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__.removeprefix("s_")] = fn
    return fn


def base_expected(source: str, **kw: Any) -> dict[str, Any]:
    exp: dict[str, Any] = {
        "origin": "real",
        "source": f"tools/corpus/generate.py {source}",
        "status": None,
        "category": None,
        "culprit_ranks": [],
        "first_failing_rank": None,
        "first_failing_step": None,
        "world_size": None,
        "nodes": ["node-a"],
        "ranks": [],
        "last_step": {},
        "files": {},
        "rules": [],
        "facts": [],
    }
    exp.update(kw)
    return exp


def steps_json(steps: dict[int, int]) -> dict[str, int]:
    return {str(r): s for r, s in sorted(steps.items())}


def trainer(*args: str) -> list[str]:
    return ["text_trainer.py", *args]


# --- 1. uneven end of data ------------------------------------------------------------------

UNEVEN_SEED, UNEVEN_LINES, UNEVEN_SEQ, UNEVEN_WORLD = 130, 3251, 512, 8


@scenario
def s_uneven_data_hang(ws: Workspace) -> Outcome:
    """Ranks whose shard runs out enter the teardown barrier; the rest block in all_reduce."""
    recs = synth_records(UNEVEN_LINES, UNEVEN_SEED)
    counts = [len(b) for b in batches_per_rank(recs, UNEVEN_WORLD, UNEVEN_SEQ)]
    short = min(counts)
    culprits = [r for r, c in enumerate(counts) if c == short]
    write_jsonl(ws.root / "data/wikitext-2-raw-v1-train.jsonl", recs)
    argv = [
        "torchrun",
        "--standalone",
        f"--nproc-per-node={UNEVEN_WORLD}",
        "--tee",
        "3",
        *trainer(
            "--data",
            "data/wikitext-2-raw-v1-train.jsonl",
            "--seq-len",
            str(UNEVEN_SEQ),
            "--train-iters",
            "50",
            "--pg-timeout",
            "45",
            "--fr-dir",
            "fr",
            "--stall-seconds",
            "5",
        ),
    ]
    env = {"TORCH_FR_BUFFER_SIZE": "2000"}
    run = Launch.start(ws, argv, "console.log", ws.env(**env))
    stalled = wait_until(lambda: count_in(run.console, r"flight recorder dumped") >= UNEVEN_WORLD, 70)
    check(stalled, "the ranks never stalled")
    pids = run.worker_pids()
    check(len(pids) == UNEVEN_WORLD, f"found {len(pids)} workers")
    for rank, pid in pids.items():
        pyspy(pid, ws.root / f"pyspy/rank{rank}.txt")
    json_ranks = sorted({0, *culprits, culprits[-1] + 1})
    for rank in json_ranks:
        pyspy(pids[rank], ws.root / f"pyspy/rank{rank}.json", as_json=True)
    rc = run.wait()
    check(rc != 0, "the job did not fail after the hang")

    lines = list(prefixed_lines(run.console))
    steps = last_steps(lines, STEP_RE)
    finished = sorted({r for r, t in lines if "Dataloader finished" in t and r is not None})
    check(finished == culprits, f"Dataloader finished on {finished}, expected {culprits}")
    check(set(steps.values()) == {short}, f"last steps {steps}")
    stamps = sorted(
        (m.group(1), r)
        for r, t in lines
        if r is not None and "Dataloader finished" in t and (m := re.search(r"(\d{4}-\d\d-\d\d [\d:,]+)", t))
    )
    first = stamps[0][1] if stamps else None
    barrier_stacks = [r for r in culprits if "barrier" in (ws.root / f"pyspy/rank{r}.txt").read_text()]
    check(barrier_stacks == culprits, "py-spy did not catch the culprits in barrier")
    others = [r for r in range(UNEVEN_WORLD) if r not in culprits]
    reduce_stacks = [r for r in others if "all_reduce" in (ws.root / f"pyspy/rank{r}.txt").read_text()]
    check(reduce_stacks == others, "py-spy did not catch the others in all_reduce")

    files = {"job/console.log": "torchrun_console"}
    files.update({f"job/pyspy/rank{r}.txt": "pyspy" for r in (0, culprits[0])})
    files.update({f"job/pyspy/rank{r}.json": "pyspy_json" for r in json_ranks[:2]})
    files.update({f"job/fr/rank{culprits[0]}.pkl": "flight_recorder", "job/fr/rank0.json": "flight_recorder"})
    exp = base_expected(
        "uneven_data_hang",
        status="hung",
        category="data_exhaustion_desync",
        culprit_ranks=culprits,
        first_failing_rank=first,
        first_failing_step=short + 1,
        world_size=UNEVEN_WORLD,
        ranks=list(range(UNEVEN_WORLD)),
        last_step=steps_json(steps),
        files=files,
        facts=[
            f"micro-batches per rank shard: {counts}",
            f"'epoch:0 Dataloader finished with drop_last True' printed by ranks {culprits} only",
            f"every rank's last logged step is {short} of 50",
            f"rank {first} logs 'Dataloader finished' first (by timestamp; the culprits are within "
            "milliseconds of each other)",
            f"at the hang ranks {culprits} are in barrier() called from destroy_distributed(); "
            f"ranks {others} are in all_reduce() called from allreduce_gradients() for step {short + 1}",
            "the gloo timeout (45 s) ended the hang: RuntimeError 'Timed out waiting 45000ms' on the ranks",
            "torchrun's 'Root Cause (first observed failure)' is whichever rank timed out first, "
            "not the culprit",
        ],
    )
    happened = (
        f"Each of the {UNEVEN_WORLD} ranks streams its own shard of a wikitext-like jsonl (line i goes to "
        f"rank i % {UNEVEN_WORLD}), packs tokens into {UNEVEN_SEQ + 1}-token micro-batches with drop_last and "
        f"trains for `--train-iters 50`. The shards hold {counts} micro-batches, so after step {short} "
        f"ranks {culprits} run out: they log `epoch:0 Dataloader finished with drop_last True`, leave "
        f"the loop and call `destroy_distributed()`, which waits in `dist.barrier()`. Ranks {others} "
        f"start step {short + 1} and block in the gradient `all_reduce`. Nothing is printed for "
        f"5 s, then every rank's stall watchdog dumps the flight recorder (`fr/`) and the generator "
        f"samples every rank with `py-spy dump` (`pyspy/`). After 45 s the gloo timeout fires on "
        f"every rank and torchrun reports ChildFailedError."
    )
    must_say = (
        f"The job hung because the data ran out unevenly: ranks {culprits} exhausted their shard after "
        f"step {short} (the only ranks that print `Dataloader finished`) and entered the teardown "
        f"barrier while the other ranks were in step {short + 1}'s all_reduce. The gloo timeouts, "
        "the `Timed out waiting` RuntimeErrors and the ChildFailedError are consequences, not the "
        "cause; the root-cause rank torchrun names is arbitrary. Fix: make every rank stop at the "
        "same step (pre-compute the number of batches, or all-reduce an end-of-data flag each step)."
    )
    return Outcome(exp, [run.shown], happened, must_say, env)


def common_data(ws: Workspace, n: int = 2400, seed: int = 7) -> list[dict]:
    """A wikitext-like jsonl big enough that no rank runs out (world <= 4, 256-token batches)."""
    return synth_records(n, seed)


def place(recs: list[dict], world: int, rank: int, step: int, seq_len: int, **fields: Any) -> int:
    """Edit the record that ``rank`` reads while building micro-batch ``step``; returns its line."""
    i = doc_starting_in_batch(recs, world, rank, step, seq_len)
    rec = recs[i]
    if fields.pop("drop_text", False):
        rec["content"] = rec.pop("text")
    rec.update(fields)
    return i


def error_message(path: Path) -> str:
    """The exception line an elastic error.json carries."""
    msg = json.loads(path.read_text())["message"]
    return msg["message"] if isinstance(msg, dict) else str(msg)


def console_tail(path: Path, pattern: str) -> str:
    """The first line of a console that matches ``pattern`` (for README quotes)."""
    for line in path.read_text(errors="replace").splitlines():
        if re.search(pattern, line):
            return line
    return ""


# --- 2. collective mismatch ----------------------------------------------------------------


@scenario
def s_collective_mismatch(ws: Workspace) -> Outcome:
    """A code record wakes an unused adapter on one rank: its gradient bucket has another shape."""
    world, bad_rank, bad_step, seq = 4, 1, 12, 256
    recs = common_data(ws)
    line = place(recs, world, bad_rank, bad_step, seq, source="code")
    write_jsonl(ws.root / "data/train.jsonl", recs)
    env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "TORCH_FR_BUFFER_SIZE": "2000"}
    argv = [
        "torchrun",
        "--standalone",
        f"--nproc-per-node={world}",
        *trainer(
            "--data",
            "data/train.jsonl",
            "--seq-len",
            str(seq),
            "--train-iters",
            "30",
            "--pg-timeout",
            "20",
            "--fr-dir",
            "fr",
            "--stall-seconds",
            "5",
            "--log-file",
            "logs/rank{rank}.log",
        ),
    ]
    run = Launch.start(ws, argv, "console.log", ws.env(**env))
    rc = run.wait()
    check(rc != 0, "the job did not fail")
    text = run.console.read_text(errors="replace")
    check("Detected mismatch between collectives on ranks" in text, "no mismatch message")
    # without --tee the console lines carry no launcher prefix; ranks show in messages only
    starts = {int(m.group(1)) for m in re.finditer(r"rank (\d+)/\d+ local_rank", text)}
    check(starts == set(range(world)), f"ranks seen {starts}")
    steps: dict[int, int] = {}
    for r in range(world):
        steps.update(last_steps(file_lines(ws.root / f"logs/rank{r}.log", r), STEP_RE))
    check(set(steps.values()) == {bad_step - 1}, f"last steps {steps}")
    fr_files = sorted(p.name for p in (ws.root / "fr").glob("*.pkl"))
    check(len(fr_files) == world, f"flight recorder dumps: {fr_files}")
    quote = console_tail(run.console, r"RuntimeError: Detected mismatch")
    exp = base_expected(
        "collective_mismatch",
        status="failed",
        category="collective_mismatch",
        culprit_ranks=[bad_rank],
        first_failing_rank=bad_rank,
        first_failing_step=bad_step,
        world_size=world,
        ranks=list(range(world)),
        last_step=steps_json(steps),
        files={
            "job/console.log": "torchrun_console",
            "job/logs/rank1.log": "trainer_log",
            "job/fr/rank1.pkl": "flight_recorder",
            "job/fr/rank0.json": "flight_recorder",
        },
        facts=[
            f"data line {line} (rank {bad_rank}'s shard) is the only record with source=code",
            f"at step {bad_step} rank {bad_rank}'s gradient all_reduce has a larger TensorShape than "
            "the other ranks' (the code_adapter parameters joined its bucket)",
            "every rank raises RuntimeError: Detected mismatch between collectives on ranks",
            "console lines carry no launcher prefix (no --tee); logs/rank<N>.log hold each rank's "
            f"own lines; the last completed step is {bad_step - 1} on every rank",
        ],
    )
    happened = (
        f"Four ranks train under `TORCH_DISTRIBUTED_DEBUG=DETAIL`, which wraps the gloo process group "
        f"in a ProcessGroupWrapper that compares every collective's fingerprint across ranks. Line "
        f"{line} of the data, read by rank {bad_rank} for step {bad_step}, is the only `source: code` "
        f"record, so only rank {bad_rank} runs the model's code adapter and only its gradient bucket "
        f"includes the adapter's parameters. The wrapper detects the different TensorShape before "
        f"the all_reduce runs and every rank raises, e.g.\n\n```\n{quote[:600]}...\n```\n\n"
        "The launcher ran without `--tee`, so worker output reaches the console without "
        "`[defaultN]:` prefixes (tracebacks carry torch's own `[rankN]: ` prefix); every rank also "
        "logs to `logs/rank<N>.log`. The script dumps "
        "the flight recorder (`fr/`) when the exception passes through its training loop."
    )
    must_say = (
        f"Collective mismatch at step {bad_step}: rank {bad_rank} all-reduced a gradient bucket of a "
        "different shape (an unused-parameter pattern: a module that runs only on some batches). "
        f"Rank {bad_rank} is the odd one out; the other ranks' errors name it. Fix: make every "
        "rank reduce the same parameters (always run the adapter, zero-fill missing grads, or use "
        "DDP with find_unused_parameters=True)."
    )
    return Outcome(exp, [run.shown], happened, must_say, env)


# --- 3. exception on one rank ----------------------------------------------------------------


@scenario
def s_rank_exception(ws: Workspace) -> Outcome:
    """A record without 'text' raises KeyError on one rank; @record writes error.json."""
    world, bad_rank, bad_step, seq = 4, 2, 17, 256
    recs = common_data(ws)
    line = place(recs, world, bad_rank, bad_step, seq, drop_text=True)
    write_jsonl(ws.root / "data/train.jsonl", recs)
    argv = [
        "torchrun",
        "--standalone",
        f"--nproc-per-node={world}",
        "--log-dir",
        "logs",
        "--tee",
        "3",
        *trainer(
            "--data",
            "data/train.jsonl",
            "--seq-len",
            str(seq),
            "--train-iters",
            "40",
            "--pg-timeout",
            "20",
            "--record",
        ),
    ]
    run = Launch.start(ws, argv, "console.log", ws.env())
    rc = run.wait()
    check(rc != 0, "the job did not fail")
    lines = list(prefixed_lines(run.console))
    steps = last_steps(lines, STEP_RE)
    check(steps.get(bad_rank) == bad_step - 1, f"last steps {steps}")
    errs = sorted((ws.root / "logs").glob("*/attempt_0/*/error.json"))
    check(any(p.parent.name == str(bad_rank) for p in errs), f"error.json files: {errs}")
    check("KeyError: 'text'" in run.console.read_text(), "no KeyError in the console")
    run_dir = errs[0].parent.parent.parent.name
    base = f"job/logs/{run_dir}/attempt_0"
    echo_facts = [
        f"rank {p.parent.name}'s error.json says: {error_message(p)[:160]}"
        for p in errs
        if p.parent.name != str(bad_rank)
    ]
    echo_facts.append(
        "the other ranks were blocked in step "
        f"{bad_step}'s all_reduce: they fail on the closed gloo connection ('Connection closed by "
        "peer') or are stopped by torchrun (SIGTERM, -15); their errors are echoes"
    )
    exp = base_expected(
        "rank_exception",
        status="failed",
        category="rank_exception",
        culprit_ranks=[bad_rank],
        first_failing_rank=bad_rank,
        first_failing_step=bad_step,
        world_size=world,
        ranks=list(range(world)),
        last_step=steps_json(steps),
        files={
            "job/console.log": "torchrun_console",
            f"{base}/{bad_rank}/stderr.log": "torchrun_logdir",
            f"{base}/0/stdout.log": "torchrun_logdir",
            f"{base}/{bad_rank}/error.json": "elastic_error",
        },
        facts=[
            f"rank {bad_rank} raised KeyError: 'text' in packed_batches (data_utils.py) while reading "
            f"data line {line}, which has 'content' instead of 'text'",
            f"rank {bad_rank} exited with code 1; torchrun names it the root cause",
            *echo_facts,
        ],
    )
    happened = (
        f"Four ranks, `--log-dir logs --tee 3`, entry point wrapped in elastic's `@record`. Rank "
        f"{bad_rank} reads data line {line} for step {bad_step}; the record has `content` instead of "
        f"`text`, so the streaming packer raises `KeyError: 'text'`. `@record` writes "
        f"`attempt_0/{bad_rank}/error.json` and the traceback goes to that rank's stderr.log and "
        f"the console. The other ranks are waiting in step {bad_step}'s all_reduce: when rank "
        f"{bad_rank} exits they either fail on the closed gloo connection (`Connection closed by "
        "peer`, with an error.json of their own) or are stopped by torchrun with SIGTERM. "
        f"torchrun's ChildFailedError names rank {bad_rank} as the root cause."
    )
    must_say = (
        f"Rank {bad_rank} failed first with `KeyError: 'text'` at step {bad_step} (a malformed data "
        "record); every other rank's termination is a consequence. Fix the record or make the "
        "loader validate/skip malformed lines."
    )
    return Outcome(exp, [run.shown], happened, must_say)


# --- 4. a rank killed by a signal ------------------------------------------------------------


@scenario
def s_sigkill_rank(ws: Workspace) -> Outcome:
    """SIGKILL on one rank (as the host OOM killer does); [rankN]: console prefixes."""
    world, bad_rank, bad_step, seq = 4, 1, 23, 256
    write_jsonl(ws.root / "data/train.jsonl", common_data(ws))
    env = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"}
    argv = [
        "torchrun",
        "--standalone",
        f"--nproc-per-node={world}",
        "--tee",
        "3",
        *trainer(
            "--data",
            "data/train.jsonl",
            "--seq-len",
            str(seq),
            "--train-iters",
            "40",
            "--pg-timeout",
            "20",
            "--fault",
            f"sigkill:{bad_rank}:{bad_step}",
        ),
    ]
    run = Launch.start(ws, argv, "console.log", ws.env(**env))
    rc = run.wait()
    check(rc != 0, "the job did not fail")
    text = run.console.read_text(errors="replace")
    check(re.search(r"exitcode\s*: -9", text) is not None, "no exitcode -9 in ChildFailedError")
    steps = last_steps(prefixed_lines(run.console), STEP_RE)
    check(steps.get(bad_rank) == bad_step - 1, f"last steps {steps}")
    exp = base_expected(
        "sigkill_rank",
        status="failed",
        category="host_oom",
        culprit_ranks=[bad_rank],
        first_failing_rank=bad_rank,
        first_failing_step=bad_step,
        world_size=world,
        ranks=list(range(world)),
        last_step=steps_json(steps),
        files={"job/console.log": "torchrun_console"},
        facts=[
            f"rank {bad_rank} exited with -9 (SIGKILL) without printing anything",
            "console lines carry TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:' prefixes (global rank)",
            "no dmesg/kernel log is available: OOM is the likely, not the proven, cause",
        ],
    )
    happened = (
        f"Four ranks, `--tee 3` with `TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${{rank}}]:'`, so "
        f"every worker line is prefixed with its global rank. At step {bad_step} rank {bad_rank} "
        "sends itself SIGKILL (`os.kill(os.getpid(), 9)`), which is exactly what the kernel OOM "
        "killer does: no Python traceback, no error.json, exit code -9. torchrun stops the other "
        "ranks and reports the SIGKILL in ChildFailedError."
    )
    must_say = (
        f"Rank {bad_rank} was killed by SIGKILL (exit code -9) at step {bad_step}, with no traceback: "
        "the signature of the host OOM killer (check `dmesg`/`journalctl -k` for 'Out of memory: "
        "Killed process'). The other ranks' SIGTERMs are the launcher's clean-up."
    )
    return Outcome(exp, [run.shown], happened, must_say, env)


@scenario
def s_sigsegv_rank(ws: Workspace) -> Outcome:
    """A native crash (SIGSEGV) on one rank; --log-dir with --redirects 3, faulthandler via @record."""
    world, bad_rank, bad_step, seq = 4, 3, 9, 256
    write_jsonl(ws.root / "data/train.jsonl", common_data(ws))
    argv = [
        "torchrun",
        "--standalone",
        f"--nproc-per-node={world}",
        "--log-dir",
        "logs",
        "--redirects",
        "3",
        *trainer(
            "--data",
            "data/train.jsonl",
            "--seq-len",
            str(seq),
            "--train-iters",
            "40",
            "--pg-timeout",
            "20",
            "--record",
            "--fault",
            f"sigsegv:{bad_rank}:{bad_step}",
        ),
    ]
    run = Launch.start(ws, argv, "console.log", ws.env())
    rc = run.wait()
    check(rc != 0, "the job did not fail")
    text = run.console.read_text(errors="replace")
    check(re.search(r"exitcode\s*: -11", text) is not None, "no exitcode -11 in ChildFailedError")
    outs = sorted((ws.root / "logs").glob("*/attempt_0/*/stdout.log"))
    check(len(outs) == world, f"stdout logs: {outs}")
    run_dir = outs[0].parent.parent.parent.name
    base = f"logs/{run_dir}/attempt_0"
    steps: dict[int, int] = {}
    for r in range(world):
        steps.update(last_steps(file_lines(ws.root / base / str(r) / "stdout.log", r), STEP_RE))
    check(steps.get(bad_rank) == bad_step - 1, f"last steps {steps}")
    err = (ws.root / base / str(bad_rank) / "stderr.log").read_text()
    check("Fatal Python error: Segmentation fault" in err, "no faulthandler dump in stderr.log")
    exp = base_expected(
        "sigsegv_rank",
        status="failed",
        category="native_crash",
        culprit_ranks=[bad_rank],
        first_failing_rank=bad_rank,
        first_failing_step=bad_step,
        world_size=world,
        ranks=list(range(world)),
        last_step=steps_json(steps),
        files={
            "job/console.log": "torchrun_console",
            f"job/{base}/{bad_rank}/stderr.log": "torchrun_logdir",
            f"job/{base}/0/stdout.log": "torchrun_logdir",
        },
        facts=[
            f"rank {bad_rank} exited with -11 (SIGSEGV) at step {bad_step}",
            f"attempt_0/{bad_rank}/stderr.log holds the faulthandler dump 'Fatal Python error: "
            "Segmentation fault' with the Python stack (ctypes.string_at in train)",
            "no error.json for a signal death (error_file: <N/A>)",
            "the console holds only the launcher's own lines (--redirects 3, no --tee)",
        ],
    )
    happened = (
        f"Four ranks, `--log-dir logs --redirects 3` (worker output only in the log-dir files, the "
        "console has just the launcher's lines), entry point wrapped in `@record`, which enables "
        f"faulthandler. At step {bad_step} rank {bad_rank} reads address 0 through "
        "`ctypes.string_at(0)`: a segmentation fault in native code. faulthandler prints the "
        f"Python stack into `attempt_0/{bad_rank}/stderr.log`; torchrun reports exit code -11 "
        "and stops the other ranks."
    )
    must_say = (
        f"Rank {bad_rank} crashed in native code (SIGSEGV, exit code -11) at step {bad_step}; the "
        "faulthandler stack in its stderr.log shows where (ctypes.string_at called from train). "
        "Everything else is the launcher stopping the healthy ranks."
    )
    return Outcome(exp, [run.shown], happened, must_say)


# --- 5. straggler ------------------------------------------------------------------------------


@scenario
def s_straggler(ws: Workspace) -> Outcome:
    """One rank's data reads are slow every step; the job completes, everyone waits for it."""
    world, slow_rank, delay, seq, iters = 4, 3, 0.25, 256, 40
    write_jsonl(ws.root / "data/train.jsonl", common_data(ws))
    argv = [
        "torchrun",
        "--standalone",
        f"--nproc-per-node={world}",
        *trainer(
            "--data",
            "data/train.jsonl",
            "--seq-len",
            str(seq),
            "--train-iters",
            str(iters),
            "--pg-timeout",
            "20",
            "--log-format",
            "std",
            "--log-file",
            "logs/train_rank{rank}.log",
            "--console-rank0-only",
            "--fault",
            f"slow:{slow_rank}:{delay}",
        ),
    ]
    run = Launch.start(ws, argv, "console.log", ws.env())
    rc = run.wait()
    check(rc == 0, f"the job failed ({rc})")
    steps: dict[int, int] = {}
    data_time: dict[int, float] = {}
    comm_time: dict[int, float] = {}
    for r in range(world):
        lines = file_lines(ws.root / f"logs/train_rank{r}.log", r)
        steps.update(last_steps(lines, STEP_RE))
        dts = [float(m.group(1)) for _, t in lines if (m := re.search(r"data_time: ([\d.]+)s", t))]
        cts = [float(m.group(1)) for _, t in lines if (m := re.search(r"comm_time: ([\d.]+)s", t))]
        data_time[r] = sum(dts) / len(dts)
        comm_time[r] = sum(cts) / len(cts)
    check(set(steps.values()) == {iters}, f"last steps {steps}")
    check(max(data_time, key=data_time.__getitem__) == slow_rank, f"data times {data_time}")
    exp = base_expected(
        "straggler",
        status="completed",
        category="straggler",
        culprit_ranks=[slow_rank],
        first_failing_rank=slow_rank,
        first_failing_step=1,
        world_size=world,
        ranks=list(range(world)),
        last_step=steps_json(steps),
        files={
            "job/console.log": "torchrun_console",
            "job/logs/train_rank0.log": "trainer_log",
            f"job/logs/train_rank{slow_rank}.log": "trainer_log",
        },
        facts=[
            "mean data_time per step: " + ", ".join(f"rank {r} {v:.3f}s" for r, v in data_time.items()),
            "mean comm_time per step: " + ", ".join(f"rank {r} {v:.3f}s" for r, v in comm_time.items()),
            f"rank {slow_rank} is slow in data loading every step; the others wait for it in all_reduce",
            "the console holds only rank 0's log lines and the launcher's lines",
            f"the job completed all {iters} steps on every rank",
        ],
    )
    happened = (
        f"Four ranks log through Python logging (`%(asctime)s - %(levelname)s - %(name)s - "
        f"%(message)s`) into `logs/train_rank<N>.log`; only rank 0 also logs to the console. Rank "
        f"{slow_rank} sleeps {delay}s in its data loading every step (a slow disk or a slow "
        "pre-processing worker). The job completes; every rank's step_time grows to rank "
        f"{slow_rank}'s pace, the others spend the difference in the gradient all_reduce "
        "(`comm_time`)."
    )
    must_say = (
        f"The job completed, but rank {slow_rank} is a straggler: its data_time is about {delay}s per "
        "step while the other ranks' is near zero, and the other ranks' comm_time is the time they "
        f"wait for rank {slow_rank}. The throughput of the whole job is set by rank {slow_rank}."
    )
    return Outcome(exp, [run.shown], happened, must_say)


# --- 6. NaN loss ---------------------------------------------------------------------------------


@scenario
def s_nan_loss(ws: Workspace) -> Outcome:
    """A record with a huge loss_scale makes one rank's loss inf; all_reduce spreads it to all."""
    world, bad_rank, bad_step, seq, iters = 4, 1, 15, 256, 30
    recs = common_data(ws)
    line = place(recs, world, bad_rank, bad_step, seq, loss_scale=1e39)
    write_jsonl(ws.root / "data/train.jsonl", recs)
    argv = [
        "torchrun",
        "--standalone",
        f"--nproc-per-node={world}",
        "--tee",
        "3",
        *trainer(
            "--data",
            "data/train.jsonl",
            "--seq-len",
            str(seq),
            "--train-iters",
            str(iters),
            "--pg-timeout",
            "20",
            "--log-format",
            "std",
        ),
    ]
    run = Launch.start(ws, argv, "console.log", ws.env())
    rc = run.wait()
    check(rc == 0, f"the job failed ({rc})")
    lines = list(prefixed_lines(run.console))
    steps = last_steps(lines, STEP_RE)
    check(set(steps.values()) == {iters}, f"last steps {steps}")
    bad = sorted(
        (int(m.group(1)), r)
        for r, t in lines
        if (m := re.search(r"step:(\d+)/\d+ \| loss: \S+ \| local_loss: (inf|nan)", t))
    )
    first_bad = bad[0] if bad else None
    check(first_bad == (bad_step, bad_rank), f"first non-finite local loss (step, rank): {first_bad}")
    check([r for st, r in bad if st == bad_step] == [bad_rank], "other ranks non-finite at the bad step")
    exp = base_expected(
        "nan_loss",
        status="completed",
        category="numerical_instability",
        culprit_ranks=[bad_rank],
        first_failing_rank=bad_rank,
        first_failing_step=bad_step,
        world_size=world,
        ranks=list(range(world)),
        last_step=steps_json(steps),
        files={"job/console.log": "torchrun_console"},
        facts=[
            f"data line {line} (rank {bad_rank}'s shard) has loss_scale 1e39, inf in float32",
            f"at step {bad_step} rank {bad_rank}'s local_loss is inf while the other ranks' are finite; "
            "the all-reduced loss is inf on every rank",
            f"grad_norm is nan on every rank from step {bad_step}; from step {bad_step + 1} on loss "
            "and local_loss are nan on every rank too",
            f"the job does not stop: all {iters} steps complete with nan loss",
        ],
    )
    happened = (
        f"Four ranks, `--tee 3` console. Data line {line}, read by rank {bad_rank} for step "
        f"{bad_step}, carries `loss_scale: 1e39` (inf in float32). Rank {bad_rank}'s weighted loss "
        "is inf, its gradients inf/nan; the gradient all_reduce spreads them to every rank, so "
        f"from step {bad_step + 1} the weights and the loss are nan everywhere. Every rank logs the "
        "all-reduced `loss` and its own `local_loss` each step. Nothing guards against it: the job "
        "runs to the end."
    )
    must_say = (
        f"The loss became non-finite at step {bad_step}, first on rank {bad_rank} (its local_loss is "
        "inf while the others are finite); the all_reduce then made loss, grad_norm and the weights "
        f"nan on every rank. The training after step {bad_step} is wasted although the job 'completed'. "
        "Look at the data rank "
        f"{bad_rank} read at step {bad_step} (a bad loss_scale) and add a non-finite loss guard."
    )
    return Outcome(exp, [run.shown], happened, must_say)


# --- 7. healthy --------------------------------------------------------------------------------


@scenario
def s_healthy(ws: Workspace) -> Outcome:
    """An ordinary good run: --log-dir tree plus a --tee 3 console."""
    world, seq, iters = 4, 256, 40
    write_jsonl(ws.root / "data/train.jsonl", common_data(ws))
    argv = [
        "torchrun",
        "--standalone",
        f"--nproc-per-node={world}",
        "--log-dir",
        "logs",
        "--tee",
        "3",
        *trainer(
            "--data",
            "data/train.jsonl",
            "--seq-len",
            str(seq),
            "--train-iters",
            str(iters),
            "--pg-timeout",
            "20",
        ),
    ]
    env = {"LOGLEVEL": "INFO"}
    run = Launch.start(ws, argv, "console.log", ws.env(**env))
    rc = run.wait()
    check(rc == 0, f"the job failed ({rc})")
    steps = last_steps(prefixed_lines(run.console), STEP_RE)
    check(set(steps.values()) == {iters}, f"last steps {steps}")
    outs = sorted((ws.root / "logs").glob("*/attempt_0/*/stdout.log"))
    base = f"job/logs/{outs[0].parent.parent.parent.name}/attempt_0"
    exp = base_expected(
        "healthy",
        status="completed",
        category="healthy",
        world_size=world,
        ranks=list(range(world)),
        last_step=steps_json(steps),
        files={
            "job/console.log": "torchrun_console",
            f"{base}/0/stdout.log": "torchrun_logdir",
            f"{base}/3/stdout.log": "torchrun_logdir",
        },
        facts=[
            f"all {world} ranks log steps 1..{iters} and 'training finished'",
            "the launcher's only warning is the OMP_NUM_THREADS banner; LOGLEVEL=INFO adds its "
            "ordinary INFO lines (launch configs, rendezvous, worker group finished)",
            "no error, no traceback, exit code 0",
        ],
    )
    happened = (
        f"Four ranks train {iters} steps and finish; `--log-dir logs --tee 3` leaves both the "
        "per-rank `attempt_0/<local_rank>/stdout.log|stderr.log` tree and a `[defaultN]:` console. "
        "`LOGLEVEL=INFO` makes the launcher print its ordinary INFO lines too."
    )
    must_say = (
        "The job completed normally: no failure, no straggler, loss decreasing. The "
        "OMP_NUM_THREADS banner is not a problem. A report should say 'healthy' and not invent findings."
    )
    return Outcome(exp, [run.shown], happened, must_say, env)


# --- 8. rendezvous failure -----------------------------------------------------------------------


@scenario
def s_rendezvous_failure(ws: Workspace) -> Outcome:
    """--nnodes=2 but only one node is started: rendezvous times out."""
    port = free_port()
    write_jsonl(ws.root / "data/train.jsonl", common_data(ws))
    argv = [
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=pretrain-0412",
        "--rdzv-conf",
        "join_timeout=20,read_timeout=10",
        *trainer("--data", "data/train.jsonl", "--train-iters", "40"),
    ]
    env = {"LOGLEVEL": "INFO"}
    run = Launch.start(ws, argv, "console.log", ws.env(**env))
    rc = run.wait()
    check(rc != 0, "the launcher did not fail")
    text = run.console.read_text(errors="replace")
    check("Rendezvous" in text or "rendezvous" in text, "no rendezvous error")
    check("epoch:0 step" not in text, "workers started")
    quote = console_tail(run.console, r"^torch\.distributed\S*(Rendezvous\w*Error|DistStoreError)")
    check(bool(quote), "no rendezvous exception line")
    exp = base_expected(
        "rendezvous_failure",
        status="failed",
        category="comm_init_failure",
        world_size=None,
        ranks=[],
        files={"job/console.log": "torchrun_console"},
        facts=[
            "the launcher waited for 2 nodes (--nnodes=2) and only 1 joined",
            "the intended world size is 4 (2 nodes x 2 processes, see the launch configs); no "
            "process group was ever formed, so world_size is null",
            f"the error: {quote.strip()[:300]}",
            "no worker process was started: there is no training line and no rank",
        ],
    )
    happened = (
        "The job was launched for two nodes (`--nnodes=2 --nproc-per-node=2`, c10d rendezvous on "
        "127.0.0.1) but only one launcher was started. The rendezvous waits `join_timeout=20` "
        "seconds for the second node and then the launcher gives up with a bare "
        "`RendezvousTimeoutError`; no worker is ever started. `LOGLEVEL=INFO` shows the launch "
        "configuration (min_nodes/max_nodes 2, rdzv_configs) and `Rendezvous'ing worker group`."
    )
    must_say = (
        "The job never started training: the rendezvous timed out because only one of the two "
        "nodes joined. Check that every node's launcher was started with the same --rdzv-endpoint "
        "and --rdzv-id and that the endpoint is reachable from all nodes."
    )
    return Outcome(exp, [run.shown], happened, must_say, env)


# --- 9. two nodes, failure on the second ----------------------------------------------------------


@scenario
def s_two_node_failure(ws: Workspace) -> Outcome:
    """Two launchers on localhost as node-a/node-b; an out-of-vocabulary record crashes rank 3."""
    world, nproc, bad_rank, bad_step, seq = 4, 2, 3, 9, 256
    ws.hosts.update({"node-a": "node-a", "node-b": "node-b"})  # shared filesystem, two hosts
    recs = common_data(ws)
    i = doc_starting_in_batch(recs, world, bad_rank, bad_step, seq)
    ids = tokenize(recs[i]["text"])
    ids[0] = 151643  # a token id from another tokenizer's vocabulary
    recs[i] = {"input_ids": ids, "text": recs[i]["text"]}
    write_jsonl(ws.root / "data/train.jsonl", recs)
    port = free_port()
    runs: list[Launch] = []
    for node_rank, node in enumerate(("node-a", "node-b")):
        argv = [
            "torchrun",
            "--nnodes=2",
            f"--node-rank={node_rank}",
            f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            "--log-dir",
            f"{node}/logs",
            "--tee",
            "3",
            *trainer(
                "--data",
                "data/train.jsonl",
                "--seq-len",
                str(seq),
                "--train-iters",
                "30",
                "--pg-timeout",
                "20",
                "--record",
            ),
        ]
        runs.append(Launch.start(ws, argv, f"{node}/console.log", ws.env()))
    rcs = [r.wait() for r in runs]
    check(all(rc != 0 for rc in rcs), f"exit codes {rcs}")
    steps: dict[int, int] = {}
    for node_rank, r in enumerate(runs):
        steps.update(last_steps(prefixed_lines(r.console, node_rank, nproc), STEP_RE))
    check(steps.get(bad_rank) == bad_step - 1, f"last steps {steps}")
    text_b = runs[1].console.read_text(errors="replace")
    check("IndexError: index out of range in self" in text_b, "no IndexError on node-b")
    errs = sorted((ws.root / "node-b/logs").glob("*/attempt_0/1/error.json"))
    check(bool(errs), "no error.json for rank 3")
    base_b = f"job/node-b/logs/{errs[0].parent.parent.parent.name}/attempt_0"
    outs_a = sorted((ws.root / "node-a/logs").glob("*/attempt_0/0/stderr.log"))
    base_a = f"job/node-a/logs/{outs_a[0].parent.parent.parent.name}/attempt_0"
    exp = base_expected(
        "two_node_failure",
        status="failed",
        category="rank_exception",
        culprit_ranks=[bad_rank],
        first_failing_rank=bad_rank,
        first_failing_step=bad_step,
        world_size=world,
        nodes=["node-a", "node-b"],
        ranks=list(range(world)),
        last_step=steps_json(steps),
        files={
            "job/node-a/console.log": "torchrun_console",
            "job/node-b/console.log": "torchrun_console",
            f"{base_b}/1/stderr.log": "torchrun_logdir",
            f"{base_b}/1/error.json": "elastic_error",
            f"{base_a}/0/stderr.log": "torchrun_logdir",
        },
        facts=[
            f"data line {i} is pre-tokenized and holds token id 151643, outside the 256-token vocabulary",
            f"rank {bad_rank} (node-b, local_rank 1) raised IndexError: index out of range in self "
            f"in the embedding at step {bad_step}",
            "node-a's ranks 0 and 1 failed afterwards on the broken gloo connection (echoes)",
            "[defaultN]: is the local rank: on node-b [default1] is global rank 3",
            "both launchers print their own ChildFailedError; host is node-a / node-b",
        ],
    )
    happened = (
        "A two-node job simulated on one machine: two torchrun launchers (`--nnodes=2 "
        "--node-rank=0|1 --nproc-per-node=2 --master-addr=127.0.0.1`), each with its own folder "
        f"named like its host (`node-a/`, `node-b/`: console plus `--log-dir` tree with `--tee 3`). "
        f"Data line {i} is a pre-tokenized record whose first token id (151643) is outside the "
        f"model's 256-entry vocabulary; rank {bad_rank} (node-b, local rank 1) reads it for step "
        f"{bad_step} and the embedding raises `IndexError: index out of range in self`. Its peers "
        "lose the gloo connection and fail too; each launcher prints its own ChildFailedError."
    )
    must_say = (
        f"The first failure is rank {bad_rank} on node-b: IndexError in the embedding at step "
        f"{bad_step} (an out-of-vocabulary token id in the data). node-a's failures are echoes "
        "(connection closed / reset by the dead peer). Local ranks must be mapped to global ranks "
        "per node (node-b local 1 = global 3)."
    )
    where = "Run at the same time from the job directory (both hosts share it, as on NFS):"
    return Outcome(exp, [r.shown for r in runs], happened, must_say, where=where)


# --- 7b. healthy, HF Trainer style ---------------------------------------------------------------

SWIFT_SEED, SWIFT_LINES, SWIFT_MAX_LEN = 101, 6600, 512


def swift_data(ws: Workspace, *node_dirs: str) -> None:
    """The pre-training jsonl, under ./workdir/dataset of every working directory."""
    recs = synth_records(SWIFT_LINES, SWIFT_SEED)
    for d in node_dirs or ("",):
        write_jsonl(ws.root / d / "workdir/dataset/shuffled_dataset.jsonl", recs)


@scenario
def s_healthy_hf(ws: Workspace) -> Outcome:
    """A healthy HF-Trainer-style run: dict lines and tqdm bars from rank 0 in a plain console."""
    swift_data(ws)
    argv = [
        "torchrun",
        "--standalone",
        "--nproc-per-node=2",
        "swift_pt.py",
        "--style",
        "hf",
        "--model",
        "./workdir/base_model",
        "--dataset",
        "./workdir/dataset/shuffled_dataset.jsonl",
        "--output_dir",
        "./workdir/output",
        "--max_steps",
        "60",
        "--max_length",
        str(SWIFT_MAX_LEN),
        "--per_device_train_batch_size",
        "1",
        "--per_device_eval_batch_size",
        "1",
        "--gradient_accumulation_steps",
        "2",
        "--learning_rate",
        "1e-3",
        "--warmup_ratio",
        "0.1",
        "--lr_scheduler_type",
        "linear",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "20",
        "--save_steps",
        "60",
        "--split_dataset_ratio",
        "0.05",
        "--logging_steps",
        "5",
        "--packing",
        "True",
        "--ddp_timeout",
        "30",
    ]
    run = Launch.start(ws, argv, "train.log", ws.env())
    rc = run.wait()
    check(rc == 0, f"the job failed ({rc})")
    text = run.console.read_text(errors="replace")
    n_dicts = len(re.findall(r"\{'loss': ", text))
    n_eval = len(re.findall(r"\{'eval_loss': ", text))
    check(n_dicts == 12 and n_eval == 3, f"{n_dicts} loss dicts, {n_eval} eval dicts")
    check("'train_runtime'" in text, "no final train_runtime dict")
    check(b"\r" in run.console.read_bytes(), "no tqdm redraws")
    losses = [float(x) for x in re.findall(r"\{'loss': ([\d.]+)", text)]
    logs = sorted((ws.root / "workdir/output").glob("v0-*/logging.jsonl"))
    check(len(logs) == 1, "no logging.jsonl")
    exp = base_expected(
        "healthy_hf",
        status="completed",
        category="healthy",
        world_size=2,
        # rank 1 prints nothing that names it (no --tee, HF logs on rank 0 only): only the world
        # size (from --nproc-per-node) says it exists
        ranks=[0],
        last_step={"0": 60},
        # the launcher's console saved as train.log (no --tee): the same kind of file as seed004's consoles
        files={"job/train.log": "torchrun_console", f"job/{logs[0].relative_to(ws.root)}": "trainer_log"},
        facts=[
            "only rank 0 prints progress: HF dict lines every 5 steps, eval dicts at steps 20/40/60, "
            "a final train_runtime dict",
            f"the loss goes from {losses[0]} to {losses[-1]}",
            "tqdm bars are redrawn with \\r inside one physical line; eval bars use ESC[A",
            "no rank prefixes: the launcher ran without --tee",
        ],
    )
    happened = (
        "Two ranks run an HF-Trainer-style loop (DDP over gloo) for 60 optimizer steps with "
        "gradient accumulation 2 and an evaluation every 20 steps. The launcher ran without "
        "`--tee`, output captured as `train.log`: rank 0 prints the `***** Running training *****` "
        "banner, a tqdm bar (redrawn with `\\r`), an HF log dict every 5 steps, eval dicts and the "
        "final `train_runtime` dict; rank 0 also writes the dicts to "
        "`workdir/output/v0-<time>/logging.jsonl`."
    )
    must_say = (
        "Healthy run: 60/60 steps, eval at 20/40/60, loss decreasing, exit code 0. No finding "
        "beyond informational ones."
    )
    return Outcome(exp, [run.shown], happened, must_say)


# --- 10. seed 004: two nodes hang, one node works -------------------------------------------------

#: the seed's swift_pt.py arguments; max_length is cut from 32768 to 512 for a CPU run and
#: --ddp_timeout is added so the hang ends; everything else is as the user typed it
SEED004_ARGS = [
    "./swift_pt.py",
    "--model",
    "./workdir/base_model",
    "--model_type",
    "qwen3",
    "--dataset",
    "./workdir/dataset/shuffled_dataset.jsonl",
    "--output_dir",
    "./workdir/swift_output",
    "--dataloader_num_workers",
    "10",
    "--dataset_num_proc",
    "10",
    "--attn_impl",
    "flash_attn",
    "--max_steps",
    "400",
    "--max_length",
    str(SWIFT_MAX_LEN),
    "--per_device_train_batch_size",
    "1",
    "--per_device_eval_batch_size",
    "1",
    "--sequence_parallel_size",
    "1",
    "--learning_rate",
    "1e-5",
    "--warmup_ratio",
    "0.05",
    "--weight_decay",
    "1e-4",
    "--max_grad_norm",
    "1.0",
    "--gradient_accumulation_steps",
    "8",
    "--save_strategy",
    "steps",
    "--save_steps",
    "400",
    "--save_total_limit",
    "1",
    "--train_type",
    "full",
    "--deepspeed",
    "zero3_offload",
    "--eval_strategy",
    "steps",
    "--eval_steps",
    "10",
    "--split_dataset_ratio",
    "0.05",
    "--lr_scheduler_type",
    "warmup_stable_decay",
    # the seed writes "{ "num_decay_steps": 120, "num_stable_steps": 260}": the shell drops the
    # inner quotes, so this is what the script receives
    "--lr_scheduler_kwargs",
    "{ num_decay_steps: 120, num_stable_steps: 260}",
    "--packing",
    "True",
    "--dataset_shuffle",
    "True",
    "--train_dataloader_shuffle",
    "True",
    "--truncation_strategy",
    "right",
    "--dataloader_num_workers",
    "4",
    "--model_author",
    "swift",
    "--model_name",
    "swift-robot",
    "--log_level",
    "detail",
    "--logging_steps",
    "1",
    "--report_to",
    "wandb",
    "--ddp_timeout",
    "40",
]

SEED004_SETTINGS = {
    "per_device_train_batch_size": 1,
    "per_device_eval_batch_size": 1,
    "gradient_accumulation_steps": 8,
    "max_steps": 400,
    "eval_steps": 10,
    "save_steps": 400,
    "logging_steps": 1,
    "deepspeed": "zero3_offload (ZeRO stage 3, optimizer and parameter offload to cpu)",
    "dataloader_num_workers": "given twice: 10, then 4 (argparse keeps 4)",
    "split_dataset_ratio": 0.05,
}


def settings_fact() -> str:
    """The trainer settings a config extractor should find in the logs, as one fact."""
    return "settings: " + "; ".join(f"{k}={v}" for k, v in SEED004_SETTINGS.items())


def eval_split_sizes(nnodes: int) -> list[int]:
    """Per-node eval split sizes the script will compute (same code, same data)."""
    from data_utils import node_split

    recs = synth_records(SWIFT_LINES, SWIFT_SEED)
    return [len(node_split(recs, nnodes, n, SWIFT_MAX_LEN, 0.05)[1]) for n in range(nnodes)]


@scenario
def s_seed004_two_nodes_hang(ws: Workspace) -> Outcome:
    """Seed 004 as 2 nodes x 2 ranks: per-node eval splits of 20 and 21 -> rank 2 evals once more."""
    ws.add_nodes("node-a", "node-b")
    swift_data(ws, "node-a", "node-b")
    sizes = eval_split_sizes(2)
    per_rank = [len(range(lr, sizes[n], 2)) for n in range(2) for lr in range(2)]
    extra = [r for r, c in enumerate(per_rank) if c == max(per_rank)]
    check(len(extra) == 1, f"eval batches per rank {per_rank}")
    culprit = extra[0]
    port = free_port()
    env = {"TORCH_FR_BUFFER_SIZE": "2000", "FR_DUMP_DIR": "fr"}
    runs = []
    for node_rank, node in enumerate(("node-a", "node-b")):
        argv = [
            "torchrun",
            "--nnodes=2",
            f"--node_rank={node_rank}",
            "--nproc_per_node=2",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
            *SEED004_ARGS,
        ]
        runs.append(Launch.start(ws, argv, f"{node}/console.log", ws.env(node, **env), cwd=node))
    fr_count = lambda: len(list(ws.root.glob("node-*/fr/rank*.pkl")))  # noqa: E731
    check(wait_until(lambda: fr_count() >= 4, 80), "the ranks never stalled")
    for node, run in zip(("node-a", "node-b"), runs, strict=True):
        pids = run.worker_pids()
        check(len(pids) == 2, f"{node}: workers {pids}")
        for rank, pid in pids.items():
            pyspy(pid, ws.root / node / f"pyspy/rank{rank}.txt")
            if rank in (0, culprit):
                pyspy(pid, ws.root / node / f"pyspy/rank{rank}.json", as_json=True)
    rcs = [r.wait() for r in runs]
    check(all(rc != 0 for rc in rcs), f"exit codes {rcs}")
    node_of = lambda r: "node-a" if r < 2 else "node-b"  # noqa: E731
    stacks = {r: (ws.root / node_of(r) / f"pyspy/rank{r}.txt").read_text() for r in range(4)}
    check("evaluate" in stacks[culprit] and "all_gather" in stacks[culprit], "culprit not in eval all_gather")
    for r in range(4):
        if r != culprit:
            check("backward" in stacks[r], f"rank {r} not blocked in backward")
    text_a = runs[0].console.read_text(errors="replace")
    steps = [int(x) for x in re.findall(r"'global_step/max_steps': '(\d+)/400'", text_a)]
    last = max(steps)
    check(last == 10, f"last logged step {last}")
    eval_rows = [
        int(x)
        for x in re.findall(
            r"val_dataset: Dataset\(\{[^}]*num_rows: (\d+)\}\)",
            text_a + runs[1].console.read_text(errors="replace"),
        )
    ]
    check(eval_rows == sizes, f"val rows {eval_rows} vs {sizes}")
    files = {
        "job/node-a/console.log": "torchrun_console",
        "job/node-b/console.log": "torchrun_console",
        f"job/{node_of(culprit)}/pyspy/rank{culprit}.txt": "pyspy",
        f"job/{node_of(culprit)}/pyspy/rank{culprit}.json": "pyspy_json",
        "job/node-a/pyspy/rank0.txt": "pyspy",
        f"job/{node_of(culprit)}/fr/rank{culprit}.pkl": "flight_recorder",
        "job/node-a/fr/rank0.json": "flight_recorder",
    }
    jl = sorted((ws.root / "node-a/workdir/swift_output").glob("v0-*/logging.jsonl"))
    if jl:
        files[f"job/node-a/{jl[0].relative_to(ws.root / 'node-a')}"] = "trainer_log"
    exp = base_expected(
        "seed004_two_nodes_hang",
        status="hung",
        category="data_exhaustion_desync",
        culprit_ranks=[culprit],
        first_failing_rank=culprit,
        first_failing_step=10,
        world_size=4,
        nodes=["node-a", "node-b"],
        ranks=[0, 1, 2, 3],
        last_step={"0": last},
        files=files,
        facts=[
            f"each node splits its own eval set: val_dataset num_rows {sizes[0]} on node-a, "
            f"{sizes[1]} on node-b",
            f"eval batches per rank (per_device_eval_batch_size 1, no padding): {per_rank}",
            f"rank {culprit} (node-b, local rank {culprit % 2}) runs one more eval batch, i.e. one more "
            "all_gather, than the others at the step-10 evaluation",
            f"at the hang rank {culprit} is in all_gather called from evaluate(); the other ranks are in "
            "loss.backward() (DDP gradient all_reduce) of step 11",
            "rank 0's last log dict is global_step/max_steps 10/400 followed by the step-10 eval dict",
            "the duplicated --dataloader_num_workers (10, then 4) is harmless: argparse keeps 4",
            "--deepspeed zero3_offload is only recorded by the stand-in script (DDP is used)",
            "the gloo timeout (--ddp_timeout 40) ended the hang",
        ],
    )
    exp["facts"].append(settings_fact())
    happened = (
        "Seed 004's launch, reproduced with an ms-swift-like stand-in script (`swift_pt.py`, tiny "
        "model, DDP over gloo): two torchrun launchers, `--nnodes=2 --nproc_per_node=2`, each in its "
        "own working directory named after its host (`node-a/`, `node-b/`), same command line as the "
        "seed (duplicated `--dataloader_num_workers` included) except `--max_length 512` (CPU) and an "
        "added `--ddp_timeout 40`. The script shards the jsonl by node, packs it and splits "
        f"`split_dataset_ratio 0.05` off per node: node-a gets {sizes[0]} eval sequences, node-b "
        f"{sizes[1]}. Each rank evaluates its own share without padding ({per_rank}), gathering "
        "metrics after every batch. At the step-10 evaluation rank "
        f"{culprit} enters an 11th all_gather that no other rank joins; the others return to "
        "training and block in step 11's DDP all_reduce. After 5 s the stall watchdog dumps the "
        "flight recorder (`fr/`), the generator takes py-spy dumps (`pyspy/`), and after 40 s the gloo "
        "timeout ends the job on both nodes."
    )
    must_say = (
        f"The two-node job hung at the first evaluation (step 10) because the eval data is split "
        f"unevenly: node-b's split has {sizes[1]} rows against node-a's {sizes[0]}, so rank "
        f"{culprit} runs one more eval batch (one more all_gather) than everyone else while the other "
        "ranks are already in the next training step's gradient all_reduce. On one node the split "
        "has "
        f"{eval_split_sizes(1)[0]} rows, 10 per rank, which is why 1x4 works. Fix: split the eval "
        "set once for the whole job and pad/drop so every rank runs the same number of eval "
        "batches (DistributedSampler / accelerate even_batches). The duplicated "
        "--dataloader_num_workers and zero3_offload are not the cause."
    )
    where = (
        "Run at the same time, each from its host's working directory (`node-a/`, then "
        "`node-b/`; the generator gives each its own copy of the script and the data):"
    )
    return Outcome(exp, [r.shown for r in runs], happened, must_say, env, where=where)


@scenario
def s_seed004_one_node_ok(ws: Workspace) -> Outcome:
    """Seed 004's script as 1 node x 4 ranks: one eval split of 40, 10 per rank -> completes."""
    swift_data(ws)
    sizes = eval_split_sizes(1)
    check(sizes[0] % 4 == 0, f"one-node eval split {sizes}")
    port = free_port()
    argv = [
        "torchrun",
        "--nnodes=1",
        "--node_rank=0",
        "--nproc_per_node=4",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        *SEED004_ARGS,
    ]
    run = Launch.start(ws, argv, "console.log", ws.env())
    rc = run.wait()
    check(rc == 0, f"the job failed ({rc})")
    text = run.console.read_text(errors="replace")
    steps = [int(x) for x in re.findall(r"'global_step/max_steps': '(\d+)/400'", text)]
    check(max(steps) == 400, f"last logged step {max(steps)}")
    n_eval = len(re.findall(r"\{'eval_loss': ", text))
    check(n_eval == 40, f"{n_eval} evaluations")
    jl = sorted((ws.root / "workdir/swift_output").glob("v0-*/logging.jsonl"))
    check(len(jl) == 1, "no logging.jsonl")
    exp = base_expected(
        "seed004_one_node_ok",
        status="completed",
        category="healthy",
        world_size=4,
        ranks=[0, 1, 2, 3],
        last_step={"0": 400},
        files={"job/console.log": "torchrun_console", f"job/{jl[0].relative_to(ws.root)}": "trainer_log"},
        facts=[
            f"one eval split of {sizes[0]} rows, {sizes[0] // 4} eval batches on every rank",
            "40 evaluations (every 10 steps), 400/400 steps, exit code 0",
            "same script and arguments as seed004_two_nodes_hang, only --nnodes=1 --nproc_per_node=4",
            "the duplicated --dataloader_num_workers (10, then 4) is present here too and harmless",
        ],
    )
    exp["facts"].append(settings_fact())
    happened = (
        "The same ms-swift-like script and arguments as `seed004_two_nodes_hang`, launched as one "
        "node with four ranks (`--nnodes=1 --nproc_per_node=4`). The single node packs the whole "
        f"file and splits {sizes[0]} eval sequences off, {sizes[0] // 4} per rank, so every "
        "evaluation runs the same number of all_gathers on every rank and the job completes 400 "
        "steps with 40 evaluations."
    )
    must_say = (
        "Healthy run (400/400 steps, exit code 0). Compared with seed004_two_nodes_hang the only "
        "difference is the topology, which changes how the eval split is made (one split for the "
        "node instead of one per node): that is the cause of the two-node hang."
    )
    return Outcome(exp, [run.shown], happened, must_say)


# --- driver ------------------------------------------------------------------------------------


def write_readme(dest: Path, name: str, out: Outcome, version: str) -> None:
    env = "".join(f"{k}={v} " for k, v in out.env.items())
    cmds = "\n".join(env + c for c in out.commands)
    today = dt.date.today().isoformat()
    files = "\n".join(f"- `{f}`: {fam}" for f, fam in out.expected["files"].items())
    text = f"""# {name}

Real run, produced by `tools/corpus/generate.py --only {name}` on {today}: torch {version}
(CPU wheel, gloo backend), Python {sys.version.split()[0]}, one machine with 2 cores. Workspace
paths are rewritten to `/workspace/job`, the Python prefix to `/opt/conda`, the host name to
`node-a`/`node-b`; nothing else in `job/` was edited. The scripts (`tools/corpus/`) and the
generated data they read are not part of `job/`.

## Command

{out.where}

```sh
{cmds}
```

## What happened

{out.happened}
{out.notes}
## What a correct analysis must say

{out.must_say}

## Key files

{files}
"""
    (dest / "README.md").write_text(text)


def run_one(name: str, out_root: Path, version: str, keep: bool) -> None:
    ws = Workspace.create(name)
    t0 = time.monotonic()
    print(f"[{name}] workspace {ws.root}", flush=True)
    try:
        outcome = SCENARIOS[name](ws)
        dest = out_root / name
        if dest.exists():
            shutil.rmtree(dest)
        (dest / "job").mkdir(parents=True)
        export_job(ws, dest / "job")
        subs = ws.replacements()
        scrub = lambda s: _scrub_text(s, subs)  # noqa: E731
        outcome.commands = [scrub(c) for c in outcome.commands]
        for f in outcome.expected["files"]:
            if not (dest / f).exists():
                raise ScenarioError(f"expected file {f} was not produced")
        curated = Path(__file__).resolve().parents[2] / "sample_logs" / "expected_rules.json"
        rules = json.loads(curated.read_text()).get(f"real/{name}", []) if curated.exists() else []
        write_json(dest / "expected.json", {**outcome.expected, "rules": rules})
        write_readme(dest, name, outcome, version)
        print(f"[{name}] ok in {time.monotonic() - t0:.0f}s, {dir_size(dest) / 1024:.0f} KiB", flush=True)
    finally:
        if keep:
            print(f"[{name}] kept workspace {ws.root}")
        else:
            ws.remove()


def _scrub_text(text: str, subs: list[tuple[str, str]]) -> str:
    for a, b in subs:
        text = text.replace(a, b)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="corpus directory, e.g. sample_logs/real")
    ap.add_argument("--only", action="append", choices=sorted(SCENARIOS), help="run just this scenario")
    ap.add_argument("--keep", action="store_true", help="keep the temporary workspaces")
    args = ap.parse_args()
    version = torch_version()
    args.out.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    for name in args.only or list(SCENARIOS):
        try:
            run_one(name, args.out, version, args.keep)
        except (ScenarioError, RuntimeError) as e:
            print(f"[{name}] FAILED: {e}", file=sys.stderr, flush=True)
            failed.append(name)
    size = dir_size(args.out)
    print(f"corpus size {size / 1024 / 1024:.1f} MiB")
    if size > SIZE_BUDGET:
        print(f"corpus is over the {SIZE_BUDGET // 1024 // 1024} MiB budget", file=sys.stderr)
        failed.append("size")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
