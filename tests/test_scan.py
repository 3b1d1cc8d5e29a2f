"""``postmortem scan``: job discovery, parallel analysis, outputs, cache, isolation, time limit, Ray.

Scan roots are built in ``tmp_path`` from small generated jobs (trainer logs on two nodes with
one failure each) and, when the sample corpus is present, copies of corpus jobs at different
depths. Every analyzed row is checked against a direct :func:`postmortem.api.analyze` of the
same job: a scan must say exactly what ``postmortem analyze`` says.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
import typer
from typer.testing import CliRunner

from postmortem.api import analyze
from postmortem.errors import InputError
from postmortem.scan import scan
from postmortem.scan.cache import CACHE_NAME
from postmortem.scan.cli import scan_command
from postmortem.scan.discover_jobs import JobDir, Unlistable, find_jobs
from postmortem.scan.fingerprint import mask
from postmortem.scan.outputs import FINDING_SCHEMA, RUN_SCHEMA, report_rows
from tests.conftest import SAMPLES, corpus_scenarios

REPO = Path(__file__).resolve().parent.parent
GIANT_LINE = b"2026-03-01 08:00:10,000 - INFO - data worker 3 fetched shard 17 of the corpus\n"


def make_giant_job(job: Path) -> Path:
    """A job far slower than a 20 s time limit: 24 files of 1.5 million lines (2.4 GB of text, 7 MB
    gzipped; the whole job takes about 75 s to analyze on an idle 2-core machine today — 8 such
    files took 25 s, which a quiet Ray worker once beat —, the small generated jobs well under 1 s)."""
    data = gzip.compress(GIANT_LINE * 1_500_000, compresslevel=6)
    for rank in range(24):
        write(job / f"rank_{rank}.log.gz", data)
    return job


# --------------------------------------------------------------------------- generated jobs


def make_job(job: Path, kind: str, *, bad: int = 1, steps: int = 20, day: int = 0, ranks: int = 4) -> Path:
    """A two-node job (node-a/, node-b/ with logs/rank_N.log) whose rank ``bad`` fails as ``kind``.

    kinds: oom (CUDA OOM traceback), exception (KeyError traceback), watchdog (every other rank
    times out in ALLREDUCE while ``bad`` stopped), healthy (all ranks reach the last step).
    """
    t0 = datetime(2026, 3, 1, 8, 0, 0) + timedelta(days=day)
    per_node = ranks // 2
    for rank in range(ranks):
        node = "node-a" if rank < per_node else "node-b"
        last = steps if kind == "healthy" or rank != bad else steps - 3
        max_steps = steps if kind == "healthy" else 100
        lines = [
            f"{t0 + timedelta(seconds=10 * s):%Y-%m-%d %H:%M:%S},000 - INFO - step {s}/{max_steps} loss={2.5 - s / 100:.3f}"
            for s in range(1, last + 1)
        ]
        ts = t0 + timedelta(seconds=10 * (last + 1))
        if kind == "oom" and rank == bad:
            lines += [
                "Traceback (most recent call last):",
                f'  File "/home/u{day}/train.py", line 88, in <module>',
                "    loss.backward()",
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {rank + 1}.00 GiB "
                f"(GPU {rank % per_node}; 79.15 GiB total capacity)",
            ]
        elif kind == "exception" and rank == bad:
            lines += ["Traceback (most recent call last):", f'  File "/data/job{day}/train.py", line 12, in <module>',
                      "    main()", f"KeyError: 'input_ids_{day}'"]
        elif kind == "watchdog" and rank != bad:
            lines.append(
                f"[rank{rank}]:[E{ts:%m%d %H:%M:%S}.715298746 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught "
                f"collective operation timeout: WorkNCCL(SeqNum={40 + day}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                "Timeout(ms)=600000) ran for 600061 milliseconds before timing out."
            )
        path = job / node / "logs" / f"rank_{rank}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return job


def write(path: Path, text: str | bytes = "x\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def names(items: list[JobDir | Unlistable]) -> list[str]:
    return [item.name for item in items]


def rows_by_name(runs: pl.DataFrame) -> dict[str, dict]:
    return {r["name"]: r for r in runs.to_dicts()}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A scan root: five generated jobs at depths 1-3, an empty-log job, a corrupt-archive job,
    an empty directory and a code directory (neither is a job)."""
    r = tmp_path / "runs"
    make_job(r / "oom-a", "oom", bad=1, steps=20, day=0)
    make_job(r / "2026-03" / "oom-b", "oom", bad=2, steps=30, day=3)
    make_job(r / "team" / "2026-03" / "wd", "watchdog", bad=3, day=5)
    make_job(r / "ok", "healthy")
    make_job(r / "exc", "exception", bad=0, day=9)
    write(r / "empty-log" / "console.log", "")
    write(r / "corrupt" / "rank_0.log.gz", b"\x1f\x8b\x08\x00garbage-not-deflate" * 4)
    (r / "empty-dir").mkdir()
    write(r / "code" / "train.py", "print('hi')\n")
    write(r / "code" / "requirements.txt", "torch\n")
    return r


