"""Launch configuration facts: what a job was started with, read off its timeline.

Whatever a job left behind says how it was launched, a line here and there: a launch script or
a ``set -x`` trace with the ``torchrun``/``deepspeed``/``accelerate launch``/``srun`` command,
ms-swift's ``run sh:`` line, environment dumps and NCCL's ``X set by environment to Y`` lines,
version banners, the trainer's argument dump and its ``***** Running training *****`` block,
DeepSpeed's config print, NCCL's interface lines. :func:`collect_facts` turns them into flat,
typed facts (``topology.nnodes``, ``env.NCCL_SOCKET_IFNAME``, ``trainer.max_steps`` ...), each
with the log line it came from; :func:`extract_config` is the same record as JSON, the
report's ``job.config``. Config checks (:mod:`postmortem.config_rules`) and ``postmortem diff``
(:mod:`postmortem.diff`) read the facts.

Fast by construction: one vectorized ``str.contains`` selects the candidate rows (identical
lines that every rank prints are kept once per node), and Python ``regex``/:mod:`shlex` run
only on those few rows.

The record has two levels, ``section -> name -> value``; a fact's flat key is
``"section.name"`` (the name may itself hold dots, e.g. ``script_args.model.name``):

``topology``     nnodes, nproc_per_node, world_size, hosts, node_ranks, backend, ranks_seen
``launcher``     name, command, master_addr, master_port, rdzv_*, wrapper, other launcher args,
                 duplicates, mismatched_args (launch arguments that differ between nodes)
``script``       path, positional, duplicates (an argument given twice with different values)
``script_args``  every argument of the training script, last value wins (as argparse does)
``env``          NCCL_*, HCCL_*, GLOO_*, CUDA_*, ASCEND_*, TORCH_*, OMP_NUM_THREADS, MASTER_* ...
``env_by_node``  node -> {var: value}, only when nodes disagree on a value
``versions``     torch, torch_npu, CANN, NCCL, deepspeed, transformers, ms-swift, python ...
``trainer``      micro/global/eval batch size, grad_accum, max_steps, eval/save steps and
                 strategies, zero_stage, offload, packing, seq_len, dataloader_workers ...
``dataset``      total_tokens, lines, train_samples, eval_samples
``network``      interfaces (and interface_count), ib_devices
``code``         transfer_to_npu, device_mesh, verl (what the code visibly uses)
``platform``     ascend, cuda
``signals``      hccl_watchdog_exception, training_finished, watchdog_after_finish
``derived``      tokens_per_step, supported_steps, eval_global_batch, collective_timeout_s
"""

from __future__ import annotations

import ipaddress
import shlex
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

import polars as pl
import regex

from postmortem.parsers.patterns import TRAINING_FINISHED

#: Sections of the record, in the order reports show them.
SECTIONS: tuple[str, ...] = (
    "topology", "launcher", "script", "script_args", "env", "env_by_node", "versions", "trainer",
    "dataset", "network", "code", "platform", "signals", "derived",
)

_ENV_PREFIXES = r"(?:NCCL|HCCL|GLOO|CUDA|ASCEND|TORCH|TORCHELASTIC|PYTORCH|NPU|HCCN)_[A-Z0-9_]+"
_ENV_NAMES = rf"{_ENV_PREFIXES}|OMP_NUM_THREADS|MASTER_ADDR|MASTER_PORT|WORLD_SIZE|LOCAL_WORLD_SIZE"

#: Argument and log-echo names -> the fact they set. Names are compared after dropping leading
#: dashes and any dotted prefix (``--training.train_iters`` is ``train_iters``), ``-`` read as ``_``.
ALIASES: dict[str, str] = {
    # topology and launcher (torchrun, deepspeed, accelerate, elastic agent and trainer echoes)
    "nnodes": "topology.nnodes",
    "num_nodes": "topology.nnodes",
    "num_machines": "topology.nnodes",
    "group_world_size": "topology.nnodes",
    "max_nodes": "topology.nnodes",
    "nproc_per_node": "topology.nproc_per_node",
    "num_gpus": "topology.nproc_per_node",
    "local_world_size": "topology.nproc_per_node",
    "world_size": "topology.world_size",
    "num_processes": "topology.world_size",
    "node_rank": "launcher.node_rank",
    "machine_rank": "launcher.node_rank",
    "master_addr": "launcher.master_addr",
    "main_process_ip": "launcher.master_addr",
    "master_port": "launcher.master_port",
    "main_process_port": "launcher.master_port",
    "rdzv_backend": "launcher.rdzv_backend",
    "rdzv_endpoint": "launcher.rdzv_endpoint",
    "rdzv_id": "launcher.rdzv_id",
    "rdzv_conf": "launcher.rdzv_conf",
    "max_restarts": "launcher.max_restarts",
    "backend": "topology.backend",
    "dist_backend": "topology.backend",
    "ddp_backend": "topology.backend",
    # trainer settings
    "per_device_train_batch_size": "trainer.micro_batch_size",
    "micro_batch_size": "trainer.micro_batch_size",
    "train_micro_batch_size_per_gpu": "trainer.micro_batch_size",
    "per_device_eval_batch_size": "trainer.eval_batch_size",
    "eval_batch_size": "trainer.eval_batch_size",
    "global_batch_size": "trainer.global_batch_size",
    "train_batch_size": "trainer.global_batch_size",
    "gradient_accumulation_steps": "trainer.grad_accum",
    "max_steps": "trainer.max_steps",
    "train_iters": "trainer.max_steps",
    "max_update": "trainer.max_steps",
    "max_train_steps": "trainer.max_steps",
    "num_train_epochs": "trainer.num_epochs",
    "eval_steps": "trainer.eval_steps",
    "eval_interval": "trainer.eval_steps",
    "save_steps": "trainer.save_steps",
    "save_interval": "trainer.save_steps",
    "eval_strategy": "trainer.eval_strategy",
    "evaluation_strategy": "trainer.eval_strategy",
    "save_strategy": "trainer.save_strategy",
    "logging_steps": "trainer.logging_steps",
    "max_length": "trainer.seq_len",
    "max_seq_len": "trainer.seq_len",
    "max_seq_length": "trainer.seq_len",
    "seq_length": "trainer.seq_len",
    "seq_len": "trainer.seq_len",
    "cutoff_len": "trainer.seq_len",
    "packing": "trainer.packing",
    "dataloader_num_workers": "trainer.dataloader_workers",
    "num_workers": "trainer.dataloader_workers",
    "dataset_num_proc": "trainer.dataset_num_proc",
    "split_dataset_ratio": "trainer.eval_split",
    "val_set_size": "trainer.eval_split",
    "sequence_parallel_size": "trainer.sequence_parallel_size",
    "context_parallel_size": "trainer.sequence_parallel_size",
    "tensor_model_parallel_size": "trainer.tensor_parallel_size",
    "pipeline_model_parallel_size": "trainer.pipeline_parallel_size",
    "learning_rate": "trainer.learning_rate",
    "train_type": "trainer.train_type",
    "attn_impl": "trainer.attn_impl",
    "deepspeed": "trainer.deepspeed",
    "zero_stage": "trainer.zero_stage",
    "zero_optimization_stage": "trainer.zero_stage",
    "offload_optimizer_device": "trainer.offload",
    "offload_param_device": "trainer.offload",
    "ddp_timeout": "trainer.ddp_timeout_s",
    "pg_timeout": "trainer.pg_timeout_s",
    "dataloader_drop_last": "trainer.drop_last",
    "drop_last": "trainer.drop_last",
    "fsdp": "trainer.fsdp",
}

