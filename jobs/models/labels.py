"""People's labels of samples (jobs.labels) and where a job's score figures come from."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from jobs.models.samples import SeedRun


class Verdict(models.TextChoices):
    """What a person says of a sample (jobs.labels)."""

    PASS = "pass"
    FAIL = "fail"
    UNSURE = "unsure"


class RewardSource(models.TextChoices):
    """Where a job's score figures come from (`EvalJob.reward_source`, jobs.labels)."""

    JOB = "", "the samples' own scores"
    HUMAN_ELSE_TASK_APP = "human_else_task_app", "people's labels where present, else the job's"


class SampleLabel(models.Model):
    """A person's label of one sample: made by hand, so nothing automatic removes it (a retry
    keeps the seed run, a rerun or a re-judgement points at it, retention prunes trace content
    only). One per author and sample, edited in place by its author (jobs.labels)."""

    seed_run = models.ForeignKey(SeedRun, on_delete=models.CASCADE, related_name="labels")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    verdict = models.CharField(max_length=8, choices=Verdict.choices)
    # The score the person would have given, in [0, 1]; None: only the verdict.
    score = models.FloatField(null=True, blank=True)
    notes = models.TextField(blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["seed_run", "created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["seed_run", "author"], name="label_unique_author")
        ]
