"""postmortem: explain why a distributed training job crashed or hung."""

from __future__ import annotations

__version__ = "0.1.0"