#: Launcher flags that take no value (the next token is the script or another option).
_FLAGS = {
    "standalone", "no_python", "module", "m", "run_path", "use_env", "multi_gpu", "use_deepspeed",
    "use_fsdp", "no_local_rank", "force_multi", "autotuning", "bind_cores_to_rank", "enable_each_rank_log",
    "save_pid", "exclusive", "l", "label", "overlap",
}
#: Options meant to be given several times (a repeat is not a mistake).
_REPEATABLE = {
    "include", "exclude", "env", "override", "overrides", "set", "add", "define", "mount", "volume", "tag",
    "tags", "e", "x",
}
#: srun options that take a value (so ``srun -N 2 torchrun ...`` finds the inner command).
_SRUN_VALUE = {"n", "N", "c", "p", "t", "J", "w", "o", "e", "G"}

_LAUNCHER = regex.compile(
    r"(?:^|(?<=[\s;&|`'\"(+$]))"
    r"(?P<launcher>(?:\S*/)?torchrun|(?:\S*/)?python[\d.]*\s+(?:-u\s+)?-m\s+(?:torch\.distributed\.(?:run|launch)|deepspeed\.launcher\.launch)"
    r"|deepspeed|accelerate\s+launch|srun|mpirun)"
    r"(?=\s+(?:-|\S+\.(?:py|sh|yaml|yml)\b))"
)
_ASSIGN = regex.compile(r"^\s*(?:export\s+)?(?P<k>[A-Za-z_]\w*)=(?P<v>\"[^\"]*\"|'[^']*'|\S*)\s*$")
_ENV = regex.compile(
    rf"(?<![\w.-])(?P<k>{_ENV_NAMES})"
    r"(?:\s*=\s*|\s+set by environment to\s+|:\s+)"
    r"(?P<v>\"[^\"]*\"|'[^']*'|[^\s;'\"]+)"
)
_OMP_DEFAULT = regex.compile(r"Setting OMP_NUM_THREADS environment variable for each process to be (\d+)")
_KV = regex.compile(
    r"(?<![\w/])(?:--)?(?:[A-Za-z_][\w-]*\.)*(?P<k>[A-Za-z_][\w-]*)"
    r"(?:\s*=\s*|:\s+|\s+:\s+)"
    # a value is never itself the start of the next key=value (``config: max_seq_len=4096``)
    r"(?P<v>(?![A-Za-z_][\w.-]*=)(?:\[[^\]]*\]|\{[^}]*\}|'[^']*'|\"[^\"]*\"|[^\s,;)]+))"
)
_VERSIONS: tuple[tuple[str, regex.Pattern[str]], ...] = tuple(
    (name, regex.compile(p, regex.IGNORECASE if name in {"CANN"} else 0))
    for name, p in (
        ("torch_npu", r"\btorch[_-]npu(?:==|\s+version\s*[:=]?\s*|\.__version__\s*[:=]\s*|:\s+|\s+)v?(\d+\.\d+\.\d+[\w.+]*)"),
        ("PTA", r"\bPTA\s+v?(\d+\.\d+\.\d+[\w.+]*)"),
        ("torch", r"(?<![\w-])(?:torch(?:==|\s+version\s*[:=]?\s*|\.__version__\s*[:=]\s*|:\s+|\s+)|PyTorch version:\s*)v?(\d+\.\d+\.\d+[\w.+]*)"),
        ("CANN", r"\bCANN[- _]?(?:version)?\s*[:=]?\s*v?(\d+\.\d+\.[\w.]*\w)"),
        ("NCCL", r"\bNCCL version\s+(\d+\.\d+\.\d+)"),
        ("CUDA", r"\+cuda(\d+\.\d+)\b|\bCUDA (?:version|runtime)\s*[:=]?\s*(\d+\.\d+)"),
        ("deepspeed", r"(?i)\bdeepspeed(?:==|\s+version\s*[:=]?\s*|\s+info:\s+version=|\.__version__\s*[:=]\s*)v?(\d+\.\d+\.\d+[\w.+]*)"),
        ("transformers", r"(?i)\btransformers(?:==|\s+version\s*[:=]?\s*|\.__version__\s*[:=]\s*|\s+)v?(\d+\.\d+\.\d+[\w.]*)"),
        ("ms-swift", r"\bswift\.__version__:\s*v?(\d+\.\d+\.\d+[\w.]*)|\bms-swift(?:==|\s+version\s*[:=]?\s*|\s+)v?(\d+\.\d+\.\d+[\w.]*)"),
        ("accelerate", r"(?i)\baccelerate(?:==|\s+version\s*[:=]?\s*)v?(\d+\.\d+\.\d+[\w.]*)"),
        ("verl", r"(?i)\bverl(?:==|\s+version\s*[:=]?\s*)v?(\d+\.\d+\.\d+[\w.]*)"),
        ("python", r"\bPython\s+v?(\d+\.\d+\.\d+)\b"),
    )
)
#: A version inside a directory or run name (``...-torch2.4-testenv``): a fallback, the weakest source.
_PATH_VERSION = regex.compile(r"(?<![A-Za-z])(?P<name>torch|torch_npu|deepspeed|transformers)(?P<ver>\d+\.\d+(?:\.\d+)?)(?=[-_/.]|$)")
_HF_BLOCK: tuple[tuple[regex.Pattern[str], str | None], ...] = tuple(
    (regex.compile(p), key)
    for p, key in (
        (r"Num examples = ([\d,]+)", None),  # train or eval: decided by the block it is in
        (r"Num Epochs = ([\d,]+)", "trainer.num_epochs"),
        (r"Instantaneous batch size per device = (\d+)", "trainer.micro_batch_size"),
        (r"Total train batch size \([^)]*\) = (\d+)", "trainer.global_batch_size"),
        (r"Gradient Accumulation steps = (\d+)", "trainer.grad_accum"),
        (r"Total optimization steps = ([\d,]+)", "trainer.max_steps"),
        (r"\bBatch size = (\d+)", "trainer.eval_batch_size"),
    )
)
_DS_PRINT = regex.compile(r"\[config\.py:\d+:print\]\s+(?P<k>\w+)\s*(?:\.{2,}\s*|\s{2,}|\s)(?P<v>\S.*)$")
_DS_STAGE = regex.compile(r"(?:^|[\s{,])['\"]?stage['\"]?\s*[=:]\s*(\d)")
_DS_OFFLOAD = regex.compile(
    r"offload_(?:optimizer|param)['\"]?\s*[=:]\s*(?:\{\s*['\"]device['\"]\s*:\s*|\w*Config\(device=)['\"](\w+)['\"]"
)
_DATASET_ROWS = regex.compile(r"\b(?P<split>train|val|eval|valid|validation|test)_dataset:\s*(?P<rest>.*)$")
_NUM_ROWS = regex.compile(r"num_rows['\"]?\s*[:=]\s*([\d,]+)")
# "<n> tokens" counts the data only next to words that say so (not "sequences of at most 512 tokens")
_TOKENS = regex.compile(r"(?<!most |max |maximum |of |<= |up to )([\d,]{2,})\s+tokens\b(?!\s*(?:per|/|each))")
# ... the words, or the data's other counts ("36,718 lines, 2,517,232 tokens")
_TOKENS_CONTEXT_PATTERN = (
    r"(?i:\b(?:dataset|corpus|data)\s+(?:statistics|stats|size|summary)|\btotal\b|\btokenized\b"
    r"|[\d,]{2,}\s+(?:lines|rows|samples|examples)\b)"
)
_TOKENS_CONTEXT = regex.compile(_TOKENS_CONTEXT_PATTERN)
_LINES = regex.compile(r"([\d,]{2,})\s+(?:lines|rows|samples|examples)\b")
_PG_TIMEOUT = regex.compile(r"TIMEOUT\(ms\):\s*(\d+)|Timeout\(ms\)=(\d+)")
_IF_NCCL = regex.compile(r"NET/Socket\s*:\s*Using\s+(?P<list>.+)$")
_IF_ITEM = regex.compile(r"\[\d+\](?P<name>[\w.@-]+):")
_IF_BOOT = regex.compile(r"Bootstrap\s*:\s*Using\s+(?:\[\d+\])?(?P<name>[\w.@-]+):")
_IF_IB = regex.compile(r"NET/IB\s*:\s*Using\s+(?P<list>.+)$")
_IB_ITEM = regex.compile(r"\[\d+\](?P<name>[\w.]+):\d+/(?:IB|RoCE)")
_IB_OOB = regex.compile(r"OOB\s+(?P<name>[\w.@-]+):")
# `ip addr`: "2: eth0: <BROADCAST,...> mtu 1500" (the "2: " may be gone: srun-label stripping eats it)
_IF_IPADDR = regex.compile(r"^\s*(?:\d+:\s+)?(?P<name>[\w.-]+?)(?:@\S+)?:\s+<[A-Z0-9_,-]*>\s+mtu\b")
_IF_IFCONFIG = regex.compile(r"^(?P<name>[\w.-]+):\s+flags=\d+<")
_CODE = (
    ("code.transfer_to_npu", regex.compile(r"transfer_to_npu")),
    ("code.device_mesh", regex.compile(r"DeviceMesh|device_mesh|init_device_mesh")),
    ("code.verl", regex.compile(r"(?<![\w-])verl(?:[./]|\s+(?:trainer|ppo|grpo))|\bmain_ppo\b")),
)
_WATCHDOG = regex.compile(r"HCCL watchdog thread terminated with exception|ProcessGroupHCCL.*[Ww]atchdog.*(?:exception|error)")
_FINISHED = regex.compile(TRAINING_FINISHED)
_SECTION_START = regex.compile(r"\*{3,}\s*Running (?P<what>training|Evaluation|Prediction)\s*\*{3,}")
_RUN_SH = regex.compile(r"run sh:\s*`?(?P<cmd>[^`]+)`?")
_WORLD_ECHO = regex.compile(r"(?i)\bworld[_ ]size\s*[:=]\s*(\d+)")
_BACKEND_ECHO = regex.compile(
    r"(?i)\bbackend[=:\s]+['\"]?(nccl|gloo|hccl|mpi|xccl|cpu:gloo,cuda:nccl)\b|"
    r"TorchBackend in DeepSpeed with backend (\w+)|\bProcessGroup(NCCL|Gloo|HCCL)\b"
)
_IPV6 = regex.compile(r"^\[?[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:%\w+)?\]?$")

