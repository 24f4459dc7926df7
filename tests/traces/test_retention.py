"""Retention: old terminal jobs lose their heavy trace content and keep their results."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs.models import EvalJob, SeedRun
from tests.support.trace_rows import make_traced_job
from traces.models import LLMCall
from traces.retention import traces_prune
from traces.zip import export
from traces.zip.documents import PRUNED_REQUEST

pytestmark = pytest.mark.django_db


def age(job: EvalJob, days: int) -> None:
    EvalJob.objects.filter(pk=job.pk).update(completed_at=timezone.now() - timedelta(days=days))


def test_prune_drops_content_of_old_terminal_jobs_and_keeps_results(client_alice, trace_storage):
    old = make_traced_job(seeds=[0, 1], calls_per_seed=2).job
    recent = make_traced_job(seeds=[0], calls_per_seed=2).job
    running = make_traced_job(seeds=[0], calls_per_seed=1, status="running").job
    age(old, 40), age(recent, 5), age(running, 40)
    b"".join(export.job_traces_chunks(job=old))  # the first download stores the zip
    zip_name = EvalJob.objects.get(pk=old.pk).traces_zip_name
    results_before = client_alice.get(f"/api/eval/jobs/{old.id}/results").json()

    report = traces_prune(older_than_days=30)

    assert (report.jobs, report.llm_calls, report.task_traces, report.zip_files) == (1, 4, 2, 1)
    assert not export.traces_zip_storage().exists(zip_name)
    assert EvalJob.objects.get(pk=old.pk).traces_zip_name == ""
    old_calls = LLMCall.objects.filter(attempt__seed_run__job=old)
    assert old_calls.count() == 4
    assert all(c.request == PRUNED_REQUEST and c.response is None for c in old_calls)
    assert not SeedRun.objects.filter(job=old, task_trace__isnull=False).exists()
    for kept in (recent, running):
        calls = LLMCall.objects.filter(attempt__seed_run__job=kept)
        assert not calls.filter(response__isnull=True).exists() and calls.exists()
        assert SeedRun.objects.filter(job=kept, task_trace__isnull=False).exists()
    # Scores, tokens and cost read the same as before.
    results_after = client_alice.get(f"/api/eval/jobs/{old.id}/results").json()
    assert results_after["summary"] == results_before["summary"]
    assert results_after["results"] == results_before["results"]
    # The zip is made again from what is left: calls marked as pruned.
    response = client_alice.get(f"/api/eval/jobs/{old.id}/traces")
    zf = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    document = json.loads(zf.read("seeds/seed_1.json"))
    assert [c["content_pruned"] for c in document["llm_calls"]] == [True, True]
    assert document["llm_calls"][0]["usage"]["total_tokens"] == 160
    assert document["task_app"]["trace"] is None and document["score"] == 0.25

    assert traces_prune(older_than_days=30).jobs == 1  # only the zip rebuilt just now
    assert traces_prune(older_than_days=30).jobs == 0


def test_dry_run_counts_and_changes_nothing():
    job = make_traced_job(seeds=[0], calls_per_seed=3).job
    age(job, 100)
    report = traces_prune(older_than_days=30, dry_run=True)
    assert (report.jobs, report.llm_calls, report.task_traces) == (1, 3, 1)
    assert not LLMCall.objects.filter(request=PRUNED_REQUEST).exists()


def test_command_uses_the_retention_setting_and_zero_keeps_forever(settings):
    job = make_traced_job(seeds=[0], calls_per_seed=1).job
    age(job, 10)
    settings.EVALHUB_TRACE_RETENTION_DAYS = 0
    out = io.StringIO()
    call_command("prunetraces", stdout=out)
    assert "kept forever" in out.getvalue()
    assert not LLMCall.objects.filter(request=PRUNED_REQUEST).exists()

    settings.EVALHUB_TRACE_RETENTION_DAYS = 7
    call_command("prunetraces", "--dry-run", stdout=out)
    assert "would prune 1 job(s)" in out.getvalue()
    call_command("prunetraces", stdout=out)
    assert "pruned 1 job(s) older than 7 day(s): 1 LLM call(s)" in out.getvalue()

    call_command("prunetraces", "--days", "30", stdout=out)
    assert "pruned 0 job(s)" in out.getvalue()


def test_daily_task_applies_the_retention_setting(settings):
    from evalhub.celery import app
    from traces.tasks import traces_prune_daily

    assert "traces.traces_prune_daily" in {e["task"] for e in app.conf.beat_schedule.values()}
    job = make_traced_job(seeds=[0], calls_per_seed=2).job
    age(job, 10)
    settings.EVALHUB_TRACE_RETENTION_DAYS = 0
    traces_prune_daily()
    assert not LLMCall.objects.filter(request=PRUNED_REQUEST).exists()
    settings.EVALHUB_TRACE_RETENTION_DAYS = 7
    traces_prune_daily()
    assert LLMCall.objects.filter(attempt__seed_run__job=job, request=PRUNED_REQUEST).count() == 2
