"""A runner's database calls through a restart of the database (`through_outages`)."""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

log = logging.getLogger(__name__)


def through_outages(call):
    """Run a database call, again on a new connection while the database cannot be reached,
    for up to EVALHUB_DB_OUTAGE_S: a restart of the database pauses the runner (its rollouts
    go on), it does not end it. Every write it makes is conditional, so a retried one that
    had landed changes nothing."""
    deadline = time.monotonic() + settings.EVALHUB_DB_OUTAGE_S
    pause = 0.1
    while True:
        try:
            return call()
        except (OperationalError, InterfaceError):
            if time.monotonic() + pause > deadline:
                raise
            log.warning("database unreachable; trying again in %.1fs", pause)
            connections.close_all()
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
