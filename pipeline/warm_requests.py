"""The folder a warm Spark driver takes its jobs from (pipeline.warm_driver), as the console and
the driver both see it: one request per run in `requests/`, written in one step; `stop` asks the
driver to end once the job in hand is done; the driver's pid and log. No Spark imports here: the
console writes requests without loading PySpark."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

REQUESTS, CLOSED = "requests", "closed"
CANCEL_FILE = "cancel"  # in a run's folder: cancel that run's Spark jobs


class InboxClosed(Exception):
    """The driver has closed its inbox (it is stopping): start another driver."""


@dataclass(frozen=True)
class JobRequest:
    run_id: int
    job: str
    store: str
    out: str
    status: str
    log: str
    geometry: dict[str, int]
    delay_levels: str | None

    @classmethod
    def read(cls, path: Path) -> JobRequest:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(int(data["run_id"]), str(data["job"]), str(data["store"]), str(data["out"]), str(data["status"]),
                   str(data["log"]), {str(k): int(v) for k, v in data["geometry"].items()},
                   None if data.get("delay_levels") is None else str(data["delay_levels"]))

    @property
    def cancel_file(self) -> Path:
        return Path(self.status).parent / CANCEL_FILE


@dataclass(frozen=True)
class Inbox:
    """One driver's folder (each driver has its own, named on its command line)."""

    path: Path

    @property
    def requests(self) -> Path:
        return self.path / REQUESTS

    @property
    def closed(self) -> Path:
        return self.path / CLOSED

    @property
    def stop_file(self) -> Path:
        return self.path / "stop"

    @property
    def pid_file(self) -> Path:
        return self.path / "pid"

    @property
    def log(self) -> Path:
        return self.path / "driver.log"

    def create(self) -> Inbox:
        self.requests.mkdir(parents=True)
        return self

    def submit(self, request: JobRequest) -> None:
        """Hand the driver a job; InboxClosed when it no longer takes any. The rename into
        `requests/` is the one step: it fails once the driver has moved that folder away."""
        temporary = self.path / f".{request.run_id}.json.tmp"
        temporary.write_text(json.dumps(asdict(request)), encoding="utf-8")
        try:
            os.replace(temporary, self.requests / f"{request.run_id}.json")
        except FileNotFoundError:
            temporary.unlink(missing_ok=True)
            raise InboxClosed(f"the warm Spark of {self.path} is stopping") from None

    def close(self) -> None:
        """Take no more requests: those already written are in `closed/`."""
        os.replace(self.requests, self.closed)

    def pending(self, folder: Path | None = None) -> list[Path]:
        """The requests waiting in `folder` (default: requests/), the oldest run first."""
        try:
            names = [p for p in (folder or self.requests).glob("*.json")]
        except OSError:
            return []
        return sorted(names, key=lambda p: int(p.stem) if p.stem.isdigit() else 0)
