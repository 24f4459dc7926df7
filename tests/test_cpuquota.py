"""A process's CPU quota (evalhub.cpuquota): where the kernel counts its throttling, and whether
it held the process back since the last look, read from a real cgroup where this machine lets
the tests make one."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from evalhub.cpuquota import CGROUP, Throttling, stat_path

ROOT = Path(__file__).resolve().parents[1]


def _stat(folder: Path, throttled: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cpu.stat"
    path.write_text(f"nr_periods 100\nnr_throttled {throttled}\nthrottled_time 5\n")
    return path


def test_the_count_is_found_under_the_v1_cpu_controller_or_else_the_v2_group(tmp_path):
    v1 = _stat(tmp_path / "cpu,cpuacct" / "worker-7", 0)
    hybrid = "12:memory:/worker-7\n4:cpu,cpuacct:/worker-7\n0::/worker-7\n"
    assert stat_path(hybrid, root=tmp_path) == v1
    v2 = _stat(tmp_path / "kubepods" / "pod-1", 0)
    assert stat_path("0::/kubepods/pod-1\n", root=tmp_path) == v2
    # No group with the count (another system, a container that hides it): none.
    assert stat_path("0::/elsewhere\n", root=tmp_path) is None
    assert stat_path("", root=tmp_path) is None


def test_held_back_is_a_count_grown_since_the_last_look(tmp_path):
    path = _stat(tmp_path, 3)
    throttling = Throttling(path)
    assert throttling.since_last() is False
    _stat(tmp_path, 9)
    assert throttling.since_last() is True
    assert throttling.since_last() is False  # nothing more since
    path.write_text("garbled")
    assert throttling.since_last() is False


_CHILD = """
import sys, time
from evalhub.cpuquota import Throttling
sys.stdin.readline()  # moved into its group meanwhile
throttling = Throttling()
end = time.perf_counter() + 0.3
while time.perf_counter() < end:
    pass
print(throttling.since_last(), flush=True)
"""


def _cgroup(quota_us: int | None) -> Path | None:
    """A group held to `quota_us` of every 10 ms of CPU (None: no quota), or None where the
    tests cannot make one."""
    if os.geteuid() != 0:
        return None
    name = f"evalhub-test-{uuid.uuid4().hex[:8]}"
    with contextlib.suppress(OSError):
        if (CGROUP / "cpu" / "cpu.cfs_quota_us").exists():
            group = CGROUP / "cpu" / name
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text("10000")
            (group / "cpu.cfs_quota_us").write_text(str(quota_us or -1))
            return group
        if "cpu" in (CGROUP / "cgroup.controllers").read_text().split():
            group = CGROUP / name
            group.mkdir()
            (group / "cpu.max").write_text(f"{quota_us or 'max'} 10000")
            return group
    return None


def _child_held_back(group: Path) -> bool:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    (group / "cgroup.procs").write_text(str(child.pid))
    out, _ = child.communicate("go\n", timeout=60)
    return out.strip() == "True"


def test_a_process_held_to_a_tenth_of_a_cpu_is_held_back_and_one_without_a_quota_is_not():
    groups = [_cgroup(1000), _cgroup(None)]
    try:
        if None in groups:
            pytest.skip("this machine does not let the tests make a cgroup with a CPU quota")
        capped, free = groups
        assert _child_held_back(capped) is True
        assert _child_held_back(free) is False
    finally:
        for group in groups:
            for _ in range(50 if group is not None else 0):  # removable once its process ended
                with contextlib.suppress(OSError):
                    group.rmdir()
                    break
                time.sleep(0.1)
