"""The runners working in this worker process, by job (`jobs.worker.runner`): a hand (the
job's message) reaching a process that runs the job joins the runner there rather than
starting a second one beside it."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.worker.runner import JobRunner


class Here:
    """The runners working in this process, by job: a hand for a job one of them works joins
    it (`JobRunner.hand_joined`) rather than starting a second one here."""

    def __init__(self) -> None:
        self._runners: dict[str, JobRunner] = {}
        self._lock = threading.Lock()

    def add(self, runner: JobRunner) -> None:
        with self._lock:
            self._runners.setdefault(runner.job_id, runner)

    def remove(self, runner: JobRunner) -> None:
        with self._lock:
            if self._runners.get(runner.job_id) is runner:
                del self._runners[runner.job_id]

    def join(self, job_id: str) -> bool:
        """Whether a runner of the job here took the hand: one still claiming (not handing
        the job over nor draining), whose loop runs."""
        with self._lock:
            runner = self._runners.get(job_id)
            if runner is None or not runner.claiming:
                return False
            try:
                runner.loop.call_soon_threadsafe(runner.hand_joined)
            except RuntimeError:  # its loop closed meanwhile
                return False
            return True


HERE = Here()
