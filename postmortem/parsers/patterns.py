"""Line patterns shared by the text parsers (Rust-regex syntax: they run inside polars).

Each pattern cites the format section of ``shared/reference/log-formats.md`` it follows.
"""

from __future__ import annotations

import re

# §0, §7.1-7.3: launcher prefixes, stripped from the outside in.
OUTER_PREFIX = (
    r"^(?P<pfx>(?:\x1b\[[0-9;]*m)*"
    r"(?:(?P<k8s_ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) )?"
    r"(?:(?P<srun>\d{1,5}): )?)"
)
RANK_PREFIX = (
    r"^(?P<pfx>(?:\[\d+,(?P<mpi_rank>\d+)\]<std(?:out|err)>:)?"
    r"(?:\[(?P<role1>[A-Za-z_][A-Za-z_-]*)?(?P<n1>\d+)\]:)?"
    r"(?:\[(?P<role2>[A-Za-z_][A-Za-z_-]*)?(?P<n2>\d+)\]:)?)"
)

# §8: timestamps. Dated shapes: ISO-like (asctime, DeepSpeed, Megatron, fairseq, hydra, NCCL >= 2.26,
# kubectl, ChildFailedError time), CANN / torch_npu (2026-05-27-19:52:41[.499.235]), HF examples
# (05/11/2024 10:00:00). Year-less c10/glog headers ([E1206 18:44:12.715298746 ..., W0801 13:23:17.366000).
# (no capture group: the whole match is the stamp, and a match without captures is cheaper)
DATED_TIMESTAMP = (
    r"\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?|\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d(?:\.\d{3}\.\d{3})?"
    r"|\d\d/\d\d/\d{4} \d\d:\d\d:\d\d"
)
GLOG_TIMESTAMP = r"^\[?[IWEFCV](\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)?)"

# Levels: a c10/glog header's letter at the start of the line, else the first level word
# between delimiters (the word is found again inside that match: no capture groups, see METRICS).
GLOG_LEVEL = r"^\[?[IWEFC]\d{3,4} \d\d:"
LEVEL_WORDS = r"DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|Error|Warning"
LEVEL_WORD = rf"(?:^|[\[\s|:(])(?:{LEVEL_WORDS})(?:[\]\s|:,)]|$)"

# §6: training progress, one pattern per format, in order of trust.
PROGRESS_FORMATS: tuple[str, ...] = (
    r"[\"']global_step/max_steps[\"']: [\"'](?P<step>\d+)/(?P<total>\d+)[\"']",  # ms-swift (log lines and logging.jsonl)
    r"\biteration\s+(?P<step>\d+)/\s*(?P<total>\d+) \|",  # Megatron
    r"\bnum_updates[=:] ?(?P<step>\d+)(?P<total>)",  # fairseq
    r"\bglobal[_ ]step[\s:=]+(?P<step>\d+)(?:\s*/\s*(?P<total>\d+))?",
    # "tokens per step=131,072" is a rate, not a step: the per/thousands groups veto the match
    r"(?P<per>per )?\b[Ss]tep(?:\s*[:=]\s*|\s+)\[?(?P<step>\d+)(?P<thousands>,\d{3})?\]?(?:\s*/\s*(?P<total>\d+))?",
    r"\b[Ii]ter(?:ation)?(?:\s*[:=]\s*|\s+)(?P<step>\d+)(?:\s*/\s*(?P<total>\d+))?",
)
TQDM = r"\|\s*(?P<step>\d+)/(?P<total>\d+) \[[\d:]+<"
# tqdm bars whose description says they are not training steps
NON_TRAIN_BAR = r"(?i)val|eval|test|predict|map|token|load|download|shard|generat|filter|pack|convert|infer|sampl"

