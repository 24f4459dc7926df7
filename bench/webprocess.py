"""evalhub's web process as the benchmarks that read it from outside start it: one uvicorn
process on a free loopback port, answering `/healthz`, and its memory as /proc tells it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def start_web() -> tuple[subprocess.Popen, str]:
    """The web process on this process's settings and its base URL, once `/healthz` answers
    (200, or 503 for a worker not yet seen). The caller terminates it."""
    from tests.support.servers import free_port, wait_until

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    web = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "evalhub.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning"],
        cwd=ROOT, env=dict(os.environ, PORT=str(port)),
    )  # fmt: skip

    def up() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code in (200, 503)
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, timeout=60, what="the web server")
    except BaseException:
        web.terminate()
        web.wait(timeout=30)
        raise
    return web, base
