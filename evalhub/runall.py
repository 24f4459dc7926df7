"""`make run`: the web server (`EVALHUB_WEB_CONCURRENCY` processes, default one per core) and
one Celery worker (with the scheduler) in one command.

Ctrl-C or SIGTERM stops both (a second Ctrl-C without waiting for them). A port already
taken is one line saying how to choose another (PORT), before anything starts. A child that
exits is started again (a worker that can no longer consume exits on purpose); one that exits
at once twice in a row with the same code, or keeps exiting (more than MAX_RESTARTS times in
RESTART_WINDOW_S), stops everything, and its exit code is passed on. Every value comes from
evalhub's settings (read from the environment there).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from evalhub import fakeprovider
from evalhub.ports import port_problem
from evalhub.providers import providers_usable


def commands(settings) -> dict[str, list[str]]:
    python = sys.executable
    return {
        # uvicorn with read deadlines on each request (evalhub/webserver.py).
        "web": [
            python, "-m", "evalhub.webserver",
            "--host", settings.HOST, "--port", str(settings.PORT),
            "--log-level", "warning", "--no-access-log",
            # Several processes share the port; each keeps its own caches (interceptor tokens,
            # budget totals), which are kept correct across processes by re-reading the database.
            "--workers", str(settings.EVALHUB_WEB_CONCURRENCY),
        ],
        "worker": [
            # Quiet: no banner, and Celery's own lines from WARNING up (at INFO it logs three
            # lines every 2 s for beat's re-dispatch); evalhub's own loggers keep LOG_LEVEL
            # (settings.LOGGING).
            python, "-m", "celery", "-A", "evalhub", "--quiet", "worker", "--beat",
            "--schedule", str(settings.DATA_DIR / "celerybeat-schedule"),
            "--pool", "threads", "--concurrency", str(settings.EVALHUB_WORKER_CONCURRENCY),
            "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
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


def no_provider_warning(settings) -> str:
    """Loud, at start-up, when no LLM provider is configured: the jobs would run, and every
    seed would fail on its first LLM call (a task app's HTTP 500 in a completed job)."""
    if providers_usable(settings.EVALHUB_UPSTREAMS):
        return ""
    fake = f"http://127.0.0.1:{fakeprovider.DEFAULT_PORT}/v1"
    rule = "!" * 78
    return (
        f"\n{rule}\n"
        "evalhub: NO LLM PROVIDER IS CONFIGURED: every LLM call of every job will fail.\n"
        "  a real one:  OPENAI_API_KEY=sk-... make run   (or EVALHUB_PROVIDERS: "
        "docs/configuration.md)\n"
        "  or the fake one, no key needed (it answers arithmetic and calls tools):\n"
        "      make fake-llm                             (in another terminal), then\n"
        f"      OPENAI_BASE_URL={fake} OPENAI_API_KEY={fakeprovider.FAKE_KEY} make run\n"
        f"{rule}\n"
    )


# A child that exits is started again; one that exits this many times within RESTART_WINDOW_S
# (it cannot start at all) stops everything instead, with its exit code.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
# A child that exits within this many seconds of its start did not start at all (a bad setting,
# a port taken since): the second time in a row with the same code, it is not started again.
QUICK_EXIT_S = 5.0


class Supervisor:
    """Keeps the children running: restarts one that exits (a worker that could no longer
    consume exits on purpose, see evalhub.celery), until a signal arrives or a child keeps
    failing; then stops them all."""

    def __init__(self, argvs: dict[str, list[str]], *, start=None, clock=time.monotonic):
        self.argvs = argvs
        self.start = start or (lambda argv: subprocess.Popen(argv))
        self.clock = clock
        self.started: dict[str, float] = {}
        self.quick_exit: dict[str, int | None] = {name: None for name in argvs}
        self.procs = {name: self._start(name) for name in argvs}
        self.exits: dict[str, list[float]] = {name: [] for name in argvs}
        self.stopping = False
        self.hurry = False  # a second Ctrl-C: kill, do not wait
        self.exit_code = 0

    def _start(self, name: str):
        self.started[name] = self.clock()
        return self.start(self.argvs[name])

    def check(self) -> None:
        """One look at the children: restart the ones that exited, or give up."""
        if self.stopping:
            return
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is None:
                continue
            if self._gives_up(name, code):
                self.exit_code = code or 1
                self.stopping = True
                return
            print(f"evalhub: {name} exited with code {code}; starting it again", flush=True)
            self.procs[name] = self._start(name)

    def _gives_up(self, name: str, code: int) -> bool:
        now = self.clock()
        recent = [t for t in self.exits[name] if now - t < RESTART_WINDOW_S] + [now]
        self.exits[name] = recent
        quick = now - self.started[name] < QUICK_EXIT_S
        again = quick and self.quick_exit[name] == code
        self.quick_exit[name] = code if quick else None
        if again:
            print(f"evalhub: {name} exited at once again (code {code}), as it did when it was "
                  "last started: not starting it again; its output above says why. "
                  "Stopping.", flush=True)  # fmt: skip
        elif len(recent) > MAX_RESTARTS:
            print(f"evalhub: {name} exited {len(recent)} times in {RESTART_WINDOW_S:g}s "
                  f"(last code {code}); stopping", flush=True)  # fmt: skip
        return again or len(recent) > MAX_RESTARTS

    def stop_all(self, timeout: float = 20.0) -> int:
        """SIGTERM to every child, then wait for them (at most `timeout`, or until `hurry`
        is set: a second Ctrl-C) and kill what is left."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while not self.hurry and time.monotonic() < deadline:
            if all(proc.poll() is not None for proc in self.procs.values()):
                break
            time.sleep(0.05)
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return self.exit_code

    def on_signal(self, signum, frame) -> None:  # noqa: ARG002
        """SIGINT/SIGTERM: stop (the loops of `supervise` and the demo see `stopping` within
        a fraction of a second); a second one: stop without waiting for the children."""
        if self.stopping:
            self.hurry = True
            return
        self.stopping = True
        print("\nevalhub: stopping (Ctrl-C again to stop at once)", flush=True)

    def signals_handled(self) -> None:
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGTERM, self.on_signal)


def supervise(argvs: dict[str, list[str]], env: dict[str, str]) -> int:
    """Run the children until SIGINT/SIGTERM (or one keeps failing); then stop them all."""
    supervisor = Supervisor(argvs, start=lambda argv: subprocess.Popen(argv, env=env))
    supervisor.signals_handled()
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
    how = f"PORT (e.g. PORT={settings.PORT + 1} make run)"
    if problem := port_problem(settings.HOST, settings.PORT, how=how):
        print(f"evalhub: {problem}", file=sys.stderr, flush=True)
        return 2
    import evalhub.metrics as metrics  # after the settings: they set its folder

    metrics.host_files_clear()  # the processes that counted there have all stopped
    env = dict(os.environ, EVALHUB_PUBLIC_URL=settings.EVALHUB_PUBLIC_URL, PORT=str(settings.PORT))
    print(banner(settings) + no_provider_warning(settings), flush=True)
    return supervise(commands(settings), env)


if __name__ == "__main__":
    sys.exit(main())