_TRAINER_WORDS = "|".join(sorted({regex.escape(k) for k in ALIASES}, key=len, reverse=True))

#: One polars (Rust) regex selecting every row a fact could come from. It is also what the
#: timeline must keep (``RuleSet.keep_pattern`` adds it when config rules are loaded), so the
#: launch script's continuation lines and a trainer's ``key=value,`` argument dump survive.
KEEP_PATTERN = "|".join(
    (
        r"torchrun|torch\.distributed\.(?:run|launch)|deepspeed|DeepSpeed|accelerate\s+launch|\bsrun\b|mpirun|run sh:",
        r"\\\s*$|^\s+--?[A-Za-z]",
        _ENV_NAMES,
        r"^\s*(?:export\s+)?[A-Za-z_]\w*=\S",
        r"(?i:version|launch configs|rendezvous complete|world[_ ]size|backend)",
        r"(?i:num examples|num epochs|batch size|gradient accumulation|optimization steps|running (?:training|evaluation))",
        r"num_rows|_dataset:|TrainingArguments|TrainArguments|Namespace\(|args:|Setting args\.",
        # a token count with the words that make it the data's size (not every batch's "32768 tokens")
        rf"{_TOKENS_CONTEXT_PATTERN}.*\btokens\b|\btokens\b.*{_TOKENS_CONTEXT_PATTERN}",
        r"\[config\.py:\d+:print\]|zero_optimization|offload",
        r"NET/Socket|NET/IB|Bootstrap|flags=\d+<|^\s*(?:\d+:\s+)?\S+:\s+<[A-Z0-9_,-]*>\s+mtu|TIMEOUT\(ms\)|Timeout\(ms\)",
        r"transfer_to_npu|DeviceMesh|device_mesh|\bverl\b|main_ppo",
        r"watchdog thread terminated|[Ww]atchdog.*exception",
        TRAINING_FINISHED,
        r"^[A-Za-z][\w.-]*(?:==|\s{2,})v?\d+\.\d+",  # pip list / pip freeze rows
        rf"\b(?:{_TRAINER_WORDS})\b",
    )
)

#: Rows the vectorized platform probe looks for (no Python per row).
_ASCEND_PROBE = r"torch_npu|ProcessGroupHCCL|\bHCCL\b|HCCL_|Ascend|backend=hccl|\bERR0\d{4}\b|\bE[EIJZ]\d{4}\b"
_CUDA_PROBE = r"\bNCCL\b|ProcessGroupNCCL|\bcuda:\d|CUDA_VISIBLE_DEVICES|torch\.cuda\.OutOfMemoryError"

