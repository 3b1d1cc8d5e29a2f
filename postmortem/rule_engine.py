"""Failure-signature rules: load TOML rule files, validate them, compile them, match a timeline.

A rule is data (``rules/<group>/<id>.toml``, format in ``rules/README.md``). Loading checks
every field and compiles every pattern with polars, so a bad rule fails at load with a message
naming the file, the field and why, never in the middle of an analysis.

Matching is compiled, so adding rules does not add passes over the timeline:

1. at load, each rule gets a set of *required literals*, strings one of which every match of
   the rule contains (read from its patterns: ``Watchdog caught collective operation timeout:
   WorkNCCL(``, ``'loss': nan`` ...). All rules' literals form one alternation that the regex
   engine runs as an Aho-Corasick/SIMD literal search over ``message`` in a single pass, for
   line and record rules at once; its cost hardly depends on the number of rules. Rules whose
   patterns give no usable literal fall back to a regex prefilter of their own;
2. on the few candidate rows (and the records holding one), one ``select`` evaluates every
   rule's full condition (``any`` / ``all`` / ``not``, family, kind and level limits);
3. Python ``regex`` runs only on matched rows: ``confirm`` patterns, named-group extraction
   (``extract``) for fields and messages, evidence highlighting.

Aggregate rules (``[aggregate]``) then compare the matched rows across ranks or nodes.
"""

from __future__ import annotations

import os
import string
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import polars as pl
import regex

from postmortem.errors import RuleError
from postmortem.model import CATEGORIES, Evidence, Finding
from postmortem.ranges import format_ranks
from postmortem.rule_patterns import (
    combined,
    polars_pattern,
    py_compile,
    py_flags,
    required_literals,
)
from postmortem.schema import FAMILIES, KINDS, LEVELS, TIMELINE_COLUMNS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SEVERITIES: tuple[str, ...] = ("critical", "error", "warning", "info")
ROLES: tuple[str, ...] = ("root", "symptom", "context")
STATUSES: tuple[str, ...] = ("stable", "experimental")
SCOPES: tuple[str, ...] = ("line", "record")
AGGREGATE_BY: tuple[str, ...] = ("rank", "node")
AGGREGATE_CONDITIONS: tuple[str, ...] = ("count_differs", "last_step_differs", "absent", "present_on_some")
#: Headings every built-in rule's explanation carries (checked by tests/test_rules.py).
EXPLANATION_HEADINGS: tuple[str, ...] = (
    "## What it means",
    "## Why it happens",
    "## What a match does not prove",
)
#: os.pathsep-separated extra rule directories.
ENV_VAR = "POSTMORTEM_RULES"
#: Placeholders a message template may use besides named groups and timeline columns.
MESSAGE_KEYS: tuple[str, ...] = ("count", "ranks", "nranks", "nodes", "groups", "detail")

EVIDENCE_PER_RANK = 3
EVIDENCE_MAX = 40
CONTEXT_LINES = 2
#: Patterns per fallback prefilter regex: one huge alternation of complex patterns can push Rust
#: regex off its lazy DFA onto a much slower engine (measured: minutes for 1M lines).
PREFILTER_CHUNK = 32

_ID = regex.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_TOP_KEYS = (
    "id", "title", "category", "severity", "role", "status", "message", "match", "aggregate",
    "explanation", "fix", "references", "aliases", "examples", "source",
)
_MATCH_KEYS = (
    "any", "all", "not", "confirm", "extract", "scope", "families", "kinds", "levels", "ignore_case",
)
_AGGREGATE_KEYS = ("by", "condition", "requires")
_EXAMPLE_KEYS = ("fires", "log", "file", "node", "logs", "note")
_LOG_KEYS = ("file", "log", "node")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class ExampleLog:
    """One file of an inline example: its text, the name it is parsed as, an optional node."""

    log: str
    file: str = "console.log"
    node: str | None = None


@dataclass(frozen=True)
class Example:
    """An inline example: log files that must (``fires``) or must not produce a finding."""

    fires: bool
    logs: tuple[ExampleLog, ...]
    index: int  # 1-based among the rule's examples of the same kind
    note: str = ""

    @property
    def name(self) -> str:
        return f"{'fires' if self.fires else 'quiet'}-{self.index}"


@dataclass(frozen=True)
class Match:
    """The ``[match]`` table: which rows (or records) a rule selects."""

    any: tuple[str, ...] = ()
    all: tuple[str, ...] = ()
    not_: tuple[str, ...] = ()
    confirm: tuple[str, ...] = ()
    #: Python regex patterns searched in matched text only, for named groups (never select)
    extract: tuple[str, ...] = ()
    scope: str = "line"
    families: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    levels: tuple[str, ...] = ()
    ignore_case: bool = False

    @property
    def positive(self) -> tuple[str, ...]:
        return self.any + self.all


