"""The runner's count of the slots it holds (`jobs.worker.runner.JobRunner`): a rollout's slot
is free once its result is written, though its task ends a turn of the event loop later."""

from __future__ import annotations

import asyncio

import pytest

from jobs.worker.rollouts import RolloutSource
from jobs.worker.runner import JobRunner


async def _batches_written_back_to_back() -> tuple[int, int]:
    runner = JobRunner(job_id="slots")
    runner.cap, runner.claiming, runner.working = 4, True, True
    ended = asyncio.Event()

    async def rollout() -> None:
        await ended.wait()  # its task ends after its result is written, a turn or more later

    for seed_run in (1, 2, 3, 4):
        runner.claimed_start(("rollout", seed_run), rollout())
    # A first batch, seed runs 1 and 2, is written and claims 5 and 6 in their slots; their
    # tasks have not ended when the second batch, 3 and 4, is written.
    first = runner.slots_reserve(freed=2)
    runner.slots_release(first)
    runner.results_written([("rollout", 1), ("rollout", 2)])
    for seed_run in (5, 6):
        runner.claimed_start(("rollout", seed_run), rollout())
    second = runner.slots_reserve(freed=2)
    runner.slots_release(second)
    ended.set()
    await asyncio.gather(*runner.in_flight.values())
    return first, second


def test_a_batch_written_before_the_last_ones_tasks_ended_claims_every_slot_it_frees():
    first, second = asyncio.run(_batches_written_back_to_back())
    # Counting seed runs 1 and 2 as held, the second batch claimed none: its two slots stood
    # empty until the runner's next claim of its own.
    assert (first, second) == (2, 2)


async def _a_task_ends() -> tuple[int, int]:
    runner = JobRunner(job_id="slots")
    runner.cap, runner.claiming, runner.working = 2, True, True
    ended = asyncio.Event()

    async def rollout() -> None:
        await ended.wait()

    runner.claimed_start(("rollout", 1), rollout())
    runner.results_written([("rollout", 1), ("rollout", 9)])  # 9 is not in flight: not counted
    during = runner.holding()
    ended.set()
    await asyncio.gather(*runner.in_flight.values())
    await asyncio.sleep(0)  # the done callbacks
    return during, len(runner.written)


def test_a_written_work_leaves_the_count_as_its_task_ends():
    during, left = asyncio.run(_a_task_ends())
    assert (during, left) == (0, 0)


@pytest.mark.django_db
def test_a_runner_takes_slots_ahead_of_the_write_only_when_its_own_cover_the_job(job):
    """A batch of results takes the slots of the rollouts that ended while it was written only
    for a runner that could hold the job's `max_concurrent` alone. One that asks for hands
    would leave its hand's runner nothing: counting those as free, it kept every slot read
    `running`, and three workers asked to share a job ran it on one."""
    runner = JobRunner(job_id=job.id)
    runner.job, runner.claiming = job, True
    source = RolloutSource(runner)
    runner.cap = job.max_concurrent - 1
    asking = source._claims_ahead()
    runner.cap = job.max_concurrent
    covering = source._claims_ahead()
    runner.claiming = False  # handing the job over, or draining
    assert (asking, covering, source._claims_ahead()) == (False, True, False)
