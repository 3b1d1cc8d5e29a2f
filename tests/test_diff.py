"""``postmortem diff``: two runs side by side (postmortem/diff.py, postmortem/diff_cli.py).

The main pair is seed 004 as a fixture written from real-format lines: the ms-swift job launched
on two nodes x two processes (hangs at the first evaluation) against one node x four processes
(completes). Corpus pairs (``reconstructed/`` and ``real/seed004_*``) are used when present.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from postmortem import api
from postmortem.diff import RunDiff, diff_runs, render_html, render_markdown, render_terminal, template
from postmortem.diff_cli import diff_command
from tests.conftest import SAMPLES
from tests.test_config import BANNER, IPV6, lines, seed004

ONE_NODE_FLAGS = f"--nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr={IPV6} --master_port=10217"


def swift_step(step: int, total: int, loss: float) -> str:
    return (
        f"{{'loss': {loss:.8f}, 'grad_norm': 1.84, 'learning_rate': 1e-05, 'token_acc': 0.55, 'epoch': 0.03, "
        f"'global_step/max_steps': '{step}/{total}', 'percentage': '{100 * step / total:.2f}%', "
        f"'elapsed_time': '{9 * step}s', 'remaining_time': '59m 1s', 'memory(GiB)': 61.2, 'train_speed(iter/s)': 0.11}}"
    )


def start_lines(world: int, local: int) -> list[str]:
    return [
        *BANNER,
        f"[INFO:swift] rank: 0, local_rank: 0, world_size: {world}, local_world_size: {local}.",
        "[INFO:swift] swift.__version__: 3.5.3",
        "[2025-07-15 10:15:43,228] [INFO] [comm.py:700:init_distributed] Initializing TorchBackend in DeepSpeed "
        "with backend nccl",
        "[INFO:swift] val_dataset: Dataset({",
        "    features: ['input_ids', 'labels', 'length'],",
        "    num_rows: 140",
        "})",
    ]


def evaluation(step: int, total: int) -> list[str]:
    return [
        "***** Running Evaluation *****",
        "  Num examples = 140",
        "  Batch size = 1",
        f"{{'eval_loss': 2.0133, 'eval_token_acc': 0.56, 'eval_runtime': 21.3, 'epoch': 0.03, "
        f"'global_step/max_steps': '{step}/{total}'}}",
    ]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """(two nodes x two processes that hang at step 10's evaluation, one node x four that completes)."""
    a = tmp_path / "two_nodes"
    for n, host in enumerate(("h20-node-17", "h20-node-18")):
        (a / host).mkdir(parents=True)
        (a / host / "cmd.sh").write_text(lines("#!/bin/bash", "cd /data/pt", seed004(n)))
    (a / "h20-node-17" / "console.log").write_text(
        lines(
            *start_lines(4, 2),
            *(swift_step(s, 400, 2.1 - s / 100) for s in range(1, 11)),
            "***** Running Evaluation *****",
            "  Num examples = 140",
            "  Batch size = 1",
            "wandb: Network error (ReadTimeout), entering retry loop.",
        )
    )
    (a / "h20-node-18" / "console.log").write_text(lines(*start_lines(4, 2)))
    # what a user collects from a hung job: py-spy dumps of the live processes (the real job's form,
    # sample_logs/real/seed004_two_nodes_hang): rank 0 in step 11's backward, rank 2 still in evaluate()
    for host, rank, frames in (
        ("h20-node-17", 0, ["_engine_run_backward (torch/autograd/graph.py:979)", "train (swift_pt.py:361)"]),
        ("h20-node-18", 2, ["all_gather (torch/distributed/distributed_c10d.py:3434)", "evaluate (swift_pt.py:290)"]),
    ):
        (a / host / "pyspy").mkdir()
        (a / host / "pyspy" / f"rank{rank}.txt").write_text(
            lines(
                f"Process {12308 + rank}: /opt/conda/bin/python3 -u ./swift_pt.py",
                "Python v3.11.7 (/opt/conda/bin/python3.11)",
                "",
                f'Thread {12308 + rank} (idle): "MainThread"',
                *(f"    {f}" for f in frames),
                "    main (swift_pt.py:447)",
            )
        )
    b = tmp_path / "one_node"
    b.mkdir()
    (b / "cmd.sh").write_text(
        lines("#!/bin/bash", "cd /data/pt", seed004(0).replace(ONE_NODE_FLAGS, "--nproc_per_node=4").replace(
            "--max_steps 400", "--max_steps 40"
        ))
    )
    body: list[str] = []
    for s in range(1, 41):
        body.append(swift_step(s, 40, 2.1 - s / 100))
        if s % 10 == 0:
            body += evaluation(s, 40)
    (b / "console.log").write_text(
        lines(
            *start_lines(4, 4),
            *body,
            "[INFO:swift] Saving model checkpoint to /data/pt/workdir/swift_output/v0-20250714-193012/checkpoint-40",
            "{'train_runtime': 2263.3, 'train_samples_per_second': 0.566, 'train_steps_per_second': 0.018, "
            "'train_loss': 1.91, 'epoch': 0.12, 'global_step/max_steps': '40/40'}",
        )
    )
    return a, b


def diff_of(a: Path, b: Path) -> RunDiff:
    return diff_runs(api.analyze(a), api.analyze(b))


# --------------------------------------------------------------------------- what the diff says


def test_diff_leads_with_topology_change_then_risky_settings(pair: tuple[Path, Path]) -> None:
    d = diff_of(*pair)
    keys = [c.key for c in d.changes]
    assert keys[:3] == ["topology.nnodes", "topology.nproc_per_node", "launcher.master_addr"]
    assert (d.changes[0].a, d.changes[0].b) == (2, 1)
    assert (d.changes[1].a, d.changes[1].b) == (2, 4)
    assert "topology.world_size" not in keys  # 4 in both runs: not a change
    addr = d.changes[2]
    assert (addr.a, addr.b, addr.group) == (IPV6, None, "launcher")
    assert [r.rule for r in addr.risks] == ["config-ipv6-master-addr", "config-ipv6-master-without-socket-ifname"]
    assert {r.runs for r in addr.risks} == {"A"}
    assert addr.source_a == "h20-node-17/cmd.sh:3"
    # every leading row (topology or risk) comes before every other row
    leading = [c.topology or bool(c.risks) for c in d.changes]
    assert leading == sorted(leading, reverse=True)
    steps = next(c for c in d.changes if c.key == "trainer.max_steps")
    assert (steps.a, steps.b, steps.risks) == (400, 40, [])
    assert d.headline[0] == "Topology changed: A 2 nodes x 2 processes (world 4), B 1 node x 4 processes (world 4)."
    assert d.headline[1].startswith(f"Risky difference launcher.master_addr: A {IPV6}, B - (config-ipv6-master-addr: ")
    # the duplicated --dataloader_num_workers is risky in both runs, so it is no difference
    assert [r.rule for r in d.shared_risks] == ["config-duplicated-cli-argument"]
    assert "dataloader" not in " ".join(keys)


def test_progress_aligned_by_step(pair: tuple[Path, Path]) -> None:
    p = diff_of(*pair).progress
    assert (p.a.last_step, p.a.max_steps, p.b.last_step, p.b.max_steps) == (10, 400, 40, 40)
    assert p.a.stop_note == "step 10 is an evaluation step (eval_steps=10)"
    assert p.b.stop_note == ""
    assert p.summary == (
        "A stopped at step 10/400 (hung; step 10 is an evaluation step (eval_steps=10)); "
        "B reached step 40/40 (completed). B got 30 steps further than A."
    )
    by_step = {r["step"]: r for r in p.rows}
    assert by_step[10]["a_reached"] and by_step[10]["b_reached"]
    assert not by_step[11]["a_reached"] and by_step[11]["b_reached"]
    assert by_step[40]["b_reached"] and 1 in by_step


def test_first_event_only_one_run_has(pair: tuple[Path, Path]) -> None:
    d = diff_of(*pair)
    only_a = next(x for x in d.divergence if x.run == "A" and not x.notable)
    assert only_a.text == "wandb: Network error (ReadTimeout), entering retry loop."
    assert (only_a.file, only_a.line) == ("h20-node-17/console.log", 24)
    assert only_a.step == 10
    assert only_a.after == "  Batch size = 1"
    only_b = next(x for x in d.divergence if x.run == "B" and not x.notable)
    assert only_b.text.startswith("[INFO:swift] Saving model checkpoint to ")


def test_findings_in_one_run_only(pair: tuple[Path, Path]) -> None:
    d = diff_of(*pair)
    a_rules = {f.rule for f in d.only_a}
    assert {"config-ipv6-master-addr", "config-ipv6-master-without-socket-ifname"} <= a_rules
    assert "config-duplicated-cli-argument" not in a_rules | {f.rule for f in d.only_b}
    assert d.a.status == "hung" and d.b.status == "completed"


def test_template_masks_what_varies() -> None:
    one = template("[W715 10:15:43.628614140 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 1] using GPU 1 "
                   "at 0x7f3a2c, /data/pt/run-17/x.pt on h20-node-17 from 2605:340::d4d0", hosts=["h20-node-17"])
    two = template("[W716 09:01:02.000000001 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 3] using GPU 3 "
                   "at 0xffff01, /home/u/other/y.pt on node-b from 10.0.0.7", hosts=["node-b"])
    assert one == two
    assert "<host>" in one and "<path>" in one and "<hex>" in one and "<addr>" in one


# --------------------------------------------------------------------------- renderers


def test_json_is_the_whole_comparison(pair: tuple[Path, Path]) -> None:
    doc = json.loads(json.dumps(diff_of(*pair).to_dict()))
    assert doc["kind"] == "postmortem-diff" and doc["schema_version"] == "1"
    first = doc["changes"][0]
    assert (first["key"], first["a"], first["b"], first["topology_change"]) == ("topology.nnodes", 2, 1, True)
    assert doc["changes"][2]["risks"][0]["rule"] == "config-ipv6-master-addr"
    assert doc["progress"]["a"]["last_step"] == 10
    assert doc["config"]["a"]["launcher"]["master_addr"] == IPV6
    assert doc["config"]["b"]["topology"]["nproc_per_node"] == 4
    assert doc["findings"]["only_b"] == [] or all(f["rule"] != "config-ipv6-master-addr" for f in doc["findings"]["only_b"])


def test_markdown_and_terminal_put_topology_first(pair: tuple[Path, Path]) -> None:
    d = diff_of(*pair)
    md = render_markdown(d)
    section = md[md.index("### Configuration differences"):]
    assert section.index("**Topology and risks**") < section.index("`topology.nnodes`")
    assert section.index("`topology.nnodes`") < section.index("`launcher.master_addr`") < section.index("`trainer.max_steps`")
    assert "`config-ipv6-master-addr` (A)" in md
    console = Console(record=True, width=180, color_system=None)
    render_terminal(d, console)
    out = console.export_text()
    assert out.index("Topology changed") < out.index("configuration differences")
    table = out[out.index("configuration differences"):]
    assert table.index("nnodes") < table.index("nproc_per_node") < table.index("master_addr") < table.index("max_steps")
    assert "config-duplicated-cli-argument" in out[out.index("Risky settings in both runs"):]


def test_html_is_self_contained_and_escaped(pair: tuple[Path, Path]) -> None:
    a, b = pair
    console = a / "h20-node-17" / "console.log"
    console.write_text(console.read_text().replace("entering retry loop.", "entering retry loop <img src=x onerror=alert(1)>"))
    html = render_html(diff_of(a, b))
    # autoescaped attribute: &#39; is the quote once the browser reads it
    assert '<meta http-equiv="Content-Security-Policy" content="default-src &#39;none&#39;;' in html
    assert "<script" not in html and "<link" not in html and "http://" not in html.replace("http-equiv", "")
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    body = html[html.index('<section id="config">'):]
    assert body.index("Topology and risks") < body.index("topology.nnodes") < body.index("launcher.master_addr")
    assert body.index("launcher.master_addr") < body.index("trainer.max_steps")


def test_cli_diff_command(pair: tuple[Path, Path], tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(diff_command)
    runner = CliRunner()
    a, b = pair
    result = runner.invoke(app, [str(a), str(b), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["changes"][0]["key"] == "topology.nnodes"
    out = tmp_path / "diff.html"
    result = runner.invoke(app, [str(a), str(b), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "Topology changed" not in result.stdout  # like analyze: -o alone writes the file only
    result = runner.invoke(app, [str(a), str(b), "-o", str(tmp_path / "diff.md"), "-f", "text"])
    assert result.exit_code == 0, result.output
    assert "Topology changed" in result.stdout
    assert (tmp_path / "diff.md").read_text(encoding="utf-8").startswith("## postmortem diff: A HUNG vs B COMPLETED")
    result = runner.invoke(app, [str(a), str(b), "--format", "html"])
    assert result.exit_code == 2


# --------------------------------------------------------------------------- corpus pairs


def corpus_pair(kind: str) -> tuple[Path, Path]:
    jobs = (SAMPLES / kind / "seed004_two_nodes_hang" / "job", SAMPLES / kind / "seed004_one_node_ok" / "job")
    assert all(j.is_dir() for j in jobs), f"corpus pair {kind}/seed004_* is missing"
    return jobs


def test_corpus_reconstructed_seed004_pair() -> None:
    d = diff_of(*corpus_pair("reconstructed"))
    assert [c.key for c in d.changes[:3]] == ["topology.nnodes", "topology.nproc_per_node", "launcher.master_addr"]
    assert d.changes[2].risks[0].rule == "config-ipv6-master-addr"
    assert d.progress.a.last_step == 10 and d.progress.a.stop_note == "step 10 is an evaluation step (eval_steps=10)"
    assert [r.rule for r in d.shared_risks] == ["config-duplicated-cli-argument"]


def test_corpus_real_seed004_pair_names_the_uneven_split() -> None:
    d = diff_of(*corpus_pair("real"))
    assert [c.key for c in d.changes[:2]] == ["topology.nnodes", "topology.nproc_per_node"]
    split = next(c for c in d.changes if c.key == "dataset.eval_samples_by_node")
    assert split.a == {"node-a": 20, "node-b": 21} and split.b is None
    assert "config-data-split-differs-across-nodes" in [r.rule for r in split.risks]
    assert d.changes.index(split) < next(i for i, c in enumerate(d.changes) if not (c.topology or c.risks))
    assert d.progress.a.last_step == 10 and d.progress.b.last_step == d.progress.b.max_steps
    first_a = next(x for x in d.divergence if x.run == "A")
    assert "no training progress" in first_a.text
