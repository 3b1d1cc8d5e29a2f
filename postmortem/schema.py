"""The timeline's columns: the one contract between parsers, rules, analyzers and renderers.

Every parser returns a frame with exactly these columns (in this order, these dtypes);
:func:`conform` fills what a parser does not know with nulls.
"""

from __future__ import annotations

import polars as pl

#: Families of files. A file's family decides how its prefixes and ranks are read;
#: line-level extraction (timestamps, levels, steps, error fields) runs on every family.
FAMILIES: tuple[str, ...] = (
    "torchrun_console",  # launcher console: [defaultN]:/[rankN]: prefixes, elastic agent lines, ChildFailedError
    "torchrun_logdir",  # --log-dir tree: attempt_N/<local_rank>/stdout.log|stderr.log
    "elastic_error",  # attempt_N/<local_rank>/error.json or the agent's copy
    "trainer_log",  # per-rank trainer log: HF/ms-swift, DeepSpeed, Megatron, fairseq, text_trainer
    "ascend_plog",  # CANN plog/device logs and torch_npu ERR/EI output
    "nccl_debug",  # NCCL_DEBUG output (NCCL_DEBUG_FILE or a console dominated by it)
    "pyspy",  # py-spy dump text (one or several processes)
    "pyspy_json",  # py-spy dump --json
    "flight_recorder",  # PyTorch flight recorder dump (pickle or JSON)
    "slurm",  # srun -l labelled output
    "k8s_pod",  # kubectl logs of <job>-master-0 / <job>-worker-N
    "generic",  # any other text
)

#: Event kinds, from most to least specific.
KINDS: tuple[str, ...] = ("error", "warning", "progress", "lifecycle", "collective", "stack", "info")

#: How a row's rank was established.
RANK_SOURCES: tuple[str, ...] = ("path", "prefix", "content", "inferred")

LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

TIMELINE_SCHEMA: dict[str, pl.DataType] = {
    "file": pl.String(),  # path relative to JOB_DIR, '/'-separated
    "line": pl.Int64(),  # 1-based physical line number in the (decompressed) file
    "family": pl.String(),
    "node": pl.String(),  # host or node name when known
    "node_rank": pl.Int64(),
    "rank": pl.Int64(),  # global rank
    "local_rank": pl.Int64(),
    "rank_source": pl.String(),
    "ts": pl.Datetime("us"),  # wall time as printed (local time of the node, naive)
    "ts_inferred": pl.Boolean(),  # True when inherited from an earlier line of the file
    "level": pl.String(),
    "kind": pl.String(),
    "step": pl.Int64(),  # training step (optimizer update / iteration) the line reports
    "message": pl.String(),  # the line with launcher prefixes removed (rank/tee/srun/kubectl)
    "record": pl.Int64(),  # multi-line record id (traceback, EI block, py-spy thread); null otherwise
    # --- extracted fields (null where the line does not carry them) ---
    "max_steps": pl.Int64(),  # total steps when the progress line says it (N/M)
    "loss": pl.Float64(),
    "grad_norm": pl.Float64(),
    "lr": pl.Float64(),
    "exc_type": pl.String(),  # Python exception type (RuntimeError, torch.distributed.DistBackendError)
    "error_code": pl.String(),  # ERR02008, EI0015, ncclRemoteError, errno names ...
    "exit_code": pl.Int64(),
    "signal": pl.String(),  # SIGKILL, SIGSEGV ...
    "pid": pl.Int64(),
    "host": pl.String(),  # a host named inside the line (ChildFailedError host:, NCCL host:pid:tid)
    "pg": pl.String(),  # process group id/description from [PG ...] prefixes
    "seq": pl.Int64(),  # collective sequence number (SeqNum=, work sequence id)
    "op_type": pl.String(),  # ALLREDUCE, _REDUCE_SCATTER_BASE, BARRIER ...
    "numel": pl.Int64(),  # NumelIn
    "timeout_ms": pl.Int64(),
    "ran_ms": pl.Int64(),
    "last_enqueued": pl.Int64(),
    "last_completed": pl.Int64(),
    "thread": pl.String(),  # py-spy thread header of a stack frame row
    "frame": pl.String(),  # 'func (file:line)' for stack rows
    "frame_depth": pl.Int64(),  # 0 = innermost frame
}

TIMELINE_COLUMNS: tuple[str, ...] = tuple(TIMELINE_SCHEMA)


def empty_timeline() -> pl.DataFrame:
    """A timeline with no rows and the full schema."""
    return pl.DataFrame(schema=TIMELINE_SCHEMA)


def conform(frame: pl.DataFrame) -> pl.DataFrame:
    """Give ``frame`` exactly the timeline columns, in order, casting and null-filling."""
    exprs = []
    for name, dtype in TIMELINE_SCHEMA.items():
        if name in frame.columns:
            exprs.append(pl.col(name).cast(dtype, strict=False))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    return frame.select(exprs)
