"""A job's samples: one `SeedRun` per seed and repeat, leased to the worker that runs it, and
one `RolloutAttempt` per try at it, with its own run id and interceptor token."""

from __future__ import annotations

from django.db import models

from jobs.models.jobs import EvalJob


class SeedStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


# How every seed error meaning "no connection to the environment" begins; a job whose every
# seed failed so ends `failed` (jobs.services.job_finish_if_done).
CONNECTION_ERROR_PREFIX = "task app unreachable"

TERMINAL_SEED_STATUSES = (SeedStatus.SUCCEEDED, SeedStatus.FAILED, SeedStatus.CANCELLED)


class JudgeStatus(models.TextChoices):
    """Where the verifier's judgement of a seed is (empty: no judge for this seed)."""

    NONE = ""
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


OPEN_JUDGE_STATUSES = (JudgeStatus.PENDING, JudgeStatus.RUNNING)
OPEN_SEED_STATUSES = (SeedStatus.PENDING, SeedStatus.RUNNING)


class SeedRunQuerySet(models.QuerySet):
    def rollouts_open(self) -> SeedRunQuerySet:
        """Samples whose rollout is still to run or running."""
        return self.filter(status__in=OPEN_SEED_STATUSES)

    def open(self) -> SeedRunQuerySet:
        """Samples with work left: their rollout, or their judgement (jobs/verifier/). A job
        with none is over; closing a job closes every one of them (jobs.ending.job_end)."""
        return self.filter(
            models.Q(status__in=OPEN_SEED_STATUSES) | models.Q(judge_status__in=OPEN_JUDGE_STATUSES)
        )


def _filled(field: str, condition: models.Q, *, name: str = "") -> models.Index:
    return models.Index(fields=[field], condition=condition, name=f"seedrun_{name or field}")


class SeedRun(models.Model):
    # The rows written as a rollout runs (this one twice, its attempt, event and LLM calls)
    # hold no index another one leads with (a foreign key's own), and partial ones (`_filled`)
    # on what most rows leave empty: each index is work for every rollout (test_migrations).
    job = models.ForeignKey(EvalJob, models.CASCADE, related_name="seed_runs", db_index=False)
    seed = models.BigIntegerField()
    # Which of the job's `repeats` samples of the seed this is (0, 1, ...).
    repeat = models.PositiveIntegerField(default=0)
    # A sample carried over from the parent job by a rerun, not run again.
    reused_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    status = models.CharField(max_length=16, choices=SeedStatus.choices, default=SeedStatus.PENDING)
    # Rollout attempts started (a `RolloutAttempt` each); `failures`, those the task app failed
    # (against EVALHUB_ROLLOUT_MAX_ATTEMPTS); `losses`, our own fault (its worker lost, our
    # interceptor unreachable): never charged to the task app, at most EVALHUB_SEED_MAX_LOSSES.
    attempts = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    losses = models.PositiveIntegerField(default=0)
    # Who holds the seed now and until when; an expired lease makes it claimable again.
    lease_owner = models.CharField(max_length=128, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Earliest time the next attempt may start (backoff after a transient failure).
    not_before = models.DateTimeField(null=True, blank=True)

    score = models.FloatField(null=True, blank=True)
    reward_mean = models.FloatField(null=True, blank=True)
    outcome_score = models.FloatField(null=True, blank=True)
    events_score = models.FloatField(null=True, blank=True)
    verifier_score = models.FloatField(null=True, blank=True)
    metrics = models.JSONField(null=True, blank=True)
    task_trace = models.JSONField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    # The verifier (jobs/verifier/): the task app's own score (whatever the reward source makes
    # of `score`), the judge's verdict or why none, its lease and token's SHA-256 as it judges.
    task_app_score = models.FloatField(null=True, blank=True)
    judge_status = models.CharField(
        max_length=16, choices=JudgeStatus.choices, blank=True, default=JudgeStatus.NONE
    )
    verifier_justification = models.TextField(null=True, blank=True)
    verifier_error = models.TextField(null=True, blank=True)
    judge_lease_owner = models.CharField(max_length=128, blank=True, default="")
    judge_lease_expires_at = models.DateTimeField(null=True, blank=True)
    judge_token_hash = models.CharField(max_length=64, blank=True, default="")
    judged_at = models.DateTimeField(null=True, blank=True)
    # In a re-judgement, the rollout of the original job this seed's judge reads.
    judged_rollout = models.ForeignKey(
        "RolloutAttempt", models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )

    objects = SeedRunQuerySet.as_manager()

    class Meta:
        ordering = ["job", "seed", "repeat"]
        constraints = [
            models.UniqueConstraint(fields=["job", "seed", "repeat"], name="seed_run_unique_sample")
        ]
        indexes = [
            models.Index(fields=["job", "status", "id"], name="seedrun_job_status_id"),
            _filled("reused_from", models.Q(reused_from__isnull=False)),
            _filled("judge_token_hash", ~models.Q(judge_token_hash=""), name="judge_token"),
            _filled("judged_rollout", models.Q(judged_rollout__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.seed}" + (f"r{self.repeat}" if self.repeat else "")


class AttemptStatus(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    # The task app failed this attempt (the seed may be tried again: see the seed run).
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Its worker stopped (lease expired) before the attempt ended.
    ABANDONED = "abandoned"


class RolloutAttempt(models.Model):
    """One POST /rollout for a seed. Each attempt has its own run id and interceptor token."""

    seed_run = models.ForeignKey(
        SeedRun, models.CASCADE, related_name="rollout_attempts", db_index=False
    )
    number = models.PositiveIntegerField()
    run_id = models.CharField(max_length=64)  # unique: see Meta
    # SHA-256 of the interceptor token; the token itself lives only in the inference URL.
    token_hash = models.CharField(max_length=64)  # unique: see Meta
    status = models.CharField(
        max_length=16, choices=AttemptStatus.choices, default=AttemptStatus.RUNNING
    )
    # The runner that made the attempt (host:pid:id), for finding its logs.
    worker = models.CharField(max_length=128, blank=True, default="")
    http_status = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    # LLM calls the interceptor let through for this attempt, counted in the database so that
    # its `max_llm_calls` holds however many web processes serve the calls (traces/interceptor).
    llm_calls_admitted = models.PositiveIntegerField(default=0, db_default=0)
    # In a replay (traces.calls.replay): the attempt's LLM calls numbered so far, however many
    # web processes serve them, and the first call that did not match its recording.
    replay_calls = models.PositiveIntegerField(default=0, db_default=0)
    replay_divergence = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["seed_run", "number"]
        # Not `unique=True`: PostgreSQL would have a second index on each, for LIKE.
        constraints = [
            models.UniqueConstraint(fields=["seed_run", "number"], name="attempt_unique_number"),
            models.UniqueConstraint(fields=["run_id"], name="attempt_unique_run_id"),
            models.UniqueConstraint(fields=["token_hash"], name="attempt_unique_token_hash"),
        ]

    def __str__(self) -> str:
        return self.run_id