# --------------------------------------------------------------------------- discovery


def test_discovery_finds_each_job_once_and_never_descends_into_one(tmp_path: Path) -> None:
    r = tmp_path / "root"
    write(r / "a" / "job1" / "console.log")  # logs directly
    write(r / "a" / "job1" / "pyspy" / "rank0.txt")  # part of job1, not a job
    write(r / "b" / "c" / "job2" / "node-a" / "logs" / "rank_0.log")  # only node folders
    write(r / "b" / "c" / "job2" / "node-b" / "logs" / "rank_1.log")
    write(r / "job3" / "logs" / "none_8zuih7tj" / "attempt_0" / "0" / "stderr.log")  # torchrun --log-dir
    write(r / "job4" / "rank_3.log")
    write(r / "job4" / "attempt_0" / "3" / "error.json", "{}")
    write(r / "job5" / "trainer-worker-0" / "stdout")  # a k8s pod folder
    write(r / "job6" / "10.0.0.7" / "console.log.1.gz", b"x")  # node folder named by IP, rotated log
    write(r / "job7" / "h20-node-17" / "console.log")  # host folders with a node token
    write(r / "job7" / "h20-node-18" / "console.log")
    for host, ranks in (("atlas800-11", (0, 1)), ("atlas800-12", (2, 3))):  # hosts: disjoint global ranks
        for rank in ranks:
            write(r / "job8" / host / "logs" / f"rank_{rank}.log")
    for run in ("run-11", "run-12"):  # same names, but each starts at rank 0: two jobs
        write(r / "many" / run / "logs" / "rank_0.log")
        write(r / "many" / run / "logs" / "rank_1.log")
    write(r / "archive" / "logs" / "jobX" / "console.log")  # logs/ holding separate jobs: not merged
    write(r / "archive" / "logs" / "jobY" / "slurm-123.out")
    write(r / "code" / "train.py")
    write(r / "code" / "README.md")
    write(r / "ckpt" / "model.safetensors")
    write(r / "ckpt" / "config.json", "{}")
    write(r / ".hidden" / "console.log")
    (r / "empty").mkdir()
    write(r / "out" / "runs" / "console.log")  # inside the excluded output directory
    found = find_jobs([r], exclude=[r / "out"])
    assert all(isinstance(i, JobDir) for i in found)
    assert names(found) == [
        "a/job1", "archive/logs/jobX", "archive/logs/jobY", "b/c/job2", "job3", "job4", "job5", "job6", "job7",
        "job8", "many/run-11", "many/run-12",
    ]


def test_discovery_finds_every_corpus_job() -> None:
    """Every bundled case (sample corpus and wild corpus alike) is one job, and nothing else is."""
    cases = sorted(p.parent for p in SAMPLES.glob("*/*/expected.json"))
    assert len(cases) > len(corpus_scenarios()) > 20
    found = find_jobs([SAMPLES])
    assert names(found) == sorted(f"{s.parent.name}/{s.name}/job" for s in cases)


