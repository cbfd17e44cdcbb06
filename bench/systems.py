"""The systems under test. Each `run_*` runs in its own fresh process (see store_bench) so that its
peak memory is its own, regenerates the workload from the seed, and returns plain data.

Timed regions cover the calls into the system under test only; building the messages (NewMessage
objects, row tuples, header bytes) from the generator happens outside them, the same for all.
"""

from __future__ import annotations

import gc
import math
import os
import resource
import shutil
import sqlite3
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.sqlite_schema import DB_NAME, SQLITE_INSERT, sqlite_open
from bench.workload import GROUP_SIZE, TOPIC, Fields, Workload, new_message

WARMUP_SALT = 1
SAMPLE_SALT = 2
GROUP_WARMUP_SALT = 3
GROUP_SAMPLE_SALT = 4
KEY_QUERY_MAX = 64  # enough for all GROUP_SIZE hits


@dataclass(frozen=True)
class Params:
    messages: int
    batch: int
    seed: int
    lookups: int
    warmup: int
    single_messages: int
    workdir: str
    key_window: int


def child_main(conn, fn: Callable[..., dict[str, Any]], args: tuple) -> None:
    """Entry point of a fresh benchmark process: run `fn` and send back its result or its error."""
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as exc:  # report everything, including CheckError, to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc(), isinstance(exc, CheckError)))
    finally:
        conn.close()


