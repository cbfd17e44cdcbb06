"""A writer in a child process, killed with SIGKILL once it has acknowledged enough."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys


def run_and_kill(args: list[str], kill_after: int) -> list[dict]:
    """Run `python -c *args`, read one JSON acknowledgement per line and SIGKILL the child after
    `kill_after` of them; the acknowledgements read."""
    proc = subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=os.getcwd())
    acknowledged = []
    try:
        for line in proc.stdout:
            acknowledged.append(json.loads(line))
            if len(acknowledged) == kill_after:
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert len(acknowledged) == kill_after, proc.stderr.read()
    assert proc.returncode == -signal.SIGKILL
    return acknowledged
