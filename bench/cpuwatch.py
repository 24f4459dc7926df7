"""Where a run's CPU went: the CPU seconds of named processes (each with every child it has
had, as PostgreSQL's backends are children of its postmaster) and of the whole machine, over a
span of time. Linux only (/proc).

    with CpuWatch(postgres=postmaster_pid, task_app=server_pid) as watch:
        ...
    watch.used["postgres"], watch.machine_busy_s, watch.wall_s

A child that exited and was waited for counts in its parent's `cutime`/`cstime`: a backend that
closed during the span (a worker's connections close as its runner ends) is not lost.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command's name (field 3 is at 0), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user and system, every thread) the process has used so far, its own."""
    fields = _stat(pid)
    if fields is None:
        raise ProcessLookupError(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK


def _own_and_waited(fields: list[str]) -> int:
    """Ticks of user and system time, the process's own and its waited-for children's."""
    return sum(int(fields[n]) for n in (11, 12, 13, 14))


def tree_ticks(root: int) -> int:
    """CPU ticks of `root` and every live descendant, each with its waited-for children."""
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            stats[int(entry)] = fields
            parents[int(entry)] = int(fields[1])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += _own_and_waited(stats[pid])
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


def machine_busy_ticks() -> int:
    """Ticks the machine's CPUs spent on anything but idling or waiting for I/O."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return user + nice + system + irq + softirq + steal


class CpuWatch:
    """CPU seconds used between entering and leaving, by each named process tree (`used`) and
    by the whole machine (`machine_busy_s`), over `wall_s` seconds."""

    def __init__(self, **roots: int | None) -> None:
        self.roots = {name: pid for name, pid in roots.items() if pid is not None}
        self.used: dict[str, float] = {}
        self.machine_busy_s = self.wall_s = 0.0

    def __enter__(self) -> CpuWatch:
        self._before = {name: tree_ticks(pid) for name, pid in self.roots.items()}
        self._machine, self._wall = machine_busy_ticks(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._wall
        self.machine_busy_s = (machine_busy_ticks() - self._machine) / _TICK
        self.used = {name: (tree_ticks(pid) - self._before[name]) / _TICK
                     for name, pid in self.roots.items()}  # fmt: skip

    def cores_busy(self) -> float:
        """The machine's CPUs busy on average over the span (2.0: two cores all the time)."""
        return self.machine_busy_s / self.wall_s if self.wall_s else 0.0
