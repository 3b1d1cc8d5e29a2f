"""postmortem: explain why a distributed training job crashed or hung."""

from __future__ import annotations

import os
import sys

__version__ = "0.1.0"

# polars' allocator (jemalloc) hands freed pages back lazily (MADV_FREE, after polars' default
# muzzy_decay_ms:1000), and such pages count in the process's RSS, and in a container's memory
# use, until the kernel runs short: building a big job's timeline peaked 300 MB higher. Returning
# them at once cost no measurable time. polars appends this override to its defaults when it
# loads (pola-rs/polars#18088), so it is set before any module imports polars, and never over the
# user's own setting.
if "polars" not in sys.modules:
    os.environ.setdefault("_RJEM_MALLOC_CONF", "muzzy_decay_ms:0")
