"""A plain, non-editable install carries the rules and templates inside the package."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

from tests.conftest import REPO


def test_wheel_ships_rules_and_templates(tmp_path: Path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        check=True, capture_output=True, timeout=600,
    )
    wheel = next(dist.glob("postmortem-*.whl"))
    env = tmp_path / "env"
    # the test environment's dependencies are visible; postmortem itself comes from the wheel only
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env)
    python = env / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
        check=True, capture_output=True, timeout=600,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import postmortem.resources as r, postmortem;"
        "print(postmortem.__file__); print(r.rules_dir()); print(r.templates_dir());"
        "print(len(list(r.rules_dir().rglob('*.toml')))); print(len(list(r.templates_dir().glob('*'))))"
    )
    out = subprocess.run([str(python), "-c", probe], cwd=elsewhere, capture_output=True, text=True, check=True).stdout.split()
    package, rules, templates, n_rules, n_templates = out
    assert str(env) in package
    assert rules.endswith("postmortem/_bundled/rules") and templates.endswith("postmortem/_bundled/templates")
    assert int(n_rules) >= 1 and int(n_templates) >= 1
