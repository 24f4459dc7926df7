"""Celery tasks of the traces app."""

from __future__ import annotations

import logging

from django.conf import settings

from evalhub.celery import app
from traces.retention import traces_prune

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
