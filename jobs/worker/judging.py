"""The runner's source of judgements: the LLM judge of a job's succeeded rollouts.

A seed's judgement waits (`judge_status` pending) once its rollout has released its lease; the
runner claims it under a lease of its own (jobs.verifier.judgements: at most
`verifier_config.concurrency` over all workers), calls the judge through the interceptor with a
token of its own (its calls recorded as `kind: "judge"`; in a replay or a re-judgement answered
from the recorded judge calls when they match, docs/replay.md), each judgement bounded by
`verifier_config.timeout`, and writes the verdict and the reward.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import httpx

from jobs.verifier import judgements, prompt
from jobs.verifier.config import verifier_config_of
from jobs.worker.judge_inputs import judge_inputs
from traces import tokens
from traces.calls.replay import REPLAY_DIVERGENCE
from traces.redaction import job_redactor

if TYPE_CHECKING:
    from jobs.worker.runner import JobRunner

KEPT = "the task app's score is kept in task_app_score"


class JudgeError(Exception):
    """The judge gave no verdict; the message says why (it is the seed's verifier_error)."""


class JudgeSource:
    name = "judgement"

    def __init__(self, runner: JobRunner):
        self.runner = runner
        self.job = runner.job
        self.config = verifier_config_of(self.job.verifier_config, policy=self.job.policy)
        self.redactor = job_redactor(job=self.job)
        self.client: httpx.AsyncClient | None = None

    @property
    def concurrency(self) -> int:
        """Judgements this source may hold (0: the job has no judge)."""
        return self.config.concurrency if self.config.enabled else 0

    async def open(self, stack: contextlib.AsyncExitStack) -> bool:
        if self.config.enabled:
            client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10))
            self.client = await stack.enter_async_context(client)
        return True

    async def claim(self, limit: int) -> tuple[list[tuple[int, Coroutine]], int]:
        limit = min(limit, self.concurrency)
        if limit <= 0:
            return [], 0
        fresh = [tokens.token_new() for _ in range(limit)]
        claimed = await self.runner.db(
            judgements.judge_claim, job_id=self.job.id, worker=self.runner.worker, limit=limit,
            lease_s=self.runner.lease_s, concurrency=self.config.concurrency,
            tokens=[(t, tokens.token_hash(t)) for t in fresh],
        )  # fmt: skip
        return [(c.seed_run.id, self._judge(c)) for c in claimed], 0

    async def renew(self, ids: list[int]) -> set[int]:
        if not ids:
            return set()
        return await self.runner.db(
            judgements.judge_lease_renew, seed_run_ids=ids, worker=self.runner.worker,
            lease_s=self.runner.lease_s,
        )  # fmt: skip

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
        await self.runner.db(
            judgements.judgement_finish, seed_run_id=claimed.seed_run.id,
            worker=self.runner.worker, config=self.config, verdict=verdict, error=error,
        )  # fmt: skip

    async def _verdict(self, claimed: judgements.Claimed) -> prompt.Verdict:
        conversation, outcome = await self.runner.db(
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
            if isinstance(error, dict) and error.get("type") == REPLAY_DIVERGENCE:
                # A replay's judge asked what its recording never did (on_miss "fail").
                raise JudgeError(f"{detail}; {KEPT}")
            raise JudgeError(
                f"judge provider {self.config.backend_provider!r} unavailable: HTTP "
                f"{resp.status_code}: {detail}; {KEPT}"
            )
        return answer
