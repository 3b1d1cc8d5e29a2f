"""Plumbing for ``generate.py``: workspaces, torchrun launches, py-spy, path scrubbing, log reading.

No torch import here: the generator only starts ``torchrun`` and ``py-spy`` from the
interpreter it runs under (the torch dev venv) and reads what they left behind.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: files copied into every workspace; never copied back into the corpus
SCRIPTS = ("text_trainer.py", "data_utils.py", "fr_watchdog.py", "swift_pt.py")
#: workspace entries that are not part of the job as a user would hand it over
NOT_JOB = {*SCRIPTS, "data", "tmp", "__pycache__"}
NEUTRAL_WS = "/workspace/job"
NEUTRAL_PY = "/opt/conda"
#: no launch may outlive this, whatever happens inside it
HARD_TIMEOUT_S = 110.0

BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torch_version() -> str:
    """The torch version of the interpreter's environment, read without importing torch here."""
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


@dataclass
class Workspace:
    """A temporary directory that plays the job directory while the job runs.

    ``node_dirs`` are sub-directories that play separate hosts (their own copy of the
    scripts, their own working directory); their paths are scrubbed to the same neutral
    working directory, as two machines with the same layout would show.
    """

    name: str
    root: Path
    #: host name each top-level sub-directory's logs must show (``""`` = the job root)
    hosts: dict[str, str] = field(default_factory=lambda: {"": "node-a"})
    node_dirs: list[str] = field(default_factory=list)

    @classmethod
    def create(cls, name: str) -> Workspace:
        root = Path(tempfile.mkdtemp(prefix=f"pmcorpus-{name}-"))
        ws = cls(name, root)
        ws._populate(root)
        return ws

    @staticmethod
    def _populate(d: Path) -> None:
        (d / "tmp").mkdir(parents=True)
        for s in SCRIPTS:
            shutil.copy2(HERE / s, d / s)

    def add_nodes(self, *names: str) -> None:
        """Sub-directories that play separate hosts, each named after its host."""
        for n in names:
            self._populate(self.root / n)
            self.node_dirs.append(n)
            self.hosts[n] = n

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def env(self, node_dir: str = "", **extra: str) -> dict[str, str]:
        """A small, explicit environment: the venv on PATH, temp files inside the workspace."""
        env = {
            "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.root / node_dir / "tmp"),
            "PYTHONUNBUFFERED": "1",
        }
        env.update(extra)
        return env

    def replacements(self, node_dir: str = "") -> list[tuple[str, str]]:
        """Machine-specific paths -> neutral ones, longest first so prefixes do not clash."""
        pairs = {
            str(self.root / "tmp"): "/tmp",
            str(self.root): NEUTRAL_WS,
            sys.prefix: NEUTRAL_PY,
            sys.base_prefix: NEUTRAL_PY,
            os.path.realpath(sys.base_prefix): NEUTRAL_PY,
        }
        if node_dir:
            pairs[str(self.root / node_dir / "tmp")] = "/tmp"
            pairs[str(self.root / node_dir)] = NEUTRAL_WS
        return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


