"""Config checks: rules whose signature is a condition over launch-configuration facts.

A config rule is an ordinary rule file (``rules/config/<id>.toml``, same fields, explanation,
fix, references and inline examples as every other rule) whose ``[match]`` table is replaced by
a ``[config]`` table of conditions over the facts :mod:`postmortem.config` extracts::

    [config]
    all = [                                   # every condition must hold
      { fact = "topology.nnodes", greater_than = 1 },
      { fact = "env.*_SOCKET_IFNAME", absent = true },   # globs match several facts
    ]
    any = [ ... ]                             # at least one must hold (when given)
    not = [ ... ]                             # none may hold

Each condition names a ``fact`` (``section.name``, ``*``/``?`` globs allowed) and exactly one
test: ``present``, ``absent``, ``equals``, ``not_equals``, ``one_of``, ``matches`` (Python
regex), ``greater_than``, ``less_than``, ``greater_than_fact``, ``less_than_fact``,
``not_multiple_of``, ``not_multiple_of_fact``, ``count_at_least``, ``ipv6``,
``ipv6_unbracketed``, ``duplicate_arg``, ``version_below``, ``version_at_least``. A fact the
logs do not show makes every test but ``absent`` false, so a check never fires on a guess.

``message`` and ``fix`` placeholders are fact keys (``{launcher.master_addr}``) or ``{detail}``
(what the conditions that held saw, e.g. ``--dataloader_num_workers 10 then 4``), so that a fix
names the job's own numbers ("at or below the supported number (19.2)"). The finding's evidence
is the log lines the facts came from (the launch command, the env dump ...).

The rule engine hands a file with a ``[config]`` table to :func:`parse_config_rule` and runs
:func:`config_findings` after its pattern rules (``postmortem/rule_engine.py``), so config
rules load, override, list and self-test (``postmortem rules test``) like any other rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import regex

from postmortem.config import Facts, Source, collect_facts, is_ipv6, is_unbracketed_ipv6, version_tuple
from postmortem.model import CATEGORIES, Evidence, Finding
from postmortem.rule_engine import (
    ROLES,
    SEVERITIES,
    STATUSES,
    Match,
    Rule,
    _Fields,
    _parse_examples,
)

#: Condition tests and the type of their argument.
TESTS: dict[str, type | tuple[type, ...]] = {
    "present": bool,
    "absent": bool,
    "equals": (str, int, float, bool),
    "not_equals": (str, int, float, bool),
    "one_of": list,
    "matches": str,
    "greater_than": (int, float),
    "less_than": (int, float),
    "greater_than_fact": str,
    "less_than_fact": str,
    "not_multiple_of": int,
    "not_multiple_of_fact": str,
    "count_at_least": int,
    "ipv6": bool,
    "ipv6_unbracketed": bool,
    "duplicate_arg": bool,
    "version_below": str,
    "version_at_least": str,
}
_TOP_KEYS = (
    "id", "title", "category", "severity", "role", "status", "message", "config", "explanation", "fix",
    "references", "aliases", "examples", "source",
)
_CONFIG_KEYS = ("all", "any", "not")
_FACT = regex.compile(r"^[a-z_]+\.[\w.*?\-\[\]]+$")
_PLACEHOLDER = regex.compile(r"\{([^{}]*)\}")
_ID = regex.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_COUNTS = ("dataset.", "derived.tokens_per_step")
#: Tests whose detail only repeats a gate (``nnodes=2``); messages prefer the other tests' details.
_PLAIN_TESTS = {"present", "absent", "equals", "not_equals", "one_of", "greater_than", "less_than", "count_at_least"}


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Condition:
    """One test on one fact (or on every fact a glob names)."""

    fact: str
    test: str
    arg: Any = True

    def describe(self) -> str:
        """The condition as text, for ``rules show`` and messages."""
        if self.test in ("present", "absent", "ipv6", "ipv6_unbracketed", "duplicate_arg"):
            word = self.test.replace("_", " ")
            return f"{self.fact} is {word}" if self.arg else f"{self.fact} is not {word}"
        return f"{self.fact} {self.test.replace('_', ' ')} {self.arg}"


@dataclass(frozen=True)
class ConfigCheck:
    """The ``[config]`` table: all / any / not lists of conditions."""

    all: tuple[Condition, ...] = ()
    any: tuple[Condition, ...] = ()
    not_: tuple[Condition, ...] = ()

    def describe(self) -> list[str]:
        """The check as lines of text (``all: topology.nnodes greater than 1``), for ``rules show``."""
        return [
            f"{kind}: {c.describe()}"
            for kind, conds in (("all", self.all), ("any", self.any), ("not", self.not_))
            for c in conds
        ]

    def facts(self) -> list[str]:
        """Every fact (or glob) the check looks at, in order, once."""
        seen: dict[str, None] = {}
        for c in (*self.all, *self.any, *self.not_):
            seen.setdefault(c.fact, None)
            if c.test.endswith("_fact"):
                seen.setdefault(str(c.arg), None)
        return list(seen)


@dataclass(frozen=True)
class ConfigRule(Rule):
    """A rule whose signature is a :class:`ConfigCheck` instead of log patterns."""

    check: ConfigCheck = field(default_factory=ConfigCheck)

    def looks_at(self, key: str) -> bool:
        """True when one of the check's facts (or globs) names ``key``."""
        return any(_fact_matches(pattern, key) for pattern in self.check.facts())


