"""The warm driver's inbox and the requests it refuses before Spark sees them (a bad request
fails its run in words and leaves the driver running). The driver with Spark is tested through
the console: tests/app/test_warm_spark.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
