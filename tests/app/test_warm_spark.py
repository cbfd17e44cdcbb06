"""The warm Spark: jobs on the console's own local master go to one kept driver process that
`mqlens serve` supervises; jobs on another master are processes of their own as before; a run the
driver held when it died is failed with the reason and the next job gets a new driver; a cancel
stops the run's Spark jobs and leaves the driver warm; an idle driver stops by itself.

The test marked slow runs the real driver and Spark (one JVM at a time, two in all); the others
point the pipeline command at the stand-in (tests/app/fake_pipeline.py), which cannot be a driver."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.models import PipelineRun
from app.roles import SYSTEM
from app.services import audit
from app.services.pipeline_runs import START_RUN
from tests.app.conftest import make_settings, running
from tests.app.fake_pipeline import write_status
from tests.app.test_pipeline_runs import (
    RUNS,
    SPARK_DEADLINE_S,
    dead_letters,
    ended,
    fake_settings,
    folder_of,
    gone,
    kill_group,
    wait_for_run,
)

pytestmark = pytest.mark.anyio

WARM_JOB_S = 120  # a job on a warm driver: seconds here when the machine is idle, more on two shared cores


def warm_settings(data_dir: Path, **overrides) -> Settings:
    return make_settings(data_dir, pipeline_warm=True, pipeline_master="local[2]", pipeline_warm_memory="768m",
                         **overrides)


def test_the_warm_spark_settings_are_bounded(tmp_path):
    for bad in ({"pipeline_warm_memory": "lots"}, {"pipeline_warm_memory": "0g"}, {"pipeline_warm_memory": "1t"},
                {"pipeline_warm_idle_s": 5}, {"pipeline_warm_idle_s": 8 * 86_400}):
        with pytest.raises(ValidationError):
            Settings(data_dir=tmp_path, **bad)
    assert Settings(data_dir=tmp_path).warm_spark_master() == "local[*]"
    assert Settings(data_dir=tmp_path, pipeline_master="local[2]").warm_spark_master() == "local[2]"
    assert Settings(data_dir=tmp_path, pipeline_warm=False).warm_spark_master() is None
    assert Settings(data_dir=tmp_path, pipeline_master="spark://spark-master:7077").warm_spark_master() is None


async def test_other_masters_still_run_as_processes_of_their_own(data_dir, clock):
    settings = fake_settings(data_dir, pipeline_warm=True, pipeline_warm_at_start=False)
    async with running(settings, clock) as api:
        r = await api.client.post(RUNS, json={"job": "trace", "master": "local[1]"})
        assert r.status_code == 201, r.text
        done = await wait_for_run(api, r.json()["run"]["id"], ended)
        assert (done["state"], done["exit_code"]) == ("succeeded", 0)
        assert (folder_of(done) / "argv.json").is_file()  # the stand-in ran it: a process of its own
        assert not (folder_of(done) / "warm.json").exists()
        assert api.app.state.pipeline_runner.warm.pid is None  # and no driver was started for it


async def test_a_driver_that_dies_fails_the_run_with_the_reason(data_dir, clock):
    """The stand-in cannot be a driver: it ends at once with exit code 2, as a driver that cannot
    start would; the run it was given fails saying so, and the next job tries a new driver."""
    settings = fake_settings(data_dir, pipeline_warm=True, pipeline_warm_at_start=False)
    async with running(settings, clock) as api:
        pids = []
        for _ in range(2):
            r = await api.client.post(RUNS, json={"job": "dlq-report"})
            assert r.status_code == 201, r.text
            done = await wait_for_run(api, r.json()["run"]["id"], ended)
            assert done["state"] == "failed" and done["exit_code"] is None
            assert done["error"].startswith(f"the warm Spark (process {done['pid']}) died while it held the job: it "
                                            "ended with exit code 2 (")  # and the last words of its log:
            assert "error: unrecognized arguments: --inbox" in done["error"]
            assert done["error"].endswith("; the next job starts another")
            assert (folder_of(done) / "warm.json").is_file()
            pids.append(done["pid"])
        assert pids[0] != pids[1]
        page = await api.client.get(f"/analytics/runs/{done['id']}", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "died while it held the job" in page.text


def taken(run: dict) -> bool:
    """The driver has the job in hand: it wrote the run's first status."""
    return (folder_of(run) / "status.json").exists()


async def run_to_end(api, job: str = "dlq-report") -> tuple[dict, float]:
    began = time.monotonic()
    r = await api.client.post(RUNS, json={"job": job})
    assert r.status_code == 201, r.text
    done = await wait_for_run(api, r.json()["run"]["id"], ended, SPARK_DEADLINE_S)
    return done, time.monotonic() - began