# The training metrics: a name and its separator, then the value. The separator's characters
# cannot start a value, so the value is the longest suffix of the match that is one (see
# parsers.text._fields, which finds it that way: capture groups cost four times a plain match).
NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|NaN|inf|Inf|-inf)"
DECIMAL = r"[-+]?\d+\.?\d*(?:[eE][-+]?\d+)?"
METRICS: dict[str, tuple[str, str]] = {
    "loss": (r"(?:'loss'|\"loss\"|\blm loss|\bloss)['\"]?\s*[=:]\s*'?", NUMBER),
    "grad_norm": (r"(?:grad_norm|\bgnorm|grad norm)['\"]?\s*[=:]\s*'?", NUMBER),
    "lr": (r"(?:learning_rate|\blr|learning rate)['\"]?\s*[=:]\s*'?", DECIMAL),
}

# §1.2, §1.5, §1.6, §2, §4: error and lifecycle fields.
EXC_TYPE = r"^\s*(?:[A-Za-z_]\w*\.)*(?P<exc>[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Warning))(?::|$)"
ERROR_CODE = (
    r"\b(?P<err>ERR\d{5})\b|\((?P<ei>E[A-Z0-9]\d{4})\)|(?:^|\s)(?P<ei2>E[A-Z0-9]\d{4})(?::|\[PID)|\b(?P<nccl>nccl[A-Z]\w*Error)\b"
)
EXIT = (
    r"exitcode\s*:\s*(?P<cfe_code>-?\d+) \(pid: (?P<cfe_pid>\d+)\)(?:\s+\((?P<cfe_sig>SIG\w+)\))?"
    r"|failed \(exitcode: (?P<agent_code>-?\d+)\) local_rank: (?P<agent_lr>\d+) \(pid: (?P<agent_pid>\d+)\)"
    r"|Signal (?P<signum>\d+) \((?P<sig_name>SIG\w+)\) received by PID (?P<sig_pid>\d+)"
    r"|(?:Sending process|Closing process) (?P<term_pid>\d+) (?:closing signal|via signal) (?P<term_sig>SIG\w+)"
    r"|Received (?P<death>\d+) death signal"
)
# (a plog header is "[ERROR] HCCL(227,python3):2026-05-27-...": module, pid and process, then the time)
PID = (
    r"\(PID:(?P<npu_pid>\d+), Device:-?\d+, RankID:(?P<npu_rank>-?\d+)\)|\[PID: (?P<cann_pid>\d+)\]"
    r"|^[A-Z_0-9]+\((?P<plog_pid>\d+),[^)]*\):20|^\[[A-Z]+\] [A-Z_0-9]+\((?P<plog_pid2>\d+),[^)]*\):20"
)
NCCL_HEADER = r"^(?:\[[^\]]*\] )?(?P<host>[^\s:\[\]]+):(?P<pid>\d+):\d+ \[\d+\] NCCL "
CFE_FIELD = (
    r"^\s*(?:time\s*: (?P<cfe_time>\S+)|host\s*: (?P<cfe_host>\S+)|rank\s*: (?P<cfe_rank>\d+) \(local_rank: (?P<cfe_lr>\d+)\))"
)
WORK = (
    r"Work(?:NCCL|HCCL|Gloo)?\((?:SeqNum=(?P<seq>\d+),\s*)?OpType=(?P<op>\w+)(?:, TensorShape=\[[^\]]*\])?"
    r"(?:, NumelIn=(?P<numel>\d+), NumelOut=\d+)?, Timeout\(ms\)=(?P<tmo>\d+)\)(?: ran for (?P<ran>\d+) milliseconds)?"
)
PG_STATUS = (
    r"(?:work sequence id|detected by watchdog at work|Timeout at NCCL work): (?P<ps_seq>\d+),? (?:PG status: )?"
    r"last enqueued (?:NCCL )?work: (?P<enq>-?\d+), last completed (?:NCCL )?work: (?P<done>-?\d+)"
    r"|Last enqueued NCCL work: (?P<enq2>-?\d+), last completed NCCL work: (?P<done2>-?\d+)"
)
PG = r"\[PG ID (?P<pg_id>\d+) PG GUID [^\s(]+\((?P<pg_desc>[^)]*)\)|\[PG (?P<pg>\d+)(?: \((?P<pg_desc2>[^)]*)\))? Rank \d+\]"
# a script's own "[rank3] ..." at the start of its line (print-style; torchrun's prefix has a colon)
# and a process introducing itself: ms-swift "rank: 1, local_rank: 1, world_size: 4", "rank 3/4 local_rank 3"
LINE_RANK = (
    r"^\[[Rr]ank[ _]?(?P<rank>\d+)\][ :]|\brank: (?P<swift>\d+), local_rank: \d+, world_size: \d+"
    r"|\brank (?P<of>\d+)/\d+ local_rank \d+"
)
# a launcher's command line: which node this is and how many processes it starts
NODE_RANK_ARG = r"--node[_-]rank[= ](\d+)"
NPROC_ARG = r"--nproc[_-]per[_-]node[= ](\d+)"
NCCL_RANK = r"ncclCommInitRank\w* comm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+)"

