"""bench.process_cpu against real processes that burn a known amount of CPU: a child of this
test, and that child's own children, some of which exit between two samples."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from bench.process_cpu import TreeCpu, cpu_seconds, read_times

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A process driven by lines on stdin, answering each with "ok" once done: it burns CPU, names
# itself, starts a child of the same kind, passes a line on to that child, or waits for it to exit.
WORKER = textwrap.dedent("""
    import subprocess, sys, time
    child = None
    for line in sys.stdin:
        word, *rest = line.split(maxsplit=1)
        if word == "burn":
            end = time.process_time() + float(rest[0])
            while time.process_time() < end:
                pass
        elif word == "name":
            with open("/proc/self/comm", "w") as comm:
                comm.write(rest[0].rstrip("\\n"))
        elif word == "spawn":
            child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[1]], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        elif word == "child":
            child.stdin.write(rest[0])
            child.stdin.flush()
            child.stdout.readline()
        elif word == "reap":
            child.stdin.close()
            child.wait()
            child = None
        print("ok", flush=True)
""")
TICK = 0.02  # two clock ticks of rounding either way
STARTUP = 0.3  # bound on the CPU a fresh interpreter spends before its first command


class Worker:
    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", WORKER, WORKER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def do(self, *words: str) -> None:
        self.process.stdin.write(" ".join(words) + "\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline() == "ok\n"

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture
def worker():
    started = Worker()
    yield started
    started.close()


def burn_here(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def between(meter: TreeCpu, *steps) -> dict[str, float]:
    before = meter.sample()
    for step in steps:
        step()
    return meter.seconds_between(before, meter.sample())


def test_each_generation_counts_in_its_role_and_the_root_not_at_all(worker):
    worker.do("spawn")
    worker.do("child", "burn", "0.01")  # the grandchild's start-up done before the first sample
    meter = TreeCpu(("children", "grandchildren"))
    cpu = between(meter, lambda: worker.do("burn", "0.2"), lambda: worker.do("child", "burn", "0.4"),
                  lambda: burn_here(0.3))
    assert 0.2 - TICK <= cpu["children"] <= 0.2 + 0.1
    assert 0.4 - TICK <= cpu["grandchildren"] <= 0.4 + 0.1
    worker.do("reap")


def test_generations_below_the_last_role_count_in_it(worker):
    worker.do("spawn")
    worker.do("child", "burn", "0.01")
    cpu = between(TreeCpu(("everyone",)), lambda: worker.do("burn", "0.1"), lambda: worker.do("child", "burn", "0.3"))
    assert 0.4 - TICK <= cpu["everyone"] <= 0.4 + 0.1
    worker.do("reap")


def test_a_process_started_after_the_first_sample_counts_from_zero():
    meter = TreeCpu(("children",))
    started = []

    def start_and_burn() -> None:
        started.append(Worker())
        started[0].do("burn", "0.3")

    cpu = between(meter, start_and_burn)
    started[0].close()
    assert 0.3 - TICK <= cpu["children"] <= 0.3 + STARTUP


def test_a_child_started_and_reaped_between_samples_is_not_lost(worker):
    meter = TreeCpu(("children", "grandchildren"))
    cpu = between(meter, lambda: worker.do("spawn"), lambda: worker.do("child", "burn", "0.3"),
                  lambda: worker.do("reap"))
    assert 0.3 - TICK <= cpu["grandchildren"] <= 0.3 + STARTUP
    assert cpu["children"] <= 0.1


def test_a_child_that_exits_counts_only_its_time_since_the_first_sample(worker):
    worker.do("spawn")
    worker.do("child", "burn", "0.4")  # before the first sample: not to be counted
    meter = TreeCpu(("children", "grandchildren"))
    cpu = between(meter, lambda: worker.do("child", "burn", "0.2"), lambda: worker.do("reap"))
    assert 0.2 - TICK <= cpu["grandchildren"] <= 0.2 + 0.1


def test_successive_intervals_add_up_to_the_whole(worker):
    meter = TreeCpu(("children", "grandchildren"))
    first = meter.sample()
    worker.do("spawn")
    worker.do("child", "burn", "0.2")
    middle = meter.sample()
    worker.do("child", "burn", "0.1")
    worker.do("reap")
    last = meter.sample()
    parts = [meter.seconds_between(first, middle), meter.seconds_between(middle, last)]
    whole = meter.seconds_between(first, last)
    for role in meter.roles:
        assert sum(part[role] for part in parts) == pytest.approx(whole[role], abs=TICK)
    assert 0.1 - TICK <= parts[1]["grandchildren"] <= 0.1 + 0.1


def test_a_name_with_spaces_and_parentheses_does_not_shift_the_fields(worker):
    worker.do("name", "x) 1 2 (y")
    times = read_times(worker.process.pid)
    assert times is not None
    assert (times.pid, times.parent) == (worker.process.pid, os.getpid())


def test_one_process_cpu_seconds_grow_by_what_it_burns(worker):
    before = cpu_seconds(worker.process.pid)
    worker.do("burn", "0.2")
    assert 0.2 - TICK <= cpu_seconds(worker.process.pid) - before <= 0.2 + 0.1


def test_a_gone_process_or_root_reads_as_nothing():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert read_times(gone.pid) is None
    with pytest.raises(ProcessLookupError):
        cpu_seconds(gone.pid)
    meter = TreeCpu(("children",), root=gone.pid)
    assert meter.seconds_between(meter.sample(), meter.sample()) == {"children": 0.0}


def test_roles_are_required():
    with pytest.raises(ValueError):
        TreeCpu(())
