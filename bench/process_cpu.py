"""CPU seconds used by the processes below one process, by role, read from /proc (Linux).

A role goes by generation below the root: the first role to its children, the second to their
children, and the last role to every generation below that. The root itself is not counted.
Each sample walks /proc afresh, so a process started between two samples is counted from zero.
A process's own time (utime + stime) goes to its role; the time of children it has waited for
(cutime + cstime) goes to its children's role, so a process that exits between samples is not
lost: the part of its time an earlier sample had seen is taken back off, as its parent now
counts its whole life. A process that leaves the tree (its parent gone) is followed while it runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessTimes:
    """One process's line of /proc/<pid>/stat, the fields this module uses (times in clock ticks)."""

    pid: int
    parent: int
    started: int  # ticks after boot: with the pid, tells a process from a later one given the same pid
    own: int  # utime + stime
    reaped: int  # cutime + cstime: the children it has waited for, and theirs

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.started


def read_times(pid: int) -> ProcessTimes | None:
    """The process's times, or None once it has gone."""
    try:
        line = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name, in parentheses, may itself hold spaces and parentheses.
    fields = line[line.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return ProcessTimes(pid=pid, parent=int(fields[1]), started=int(fields[19]), own=utime + stime,
                        reaped=cutime + cstime)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (not counting its children)."""
    times = read_times(pid)
    if times is None:
        raise ProcessLookupError(f"no process {pid}")
    return times.own / os.sysconf("SC_CLK_TCK")


def running_processes() -> dict[int, ProcessTimes]:
    found = (read_times(int(entry.name)) for entry in PROC.iterdir() if entry.name.isdigit())
    return {times.pid: times for times in found if times is not None}


@dataclass(frozen=True)
class TreeSample:
    """The tree's processes at one moment, each with its generation below the root (the root is 0)."""

    processes: dict[tuple[int, int], tuple[int, ProcessTimes]]


class TreeCpu:
    """CPU seconds the descendants of `root` used between two samples, by role."""

    def __init__(self, roles: Sequence[str], root: int | None = None) -> None:
        if not roles:
            raise ValueError("at least one role is needed")
        self.roles = tuple(roles)
        self.root = os.getpid() if root is None else root
        self._ticks_per_second = os.sysconf("SC_CLK_TCK")
        self._generations: dict[tuple[int, int], int] = {}

    def role(self, generation: int) -> str:
        return self.roles[min(generation, len(self.roles)) - 1]

    def sample(self) -> TreeSample:
        running = running_processes()
        children: dict[int, list[ProcessTimes]] = {}
        for times in running.values():
            children.setdefault(times.parent, []).append(times)
        found: dict[tuple[int, int], tuple[int, ProcessTimes]] = {}
        root = running.get(self.root)
        level = [root] if root is not None else []
        generation = 0
        while level:
            found.update((times.key, (generation, times)) for times in level)
            generation += 1
            level = [child for times in level for child in children.get(times.pid, ())]
        for key, generation in self._generations.items():
            times = running.get(key[0])
            if key not in found and times is not None and times.key == key:
                found[key] = (generation, times)
        self._generations = {key: generation for key, (generation, _) in found.items()}
        return TreeSample(found)

    def seconds_between(self, earlier: TreeSample, later: TreeSample) -> dict[str, float]:
        ticks = dict.fromkeys(self.roles, 0)
        for key, (generation, times) in later.processes.items():
            before = earlier.processes.get(key)
            own_before, reaped_before = (before[1].own, before[1].reaped) if before else (0, 0)
            if generation:
                ticks[self.role(generation)] += times.own - own_before
            ticks[self.role(generation + 1)] += times.reaped - reaped_before
        tracked = {times.pid for _, times in (*earlier.processes.values(), *later.processes.values())}
        for key, (generation, times) in earlier.processes.items():
            if key not in later.processes and generation and times.parent in tracked:
                ticks[self.role(generation)] -= times.own + times.reaped
        return {role: count / self._ticks_per_second for role, count in ticks.items()}