# -- measurement helpers -------------------------------------------------------------------------
def percentile(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        raise ValueError("no values")
    rank = min(len(sorted_values), max(1, math.ceil(q * len(sorted_values))))
    return sorted_values[rank - 1]


def latency_summary(ns: list[int]) -> dict[str, float]:
    s = sorted(ns)
    return {
        "count": len(s),
        "p50_us": percentile(s, 0.50) / 1000,
        "p90_us": percentile(s, 0.90) / 1000,
        "p99_us": percentile(s, 0.99) / 1000,
        "max_us": s[-1] / 1000,
        "mean_us": sum(s) / len(s) / 1000,
    }


def lag_summary(lags: list[int], bytes_per_s: float) -> dict[str, float]:
    """Dispatch lag samples (bytes appended but not yet projected): percentiles in bytes, and
    in milliseconds of appending at the measured rate."""
    ordered = sorted(lags)
    out: dict[str, float] = {"samples": len(ordered)}
    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        value = percentile(ordered, q) if ordered else 0
        out[f"{name}_bytes"] = value
        out[f"{name}_ms"] = value / bytes_per_s * 1000 if bytes_per_s else 0.0
    return out


def time_lookups(items: list, warmup: list, call: Callable[[Any], Any],
                 check: Callable[[Any, Any], None]) -> dict[str, float]:
    """Warm up, then time each call on its own; results are checked outside the timed window."""
    for item in warmup:
        check(item, call(item))
    clock = time.perf_counter_ns
    ns = []
    for item in items:
        t0 = clock()
        result = call(item)
        t1 = clock()
        ns.append(t1 - t0)
        check(item, result)
    return latency_summary(ns)


def memory_facts() -> dict[str, int]:
    """Peak RSS of this process and its current anonymous/file-backed split, in KiB."""
    facts = {"peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("VmHWM", "RssAnon", "RssFile", "RssShmem"):
                    facts[name] = int(value.split()[0])
    except OSError:
        pass
    return facts


def start_memory() -> dict[str, Any]:
    """After the workload is built: collect garbage, note the RSS the generator leaves behind and its
    peak so far, then reset the kernel's peak-RSS mark (VmHWM, which getrusage's ru_maxrss follows)
    so that the peak read at the end covers the run of the system only. Sizes in KiB."""
    gc.collect()
    facts: dict[str, Any] = {"generator_rss_kib": rss_now_kib(),
                             "generator_peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        facts["peak_reset"] = True
    except OSError:
        facts["peak_reset"] = False
    return facts


def rss_now_kib() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except OSError:
        return 0


def disk_usage(path: Path) -> dict[str, int]:
    """Apparent size and allocated bytes of everything under `path` (files may be sparse)."""
    apparent = allocated = 0
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if p.is_file():
            st = p.stat()
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return {"apparent_bytes": apparent, "allocated_bytes": allocated}


class CheckError(AssertionError):
    pass


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise CheckError(what)


def _fresh_dir(params: Params, name: str) -> Path:
    d = Path(params.workdir) / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def _finish(out: dict[str, Any], wl: Workload, mem_start: dict[str, Any], root: Path) -> dict[str, Any]:
    """Complete a system's result with what every system reports, and delete its directory."""
    out.update(workload_fingerprint=wl.fingerprint(), memory_start=mem_start, pid=os.getpid(), memory=memory_facts())
    shutil.rmtree(root, ignore_errors=True)
    return out


def _lookup_targets(wl: Workload, params: Params) -> tuple[list[int], list[int], list[int], list[int]]:
    """Warm-up and timed message indices, then warm-up and timed key groups: the same in every system."""
    return (wl.sample_indices(params.warmup, WARMUP_SALT), wl.sample_indices(params.lookups, SAMPLE_SALT),
            wl.sample_groups(params.warmup, GROUP_WARMUP_SALT), wl.sample_groups(params.lookups, GROUP_SAMPLE_SALT))


# -- mqlens ----------------------------------------------------------------------------------------
def _check_dispatched(store) -> None:
    """Dispatch runs behind the appends: the timed region ends once it has projected everything."""
    store.catch_up()
    expect(store.dispatch_lag_bytes() == 0, "dispatch did not complete")


def _single_put_store(params: Params, name: str, flush: str) -> tuple:
    """A single-put system's start: how many messages, the workload, memory at start, a fresh
    directory and a store in it without trace; (n, workload, memory, root, store)."""
    from store.message_store import MessageStore, StoreConfig

    n = min(params.single_messages, params.messages)
    wl = Workload(params.messages, params.seed, params.key_window)
    mem_start = start_memory()
    root = _fresh_dir(params, name)
    return n, wl, mem_start, root, MessageStore.open(root, StoreConfig(flush=flush, trace=False))


def _settle(store, n: int) -> tuple[float, int]:
    """After the timed puts: dispatch and flush (timed), check all `n` messages are in the queues;
    (seconds, commit syncs made)."""
    t0 = time.perf_counter()
    _check_dispatched(store)
    store.flush()
    flush_s = time.perf_counter() - t0
    expect(sum(high for _, _, high in store.topics()[TOPIC]) == n, "messages missing")
    return flush_s, store.commit_syncs


def _check_message(wl: Workload, i: int, msg) -> None:
    expect(msg.topic == TOPIC, f"message {i}: topic {msg.topic!r}")
    expect(msg.unique_key == wl.unique_key(i), f"message {i}: unique key {msg.unique_key!r}")
    expect(msg.body == wl.body(i), f"message {i}: body differs")


def run_mqlens(params: Params) -> dict[str, Any]:
    from store.message_store import MessageStore, StoreConfig

    wl = Workload(params.messages, params.seed, params.key_window)
    mem_start = start_memory()
    warm, sample, gwarm, gsample = _lookup_targets(wl, params)
    wanted = set(warm) | set(sample)
    offset_ids: dict[int, str] = {}
    root = _fresh_dir(params, "mqlens")
    store = MessageStore.open(root, StoreConfig(flush="async", trace=False))
    try:
        put_s = 0.0
        sizes: set[int] = set()
        total_bytes = 0
        lags: list[int] = []  # dispatch lag after each batch, untimed
        clock = time.perf_counter
        wall0 = clock()
        for fields in wl.batches(params.batch):
            msgs = [new_message(f) for f in fields]
            t0 = clock()
            results = store.put_many(msgs)
            put_s += clock() - t0
            lags.append(store.dispatch_lag_bytes())
            expect(len(results) == len(fields), "put_many returned fewer results")
            for f, r in zip(fields, results, strict=True):
                total_bytes += r.size
                sizes.add(r.size)
                if f.index in wanted:
                    expect((r.queue_id, r.queue_offset) == (f.queue_id, f.queue_offset),
                           f"message {f.index} was stored at queue {r.queue_id} offset {r.queue_offset}, "
                           f"expected queue {f.queue_id} offset {f.queue_offset} (message i of a fresh store "
                           f"goes to queue i % 4 at offset i // 4); refusing to time a store that misplaces "
                           f"messages")
                    offset_ids[f.index] = r.offset_msg_id
        t0 = clock()
        _check_dispatched(store)
        store.flush()
        flush_s = clock() - t0
        wall_s = clock() - wall0
        append = {
            "messages": params.messages,
            "batch": params.batch,
            "put_s": put_s,
            "flush_s": flush_s,
            "seconds": put_s + flush_s,
            "msgs_per_s": params.messages / (put_s + flush_s),
            "wall_s_with_generation": wall_s,
            "bytes": total_bytes,
            "mb_per_s": total_bytes / (put_s + flush_s) / 1e6,
            "record_sizes": sorted(sizes),
            "dispatch_lag": lag_summary(lags, total_bytes / (put_s + flush_s)),
        }

        def by_offset_id(i):
            return store.get_by_offset_id(offset_ids[i])

        def by_unique_key(i):
            return store.query_by_unique_key(TOPIC, wl.unique_key(i))

        def by_key(g):
            return store.query_by_key(TOPIC, wl.group_key(g), max_results=KEY_QUERY_MAX)

        def by_queue_offset(i):
            return store.get_by_queue_offset(TOPIC, i % 4, i // 4)

        def check_one(i, msg):
            _check_message(wl, i, msg)

        def check_unique(i, res):
            expect(len(res.messages) == 1, f"unique key of {i}: {len(res.messages)} hits")
            _check_message(wl, i, res.messages[0])

        def check_key(g, res):
            got = sorted(wl.group_members(g))
            found = [m.unique_key for m in res.messages]
            expect(len(found) == GROUP_SIZE, f"key group {g}: {len(found)} hits")
            expect(sorted(found) == sorted(wl.unique_key(i) for i in got), f"key group {g}: wrong hits")

        lookups = {
            "offset_id": time_lookups(sample, warm, by_offset_id, check_one),
            "unique_key": time_lookups(sample, warm, by_unique_key, check_unique),
            "key": time_lookups(gsample, gwarm, by_key, check_key),
            "queue_offset": time_lookups(sample, warm, by_queue_offset, check_one),
        }
    finally:
        store.close()
    return _finish({"system": "mqlens", "append": append, "lookups": lookups, "disk": disk_usage(root)},
                   wl, mem_start, root)


def run_mqlens_single(params: Params) -> dict[str, Any]:
    """One `put` per message on the first `single_messages` messages, in a store of its own."""

    n, wl, mem_start, root, store = _single_put_store(params, "mqlens-single", "async")
    try:
        msgs = [new_message(f) for fields in wl.batches(params.batch, stop=n) for f in fields]
        lags: list[int] = []  # dispatch lag after every `batch` puts
        clock = time.perf_counter
        put = store.put
        lag = store.dispatch_lag_bytes
        step = params.batch
        t0 = clock()
        for first in range(0, n, step):
            for m in msgs[first:first + step]:
                put(m)
            lags.append(lag())
        put_s = clock() - t0
        t0 = clock()
        _check_dispatched(store)
        store.flush()
        flush_s = clock() - t0
        written = store.commitlog.end
    finally:
        store.close()
    return _finish({
        "system": "mqlens-single",
        "append": {"messages": n, "batch": 1, "put_s": put_s, "flush_s": flush_s, "seconds": put_s + flush_s,
                   "msgs_per_s": n / (put_s + flush_s),
                   "dispatch_lag": lag_summary(lags, written / (put_s + flush_s))},
    }, wl, mem_start, root)


def run_mqlens_threads(params: Params, threads: int = 4, flush: str = "async") -> dict[str, Any]:
    """`put` of one message per call from `threads` threads at once, on the first
    `single_messages` messages (message i from thread i % threads), in a store of its own."""
    import threading

    name = f"mqlens-threads-{threads}-{flush}"
    n, wl, mem_start, root, store = _single_put_store(params, name, flush)
    try:
        msgs = [new_message(f) for fields in wl.batches(params.batch, stop=n) for f in fields]
        shares = [msgs[t::threads] for t in range(threads)]
        start = threading.Barrier(threads + 1)
        failures: list[BaseException] = []

        def producer(share) -> None:
            put = store.put
            start.wait()
            try:
                for m in share:
                    put(m)
            except BaseException as exc:
                failures.append(exc)

        workers = [threading.Thread(target=producer, args=(share,)) for share in shares]
        for w in workers:
            w.start()
        clock = time.perf_counter
        start.wait()
        t0 = clock()
        for w in workers:
            w.join()
        put_s = clock() - t0
        expect(not failures, f"a producer thread failed: {failures[:1]}")
        flush_s, syncs = _settle(store, n)
    finally:
        store.close()
    return _finish({
        "system": name,
        "append": {"messages": n, "batch": 1, "threads": threads, "flush": flush, "put_s": put_s,
                   "flush_s": flush_s, "seconds": put_s + flush_s, "msgs_per_s": n / (put_s + flush_s),
                   "syncs_per_message": syncs / n},
    }, wl, mem_start, root)


IN_FLIGHT = 64


def run_mqlens_sync_in_flight(params: Params) -> dict[str, Any]:
    """Sync flush, IN_FLIGHT single puts in flight as the server makes them: producers on one
    event loop, each awaiting its put through the server's put batcher (the puts of one loop turn
    appended together, answered when the group commit has synced past them)."""
    import asyncio

    from app.services.put_batcher import PutBatcher

    n, wl, mem_start, root, store = _single_put_store(params, "mqlens-sync64", "sync")
    try:
        msgs = [new_message(f) for fields in wl.batches(params.batch, stop=n) for f in fields]
        batcher = PutBatcher(store)

        async def producer(share) -> None:
            for m in share:
                await batcher.put([m])

        async def all_producers() -> None:
            await asyncio.gather(*(producer(msgs[p::IN_FLIGHT]) for p in range(IN_FLIGHT)))

        clock = time.perf_counter
        t0 = clock()
        asyncio.run(all_producers())
        put_s = clock() - t0
        flush_s, syncs = _settle(store, n)
    finally:
        store.close()
    return _finish({
        "system": "mqlens-sync64",
        "append": {"messages": n, "batch": 1, "in_flight": IN_FLIGHT, "flush": "sync", "put_s": put_s,
                   "flush_s": flush_s, "seconds": put_s + flush_s, "msgs_per_s": n / (put_s + flush_s),
                   "syncs_per_message": syncs / n, "appends_per_message": batcher.appends / n},
    }, wl, mem_start, root)


def _write_load_input(wl: Workload, params: Params, count: int, path: Path) -> None:
    """The first `count` messages as NDJSON lines, as `mqlens store load` reads them, synced:
    the kernel's write-back of the file would otherwise run during the timed command."""
    import base64
    import json

    with open(path, "w") as out:
        for fields in wl.batches(params.batch, stop=count):
            out.writelines(json.dumps({
                "topic": TOPIC, "body_base64": base64.b64encode(f.body).decode(), "tags": f.tags,
                "keys": [f.key, f.shared_key], "queue_id": f.queue_id, "unique_key": f.unique_key,
            }) + "\n" for f in fields)
        out.flush()
        os.fsync(out.fileno())


def _run_command(args: list[str]) -> tuple[float, Any]:
    """Run a command to its exit with its output read: the seconds it took, and how it ended
    (its output decoded after the clock stops: the decoding is this harness's work)."""
    import subprocess

    t0 = time.perf_counter()
    done = subprocess.run(args, capture_output=True)
    seconds = time.perf_counter() - t0
    done.stdout, done.stderr = done.stdout.decode(), done.stderr.decode(errors="replace")
    return seconds, done


def _load_input(params: Params, name: str) -> tuple:
    """A load system's start: the NDJSON file of every message of the run (the messages the other
    systems append) in a fresh directory; (n, workload, memory at start, root, file)."""
    n = params.messages
    wl = Workload(params.messages, params.seed, params.key_window)
    mem_start = start_memory()
    root = _fresh_dir(params, name)
    source = root / "messages.ndjson"
    _write_load_input(wl, params, n, source)
    return n, wl, mem_start, root, source


def run_mqlens_load(params: Params) -> dict[str, Any]:
    """`mqlens store load` of the run's messages from an NDJSON file (written before the clock
    starts), timed as a command: from its start to its exit, results read."""
    import json
    import sys

    n, wl, mem_start, root, source = _load_input(params, "mqlens-load")
    seconds, done = _run_command([sys.executable, "-m", "app.cli", "store", "load", "--store", str(root / "store"),
                                  str(source)])
    expect(done.returncode == 0, f"store load failed: {done.stderr[-500:]}")
    lines = done.stdout.splitlines()
    expect(len(lines) == n, f"store load printed {len(lines)} result lines for {n} messages")
    last = json.loads(lines[-1])
    expect(last["line"] == n and last["unique_key"] == wl.unique_key(n - 1), "the last result is not the last line")
    return _finish({
        "system": "mqlens-load",
        "append": {"messages": n, "batch": 0, "seconds": seconds, "msgs_per_s": n / seconds,
                   "input_bytes": source.stat().st_size},
    }, wl, mem_start, root)


def run_sqlite_load(params: Params) -> dict[str, Any]:
    """The SQLite baseline of store load: the plain script bench/sqlite_load.py on the same NDJSON
    file, its rows in transactions of `batch`, timed the same way (the command from its start to
    its exit)."""
    import sys

    n, wl, mem_start, root, source = _load_input(params, "sqlite-load")
    seconds, done = _run_command([sys.executable, "-m", "bench.sqlite_load", str(root), str(source),
                                  str(params.batch)])
    expect(done.returncode == 0, f"the SQLite load failed: {done.stderr[-500:]}")
    conn = sqlite3.connect(root / DB_NAME)
    try:
        count, last = conn.execute("SELECT count(*), max(id) FROM msg").fetchone()
        last_key = conn.execute("SELECT uniq_key FROM msg WHERE id = ?", (last,)).fetchone()[0]
    finally:
        conn.close()
    expect(count == n, f"the SQLite load stored {count} rows for {n} messages")
    expect(last_key == wl.unique_key(n - 1), "the last row is not the last line")
    return _finish({
        "system": "sqlite-load",
        "append": {"messages": n, "batch": params.batch, "seconds": seconds, "msgs_per_s": n / seconds,
                   "input_bytes": source.stat().st_size},
    }, wl, mem_start, root)


def run_sqlite_single(params: Params) -> dict[str, Any]:
    """One INSERT per transaction (autocommit), the first `single_messages` messages."""
    n = min(params.single_messages, params.messages)
    wl = Workload(params.messages, params.seed, params.key_window)
    mem_start = start_memory()
    root = _fresh_dir(params, "sqlite-single")
    conn = _sqlite_open(root)
    try:
        clock = time.perf_counter
        insert_s = 0.0
        for fields in wl.batches(params.batch, stop=n):
            rows = _sqlite_rows(fields)
            execute = conn.execute
            t0 = clock()
            for row in rows:
                execute(SQLITE_INSERT, row)
            insert_s += clock() - t0
        t0 = clock()
        conn.execute("PRAGMA wal_checkpoint(FULL)")
        flush_s = clock() - t0
        expect(conn.execute("SELECT count(*) FROM msg").fetchone()[0] == n, "rows missing")
    finally:
        conn.close()
    seconds = insert_s + flush_s
    return _finish({
        "system": "sqlite-single",
        "append": {"messages": n, "batch": 1, "insert_s": insert_s, "flush_s": flush_s, "seconds": seconds,
                   "msgs_per_s": n / seconds},
    }, wl, mem_start, root)


# -- plain buffered file write -------------------------------------------------------------------
def _header(f: Fields, length: int) -> bytes:
    """A header of exactly `length` bytes: fixed fields, then the properties text, zero-padded."""
    fixed = (length + len(f.body)).to_bytes(4, "big") + f.queue_id.to_bytes(4, "big") + \
        f.queue_offset.to_bytes(8, "big")
    props = f"TAGS\x01{f.tags}\x02KEYS\x01{f.key} {f.shared_key}\x02UNIQ_KEY\x01{f.unique_key}\x02".encode()
    head = fixed + props
    return head[:length] if len(head) >= length else head + bytes(length - len(head))


def run_file(params: Params, total_bytes: int) -> dict[str, Any]:
    """Write the same number of bytes as mqlens's records: per message a header and the body."""
    wl = Workload(params.messages, params.seed, params.key_window)
    mem_start = start_memory()
    root = _fresh_dir(params, "file")
    extra = total_bytes - params.messages * len(wl.body(0))
    expect(extra >= 0, "fewer bytes than the bodies alone")
    base, remainder = divmod(extra, params.messages)
    path = root / "data.bin"
    clock = time.perf_counter
    write_s = 0.0
    written = 0
    with open(path, "wb", buffering=8 << 20) as out:
        write = out.write
        for fields in wl.batches(params.batch):
            pairs = [(_header(f, base + (1 if f.index < remainder else 0)), f.body) for f in fields]
            t0 = clock()
            for head, body in pairs:
                write(head)
                write(body)
            write_s += clock() - t0
            written += sum(len(h) + len(b) for h, b in pairs)
        t0 = clock()
        out.flush()
        os.fsync(out.fileno())
        flush_s = clock() - t0
    expect(written == total_bytes, f"wrote {written} bytes, wanted {total_bytes}")
    seconds = write_s + flush_s
    return _finish({
        "system": "file",
        "append": {"messages": params.messages, "write_s": write_s, "flush_s": flush_s, "seconds": seconds,
                   "msgs_per_s": params.messages / seconds, "bytes": written, "mb_per_s": written / seconds / 1e6},
        "disk": disk_usage(root),
    }, wl, mem_start, root)


# -- SQLite ---------------------------------------------------------------------------------------
_COLUMNS = "id, topic, queue_id, queue_offset, key1, key2, uniq_key, tags, body, store_ts"
SQLITE_BY_ROWID = f"SELECT {_COLUMNS} FROM msg WHERE id = ?"
SQLITE_BY_UNIQ = f"SELECT {_COLUMNS} FROM msg WHERE uniq_key = ? AND topic = ?"
# A key may sit in either column. Written as a UNION so that each half searches its own index
# (SQLite plans `topic = ? AND (key1 = ? OR key2 = ?)` as a scan of the whole topic).
SQLITE_BY_KEY = (f"SELECT {_COLUMNS} FROM msg WHERE topic = ?1 AND key1 = ?2 UNION ALL "
                 f"SELECT {_COLUMNS} FROM msg WHERE topic = ?1 AND key2 = ?2 AND key1 IS NOT ?2")


def _sqlite_open(root: Path) -> sqlite3.Connection:
    """The baseline database: WAL, synchronous=NORMAL, the schema with its three indexes."""
    conn, mode = sqlite_open(root)
    expect(mode == "wal", f"journal mode {mode}")
    return conn


def _sqlite_rows(fields: list[Fields]) -> list[tuple]:
    now = time.time_ns() // 1_000_000
    return [(TOPIC, f.queue_id, f.queue_offset, f.key, f.shared_key, f.unique_key, f.tags, f.body, now)
            for f in fields]


def run_sqlite(params: Params) -> dict[str, Any]:
    wl = Workload(params.messages, params.seed, params.key_window)
    mem_start = start_memory()
    root = _fresh_dir(params, "sqlite")
    conn = _sqlite_open(root)
    try:
        clock = time.perf_counter
        insert_s = 0.0
        wall0 = clock()
        for fields in wl.batches(params.batch):
            rows = _sqlite_rows(fields)
            t0 = clock()
            conn.execute("BEGIN")
            conn.executemany(SQLITE_INSERT, rows)
            conn.execute("COMMIT")
            insert_s += clock() - t0
        t0 = clock()
        conn.execute("PRAGMA wal_checkpoint(FULL)")
        flush_s = clock() - t0
        wall_s = clock() - wall0
        seconds = insert_s + flush_s
        append = {"messages": params.messages, "batch": params.batch, "insert_s": insert_s, "flush_s": flush_s,
                  "seconds": seconds, "msgs_per_s": params.messages / seconds, "wall_s_with_generation": wall_s}
        plans = {name: " | ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args))
                 for name, sql, args in (("rowid", SQLITE_BY_ROWID, (1,)),
                                         ("unique_key", SQLITE_BY_UNIQ, ("x", TOPIC)),
                                         ("key", SQLITE_BY_KEY, (TOPIC, "x")))}
        for name, plan in plans.items():
            expect("SCAN" not in plan, f"SQLite would scan for the {name} lookup: {plan}")

        def by_rowid(i):
            return conn.execute(SQLITE_BY_ROWID, (i + 1,)).fetchone()

        def by_unique_key(i):
            return conn.execute(SQLITE_BY_UNIQ, (wl.unique_key(i), TOPIC)).fetchall()

        def by_key(g):
            return conn.execute(SQLITE_BY_KEY, (TOPIC, wl.group_key(g))).fetchall()

        def check_row(i, row):
            expect(row is not None, f"row {i + 1} missing")
            expect(row[6] == wl.unique_key(i) and row[8] == wl.body(i), f"row {i + 1} differs")

        def check_unique(i, rows):
            expect(len(rows) == 1, f"unique key of {i}: {len(rows)} rows")
            check_row(i, rows[0])

        def check_key(g, rows):
            want = sorted(wl.unique_key(i) for i in wl.group_members(g))
            expect(sorted(r[6] for r in rows) == want, f"key group {g}: wrong rows")

        warm, sample, gwarm, gsample = _lookup_targets(wl, params)
        lookups = {
            "rowid": time_lookups(sample, warm, by_rowid, check_row),
            "unique_key": time_lookups(sample, warm, by_unique_key, check_unique),
            "key": time_lookups(gsample, gwarm, by_key, check_key),
        }
    finally:
        conn.close()
    return _finish({"system": "sqlite", "sqlite_version": sqlite3.sqlite_version, "append": append,
                    "lookups": lookups, "query_plans": plans, "disk": disk_usage(root)}, wl, mem_start, root)
