"""`make run`: the web server and one Celery worker (with the scheduler) in one command.

Ctrl-C or SIGTERM stops both; if either exits, the other is stopped too and the exit code
is passed on. Every value comes from evalhub's settings (read from the environment there).
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
        f"  a dashboard login: .venv/bin/python manage.py createsuperuser\n"
        f"  data:        {settings.DATA_DIR}\n"
        "Ctrl-C stops everything.\n"
    )


def supervise(procs: dict[str, subprocess.Popen]) -> int:
    """Wait until a signal arrives or a process exits; then stop them all."""
    stopping = False

    def stop(signum, frame):  # noqa: ARG001
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    exit_code = 0
    while not stopping:
        for name, proc in procs.items():
            code = proc.poll()
            if code is not None:
                print(f"evalhub: {name} exited with code {code}; stopping", flush=True)
                exit_code = code or 1
                stopping = True
                break
        time.sleep(0.2)
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
    return exit_code


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalhub.settings")
    # A launcher: Django is set up only once the settings module is chosen.
    import django
    from django.conf import settings

    django.setup()
    env = dict(os.environ, EVALHUB_PUBLIC_URL=settings.EVALHUB_PUBLIC_URL, PORT=str(settings.PORT))
    procs = {name: subprocess.Popen(argv, env=env) for name, argv in commands(settings).items()}
    print(banner(settings), flush=True)
    return supervise(procs)


if __name__ == "__main__":
    sys.exit(main())
