"""Start a wild-corpus case: its folder, an expected.json to fill in, and its split, drawn now.

    python tools/wild/new_case.py deepspeed-5302-zero3-eval-hang --source https://github.com/...

A fifth of the cases, drawn at random when they are added (here, once), form the *test split*:
labelled like the others but not read while rules are written, so that their accuracy measures
what the rules learned from other logs. The draw is recorded in expected.json and never redrawn.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
from datetime import date
from pathlib import Path

WILD = Path(__file__).resolve().parents[2] / "sample_logs" / "wild"
_CASE_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
TEST_FRACTION = 5  # one case in five


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", help="lower-case kebab id: <project>-<thread number or doc>-<what happened>")
    parser.add_argument("--source", required=True, help="the address of the thread or document the lines come from")
    parser.add_argument("--project", required=True, help="the project whose user posted the log, e.g. deepspeed")
    args = parser.parse_args(argv)
    if not _CASE_ID.match(args.case):
        print(f"case id should be lower-case kebab (got {args.case!r})", file=sys.stderr)
        return 2
    folder = WILD / args.case
    if folder.exists():
        print(f"{folder} exists already", file=sys.stderr)
        return 2
    (folder / "job").mkdir(parents=True)
    expected = {
        "source": args.source,
        "project": args.project,
        "split": "test" if secrets.randbelow(TEST_FRACTION) == 0 else "train",
        "added": date.today().isoformat(),
        "status": None,
        "category": None,
        "alternatives": [],
        "culprit_ranks": None,
        "world_size": None,
        "tags": [],
        "why": None,
    }
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n", encoding="utf-8")
    print(f"{folder}: split {expected['split']}; put the verbatim lines under job/ and fill in expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
