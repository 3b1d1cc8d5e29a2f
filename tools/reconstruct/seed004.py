"""Seed 004: ms-swift + DeepSpeed ZeRO-3 offload continued pre-training of Qwen3-4B on H20 GPUs.

Two jobs: the reported two-node run (2 nodes x 2 GPUs, NCCL) that stops at the first evaluation
(step 10) without any error, and the same job on one 4-GPU node, which trains through several
evaluations and completes.

Only world rank 0 prints HF/ms-swift progress (the log dicts and the tqdm ``Train``/``Val`` bars),
so the other ranks' consoles show start-up output only. tqdm output is reproduced as it lands in
a captured terminal: refreshes separated by carriage returns, the second bar (``Val``) drawn one
line down with a cursor-up escape, and other writes appended to whatever the bar left on the line.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from datetime import datetime

import verbatim as V
from common import Job, Stream, Torchrun, after, expected, hms, jitter, swift_duration

PY = "/opt/conda/envs/swift/bin/python3.10"
SITE = "/opt/conda/envs/swift/lib/python3.10/site-packages"
CWD = "/data/pt"
BAR_CHARS = " ▏▎▍▌▋▊▉█"
CLEAR = " " * 66  # tqdm clears the bar with as many spaces as it was wide
ESC_UP = "\x1b[A"
TRAIN_ROWS, VAL_ROWS = 2662, 140
TOKENS_RAW = 583_920


def _bar(frac: float) -> str:
    """tqdm's 10-cell unicode bar."""
    full, part = divmod(int(frac * 10 * 8), 8)
    if full >= 10:
        return BAR_CHARS[-1] * 10
    return BAR_CHARS[-1] * full + BAR_CHARS[part] + " " * (10 - full - 1)


def tqdm_line(desc: str, n: int, total: int, elapsed: float, s_per_it: float | None) -> str:
    """One tqdm refresh: ``Train:   2%|▎         | 10/400 [52:02<33:49:13, 312.21s/it]``."""
    frac = n / total
    if n == 0 or not s_per_it:
        tail = f"[{hms(elapsed)}<?, ?it/s]"
    else:
        remaining = (total - n) * s_per_it
        rate = f"{s_per_it:5.2f}s/it" if s_per_it > 1 else f"{1 / s_per_it:5.2f}it/s"
        tail = f"[{hms(elapsed)}<{hms(remaining)}, {rate}]"
    return f"{desc}: {100 * frac:3.0f}%|{_bar(frac)}| {n}/{total} {tail}"


def ds(ts: datetime, src: str, msg: str) -> str:
    """DeepSpeed logger line: ``[2025-07-15 10:17:31,118] [INFO] [file.py:NN:func] msg``."""
    return f"[{ts:%Y-%m-%d %H:%M:%S},{ts.microsecond // 1000:03d}] [INFO] [{src}] {msg}"


@dataclass
class Spec:
    name: str
    hosts: list[str]
    ipv6: list[str]
    nproc: int
    max_steps: int
    stop_after: int | None  # hang in the evaluation after this step; None = run to the end
    launch: datetime
    agent_pids: list[int]
    version_dir: str
    seed: int
    commands: list[str]


