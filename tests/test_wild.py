"""The wild corpus (sample_logs/wild/): well-formed cases, independent sources, and the test split's floor.

The test split is labelled but not read while rules are written; its accuracy is recorded in
``sample_logs/wild/accuracy.json`` (``python tools/eval_wild.py --record``) and must not fall.
A failure here names no test-split case: it gives the number only, so that reading the test
output does not read the split.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys

import pytest

from postmortem.model import CATEGORIES
from tests.conftest import REPO, SAMPLES

sys.path.insert(0, str(REPO / "tools"))
import eval_wild

WILD = SAMPLES / "wild"
LABELS = {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(WILD.glob("*/expected.json"))}
STATUSES = ("failed", "hung", "completed")
TAGS = {"multi_rank", "ascend", "healthy", "slow", "single_process"}
#: SHA-256 of each thread held out for independent evaluation (tools/wild/held_out_digest.py)
HELD_OUT = set((REPO / "tests" / "data" / "held_out.sha256").read_text(encoding="utf-8").split())
#: a GitHub thread, as an address or as owner/repo#number
_THREAD = re.compile(
    r"github\.com/(?P<repo>[\w.-]+/[\w.-]+)/(?:issues|pull|discussions)/(?P<n>\d+)|(?P<repo2>[\w.-]+/[\w.-]+)#(?P<n2>\d+)"
)


def test_the_corpus_is_big_and_broad_enough() -> None:
    labels = list(LABELS.values())
    tags = [t for label in labels for t in label["tags"]]
    assert len(labels) >= 120
    assert len({label["project"] for label in labels}) >= 15
    assert tags.count("healthy") + tags.count("slow") >= 20
    assert tags.count("multi_rank") >= 30 and tags.count("ascend") >= 15
    assert sum(label["split"] == "test" for label in labels) >= len(labels) // 8


@pytest.mark.parametrize("case", sorted(LABELS))
def test_case_is_well_formed(case: str) -> None:
    label = LABELS[case]
    assert label["split"] in ("train", "test")
    assert label["status"] in STATUSES
    assert label["category"] in CATEGORIES
    assert all(a in CATEGORIES and a != label["category"] for a in label["alternatives"])
    assert set(label["tags"]) <= TAGS
    assert label["source"].startswith(("https://", "http://"))
    assert label["why"] and len(label["why"]) > 40
    assert label["culprit_ranks"] is None or all(isinstance(r, int) for r in label["culprit_ranks"])
    files = [p for p in (WILD / case / "job").rglob("*") if p.is_file()]
    assert files, "the case has no log lines under job/"


def _threads(text: str) -> set[str]:
    out = set()
    for m in _THREAD.finditer(text):
        repo, number = (m.group("repo"), m.group("n")) if m.group("repo") else (m.group("repo2"), m.group("n2"))
        out.add(f"{repo.lower()}#{int(number)}")
    return out


def test_nothing_cites_a_held_out_thread() -> None:
    """Rules, wild cases, tests and docs never use the threads kept for independent evaluation."""
    assert len(HELD_OUT) > 50
    offenders = []
    for folder in ("rules", "sample_logs", "tests", "tools", "templates", "postmortem"):
        for path in sorted((REPO / folder).rglob("*")):
            if not path.is_file() or path.suffix in (".pkl", ".pyc", ".gz", ".zst", ".parquet"):
                continue
            text = path.read_bytes().decode("utf-8", errors="replace")
            for thread in _threads(text):
                if hashlib.sha256(thread.encode()).hexdigest() in HELD_OUT:
                    offenders.append(f"{path.relative_to(REPO)}: {thread}")
    offenders += [f"README.md: {t}" for t in _threads((REPO / "README.md").read_text(encoding="utf-8"))
                  if hashlib.sha256(t.encode()).hexdigest() in HELD_OUT]
    assert offenders == []


def test_one_case_per_thread() -> None:
    sources = [label["source"].rstrip("/") for label in LABELS.values()]
    assert sorted(s for s in set(sources) if sources.count(s) > 1) == []


def test_test_split_accuracy_does_not_fall() -> None:
    record = json.loads((WILD / "accuracy.json").read_text(encoding="utf-8"))
    outcomes = [eval_wild.evaluate(folder) for folder in eval_wild.cases("test")]
    # numbers only, computed before any assert: pytest prints what an assert compares, and the cases
    # of the test split are not read while rules are written
    cases, right, crashed = len(outcomes), sum(o.right for o in outcomes), sum(o.got == "error" for o in outcomes)
    del outcomes
    assert cases == record["test_cases"], "the test split changed: record it again (tools/eval_wild.py --record)"
    assert right >= record["test_right"], f"test split: {right} of {cases} right, floor {record['test_right']}"
    assert crashed == 0, "the analysis crashed on a test-split case"
