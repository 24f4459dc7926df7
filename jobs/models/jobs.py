"""The job: one `EvalJob` row per eval job, its status and what it was asked to run."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models


def new_job_id() -> str:
    return f"eval-{secrets.token_hex(16)}"


class JobStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_JOB_STATUSES = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)
# Jobs ending (`EvalJob.is_ending` as a query): marked by jobs.ending, status not yet written.
ENDING_JOBS = models.Q(
    status__in=[JobStatus.PENDING, JobStatus.RUNNING], completed_at__isnull=False
)


class EvalJob(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_job_id, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="eval_jobs"
    )
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING)
    error = models.TextField(null=True, blank=True)

    task_app_url = models.CharField(max_length=2048)
    # What speaks at task_app_url: a synth task app, an MCP-Gym or OpenEnv server (jobs.kinds).
    task_app_kind = models.CharField(max_length=16, default="synth")
    # Fernet ciphertext (evalhub.crypto); empty when the client sent no key.
    task_app_api_key_encrypted = models.TextField(blank=True, default="")
    app_id = models.CharField(max_length=255, null=True, blank=True)
    env_name = models.CharField(max_length=255, null=True, blank=True)
    policy = models.JSONField(default=dict)
    env_config = models.JSONField(default=dict)
    verifier_config = models.JSONField(null=True, blank=True)
    mode = models.CharField(max_length=8, default="eval")
    max_concurrent = models.PositiveIntegerField(default=5)
    timeout_s = models.FloatField(default=600.0)
    max_cost_usd = models.FloatField(null=True, blank=True)
    max_tokens = models.BigIntegerField(null=True, blank=True)
    # What one rollout attempt may spend: {max_llm_calls, max_tokens, max_cost_usd} (any).
    rollout_limits = models.JSONField(null=True, blank=True)
    num_seeds = models.PositiveIntegerField(default=0)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Storage name of the finished traces zip, once built.
    traces_zip_name = models.CharField(max_length=512, blank=True, default="")
    # The job's LLM calls ("<count>:<newest id>") as that zip was built: one saved since redoes it.
    traces_zip_calls = models.CharField(max_length=64, blank=True, default="")
    # When a worker began building the members of its zip (traces.zip.members): one at a time.
    traces_members_at = models.DateTimeField(null=True, blank=True)
    # Last sign of life of a runner working on the job, and the last time the job was handed to
    # the workers: the periodic re-dispatch uses both to find jobs nobody is working on.
    runner_seen_at = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # The client's `Idempotency-Key` of the create, and a keyed hash of the request it came
    # with: a retry with the same key gets this job back instead of a second one.
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    request_fingerprint = models.CharField(max_length=64, blank=True, default="")
    # A re-judgement (POST .../judge) is a job of its own that reuses this job's rollouts and
    # only judges them again with another verifier_config (jobs/verifier/).
    judged_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="rejudgements"
    )
    # Samples per seed, what a sample must score to pass, and when to stop a broken job: more
    # failed samples than `max_failures` (>= 1 a count, else a fraction): jobs.stats, .stopping.
    repeats = models.PositiveIntegerField(default=1)
    # The job's samples (its seed runs): num_seeds x repeats, or for a re-judgement the
    # rollouts it judges again. Set when the job is made; what every progress counts towards.
    num_samples = models.PositiveIntegerField(default=0)
    pass_threshold = models.FloatField(default=1.0)
    max_failures = models.FloatField(null=True, blank=True)
    # What people call the job, and how they find it again.
    name = models.CharField(max_length=200, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # Where the job's score figures come from (`RewardSource`, jobs.labels): its samples' own
    # scores, or people's labels where a sample has them ("human_else_task_app").
    reward_source = models.CharField(max_length=32, blank=True, default="")
    # The job this one reran (POST /rerun), if any.
    parent_job = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns"
    )
    # The job whose recorded LLM answers this one replays (docs/replay.md; none: empty), and
    # what a call missing its recording gets: "fail" (the sample fails) or "call" (live).
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays"
    )
    replay_on_miss = models.CharField(max_length=4, blank=True, default="", db_default="")
    # {"scope": "job" | "account", "ttl_s": seconds}: a call identical to an earlier one of the
    # same repeat index (in this job, or any job of the account) is answered with its answer.
    cache = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["owner", "-created_at"]),
            models.Index(fields=["owner", "status"]),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="job_unique_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_JOB_STATUSES

    @property
    def is_ending(self) -> bool:
        """Cancelled or failed, its samples being closed: no claim takes anything from it, and
        its status follows once they are (jobs.ending.job_end). `ENDING_JOBS` in a query."""
        return not self.is_terminal and self.completed_at is not None

    @property
    def has_task_app_api_key(self) -> bool:
        return bool(self.task_app_api_key_encrypted)