def test_a_root_that_is_a_job_is_one_job(tmp_path: Path) -> None:
    job = make_job(tmp_path / "job", "oom")
    assert names(find_jobs([job])) == ["."]


def test_pattern_overrides_detection_and_folds_nested_matches(tmp_path: Path) -> None:
    r = tmp_path / "root"
    write(r / "s1" / "job" / "console.log")
    write(r / "s1" / "job" / "inner" / "job" / "x.log")  # a match inside a match belongs to the outer
    write(r / "s2" / "job" / "node-a" / "x.log")
    write(r / "s2" / "notes.log")  # would be a job by the built-in rule; the pattern says otherwise
    assert names(find_jobs([r], pattern="*/job")) == ["s1/job", "s2/job"]
    assert names(find_jobs([r], pattern="**/job")) == ["s1/job", "s2/job"]


def test_missing_root_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such directory"):
        find_jobs([tmp_path / "nope"])


# --------------------------------------------------------------------------- fingerprint


def test_mask_hides_what_varies_between_jobs_and_keeps_codes() -> None:
    assert mask("Tried to allocate 2.00 GiB on /home/u1/x.py at 10.0.0.7:29500 ptr 0xdeadbeef") == (
        "Tried to allocate N GiB on <path> at <ip> ptr <hex>"
    )
    assert mask("ERR02002 EI0002 node-17.cluster.local") == "ERR02002 EI0002 <host>"


# --------------------------------------------------------------------------- scan end to end


