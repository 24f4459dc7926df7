"""The traces zip: content, safe names, no secrets, streamed chunk by chunk, stored once."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import EvalJob, SeedRun
from tests.support.trace_rows import TASK_APP_BEARER, TASK_APP_KEY, make_traced_job
from traces import tasks
from traces.models import LLMCall
from traces.zip import export, members

pytestmark = pytest.mark.django_db
JOBS = "/api/eval/jobs"


def download(client, job_id: str) -> zipfile.ZipFile:
    response = client.get(f"{JOBS}/{job_id}/traces")
    assert response.status_code == 200
    assert response.streaming and response["Content-Type"] == "application/zip"
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def test_zip_has_a_manifest_and_one_document_per_seed(client_alice, trace_schema):
    import jsonschema

    traced = make_traced_job(seeds=[0, 1, -3], calls_per_seed=2)
    zf = download(client_alice, traced.job.id)
    assert sorted(zf.namelist()) == [
        "manifest.json", "seeds/seed_-3.json", "seeds/seed_0.json", "seeds/seed_1.json",
    ]  # fmt: skip
    manifest = json.loads(zf.read("manifest.json"))
    assert manifest["job_id"] == traced.job.id and manifest["complete"] is True
    assert manifest["config"]["policy"]["model"] == "gpt-4o-mini"
    assert manifest["summary"]["num_seeds"] == 3 and manifest["summary"]["total_tokens"] == 3 * (
        160 + 170
    )
    assert sorted(f["path"] for f in manifest["files"]) == sorted(zf.namelist()[:-1])
    for name in zf.namelist():
        if name.startswith("seeds/"):
            document = json.loads(zf.read(name))
            jsonschema.validate(document, trace_schema)
            assert name == f"seeds/seed_{document['seed']}.json"
            assert len(document["llm_calls"]) == 2
            assert zf.read(name).startswith(b'{\n  "schema": "evalhub.trace/1"')


def test_entry_names_are_safe_relative_paths(client_alice, tmp_path):
    traced = make_traced_job(seeds=[-(2**62), 0, 2**62], calls_per_seed=1)
    zf = download(client_alice, traced.job.id)
    for info in zf.infolist():
        assert not info.filename.startswith(("/", "\\")) and ".." not in info.filename
        assert ":" not in info.filename and "\\" not in info.filename
    zf.extractall(tmp_path)
    assert (tmp_path / "seeds" / f"seed_{-(2**62)}.json").is_file()


def test_the_whole_zip_holds_no_secret_the_job_used(client_alice, provider_key):
    traced = make_traced_job(seeds=[0, 1, 2, 3], calls_per_seed=3)
    response = client_alice.get(f"{JOBS}/{traced.job.id}/traces")
    raw = b"".join(response.streaming_content)
    zf = zipfile.ZipFile(io.BytesIO(raw))
    texts = [raw] + [zf.read(name) for name in zf.namelist()]
    secrets = [TASK_APP_KEY, TASK_APP_BEARER, provider_key, *traced.tokens]
    for text in texts:
        for secret in secrets:
            assert secret.encode() not in text
    # The interceptor URLs were there, with their token masked.
    assert b"/api/interceptor/v1/<redacted>" in zf.read("seeds/seed_0.json")


def test_secrets_in_responses_and_in_rewritten_formats_are_masked(client_alice):
    """A provider's answer echoing a secret is masked; so is a secret that only appears once
    another wire format is read as chat (two Messages text blocks joined into one content)."""
    traced = make_traced_job(seeds=[0], calls_per_seed=2)
    token = traced.tokens[0]
    first, second = LLMCall.objects.filter(attempt__seed_run__job=traced.job).order_by("seq")
    first.response["choices"][0]["message"]["content"] = f"my key is {TASK_APP_KEY}"
    first.save()
    second.route = "messages"
    second.request = {
        "model": "claude",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "hi"}],
    }
    second.response = {"id": "msg_1", "model": "claude", "type": "message", "role": "assistant",
                       "content": [{"type": "text", "text": "send Bear"},
                                   {"type": "text", "text": f"er {token} along"}],
                       "stop_reason": "end_turn"}  # fmt: skip
    second.save()
    document = download(client_alice, traced.job.id).read("seeds/seed_0.json")
    assert TASK_APP_KEY.encode() not in document and token.encode() not in document
    calls = json.loads(document)["llm_calls"]
    assert calls[0]["response"]["message"]["content"] == "my key is <redacted>"
    assert calls[1]["response"]["message"]["content"] == "send Bearer <redacted> along"


def test_a_running_job_zip_holds_the_finished_seeds_and_is_not_stored(client_alice):
    traced = make_traced_job(seeds=[0, 1], calls_per_seed=1, status="running")
    make_running = SeedRun.objects.filter(job=traced.job, seed=1)
    make_running.update(status="running", finished_at=None)
    zf = download(client_alice, traced.job.id)
    assert sorted(zf.namelist()) == ["manifest.json", "seeds/seed_0.json"]
    manifest = json.loads(zf.read("manifest.json"))
    assert manifest["complete"] is False and manifest["status"] == "running"
    assert manifest["summary"]["num_pending"] == 1
    assert EvalJob.objects.get(pk=traced.job.pk).traces_zip_name == ""


def test_a_cancelled_job_with_rollouts_still_running_is_not_stored_yet(client_alice):
    traced = make_traced_job(seeds=[0, 1], calls_per_seed=1, status="cancelled")
    SeedRun.objects.filter(job=traced.job, seed=1).update(status="running", finished_at=None)
    assert download(client_alice, traced.job.id).namelist() == [
        "seeds/seed_0.json",
        "manifest.json",
    ]
    assert EvalJob.objects.get(pk=traced.job.pk).traces_zip_name == ""
    SeedRun.objects.filter(job=traced.job, seed=1).update(status="cancelled")
    assert len(download(client_alice, traced.job.id).namelist()) == 3
    assert EvalJob.objects.get(pk=traced.job.pk).traces_zip_name


def test_zip_stream_reads_seed_runs_chunk_by_chunk(monkeypatch):
    """Bounded memory: the first bytes leave before most seed runs are even read."""
    monkeypatch.setattr(members, "PAGE_SIZE", 2)
    monkeypatch.setattr(export, "ZIP_CHUNK_BYTES", 512)
    traced = make_traced_job(seeds=list(range(20)), calls_per_seed=1)
    stream = export.job_traces_zip_stream(job=traced.job)
    with CaptureQueriesContext(connection) as first:
        next(stream)
    with CaptureQueriesContext(connection) as rest:
        tail = b"".join(stream)

    def member_reads(ctx) -> int:  # one per page of seed runs
        return sum(q["sql"].startswith('SELECT "traces_tracemember"') for q in ctx.captured_queries)

    assert member_reads(first) == 1
    assert member_reads(rest) == 9  # the other pages, read as the stream goes on
    assert tail


def test_a_terminal_job_zip_is_built_once_into_storage_and_served_from_there(
    client_alice, trace_storage
):
    traced = make_traced_job(seeds=[0, 1], calls_per_seed=2)
    first = client_alice.get(f"{JOBS}/{traced.job.id}/traces")
    first_bytes = b"".join(first.streaming_content)
    job = EvalJob.objects.get(pk=traced.job.pk)
    assert job.traces_zip_name == f"traces/{job.id}.zip"
    storage = export.traces_zip_storage()
    assert storage.exists(job.traces_zip_name)
    # Served from storage: a row changed in place now does not change what is downloaded.
    LLMCall.objects.filter(attempt__seed_run__job=job).update(model_answered="changed")
    second = client_alice.get(f"{JOBS}/{traced.job.id}/traces")
    second_bytes = b"".join(second.streaming_content)
    assert second_bytes == first_bytes
    document = json.loads(zipfile.ZipFile(io.BytesIO(second_bytes)).read("seeds/seed_1.json"))
    assert document["llm_calls"][0]["model_answered"] == "gpt-4o-mini-2024-07-18"


def test_a_call_saved_after_the_zip_was_stored_has_it_built_again(client_alice, trace_storage):
    traced = make_traced_job(seeds=[0, 1], calls_per_seed=2)
    old_name = stored_zip_name(traced.job)
    late = LLMCall.objects.filter(attempt__seed_run__job=traced.job, attempt__seed_run__seed=0)
    call = late.order_by("seq").last()
    call.pk, call.seq = None, 3
    call.save()  # as the interceptor's writer saves a call a moment after answering it
    zf = download(client_alice, traced.job.id)
    assert len(json.loads(zf.read("seeds/seed_0.json"))["llm_calls"]) == 3
    job = EvalJob.objects.get(pk=traced.job.pk)
    assert job.traces_zip_name and job.traces_zip_calls.startswith("5:")
    stored = zipfile.ZipFile(export.traces_zip_storage().open(job.traces_zip_name))
    assert len(json.loads(stored.read("seeds/seed_0.json"))["llm_calls"]) == 3
    if job.traces_zip_name != old_name:  # stored under the same name, or the stale one is gone
        assert not export.traces_zip_storage().exists(old_name)


def test_store_is_idempotent_and_rebuilds_a_zip_gone_from_storage(client_alice, trace_storage):
    traced = make_traced_job(seeds=[4], calls_per_seed=1)
    name = stored_zip_name(traced.job)
    b"".join(export.job_traces_chunks(job=EvalJob.objects.get(pk=traced.job.pk)))
    assert EvalJob.objects.get(pk=traced.job.pk).traces_zip_name == name  # served, not rebuilt
    export.traces_zip_storage().delete(name)
    zf = download(client_alice, traced.job.id)
    assert "seeds/seed_4.json" in zf.namelist()
    assert export.traces_zip_storage().exists(EvalJob.objects.get(pk=traced.job.pk).traces_zip_name)


def test_a_worker_stores_an_ended_job_zip_that_downloads_then_read(client_alice, trace_storage):
    traced = make_traced_job(seeds=[0, 1], calls_per_seed=2, status="running")
    SeedRun.objects.filter(job=traced.job, seed=1).update(status="running", finished_at=None)
    assert export.job_traces_zip_store(job=EvalJob.objects.get(pk=traced.job.pk)) is None
    SeedRun.objects.filter(job=traced.job, seed=1).update(status="succeeded")
    EvalJob.objects.filter(pk=traced.job.pk).update(status="completed")
    tasks.job_traces_zip_build(traced.job.id)  # what the worker runs as the job ends
    job = EvalJob.objects.get(pk=traced.job.pk)
    assert job.traces_zip_name == f"traces/{job.id}.zip"
    stored = export.traces_zip_storage().open(job.traces_zip_name).read()
    assert export.job_traces_zip_store(job=job) == job.traces_zip_name  # not built again
    # The download reads storage: a row changed in place now does not change it.
    LLMCall.objects.filter(attempt__seed_run__job=job).update(model_answered="changed")
    downloaded = b"".join(client_alice.get(f"{JOBS}/{job.id}/traces").streaming_content)
    assert downloaded == stored
    names = zipfile.ZipFile(io.BytesIO(downloaded)).namelist()
    assert sorted(names) == ["manifest.json", "seeds/seed_0.json", "seeds/seed_1.json"]


def test_stored_zip_is_read_in_chunks(trace_storage, monkeypatch):
    monkeypatch.setattr(export, "READ_CHUNK_BYTES", 1024)
    traced = make_traced_job(seeds=list(range(10)), calls_per_seed=3)
    name = stored_zip_name(traced.job)
    chunks = list(export.stored_zip_chunks(storage=export.traces_zip_storage(), name=name))
    assert len(chunks) > 3 and max(len(c) for c in chunks) <= 1024
    assert zipfile.ZipFile(io.BytesIO(b"".join(chunks))).testzip() is None


def stored_zip_name(job: EvalJob) -> str:
    """Download a finished job's zip once (which stores it) and return its storage name."""
    b"".join(export.job_traces_chunks(job=job))
    name = EvalJob.objects.get(pk=job.pk).traces_zip_name
    assert name and export.traces_zip_storage().exists(name)
    return name