#: At most this many distinct candidate rows are read in Python (a job dumping its environment
#: every step must not make extraction slow); each file's earliest rows win, launch facts come first.
MAX_CANDIDATES = 20000
#: Characters of a candidate line read in Python (launch commands are long, never this long).
MAX_LINE_CHARS = 32768


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Source:
    """The log line a fact was read from."""

    file: str
    line: int
    rank: int | None = None
    node: str | None = None
    text: str = ""
    ts: datetime | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Facts:
    """Flat, typed launch-configuration facts (``"section.name" -> value``) and their sources."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, Source] = field(default_factory=dict)
    #: further lines behind a fact that compares several (each node's command, each node's echo)
    more_sources: dict[str, list[Source]] = field(default_factory=dict)

    def all_sources(self, key: str) -> list[Source]:
        """Every line behind ``key``: its source, then the further ones."""
        first = [self.sources[key]] if key in self.sources else []
        return first + [s for s in self.more_sources.get(key, []) if s not in first]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def keys_like(self, pattern: str) -> list[str]:
        """Keys matching ``pattern``; ``*`` and ``?`` are globs (``env.*_SOCKET_IFNAME``)."""
        if not any(c in pattern for c in "*?["):
            return [pattern] if pattern in self.values else []
        return sorted(k for k in self.values if fnmatchcase(k, pattern))

    def put(self, key: str, value: Any, source: Source | None, *, override: bool = False) -> None:
        """Record a fact; the first value wins unless ``override`` (an echo of the effective value)."""
        if value is None or value == "" or (key in self.values and not override):
            return
        self.values[key] = value
        if source is not None:
            self.sources[key] = source

    def section(self, name: str) -> dict[str, Any]:
        prefix = name + "."
        return {k[len(prefix):]: v for k, v in self.values.items() if k.startswith(prefix)}

    def to_dict(self) -> dict[str, Any]:
        """The JSON record (``job.config``): sections, then ``sources`` as ``file:line`` per fact."""
        out: dict[str, Any] = {}
        for key in sorted(self.values, key=_key_order):
            section, _, name = key.partition(".")
            out.setdefault(section, {})[name] = _plain(self.values[key])
        out["sources"] = {k: s.where for k, s in sorted(self.sources.items())}
        return out

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Facts:
        """Facts back from a JSON record (sources keep only their ``file:line``)."""
        facts = cls()
        for section, names in record.items():
            if section == "sources" or not isinstance(names, dict):
                continue
            for name, value in names.items():
                facts.values[f"{section}.{name}"] = value
        for key, where in (record.get("sources") or {}).items():
            file, _, line = str(where).rpartition(":")
            facts.sources[key] = Source(file, int(line) if line.isdigit() else 0)
        return facts


def _key_order(key: str) -> tuple[int, str]:
    section = key.partition(".")[0]
    return (SECTIONS.index(section) if section in SECTIONS else len(SECTIONS), key)


def _plain(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value, key=str) if isinstance(value, (set, frozenset)) else list(value)
    return value


@dataclass
class Command:
    """One launch command as found in a log or script, parsed."""

    launcher: str
    launcher_args: dict[str, list[Any]]
    script: str | None
    script_args: dict[str, list[Any]]
    positional: list[str]
    text: str
    source: Source
    wrapper: str | None = None

    def last(self, args: dict[str, list[Any]], name: str) -> Any:
        values = args.get(name)
        return values[-1] if values else None


# --------------------------------------------------------------------------- entry points


def extract_config(frame: pl.DataFrame) -> dict[str, Any]:
    """The job's launch configuration as a JSON-safe record (``report.job.config``)."""
    return collect_facts(frame).to_dict()


_LAST: tuple[weakref.ref[pl.DataFrame], Facts] | None = None


def collect_facts(frame: pl.DataFrame) -> Facts:
    """Read every launch-configuration fact a timeline holds (see the module docstring).

    One analysis asks twice (the [config] rules, then ``report.job.config``); the facts of the
    last frame are remembered for as long as that frame lives.
    """
    global _LAST
    if _LAST is not None and _LAST[0]() is frame:
        return _LAST[1]
    facts = _collect_facts(frame)
    _LAST = (weakref.ref(frame), facts)
    return facts


def _collect_facts(frame: pl.DataFrame) -> Facts:
    facts = Facts()
    if frame.height == 0:
        return facts
    rows = _candidate_rows(frame)
    commands, consumed, variables = _commands(rows)
    _command_facts(facts, commands)
    env_by_node: dict[str, dict[str, tuple[str, Source]]] = {}
    section: dict[str, str] = {}
    pending_split: dict[str, tuple[str, Source]] = {}
    finished: list[Source] = []
    watchdog: list[Source] = []
    samples: dict[str, dict[str, tuple[Any, Source]]] = {}
    version_hints: dict[str, tuple[str, Source]] = {}
    for row in rows:
        src = _source(row)
        text = row["message"] or ""
        # a command line's own NCCL_X=... prefix is environment; its --options are not echoes
        _env_facts(env_by_node, text, src, variables.get(src.file, {}))
        if id(row) in consumed:
            continue
        _version_facts(facts, text, src, version_hints)
        _echo_facts(facts, text, src, section, pending_split, samples)
        _network_facts(facts, text, src)
        for key, pattern in _CODE:
            if pattern.search(text):
                facts.put(key, True, src)
        if _WATCHDOG.search(text):
            watchdog.append(src)
        elif _FINISHED.search(text):
            finished.append(src)
    _merge_env(facts, env_by_node)
    _samples_by_node(facts, samples)
    for name, (version, src) in version_hints.items():
        facts.put(f"versions.{name}", version, src)
    _signal_facts(facts, watchdog, finished)
    _frame_facts(facts, frame)
    _derive(facts)
    return facts


# --------------------------------------------------------------------------- candidate rows


def _candidate_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """The rows worth reading in Python, in file and line order, each distinct line once per node."""
    cols = ["file", "line", "node", "rank", "ts", "message"]
    present = [c for c in cols if c in frame.columns]
    cont = pl.col("message").str.contains(r"\\\s*$|^\s+--?[A-Za-z]")
    picked = (
        frame.select(*present, pl.col("kind") if "kind" in frame.columns else pl.lit(None).alias("kind"))
        .filter(
            pl.col("message").str.contains(KEEP_PATTERN).fill_null(False)
            # progress rows repeat every step; only the end-of-training ones carry a fact
            & (
                (pl.col("kind").fill_null("info") != "progress")
                | pl.col("message").str.contains(TRAINING_FINISHED).fill_null(False)
            )
        )
        # per-rank copies of one echo (every rank prints its arguments) are read once per node;
        # continuation lines stay, they belong to the command above them in their own file
        .with_columns(
            pl.when(cont.fill_null(False))
            .then(pl.format("{}:{}", pl.col("file"), pl.col("line")))
            .otherwise(pl.col("message"))
            .alias("_key")
        )
        .unique(subset=["node", "_key"], keep="first", maintain_order=True)
        # every file's first candidates before any file's later ones: one chatty file cannot
        # use up the budget of the others
        .sort(pl.int_range(pl.len()).over("file"), maintain_order=True)
        .head(MAX_CANDIDATES)
        .sort(["file", "line"])
    )
    # a megabyte line (a tensor dump that happens to say "deepspeed") is read by its head only
    picked = picked.with_columns(pl.col("message").str.slice(0, MAX_LINE_CHARS))
    return list(picked.drop("_key", "kind").iter_rows(named=True))


