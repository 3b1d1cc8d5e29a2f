"""The floor we must beat: an ordered list of keyword regexes over a job's text, first match wins.

This is what an engineer would write in ten minutes with grep, and what the product is measured
against on the wild corpus (``tools/eval_wild.py``). It was written from general knowledge of
these failures, not from the corpus, and is not tuned: changing it to look better than it is
would only hide how far the product is ahead or behind.
"""

from __future__ import annotations

import re
from pathlib import Path

#: (category, pattern), tried in order on the whole text of the job; no match means healthy.
KEYWORDS: tuple[tuple[str, str], ...] = (
    ("device_oom", r"CUDA out of memory|OutOfMemoryError|NPU out of memory|HBM.*out of memory"),
    ("host_oom", r"Killed process|oom-kill|OOMKilled|MemoryError|Cannot allocate memory|bad_alloc|exitcode\s*:\s*-9\b"),
    ("collective_mismatch", r"mismatch between collectives|CollectiveFingerPrint"),
    ("accelerator_error", r"illegal memory access|device-side assert|ECC error|\bXid\b|fallen off the bus"),
    ("native_crash", r"Segmentation fault|SIGSEGV|core dumped|SIGABRT|Bus error|exitcode\s*:\s*-11\b"),
    ("environment_config", r"No module named|ImportError|undefined symbol|not compiled with"),
    ("storage_error", r"No space left|Permission denied|Stale file handle|Input/output error"),
    ("numerical_instability", r"(?i)\bnan\b|loss scale.*minimum|OVERFLOW"),
    ("comm_init_failure", r"(?i)rendezvous|TCPStore|init_process_group|ncclUniqueId|Address already in use"),
    ("network_failure", r"Connection reset|Connection closed by|NET/IB|ibv_|Connection refused"),
    ("collective_timeout", r"(?i)Watchdog caught collective|timed out|Timeout\(ms\)|EI0002"),
    ("job_cancelled", r"CANCELLED|DUE TO TIME LIMIT|(?i:preempt)|SIGTERM|KeyboardInterrupt"),
    ("hang_unknown", r"(?i)\bhang(?:s|ing)?\b|\bstuck\b|\bhung\b"),
    ("rank_exception", r"Traceback \(most recent call last\)|\w+Error:|\w+Exception:"),
)
_COMPILED = tuple((category, re.compile(pattern)) for category, pattern in KEYWORDS)


def classify_text(text: str) -> str:
    """The first category whose keywords occur in ``text``; ``healthy`` when none does."""
    for category, pattern in _COMPILED:
        if pattern.search(text):
            return category
    return "healthy"


def classify_job(job: Path) -> str:
    """:func:`classify_text` over every file under ``job``, as one text."""
    parts = []
    for path in sorted(p for p in job.rglob("*") if p.is_file()):
        parts.append(path.read_bytes().decode("utf-8", errors="replace"))
    return classify_text("\n".join(parts))
