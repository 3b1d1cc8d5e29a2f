"""Seed 003: ten Ascend/PTA distributed problems; one job per problem that has log evidence.

Problems 4 (DeviceMesh.get_group script error) and 5 (verl timeout fixed by an env var) give no
log lines to rebuild from, so they have no job. Every other problem becomes a job directory
built around the lines the seed quotes (``verbatim.py``).
"""

from __future__ import annotations

import math
import random
from datetime import datetime

import verbatim as V
from common import (
    Failure,
    Job,
    Mono,
    Stream,
    Torchrun,
    after,
    asctime,
    c10,
    cann_ts,
    epoch_us,
    expected,
    jitter,
    loss_curve,
    plog,
    plog_name,
    prefixed,
    tb_frame,
)


def _owner_warning(site: str) -> list[str]:
    """The torch_npu start-up warning printed by every process on most Ascend images."""
    return [
        f"{site}/torch_npu/utils/path_manager.py:82: UserWarning: Warning: The "
        "/usr/local/Ascend/ascend-toolkit/latest owner does not match the current owner.",
        '  warnings.warn(f"Warning: The {path} owner does not match the current owner.")',
    ]


def _text(lines: list[str]) -> str:
    return "".join(f"{x}\n" for x in lines)


# =========================================================================== problem 1


def p1_batch_isend_irecv_nan() -> Job:
    """PP=2 x DP=4 on 8 NPUs with batch_isend_irecv; activations turn NaN at step 97 (PTA 2.6.0.post5)."""
    rng = random.Random(3001)
    job = Job("seed003_p1_batch_isend_irecv_nan")
    host = "atlas800-21"
    py = "/root/miniconda3/envs/pp/bin/python3.10"
    site = "/root/miniconda3/envs/pp/lib/python3.10/site-packages"
    tr = Torchrun(ident=90412, run_line=792, sigterm_line=897, failed_line=869,
                  launcher_lines=(355, 918, 909, 138, 269), python=py, site=site, py311=False)
    launch = datetime(2026, 4, 16, 10, 12, 3, 117000)
    steps, nan_step = 150, 97
    run_dir = "torchrun_logs/none_k3v9x2qa/attempt_0"
    losses = loss_curve(rng, steps, 10.62, 3.05, 0.012)
    gnorms = [jitter(rng, 0.45 + 2.2 * math.exp(-i / 14), 0.1) for i in range(steps)]
    t_step1 = after(launch, 41.7)
    ends = [t_step1]
    for _ in range(1, steps):
        ends.append(after(ends[-1], jitter(rng, 1.84, 0.03)))
    for lr in range(8):
        stage = lr // 4
        out: list[str] = []
        t = after(launch, jitter(rng, 7.5, 0.05))

        def log(ts: datetime, msg: str, out: list[str] = out, lr: int = lr) -> None:
            out.append(f"{asctime(ts)} - INFO - [rank {lr}] {msg}")

        log(t, "versions: torch 2.6.0, torch_npu 2.6.0.post5, CANN 8.1.RC1, python 3.10.16")
        log(t, f"init_process_group(backend=hccl) done: world_size 8, device npu:{lr}, host {host}")
        log(
            after(t, 0.3),
            f"pipeline: pp_size=2, dp_size=4, stage={stage}, micro_batches=8, p2p=batch_isend_irecv "
            f"(peer rank {lr + 4 if stage == 0 else lr - 4})",
        )
        log(after(t, 2.9), f"model: GPT 24 layers (1.31B params), stage {stage} holds layers {12 * stage}-{12 * stage + 11}")
        for i in range(steps):
            step = i + 1
            ts = after(ends[i], rng.uniform(0.003, 0.03))
            lr_val = 3e-4 * min(1.0, step / 10) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
            if step < nan_step:
                vals = f"loss {losses[i]:.4f} | grad_norm {gnorms[i]:.3f}"
            else:
                vals = "loss nan | grad_norm nan"
            dt = (ends[i] - ends[i - 1]).total_seconds() if i else 35.12
            log(ts, f"step {step}/{steps} | {vals} | lr {lr_val:.2e} | {dt:.2f} s/step")
        done = after(ends[-1], 0.4)
        log(done, f"training finished: {steps} steps in {(done - t).total_seconds() / 60:.1f} min")
        job.files[f"{run_dir}/{lr}/stdout.log"] = _text(out)
        job.files[f"{run_dir}/{lr}/stderr.log"] = _text(_owner_warning(site))
        job.must_contain(f"{run_dir}/{lr}/stdout.log", ["versions: torch 2.6.0, torch_npu 2.6.0.post5"])
    job.add("console.log", tr.banner(launch))
    files = {"console.log": "torchrun_console"}
    for lr in range(8):
        files[f"{run_dir}/{lr}/stdout.log"] = "torchrun_logdir"
        files[f"{run_dir}/{lr}/stderr.log"] = "torchrun_logdir"
    job.expected = expected(
        source="seed 003 problem 1 (batch_isend_irecv NaN, PTA 2.6.0.post5)",
        status="completed",
        category="numerical_instability",
        culprit_ranks=[],
        first_failing_rank=None,
        first_failing_step=nan_step,
        world_size=8,
        nodes=[host],
        last_step=dict.fromkeys(range(8), steps),
        files=files,
        facts=[
            f"loss and grad_norm are finite up to step {nan_step - 1} and nan from step {nan_step} to {steps} on all 8 ranks",
            "the job still runs to the end and every rank exits 0 (status completed, no error line)",
            "versions printed at start: torch 2.6.0, torch_npu 2.6.0.post5, CANN 8.1.RC1",
            "pipeline point-to-point traffic uses batch_isend_irecv (pp_size=2, dp_size=4)",
            "the logs alone cannot say which rank produced the first NaN (the loss is broadcast from the last stage)",
        ],
    )
    job.readme = f"""
# seed003_p1_batch_isend_irecv_nan: NaN loss with batch_isend_irecv (reconstruction)

**Reconstruction** of seed 003 problem 1 (PTA 2.6.0.post5): `ProcessGroupHCCL::batch_isend_irecv_inner`
protects only `tensors[0]` with recordStream, so the other tensors of a batched P2P can be reused by the
compute stream while HCCL still reads them, and NaNs appear. Switching to plain isend/irecv avoided it.

## What the job shows

An 8-NPU pipeline-parallel run (pp 2 x dp 4, `pp_train.py`, launched with
`torchrun --nproc_per_node=8 --log-dir ./torchrun_logs --redirects 3`). Every rank logs the same
(broadcast) loss each step. Loss is finite until step {nan_step - 1}, then `loss nan | grad_norm nan`
from step {nan_step} to the last step {steps}; the job completes and exits 0. The console holds only
torchrun's banner, the per-rank output is in the `--log-dir` tree.

A correct analysis says: completed, numerical instability from step {nan_step} on all ranks, no
rank identifiable as the origin, versions PTA 2.6.0.post5 / torch 2.6.0.

## Verbatim from the seed

Nothing but the facts: the seed quotes no log line for this problem. Versions (PTA 2.6.0.post5) and the
mechanism (batch_isend_irecv) are from the seed.

## Invented

The script, its log format, model, step count, NaN step, loss values, CANN 8.1.RC1, host, times
(launch {launch:%Y-%m-%d %H:%M:%S}) and the log-dir run id.
"""
    return job


# =========================================================================== problem 2


