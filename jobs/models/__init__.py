"""Eval jobs as rows: the database is the source of truth for work.

A job is one `EvalJob` (jobs.models.jobs) and one `SeedRun` per sample (jobs.models.samples).
Workers claim pending seed runs and hold a lease while they work; each try at a seed is a
`RolloutAttempt` with its own run id and interceptor token. `JobEvent` rows are the numbered
events clients can follow, `JobFigures` the figures kept of a job's rows (jobs.models.events);
`SampleLabel` a person's label of a sample (jobs.models.labels); `ApiKey` a client's key
(jobs.models.keys). Every name is imported from here.
"""

from jobs.models.events import JobEvent, JobFigures
from jobs.models.jobs import (
    ENDING_JOBS,
    TERMINAL_JOB_STATUSES,
    EvalJob,
    JobStatus,
    new_job_id,
)
from jobs.models.keys import ApiKey
from jobs.models.labels import RewardSource, SampleLabel, Verdict
from jobs.models.samples import (
    CONNECTION_ERROR_PREFIX,
    OPEN_JUDGE_STATUSES,
    OPEN_SEED_STATUSES,
    TERMINAL_SEED_STATUSES,
    AttemptStatus,
    JudgeStatus,
    RolloutAttempt,
    SeedRun,
    SeedRunQuerySet,
    SeedStatus,
)

__all__ = [
    "CONNECTION_ERROR_PREFIX",
    "ENDING_JOBS",
    "OPEN_JUDGE_STATUSES",
    "OPEN_SEED_STATUSES",
    "TERMINAL_JOB_STATUSES",
    "TERMINAL_SEED_STATUSES",
    "ApiKey",
    "AttemptStatus",
    "EvalJob",
    "JobEvent",
    "JobFigures",
    "JobStatus",
    "JudgeStatus",
    "RewardSource",
    "RolloutAttempt",
    "SampleLabel",
    "SeedRun",
    "SeedRunQuerySet",
    "SeedStatus",
    "Verdict",
    "new_job_id",
]