@pytest.mark.slow
async def test_jobs_go_to_one_kept_driver_that_is_replaced_when_it_dies(data_dir, clock):
    drivers: list[int] = []
    try:
        async with running(warm_settings(data_dir), clock) as api:
            warm = api.app.state.pipeline_runner.warm
            first_pid = warm.pid
            assert first_pid is not None  # started with the console
            drivers.append(first_pid)
            await dead_letters(api, "GID_billing", "Orders", [f"order-{n}" for n in range(5)])
            await dead_letters(api, "GID_audit", "Invoices", ["order-0"])

            done, _ = await run_to_end(api)
            assert done["state"] == "succeeded", done["error"]
            assert (done["pid"], done["exit_code"], done["master"]) == (first_pid, None, "local[2]")
            tables = (await api.client.get(done["results_url"])).json()["tables"]
            assert {(row["group"], row["dead_letters"]) for row in tables["summary"]["rows"]} == {
                ("GID_billing", 5), ("GID_audit", 1)}
            assert "taken by the warm Spark" in (folder_of(done) / "run.log").read_text()

            again, seconds = await run_to_end(api, "trace")
            assert again["state"] == "succeeded" and again["pid"] == first_pid  # no new Spark for it
            assert seconds < WARM_JOB_S

            # a cancel stops the run's Spark jobs; the driver stays warm unless it overran the grace
            r = await api.client.post(RUNS, json={"job": "dlq-report"})
            cancelled = r.json()["run"]
            await wait_for_run(api, cancelled["id"], taken, SPARK_DEADLINE_S)
            r = await api.client.post(f"{RUNS}/{cancelled['id']}/cancel")
            assert r.status_code == 200 and r.json()["run"]["state"] == "cancelled"
            deadline = time.monotonic() + SPARK_DEADLINE_S
            while api.app.state.pipeline_runner.following():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            assert (await api.client.get(f"{RUNS}/{cancelled['id']}")).json()["run"]["state"] == "cancelled"

            # the driver killed while it holds a job: the run fails saying so, the next job gets a new driver
            r = await api.client.post(RUNS, json={"job": "dlq-report"})
            doomed = r.json()["run"]
            await wait_for_run(api, doomed["id"], taken, SPARK_DEADLINE_S)
            kill_group(doomed["pid"])
            failed = await wait_for_run(api, doomed["id"], ended)
            assert failed["state"] == "failed" and failed["exit_code"] is None
            assert failed["error"] == (f"the warm Spark (process {doomed['pid']}) died while it held the job: "
                                       "it was killed by signal 9 (SIGKILL); the next job starts another")
            after, _ = await run_to_end(api)
            assert after["state"] == "succeeded", after["error"]
            assert after["pid"] not in (doomed["pid"], None) and after["pid"] == warm.pid
            summary = (await api.client.get(after["results_url"])).json()["tables"]["summary"]["rows"]
            assert sum(row["dead_letters"] for row in summary) == 6
            drivers.append(after["pid"])
        assert gone(after["pid"])  # the console's stop ends an idle driver, its JVM with it
    finally:
        for pid in drivers:  # a failed test may leave a busy one
            kill_group(pid)


def held_run(api, clock, folder: Path, pid: int, inbox: Path) -> int:
    """A run row as a console leaves it when it stops while its warm Spark (process `pid`, folder
    `inbox`) holds the run."""
    with api.sessions.begin() as s:
        entry = audit.record(s, clock, actor=SYSTEM, action=START_RUN, target="pipeline:dlq-report", detail={})
        s.flush()
        run = PipelineRun(action_id=entry.id, job="dlq-report", store="x", master="local[2]", state="running",
                          requested_by="ops", requested_at_ms=clock.now_ms(), output_path=str(folder / "out"),
                          pid=pid, tasks_done=0, tasks_total=0, records=0, skipped_ranges=0)
        s.add(run)
        s.flush()
        run_id = run.id
    folder.mkdir(parents=True)
    (folder / "warm.json").write_text(json.dumps({"inbox": str(inbox), "pid": pid}))
    return run_id


async def test_a_restart_follows_a_run_its_warm_spark_still_holds(data_dir, clock, tmp_path):
    settings = fake_settings(data_dir, pipeline_warm=True, pipeline_warm_at_start=False)
    inbox = tmp_path / "old-driver"
    # stands for the driver an earlier console started: its command line names its folder
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(inbox)],
                              start_new_session=True)
    try:
        async with running(settings, clock) as api:
            held = held_run(api, clock, data_dir / "pipeline-runs" / "77", driver.pid, inbox)
            gone_run = held_run(api, clock, data_dir / "pipeline-runs" / "78", driver.pid, tmp_path / "another")
        async with running(settings, clock) as api:
            assert api.app.state.pipeline_runner.following() == [held]  # its driver still runs
            lost = (await api.client.get(f"{RUNS}/{gone_run}")).json()["run"]
            assert lost["state"] == "failed" and lost["error"].startswith("interrupted by a restart")
            write_status(data_dir / "pipeline-runs" / "77" / "status.json", job="dlq-report", state="succeeded",
                         stage="done", counts={"dead_letters": 0})
            done = await wait_for_run(api, held, ended)
            assert (done["state"], done["counts"], done["exit_code"]) == ("succeeded", {"dead_letters": 0}, None)
    finally:
        kill_group(driver.pid)
        driver.wait()