def p2_fsdp2_reduce_scatter_nan() -> Job:
    """torchtitan-style FSDP2 run on PTA 2.8.0: grad_norm turns NaN after reduce-scatter at step 23."""
    rng = random.Random(3002)
    job = Job("seed003_p2_fsdp2_reduce_scatter_nan")
    host = "atlas800-22"
    py = "/usr/local/python3.11.13/bin/python3.11"
    site = "/usr/local/python3.11.13/lib/python3.11/site-packages"
    tr = Torchrun(ident=118820, run_line=801, sigterm_line=908, failed_line=882,
                  launcher_lines=(357, 936, 927, 156, 293), python=py, site=site, py311=True)
    launch = datetime(2026, 5, 12, 9, 40, 31, 552000)
    steps, bad = 60, 23
    losses = loss_curve(rng, steps, 12.03, 6.1, 0.01)
    gnorms = [jitter(rng, 0.9 + 6.4 * math.exp(-i / 6), 0.07) for i in range(steps)]
    ends = [after(launch, 96.4)]
    for _ in range(1, steps):
        ends.append(after(ends[-1], jitter(rng, 5.82, 0.02)))
    console = Stream()
    console.extend(launch, tr.banner(launch))
    for r in range(8):
        p = f"[rank{r}]:"
        t = after(launch, jitter(rng, 8.0, 0.05))

        def titan(ts: datetime, msg: str, p: str = p) -> None:
            console.add(ts, f"{p}[titan] {asctime(ts)} - root - INFO - {msg}")

        console.extend(after(t, -1.0), prefixed(p, _owner_warning(site), tee=True))
        titan(t, "Starting job: Qwen3 8B FSDP2 training on Ascend (log_freq=1)")
        titan(t, "Versions: torch 2.8.0+cpu, torch_npu 2.8.0, CANN 8.3.RC1")
        titan(after(t, 0.4), "Building 1-D device mesh with ['dp_shard'], [8]")
        titan(after(t, 0.5), "[GC] Initial GC collection 0.00 seconds")
        titan(after(t, 2.1), "Preparing c4 dataset from /data/datasets/c4")
        titan(after(t, 9.7), "Model qwen3 8B size: 8,190,735,360 total parameters")
        titan(after(t, 9.8), "Applied selective activation checkpointing to the model")
        titan(after(t, 10.3), "Applied FSDP to the model")
        titan(after(t, 12.2), "NPU memory usage for model: 3.84GiB(6.00%)")
        titan(
            after(t, 12.3),
            f"Trainer is initialized with local batch size 2, global batch size 16, gradient accumulation "
            f"steps 1, sequence length 4096, total steps {steps} (warmup 10)",
        )
        titan(after(t, 12.3), "Training starts at step 1")
        for i in range(steps):
            step = i + 1
            ts = after(ends[i], rng.uniform(0.001, 0.02))
            loss = losses[i] if step <= bad else float("nan")
            gn = gnorms[i] if step < bad else float("nan")
            tps = jitter(rng, 1408, 0.01) if step > 1 else 92
            tflops = tps * 6 * 8.19e9 * 1.09 / 1e12
            titan(
                ts,
                f"step: {step:2}  loss: {loss:7.4f}  grad_norm: {gn:7.4f}  memory: {jitter(rng, 41.2, 0.002):5.2f}GiB"
                f"({jitter(rng, 64.4, 0.002):.2f}%)  tps: {round(tps):,}  tflops: {tflops:,.2f}  mfu: {100 * tflops / 313:.2f}%",
            )
        titan(after(ends[-1], 0.6), "Sleeping 2 seconds for other ranks to complete")
        titan(after(ends[-1], 2.7), "Training completed")
    job.add("console.log", console.lines())
    job.must_contain("console.log", ["Versions: torch 2.8.0+cpu, torch_npu 2.8.0"])
    job.expected = expected(
        source="seed 003 problem 2 (FSDP2 reduce-scatter NaN, PTA 2.8.0)",
        status="completed",
        category="numerical_instability",
        culprit_ranks=[],
        first_failing_rank=None,
        first_failing_step=bad,
        world_size=8,
        nodes=[host],
        last_step=dict.fromkeys(range(8), steps),
        files={"console.log": "torchrun_console"},
        facts=[
            f"grad_norm is nan from step {bad} (loss still finite at step {bad}); loss is nan from step {bad + 1}",
            "the same values on all 8 ranks (global loss and grad norm), so no single rank is singled out",
            f"the run completes all {steps} steps; no error or exit code",
            "versions printed: torch 2.8.0, torch_npu 2.8.0, CANN 8.3.RC1; FSDP2 (fully_shard) data parallel",
        ],
    )
    job.readme = f"""
# seed003_p2_fsdp2_reduce_scatter_nan: NaN gradients after FSDP2 reduce-scatter (reconstruction)

**Reconstruction** of seed 003 problem 2 (PTA 2.8.0): in some models the loss became NaN; the gradients
were already NaN right after FSDP2's reduce-scatter, because the accelerator-side code called a CPU
operator without synchronising the compute stream. Fixed by adding a stream synchronisation.

## What the job shows

A torchtitan-style FSDP2 run on 8 NPUs launched with `--role rank --tee 3` (so every line carries
`[rankN]:`) and `metrics.log_freq=1`. `grad_norm` is `nan` first at step {bad} while the loss is still
finite (the NaN enters through the gradients), and the loss is `nan` from step {bad + 1} on. The run
completes all {steps} steps.

A correct analysis says: completed, numerical instability, first bad step {bad} (grad norm) then loss,
identical on all ranks, versions PTA 2.8.0 / torch 2.8.0.

## Verbatim from the seed

No log line is quoted by the seed for this problem; the version and the mechanism are.

## Invented

Model (Qwen3 8B), torchtitan log format and values, CANN 8.3.RC1, host, times (launch
{launch:%Y-%m-%d %H:%M:%S}), the NaN step.
"""
    return job


# =========================================================================== problem 3


P3_SITE = "/home/miniconda3/envs/nwulan/lib/python3.11/site-packages"
P3_SCRIPT = "/home/nwulan/mxfp8_fsdp2/train_fsdp2_mxfp8.py"


def _p3_rank1_error() -> str:
    """Rank 1's side of the same check, built from rank 0's fingerprints with the roles swapped."""
    opts = (
        "TensorOptions(dtype=float (default), device=npu, layout=Strided (default), requires_grad=false "
        "(default), pinned_memory=false (default), memory_format=(nullptr))"
    )
    rs = (
        "CollectiveFingerprint(SequenceNumber=12, OpType=_REDUCE_SCATTER_BASE, TensorShape=[56623104], "
        f"TensorDtypes=Float Float, TensorDeviceTypes={opts})"
    )
    return (
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
        f"CollectiveFingerprint(SequenceNumber=0OpType=GATHER), but Rank 0 is running collective: {rs}."
        "Collectives differ in the following aspects: Sequence number: 0vs 12 Op type: GATHERvs REDUCE SCATTER BASE "
        f"Tensor Tensor shapes: vs 56623104 Tensor Tensor dtypes: vs Float Floats Tensor Tensor devices: vs {opts}"
    )


