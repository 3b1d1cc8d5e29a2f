"""How well postmortem reads logs nobody here wrote: the wild corpus, per split and per category.

    python tools/eval_wild.py                 # the accuracy table (both splits, beside the keyword baseline)
    python tools/eval_wild.py --failures      # also each train-split case the tool gets wrong
    python tools/eval_wild.py --record        # write sample_logs/wild/accuracy.json (the test's floor)

A case is right when the verdict's category is its label or one of its acceptable alternatives;
its culprits are right when the label names culprits and the verdict names the same ranks.
Failures of the test split are never listed one by one: the test split is not read while rules
are written (sample_logs/wild/README.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "wild"))

from keyword_baseline import classify_job  # noqa: E402

from postmortem.api import analyze  # noqa: E402

WILD = ROOT / "sample_logs" / "wild"
RECORD = WILD / "accuracy.json"


@dataclass(frozen=True)
class Outcome:
    case: str
    split: str
    category: str
    alternatives: tuple[str, ...]
    got: str
    baseline: str
    culprits: tuple[int, ...] | None
    got_culprits: tuple[int, ...]
    summary: str

    @property
    def right(self) -> bool:
        return self.got == self.category or self.got in self.alternatives

    @property
    def baseline_right(self) -> bool:
        return self.baseline == self.category or self.baseline in self.alternatives

    @property
    def culprits_right(self) -> bool | None:
        return None if self.culprits is None else self.culprits == self.got_culprits


def cases(split: str | None = None) -> list[Path]:
    """The case folders of the corpus (of one split), by name."""
    out = []
    for expected in sorted(WILD.glob("*/expected.json")):
        if split is None or json.loads(expected.read_text(encoding="utf-8"))["split"] == split:
            out.append(expected.parent)
    return out


def evaluate(folder: Path) -> Outcome:
    label = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
    try:
        verdict = analyze(folder / "job").report.verdict
        got, got_culprits, summary = verdict.category, tuple(sorted(verdict.culprit_ranks)), verdict.summary
    except Exception as exc:  # a crash is a wrong answer, and says so
        got, got_culprits, summary = "error", (), f"{type(exc).__name__}: {exc}"
    culprits = label.get("culprit_ranks")
    return Outcome(
        case=folder.name,
        split=label["split"],
        category=label["category"],
        alternatives=tuple(label.get("alternatives") or ()),
        got=got,
        baseline=classify_job(folder / "job"),
        culprits=tuple(sorted(culprits)) if culprits is not None else None,
        got_culprits=got_culprits,
        summary=summary,
    )


def accuracy(outcomes: list[Outcome], *, baseline: bool = False) -> float | None:
    if not outcomes:
        return None
    return sum(o.baseline_right if baseline else o.right for o in outcomes) / len(outcomes)


def table(outcomes: list[Outcome]) -> str:
    """Markdown: per category and overall, for each split, the tool beside the baseline."""
    by: dict[str, dict[str, list[Outcome]]] = defaultdict(lambda: defaultdict(list))
    for o in outcomes:
        by[o.category][o.split].append(o)
        by["(all)"][o.split].append(o)
        by["(all)"]["both"].append(o)

    def cell(items: list[Outcome]) -> str:
        if not items:
            return "–"
        return f"{accuracy(items):.2f} / {accuracy(items, baseline=True):.2f} ({len(items)})"

    lines = [
        "| category | train: tool / keywords (n) | test: tool / keywords (n) | both: tool / keywords (n) |",
        "|---|---|---|---|",
    ]
    for category in sorted(by, key=lambda c: (c == "(all)", c)):
        row = by[category]
        both = row["train"] + row["test"] if category != "(all)" else row["both"]
        lines.append(f"| {category} | {cell(row['train'])} | {cell(row['test'])} | {cell(both)} |")
    named = [o for o in outcomes if o.culprits is not None]
    right = sum(bool(o.culprits_right) for o in named)
    healthy_failed = [o for o in outcomes if o.category == "healthy" and not o.right]
    lines.append("")
    lines.append(f"Culprits right on {right} of {len(named)} cases whose label names them; "
                 f"healthy logs called failed: {len(healthy_failed)} of {sum(o.category == 'healthy' for o in outcomes)}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--failures", action="store_true", help="list the train-split cases the tool gets wrong")
    parser.add_argument("--record", action="store_true", help=f"write the accuracies to {RECORD.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    outcomes = [evaluate(folder) for folder in cases()]
    print(table(outcomes))
    print(f"\n{len(outcomes)} cases in {time.perf_counter() - start:.1f} s")
    if args.failures:
        print("\nTrain-split cases the tool gets wrong (label -> verdict; keywords):")
        for o in outcomes:
            if o.split == "train" and not o.right:
                print(f"  {o.case}: {o.category} -> {o.got}; keywords {o.baseline}\n      {o.summary[:160]}")
    if args.record:
        test = [o for o in outcomes if o.split == "test"]
        record = {
            # the count is the floor the test compares (a rounded fraction could sit above the truth)
            "test_right": sum(o.right for o in test),
            "test": round(accuracy(test) or 0.0, 4),
            "train": round(accuracy([o for o in outcomes if o.split == "train"]) or 0.0, 4),
            "all": round(accuracy(outcomes) or 0.0, 4),
            "test_cases": len(test),
            "cases": len(outcomes),
        }
        RECORD.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {RECORD.relative_to(ROOT)}: {record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