# Literal hints: only rows containing one of these (or a CANN code) go through the field
# extractors above (the training metrics, which most progress lines carry, have their own).
FIELD_HINTS: tuple[str, ...] = (
    "Error", "Exception", "Interrupt", "Exit", "Warning", "ERR", "nccl",
    "NCCL", "exitcode", "Signal", "signal", "Work", "work", "PG ", "PID", "):20", "rank",
)
# ... and lines starting with one of these (LINE_RANK's "[Rank 3] "): anywhere in the line,
# "Rank" would let in every DeepSpeed log_dist line
FIELD_LINE_STARTS: tuple[str, ...] = ("[Rank",)

#: A line saying the training loop ended normally: HF Trainer's ``train_runtime`` metrics and
#: "Training completed", Lightning's "Stopping training due to", torchelastic's "worker group
#: successfully finished", "finished training", "job completed". The one definition of
#: "training finished" (job status, config facts and the timeline's kept rows all read it); it
#: is valid in both polars' Rust regex and Python's ``regex``. A checkpoint save is not in it:
#: trainers save every N steps, long before the end.
TRAINING_FINISHED = (
    r"(?i:training (?:completed|complete|finished|done)\b|successfully finished|\btrain_runtime\b|"
    r"stopping training due to|finished training|training ended|\bjob (?:completed|finished)\b)"
)
#: Literals one of which every :data:`TRAINING_FINISHED` match contains (a fast prefilter).
TRAINING_FINISHED_HINTS = ["training", "finished", "train_runtime", "job"]

# Kinds (§9 and the formats above). Order of precedence: error, warning, progress, lifecycle, collective.
ERROR_LINE = (
    r"Traceback \(most recent call last\)|^\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::|$)|Fatal Python error|"
    r"terminate called after throwing|ChildFailedError|exitcode\s*:\s*-?[1-9]|failed \(exitcode: -?[1-9]|"
    r"Watchdog caught collective operation timeout|Detected mismatch between collectives|\bERR\d{5}\b|"
    r"\(E[A-Z0-9]\d{4}\)|(?:^|\s)E[A-Z0-9]\d{4}(?::|\[PID)|out of memory|Killed process \d+|Segmentation fault|"
    r"runtime_assert|watchdog thread terminated with exception|operations have failed or timed out|"
    r"Signal \d+ \(SIG\w+\) received by PID|(?i:\bnan loss|loss is nan)"
)
LIFECYCLE_LINE = (
    r"(?i)closing signal|death signal|Worker group|rendezvous|init_process_group|Dataloader finished|end of epoch|"
    r"epoch \d+ (?:done|finished|complete)|StopIteration|Stopping training|training (?:finished|complete|completed|done)|"
    r"Saving (?:model )?checkpoint|checkpoint saved|destroy_process_group|destroy_distributed|Starting elastic|"
    r"Starting worker|Rendezvous complete|exited with|\bexiting\b|shutting down|Training completed|"
    r"train_runtime|\bINFO:torch.distributed"
)
COLLECTIVE_LINE = r"NCCL INFO|HCCL|ncclCommInit|\bWork(?:NCCL|HCCL|Gloo)\(|ProcessGroup|\bc10d\b|gloo|\[PG "
NOTABLE_INFO = (
    r"(?i)error|exception|fail|fatal|timeout|timed out|abort|killed|signal|\bnan\b|\binf\b|overflow|out of memory|"
    r"\boom\b|barrier|hang|stuck|world[_ ]size|master_|version|NCCL_|HCCL_|GLOO_|TORCH_|CUDA_|ASCEND_|OMP_|"
    r"finished|stopp|exit|shutdown|end of epoch|dataset|checkpoint|deepspeed|zero|torchrun|launch|--nnodes|"
    r"--nproc|arguments|hyperparam|TrainingArguments|train_iters|max_steps|eval_steps|save_steps|micro_batch|"
    r"global_batch|seq_len|max_length|drop_last"
)

