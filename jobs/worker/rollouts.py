"""The runner's source of rollouts: claim seed runs, run one attempt of each, write its result.

Each claimed seed gets an attempt with a fresh interceptor token and run id; its result is
written only while the runner still holds the seed's lease (jobs.leases). A transient failure
gives the seed back with a backoff, so any runner may take the next attempt; a failure while
our own interceptor did not answer is a loss, not one of the task app's attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from evalhub import crypto, metrics, revocations
from jobs import claims, kinds, leases, services, stopping
from jobs.attempts import AttemptEnd
from jobs.events import EventType, job_event_append
from jobs.models import AttemptStatus, JobEvent, JobStatus, SeedStatus
from jobs.verifier.config import verifier_config_of
from jobs.verifier.rewards import seed_result
from jobs.worker import taskapp
from jobs.worker.answer_budget import AnswerHold
from jobs.worker.batching import Batcher
from jobs.worker.clients import ClientPool, InterceptorProbe
from jobs.worker.environments import run as environments
from jobs.worker.episode import EnvironmentBusy, RolloutOutcome, TaskAppError
from traces import tokens
from traces.calls import replay
from traces.otel.context import attempt_traceparent
from traces.redaction import job_redactor

if TYPE_CHECKING:
    from jobs.worker.runner import JobRunner

log = logging.getLogger(__name__)

INTERCEPTOR_DOWN = "evalhub's interceptor could not be reached"
# An attempt's end, but how it ended: its id and the time its POST began are given.
Ending = Callable[..., AttemptEnd]


def backoff_delay(*, attempt: int) -> float:
    """Exponential backoff with full jitter before attempt `attempt + 1`."""
    ceiling = min(
        settings.EVALHUB_ROLLOUT_BACKOFF_MAX_S,
        settings.EVALHUB_ROLLOUT_BACKOFF_S * 2 ** max(0, attempt - 1),
    )
    return random.uniform(0, ceiling)


def environment_busy_note(*, job_id: str, message: str, limit: int | None) -> None:
    """Say once in the job's events that its environment limits concurrency."""
    if JobEvent.objects.filter(job_id=job_id, type=EventType.ENVIRONMENT_BUSY).exists():
        return
    said = f"the environment is at capacity ({message}); samples wait for it and are retried"
    if limit is not None:
        said += f": it takes {limit} at once, so max_concurrent above {limit} only queues"
    job_event_append(
        job_id=job_id, type=EventType.ENVIRONMENT_BUSY, data={"message": said, "limit": limit}
    )


class EndedUnwritten:
    """For `claims.results_write_and_claim`, called on the results' thread once a batch's
    results are written: the seed runs whose rollouts ended meanwhile, waiting for the next
    batch (not a failure that may stop the job), and a fresh token hash for each, their tokens
    kept in `tokens`. Their slots are free at the task app; taken again now, the next batch
    does not wait a write for them (in waves of 200 at 256 in flight, a batch's write held the
    task app idle)."""

    def __init__(self, source: RolloutSource) -> None:
        self.source = source
        self.tokens: list[str] = []

    def __call__(self) -> tuple[list[int], list[str]]:
        source, written = self.source, self.source.runner.written
        ids = [
            f.seed_run_id for f in source.finishes_waiting()
            if (source.name, f.seed_run_id) not in written and not source.may_stop(f)
        ]  # fmt: skip
        self.tokens = [tokens.token_new() for _ in ids]
        return ids, [tokens.token_hash(t) for t in self.tokens]


