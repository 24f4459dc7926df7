"""Private Redis and PostgreSQL servers for the fault suite: child processes on free loopback
ports, owned by the test session, so the suite may stop, kill and restart them without
touching any server someone else uses.

PostgreSQL needs a cluster (`initdb`, made once per session and reused); it refuses to run as
root, so as root every PostgreSQL command runs as the `postgres` system user (`runuser`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.support.servers import free_port, wait_until

PG_BIN_CANDIDATES = [Path(f"/usr/lib/postgresql/{v}/bin") for v in (17, 16, 15, 14, 13)]


class ServiceUnavailable(RuntimeError):
    """The machine cannot run this server (binary missing, no user to run it as)."""


def _pg_bin() -> Path:
    for candidate in PG_BIN_CANDIDATES:
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise ServiceUnavailable("PostgreSQL's initdb was not found")


def _as_postgres(argv: list[str]) -> list[str]:
    """Run as the `postgres` user when we are root (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return argv
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ServiceUnavailable("running as root without runuser: cannot start PostgreSQL")
    return [runuser, "-u", "postgres", "--", *argv]


class PrivateRedis:
    """A redis-server child process without persistence; `restart()` keeps the port."""

    def __init__(self, workdir: Path):
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServiceUnavailable("redis-server was not found")
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / f"redis-{self.port}.log"

    def start(self) -> None:
        argv = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--dir", str(self.workdir), "--logfile", str(self.log_path),
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.ping, timeout=15, interval=0.05, what=f"redis on port {self.port}")

    def ping(self) -> bool:
        with contextlib.suppress(OSError), _socket_to(self.port) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False

    def kill(self) -> None:
        """As `redis-cli shutdown nosave` does to clients: every connection drops at once."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self, *, down_s: float) -> None:
        self.kill()
        time.sleep(down_s)
        self.start()

    def stop(self) -> None:
        self.kill()


@contextlib.contextmanager
def _socket_to(port: int):
    s = socket.create_connection(("127.0.0.1", port), timeout=1)
    try:
        yield s
    finally:
        s.close()


class PrivatePostgres:
    """One PostgreSQL cluster in a temporary directory, on a free port, started with pg_ctl."""

    def __init__(self, workdir: Path):
        self.bin = _pg_bin()
        self.workdir = workdir
        self.datadir = workdir / "pgdata"
        self.port = free_port()
        self.log_path = workdir / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, argv: list[str], timeout: float = 60) -> None:
        done = subprocess.run(
            _as_postgres(argv), capture_output=True, text=True, timeout=timeout, cwd="/"
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.workdir, user="postgres")
        self._run([str(self.bin / "initdb"), "-D", str(self.datadir), "-A", "trust",
                   "-U", "postgres", "--no-sync", "-E", "UTF8"])  # fmt: skip
        self.start()

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.datadir), "-o", options,
                   "-l", str(self.log_path), "-w", "-t", "60", "start"])  # fmt: skip

    def ready(self) -> bool:
        try:
            with psycopg.connect(self.url(), connect_timeout=1) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def stop(self, *, mode: str = "fast") -> None:
        """`immediate` is a crash: every backend dies at once, no checkpoint."""
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "stop"])

    def restart(self, *, down_s: float) -> None:
        self.stop(mode="immediate")
        time.sleep(down_s)
        self.start()

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self.stop(mode="immediate")


def workdir_new() -> Path:
    """A temporary directory every user (postgres included) may enter."""
    path = Path(tempfile.mkdtemp(prefix="evalhub-faults-"))
    path.chmod(0o755)
    return path
