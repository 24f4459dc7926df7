"""`evalhub replay` (the installed executable of .venv-client) against a real evalhub: a job
whose LLM calls went through the interceptor to the fake provider, replayed without reaching it
and with the same scores; the replay's errors and its `--idempotency-key`."""

from __future__ import annotations

import json

import pytest

from tests.client.test_cli import job_file, submitted
from tests.support import servers
from tests.support.jobs import FAST
from tests.support.servers import serve_asgi
from tests.support.task_app import task_app_create

pytestmark = pytest.mark.worker

SEEDS = [0, 1, 2, 3]


def scores(evalhub, job_id: str, env: dict[str, str]) -> tuple[dict[int, float], dict]:
    read = json.loads(evalhub("results", job_id, "--format", "json", env=env).stdout)
    return {r["seed"]: r["score"] for r in read["results"]}, read["summary"]


def test_a_replay_reaches_no_provider_and_gives_the_same_scores(
    evalhub, worker_factory, fake_upstream, celery_queue, tmp_path
):
    web, base = servers.start_web(
        OPENAI_BASE_URL=fake_upstream.url,
        OPENAI_API_KEY="sk-fake",
        EVALHUB_CELERY_QUEUE=celery_queue,
    )
    here = {"EVALHUB_URL": base}
    app, _ = task_app_create()
    try:
        with serve_asgi(app) as url:
            worker_factory(EVALHUB_PUBLIC_URL=base, **FAST)
            path = job_file(tmp_path, url, "recorded", seeds=SEEDS, env_config={"call_llm": "chat"})
            original = submitted(evalhub("submit", str(path), "--watch", "--json", env=here))
            before, recorded = scores(evalhub, original, here)
            fake_upstream.reset()
            done = evalhub("replay", original, "--watch", env=here)
            some = evalhub("replay", original, "--seeds", "1,3", "--on-miss", "call",
                           "--task-app-url", url, "--watch", "--json", env=here)  # fmt: skip
            after, summary = scores(evalhub, submitted(done), here)
            chosen, _ = scores(evalhub, submitted(some), here)
    finally:
        web.stop()
    assert fake_upstream.received == []
    assert recorded["live_calls"] == 2 * len(SEEDS)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert f"replays {original}" in done.stdout and "replayed calls" in done.stdout
    assert after == before and len(after) == len(SEEDS)
    assert (summary["replayed_calls"], summary["live_calls"], summary["divergences"]) == (
        2 * len(SEEDS), 0, 0)  # fmt: skip
    assert summary["total_cost_usd"] == 0
    lines = [json.loads(line) for line in some.stdout.splitlines()]
    assert (lines[0]["config"]["replay_of"], lines[0]["config"]["replay_on_miss"]) == (
        original, "call")  # fmt: skip
    assert lines[-1]["status"] == "completed" and lines[-1]["summary"]["replayed_calls"] == 4
    assert chosen == {seed: before[seed] for seed in (1, 3)}


def one_line(done, code: int, *words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert all(word in done.stderr for word in words), done.stderr


def test_replay_errors_and_an_idempotency_key(evalhub, tmp_path):
    path = job_file(tmp_path, "http://127.0.0.1:9", "unrun", seeds=[1, 2])
    job_id = json.loads(evalhub("submit", str(path), "--json").stdout)["job_id"]
    one_line(evalhub("replay", job_id), 3, job_id, "replay it once it ends")
    assert evalhub("cancel", job_id).returncode == 0
    first = evalhub("replay", job_id, "--seeds", "2", "--idempotency-key", "ci-7", "--json")
    again = evalhub("replay", job_id, "--seeds", "2", "--idempotency-key", "ci-7", "--json")
    assert first.returncode == 0 and again.returncode == 0, (first.stderr, again.stderr)
    made = json.loads(first.stdout)
    assert json.loads(again.stdout)["job_id"] == made["job_id"]
    assert made["config"]["replay_of"] == job_id and made["results"]["total"] == 1
    one_line(evalhub("replay", job_id, "--idempotency-key", "ci-7"), 5, "Idempotency-Key")
    one_line(evalhub("replay", job_id, "--seeds", "9"), 5, "replay refused", "seeds", "[9]")
    one_line(evalhub("replay", job_id, "--task-app-url", "ftp://x"), 5, "task_app_url")
    one_line(evalhub("replay", job_id, "--on-miss", "retry"), 64, "--on-miss")
    one_line(evalhub("replay", job_id, "--seeds", "one"), 64, "--seeds")
    one_line(evalhub("replay", "nope"), 4, "nope")
    evalhub("cancel", made["job_id"])