class RolloutSource:
    name = "rollout"

    def __init__(self, runner: JobRunner):
        self.runner = runner
        self.job = runner.job
        self.max_attempts = settings.EVALHUB_ROLLOUT_MAX_ATTEMPTS
        self.verifier = verifier_config_of(self.job.verifier_config, policy=self.job.policy)
        self.redactor = job_redactor(job=self.job)
        # Results written by many rollouts at once share a transaction.
        self._finish_seeds = Batcher(self._seeds_finish)
        # The task app holds at most max_concurrent of the runner's rollouts (`ahead`).
        self.gate = asyncio.Semaphore(self.job.max_concurrent)
        self.busy_said = False

    def finishes_waiting(self) -> list[leases.SeedFinish]:
        """The ended rollouts' results waiting for the next batch (a copy: safe to read from the
        results' thread while a batch is written)."""
        return self._finish_seeds.waiting()

    async def open(self, stack: contextlib.AsyncExitStack) -> bool:
        """Ready the task-app clients; a pending job's task app is probed first and the job
        started. False when the job cannot run (it has been failed, or is over)."""
        job, db = self.job, self.runner.db
        try:
            self.api_key = (
                crypto.decrypt(job.task_app_api_key_encrypted) if job.has_task_app_api_key else None
            )
        except ValueError as exc:  # SECRET_KEY changed since the job was created
            await db(services.job_fail, job_id=job.id, error=f"task_app_api_key: {exc}")
            return False
        # Synth rollouts go through the pool's aiohttp session: its httpx clients are for the
        # other kinds' adapters, and for the probes (one client is enough for those).
        size = min(job.max_concurrent, self.runner.cap) if job.task_app_kind != kinds.SYNTH else 1
        self.clients = await stack.enter_async_context(ClientPool(size=size))
        client = self.clients.clients[0]
        self.interceptor = InterceptorProbe(client)
        if job.status == JobStatus.PENDING:
            error = await environments.probe(
                client, kind=job.task_app_kind, base_url=job.task_app_url, api_key=self.api_key
            )
            if error:
                log.warning("job %s: %s", job.id, error)
                await db(services.job_fail, job_id=job.id, error=error)
                return False
            if await db(services.job_start, job_id=job.id) is None:
                return False
        return True

    async def claim(self, limit: int) -> tuple[list[tuple[int, Coroutine]], int]:
        """(seed run id, its rollout) for each seed claimed, and the room the job had for others.
        Each claimed seed's attempt starts in the claim's transaction, with a fresh token."""
        fresh = [tokens.token_new() for _ in range(limit)]
        claim = await self.runner.db(
            claims.rollouts_claim, job_id=self.job.id, worker=self.runner.worker, limit=limit,
            lease_s=self.runner.lease_s, token_hashes=[tokens.token_hash(t) for t in fresh],
            ahead=self.ahead(),
        )  # fmt: skip
        return self._rollouts(claim, fresh), claim.room

    def _rollouts(
        self, claim: claims.RolloutClaim, fresh: list[str]
    ) -> list[tuple[int, Coroutine]]:
        """(seed run id, its rollout) of each seed a claim got; `fresh` holds the tokens whose
        hashes the claim gave the attempts, in order."""
        return [
            (seed_run.id, self._seed(seed_run, attempt, token))
            for (seed_run, attempt), token in zip(claim.rollouts, fresh, strict=False)
        ]

    async def renew(self, ids: list[int]) -> set[int]:
        return await self.runner.db(
            leases.seed_run_lease_renew, seed_run_ids=ids, worker=self.runner.worker,
            lease_s=self.runner.lease_s,
        )  # fmt: skip

    async def _seeds_finish(self, finishes: list[leases.SeedFinish]) -> list[bool]:
        """Write a batch of results and, in the same transaction, claim seeds for the slots
        they free (`claims.results_write_and_claim`), started at once: the slots of this batch
        not taken already by the batch before, and, when this runner may take them
        (`_claims_ahead`), those of the rollouts that ended while it was written
        (`EndedUnwritten`). Not a batch with a failure that may stop the job (`may_stop`):
        then no rollout may start after it."""
        runner = self.runner
        stops = any(self.may_stop(f) for f in finishes)
        keys = [(self.name, f.seed_run_id) for f in finishes]
        freed = sum(1 for key in keys if key not in runner.written)
        limit = 0 if stops else runner.slots_reserve(freed=freed)
        fresh = [tokens.token_new() for _ in range(limit)]
        claims_ahead = not stops and self._claims_ahead()  # asked once a batch
        ended = EndedUnwritten(self) if claims_ahead else None
        try:
            written, claim, over = await runner.db_results(
                claims.results_write_and_claim, job_id=self.job.id, worker=runner.worker,
                finishes=finishes, limit=limit, lease_s=runner.lease_s,
                token_hashes=[tokens.token_hash(t) for t in fresh], also_over=ended,
                ahead=self._ahead_of(claims_ahead),
            )  # fmt: skip
        finally:
            runner.slots_release(limit)
        if ended is not None:  # their tokens follow this batch's own, as their hashes did
            fresh += ended.tokens
        runner.results_written(keys + [(self.name, seed_run_id) for seed_run_id in over])
        for key, work in self._rollouts(claim, fresh):
            runner.claimed_start((self.name, key), work)
        return written

    def may_stop(self, finish: leases.SeedFinish) -> bool:
        """A failure of a job with `max_failures` may stop it (`_finish_failed`)."""
        return self.job.max_failures is not None and finish.status == SeedStatus.FAILED

    def _claims_ahead(self) -> bool:
        """Whether a batch of results also takes the slots of the rollouts that ended while it
        was written: while the runner claims, its slots cover the job's `max_concurrent` (it
        asks no worker for a hand: a hand's runner would find every slot read `running`, and
        never start one) and its process has CPU to spare (four workers held to a tenth of a
        CPU each ran a fifth slower with it: docs/performance.md)."""
        runner = self.runner
        return runner.claiming and runner.cap >= self.job.max_concurrent and runner.lag.spare()

    def ahead(self) -> int:
        """How many rollouts more than `max_concurrent` the runner may hold, claimed and
        waiting at the `gate` to start as soon as a rollout at the task app answers: half of
        `max_concurrent`, when it may claim ahead at all (`_claims_ahead`) and no failure
        can stop the job (`may_stop`: then no rollout may start after one). Claimed in turns,
        a batch of results at a time, the slots of 256 rollouts of 50 ms were idle a quarter
        of the time, waiting for the batch that took them again (docs/performance.md)."""
        return self._ahead_of(self._claims_ahead())

    def _ahead_of(self, claims_ahead: bool) -> int:
        """`ahead` once `_claims_ahead` is known."""
        if self.job.max_failures is not None or not claims_ahead:
            return 0
        return -(-self.job.max_concurrent // 2)

    async def _seed(self, seed_run: claims.Claimed, attempt, token: str) -> None:
        """One attempt at a seed (started by its claim, with a fresh token and run id): the
        rollout, then its result or a retry later."""
        job = self.job
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
        # The answer's share of the worker's answer budget, held until its result is written;
        # the time spent waiting for it is the worker's, left out of the seed's latency.
        hold = AnswerHold()
        traceparent = attempt_traceparent(job.id, seed_run.seed, seed_run.repeat, attempt.number)
        try:
            # Its token is not sent before it passes the gate: cancelled there, it needs no
            # closing (`ahead`).
            async with self.gate:
                # Its attempt starts now, not at its claim (it may have waited at the gate).
                end_of = functools.partial(AttemptEnd, attempt.id, posted_at=timezone.now())
                started = time.perf_counter()
                metrics.rollout_started(kind=job.task_app_kind)
                try:
                    outcome, error = await self._rollout(body, hold, traceparent)
                finally:
                    metrics.rollout_ended(kind=job.task_app_kind)
                    # Over, however it ended (answered, failed, timed out, or aborted: this
                    # task was cancelled): its URL closes in every web process now.
                    revocations.publish([attempt.id])
            latency_ms = (time.perf_counter() - started - hold.waited_s) * 1000
            diverged = await self._divergence(attempt.id)
            if diverged is not None:
                hold.release()
                await self._diverged(seed_run, end_of, diverged, latency_ms)
            elif error is None:
                await self._succeeded(seed_run, end_of, outcome, latency_ms)
            else:
                hold.release()
                await self._failed(seed_run, end_of, error, latency_ms)
            del outcome  # freed before the hold is given back
        finally:
            hold.release()

    async def _rollout(
        self, body: dict, hold: AnswerHold, traceparent: str
    ) -> tuple[RolloutOutcome | None, Any]:
        """(outcome, None) or (None, the TaskAppError), within the job's timeout, which the
        wait for the answer's share of the budget pushes back."""
        job = self.job
        try:
            async with (
                asyncio.timeout(job.timeout_s) as hold.deadline,
                self.clients.lease() as client,
            ):
                outcome = await environments.rollout(
                    client, session=self.clients.session, kind=job.task_app_kind,
                    base_url=job.task_app_url, api_key=self.api_key, body=body, hold=hold,
                    traceparent=traceparent,
                )  # fmt: skip
            return outcome, None
        except TimeoutError:
            error = TaskAppError(f"rollout timed out after {job.timeout_s:g}s", transient=False)
        except TaskAppError as exc:
            error = exc
        # A task app may echo what it was sent: keep the key and the token out of errors.
        error.message = self.redactor.text(error.message)
        return None, error

    async def _succeeded(self, seed_run, end_of: Ending, outcome, latency_ms: float) -> None:
        end = end_of(
            status=AttemptStatus.SUCCEEDED,
            http_status=outcome.http_status, latency_ms=latency_ms,
        )  # fmt: skip
        result = seed_result(self.verifier, outcome, latency_ms)
        await self._finish_seeds(
            leases.SeedFinish(seed_run.id, SeedStatus.SUCCEEDED, result, attempt=end)
        )

    async def _failed(self, seed_run, end_of: Ending, error, latency_ms: float) -> None:
        """Retry later when the failure is transient and attempts are left; else the result.
        A failure while our own interceptor could not be reached is ours, not the task
        app's: retried without using up the task app's attempts."""
        if isinstance(error, EnvironmentBusy):
            await self._busy(seed_run, end_of, error, latency_ms)
            return
        if await self.interceptor.lost_since(time.time() - latency_ms / 1000):
            await self._lost(seed_run, end_of, error, latency_ms)
            return
        end = end_of(
            status=AttemptStatus.FAILED, http_status=error.http_status,
            error=error.message, latency_ms=latency_ms,
        )  # fmt: skip
        tries = seed_run.failures + 1  # the task app's failed attempts, this one included
        if error.transient and tries < self.max_attempts:
            await self.runner.db(
                leases.seed_run_retry_later, seed_run_id=seed_run.id, worker=self.runner.worker,
                delay_s=backoff_delay(attempt=tries), error=error.message, attempt=end,
            )  # fmt: skip
            return
        message = error.message
        if tries > 1:
            message = f"{message} (attempt {tries} of {self.max_attempts})"
        await self._finish_failed(seed_run, message, latency_ms, end)

    async def _divergence(self, attempt_id: int) -> dict | None:
        """A replay's first call that missed its recording under on_miss "fail" (the
        interceptor kept it before answering the call: traces.calls.replay)."""
        if self.job.replay_on_miss != "fail":
            return None
        return await self.runner.db(replay.attempt_divergence, attempt_id=attempt_id)

    async def _diverged(self, seed_run, end_of: Ending, report: dict, latency_ms: float) -> None:
        """The sample fails with the divergence report, whatever the task app made of the
        error: not tried again, it would diverge the same way."""
        end = end_of(
            status=AttemptStatus.FAILED, error=report["message"],
            latency_ms=latency_ms,
        )  # fmt: skip
        await self._finish_failed(seed_run, report["message"], latency_ms, end)

    async def _busy(self, seed_run, end_of: Ending, error, latency_ms: float) -> None:
        """The environment is at capacity: the seed waits and is tried again, charged nothing
        (its next try has a timeout of its own). The job's events say so once."""
        message = f"environment busy, tried again: {error.message}"
        end = end_of(
            status=AttemptStatus.ABANDONED,
            http_status=error.http_status, error=message, latency_ms=latency_ms,
        )  # fmt: skip
        delay = error.retry_after_s * random.uniform(1.0, 1.5)
        await self.runner.db(
            leases.seed_run_retry_later, seed_run_id=seed_run.id, worker=self.runner.worker,
            delay_s=delay, error=message, attempt=end, charged=None,
        )  # fmt: skip
        if not self.busy_said:
            self.busy_said = True
            await self.runner.db(
                environment_busy_note, job_id=self.job.id, message=error.message,
                limit=error.limit,
            )  # fmt: skip

    async def _lost(self, seed_run, end_of: Ending, error, latency_ms: float) -> None:
        message = f"{INTERCEPTOR_DOWN}; not counted against the task app: {error.message}"
        end = end_of(
            status=AttemptStatus.ABANDONED,
            http_status=error.http_status, error=message, latency_ms=latency_ms,
        )  # fmt: skip
        losses = seed_run.losses + 1
        if losses < settings.EVALHUB_SEED_MAX_LOSSES:
            await self.runner.db(
                leases.seed_run_retry_later, seed_run_id=seed_run.id, worker=self.runner.worker,
                delay_s=backoff_delay(attempt=losses), error=message, attempt=end, charged=False,
            )  # fmt: skip
            return
        message = f"{message} ({losses} times, EVALHUB_SEED_MAX_LOSSES)"
        await self._finish_failed(seed_run, message, latency_ms, end)

    async def _finish_failed(self, seed_run, message: str, latency_ms: float, end) -> None:
        result = leases.SeedResult(error=message, latency_ms=latency_ms)
        await self._finish_seeds(leases.SeedFinish(seed_run.id, SeedStatus.FAILED, result, end))
        if self.job.max_failures is not None:
            await self.runner.db(stopping.job_stop_if_broken, job_id=self.job.id)
