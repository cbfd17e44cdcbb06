"""A Spark standalone master and one worker on loopback, started from pyspark's own scripts
for one test and stopped by it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
START_SECONDS = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(condition, what: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while not condition():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not start in {START_SECONDS} s: {log.read_text()[-2000:]}")
        time.sleep(0.2)


def _start(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([str(SPARK_CLASS), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def standalone_cluster(work: Path, cores: int = 2, memory: str = "1g") -> Iterator[str]:
    """Yields the master URL once a worker has registered with it."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(work), "SPARK_NO_DAEMONIZE": "1"}
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log, worker_log = work / "master.log", work / "worker.log"
    master = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(free_port())], master_log, env)
    worker = None
    try:
        _wait_for(lambda: "Starting Spark master" in master_log.read_text(errors="replace")
                  and "I have been elected leader" in master_log.read_text(errors="replace"),
                  "the Spark master", master, master_log)
        worker = _start(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", str(cores),
                         "--memory", memory, "--webui-port", str(free_port()), "--work-dir", str(work / "worker")],
                        worker_log, env)
        _wait_for(lambda: "Successfully registered with master" in worker_log.read_text(errors="replace"),
                  "the Spark worker", worker, worker_log)
        yield url
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)