@dataclass
class Outcome:
    """What one condition saw: whether it held, the facts involved, a few words of detail."""

    held: bool
    keys: list[str] = field(default_factory=list)
    detail: str = ""
    #: the detail says something a reader needs (an IPv6 address, 100 > 76.8), not just "nnodes=2"
    telling: bool = False


# --------------------------------------------------------------------------- loading


def is_config_rule(rule: Rule) -> bool:
    return isinstance(rule, ConfigRule)


def parse_config_rule(data: dict[str, Any], path: Path, source: str) -> ConfigRule:
    """Validate a rule file holding a ``[config]`` table (called by the rule engine's loader).

    Raises :class:`RuleError` naming the file, the field and why, like the pattern rules.
    """
    top = _Fields(source, data)
    if "match" in data:
        top.fail("match", "cannot be combined with [config] (a rule matches log lines or config facts, not both)")
    top.only(_TOP_KEYS)
    rule_id = top.text("id")
    if not _ID.match(rule_id):
        top.fail("id", f"should be lower-case kebab, like 'config-duplicate-cli-arg' (got {rule_id!r})")
    if rule_id != path.stem:
        top.fail("id", f"should equal the file name {path.stem!r} (got {rule_id!r})")
    title = top.text("title")
    if len(title) > 90 or "\n" in title:
        top.fail("title", f"should be one line of at most 90 characters (got {len(title)})")
    table = top.table("config")
    assert table is not None
    check = _parse_check(table)
    message = top.text("message", default="") or None
    if message:
        _check_message(top, "message", message)
    fix = top.text("fix").strip()
    _check_message(top, "fix", fix)
    return ConfigRule(
        id=rule_id,
        title=title,
        category=top.text("category", choices=CATEGORIES),
        severity=top.text("severity", choices=SEVERITIES),
        role=top.text("role", choices=ROLES),
        status=top.text("status", default="stable", choices=STATUSES),
        message=message,
        match=Match(scope="config"),
        aggregate=None,
        explanation=top.text("explanation").strip(),
        fix=fix,
        references=top.texts("references"),
        examples=_parse_examples(top),
        path=path,
        label=source,
        aliases=top.texts("aliases"),
        sources=top.one_or_more("source"),
        check=check,
    )


def _parse_check(t: _Fields) -> ConfigCheck:
    t.only(_CONFIG_KEYS)
    lists: dict[str, tuple[Condition, ...]] = {}
    for key in _CONFIG_KEYS:
        lists[key] = tuple(_parse_condition(c) for c in t.tables(key))
    if not lists["all"] and not lists["any"]:
        t.fail("all", "should hold at least one condition (or give [config].any)")
    return ConfigCheck(all=lists["all"], any=lists["any"], not_=lists["not"])


