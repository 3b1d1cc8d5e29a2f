"""Timeline-level facts over every job of the sample corpus, checked against its expected.json."""

from __future__ import annotations

import functools
from pathlib import Path

import polars as pl
import pytest

from postmortem.api import load_timeline
from postmortem.inventory import job_info, rank_progress
from postmortem.timeline import Timeline
from tests.conftest import corpus_scenarios, load_expected

SCENARIOS = corpus_scenarios()


def _ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.name}" for p in paths]


def _stating(key: str) -> list[Path]:
    """The scenarios whose ground truth states ``key`` (not every job names its ranks or steps)."""
    def states(value: object) -> bool:
        return any(v is not None for v in value.values()) if isinstance(value, dict) else bool(value)

    return [p for p in SCENARIOS if states(load_expected(p).get(key))]


@functools.cache
def _timeline(path: Path) -> Timeline:
    return load_timeline(path / "job")


@pytest.fixture(scope="module", params=SCENARIOS, ids=_ids(SCENARIOS))
def scenario(request):
    path: Path = request.param
    return path, load_expected(path), _timeline(path)


def _each(key: str):
    return pytest.mark.parametrize("scenario", [(p, load_expected(p), None) for p in _stating(key)], ids=_ids(_stating(key)))


def test_corpus_is_present():
    kinds = {p.parent.name for p in SCENARIOS}
    assert {"real", "reconstructed"} <= kinds
    assert len(SCENARIOS) >= 20


@_each("ranks")
def test_ranks_found(scenario):
    path, expected, _ = scenario
    timeline = _timeline(path)
    info = job_info(timeline)
    assert set(expected["ranks"]) <= set(info.ranks), f"missing ranks: {sorted(set(expected['ranks']) - set(info.ranks))}"
    if expected.get("world_size"):
        assert info.world_size == expected["world_size"]


@_each("last_step")
def test_last_step_per_rank(scenario):
    path, expected, _ = scenario
    timeline = _timeline(path)
    wanted = {int(k): v for k, v in expected["last_step"].items() if v is not None}
    assert wanted
    got = dict(rank_progress(timeline.frame).select("rank", "last_step").iter_rows())
    assert {r: got.get(r) for r in wanted} == wanted


@_each("files")
def test_files_by_family(scenario):
    path, expected, _ = scenario
    timeline = _timeline(path)
    wanted = expected["files"]
    families = {f"job/{f.rel}": f.family for f in timeline.inventory.files}
    families.update({f"job/{s.rel}": "skipped: " + s.reason for s in timeline.inventory.skipped})
    got = {rel: families.get(rel, "not found") for rel in wanted}
    # flight-recorder dumps are recognised and reported as skipped until they are analyzed
    got = {rel: ("flight_recorder" if fam.startswith("skipped: flight recorder") else fam) for rel, fam in got.items()}
    assert got == wanted


def test_every_file_is_parsed_or_explained(scenario):
    _, _, timeline = scenario
    assert timeline.frame.height > 0
    assert set(timeline.frame["kind"].unique().to_list()) <= {
        "error", "warning", "progress", "lifecycle", "collective", "stack", "info",
    }
    # every row of a per-rank file carries a rank (nothing is guessed silently: the source is named)
    attributed = timeline.frame.filter(pl.col("rank").is_not_null())
    assert attributed["rank_source"].null_count() == 0
