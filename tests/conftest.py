"""Shared fixtures: paths of the repository's sample corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_logs"


#: The sample corpus' parts with a full ground truth (the wild corpus has its own test, tests/test_wild.py).
CORPUS_PARTS = ("real", "reconstructed")


def corpus_scenarios() -> list[Path]:
    """Every scenario directory of the sample corpus (those with an expected.json)."""
    return sorted(p.parent for part in CORPUS_PARTS for p in (SAMPLES / part).glob("*/expected.json"))


def load_expected(scenario: Path) -> dict:
    return json.loads((scenario / "expected.json").read_text(encoding="utf-8"))


@pytest.fixture
def write_job(tmp_path: Path):
    """Write {relative path: text or bytes} into a fresh job directory and return it."""

    def write(files: dict[str, str | bytes]) -> Path:
        job = tmp_path / "job"
        for rel, content in files.items():
            path = job / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
        return job

    return write
