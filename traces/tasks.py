"""Celery tasks of the traces app."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from evalhub.celery import app
from jobs.dispatch import TRACES_MEMBERS_TASK, TRACES_ZIP_TASK
from jobs.models import EvalJob
from traces.calls import recording
from traces.otel.export import job_traces_export
from traces.retention import traces_prune
from traces.zip.export import job_traces_zip_store
from traces.zip.members import job_members_build as members_build

log = logging.getLogger(__name__)


@app.task(name="traces.traces_prune_daily", ignore_result=True)
def traces_prune_daily() -> None:
    """Apply EVALHUB_TRACE_RETENTION_DAYS once a day (Celery beat); 0 keeps traces forever."""
    days = settings.EVALHUB_TRACE_RETENTION_DAYS
    if days == 0:
        return
    report = traces_prune(older_than_days=days)
    log.info(
        "pruned %d job(s) older than %d day(s): %d LLM call(s), %d task trace(s), %d zip(s)",
        report.jobs, days, report.llm_calls, report.task_traces, report.zip_files,
    )  # fmt: skip


@app.task(name="traces.llm_calls_lost_mark", ignore_result=True)
def llm_calls_lost_mark() -> None:
    """Mark lost the LLM calls in flight for EVALHUB_LLM_CALL_LOST_S (Celery beat): their web
    process died with them, their usage is unknown."""
    older_than = timezone.now() - timedelta(seconds=settings.EVALHUB_LLM_CALL_LOST_S)
    lost = recording.llm_calls_lost_mark(older_than=older_than)
    if lost:
        log.warning("%d LLM call(s) lost with their web process: usage unknown", lost)


@app.task(name=TRACES_ZIP_TASK, ignore_result=True)
def job_traces_zip_build(job_id: str) -> None:
    """Build and store the zip of a job that just ended (sent by `jobs.services` when it ends),
    so that its first download is read from storage, and queue the traces of its samples not
    exported yet when export is on (traces.otel.export); safe to deliver twice."""
    job = EvalJob.objects.filter(pk=job_id).first()
    if job is not None:
        job_traces_zip_store(job=job)
        job_traces_export(job_id=job_id)


@app.task(name=TRACES_MEMBERS_TASK, ignore_result=True)
def job_members_build(job_id: str) -> None:
    """Build the zip members of the seeds a running job finished lately (sent by its runners),
    so its zip is assembled, not built, when it ends, and queue the traces of those that are
    final when export is on (traces.otel.export); safe to deliver twice."""
    members_build(job_id=job_id)
    job_traces_export(job_id=job_id)
