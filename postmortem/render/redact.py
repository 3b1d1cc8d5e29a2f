"""``--redact``: stable placeholders for what identifies a site, before a report leaves the company.

Replaced, consistently across the report and the timeline (so every chart, table and evidence
line agrees):

* host names the logs attribute events to (``node``/``host`` columns, the job's and findings'
  nodes), fully qualified or short: ``node-1``, ``node-2`` ...
* IPv4 addresses anywhere in the text: ``10.x.x.1``, ``10.x.x.2`` ... (loopback and 0.0.0.0 stay:
  they identify nothing and matter for diagnosis);
* user names in home directories: ``/home/alice`` → ``/home/user1`` (also ``/Users/``, ``C:\\Users\\``);
* e-mail addresses: ``email1@redacted.invalid``.

Placeholders are numbered in sorted order of the originals, so the same input always gives the
same output. Every replacement is one literal pass, longest original first, done the same way in
Python (the report) and in polars (the timeline). Identifiers that come from our own rules (ids,
categories, severities, reference URLs) are left alone.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable
from typing import Any

import polars as pl

from postmortem.model import Evidence, Report

#: Timeline columns that carry text from the logs.
TEXT_COLUMNS = ("file", "node", "host", "message", "thread", "frame", "pg")
#: Report fields that hold our own identifiers, never log text.
KEEP_FIELDS = frozenset(
    {
        "id",
        "rule",
        "category",
        "severity",
        "role",
        "caused_by",
        "rule_role",
        "state",
        "status",
        "confidence",
        "waits_in",
        "references",
        "tool_version",
    }
)
#: Host names that identify nothing.
KEEP_HOSTS = frozenset({"localhost", "localhost.localdomain", "127.0.0.1", "::1", "0.0.0.0", "unknown"})

# Rust-regex compatible (no look-around): the timeline is scanned with polars.
_IPV4 = r"\b(?:\d{1,3}\.){3}\d{1,3}\b"
_EMAIL = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
_HOME = r"(?:/home/|/Users/|[A-Za-z]:\\Users\\)[^/\\\s:'\"()\[\],;]+"
_PATTERNS = (_EMAIL, _HOME, _IPV4)


def redact(report: Report, timeline: pl.DataFrame) -> tuple[Report, pl.DataFrame]:
    """Copies of ``report`` and ``timeline`` with hosts, IPs, home-directory users and e-mails replaced."""
    redactor = Redactor.learn(report, timeline)
    return redactor.report(report), redactor.frame(timeline)


class Redactor:
    """A fixed mapping from sensitive strings to placeholders, applied to text, reports and frames."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping
        # longest first, then alphabetical: leftmost-first alternation then prefers the longest
        self._keys = sorted(mapping, key=lambda k: (-len(k), k))
        self._regex = re.compile("|".join(re.escape(k) for k in self._keys)) if self._keys else None

    @classmethod
    def learn(cls, report: Report, timeline: pl.DataFrame) -> Redactor:
        """Collect every sensitive string in the report and the timeline and number them."""
        texts = list(_strings(report))
        columns = [c for c in TEXT_COLUMNS if c in timeline.columns]
        found: dict[str, set[str]] = {"email": set(), "home": set(), "ip": set()}
        for kind, pattern in zip(found, _PATTERNS, strict=True):
            regex = re.compile(pattern)
            for text in texts:
                found[kind].update(regex.findall(text))
            for col in columns:
                hits = timeline.select(pl.col(col).str.extract_all(pattern).explode().drop_nulls().unique())
                found[kind].update(hits.to_series().to_list())
        hosts = set(report.job.nodes)
        hosts.update(r.node for r in report.ranks if r.node)
        for f in report.findings:
            hosts.update(f.nodes)
        for col in ("node", "host"):
            if col in timeline.columns:
                hosts.update(timeline[col].drop_nulls().unique().to_list())
        return cls(_mapping(found["email"], found["home"], found["ip"], hosts))

    def text(self, text: str) -> str:
        """``text`` with every known sensitive string replaced."""
        if self._regex is None or not text:
            return text
        return self._regex.sub(lambda m: self.mapping[m.group(0)], text)

    def text_span(self, text: str, span: tuple[int, int] | None) -> tuple[str, tuple[int, int] | None]:
        """Redact ``text`` and move ``span`` with it; an edge inside a replaced string widens to cover it."""
        if self._regex is None:
            return text, span
        out: list[str] = []
        moves: list[tuple[int, int, int, int]] = []  # (old start, old end, new start, new end)
        pos = length = 0
        for m in self._regex.finditer(text):
            out.append(text[pos : m.start()])
            length += m.start() - pos
            replacement = self.mapping[m.group(0)]
            moves.append((m.start(), m.end(), length, length + len(replacement)))
            out.append(replacement)
            length += len(replacement)
            pos = m.end()
        out.append(text[pos:])
        if span is None:
            return "".join(out), None

        def move(p: int, is_end: bool) -> int:
            shift = 0
            for old_start, old_end, new_start, new_end in moves:
                if p <= old_start:
                    break
                if p < old_end:
                    return new_end if is_end else new_start
                shift = new_end - old_end
            return p + shift

        return "".join(out), (move(span[0], False), move(span[1], True))

    def value(self, value: Any, name: str = "") -> Any:
        """Redact any report value: strings, containers, dataclasses (not our identifier fields)."""
        if name in KEEP_FIELDS:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Evidence):
            text, span = self.text_span(value.text, value.span)
            return dataclasses.replace(
                value,
                file=self.text(value.file),
                text=text,
                span=span,
                context=[(n, self.text(t)) for n, t in value.context],
            )
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {f.name: self.value(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
            return dataclasses.replace(value, **changes)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.value(v) for v in value)
        if isinstance(value, (set, frozenset)):
            return type(value)(self.value(v) for v in value)
        return value

    def report(self, report: Report) -> Report:
        """A redacted copy of ``report``."""
        return self.value(report)  # type: ignore[no-any-return]

    def frame(self, timeline: pl.DataFrame) -> pl.DataFrame:
        """A redacted copy of the timeline (vectorised: one literal multi-replace per text column)."""
        if not self._keys:
            return timeline
        values = [self.mapping[k] for k in self._keys]
        return timeline.with_columns(
            pl.col(c).str.replace_many(self._keys, values, leftmost=True)
            for c in TEXT_COLUMNS
            if c in timeline.columns
        )


def _mapping(
    emails: Iterable[str], homes: Iterable[str], ips: Iterable[str], hosts: Iterable[str]
) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for i, email in enumerate(sorted(set(emails)), 1):
        mapping[email] = f"email{i}@redacted.invalid"
    users: dict[str, str] = {}
    for home in sorted(set(homes), key=lambda h: (_split_home(h)[1], h)):  # numbered by user name
        prefix, user = _split_home(home)
        users.setdefault(user, f"user{len(users) + 1}")
        mapping[home] = prefix + users[user]
    valid = []
    for ip in set(ips):
        try:
            addr = ipaddress.IPv4Address(ip)
        except ValueError:
            continue  # 999.1.2.3 is a version string or a counter, not an address
        if not (addr.is_loopback or addr.is_unspecified or addr == ipaddress.IPv4Address("255.255.255.255")):
            valid.append(addr)
    for i, addr in enumerate(sorted(valid), 1):
        mapping[str(addr)] = f"10.x.x.{i}"
    # a fully qualified name and its short form are one host
    short_names: dict[str, str] = {}
    for host in sorted({h for h in hosts if h and h not in KEEP_HOSTS and h not in mapping and len(h) >= 2}):
        if _is_ipv4(host):
            continue
        short = host.split(".", 1)[0]
        short_names.setdefault(short, f"node-{len(short_names) + 1}")
        mapping[host] = short_names[short]
        if short != host and len(short) >= 2 and short not in KEEP_HOSTS:
            mapping.setdefault(short, short_names[short])
    return mapping


def _split_home(home: str) -> tuple[str, str]:
    cut = max(home.rfind("/"), home.rfind("\\")) + 1
    return home[:cut], home[cut:]


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _strings(value: Any, name: str = "") -> Iterable[str]:
    """Every string in a report value (dict keys included), skipping our identifier fields."""
    if name in KEEP_FIELDS:
        return
    if isinstance(value, str):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name), f.name)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _strings(v)
