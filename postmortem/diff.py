"""``postmortem diff``: put a failing run and a working run side by side.

The first thing an expert does with "it hangs on two nodes and works on one" (seed 004) is to
compare the two runs. :func:`diff_runs` does it from two analyses:

* configuration differences (:mod:`postmortem.config` facts), grouped as topology, launcher,
  environment, versions, trainer settings and data, each with the risk a config check knows
  (:mod:`postmortem.config_rules`); a topology change comes first, then differences that carry a
  risk, then the rest; risky settings both runs share are listed apart;
* progress of both runs aligned by step: where each stopped, how far the other got, whether the
  stop was at an evaluation or save step;
* the first event each run has that the other does not, compared by template (numbers, paths,
  times, hex, addresses and host names masked), over the file families both runs have;
* findings present in one run only.

Renderers: :func:`render_terminal` (rich), :meth:`RunDiff.to_dict` (JSON), :func:`render_markdown`,
:func:`render_html` (``templates/diff.html.j2``, self-contained, autoescaped).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from postmortem.config import ALIASES, Facts, collect_facts
from postmortem.config_rules import check_config, config_rules_of
from postmortem.model import SEVERITY_ORDER, Finding, Report, jsonable

if TYPE_CHECKING:
    from rich.console import Console

    from postmortem.api import Analysis
    from postmortem.rule_engine import Rule

#: The groups of the configuration table, in display order, with their titles.
GROUPS: dict[str, str] = {
    "topology": "Topology",
    "launcher": "Launcher",
    "environment": "Environment",
    "versions": "Versions",
    "trainer": "Trainer settings",
    "data": "Data",
    "other": "Other",
}
_GROUP_OF_SECTION = {
    "topology": "topology",
    "launcher": "launcher",
    "script": "launcher",
    "script_args": "launcher",
    "env": "environment",
    "env_by_node": "environment",
    "network": "environment",
    "versions": "versions",
    "trainer": "trainer",
    "derived": "trainer",
    "dataset": "data",
    "code": "other",
    "platform": "other",
}
#: A difference in one of these is a topology change: it leads the comparison.
TOPOLOGY_CORE = ("topology.nnodes", "topology.nproc_per_node", "topology.world_size")
#: Facts that restate others or differ between any two runs by nature (not configuration).
_SKIP = {
    "topology.ranks_seen", "topology.nnodes_seen", "topology.node_ranks", "launcher.command",
    "launcher.commands", "launcher.node_rank",
}
#: Event kinds worth naming as the first difference when the very first one is chatter.
NOTABLE_KINDS = ("error", "warning", "lifecycle")
#: Aligned progress rows shown at most (milestones: start, the stops, evenly spaced steps).
PROGRESS_ROWS = 12

_MASKS: tuple[tuple[str, str], ...] = (
    (r"\b0x[0-9A-Fa-f]+\b", "<hex>"),
    # IPv6 (also "::"-compressed), IPv4; "10:15:43" gets the same mask in both runs, which is fine
    (r"\[?\b[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{0,4}){2,7}\b\]?|::[0-9A-Fa-f]{1,4}\b|\b\d{1,3}(?:\.\d{1,3}){3}\b", "<addr>"),
    (r"(?:[A-Za-z]:)?\.{0,2}(?:/[^\s/:'\",;()\[\]{}<>]+)+/?", "<path>"),
    (r"\b[0-9a-f]{12,}\b", "<hex>"),
    (r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", "<n>"),
    (r"\s+", " "),
)


# --------------------------------------------------------------------------- data


@dataclass
class Risk:
    """A config check that fired on one run or both: what the setting risks."""

    rule: str
    title: str
    message: str
    severity: str
    runs: str  # "A", "B" or "A+B"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "title": self.title, "message": self.message, "severity": self.severity, "runs": self.runs}


@dataclass
class ConfigChange:
    """One fact that differs between the runs (None: the run's logs do not show it)."""

    key: str
    group: str
    a: Any
    b: Any
    risks: list[Risk] = field(default_factory=list)
    source_a: str | None = None
    source_b: str | None = None

    @property
    def name(self) -> str:
        return self.key.partition(".")[2]

    @property
    def topology(self) -> bool:
        return self.key in TOPOLOGY_CORE

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "group": self.group,
            "a": jsonable(self.a),
            "b": jsonable(self.b),
            "topology_change": self.topology,
            "risks": [r.to_dict() for r in self.risks],
            "source_a": self.source_a,
            "source_b": self.source_b,
        }