def p3_collective_mismatch() -> Job:
    """2-rank FSDP2 + MXFP8 run with TORCH_DISTRIBUTED_DEBUG=DETAIL: fingerprint mismatch in backward."""
    rng = random.Random(3003)
    job = Job("seed003_p3_collective_mismatch")
    host = "atlas800-31"
    py = "/home/miniconda3/envs/nwulan/bin/python3.11"
    tr = Torchrun(ident=41803, run_line=766, sigterm_line=900, failed_line=874,
                  launcher_lines=(355, 892, 883, 139, 270), python=py, site=P3_SITE, py311=True)
    launch = datetime(2026, 5, 19, 15, 31, 7, 204000)
    pids = [41871, 41872]
    console = Stream()
    console.extend(launch, tr.banner(launch))
    t_fwd = after(launch, 93.6)
    t_err = after(t_fwd, 2.8)
    for r in range(2):
        t = after(launch, jitter(rng, 8.2, 0.04))
        console.extend(after(t, -1.1), _owner_warning(P3_SITE))
        console.add(t, f"[rank{r}] torch 2.7.1, torch_npu 2.7.1, world_size 2, device npu:{r}, TORCH_DISTRIBUTED_DEBUG=DETAIL")
        console.add(after(t, 61.0), f"[rank{r}] model: 10 x TransformerBlock(d_model=6144, MXFP8Linear), fully_shard per block + root")
        console.add(after(t_fwd, rng.uniform(0, 0.2)), f"[rank{r}] step 1: forward done, loss {11.9373 + 0.0048 * r:.4f}")
    # Rank 0: the seed's traceback, whose quoted part lost its indentation; the outer frames
    # (invented) are written the same way so the block reads as one paste.
    outer = [
        "Traceback (most recent call last):",
        f'File "{P3_SCRIPT}", line 231, in <module>',
        "    main()",
        f'File "{P3_SCRIPT}", line 214, in main',
        "    loss.backward()",
        f'File "{P3_SITE}/torch/_tensor.py", line 648, in backward',
        "    torch.autograd.backward(",
        f'File "{P3_SITE}/torch/autograd/__init__.py", line 354, in backward',
        "    _engine_run_backward(",
        f'File "{P3_SITE}/torch/autograd/graph.py", line 829, in _engine_run_backward',
        "    return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
        "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~",
    ]
    console.extend(t_err, prefixed("[rank0]: ", [*outer, *V.P3_TRACE, "", V.P3_ERROR]))
    job.must_contain("console.log", [f"[rank0]: {x}" for x in V.P3_TRACE if x] + [f"[rank0]: {V.P3_ERROR}"])
    rank1 = [
        "Traceback (most recent call last):",
        f'File "{P3_SCRIPT}", line 231, in <module>',
        "    main()",
        f'File "{P3_SCRIPT}", line 219, in main',
        "    gather_grad_norms(model, step)",
        f'File "{P3_SCRIPT}", line 142, in gather_grad_norms',
        "    dist.gather(norms, gather_list if rank == 0 else None, dst=0)",
        f'File "{P3_SITE}/torch/distributed/c10d_logger.py", line 81, in wrapper',
        "    return func(*args, **kwargs)",
        f'File "{P3_SITE}/torch/distributed/distributed_c10d.py", line 4138, in gather',
        "    work = default_pg.gather(output_tensors, input_tensors, opts)",
        "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~",
        "",
        _p3_rank1_error(),
    ]
    console.extend(after(t_err, 0.004), prefixed("[rank1]: ", rank1))
    t_end = after(t_err, 1.9)
    failures = [
        Failure(rank=r, local_rank=r, pid=pids[r], exitcode=1, time=t_end, host=host) for r in range(2)
    ]
    end = tr.end_of_job(t_end, "train_fsdp2_mxfp8.py", failures)
    for line in end.lines():
        console.add(t_end, line)
    job.add("console.log", console.lines())
    job.expected = expected(
        source="seed 003 problem 3 (FSDP2 collective fingerprint mismatch, PTA 2.7.1)",
        status="failed",
        category="collective_mismatch",
        culprit_ranks=[1],
        # both ranks raise in the same collective; the first failure is the diverging rank's (the
        # culprit's) own error, not whichever mirror message happened to be printed first
        first_failing_rank=1,
        first_failing_step=1,
        world_size=2,
        nodes=[host],
        last_step={0: None, 1: None},
        files={"console.log": "torchrun_console"},
        facts=[
            "rank 0 runs _REDUCE_SCATTER_BASE SequenceNumber=12 (TensorShape=[56623104]) while rank 1 runs GATHER SequenceNumber=0",
            "raised by the TORCH_DISTRIBUTED_DEBUG=DETAIL collective check inside FSDP2 post_backward "
            "(torch_npu fsdp_add_fsdp_patch.py _patched_foreach_reduce -> reduce_scatter_tensor)",
            "both ranks raise the mismatch RuntimeError in step 1 backward, before any step completes; both exit 1",
            "ChildFailedError root cause: rank 0 (local_rank 0), exitcode 1; rank 1 also failed with exitcode 1",
            "rank 1 is the diverging rank: its sequence number and op type differ (seed: its MXFP8Tensor defaulted to device 0)",
        ],
    )
    job.readme = f"""
# seed003_p3_collective_mismatch: FSDP2 backward collective mismatch (reconstruction)

**Reconstruction** of seed 003 problem 3 (PTA 2.7.1): in FSDP2 backward the two ranks executed different
layer objects, so the reduce-scatter inputs differed; with `TORCH_DISTRIBUTED_DEBUG=DETAIL` the collective
check raised `Detected mismatch between collectives on ranks` (rank 0 in `_REDUCE_SCATTER_BASE`, rank 1 in
`GATHER`). Root cause on rank 1: an MXFP8Tensor defaulting to device 0, so rank 1's unsharded parameter and
gradient lived on different devices.

## What the job shows

`TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc_per_node=2 train_fsdp2_mxfp8.py` (python 3.11, conda env
`nwulan`). Both ranks finish the forward of step 1; in backward, rank 0 raises the quoted RuntimeError
from `post_backward -> _patched_foreach_reduce -> reduce_scatter_tensor`, rank 1 raises the mirror
message from a `dist.gather`; both exit 1 and torchrun prints the ChildFailedError (root cause rank 0).

A correct analysis says: failed, collective mismatch in step 1 backward, rank 0 at SequenceNumber 12
`_REDUCE_SCATTER_BASE` vs rank 1 at 0 `GATHER`, rank 1 diverged.

## Verbatim from the seed

The traceback from `torch/autograd/function.py ... in apply` to `group._reduce_scatter_base(...)` and its
`~~~` marker lines, and the `RuntimeError: Detected mismatch ...` line, exactly as the seed shows them:
without the usual two/four-space frame indentation (lost in the seed's paste), with the message repeated
and ending in `Traceback (most recent call last):` on the same physical line. Each line carries the
`[rank0]: ` prefix torch's excepthook adds.

## Invented

Everything else: the outer frames (`main`, `loss.backward`, autograd engine) in the same paste style,
rank 1's traceback and mirror message (the seed shows only rank 0's side; the check raises on every rank
that sees a different fingerprint), the script, host, PIDs, times (launch {launch:%Y-%m-%d %H:%M:%S}).
"""
    return job


# =========================================================================== problem 6


