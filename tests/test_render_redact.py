from __future__ import annotations

import json
from dataclasses import replace

import polars as pl

from postmortem.model import Evidence, Finding, FirstFailure
from postmortem.render import redact
from postmortem.render.html import html_text
from postmortem.render.markdown import render_markdown
from postmortem.render.redact import Redactor
from tests.test_render_fixtures import T0, seed000_hang, watchdog_1024

HOSTS = ["gpu-a100-17.corp.example.com", "gpu-a100-18.corp.example.com"]
SECRETS = [
    "gpu-a100-17",
    "gpu-a100-18",
    "corp.example.com",
    "10.20.30.41",
    "192.168.7.12",
    "alice",
    "bob.smith",
    "ops-team@example.com",
]


def _sensitive_report():
    report, timeline = seed000_hang()
    node = {r: HOSTS[r // 4] for r in range(8)}
    text = (
        "[rank5]: RuntimeError: connect() to gpu-a100-18:29500 (192.168.7.12) failed; "
        "see /home/alice/runs/job7/out.log or mail ops-team@example.com"
    )
    start = text.index("gpu-a100-18")
    ev = Evidence(
        file="logs/gpu-a100-18.corp.example.com/rank5.log",
        line=88,
        rank=5,
        text=text,
        ts=T0,
        context=[(87, "MASTER_ADDR=10.20.30.41 user=/Users/bob.smith/.cache")],
        span=(start, start + len("gpu-a100-18:29500")),
    )
    finding = Finding(
        id="tcpstore-connect",
        rule="tcpstore-connect",
        category="network_failure",
        severity="error",
        title="Rank 5 could not reach gpu-a100-18",
        ranks=[5],
        nodes=[HOSTS[1]],
        evidence=[ev],
        references=["https://example.com/kept"],
        fields={"host": "gpu-a100-18", "ip": "192.168.7.12"},
        role="primary",
        message=text,
    )
    report = replace(
        report,
        job=replace(report.job, path="/home/alice/jobs/seed000", nodes=HOSTS),
        ranks=[replace(r, node=node[r.rank]) for r in report.ranks],
        findings=[finding, *report.findings],
        verdict=replace(
            report.verdict,
            summary="Rank 5 on gpu-a100-18 (192.168.7.12) failed first; loopback 127.0.0.1 is fine.",
            first_failure=FirstFailure(rank=5, ts=T0, file=ev.file, line=88, text=text),
        ),
        facts={"by_node": {HOSTS[0]: 1, HOSTS[1]: 2}},
    )
    timeline = timeline.with_columns(
        pl.col("rank").replace_strict(node, return_dtype=pl.String).alias("node"),
        (
            pl.col("message") + pl.lit(" host=") + pl.col("rank").replace_strict(node, return_dtype=pl.String)
        ).alias("message"),
        pl.lit("/home/alice/train.py").alias("frame"),
    )
    return report, timeline


def test_redact_replaces_everything_consistently() -> None:
    report, timeline = _sensitive_report()
    red, red_tl = redact(report, timeline)
    dumped = json.dumps(red.to_dict()) + red_tl.write_csv()
    for secret in SECRETS:
        assert secret not in dumped, secret
    assert red.job.nodes == ["node-1", "node-2"]
    assert [r.node for r in red.ranks] == ["node-1"] * 4 + ["node-2"] * 4
    assert sorted(red_tl["node"].unique().to_list()) == ["node-1", "node-2"]
    assert red.job.path == "/home/user1/jobs/seed000"
    assert red.job.env["MASTER_ADDR"] == "10.x.x.1"
    assert red.verdict.summary == "Rank 5 on node-2 (10.x.x.2) failed first; loopback 127.0.0.1 is fine."
    f = red.findings[0]
    assert f.title == "Rank 5 could not reach node-2"
    assert f.nodes == ["node-2"] and f.fields == {"host": "node-2", "ip": "10.x.x.2"}
    assert f.references == ["https://example.com/kept"]  # our own text, left alone
    assert (f.id, f.rule, f.category) == ("tcpstore-connect", "tcpstore-connect", "network_failure")
    ev = f.evidence[0]
    assert ev.file == "logs/node-2/rank5.log"
    assert ev.text == (
        "[rank5]: RuntimeError: connect() to node-2:29500 (10.x.x.2) failed; "
        "see /home/user1/runs/job7/out.log or mail email1@redacted.invalid"
    )
    assert ev.span is not None and ev.text[ev.span[0] : ev.span[1]] == "node-2:29500"
    assert ev.context == [(87, "MASTER_ADDR=10.x.x.1 user=/Users/user2/.cache")]
    assert red.facts == {"by_node": {"node-1": 1, "node-2": 2}}
    assert set(red_tl["frame"].unique().to_list()) == {"/home/user1/train.py"}
    assert red_tl.filter(pl.col("rank") == 5)["message"][0].endswith(" host=node-2")
    # the original is untouched
    assert report.job.nodes == HOSTS


def test_redacted_renders_leak_nothing() -> None:
    red, red_tl = redact(*_sensitive_report())
    page = html_text(red, red_tl)
    md = render_markdown(red)
    for secret in SECRETS:
        assert secret not in page, secret
        assert secret not in md, secret
    assert "node-2" in page and "10.x.x.2" in page


def test_redact_is_deterministic_and_idempotent() -> None:
    report, timeline = _sensitive_report()
    a, a_tl = redact(report, timeline)
    b, b_tl = redact(report, timeline)
    assert a.to_dict() == b.to_dict() and a_tl.equals(b_tl)
    again, again_tl = redact(a, a_tl)
    assert again.to_dict() == a.to_dict() and again_tl.equals(a_tl)


def test_large_world_redacts_fast_and_whole() -> None:
    report, timeline = watchdog_1024()
    red, red_tl = redact(report, timeline)
    assert red.job.nodes[0] == "node-1" and red.job.nodes[-1] == "node-128"
    assert not red_tl["file"].str.contains("gpu-node").any()
    assert red.verdict.summary.startswith("Rank 517 (node-65) stopped at step 1190")


def test_longest_match_wins_and_spans_move() -> None:
    r = Redactor({"10.0.0.1": "10.x.x.1", "10.0.0.12": "10.x.x.2", "gpu1": "node-1", "gpu12": "node-2"})
    assert r.text("10.0.0.12 10.0.0.1 gpu12 gpu1") == "10.x.x.2 10.x.x.1 node-2 node-1"
    frame = pl.DataFrame({"message": ["10.0.0.12 10.0.0.1 gpu12 gpu1"]})
    assert r.frame(frame)["message"][0] == "10.x.x.2 10.x.x.1 node-2 node-1"
    text, span = r.text_span("at gpu12: boom", (3, 8))
    assert text == "at node-2: boom" and text[span[0] : span[1]] == "node-2"
    text, span = r.text_span("x gpu1 MATCH y", (7, 12))
    assert text[span[0] : span[1]] == "MATCH"
    # an edge inside a replaced name widens to the whole placeholder
    text, span = r.text_span("x gpu12 y", (4, 9))
    assert text[span[0] : span[1]] == "node-2 y"