@dataclass
class RunSide:
    """One run's identity and outcome."""

    label: str  # "A" or "B"
    path: str
    status: str
    category: str
    summary: str
    world_size: int | None
    nodes: list[str]
    shape: str  # "2 nodes x 2 processes (world 4)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "path": self.path,
            "status": self.status,
            "category": self.category,
            "summary": self.summary,
            "world_size": self.world_size,
            "nodes": list(self.nodes),
            "shape": self.shape,
        }


@dataclass
class RunProgress:
    """How far one run got."""

    last_step: int | None
    max_steps: int | None
    by_rank: dict[int, int | None]
    step_offsets: dict[int, float]  # step -> seconds since the run's first step (printed times only)
    stop_note: str = ""  # "step 10 is an evaluation step (eval_steps=10)"
    reached: set[int] = field(default_factory=set)  # every step some rank logged

    def to_dict(self) -> dict[str, Any]:
        return {
            "last_step": self.last_step,
            "max_steps": self.max_steps,
            "last_step_by_rank": {str(k): v for k, v in sorted(self.by_rank.items())},
            "stop_note": self.stop_note,
        }


@dataclass
class Progress:
    """Both runs' progress aligned by step."""

    a: RunProgress
    b: RunProgress
    summary: str
    rows: list[dict[str, Any]]  # {"step", "a": seconds or None, "b": seconds or None}

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "summary": self.summary, "rows": self.rows}


@dataclass
class Divergence:
    """The first event one run has and the other does not (compared by template)."""

    run: str  # "A" or "B": the run that has the event
    template: str
    text: str
    file: str
    line: int
    rank: int | None
    ts: datetime | None
    offset_s: float | None  # seconds since that run's first event
    step: int | None  # the run's last step before the event
    after: str | None  # the last event both runs share, just before it
    kind: str | None = None
    notable: bool = False  # the first error/warning/lifecycle event only this run has

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "template": self.template,
            "text": self.text,
            "file": self.file,
            "line": self.line,
            "rank": self.rank,
            "ts": self.ts.isoformat() if self.ts else None,
            "offset_s": self.offset_s,
            "step": self.step,
            "after": self.after,
            "kind": self.kind,
            "notable": self.notable,
        }

    @property
    def title(self) -> str:
        what = "First error or warning" if self.notable else "First event"
        return f"{what} only in {self.run}"


@dataclass
class FindingRef:
    """A finding of one run that the other run does not have."""

    rule: str
    title: str
    severity: str
    category: str
    message: str
    ranks: list[int]
    primary: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "title": self.title,
            "severity": self.severity,
            "category": self.category,
            "message": self.message,
            "ranks": list(self.ranks),
            "primary": self.primary,
        }


@dataclass
class RunDiff:
    """Everything ``postmortem diff`` shows; renderers format it and compute nothing."""

    a: RunSide
    b: RunSide
    headline: list[str]
    changes: list[ConfigChange]
    shared_risks: list[Risk]
    progress: Progress
    divergence: list[Divergence]
    only_a: list[FindingRef]
    only_b: list[FindingRef]
    config_a: dict[str, Any] = field(default_factory=dict)
    config_b: dict[str, Any] = field(default_factory=dict)

    def groups(self) -> list[tuple[str, str, list[ConfigChange]]]:
        """The changes by group, in display order: (group id, title, changes)."""
        out = []
        for gid, title in GROUPS.items():
            rows = [c for c in self.changes if c.group == gid]
            if rows:
                out.append((gid, title, rows))
        return out

    def leading(self) -> list[ConfigChange]:
        """Topology changes and risky differences: what the comparison leads with."""
        return [c for c in self.changes if c.topology or c.risks]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": "1",
            "kind": "postmortem-diff",
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "headline": list(self.headline),
            "changes": [c.to_dict() for c in self.changes],
            "shared_risks": [r.to_dict() for r in self.shared_risks],
            "progress": self.progress.to_dict(),
            "first_divergence": [d.to_dict() for d in self.divergence],
            "findings": {"only_a": [f.to_dict() for f in self.only_a], "only_b": [f.to_dict() for f in self.only_b]},
            "config": {"a": jsonable(self.config_a), "b": jsonable(self.config_b)},
        }


