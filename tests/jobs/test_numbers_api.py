"""Repeats, names, tags and search, rerun (what it copies), compare's errors and the exports,
through the API on rows written as the workers write them (tests/frontend/job_rows.py)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.contrib.auth import get_user_model

from evalhub.fakeprovider import wire as fake_wire
from jobs.models import EvalJob, SeedRun
from jobs.stopping import failure_limit
from tests.frontend.job_rows import TASK_APP_KEY, job_finish, job_make, job_start, seed_complete
from tests.jobs.test_api import create
from traces.models import LLMCall
from traces.results import totals

JOBS = "/api/eval/jobs"


def fields_of(response) -> dict:
    assert response.status_code == 400, response.content
    return response.json()["fields"]


def test_create_with_repeats_name_tags_and_metadata_makes_a_sample_per_repeat(client_alice):
    response = create(
        client_alice, seeds=[4, 7], repeats=3, name="gsm8k nightly", tags=["nightly", "gpt-4o"],
        metadata={"commit": "abc123"}, pass_threshold=0.5, max_failures=0.25,
    )  # fmt: skip
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["tags"], body["metadata"]) == (
        "gsm8k nightly", ["nightly", "gpt-4o"], {"commit": "abc123"},
    )  # fmt: skip
    assert body["config"]["repeats"] == 3 and body["config"]["pass_threshold"] == 0.5
    assert body["results"]["total"] == 6
    assert EvalJob.objects.get(pk=body["job_id"]).num_samples == 6
    pairs = SeedRun.objects.filter(job_id=body["job_id"]).values_list("seed", "repeat")
    assert sorted(pairs) == [(s, k) for s in (4, 7) for k in range(3)]
    assert failure_limit(EvalJob.objects.get(pk=body["job_id"])) == 1  # 0.25 of 6 samples


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"repeats": 0}, "repeats"),
        ({"repeats": 101}, "repeats"),
        ({"repeats": "2"}, "repeats"),
        ({"max_failures": 1.5}, "max_failures"),
        ({"max_failures": 0}, "max_failures"),
        ({"tags": ["has space"]}, "tags"),
        ({"tags": "nightly"}, "tags"),
        ({"metadata": [1]}, "metadata"),
        ({"name": "x" * 201}, "name"),
        ({"pass_threshold": "high"}, "pass_threshold"),
    ],
)
def test_bad_numbers_fields_are_a_400_naming_the_field(client_alice, overrides, field):
    assert field in fields_of(create(client_alice, **overrides))


def test_seeds_times_repeats_is_bounded_by_the_seed_limit(client_alice, settings):
    settings.EVALHUB_MAX_SEEDS = 10
    fields = fields_of(create(client_alice, seeds=list(range(4)), repeats=3))
    assert "at most 10 samples" in fields["repeats"][0]


def test_the_list_filters_by_tag_and_searches_names_app_ids_models_and_env_names(client_alice):
    def made(**overrides) -> str:
        return create(client_alice, **overrides).json()["job_id"]

    nightly = made(name="Nightly math", tags=["nightly"])
    other = made(app_id="Weather-App", tags=["nightly-old"], policy={"model": "claude-x"})
    plain = made(env_name="crafter")

    def listed(query: str) -> list[str]:
        response = client_alice.get(f"{JOBS}?{query}")
        assert response.status_code == 200, response.content
        return [j["job_id"] for j in response.json()["jobs"]]

    assert listed("tag=nightly") == [nightly]
    assert listed("tag=NIGHTLY-old") == [other]
    assert listed("q=nightly") == [nightly]
    assert listed("q=weather") == [other]
    assert listed("q=CLAUDE") == [other]
    assert listed("q=crafter") == [plain]
    assert listed("q=gpt-4o-mini") == [plain, nightly]
    assert "q" in fields_of(client_alice.get(f"{JOBS}?q={'x' * 201}"))


@pytest.fixture
def alice(db):
    return get_user_model().objects.get_or_create(username="alice")[0]


def finished_job(owner, scores: dict[int, float | None], **spec) -> EvalJob:
    """A finished job; a None score is a failed seed."""
    job = job_make(owner=owner, seeds=list(scores), **spec)
    job_start(job=job)
    for seed_run in SeedRun.objects.filter(job=job):
        score = scores[seed_run.seed]
        seed_complete(seed_run=seed_run, score=score, error=None if score is not None else "boom")
    job_finish(job=job)
    return job


def test_rerun_failed_copies_the_successes_with_their_traces_and_costs(client_alice, alice):
    parent = finished_job(alice, {0: 1.0, 1: None, 2: 0.5})
    answer = client_alice.post(f"{JOBS}/{parent.id}/rerun", {}, format="json")  # "failed"
    assert answer.status_code == 201, answer.content
    child = EvalJob.objects.get(pk=answer.json()["job_id"])
    assert child.parent_job_id == parent.id and child.num_seeds == 3
    runs = {r.seed: r for r in SeedRun.objects.filter(job=child)}
    assert {s: (r.status, r.score) for s, r in runs.items()} == {
        0: ("succeeded", 1.0), 1: ("pending", None), 2: ("succeeded", 0.5)
    }  # fmt: skip
    assert runs[0].reused_from.job_id == parent.id and runs[1].reused_from is None
    parent_usage = totals.seed_usage(job=parent)
    child_usage = totals.seed_usage(job=child)
    parent_runs = {r.seed: r.id for r in SeedRun.objects.filter(job=parent)}
    for seed in (0, 2):
        assert child_usage[runs[seed].id] == parent_usage[parent_runs[seed]]
    assert 1 not in {s for s, r in runs.items() if r.id in child_usage}
    trace = client_alice.get(f"{JOBS}/{child.id}/seeds/0").json()
    assert trace["trace"]["reused"] is True and len(trace["trace"]["llm_calls"]) == 2
    assert LLMCall.objects.filter(attempt__seed_run__job=child).count() == 4


def test_rerun_all_or_some_seeds_with_another_policy_runs_them_fresh(client_alice, alice):
    parent = finished_job(alice, {0: 1.0, 1: None, 2: 0.5}, repeats=2)
    answer = client_alice.post(
        f"{JOBS}/{parent.id}/rerun", {"seeds": [2, 0], "policy": {"model": "gpt-4.1"}},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 201, answer.content
    child = EvalJob.objects.get(pk=answer.json()["job_id"])
    assert child.policy == {"model": "gpt-4.1"} and child.repeats == 2
    pairs = SeedRun.objects.filter(job=child, status="pending").values_list("seed", "repeat")
    assert sorted(pairs) == [(0, 0), (0, 1), (2, 0), (2, 1)]
    assert child.num_samples == 4
    everything = client_alice.post(f"{JOBS}/{parent.id}/rerun", {"seeds": "all"}, format="json")
    assert everything.json()["results"]["pending"] == 6
    assert everything.json()["results"]["total"] == 6


def test_a_rejudgement_counts_the_rollouts_it_judges_as_its_samples(client_alice, alice):
    parent = finished_job(alice, {0: 1.0, 1: None, 2: 0.5}, repeats=2)
    answer = client_alice.post(
        f"{JOBS}/{parent.id}/judge", {"verifier_config": {"reward_source": "verifier"}},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 201, answer.content
    judged = EvalJob.objects.get(pk=answer.json()["job_id"])
    assert judged.num_samples == 4 == SeedRun.objects.filter(job=judged).count()
    assert answer.json()["results"]["total"] == 4


def test_rerun_refusals_name_what_to_fix(client_alice, client_bob, alice):
    parent = finished_job(alice, {0: 1.0, 1: None})
    url = f"{JOBS}/{parent.id}/rerun"
    assert "seeds" in fields_of(client_alice.post(url, {"seeds": [0, 9]}, format="json"))
    assert "seeds" in fields_of(client_alice.post(url, {"seeds": "some"}, format="json"))
    assert "policy" in fields_of(
        client_alice.post(url, {"seeds": "failed", "policy": {"model": "m"}}, format="json")
    )
    assert client_bob.post(url, {}, format="json").status_code == 404
    running = job_make(owner=alice, seeds=[0])
    busy = client_alice.post(f"{JOBS}/{running.id}/rerun", {}, format="json")
    assert busy.status_code == 409 and busy.json()["error"] == "job_not_finished"


@pytest.mark.parametrize("raw", ["[3]", '"all"', "3", "null"])
def test_a_rerun_body_that_is_not_an_object_is_400_not_the_defaults(client_alice, alice, raw):
    parent = finished_job(alice, {0: 1.0, 1: None, 3: None})
    url = f"{JOBS}/{parent.id}/rerun"
    answer = client_alice.post(url, raw, content_type="application/json")
    assert "body" in fields_of(answer)
    assert not EvalJob.objects.filter(parent_job_id=parent.id).exists()
    assert client_alice.post(url).status_code == 201  # no body at all: the defaults


def test_compare_needs_two_owned_jobs(client_alice, client_bob, alice):
    job = finished_job(alice, {0: 1.0})
    fields = fields_of(client_alice.get(f"/api/eval/compare?base={job.id}"))
    assert fields == {"candidate": ["is required"]}
    other = client_bob.get(f"/api/eval/compare?base={job.id}&candidate={job.id}")
    assert other.status_code == 404 and "base" in other.json()["detail"]
    same = client_alice.get(f"/api/eval/compare?base={job.id}&candidate={job.id}").json()
    assert (same["ties"], same["mean_difference"], same["p_value"]) == (1, 0.0, 1.0)


def test_results_csv_has_a_row_per_sample_without_secrets(client_alice, alice):
    job = finished_job(alice, {0: 1.0, 1: None, 2: 0.5}, repeats=1)
    SeedRun.objects.filter(job=job, seed=1).update(error=f"key {TASK_APP_KEY} refused")
    response = client_alice.get(f"{JOBS}/{job.id}/results.csv")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    text = b"".join(response.streaming_content).decode()
    assert TASK_APP_KEY not in text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["seed"], r["repeat"], r["status"], r["score"]) for r in rows] == [
        ("0", "0", "succeeded", "1.0"), ("1", "0", "failed", ""), ("2", "0", "succeeded", "0.5")
    ]  # fmt: skip
    assert "redacted" in rows[1]["error"] and rows[0]["tokens"] == "332"


def test_sft_export_is_the_conversation_of_each_passing_sample(client_alice, alice):
    job = finished_job(alice, {0: 1.0, 1: None, 2: 0.5})
    response = client_alice.get(f"{JOBS}/{job.id}/export/sft.jsonl?min_score=0.9")
    assert response.status_code == 200
    lines = [json.loads(x) for x in b"".join(response.streaming_content).decode().splitlines()]
    assert [(x["seed"], x["score"]) for x in lines] == [(0, 1.0)]
    messages = lines[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2]["tool_calls"][0]["function"]["name"] == "multiply"
    assert messages[-1]["content"] == "17 * 23 = 391"
    assert lines[0]["tools"][0]["function"]["name"] == "multiply"
    every = client_alice.get(f"{JOBS}/{job.id}/export/sft.jsonl")
    assert len(b"".join(every.streaming_content).decode().splitlines()) == 2
    bad = client_alice.get(f"{JOBS}/{job.id}/export/sft.jsonl?min_score=nan")
    assert "min_score" in fields_of(bad)


def test_sft_export_reads_the_policys_calls_whichever_wire_format(client_alice, alice):
    job = finished_job(alice, {0: 1.0, 1: 0.5})
    calls = LLMCall.objects.filter(attempt__seed_run__job=job).order_by("seq")
    last = calls.filter(attempt__seed_run__seed=0).last()
    chat_line = {"messages": [*last.request["messages"], last.response["choices"][0]["message"]],
                 "tools": last.request["tools"], "seed": 0, "repeat": 0, "score": 1.0}  # fmt: skip
    # The judge's call, recorded on the attempt it judged after the policy's, is no sample.
    judge = LLMCall.objects.get(pk=last.pk)
    judge.pk, judge.seq, judge.kind = None, 3, "judge"
    judge.request = {"messages": [{"role": "user", "content": "Grade this."}]}
    judge.save()
    # Seed 1's policy spoke Responses, its second call on the response of the first.
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    first = {"model": "o4-mini", "instructions": "Be brief.", "input": "Weather in Lyon?",
             "tools": tools}  # fmt: skip
    output = {"type": "function_call_output", "call_id": "call_fake_1", "output": "12 C"}
    second = {"model": "o4-mini", "previous_response_id": "resp_1", "input": [output],
              "tools": tools}  # fmt: skip
    for call, request, answer_id in zip(
        calls.filter(attempt__seed_run__seed=1), (first, second), ("resp_1", "resp_2"), strict=True
    ):
        call.route, call.request = "responses", request
        call.response = fake_wire.response(request) | {"id": answer_id}
        call.save()

    response = client_alice.get(f"{JOBS}/{job.id}/export/sft.jsonl")
    text = b"".join(response.streaming_content).decode()
    chat, responses = text.splitlines()
    assert chat == json.dumps(chat_line)  # a chat completion's sample, as it always was
    line = json.loads(responses)
    assert [m["role"] for m in line["messages"]] == ["system", "user", "assistant", "tool",
                                                     "assistant"]  # fmt: skip
    assert line["messages"][2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert line["messages"][3] == {"role": "tool", "tool_call_id": "call_fake_1", "content": "12 C"}
    assert line["messages"][-1] == {"role": "assistant", "content": "You said: 12 C"}
    assert line["tools"][0]["function"]["name"] == "get_weather"
    assert (line["seed"], line["score"]) == (1, 0.5)


def test_metadata_is_bounded_and_the_list_leaves_it_out(client_alice, settings):
    """`metadata` up to EVALHUB_MAX_METADATA_BYTES serialized; the list leaves it out (a page
    of 200 jobs of 64 KiB each would be 12.5 MiB), the job's own status has it whole."""
    big = {"notes": "x" * (64 * 1024)}
    assert "metadata" in fields_of(create(client_alice, metadata=big))
    assert (
        "EVALHUB_MAX_METADATA_BYTES" in fields_of(create(client_alice, metadata=big))["metadata"][0]
    )
    fits = {"notes": "é" * 30_000, "run": 7}  # 60,000 bytes of UTF-8
    ids = [create(client_alice, metadata=fits).json()["job_id"] for _ in range(3)]
    listed = client_alice.get(f"{JOBS}?limit=10")
    assert listed.status_code == 200 and len(listed.content) < 20_000, len(listed.content)
    assert [j["job_id"] for j in listed.json()["jobs"]] == ids[::-1]
    assert all("metadata" not in j for j in listed.json()["jobs"])
    assert client_alice.get(f"{JOBS}/{ids[0]}").json()["metadata"] == fits
    settings.EVALHUB_MAX_METADATA_BYTES = 20
    assert "metadata" in fields_of(create(client_alice, metadata={"k": "v" * 20}))
    assert create(client_alice, metadata={"k": "v"}).status_code == 201