# §1.5: the ChildFailedError block and others whose lines form one record.
RECORD_STARTS: dict[str, str] = {
    "traceback": r"Traceback \(most recent call last\)",
    "cpp": r"terminate called after throwing an instance of",
    "cann": r"\((?:E[A-Z0-9]\d{4})\):|(?:^|\s)E[A-Z0-9]\d{4}(?::|\[PID)",
    "cfe": r"ChildFailedError",
}
RECORD_CONTINUES: dict[str, str] = {
    "traceback": (
        # indented frames, then the exception line: any dotted name alone or before ": " (StopIteration, KeyError: 'x')
        r"^\s|^[A-Za-z_][\w.]*(?::\s|:?$)|^During handling of|"
        r"^The above exception|^$"
    ),
    "cpp": r"^\s+what\(\)|^Exception raised from|^frame #\d+:|^\s",
    "cann": r"^(?: {4,}|\t)",
    "cfe": r"^=+$|^-+$|^.+ FAILED$|^Failures:|^\s|^Root Cause|^\[\d+\]:$",
}

# Prefilters: a row that matches none of a pattern's gates cannot match the pattern, so the
# pattern never runs on it (each gate is one cheap search: literals, or the CANN code alone,
# which no literal can stand for; tests/test_pattern_gates.py checks that they are supersets).
CANN_CODE = r"E[A-Z0-9]\d{4}"
RECORD_HINTS: tuple[str, ...] = ("Traceback", "terminate called", "ChildFailedError")


def _without_names(pattern: str) -> str:
    """``pattern`` with its named groups made non-capturing, so several can share one regex."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


def union(*patterns: str) -> str:
    """One capture-free regex matching wherever any of ``patterns`` matches."""
    return "|".join(f"(?:{_without_names(p)})" for p in patterns)


def literals(hints: tuple[str, ...]) -> str:
    """A regex of literal alternatives: on short lines the regex engine's literal search beats
    polars' ``contains_any``."""
    return "|".join(re.escape(h) for h in hints)


# Levels that make a line a warning or an error (see LEVEL): the words, and c10/glog's W/E/F/C.
NON_INFO_LEVEL = r"^\[?[WEFC]\d{3,4} \d\d:|WARN|ERROR|CRITICAL|FATAL|Error|Warning"
PROGRESS_ANY = union(*PROGRESS_FORMATS, TQDM)
# A line matching none of these is chatter: not an error, warning, lifecycle, progress,
# collective or notable line, and names no rank of its own. Such lines are dropped before the
# expensive extraction (see parsers.text._drop_chatter); this must stay a superset of all of it.
KEPT_SUPERSET = union(ERROR_LINE, LIFECYCLE_LINE, COLLECTIVE_LINE, NOTABLE_INFO, PROGRESS_ANY, LINE_RANK, NON_INFO_LEVEL)
FIELD_GATES = (literals(FIELD_HINTS), CANN_CODE)
RECORD_GATES = (literals(RECORD_HINTS), CANN_CODE)

# Whole-file hints, searched once over each file's text: a file with none of these has no line
# with a launcher prefix (§0, §7), and none that starts a multi-line record.
PREFIX_HINTS: tuple[str, ...] = ("]:", "]<std", "\x1b[", "Z ")
# (two searches: the literals and the CANN code each alone are faster than their union)
RECORD_ANY: tuple[str, ...] = (
    r"Traceback \(most recent call last\)|terminate called after throwing|ChildFailedError",
    CANN_CODE,
)
