"""The SQLite baseline's database: schema, insert and opening (WAL, synchronous=NORMAL). Apart
from bench/systems.py so that the plain load script (bench/sqlite_load.py) imports nothing else."""

from __future__ import annotations

import sqlite3
from pathlib import Path

SQLITE_SCHEMA = (
    "CREATE TABLE msg (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, queue_id INTEGER NOT NULL, "
    "queue_offset INTEGER NOT NULL, key1 TEXT, key2 TEXT, uniq_key TEXT, tags TEXT, body BLOB, "
    "store_ts INTEGER NOT NULL)",
    "CREATE INDEX msg_key1 ON msg (topic, key1)",
    "CREATE INDEX msg_key2 ON msg (topic, key2)",
    "CREATE INDEX msg_uniq ON msg (uniq_key)",
)
SQLITE_INSERT = ("INSERT INTO msg (topic, queue_id, queue_offset, key1, key2, uniq_key, tags, body, store_ts) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
DB_NAME = "bench.db"


def sqlite_open(root: Path) -> tuple[sqlite3.Connection, str]:
    """A new baseline database in `root` (WAL, synchronous=NORMAL, the schema with its three
    indexes) and the journal mode SQLite agreed to."""
    conn = sqlite3.connect(Path(root) / DB_NAME, isolation_level=None)
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    conn.execute("PRAGMA synchronous=NORMAL")
    for stmt in SQLITE_SCHEMA:
        conn.execute(stmt)
    return conn, mode
