"""The worker's answer budget (jobs/worker/answer_budget.py): big answers wait their turn, first
come first served, across the event loops of several threads; one larger than the budget goes
alone; small ones never wait; a cancelled waiter gives its place back; a wait pushes the
rollout's deadline back by as long as it lasted."""

from __future__ import annotations

import asyncio
import threading

import pytest

from jobs.worker.answer_budget import SMALL_BYTES, AnswerBudget, AnswerHold, answer_cost

MIB = 2**20


async def _taken(budget: AnswerBudget, nbytes: int, timeout: float = 0.2) -> bool:
    """Whether `nbytes` was granted within `timeout` (a grant that came is kept)."""
    try:
        await asyncio.wait_for(budget.take(nbytes), timeout)
    except TimeoutError:
        return False
    return True


def test_big_answers_wait_first_come_first_served_and_one_larger_than_the_budget_goes_alone():
    budget = AnswerBudget(100 * MIB)

    async def scenario():
        assert await _taken(budget, 60 * MIB)
        second = asyncio.create_task(budget.take(60 * MIB))
        third = asyncio.create_task(budget.take(10 * MIB))  # fits, but waits its turn
        await asyncio.sleep(0.05)
        assert not second.done() and not third.done()
        budget.give_back(60 * MIB)
        assert await second == 60 * MIB
        assert await third == 10 * MIB
        huge = asyncio.create_task(budget.take(500 * MIB))
        await asyncio.sleep(0.05)
        assert not huge.done()
        budget.give_back(70 * MIB)
        assert await huge == 100 * MIB  # the whole budget, alone
        budget.give_back(100 * MIB)

    asyncio.run(scenario())
    assert budget.used == 0


def test_a_cancelled_waiter_gives_its_place_to_the_next():
    budget = AnswerBudget(100 * MIB)

    async def scenario():
        await budget.take(90 * MIB)
        big = asyncio.create_task(budget.take(50 * MIB))
        small = asyncio.create_task(budget.take(10 * MIB))
        await asyncio.sleep(0.05)
        assert not small.done()  # behind the big one
        big.cancel()
        assert await small == 10 * MIB
        budget.give_back(100 * MIB)

    asyncio.run(scenario())
    assert budget.used == 0 and not budget._waiters


def test_a_waiter_in_another_threads_loop_is_woken_when_budget_is_given_back():
    budget = AnswerBudget(100 * MIB)
    asyncio.run(budget.take(80 * MIB))
    got: list[int] = []
    waiting = threading.Thread(target=lambda: got.append(asyncio.run(budget.take(50 * MIB))))
    waiting.start()
    waiting.join(timeout=0.2)
    assert waiting.is_alive() and not got
    budget.give_back(80 * MIB)
    waiting.join(timeout=5)
    assert got == [50 * MIB] and budget.used == 50 * MIB


def test_small_answers_never_wait_and_are_counted():
    budget = AnswerBudget(4 * MIB)

    async def scenario():
        await budget.take(4 * MIB)
        hold = AnswerHold(budget)
        await asyncio.wait_for(hold.take(SMALL_BYTES - 1), 1)  # over the budget, at once
        assert budget.used == 4 * MIB + answer_cost(SMALL_BYTES - 1)
        hold.release()
        hold.release()
        assert budget.used == 4 * MIB

    asyncio.run(scenario())


def test_the_wait_stops_the_rollouts_deadline_and_pushes_it_back():
    budget = AnswerBudget(100 * MIB)

    async def scenario():
        await budget.take(100 * MIB)
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(0.2) as deadline:  # shorter than the wait: never expires
            hold = AnswerHold(budget, deadline)
            due = deadline.when()
            loop.call_later(0.4, budget.give_back, 100 * MIB)
            await hold.take(5 * MIB)
            assert hold.waited_s >= 0.35
            assert deadline.when() == pytest.approx(due + hold.waited_s)
            assert hold.nbytes == answer_cost(5 * MIB)
            hold.resize(MIB)  # the answer turned into less: the rest is given back
        hold.release()

    asyncio.run(scenario())
    assert budget.used == 0
