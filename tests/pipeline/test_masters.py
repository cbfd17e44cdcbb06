"""Every job on a multi-process master (`local-cluster`: executors in JVMs of their own) and on a
standalone master and worker started on loopback, with the same output as in the test's own
local session: nothing depends on running in the driver's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from pipeline.jobs import JOBS
from pipeline.options import SourceOptions
from pipeline.run import run_job
from pipeline.session import job_session
from tests.conftest import GOLDEN_GEOMETRY, copy_golden_store
from tests.pipeline.standalone import standalone_cluster

pytestmark = pytest.mark.slow  # runs first (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
RUN_SECONDS = 600


def run_on(master: str, store: Path, out_root: Path, *more: str) -> dict:
    """Jobs on `master` in a process of their own (tests.pipeline.jobs_on_master; `more`: the
    workers' Python, ship or no, the jobs)."""
    g = GOLDEN_GEOMETRY
    done = subprocess.run(
        [sys.executable, "-m", "tests.pipeline.jobs_on_master", master, str(store), str(out_root),
         str(g.cq_file_size), str(g.index_slots), str(g.index_entries), *more],
        cwd=REPO, capture_output=True, text=True, timeout=RUN_SECONDS,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def same_output(spark, expected: Path, actual: Path) -> None:
    """Parquet tables equal as DataFrames, every other file byte for byte."""
    tables = sorted({p.parent for p in expected.rglob("*.parquet")})
    assert tables == sorted({expected / p.parent.relative_to(actual) for p in actual.rglob("*.parquet")})
    for table in tables:
        assertDataFrameEqual(spark.read.parquet(str(actual / table.relative_to(expected))),
                             spark.read.parquet(str(table)))
    plain = sorted(p.relative_to(expected) for p in expected.rglob("*")
                   if p.is_file() and ".parquet" not in p.name and not p.name.startswith(("_", ".")))
    assert plain == sorted(p.relative_to(actual) for p in actual.rglob("*")
                           if p.is_file() and ".parquet" not in p.name and not p.name.startswith(("_", ".")))
    for name in plain:
        assert (actual / name).read_bytes() == (expected / name).read_bytes(), name


@pytest.fixture(scope="module")
def golden_store(tmp_path_factory) -> Path:
    """One copy of the golden store for the module: the jobs only read it."""
    return copy_golden_store(tmp_path_factory.mktemp("masters") / "golden-store")


@pytest.fixture(scope="module")
def local_outputs(spark, golden_store, tmp_path_factory) -> Path:
    """Every job's output in the test's own local session, made once for both masters."""
    root = tmp_path_factory.mktemp("local")
    source = SourceOptions(golden_store, GOLDEN_GEOMETRY)
    for job in JOBS:
        assert run_job(job, source, root / job, lambda: job_session("local[2]")).state == "succeeded"
    return root


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory) -> str:
    """One standalone master and worker on loopback for the module's jobs (each application brings
    its own settings, the workers' Python among them)."""
    work = tmp_path_factory.mktemp("spark")
    with standalone_cluster(work) as master:
        yield master


def check_master(spark, master: str, store: Path, local: Path, out_root: Path) -> None:
    statuses = run_on(master, store, out_root)
    assert len(statuses.pop("executor_pids")) >= 1
    for job in JOBS:
        assert statuses[job]["state"] == "succeeded", statuses[job]["error"]
        assert statuses[job]["records"] == 61
        same_output(spark, local / job, out_root / job)


def test_every_job_on_a_multi_process_master(spark, golden_store, local_outputs, tmp_path):
    check_master(spark, "local-cluster[2,1,1024]", golden_store, local_outputs, tmp_path / "cluster")


def test_every_job_on_a_standalone_master_and_worker(spark, golden_store, local_outputs, standalone_master, tmp_path):
    check_master(spark, standalone_master, golden_store, local_outputs, tmp_path / "standalone")


def python_without_mqlens(folder: Path) -> Path:
    """This interpreter with its libraries (pyarrow, numpy, pyspark) but without mqlens: started
    with -S, no site-packages .pth file runs, so the editable install of mqlens is not found."""
    site_packages = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "pyarrow").is_dir())
    wrapper = folder / "python-without-mqlens"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site_packages}" '
                       f'exec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_shipped_code_runs_jobs_on_executors_without_mqlens(spark, golden_store, local_outputs, standalone_master,
                                                            tmp_path):
    python = python_without_mqlens(tmp_path)
    away = subprocess.run([str(python), "-c", "import pyarrow, numpy\nimport pipeline"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert "No module named 'pipeline'" in away.stderr
    without = run_on(standalone_master, golden_store, tmp_path / "without", str(python), "no", "dlq-report")
    assert without["dlq-report"]["state"] == "failed"
    assert "No module named 'pipeline'" in without["dlq-report"]["error"]
    shipped = run_on(standalone_master, golden_store, tmp_path / "shipped", str(python), "ship", "dlq-report",
                     "projections")
    for job in ("dlq-report", "projections"):
        assert shipped[job]["state"] == "succeeded", shipped[job]["error"]
        same_output(spark, local_outputs / job, tmp_path / "shipped" / job)