@dataclass(frozen=True)
class Aggregate:
    """The ``[aggregate]`` table: a cross-rank or cross-node condition over the matched rows."""

    by: str
    condition: str
    #: absent only: evaluate only when some row matches one of these (default: any progress row)
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    """One validated rule file."""

    id: str
    title: str
    category: str
    severity: str
    role: str
    status: str
    message: str | None
    match: Match
    aggregate: Aggregate | None
    explanation: str
    fix: str
    references: tuple[str, ...]
    examples: tuple[Example, ...]
    path: Path
    label: str  # display path used in messages, e.g. "rules/nccl/nccl-watchdog-timeout.toml"
    aliases: tuple[str, ...] = ()
    #: where the matched message is printed: ``owner/repo: path`` of the emitting code, or the
    #: address of a public thread or document that shows it (the TOML ``source``, str or list)
    sources: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        """The folder the rule file sits in (its vendor or layer)."""
        return self.path.parent.name

    def py_patterns(self) -> list[regex.Pattern[str]]:
        """Positive patterns compiled with Python ``regex`` (for fields and highlighting)."""
        return py_compile(self.match.positive, self.match.ignore_case)

    def py_extractors(self) -> list[regex.Pattern[str]]:
        """Positive then ``extract`` patterns: everything named groups are read from."""
        return py_compile(self.match.positive + self.match.extract, self.match.ignore_case)


@dataclass
class ExampleResult:
    """What happened when one inline example was run."""

    rule: str
    example: str  # "fires-1", "quiet-2"
    expected: bool
    fired: bool
    detail: str = ""
    message: str = ""

    @property
    def id(self) -> str:
        return f"{self.rule}-{self.example}"

    @property
    def ok(self) -> bool:
        return self.expected == self.fired and not self.detail


class RuleSet:
    """An ordered, immutable collection of rules keyed by id."""

    def __init__(self, rules: Iterable[Rule], overridden: dict[str, list[str]] | None = None) -> None:
        self._rules: dict[str, Rule] = {}
        for rule in rules:
            self._rules[rule.id] = rule
        #: rule id -> display paths of the definitions a later directory replaced
        self.overridden: dict[str, list[str]] = dict(overridden or {})
        self._plans: dict[str, _Plan] = {}

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._rules.values())

    def __len__(self) -> int:
        return len(self._rules)

    def __contains__(self, rule_id: object) -> bool:
        return rule_id in self._rules

    def get(self, rule_id: str) -> Rule:
        """The rule with this id; :class:`RuleError` when there is none."""
        try:
            return self._rules[rule_id]
        except KeyError:
            raise RuleError(f'no such rule: "{rule_id}"') from None

    def ids(self) -> list[str]:
        return list(self._rules)

    def subset(self, ids: Iterable[str]) -> RuleSet:
        """A rule set holding only the given ids (unknown ids raise :class:`RuleError`)."""
        return RuleSet(self.get(i) for i in ids)

    def keep_pattern(self) -> str | None:
        """One polars regex matching every line some rule's patterns could select.

        For readers that drop uninteresting lines early: a line it does not match cannot be a
        line-scope hit (record-scope rules may still want the record's other lines).
        """
        parts = [p for scope in SCOPES if (p := self._plan(scope).as_regex())]
        if any(r.match.scope == "config" for r in self):  # config rules read launch facts
            from postmortem.config import KEEP_PATTERN

            parts.append(KEEP_PATTERN)
        return "|".join(parts) or None

    def _plan(self, scope: str) -> _Plan:
        if scope not in self._plans:
            self._plans[scope] = _Plan.build([r for r in self if r.match.scope == scope])
        return self._plans[scope]


# --------------------------------------------------------------------------- loading


def builtin_rules_dir() -> Path:
    """The directory of the rules shipped with postmortem."""
    try:
        from postmortem.resources import rules_dir
    except ImportError:  # pragma: no cover - resources.py is part of the package
        return Path(__file__).resolve().parent.parent / "rules"
    return rules_dir()


def load_rules(dirs: Sequence[Path] | None = None, *, builtin: bool = True) -> RuleSet:
    """Load the built-in rules, then ``dirs``, then ``$POSTMORTEM_RULES``; later ids replace earlier.

    Raises :class:`RuleError` naming the file, the field and why for the first bad rule file.
    """
    order: list[Path] = [builtin_rules_dir()] if builtin else []
    order += [Path(d) for d in dirs or ()]
    order += [Path(d) for d in os.environ.get(ENV_VAR, "").split(os.pathsep) if d.strip()]
    rules: dict[str, Rule] = {}
    overridden: dict[str, list[str]] = {}
    for directory in order:
        for rule in load_dir(directory):
            if rule.id in rules:
                overridden.setdefault(rule.id, []).append(rules[rule.id].label)
            rules[rule.id] = rule
    return RuleSet(rules.values(), overridden)


def load_dir(directory: Path) -> list[Rule]:
    """All rules of one directory (searched recursively), in path order."""
    if not directory.is_dir():
        raise RuleError(f"{directory}: rules directory does not exist")
    seen: dict[str, str] = {}
    rules = []
    for path in sorted(directory.rglob("*.toml")):
        if any(part.startswith((".", "_")) for part in path.relative_to(directory).parts):
            continue
        rule = load_rule_file(path, f"{directory.name}/{path.relative_to(directory).as_posix()}")
        if rule.id in seen:
            raise RuleError(f'{rule.label}: "id" should be unique (got {rule.id!r}, also in {seen[rule.id]})')
        seen[rule.id] = rule.label
        rules.append(rule)
    return rules


def load_rule_file(path: Path, source: str | None = None) -> Rule:
    """Read and validate one rule file; ``source`` is how messages name it."""
    source = source or path.as_posix()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise RuleError(f"{source}: not UTF-8 text ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{source}: not valid TOML ({exc})") from None
    return _parse_rule(data, path, source)


