"""A content search as a process of its own (`python -m store.search.worker`): the request as JSON
on standard input, then one JSON object a line on standard output, flushed as it comes:
{"progress": {...}}, {"hit": {...}}, {"problem": "..."}, and {"done": {...}} at the end.

Whoever starts it can stop it at any moment by ending the process: a regular expression that
backtracks without end then costs that process, never the caller's."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import IO

from store.search.matching import ContentQuery
from store.search.walk import Found, Problem, Progress, Segment, walk


def hit_record(found: Found) -> dict:
    m = found.message
    return {"offset_msg_id": m.offset_msg_id, "topic": m.topic, "queue_id": m.queue_id,
            "queue_offset": m.queue_offset, "phys_offset": m.phys_offset, "size": m.size,
            "store_timestamp": m.store_timestamp, "born_timestamp": m.born_timestamp, "keys": m.keys,
            "tags": m.tags, "unique_key": m.unique_key, **asdict(found.match)}


def run(request: dict, out: IO[str]) -> None:
    query = ContentQuery(**{**request["query"], "topics": tuple(request["query"]["topics"])})
    segments = [Segment(base, Path(path)) for base, path in request["segments"]]
    hits = 0
    last: Progress | None = None
    for event in walk(segments, request["file_size"], request["log_end"], query, max_hits=request["max_hits"],
                      max_bytes=request["max_bytes"]):
        if isinstance(event, Found):
            hits += 1
            line = {"hit": hit_record(event)}
        elif isinstance(event, Problem):
            line = {"problem": event.text}
        else:
            last = event
            line = {"progress": asdict(event)}
        out.write(json.dumps(line) + "\n")
        out.flush()
    out.write(json.dumps({"done": {"hits": hits, **(asdict(last) if last else {})}}) + "\n")
    out.flush()


if __name__ == "__main__":
    run(json.loads(sys.stdin.read()), sys.stdout)