def p6_watchdog_setdevice_at_exit() -> Job:
    """2-rank profiling test; at exit rank 1's HCCL watchdog calls SetDevice after aclFinalize."""
    rng = random.Random(3006)
    job = Job("seed003_p6_watchdog_setdevice_at_exit")
    host = "atlas800i-a2-05"
    env = "/mnt/sda1/anaconda3/envs/tools_test_py312"
    py = f"{env}/bin/python3.12"
    site = f"{env}/lib/python3.12/site-packages"
    tr = Torchrun(ident=51804, run_line=766, sigterm_line=900, failed_line=874,
                  launcher_lines=(355, 892, 883, 139, 270), python=py, site=site, py311=True)
    launch = datetime(2026, 5, 25, 16, 0, 48, 631000)
    pids = [51872, 51873]
    console = Stream()
    console.extend(launch, tr.banner(launch))
    t_done = after(launch, 83.0)
    for r in range(2):
        p = f"[default{r}]:"
        t = after(launch, jitter(rng, 7.9, 0.05))
        console.extend(after(t, -1.0), prefixed(p, _owner_warning(site), tee=True))
        console.add(t, f"{p}[rank{r}] torch 2.7.1, torch_npu 2.7.1.post4.dev20260315, CANN 9.0.0, device npu:{r}")
        console.add(
            after(t, 0.4),
            f"{p}[rank{r}] profiler: activities=[CPU, NPU], schedule(wait=1, warmup=1, active=3, repeat=2), "
            "2 worker threads issuing matmul + all_reduce",
        )
        for step in range(1, 11):
            ts = after(t, 9.0 + 4.1 * step + rng.uniform(0, 0.05))
            console.add(ts, f"{p}[rank{r}] step {step}/10 all_reduce ok, {jitter(rng, 12.4, 0.1):.1f} ms")
        pid = pids[r]
        ts = after(t, 55.0)
        console.add(
            ts,
            f"{p}{ts:%Y-%m-%d %H:%M:%S} [INFO] [{pid}] profiler.py: Start parsing profiling data: "
            f"./prof_result/{host}_{pid}_{ts:%Y%m%d%H%M%S}{ts.microsecond // 1000:03d}_ascend_pt",
        )
        ts2 = after(ts, 11.6)
        console.add(ts2, f"{p}{ts2:%Y-%m-%d %H:%M:%S} [INFO] [{pid}] profiler.py: All profiling data parsed in a total time of 0:00:11.{rng.randrange(100000, 999999)}")
        console.add(after(t_done, 0.1 * r), f"{p}[rank{r}] test passed, exiting")
    # rank 0 exits cleanly; rank 1's watchdog thread hits the runtime assert after aclFinalize
    t_assert = after(t_done, 0.9)
    console.extend(t_assert, prefixed("[default1]:", V.P6_ASSERT, tee=True))
    job.must_contain("console.log", [f"[default1]:{x}" for x in V.P6_ASSERT])
    t_end = after(t_assert, 1.3)
    failures = [Failure(rank=1, local_rank=1, pid=pids[1], exitcode=-6, time=t_end, host=host)]
    for line in tr.end_of_job(t_end, "test_profiler_multithread.py", failures).lines():
        console.add(t_end, line)
    job.add("console.log", console.lines())
    job.expected = expected(
        source="seed 003 problem 6 (watchdog SetDevice after aclFinalize at exit, PTA 2.7.1.post4)",
        status="failed",
        category="teardown_failure",
        culprit_ranks=[1],
        first_failing_rank=1,
        first_failing_step=None,
        world_size=2,
        nodes=[host],
        last_step={0: 10, 1: 10},
        files={"console.log": "torchrun_console"},
        facts=[
            "both ranks finish all 10 steps and print 'test passed' before anything goes wrong",
            "rank 1 prints a CANN runtime_assert backtrace at exit: rtSetDevice <- c10_npu::SetDevice <- "
            "c10d_npu::ProcessGroupHCCL::Watchdog::runLoop (the watchdog thread, after finalize), via profiler hooks",
            "rank 1 dies with SIGABRT (exitcode -6); rank 0 exits 0",
            "fix: call destroy_process_group() before exit so the watchdog is joined (seed)",
        ],
    )
    job.readme = f"""
# seed003_p6_watchdog_setdevice_at_exit: watchdog SetDevice after finalize (reconstruction)

**Reconstruction** of seed 003 problem 6 (PTA 2.7.1.post4.dev20260315, CANN 9.0.0, Atlas 800I A2):
with profiling enabled from several threads, the process exits without `destroy_process_group()`; the
ProcessGroupHCCL watchdog thread is still alive after `aclFinalizeImpl` started and calls `SetDevice`,
which trips a CANN runtime assert.

## What the job shows

`torchrun --nproc_per_node=2 --tee 3 test_profiler_multithread.py` (hence the `[defaultN]:` prefixes).
Both ranks complete their 10 profiled steps and parse the profiling data. At exit rank 1 prints the
runtime_assert backtrace and aborts (exitcode -6, SIGABRT); rank 0 exits 0; torchrun prints a
ChildFailedError with rank 1 as root cause.

A correct analysis says: failed during teardown (after all work), rank 1, HCCL watchdog thread calling
SetDevice after finalize; fix by destroying the process group before exit.

## Verbatim from the seed

The 20 `runtime_assert:` lines (header and frames #0-#18), each with torchrun's `[default1]:` prefix.

## Invented

The test script and its output, the profiler parse lines, that rank 1 (not rank 0) hit it and that the
assert aborts the process (the seed does not say how the process ended), host, PIDs, times (launch
{launch:%Y-%m-%d %H:%M:%S}).
"""
    return job


# =========================================================================== problem 7


def p7_early_exit_collective_timeout() -> Job:
    """8 ranks loop all_reduce for a time budget; 3 ranks leave one iteration early, 5 time out."""
    rng = random.Random(3007)
    job = Job("seed003_p7_early_exit_collective_timeout")
    host = "a950-pod-n07"
    py = "/usr/local/python3.10.14/bin/python3.10"
    site = "/usr/local/python3.10.14/lib/python3.10/site-packages"
    tr = Torchrun(ident=771203, run_line=766, sigterm_line=900, failed_line=874,
                  launcher_lines=(355, 892, 883, 139, 270), python=py, site=site, py311=False)
    launch = datetime(2026, 5, 28, 15, 1, 12, 305000)
    pids = [771271 + i for i in range(8)]
    iters = 240
    early = [4, 1, 6]  # in the order they leave
    console = Stream()
    console.extend(launch, tr.banner(launch))
    t_start = after(launch, 24.6)  # after init and the warm-up barrier
    # Iteration ends, scaled so that iteration 240 ends 5 ms before the 120 s budget on the shared
    # clock; each rank reads its own clock (skew), and the early ranks' clocks are a little ahead.
    raw = [jitter(rng, 0.5, 0.01) for _ in range(iters)]
    scale = 119.995 / sum(raw)
    iter_end, acc = [], 0.0
    for d in raw:
        acc += d * scale
        iter_end.append(after(t_start, acc))
    skew = {r: (rng.uniform(0.008, 0.015) if r in early else rng.uniform(-0.012, -0.001)) for r in range(8)}
    for r in range(8):
        t = after(launch, jitter(rng, 7.6, 0.05))
        console.extend(after(t, -0.9), _owner_warning(site))
        console.add(t, f"[rank{r}] torch 2.7.1, torch_npu 2.7.1, python 3.10.14, device npu:{r}, world_size 8")
        console.add(after(t, 0.2), f"[rank{r}] all_reduce loop: tensor 512 MB (float32), duration 120 s, "
                    "stop condition: time.time() - start >= duration")
        for i in range(iters):
            ts = after(iter_end[i], rng.uniform(0.0005, 0.004))
            console.add(
                ts,
                f"[rank{r}] iteration {i + 1}: all_reduce {raw[i] * scale * 1000 - rng.uniform(1.5, 4.0):.1f} ms, elapsed "
                f"{(iter_end[i] - t_start).total_seconds() + skew[r]:.3f} s",
            )
    t_last = iter_end[-1]
    for k, r in enumerate(early):
        ts = after(t_last, 0.0051 + 0.0009 * k)
        console.add(ts, f"[rank{r}] time limit 120 s reached after {iters} iterations "
                    f"({(ts - t_start).total_seconds() + skew[r]:.3f} s), exiting")
    # The others start iteration 241 and wait for the ranks that left.
    waiting = [r for r in range(8) if r not in early]
    timeout_ms = 1_800_000
    t_timeout = after(t_last, timeout_ms / 1000 + 1.4)
    seq = iters + 2  # the init barrier and the warm-up all_reduce come first
    for k, r in enumerate(waiting):
        mono = Mono(rng)
        ts = after(t_timeout, 0.0021 * k)
        ran = timeout_ms + 412 + 23 * k
        work = f"WorkHCCL(SeqNum={seq}, OpType=ALLREDUCE, Timeout(ms)={timeout_ms})"
        catch = f"[Rank {r}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
        t1, t2, t3 = after(ts, 0.000063), after(ts, 0.000078), after(ts, 0.001315)
        console.add(
            ts,
            f"[rank{r}]:" + c10("E", ts, mono.ns(ts), "compiler_depend.ts:574") + catch,
            f"[rank{r}]:" + c10("E", t1, mono.ns(t1), "compiler_depend.ts:628") + "Some HCCL operations have "
            "failed or timed out. Due to the asynchronous nature of ASCEND kernels, subsequent NPU operations "
            "might run on corrupted/incomplete data.",
            f"[rank{r}]:" + c10("E", t2, mono.ns(t2), "compiler_depend.ts:634")
            + "To avoid data inconsistency, we are taking the entire process down.",
            f"[rank{r}]:" + c10("E", t3, mono.ns(t3), "compiler_depend.ts:1020")
            + f"[Rank {r}] HCCL watchdog thread terminated with exception: {catch}",
            "terminate called after throwing an instance of 'std::runtime_error'",
            f"  what():  [Rank {r}] HCCL watchdog thread terminated with exception: {catch}",
        )
    t_end = after(t_timeout, 2.6)
    failures = [Failure(rank=r, local_rank=r, pid=pids[r], exitcode=-6, time=t_end, host=host) for r in waiting]
    for line in tr.end_of_job(t_end, "hccl_loop_test.py", failures).lines():
        console.add(t_end, line)
    job.add("console.log", console.lines())
    job.must_contain("console.log", [f"WorkHCCL(SeqNum={seq}, OpType=ALLREDUCE, Timeout(ms)={timeout_ms})"])
    job.expected = expected(
        source="seed 003 problem 7 (ranks exit early during a collective loop, PTA 2.7.1 python310)",
        status="failed",
        category="collective_timeout",
        culprit_ranks=early,
        first_failing_rank=early[0],
        first_failing_step=iters + 1,
        world_size=8,
        nodes=[host],
        last_step=dict.fromkeys(range(8), iters),
        files={"console.log": "torchrun_console"},
        facts=[
            f"all 8 ranks complete iteration {iters}; ranks {', '.join(map(str, sorted(early)))} then print "
            "'time limit 120 s reached ... exiting' and exit 0",
            f"ranks {', '.join(map(str, waiting))} enter iteration {iters + 1} and time out 30 min later: "
            f"WorkHCCL(SeqNum={seq}, OpType=ALLREDUCE, Timeout(ms)={timeout_ms})",
            "the timed-out ranks abort (exitcode -6); ChildFailedError lists them, the early ranks are not failures",
            "cause: the loop stops on a per-rank clock, not on an agreed iteration count",
        ],
    )
    job.readme = f"""
# seed003_p7_early_exit_collective_timeout: ranks leave a collective loop early (reconstruction)

**Reconstruction** of seed 003 problem 7 (PTA 2.7.1, python 3.10, Ascend 950 Pod, 8 NPUs): a test loops
`all_reduce` until a wall-clock budget is used up. Each rank checks its own clock, so the ranks that see
the deadline first leave after iteration {iters}, while the others start one more all_reduce and wait for
peers that are gone, until the HCCL watchdog times out.

## What the job shows

`torchrun --nproc_per_node=8 hccl_loop_test.py --duration 120 --size-mb 512`. Every rank prints each
iteration. Ranks {", ".join(map(str, early))} (in that order) print the time-limit message after
iteration {iters} and exit 0. Ranks {", ".join(map(str, waiting))} print nothing more until, 30 minutes later,
the torch_npu watchdog reports `WorkHCCL(SeqNum={seq}, OpType=ALLREDUCE, Timeout(ms)={timeout_ms})`, they
abort (-6) and torchrun prints the ChildFailedError.

## Category

`collective_timeout`, not `rank_exception`: no rank raised an exception. The early ranks exited
normally (exit 0); the only failure the logs show is the collective timeout on the ranks left behind.
The culprits are nevertheless the early ranks {", ".join(map(str, sorted(early)))}, and the first divergence is
rank {early[0]} leaving before iteration {iters + 1}; `first_failing_rank` records that rank, not the first rank
whose watchdog fired.

## Verbatim from the seed

The seed quotes no log line for this problem. The watchdog lines follow the real torch_npu output shape
(`[rankN]:[E... compiler_depend.ts:574] [Rank N] Watchdog caught collective operation timeout:
WorkHCCL(...)`, then `terminate called after throwing an instance of 'std::runtime_error'`).

## Invented

The script and its output, sizes, iteration count, which ranks leave, host, PIDs, times (launch
{launch:%Y-%m-%d %H:%M:%S}), the default 30-minute timeout.
"""
    return job


