"""The fault suite's stack: evalhub's real processes (web, workers, beat) against private Redis
and PostgreSQL servers (tests/support/private_services.py), a real task app and the fake LLM
provider in this process, and the means to break any of them.

Results are read the way clients read them (the HTTP API) and, for what the API does not show
(attempts, LLM call rows), straight from the database with psycopg.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
from celery import Celery

from tests.support import servers
from tests.support.private_services import PrivatePostgres, PrivateRedis
from tests.support.servers import ChildProcess, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
JOBS = "/api/eval/jobs"
# Short leases and backoffs so a lost worker is noticed in seconds, not minutes.
FAST = {
    "EVALHUB_ROLLOUT_BACKOFF_S": "0.05",
    "EVALHUB_ROLLOUT_BACKOFF_MAX_S": "0.2",
    "EVALHUB_LEASE_S": "3",
    "EVALHUB_REDISPATCH_INTERVAL_S": "0.5",
    "DATABASE_CONN_MAX_AGE": "0",
    "LOG_LEVEL": "INFO",
}


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


class Stack:
    """One test's processes. Every child is stopped at `close()`; the servers stay up for the
    next test (restarted if a test left them down)."""

    def __init__(self, *, redis: PrivateRedis, postgres: PrivatePostgres, db_url: str,
                 api_key: str, data_dir: Path):  # fmt: skip
        self.redis = redis
        self.postgres = postgres
        self.db_url = db_url
        self.api_key = api_key
        self.queue = f"faults-{uuid.uuid4().hex[:8]}"
        self.web_port = free_port()
        self.base = f"http://127.0.0.1:{self.web_port}"
        self.env = {
            **FAST,
            "DATABASE_URL": db_url,
            "REDIS_URL": redis.url,
            "EVALHUB_CELERY_QUEUE": self.queue,
            "EVALHUB_DATA_DIR": str(data_dir),
            "EVALHUB_PUBLIC_URL": self.base,
        }
        self.children: list[ChildProcess] = []
        self.restarts: list[tuple[str, int]] = []
        self.celery = Celery("faults", broker=redis.url)
        self.web: ChildProcess | None = None
        self.http = httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {api_key}"}, timeout=30
        )

    # --- processes ---------------------------------------------------------------------------
    def ping(self, worker: ChildProcess, timeout: float = 2.0) -> bool:
        """Does the worker answer a remote-control ping (its consumer loop is running)?"""
        replies = self.celery.control.ping(destination=[worker.node], timeout=timeout)
        return any(worker.node in reply for reply in replies)

    def worker(self, name: str = "worker", *, concurrency: int = 4, **env: str) -> ChildProcess:
        """A worker as production runs it (`celery worker --pool threads`), on this test's queue."""
        node = f"{name}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
        argv = [
            sys.executable, "-m", "celery", "-A", "evalhub", "worker", "-Q", self.queue,
            "-n", node, "--pool", "threads",
            "--concurrency", str(concurrency), "--loglevel", "INFO",
            "--without-gossip", "--without-mingle",
        ]  # fmt: skip
        child = ChildProcess(name, argv, servers.child_env(**{**self.env, **env}))
        child.node = node
        self.children.append(child)
        wait_until(
            lambda: "ready" in child.log() or child.proc.poll() is not None,
            timeout=60, what=f"worker {name} to start",
        )  # fmt: skip
        assert child.proc.poll() is None, child.log()
        return child

    def supervise(self, workers: list[ChildProcess], *, seconds: float) -> list[ChildProcess]:
        """Do what `make run`'s runner and compose do for `seconds`: start a worker again when
        it exits. Returns the workers now running."""
        deadline = time.monotonic() + seconds
        workers = list(workers)
        while time.monotonic() < deadline:
            for i, worker in enumerate(workers):
                if worker.proc.poll() is not None:
                    self.restarts.append((worker.name, worker.proc.returncode))
                    workers[i] = self.worker(f"{worker.name}-again")
            time.sleep(0.2)
        return workers

    def beat(self) -> ChildProcess:
        schedule = Path(self.env["EVALHUB_DATA_DIR"]) / f"beat-{uuid.uuid4().hex[:8]}"
        argv = [sys.executable, "-m", "celery", "-A", "evalhub", "beat", "--loglevel", "INFO",
                "--schedule", str(schedule)]  # fmt: skip
        child = ChildProcess("beat", argv, servers.child_env(**self.env))
        self.children.append(child)
        return child

    def start_web(self, **env: str) -> ChildProcess:
        merged = {k: v for k, v in {**self.env, **env}.items() if k != "EVALHUB_PUBLIC_URL"}
        web, _ = servers.start_web(port=self.web_port, **merged)
        self.children.append(web)
        self.web = web
        return web

    def report(self, *, tail: int = 6000) -> str:
        """Each child's exit code and the end of its log, and every job's seeds by status."""
        parts = []
        for child in self.children:
            parts.append(f"----- {child.name} (exit {child.proc.poll()})\n{child.log()[-tail:]}")
        try:
            rows = self.query(
                "SELECT j.id, j.status, j.runner_seen_at, j.dispatched_at, s.status AS seed_status,"
                " count(*) AS n FROM jobs_evaljob j JOIN jobs_seedrun s ON s.job_id = j.id"
                " GROUP BY 1, 2, 3, 4, 5 ORDER BY 1"
            )
            parts.append("----- jobs\n" + "\n".join(str(row) for row in rows))
        except Exception as exc:  # the database may be what broke
            parts.append(f"----- jobs: could not read them: {exc}")
        return "\n".join(parts)

    def close(self) -> None:
        for child in self.children:
            with contextlib.suppress(Exception):
                child.stop(timeout=5)
        self.http.close()
        self.celery.close()
        if not self.redis.ping():
            self.redis.start()
        if not self.postgres.ready():
            self.postgres.start()

    # --- the API --------------------------------------------------------------------------------
    def job_create(self, task_app_url: str, seeds: list[int], **overrides: Any) -> str:
        body = {
            "task_app_url": task_app_url,
            "task_app_api_key": "task-key-123",
            "env_name": "demo",
            "seeds": seeds,
            "policy": {"model": "gpt-4o-mini", "provider": "openai"},
            "env_config": {},
            "max_concurrent": 8,
            "timeout": 60,
        }
        body.update(overrides)
        response = self.http.post(JOBS, json=body)
        assert response.status_code == 201, response.text
        return response.json()["job_id"]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.query_one("SELECT status, error FROM jobs_evaljob WHERE id = %s", job_id)

    def job_wait(self, job_id: str, *, timeout: float) -> dict[str, Any]:
        def over():
            job = self.job(job_id)
            return job if job["status"] in ("completed", "failed", "cancelled") else None

        return wait_until(over, timeout=timeout, interval=0.2, what=f"job {job_id} to end")

    def health(self) -> dict[str, Any]:
        return httpx.get(f"{self.base}/healthz", timeout=5).json()

    def results(self, job_id: str) -> dict[str, Any]:
        response = self.http.get(f"{JOBS}/{job_id}/results")
        assert response.status_code == 200, response.text
        return response.json()

    # --- the database -----------------------------------------------------------------------------
    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with psycopg.connect(self.db_url, connect_timeout=5) as conn:
            cursor = conn.cursor(row_factory=psycopg.rows.dict_row)
            return cursor.execute(sql, params).fetchall()

    def query_one(self, sql: str, *params: Any) -> dict[str, Any]:
        rows = self.query(sql, *params)
        assert len(rows) == 1, rows
        return rows[0]

    def seeds(self, job_id: str) -> list[dict[str, Any]]:
        return self.query(
            "SELECT seed, status, error, attempts, score FROM jobs_seedrun WHERE job_id = %s"
            " ORDER BY seed",
            job_id,
        )

    def seed_counts(self, job_id: str) -> dict[str, int]:
        rows = self.query(
            "SELECT status, count(*) AS n FROM jobs_seedrun WHERE job_id = %s GROUP BY status",
            job_id,
        )
        return {r["status"]: r["n"] for r in rows}

    def seed_events(self, job_id: str) -> list[int]:
        rows = self.query(
            "SELECT data FROM jobs_jobevent WHERE job_id = %s"
            " AND type = 'eval.policy.seed.completed'",
            job_id,
        )
        return sorted(r["data"]["seed"] for r in rows)

    def llm_calls(self, job_id: str) -> list[dict[str, Any]]:
        return self.query(
            "SELECT c.http_status, c.request FROM traces_llmcall c"
            " JOIN jobs_rolloutattempt a ON a.id = c.attempt_id"
            " JOIN jobs_seedrun s ON s.id = a.seed_run_id WHERE s.job_id = %s",
            job_id,
        )


def elapsed_since(start: float) -> float:
    return round(time.monotonic() - start, 2)
