"""The web process SIGKILLed while LLM calls pass through its interceptor, and a cancel under
load: the job still ends with one result per seed, every call the provider received has its
row (written ahead before it was forwarded), those whose answer died with the process marked
lost with their usage unknown, which the job's figures and its zip report; and the cancel
answers and stops the job."""

from __future__ import annotations

import asyncio
import io
import json
import time
import zipfile

import pytest

from tests.faults.stack import JOBS, elapsed_since
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import task_app_create


class CountingProvider:
    """The fake provider, slowed down so calls are in flight, counting what it answered."""

    def __init__(self, inner, delay_s: float):
        self.inner = inner
        self.delay_s = delay_s
        self.in_flight = 0
        self.served = 0
        self.received = 0
        self.received_at = 0.0  # time.monotonic() of the last call received

    def quiet_s(self) -> float:
        """Seconds since the last call arrived."""
        return time.monotonic() - self.received_at

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            return await self.inner(scope, receive, send)
        self.received += 1
        self.received_at = time.monotonic()
        self.in_flight += 1
        try:
            await asyncio.sleep(self.delay_s)
            await self.inner(scope, receive, send)
            self.served += 1
        finally:
            self.in_flight -= 1


@pytest.fixture(scope="module")
def web_killed(private_services):
    from evalhub.fakeprovider import FakeOpenAI
    from tests.faults.stack import Stack

    stack = Stack(**private_services)
    provider = CountingProvider(FakeOpenAI(), delay_s=0.3)
    app, state = task_app_create(delay_s=0.05)
    seeds = list(range(60))
    try:
        with serve_asgi(provider) as provider_base, serve_asgi(app) as url:
            stack.env["OPENAI_BASE_URL"] = f"{provider_base}/v1"
            stack.env["OPENAI_API_KEY"] = "sk-fake"
            # Rows still in flight this long after their call started are marked lost.
            stack.env["EVALHUB_LLM_CALL_LOST_S"] = "4"
            # The stack's backoff is squeezed to at most 0.2 s, so the default ten losses a
            # seed may have fit inside the web's outage; what this checks is that a loss is
            # never charged to the task app, not where that budget ends.
            stack.env["EVALHUB_SEED_MAX_LOSSES"] = "200"
            web = stack.start_web()
            stack.worker("w1")
            stack.worker("w2")
            stack.beat()
            job_id = stack.job_create(url, seeds, max_concurrent=10,
                                      env_config={"call_llm": True})  # fmt: skip
            # Killed while the provider holds calls and none is on its way to it: calls arrive
            # in waves (each seed's call follows the one before it), and a kill as a wave
            # arrives leaves rows written ahead whose request had not left yet (lost, though
            # never received: usage unknown, over-counted, not missing).
            wait_until(lambda: provider.served >= 15 and provider.in_flight >= 3
                       and provider.quiet_s() >= 0.05, timeout=60, interval=0.01,
                       what="LLM calls held by the provider, none arriving")  # fmt: skip
            held = provider.in_flight  # calls the provider holds: their answers die with it
            web.kill()
            at_kill = {"served": provider.served, "in_flight": provider.in_flight, "held": held}
            recorded_at_kill = len(stack.llm_calls(job_id))
            time.sleep(1.0)
            stack.start_web()
            back = time.monotonic()
            stack.job_wait(job_id, timeout=120)
            done_s = elapsed_since(back)
            time.sleep(1.0)  # the writer's last batch
            swept = time.monotonic()
            wait_until(lambda: not _calls(stack, job_id, state="in_flight"), timeout=30,
                       what="the calls in flight at the kill to be marked lost")  # fmt: skip
            swept_s = elapsed_since(swept)
        yield {"stack": stack, "job_id": job_id, "seeds": seeds, "provider": provider,
               "at_kill": at_kill, "recorded_at_kill": recorded_at_kill, "done_s": done_s,
               "swept_s": swept_s}  # fmt: skip
    finally:
        stack.close()


def test_a_web_sigkill_leaves_one_result_per_seed(web_killed, measure):
    stack, job_id, seeds = web_killed["stack"], web_killed["job_id"], web_killed["seeds"]
    measure("web_sigkill.job_done_after_web_back_s", web_killed["done_s"])
    assert stack.job(job_id)["status"] == "completed"
    rows = stack.seeds(job_id)
    assert stack.seed_events(job_id) == seeds
    assert all(r["status"] in ("succeeded", "failed") for r in rows), rows


def test_no_seed_fails_because_the_web_process_was_killed(web_killed):
    rows = web_killed["stack"].seeds(web_killed["job_id"])
    failed = [(r["seed"], r["attempts"], r["error"]) for r in rows if r["status"] != "succeeded"]
    assert failed == []