class _Fields:
    """Typed access to one TOML table; every failure names the file and the dotted field."""

    def __init__(self, source: str, data: dict[str, Any], prefix: str = "") -> None:
        self.source, self.data, self.prefix = source, data, prefix

    def fail(self, key: str, why: str) -> NoReturn:
        raise RuleError(f'{self.source}: "{self.prefix}{key}" {why}')

    def only(self, known: Sequence[str]) -> None:
        for key in self.data:
            if key not in known:
                hint = ""
                if self.prefix and key in _TOP_KEYS:
                    # TOML puts every key after a [table] header into that table
                    hint = "; top-level fields must come before the first [table] header"
                self.fail(key, f"is not a known field (known: {', '.join(known)}){hint}")

    def text(self, key: str, *, default: str | None = None, choices: Sequence[str] = ()) -> str:
        if key not in self.data:
            if default is None:
                self.fail(key, "is required")
            return default
        value = self.data[key]
        if not isinstance(value, str):
            self.fail(key, f"should be a string (got {type(value).__name__})")
        if choices and value not in choices:
            self.fail(key, f"should be one of {tuple(choices)} (got {value!r})")
        if not choices and not value.strip() and default is None:
            self.fail(key, "should not be empty")
        return value

    def texts(self, key: str, *, choices: Sequence[str] = ()) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(key, f"should be a list of strings (got {_show(value)})")
        for item in value:
            if choices and item not in choices:
                self.fail(key, f"should only hold values from {tuple(choices)} (got {item!r})")
        return tuple(value)

    def one_or_more(self, key: str) -> tuple[str, ...]:
        """A string or a list of strings, as a tuple."""
        value = self.data.get(key, [])
        return (value,) if isinstance(value, str) else self.texts(key)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"should be true or false (got {_show(value)})")
        return value

    def table(self, key: str) -> _Fields | None:
        if key not in self.data:
            return None
        value = self.data[key]
        if not isinstance(value, dict):
            self.fail(key, f"should be a table (got {_show(value)})")
        return _Fields(self.source, value, f"{self.prefix}{key}.")

    def tables(self, key: str) -> list[_Fields]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            self.fail(key, f"should be a list of tables, [[{self.prefix}{key}]] (got {_show(value)})")
        return [_Fields(self.source, v, f"{self.prefix}{key}[{i}].") for i, v in enumerate(value)]


def _show(value: object) -> str:
    return repr(value) if isinstance(value, (str, int, float, bool)) else type(value).__name__


def _parse_rule(data: dict[str, Any], path: Path, source: str) -> Rule:
    if "config" in data:  # a check over launch-configuration facts: postmortem/config_rules.py
        from postmortem.config_rules import parse_config_rule

        return parse_config_rule(data, path, source)
    top = _Fields(source, data)
    top.only(_TOP_KEYS)
    rule_id = top.text("id")
    if not _ID.match(rule_id):
        top.fail("id", f"should be lower-case kebab, like 'nccl-watchdog-timeout' (got {rule_id!r})")
    if rule_id != path.stem:
        top.fail("id", f"should equal the file name {path.stem!r} (got {rule_id!r})")
    title = top.text("title")
    if len(title) > 90 or "\n" in title:
        top.fail("title", f"should be one line of at most 90 characters (got {len(title)})")
    match_table = top.table("match")
    if match_table is None:
        top.fail("match", "is required")
    match = _parse_match(match_table)
    aggregate = _parse_aggregate(top.table("aggregate"))
    if not match.positive and aggregate is None:
        match_table.fail("any", "should hold at least one pattern (or give [match].all)")
    message = top.text("message", default="") or None
    rule = Rule(
        id=rule_id,
        title=title,
        category=top.text("category", choices=CATEGORIES),
        severity=top.text("severity", choices=SEVERITIES),
        role=top.text("role", choices=ROLES),
        status=top.text("status", default="stable", choices=STATUSES),
        message=message,
        match=match,
        aggregate=aggregate,
        explanation=top.text("explanation").strip(),
        fix=top.text("fix").strip(),
        references=top.texts("references"),
        examples=_parse_examples(top),
        path=path,
        label=source,
        aliases=top.texts("aliases"),
        sources=top.one_or_more("source"),
    )
    if message:
        _check_message(top, message, match, aggregate)
    return rule


def _parse_match(t: _Fields) -> Match:
    t.only(_MATCH_KEYS)
    ignore_case = t.flag("ignore_case", False)
    match = Match(
        any=t.texts("any"),
        all=t.texts("all"),
        not_=t.texts("not"),
        confirm=t.texts("confirm"),
        extract=t.texts("extract"),
        scope=t.text("scope", default="line", choices=SCOPES),
        families=t.texts("families", choices=FAMILIES),
        kinds=t.texts("kinds", choices=KINDS),
        levels=t.texts("levels", choices=LEVELS),
        ignore_case=ignore_case,
    )
    for key, patterns in (("any", match.any), ("all", match.all), ("not", match.not_)):
        for i, pattern in enumerate(patterns):
            _check_pattern(t, f"{key}[{i}]", pattern, ignore_case)
    for key, patterns in (("confirm", match.confirm), ("extract", match.extract)):
        for i, pattern in enumerate(patterns):
            try:
                regex.compile(pattern, py_flags(ignore_case))
            except regex.error as exc:
                problem = f"should compile under Python regex: {exc} (got {pattern!r})"
            else:
                continue
            t.fail(f"{key}[{i}]", problem)
    return match


