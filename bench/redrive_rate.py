"""Redrive job rate: how close a real server's redrive job comes to the rate it was given.

    .venv/bin/python -m bench.redrive_rate                          # 10,000 dead letters at 1,000/s
    .venv/bin/python -m bench.redrive_rate --messages 2000 --rate 500

A store in a temporary directory gets --messages dead letters of one group (put, received and
failed once with max_reconsume_times 0); a real server (`mqlens serve`) then runs one redrive
job over them at --rate a second. Reported: the job's wall time from its start to `done`, the
rate that makes, and its share of the rate asked (1.0: the job kept to its rate; below: the
server could not keep up). The tests check the pacing itself on a clock they move
(tests/app/test_redrive.py); this measures what a machine sustains.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from store.clock import SystemClock
from store.format import topics
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.live_server import LiveServer, wait_until

GROUP, TOPIC = "GID_redrive_bench", "RedriveBench"
SETTINGS = {"commitlog_file_size": 64 * 1024 * 1024, "cq_file_size": 20 * 65_536, "index_slots": 65_536,
            "index_entries": 524_288}
BATCH = 1_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.redrive_rate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=10_000, help="dead letters to resend (default 10,000)")
    ap.add_argument("--rate", type=int, default=1_000, help="the job's rate, messages a second (default 1,000)")
    ap.add_argument("--workdir", help="directory for the temporary store (default: the system temp dir)")
    ap.add_argument("--json", type=Path, help="also write the result as JSON to this file")
    args = ap.parse_args(argv)
    if args.messages < 1 or not 1 <= args.rate <= 10_000:
        ap.error("--messages must be at least 1 and --rate 1 to 10,000")
    return args


def dead_letters(store_dir: Path, count: int) -> None:
    config = StoreConfig(geometry=StoreGeometry(**SETTINGS), flush="async", schedule_interval_ms=0)
    with MessageStore.open(store_dir, config, clock=SystemClock()) as store:
        store.metadata.update_group(GROUP, max_reconsume_times=0)
        for start in range(0, count, BATCH):
            store.put_many([NewMessage(topic=TOPIC, body=f"order {n}".encode(), keys=[f"o-{n}"])
                            for n in range(start, min(count, start + BATCH))])
        while received := store.receive(GROUP, TOPIC, BATCH, 60_000):
            for r in received:
                store.nack(GROUP, r.receipt_handle, "bench")
        assert store.queues.get(topics.dlq_topic(GROUP), 0).max_offset == count


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="redrive-bench-", dir=args.workdir) as work:
        data = Path(work) / "data"
        dead_letters(data / "store", args.messages)
        with LiveServer(data, Path(work) / "server.log", SETTINGS, small_store=False) as server:
            server.start()
            with server.client() as client:
                r = client.post("/api/redrive-jobs", json={"group": GROUP, "rate_per_s": args.rate,
                                                           "reason": "bench"})
                r.raise_for_status()
                job_id = r.json()["job"]["id"]
                began = time.monotonic()
                expected_s = args.messages / args.rate
                wait_until(lambda: client.get(f"/api/redrive-jobs/{job_id}").json()["job"]["state"] == "done",
                           60 + 10 * expected_s, "the job to finish", poll_s=0.25)
                took = time.monotonic() - began
                ok = client.get(f"/api/redrive-jobs/{job_id}").json()["job"]["counts"]["ok"]
            server.stop()
    result = {"messages": args.messages, "rate_asked": args.rate, "resent": ok, "seconds": round(took, 2),
              "rate_made": round(ok / took, 1), "share_of_rate": round(ok / took / args.rate, 3)}
    print(f"redrive job: {ok:,} of {args.messages:,} resent at {args.rate:,}/s asked in {took:.1f} s: "
          f"{result['rate_made']:,}/s ({result['share_of_rate']:.0%} of the rate)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if ok == args.messages else 1


if __name__ == "__main__":
    sys.exit(main())
