"""GET /api/eval/jobs/{id}/seeds/{seed}: one seed's result row and trace document."""

from __future__ import annotations

import pytest

from tests.support.trace_rows import TASK_APP_KEY, make_traced_job

pytestmark = pytest.mark.django_db
JOBS = "/api/eval/jobs"


def test_seed_shows_its_result_row_and_trace_document(client_alice):
    traced = make_traced_job(username="alice", seeds=[3, -2], calls_per_seed=2)
    response = client_alice.get(f"{JOBS}/{traced.job.id}/seeds/-2")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["job_id"] == traced.job.id and body["seed"] == -2
    results = client_alice.get(f"{JOBS}/{traced.job.id}/results").json()["results"]
    assert body["result"] == next(r for r in results if r["seed"] == -2)
    assert body["trace"]["schema"] == "evalhub.trace/1"
    assert len(body["trace"]["llm_calls"]) == 2
    assert TASK_APP_KEY not in response.content.decode()
    assert not any(token in response.content.decode() for token in traced.tokens)


@pytest.mark.parametrize("seed", ["99", "abc", "1.5", "99999999999999999999999"])
def test_unknown_seed_is_404(client_alice, seed):
    traced = make_traced_job(username="alice", seeds=[1], calls_per_seed=1)
    assert client_alice.get(f"{JOBS}/{traced.job.id}/seeds/{seed}").status_code == 404


def test_another_accounts_seed_is_404(client_alice, client_bob):
    traced = make_traced_job(username="alice", seeds=[1], calls_per_seed=1)
    assert client_bob.get(f"{JOBS}/{traced.job.id}/seeds/1").status_code == 404
    assert client_alice.get(f"{JOBS}/{traced.job.id}/seeds/1").status_code == 200
