"""Re-judging a finished job (`POST /api/eval/jobs/{id}/judge`): a new job, linked to the
first by `judged_from`, whose seeds are the first job's succeeded rollouts (scores, metrics and
task-app trace copied; the policy's calls stay where they were made, read by the judge) and
whose only work is judging them with another `verifier_config`. Being a job of its own, it has
its own results, judge spend and zip, and can be compared with the first."""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from jobs.dispatch import job_dispatch
from jobs.events import EventType, job_event_append
from jobs.models import (
    AttemptStatus,
    EvalJob,
    JobStatus,
    JudgeStatus,
    RolloutAttempt,
    SeedRun,
    SeedStatus,
)
from jobs.scores import Scores
from jobs.verifier import rewards
from jobs.verifier.config import verifier_config_of
from jobs.verifier.judgements import judged_attempt

COPIED = ("app_id", "env_name", "policy", "env_config", "mode", "max_concurrent", "timeout_s",
          "max_cost_usd", "max_tokens", "task_app_url", "task_app_api_key_encrypted", "task_app_kind", "repeats",
          "pass_threshold", "tags", "metadata")  # fmt: skip


class NotJudgeable(Exception):
    """The job cannot be re-judged (yet); the message says why."""


def job_rejudge(*, job: EvalJob, verifier_config: dict) -> EvalJob:
    if not job.is_terminal:
        raise NotJudgeable(f"job {job.id} is {job.status}; re-judge it once it has ended")
    raw = {**verifier_config, "enabled": True}
    config = verifier_config_of(raw, policy=job.policy)
    sources = list(SeedRun.objects.filter(job=job, status=SeedStatus.SUCCEEDED).order_by("id"))
    if not sources:
        raise NotJudgeable(f"job {job.id} has no succeeded rollout to judge")
    now = timezone.now()
    with transaction.atomic():
        new = EvalJob.objects.create(
            owner=job.owner, judged_from=job, status=JobStatus.RUNNING, started_at=now,
            runner_seen_at=now, dispatched_at=now, verifier_config=raw, num_seeds=len(sources),
            num_samples=len(sources),
            **{name: getattr(job, name) for name in COPIED},
        )  # fmt: skip
        for source in sources:
            _seed_copy(new, source, config)
        job_event_append(
            job_id=new.id, type=EventType.JOB_CREATED,
            data={"num_seeds": len(sources), "judged_from": job.id},
        )  # fmt: skip
        transaction.on_commit(lambda: job_dispatch(new.id))
    return new


def _seed_copy(new: EvalJob, source: SeedRun, config) -> SeedRun:
    """The source seed's rollout as a seed of the new job, its judgement pending, with an
    attempt of its own for the judge's calls to be recorded on."""
    task_app_score = source.task_app_score
    if task_app_score is None and not source.judge_status:
        task_app_score = source.score  # judged before the verifier kept it apart
    scores = Scores.fields_of(source)
    scores["score"] = rewards.reward(config, task_app_score=task_app_score, verifier_score=None)
    scores["verifier_score"] = None
    attempt = judged_attempt(source)
    seed_run = SeedRun.objects.create(
        job=new, seed=source.seed, repeat=source.repeat, status=SeedStatus.SUCCEEDED, attempts=source.attempts,
        metrics=source.metrics, task_trace=source.task_trace, latency_ms=source.latency_ms,
        started_at=source.started_at, finished_at=source.finished_at,
        task_app_score=task_app_score, judge_status=JudgeStatus.PENDING, judged_rollout=attempt,
        **scores,
    )  # fmt: skip
    RolloutAttempt.objects.create(
        seed_run=seed_run, number=1, run_id=f"run-{secrets.token_hex(12)}",
        # Nobody holds this token: the rollout is not run again.
        token_hash=hashlib.sha256(secrets.token_bytes(32)).hexdigest(),
        status=AttemptStatus.SUCCEEDED, worker="judged-from",
        http_status=attempt.http_status if attempt else None,
        started_at=attempt.started_at if attempt else timezone.now(),
        finished_at=attempt.finished_at if attempt else timezone.now(),
        latency_ms=attempt.latency_ms if attempt else None,
    )  # fmt: skip
    return seed_run
