"""`make run`: the web server (`EVALHUB_WEB_CONCURRENCY` processes, default one per core) and
one Celery worker (with the scheduler) in one command.

Ctrl-C or SIGTERM stops both. A child that exits is started again (a worker that can no
longer consume exits on purpose); one that keeps exiting (more than MAX_RESTARTS times in
RESTART_WINDOW_S) stops everything, and its exit code is passed on. Every value comes from evalhub's settings (read from the environment there).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def commands(settings) -> dict[str, list[str]]:
    python = sys.executable
    return {
        "web": [
            python, "-m", "uvicorn", "evalhub.asgi:application",
            "--host", settings.HOST, "--port", str(settings.PORT),
            "--log-level", "warning", "--no-access-log",
            # Several processes share the port; each keeps its own caches (interceptor tokens,
            # budget totals), which are kept correct across processes by re-reading the database.
            "--workers", str(settings.EVALHUB_WEB_CONCURRENCY),
        ],
        "worker": [
            python, "-m", "celery", "-A", "evalhub", "worker", "--beat",
            "--schedule", str(settings.DATA_DIR / "celerybeat-schedule"),
            "--pool", "threads", "--concurrency", str(settings.EVALHUB_WORKER_CONCURRENCY),
            "--loglevel", "INFO", "--without-gossip", "--without-mingle",
        ],
    }  # fmt: skip


def banner(settings) -> str:
    url = settings.EVALHUB_PUBLIC_URL
    return (
        f"\nevalhub is starting on {url}\n"
        f"  dashboard:   {url}/\n"
        f"  API docs:    {url}/api/docs\n"
        f"  an API key:  .venv/bin/python manage.py createapikey YOUR_NAME\n"
        f"  a dashboard login: .venv/bin/python manage.py createuser YOUR_NAME  (prints a password)\n"
        f"  data:        {settings.DATA_DIR}\n"
        "Ctrl-C stops everything.\n"
    )


# A child that exits is started again; one that exits this many times within RESTART_WINDOW_S
# (it cannot start at all) stops everything instead, with its exit code.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0


class Supervisor:
    """Keeps the children running: restarts one that exits (a worker that could no longer
    consume exits on purpose, see evalhub.celery), until a signal arrives or a child keeps
    failing; then stops them all."""

    def __init__(self, argvs: dict[str, list[str]], *, start=None, clock=time.monotonic):
        self.argvs = argvs
        self.start = start or (lambda argv: subprocess.Popen(argv))
        self.clock = clock
        self.procs = {name: self.start(argv) for name, argv in argvs.items()}
        self.exits: dict[str, list[float]] = {name: [] for name in argvs}
        self.stopping = False
        self.exit_code = 0

    def check(self) -> None:
        """One look at the children: restart the ones that exited, or give up."""
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is None:
                continue
            now = self.clock()
            recent = [t for t in self.exits[name] if now - t < RESTART_WINDOW_S] + [now]
            self.exits[name] = recent
            if len(recent) > MAX_RESTARTS:
                print(f"evalhub: {name} exited {len(recent)} times in {RESTART_WINDOW_S:g}s "
                      f"(last code {code}); stopping", flush=True)  # fmt: skip
                self.exit_code = code or 1
                self.stopping = True
                return
            print(f"evalhub: {name} exited with code {code}; starting it again", flush=True)
            self.procs[name] = self.start(self.argvs[name])

    def stop_all(self, timeout: float = 20.0) -> int:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
        return self.exit_code


def supervise(argvs: dict[str, list[str]], env: dict[str, str]) -> int:
    """Run the children until SIGINT/SIGTERM (or one keeps failing); then stop them all."""
    supervisor = Supervisor(argvs, start=lambda argv: subprocess.Popen(argv, env=env))

    def stop(signum, frame):  # noqa: ARG001
        supervisor.stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while not supervisor.stopping:
        supervisor.check()
        time.sleep(0.2)
    return supervisor.stop_all()


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalhub.settings")
    # A launcher: Django is set up only once the settings module is chosen.
    import django
    from django.conf import settings

    django.setup()
    env = dict(os.environ, EVALHUB_PUBLIC_URL=settings.EVALHUB_PUBLIC_URL, PORT=str(settings.PORT))
    print(banner(settings), flush=True)
    return supervise(commands(settings), env)


if __name__ == "__main__":
    sys.exit(main())