# --------------------------------------------------------------------------- diff


def diff_runs(a: Analysis, b: Analysis, *, rules: Iterable[Rule] | None = None) -> RunDiff:
    """Compare run ``a`` (usually the failing one) with run ``b`` (usually the working one).

    ``rules`` are the rules whose config checks give risks (default: the built-in rules and
    ``$POSTMORTEM_RULES``).
    """
    if rules is None:
        from postmortem.rule_engine import load_rules

        rules = load_rules()
    config_rules = config_rules_of(rules)
    facts_a, facts_b = collect_facts(a.timeline.frame), collect_facts(b.timeline.frame)
    checks_a, checks_b = check_config(facts_a, config_rules), check_config(facts_b, config_rules)
    side_a = _side("A", a.report, facts_a)
    side_b = _side("B", b.report, facts_b)
    changes = _changes(facts_a, facts_b, config_rules, checks_a, checks_b)
    shared = _shared_risks(checks_a, checks_b, changes)
    progress = _progress(a, b, facts_a, facts_b)
    divergence = _divergence(a.timeline.frame, b.timeline.frame)
    only_a, only_b = _findings_only(a.report.findings + checks_a, b.report.findings + checks_b)
    diff = RunDiff(
        a=side_a,
        b=side_b,
        headline=[],
        changes=changes,
        shared_risks=shared,
        progress=progress,
        divergence=divergence,
        only_a=only_a,
        only_b=only_b,
        config_a=facts_a.to_dict(),
        config_b=facts_b.to_dict(),
    )
    diff.headline = _headline(diff)
    return diff


def _side(label: str, report: Report, facts: Facts) -> RunSide:
    v, job = report.verdict, report.job
    nodes = list(job.nodes) or list(facts.get("topology.hosts") or [])
    return RunSide(
        label=label,
        path=job.path,
        status=v.status,
        category=v.category,
        summary=v.summary,
        world_size=facts.get("topology.world_size") or job.world_size,
        nodes=nodes,
        shape=shape_text(facts, job.world_size),
    )


def shape_text(facts: Facts, world_size: int | None = None) -> str:
    """``2 nodes x 2 processes (world 4)`` from the topology facts (what is known of it)."""
    nnodes, nproc = facts.get("topology.nnodes"), facts.get("topology.nproc_per_node")
    world = facts.get("topology.world_size") or world_size
    parts = []
    if isinstance(nnodes, int):
        parts.append(f"{nnodes} node{'s' if nnodes != 1 else ''}")
    if isinstance(nproc, int):
        parts.append(f"{nproc} process{'es' if nproc != 1 else ''}")
    text = " x ".join(parts) if parts else "topology unknown"
    return f"{text} (world {world})" if world else text


def _group(key: str) -> str:
    return _GROUP_OF_SECTION.get(key.partition(".")[0], "other")


def _diffable(key: str) -> bool:
    section, _, name = key.partition(".")
    if key in _SKIP or section == "signals":
        return False
    # a script argument the trainer/topology facts already carry would be listed twice
    return not (section == "script_args" and name.lstrip("-").rsplit(".", 1)[-1].replace("-", "_") in ALIASES)


def _same(x: Any, y: Any) -> bool:
    return json.dumps(jsonable(x), sort_keys=True, default=str) == json.dumps(jsonable(y), sort_keys=True, default=str)


def _changes(
    fa: Facts, fb: Facts, config_rules: Sequence[Rule], checks_a: list[Finding], checks_b: list[Finding]
) -> list[ConfigChange]:
    by_id = {r.id: r for r in config_rules_of(config_rules)}
    keys = sorted({k for k in (*fa.values, *fb.values) if _diffable(k)})
    changes = []
    for key in keys:
        va, vb = fa.values.get(key), fb.values.get(key)
        if _same(va, vb):
            continue
        risks = _risks(key, by_id, checks_a, checks_b)
        sa, sb = fa.sources.get(key), fb.sources.get(key)
        changes.append(
            ConfigChange(key, _group(key), va, vb, risks, sa.where if sa else None, sb.where if sb else None)
        )
    order = list(GROUPS)
    changes.sort(
        key=lambda c: (
            0 if c.topology else 1 if c.risks else 2,
            TOPOLOGY_CORE.index(c.key) if c.topology else 0,
            -max((SEVERITY_ORDER.get(r.severity, 0) for r in c.risks), default=0),
            order.index(c.group),
            c.key,
        )
    )
    return changes


