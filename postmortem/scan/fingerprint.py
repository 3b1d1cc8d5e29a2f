"""A failure fingerprint: the same kind of failure gets the same short id in every job.

The fingerprint is the SHA-1 of a canonical text made of what identifies the failure kind and
nothing that identifies the job:

* the verdict's status and category;
* the rule ids of the primary findings (``#2`` suffixes dropped, sorted, unique); a report
  without primary findings falls back to its most severe findings' rules;
* the primary findings' kind fields (exception type, collective op type, signal name), masked.

Masking replaces what varies from job to job inside those values (paths, IP addresses and
ports, host-like dotted names, hex ids, free-standing numbers) so that, say, an OOM on step 77
of node-a and one on step 12 of node-q share a fingerprint, while ``ERR02002`` and ``EI0002``
(codes, not counts) stay distinct.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from postmortem.model import SEVERITY_ORDER, Report

#: Finding fields that name the kind of failure (not where or when it happened).
KIND_FIELDS: tuple[str, ...] = ("exc_name", "exc_type", "op_type", "signal", "signal_name", "worker_signal")
#: Rules taken when there is no primary finding.
FALLBACK_RULES = 3

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@+-]+){2,}[\\/]?"), "<path>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"\b[a-z][\w-]*(?:\.[a-z][\w-]*)+\.(?:com|net|org|local|internal|cluster|svc|lan)\b", re.I), "<host>"),
    (re.compile(r"\b0[xX][0-9A-Fa-f]+\b"), "<hex>"),
    (re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.])"), "N"),
    (re.compile(r"\s+"), " "),
)


def mask(text: str) -> str:
    """``text`` with paths, addresses, hosts, hex ids and free-standing numbers masked."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text.strip()


def fingerprint_text(report: Report) -> str:
    """The canonical text the fingerprint hashes (kept in the outputs so a reader can see it)."""
    verdict = report.verdict
    primary = [f for f in report.findings if f.role == "primary"]
    if not primary:
        ranked = sorted(report.findings, key=lambda f: -SEVERITY_ORDER.get(f.severity, 0))
        primary = [f for f in ranked if f.severity in ("critical", "error")][:FALLBACK_RULES]
    rules = sorted({f.rule.split("#", 1)[0] for f in primary})
    kinds = sorted({f"{key}={mask(str(f.fields[key]))}" for f in primary for key in KIND_FIELDS if _present(f.fields, key)})
    parts = [f"status={verdict.status}", f"category={verdict.category}", "rules=" + ",".join(rules)]
    if kinds:
        parts.append("kinds=" + ",".join(kinds))
    return ";".join(parts)


def fingerprint(report: Report) -> tuple[str, str]:
    """(short fingerprint id, canonical text) for ``report``."""
    text = fingerprint_text(report)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12], text


def _present(fields: dict[str, Any], key: str) -> bool:
    value = fields.get(key)
    return value is not None and str(value).strip() != ""