def _parse_aggregate(t: _Fields | None) -> Aggregate | None:
    if t is None:
        return None
    t.only(_AGGREGATE_KEYS)
    aggregate = Aggregate(
        by=t.text("by", choices=AGGREGATE_BY),
        condition=t.text("condition", choices=AGGREGATE_CONDITIONS),
        requires=t.texts("requires"),
    )
    for i, pattern in enumerate(aggregate.requires):
        _check_pattern(t, f"requires[{i}]", pattern, False)
    return aggregate


def _parse_examples(top: _Fields) -> tuple[Example, ...]:
    examples = []
    counts = {True: 0, False: 0}
    for t in top.tables("examples"):
        t.only(_EXAMPLE_KEYS)
        if "fires" not in t.data:
            t.fail("fires", "is required (true: must fire, false: must stay quiet)")
        fires = t.flag("fires", False)
        if ("log" in t.data) == ("logs" in t.data):
            t.fail("log", "is required (or give [[examples.logs]] with file and log, but not both)")
        if "log" in t.data:
            logs = [ExampleLog(t.text("log"), t.text("file", default="console.log"), t.data.get("node"))]
        else:
            logs = []
            for lt in t.tables("logs"):
                lt.only(_LOG_KEYS)
                logs.append(ExampleLog(lt.text("log"), lt.text("file"), lt.text("node", default="") or None))
        if t.data.get("node") is not None:
            t.text("node")
        counts[fires] += 1
        examples.append(Example(fires, tuple(logs), counts[fires], t.text("note", default="")))
    return tuple(examples)


def _check_pattern(t: _Fields, key: str, pattern: str, ignore_case: bool) -> None:
    """Compile under polars (what matching uses) and under Python regex (what extraction uses)."""
    problem = None
    try:
        pl.Series([""], dtype=pl.String).str.contains(polars_pattern(pattern, ignore_case))
    except Exception as exc:  # polars raises ComputeError (or a Rust panic wrapper) for bad regexes
        problem = f"should compile under polars (Rust regex): {_regex_reason(str(exc))}"
    if problem is None:
        try:
            regex.compile(pattern, py_flags(ignore_case))
        except regex.error as exc:
            problem = f"should compile under Python regex too (used for fields): {exc}"
    if problem:  # raised outside the except blocks: the message is the whole story
        t.fail(key, f"{problem} (got {pattern!r})")


def _regex_reason(text: str) -> str:
    for line in text.splitlines():
        if line.strip().startswith("error:"):
            return line.strip()[len("error:") :].strip()
    return text.splitlines()[0] if text else "invalid pattern"


def _check_message(top: _Fields, message: str, match: Match, aggregate: Aggregate | None) -> None:
    names = set(TIMELINE_COLUMNS) | set(MESSAGE_KEYS)
    for pattern in match.positive + match.extract:
        names |= set(regex.compile(pattern).groupindex)
    try:
        parsed = list(string.Formatter().parse(message))
    except ValueError as exc:
        top.fail("message", f"should be a template with {{name}} placeholders: {exc}")
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion or name not in names:
            top.fail(
                "message",
                f"placeholder {{{name}}} should be a plain {{name}} naming a named group of the rule's "
                f"patterns, a timeline column or one of {MESSAGE_KEYS}",
            )


# --------------------------------------------------------------------------- compiling


@dataclass
class _Plan:
    """All rules of one scope, compiled into one candidate mask plus per-rule conditions.

    The mask is a necessary condition for every rule: a row (or record) that a rule can match
    contains one of its required literals (found in one Aho-Corasick pass, whatever the number
    of rules) or, for rules without a usable literal, matches its regex.
    """

    rules: list[Rule]
    literals: list[str]  # compared case-sensitively
    literals_ci: list[str]  # lower-case, compared ASCII-case-insensitively
    regexes: list[str]  # OR-ed alternations for rules without literals
    filter_only: list[Rule]  # aggregate rules without patterns: selected by family/kind/level only

    @classmethod
    def build(cls, rules: list[Rule]) -> _Plan:
        literals: set[str] = set()
        literals_ci: set[str] = set()
        parts: list[str] = []
        filter_only: list[Rule] = []
        for rule in rules:
            m = rule.match
            if not m.positive:
                filter_only.append(rule)
                continue
            needed = _rule_literals(m)
            if needed is None:
                parts.append(combined(m.any or m.all[:1], m.ignore_case))
            else:
                (literals_ci if needed[1] else literals).update(needed[0])
        regexes = ["|".join(parts[i : i + PREFILTER_CHUNK]) for i in range(0, len(parts), PREFILTER_CHUNK)]
        return cls(rules, sorted(literals), sorted(literals_ci), regexes, filter_only)

    def mask(self, text: pl.Expr) -> pl.Expr | None:
        """Candidate condition over a text column, or None when no rule has patterns."""
        parts = [text.str.contains(r) for r in ([self.literal_regex()] if self.literals or self.literals_ci else [])]
        parts += [text.str.contains(r) for r in self.regexes]
        return pl.any_horizontal(parts).fill_null(False) if parts else None

    def literal_regex(self) -> str:
        """The required literals as one alternation; the regex engine runs it as an Aho-Corasick
        or SIMD literal search, so its cost hardly depends on the number of literals (measured
        faster than ``str.contains_any`` on real log text)."""
        parts = [regex.escape(x, special_only=True) for x in self.literals]
        if self.literals_ci:
            parts.append("(?i:" + "|".join(regex.escape(x, special_only=True) for x in self.literals_ci) + ")")
        return "|".join(parts)

    def as_regex(self) -> str:
        """The whole candidate condition as one regex (for readers that drop lines early)."""
        return "|".join(([self.literal_regex()] if self.literals or self.literals_ci else []) + self.regexes)