def _source(row: dict[str, Any]) -> Source:
    return Source(
        file=row.get("file") or "",
        line=int(row.get("line") or 0),
        rank=row.get("rank"),
        node=row.get("node"),
        text=row.get("message") or "",
        ts=row.get("ts"),
    )


# --------------------------------------------------------------------------- launch commands


def _commands(
    rows: list[dict[str, Any]],
) -> tuple[list[Command], set[int], dict[str, dict[str, str]]]:
    """Launch commands (continuation lines joined, ``$VAR`` resolved from the file's assignments)."""
    commands: list[Command] = []
    consumed: set[int] = set()
    variables: dict[str, dict[str, str]] = {}
    seen: set[tuple[str | None, str]] = set()
    i = 0
    while i < len(rows):
        row = rows[i]
        text = row["message"] or ""
        file = row["file"] or ""
        assign = _ASSIGN.match(text)
        if assign:
            variables.setdefault(file, {})[assign.group("k")] = _unquote(assign.group("v"))
        run_sh = _RUN_SH.search(text)
        start = _LAUNCHER.search(run_sh.group("cmd") if run_sh else text)
        if not start:
            i += 1
            continue
        body = (run_sh.group("cmd") if run_sh else text)[start.start():]
        joined = [row]
        j = i
        # a trailing backslash continues the command on the file's next line
        while body.rstrip().endswith("\\") and j + 1 < len(rows):
            nxt = rows[j + 1]
            if nxt["file"] != row["file"] or nxt["line"] != rows[j]["line"] + 1:
                break
            body = body.rstrip()[:-1] + " " + (nxt["message"] or "").strip()
            joined.append(nxt)
            j += 1
        body = _substitute(body, variables.get(file, {}))
        command = parse_command(body, _source(row))
        key = (row.get("node"), " ".join(body.split()))
        if command is not None and key not in seen:
            seen.add(key)
            commands.append(command)
        if command is not None:
            consumed.update(id(r) for r in joined)
        i = j + 1
    return commands, consumed, variables