def test_scan_writes_one_row_per_job_matching_analyze(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = scan([root], out, jobs=2, reports=True, timeout_s=120)
    runs = result.runs
    assert (result.jobs, result.analyzed, result.cached) == (7, 7, 0)
    assert runs.schema == pl.Schema(RUN_SCHEMA)
    assert result.findings.schema == pl.Schema(FINDING_SCHEMA)
    rows = rows_by_name(runs)
    assert sorted(rows) == ["2026-03/oom-b", "corrupt", "empty-log", "exc", "ok", "oom-a", "team/2026-03/wd"]

    a, b = rows["oom-a"], rows["2026-03/oom-b"]
    assert (a["status"], a["category"], a["culprit_ranks"], a["culprit_nodes"]) == ("failed", "device_oom", [1], ["node-a"])
    assert (b["culprit_ranks"], b["culprit_nodes"], b["last_step"]) == ([2], ["node-b"], 30)
    assert a["world_size"] == 4 and a["nodes"] == ["node-a", "node-b"]
    assert a["top_rules"][0] == "pytorch-cuda-oom"
    # same kind of failure on another rank, node, step and allocation size: one fingerprint
    assert a["fingerprint"] == b["fingerprint"]
    assert a["fingerprint_text"] == "status=failed;category=device_oom;rules=pytorch-cuda-oom"
    wd = rows["team/2026-03/wd"]
    assert (wd["category"], wd["culprit_ranks"], wd["culprit_nodes"]) == ("straggler", [3], ["node-b"])
    assert "op_type=ALLREDUCE" in wd["fingerprint_text"]
    assert rows["exc"]["fingerprint"] not in (a["fingerprint"], wd["fingerprint"])
    assert (rows["ok"]["status"], rows["ok"]["category"], rows["ok"]["last_step"]) == ("completed", "healthy", 20)
    # the traceback has no time of its own: the last time rank 1 logged (step 17), failing in step 18
    assert a["first_failure_ts"] == datetime(2026, 3, 1, 8, 2, 50) and a["first_failure_step"] == 18
    assert a["duration_s"] == pytest.approx(190.0)  # 08:00:10 (step 1) .. 08:03:20 (step 20)
    assert a["files"] == 4 and a["analysis_s"] > 0 and a["from_cache"] is False
    assert a["rules_version"] == result.rules_version and a["tool_version"] == result.tool_version

    # isolation: broken jobs are rows with their reason, the scan went on
    assert rows["empty-log"]["status"] == "error" and "no readable log file" in rows["empty-log"]["error"]
    assert "empty file" in rows["empty-log"]["error"]
    assert rows["corrupt"]["status"] == "error" and "gzip" in rows["corrupt"]["error"]
    assert result.errors == 2

    # the scan says exactly what a single analyze says
    for name in ("oom-a", "2026-03/oom-b", "team/2026-03/wd", "ok", "exc"):
        report = analyze(Path(rows[name]["path"])).report
        direct, findings = report_rows(report)
        for column in ("status", "category", "summary", "culprit_ranks", "fingerprint", "top_rules", "world_size"):
            assert rows[name][column] == direct[column], (name, column)
        job_findings = result.findings.filter(pl.col("path") == rows[name]["path"])
        assert sorted(job_findings["finding_id"]) == sorted(f["finding_id"] for f in findings)

    oom = result.findings.filter((pl.col("path") == a["path"]) & (pl.col("rule") == "pytorch-cuda-oom")).row(0, named=True)
    assert (oom["role"], oom["ranks"], oom["evidence_line"]) == ("primary", [1], 21)
    assert oom["evidence_file"] == "node-a/logs/rank_1.log"
    assert json.loads(oom["fields"])["alloc"] == "2.00 GiB"

    # files on disk are the returned tables
    assert pl.read_parquet(out / "runs.parquet").equals(runs)
    assert pl.read_parquet(out / "findings.parquet").equals(result.findings)
    assert (out / CACHE_NAME).is_file()
    for name, row in rows.items():
        if row["status"] == "error":
            assert row["report"] is None
        else:
            assert row["report"].startswith("reports/") and (out / row["report"]).is_file(), name


def test_index_page_is_self_contained_escaped_and_links_reports(tmp_path: Path) -> None:
    r = tmp_path / "runs"
    make_job(r / "oom-a", "oom", bad=1)
    make_job(r / "oom-b", "oom", bad=2, day=40)
    make_job(r / "x<b>y&z", "exception", day=70)  # markup in a directory name
    out = tmp_path / "out"
    result = scan([r], out, jobs=2, reports=True)
    page = (out / "index.html").read_text(encoding="utf-8")

    assert "x&lt;b&gt;y&amp;z" in page and "x<b>y" not in page
    assert "http://" not in page and "https://" not in page and " src=" not in page
    # the page may run only its own script: the policy carries that script's hash
    policy = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1))
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy and "default-src 'none'" in policy
    for row in result.runs.iter_rows(named=True):
        assert f'href="{row["report"]}"' in page.replace("&amp;", "&")
    # recurring fingerprints: the OOM seen twice (first and last seen), the exception once and new
    oom_fp = result.runs.filter(pl.col("name") == "oom-a")["fingerprint"][0]
    exc_fp = result.runs.filter(pl.col("name") == "x<b>y&z")["fingerprint"][0]
    section = page[page.index('id="fingerprints"') : page.index('id="over-time"')]
    oom_row = section[section.index(f'data-show-fp="{oom_fp}"') :].split("</tr>")[0]
    assert '<td class="num">2</td>' in oom_row
    assert "2026-03-01 08:02" in oom_row and "2026-04-10 08:02" in oom_row
    exc_row = section[section.index(f'data-show-fp="{exc_fp}"') :].split("</tr>")[0]
    assert 'class="new"' in exc_row
    # categories over a 70-day span are counted per week
    assert "per week" in page and '<td class="mono">device_oom</td>' in page

    class Checker(html.parser.HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[str] = []
            self.run_rows = 0

        def handle_starttag(self, tag: str, attrs: list) -> None:
            if tag not in ("meta", "br", "input", "rect", "line", "link"):
                self.stack.append(tag)
            if tag == "tr" and any(k == "data-status" for k, _ in attrs):
                self.run_rows += 1

        def handle_endtag(self, tag: str) -> None:
            if tag in ("rect", "line"):
                return
            assert self.stack and self.stack[-1] == tag, (tag, self.stack[-3:])
            self.stack.pop()

    checker = Checker()
    checker.feed(page)
    assert checker.stack == [] and checker.run_rows == 3


def test_rescan_reuses_unchanged_jobs_and_reanalyzes_changed_ones(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = scan([root], out, jobs=2)
    second = scan([root], out, jobs=2)
    assert (second.analyzed, second.cached) == (0, 7)
    assert second.runs["from_cache"].all()
    drop = ["from_cache"]
    assert second.runs.drop(drop).equals(first.runs.drop(drop))
    assert second.findings.equals(first.findings)

    # a grown file, a touched file and a new job: exactly those are analyzed again
    log = root / "oom-a" / "node-a" / "logs" / "rank_0.log"
    with log.open("a", encoding="utf-8") as fh:
        fh.write("2026-03-01 08:04:00,000 - INFO - one more line\n")
    later = time.time() + 5
    os.utime(root / "ok" / "node-b" / "logs" / "rank_3.log", (later, later))
    make_job(root / "new-job", "exception", day=20)
    third = scan([root], out, jobs=2)
    assert (third.jobs, third.analyzed, third.cached) == (8, 3, 5)
    fresh = set(third.runs.filter(~pl.col("from_cache"))["name"])
    assert fresh == {"oom-a", "ok", "new-job"}

    forced = scan([root], out, jobs=2, force=True)
    assert (forced.analyzed, forced.cached) == (8, 0)

    # other rules, other results: a rule edit invalidates every entry
    extra = tmp_path / "rules"
    extra.mkdir()
    text = (REPO / "rules" / "trainer" / "trainer-nan-loss.toml").read_text(encoding="utf-8")
    (extra / "trainer-nan-loss.toml").write_text(text + "\n# a local copy that overrides the built-in rule\n", encoding="utf-8")
    edited = scan([root], out, jobs=2, rules_dirs=[extra])
    assert edited.rules_version != forced.rules_version
    assert (edited.analyzed, edited.cached) == (8, 0)


def test_reports_flag_reanalyzes_cached_jobs_without_a_report(tmp_path: Path) -> None:
    r = tmp_path / "runs"
    make_job(r / "j1", "oom")
    out = tmp_path / "out"
    scan([r], out, jobs=1)
    with_reports = scan([r], out, jobs=1, reports=True)
    assert with_reports.analyzed == 1 and (out / with_reports.runs["report"][0]).is_file()
    again = scan([r], out, jobs=1, reports=True)
    assert again.cached == 1 and again.runs["report"][0] == with_reports.runs["report"][0]
    (out / again.runs["report"][0]).unlink()
    assert scan([r], out, jobs=1).runs["report"][0] is None  # no dead link
    assert scan([r], out, jobs=1, reports=True).analyzed == 1


def test_a_job_past_the_time_limit_becomes_an_error_row(tmp_path: Path) -> None:
    r = tmp_path / "runs"
    make_job(r / "good", "oom")
    make_giant_job(r / "giant")
    make_job(r / "zz-after", "exception")
    out = tmp_path / "out"
    started = time.monotonic()
    result = scan([r], out, jobs=1, timeout_s=3)
    assert time.monotonic() - started < 90
    rows = rows_by_name(result.runs)
    assert rows["giant"]["status"] == "error"
    assert rows["giant"]["error"] == "timed out after 3 s (per-job time limit)"
    # with one worker, the jobs after the stuck one ran in the replacement worker
    assert rows["good"]["category"] == "device_oom" and rows["zz-after"]["category"] == "rank_exception"
    assert result.timed_out == 1

    again = scan([r], out, jobs=1, timeout_s=3)  # the same limit would time out again: cached
    assert (again.analyzed, again.timed_out) == (0, 0)
    raised = scan([r], out, jobs=1, timeout_s=4)  # a higher limit deserves a new try
    assert (raised.analyzed, raised.timed_out) == (1, 1)


def test_an_unlistable_directory_is_an_error_row(tmp_path: Path) -> None:
    r = tmp_path / "runs"
    make_job(r / "good", "oom")
    locked = r / "locked"
    write(locked / "console.log", "x\n")
    locked.chmod(0)
    command = [sys.executable, "-c", (
        "import json, sys; from pathlib import Path; from postmortem.scan import scan; "
        f"r = scan([Path({str(r)!r})], Path({str(tmp_path / 'out')!r}), jobs=1); "
        "print(json.dumps([[x['name'], x['status'], x['error']] for x in r.runs.to_dicts()]))"
    )]
    if os.geteuid() == 0:
        # root reads anything: run the scan as root without the capabilities that bypass permissions
        if not shutil.which("setpriv"):
            pytest.skip("running as root and setpriv (util-linux) is not available")
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *command]
    try:
        proc = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                              text=True, timeout=300, check=False)
    finally:
        locked.chmod(0o755)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [
        ["good", "failed", None],
        ["locked", "error", "cannot list directory: Permission denied"],
    ]


