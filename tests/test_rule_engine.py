"""The rule engine: loading and its error messages, scopes, aggregates, overrides, compiled matching."""

from __future__ import annotations

import os
import textwrap
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from postmortem.errors import RuleError
from postmortem.rule_engine import (
    ENV_VAR,
    RuleSet,
    _Plan,
    load_dir,
    load_rule_file,
    load_rules,
    match_rules,
    run_examples,
)
from postmortem.rule_patterns import required_literals
from postmortem.schema import conform

BODY = """
title = "Test rule"
category = "collective_timeout"
severity = "error"
role = "symptom"
explanation = "x"
fix = "x"
references = []
"""


def write_rule(directory: Path, rule_id: str, text: str, group: str = "test") -> Path:
    path = directory / group / f"{rule_id}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def simple_rule(rule_id: str, match: str, extra: str = "", body: str = BODY) -> str:
    return f'id = "{rule_id}"\n{body}{extra}\n[match]\n{match}\n'


def timeline(rows: list[dict]) -> pl.DataFrame:
    """A timeline from explicit rows; line numbers default to the row order."""
    for i, row in enumerate(rows, start=1):
        row.setdefault("line", i)
        row.setdefault("file", "console.log")
    return conform(pl.DataFrame(rows, infer_schema_length=None))


def one_rule(tmp_path: Path, rule_id: str, text: str) -> RuleSet:
    write_rule(tmp_path, rule_id, text)
    return RuleSet(load_dir(tmp_path))


# --------------------------------------------------------------------------- load errors


def test_load_bad_severity_names_file_field_and_choices(tmp_path: Path) -> None:
    body = BODY.replace('severity = "error"', 'severity = "fatal"')
    write_rule(tmp_path, "x-bad", simple_rule("x-bad", "any = ['foo']", body=body), group="nccl")
    with pytest.raises(RuleError) as err:
        load_dir(tmp_path)
    assert str(err.value) == (
        f"{tmp_path.name}/nccl/x-bad.toml: \"severity\" should be one of "
        "('critical', 'error', 'warning', 'info') (got 'fatal')"
    )


def test_load_look_around_pattern_names_the_pattern_and_the_reason(tmp_path: Path) -> None:
    write_rule(tmp_path, "x-look", simple_rule("x-look", "any = ['ok', '(?<=rank )\\d+']"))
    with pytest.raises(RuleError) as err:
        load_dir(tmp_path)
    assert str(err.value) == (
        f'{tmp_path.name}/test/x-look.toml: "match.any[1]" should compile under polars (Rust regex): '
        "look-around, including look-ahead and look-behind, is not supported (got '(?<=rank )\\\\d+')"
    )


def test_load_missing_field_is_named(tmp_path: Path) -> None:
    body = BODY.replace('title = "Test rule"\n', "")
    write_rule(tmp_path, "x-missing", simple_rule("x-missing", "any = ['foo']", body=body))
    with pytest.raises(RuleError) as err:
        load_dir(tmp_path)
    assert str(err.value) == f'{tmp_path.name}/test/x-missing.toml: "title" is required'


def test_load_top_level_key_after_a_table_gets_a_hint(tmp_path: Path) -> None:
    text = simple_rule("x-order", "any = ['foo']", body=BODY.replace('fix = "x"\n', "")) + 'fix = "late"\n'
    write_rule(tmp_path, "x-order", text)
    with pytest.raises(RuleError, match=r'"match.fix" is not a known field .*top-level fields must come before'):
        load_dir(tmp_path)


def test_load_id_must_equal_file_name(tmp_path: Path) -> None:
    write_rule(tmp_path, "x-file", simple_rule("x-other", "any = ['foo']"))
    with pytest.raises(RuleError) as err:
        load_dir(tmp_path)
    assert str(err.value) == f"{tmp_path.name}/test/x-file.toml: \"id\" should equal the file name 'x-file' (got 'x-other')"


def test_load_invalid_toml_and_duplicate_ids(tmp_path: Path) -> None:
    bad = write_rule(tmp_path / "a", "x-toml", 'id = "x-toml\n')
    with pytest.raises(RuleError, match=r"^.*x-toml\.toml: not valid TOML \("):
        load_rule_file(bad)
    write_rule(tmp_path / "b", "x-dup", simple_rule("x-dup", "any = ['foo']"), group="g1")
    write_rule(tmp_path / "b", "x-dup", simple_rule("x-dup", "any = ['foo']"), group="g2")
    with pytest.raises(RuleError, match=r'b/g2/x-dup\.toml: "id" should be unique .*also in b/g1/x-dup\.toml'):
        load_dir(tmp_path / "b")


