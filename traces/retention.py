"""Retention: what old jobs keep and what they drop.

What pruning keeps and drops (docs/trace-format.md, "Retention"): the job, its seed runs with
their scores, metrics and errors, its rollout attempts, and every LLM call row with its usage,
cost, timing and status stay, so results, summaries and costs read the same after pruning.
What goes is the heavy content: each call's request and response, the task app's own trace,
and the stored zip. A pruned call's request becomes `PRUNED_REQUEST`; its document shows
`"content_pruned": true`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobs.models import TERMINAL_JOB_STATUSES, EvalJob, SeedRun
from traces.models import LLMCall, TraceMember
from traces.zip.documents import PRUNED_REQUEST
from traces.zip.export import traces_zip_storage

logger = logging.getLogger(__name__)


@dataclass
class PruneReport:
    jobs: int = 0
    llm_calls: int = 0
    task_traces: int = 0
    zip_files: int = 0


def traces_prunable_jobs(*, older_than_days: int):
    """Terminal jobs finished more than `older_than_days` ago that still hold trace content."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    return (
        EvalJob.objects.filter(status__in=TERMINAL_JOB_STATUSES)
        .annotate(finished=Coalesce("completed_at", "created_at"))
        .filter(finished__lt=cutoff)
        .filter(
            Q(traces_zip_name__gt="")
            | Q(pk__in=SeedRun.objects.filter(task_trace__isnull=False).values("job_id"))
            | Q(
                pk__in=LLMCall.objects.exclude(request=PRUNED_REQUEST).values(
                    "attempt__seed_run__job_id"
                )
            )
        )
        .order_by("finished")
    )


def traces_prune(*, older_than_days: int, dry_run: bool = False) -> PruneReport:
    """Drop the heavy trace content of old terminal jobs. Safe to run twice or concurrently:
    every step is a conditional UPDATE or a delete of a file that may already be gone."""
    report = PruneReport()
    for job in traces_prunable_jobs(older_than_days=older_than_days).iterator(chunk_size=100):
        calls = LLMCall.objects.filter(attempt__seed_run__job=job).exclude(request=PRUNED_REQUEST)
        traces = SeedRun.objects.filter(job=job, task_trace__isnull=False)
        report.jobs += 1
        if dry_run:
            report.llm_calls += calls.count()
            report.task_traces += traces.count()
            report.zip_files += bool(job.traces_zip_name)
            continue
        with transaction.atomic():
            report.llm_calls += calls.update(request=PRUNED_REQUEST, response=None)
            # SQL NULL, not JSON null: the document then shows `"trace": null` either way.
            report.task_traces += traces.update(task_trace=None)
            TraceMember.objects.filter(seed_run__job=job).delete()  # made of what went
            name = job.traces_zip_name
            cleared = EvalJob.objects.filter(pk=job.pk, traces_zip_name=name).update(
                traces_zip_name=""
            )
        if name and cleared:
            storage = traces_zip_storage()
            if storage.exists(name):
                storage.delete(name)
            report.zip_files += 1
        logger.info("pruned the traces of job %s", job.id)
    return report