def _parse_condition(t: _Fields) -> Condition:
    fact = t.text("fact")
    if not _FACT.match(fact):
        t.fail("fact", f"should be a fact key like 'topology.nnodes' or a glob like 'env.*_SOCKET_IFNAME' (got {fact!r})")
    tests = [k for k in t.data if k != "fact"]
    if len(tests) != 1 or tests[0] not in TESTS:
        t.fail(
            tests[0] if tests else "fact",
            f"a condition needs exactly one test besides 'fact', one of {tuple(TESTS)} (got {tests})",
        )
    test = tests[0]
    arg = t.data[test]
    expected = TESTS[test]
    if (isinstance(arg, bool) and expected in ((int, float), int)) or not isinstance(arg, expected):
        t.fail(test, f"should be {_type_name(expected)} (got {type(arg).__name__})")
    if test == "matches":
        try:
            regex.compile(arg)
        except regex.error as exc:
            t.fail(test, f"should compile under Python regex: {exc} (got {arg!r})")
    if test.endswith("_fact") and not _FACT.match(arg):
        t.fail(test, f"should name another fact, like 'derived.supported_steps' (got {arg!r})")
    if test.startswith("version_") and version_tuple(arg) is None:
        t.fail(test, f"should be a version like '2.7' (got {arg!r})")
    return Condition(fact, test, arg)


def _type_name(expected: type | tuple[type, ...]) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list"}
    if isinstance(expected, tuple):
        return " or ".join(dict.fromkeys(names[t] for t in expected))
    return names[expected]


def _check_message(top: _Fields, field: str, text: str) -> None:
    for name in _PLACEHOLDER.findall(text):
        if name != "detail" and not _FACT.match(name):
            top.fail(field, f"placeholder {{{name}}} should be a fact key like {{topology.nnodes}} or {{detail}}")


def config_rules_of(rules: Iterable[Rule]) -> list[ConfigRule]:
    """The config rules of a rule set, in its order."""
    return [r for r in rules if isinstance(r, ConfigRule)]


# --------------------------------------------------------------------------- evaluation


def config_findings(timeline: pl.DataFrame, rules: Iterable[Rule]) -> list[tuple[Finding, list[str]]]:
    """Findings of the config rules among ``rules`` (the engine's hook), each with the message
    placeholders that found no value."""
    config_rules = config_rules_of(rules)
    if not config_rules:
        return []
    return evaluate(collect_facts(timeline), config_rules)


def check_config(facts: Facts, rules: Iterable[Rule]) -> list[Finding]:
    """The findings of every config rule among ``rules`` that fires on ``facts``."""
    return [f for f, _ in evaluate(facts, config_rules_of(rules))]


def evaluate(facts: Facts, rules: Sequence[ConfigRule]) -> list[tuple[Finding, list[str]]]:
    out = []
    for rule in rules:
        result = evaluate_rule(facts, rule)
        if result is not None:
            out.append(result)
    return out


def evaluate_rule(facts: Facts, rule: ConfigRule) -> tuple[Finding, list[str]] | None:
    """The rule's finding when its check holds on ``facts``, else None."""
    check = rule.check
    held: list[Outcome] = []
    for cond in check.all:
        outcome = test_condition(facts, cond)
        if not outcome.held:
            return None
        held.append(outcome)
    if check.any:
        hits = [o for o in (test_condition(facts, c) for c in check.any) if o.held]
        if not hits:
            return None
        for o in hits:  # which of the alternatives held is always worth saying
            o.telling = True
        held.extend(hits)
    for cond in check.not_:
        if test_condition(facts, cond).held:
            return None
    return _finding(rule, facts, held)


def test_condition(facts: Facts, cond: Condition) -> Outcome:
    """Evaluate one condition; the outcome names the facts it looked at."""
    keys = facts.keys_like(cond.fact)
    values = {k: facts.values[k] for k in keys if _has_value(facts.values[k])}
    if cond.test == "absent":
        return Outcome(not values if cond.arg else bool(values), [], f"no {cond.fact} in the logs" if not values else "")
    if cond.test == "present":
        return Outcome(bool(values) if cond.arg else not values, list(values), ", ".join(f"{k}={_show(v)}" for k, v in values.items()))
    for key, value in values.items():
        ok, detail, extra = _test_value(facts, cond, key, value)
        if ok:
            return Outcome(True, [key, *extra], detail, cond.test not in _PLAIN_TESTS)
    return Outcome(False)