# =========================================================================== problem 8


def p8_ranktable_detect_failed() -> Job:
    """verl SFT on 8 NPUs: the EP group's HCCL root waits 120 s, only itself connects (EI0015)."""
    rng = random.Random(3008)
    job = Job("seed003_p8_ranktable_detect_failed")
    host = "atlas-a2-node02"
    ip, nic = "10.20.1.15", "enp189s0f0"
    py = "/usr/local/python3.11.10/bin/python3.11"
    site = "/usr/local/python3.11.10/lib/python3.11/site-packages"
    tr = Torchrun(ident=575161, run_line=811, sigterm_line=917, failed_line=891,
                  launcher_lines=(357, 946, 937, 156, 299), python=py, site=site, py311=True)
    launch = datetime(2026, 5, 22, 12, 3, 52, 410000)
    pids = [575229 + i for i in range(8)]
    t_default_pg = datetime(2026, 5, 22, 12, 5, 41, 233118)
    t_ep_entry = datetime(2026, 5, 22, 12, 6, 27, 2311)
    t_timeout = datetime(2026, 5, 22, 12, 8, 27, 71302)
    t_ei = datetime(2026, 5, 22, 12, 8, 27, 88244)
    overrides = [
        "model.path=/home/models/Qwen3-30B-A3B",
        "engine=fsdp_turbo",
        "engine.ep_size=8",
        "data.train_files=/home/data/sft/train.parquet",
        "trainer.total_epochs=1",
    ]
    console = Stream()
    console.extend(launch, tr.banner(launch))
    for r in range(8):
        t = after(launch, jitter(rng, 11.0, 0.05))
        console.extend(after(t, -1.0), _owner_warning(site))
        console.add(t, f"[rank{r}] verl SFTTrainer: torch 2.9.0+cpu, torch_npu 2.9.0, device npu:{r}, world_size 8")
        console.add(after(t_default_pg, rng.uniform(-0.4, 0.4) - 8.0), f"[rank{r}] building FSDPTurbo engine: ep_size=8, fsdp_size=8, model Qwen3-30B-A3B")
    # Rank 0 alone reaches the expert-parallel scatter: hydra reports the exception and exits 1.
    trace = [("  " + x if i == 0 else x) for i, x in enumerate(V.P8_TRACE)]
    outer = [
        f"Error executing job with overrides: {overrides!r}",
        "Traceback (most recent call last):",
        *tb_frame("/home/verl_fsdp_turbo/verl/trainer/sft_trainer.py", 396, "main", "run_sft(config)"),
        *tb_frame(
            "/home/verl_fsdp_turbo/verl/trainer/sft_trainer.py", 385, "run_sft", "trainer = SFTTrainer(config=config)",
            "              ^^^^^^^^^^^^^^^^^^^^^^^^^",
        ),
        *tb_frame("/home/verl_fsdp_turbo/verl/trainer/sft_trainer.py", 72, "__init__", "self._build_engine()"),
        *tb_frame("/home/verl_fsdp_turbo/verl/trainer/sft_trainer.py", 131, "_build_engine", "self.training_client.reset()"),
    ]
    t_exc = after(t_ei, 0.02)
    console.extend(
        t_exc,
        [*outer, *trace, *V.P8_ERROR, "", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."],
    )
    job.must_contain("console.log", [x for x in V.P8_TRACE[1:]] + ["  " + V.P8_TRACE[0], *V.P8_ERROR])
    t_end = after(t_exc, 2.4)
    failures = [Failure(rank=0, local_rank=0, pid=pids[0], exitcode=1, time=t_end, host=host)]
    for line in tr.end_of_job(t_end, "verl.trainer.sft_trainer", failures, sigterm_pids=pids[1:]).lines():
        console.add(t_end, line)
    job.add("console.log", console.lines())

    # CANN logs copied from $HOME/ascend/log: run/ has the key events, debug/ the errors.
    files = {"console.log": "torchrun_console"}
    created = [after(launch, 10.2 + 0.013 * r) for r in range(8)]
    default_id = f"{ip}%{nic}_60000_0_{epoch_us(t_default_pg)}"
    for r, pid in enumerate(pids):
        name = plog_name(pid, created[r])
        ts = after(t_default_pg, 0.0031 * r)
        run = []
        if r == 0:
            run.append(plog("INFO", "HCCL", pid, "python3.11", t_default_pg, "op_base.cc:806",
                            f" [{pid}]Entry-HcclGetRootInfo:rootInfo[0xfffd2c7fe5a8], deviceLogicId[0]"))
        run.append(plog("INFO", "HCCL", pid, "python3.11", ts, "op_base.cc:1281",
                        f" [{pid}]Entry-HcclCommInitRootInfoConfigInner:ranks[8], rank[{r}], rootinfo: host ip[{ip}] "
                        f"port[60000] nicDeploy[1] identifier[{default_id}], deviceLogicId[{r}]"))
        run.append(plog("INFO", "HCCL", pid, "python3.11", after(ts, 1.92), "op_base.cc:1348",
                        f" [{pid}]hcclCommInitRootInfoConfig success, take time [1921347]us, rankNum[8], rank[{r}]"))
        if r == 0:
            run.append(plog("INFO", "HCCL", pid, "python3.11", t_ep_entry, "op_base.cc:806",
                            f" [{pid}]Entry-HcclGetRootInfo:rootInfo[0xfffd2c7fe8c8], deviceLogicId[0]"))
            run.append(plog("INFO", "HCCL", pid, "python3.11", after(t_ep_entry, 0.0019), "op_base.cc:1281",
                            f" [{pid}]Entry-HcclCommInitRootInfoConfigInner:ranks[8], rank[0], rootinfo: host ip[{ip}] "
                            "port[60001] nicDeploy[1] identifier[group_name_2], deviceLogicId[0]"))
        job.add(f"ascend/log/run/plog/{name}", run)
        files[f"ascend/log/run/plog/{name}"] = "ascend_plog"
    pid0 = pids[0]
    srv = 575301  # the topo-detect server thread
    debug = [
        plog("ERROR", "HCCL", pid0, "python3.11", t_timeout, "topoinfo_exchange_server.cc:314",
             f" [{srv}][InitGroupStage][RanktableDetect]topo exchange server get socket timeout! timeout[120 s]"),
        plog("ERROR", "HCCL", pid0, "python3.11", after(t_timeout, 0.000153), "topoinfo_exchange_server.cc:501",
             f" [{srv}][InitGroupStage][DisplayConnectionedRank]total connected num is [1],line num is [1]"),
        plog("ERROR", "HCCL", pid0, "python3.11", after(t_timeout, 0.000162), "topoinfo_exchange_server.cc:503",
             f" [{srv}][InitGroupStage][DisplayConnectionedRank]need connect rankNum is [8]"),
        plog("ERROR", "HCCL", pid0, "python3.11", after(t_timeout, 0.000197), "topoinfo_exchange_server.cc:517",
             f" [{srv}][InitGroupStage][DisplayConnectionedRank]connected rankinfo[LINE 0]: [0000000000000000];"),
        plog("ERROR", "HCCL", pid0, "python3.11", after(t_timeout, 0.005814), "topoinfo_exchange_base.cc:145",
             f" [{pid0}][InitGroupStage][RanktableDetect] TopoDetect ERROR occur !!! fault_type[1], "
             'fault_info["Failed to connect agent[1,2,3,4,5,6,7,]"]'),
        plog("ERROR", "HCCL", pid0, "python3.11", after(t_timeout, 0.006231), "topoinfo_exchange_agent.cc:552",
             f" [{pid0}][InitGroupStage][RanktableDetect]rank num[8]is different with rank list size[1] in total topo rank info."),
        plog("ERROR", "HCCL", pid0, "python3.11", after(t_timeout, 0.016119), "op_base.cc:1150",
             f" [{pid0}][InitCommRootInfo]Init failed, return[0x0000000005000004], rankNum[8], rank[0], "
             f"rootInfo identifier[group_name_2], server[{ip}%{nic}], logicDevId[0]"),
    ]
    dname = plog_name(pid0, created[0])
    job.add(f"ascend/log/debug/plog/{dname}", debug)
    files[f"ascend/log/debug/plog/{dname}"] = "ascend_plog"
    job.must_contain(f"ascend/log/debug/plog/{dname}", ["total connected num is [1]", "need connect rankNum is [8]",
                                                         "Failed to connect agent[1,2,3,4,5,6,7,]"])
    assert cann_ts(t_ei) == "2026-05-22-12:08:27.088.244"
    job.expected = expected(
        source="seed 003 problem 8 (Ranktable_Detect_Failed EI0015, PTA 2.9.0)",
        status="failed",
        category="comm_init_failure",
        culprit_ranks=[1, 2, 3, 4, 5, 6, 7],
        first_failing_rank=0,
        first_failing_step=None,
        world_size=8,
        nodes=[host],
        last_step=dict.fromkeys(range(8), None),
        files=files,
        facts=[
            "rank 0 (PID 575229): hcclCommInitRootInfoConfig error code 1, ERR02200 DIST call hccl api failed, "
            "Ranktable_Detect_Failed(EI0015) at 2026-05-22-12:08:27",
            "the HCCL server of communicator group_name_2 (the expert-parallel mesh, 8 ranks) waited 120 s: "
            "total connected num is [1], need connect rankNum is [8], Failed to connect agent[1,2,3,4,5,6,7,]",
            "run plogs: ranks 1-7 initialised the default group at 12:05:41 but never issued "
            "Entry-HcclCommInitRootInfoConfigInner for group_name_2",
            "failure during model/engine initialisation (distribute_tensor -> mesh_scatter), before any training step",
            "torchrun sends SIGTERM to ranks 1-7 after rank 0 exits 1; ChildFailedError root cause rank 0",
        ],
    )
    job.readme = f"""
# seed003_p8_ranktable_detect_failed: HCCL communicator init times out (EI0015) (reconstruction)

**Reconstruction** of seed 003 problem 8 (PTA 2.9.0, verl + FSDPTurbo): creating the expert-parallel
communicator during `distribute_tensor -> mesh_scatter` fails with `hcclCommInitRootInfoConfig ... error
code is 1`, `ERR02200 DIST call hccl api failed` and `Ranktable_Detect_Failed(EI0015)`: within the
connect timeout not all ranks reached the root's topology server.

## What the job shows

`torchrun --nproc_per_node=8 -m verl.trainer.sft_trainer {" ".join(overrides)}` on one 8-NPU node. verl
runs under hydra, so rank 0's exception is printed by hydra (`Error executing job with overrides`, the
trimmed traceback, the error text, `Set the environment variable HYDRA_FULL_ERROR=1 ...`) without the
`[rank0]:` excepthook prefix, and rank 0 exits 1; torchrun sends SIGTERM to ranks 1-7.
`job/ascend/log` is the CANN log directory (`$HOME/ascend/log`): `run/plog` shows every rank initialising
the default group at 12:05:41, and only rank 0 entering the `group_name_2` init at 12:06:27;
`debug/plog` of rank 0 has the server's timeout after 120 s, `total connected num is [1]`,
`need connect rankNum is [8]`, the `Failed to connect agent[1,2,3,4,5,6,7,]` fault info and the
`rank num[8]is different with rank list size[1]` line.

A correct analysis says: failed at communicator initialisation (comm_init_failure), reported by rank 0,
ranks 1-7 never connected to the server of group_name_2; check that all ranks call the communicator
creation (they did not reach it within HCCL_CONNECT_TIMEOUT), host network and HCCL_SOCKET_IFNAME.

## Verbatim from the seed

The traceback from `engine_workers.py ... in reset` to `group.scatter(...)` with its caret lines (the
seed's first frame line lost its two leading spaces; they are restored), the `RuntimeError: create_config...`
line, `[ERROR] 2026-05-22-12:08:27 (PID:575229, Device:0, RankID:0) ERR02200 DIST call hccl api failed.`,
and the EI0015 block with its `Solution:` / `TraceBack` lines, unchanged.

## Invented

Host, NIC and IP, the other PIDs, hydra overrides and outer frames, all plog lines (their format and
wording follow the HCCL troubleshooting documentation's samples for this error), the reason ranks 1-7
never reached the call (the seed does not say; it suggests checking the call, the host network and
HCCL_SOCKET_IFNAME). The seed's `rank list size[1]` fixes the number of connected ranks at 1, so the
plog says `total connected num is [1]` rather than the `[4]` of the documentation's example.
"""
    return job


# =========================================================================== problem 9


def p9_watchdog_after_checkpoint() -> Job:
    """fairseq-style (hydra) run on 8 NPUs, torch 2.4: watchdog errors after the final checkpoint."""
    rng = random.Random(3009)
    job = Job("seed003_p9_watchdog_after_checkpoint")
    host = "bitbrain-a2-07"
    py = "/usr/local/python3.9.2/bin/python3.9"
    site = "/usr/local/python3.9.2/lib/python3.9/site-packages"
    tr = Torchrun(ident=281467089262240, run_line=779, sigterm_line=858, failed_line=833,
                  launcher_lines=(348, 901, 892, 133, 264), python=py, site=site, py311=False)
    launch = datetime(2026, 5, 27, 19, 47, 29, 118000)
    pids = [222 + i for i in range(8)]
    t_train0 = datetime(2026, 5, 27, 19, 47, 55, 840000)  # wall=0 of the train_inner lines
    out = "/train28/bitbrain/permanent/gblu2/version_release/v0.8.0-rc1/7b/output/test-0527-cann8.2.rc1-torch2.4-testenv"

    def hy(ts: datetime, name: str, msg: str) -> str:
        return f"[{asctime(ts)}][{name}][INFO] - {msg}"

    stdout: list[tuple[datetime, str]] = []
    t = after(launch, 9.4)
    for name, msg in [
        ("hulk.utils.env", "torch: 2.4.0, torch_npu: 2.4.0.post4, CANN: 8.2.RC1, python: 3.9.2"),
        ("hulk.distributed.utils", "distributed init (rank 0): env://, world_size 8, backend hccl"),
        ("hulk.train", f"output dir: {out}"),
        ("hulk.train", "model: HulkDecoder 7B, num. model params: 6,738,415,616 (num. trained: 6,738,415,616)"),
        ("hulk.train", "training on 8 devices (NPUs)"),
        ("hulk.train", "max tokens per device = 32768 and max sentences per device = 8"),
        ("hulk.train", "max_update = 10, update_freq = 1, total batch size = 64 sequences (262144 tokens)"),
        ("hulk.trainer", "begin training epoch 1"),
    ]:
        stdout.append((t, hy(t, name, msg)))
        t = after(t, jitter(rng, 2.0, 0.3))
    # Steps 1 and 2 are invented; step 2 must end with the seed's tail.
    for step, loss, ce, z, gn, tw, fd, res, wall in [
        (1, 12.4211, 12.406, 151.184, 13.102, 24.9874, 0.0071, 59.1, 25.2511),
        (2, 12.4012, 12.3861, 151.19, 12.811, 25.5908, 0.0002, 59.5, 51.1474),
    ]:
        ts = after(t_train0, wall)
        line = hy(
            ts,
            "train_inner",
            f"epoch 001: {step} / 127485 loss={loss}, ce_loss={ce}, zloss={z}, ppl={2 ** ce:.2f}, "
            f"wps={262144 / tw:.1f}, ups=0.04, wpb=262144, bsz=64, num_updates={step}, lr={step * 2e-7:.0e}, "
            f"gnorm={gn}, clip=100, train_wall={tw}, fetch_data={fd}, cuda_gb_active=59, cuda_gb_allocated=59, "
            f"cuda_gb_reserved={res}, cuda_gb_free=2, wall={wall}",
        )
        stdout.append((ts, line))
    assert stdout[-1][1].endswith(V.P9_TRAIN_TAIL)
    console = Stream()
    console.extend(launch, tr.banner(launch))
    for r in range(8):
        console.extend(after(launch, jitter(rng, 8.1, 0.05)), prefixed(f"[default{r}]:", _owner_warning(site), tee=True))
    for ts, line in stdout:
        console.add(ts, line)
    # The seed's block (train_inner 3..10, stop, checkpoint, watchdog/ERR lines, SIGTERM) stays contiguous.
    t_block = datetime(2026, 5, 27, 19, 49, 13, 414000)
    console.extend(t_block, V.P9_BLOCK)
    job.must_contain("console.log", [*V.P9_BLOCK, V.P9_TRAIN_TAIL])
    t_end = datetime(2026, 5, 27, 19, 52, 51, 377000)
    failures = [
        Failure(rank=r, local_rank=r, pid=pids[r], exitcode=-6, time=datetime(2026, 5, 27, 19, 52, 50), host=host)
        for r in range(1, 8)
    ]
    first = failures[0]
    console.add(t_end, tr.failed(t_end, first))
    console.extend(after(t_end, 0.01), tr.child_failed("hulk_train.py", failures))
    job.add("console.log", console.lines())
    hydra_log = [line for _, line in stdout] + [x for x in V.P9_BLOCK if x.startswith("[2026-")]
    job.add("outputs/2026-05-27/19-47-38/hulk_train.log", hydra_log)
    job.must_contain("outputs/2026-05-27/19-47-38/hulk_train.log", [x for x in V.P9_BLOCK if x.startswith("[2026-")])
    job.expected = expected(
        source="seed 003 problem 9 (HCCL watchdog exits after the last checkpoint, CANN 8.2.RC1 + torch 2.4.0)",
        status="failed",
        category="teardown_failure",
        culprit_ranks=[1, 2, 3, 4, 5, 6, 7],
        first_failing_rank=5,
        first_failing_step=None,
        world_size=8,
        nodes=[host],
        last_step={0: 10, **dict.fromkeys(range(1, 8), None)},
        files={"console.log": "torchrun_console", "outputs/2026-05-27/19-47-38/hulk_train.log": "trainer_log"},
        facts=[
            "training reached max_update 10 (num_updates=10) and saved checkpoint-last before any error",
            "19:52:41-42: 'HCCL watchdog thread terminated with exception: Open shared directory failed' with "
            "ERR02008 on local ranks 1-7 (first rank 5 at 19:52:41); the first seven lines say [Rank 0] (sub-group rank)",
            "torchrun sends SIGTERM to PID 222 (rank 0) at 19:52:50; ranks 1-7 exited with SIGABRT (-6)",
            "versions: CANN 8.2.RC1, torch 2.4.0, torch_npu 2.4.0.post4 (no pg.shutdown in destroy_process_group before torch 2.7)",
            "train_inner progress lines are printed by rank 0 only",
        ],
    )
    job.readme = f"""
# seed003_p9_watchdog_after_checkpoint: watchdog errors after the final checkpoint (reconstruction)

**Reconstruction** of seed 003 problem 9 (CANN 8.2.RC1 + torch 2.4.0 / torch_npu 2.4.0.post4): the training
finishes (10 updates), saves its checkpoint, and then every rank's HCCL watchdog thread terminates with
`Open shared directory failed. Please check whether input path is valid.` plus `ERR02008`. In torch 2.4
`destroy_process_group` does not shut the communicators down, so the watchdog outlives the shared
directory it polls.

## What the job shows

`torchrun --nproc_per_node=8 --tee 2 hulk_train.py ...` (hydra-based fairseq fork). With `--tee 2` only
stderr is tee'd, so the console holds rank 0's stdout (hydra `[time][logger][INFO] - ...` lines) without a
prefix and every worker's stderr with `[defaultN]:`, exactly the mix the seed shows. After the ERR02008
lines, ranks 1-7 have died (SIGABRT); torchrun sends SIGTERM to rank 0 (PID 222) and prints the
ChildFailedError (root cause local rank 1: with equal per-second timestamps torchrun picks the first
failure in local-rank order, although rank 5 logged first). The hydra job log
`outputs/2026-05-27/19-47-38/hulk_train.log` holds rank 0's log lines.

A correct analysis says: the training itself completed (step 10 of 10, checkpoint saved), then a
teardown failure on all ranks (HCCL watchdog, ERR02008), first seen on rank 5; upgrade to torch/PTA
>= 2.7 or shut the process group down before exit.

## Verbatim from the seed

From the tail `clip=100, train_wall=25.5908, ... wall=51.1474` (end of the step-2 line) through
`[default0]:Exception in thread Thread-1(default0)::`: train_inner steps 3-10, the stop / empty-cache /
checkpoint lines, all 26 `[defaultN]:` watchdog and `ERR02008` lines with their times and PIDs, and the
`W0527 19:52:50.852000 281467089262240 ... Sending process 222 closing signal SIGTERM` line, contiguous and
in the seed's order.

## Invented

The start-up lines, the head of the step-2 line and the whole step-1 line, host name, the hydra output
directory, the torchrun banner (launch {launch:%Y-%m-%d %H:%M:%S}), the `failed (exitcode: -6)` line and the ChildFailedError block, and the
exit codes (the seed does not show how ranks 1-7 ended).
"""
    return job


# =========================================================================== problem 10


def p10_dtensor_import_order() -> Job:
    """4-rank DTensor custom-op tests on torch 2.9.0: 4 tests fail with the sharding AssertionError."""
    rng = random.Random(3010)
    job = Job("seed003_p10_dtensor_import_order")
    host = "atlas800-41"
    base = "/usr/local/python3.11.4"
    py = f"{base}/bin/python3.11"
    site = f"{base}/lib/python3.11/site-packages"
    tr = Torchrun(ident=66012, run_line=811, sigterm_line=917, failed_line=891,
                  launcher_lines=(357, 946, 937, 156, 299), python=py, site=site, py311=True)
    launch = datetime(2026, 6, 1, 11, 20, 4, 77000)
    pids = [66080 + i for i in range(4)]
    script = "/home/test/dtensor_custom_api/test_dtensor_custom_ops.py"
    # The seed's frames lost their indentation and gained blank lines between them; restore the
    # standard traceback layout, keeping each line's text.
    seed_frames: list[str] = []
    for x in V.P10_TRACE:
        if x.startswith("File "):
            seed_frames.append("  " + x)
        elif x == "AssertionError":
            seed_frames.append(x)
        else:
            seed_frames.append("    " + x)
    tests = [
        ("test_npu_fusion_attention_bnsd", 84, 'out = torch_npu.npu_fusion_attention(q, k, v, head_num=8, input_layout="BNSD", scale=0.125)[0]'),
        ("test_npu_fusion_attention_bsnd", 97, 'out = torch_npu.npu_fusion_attention(q, k, v, head_num=8, input_layout="BSND", scale=0.125)[0]'),
        ("test_npu_fusion_attention_grad", 113, 'out = torch_npu.npu_fusion_attention(q, k, v, head_num=8, input_layout="BSH", scale=0.125)[0]'),
        ("test_npu_fusion_attention_tnd", 131, "out = torch_npu.npu_fusion_attention(q, k, v, head_num=8, input_layout=\"TND\", scale=0.125, actual_seq_qlen=cu_q, actual_seq_kvlen=cu_kv)[0]"),
    ]
    console = Stream()
    console.extend(launch, tr.banner(launch))
    t_done = after(launch, 31.5)
    for r in range(4):
        p = f"[default{r}]:"
        t = after(launch, jitter(rng, 9.3, 0.05))
        console.extend(after(t, -1.0), prefixed(p, _owner_warning(site), tee=True))
        console.add(t, f"{p}[rank{r}] torch 2.9.0, torch_npu 2.9.0, device npu:{r}, mesh DeviceMesh('npu', [0, 1, 2, 3])")
        block = ["FFFF..", ""]
        for name, line, code in tests:
            block += [
                "=" * 70,
                f"FAIL: {name} (__main__.TestDTensorCustomOps.{name})",
                "-" * 70,
                "Traceback (most recent call last):",
                *tb_frame(script, line, name, code),
                *seed_frames,
                "",
            ]
        block += ["-" * 70, f"Ran 6 tests in {jitter(rng, 21.4, 0.02):.3f}s", "", "FAILED (failures=4)"]
        console.extend(after(t_done, 0.011 * r), prefixed(p, block, tee=True))
    job.must_contain("console.log", [f"[default{r}]:{x}" for r in range(4) for x in dict.fromkeys(seed_frames)])
    t_end = after(t_done, 1.1)
    failures = [Failure(rank=r, local_rank=r, pid=pids[r], exitcode=1, time=t_end, host=host) for r in range(4)]
    for line in tr.end_of_job(t_end, "test_dtensor_custom_ops.py", failures).lines():
        console.add(t_end, line)
    job.add("console.log", console.lines())
    job.expected = expected(
        source="seed 003 problem 10 (DTensor custom-op AssertionError from import order, PyTorch 2.9.0)",
        status="failed",
        category="environment_config",
        culprit_ranks=[0, 1, 2, 3],
        first_failing_rank=0,
        first_failing_step=None,
        world_size=4,
        nodes=[host],
        last_step=dict.fromkeys(range(4), None),
        files={"console.log": "torchrun_console"},
        facts=[
            "4 of 6 tests fail on every rank with AssertionError at torch/distributed/tensor/_ops/utils.py:332 "
            "(assert len(input_specs) == len(input_args_strategy))",
            "the failing path is torch_npu/distributed/tensor/_attention.py _npu_fusion_attention_handler -> "
            "sharding_propagator.propagate -> custom_strategy -> expand_to_full_mesh_op_strategy",
            "all 4 ranks exit 1 (unittest FAILED (failures=4)); ChildFailedError root cause rank 0",
            "cause: import order - import torch_npu.distributed.tensor._dtensor_patch before ._attention (seed)",
        ],
    )
    job.readme = f"""
# seed003_p10_dtensor_import_order: DTensor custom-op sharding AssertionError (reconstruction)

**Reconstruction** of seed 003 problem 10 (PyTorch 2.9.0 with torch_npu): DTensor custom-API cases for
`npu_fusion_attention` fail with `AssertionError` in `expand_to_full_mesh_op_strategy`, because
`torch_npu.distributed.tensor._attention` was imported before `torch_npu.distributed.tensor._dtensor_patch`,
so the strategy registration is wrong. 4 custom-API cases fail.

## What the job shows

`torchrun --nproc_per_node=4 --tee 3 test_dtensor_custom_ops.py` running a unittest suite of 6 tests on a
4-NPU mesh. On every rank the 4 `npu_fusion_attention` tests FAIL with the quoted traceback, the suite ends
`FAILED (failures=4)`, every rank exits 1, torchrun prints the ChildFailedError.

A correct analysis says: failed, same AssertionError on all ranks in DTensor sharding propagation of a
torch_npu custom op, a configuration (import order) problem rather than a communication fault.

## Verbatim from the seed

The text of every frame line and code line from `torch/_compile.py", line 53, in inner` to
`assert len(input_specs) == len(input_args_strategy)` and the final `AssertionError`. The seed's paste lost
the indentation and put blank lines between frames; the standard layout (2 spaces before `File`, 4 before
code) is restored, the text is unchanged.

## Invented

The test file, test names and calls, unittest framing, host, PIDs, times (launch {launch:%Y-%m-%d %H:%M:%S}).
"""
    return job


def jobs() -> list[Job]:
    """One job per seed-003 problem with log evidence (1, 2, 3, 6, 7, 8, 9, 10)."""
    return [
        p1_batch_isend_irecv_nan(),
        p2_fsdp2_reduce_scatter_nan(),
        p3_collective_mismatch(),
        p6_watchdog_setdevice_at_exit(),
        p7_early_exit_collective_timeout(),
        p8_ranktable_detect_failed(),
        p9_watchdog_after_checkpoint(),
        p10_dtensor_import_order(),
    ]

