"""RocketMQ 4.9.8's own store appending the benchmark's messages, as a baseline measured in the
same run: `bench/rocketmq/StoreAppend.java` on the jars of the RocketMQ fixture beside the project
(`../shared/rocketmq-4.9.8-cluster`, its Debian dependencies installed by `rmq-fixture deps`).

The messages go to Java in a plain binary file (big-endian: the count, then per message the topic,
queue id, tags, keys, unique key and body), written before the JVM starts; the JVM times its
appends from the first put until dispatch has caught up, in a fresh store directory."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

from bench.workload import TOPIC, Workload

SOURCE = Path(__file__).with_name("rocketmq") / "StoreAppend.java"
REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO.parent / "shared" / "rocketmq-4.9.8-cluster"
LOG_CONFIG = SOURCE.with_name("logback.xml")
JAVA_TIMEOUT_S = 300
# RocketMQ's runbroker.sh runs G1 with a fixed heap; the opens let its mapped files be unmapped on Java 17.
JVM_OPTIONS = ("-server", "-Xms1g", "-Xmx1g", "-XX:+UseG1GC",
               "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
               "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
               "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED")


class RocketMQUnavailable(RuntimeError):
    """Java, javac or the RocketMQ fixture's jars are missing: the baseline is skipped."""


def classpath(fixture: Path = FIXTURE) -> str:
    tool = fixture / "bin" / "rmq-fixture"
    if not tool.exists() or shutil.which("java") is None or shutil.which("javac") is None:
        raise RocketMQUnavailable(f"needs java, javac and {tool}")
    done = subprocess.run([str(tool), "classpath"], capture_output=True, text=True,
                          env={**os.environ, "RMQ_FIXTURE_NO_APT": "1"}, timeout=60)
    jars = done.stdout.strip().split(":")
    missing = [j for j in jars if j and not Path(j).exists()]
    if done.returncode != 0 or missing:
        raise RocketMQUnavailable(f"missing jars {missing[:3]} (install them with `{tool} deps`)")
    return done.stdout.strip()


def compile_harness(out_dir: Path, cp: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", "-nowarn", "-cp", cp, "-d", str(out_dir), str(SOURCE)], check=True,
                   capture_output=True, timeout=JAVA_TIMEOUT_S)


def _text(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">H", len(data)) + data


def write_messages(wl: Workload, count: int, batch: int, path: Path) -> None:
    """The first `count` messages of the workload in the harness's input format."""
    topic = _text(TOPIC)
    with open(path, "wb") as out:
        out.write(struct.pack(">i", count))
        for fields in wl.batches(batch, stop=count):
            out.writelines(topic + struct.pack(">i", f.queue_id) + _text(f.tags) + _text(f"{f.key} {f.shared_key}")
                           + _text(f.unique_key) + struct.pack(">i", len(f.body)) + f.body for f in fields)


def run(classes: Path, cp: str, messages: Path, store_dir: Path) -> dict:
    """One append run in a new JVM into `store_dir` (which must not exist); the harness's figures,
    and the command's wall time with the JVM's start and shutdown."""
    t0 = time.perf_counter()
    done = subprocess.run(["java", *JVM_OPTIONS, f"-Dlogback.configurationFile={LOG_CONFIG}",
                           f"-Duser.home={store_dir.parent}", "-cp", f"{classes}:{cp}", "StoreAppend", str(messages),
                           str(store_dir)], capture_output=True, text=True, timeout=JAVA_TIMEOUT_S)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"RocketMQ's store append failed: {done.stderr[-800:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = wall
    return result
