"""Eval jobs as rows: the database is the source of truth for work.

A job is one `EvalJob` and one `SeedRun` per seed. Workers claim pending seed runs and hold a
lease while they work; each try at a seed is a `RolloutAttempt` with its own run id and
interceptor token. `JobEvent` rows are the numbered events clients can follow.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models


def new_job_id() -> str:
    return f"eval-{secrets.token_hex(16)}"


class ApiKey(models.Model):
    """An API key. Only its SHA-256 is stored; the prefix is shown so people can tell keys apart."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


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


class JobEvent(models.Model):
    job = models.ForeignKey(EvalJob, models.CASCADE, related_name="events", db_index=False)
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=64)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "seq"]
        constraints = [models.UniqueConstraint(fields=["job", "seq"], name="job_event_unique_seq")]


class JobFigures(models.Model):
    """Figures computed from every row of a job (`jobs.figures`), kept so that reading a big job
    does not recompute them: `name` says which (the results summary, the per-seed figures, the
    dashboard's charts), `settled` that the job had ended and no sample could change any more."""

    job = models.ForeignKey(EvalJob, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=32)
    # JSON text, not a JSONField: PostgreSQL's jsonb would reorder the keys of what is served.
    value = models.TextField()
    settled = models.BooleanField(default=False)
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="job_figures_unique_name")
        ]


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
