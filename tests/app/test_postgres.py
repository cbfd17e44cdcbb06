"""Operator state in PostgreSQL instead of SQLite: a real PostgreSQL server, started for this module
in a temporary cluster, migrated at start-up, with audited actions written to it."""

from __future__ import annotations

import glob
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from app.models import AuditEntry, ConfigVersion
from tests.app.conftest import make_settings, running
from tests.live_server import free_port

pytestmark = pytest.mark.anyio


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.fail("PostgreSQL's server programs are missing: `make test` installs Debian's postgresql package")
    return Path(found[-1]).parent


def _as_postgres_user(args: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its programs as the postgres user then."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    bin_dir = _postgres_bin()
    # Not under pytest's temporary folder: the postgres user could not enter a folder only root may.
    with tempfile.TemporaryDirectory(prefix="mqlens-pg-") as folder:
        root = Path(folder)
        root.chmod(0o777)
        yield from _cluster(bin_dir, root)


def _cluster(bin_dir: Path, root: Path) -> Iterator[str]:
    cluster, port = root / "cluster", free_port()
    subprocess.run(_as_postgres_user([str(bin_dir / "initdb"), "-D", str(cluster), "-A", "trust", "-U", "mqlens"]),
                   check=True, capture_output=True, timeout=120)
    options = f"-k {root} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(_as_postgres_user([str(bin_dir / "pg_ctl"), "-D", str(cluster), "-o", options, "-l",
                                      str(root / "server.log"), "-w", "-t", "60", "start"]),
                   check=True, capture_output=True, timeout=120)
    try:
        yield f"postgresql+psycopg://mqlens@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres_user([str(bin_dir / "pg_ctl"), "-D", str(cluster), "-m", "fast", "-w", "stop"]),
                       capture_output=True, timeout=120)


async def test_the_app_migrates_postgres_and_audits_into_it(postgres_url, data_dir, clock):
    settings = make_settings(data_dir, database_url=postgres_url)
    async with running(settings, clock) as api:
        r = await api.client.put("/api/config/delay-levels", json={"levels": "1s 5s 10s"},
                                 headers={"Idempotency-Key": "pg-1"})
        assert r.status_code == 200, r.text
        # Another table in between, so the repeat is answered from the audit row found by its key
        # (a repeat of the table in use would change nothing without looking the key up).
        assert (await api.client.put("/api/config/delay-levels", json={"levels": "2s"})).status_code == 200
        again = await api.client.put("/api/config/delay-levels", json={"levels": "1s 5s 10s"},
                                     headers={"Idempotency-Key": "pg-1"})
        assert again.status_code == 200 and again.json() == r.json()
        r = await api.client.put("/api/config/delay-levels", json={"levels": "1s 5s 10s"})
        assert r.status_code == 200 and r.json()["version"] == 3, r.text
    assert not (data_dir / "mqlens.db").exists()  # nothing went to SQLite
    engine = create_engine(postgres_url)
    try:
        with Session(engine) as session:
            versions = session.scalars(select(ConfigVersion)).all()
            audits = session.scalars(select(AuditEntry)).all()
        assert [v.value for v in versions][-1] == "1s 5s 10s"
        assert len([a for a in audits if a.idempotency_key == "pg-1"]) == 1
    finally:
        engine.dispose()
    async with running(settings, clock) as api:  # a restart finds the table in PostgreSQL
        assert (await api.client.get("/api/config/delay-levels")).json()["levels"] == "1s 5s 10s"
