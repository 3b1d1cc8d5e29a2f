"""Benchmark rule matching: the real rule set vs the same plus N synthetic rules, on a big timeline.

Matching is compiled (one prefilter pass per scope, then one ``select`` on the candidate rows),
so adding rules should add little time. Run::

    python tools/bench_rules.py                # 1,000,000 rows, 200 extra rules
    python tools/bench_rules.py --rows 200000 --extra 50

The lead calls :func:`run` from tests or CI and reads the returned timings.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from postmortem.rule_engine import RuleSet, load_dir, load_rules, match_rules
from postmortem.schema import conform

#: Lines of a healthy run, the bulk of any real timeline.
_HEALTHY = (
    "[2024-07-15 15:27:27] iteration {n}/ 100000 | consumed samples: 800 | elapsed time per iteration (ms): 742.5 "
    "| learning rate: 1.000000E-05 | lm loss: 9.911994E-01 | loss scale: 1.0 | grad norm: 10.575 |",
    "{{'loss': 1.47077751, 'grad_norm': 10.5625, 'learning_rate': 2e-06, 'epoch': 0.01, "
    "'global_step/max_steps': '{n}/100000'}}",
    "node{r}:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
    "node{r}:13571:13571 [0] NCCL INFO Connected all rings",
    "[2022-03-11 02:06:58,985] [INFO] [logging.py:69:log_dist] [Rank 0] step={n}, skipped=2, lr=[5e-05], mom=[[0.9, 0.999]]",
    "[INFO|trainer.py:2926] 2023-10-19 09:48:54,430 >> Saving model checkpoint to out/checkpoint-{n}",
    "[2026-05-27 19:49:13,414][train_inner][INFO] - epoch 001: {n} / 127485 loss=12.388, ppl=5304.07, wps=9931.1, "
    "num_updates={n}, lr=6e-07, gnorm=12.293, wall=77.5745",
    "/usr/lib/python3/dist-packages/transformers/training_args.py:1525: FutureWarning: `evaluation_strategy` is deprecated",
    "W0801 13:23:17.366000 32974 torch/distributed/run.py:793] *****************************************",
    "[rank{r}]:[I1206 18:30:02.105298746 ProcessGroupNCCL.cpp:905] [PG 0 Rank {r}] ProcessGroupNCCL initialization options",
)
#: A few failure lines, so the benchmark also builds findings and evidence.
_FAILURES = (
    "[rank{r}]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=7753, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 "
    "milliseconds before timing out.",
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity",
)
#: A traceback, repeated as records.
_RECORD = (
    "Traceback (most recent call last):",
    '  File "/workspace/train.py", line 212, in <module>',
    "    main()",
    "KeyError: 'attention_mask'",
)


@dataclass
class Timing:
    """Seconds for one configuration."""

    rules: int
    load_s: float
    match_s: float
    findings: int


def synthetic_timeline(rows: int = 1_000_000, ranks: int = 64, failures: int = 200, records: int = 2_000) -> pl.DataFrame:
    """A timeline of ``rows`` rows: healthy chatter, ``failures`` failure lines, ``records`` tracebacks."""
    bulk = rows - failures - records * len(_RECORD)
    templates = pl.Series("t", list(_HEALTHY))
    frame = pl.DataFrame({"i": pl.int_range(bulk, eager=True)}).with_columns(
        (pl.col("i") % ranks).alias("rank"),
        templates.gather(pl.Series(range(bulk)) % len(_HEALTHY)).alias("t"),
    )
    message = pl.col("t").str.replace_all("{n}", (pl.col("i") // ranks).cast(pl.String), literal=True)
    message = message.str.replace_all("{r}", pl.col("rank").cast(pl.String), literal=True)
    healthy = frame.select(pl.col("rank"), message.str.replace_all("{{", "{", literal=True).alias("message"))
    fail = pl.DataFrame(
        {
            "rank": [i % ranks for i in range(failures)],
            "message": [_FAILURES[i % len(_FAILURES)].replace("{r}", str(i % ranks)) for i in range(failures)],
        }
    )
    rec = pl.DataFrame(
        {
            "rank": [(i // len(_RECORD)) % ranks for i in range(records * len(_RECORD))],
            "message": [_RECORD[i % len(_RECORD)] for i in range(records * len(_RECORD))],
            "record": [i // len(_RECORD) for i in range(records * len(_RECORD))],
        }
    )
    frame = pl.concat([healthy, fail, rec], how="diagonal_relaxed").with_row_index("line", offset=1)
    frame = frame.with_columns(
        pl.format("rank{}.log", pl.col("rank")).alias("file"),
        pl.lit("trainer_log").alias("family"),
        pl.when(pl.col("message").str.contains("Error|Watchdog")).then(pl.lit("error")).otherwise(pl.lit("info")).alias("kind"),
    )
    return conform(frame)


def write_synthetic_rules(directory: Path, count: int) -> None:
    """``count`` rule files shaped like the real ones (literal anchors, named groups, some records)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        scope = "record" if i % 10 == 0 else "line"
        pattern = [
            rf"SyntheticSubsystem{i}Error: (?P<detail>.*) code=(?P<code>\d+)",
            rf"\[synthetic_{i}\.cc:\d+\] .*failed after (?P<ms>\d+) ms",
            rf"(?i)synthetic widget {i} (?:stalled|hung) on rank (?P<r>\d+)",
        ][i % 3]
        (directory / f"synthetic-rule-{i}.toml").write_text(
            f'''id = "synthetic-rule-{i}"
title = "Synthetic rule {i}"
category = "unknown_failure"
severity = "warning"
role = "context"
explanation = "x"
fix = "x"
references = []

[match]
scope = "{scope}"
any = ['{pattern}']
''',
            encoding="utf-8",
        )


def _time(rules_factory, timeline: pl.DataFrame) -> Timing:
    start = time.perf_counter()
    rules: RuleSet = rules_factory()
    loaded = time.perf_counter()
    findings = match_rules(timeline, rules)
    done = time.perf_counter()
    return Timing(len(rules), loaded - start, done - loaded, len(findings))


def _pattern_rules() -> RuleSet:
    # [config] rules (postmortem/config_rules.py) read launch facts, not patterns; timed apart
    return RuleSet(r for r in load_rules() if r.match.scope != "config")


def run(rows: int = 1_000_000, extra: int = 200) -> dict[str, Timing]:
    """Timings: the real pattern rules, the same plus ``extra`` synthetic rules, and all real
    rules including [config] checks."""
    timeline = synthetic_timeline(rows)
    results = {"real": _time(_pattern_rules, timeline)}
    with tempfile.TemporaryDirectory() as tmp:
        write_synthetic_rules(Path(tmp) / "synthetic", extra)

        def with_extra() -> RuleSet:
            return RuleSet([*_pattern_rules(), *load_dir(Path(tmp) / "synthetic")])

        results[f"real+{extra}"] = _time(with_extra, timeline)
    results["all+config"] = _time(load_rules, timeline)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--extra", type=int, default=200)
    args = parser.parse_args(argv)
    results = run(args.rows, args.extra)
    base = results["real"].match_s
    print(f"timeline: {args.rows:,} rows")
    for name, t in results.items():
        print(
            f"{name:>10}: {t.rules:4d} rules  load {t.load_s:6.2f} s  match {t.match_s:6.2f} s  "
            f"({t.match_s / base:4.2f}x)  findings {t.findings}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
