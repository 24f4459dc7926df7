"""A hand reaching a worker process that runs the job (`jobs.worker.here`): taken by the runner
there while its event loop keeps up, sent back to the queue when the loop is late. Likewise
the zip members of a running job: asked for only by a runner that keeps up."""

from __future__ import annotations

import asyncio
import threading
import time

from jobs.dispatch import JOB_RUN_TASK, TRACES_MEMBERS_TASK
from jobs.worker import here
from jobs.worker.here import LAG_MOST_S, Hand, Here, LoopLag
from jobs.worker.runner import JobRunner
from tests.support.jobs import tasks_published


def test_the_loop_lag_is_near_zero_while_the_loop_keeps_up_and_grows_when_it_is_blocked():
    async def measure(block_s: float) -> float:
        lag = LoopLag()
        watch = asyncio.create_task(lag.watch())
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            time.sleep(block_s)  # the work a saturated runner's loop runs between timers
            await asyncio.sleep(0.001)
        watch.cancel()
        return lag.late_s()

    assert asyncio.run(measure(0.0)) < LAG_MOST_S / 2
    assert asyncio.run(measure(0.04)) > LAG_MOST_S


class _Runner:
    """What `Here` reads of a runner: its job, whether it claims, its loop and its lag; and
    what it calls on it (on that loop)."""

    def __init__(self, job_id: str, loop: asyncio.AbstractEventLoop, late_s: float):
        self.job_id, self.loop, self.claiming = job_id, loop, True
        self.lag = LoopLag()
        self.lag._late.extend([late_s] * 20)
        self.calls: list[str] = []

    def hand_joined(self) -> None:
        self.calls.append("joined")

    def hand_passed(self) -> None:
        self.calls.append("passed")


def test_a_hand_joins_a_runner_that_keeps_up_and_is_passed_on_by_one_whose_loop_is_late():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        here = Here(others=lambda: 1)  # another worker takes messages
        keeping_up = _Runner("eval-a", loop, late_s=0.001)
        late = _Runner("eval-b", loop, late_s=0.05)
        here.add(keeping_up)
        here.add(late)
        # A hand goes to the other workers first, whatever the runner here.
        assert here.join("eval-a", passed=False) is Hand.FIRST_ELSEWHERE
        assert here.join("eval-b", passed=False) is Hand.FIRST_ELSEWHERE
        assert here.join("eval-c", passed=False) is Hand.ABSENT
        assert here.join("eval-a", passed=True) is Hand.JOINED
        assert here.join("eval-b", passed=True) is Hand.BUSY
        assert here.join("eval-c", passed=True) is Hand.ABSENT
        late.claiming = False  # handing the job over or draining: a new runner may start
        assert here.join("eval-b", passed=True) is Hand.ABSENT
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(timeout=5)
        assert keeping_up.calls == ["joined"] and late.calls == ["passed"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()


def test_a_late_runner_takes_the_hand_when_no_other_worker_takes_messages():
    """Sent back to the queue, the hand would come back to the same runner HAND_AGAIN_S later,
    the job held to the slots it had meanwhile."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    others = [0]
    try:
        here = Here(others=lambda: others[0])
        late = _Runner("eval-alone", loop, late_s=0.05)
        here.add(late)
        assert here.join("eval-alone", passed=False) is Hand.FIRST_ELSEWHERE
        assert here.join("eval-alone", passed=True) is Hand.JOINED
        others[0] = 1  # a worker started: the next hand is its to lend
        assert here.join("eval-alone", passed=True) is Hand.BUSY
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(timeout=5)
        assert late.calls == ["joined", "passed"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()


def test_a_runner_asks_for_zip_members_only_while_its_loop_keeps_up():
    async def ask(late_s: float) -> None:
        runner = JobRunner(job_id="eval-members")
        runner.lag._late.extend([late_s] * 20)
        try:
            await runner._members_ask()
        finally:
            runner._db_thread.shutdown()
            runner._results_thread.shutdown()

    with tasks_published() as sent:
        asyncio.run(ask(late_s=0.05))  # saturated: the build would take the rollouts' CPU
        assert sent == []
        asyncio.run(ask(late_s=0.001))
        assert sent == [TRACES_MEMBERS_TASK]


def test_a_request_for_a_hand_outlasts_claims_that_find_nothing_for_another_worker(monkeypatch):
    """A runner asks for a hand when a claim fills its slots and the job has more. A claim
    that finds the job's `max_concurrent` held by other runners (no room for a hand) keeps the
    request: the next claim that finds room sends it, once."""
    monkeypatch.setattr(here, "others_take_messages", lambda: 1)  # another worker takes them

    class Scripted(JobRunner):
        """The claims' answers (the room the job had for other runners) given in turn."""

        answers = [0, 0, 1, 1]

        async def _claim(self) -> int:
            return self.answers.pop(0)

    async def claims(sent: list[str]) -> None:
        runner = Scripted(job_id="eval-hands")
        try:
            for _ in range(2):
                await runner._claim_asking(time.monotonic())
            assert sent == [] and runner.ask_hand  # no room: still asking
            await runner._claim_asking(time.monotonic())
            assert sent == [JOB_RUN_TASK] and not runner.ask_hand
            await runner._claim_asking(time.monotonic())
            assert sent == [JOB_RUN_TASK]  # asked once, until a hand joins
        finally:
            runner._db_thread.shutdown()
            runner._results_thread.shutdown()

    with tasks_published() as sent:
        asyncio.run(claims(sent))


def test_a_lone_runner_takes_its_hands_itself_without_a_message(monkeypatch, settings):
    """No other worker takes messages: the job's message would only come back to this process
    (passed on once, then joined), two trips through the broker per hand. The runner takes the
    slots at once, a claim at a time, up to what the job can use, and publishes nothing."""
    monkeypatch.setattr(here, "others_take_messages", lambda: 0)
    settings.EVALHUB_RUNNER_MAX_INFLIGHT = 64

    class Filling(JobRunner):
        async def _claim(self) -> int:
            return 100  # every claim fills the slots and leaves seeds for others

    async def claims() -> list[int]:
        runner = Filling(job_id="eval-alone")
        runner.cap_most = 256
        caps = []
        try:
            for _ in range(5):
                await runner._claim_asking(time.monotonic())
                caps.append(runner.cap)
        finally:
            runner._db_thread.shutdown()
            runner._results_thread.shutdown()
        return caps

    with tasks_published() as sent:
        assert asyncio.run(claims()) == [128, 192, 256, 256, 256]
    assert sent == []
