"""One official RocketMQ 5 Python client process for bench.grpc_throughput: a producer that keeps
--inflight sends going (optionally at a --rate), or a SimpleConsumer that receives and acks, until
its share of the work is done; prints one JSON line of what it measured.

    python -m bench.grpc_client_worker produce ENDPOINT TOPIC COUNT [--inflight N] [--rate R]
    python -m bench.grpc_client_worker consume ENDPOINT TOPIC GROUP COUNT [--threads N]

Started with HOME pointing at a scratch folder (the client writes its log under ~/logs). Waits for
a line on stdin before starting, so that all workers start together."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

BODY = b"x" * 256
RECEIVE_BATCH = 32
INVISIBLE_S = 60


def produce(endpoint: str, topic: str, count: int, inflight: int, rate: float | None) -> dict:
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    slots = threading.Semaphore(inflight)
    latencies: list[float] = []
    errors = [0]
    done = threading.Event()
    finished = [0]
    lock = threading.Lock()
    _send_one(producer, topic)  # route and settings ready before the clock starts
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    sys.stdin.readline()
    started = time.perf_counter()

    def settled(future, at):
        latency = time.perf_counter() - at
        with lock:
            if future.exception() is None:
                latencies.append(latency)
            else:
                errors[0] += 1
            finished[0] += 1
            if finished[0] == count:
                done.set()
        slots.release()

    for n in range(count):
        if rate:
            wait = started + n / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        slots.acquire()
        msg = Message()
        msg.topic = topic
        msg.body = BODY
        at = time.perf_counter()
        producer.send_async(msg).add_done_callback(lambda f, at=at: settled(f, at))
    done.wait(600)
    seconds = time.perf_counter() - started
    producer.shutdown()
    return {"sent": len(latencies), "errors": errors[0], "seconds": seconds,
            "latencies_ms": [x * 1000 for x in latencies]}


def _send_one(producer: Producer, topic: str) -> None:
    msg = Message()
    msg.topic = topic
    msg.body = BODY
    producer.send(msg)


def consume(endpoint: str, topic: str, group: str, count: int, threads: int) -> dict:
    consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group, {topic: FilterExpression("*")},
                              await_duration=2)
    consumer.startup()
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    sys.stdin.readline()
    acked = [0]
    lock = threading.Lock()
    started = time.perf_counter()
    deadline = started + 300

    def work():
        idle = 0
        while time.perf_counter() < deadline:
            with lock:
                if acked[0] >= count:
                    return
            got = consumer.receive(RECEIVE_BATCH, INVISIBLE_S)
            if not got:
                idle += 1
                if idle >= 3:
                    return
                continue
            idle = 0
            for msg in got:
                consumer.ack(msg)
            with lock:
                acked[0] += len(got)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - started
    consumer.shutdown()
    return {"acked": acked[0], "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("produce")
    p.add_argument("endpoint")
    p.add_argument("topic")
    p.add_argument("count", type=int)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--rate", type=float, default=None)
    c = sub.add_parser("consume")
    c.add_argument("endpoint")
    c.add_argument("topic")
    c.add_argument("group")
    c.add_argument("count", type=int)
    c.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    if args.mode == "produce":
        result = produce(args.endpoint, args.topic, args.count, args.inflight, args.rate)
    else:
        result = consume(args.endpoint, args.topic, args.group, args.count, args.threads)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # the client leaves non-daemon threads behind


if __name__ == "__main__":
    main()