def _swift_args(spec: Spec) -> str:
    """The (abridged) TrainArguments repr ms-swift logs at start; last --dataloader_num_workers wins."""
    return (
        "[INFO:swift] args: TrainArguments(model='./workdir/base_model', model_type='qwen3', model_revision=None, "
        "task_type='causal_lm', torch_dtype=torch.bfloat16, attn_impl='flash_attn', num_labels=None, "
        "dataset=['./workdir/dataset/shuffled_dataset.jsonl'], val_dataset=[], split_dataset_ratio=0.05, "
        "data_seed=42, dataset_num_proc=10, dataset_shuffle=True, streaming=False, max_length=32768, "
        "truncation_strategy='right', packing=True, lazy_tokenize=False, train_type='full', "
        f"output_dir='{CWD}/workdir/swift_output/{spec.version_dir}', per_device_train_batch_size=1, "
        "per_device_eval_batch_size=1, gradient_accumulation_steps=8, learning_rate=1e-05, weight_decay=0.0001, "
        f"max_grad_norm=1.0, num_train_epochs=3.0, max_steps={spec.max_steps}, lr_scheduler_type='warmup_stable_decay', "
        "lr_scheduler_kwargs={'num_decay_steps': 120, 'num_stable_steps': 260}, warmup_ratio=0.05, "
        f"warmup_steps=0, log_level='detail', logging_steps=1, save_strategy='steps', save_steps={400}, "
        "save_total_limit=1, eval_strategy='steps', eval_steps=10, dataloader_num_workers=4, "
        "train_dataloader_shuffle=True, report_to=['wandb'], gradient_checkpointing=True, "
        "deepspeed={'fp16': {'enabled': 'auto', 'loss_scale': 0, 'loss_scale_window': 1000, 'initial_scale_power': 16, "
        "'hysteresis': 2, 'min_loss_scale': 1}, 'bf16': {'enabled': 'auto'}, 'zero_optimization': {'stage': 3, "
        "'offload_optimizer': {'device': 'cpu', 'pin_memory': True}, 'offload_param': {'device': 'cpu', 'pin_memory': True}, "
        "'overlap_comm': False, 'contiguous_gradients': True, 'sub_group_size': 1000000000.0, 'reduce_bucket_size': 'auto', "
        "'zero_quantized_weights': False, 'zero_quantized_gradients': False, 'stage3_prefetch_bucket_size': 'auto', "
        "'stage3_param_persistence_threshold': 'auto', 'stage3_max_live_parameters': 1000000000.0, "
        "'stage3_max_reuse_distance': 1000000000.0, 'stage3_gather_16bit_weights_on_model_save': True}, "
        "'gradient_accumulation_steps': 'auto', 'gradient_clipping': 'auto', 'steps_per_print': 2000, "
        "'train_batch_size': 'auto', 'train_micro_batch_size_per_gpu': 'auto', 'wall_clock_breakdown': False}, "
        "ddp_timeout=18000000, ddp_backend='nccl', seed=42, bf16=True, model_author=['swift', 'swift'], "
        f"model_name=['swift-robot', 'swift-robot'], sequence_parallel_size=1, local_world_size={spec.nproc}, "
        f"global_world_size={len(spec.hosts) * spec.nproc}, rank=0, local_rank=0, world_size={len(spec.hosts) * spec.nproc})"
    )


def _nccl_file(spec: Spec, rank: int, host: str, ipv6: str, pid: int, rng: random.Random) -> list[str]:
    """NCCL_DEBUG=INFO output of one rank (NCCL 2.21.5) for the world communicator."""
    lr = rank % spec.nproc
    tid = pid + 112
    world = len(spec.hosts) * spec.nproc
    comm = f"0x{rng.randrange(0x55D000000000, 0x55DFFFFFFFFF):x}"
    bus = ["18000", "2a000"][lr]
    head = f"{host}:{pid}:{pid} [{lr}] NCCL INFO "
    h = f"{host}:{pid}:{tid} [{lr}] NCCL INFO "
    trees = {
        0: "Trees [0] 1/2/-1->0->-1 [1] 1/-1/-1->0->2",
        1: "Trees [0] -1/-1/-1->1->0 [1] -1/-1/-1->1->0",
        2: "Trees [0] 3/-1/-1->2->0 [1] 3/0/-1->2->-1",
        3: "Trees [0] -1/-1/-1->3->2 [1] -1/-1/-1->3->2",
    }[rank]
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out = [
        head + f"Bootstrap : Using eth0:{ipv6}<0>",
        head + "cudaDriverVersion 12040",
        head + "NCCL version 2.21.5+cuda12.4",
        h + "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        h + f"NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB eth0:{ipv6}<0>",
        h + "Using non-device net plugin version 0",
        h + "Using network IB",
        h + f"ncclCommInitRank comm {comm} rank {rank} nranks {world} cudaDev {lr} nvmlDev {lr} busId {bus} "
        "commId 0x7d51c3a9e05b2f14 - Init START",
        h + f"comm {comm} rank {rank} nRanks {world} nNodes {len(spec.hosts)} localRanks {spec.nproc} localRank {lr} MNNVL 0",
    ]
    if rank == 0:
        out += [h + "Channel 00/02 :    0   1   2   3", h + "Channel 01/02 :    0   1   2   3"]
    out += [h + trees, h + "P2P Chunksize set to 131072"]
    for ch in ("00", "01"):
        if lr == 0:
            out.append(h + f"Channel {ch}/0 : {prv}[1] -> {rank}[0] [receive] via NET/IB/{int(ch)}")
            out.append(h + f"Channel {ch}/0 : {rank}[0] -> {nxt}[1] via P2P/CUMEM/read")
        else:
            out.append(h + f"Channel {ch}/0 : {rank}[1] -> {nxt}[0] [send] via NET/IB/{int(ch)}")
    out += [
        h + "Connected all rings",
        h + "Connected all trees",
        h + "threadThresholds 8/8/64 | 32/8/64 | 512 | 512",
        h + "2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer",
        h + f"ncclCommInitRank comm {comm} rank {rank} nranks {world} cudaDev {lr} nvmlDev {lr} busId {bus} "
        "commId 0x7d51c3a9e05b2f14 - Init COMPLETE",
        h + f"Init timings: rank {rank} nranks {world} total {jitter(rng, 0.93, 0.05):.2f} (kernels 0.22, bootstrap "
        f"{jitter(rng, 0.36, 0.1):.2f}, allgathers 0.02, topo 0.15, graphs 0.01, connections 0.10, rest 0.03)",
    ]
    return out


