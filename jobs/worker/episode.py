"""What an environment's episode ends in, whatever its kind (a synth-ai task app, an MCP-Gym
server, an OpenEnv or Atropos environment: jobs/worker/environments/): a `RolloutOutcome`, the
seed's scores and what is kept of the episode, or a `TaskAppError` saying why not and whether
another try could help (`transient`); `EnvironmentBusy` is back-pressure, not a failure, and
`TaskAppUnreachable` no connection at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobs.figures import JsonText
from jobs.scores import Scores

# Deepest nesting kept of an episode's metrics and trace (every reader walks them).
MAX_ANSWER_DEPTH = 256


class TaskAppError(Exception):
    """No result for the seed from this try, `message` saying why (for people: it becomes the
    attempt's error); `transient` when another try could go better (connection failures, 429
    and 5xx answers), `http_status` the environment's answer when there was one."""

    def __init__(self, message: str, *, transient: bool, http_status: int | None = None):
        super().__init__(message)
        self.message = message
        self.transient = transient
        self.http_status = http_status


class EnvironmentBusy(TaskAppError):
    """The environment is at capacity (a 429 or 503 with `Retry-After`, an OpenEnv server with
    every session taken): back-pressure, not a failure of the seed. The worker waits
    `retry_after_s` and tries again, charging nothing; `limit` is the concurrency the server
    said it takes, when it said."""

    def __init__(self, message: str, *, retry_after_s: float, limit: int | None = None,
                 http_status: int | None = None):  # fmt: skip
        super().__init__(message, transient=True, http_status=http_status)
        self.retry_after_s = retry_after_s
        self.limit = limit


# How long to wait before trying an environment that said it is busy, when it did not say.
BUSY_RETRY_S = 1.0
BUSY_RETRY_MAX_S = 60.0


class TaskAppUnreachable(TaskAppError):
    """No connection could be made (refused, DNS, connect timeout)."""

    def __init__(self, message: str):
        super().__init__(message, transient=True)


@dataclass(frozen=True)
class RolloutOutcome:
    """A finished episode: a task app's valid answer to `POST /rollout` (jobs.worker.taskapp),
    or what another kind of environment made of its episode (jobs.worker.environments.outcome).

    `metrics` is what is kept of it for the seed run: the reward object as the task app sent
    it (`reward_info` or `metrics`, with its `outcome_objectives`, `event_rewards`, `details`),
    plus the answer's `success_status`, `status_detail` and `artifact` when present. A big
    answer's metrics and trace are kept as the JSON text to be written (`kept_as_text`)."""

    scores: Scores
    metrics: dict[str, Any] | JsonText = field(default_factory=dict)
    trace: Any = None
    http_status: int = 200
    outcome_objectives: dict[str, float] | None = None
