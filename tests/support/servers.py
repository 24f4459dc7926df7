"""Real servers on loopback ports for the tests: ASGI apps in a thread (task apps, the fake
LLM upstream) and evalhub's own web and Celery worker processes against the test database."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import uvicorn
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port nothing listens on, below the range the kernel gives the local ends of
    outgoing connections: a server stopped and started again on its port mid-test (the fault
    tests) found it taken by some client's connection when the port came from that range."""
    low = _ephemeral_ports_low()
    for _ in range(100 if low > 2048 else 0):  # a range starting lower leaves none below it
        port = random.randint(max(1024, low - 12_000), low - 1)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # all taken: any port the kernel has
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_ports_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def wait_until(
    predicate, *, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"
):
    """Poll `predicate` until it returns a truthy value; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@contextlib.contextmanager
def serve_asgi(app, *, port: int | None = None) -> Iterator[str]:
    """Serve an ASGI app on 127.0.0.1 in a background thread; yields its base URL."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=15, what=f"ASGI app on port {port}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_database_url() -> str:
    """DATABASE_URL of the test database pytest-django created, for child processes."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def child_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=test_database_url(),
        EVALHUB_DATA_DIR=str(settings.DATA_DIR),
        SECRET_KEY=settings.SECRET_KEY,
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


class ChildProcess:
    """A process of ours (web or worker) whose output goes to a log file under the data dir."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]):
        self.name = name
        self.node = ""  # a worker's Celery node name (start_worker)
        self.log_path = (
            Path(settings.DATA_DIR) / "test-logs" / f"{name}-{os.getpid()}-{time.time_ns()}.log"
        )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        # A session of its own: a worker's embedded beat is a child process, killed with it.
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL to the process and its children (a worker's beat): no chance to clean up."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM: a warm shutdown begins; `stop` waits for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


def stop_after_test(processes: list[ChildProcess], grace_s: float = 0.3) -> None:
    """Stop the processes a test started once it has asserted what it wanted: SIGTERM to all,
    then SIGKILL to those still up after `grace_s`. A warm shutdown of an idle worker on the
    file-system broker takes 4-6 s (Celery's loop sees the signal after its 2 s drain, then
    waits on its pool and timer); at ~90 worker tests a pass, waiting for it cost minutes."""
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        try:
            process.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        # The whole session, exited or not: an embedded beat outlives its killed worker.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.proc.pid, signal.SIGKILL)
        process.stop()


def start_worker(
    *, queue: str, concurrency: int = 4, name: str = "worker", beat: bool = False, **env: str
) -> ChildProcess:
    argv = [
        sys.executable, "-m", "celery", "-A", "evalhub", "worker",
        "-Q", queue, "-n", f"{name}-{time.time_ns()}@%h",
        "--pool", "threads", "--concurrency", str(concurrency),
        "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    if beat:  # the periodic scheduler too, with a schedule file of its own
        schedule = Path(settings.DATA_DIR) / "test-logs" / f"beat-{time.time_ns()}"
        schedule.parent.mkdir(parents=True, exist_ok=True)
        argv += ["--beat", "--schedule", str(schedule)]
    worker = ChildProcess(name, argv, child_env(EVALHUB_CELERY_QUEUE=queue, **env))
    worker.node = argv[argv.index("-n") + 1].replace("%h", socket.gethostname())
    wait_until(
        lambda: "ready" in worker.log() or worker.proc.poll() is not None,
        timeout=60,
        what="the Celery worker to start",
    )
    if worker.proc.poll() is not None:
        raise RuntimeError(f"worker exited at start:\n{worker.log()}")
    return worker


def start_web(*, port: int | None = None, **env: str) -> tuple[ChildProcess, str]:
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    # As `make run` serves: uvicorn with read deadlines (evalhub/webserver.py), one process.
    argv = [
        sys.executable, "-m", "evalhub.webserver",
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--log-level", "warning",
    ]  # fmt: skip
    web = ChildProcess("web", argv, child_env(PORT=str(port), EVALHUB_PUBLIC_URL=base, **env))

    def up() -> bool:
        if web.proc.poll() is not None:
            raise RuntimeError(f"web server exited at start:\n{web.log()}")
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code in (200, 503)
        except httpx.HTTPError:
            return False

    wait_until(up, timeout=60, what="the web server to start")
    return web, base
