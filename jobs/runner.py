"""Running a job: many rollouts in flight inside one Celery task, with asyncio and httpx.

The database is the source of truth: the runner claims seed runs under a lease (never more
than the job's `max_concurrent` over all workers), renews the leases while it works, writes
each result only if it still holds the seed, and gives transiently failed seeds back with a
backoff so any worker may take the next attempt. It stops when nothing is left to claim.

Django's ORM is synchronous: every database call runs on one thread of the runner's own
(`_db`), whose connections are closed when the runner ends.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import Min
from django.utils import timezone

from evalhub import crypto
from jobs import leases, services, sharing, stopping, taskapp
from jobs.batching import Batcher
from jobs.dispatch import job_trace_members_dispatch
from jobs.environments import run as environments
from jobs.models import AttemptStatus, EvalJob, JobStatus, SeedRun, SeedStatus
from jobs.rollout_clients import ClientPool, InterceptorProbe
from jobs.verifier.hooks import RunnerHooks
from traces import tokens, totals
from traces.redaction import job_redactor

log = logging.getLogger(__name__)

# How often the runner looks at the job's status (a cancel is noticed within this).
POLL_S = 0.5
# The shortest time between two requests for the zip's members of a running job.
MEMBERS_MIN_EVERY_S = 1.0
INTERCEPTOR_DOWN = "evalhub's interceptor could not be reached"


def job_run(*, job_id: str) -> None:
    """Entry point of the Celery task: run the job's seeds until none is left to claim."""
    asyncio.run(JobRunner(job_id=job_id).run())