def _substitute(text: str, variables: dict[str, str]) -> str:
    def value(m: regex.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return variables.get(name, m.group(0))

    return regex.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _tokens(text: str) -> list[str]:
    """Shell words up to the first pipe, redirection or command separator."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = ""
        words = list(lexer)
    except ValueError:  # unbalanced quotes: a log line cut short; whitespace is the next best
        words = text.split()
    out: list[str] = []
    for word in words:
        if word and set(word) <= set(";&|<>"):
            if word[0] in "<>" and out and out[-1].isdigit():
                out.pop()  # the "2" of "2>&1"
            break
        out.append(word)
    return out


def _norm(name: str) -> str:
    """``--training.train_iters`` -> ``train_iters``; ``--nproc-per-node`` -> ``nproc_per_node``."""
    return name.lstrip("-").rsplit(".", 1)[-1].replace("-", "_")


def _options(words: list[str], i: int, value_opts: set[str] | None = None) -> tuple[dict[str, list[Any]], int]:
    """Read ``--opt value`` / ``--opt=value`` / ``--flag`` from ``words[i:]`` until a bare word."""
    opts: dict[str, list[Any]] = {}
    while i < len(words) and words[i].startswith("-") and words[i] not in ("-", "--"):
        word = words[i]
        name, eq, value = word.partition("=")
        key = name.lstrip("-").replace("-", "_")
        if eq:
            opts.setdefault(key, []).append(value)
            i += 1
            continue
        nxt = words[i + 1] if i + 1 < len(words) else None
        takes_value = key not in _FLAGS and nxt is not None and not nxt.startswith("-")
        if takes_value and value_opts is None and _looks_like_script(nxt):
            takes_value = False  # an unknown option right before the script is a flag
        if value_opts is not None:
            takes_value = key in value_opts and nxt is not None
        if takes_value:
            opts.setdefault(key, []).append(nxt)
            i += 2
        else:
            opts.setdefault(key, []).append(True)
            i += 1
    if i < len(words) and words[i] == "--":
        i += 1
    return opts, i


def _looks_like_script(word: str) -> bool:
    return bool(regex.search(r"\.(?:py|sh)$", word)) or word in ("python", "python3")


def parse_command(text: str, source: Source) -> Command | None:
    """Parse one launch command line (launcher, its options, the script and its arguments)."""
    words = _tokens(text)
    if not words:
        return None
    wrapper = None
    i = 0
    launcher = words[0].rsplit("/", 1)[-1]
    if launcher.startswith("python"):
        # python [-u] -m torch.distributed.run | deepspeed.launcher.launch
        i = words.index("-m") + 2 if "-m" in words else 1
        launcher = "deepspeed" if "deepspeed" in words[i - 1] else "torchrun"
    elif launcher == "accelerate":
        launcher, i = "accelerate", 2
    else:
        i = 1
    if launcher in ("srun", "mpirun"):
        wrapper_opts, i = _srun_options(words, i) if launcher == "srun" else _options(words, i)
        inner = " ".join(words[i:])
        nested = _LAUNCHER.search(inner)
        if nested and nested.start() == 0:
            command = parse_command(inner, source)
            if command is not None:
                command.wrapper = launcher
                for key, values in wrapper_opts.items():
                    command.launcher_args.setdefault(f"{launcher}_{key}", values)
                return command
        launcher_args = {f"{launcher}_{k}" if k in ("n", "N", "c") else k: v for k, v in wrapper_opts.items()}
    else:
        launcher_args, i = _options(words, i)
    script = None
    if i < len(words):
        script = words[i]
        i += 1
        if script in ("python", "python3", "python3.10", "python3.11", "python3.12") or script.endswith("/python"):
            # deepspeed/accelerate --no_python style: the interpreter, then the script
            if i < len(words) and words[i] == "-m" and i + 1 < len(words):
                script, i = words[i + 1], i + 2
            elif i < len(words):
                script, i = words[i], i + 1
        if launcher_args.get("module") or launcher_args.get("m"):
            script = f"-m {script}"
    script_args, positional = _script_args(words[i:])
    return Command(launcher, launcher_args, script, script_args, positional, " ".join(text.split()), source, wrapper)


def _srun_options(words: list[str], i: int) -> tuple[dict[str, list[Any]], int]:
    opts: dict[str, list[Any]] = {}
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        name, eq, value = word.partition("=")
        key = name.lstrip("-").replace("-", "_")
        if eq:
            opts.setdefault(key, []).append(value)
            i += 1
        elif not word.startswith("--") and len(name) > 2 and name[1] in _SRUN_VALUE:
            opts.setdefault(name[1], []).append(name[2:])  # -N2
            i += 1
        elif (key in _SRUN_VALUE or word.startswith("--")) and key not in _FLAGS and i + 1 < len(words) \
                and not words[i + 1].startswith("-") and not _LAUNCHER.match(words[i + 1]):
            opts.setdefault(key, []).append(words[i + 1])
            i += 2
        else:
            opts.setdefault(key, []).append(True)
            i += 1
    return opts, i


def _script_args(words: list[str]) -> tuple[dict[str, list[Any]], list[str]]:
    """The training script's ``--name value`` arguments in order (a repeated name keeps every value)."""
    args: dict[str, list[Any]] = {}
    positional: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and len(word) > 1 and not _is_number(word):
            name, eq, value = word.partition("=")
            key = name.lstrip("-")
            if eq:
                args.setdefault(key, []).append(value)
                i += 1
                continue
            nxt = words[i + 1] if i + 1 < len(words) else None
            if nxt is not None and (not nxt.startswith("-") or _is_number(nxt)):
                args.setdefault(key, []).append(nxt)
                i += 2
            else:
                args.setdefault(key, []).append(True)
                i += 1
        else:
            positional.append(word)
            i += 1
    return args, positional


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _command_facts(facts: Facts, commands: list[Command]) -> None:
    if not commands:
        return

    def node_rank(c: Command) -> tuple[int, str, int]:
        nr = _typed(c.last(c.launcher_args, "node_rank") or c.last(c.launcher_args, "machine_rank"))
        return (nr if isinstance(nr, int) else 1 << 30, c.source.file, c.source.line)

    ordered = sorted(commands, key=node_rank)
    main = ordered[0]
    src = main.source
    facts.put("launcher.name", main.launcher, src)
    facts.put("launcher.command", main.text, src)
    facts.put("launcher.wrapper", main.wrapper, src)
    for key, values in main.launcher_args.items():
        name = _norm(key)
        target = ALIASES.get(name, f"launcher.{name}")
        if not target.startswith(("topology.", "launcher.")):
            target = f"launcher.{name}"
        value = _typed(values[-1])
        if name == "nnodes" and isinstance(value, str) and ":" in value:
            facts.put("launcher.nnodes_range", value, src)
            value = _typed(value.rsplit(":", 1)[-1])
        facts.put(target, value, src)
    if main.launcher == "accelerate" and "num_processes" in main.launcher_args:
        facts.put("topology.world_size", _typed(main.last(main.launcher_args, "num_processes")), src)
    if main.launcher_args.get("standalone") or (
        main.launcher == "torchrun" and not any(_norm(k) == "nnodes" for k in main.launcher_args)
    ):
        facts.put("topology.nnodes", 1, src)  # torchrun's default is one node
    facts.put("script.path", main.script, src)
    facts.put("script.positional", list(main.positional) or None, src)
    for key, values in main.script_args.items():
        facts.put(f"script_args.{key.lstrip('-')}", _typed(values[-1]), src)
        target = ALIASES.get(_norm(key))
        if target:
            facts.put(target, _typed(values[-1]), src)
    _deepspeed_shorthand(facts, main, src)
    dups = _duplicates(main.script_args)
    facts.put("script.duplicates", dups or None, src)
    facts.put("launcher.duplicates", _duplicates(main.launcher_args) or None, src)
    ranks = sorted({nr for c in ordered if isinstance(nr := node_rank(c)[0], int) and nr < 1 << 30})
    facts.put("topology.node_ranks", ranks or None, src)
    facts.put("launcher.commands", len(ordered), src)
    mismatched = _mismatched(ordered)
    facts.put("launcher.mismatched_args", mismatched or None, src)
    if mismatched:
        facts.more_sources["launcher.mismatched_args"] = [c.source for c in ordered[1:]]


def _deepspeed_shorthand(facts: Facts, command: Command, src: Source) -> None:
    """``--deepspeed zero3_offload`` / ``ds_z3_offload.json``: ZeRO stage and offload from the name."""
    ds = command.last(command.script_args, "deepspeed") or command.last(command.launcher_args, "deepspeed_config_file")
    if isinstance(ds, str):
        stage = regex.search(r"(?i)(?:zero|z|stage)_?(\d)", ds)
        if stage:
            facts.put("trainer.zero_stage", int(stage.group(1)), src)
        if "offload" in ds.lower():
            facts.put("trainer.offload", "cpu", src)
    zero = command.last(command.launcher_args, "zero_stage")
    if zero is not None:
        facts.put("trainer.zero_stage", _typed(zero), src)


def _duplicates(args: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Arguments given more than once with different values (argparse silently keeps the last)."""
    out = {}
    for key, values in args.items():
        if _norm(key) in _REPEATABLE:
            continue
        if len(values) > 1 and len({str(v) for v in values}) > 1:
            out[key.lstrip("-")] = [_typed(v) for v in values]
    return out


def _mismatched(commands: list[Command]) -> dict[str, dict[str, Any]]:
    """Launch arguments (not the node rank) that differ between the nodes' commands."""
    if len(commands) < 2:
        return {}
    out: dict[str, dict[str, Any]] = {}
    skip = {"node_rank", "machine_rank", "local_addr"}
    labels = [c.source.node or c.source.file for c in commands]
    for kind in ("launcher_args", "script_args"):
        names = sorted({k for c in commands for k in getattr(c, kind)})
        for name in names:
            if _norm(name) in skip:
                continue
            values = [c.last(getattr(c, kind), name) for c in commands]
            if len({str(v) for v in values}) > 1:
                out[name.lstrip("-")] = {label: _typed(v) for label, v in zip(labels, values, strict=True)}
    paths = [c.script for c in commands]
    if len(set(paths)) > 1:
        out["script"] = dict(zip(labels, paths, strict=True))
    return out


# --------------------------------------------------------------------------- per-line facts


def _env_facts(
    env_by_node: dict[str, dict[str, tuple[str, Source]]], text: str, src: Source, variables: dict[str, str]
) -> None:
    node = src.node or ""
    found = env_by_node.setdefault(node, {})
    for m in _ENV.finditer(text):
        value = _clean_value(_unquote(m.group("v")))
        if value.startswith("$"):
            value = variables.get(value.strip("${}"), value)
        if value and m.group("k") not in found:
            found[m.group("k")] = (value, src)
    omp = _OMP_DEFAULT.search(text)
    if omp and "OMP_NUM_THREADS" not in found:
        found["OMP_NUM_THREADS"] = (omp.group(1), src)


def _clean_value(value: str) -> str:
    return value.rstrip(",.;:)]}") if not value.endswith("...") else value


def _merge_env(facts: Facts, env_by_node: dict[str, dict[str, tuple[str, Source]]]) -> None:
    nodes = sorted(n for n, env in env_by_node.items() if env)
    for node in nodes:
        for var, (value, src) in sorted(env_by_node[node].items()):
            facts.put(f"env.{var}", _typed(value), src)
    named = [n for n in nodes if n]
    if len(named) < 2:
        return
    differing = {
        var
        for var in {v for n in named for v in env_by_node[n]}
        if len({env_by_node[n][var][0] for n in named if var in env_by_node[n]}) > 1
    }
    for node in named:
        values = {var: _typed(env_by_node[node][var][0]) for var in sorted(differing) if var in env_by_node[node]}
        if values:
            first = min((env_by_node[node][v][1] for v in values), key=lambda s: (s.file, s.line))
            facts.put(f"env_by_node.{node}", values, first)


def _samples_by_node(facts: Facts, samples: dict[str, dict[str, tuple[Any, Source]]]) -> None:
    """``dataset.eval_samples_by_node`` when nodes report different sizes (a split made per node)."""
    for key, by_node in samples.items():
        named = {n: v for n, v in by_node.items() if n}
        if len(named) > 1 and len({str(v) for v, _ in named.values()}) > 1:
            ordered = [named[n][1] for n in sorted(named)]
            facts.put(f"{key}_by_node", {n: named[n][0] for n in sorted(named)}, ordered[0])
            facts.more_sources[f"{key}_by_node"] = ordered[1:]


def _version_facts(facts: Facts, text: str, src: Source, hints: dict[str, tuple[str, Source]]) -> None:
    if not regex.search(r"\d\.\d", text):
        return
    for m in _PATH_VERSION.finditer(text):  # "cann8.2.rc1-torch2.4-testenv": used only when nothing better
        hints.setdefault(m.group("name"), (m.group("ver"), src))
    for name, pattern in _VERSIONS:
        m = pattern.search(text)
        if m:
            value = next((g for g in m.groups() if g), None)
            facts.put(f"versions.{name}", value, src)
    if "versions.PTA" in facts.values and "versions.torch_npu" not in facts.values:
        facts.put("versions.torch_npu", facts.values["versions.PTA"], facts.sources.get("versions.PTA"))


def _echo_facts(
    facts: Facts,
    text: str,
    src: Source,
    section: dict[str, str],
    pending: dict[str, tuple[str, Source]],
    samples: dict[str, dict[str, tuple[Any, Source]]],
) -> None:
    """Trainer, DeepSpeed and elastic-agent echoes of the effective settings (they override args).

    Dataset sizes are also kept per node in ``samples``: a split made per node can differ.
    """
    file = src.file

    def put_samples(key: str, value: Any) -> None:
        facts.put(key, value, src, override=True)
        samples.setdefault(key, {})[src.node or ""] = (value, src)

    start = _SECTION_START.search(text)
    if start:
        section[file] = "eval" if start.group("what") != "training" else "train"
    for pattern, key in _HF_BLOCK:
        m = pattern.search(text)
        if not m:
            continue
        value = _typed(m.group(1).replace(",", ""))
        if key is None:
            # the trainer's view (rank 0's dataloader); per-node sizes come from the dataset echo only
            key = "dataset.eval_samples" if section.get(file) == "eval" else "dataset.train_samples"
            facts.put(key, value, src, override=True)
            continue
        if key == "trainer.eval_batch_size" and section.get(file) != "eval":
            continue
        facts.put(key, value, src, override=True)
    ds = _DS_PRINT.search(text)
    if ds:
        name, value = ds.group("k"), ds.group("v").strip()
        if name == "zero_config":
            _zero_config(facts, value, src)
        elif name in ALIASES:
            facts.put(ALIASES[name], _typed(value), src, override=True)
        return
    if "zero_optimization" in text or "offload_" in text:
        _zero_config(facts, text, src)
    split = _DATASET_ROWS.search(text)
    if split:
        kind = "train" if split.group("split") == "train" else "eval"
        rows = _NUM_ROWS.search(split.group("rest"))
        if rows:
            put_samples(f"dataset.{kind}_samples", _typed(rows.group(1).replace(",", "")))
        else:
            pending[file] = (kind, src)
    elif file in pending:
        rows = _NUM_ROWS.search(text)
        if rows:
            kind, _ = pending.pop(file)
            put_samples(f"dataset.{kind}_samples", _typed(rows.group(1).replace(",", "")))
    tokens = _TOKENS.search(text)
    if tokens and _TOKENS_CONTEXT.search(text) and "batch" not in text.lower():
        facts.put("dataset.total_tokens", int(tokens.group(1).replace(",", "")), src)
        lines = _LINES.search(text)
        if lines:
            facts.put("dataset.lines", int(lines.group(1).replace(",", "")), src)
    world = _WORLD_ECHO.search(text)
    if world:
        facts.put("topology.world_size", int(world.group(1)), src, override=True)
    backend = _BACKEND_ECHO.search(text)
    if backend:
        facts.put("topology.backend", next(g for g in backend.groups() if g).lower(), src)
    timeout = _PG_TIMEOUT.search(text)
    if timeout:
        ms = int(next(g for g in timeout.groups() if g))
        facts.put("trainer.pg_timeout_s", ms / 1000, src)
    for m in _KV.finditer(text):
        name = _norm(m.group("k"))
        target = ALIASES.get(name)
        if target is None or target == "topology.world_size":
            continue
        value = _typed(_clean_value(_unquote(m.group("v"))))
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            continue  # HF prints max_steps=-1, eval_steps=-1 for "not set"
        if target == "trainer.deepspeed" and isinstance(value, str) and value.startswith("{"):
            continue  # a config dict: its stage and offload are read by _zero_config
        facts.put(target, value, src, override=True)


def _zero_config(facts: Facts, text: str, src: Source) -> None:
    stage = _DS_STAGE.search(text)
    if stage:
        facts.put("trainer.zero_stage", int(stage.group(1)), src, override=True)
    offload = [d for d in _DS_OFFLOAD.findall(text) if d.lower() not in ("none",)]
    if offload:
        facts.put("trainer.offload", offload[0].lower(), src, override=True)


def _network_facts(facts: Facts, text: str, src: Source) -> None:
    names: list[str] = []
    m = _IF_NCCL.search(text)
    if m:
        names += [i.group("name") for i in _IF_ITEM.finditer(m.group("list"))]
    for pattern in (_IF_BOOT, _IF_IPADDR, _IF_IFCONFIG):
        found = pattern.search(text)
        if found:
            names.append(found.group("name"))
    ib = _IF_IB.search(text)
    if ib:
        devices = [d.group("name") for d in _IB_ITEM.finditer(ib.group("list"))]
        if devices:
            old = facts.values.get("network.ib_devices", [])
            facts.values["network.ib_devices"] = sorted(set(old) | set(devices))
            facts.sources.setdefault("network.ib_devices", src)
        oob = _IB_OOB.search(ib.group("list"))
        if oob:
            names.append(oob.group("name"))
    names = [n for n in names if n != "lo" and not n.startswith("lo:")]
    if names:
        old = facts.values.get("network.interfaces", [])
        facts.values["network.interfaces"] = sorted(set(old) | set(names))
        facts.sources.setdefault("network.interfaces", src)


def _signal_facts(facts: Facts, watchdog: list[Source], finished: list[Source]) -> None:
    if watchdog:
        facts.put("signals.hccl_watchdog_exception", len(watchdog), watchdog[0])
    if finished:
        facts.put("signals.training_finished", True, finished[0])
    if not watchdog or not finished:
        return
    # a watchdog exception after the training loop ended is a teardown problem, not a training one
    first_done = min(finished, key=lambda s: (s.ts is None, s.ts or datetime.min, s.file, s.line))
    for w in watchdog:
        after = (
            w.ts > first_done.ts
            if w.ts is not None and first_done.ts is not None
            else (w.file == first_done.file and w.line > first_done.line)
        )
        if after:
            facts.put("signals.watchdog_after_finish", True, w)
            return


def _frame_facts(facts: Facts, frame: pl.DataFrame) -> None:
    """Facts from the whole timeline, vectorized: hosts, ranks, node ranks, platform."""
    msg = pl.col("message").fill_null("")
    stats = frame.select(
        pl.col("node").drop_nulls().unique().sort().implode().alias("hosts"),
        pl.col("rank").drop_nulls().n_unique().alias("ranks"),
        pl.col("node_rank").drop_nulls().unique().sort().implode().alias("node_ranks"),
        msg.str.contains(_ASCEND_PROBE).arg_max().alias("ascend_at"),
        msg.str.contains(_ASCEND_PROBE).any().alias("ascend"),
        (pl.col("family") == "ascend_plog").any().alias("plog"),
        msg.str.contains(_CUDA_PROBE).arg_max().alias("cuda_at"),
        msg.str.contains(_CUDA_PROBE).any().alias("cuda"),
    ).row(0, named=True)
    hosts = [h for h in stats["hosts"] or [] if h]
    if hosts:
        facts.put("topology.hosts", hosts, None)
        facts.put("topology.nnodes_seen", len(hosts), None)
    if stats["ranks"]:
        facts.put("topology.ranks_seen", int(stats["ranks"]), None)
    if stats["node_ranks"] and "topology.node_ranks" not in facts.values:
        facts.put("topology.node_ranks", [int(n) for n in stats["node_ranks"]], None)
    ascend = stats["ascend"] or stats["plog"] or any(
        k in facts.values for k in ("versions.torch_npu", "versions.CANN", "versions.PTA")
    ) or facts.get("topology.backend") == "hccl"
    if ascend:
        at = stats["ascend_at"] if stats["ascend"] else None
        facts.put("platform.ascend", True, _source(frame.row(at, named=True)) if at is not None else None)
    if stats["cuda"]:
        facts.put("platform.cuda", True, _source(frame.row(stats["cuda_at"], named=True)))


# --------------------------------------------------------------------------- derived facts


def _derive(facts: Facts) -> None:
    """Numbers the checks compare: world size, tokens per step, the steps the data supports."""
    v = facts.values
    nnodes, nproc = v.get("topology.nnodes"), v.get("topology.nproc_per_node")
    if "topology.nnodes" not in v and isinstance(v.get("topology.nnodes_seen"), int):
        facts.put("topology.nnodes", v["topology.nnodes_seen"], facts.sources.get("topology.nnodes_seen"))
        nnodes = v["topology.nnodes"]
    if "topology.world_size" not in v:
        if isinstance(nnodes, int) and isinstance(nproc, int):
            facts.put("topology.world_size", nnodes * nproc, facts.sources.get("topology.nproc_per_node"))
        elif isinstance(v.get("topology.ranks_seen"), int) and v["topology.ranks_seen"] > 1:
            facts.put("topology.world_size", v["topology.ranks_seen"], None)
    world = v.get("topology.world_size")
    if "topology.nproc_per_node" not in v and isinstance(world, int) and isinstance(nnodes, int) and nnodes:
        facts.put("topology.nproc_per_node", world // nnodes, facts.sources.get("topology.world_size"))
    seq = _num(v.get("trainer.seq_len"))
    gbs = _num(v.get("trainer.global_batch_size"))
    micro, accum = _num(v.get("trainer.micro_batch_size")), _num(v.get("trainer.grad_accum")) or 1
    if gbs is None and micro is not None and isinstance(world, int):
        gbs = micro * accum * world
    if seq and gbs:
        tokens_src = facts.sources.get("trainer.seq_len")
        facts.put("derived.tokens_per_step", int(gbs * seq), tokens_src)
        total = _num(v.get("dataset.total_tokens"))
        if total:
            facts.put("derived.supported_steps", round(total / (gbs * seq), 1), facts.sources.get("dataset.total_tokens"))
    eval_bs = _num(v.get("trainer.eval_batch_size"))
    if eval_bs and isinstance(world, int):
        facts.put("derived.eval_global_batch", int(eval_bs * world), facts.sources.get("trainer.eval_batch_size"))
    timeouts = {
        key: t
        for key in ("env.HCCL_EXEC_TIMEOUT", "trainer.ddp_timeout_s", "trainer.pg_timeout_s")
        if (t := _num(v.get(key))) is not None and t > 0
    }
    if timeouts:
        key = min(timeouts, key=lambda k: timeouts[k])
        facts.put("derived.collective_timeout_s", timeouts[key], facts.sources.get(key))


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return None
    return None


def _typed(value: Any) -> Any:
    """``"8"`` -> 8, ``"1e-5"`` -> 1e-05, ``"True"`` -> True, ``"none"`` -> None; other text as is."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null", ""):
        return None
    if regex.fullmatch(r"[-+]?\d+", text) and len(text.lstrip("+-")) < 19:
        return int(text)
    if regex.fullmatch(r"[-+]?(?:\d+\.\d*|\.\d+|\d+(?:\.\d*)?[eE][-+]?\d+)", text):
        return float(text)
    return text


# --------------------------------------------------------------------------- helpers for checks


def is_ipv6(value: Any) -> bool:
    """True for an IPv6 literal, bracketed or not (``2605:340::d4d0``, ``[::1]``, ``fe80::1%eth0``)."""
    if not isinstance(value, str) or value.count(":") < 2 or not _IPV6.match(value):
        return False
    try:
        ipaddress.IPv6Address(value.strip("[]").partition("%")[0])
    except ValueError:  # "10:15:31" has the shape, not the grammar
        return False
    return True


def is_unbracketed_ipv6(value: Any) -> bool:
    """True for an IPv6 literal written without ``[...]`` (ambiguous next to ``:port``)."""
    return is_ipv6(value) and not str(value).startswith("[")


def version_tuple(value: Any) -> tuple[int, ...] | None:
    """``"2.4.0.post4"`` -> (2, 4, 0); None when the text does not start with a number."""
    m = regex.match(r"v?(\d+(?:\.\d+)*)", str(value or "").strip())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def flat_items(facts: Facts) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` in record order (sections as :data:`SECTIONS`)."""
    for key in sorted(facts.values, key=_key_order):
        yield key, facts.values[key]



__all__ = [
    "ALIASES",
    "KEEP_PATTERN",
    "SECTIONS",
    "Command",
    "Facts",
    "Source",
    "collect_facts",
    "extract_config",
    "flat_items",
    "is_ipv6",
    "is_unbracketed_ipv6",
    "parse_command",
    "version_tuple",
]