def test_load_message_placeholders_must_be_known(tmp_path: Path) -> None:
    text = simple_rule("x-msg", "any = ['SeqNum=(?P<seq>\\d+)']", extra='message = "seq {seq} op {op}"\n')
    write_rule(tmp_path, "x-msg", text)
    with pytest.raises(RuleError, match=r'"message" placeholder \{op\} should be a plain \{name\} naming'):
        load_dir(tmp_path)


def test_load_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="rules directory does not exist"):
        load_rules([tmp_path / "nope"], builtin=False)


# --------------------------------------------------------------------------- matching


def test_line_rule_groups_all_ranks_into_one_finding_with_fields(tmp_path: Path) -> None:
    rules = one_rule(
        tmp_path,
        "x-timeout",
        simple_rule(
            "x-timeout",
            "any = ['WorkNCCL\\(SeqNum=(?P<seq>\\d+), OpType=(?P<op_type>\\w+)']",
            extra='message = "{op_type} {seq} on {nranks} ranks"\n',
        ),
    )
    tl = timeline(
        [
            {"rank": 1, "ts": datetime(2024, 1, 1, 10, 0, 5), "message": "x WorkNCCL(SeqNum=7, OpType=ALLREDUCE, ..."},
            {"rank": 0, "ts": datetime(2024, 1, 1, 10, 0, 1), "message": "x WorkNCCL(SeqNum=7, OpType=ALLREDUCE, ..."},
            {"rank": 0, "ts": datetime(2024, 1, 1, 10, 0, 9), "message": "healthy line"},
        ]
    )
    [finding] = match_rules(tl, rules)
    assert (finding.rule, finding.ranks, finding.count) == ("x-timeout", [0, 1], 2)
    assert finding.first_ts == datetime(2024, 1, 1, 10, 0, 1)
    assert [(e.rank, e.line) for e in finding.evidence] == [(0, 2), (1, 1)]  # earliest first
    assert finding.fields == {"seq": 7, "op_type": "ALLREDUCE"}
    assert finding.message == "ALLREDUCE 7 on 2 ranks"
    assert finding.evidence[0].span == (2, 37)
    assert [n for n, _ in finding.evidence[0].context] == [1, 2, 3]


def test_not_patterns_and_filters_exclude_rows(tmp_path: Path) -> None:
    rules = one_rule(tmp_path, "x-not", simple_rule("x-not", "any = ['boom']\nnot = ['harmless']\nkinds = ['error']"))
    tl = timeline(
        [
            {"rank": 0, "kind": "error", "message": "boom harmless"},
            {"rank": 1, "kind": "info", "message": "boom"},
            {"rank": 2, "kind": "error", "message": "boom"},
        ]
    )
    [finding] = match_rules(tl, rules)
    assert finding.ranks == [2]


def test_record_scope_matches_lines_of_one_record_as_one_text(tmp_path: Path) -> None:
    rules = one_rule(
        tmp_path,
        "x-record",
        simple_rule("x-record", "scope = 'record'\nany = ['expand_to_full_mesh_op_strategy']\nall = ['(?m)^AssertionError$']"),
    )
    tl = timeline(
        [
            {"rank": 3, "record": 7, "message": "Traceback (most recent call last):"},
            {"rank": 3, "record": 7, "message": '  File "utils.py", line 332, in expand_to_full_mesh_op_strategy'},
            {"rank": 3, "record": 7, "message": "AssertionError"},
            # the same two lines in different records, or outside any record, do not match
            {"rank": 4, "record": 8, "message": '  File "utils.py", line 332, in expand_to_full_mesh_op_strategy'},
            {"rank": 4, "record": 9, "message": "AssertionError"},
            {"rank": 5, "message": "expand_to_full_mesh_op_strategy AssertionError"},
        ]
    )
    [finding] = match_rules(tl, rules)
    assert (finding.ranks, finding.count) == ([3], 1)
    # the evidence is the record's first line a positive pattern matches
    assert (finding.evidence[0].line, finding.evidence[0].text.strip()[:4]) == (2, "File")


