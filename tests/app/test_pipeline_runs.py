"""Pipeline runs in the app: started as processes of their own through the REST API and the
analytics pages, followed to their end, cancelled, failed with the error in words, results read
from the output folder (and said so when it is damaged), a restart that adopts or fails what it
finds, and one real dlq-report run through Spark.

Most tests run the stand-in command of tests/app/fake_pipeline.py (the pipeline_command setting)
instead of Spark; the runner, the status file and the process handling are the real ones."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from app.models import AuditEntry, PipelineRun
from app.roles import SYSTEM
from app.services import audit
from app.services.pipeline_runs import CANCEL_RUN, NOT_STARTED, START_RUN
from store.format.delay_levels import DEFAULT_DELAY_LEVELS
from tests.app.conftest import SMALL_GEOMETRY, assert_error, audit_rows, bearer, make_settings, put_messages, running
from tests.app.fake_pipeline import SPARK_ERROR
from tests.app.test_resend import receive

pytestmark = pytest.mark.anyio

RUNS = "/api/pipeline/runs"
FAKE_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).with_name('fake_pipeline.py')))}"
DEADLINE_S = 30
SPARK_DEADLINE_S = 600  # a real Spark job on two shared cores
HTML = {"Accept": "text/html"}


def fake_settings(data_dir: Path, **overrides):
    return make_settings(data_dir, pipeline_command=FAKE_COMMAND, **overrides)


@pytest.fixture
async def fake_api(data_dir, clock):
    async with running(fake_settings(data_dir), clock) as api:
        yield api


@pytest.fixture
def mode(monkeypatch):
    """How the stand-in's runs go (fake_pipeline.py): the job's process inherits the variable."""
    return lambda name: monkeypatch.setenv("FAKE_PIPELINE_MODE", name)


async def wait_for_run(api, run_id: int, condition, deadline_s: float = DEADLINE_S) -> dict:
    """GET the run until condition(run) holds; the run."""
    deadline = time.monotonic() + deadline_s
    while True:
        run = (await api.client.get(f"{RUNS}/{run_id}")).json()["run"]
        if condition(run):
            return run
        assert time.monotonic() < deadline, f"run {run_id} did not get there: {run}"
        await asyncio.sleep(0.05)


def ended(run: dict) -> bool:
    return run["state"] in ("succeeded", "failed", "cancelled")


def reading(run: dict) -> bool:
    return run["stage"] == "reading the commit log"


def folder_of(run: dict) -> Path:
    return Path(run["output_path"]).parent


def gone(pid: int) -> bool:
    """The process has ended (a zombie, which waits for its parent to reap it, has ended too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return not Path(f"/proc/{pid}/cmdline").read_bytes()


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


async def test_a_run_reports_its_progress_then_its_results(fake_api, mode, data_dir):
    mode("hold")
    r = await fake_api.client.post(RUNS, json={"job": "dlq-report", "reason": "INC-7 what dies?"})
    assert r.status_code == 201, r.text
    run = r.json()["run"]
    assert (run["state"], run["job"], run["master"], run["requested_by"]) == (
        "running", "dlq-report", "local[*]", "bootstrap-admin")
    assert run["pid"] > 0 and run["store"] == str(fake_api.settings.store_dir.resolve())
    assert run["output_path"] == str((data_dir / "pipeline-runs" / str(run["id"]) / "out").resolve())
    try:
        going = await wait_for_run(fake_api, run["id"], reading)
        assert (going["state"], going["tasks_done"], going["tasks_total"], going["records"]) == ("running", 1, 4, 42)
        # one run at a time
        assert_error(await fake_api.client.post(RUNS, json={"job": "trace"}), 409, f"run {run['id']} is going",
                     "one pipeline run at a time")
        # the command: the console's own store with its geometry, the master, the status file, the delay table
        argv = json.loads((folder_of(run) / "argv.json").read_text())
        assert argv[:3] == ["pipeline", "run", "dlq-report"]
        options = dict(zip(argv[3::2], argv[4::2], strict=True))
        assert options == {"--store": run["store"], "--out": run["output_path"], "--master": "local[*]",
                           "--status": str(folder_of(run) / "status.json"),
                           **{f"--{name.replace('_', '-')}": str(value) for name, value in SMALL_GEOMETRY.items()},
                           "--delay-levels": DEFAULT_DELAY_LEVELS}
        env = json.loads((folder_of(run) / "env.json").read_text())
        assert env == {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}  # no MQLENS_* secrets
    finally:
        (folder_of(run) / "release").touch()
    done = await wait_for_run(fake_api, run["id"], ended)
    assert (done["state"], done["exit_code"], done["error"], done["stage"]) == ("succeeded", 0, None, "done")
    assert done["counts"] == {"dead_letters": 7, "groups": 2} and done["summary"].startswith("dlq-report:")
    assert (done["tasks_done"], done["tasks_total"]) == (4, 4)

    results = (await fake_api.client.get(done["results_url"])).json()
    assert results["problem"] is None and results["run"]["id"] == run["id"]
    tables = results["tables"]
    assert set(tables) == {"summary", "daily", "retries", "ttd_histogram", "top_keys", "top_tags", "top_reasons"}
    assert [(row["group"], row["dead_letters"], row["ttd_p99_ms"]) for row in tables["summary"]["rows"]] == [
        ("GID_billing", 5, None), ("GID_shipping", 2, 2000)]
    assert [(row["day"], row["group"]) for row in tables["daily"]["rows"]] == [
        ("2026-11-22", "GID_billing"), ("2026-11-20", "GID_billing"), ("2026-11-20", "GID_shipping")]
    assert [row["bucket"] for row in tables["ttd_histogram"]["rows"]] == ["< 1 s", "1-10 min", "1-10 s"]
    assert tables["top_keys"]["columns"] == ["group", "value", "dead_letters", "rank"]
    assert tables["top_keys"]["total_rows"] == 3

    listed = (await fake_api.client.get(RUNS)).json()["runs"]
    assert [(r["id"], r["state"]) for r in listed] == [(run["id"], "succeeded")]
    [entry] = audit_rows(fake_api.sessions, action=START_RUN)
    detail = json.loads(entry.detail)
    assert (entry.actor, entry.role, entry.target, entry.outcome, entry.reason) == (
        "bootstrap-admin", "admin", "pipeline:dlq-report", "ok", "INC-7 what dies?")
    assert detail == {"request": {"job": "dlq-report", "master": "local[*]"},
                      "result": {"run_id": run["id"], "pid": run["pid"]}}
    # the next run may start now, on another master
    mode("succeed")
    r = await fake_api.client.post(RUNS, json={"job": "trace", "master": "local[2]"})
    assert r.status_code == 201 and r.json()["run"]["master"] == "local[2]"
    await wait_for_run(fake_api, r.json()["run"]["id"], ended)


async def test_bad_requests_are_refused_with_a_message(fake_api):
    for body, status, words in [({"job": "pagerank"}, 400, "unknown job 'pagerank': use one of"),
                                ({"job": "trace", "master": "yarn"}, 400, "unknown Spark master 'yarn'"),
                                ({"job": "trace", "store": "/etc"}, 422, "body.store: Extra inputs"),
                                ({"job": "x" * 65}, 422, "job"), ({}, 422, "job")]:
        assert_error(await fake_api.client.post(RUNS, json=body), status, words)
    assert_error(await fake_api.client.post(RUNS, content=b"{", headers={"content-type": "application/json"}), 400)
    assert_error(await fake_api.client.get(f"{RUNS}/999"), 404, "no pipeline run 999")
    assert_error(await fake_api.client.get(f"{RUNS}/999/results"), 404, "no pipeline run 999")
    assert_error(await fake_api.client.post(f"{RUNS}/999/cancel"), 404, "no pipeline run 999")
    assert_error(await fake_api.client.get(f"{RUNS}/0"), 422)
    assert_error(await fake_api.client.get(f"{RUNS}/abc"), 422)
    page = await fake_api.client.post("/analytics/runs", data={"job": "pagerank"}, headers=HTML)
    assert page.status_code == 400 and "unknown job" in page.text
    assert (await fake_api.client.get(RUNS)).json()["runs"] == []
    assert audit_rows(fake_api.sessions, action=START_RUN) == []


async def test_a_failed_run_says_sparks_error_in_words(fake_api, mode):
    mode("fail")
    run = (await fake_api.client.post(RUNS, json={"job": "dlq-report"})).json()["run"]
    done = await wait_for_run(fake_api, run["id"], ended)
    assert (done["state"], done["error"], done["exit_code"]) == ("failed", SPARK_ERROR, 1)
    assert_error(await fake_api.client.get(done["results_url"]), 409, "failed: only a succeeded run has results")
    page = await fake_api.client.get(f"/analytics/runs/{run['id']}", headers=HTML)
    assert 'data-testid="run-error"' in page.text and SPARK_ERROR in page.text
    assert "The last lines of its log" in page.text and f"dlq-report failed: {SPARK_ERROR}" in page.text


async def test_a_process_that_dies_without_a_status_leaves_its_log_as_the_error(fake_api, mode):
    mode("crash")
    run = (await fake_api.client.post(RUNS, json={"job": "timelines"})).json()["run"]
    done = await wait_for_run(fake_api, run["id"], ended)
    assert done["state"] == "failed" and done["exit_code"] == 3
    assert done["error"] == ("the job's process ended with exit code 3 before it finished: "
                             "RuntimeError: the executor died")


async def test_a_command_that_cannot_start_fails_the_run_and_its_audit_entry(data_dir, clock):
    async with running(make_settings(data_dir, pipeline_command="/nonexistent/mqlens"), clock) as api:
        assert_error(await api.client.post(RUNS, json={"job": "trace"}), 409, "the pipeline command could not start")
        [run] = (await api.client.get(RUNS)).json()["runs"]
        assert run["state"] == "failed" and "could not start" in run["error"] and run["pid"] is None
        [entry] = audit_rows(api.sessions, action=START_RUN)
        assert entry.outcome == "failed" and "could not start" in entry.outcome_detail


async def test_cancel_ends_the_process_group(fake_api, mode):
    mode("hold")
    run = (await fake_api.client.post(RUNS, json={"job": "dlq-report"})).json()["run"]
    await wait_for_run(fake_api, run["id"], reading)
    r = await fake_api.client.post(f"{RUNS}/{run['id']}/cancel")
    assert r.status_code == 200, r.text
    assert (r.json()["run"]["state"], r.json()["run"]["cancelled_by"]) == ("cancelled", "bootstrap-admin")
    done = await wait_for_run(fake_api, run["id"], lambda run: run["exit_code"] is not None)
    assert (done["state"], done["exit_code"]) == ("cancelled", -signal.SIGTERM)
    assert gone(run["pid"]) and not (Path(run["output_path"]) / "summary").exists()
    assert_error(await fake_api.client.post(f"{RUNS}/{run['id']}/cancel"), 409, "cancelled: only a queued or running")
    [entry] = audit_rows(fake_api.sessions, action=CANCEL_RUN)
    assert (entry.actor, entry.target, json.loads(entry.detail)["before"]) == (
        "bootstrap-admin", f"pipeline-run:{run['id']}", "running")


async def test_roles_reading_and_starting(fake_api, mode):
    tokens = {}
    for role in ("viewer", "support", "operator"):
        r = await fake_api.client.post("/api/tokens", json={"name": f"t-{role}", "role": role})
        tokens[role] = r.json()["value"]
    for role in ("viewer", "support"):
        assert_error(await fake_api.client.post(RUNS, json={"job": "trace"}, headers=bearer(tokens[role])), 403,
                     "operator or admin role")
    r = await fake_api.client.post(RUNS, json={"job": "trace"}, headers=bearer(tokens["operator"]))
    assert r.status_code == 201 and r.json()["run"]["requested_by"] == "t-operator"
    done = await wait_for_run(fake_api, r.json()["run"]["id"], ended)
    viewer = bearer(tokens["viewer"])
    assert (await fake_api.client.get(RUNS, headers=viewer)).json()["runs"][0]["id"] == done["id"]
    assert (await fake_api.client.get(done["results_url"], headers=viewer)).status_code == 200
    page = await fake_api.client.get("/analytics", headers={**HTML, **viewer})
    assert page.status_code == 200 and 'data-testid="start-form"' not in page.text and f"#{done['id']}" in page.text
    assert_error(await fake_api.client.post(f"{RUNS}/{done['id']}/cancel", headers=viewer), 403)
    assert_error(await fake_api.client.get(RUNS, headers={"Authorization": ""}), 401)


async def test_a_restart_fails_a_run_whose_process_is_gone(data_dir, clock, mode):
    mode("hold")
    settings = fake_settings(data_dir)
    async with running(settings, clock) as api:
        run = (await api.client.post(RUNS, json={"job": "dlq-report"})).json()["run"]
        await wait_for_run(api, run["id"], reading)
    kill_group(run["pid"])  # the machine went down with the server
    deadline = time.monotonic() + DEADLINE_S
    while not gone(run["pid"]):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    async with running(settings, clock) as api:
        done = (await api.client.get(f"{RUNS}/{run['id']}")).json()["run"]
        assert done["state"] == "failed" and done["error"].startswith("interrupted by a restart")
        assert done["records"] == 42 and done["finished_at_ms"] == clock.now_ms()
        [entry] = audit_rows(api.sessions, action=START_RUN)
        assert entry.outcome == "ok"
        # and the next run may start
        mode("succeed")
        r = await api.client.post(RUNS, json={"job": "trace"})
        assert r.status_code == 201
        await wait_for_run(api, r.json()["run"]["id"], ended)


async def test_a_restart_follows_a_run_that_still_runs(data_dir, clock, mode):
    mode("hold")
    settings = fake_settings(data_dir)
    async with running(settings, clock) as api:
        run = (await api.client.post(RUNS, json={"job": "dlq-report"})).json()["run"]
        await wait_for_run(api, run["id"], reading)
    try:
        async with running(settings, clock) as api:
            assert api.app.state.pipeline_runner.following() == [run["id"]]
            assert_error(await api.client.post(RUNS, json={"job": "trace"}), 409, "one pipeline run at a time")
            (folder_of(run) / "release").touch()
            done = await wait_for_run(api, run["id"], ended)
            assert (done["state"], done["exit_code"]) == ("succeeded", None)  # not this server's child to wait for
            assert done["counts"] == {"dead_letters": 7, "groups": 2}
    finally:
        kill_group(run["pid"])
    async with running(settings, clock) as api:  # the results outlive the servers that saw the run
        results = (await api.client.get(f"{RUNS}/{run['id']}/results")).json()
        assert results["problem"] is None and results["tables"]["summary"]["total_rows"] == 2
        page = await api.client.get(f"/analytics/runs/{run['id']}", headers=HTML)
        assert 'data-testid="chart-daily"' in page.text


async def test_a_start_cut_by_a_crash_is_failed_at_start_up(data_dir, clock):
    settings = fake_settings(data_dir)
    async with running(settings, clock) as api:
        # as if the server died after recording the intent and before launching the job
        with api.sessions.begin() as s:
            entry = audit.record(s, clock, actor=SYSTEM, action=START_RUN, target="pipeline:trace", detail={},
                                 outcome=audit.PENDING)
            s.flush()
            run = PipelineRun(action_id=entry.id, job="trace", store="x", master="local[*]", state="queued",
                              requested_by="ops", requested_at_ms=clock.now_ms(), output_path="/nowhere/out",
                              tasks_done=0, tasks_total=0, records=0, skipped_ranges=0)
            s.add(run)
            s.flush()
            entry.detail = json.dumps({"request": {}, "result": {"run_id": run.id}})
    async with running(settings, clock) as api:
        run = (await api.client.get(f"{RUNS}/1")).json()["run"]
        assert (run["state"], run["error"]) == ("failed", NOT_STARTED)
        with api.sessions() as s:
            entry = s.scalars(select(AuditEntry).where(AuditEntry.action == START_RUN)).one()
            assert (entry.outcome, entry.outcome_detail) == ("failed", NOT_STARTED)


async def test_results_say_when_the_output_is_damaged_or_gone(fake_api):
    run = (await fake_api.client.post(RUNS, json={"job": "dlq-report"})).json()["run"]
    await wait_for_run(fake_api, run["id"], ended)
    out = Path(run["output_path"])
    shutil.rmtree(out / "top_keys")
    results = (await fake_api.client.get(run["results_url"])).json()
    assert results["problem"] == f"the dlq-report output in {out} has no top_keys/ table: it is incomplete or damaged"
    assert "summary" in results["tables"]  # the tables before it are still shown
    page = await fake_api.client.get(f"/analytics/runs/{run['id']}", headers=HTML)
    assert page.status_code == 200 and 'data-testid="results-problem"' in page.text
    (out / "summary" / "part-00000.parquet").write_bytes(b"not parquet at all")
    results = (await fake_api.client.get(run["results_url"])).json()
    assert results["problem"].startswith("the summary/ table of the dlq-report output cannot be read: ")
    shutil.rmtree(out)
    results = (await fake_api.client.get(run["results_url"])).json()
    assert results["problem"] == f"the output folder {out} is gone: it was moved or deleted after the run"
    assert results["tables"] == {}
    page = await fake_api.client.get(f"/analytics/runs/{run['id']}", headers=HTML)
    assert page.status_code == 200 and "is gone" in page.text


async def test_other_jobs_show_their_first_rows(fake_api):
    run = (await fake_api.client.post(RUNS, json={"job": "trace"}, headers={"Idempotency-Key": "k-1"})).json()["run"]
    done = await wait_for_run(fake_api, run["id"], ended)
    again = await fake_api.client.post(RUNS, json={"job": "trace"}, headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 201 and again.json()["run"]["id"] == run["id"]  # a repeat starts nothing
    assert len(audit_rows(fake_api.sessions, action=START_RUN)) == 1
    assert done["counts"] == {"records": 3}
    tables = (await fake_api.client.get(run["results_url"])).json()["tables"]
    assert tables["rows"]["rows"] == [{"topic": "Orders", "body": "3 bytes"}, {"topic": "Orders", "body": None},
                                      {"topic": "Orders", "body": "300 bytes"}]


async def test_the_analytics_pages(fake_api, mode):
    page = await fake_api.client.get("/analytics", headers=HTML)
    assert page.status_code == 200 and 'data-testid="start-form"' in page.text and "No run yet" in page.text
    assert '<option value="dlq-report" selected>' in page.text and '<option value="local[*]" selected>' in page.text
    assert 'href="/analytics" aria-current="page"' in page.text
    mode("hold")
    r = await fake_api.client.post("/analytics/runs", data={"job": "dlq-report", "master": "local[1]",
                                                            "reason": "weekly"}, headers=HTML)
    assert r.status_code == 303
    url = r.headers["location"]
    run_id = int(url.rsplit("/", 1)[1])
    await wait_for_run(fake_api, run_id, reading)
    live = await fake_api.client.get(url, headers={**HTML, "HX-Request": "true", "HX-Target": "live"})
    assert live.status_code == 200 and "<html" not in live.text
    assert 'data-testid="run-state">running<' in live.text and "reading the commit log" in live.text
    assert '<progress max="4" value="1"' in live.text and "Cancel the run" in live.text
    listing = await fake_api.client.get("/analytics", headers={**HTML, "HX-Request": "true", "HX-Target": "runs"})
    assert listing.status_code == 200 and "reading the commit log" in listing.text
    (folder_of((await fake_api.client.get(f"{RUNS}/{run_id}")).json()["run"]) / "release").touch()
    await wait_for_run(fake_api, run_id, ended)
    live = await fake_api.client.get(url, headers={**HTML, "HX-Request": "true", "HX-Target": "live"})
    assert live.status_code == 286  # htmx stops polling: the run has ended
    assert 'data-testid="run-state">succeeded<' in live.text and 'data-testid="charts"' in live.text
    for chart in ("daily", "retries", "time-to-dlq", "top-keys"):
        assert f'data-testid="chart-{chart}"' in live.text
        assert f'role="img" aria-labelledby="chart-{chart}-title chart-{chart}-desc"' in live.text
    assert "<title>2026-11-20 · GID_billing: 3 dead letters</title>" in live.text
    assert "<desc id=\"chart-daily-desc\">7 dead letters from 2026-11-20 to 2026-11-22 in 2 groups" in live.text
    assert "Top failure reasons" in live.text and "card declined" in live.text
    listing = await fake_api.client.get("/analytics", headers={**HTML, "HX-Request": "true"})
    assert listing.status_code == 286 and "7 dead letters, 2 groups" in listing.text
    twin = (await fake_api.client.get(f"{url}.json")).json()
    assert twin["run"]["state"] == "succeeded" and twin["run"]["master"] == "local[1]"
    assert [c["id"] for c in twin["charts"]] == ["daily", "retries", "time-to-dlq", "top-keys"]
    assert [t["name"] for t in twin["results"]["tables"]][:2] == ["summary", "daily"]
    daily = twin["charts"][0]["layout"]
    assert [c["title"] for c in daily["columns"]] == ["2026-11-20", "2026-11-21", "2026-11-22"]
    assert [c["total"] for c in daily["columns"]] == [5, 0, 2]
    listing = (await fake_api.client.get("/analytics.json")).json()
    assert [r["id"] for r in listing["runs"]] == [run_id] and listing["masters"][0] == "local[*]"
    assert {j["name"] for j in listing["jobs"]} >= {"dlq-report", "trace"}
    [entry] = audit_rows(fake_api.sessions, action=START_RUN)
    assert entry.reason == "weekly"


async def test_a_read_only_console_runs_jobs_over_the_store_it_serves(tmp_path, golden_store_dir, clock):
    from tests.conftest import GOLDEN_GEOMETRY

    settings = fake_settings(tmp_path / "data", store_dir=golden_store_dir, read_only=True,
                             commitlog_file_size=GOLDEN_GEOMETRY.commitlog_file_size,
                             cq_file_size=GOLDEN_GEOMETRY.cq_file_size, index_slots=GOLDEN_GEOMETRY.index_slots,
                             index_entries=GOLDEN_GEOMETRY.index_entries)
    async with running(settings, clock) as api:
        r = await api.client.post(RUNS, json={"job": "trace"})
        assert r.status_code == 201, r.text
        assert (await wait_for_run(api, r.json()["run"]["id"], ended))["state"] == "succeeded"
        assert_error(await api.client.post("/api/topics/Orders/messages", json={"body": "x"}), 409, "read-only")


async def dead_letters(api, group: str, topic: str, keys: list[str]) -> None:
    """One message per key to `topic` (which only `group` consumes), each failed into the DLQ."""
    assert (await api.client.put(f"/api/groups/{group}", json={"max_reconsume_times": 0})).status_code == 200
    await put_messages(api, topic, [{"body": f"order {key}", "keys": [key], "tags": "paid"} for key in keys])
    while got := await receive(api, group, topic):
        for m in got:
            r = await api.client.post(f"/api/groups/{group}/nack", json={"receipt_handle": m["receipt_handle"],
                                                                          "reason": "card declined"})
            assert r.status_code == 200


@pytest.mark.slow
async def test_a_real_dlq_report_run_through_spark(data_dir, clock):
    """The real command (`python -m app.cli pipeline run dlq-report ...`) and a real Spark."""
    async with running(make_settings(data_dir, pipeline_master="local[2]"), clock) as api:
        await dead_letters(api, "GID_billing", "Orders", [f"order-{n}" for n in range(6)])
        await dead_letters(api, "GID_audit", "Invoices", ["order-0", "order-1"])
        run = (await api.client.post(RUNS, json={"job": "dlq-report"})).json()["run"]
        try:
            done = await wait_for_run(api, run["id"], ended, SPARK_DEADLINE_S)
        finally:
            kill_group(run["pid"])
        assert done["state"] == "succeeded", done["error"]
        assert done["master"] == "local[2]" and done["records"] > 0 and done["exit_code"] == 0
        tables = (await api.client.get(done["results_url"])).json()["tables"]
        dead = {(row["group"], row["dead_letters"]) for row in tables["summary"]["rows"]}
        assert dead == {("GID_billing", 6), ("GID_audit", 2)}
        assert sum(row["dead_letters"] for row in tables["daily"]["rows"]) == 8
        assert {row["value"] for row in tables["top_keys"]["rows"] if row["group"] == "GID_audit"} == {
            "order-0", "order-1"}
        page = await api.client.get(f"/analytics/runs/{run['id']}", headers=HTML)
        assert 'data-testid="chart-daily"' in page.text and 'data-testid="chart-top-keys"' in page.text
