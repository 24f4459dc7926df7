"""`make run` and `make demo` on a busy port, a child that cannot start, and Ctrl-C: one clear
line and a prompt exit, never a restart loop of hundreds of lines (evalhub.runall, the demo)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from evalhub import runall
from evalhub.runall import QUICK_EXIT_S, Supervisor
from tests.support.servers import ROOT, free_port, wait_until
from tests.test_worker_liveness import FakeProc

# Variables that would point the processes at the test session's database or broker.
NOT_INHERITED = ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "EVALHUB_CELERY_QUEUE",
                 "EVALHUB_PUBLIC_URL", "SECRET_KEY", "PORT")  # fmt: skip


def env_of(tmp_path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    return {**env, "EVALHUB_DATA_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1", **extra}


@pytest.fixture
def busy_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize(
    "module,command", [("evalhub.runall", "make run"), ("evalhub.demo", "make demo")]
)
def test_a_busy_port_is_one_line_saying_how_to_choose_another(tmp_path, busy_port, module, command):
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", module], cwd=ROOT, env=env_of(tmp_path, PORT=str(busy_port)),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 2
    assert "Address already in use" not in done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"{'evalhub' if module.endswith('runall') else 'demo'}: port {busy_port} on 127.0.0.1 "
        "is already in use (another evalhub, or another program). Choose another port with "
        f"PORT (e.g. PORT={busy_port + 1} {command})"
    ]
    print(f"{command} on a busy port exited in {took:.1f} s")


def test_a_child_that_exits_at_once_twice_is_not_started_a_third_time(capsys):
    now = [0.0]
    supervisor = Supervisor({"web": ["web"]}, start=FakeProc, clock=lambda: now[0])
    supervisor.procs["web"].code = 1  # e.g. its port was taken
    supervisor.check()
    assert not supervisor.stopping  # once may be bad luck: it is started again
    now[0] += QUICK_EXIT_S / 2
    supervisor.procs["web"].code = 1
    supervisor.check()
    assert supervisor.stopping
    for _ in range(100):  # the loops that call check() until they see `stopping`
        supervisor.check()
    assert supervisor.stop_all() == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [
        "evalhub: web exited with code 1; starting it again",
        "evalhub: web exited at once again (code 1), as it did when it was last started: not "
        "starting it again; its output above says why. Stopping.",
    ]


def test_a_child_exiting_at_once_after_running_a_while_is_started_again():
    now = [0.0]
    supervisor = Supervisor({"worker": ["worker"]}, start=FakeProc, clock=lambda: now[0])
    now[0] += 600  # ran ten minutes, then its consumer died: a restart is what it needs
    supervisor.procs["worker"].code = 1
    supervisor.check()
    now[0] += 1
    supervisor.procs["worker"].code = 1  # exits at once once: not twice in a row
    supervisor.check()
    assert not supervisor.stopping


@pytest.mark.worker
def test_ctrl_c_stops_make_run_promptly(tmp_path):
    port = free_port()
    env = env_of(tmp_path, PORT=str(port), EVALHUB_WEB_CONCURRENCY="2", OPENAI_API_KEY="sk-x")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env,
                   check=True, capture_output=True)  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "evalhub.runall"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        wait_until(lambda: _healthy(port), timeout=90, interval=0.5, what="make run to serve")
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    output = proc.stdout.read()
    assert code == 0, output
    assert "evalhub: stopping (Ctrl-C again to stop at once)" in output
    assert "starting it again" not in output
    # The worker's INFO chatter (beat's re-dispatch every 2 s, each task) stays out of it.
    assert "INFO celery" not in output and "Sending due task" not in output, output
    print(f"make run stopped {took:.1f} s after Ctrl-C")


def test_evalhubs_own_info_lines_are_kept_where_celerys_are_not(settings):
    """`make run`'s worker runs Celery at WARNING; evalhub's loggers keep LOG_LEVEL."""
    worker = runall.commands(settings)["worker"]
    assert worker[worker.index("--loglevel") + 1] == "WARNING"
    assert settings.LOG_LEVEL == "INFO"
    for name in ("evalhub", "jobs.tasks", "traces.retention"):
        assert logging.getLogger(name).getEffectiveLevel() == logging.INFO


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
