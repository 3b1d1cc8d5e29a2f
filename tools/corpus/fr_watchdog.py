"""A stall watchdog that dumps the PyTorch flight recorder before the process-group timeout.

Shared by the corpus training scripts. ``TORCH_FR_BUFFER_SIZE`` must be set (e.g. 2000) for
the recorder to hold entries; the dump functions are private torch APIs that exist in
torch 2.13 (``torch._C._distributed_c10d._dump_fr_trace`` / ``_dump_fr_trace_json``) and
work with the gloo backend.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

logger = logging.getLogger(__name__)


class StallWatchdog(threading.Thread):
    """Dump the flight recorder when the training step stops advancing for a while.

    Runs before the process-group timeout fires, so the dump shows the collective each rank
    is blocked in while it is still blocked.
    """

    def __init__(self, rank: int, out_dir: Path, stall_s: float, log: logging.Logger = logger) -> None:
        super().__init__(name="stall-watchdog", daemon=True)
        self.log = log
        self.rank = rank
        self.out_dir = out_dir
        self.stall_s = stall_s
        self.last = time.monotonic()
        self.step = 0
        self.dumped = False
        self.armed = False  # start-up (imports, first batch) is slow and not a stall
        self._lock = threading.Lock()

    def beat(self, step: int) -> None:
        """Record progress (a finished step, micro-step or eval batch)."""
        self.last = time.monotonic()
        self.step = step
        self.armed = True

    def dump(self, reason: str) -> None:
        """Write ``rank<N>.pkl`` and ``rank<N>.json`` once; later calls do nothing."""
        with self._lock:
            if self.dumped:
                return
            self.dumped = True
            from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

            self.out_dir.mkdir(parents=True, exist_ok=True)
            pkl = self.out_dir / f"rank{self.rank}.pkl"
            pkl.write_bytes(_dump_fr_trace())
            (self.out_dir / f"rank{self.rank}.json").write_bytes(_dump_fr_trace_json())
            self.log.warning("%s after step %d: flight recorder dumped to %s", reason, self.step, pkl)

    def run(self) -> None:
        """Poll twice a second; dump once progress has stalled for ``stall_s`` seconds."""
        while not self.dumped:
            time.sleep(0.5)
            idle = time.monotonic() - self.last
            if self.armed and idle >= self.stall_s:
                self.dump(f"no training progress for {idle:.1f}s")