def _risks(key: str, by_id: dict[str, Any], checks_a: list[Finding], checks_b: list[Finding]) -> list[Risk]:
    ids_a = {f.rule: f for f in checks_a}
    ids_b = {f.rule: f for f in checks_b}
    out = []
    for rule_id in sorted(set(ids_a) | set(ids_b)):
        rule = by_id.get(rule_id)
        if rule is None or not rule.looks_at(key):
            continue
        f = ids_a.get(rule_id) or ids_b[rule_id]
        runs = "A+B" if rule_id in ids_a and rule_id in ids_b else "A" if rule_id in ids_a else "B"
        out.append(Risk(rule_id, f.title, f.message, f.severity, runs))
    out.sort(key=lambda r: (-SEVERITY_ORDER.get(r.severity, 0), r.rule))
    return out


def _shared_risks(checks_a: list[Finding], checks_b: list[Finding], changes: list[ConfigChange]) -> list[Risk]:
    """Config checks firing on both runs: risky settings the comparison cannot blame on a difference."""
    ids_b = {f.rule for f in checks_b}
    out = [Risk(f.rule, f.title, f.message, f.severity, "A+B") for f in checks_a if f.rule in ids_b]
    out.sort(key=lambda r: (-SEVERITY_ORDER.get(r.severity, 0), r.rule))
    return out


# --------------------------------------------------------------------------- progress


def _run_progress(analysis: Analysis, facts: Facts) -> RunProgress:
    frame = analysis.timeline.frame
    # step 0 is a progress bar before the first step, not a step
    steps = frame.filter(pl.col("step").is_not_null() & (pl.col("step") > 0))
    by_rank = {r.rank: r.last_step for r in analysis.report.ranks}
    if not steps.height:
        return RunProgress(None, _int(facts.get("trainer.max_steps")), by_rank, {})
    last = int(steps["step"].max())  # type: ignore[arg-type]
    target = steps["max_steps"].drop_nulls()
    max_steps = int(target.max()) if target.len() else _int(facts.get("trainer.max_steps"))  # type: ignore[arg-type]
    # only times the line printed itself: a progress bar inherits the time of the line above it
    firsts = (
        steps.filter(pl.col("ts").is_not_null() & ~pl.col("ts_inferred").fill_null(False))
        .group_by("step")
        .agg(pl.col("ts").min())
        .sort("step")
    )
    offsets: dict[int, float] = {}
    if firsts.height:
        t0 = firsts["ts"][0]
        offsets = {int(s): (t - t0).total_seconds() for s, t in firsts.iter_rows()}
    reached = {int(s) for s in steps["step"].unique().to_list()}
    return RunProgress(last, max_steps, by_rank, offsets, _stop_note(last, max_steps, facts), reached)


def _stop_note(last: int, max_steps: int | None, facts: Facts) -> str:
    if max_steps is not None and last >= max_steps:
        return ""
    notes = []
    for key, what in (("trainer.eval_steps", "an evaluation step"), ("trainer.save_steps", "a save step")):
        every = _int(facts.get(key))
        if every and last % every == 0 and (key != "trainer.eval_steps" or facts.get("trainer.eval_strategy") != "no"):
            notes.append(f"{what} ({key.partition('.')[2]}={every})")
    return f"step {last} is " + " and ".join(notes) if notes else ""


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _progress(a: Analysis, b: Analysis, fa: Facts, fb: Facts) -> Progress:
    pa, pb = _run_progress(a, fa), _run_progress(b, fb)
    rows = _aligned_rows(pa, pb)
    return Progress(pa, pb, _progress_summary(pa, pb, a.report.verdict.status, b.report.verdict.status), rows)


