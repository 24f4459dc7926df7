"""A worker that can no longer consume exits (evalhub.celery's watchdog), and `make run`'s
supervisor starts it again (evalhub.runall)."""

from __future__ import annotations

from evalhub.celery import Liveness
from evalhub.runall import MAX_RESTARTS, QUICK_EXIT_S, RESTART_WINDOW_S, Supervisor


def test_a_consumer_that_ticks_is_left_alone():
    liveness = Liveness(stall_s=90, grace_s=10)
    liveness.tick(0.0)
    assert liveness.verdict(89.0, broker_answers=lambda: True) is None


def test_a_stuck_consumer_exits_only_while_the_broker_answers():
    liveness = Liveness(stall_s=90, grace_s=10)
    liveness.tick(0.0)
    # The broker is down: the consumer is busy reconnecting, which is not being stuck.
    assert liveness.verdict(200.0, broker_answers=lambda: False) is None
    reason = liveness.verdict(200.0, broker_answers=lambda: True)
    assert reason and "has not run for 200s" in reason


def test_a_worker_not_started_yet_is_not_stuck():
    assert Liveness(stall_s=1).verdict(1000.0, broker_answers=lambda: True) is None


def test_a_worker_stopping_after_an_unrecoverable_error_exits_after_the_grace():
    liveness = Liveness(stall_s=90, grace_s=10)
    liveness.tick(0.0)
    liveness.fatal(1.0, exitcode=1)
    assert liveness.verdict(10.5, broker_answers=lambda: False) is None
    assert "unrecoverable error" in liveness.verdict(11.0, broker_answers=lambda: False)
    assert liveness.exitcode == 1


class FakeProc:
    def __init__(self, argv):
        self.argv = argv
        self.code = None
        self.signals = []

    def poll(self):
        return self.code

    def send_signal(self, sig):
        self.signals.append(sig)
        self.code = 0

    def wait(self, timeout=None):
        return self.code

    def kill(self):
        self.code = -9


def test_the_supervisor_starts_a_child_that_exited_again():
    started: list[FakeProc] = []

    def start(argv):
        started.append(FakeProc(argv))
        return started[-1]

    now = [0.0]
    supervisor = Supervisor({"web": ["web"], "worker": ["worker"]}, start=start,
                            clock=lambda: now[0])  # fmt: skip
    worker = supervisor.procs["worker"]
    worker.code = 1  # e.g. its consumer died and the watchdog made it exit
    supervisor.check()
    assert not supervisor.stopping
    assert supervisor.procs["worker"] is not worker and supervisor.procs["worker"].argv == [
        "worker"
    ]
    assert supervisor.procs["web"] is started[0]
    assert supervisor.stop_all() == 0


def test_the_supervisor_gives_up_on_a_child_that_keeps_failing():
    now = [0.0]
    supervisor = Supervisor({"worker": ["worker"]}, start=FakeProc, clock=lambda: now[0])
    for _ in range(MAX_RESTARTS):
        now[0] += QUICK_EXIT_S  # each ran a moment (one exiting at once is another rule)
        supervisor.procs["worker"].code = 3
        supervisor.check()
    assert not supervisor.stopping
    now[0] += QUICK_EXIT_S
    supervisor.procs["worker"].code = 3
    supervisor.check()
    assert supervisor.stopping and supervisor.stop_all() == 3
    # Failures spread out over more than the window are restarted for ever.
    spread = Supervisor({"worker": ["worker"]}, start=FakeProc, clock=lambda: now[0])
    for _ in range(MAX_RESTARTS * 3):
        spread.procs["worker"].code = 1
        spread.check()
        now[0] += RESTART_WINDOW_S
    assert not spread.stopping
