"""The SQLite baseline of `mqlens store load`: a plain script that loads an NDJSON file of
messages into the SQLite baseline's schema (bench/sqlite_schema.py: WAL, synchronous=NORMAL),
one transaction per BATCH rows. It reads the file line by line, parses each line with the JSON
parser and decodes the body with the base64 decoder that mqlens's load uses (orjson, pybase64),
numbers each queue's rows as a broker would, and prints one summary line at the end.

    python -m bench.sqlite_load DB_DIR FILE.ndjson [BATCH]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import orjson
import pybase64

from bench.sqlite_schema import SQLITE_INSERT, sqlite_open

BATCH = 1000


def main(argv: list[str]) -> int:
    root, source = Path(argv[0]), argv[1]
    batch = int(argv[2]) if len(argv) > 2 else BATCH
    conn, mode = sqlite_open(root)
    if mode != "wal":
        print(f"sqlite_load: journal mode {mode}, not wal", file=sys.stderr)
        return 1
    next_offset: dict[tuple[str, int], int] = {}
    rows: list[tuple] = []
    count = 0

    def insert() -> None:
        conn.execute("BEGIN")
        conn.executemany(SQLITE_INSERT, rows)
        conn.execute("COMMIT")

    with open(source, "rb") as lines:
        for line in lines:
            m = orjson.loads(line)
            topic, queue_id, keys = m["topic"], m.get("queue_id", 0), m.get("keys", [])
            queue_offset = next_offset.get((topic, queue_id), 0)
            next_offset[topic, queue_id] = queue_offset + 1
            if not rows:
                now = time.time_ns() // 1_000_000
            rows.append((topic, queue_id, queue_offset, keys[0] if keys else None, keys[1] if len(keys) > 1 else None,
                         m.get("unique_key"), m.get("tags"), pybase64.b64decode(m["body_base64"], validate=True),
                         now))
            if len(rows) == batch:
                insert()
                count += len(rows)
                rows.clear()
    if rows:
        insert()
        count += len(rows)
    conn.close()
    print(f"inserted {count} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
