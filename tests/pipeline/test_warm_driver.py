"""The warm driver's inbox and the requests it refuses before Spark sees them (a bad request
fails its run in words and leaves the driver running). The driver with Spark is tested through
the console: tests/app/test_warm_spark.py."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from pipeline import warm_driver
from pipeline.warm_driver import _run_safely, _take, run_request
from pipeline.warm_requests import Inbox, InboxClosed, JobRequest

GEOMETRY = {"commitlog_file_size": 4096, "cq_file_size": 20 * 16, "index_slots": 16, "index_entries": 64}


def request(tmp_path: Path, run_id: int = 1, **changes) -> JobRequest:
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True, exist_ok=True)
    folder = tmp_path / "runs" / str(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    values = {"run_id": run_id, "job": "dlq-report", "store": str(store), "out": str(folder / "out"),
              "status": str(folder / "status.json"), "log": str(folder / "run.log"), "geometry": GEOMETRY,
              "delay_levels": None, **changes}
    return JobRequest(**values)


def final_status(req: JobRequest) -> dict:
    return json.loads(Path(req.status).read_text())


def test_requests_are_taken_oldest_run_first_and_none_is_lost_when_the_inbox_closes(tmp_path):
    inbox = Inbox(tmp_path / "driver").create()
    for run_id in (10, 9, 100):
        inbox.submit(request(tmp_path, run_id))
    (inbox.requests / "junk.json").write_text("{not json")
    assert [p.name for p in inbox.pending()] == ["junk.json", "9.json", "10.json", "100.json"]
    assert _take(inbox).run_id == 9  # the unreadable one is dropped and noted
    assert "unreadable request junk.json" in inbox.log.read_text()
    inbox.close()
    with pytest.raises(InboxClosed):
        inbox.submit(request(tmp_path, 11))
    assert not list(inbox.path.glob(".*.tmp"))
    assert [r.run_id for r in iter(lambda: _take(inbox, inbox.closed), None)] == [10, 100]


@pytest.mark.parametrize(("changes", "words"), [
    ({"job": "pagerank"}, "unknown job 'pagerank'"),
    ({"geometry": {**GEOMETRY, "index_entries": -1}}, "index_entries must be a positive integer"),
    ({"geometry": {"bogus": 1}}, "bogus"),
    ({"delay_levels": "1s 5q"}, "5q"),
])
def test_a_bad_request_fails_its_run_in_words(tmp_path, changes, words):
    req = request(tmp_path, **changes)
    final = run_request(None, req)  # refused before Spark is touched
    assert final.state == "failed" and words in final.error
    assert final_status(req)["state"] == "failed" and words in final_status(req)["error"]
    assert "taken by the warm Spark" in Path(req.log).read_text()


def test_an_output_inside_the_store_is_refused(tmp_path):
    req = request(tmp_path)
    req = request(tmp_path, out=str(Path(req.store) / "out"))
    assert run_request(None, req).error == "the output must be outside the store, which is read-only"


def test_a_request_whose_folder_is_gone_leaves_the_driver_running(tmp_path):
    inbox = Inbox(tmp_path / "driver").create()
    req = request(tmp_path, log=str(tmp_path / "gone" / "run.log"))
    _run_safely(None, req, inbox)  # raises nothing
    assert "the warm Spark could not run the job: FileNotFoundError" in inbox.log.read_text()
    assert final_status(req)["error"].startswith("the warm Spark could not run the job")


class StubSpark:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def stub_driver(monkeypatch):
    """serve() without Spark: the session a stub, the warm-up nothing, each job only recorded."""
    spark, ran = StubSpark(), []
    monkeypatch.setattr(warm_driver, "spark_session", lambda *args, **kwargs: spark)
    monkeypatch.setattr(warm_driver, "warm_up", lambda spark, inbox: None)
    monkeypatch.setattr(warm_driver, "run_request", lambda spark, req: ran.append(req.run_id))
    return spark, ran


def test_an_idle_driver_stops_and_closes_its_inbox(tmp_path, stub_driver):
    spark, ran = stub_driver
    inbox = Inbox(tmp_path / "driver").create()
    inbox.submit(request(tmp_path, 7))
    began = time.monotonic()
    warm_driver.serve(inbox, "local[1]", "512m", idle_s=0.3, parent_pid=os.getppid())
    assert 0.3 <= time.monotonic() - began < 10
    assert ran == [7] and spark.stopped and "idle for 0.3 s: stopping" in inbox.log.read_text()
    assert inbox.pid_file.read_text() == str(os.getpid())
    with pytest.raises(InboxClosed):  # the console starts another driver
        inbox.submit(request(tmp_path, 8))


def test_a_driver_stops_when_asked_or_when_its_console_is_gone(tmp_path, stub_driver):
    spark, ran = stub_driver
    inbox = Inbox(tmp_path / "asked").create()
    inbox.stop_file.touch()
    (inbox.requests / "3.json").write_text(json.dumps(asdict(request(tmp_path, 3))))
    warm_driver.serve(inbox, "local[1]", "512m", idle_s=600, parent_pid=os.getppid())
    assert ran == [3] and spark.stopped  # a request written before the stop is still run
    orphan = Inbox(tmp_path / "orphan").create()
    warm_driver.serve(orphan, "local[1]", "512m", idle_s=600, parent_pid=-1)  # not its parent: gone
    assert not orphan.requests.exists() and orphan.closed.is_dir()