def test_confirm_and_extract_run_python_regex_on_hits_only(tmp_path: Path) -> None:
    rules = one_rule(
        tmp_path,
        "x-dup",
        simple_rule(
            "x-dup",
            "any = ['--\\w+ .*--\\w+ ']\n"
            "confirm = ['(--\\w+) .*\\s\\1 ']\n"
            "extract = ['(?P<flag>--\\w+) (?P<first>\\S+) .*\\s(?P=flag) (?P<second>\\S+)']",
            extra='message = "{flag}: {first} then {second}"\n',
        ),
    )
    tl = timeline(
        [
            {"message": "python t.py --workers 10 --lr 1 --workers 4 "},
            {"message": "python t.py --workers 10 --lr 1 "},
        ]
    )
    [finding] = match_rules(tl, rules)
    assert finding.count == 1
    assert finding.message == "--workers: 10 then 4"


def test_named_group_rank_overrides_the_row_rank(tmp_path: Path) -> None:
    rules = one_rule(tmp_path, "x-rank", simple_rule("x-rank", "any = ['failed on rank (?P<rank>\\d+)']"))
    tl = timeline([{"rank": 0, "message": "agent: worker failed on rank 5"}])
    [finding] = match_rules(tl, rules)
    assert finding.ranks == [5]
    assert finding.evidence[0].rank == 5


# --------------------------------------------------------------------------- aggregates


def test_count_differs_by_node(tmp_path: Path) -> None:
    rules = one_rule(
        tmp_path,
        "x-count",
        simple_rule("x-count", "any = ['Dataloader finished']", extra='message = "{detail}"\n')
        + '\n[aggregate]\nby = "node"\ncondition = "count_differs"\n',
    )
    rows = [{"node": n, "rank": r, "message": "Dataloader finished"} for n, r in [("a", 0), ("a", 1), ("b", 2)]]
    [finding] = match_rules(timeline(rows), rules)
    assert finding.fields["counts"] == {"a": 2, "b": 1}
    assert finding.message == "counts a=2, b=1"
    even = [{"node": n, "rank": r, "message": "Dataloader finished"} for n, r in [("a", 0), ("b", 2)]]
    assert match_rules(timeline(even), rules) == []


def test_last_step_differs_by_rank_names_the_ranks_behind(tmp_path: Path) -> None:
    rules = one_rule(
        tmp_path,
        "x-step",
        simple_rule("x-step", "kinds = ['progress']") + '\n[aggregate]\nby = "rank"\ncondition = "last_step_differs"\n',
    )
    rows = [
        {"rank": r, "step": s, "kind": "progress", "message": f"step {s}"}
        for r, s in [(0, 76), (1, 76), (2, 76), (0, 77), (2, 77)]
    ]
    [finding] = match_rules(timeline(rows), rules)
    assert finding.ranks == [1]
    assert finding.fields["last_step"] == {0: 77, 1: 76, 2: 77}
    assert finding.fields["behind"] == [1]


def test_present_on_some_ranks(tmp_path: Path) -> None:
    rules = one_rule(
        tmp_path,
        "x-some",
        simple_rule("x-some", "any = ['Dataloader finished']") + '\n[aggregate]\nby = "rank"\ncondition = "present_on_some"\n',
    )
    rows = [{"rank": r, "message": "step 5"} for r in range(4)] + [{"rank": 2, "message": "Dataloader finished"}]
    [finding] = match_rules(timeline(rows), rules)
    assert finding.ranks == [2]
    assert finding.fields["absent"] == [0, 1, 3]


def test_absent_fires_only_when_the_required_activity_is_there(tmp_path: Path) -> None:
    rules = one_rule(
        tmp_path,
        "x-absent",
        simple_rule("x-absent", "any = ['train_runtime']")
        + '\n[aggregate]\nby = "rank"\ncondition = "absent"\nrequires = ["\'loss\'"]\n',
    )
    running = [{"rank": 0, "step": 3, "message": "{'loss': 1.2}"}]
    [finding] = match_rules(timeline(running), rules)
    assert (finding.count, finding.fields["last_step"], finding.evidence[0].line) == (0, 3, 1)
    finished = [*running, {"rank": 0, "message": "{'train_runtime': 12.0}"}]
    assert match_rules(timeline(finished), rules) == []
    other_trainer = [{"rank": 0, "step": 3, "kind": "progress", "message": "iteration 3/10"}]
    assert match_rules(timeline(other_trainer), rules) == []


# --------------------------------------------------------------------------- overrides