def _rule_literals(m: Match) -> tuple[frozenset[str], bool] | None:
    """A literal set every hit of the rule contains: the union over ``any``, or one ``all`` pattern."""
    options: list[tuple[frozenset[str], bool]] = []
    if m.any:
        per_pattern = [required_literals(p, m.ignore_case) for p in m.any]
        if all(per_pattern):
            ci = any(ci for _, ci in per_pattern)  # type: ignore[misc]
            union = frozenset().union(*(lits for lits, _ in per_pattern))  # type: ignore[misc]
            options.append((frozenset(x.lower() for x in union) if ci else union, ci))
    options += [x for x in (required_literals(p, m.ignore_case) for p in m.all) if x]
    if not options:
        return None
    return max(options, key=lambda o: min(map(len, o[0])))


def _condition(rule: Rule, text: str, scope: str) -> pl.Expr:
    """The rule's full condition as one boolean expression over a line or record frame."""
    m = rule.match
    col = pl.col(text)
    expr = pl.lit(True)
    if m.any:
        expr = col.str.contains(combined(m.any, m.ignore_case))
    for pattern in m.all:
        expr = expr & col.str.contains(polars_pattern(pattern, m.ignore_case))
    if m.not_:
        expr = expr & ~col.str.contains(combined(m.not_, m.ignore_case))
    if m.families:
        expr = expr & pl.col("family").is_in(list(m.families))
    for name, values in (("kind", m.kinds), ("level", m.levels)):
        if not values:
            continue
        if scope == "record":  # a record qualifies when any of its rows does
            of_record = pl.col(f"_{name}s").list.eval(pl.element().is_in(list(values))).list.any()
            expr = expr & pl.coalesce(of_record, pl.col(name).is_in(list(values)))
        else:
            expr = expr & pl.col(name).is_in(list(values))
    return expr.fill_null(False)


# --------------------------------------------------------------------------- matching


def match_rules(timeline: pl.DataFrame, rules: RuleSet) -> list[Finding]:
    """Run every rule over the timeline; one :class:`Finding` per rule that fires.

    Findings come back in order of their first matched timestamp (unknown times last).
    """
    return [finding for finding, _ in _match_all(timeline, rules)]


def _match_all(timeline: pl.DataFrame, rules: RuleSet) -> list[tuple[Finding, list[str]]]:
    """Findings, each with the message placeholders that found no value (for ``rules test``)."""
    tl = timeline.with_row_index("_row")
    hits = _all_hits(tl, rules._plan("line"), rules._plan("record"))
    findings: list[tuple[Finding, list[str]]] = []
    for rule in rules:
        rule_hits = hits.get(rule.id)
        if rule.match.confirm and rule_hits is not None and rule_hits.height:
            rule_hits = _confirm(rule, rule_hits)
        if rule.aggregate is None:
            if rule_hits is not None and rule_hits.height:
                findings.append(_line_finding(rule, rule_hits, tl))
        else:
            empty = tl.head(0).with_columns(pl.lit("").alias("_text"))
            finding = _aggregate_finding(rule, rule_hits if rule_hits is not None else empty, tl)
            if finding is not None:
                findings.append(finding)
    from postmortem.config_rules import config_findings  # [config] rules (scope "config")

    # (the timeline itself, not the indexed copy: its facts are collected once per analysis)
    findings.extend(config_findings(timeline, rules))
    _add_context([f for f, _ in findings], tl)
    findings.sort(key=lambda fm: (fm[0].first_ts is None, fm[0].first_ts or datetime.min, fm[0].rule))
    return findings


def _all_hits(tl: pl.DataFrame, line: _Plan, record: _Plan) -> dict[str, pl.DataFrame | pl.LazyFrame]:
    """Matched rows per rule id, each with the timeline columns plus ``_text`` (what was matched).

    One pass computes both scopes' candidate masks over ``message``; a record is a candidate
    when one of its lines is (required literals never span lines), so record texts are joined
    only for candidate records, unless a record rule has no literal and needs them all.
    """
    masks = {n: m for n, plan in (("_line", line), ("_rec", record)) if (m := plan.mask(pl.col("message"))) is not None}
    flags = tl.select("_row", "record", *(m.alias(n) for n, m in masks.items())) if masks else None
    out: dict[str, pl.DataFrame | pl.LazyFrame] = {}
    if line.rules:
        frame = tl.with_columns(pl.col("message").alias("_text"))
        wanted = flags["_line"] if flags is not None and "_line" in masks else None
        out.update(_plan_hits(frame, wanted, line, "line"))
    if record.rules:
        if record.regexes or record.filter_only or flags is None or "_rec" not in masks:
            frame = _record_frame(tl)  # some rule needs every record
            mask = record.mask(pl.col("_text"))
            cand = frame.filter(mask) if mask is not None else frame.head(0)
        else:
            hit_rows = flags.filter(pl.col("_rec"))
            ids = hit_rows.get_column("record").drop_nulls().unique()
            lone_rows = hit_rows.filter(pl.col("record").is_null()).get_column("_row")
            keep = pl.col("record").is_in(ids.implode()) | pl.col("_row").is_in(lone_rows.implode())
            frame = cand = _record_frame(tl.filter(keep))
        out.update(_plan_hits(frame, None, record, "record", candidates=cand))
    return out


