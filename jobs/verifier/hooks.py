"""Where the rollout worker (jobs.runner) hands seeds to the verifier, in a line or two each."""

from __future__ import annotations

import dataclasses

from jobs import leases
from jobs.dispatch import job_judge_dispatch
from jobs.models import EvalJob, JudgeStatus
from jobs.scores import Scores
from jobs.verifier import judgements, rewards
from jobs.verifier.config import verifier_config_of


class RunnerHooks:
    def __init__(self, job: EvalJob):
        self.job_id = job.id
        self.config = verifier_config_of(job.verifier_config, policy=job.policy)
        self.dispatched = False

    def seed_result(self, outcome, latency_ms: float) -> leases.SeedResult:
        """A succeeded rollout's result: with an enabled verifier its judgement is pending,
        and its reward waits for the verdict unless the reward source is the task app."""
        scores: Scores = outcome.scores
        judge = ""
        if self.config.enabled:
            judge = JudgeStatus.PENDING
            reward = rewards.reward(self.config, task_app_score=scores.score, verifier_score=None)
            scores = dataclasses.replace(scores, score=reward, verifier_score=None)
        return leases.SeedResult(
            scores=scores, metrics=outcome.metrics, task_trace=outcome.trace,
            latency_ms=latency_ms, task_app_score=outcome.scores.score, judge_status=judge,
        )  # fmt: skip

    def seed_finished(self, result: leases.SeedResult) -> None:
        """A judgement is waiting: make sure a judge worker is on the job."""
        if result.judge_status and not self.dispatched:
            self.dispatched = job_judge_dispatch(self.job_id)

    def rollouts_over(self) -> None:
        """The runner found nothing left to run: if judgements are still open (a judge worker
        died, or none was sent), send one."""
        if self.config.enabled and judgements.judgements_open(job_id=self.job_id):
            job_judge_dispatch(self.job_id)