def test_user_dir_overrides_a_builtin_rule_by_id(tmp_path: Path) -> None:
    builtin = load_rules()
    assert "nccl-watchdog-timeout" in builtin
    text = simple_rule("nccl-watchdog-timeout", "any = ['my own signature']").replace("Test rule", "Mine")
    write_rule(tmp_path, "nccl-watchdog-timeout", text, group="nccl")
    rules = load_rules([tmp_path])
    assert rules.get("nccl-watchdog-timeout").title == "Mine"
    assert rules.overridden["nccl-watchdog-timeout"] == ["rules/nccl/nccl-watchdog-timeout.toml"]
    assert len(rules) == len(builtin)


def test_postmortem_rules_env_var_adds_dirs_after_cli_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_rule(first, "my-rule", simple_rule("my-rule", "any = ['a']").replace("Test rule", "from --rules"))
    write_rule(second, "my-rule", simple_rule("my-rule", "any = ['a']").replace("Test rule", "from env"))
    monkeypatch.setenv(ENV_VAR, os.pathsep.join([str(second), ""]))
    rules = load_rules([first], builtin=False)
    assert rules.get("my-rule").title == "from env"
    with pytest.raises(RuleError, match='no such rule: "missing"'):
        rules.get("missing")


# --------------------------------------------------------------------------- compiled matching


@pytest.mark.parametrize(
    ("pattern", "ignore_case", "expected"),
    [
        (r"Watchdog caught collective operation timeout: WorkNCCL\((?:SeqNum=(?P<s>\d+))?", False,
         {"Watchdog caught collective operation timeout: WorkNCCL("}),
        (r"(?i)\bdata ?loader finished\b", False, {"data loader finished", "dataloader finished"}),
        (r"\x27loss\x27: \x27?(?:nan|inf)\b", False, {"'loss': nan", "'loss': inf", "'loss': 'nan", "'loss': 'inf"}),
        (r"CUDA error: (?P<e>an illegal memory access|unspecified launch failure)", False,
         {"CUDA error: an illegal memory access", "CUDA error: unspecified launch failure"}),
        (r"--\w+ .*--\w+", False, None),  # nothing literal enough: regex fallback
    ],
)
def test_required_literals(pattern: str, ignore_case: bool, expected: set[str] | None) -> None:
    found = required_literals(pattern, ignore_case)
    assert (set(found[0]) if found else None) == expected


def test_adding_rules_adds_no_passes_over_the_timeline(tmp_path: Path) -> None:
    """200 literal-bearing rules compile into the same single literal pass as the built-in set."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    from bench_rules import synthetic_timeline, write_synthetic_rules

    write_synthetic_rules(tmp_path / "synthetic", 200)
    builtin = [r for r in load_rules() if r.match.scope == "line"]
    extra = [r for r in load_dir(tmp_path / "synthetic") if r.match.scope == "line"]
    base_plan, full_plan = _Plan.build(builtin), _Plan.build(builtin + extra)
    assert len(full_plan.regexes) == len(base_plan.regexes) == 0
    assert len(full_plan.literals) + len(full_plan.literals_ci) > len(base_plan.literals) + len(base_plan.literals_ci)
    # and the compiled pass finds the same findings with or without the extra rules
    tl = synthetic_timeline(rows=20_000, failures=20, records=50)
    base = {f.rule for f in match_rules(tl, RuleSet(r for r in load_rules() if r.match.scope != "config"))}
    more = {f.rule for f in match_rules(tl, RuleSet([*load_rules(), *load_dir(tmp_path / "synthetic")]))}
    assert base <= more and {"nccl-watchdog-timeout", "pytorch-cuda-oom"} <= base


def test_keep_pattern_compiles_and_keeps_signature_lines() -> None:
    pattern = load_rules().keep_pattern()
    assert pattern is not None
    lines = pl.Series(
        [
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=1)",
            "{'loss': nan, 'grad_norm': nan}",
            "just a healthy info line",
        ]
    )
    assert lines.str.contains(pattern).to_list() == [True, True, False]


# --------------------------------------------------------------------------- examples


def test_run_examples_reports_a_wrong_example(tmp_path: Path) -> None:
    text = simple_rule("x-ex", "any = ['boom']") + (
        "\n[[examples]]\nfires = true\nlog = '''\nall good\n'''\n"
        "\n[[examples]]\nfires = false\nlog = '''\nboom\n'''\n"
    )
    rules = one_rule(tmp_path, "x-ex", text)
    results = run_examples(rules)
    assert [(r.id, r.ok, r.detail) for r in results] == [
        ("x-ex-fires-1", False, "did not fire"),
        ("x-ex-quiet-1", False, "fired: Test rule (1x)"),
    ]
