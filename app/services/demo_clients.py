"""Keeps the demo's official-client processes (app/demo_clients.py) running while the server
runs: started after the gRPC front listens, restarted when one ends (at most MAX_RESTARTS times),
ended with the server. Their logs go to the data directory."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

from store.message_store import MessageStore

DEMO_ROLES = ("producer", "consumer")
RESTART_AFTER_S = 5.0
MAX_RESTARTS = 5
STOP_WAIT_S = 15.0
log = logging.getLogger("mqlens.demo")


class DemoClients:
    def __init__(self, endpoint: str, home: Path):
        self.endpoint = endpoint
        self.home = home
        self._procs: dict[str, subprocess.Popen] = {}
        self._restarts = 0
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="mqlens-demo-clients", daemon=True)

    def start(self, store: MessageStore) -> DemoClients:
        from app.demo_clients import DEMO_CLIENT_GROUP, DEMO_CLIENT_MAX_RECONSUME_TIMES

        store.metadata.update_group(DEMO_CLIENT_GROUP, max_reconsume_times=DEMO_CLIENT_MAX_RECONSUME_TIMES)
        self.home.mkdir(parents=True, exist_ok=True)
        for role in DEMO_ROLES:
            self._spawn(role)
        self._watcher.start()
        log.info("demo: official RocketMQ 5 clients (%s) sending to and consuming from %s; their logs are in %s",
                 " and ".join(DEMO_ROLES), self.endpoint, self.home)
        return self

    def _spawn(self, role: str) -> None:
        out = (self.home / f"{role}.log").open("a")
        try:
            self._procs[role] = subprocess.Popen(
                [sys.executable, "-m", "app.demo_clients", role, self.endpoint], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env={**_environment(), "HOME": str(self.home)})
        finally:
            out.close()

    def _watch(self) -> None:
        while not self._stop.wait(RESTART_AFTER_S):
            for role, proc in list(self._procs.items()):
                if proc.poll() is not None and self._restarts < MAX_RESTARTS:
                    self._restarts += 1
                    log.warning("demo: the %s client ended with %s; starting it again", role, proc.returncode)
                    self._spawn(role)

    def stop(self) -> None:
        self._stop.set()
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs.values():
            try:
                proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _environment() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("MQLENS_")}
