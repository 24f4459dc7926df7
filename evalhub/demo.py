"""`make demo`: evalhub with a finished job to look at, in one command, offline, without a key.

It starts what `make run` starts (the web process and a worker, on the embedded default) plus,
in this process, the example task app (examples/weather_task_app.py) and, unless
OPENAI_API_KEY is set, a local fake OpenAI-compatible provider (evalhub/fakeprovider).
Then it makes the dashboard account `demo` with a fresh printed password and an API key
(`manage.py createapikey demo --password-stdin`), submits a job of a few dozen seeds through
the API (some seeds fail, some are retried: `env_config.demo_faults`), prints where to look, and
reports the job's end. Ctrl-C stops everything; `--exit-when-done` stops once the job is over.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import uvicorn

from evalhub import runall
from evalhub.fakeprovider import FakeOpenAI
from evalhub.ports import port_problem
from examples.weather_task_app import app as example_task_app

ROOT = Path(__file__).resolve().parents[1]
USERNAME = "demo"
TERMINAL = {"completed", "failed", "cancelled"}
FAKE_PROVIDER_KEY = "sk-demo-local-fake-provider"


def serve_in_thread(app, port: int) -> uvicorn.Server:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    threading.Thread(target=server.run, daemon=True).start()
    _wait(lambda: server.started, 15, f"a local server on port {port}")
    return server


def _wait(predicate, timeout: float, what: str, alive=None):
    """`predicate()`'s value once it is truthy; None as soon as `alive()` is false (Ctrl-C, or a
    process that cannot start); after `timeout` seconds a SystemExit saying what was awaited."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if alive is not None and not alive():
            return None
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out waiting for {what}")
        time.sleep(0.2)
    return value


