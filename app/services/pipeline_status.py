"""What a pipeline job says about itself: the status file it keeps while it runs (replaced in
one step: state, stage, tasks, records, and at the end its counts and summary or Spark's error
in words), and the log its process writes, for when it died before it could say why."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

LOG_TAIL_BYTES = 64 * 1024
MAX_ERROR = 4000
# Lines of a Spark log that are chatter (JVM start-up, log4j, Hadoop's native library), never the cause.
_CHATTER = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO)|WARNING: Using incubator|Using Spark's default"
                      r"|Setting default log level|To adjust logging level)")
_SAYS_WHY = re.compile(r"error|exception|failed|killed|refused|denied|no such", re.IGNORECASE)


@dataclass(frozen=True)
class ReportedStatus:
    state: str  # starting | running | succeeded | failed
    stage: str
    tasks_done: int
    tasks_total: int
    records: int
    skipped_ranges: int
    counts: dict[str, int]
    summary: str
    error: str | None
    updated_at: int  # epoch ms of the job's last write

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"

    @property
    def failed(self) -> bool:
        return self.state == "failed"


def _count(data: dict, name: str) -> int:
    value = data.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def read_status(path: Path) -> ReportedStatus | None:
    """The status as the job last wrote it; None while there is none (the job has not started)
    or when the file is not the JSON object the contract describes."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("state"), str):
        return None
    counts = data.get("counts")
    counts = {str(k): v for k, v in counts.items() if isinstance(v, int)} if isinstance(counts, dict) else {}
    error = data.get("error")
    return ReportedStatus(state=data["state"], stage=str(data.get("stage") or "")[:500],
                          tasks_done=_count(data, "tasks_done"), tasks_total=_count(data, "tasks_total"),
                          records=_count(data, "records"), skipped_ranges=_count(data, "skipped_ranges"),
                          counts=counts, summary=str(data.get("summary") or "")[:MAX_ERROR],
                          error=str(error)[:MAX_ERROR] if error else None, updated_at=_count(data, "updated_at"))


def log_tail(path: Path, max_lines: int = 40) -> list[str]:
    """The last lines of the job's log (what its process printed), chatter included."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-max_lines:]


def failure_in_words(lines: list[str]) -> str | None:
    """The last line of a log that says what went wrong (not Spark's start-up chatter)."""
    for line in reversed(lines):
        line = line.strip()
        if not _CHATTER.match(line) and _SAYS_WHY.search(line):
            return line[:MAX_ERROR]
    return None
