"""What can go wrong, each with an exit code of its own and one line a person can act on.

0, 1 and 2 are `evalhub gate`'s answers (pass, worse, too little evidence); every error has a
code above them, so a script can tell "the gate said no" from "the gate could not ask"."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    WORSE = 1  # gate: the candidate is worse than the base by more than --max-drop
    THIN = 2  # gate: too few shared seeds, or an interval too wide, to say either way
    RUNNING = 3  # a job still running where a finished one is needed (gate, plan)
    NOT_FOUND = 4  # no such job (or not yours)
    INVALID = 5  # a job file or a request the server refused: the field and the line
    AUTH = 6  # no API key, or the server refused it
    UNREACHABLE = 7  # no evalhub answers at that URL
    SERVER = 8  # the server failed (5xx) or answered something that is not the API
    JOB_FAILED = 9  # submit --watch / watch: the job ended failed or cancelled
    USAGE = 64  # a command line click could not read (sysexits' EX_USAGE)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells say it)
    BUG = 70  # something unforeseen (sysexits' EX_SOFTWARE); EVALHUB_DEBUG=1 shows the traceback


class CliError(Exception):
    """An error shown as one line (no traceback), the process exiting with `code`."""

    def __init__(self, message: str, code: Exit) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