def build(spec: Spec) -> Job:
    rng = random.Random(spec.seed)
    job = Job(spec.name)
    world = len(spec.hosts) * spec.nproc
    multi = len(spec.hosts) > 1
    warmup = math.ceil(0.05 * spec.max_steps)
    out_dir = f"{CWD}/workdir/swift_output/{spec.version_dir}"
    step_s = 312.0
    eval_s_per_batch = 1.72
    val_batches = VAL_ROWS // world
    steps_per_epoch = TRAIN_ROWS / (world * 8)
    # Same seed, same world size, same data order: both jobs see the same first losses.
    base_rng = random.Random(4000)
    losses = [2.118 - 0.0021 * i + base_rng.uniform(-0.035, 0.035) for i in range(spec.max_steps)]
    accs = [0.5512 + 0.0006 * i + base_rng.uniform(-0.006, 0.006) for i in range(spec.max_steps)]
    gnorms = [jitter(base_rng, 0.42 + 1.6 * math.exp(-i / 3), 0.12) for i in range(spec.max_steps)]

    def lr_at(step: int) -> float:
        return 1e-5 * min(1.0, step / warmup)

    files: dict[str, str] = {}
    consoles: list[Stream] = []
    t_train = after(spec.launch, 141.3)
    for node, host in enumerate(spec.hosts):
        base = f"{host}/" if multi else ""
        launch = after(spec.launch, 2.6 * node)
        tr = Torchrun(ident=spec.agent_pids[node], run_line=792, sigterm_line=897, failed_line=869,
                      launcher_lines=(355, 918, 909, 138, 269), python=PY, site=SITE, py311=False)
        con = Stream()
        con.extend(launch, tr.banner(launch))
        for lr in range(spec.nproc):
            rank = node * spec.nproc + lr
            pid = spec.agent_pids[node] + 68 + lr
            t0 = after(spec.launch, 5.8 + 2.6 * node + rng.uniform(0, 0.3))
            con.add(t0, ds(t0, "real_accelerator.py:254:get_accelerator", "Setting ds_accelerator to cuda (auto detect)"))
            t1 = after(t0, 6.1)
            con.add(t1, ds(t1, "comm.py:669:init_distributed", "cdb=None"))
            con.add(t1, ds(t1, "comm.py:700:init_distributed", "Initializing TorchBackend in DeepSpeed with backend nccl"))
            tb = after(t1, 0.4)
            ns = (tb.microsecond * 1000 + rng.randrange(1000)) % 10**9
            con.add(
                tb,
                f"[rank{rank}]:[W{tb.month * 100 + tb.day} {tb:%H:%M:%S}.{ns:09d} ProcessGroupNCCL.cpp:4561] "
                f"[PG ID 0 PG GUID 0 Rank {rank}]  using GPU {lr} to perform barrier as devices used by this process are "
                "currently unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect. Specify "
                "device_ids in barrier() to force use of a particular device, or call init_process_group() with a device_id.",
            )
            tl = after(spec.launch, 96.0 + rng.uniform(0, 0.8))
            con.add(tl, "Loading checkpoint shards: 100%|██████████| 3/3 [00:04<00:00,  1.49s/it]")
            ta = after(spec.launch, 121.0 + rng.uniform(0, 0.5))
            con.add(
                ta,
                "Using /root/.cache/torch_extensions/py310_cu124 as PyTorch extensions root...",
                "Loading extension module cpu_adam...",
                f"Time to load cpu_adam op: {jitter(rng, 2.45, 0.1):.4f} seconds",
                "Adam Optimizer #0 is created with AVX512 arithmetic capability.",
                "Config: alpha=0.000010, betas=(0.900000, 0.999000), weight_decay=0.000100, adam_w=1",
            )
            if multi:
                files[f"{base}nccl/nccl.{host}.{pid}.log"] = "".join(
                    f"{x}\n" for x in _nccl_file(spec, rank, host, spec.ipv6[node], pid, rng)
                )
        if node == 0:
            _rank0_startup(con, spec, out_dir)
        consoles.append(con)

    # ---- the training section, written by world rank 0 only (tqdm on stderr, DeepSpeed on stdout)
    con0 = consoles[0]
    ends = [after(t_train, step_s * 1.02 + 4.0)]
    for _ in range(1, spec.max_steps):
        ends.append(after(ends[-1], jitter(rng, step_s, 0.015)))
    logging_jsonl: list[str] = []
    train_ts = after(t_train, 0.05)
    warn = "`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`."
    bar = "\r" + tqdm_line("Train", 0, spec.max_steps, 0, None)
    con0.add(train_ts, bar + warn)
    for _ in range(1, spec.nproc):
        con0.add(after(train_ts, 1.2), warn)
    for node in range(1, len(spec.hosts)):
        for _ in range(spec.nproc):
            consoles[node].add(after(train_ts, 1.3), warn)
    last_logged = 0
    pending = ""  # what the bar left on the current physical line
    eval_count = 0
    eval_time = 0.0
    final_step = spec.stop_after or spec.max_steps
    for i in range(final_step):
        step = i + 1
        end = after(ends[i], eval_time)
        elapsed = (end - t_train).total_seconds()
        rate = elapsed / step
        pending += "\r" + tqdm_line("Train", step, spec.max_steps, elapsed, rate)
        logs = {
            "loss": round(losses[i], 8),
            "grad_norm": round(gnorms[i], 8),
            "learning_rate": round(lr_at(step), 8),
            "token_acc": round(accs[i], 8),
            "epoch": round(step / steps_per_epoch, 2),
        }
        logs.update(_swift_extra(step, spec.max_steps, elapsed, rate, rng))
        con0.add(end, pending + "\r" + CLEAR + "\r" + str(logs))
        logging_jsonl.append(json.dumps(logs))
        pending = "\r" + tqdm_line("Train", step, spec.max_steps, elapsed, rate)
        last_logged = step
        if step % 10 == 0:
            # evaluation: a second tqdm bar one line down
            t_eval = after(end, 0.8)
            con0.add(t_eval, pending)
            pending = ""
            if spec.stop_after == step:
                # the hang: the Val bar is drawn once and never advances
                hung_bar = "\r" + tqdm_line("Val", 0, val_batches, 0, None) + ESC_UP
                t_w1 = after(t_eval, 31 * 60 + 12.4)
                con0.add(t_w1, hung_bar + "wandb: Network error (ReadTimeout), entering retry loop.")
                t_w2 = after(t_w1, 47 * 60 + 3.1)
                con0.add(t_w2, "wandb: Network error (ConnectionError), entering retry loop.")
                break
            for b in range(val_batches + 1):
                con0.add(
                    after(t_eval, b * eval_s_per_batch),
                    "\r" + tqdm_line("Val", b, val_batches, b * eval_s_per_batch, eval_s_per_batch if b else None) + ESC_UP,
                )
            runtime = val_batches * eval_s_per_batch + rng.uniform(0.5, 1.5)
            t_done = after(t_eval, runtime)
            eval_logs = {
                "eval_loss": round(losses[i] - 0.041 + rng.uniform(-0.01, 0.01), 8),
                "eval_token_acc": round(accs[i] + 0.012, 8),
                "eval_runtime": round(runtime, 4),
                "eval_samples_per_second": round(VAL_ROWS / runtime, 3),
                "eval_steps_per_second": round(val_batches / runtime, 3),
                "epoch": round(step / steps_per_epoch, 2),
            }
            eval_elapsed = (t_done - t_train).total_seconds()
            eval_logs.update(_swift_extra(step, spec.max_steps, eval_elapsed, eval_elapsed / step, rng))
            con0.add(t_done, "\r" + " " * 50 + "\r" + ESC_UP + "\r" + CLEAR + "\r" + str(eval_logs))
            logging_jsonl.append(json.dumps(eval_logs))
            eval_time += runtime + 1.1
            eval_count += 1
            pending = "\r" + tqdm_line("Train", step, spec.max_steps, eval_elapsed, eval_elapsed / step)
    if spec.stop_after is None:
        _finish(con0, consoles, spec, out_dir, pending, t_train, ends, eval_time, losses, logging_jsonl, rng)

    for node, host in enumerate(spec.hosts):
        base = f"{host}/" if multi else ""
        files[f"{base}console.log"] = "".join(f"{x}\n" for x in consoles[node].lines())
        files[f"{base}cmd.sh"] = "".join(f"{x}\n" for x in ["#!/bin/bash", f"cd {CWD}", spec.commands[node]])
    jsonl_rel = f"{spec.hosts[0]}/" if multi else ""
    jsonl_rel += f"swift_output/{spec.version_dir}/logging.jsonl"
    files[jsonl_rel] = "".join(f"{x}\n" for x in logging_jsonl)
    job.files.update(files)
    for node, host in enumerate(spec.hosts):
        base = f"{host}/" if multi else ""
        job.must_contain(f"{base}cmd.sh", [spec.commands[node]])
    job.must_contain(files_key_console(spec), [f"'global_step/max_steps': '{last_logged}/{spec.max_steps}'"])

    families = {}
    for k in files:
        if k.endswith("console.log"):
            families[k] = "torchrun_console"
        elif "/nccl/" in f"/{k}":
            families[k] = "nccl_debug"
        elif k.endswith("logging.jsonl"):
            families[k] = "trainer_log"
        else:
            families[k] = "generic"
    job.expected, job.readme = _truth(spec, families, last_logged, eval_count, val_batches)
    return job


