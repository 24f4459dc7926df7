"""Scale tests: several web processes, several workers, big jobs. Fixtures reused from the
interceptor's tests (a job with a running attempt and its token)."""

from __future__ import annotations

from tests.traces.conftest import make_rollout  # noqa: F401 - a fixture, reused