def running(supervisor: runall.Supervisor) -> bool:
    """One look at the children (restarting one that exited); false once the demo stops."""
    supervisor.check()
    return not supervisor.stopping


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_helpers(env: dict[str, str]) -> list[uvicorn.Server]:
    """The example task app and, without a real key, the fake provider; sets env for them."""
    servers = []
    port = free_port()
    servers.append(serve_in_thread(example_task_app, port))
    env["DEMO_TASK_APP_URL"] = f"http://127.0.0.1:{port}"
    if not env.get("OPENAI_API_KEY"):
        port = free_port()
        servers.append(serve_in_thread(FakeOpenAI(), port))
        env.update(OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1", OPENAI_API_KEY=FAKE_PROVIDER_KEY)
    return servers


def manage(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, input=stdin, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"demo: manage.py {args[0]} failed:\n{done.stderr or done.stdout}")
    return done.stdout


def account_create(env: dict[str, str]) -> tuple[str, str]:
    """The demo user, with a new password and a new API key: (password, key)."""
    password = os.environ.get("EVALHUB_DEMO_PASSWORD") or secrets.token_urlsafe(12)
    out = manage(env, "createapikey", USERNAME, "--password-stdin", stdin=password + "\n")
    return password, out.strip().splitlines()[-1]


def job_body(task_app_url: str, seeds: int) -> dict:
    """The job examples/job.json describes, pointed at the task app this process serves."""
    return {
        "task_app_url": task_app_url,
        "seeds": list(range(seeds)),
        "policy": {"policy_name": "weather-agent", "model": "gpt-4o-mini"},
        "env_name": "weather",
        "env_config": {"demo_faults": True},
        "max_concurrent": 8,
        "timeout": 120,
    }


def settings_view(env: dict[str, str]) -> SimpleNamespace:
    """What runall.commands() reads of the settings, from the same environment."""
    data_dir = Path(env.get("EVALHUB_DATA_DIR") or ROOT / "var").resolve()
    return SimpleNamespace(
        HOST=env.get("HOST", "127.0.0.1"),
        PORT=int(env.get("PORT", "8000")),
        DATA_DIR=data_dir,
        EVALHUB_WORKER_CONCURRENCY=int(env.get("EVALHUB_WORKER_CONCURRENCY", "8")),
        EVALHUB_WEB_CONCURRENCY=int(env.get("EVALHUB_WEB_CONCURRENCY", str(os.cpu_count() or 1))),
    )


def banner(url: str, password: str, key: str, job_id: str, provider: str) -> str:
    return (
        f"\nevalhub demo is running on {url}\n"
        f"  sign in:     {url}/login/   user {USERNAME!r}, password {password}\n"
        f"  the job:     {url}/jobs/{job_id}/\n"
        f"  API key:     {key}\n"
        f"  try:         curl -H 'Authorization: Bearer {key}' {url}/api/eval/jobs/{job_id}/results\n"
        f"  API docs:    {url}/api/docs\n"
        f"  LLM:         {provider}\n"
        "Ctrl-C stops everything.\n"
    )


def follow(client: httpx.Client, job_id: str, supervisor: runall.Supervisor) -> dict | None:
    """Print the job's progress until it ends; returns its last status (None: stopped)."""
    shown = None
    while running(supervisor):
        status = client.get(f"/api/eval/jobs/{job_id}").json()
        progress = status.get("results") or {}
        line = f"demo job {status['status']}: {progress.get('completed', 0)}/{progress.get('total', '?')} seeds done"
        if line != shown:
            print(line, flush=True)
            shown = line
        if status["status"] in TERMINAL:
            return status
        time.sleep(1)
    return None


def run(args: argparse.Namespace) -> int:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    view = settings_view(env)
    how = f"PORT (e.g. PORT={view.PORT + 1} make demo)"
    if problem := port_problem(view.HOST, view.PORT, how=how):
        print(f"demo: {problem}", file=sys.stderr, flush=True)
        return 2
    url = env.setdefault("EVALHUB_PUBLIC_URL", f"http://127.0.0.1:{view.PORT}")
    provider = (
        "OpenAI (OPENAI_API_KEY is set)" if env.get("OPENAI_API_KEY") else "a local fake provider"
    )
    helpers = start_helpers(env)
    manage(env, "migrate", "--noinput")
    manage(env, "collectstatic", "--noinput", "-v", "0")
    password, key = account_create(env)
    worker_log = view.DATA_DIR / "demo-worker.log"
    supervisor = runall.Supervisor(
        runall.commands(view), start=lambda argv: start_child(argv, env, worker_log)
    )
    supervisor.signals_handled()
    try:
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        if not _wait(lambda: _healthy(client), 90, "the web process", lambda: running(supervisor)):
            return supervisor.exit_code
        created = client.post("/api/eval/jobs", json=job_body(env["DEMO_TASK_APP_URL"], args.seeds))
        created.raise_for_status()
        job_id = created.json()["job_id"]
        print(banner(url, password, key, job_id, provider), flush=True)
        status = follow(client, job_id, supervisor)
        if status is None:
            return supervisor.exit_code
        summary = client.get(f"/api/eval/jobs/{job_id}/results").json().get("summary", {})
        print(finished(status["status"], summary), flush=True)
        print(f"demo ready: {url}/jobs/{job_id}/  (user {USERNAME!r}, password {password})")
        print(f"The worker's log: {worker_log}. Ctrl-C stops everything.", flush=True)
        while not args.exit_when_done and running(supervisor):
            time.sleep(0.2)
    finally:
        code = supervisor.stop_all()
        for server in helpers:
            server.should_exit = True
    return code


def start_child(argv: list[str], env: dict[str, str], worker_log: Path) -> subprocess.Popen:
    """The web process prints to the terminal (little: warnings); the worker's chatter goes to
    a log file so the demo's own lines stay readable."""
    if "celery" not in argv:
        return subprocess.Popen(argv, cwd=ROOT, env=env)
    worker_log.parent.mkdir(parents=True, exist_ok=True)
    with open(worker_log, "ab") as log:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def finished(status: str, summary: dict) -> str:
    mean = summary.get("mean_score")
    cost = summary.get("total_cost_usd")
    return (
        f"demo job {status}: {summary.get('num_successful')} seeds succeeded, "
        f"{summary.get('num_failed')} failed; mean score "
        f"{'-' if mean is None else f'{mean:.3f}'} (a failed seed counts 0); "
        f"{summary.get('total_tokens')} tokens, "
        f"cost {'unknown' if cost is None else f'${cost:.4f}'}"
    )


def _healthy(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=36, help="seeds in the demo job")
    parser.add_argument("--exit-when-done", action="store_true", help="stop once the job ends")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
