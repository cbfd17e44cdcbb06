"""Append throughput and lookup latency of the mqlens store against a plain file write and SQLite.

    python -m bench.store_bench --messages 1000000 --batch 1000 --out docs/performance.md
    python -m bench.store_bench --messages 20000            # a quick run, prints the tables only

Every system gets the same generated messages (bench/workload.py) and runs in a fresh process
in a fresh directory under --workdir, deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from bench import report, systems
from bench.memory_warmup import warm_page_cache
from bench.workload import DEFAULT_KEY_WINDOW, DEFAULT_SEED, GROUP_SIZE

GB = 10**9
BYTES_PER_MESSAGE_ON_DISK = 1400  # a 1 KiB body plus header, keys and index; SQLite and mqlens are close
FIXED_DISK_BYTES = 2 * 1024**3  # a 1 GiB commit log segment and the 420 MB index file, allocated as written
NDJSON_BYTES_PER_MESSAGE = 1600  # the load systems' input file, beside the store they write


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.store_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000, help="messages per system (default 1,000,000)")
    ap.add_argument("--batch", type=int, default=1000,
                    help="messages per put_many call and rows per SQLite transaction (default 1000)")
    ap.add_argument("--lookups", type=int, default=20_000, help="timed lookups per method (default 20,000)")
    ap.add_argument("--warmup", type=int, default=2_000, help="untimed lookups per method first (default 2,000)")
    ap.add_argument("--single-messages", type=int, default=50_000,
                    help="messages appended with one put per call (default 50,000, at most --messages)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat every system; report medians (default 1)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--key-window", type=int, default=DEFAULT_KEY_WINDOW,
                    help="the 10 messages sharing a key are scattered within a window of this many messages; "
                         f"0 scatters them over the whole log (default {DEFAULT_KEY_WINDOW})")
    ap.add_argument("--workdir", help="directory for the temporary stores (default: the system temp dir)")
    ap.add_argument("--min-free-gb", type=float, default=10.0,
                    help="refuse to run with less free disk than this (default 10)")
    ap.add_argument("--out", type=Path, help="write the results section into this markdown file")
    ap.add_argument("--json", type=Path, help="also write the raw results as JSON here")
    args = ap.parse_args(argv)
    if args.messages <= 0 or args.messages % GROUP_SIZE:
        ap.error(f"--messages must be a positive multiple of {GROUP_SIZE}")
    if args.key_window < 0 or args.key_window % GROUP_SIZE:
        ap.error(f"--key-window must be 0 or a positive multiple of {GROUP_SIZE}")
    for name in ("batch", "lookups", "warmup", "single_messages", "rounds"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    return args


def command_line() -> str:
    argv = list(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    try:
        rel = os.path.relpath(argv[0])
        if not rel.startswith(".."):
            argv[0] = rel
    except ValueError:
        pass
    return shlex.join(argv)


def check_disk(base: Path, args: argparse.Namespace) -> None:
    free = shutil.disk_usage(base).free
    # Systems run one at a time and each deletes its directory, so the largest one counts.
    need = max(args.min_free_gb * GB,
               args.messages * (BYTES_PER_MESSAGE_ON_DISK * 1.5 + NDJSON_BYTES_PER_MESSAGE) + FIXED_DISK_BYTES)
    if free < need:
        sys.exit(f"store_bench: only {free / GB:.1f} GB free under {base}; this run needs at least "
                 f"{need / GB:.1f} GB. Free some space or pass --workdir on a larger disk.")


def in_fresh_process(fn, *args) -> dict[str, Any]:
    """Run `fn(*args)` in a new interpreter (so its memory figures are its own) and return its result."""
    ctx = get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=systems.child_main, args=(send, fn, args), name=f"bench-{fn.__name__}")
    proc.start()
    send.close()
    try:
        try:
            reply = receive.recv()
        except EOFError:
            proc.join()
            raise RuntimeError(f"{fn.__name__} died (exit code {proc.exitcode})") from None
        proc.join()
    finally:
        if proc.is_alive():  # interrupted: do not leave it writing into the directory we delete
            proc.terminate()
            proc.join()
        receive.close()
    if reply[0] == "ok":
        return reply[1]
    _, what, trace, is_check = reply
    if is_check:
        raise systems.CheckError(f"{fn.__name__}: {what}")
    raise RuntimeError(f"{fn.__name__} failed in its process:\n{trace}")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


WARMUP_BYTES_PER_MESSAGE = 1600  # about a record plus its consume queue unit and index entries


def run_round(params: systems.Params, n: int, rounds: int) -> dict[str, dict[str, Any]]:
    tag = f"round {n}/{rounds}: " if rounds > 1 else ""
    out: dict[str, dict[str, Any]] = {}

    def warm(messages: int) -> float:
        return warm_page_cache(Path(params.workdir), messages * WARMUP_BYTES_PER_MESSAGE)

    warmups = {}
    warmups["mqlens"] = warm(params.messages)
    log(f"{tag}mqlens: put_many {params.messages:,} messages, then lookups ...")
    out["mqlens"] = r = in_fresh_process(systems.run_mqlens, params)
    log(f"  {r['append']['msgs_per_s']:,.0f} msg/s; p99 " +
        ", ".join(f"{k} {v['p99_us']:.1f} µs" for k, v in r["lookups"].items()))
    warmups["file"] = warm(params.messages)
    log(f"{tag}file: writing the same {r['append']['bytes']:,} bytes ...")
    out["file"] = r = in_fresh_process(systems.run_file, params, r["append"]["bytes"])
    log(f"  {r['append']['msgs_per_s']:,.0f} msg/s, {r['append']['mb_per_s']:,.0f} MB/s")
    warmups["sqlite"] = warm(params.messages)
    log(f"{tag}sqlite: inserting {params.messages:,} rows, then lookups ...")
    out["sqlite"] = r = in_fresh_process(systems.run_sqlite, params)
    log(f"  {r['append']['msgs_per_s']:,.0f} rows/s; p99 " +
        ", ".join(f"{k} {v['p99_us']:.1f} µs" for k, v in r["lookups"].items()))
    single = min(params.single_messages, params.messages)
    load = params.messages
    for name, run, count, what, extra in (
        ("mqlens-single", systems.run_mqlens_single, single, "mqlens: put one by one", ""),
        ("mqlens-threads", systems.run_mqlens_threads, single, "mqlens: put one by one from 4 threads", ""),
        ("mqlens-sync64", systems.run_mqlens_sync_in_flight, single,
         "mqlens: sync flush, 64 puts in flight through the put batcher", "syncs_per_message"),
        ("mqlens-load", systems.run_mqlens_load, load, "mqlens store load from NDJSON", ""),
        ("sqlite-load", systems.run_sqlite_load, load, "sqlite: a plain script loading the same NDJSON", ""),
        ("sqlite-single", systems.run_sqlite_single, single, "sqlite: one row per transaction", ""),
    ):
        warmups[name] = warm(count)
        log(f"{tag}{what}, {count:,} messages ...")
        out[name] = r = in_fresh_process(run, params)
        log(f"  {r['append']['msgs_per_s']:,.0f} msg/s"
            + (f", {r['append'][extra]:.3f} fsyncs per message" if extra else ""))
    for name, rate in warmups.items():
        out[name]["warmup_write_mb_per_s"] = rate
    return out


def median_of(values: list[Any]) -> Any:
    """Medians of numbers, recursively through dicts; anything else is taken from the first round."""
    first = values[0]
    if isinstance(first, dict):
        return {k: median_of([v[k] for v in values]) for k in first}
    if isinstance(first, int | float) and not isinstance(first, bool):
        return statistics.median(values)
    return first


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)  # so that the temporary stores are deleted on `kill` too


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    base = Path(args.workdir) if args.workdir else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    check_disk(base, args)
    started = time.monotonic()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    run_dir = Path(tempfile.mkdtemp(prefix="mqlens-bench-", dir=base))
    try:
        params = systems.Params(
            messages=args.messages, batch=args.batch, seed=args.seed, lookups=args.lookups,
            warmup=args.warmup, single_messages=args.single_messages, workdir=str(run_dir),
            key_window=args.key_window,
        )
        per_round = [run_round(params, n + 1, args.rounds) for n in range(args.rounds)]
    except systems.CheckError as exc:
        log(f"store_bench: a result check failed, nothing was reported: {exc}")
        return 1
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    prints = {r[k]["workload_fingerprint"] for r in per_round for k in r}
    if len(prints) != 1:
        sys.exit(f"store_bench: the systems did not get the same data (fingerprints {sorted(prints)})")
    results = {
        "command": command_line(),
        "date": date,
        "elapsed_s": time.monotonic() - started,
        "machine": report.machine_facts(),
        "params": {"messages": args.messages, "batch": args.batch, "lookups": args.lookups,
                   "warmup": args.warmup, "single_messages": args.single_messages, "rounds": args.rounds,
                   "seed": args.seed, "key_window": args.key_window},
        "fingerprint": prints.pop(),
        "systems": {k: median_of([r[k] for r in per_round]) for k in per_round[0]},
        "rounds": per_round,
    }
    report.publish(report.render(results), args.out)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
