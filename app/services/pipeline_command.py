"""The command line of one pipeline run and the files it keeps: `<python> -m app.cli pipeline run
JOB --store ... --out ... --status ...` over the console's own store, in a folder of its own
under the data directory (out/, status.json, run.log)."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.warm_requests import JobRequest
from store.log.geometry import StoreGeometry

LOCAL_MASTERS = ("local[1]", "local[2]", "local[*]")
RUNS_DIR_NAME = "pipeline-runs"


@dataclass(frozen=True)
class RunFolder:
    """One run's files: the job's output, the status file it keeps, and its process's log."""

    path: Path

    @classmethod
    def of_output(cls, output_path: str) -> RunFolder:
        return cls(Path(output_path).parent)

    @property
    def out(self) -> Path:
        return self.path / "out"

    @property
    def status(self) -> Path:
        return self.path / "status.json"

    @property
    def log(self) -> Path:
        return self.path / "run.log"

    @property
    def warm_marker(self) -> Path:
        """Where a run the warm Spark holds names that driver's folder and pid."""
        return self.path / "warm.json"


@dataclass(frozen=True)
class PipelineSetup:
    """What every run of this console shares: the store it reads and how, where runs keep their
    files, the command that runs a job, and the Spark master used unless an operator picks another."""

    store_dir: Path
    geometry: StoreGeometry
    runs_dir: Path
    command: tuple[str, ...]
    default_master: str

    @classmethod
    def from_settings(cls, settings) -> PipelineSetup:
        assert settings.store_dir is not None
        command = shlex.split(settings.pipeline_command) if settings.pipeline_command else [
            sys.executable, "-m", "app.cli"]
        return cls(settings.store_dir.resolve(), settings.geometry(), (settings.data_dir / RUNS_DIR_NAME).resolve(),
                   tuple(command), settings.pipeline_master)

    def masters(self) -> list[str]:
        """The masters an operator may choose: the configured one first, then the local ones."""
        return list(dict.fromkeys([self.default_master, *LOCAL_MASTERS]))

    def folder(self, run_id: int) -> RunFolder:
        return RunFolder(self.runs_dir / str(run_id))

    def job_argv(self, job: str, folder: RunFolder, master: str, delay_levels: str | None) -> list[str]:
        g = self.geometry
        argv = [*self.command, "pipeline", "run", job, "--store", str(self.store_dir), "--out", str(folder.out),
                "--master", master, "--status", str(folder.status),
                "--commitlog-file-size", str(g.commitlog_file_size), "--cq-file-size", str(g.cq_file_size),
                "--index-slots", str(g.index_slots), "--index-entries", str(g.index_entries)]
        if delay_levels is not None:
            argv += ["--delay-levels", delay_levels]
        return argv

    def job_request(self, run_id: int, job: str, folder: RunFolder, delay_levels: str | None) -> JobRequest:
        """The same job as job_argv's, for the warm Spark."""
        g = self.geometry
        return JobRequest(run_id, job, str(self.store_dir), str(folder.out), str(folder.status), str(folder.log),
                          {"commitlog_file_size": g.commitlog_file_size, "cq_file_size": g.cq_file_size,
                           "index_slots": g.index_slots, "index_entries": g.index_entries}, delay_levels)


def job_environment() -> dict[str, str]:
    """The job's environment: the server's, without its MQLENS_* settings (secrets among them,
    which a job needs none of); Spark's workers on this interpreter, Spark on loopback unless the
    server's environment says otherwise, and this project's code first on the path."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MQLENS_")}
    env["PYSPARK_PYTHON"] = sys.executable
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    project_dir = Path(__file__).resolve().parents[2]  # where the app package lives
    env["PYTHONPATH"] = os.pathsep.join([str(project_dir), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env