def _plan_hits(
    frame: pl.DataFrame,
    wanted: pl.Series | None,
    plan: _Plan,
    scope: str,
    candidates: pl.DataFrame | None = None,
) -> dict[str, pl.DataFrame | pl.LazyFrame]:
    """Evaluate every rule of a plan on its candidate rows in one ``select``."""
    if candidates is None:
        candidates = frame.filter(wanted) if wanted is not None else frame.head(0)
    filter_only = {r.id for r in plan.filter_only}
    conditions = [_condition(r, "_text", scope).alias(r.id) for r in plan.rules if r.id not in filter_only]
    out: dict[str, pl.DataFrame | pl.LazyFrame] = {}
    if conditions and candidates.height:
        flags = candidates.select("_row", *conditions)
        long = flags.unpivot(index="_row", variable_name="_rule", value_name="_hit").filter(pl.col("_hit"))
        matched = long.join(candidates, on="_row", how="left")
        for (rule_id,), rows in matched.partition_by("_rule", as_dict=True).items():
            out[str(rule_id)] = rows.drop("_rule", "_hit")
    for rule in plan.filter_only:
        only = frame.lazy().filter(_condition(rule, "_text", scope))
        # an aggregate reads a few columns of what may be most of the timeline: left lazy
        out[rule.id] = only if rule.aggregate is not None and not rule.match.confirm else only.collect()
    return out


def _record_frame(tl: pl.DataFrame) -> pl.DataFrame:
    """One row per record (rows sharing ``record``, text joined with newlines) or per lone line.

    A record's row carries its first line's columns; ``_rows`` keeps all its row numbers.
    """
    # lone lines keep null lists (no per-row allocation); conditions fall back to their own kind/level
    lone = tl.filter(pl.col("record").is_null()).with_columns(
        pl.col("message").alias("_text"),
        pl.lit(None, dtype=pl.List(pl.UInt32)).alias("_rows"),
        pl.lit(None, dtype=pl.List(pl.String)).alias("_kinds"),
        pl.lit(None, dtype=pl.List(pl.String)).alias("_levels"),
    )
    grouped = (
        tl.filter(pl.col("record").is_not_null())
        .sort("_row")
        .group_by("record", maintain_order=True)
        .agg(
            pl.col("_row").first(),
            pl.col("message").fill_null("").str.join("\n").alias("_text"),
            pl.col("_row").alias("_rows"),
            pl.col("kind").drop_nulls().unique().alias("_kinds"),
            pl.col("level").drop_nulls().unique().alias("_levels"),
        )
    )
    records = grouped.join(tl.drop("record"), on="_row", how="left").select(lone.columns)
    return pl.concat([lone, records], how="vertical_relaxed")


def _confirm(rule: Rule, hits: pl.DataFrame) -> pl.DataFrame:
    """Keep the hits whose text also matches every Python-regex ``confirm`` pattern."""
    patterns = py_compile(rule.match.confirm, rule.match.ignore_case)
    keep = [all(p.search(t or "") for p in patterns) for t in hits["_text"].to_list()]
    return hits.filter(pl.Series(keep, dtype=pl.Boolean))