def files_key_console(spec: Spec) -> str:
    return f"{spec.hosts[0]}/console.log" if len(spec.hosts) > 1 else "console.log"


def _swift_extra(step: int, max_steps: int, elapsed: float, rate: float, rng: random.Random) -> dict[str, object]:
    """The keys ms-swift 3.x appends to every log dict."""
    return {
        "global_step/max_steps": f"{step}/{max_steps}",
        "percentage": f"{100 * step / max_steps:.2f}%",
        "elapsed_time": swift_duration(elapsed),
        "remaining_time": swift_duration((max_steps - step) * rate),
        "memory(GiB)": round(jitter(rng, 57.9, 0.004), 2),
        "train_speed(iter/s)": round(step / elapsed, 6),
    }


def _rank0_startup(con: Stream, spec: Spec, out_dir: str) -> None:
    """ms-swift, datasets, DeepSpeed and wandb start-up output of world rank 0."""
    t = after(spec.launch, 7.9)
    world = len(spec.hosts) * spec.nproc

    def sw(dt: float, *msgs: str) -> None:
        nonlocal t
        t = after(t, dt)
        con.add(t, *(f"[INFO:swift] {m}" if not m.startswith(("[INFO", " ", "}", "Map", "Pack")) else m for m in msgs))

    sw(0, f"Successfully registered `{SITE}/swift/llm/dataset/data/dataset_info.json`.")
    sw(0.3, f"rank: 0, local_rank: 0, world_size: {world}, local_world_size: {spec.nproc}.")
    sw(0.1, "Loading the model using model_dir: ./workdir/base_model")
    sw(0.1, "Setting torch_dtype: torch.bfloat16", "Setting args.lazy_tokenize: False")
    sw(0.1, f"output_dir: {out_dir}", "Global seed set to 42")
    sw(0.1, _swift_args(spec))
    sw(0.2, f"Start time of running main: {t:%Y-%m-%d %H:%M:%S}.{t.microsecond:06d}", "swift.__version__: 3.5.3")
    sw(0.6, "model_kwargs: {'device_map': None}")
    sw(9.2, "model_info: ModelInfo(model_type='qwen3', model_dir='./workdir/base_model', torch_dtype=torch.bfloat16, "
       "max_model_len=32768, quant_method=None, quant_bits=None, rope_scaling=None, config=None, task_type='causal_lm', "
       "num_labels=None)")
    sw(0.1, "default_system: None", "max_length: 32768", "response_prefix: ''", "agent_template: hermes")
    sw(0.4, "Start to load dataset...")
    sw(38.6, f"Map (num_proc=10): 100%|██████████| {TOKENS_RAW}/{TOKENS_RAW} [00:38<00:00, 15322.41 examples/s]")
    sw(
        31.2,
        "Packing (num_proc=10): 100%|██████████| 554724/554724 [00:31<00:00, 17780.91 examples/s]",
        "[INFO:swift] train_dataset: Dataset({",
        "    features: ['input_ids', 'labels', 'length'],",
        f"    num_rows: {TRAIN_ROWS}",
        "})",
        "[INFO:swift] val_dataset: Dataset({",
        "    features: ['input_ids', 'labels', 'length'],",
        f"    num_rows: {VAL_ROWS}",
        "})",
    )
    sw(14.0, "model_parameter_info: Qwen3ForCausalLM: 4022.4681M Params (4022.4681M Trainable [100.0000%]), 0.0001M Buffers.")
    sw(0.2, f"The TrainArguments will be saved in: {out_dir}/args.json")
    t = after(spec.launch, 122.5)
    for src, msg in [
        ("logging.py:107:log_dist", "[Rank 0] DeepSpeed info: version=0.16.9, git-hash=unknown, git-branch=unknown"),
        ("config.py:735:__init__", f"Config mesh_device None world_size = {world}"),
        ("logging.py:107:log_dist", "[Rank 0] DeepSpeed Flops Profiler Enabled: False"),
        ("logging.py:107:log_dist", "[Rank 0] Using client Optimizer as basic optimizer"),
        ("logging.py:107:log_dist", "[Rank 0] DeepSpeed Basic Optimizer = DeepSpeedCPUAdam"),
        ("logging.py:107:log_dist", "[Rank 0] Creating torch.bfloat16 ZeRO stage 3 optimizer"),
        ("engine.py:1605:_configure_zero_optimizer", "Initializing ZeRO Stage 3"),
        ("stage3.py:167:__init__", "Reduce bucket size 6553600"),
        ("stage3.py:168:__init__", "Prefetch bucket size 5898240"),
        ("utils.py:781:see_memory_usage", "DeepSpeedZeRoOffload initialize [begin]"),
        ("utils.py:782:see_memory_usage", "MA 0.77 GB         Max_MA 1.75 GB         CA 1.09 GB         Max_CA 2 GB "),
        ("utils.py:789:see_memory_usage", "CPU Virtual Memory:  used = 118.23 GB, percent = 11.7%"),
        ("parameter_offload.py:110:__init__", "Parameter Offload: Total persistent parameters: 176640 in 145 params"),
        ("logging.py:107:log_dist", "[Rank 0] DeepSpeed Final Optimizer = DeepSpeedZeroOptimizer_Stage3"),
        ("logging.py:107:log_dist", "[Rank 0] DeepSpeed using client LR scheduler"),
        ("config.py:1003:print", "DeepSpeedEngine configuration:"),
        ("config.py:1007:print", "  zero_config .................. stage=3 contiguous_gradients=True reduce_scatter=True "
         "reduce_bucket_size=6553600 offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu', pin_memory=True) "
         "offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='cpu', pin_memory=True)"),
        ("config.py:1007:print", "  train_batch_size ............. " + str(world * 8)),
        ("config.py:1007:print", "  gradient_accumulation_steps .. 8"),
    ]:
        t = after(t, 0.04)
        con.add(t, ds(t, src, msg))
    t = after(spec.launch, 134.0)
    con.add(
        t,
        "wandb: Currently logged in as: swift-user to https://api.wandb.ai. Use `wandb login --relogin` to force relogin",
        "wandb: Tracking run with wandb version 0.19.11",
        f"wandb: Run data is saved locally in {CWD}/wandb/{_wandb_run(spec)}",
        "wandb: Run `wandb offline` to turn off syncing.",
        f"wandb: Syncing run {out_dir}",
        "wandb: ⭐️ View project at https://wandb.ai/swift-user/huggingface",
        f"wandb: 🚀 View run at https://wandb.ai/swift-user/huggingface/runs/{spec.seed:x}q7r2",
    )