def _test_value(facts: Facts, cond: Condition, key: str, value: Any) -> tuple[bool, str, list[str]]:
    test, arg = cond.test, cond.arg
    name = key.partition(".")[2]
    if test == "equals":
        return _same(value, arg), f"{name}={_show(value)}", []
    if test == "not_equals":
        return not _same(value, arg), f"{name}={_show(value)}", []
    if test == "one_of":
        return any(_same(value, a) for a in arg), f"{name}={_show(value)}", []
    if test == "matches":
        return bool(regex.search(arg, str(value))), f"{name}={_show(value)}", []
    if test in ("ipv6", "ipv6_unbracketed"):
        ok = is_ipv6(value) if test == "ipv6" else is_unbracketed_ipv6(value)
        return ok == bool(arg), f"{name}={value}", []
    if test == "duplicate_arg":
        dup = isinstance(value, dict) and any(isinstance(v, list) and len({str(x) for x in v}) > 1 for v in value.values())
        detail = "; ".join(f"--{a} " + " then ".join(_show(x) for x in v) for a, v in value.items()) if dup else ""
        return dup == bool(arg), detail, []
    if test == "count_at_least":
        n = len(value) if isinstance(value, (list, dict, set, tuple)) else 1
        return n >= arg, f"{name}: {_show(value)}", []
    if test.startswith("version_"):
        have, want = version_tuple(value), version_tuple(arg)
        if have is None or want is None:
            return False, "", []
        ok = have < want if test == "version_below" else have >= want
        return ok, f"{name} {value}", []
    number = _number(value)
    if number is None:
        return False, "", []
    if test in ("greater_than", "less_than"):
        ok = number > arg if test == "greater_than" else number < arg
        return ok, f"{name}={_show(value)}", []
    if test == "not_multiple_of":
        return _not_multiple(number, arg), f"{name}={_show(value)} is not a multiple of {arg}", []
    other_key = str(arg)
    other = _number(facts.values.get(other_key))
    if other is None:
        return False, "", []
    other_name = other_key.partition(".")[2]
    if test == "greater_than_fact":
        return number > other, f"{name}={_show(value)} > {other_name}={_show(other)}", [other_key]
    if test == "less_than_fact":
        return number < other, f"{name}={_show(value)} < {other_name}={_show(other)}", [other_key]
    # not_multiple_of_fact
    return _not_multiple(number, other), f"{name}={_show(value)} is not a multiple of {other_name}={_show(other)}", [other_key]


def _not_multiple(number: float, divisor: float) -> bool:
    if divisor <= 0 or number <= 0 or divisor > number:
        return False  # an interval longer than the run splits nothing
    return not math.isclose(number % divisor, 0.0) and not math.isclose(number % divisor, divisor)


def _has_value(value: Any) -> bool:
    return value is not None and value is not False and value != "" and value != [] and value != {}


def _same(value: Any, arg: Any) -> bool:
    a, b = _number(value), _number(arg)
    if a is not None and b is not None and not isinstance(value, bool) and not isinstance(arg, bool):
        return a == b
    return str(value).strip().lower() == str(arg).strip().lower()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        return None