@dataclass
class Launch:
    """One launcher process (torchrun) writing stdout+stderr to a console file."""

    argv: list[str]
    shown: str  # the command as a user would type it, for the README
    console: Path
    proc: subprocess.Popen[bytes]
    started: float

    @classmethod
    def start(
        cls, ws: Workspace, argv: list[str], console: str, env: dict[str, str], cwd: str = ""
    ) -> Launch:
        path = ws.root / console
        path.parent.mkdir(parents=True, exist_ok=True)
        shown = " ".join(_quote(a) for a in argv)
        exe = str(BIN / argv[0]) if (BIN / argv[0]).exists() else argv[0]
        fh = open(path, "wb")  # noqa: SIM115 - owned by the child for its whole life
        proc = subprocess.Popen(
            [exe, *argv[1:]],
            cwd=ws.root / cwd,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        fh.close()
        return cls(argv, shown, path, proc, time.monotonic())

    def wait(self, timeout: float = HARD_TIMEOUT_S) -> int:
        """Exit code; past the hard timeout the whole session (launcher + workers) is killed."""
        left = max(1.0, timeout - (time.monotonic() - self.started))
        try:
            return self.proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise RuntimeError(f"{self.shown!r} exceeded the hard timeout of {timeout}s") from None

    def worker_pids(self) -> dict[int, int]:
        """Global rank -> pid of the launcher's worker processes (read from /proc)."""
        out: dict[int, int] = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid != self.proc.pid:
                    continue
                env = (d / "environ").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue
            for kv in env:
                if kv.startswith(b"RANK="):
                    out[int(kv[5:])] = int(d.name)
        return dict(sorted(out.items()))


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w@%+=:,./${}\[\]-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


def wait_until(pred: Callable[[], bool], timeout: float, poll: float = 0.5) -> bool:
    """Poll ``pred`` until it holds or ``timeout`` seconds pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(poll)
    return pred()


def count_in(path: Path, pattern: str) -> int:
    """Occurrences of a regex in a (small, still growing) log file."""
    try:
        return len(re.findall(pattern, path.read_text(errors="replace")))
    except OSError:
        return 0


def pyspy(pid: int, out: Path, as_json: bool = False) -> bool:
    """``py-spy dump --pid`` (text or ``--json``) into ``out``; False when py-spy failed."""
    cmd = [str(BIN / "py-spy"), "dump", "--pid", str(pid)]
    if as_json:
        cmd.append("--json")
    out.parent.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(cmd, capture_output=True, timeout=30)
    out.write_bytes(res.stdout)
    return res.returncode == 0 and bool(res.stdout)


def _scrub_obj(obj: Any, subs: list[tuple[str, str]]) -> Any:
    if isinstance(obj, str):
        for a, b in subs:
            obj = obj.replace(a, b)
        return obj
    if isinstance(obj, dict):
        return {_scrub_obj(k, subs): _scrub_obj(v, subs) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub_obj(v, subs) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_scrub_obj(v, subs) for v in obj)
    return obj


def scrub_bytes(data: bytes, subs: list[tuple[str, str]], host: str) -> bytes:
    """Replace workspace/venv paths and the machine's host name in log text."""
    for a, b in subs:
        data = data.replace(a.encode(), b.encode())
    me = socket.gethostname().encode()
    fqdn = socket.getfqdn().encode()
    h = host.encode()
    # only where a field is known to hold the host name, so no other word is touched
    for name in {me, fqdn}:
        data = re.sub(rb"(host\s*: )" + re.escape(name) + rb"\b", rb"\g<1>" + h, data)
        data = re.sub(rb"\bhost=" + re.escape(name) + rb"\b", b"host=" + h, data)
    return data


def _is_job_file(inner: tuple[str, ...]) -> bool:
    """False for the workspace's scripts, data, temp files, input datasets and checkpoints."""
    if not inner or inner[0] in NOT_JOB or inner[:2] == ("workdir", "dataset"):
        return False
    return not any(p.startswith("checkpoint-") for p in inner)


def export_job(ws: Workspace, dest: Path) -> list[Path]:
    """Copy the job's files from the workspace into ``dest``, scrubbed; returns the new files."""
    written: list[Path] = []
    for src in sorted(ws.root.rglob("*")):
        rel = src.relative_to(ws.root)
        node = rel.parts[0] if rel.parts[0] in ws.node_dirs else ""
        inner = rel.parts[1:] if node else rel.parts
        if not src.is_file() or not _is_job_file(inner):
            continue
        subs = ws.replacements(node)
        host = ws.hosts.get(rel.parts[0], ws.hosts.get("", "node-a"))
        dst = dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".pkl":
            obj = pickle.loads(src.read_bytes())
            dst.write_bytes(pickle.dumps(_scrub_obj(obj, subs), protocol=2))
        else:
            dst.write_bytes(scrub_bytes(src.read_bytes(), subs, host))
        written.append(dst)
    return written


# --- reading the produced logs back (small files: plain Python is fine here) ---------------

PREFIX_RE = re.compile(r"^\[(?:default(?P<local>\d+)|rank(?P<rank>\d+))\]:")


def prefixed_lines(path: Path, node_rank: int = 0, nproc: int = 1) -> Iterable[tuple[int | None, str]]:
    """``(global rank or None, text)`` for each line of a torchrun console with tee prefixes."""
    for raw in path.read_text(errors="replace").splitlines():
        m = PREFIX_RE.match(raw)
        if not m:
            yield None, raw
        elif m.group("rank") is not None:
            yield int(m.group("rank")), raw[m.end() :]
        else:
            yield node_rank * nproc + int(m.group("local")), raw[m.end() :]


def last_steps(lines: Iterable[tuple[int | None, str]], step_re: str) -> dict[int, int]:
    """Highest step that each rank's lines report (``step_re`` has one group: the step)."""
    rx = re.compile(step_re)
    out: dict[int, int] = {}
    for rank, text in lines:
        m = rx.search(text)
        if m and rank is not None:
            out[rank] = max(out.get(rank, 0), int(m.group(1)))
    return out


def file_lines(path: Path, rank: int) -> list[tuple[int | None, str]]:
    """All lines of a per-rank file, tagged with that rank."""
    return [(rank, t) for t in path.read_text(errors="replace").splitlines()]


def write_json(path: Path, obj: Any) -> None:
    """Pretty JSON with a trailing newline."""
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def dir_size(path: Path) -> int:
    """Total bytes of the files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
