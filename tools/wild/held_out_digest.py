"""Write the digests of the threads held out for independent evaluation, for tests/test_wild.py.

    python tools/wild/held_out_digest.py PATH/TO/held-out-sources.md

The list of held-out threads lives outside this repository and must not be copied into it; its
SHA-256 digests can be, so that a test fails when a rule, a wild case or a test cites one of
them, without the repository naming them. Each line of the list of the form ``owner/repo#number``
is normalised (lower case) and hashed; the digests go to tests/data/held_out.sha256, sorted.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "held_out.sha256"
THREAD = re.compile(r"^([\w.-]+/[\w.-]+)#(\d+)$")


def digest(repo: str, number: str) -> str:
    """The digest of one thread, ``owner/repo#number`` in lower case."""
    return hashlib.sha256(f"{repo.lower()}#{int(number)}".encode()).hexdigest()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    digests = sorted(
        {digest(m.group(1), m.group(2)) for line in Path(argv[0]).read_text(encoding="utf-8").splitlines()
         if (m := THREAD.match(line.strip()))}
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(d + "\n" for d in digests), encoding="utf-8")
    print(f"wrote {len(digests)} digests to {OUT.relative_to(OUT.parents[2])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