def _aligned_rows(pa: RunProgress, pb: RunProgress) -> list[dict[str, Any]]:
    steps = sorted(pa.reached | pb.reached)
    if not steps:
        return []
    keep = {steps[0], steps[-1]}
    for p in (pa, pb):
        if p.last_step is not None:
            keep.add(p.last_step)
            if p.last_step + 1 in steps:
                keep.add(p.last_step + 1)
    room = max(0, PROGRESS_ROWS - len(keep))
    if room and len(steps) > len(keep):
        stride = max(1, len(steps) // (room + 1))
        keep.update(steps[::stride][: room + 1])
    return [
        {
            "step": s,
            "a_reached": s in pa.reached,
            "b_reached": s in pb.reached,
            "a": _round(pa.step_offsets.get(s)),
            "b": _round(pb.step_offsets.get(s)),
        }
        for s in sorted(keep)[: PROGRESS_ROWS + 4]
    ]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _progress_summary(pa: RunProgress, pb: RunProgress, status_a: str, status_b: str) -> str:
    def one(label: str, p: RunProgress, status: str) -> str:
        if p.last_step is None:
            return f"{label} logged no training step ({status})"
        total = f"/{p.max_steps}" if p.max_steps else ""
        verb = "reached" if p.max_steps and p.last_step >= p.max_steps else "stopped at"
        note = f"; {p.stop_note}" if p.stop_note else ""
        return f"{label} {verb} step {p.last_step}{total} ({status}{note})"

    text = f"{one('A', pa, status_a)}; {one('B', pb, status_b)}"
    if pa.last_step is not None and pb.last_step is not None and pa.last_step != pb.last_step:
        ahead, behind = ("A", "B") if pa.last_step > pb.last_step else ("B", "A")
        text += f". {ahead} got {abs(pa.last_step - pb.last_step)} steps further than {behind}"
    return text + "."


# --------------------------------------------------------------------------- first divergence


def template_expr(col: str = "message", hosts: Sequence[str] = ()) -> pl.Expr:
    """A polars expression masking numbers, paths, times, hex, addresses and ``hosts`` in ``col``."""
    expr = pl.col(col).fill_null("")
    names = [h for h in sorted(set(hosts), key=len, reverse=True) if h]
    if names:
        expr = expr.str.replace_many(names, ["<host>"] * len(names))
    for pattern, repl in _MASKS:
        expr = expr.str.replace_all(pattern, repl)
    return expr.str.strip_chars()


def template(text: str, hosts: Sequence[str] = ()) -> str:
    """The template of one line (what :func:`template_expr` computes, for tests and callers)."""
    return str(pl.DataFrame({"m": [text]}).select(template_expr("m", hosts)).item())


def _hosts(frame: pl.DataFrame) -> list[str]:
    return [str(h) for c in ("node", "host") if c in frame.columns for h in frame[c].drop_nulls().unique().to_list() if h]


def _events(frame: pl.DataFrame, families: set[str], hosts: list[str]) -> pl.DataFrame:
    return (
        frame.filter(
            pl.col("ts").is_not_null()
            & (pl.col("kind").fill_null("info") != "progress")
            & (pl.col("kind").fill_null("info") != "stack")
            & pl.col("family").is_in(sorted(families))
        )
        .select(
            "file", "line", "rank", "ts", "ts_inferred", "kind", "message",
            template_expr("message", hosts).alias("template"),
        )
        .filter(pl.col("template") != "")
        .sort(["ts", "file", "line"])
    )


def _divergence(fa: pl.DataFrame, fb: pl.DataFrame) -> list[Divergence]:
    families = set(fa["family"].drop_nulls().unique().to_list()) & set(fb["family"].drop_nulls().unique().to_list())
    if not families:
        return []
    # both runs' host names are masked in both: "host=node-a" in one run's text is no difference
    hosts = sorted(set(_hosts(fa)) | set(_hosts(fb)))
    ea, eb = _events(fa, families, hosts), _events(fb, families, hosts)
    out = []
    for label, mine, other, frame in (("A", ea, eb, fa), ("B", eb, ea, fb)):
        first = _first_only(label, mine, other, frame, notable=False)
        if first is None:
            continue
        out.append(first)
        if first.kind not in NOTABLE_KINDS:
            # the very first difference is often chatter (a progress bar, a daemon's retry line);
            # the first error or warning only this run has is what an expert looks for next
            notable = _first_only(label, mine, other, frame, notable=True)
            if notable is not None:
                out.append(notable)
    out.sort(key=lambda d: (d.notable, d.offset_s is None, d.offset_s or 0.0, d.run))
    return out


def _first_only(
    label: str, mine: pl.DataFrame, other: pl.DataFrame, frame: pl.DataFrame, *, notable: bool
) -> Divergence | None:
    if not mine.height:
        return None
    known = other.select("template").unique()
    flagged = mine.with_columns(pl.col("template").is_in(known["template"].implode()).alias("_shared"))
    only = flagged.filter(~pl.col("_shared"))
    if notable:
        only = only.filter(pl.col("kind").is_in(list(NOTABLE_KINDS)))
    if not only.height:
        return None
    row = only.row(0, named=True)
    t0 = mine["ts"][0]
    # what the same stream printed just before (times tie often: inherited from the line above)
    before = flagged.filter(pl.col("_shared") & (pl.col("file") == row["file"]) & (pl.col("line") < row["line"]))
    if not before.height:
        before = flagged.filter(pl.col("_shared") & (pl.col("ts") <= row["ts"]))
    after = before.sort(["ts", "line"])["message"][-1] if before.height else None
    steps = frame.filter(pl.col("step").is_not_null() & pl.col("ts").is_not_null() & (pl.col("ts") <= row["ts"]))
    step = int(steps["step"].max()) if steps.height else None  # type: ignore[arg-type]
    return Divergence(
        run=label,
        template=row["template"],
        text=row["message"] or "",
        file=row["file"] or "",
        line=int(row["line"] or 0),
        rank=row["rank"],
        ts=row["ts"],
        # an inherited time (the line printed none) would make a made-up offset
        offset_s=round((row["ts"] - t0).total_seconds(), 3) if t0 is not None and not row["ts_inferred"] else None,
        step=step,
        after=after,
        kind=row["kind"],
        notable=notable,
    )


# --------------------------------------------------------------------------- findings


def _findings_only(fa: list[Finding], fb: list[Finding]) -> tuple[list[FindingRef], list[FindingRef]]:
    def refs(mine: list[Finding], other: list[Finding]) -> list[FindingRef]:
        other_rules = {f.rule for f in other}
        seen: dict[str, FindingRef] = {}
        for f in mine:
            if f.rule in other_rules or f.rule in seen:
                continue
            seen[f.rule] = FindingRef(
                f.rule, f.title, f.severity, f.category, f.message, sorted(f.ranks), f.role == "primary"
            )
        return sorted(seen.values(), key=lambda r: (not r.primary, -SEVERITY_ORDER.get(r.severity, 0), r.rule))

    return refs(fa, fb), refs(fb, fa)


# --------------------------------------------------------------------------- headline


def _headline(d: RunDiff) -> list[str]:
    lines = []
    topo = [c for c in d.changes if c.topology]
    if topo:
        lines.append(f"Topology changed: A {d.a.shape}, B {d.b.shape}.")
    else:
        lines.append(f"Same topology: {d.a.shape}.")
    # one line per check: several facts behind one check (eval and train split sizes) say it once
    told: set[str] = set()
    risky = []
    for c in d.changes:
        if c.risks and not c.topology and not {r.rule for r in c.risks} <= told:
            risky.append(c)
            told.update(r.rule for r in c.risks)
    for c in risky[:4]:
        risk = c.risks[0]
        lines.append(
            f"Risky difference {c.key}: A {value_text(c.a)}, B {value_text(c.b)} ({risk.rule}: {risk.message})."
        )
    if len(risky) > 4:
        lines.append(f"{len(risky) - 4} more risky differences below.")
    if d.shared_risks:
        names = ", ".join(r.rule for r in d.shared_risks)
        lines.append(f"Risky settings in both runs (not a difference): {names}.")
    lines.append(d.progress.summary)
    for div in d.divergence[:2]:
        lines.append(f"{div.title}: {div.text.strip()[:160]}")
    if d.only_a or d.only_b:
        lines.append(
            f"Findings only in A: {', '.join(f.rule for f in d.only_a) or '-'}; "
            f"only in B: {', '.join(f.rule for f in d.only_b) or '-'}."
        )
    return lines


def value_text(value: Any, width: int = 80) -> str:
    """A fact value as short text: ``-`` when absent, lists joined, long text cut."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (list, tuple)):
        text = ", ".join(value_text(v, width) for v in value)
    elif isinstance(value, dict):
        text = "; ".join(f"{k}: {value_text(v, width)}" for k, v in value.items())
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def step_cell(row: dict[str, Any], side: str) -> str:
    """An aligned-progress cell: the time since the run's first step, "reached", or "-"."""
    if not row[f"{side}_reached"]:
        return "-"
    return seconds_text(row[side]) if row[side] is not None else "reached"


def seconds_text(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"+{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"+{hours}h{minutes:02d}m" if hours else f"+{minutes}m{seconds:02d}s"


# --------------------------------------------------------------------------- renderers


_SEV_STYLE = {"critical": "bold red", "error": "red", "warning": "yellow", "info": "dim"}
_STATUS_STYLE = {"failed": "bold white on red", "hung": "bold black on yellow", "completed": "bold white on green"}


def render_terminal(d: RunDiff, console: Console) -> None:
    """Print the comparison: runs, headline, config differences, progress, divergence, findings."""
    from rich import box
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    head = Table.grid(padding=(0, 2))
    for side in (d.a, d.b):
        t = Text()
        t.append(f"{side.label} ", style="bold")
        t.append(f" {side.status.upper()} ", style=_STATUS_STYLE.get(side.status, "bold reverse"))
        t.append(f"  {side.category}  ", style="bold")
        t.append(side.shape)
        head.add_row(t, Text(side.path, style="dim"))
    lines = Text("\n").join(Text(h) for h in d.headline)
    console.print(Panel.fit(Text.assemble(lines), title="postmortem diff", border_style="cyan"))
    console.print(head)
    if d.changes:
        table = Table(box=box.SIMPLE_HEAD, show_lines=False, title="configuration differences", title_justify="left")
        table.add_column("group", style="dim", no_wrap=True)
        table.add_column("setting", no_wrap=True)
        table.add_column("A", overflow="fold")
        table.add_column("B", overflow="fold")
        table.add_column("risk", overflow="fold")
        for _, title, changes in _display_groups(d):
            for c in changes:
                risk = Text()
                for r in c.risks:
                    if risk:
                        risk.append("\n")
                    risk.append(f"{r.rule} ({r.runs})", style=_SEV_STYLE.get(r.severity, ""))
                setting = Text(c.name, style="bold" if c.topology or c.risks else "")
                table.add_row(title, setting, Text(value_text(c.a, 60)), Text(value_text(c.b, 60)), risk)
        console.print(table)
    else:
        console.print(Text("No configuration differences in what the logs show.", style="dim"))
    if d.shared_risks:
        console.print(Text("Risky settings in both runs:", style="bold"))
        for r in d.shared_risks:
            console.print(Text.assemble("  ", (r.rule, _SEV_STYLE.get(r.severity, "")), f"  {r.message}"))
    console.print(Text("Progress: ", style="bold") + Text(d.progress.summary))
    if d.progress.rows:
        pt = Table("step", "A", "B", box=box.SIMPLE, title="time since each run's first step", title_justify="left")
        for row in d.progress.rows:
            pt.add_row(str(row["step"]), step_cell(row, "a"), step_cell(row, "b"))
        console.print(pt)
    for div in d.divergence:
        console.print(Text(div.title, style="bold") + Text(f"  {div.file}:{div.line}", style="dim"))
        if div.after:
            console.print(Text("  after: ", style="dim") + Text(div.after.strip()[:200]))
        console.print(Text("  ") + Text(div.text.strip()[:400]))
    for label, refs in (("A", d.only_a), ("B", d.only_b)):
        if refs:
            console.print(Text(f"Findings only in {label}:", style="bold"))
            for f in refs:
                console.print(Text.assemble("  ", (f.rule, _SEV_STYLE.get(f.severity, "")), f"  {f.message or f.title}"))


def _display_groups(d: RunDiff) -> list[tuple[str, str, list[ConfigChange]]]:
    """Leading rows (topology, risky) first as their own group, then the rest by group."""
    leading = d.leading()
    rest = [c for c in d.changes if c not in leading]
    out: list[tuple[str, str, list[ConfigChange]]] = []
    if leading:
        out.append(("leading", "Topology and risks", leading))
    for gid, title in GROUPS.items():
        rows = [c for c in rest if c.group == gid]
        if rows:
            out.append((gid, title, rows))
    return out


def render_markdown(d: RunDiff) -> str:
    """The comparison as GitHub-flavoured Markdown (log text only inside code spans)."""
    from postmortem.render.markdown import code, fence, text

    out = [f"## postmortem diff: A {d.a.status.upper()} vs B {d.b.status.upper()}", ""]
    out += ["| | A | B |", "|---|---|---|"]
    out.append(f"| Job | {code(d.a.path)} | {code(d.b.path)} |")
    out.append(f"| Verdict | `{d.a.category}` | `{d.b.category}` |")
    out.append(f"| Shape | {text(d.a.shape)} | {text(d.b.shape)} |")
    out.append("")
    out.extend(f"- {text(h)}" for h in d.headline)
    out.append("")
    if d.changes:
        out += ["### Configuration differences", ""]
        for _, title, changes in _display_groups(d):
            out += [f"**{text(title)}**", "", "| setting | A | B | risk |", "|---|---|---|---|"]
            for c in changes:
                risks = "<br>".join(f"{code(r.rule)} ({r.runs}): {text(r.message)}" for r in c.risks) or ""
                out.append(f"| {code(c.key)} | {code(value_text(c.a, 120))} | {code(value_text(c.b, 120))} | {risks} |")
            out.append("")
    if d.shared_risks:
        out += ["### Risky settings in both runs", ""]
        out.extend(f"- {code(r.rule)}: {text(r.message)}" for r in d.shared_risks)
        out.append("")
    out += ["### Progress", "", text(d.progress.summary), ""]
    if d.progress.rows:
        out += ["| step | A | B |", "|---|---|---|"]
        out.extend(f"| {r['step']} | {step_cell(r, 'a')} | {step_cell(r, 'b')} |" for r in d.progress.rows)
        out.append("")
    if d.divergence:
        out += ["### First event one run has and the other does not", ""]
        for div in d.divergence:
            step = f" (after step {div.step})" if div.step is not None else ""
            out.append(f"**{div.title}**{step}, {code(f'{div.file}:{div.line}')}:")
            out.append("")
            out.extend(fence([div.text.strip()[:2000]]))
            out.append("")
    for label, refs in (("A", d.only_a), ("B", d.only_b)):
        if refs:
            out += [f"### Findings only in {label}", ""]
            out.extend(f"- {code(f.rule)} ({f.severity}): {text(f.message or f.title)}" for f in refs)
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_html(d: RunDiff) -> str:
    """The comparison as one self-contained HTML page (``templates/diff.html.j2``)."""
    from markupsafe import Markup

    from postmortem.resources import templates_dir

    env = _environment(str(templates_dir()))
    css = (templates_dir() / "report.css").read_text(encoding="utf-8")
    return env.get_template("diff.html.j2").render(
        d=d,
        groups=_display_groups(d),
        css=Markup(css),
        csp="default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'",
        max_step=max(
            [s for s in (d.progress.a.last_step, d.progress.b.last_step, d.progress.a.max_steps, d.progress.b.max_steps) if s]
            or [1]
        ),
    )


@lru_cache(maxsize=4)
def _environment(path: str) -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(path),
        autoescape=True,  # log text is full of < > &
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(value_text=value_text, seconds_text=seconds_text, step_cell=step_cell)
    return env


def write_diff(d: RunDiff, output: Path, fmt: str | None = None) -> None:
    """Write the comparison to ``output`` as HTML, Markdown or JSON (by ``fmt`` or the extension)."""
    from postmortem.errors import ReportError

    kind = fmt or {".html": "html", ".htm": "html", ".md": "md", ".json": "json"}.get(output.suffix.lower())
    if kind is None:
        raise ReportError(f"{output}: unknown diff format {output.suffix!r} (use .html, .md or .json)")
    if kind == "html":
        content = render_html(d)
    elif kind == "md":
        content = render_markdown(d)
    else:
        content = json.dumps(d.to_dict(), indent=2, ensure_ascii=False) + "\n"
    try:
        output.write_text(content, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write the diff to {output}: {exc.strerror or exc}") from exc


__all__ = [
    "GROUPS",
    "TOPOLOGY_CORE",
    "ConfigChange",
    "Divergence",
    "FindingRef",
    "Progress",
    "Risk",
    "RunDiff",
    "RunProgress",
    "RunSide",
    "diff_runs",
    "render_html",
    "render_markdown",
    "render_terminal",
    "shape_text",
    "template",
    "template_expr",
    "value_text",
    "write_diff",
]
