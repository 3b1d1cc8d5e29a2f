"""Consistency checks for ``sample_logs/real`` and the generator's data helpers (no torch needed).

Run with the dev venv: ``python -m pytest tools/corpus -q``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REAL = REPO / "sample_logs" / "real"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from data_utils import (  # noqa: E402
    batches_per_rank,
    doc_starting_in_batch,
    iter_shard,
    node_split,
    packed_batches,
    synth_records,
    write_jsonl,
)

from postmortem.model import CATEGORIES  # noqa: E402
from postmortem.schema import FAMILIES  # noqa: E402

KEYS = {
    "origin", "source", "status", "category", "culprit_ranks", "first_failing_rank",
    "first_failing_step", "world_size", "nodes", "ranks", "last_step", "files", "rules", "facts",
}  # fmt: skip
SCENARIOS = sorted(p.parent for p in REAL.glob("*/expected.json"))


def test_corpus_has_every_scenario() -> None:
    names = {p.name for p in SCENARIOS}
    assert {"uneven_data_hang", "collective_mismatch", "rank_exception", "sigkill_rank", "sigsegv_rank",
            "straggler", "nan_loss", "healthy", "healthy_hf", "rendezvous_failure", "two_node_failure",
            "seed004_two_nodes_hang", "seed004_one_node_ok"} <= names  # fmt: skip


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_expected_json_is_consistent(scenario: Path) -> None:
    exp = json.loads((scenario / "expected.json").read_text())
    assert set(exp) == KEYS
    assert exp["origin"] == "real"
    assert exp["status"] in ("completed", "failed", "hung")
    assert exp["category"] in CATEGORIES
    # rule ids are curated by hand in sample_logs/expected_rules.json and merged by the generator
    curated = json.loads((scenario.parent.parent / "expected_rules.json").read_text())
    assert exp["rules"] == curated.get(f"real/{scenario.name}", [])
    assert (scenario / "README.md").is_file() and (scenario / "job").is_dir()
    ranks = set(exp["ranks"])
    assert set(exp["culprit_ranks"]) <= ranks
    assert {int(k) for k in exp["last_step"]} <= ranks
    if exp["first_failing_rank"] is not None:
        assert exp["first_failing_rank"] in exp["culprit_ranks"]
    if exp["category"] == "healthy":
        assert exp["status"] == "completed" and not exp["culprit_ranks"]
    for rel, family in exp["files"].items():
        assert family in FAMILIES, rel
        assert (scenario / rel).is_file() and (scenario / rel).stat().st_size > 0, rel


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_no_machine_paths_leak(scenario: Path) -> None:
    for f in (scenario / "job").rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            for needle in (b"/work/", b"pmcorpus-", b"/root/.pyenv", b"venv-torch"):
                assert needle not in data, f"{f}: {needle!r}"


def test_corpus_size_budget() -> None:
    total = sum(p.stat().st_size for p in REAL.rglob("*") if p.is_file())
    assert total <= 12 * 1024 * 1024


def test_bad_record_lands_in_the_promised_batch(tmp_path: Path) -> None:
    recs = synth_records(800, seed=7)
    world, rank, step, seq = 4, 2, 9, 256
    i = doc_starting_in_batch(recs, world, rank, step, seq)
    assert i % world == rank
    recs[i]["content"] = recs[i].pop("text")
    path = tmp_path / "d.jsonl"
    write_jsonl(path, recs)
    got = []
    with pytest.raises(KeyError, match="text"):
        for b in packed_batches(iter_shard(path, rank, world), seq):
            got.append(b)
    # the packer fails while it builds batch `step`: exactly step - 1 batches came out
    assert len(got) == step - 1


def test_uneven_shards_of_the_hang_scenario() -> None:
    # the constants generate.py uses for uneven_data_hang
    counts = [len(b) for b in batches_per_rank(synth_records(3251, 130), 8, 512)]
    assert counts == [42, 42, 40, 40, 43, 41, 41, 43]


def test_seed004_eval_splits() -> None:
    recs = synth_records(6600, 101)
    assert len(node_split(recs, 1, 0, 512, 0.05)[1]) == 40
    assert [len(node_split(recs, 2, n, 512, 0.05)[1]) for n in (0, 1)] == [20, 21]
