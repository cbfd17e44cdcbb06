"""`make run` installs only what the console needs to run; `make test` adds the test tools; a
run after a test installs nothing more (read from make's dry runs, nothing is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(target: str, venv: Path) -> str:
    done = subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={venv}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def installs(commands: str) -> list[str]:
    """What each pip install of the dry run installs (the pip upgrade aside)."""
    return re.findall(r"pip install .*? -e (\S+)", commands)


def test_make_run_installs_the_runtime_only_and_make_test_the_test_tools_too(tmp_path):
    venv = tmp_path / "venv"
    run = dry_run("run", venv)
    assert installs(run) == ["."] and "mqlens serve" in run
    assert installs(dry_run("test", venv)) == [".", "'.[dev]'"]


def test_make_run_after_make_test_installs_nothing(tmp_path):
    venv = tmp_path / "venv"
    for line in dry_run("test", venv).splitlines():  # the stamps `make test` leaves behind
        if line.startswith("touch "):
            Path(line.split()[1]).parent.mkdir(parents=True, exist_ok=True)
            Path(line.split()[1]).touch()
    run = dry_run("run", venv)
    assert installs(run) == [] and "mqlens serve" in run
