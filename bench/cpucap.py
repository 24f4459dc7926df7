"""Hold a process to a fraction of one CPU with a cgroup of its own (Linux, as root).

Scaling out is about what N workers do when each has a core of its own. On a machine with
fewer cores than workers (the 2-core development machine runs four workers, PostgreSQL, Redis
and the task app), the workers' figures measure the cores, not evalhub. Capping each worker at
the same slice of a CPU (`cpu.max` on cgroup v2, `cpu.cfs_quota_us` on v1) makes every worker a
small machine of its own: N capped workers over one capped worker is the scale-out that evalhub's
claims and leases allow, as long as the capped workers together leave the machine room.
The period is 10 ms, not the kernel's default 100 ms: a worker that used its slice waits at most
the rest of 10 ms, as on a slower core, instead of most of 100 ms with its database answers
and rollouts waiting.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
PERIOD_US = 10_000


def _parent() -> tuple[Path, str] | None:
    """Where a capped cgroup can be made, and which interface it speaks."""
    v1 = CGROUP / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, "v1"
    v2 = CGROUP / "unified" if (CGROUP / "unified" / "cgroup.controllers").exists() else CGROUP
    controllers = v2 / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return v2, "v2"
    return None


def why_not() -> str | None:
    """None when processes can be capped here; otherwise the reason."""
    where = _parent()
    if where is None:
        return "no cgroup cpu controller on this machine"
    if not os.access(where[0], os.W_OK):
        return f"{where[0]} is not writable (capping needs root)"
    return None


class CpuCap:
    """One cgroup per capped process, removed by `close()` once the process has ended."""

    def __init__(self, fraction: float):
        if not 0 < fraction <= 64:
            raise ValueError("the CPU cap is a fraction of a CPU, above 0")
        where = _parent()
        if where is None or why_not():
            raise RuntimeError(why_not())
        self.parent, self.kind = where
        self.quota_us = int(fraction * PERIOD_US)
        self.groups: list[Path] = []

    def cap(self, pid: int) -> Path:
        group = self.parent / f"evalhub-bench-{uuid.uuid4().hex[:8]}"
        group.mkdir()
        self.groups.append(group)
        if self.kind == "v1":
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(self.quota_us))
        else:
            (group / "cpu.max").write_text(f"{self.quota_us} {PERIOD_US}")
        (group / "cgroup.procs").write_text(str(pid))
        return group

    @staticmethod
    def throttled(group: Path) -> float:
        """The share of the group's scheduling periods in which it hit its cap (both
        interfaces count `nr_periods` and `nr_throttled`): near 1, the cap was the bound."""
        from evalhub.cpuquota import cpu_stat  # evalhub's reader; its root is on the path by now

        stat = cpu_stat(group / "cpu.stat") or {}
        periods = stat.get("nr_periods", 0)
        return stat.get("nr_throttled", 0) / periods if periods else 0.0

    def close(self) -> None:
        """Remove the groups (a group is removable once its processes have ended)."""
        for group in self.groups:
            for _ in range(50):
                with contextlib.suppress(FileNotFoundError):
                    try:
                        group.rmdir()
                    except OSError:  # busy: a process of it is still exiting
                        time.sleep(0.1)
                        continue
                break
        self.groups.clear()