def _show(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return ", ".join(_show(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_show(v)}" for k, v in value.items())
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _fact_matches(pattern: str, key: str) -> bool:
    from fnmatch import fnmatchcase

    return pattern == key or fnmatchcase(key, pattern)


# --------------------------------------------------------------------------- findings


def _finding(rule: ConfigRule, facts: Facts, held: list[Outcome]) -> tuple[Finding, list[str]]:
    keys = list(dict.fromkeys(k for o in held for k in o.keys))
    telling = [o.detail for o in held if o.detail and o.telling] or [o.detail for o in held if o.detail]
    detail = "; ".join(dict.fromkeys(telling))
    sources = _sources(facts, keys)
    evidence = [
        Evidence(file=s.file, line=s.line, rank=s.rank, text=s.text, ts=s.ts, span=_span(s.text, facts, keys))
        for s in sources
    ]
    ranks = sorted({s.rank for s in sources if s.rank is not None})
    nodes = sorted({s.node for s in sources if s.node})
    times = [s.ts for s in sources if s.ts is not None]
    message, missing = render_message(rule, facts, detail)
    fix, missing_in_fix = fill_facts(rule.fix, facts, detail)  # the fix names this job's own numbers
    missing += [name for name in missing_in_fix if name not in missing]
    fields: dict[str, Any] = {k: facts.values[k] for k in keys if k in facts.values}
    if detail:
        fields["detail"] = detail
    finding = Finding(
        id=rule.id,
        rule=rule.id,
        category=rule.category,
        severity=rule.severity,  # type: ignore[arg-type]
        title=rule.title,
        ranks=ranks,
        first_ts=min(times) if times else None,
        count=max(1, len(sources)),
        evidence=evidence,
        explanation=rule.explanation,
        fix=fix,
        references=list(rule.references),
        rule_role=rule.role,
        rule_status=rule.status,
        message=message,
        fields=fields,
        nodes=nodes,
    )
    return finding, missing


def _sources(facts: Facts, keys: list[str]) -> list[Source]:
    """The distinct log lines behind ``keys``, earliest first."""
    seen: dict[tuple[str, int], Source] = {}
    for key in keys:
        for src in facts.all_sources(key):
            if src.file:
                seen.setdefault((src.file, src.line), src)
    return sorted(seen.values(), key=lambda s: (s.ts is None, s.ts or datetime.min, s.file, s.line))


def _span(text: str, facts: Facts, keys: list[str]) -> tuple[int, int] | None:
    """Where in the evidence line the first telling value sits (for highlighting)."""
    for key in keys:
        value = facts.values.get(key)
        needles: list[str] = []
        if isinstance(value, dict):
            needles = [f"--{k}" for k in value] + [str(k) for k in value]
        elif value is not None and not isinstance(value, bool):
            needles = [str(value)]
        for needle in needles:
            at = text.find(needle)
            if needle and at >= 0:
                return (at, at + len(needle))
    return None


def render_message(rule: Rule, facts: Facts, detail: str) -> tuple[str, list[str]]:
    """The rule's message with ``{fact.key}`` and ``{detail}`` filled; also what had no value."""
    if not rule.message:
        return (f"{rule.title}: {detail}" if detail else rule.title), []
    return fill_facts(rule.message, facts, detail)


def fill_facts(text: str, facts: Facts, detail: str) -> tuple[str, list[str]]:
    """``text`` (a message or a fix) with ``{fact.key}`` and ``{detail}`` filled; also what had no value."""
    missing: list[str] = []

    def fill(m: regex.Match[str]) -> str:
        name = m.group(1)
        if name == "detail":
            if not detail:
                missing.append(name)
            return detail or "?"
        value = facts.values.get(name)
        if not _has_value(value) and value is not False:
            missing.append(name)
            return "?"
        if isinstance(value, int) and not isinstance(value, bool) and name.startswith(_COUNTS):
            return f"{value:,}"  # 2,517,232 tokens reads; a port number must not get commas
        return _show(value)

    return _PLACEHOLDER.sub(fill, text), missing


def risks_for(key: str, rules: Iterable[Rule], findings: Iterable[Finding]) -> list[Finding]:
    """Config findings whose rule looks at fact ``key`` (what a diff row's risk is)."""
    by_id = {r.id: r for r in config_rules_of(rules)}
    return [f for f in findings if f.rule in by_id and by_id[f.rule].looks_at(key)]


__all__ = [
    "TESTS",
    "Condition",
    "ConfigCheck",
    "ConfigRule",
    "Outcome",
    "check_config",
    "config_findings",
    "config_rules_of",
    "evaluate",
    "evaluate_rule",
    "is_config_rule",
    "parse_config_rule",
    "render_message",
    "risks_for",
    "test_condition",
]