def _earliest_first(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(["ts", "file", "line"], nulls_last=True)


#: Hits a rule may have for a named group ``rank`` to be read out of each of them.
RANK_OVERRIDE_MAX = 10_000


def _rank_from_text(rule: Rule, hits: pl.DataFrame) -> pl.DataFrame:
    """Let a named group ``rank`` override the row's rank: the line names the rank it is about
    (the agent's ChildFailedError block reports another process's rank)."""
    extractors = [p for p in rule.py_extractors() if "rank" in p.groupindex]
    if not extractors or hits.height > RANK_OVERRIDE_MAX:
        return hits
    found = []
    for text in hits["_text"].to_list():
        value = next((m.group("rank") for p in extractors if (m := p.search(text or "")) and m.group("rank")), None)
        found.append(int(value) if value is not None and value.isdigit() else None)
    return hits.with_columns(pl.coalesce(pl.Series(found, dtype=pl.Int64), pl.col("rank")).alias("rank"))


def _line_finding(rule: Rule, hits: pl.DataFrame, tl: pl.DataFrame) -> tuple[Finding, list[str]]:
    hits = _earliest_first(_rank_from_text(rule, hits))
    evidence_rows = hits.group_by("rank", maintain_order=True).head(EVIDENCE_PER_RANK)
    evidence_rows = _earliest_first(evidence_rows).head(EVIDENCE_MAX)
    return _finding(rule, hits, evidence_rows, tl, {})


def _finding(
    rule: Rule,
    hits: pl.DataFrame,
    evidence_rows: pl.DataFrame,
    tl: pl.DataFrame,
    facts: dict[str, Any],
    message_extra: dict[str, Any] | None = None,
) -> tuple[Finding, list[str]]:
    patterns = rule.py_patterns()
    extractors = rule.py_extractors()
    evidence: list[Evidence] = []
    fields: dict[str, Any] = {}
    by_rank: dict[str, dict[Any, Any]] = {}
    for row in evidence_rows.iter_rows(named=True):
        groups = _groups(extractors, row["_text"] or "")
        for key, value in groups.items():
            fields.setdefault(key, value)
            if row["rank"] is not None:
                by_rank.setdefault(key, {}).setdefault(row["rank"], value)
        evidence.append(_evidence(row, patterns, tl))
    for key, values in by_rank.items():
        if len(set(values.values())) > 1:
            fields[f"{key}_by_rank"] = dict(sorted(values.items()))
    fields.update(facts)
    ranks = sorted({r for r in hits["rank"].to_list() if r is not None})
    nodes = sorted({n for n in hits["node"].to_list() if n is not None})
    ts = [t for t in hits["ts"].to_list() if t is not None]
    first = evidence_rows.row(0, named=True) if evidence_rows.height else {}
    values: dict[str, Any] = {c: first.get(c) for c in TIMELINE_COLUMNS}
    values.update(fields)
    values.update(count=hits.height, ranks=format_ranks(ranks), nranks=len(ranks), nodes=", ".join(nodes))
    values.update(message_extra or {})
    message, missing = render_message(rule, values)
    finding = Finding(
        id=rule.id,
        rule=rule.id,
        category=rule.category,
        severity=rule.severity,  # type: ignore[arg-type]
        title=rule.title,
        ranks=ranks,
        first_ts=min(ts) if ts else None,
        count=hits.height,
        evidence=evidence,
        explanation=rule.explanation,
        fix=rule.fix,
        references=list(rule.references),
        rule_role=rule.role,
        rule_status=rule.status,
        message=message,
        fields=fields,
        nodes=nodes,
    )
    return finding, missing


def _groups(patterns: list[regex.Pattern[str]], text: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pattern in patterns:
        m = pattern.search(text)
        if not m:
            continue
        for key, value in m.groupdict().items():
            if value is not None and key not in found:
                found[key] = int(value) if value.lstrip("-").isdigit() and len(value) < 19 else value
    return found


def _evidence(row: dict[str, Any], patterns: list[regex.Pattern[str]], tl: pl.DataFrame) -> Evidence:
    """Evidence for one hit; for a record, the first of its lines that a pattern matches."""
    rows = row.get("_rows")
    if rows and len(rows) > 1:
        # _row is the row number, so the record's lines are a direct gather, not a scan
        lines = tl.select("message", "file", "line", "rank", "ts")[sorted(rows)]
        chosen = lines.row(0, named=True)
        for candidate in lines.iter_rows(named=True):
            if any(p.search(candidate["message"] or "") for p in patterns):
                chosen = candidate
                break
        row = {**row, **chosen, "rank": row["rank"]}
    text = row["message"] or ""
    span = None
    for pattern in patterns:
        m = pattern.search(text)
        if m:
            span = m.span()
            break
    return Evidence(file=row["file"] or "", line=row["line"] or 0, rank=row["rank"], text=text, ts=row["ts"], span=span)


def _add_context(findings: list[Finding], tl: pl.DataFrame) -> None:
    """Fill each evidence line's neighbours with one filter over the timeline for all findings."""
    wanted = {(e.file, e.line) for f in findings for e in f.evidence}
    if not wanted:
        return
    lines = {n for _, line in wanted for n in range(line - CONTEXT_LINES, line + CONTEXT_LINES + 1)}
    near = tl.filter(pl.col("file").is_in(list({f for f, _ in wanted})) & pl.col("line").is_in(list(lines)))
    by_file: dict[str, dict[int, str]] = {}
    for file, line, message in near.select("file", "line", "message").iter_rows():
        by_file.setdefault(file, {}).setdefault(line, message or "")
    for finding in findings:
        for e in finding.evidence:
            known = by_file.get(e.file, {})
            e.context = [(n, known[n]) for n in range(e.line - CONTEXT_LINES, e.line + CONTEXT_LINES + 1) if n in known]


class _Values(dict):  # type: ignore[type-arg]
    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__(values)
        self.missing: list[str] = []

    def __missing__(self, key: str) -> str:
        self.missing.append(key)
        return "?"


def render_message(rule: Rule, values: dict[str, Any]) -> tuple[str, list[str]]:
    """The rule's message with placeholders filled; also the names that had no value."""
    if not rule.message:
        where = f" on ranks {values['ranks']}" if values.get("ranks") else ""
        return f"{rule.title} ({values.get('count', 0)}x{where})", []
    present = _Values({k: v for k, v in values.items() if v is not None and v != ""})
    text = rule.message.format_map(present)
    return text, present.missing


# --------------------------------------------------------------------------- aggregates


def _group_key(by: str) -> pl.Expr:
    if by == "rank":
        return pl.col("rank").cast(pl.String)
    return pl.coalesce(pl.col("node"), pl.format("node{}", pl.col("node_rank")))


def _aggregate_finding(
    rule: Rule, hits: pl.DataFrame | pl.LazyFrame, tl: pl.DataFrame
) -> tuple[Finding, list[str]] | None:
    agg = rule.aggregate
    assert agg is not None
    if agg.condition == "absent":
        return _absent(rule, hits.lazy(), tl)
    # (lazy: the hits of a rule over every progress line are most of the timeline, of which only
    # a few columns are aggregated; whole rows are taken, and sorted, for the chosen groups only)
    grouped = hits.lazy().with_columns(_group_key(agg.by).alias("_group")).filter(pl.col("_group").is_not_null())
    if agg.condition == "last_step_differs":
        grouped = grouped.filter(pl.col("step").is_not_null())
        last = grouped.group_by("_group").agg(pl.col("step").max().alias("v")).collect()
        values = dict(last.iter_rows())
        if len(values) < 2 or len(set(values.values())) < 2:
            return None
        low = min(values.values())
        odd = sorted(g for g, v in values.items() if v == low)
        facts = {"last_step": _by_group(values, agg.by), "behind": _keys(odd, agg.by), "max_step": max(values.values())}
        detail = f"last step {low} on {agg.by} {', '.join(odd)} vs up to {max(values.values())} elsewhere"
    elif agg.condition == "count_differs":
        counts = dict(grouped.group_by("_group").agg(pl.len()).collect().iter_rows())
        if len(counts) < 2 or len(set(counts.values())) < 2:
            return None
        odd = sorted(counts)
        facts = {"counts": _by_group(counts, agg.by)}
        detail = "counts " + ", ".join(f"{g}={counts[g]}" for g in _sorted_groups(counts))
    else:  # present_on_some
        known_rows = tl.lazy().filter(pl.col("family").is_in(list(rule.match.families))) if rule.match.families else tl.lazy()
        known = {g for g in known_rows.select(_group_key(agg.by).alias("g")).unique().collect().get_column("g").to_list() if g is not None}
        present = set(grouped.select("_group").unique().collect().get_column("_group").to_list())
        missing = known - present
        if not present or not missing:
            return None
        odd = sorted(present)
        facts = {"present": _keys(sorted(present), agg.by), "absent": _keys(sorted(missing), agg.by)}
        detail = f"on {len(present)} of {len(known)} {agg.by}s"
    chosen = _earliest_first(grouped.filter(pl.col("_group").is_in(odd)).collect())
    evidence_rows = chosen.group_by("_group", maintain_order=True).head(1)
    evidence_rows = _earliest_first(evidence_rows).head(EVIDENCE_MAX)
    groups = ", ".join(f"{g}" for g in _sorted_groups(odd))
    return _finding(rule, chosen, evidence_rows, tl, facts, {"groups": groups, "detail": detail})


def _absent(rule: Rule, hits: pl.LazyFrame, tl: pl.DataFrame) -> tuple[Finding, list[str]] | None:
    if hits.head(1).collect().height:
        return None
    agg = rule.aggregate
    assert agg is not None
    if agg.requires:
        gate = tl.lazy().filter(pl.col("message").str.contains(combined(agg.requires, False)).fill_null(False))
    else:
        gate = tl.lazy().filter(pl.col("kind") == "progress")
    # (the gate may be most of the timeline: its rows are counted and ordered by their keys, and
    # only the evidence rows are taken whole)
    order = ["ts", "file", "line"]
    count, last_step = gate.select(pl.len(), pl.col("step").max()).collect().row(0)
    if not count:
        return None
    # the evidence is where each rank's matching activity was last seen
    last_rows = (
        gate.select("_row", "rank", *order).sort(order, nulls_last=True).group_by("rank", maintain_order=True).tail(1)
        .sort(order, nulls_last=True).head(EVIDENCE_MAX).collect().get_column("_row")
    )
    last = _earliest_first(tl.filter(pl.col("_row").is_in(last_rows.implode())).with_columns(pl.col("message").alias("_text")))
    facts = {"last_step": last_step} if last_step is not None else {}
    detail = f"last step seen {last_step}" if last_step is not None else "no step seen"
    return _finding(rule, last.head(0), last, tl, facts, {"detail": detail})


def _sorted_groups(groups: Iterable[str]) -> list[str]:
    return sorted(groups, key=lambda g: (0, int(g), "") if g.isdigit() else (1, 0, g))


def _keys(groups: Iterable[str], by: str) -> list[Any]:
    return [int(g) if by == "rank" else g for g in _sorted_groups(groups)]


def _by_group(values: dict[str, Any], by: str) -> dict[Any, Any]:
    return {(int(g) if by == "rank" else g): values[g] for g in _sorted_groups(values)}


# --------------------------------------------------------------------------- examples

TimelineBuilder = Callable[[str, str], pl.DataFrame]


def example_timeline(example: Example, build: TimelineBuilder) -> pl.DataFrame:
    """The timeline of one inline example: each of its files parsed and stacked."""
    frames = []
    for log in example.logs:
        frame = build(log.log, log.file)
        if log.node is not None:
            frame = frame.with_columns(pl.col("node").fill_null(log.node))
        frames.append(frame)
    return pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]


def run_examples(rules: RuleSet, *, build: TimelineBuilder | None = None) -> list[ExampleResult]:
    """Run every rule's inline examples: ``fires`` must give that rule's finding, quiet ones none.

    ``build(text, file)`` turns example text into a timeline; the default is
    :func:`postmortem.timeline.timeline_from_text`, the same path real jobs take.
    """
    return [run_example(rule, example, build=build) for rule in rules for example in rule.examples]


def run_example(rule: Rule, example: Example, *, build: TimelineBuilder | None = None) -> ExampleResult:
    """Run one inline example of one rule (see :func:`run_examples`)."""
    if build is None:
        from postmortem.timeline import timeline_from_text

        build = timeline_from_text
    result = ExampleResult(rule.id, example.name, example.fires, fired=False)
    try:
        timeline = example_timeline(example, build)
        findings = [fm for fm in _match_all(timeline, RuleSet([rule])) if fm[0].rule == rule.id]
    except Exception as exc:  # a test runner reports a crash as this example's failure
        result.detail = f"error: {type(exc).__name__}: {exc}"
        return result
    result.fired = bool(findings)
    if findings:
        finding, missing = findings[0]
        result.message = finding.message
        if example.fires and missing:
            result.detail = f"message placeholders without a value: {', '.join(missing)}"
    if result.fired != example.fires:
        result.detail = (f"fired: {result.message}" if result.fired else "did not fire") + (
            f" ({example.note})" if example.note else ""
        )
    return result
