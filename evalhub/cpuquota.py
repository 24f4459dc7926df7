"""Whether this process's CPU quota held it back: a worker in a container with a CPU limit
(a cgroup's `cpu.max` or `cpu.cfs_quota_us`, Kubernetes' `limits.cpu`) has no CPU to spare once
the kernel throttles it, whatever its event loop's lateness says. At a quota of 1 ms in every
10, a loop wakes within a few milliseconds of its timers and still gets a tenth of a CPU.

The kernel counts the periods in which a group ran out of its quota (`nr_throttled` in the
group's `cpu.stat`, cgroup v2 and v1 alike); where no quota is set, or the count cannot be read
(another system, a container that hides it), nothing is ever held back.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def stat_path(proc_cgroup: str, root: Path = CGROUP) -> Path | None:
    """The `cpu.stat` that counts this process's throttling, from `/proc/self/cgroup`'s text:
    the v1 `cpu` controller's group where there is one (a hybrid system's v2 line then carries
    no CPU controller), else the v2 group's; None when neither has the count."""
    v1, v2 = [], []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, group = parts
        group = group.lstrip("/")
        if not controllers:
            v2 += [root / group, root / "unified" / group]
        elif "cpu" in controllers.split(","):
            v1 += [root / name / group for name in (controllers, "cpu", "cpu,cpuacct")]
    for folder in (*v1, *v2):
        path = folder / "cpu.stat"
        if _throttled(path) is not None:
            return path
    return None


@cache
def _own_stat_path() -> Path | None:
    try:
        return stat_path(Path("/proc/self/cgroup").read_text())
    except OSError:
        return None


def cpu_stat(path: Path) -> dict[str, int] | None:
    """A group's `cpu.stat` counts by name (`nr_periods`, `nr_throttled`...; a line that is
    not a name and a count left out), or None when unreadable."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    counts = {}
    for line in lines:
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            counts[name] = int(value)
    return counts


def _throttled(path: Path) -> int | None:
    """The periods the group was throttled in so far, or None when its cpu.stat cannot be read
    or has no `nr_throttled` line."""
    return (cpu_stat(path) or {}).get("nr_throttled")


class Throttling:
    """Whether this process's quota held it back since the last look (`since_last`)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path if path is not None else _own_stat_path()
        self._last = _throttled(self._path) if self._path is not None else None

    def since_last(self) -> bool:
        if self._path is None:
            return False
        now = _throttled(self._path)
        if now is None:
            return False
        held, self._last = self._last is not None and now > self._last, now
        return held