def test_workers_dying_at_start_give_error_rows_not_an_endless_restart(tmp_path: Path) -> None:
    r = tmp_path / "runs"
    for i in range(5):
        make_job(r / f"j{i}", "oom")
    # a script without the __main__ guard: each spawned worker re-runs it and dies at start
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import json\nfrom pathlib import Path\nfrom postmortem.scan import scan\n"
        f"r = scan([Path({str(r)!r})], Path({str(tmp_path / 'out')!r}), jobs=1)\n"
        "print(json.dumps([x['error'] for x in r.runs.to_dicts()]))\n",
        encoding="utf-8",
    )
    proc = subprocess.run([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert errors[:3] == ["analysis worker exited unexpectedly (exit code 1)"] * 3
    assert errors[3:] == ["analysis workers die at start (see the errors printed above)"] * 2


def test_empty_roots_write_empty_typed_outputs(tmp_path: Path) -> None:
    (tmp_path / "nothing").mkdir()
    result = scan([tmp_path / "nothing"], tmp_path / "out")
    assert result.jobs == 0 and result.runs.height == 0
    assert pl.read_parquet(tmp_path / "out" / "runs.parquet").schema == pl.Schema(RUN_SCHEMA)
    assert "No failed or hung job" in (tmp_path / "out" / "index.html").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- CLI


def test_cli_prints_plain_progress_and_a_summary(root: Path, tmp_path: Path) -> None:
    app = typer.Typer()
    app.command("scan")(scan_command)
    app.command("noop")(lambda: None)  # two commands: typer keeps "scan" as a sub-command
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["scan", str(root), "--out", str(out), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    assert "scan: 7 jobs, 0 unchanged (from the cache), 7 to analyze" in result.output
    assert "scan: analyzed 7/7 (2 errors)" in result.output
    assert "(7 analyzed, 0 unchanged): 4 failed, 2 error, 1 completed" in result.output
    assert (out / "runs.parquet").is_file() and (out / "index.html").is_file()
    again = CliRunner().invoke(app, ["scan", str(root), "--out", str(out), "-q"])
    assert again.exit_code == 0 and "(0 analyzed, 7 unchanged)" in again.output and "scan: " not in again.output
    bad = CliRunner().invoke(app, ["scan", str(root), "--out", str(out), "--executor", "spark"])
    assert bad.exit_code == 2 and "use local or ray" in bad.output


# --------------------------------------------------------------------------- corpus jobs


def test_corpus_jobs_nested_at_any_depth_scan_like_analyze(tmp_path: Path) -> None:
    # multi-node layouts first (node folders, host folders): the hard cases for discovery
    scenarios = sorted(corpus_scenarios(), key=lambda s: (any((s / "job").glob("*.log")), s.name))[:4]
    assert len(scenarios) == 4
    r = tmp_path / "runs"
    places = [r / "a", r / "b" / "c", r / "d" / "e" / "f", r]
    expected: dict[str, Path] = {}
    for scenario, place in zip(scenarios, places, strict=False):
        dest = place / f"{scenario.parent.name}-{scenario.name}"
        shutil.copytree(scenario / "job", dest)
        expected[dest.relative_to(r).as_posix()] = dest
    result = scan([r], tmp_path / "out", jobs=2)
    rows = rows_by_name(result.runs)
    assert sorted(rows) == sorted(expected)
    for name, path in expected.items():
        direct, _ = report_rows(analyze(path).report)
        for column in ("status", "category", "culprit_ranks", "fingerprint"):
            assert rows[name][column] == direct[column], (name, column)


# --------------------------------------------------------------------------- ray


def test_ray_executor_writes_the_same_outputs(root: Path, tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    local = scan([root], tmp_path / "local", jobs=2)
    giant = tmp_path / "giant-root"
    make_giant_job(giant / "giant")
    make_job(giant / "small", "oom")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = scan([root], tmp_path / "ray", executor="ray", reports=True, timeout_s=120)
        # (the giant job takes minutes; 20 s leaves the small one room on a loaded machine)
        limited = scan([giant], tmp_path / "ray-limited", executor="ray", timeout_s=20)
    finally:
        ray.shutdown()
    # an overdue task is cancelled (its worker killed) and the scan goes on
    assert rows_by_name(limited.runs)["giant"]["error"] == "timed out after 20 s (per-job time limit)"
    assert rows_by_name(limited.runs)["small"]["category"] == "device_oom"
    keep = ["name", "status", "category", "summary", "culprit_ranks", "culprit_nodes", "fingerprint", "top_rules", "error"]
    assert remote.runs.select(keep).equals(local.runs.select(keep))
    assert remote.findings.drop("fields").equals(local.findings.drop("fields"))
    assert all((tmp_path / "ray" / p).is_file() for p in remote.runs["report"].drop_nulls())
    assert remote.runs["report"].null_count() == 2  # the two error rows


def test_unknown_executor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown executor"):
        scan([tmp_path], tmp_path / "out", executor="spark")  # type: ignore[arg-type]



# --------------------------------------------------------------------------- the index in a browser


def test_index_sorts_and_filters_in_chromium(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    r = tmp_path / "runs"
    make_job(r / "oom-a", "oom", bad=1, steps=20)
    make_job(r / "oom-b", "oom", bad=2, steps=30, day=3)
    make_job(r / "wd", "watchdog", bad=3, day=5)
    make_job(r / "ok", "healthy", steps=25)
    result = scan([r], tmp_path / "out", jobs=2)
    url = (tmp_path / "out" / "index.html").as_uri()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        requests: list[str] = []
        problems: list[str] = []
        page.on("request", lambda req: requests.append(req.url))
        page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(url, wait_until="load")

        def visible_jobs() -> list[str]:
            return [t.strip() for t in page.locator("#runs tbody tr:visible td:first-child").all_inner_texts()]

        assert requests == [url] and problems == []  # nothing fetched; the script ran under the CSP
        page.click("#runs thead th:has-text('last step')")
        # last steps 20, 20, 25, 30; ties keep the page's order, newest first (wd ran after oom-a)
        assert visible_jobs() == ["wd", "oom-a", "ok", "oom-b"]
        page.click("#runs thead th:has-text('last step')")
        assert visible_jobs() == ["oom-b", "ok", "wd", "oom-a"]
        page.fill("#f-text", "node-b")
        assert page.locator("#f-shown").inner_text() == "2" and sorted(visible_jobs()) == ["oom-b", "wd"]
        page.fill("#f-text", "")
        page.select_option("#f-status", "completed")
        assert visible_jobs() == ["ok"]
        page.select_option("#f-status", "")
        oom_fp = result.runs.filter(pl.col("name") == "oom-a")["fingerprint"][0]
        page.click(f"#fingerprints a[data-show-fp='{oom_fp}']")
        assert sorted(visible_jobs()) == ["oom-a", "oom-b"]
        browser.close()