def _finish(
    con0: Stream,
    consoles: list[Stream],
    spec: Spec,
    out_dir: str,
    pending: str,
    t_train: datetime,
    ends: list[datetime],
    eval_time: float,
    losses: list[float],
    logging_jsonl: list[str],
    rng: random.Random,
) -> None:
    """Checkpoint at the last step, final metrics, bar close, ms-swift and wandb end lines."""
    t = after(ends[-1], eval_time + 0.3)
    ck = f"{out_dir}/checkpoint-{spec.max_steps}/global_step{spec.max_steps}"
    world = len(spec.hosts) * spec.nproc
    con0.add(t, pending + ds(t, "logging.py:107:log_dist", f"[Rank 0] [Torch] Checkpoint global_step{spec.max_steps} is about to be saved!"))
    con0.add(t, ds(t, "logging.py:107:log_dist", f"[Rank 0] Saving model checkpoint: {ck}/zero_pp_rank_0_mp_rank_00_model_states.pt"))
    for r in range(world):
        tr = after(t, 0.02 + 0.003 * r)
        con0.add(tr, ds(tr, "torch_checkpoint_engine.py:21:save", f"[Torch] Saving {ck}/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt..."))
    for r in range(world):
        tr = after(t, 38.0 + 0.7 * r)
        con0.add(tr, ds(tr, "torch_checkpoint_engine.py:23:save", f"[Torch] Saved {ck}/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt."))
        con0.add(tr, ds(tr, "engine.py:3536:_save_zero_checkpoint", f"zero checkpoint saved {ck}/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
    t = after(t, 41.2)
    con0.add(t, ds(t, "torch_checkpoint_engine.py:33:commit", f"[Torch] Checkpoint global_step{spec.max_steps} is ready now!"))
    t = after(t, 3.9)
    runtime = (t - t_train).total_seconds()
    final = {
        "train_runtime": round(runtime, 4),
        "train_samples_per_second": round(spec.max_steps * world * 8 / runtime, 3),
        "train_steps_per_second": round(spec.max_steps / runtime, 3),
        "train_loss": round(sum(losses) / len(losses), 8),
        "epoch": round(spec.max_steps / (TRAIN_ROWS / (world * 8)), 2),
    }
    final.update(_swift_extra(spec.max_steps, spec.max_steps, runtime, runtime / spec.max_steps, rng))
    bar = tqdm_line("Train", spec.max_steps, spec.max_steps, runtime, runtime / spec.max_steps)
    con0.add(t, "\r" + CLEAR + "\r" + str(final))
    con0.add(t, "\r" + bar)
    logging_jsonl.append(json.dumps(final))
    t = after(t, 0.6)
    con0.add(
        t,
        f"[INFO:swift] last_model_checkpoint: {out_dir}/checkpoint-{spec.max_steps}",
        f"[INFO:swift] best_model_checkpoint: {out_dir}/checkpoint-{spec.max_steps}",
        f"[INFO:swift] images_dir: {out_dir}/images",
        f"[INFO:swift] End time of running main: {t:%Y-%m-%d %H:%M:%S}.{t.microsecond:06d}",
    )
    t = after(t, 4.4)
    con0.add(
        t,
        "wandb: ",
        f"wandb: 🚀 View run {out_dir} at: https://wandb.ai/swift-user/huggingface/runs/{spec.seed:x}q7r2",
        f"wandb: Find logs at: wandb/{_wandb_run(spec)}/logs",
    )


def _truth(spec: Spec, families: dict[str, str], last: int, evals: int, val_batches: int) -> tuple[dict, str]:
    world = len(spec.hosts) * spec.nproc
    multi = spec.stop_after is not None
    last_step = {0: last, **dict.fromkeys(range(1, world), None)}
    if multi:
        exp = expected(
            source="seed 004 (two nodes, hang at the first evaluation)",
            status="hung",
            category="hang_unknown",
            culprit_ranks=[],
            first_failing_rank=None,
            first_failing_step=None,
            world_size=world,
            nodes=spec.hosts,
            last_step=last_step,
            files=families,
            facts=[
                f"world rank 0 logs steps 1-{last} of {spec.max_steps} ('global_step/max_steps': '{last}/{spec.max_steps}'), "
                f"then opens the evaluation bar (Val 0/{val_batches}) and never advances it",
                "no error, no traceback, no NCCL WARN and no process exit on either node; only wandb network retries follow",
                "ms-swift sets ddp_timeout=18000000 s, so the NCCL watchdog never fires: a silent hang",
                f"eval_steps=10: the stall is in the first evaluation, right after step {last}",
                "the same job on one 4-GPU node passes its evaluations (seed004_one_node_ok)",
                "command: IPv6 --master_addr without brackets (accepted: rendezvous and NCCL init succeed on both nodes); "
                "--dataloader_num_workers given twice (10, then 4: the last one wins)",
                "HF/ms-swift progress lines come from world rank 0 only; ranks 1-3 print start-up lines only",
            ],
        )
    else:
        exp = expected(
            source="seed 004 (same job on one node, 4 GPUs, completes)",
            status="completed",
            category="healthy",
            culprit_ranks=[],
            first_failing_rank=None,
            first_failing_step=None,
            world_size=world,
            nodes=spec.hosts,
            last_step=last_step,
            files=families,
            facts=[
                f"training completes {spec.max_steps}/{spec.max_steps} steps with {evals} evaluations (every 10 steps)",
                f"checkpoint-{spec.max_steps} saved; train_runtime logged; every rank exits 0 (no torchrun failure lines)",
                "HF/ms-swift progress lines come from world rank 0 only",
            ],
        )
    hosts = ", ".join(spec.hosts)
    if multi:
        readme = f"""
# {spec.name}: ms-swift + ZeRO-3 offload, two nodes, hangs at the first evaluation (reconstruction)

**Reconstruction** of seed 004: continued pre-training of Qwen3-4B-Base with ms-swift (`swift_pt.py`),
DeepSpeed ZeRO-3 with CPU offload, on 2 machines with 2 H20 each (NCCL). The user reports that the job
hangs "at this step"; the same training works on a single machine with 4 GPUs. Multi-GPU hardware is not
available here, so this directory was written by `tools/reconstruct/build.py` (`seed004.py`).

## What the job shows

Each node folder ({hosts}) holds the node's terminal capture (`console.log`), the exact launch command
(`cmd.sh`) and `NCCL_DEBUG=INFO` output (`NCCL_DEBUG_FILE=nccl/nccl.%h.%p.log`); node 0 also holds
ms-swift's `logging.jsonl`. Both nodes rendezvous, build the NCCL communicator (4 ranks, 2 nodes, IB/RoCE)
and train. World rank 0 logs steps 1-{last}; with `eval_steps 10` the first evaluation starts after step
{last}: the `Val` bar is drawn at 0/{val_batches} and never moves. Nothing else is printed except wandb's
network retries. No rank reports an error, and ms-swift's default `ddp_timeout=18000000` keeps the NCCL
watchdog from ever firing.

## Category: hang_unknown

The logs establish *where* the job stops (entering the evaluation after step {last}) and that no rank
failed, but not *why*: there are no stack dumps and no rank-specific messages after training started
(HF/ms-swift print on world rank 0 only). Plausible causes to check, none provable from these logs:
ZeRO-3 needs every rank to run the same forward passes, so a rank that takes a different number of
evaluation batches or is stuck in a data-loader worker desynchronises the parameter all-gathers; the eval
dataloader workers (`--dataloader_num_workers` is given twice, 10 then 4); cross-node communication during
evaluation. The right next step is `py-spy dump` on all four ranks. A correct analysis says: hung, last
step {last} on rank 0, stalled at the start of evaluation, no error on any rank, cause undetermined.

## Verbatim from the seed

Both launch commands (cmd.sh), unchanged: IPv6 `--master_addr` without brackets, duplicated
`--dataloader_num_workers 10` / `4`, `--eval_steps 10`, `--save_steps 400`, `--deepspeed zero3_offload`,
`--packing True`, `--max_steps 400`, `--report_to wandb`.

## Invented

Host names and the second node's address, PIDs, times (node 0 launched {spec.launch:%Y-%m-%d %H:%M:%S}), all
log text and values (losses, speeds, dataset sizes: {TRAIN_ROWS} packed training rows, {VAL_ROWS} validation rows),
library versions (torch 2.6.0+cu124, NCCL 2.21.5, transformers 4.51.3, DeepSpeed 0.16.9, ms-swift 3.5.3), the
wandb lines, and the choice that the stall begins exactly at the evaluation (the seed says only "at this step").
"""
    else:
        readme = f"""
# {spec.name}: the same ms-swift job on one 4-GPU node, completes (reconstruction)

**Reconstruction**, companion of `seed004_two_nodes_hang`: seed 004 says the training works on a single
machine with 4 GPUs. This is that run: the same `swift_pt.py` arguments, launched with
`torchrun --nproc_per_node=4` on host {hosts}, and (to keep the sample short) `--max_steps {spec.max_steps}`
instead of 400, so it passes {evals} evaluations (every 10 steps), saves `checkpoint-{spec.max_steps}` and exits 0.
World size, batch layout and data order equal the two-node job, so the first losses are the same.

A correct analysis says: completed, healthy, {spec.max_steps} steps, evaluations at steps 10, 20, 30, 40.

## Verbatim from the seed

The argument list of the seed's command (cmd.sh), with the launcher part replaced by
`torchrun --nproc_per_node=4` and `--max_steps {spec.max_steps}`.

## Invented

Everything in the logs (see the two-node job's README); NCCL debug output is not enabled in this run.
"""
    return exp, readme


def _wandb_run(spec: Spec) -> str:
    """wandb's run directory name (created when rank 0 initialises wandb)."""
    return f"run-{after(spec.launch, 134.0):%Y%m%d_%H%M%S}-{spec.seed:x}q7r2"


def _one_node_command() -> str:
    cmd = V.S004_CMD_NODE0
    launcher = "torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr=2605:340:cd51:4b00:9b86:912c:6586:d4d0 --master_port=10217"
    assert cmd.startswith(launcher)
    return ("torchrun --nproc_per_node=4" + cmd[len(launcher):]).replace("--max_steps 400", "--max_steps 40")


TWO_NODES = Spec(
    name="seed004_two_nodes_hang",
    hosts=["h20-node-17", "h20-node-18"],
    ipv6=["2605:340:cd51:4b00:9b86:912c:6586:d4d0", "2605:340:cd51:4b00:9b86:912c:6586:d52f"],
    nproc=2,
    max_steps=400,
    stop_after=10,
    launch=datetime(2025, 7, 15, 10, 15, 31, 204000),
    agent_pids=[23817, 31452],
    version_dir="v3-20250715-101543",
    seed=4001,
    commands=[V.S004_CMD_NODE0, V.S004_CMD_NODE1],
)

ONE_NODE = Spec(
    name="seed004_one_node_ok",
    hosts=["h20-node-05"],
    ipv6=["2605:340:cd51:4b00:9b86:912c:6586:c101"],
    nproc=4,
    max_steps=40,
    stop_after=None,
    launch=datetime(2025, 7, 14, 19, 29, 58, 641000),
    agent_pids=[118204],
    version_dir="v0-20250714-193012",
    seed=4002,
    commands=[_one_node_command()],
)


def jobs() -> list[Job]:
    """The two seed-004 scenarios."""
    return [build(TWO_NODES), build(ONE_NODE)]