def test_the_llm_calls_a_web_sigkill_leaves_unrecorded_are_none(web_killed, measure):
    stack, job_id, provider = web_killed["stack"], web_killed["job_id"], web_killed["provider"]
    at_kill = web_killed["at_kill"]
    rows = _calls(stack, job_id, state="done", http_status=200) + _calls(
        stack, job_id, state="lost"
    )
    measure("web_sigkill.provider_served_total", provider.served)
    measure("web_sigkill.calls_in_flight_at_kill", at_kill["held"])
    measure("web_sigkill.rows_at_kill", web_killed["recorded_at_kill"])
    measure("web_sigkill.llm_records_lost", max(0, provider.received - len(rows)))
    assert provider.received - len(rows) <= 0


def _calls(stack, job_id: str, **where: str) -> list[dict]:
    """The job's LLM call rows (state, status, refusal), those matching `where` (column = value)."""
    rows = stack.query(
        "SELECT c.state, c.http_status, c.refusal, c.total_tokens, c.cost_unknown"
        " FROM traces_llmcall c JOIN jobs_rolloutattempt a ON a.id = c.attempt_id"
        " JOIN jobs_seedrun s ON s.id = a.seed_run_id WHERE s.job_id = %s",
        job_id,
    )
    return [r for r in rows if all(r[k] == v for k, v in where.items())]


def test_every_call_the_provider_received_has_a_row(web_killed, measure):
    stack, job_id, provider = web_killed["stack"], web_killed["job_id"], web_killed["provider"]
    answered = _calls(stack, job_id, state="done", http_status=200)
    lost = _calls(stack, job_id, state="lost")
    measure("web_sigkill.provider_received", provider.received)
    measure("web_sigkill.calls_lost_usage_unknown", len(lost))
    measure("web_sigkill.lost_marked_s_after_job_end", web_killed["swept_s"])
    measure("web_sigkill.rows_never_received", len(answered) + len(lost) - provider.received)
    # Each received call was written ahead: answered, or lost with its answer. (A row written
    # ahead in the instant before its request left would be lost without being received.)
    assert provider.received <= len(answered) + len(lost), (provider.received, len(answered))
    assert len(answered) + len(lost) <= provider.received + 2
    # The calls the provider held at the kill never came back: their rows are lost.
    assert len(lost) >= web_killed["at_kill"]["held"] > 0
    assert all(r["total_tokens"] is None and r["cost_unknown"] for r in lost), lost


def test_the_job_figures_and_zip_count_the_lost_calls_as_unknown_usage(web_killed):
    stack, job_id = web_killed["stack"], web_killed["job_id"]
    lost = len(_calls(stack, job_id, state="lost"))
    summary = stack.results(job_id)["summary"]
    assert summary["llm_calls_usage_unknown"] == lost > 0
    assert summary["total_cost_usd"] is None and summary["seeds_with_unknown_cost"] >= 1
    response = stack.http.get(f"{JOBS}/{job_id}/traces", timeout=60)
    assert response.status_code == 200, response.text
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        documents = [json.loads(archive.read(name)) for name in archive.namelist()
                     if name.startswith("seeds/")]  # fmt: skip
    in_zip = [c for d in documents for c in d["llm_calls"] if c["status"] == "lost"]
    assert len(in_zip) == lost
    assert all(c["usage"]["unknown"] and c["cost_unknown"] for c in in_zip)
    assert sum(d["usage"]["llm_calls_usage_unknown"] for d in documents) == lost


def test_cancel_under_load_answers_2xx_and_stops_the_job(stack, measure):
    app, state = task_app_create(delay_s=0.5)
    seeds = list(range(400))
    with serve_asgi(app) as url:
        stack.start_web()
        stack.worker("w1", concurrency=4)
        stack.worker("w2", concurrency=4)
        job_id = stack.job_create(url, seeds, max_concurrent=40)
        wait_until(lambda: stack.seed_counts(job_id).get("succeeded", 0) >= 40
                   and state.in_flight >= 20, timeout=60, what="the job under load")  # fmt: skip
        started = time.monotonic()
        response = stack.http.post(f"/api/eval/jobs/{job_id}/cancel", timeout=15)
        measure("cancel.answer_s", elapsed_since(started))
        assert 200 <= response.status_code < 300, response.text
        wait_until(lambda: state.in_flight == 0 and not stack.seed_counts(job_id).get("running"),
                   timeout=15, what="the rollouts in flight to stop")  # fmt: skip
        measure("cancel.stopped_s", elapsed_since(started))
        calls = sum(state.seeds_called().values())
        time.sleep(2.0)
        assert sum(state.seeds_called().values()) == calls  # nothing new starts
    assert stack.job(job_id)["status"] == "cancelled"
    counts = stack.seed_counts(job_id)
    assert set(counts) <= {"succeeded", "cancelled"}, counts
    assert counts.get("cancelled", 0) > 0
