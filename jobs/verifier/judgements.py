"""Judgements in the database: claimed under a lease like rollouts (so a dead worker's are
taken over), never more than `verifier_config.concurrency` at once over all workers, each
written only by the worker holding it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jobs.models import (
    OPEN_JUDGE_STATUSES,
    AttemptStatus,
    EvalJob,
    JobStatus,
    JudgeStatus,
    RolloutAttempt,
    SeedRun,
    SeedStatus,
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
        if job is None or job.status != JobStatus.RUNNING:
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


def judgements_cancel(*, job_id: str) -> int:
    """The job was cancelled: its open judgements are not going to be made."""
    return SeedRun.objects.filter(job_id=job_id, judge_status__in=OPEN_JUDGE_STATUSES).update(
        judge_status=JudgeStatus.CANCELLED, judge_lease_owner="", judge_lease_expires_at=None,
        verifier_error="cancelled",
    )  # fmt: skip


def judging_left(*, job_id: str) -> str:
    """What is left of the job's judging for a judge worker: `claimable` (judgements waiting
    for a worker), `rollouts` (none, but rollouts are still running and may add some), or
    `none` (what is open is held by live workers, or nothing is)."""
    now = timezone.now()
    if SeedRun.objects.filter(_claimable(job_id, now, settled=False)).exists():
        return "claimable"
    if SeedRun.objects.filter(
        job_id=job_id, status__in=[SeedStatus.PENDING, SeedStatus.RUNNING]
    ).exists():
        return "rollouts"
    return "none"


def judgements_open(*, job_id: str) -> bool:
    return SeedRun.objects.filter(job_id=job_id, judge_status__in=OPEN_JUDGE_STATUSES).exists()


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
