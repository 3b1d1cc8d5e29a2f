"""Lines of one digit shape are classified once: the results are exactly those of classifying
every line by itself, and digit-blind versions of patterns are supersets that cannot tell
digits apart."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem.parsers import patterns as P
from postmortem.parsers import text as X
from postmortem.parsers.shapes import digit_blind, digit_shape, is_digit_blind, shape_column
from postmortem.reading import split_raw
from postmortem.rule_engine import load_rules


@pytest.mark.parametrize(
    ("pattern", "blind"),
    [
        (r"exitcode\s*:\s*-?[1-9]", r"exitcode\s*:\s*-?[1-90-9]"),
        (r"\bc10d\b", r"\bc[0-9][0-9]d\b"),
        (r"\):20", r"\):[0-9][0-9]"),
        (r"0x[0-9a-f]+", r"[0-9]x[0-9a-f]+"),
        (r"\x31\x41", r"[0-9]\x41"),  # an escaped digit is a digit
        (r"[0\-9]", r"[0\-90-9]"),  # an escaped - is no range
        (r"[]1]", r"[]10-9]"),
        # blind already: quantifiers, group names, classes holding all digits or none
        (r"\d{3,4} (?P<n1>\d+)", r"\d{3,4} (?P<n1>\d+)"),
        (r"[A-Z_0-9]+[^0-9]\w\S", r"[A-Z_0-9]+[^0-9]\w\S"),
        (r"[\t-~][\w.-]\b{start}", r"[\t-~][\w.-]\b{start}"),
        ("\x1b\\[A", "\x1b\\[A"),
        # not seen through: the caller searches every line
        (r"[^5]", None),
        (r"\p{Lu}", None),
        (r"\1", None),
        (r"[a[0-9]]", None),
    ],
)
def test_digit_blind_versions(pattern: str, blind: str | None):
    assert digit_blind(pattern) == blind


def test_the_parsers_classifiers_are_seen_through_and_the_rules_keep_pattern_too():
    for pattern in (P.KEPT_SUPERSET, P.ERROR_LINE, P.COLLECTIVE_LINE, *P.FIELD_GATES, load_rules().keep_pattern()):
        assert digit_blind(pattern) is not None
    # the shape-level answers that are final, not gates, need patterns that are blind already
    for pattern in (P.LIFECYCLE_LINE, P.DATED_TIMESTAMP, P.GLOG_TIMESTAMP, P.LEVEL_WORD, P.GLOG_LEVEL, P.TQDM,
                    P.NON_TRAIN_BAR, *P.PROGRESS_FORMATS, *(k + v for k, v in P.METRICS.values())):
        assert is_digit_blind(pattern), pattern
    assert not is_digit_blind(P.ERROR_LINE) and not is_digit_blind(P.COLLECTIVE_LINE)


def test_a_shape_keeps_line_breaks_and_lengths():
    text = "step 12/500 ✓ 9\n٣ 7\r\n"
    shape = digit_shape(text.encode()).decode()
    assert shape == "step 00/000 ✓ 0\n٣ 0\r\n"  # (only ASCII digits: the parser's \d is wider)
    assert shape_column(pl.Series([text, None])).to_list() == [shape, None]


def _digits(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(["0", "1", "5", "9", "12", "20", "10", "500", "5000", "0001", "31337"]))


# Lines whose shapes repeat with other digits in them, among them the cases where digits decide:
# a step that also stands in the total ("500/5000", "12/12"), an exit code of 0 or not, c10d and
# c20d, a plog header's ):20, a thousands separator that vetoes a step, a redraw.
TEMPLATES = [
    "Train:  {}%|##        | {}/{} [00:{}<10:00:00,  3.00s/it]",
    "Train:  {}%|#         | {}/{} [00:01<19:24,  3.00s/it]\rTrain:  1%|#  | {}/{} [00:02<19:20,  3.00s/it]",
    "Train:  9%|#         | {}/{} [00:37<19:20,  3.00s/it]\r{{'loss': {}.{}, 'grad_norm': 0.{}, 'learning_rate': 1e-0{}}}",
    "{{'loss': {}.{}, 'grad_norm': {}.1, 'learning_rate': {}e-05, 'global_step/max_steps': '{}/{}', 'epoch': 0.{}}}",
    "[2026-11-20 10:00:0{},517] [INFO] [logging.py:96:log_dist] [Rank {}] step={}, skipped=0, lr=[1e-05]",
    " iteration       {}/     {} | consumed samples: {} | lm loss: {}.41E+00 |",
    "2026-05-27 19:49:13 | INFO | fairseq_cli.train | Stopping training due to num_updates: {} >= max_update: {}",
    "2026-11-20 10:00:0{},001 - INFO - swift - train: global_step {} / {}",
    "[rank{}] step {} loss {}.5 tokens per step={},{}",
    "  exitcode  : {} (pid: {})",
    "[E1120 10:00:0{}.{} {} torch/csrc/distributed/c{}d/ProcessGroupNCCL.cpp:{}] [PG ID 0 PG GUID 0 Rank {}] Watchdog",
    "[ERROR] HCCL({},python3):20{}-05-27-19:52:41.{}.{} [hccl.cc:{}] EI00{}: init failed",
    "2026-11-20 10:00:0{},002 - DEBUG - transformers.modeling_utils - attention mask cache hit for bucket {}",
    "W1120 10:00:00.{} {} torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable",
    "gpu-node-{}:{}:{} [{}] NCCL INFO ncclCommInitRank comm 0x55d{} rank {} nranks {} cudaDev {} - Init START",
    "torchrun --nnodes={} --nproc_per_node={} --node_rank={} train.py",
    "Traceback (most recent call last):",
    '  File "train.py", line {}, in <module>',
    "RuntimeError: CUDA error {}",
]


@st.composite
def _line(draw: st.DrawFn) -> str:
    template = draw(st.sampled_from(TEMPLATES))
    return template.format(*(_digits(draw) for _ in range(template.count("{}"))))


def _files(texts: list[str]) -> pl.DataFrame:
    families = ["trainer_log", "torchrun_console", "ascend_plog"]
    return pl.DataFrame({"_fid": list(range(len(texts))), "family": families[: len(texts)], "text": texts})


KEEPS = [None, load_rules().keep_pattern(), r"\p{Lu}OSS [1-9]|attention mask"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.lists(_line(), max_size=40).map("\n".join), min_size=1, max_size=3),
    st.sampled_from(KEEPS),
    st.booleans(),
)
def test_lines_of_one_shape_parse_as_each_would_alone(texts: list[str], keep: str | None, keep_all: bool):
    files = _files(texts)
    by_shape = X.parse_files(files, keep=keep, keep_all=keep_all)
    # each line its own "shape": every distinct line is classified by itself
    by_line = X.parse_files(files.with_columns(pl.col("text").alias("shape")), keep=keep, keep_all=keep_all)
    assert by_shape.equals(by_line), (by_shape.select("_fid", "line", "message", "kind", "step"), by_line.select("_fid", "line", "message", "kind", "step"))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_line(), min_size=1, max_size=60).map("\n".join))
def test_shapes_numbered_by_their_text_parse_as_shapes_numbered_by_hash(text: str):
    # (the path taken when two shapes of a batch hash alike)
    lines = split_raw(_files([text]).with_columns(
        shape_column(pl.Series([text])), pl.lit(False).alias("_has_pfx"), pl.lit(False).alias("_has_rec")
    ))
    assert X.parse_text(lines, keep_all=False).equals(X.parse_text(lines, keep_all=False, exact_shapes=True))


def test_a_step_that_also_stands_in_the_total_is_read_where_it_stands():
    lines = [
        "Train:  10%|##        | 100/5000 [00:01<10:00:00,  3.00s/it]",
        "Train:  10%|##        | 500/5000 [00:01<10:00:00,  3.00s/it]",  # 500 stands in 5000 too
        "{'loss': 2.5, 'global_step/max_steps': '12/12'}",
        "{'loss': 2.5, 'global_step/max_steps': '34/12'}",
        "  exitcode  : 1 (pid: 7)",
        "  exitcode  : 0 (pid: 7)",
    ]
    parsed = X.parse_files(_files(["\n".join(lines)]), keep_all=True)
    assert parsed.select("step", "max_steps").rows()[:4] == [(100, 5000), (500, 5000), (12, 12), (34, 12)]
    assert parsed["kind"].to_list()[4:] == ["error", "info"]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.lists(_line(), max_size=30).map("\n".join), min_size=2, max_size=4),
    st.sampled_from(KEEPS),
    st.booleans(),
)
def test_a_book_of_earlier_batches_shapes_changes_nothing(texts: list[str], keep: str | None, keep_all: bool):
    # what a job's earlier batches found of its shapes is only reused, never a different answer
    book = X.ShapeBook(keep)
    for i, text in enumerate(texts):
        batch = _files([text]).with_columns(pl.lit(i).alias("_fid"))
        with_book = X.parse_files(batch, keep=keep, keep_all=keep_all, book=book)
        assert with_book.equals(X.parse_files(batch, keep=keep, keep_all=keep_all))


def test_a_full_book_stops_remembering(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(X, "MAX_SHAPES", 3)
    book = X.ShapeBook(None)
    text = "\n".join(TEMPLATES[i].format(*["1"] * TEMPLATES[i].count("{}")) for i in range(8))
    first = X.parse_files(_files([text]), keep_all=True, book=book)
    assert X.parse_files(_files([text]), keep_all=True, book=book).equals(first)
    assert book._known.height <= 3
