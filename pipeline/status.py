"""How a running job shows itself: a status file other programs poll (the console), and a
progress bar on the terminal."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO


@dataclass
class JobStatus:
    job: str
    state: str = "starting"  # starting, running, succeeded, failed
    stage: str = "starting Spark"
    tasks_done: int = 0
    tasks_total: int = 0
    records: int = 0
    skipped_ranges: int = 0
    skipped: list[dict] = field(default_factory=list)  # first corrupt ranges: file, position, length, reason
    counts: dict[str, int] = field(default_factory=dict)
    summary: str = ""
    error: str | None = None
    updated_at: int = 0


def write_status(path: Path, status: JobStatus) -> None:
    """Replace the status file in one step, so a reader never sees half of it."""
    status.updated_at = int(time.time() * 1000)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(asdict(status)), encoding="utf-8")
    os.replace(temporary, path)


class ProgressBar:
    """One line redrawn in place: stage, tasks and records read."""

    WIDTH = 24

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.drawn = False

    def draw(self, status: JobStatus) -> None:
        total = max(status.tasks_total, 1)
        filled = self.WIDTH * min(status.tasks_done, total) // total
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        line = (f"[{bar}] {status.tasks_done}/{status.tasks_total} tasks  {status.records:,} records  "
                f"{status.stage}")
        self.stream.write("\r" + line[:118].ljust(118))
        self.stream.flush()
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
