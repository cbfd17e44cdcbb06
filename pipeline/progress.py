"""Progress of a scan as the tasks see it: each task keeps a small JSON file in a progress
folder (records read, ranges skipped, a torn tail cut), and the driver adds them up.

Files, not accumulators: a Python data source reads in worker processes Spark starts, and
a folder every executor can write to works the same on one machine and on a cluster."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.segments import WalkReport


def write_task_progress(folder: str, name: str, report: WalkReport, done: bool) -> None:
    target = Path(folder) / f"{name}.json"
    temporary = target.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({**report.as_dict(), "done": done}), encoding="utf-8")
    os.replace(temporary, target)


@dataclass
class ScanProgress:
    records: int = 0
    tasks_reporting: int = 0
    skipped: list[dict] = field(default_factory=list)
    torn_tails: list[int] = field(default_factory=list)

    @property
    def skipped_bytes(self) -> int:
        return sum(s["length"] for s in self.skipped)


def read_scan_progress(folder: Path) -> ScanProgress:
    """The sum of every task's latest file (a file being replaced is read next time)."""
    total = ScanProgress()
    if not folder.is_dir():
        return total
    for path in sorted(folder.glob("*.json")):
        try:
            task = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        total.records += task["records"]
        total.tasks_reporting += 1
        total.skipped.extend(task["skipped"])
        if task["torn_tail_at"] is not None:
            total.torn_tails.append(task["torn_tail_at"])
    return total
