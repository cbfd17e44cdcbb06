"""The store and scheduler benchmarks with their defaults: `python -m bench.run_all` (what
`make bench` runs).

Runs the store benchmark at 1,000,000 messages, three rounds (medians reported), then the
scheduler lateness benchmark (100,000 pending messages, about a minute), then a first load of
200,000 messages into a fresh store beside RocketMQ's store (bench.fresh_load: needs Java and the
RocketMQ fixture's jars), and writes their sections of docs/performance.md (raw results in
bench/results/, which git ignores). Extra arguments go to bench.store_bench. The REST and
console page benchmarks run on their own (`python -m bench.rest_throughput`,
`python -m bench.page_latency`).
"""

from __future__ import annotations

import sys

from bench import fresh_load, scheduler_lateness, store_bench
from bench.report import REPO


def main(argv: list[str] | None = None) -> int:
    extra = sys.argv[1:] if argv is None else argv
    status = store_bench.main([
        "--messages", "1000000",
        "--batch", "1000",
        "--rounds", "3",
        "--out", str(REPO / "docs" / "performance.md"),
        "--json", str(REPO / "bench" / "results" / "store_bench.json"),
        *extra,
    ])
    status = scheduler_lateness.main(["--out", str(REPO / "docs" / "performance.md")]) or status
    return fresh_load.main(["--out", str(REPO / "docs" / "performance.md")]) or status


if __name__ == "__main__":
    sys.exit(main())
