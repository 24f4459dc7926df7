"""Judgements in the database: claimed under a lease like rollouts (so a dead worker's are
taken over), never more than `verifier_config.concurrency` at once over all workers, each
written only by the worker holding it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, Min, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobs.models import (
    AttemptStatus,
    EvalJob,
    JobStatus,
    JudgeStatus,
    RolloutAttempt,
    SeedRun,
)
from jobs.verifier import rewards
from jobs.verifier.config import VerifierConfig
from jobs.verifier.prompt import Verdict


@dataclass(frozen=True)
class Claimed:
    seed_run: SeedRun
    token: str


def _claimable(job_id: str, now, *, settled: bool = True) -> Q:
    """Judgements waiting for a worker: pending (once EVALHUB_VERIFIER_SETTLE_S has passed
    since the rollout ended, when `settled`), or held by a worker whose lease ran out."""
    pending = Q(judge_status=JudgeStatus.PENDING)
    if settled:
        settle = timedelta(seconds=settings.EVALHUB_VERIFIER_SETTLE_S)
        pending &= Q(finished_at__isnull=True) | Q(finished_at__lte=now - settle)
    expired = Q(judge_status=JudgeStatus.RUNNING, judge_lease_expires_at__lte=now)
    return Q(job_id=job_id) & (pending | expired)


def judge_claim(
    *, job_id: str, worker: str, limit: int, lease_s: float, concurrency: int, tokens: list
) -> list[Claimed]:
    """Claim up to `limit` judgements of a running job; `tokens` are (token, hash) pairs, one
    used per claim: the judge's interceptor token."""
    now = timezone.now()
    with transaction.atomic():
        job = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        if job is None or job.status != JobStatus.RUNNING or job.is_ending:
            return []
        live = SeedRun.objects.filter(
            job_id=job_id, judge_status=JudgeStatus.RUNNING, judge_lease_expires_at__gt=now
        ).count()
        slots = min(limit, concurrency - live, len(tokens))
        if slots <= 0:
            return []
        ids = list(
            SeedRun.objects.filter(_claimable(job_id, now))
            .order_by("id")
            .values_list("id", flat=True)[:slots]
        )
        claimed = []
        for seed_run_id, (token, digest) in zip(ids, tokens, strict=False):
            SeedRun.objects.filter(pk=seed_run_id).update(
                judge_status=JudgeStatus.RUNNING, judge_lease_owner=worker,
                judge_lease_expires_at=now + timedelta(seconds=lease_s), judge_token_hash=digest,
            )  # fmt: skip
            claimed.append(Claimed(SeedRun.objects.get(pk=seed_run_id), token))
        return claimed


def judge_lease_renew(*, seed_run_ids: list[int], worker: str, lease_s: float) -> set[int]:
    held = SeedRun.objects.filter(
        pk__in=seed_run_ids, judge_status=JudgeStatus.RUNNING, judge_lease_owner=worker
    )
    held.update(judge_lease_expires_at=timezone.now() + timedelta(seconds=lease_s))
    return set(held.values_list("id", flat=True))


def judgement_finish(
    *,
    seed_run_id: int,
    worker: str,
    config: VerifierConfig,
    verdict: Verdict | None,
    error: str | None,
) -> bool:
    """Write the verdict (or why there is none) and the seed's reward under the job's
    `reward_source`, if `worker` still holds the judgement."""
    with transaction.atomic():
        held = SeedRun.objects.select_for_update().filter(
            pk=seed_run_id, judge_status=JudgeStatus.RUNNING, judge_lease_owner=worker
        )
        seed_run = held.first()
        if seed_run is None:
            return False
        score = verdict.score if verdict else None
        held.update(
            judge_status=JudgeStatus.DONE if verdict else JudgeStatus.FAILED,
            verifier_score=score,
            verifier_justification=verdict.justification if verdict else None,
            verifier_error=error,
            score=rewards.reward(
                config, task_app_score=seed_run.task_app_score, verifier_score=score
            ),
            judge_lease_owner="",
            judge_lease_expires_at=None,
            judged_at=timezone.now(),
        )
    return True


def judgements_claimable_at(*, job_id: str, now: datetime) -> datetime | None:
    """When a runner could next claim a judgement of the job (`now` or earlier: at once): a
    pending one once its rollout has settled (EVALHUB_VERIFIER_SETTLE_S), a running one when
    its lease expires. None when no judgement is open."""
    seeds = SeedRun.objects.filter(job_id=job_id)
    settle = timedelta(seconds=settings.EVALHUB_VERIFIER_SETTLE_S)
    pending = seeds.filter(judge_status=JudgeStatus.PENDING).aggregate(
        at=Min(Coalesce("finished_at", Value(now, output_field=DateTimeField())))
    )["at"]
    running = seeds.filter(judge_status=JudgeStatus.RUNNING).aggregate(
        at=Min("judge_lease_expires_at")
    )["at"]
    times = [pending + settle if pending is not None else None, running]
    return min((at for at in times if at is not None), default=None)


def judged_attempt(seed_run: SeedRun) -> RolloutAttempt | None:
    """The rollout a seed's judge reads: the original's in a re-judgement, else the seed's
    last succeeded attempt."""
    if seed_run.judged_rollout_id:
        return RolloutAttempt.objects.filter(pk=seed_run.judged_rollout_id).first()
    return (
        RolloutAttempt.objects.filter(seed_run=seed_run, status=AttemptStatus.SUCCEEDED)
        .order_by("-number")
        .first()
    )
