"""Golden tests: the analysis of every corpus job against its expected.json."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import polars as pl
import pytest

import postmortem
from postmortem.api import analyze
from postmortem.model import SEVERITY_ORDER
from tests.conftest import corpus_scenarios, load_expected

SCENARIOS = corpus_scenarios()
SCHEMA = json.loads((Path(postmortem.__file__).parent / "report.schema.json").read_text())


@pytest.fixture(scope="module", params=SCENARIOS, ids=[f"{p.parent.name}/{p.name}" for p in SCENARIOS])
def case(request):
    path: Path = request.param
    analysis = analyze(path / "job")
    return load_expected(path), analysis.report.to_dict(), analysis


def test_verdict_matches_ground_truth(case):
    expected, report, _ = case
    verdict = report["verdict"]
    first = verdict["first_failure"]["rank"] if verdict["first_failure"] else None
    got = (verdict["status"], verdict["category"], sorted(verdict["culprit_ranks"]), first)
    want = (expected["status"], expected["category"], sorted(expected["culprit_ranks"]), expected["first_failing_rank"])
    assert got == want, verdict["summary"]


def test_expected_rules_fire(case):
    expected, report, _ = case
    fired = {f["rule"] for f in report["findings"]}
    assert set(expected.get("rules") or []) <= fired


def test_report_is_valid_and_deterministic(case):
    _, report, analysis = case
    jsonschema.validate(report, SCHEMA)
    again = analyze(Path(report["job"]["path"])).report.to_dict()
    assert json.dumps(again, sort_keys=True) == json.dumps(report, sort_keys=True)
    evidence_files = {e["file"] for f in report["findings"] for e in f["evidence"]}
    assert all(not Path(p).is_absolute() for p in evidence_files)
    assert evidence_files <= set(analysis.timeline.frame["file"].unique().to_list())


HEALTHY = [p for p in SCENARIOS if load_expected(p)["category"] == "healthy"]


@pytest.mark.parametrize("scenario", HEALTHY, ids=[f"{p.parent.name}/{p.name}" for p in HEALTHY])
def test_no_critical_finding_on_healthy_runs(scenario: Path):
    report = analyze(scenario / "job").report
    loud = [f.rule for f in report.findings if SEVERITY_ORDER[f.severity] >= SEVERITY_ORDER["error"]]
    assert loud == []


def test_first_failure_points_at_a_real_line(case):
    expected, report, analysis = case
    first = report["verdict"]["first_failure"]
    # a healthy run has no first failure, a failed one has one (a hang may have none), on a real line
    if expected["category"] == "healthy" or expected["status"] == "failed":
        assert (first is None) == (expected["category"] == "healthy")
    if first is None:
        return
    rows = analysis.timeline.frame.filter((pl.col("file") == first["file"]) & (pl.col("line") == first["line"]))
    assert rows.height >= 1
    if rows["kind"][0] == "stack":  # a py-spy frame: the text names the thread and the frame
        assert rows["frame"][0].split(" (")[0] in first["text"]
    else:
        assert first["text"].strip() in rows["message"][0]
