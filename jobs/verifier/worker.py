"""Judging a job's rollouts on a Celery worker (`jobs.job_judge`), apart from the rollouts.

A judge never holds a rollout slot: a seed's judgement waits (`judge_status` pending) once its
rollout has released its lease. Judge workers claim judgements under a lease, at most
`verifier_config.concurrency` over all workers, each call bounded by `verifier_config.timeout`.
The last one to find nothing left ends the job (`jobs.services.job_finish_if_done`, which waits
for open judgements); a cancelled job's judgements are stopped and marked cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from django.conf import settings
from django.db import connections

from jobs import services
from jobs.models import EvalJob, JobStatus
from jobs.runner import worker_name
from jobs.verifier import judgements, prompt
from jobs.verifier.config import verifier_config_of
from jobs.verifier.sources import judge_inputs
from traces import tokens, totals
from traces.redaction import job_redactor

log = logging.getLogger(__name__)

POLL_S = 0.5
KEPT = "the task app's score is kept in task_app_score"


class JudgeError(Exception):
    """The judge gave no verdict; the message says why (it is the seed's verifier_error)."""


def judge_run(*, job_id: str) -> None:
    """Entry point of the Celery task."""
    asyncio.run(JudgeRunner(job_id=job_id).run())


class JudgeRunner:
    def __init__(self, *, job_id: str):
        self.job_id = job_id
        self.worker = worker_name()
        self.lease_s = settings.EVALHUB_LEASE_S
        self.in_flight: dict[int, asyncio.Task] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalhub-judge-db")
        self._changed = asyncio.Event()

    async def _db(self, fn, /, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, **kwargs))

    async def run(self) -> None:
        try:
            job = await self._db(EvalJob.objects.filter(pk=self.job_id).first)
            if job is None:
                return
            if job.status == JobStatus.CANCELLED:
                await self._db(judgements.judgements_cancel, job_id=self.job_id)
            if job.status != JobStatus.RUNNING:
                return
            self.config = verifier_config_of(job.verifier_config, policy=job.policy)
            self.redactor = job_redactor(job=job)
            async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10)) as client:
                self.client = client
                await self._work()
        finally:
            await self._db(connections.close_all)
            self._pool.shutdown(wait=True)

    async def _work(self) -> None:
        last_renew = 0.0
        while True:
            self._changed.clear()
            if time.monotonic() - last_renew >= self.lease_s / 3:
                await self._renew()  # and the job's sign of life, read by the redispatch
                status = await self._db(services.job_heartbeat, job_id=self.job_id)
                last_renew = time.monotonic()
            else:
                status = await self._db(_job_status, job_id=self.job_id)
            if status != JobStatus.RUNNING:
                await self._stop(cancelled=status == JobStatus.CANCELLED)
                return
            free = self.config.concurrency - len(self.in_flight)
            if free > 0:
                for claimed in await self._claim(free):
                    self._start(claimed)
            if not self.in_flight:
                left = await self._db(judgements.judging_left, job_id=self.job_id)
                if left == "none":
                    await self._db(
                        services.job_finish_if_done, job_id=self.job_id,
                        summarize=totals.job_summary,
                    )  # fmt: skip
                    return
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=POLL_S)
            except TimeoutError:
                pass

    async def _claim(self, free: int) -> list[judgements.Claimed]:
        fresh = [tokens.token_new() for _ in range(free)]
        return await self._db(
            judgements.judge_claim, job_id=self.job_id, worker=self.worker, limit=free,
            lease_s=self.lease_s, concurrency=self.config.concurrency,
            tokens=[(t, tokens.token_hash(t)) for t in fresh],
        )  # fmt: skip

    def _start(self, claimed: judgements.Claimed) -> None:
        task = asyncio.create_task(self._judge(claimed))
        self.in_flight[claimed.seed_run.id] = task

        def finished(t: asyncio.Task) -> None:
            if self.in_flight.get(claimed.seed_run.id) is t:
                del self.in_flight[claimed.seed_run.id]
            if not t.cancelled() and t.exception() is not None:
                log.error("job %s: a judgement crashed", self.job_id, exc_info=t.exception())
            self._changed.set()

        task.add_done_callback(finished)

    async def _renew(self) -> None:
        held = await self._db(
            judgements.judge_lease_renew, seed_run_ids=list(self.in_flight),
            worker=self.worker, lease_s=self.lease_s,
        )  # fmt: skip
        for seed_run_id in set(self.in_flight) - held:
            self.in_flight.pop(seed_run_id).cancel()

    async def _stop(self, *, cancelled: bool) -> None:
        tasks = list(self.in_flight.values())
        self.in_flight.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if cancelled:
            n = await self._db(judgements.judgements_cancel, job_id=self.job_id)
            log.info("job %s cancelled: %d judgements stopped", self.job_id, n)

    async def _judge(self, claimed: judgements.Claimed) -> None:
        verdict, error = None, None
        try:
            async with asyncio.timeout(self.config.timeout):
                verdict = await self._verdict(claimed)
            # A judge may repeat what it was shown: keep secrets out of the justification.
            verdict = dataclasses.replace(
                verdict, justification=self.redactor.text(verdict.justification)
            )
        except TimeoutError:
            error = (
                f"the judge did not answer within {self.config.timeout:g}s "
                f"(verifier_config.timeout); {KEPT}"
            )
        except JudgeError as exc:
            error = self.redactor.text(str(exc))
        await self._db(
            judgements.judgement_finish, seed_run_id=claimed.seed_run.id, worker=self.worker,
            config=self.config, verdict=verdict, error=error,
        )  # fmt: skip

    async def _verdict(self, claimed: judgements.Claimed) -> prompt.Verdict:
        conversation, outcome = await self._db(
            judge_inputs, seed_run=claimed.seed_run, redactor=self.redactor
        )
        messages = prompt.judge_messages(self.config, conversation=conversation, outcome=outcome)
        url = f"{tokens.inference_url(claimed.token)}/chat/completions"
        for attempt in (1, 2):
            answer = await self._call(url, prompt.judge_request(self.config, messages))
            try:
                return prompt.verdict_parse(answer)
            except prompt.MalformedAnswer as exc:
                if attempt == 2:
                    raise JudgeError(f"malformed judge answer, twice: {exc}") from None
                said = ((answer.get("choices") or [{}])[0].get("message") or {}).get("content")
                messages = prompt.retry_messages(messages, said or "", str(exc))
        raise AssertionError("unreachable")

    async def _call(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = await self.client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise JudgeError(
                f"the judge could not reach evalhub's interceptor ({type(exc).__name__}); {KEPT}"
            ) from None
        try:
            answer = resp.json()
        except ValueError:
            answer = None
        if resp.status_code != 200 or not isinstance(answer, dict):
            error = (answer or {}).get("error") if isinstance(answer, dict) else None
            detail = error.get("message") if isinstance(error, dict) else resp.text[:200]
            raise JudgeError(
                f"judge provider {self.config.backend_provider!r} unavailable: HTTP "
                f"{resp.status_code}: {detail}; {KEPT}"
            )
        return answer


def _job_status(*, job_id: str) -> str | None:
    return EvalJob.objects.filter(pk=job_id).values_list("status", flat=True).first()