def backoff_delay(*, attempt: int) -> float:
    """Exponential backoff with full jitter before attempt `attempt + 1`."""
    ceiling = min(
        settings.EVALHUB_ROLLOUT_BACKOFF_MAX_S,
        settings.EVALHUB_ROLLOUT_BACKOFF_S * 2 ** max(0, attempt - 1),
    )
    return random.uniform(0, ceiling)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class JobRunner:
    def __init__(self, *, job_id: str):
        self.job_id = job_id
        self.worker = worker_name()
        self.lease_s = settings.EVALHUB_LEASE_S
        self.max_attempts = settings.EVALHUB_ROLLOUT_MAX_ATTEMPTS
        self._db_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalhub-db")
        self.in_flight: dict[int, asyncio.Task] = {}
        # The most it may hold, as the last claim said (leases.Claim); the cap until then.
        self.share: int | None = None
        self._changed: asyncio.Event | None = None
        # Attempts started, and results written, by many rollouts at once share a transaction.
        self._start_attempts = Batcher(self._attempts_start)
        self._finish_seeds = Batcher(self._seeds_finish)

    async def _db(self, fn, /, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db_thread, functools.partial(fn, **kwargs))

    async def _attempts_start(self, items: list[tuple[SeedRun, str]]) -> list:
        return await self._db(
            leases.rollout_attempts_start, seed_runs=[seed_run for seed_run, _ in items],
            token_hashes=[token_hash for _, token_hash in items], worker=self.worker,
        )  # fmt: skip

    async def _seeds_finish(self, finishes: list[leases.SeedFinish]) -> list[bool]:
        return await self._db(leases.seed_runs_finish, worker=self.worker, finishes=finishes)

    async def run(self) -> None:
        try:
            job = await self._db(_job_load, job_id=self.job_id)
            if job is None or job.is_terminal:
                return
            self.job = job
            try:
                self.api_key = (
                    crypto.decrypt(job.task_app_api_key_encrypted)
                    if job.has_task_app_api_key
                    else None
                )
            except ValueError as exc:  # SECRET_KEY changed since the job was created
                await self._db(
                    services.job_fail, job_id=self.job_id, error=f"task_app_api_key: {exc}"
                )
                return
            self.redactor = job_redactor(job=job)
            self.verifier = RunnerHooks(job)
            self.cap = min(job.max_concurrent, settings.EVALHUB_RUNNER_MAX_INFLIGHT)
            async with ClientPool(size=self.cap) as clients:
                self.clients = clients
                client = clients.clients[0]
                self.interceptor = InterceptorProbe(client)
                if job.status == JobStatus.PENDING:
                    error = await environments.probe(
                        client, kind=job.task_app_kind, base_url=job.task_app_url,
                        api_key=self.api_key,
                    )  # fmt: skip
                    if error:
                        log.warning("job %s: %s", self.job_id, error)
                        await self._db(services.job_fail, job_id=self.job_id, error=error)
                        return
                    if await self._db(services.job_start, job_id=self.job_id) is None:
                        return
                await self._work()
        finally:
            await self._db(connections.close_all)
            self._db_thread.shutdown(wait=True)

    async def _work(self) -> None:
        self._changed = asyncio.Event()
        # Claim in batches of an eighth of what the runner may hold: one claim per finished
        # rollout would make the claim query the bottleneck of a fast task app.
        last_look = last_renew = last_claim = 0.0
        # Idle workers join (jobs.sharing); this process runs the job, holding seeds or not.
        inviter = sharing.Inviter(self.job_id, runner=self.worker)
        # The zip's members of the seeds that ended meanwhile are built as the job goes on.
        members_every = max(settings.EVALHUB_TRACES_ZIP_AFTER_S, MEMBERS_MIN_EVERY_S)
        members_at = time.monotonic() + members_every
        while True:
            # Cleared before looking, so a rollout ending while we look wakes the wait below.
            self._changed.clear()
            now = time.monotonic()
            if now - last_renew >= self.lease_s / 3:
                await self._renew()
                last_renew = now
            if now - last_look >= POLL_S:
                last_look = now
                status = await self._db(_job_status, job_id=self.job_id)
                if status != JobStatus.RUNNING:
                    await self._abort_all(cancelled=status == JobStatus.CANCELLED)
                    return
            if inviter.due(now):
                await self._db(inviter.invite, now=now)
            if now >= members_at:
                members_at = now + members_every
                await self._db(job_trace_members_dispatch, job_id=self.job_id)
            if self._claim_due(now - last_claim):
                last_claim = now
                await self._claim()
            if not self.in_flight:
                wait = await self._db(_job_next_claim_in, job_id=self.job_id)
                if wait is None:
                    # Nothing left to run: the last runner to see that ends the job.
                    await self._db(
                        services.job_finish_if_done,
                        job_id=self.job_id,
                        summarize=totals.job_summary,
                    )
                    await self._db(self.verifier.rollouts_over)
                    return
                # A backoff is running, the other runners use every slot, or they hold seeds
                # whose leases we take over if their worker dies.
                await asyncio.sleep(min(max(wait, POLL_S), self.lease_s / 3))
                continue
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=POLL_S)
            except TimeoutError:
                pass

    def _claim_due(self, since_claim: float) -> bool:
        """A batch is free within the runner's share (other runners work on the job too), or
        POLL_S went by with any slot free (its share may have grown)."""
        most = self.cap if self.share is None else min(self.cap, self.share)
        if most - len(self.in_flight) >= max(1, most // 8):
            return True
        return len(self.in_flight) < self.cap and since_claim >= POLL_S

    async def _claim(self) -> None:
        claim = await self._db(
            leases.seed_run_claim, job_id=self.job_id, worker=self.worker,
            limit=self.cap - len(self.in_flight), lease_s=self.lease_s,
        )  # fmt: skip
        self.share = claim.share
        for seed_run in claim.seed_runs:
            self._start(seed_run)

    def _start(self, seed_run: SeedRun) -> None:
        task = asyncio.create_task(self._seed(seed_run))
        self.in_flight[seed_run.id] = task

        def finished(t: asyncio.Task) -> None:
            if self.in_flight.get(seed_run.id) is t:
                del self.in_flight[seed_run.id]
            if not t.cancelled() and t.exception() is not None:
                log.error("job %s: a rollout task crashed", self.job_id, exc_info=t.exception())
            if self._changed is not None:
                self._changed.set()

        task.add_done_callback(finished)

    async def _renew(self) -> None:
        held = await self._db(
            leases.seed_run_lease_renew,
            seed_run_ids=list(self.in_flight), worker=self.worker, lease_s=self.lease_s,
        )  # fmt: skip
        await self._db(services.job_heartbeat, job_id=self.job_id)
        for seed_run_id in set(self.in_flight) - held:
            # Taken over after our lease ran out, or cancelled: its result is not ours to write.
            self.in_flight.pop(seed_run_id).cancel()

    async def _abort_all(self, *, cancelled: bool) -> None:
        tasks = dict(self.in_flight)
        self.in_flight.clear()
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        if tasks and cancelled:
            n = await self._db(
                leases.seed_runs_cancel, seed_run_ids=list(tasks), worker=self.worker
            )
            log.info("job %s cancelled: aborted %d rollouts", self.job_id, n)

    async def _seed(self, seed_run: SeedRun) -> None:
        """One attempt at a seed: a fresh token and run id, the rollout, then its result or a
        retry later."""
        job = self.job
        token = tokens.token_new()
        attempt = await self._start_attempts((seed_run, tokens.token_hash(token)))
        body = taskapp.rollout_request_build(
            run_id=attempt.run_id,
            seed=seed_run.seed,
            env_name=job.env_name,
            env_config=job.env_config,
            policy=job.policy,
            inference_url=tokens.inference_url(token),
            trace_correlation_id=attempt.run_id,
            mode=job.mode,
            timeout_s=job.timeout_s,
        )
        started = time.perf_counter()
        outcome, error = await self._rollout(body)
        latency_ms = (time.perf_counter() - started) * 1000
        if error is None:
            await self._succeeded(seed_run, attempt.id, outcome, latency_ms)
        else:
            await self._failed(seed_run, attempt.id, error, latency_ms)

    async def _rollout(self, body: dict) -> tuple[taskapp.RolloutOutcome | None, Any]:
        """(outcome, None) or (None, the TaskAppError), within the job's timeout."""
        job = self.job
        try:
            async with asyncio.timeout(job.timeout_s), self.clients.lease() as client:
                outcome = await environments.rollout(
                    client, session=self.clients.session, kind=job.task_app_kind,
                    base_url=job.task_app_url, api_key=self.api_key, body=body,
                )  # fmt: skip
            return outcome, None
        except TimeoutError:
            error = taskapp.TaskAppError(
                f"rollout timed out after {job.timeout_s:g}s", transient=False
            )
        except taskapp.TaskAppError as exc:
            error = exc
        # A task app may echo what it was sent: keep the key and the token out of errors.
        error.message = self.redactor.text(error.message)
        return None, error

    async def _succeeded(self, seed_run, attempt_id: int, outcome, latency_ms: float) -> None:
        end = leases.AttemptEnd(
            attempt_id=attempt_id, status=AttemptStatus.SUCCEEDED,
            http_status=outcome.http_status, latency_ms=latency_ms,
        )  # fmt: skip
        result = self.verifier.seed_result(outcome, latency_ms)
        if await self._finish_seeds(
            leases.SeedFinish(seed_run.id, SeedStatus.SUCCEEDED, result, attempt=end)
        ):
            await self._db(self.verifier.seed_finished, result=result)

    async def _failed(self, seed_run, attempt_id: int, error, latency_ms: float) -> None:
        """Retry later when the failure is transient and attempts are left; else the result.
        A failure while our own interceptor could not be reached is ours, not the task
        app's: retried without using up the task app's attempts."""
        if await self.interceptor.lost_since(time.time() - latency_ms / 1000):
            await self._lost(seed_run, attempt_id, error, latency_ms)
            return
        end = leases.AttemptEnd(
            attempt_id=attempt_id, status=AttemptStatus.FAILED, http_status=error.http_status,
            error=error.message, latency_ms=latency_ms,
        )  # fmt: skip
        tries = seed_run.failures + 1  # the task app's failed attempts, this one included
        if error.transient and tries < self.max_attempts:
            await self._db(
                leases.seed_run_retry_later, seed_run_id=seed_run.id, worker=self.worker,
                delay_s=backoff_delay(attempt=tries), error=error.message, attempt=end,
            )  # fmt: skip
            return
        message = error.message
        if tries > 1:
            message = f"{message} (attempt {tries} of {self.max_attempts})"
        await self._finish_failed(seed_run, message, latency_ms, end)

    async def _lost(self, seed_run, attempt_id: int, error, latency_ms: float) -> None:
        message = f"{INTERCEPTOR_DOWN}; not counted against the task app: {error.message}"
        end = leases.AttemptEnd(
            attempt_id=attempt_id, status=AttemptStatus.ABANDONED,
            http_status=error.http_status, error=message, latency_ms=latency_ms,
        )  # fmt: skip
        losses = seed_run.losses + 1
        if losses < settings.EVALHUB_SEED_MAX_LOSSES:
            await self._db(
                leases.seed_run_retry_later, seed_run_id=seed_run.id, worker=self.worker,
                delay_s=backoff_delay(attempt=losses), error=message, attempt=end, charged=False,
            )  # fmt: skip
            return
        message = f"{message} ({losses} times, EVALHUB_SEED_MAX_LOSSES)"
        await self._finish_failed(seed_run, message, latency_ms, end)

    async def _finish_failed(self, seed_run, message: str, latency_ms: float, end) -> None:
        result = leases.SeedResult(error=message, latency_ms=latency_ms)
        await self._finish_seeds(leases.SeedFinish(seed_run.id, SeedStatus.FAILED, result, end))
        if self.job.max_failures is not None:
            await self._db(stopping.job_stop_if_broken, job_id=self.job_id)


def _job_load(*, job_id: str) -> EvalJob | None:
    return EvalJob.objects.filter(pk=job_id).first()


def _job_status(*, job_id: str) -> str | None:
    return EvalJob.objects.filter(pk=job_id).values_list("status", flat=True).first()


def _job_next_claim_in(*, job_id: str) -> float | None:
    """Seconds until this runner could claim something of the job (0: now), or None when no
    seed is pending or held by another runner any more."""
    open_seeds = SeedRun.objects.filter(
        job_id=job_id, status__in=[SeedStatus.PENDING, SeedStatus.RUNNING]
    )
    if open_seeds.filter(status=SeedStatus.PENDING).exists():
        return 0.0
    expiry = open_seeds.aggregate(m=Min("lease_expires_at"))["m"]
    if expiry is None:
        return None
    return max(0.0, (expiry - timezone.now()).total_seconds())
