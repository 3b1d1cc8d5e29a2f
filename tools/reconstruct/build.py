"""Write the reconstructed half of the sample corpus (sample_logs/reconstructed).

Usage::

    python tools/reconstruct/build.py --out sample_logs/reconstructed          # write all jobs
    python tools/reconstruct/build.py --out sample_logs/reconstructed --check  # write, then verify
    python tools/reconstruct/build.py --check-only --out sample_logs/reconstructed

The output is deterministic: running it twice gives byte-identical trees (``--check`` builds a
second copy in a temporary directory and compares). ``--check`` also verifies that every seed line
a job promises (see ``verbatim.py``) is present, that expected.json uses known categories and file
families, that every listed file exists, and that the corpus stays under its size budget.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import seed000  # noqa: E402
import seed003  # noqa: E402
import seed004  # noqa: E402
from common import Job  # noqa: E402

#: Corpus size budget for sample_logs/reconstructed (bytes).
SIZE_BUDGET = 6 * 1024 * 1024


def all_jobs() -> list[Job]:
    """Every reconstructed scenario, in a fixed order."""
    return [*seed000.jobs(), *seed003.jobs(), *seed004.jobs()]


def write_all(out: Path) -> list[Job]:
    out.mkdir(parents=True, exist_ok=True)
    jobs = all_jobs()
    for job in jobs:
        job.write(out)
    return jobs


def _contract() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """CATEGORIES and FAMILIES from the postmortem package of this repository."""
    sys.path.insert(0, str(REPO))
    from postmortem.model import CATEGORIES
    from postmortem.schema import FAMILIES

    return CATEGORIES, FAMILIES


def check(out: Path, jobs: list[Job]) -> list[str]:
    """Return a list of problems (empty when the corpus is consistent)."""
    categories, families = _contract()
    problems: list[str] = []
    for job in jobs:
        root = out / job.name
        exp = json.loads((root / "expected.json").read_text(encoding="utf-8"))
        if exp["category"] not in categories:
            problems.append(f"{job.name}: unknown category {exp['category']}")
        for rel, fam in exp["files"].items():
            if fam not in families:
                problems.append(f"{job.name}: {rel}: unknown family {fam}")
            if not (root / rel).is_file():
                problems.append(f"{job.name}: {rel} listed in expected.json but missing")
        listed = set(exp["files"])
        for path in sorted((root / "job").rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in listed:
                problems.append(f"{job.name}: {rel} exists but has no family in expected.json")
        if sorted(exp["last_step"], key=int) != [str(r) for r in exp["ranks"]]:
            problems.append(f"{job.name}: last_step keys do not cover ranks 0..{exp['world_size'] - 1}")
        for rel, text in job.verbatim:
            body = (root / "job" / rel).read_text(encoding="utf-8")
            if text not in body:
                problems.append(f"{job.name}: {rel} lacks seed text {text[:70]!r}")
        # a promised line repeated N times (e.g. one per exhausted rank) must occur N times
        counts: dict[tuple[str, str], int] = {}
        for key in job.verbatim:
            counts[key] = counts.get(key, 0) + 1
        for (rel, text), n in counts.items():
            body = (root / "job" / rel).read_text(encoding="utf-8")
            if n > 1 and body.count(text) != n:
                problems.append(f"{job.name}: {rel} has {body.count(text)} copies of {text[:50]!r}, expected {n}")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    if total > SIZE_BUDGET:
        problems.append(f"corpus is {total} bytes, over the {SIZE_BUDGET} budget")
    with tempfile.TemporaryDirectory() as tmp:
        write_all(Path(tmp))
        for job in jobs:
            cmp = filecmp.dircmp(out / job.name, Path(tmp) / job.name)
            diffs = _diff_files(cmp)
            if diffs:
                problems.append(f"{job.name}: not deterministic, differs in {diffs[:3]}")
    return problems


def _diff_files(cmp: filecmp.dircmp) -> list[str]:
    out = [*cmp.diff_files, *cmp.left_only, *cmp.right_only]
    # dircmp compares shallowly (size and mtime); compare contents for the "same" ones too
    for name in cmp.same_files:
        if not filecmp.cmp(Path(cmp.left) / name, Path(cmp.right) / name, shallow=False):
            out.append(name)
    for sub in cmp.subdirs.values():
        out.extend(_diff_files(sub))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "sample_logs" / "reconstructed")
    parser.add_argument("--check", action="store_true", help="verify the corpus after writing it")
    parser.add_argument("--check-only", action="store_true", help="verify an existing corpus, write nothing")
    args = parser.parse_args(argv)
    if args.check_only:
        jobs = all_jobs()
    else:
        jobs = write_all(args.out)
        size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
        print(f"wrote {len(jobs)} scenarios to {args.out} ({size / 1024:.0f} KiB)")
    if args.check or args.check_only:
        problems = check(args.out, jobs)
        for p in problems:
            print(f"PROBLEM: {p}")
        print("check: OK" if not problems else f"check: {len(problems)} problem(s)")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
