"""The interceptor's side of a replay (traces.calls.replay has what a replay is): a call of a
replay job's policy is answered from its sample's recording, or is a miss; a judge's call in a
replay or a re-judgement from its sample's recorded judge calls, or is a miss; a call of a job
with a cache (`EvalJob.cache`) is answered with an earlier identical call's answer when there
is one (one indexed read per call), else goes live and is kept under its key.

Per attempt the recording is read once per web process and kept (`_MAX_TAPES` attempts); per
call one UPDATE numbers it (`replay_call_number`), so calls served by several web processes are
numbered as one sequence (a judge's calls are matched by their request alone, not numbered).
Calls of a job that replays nothing never come here (`AttemptAccess.replay_on_miss` is
empty)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import orjson

from jobs.replays import ON_MISS_ASK, ON_MISS_CALL
from traces.calls import replay
from traces.calls.recording import CallRecord
from traces.calls.replay_streams import recorded_stream
from traces.interceptor.asgi import send_json
from traces.interceptor.dbthreads import DbThreads
from traces.interceptor.errors import InterceptorError
from traces.interceptor.routes import Route
from traces.models import CallKind, ReplayMark
from traces.results import selectors

_MAX_TAPES = 10_000


class Replays:
    def __init__(self, db: DbThreads, submit: Callable[[CallRecord], None]):
        self._db = db
        self._submit = submit
        self._tapes: dict[tuple[int, bool], asyncio.Future] = {}

    async def answered(self, access: selectors.AttemptAccess, route: Route, record: CallRecord,
                       send, t0: float) -> bool:  # fmt: skip
        """True once the call is answered from its recording or the job's cache; False when
        the provider is to answer it; a replay's miss under on_miss "fail" raises the 422."""
        if access.replay_on_miss:  # a replay answers from its recording only
            return await self._replayed(access, route, record, send, t0)
        if not access.cache:
            return False
        key = replay.cache_key(route.name, record.request, access.repeat)
        found = await self._db.read(
            replay.cache_answer, key=key, owner_id=access.owner_id, job_id=access.job_id,
            cache=access.cache,
        )  # fmt: skip
        if found is None:
            record.request_hash = key  # answered live: found by the next identical call
            return False
        await self._answer(record, found, send, t0)
        return True

    async def _replayed(self, access, route: Route, record: CallRecord, send, t0: float) -> bool:
        judge = access.kind == CallKind.JUDGE
        tape = await self._tape(access.attempt_id, judge=judge)
        if judge:  # matched by its request alone, never numbered
            recorded, report = replay.judge_match(tape, route.name, record.request)
        else:
            number = await self._db.write(replay.replay_call_number, attempt_id=access.attempt_id)
            recorded, report = tape.match(number, route.name, record.request)
        if recorded is not None:
            await self._answer(record, recorded, send, t0)
            return True
        if access.replay_on_miss == ON_MISS_CALL:  # a divergence, asked live
            record.replay = ReplayMark.LIVE
            return False
        if access.replay_on_miss == ON_MISS_ASK:  # a re-judgement's new judge: a live call
            return False
        if not judge:  # the sample fails with it; a judge's miss fails its judgement only
            await self._db.write(
                replay.divergence_keep, attempt_id=access.attempt_id, report=report
            )
        error = InterceptorError(422, replay.REPLAY_DIVERGENCE, report["message"])
        record.forwarded, record.replay, record.http_status = False, ReplayMark.REFUSED, 422
        record.error = f"{error.type}: {error.message}"
        record.latency_ms = (time.perf_counter() - t0) * 1000
        self._submit(record)
        raise error

    async def _answer(self, record: CallRecord, recorded: replay.Recorded, send, t0: float):
        """Answer with a recorded call; the call's row is the recording's, nothing spent."""
        record.forwarded, record.replay, record.replayed = False, ReplayMark.REPLAYED, recorded
        record.provider, record.http_status = recorded.provider, recorded.http_status
        try:
            await _send_recorded(send, record, recorded)
        finally:
            record.latency_ms = record.ttft_ms = (time.perf_counter() - t0) * 1000
            self._submit(record)

    async def _tape(self, attempt_id: int, *, judge: bool) -> replay.Tape:
        """The attempt's recording (its policy's, or its judge's), read by the first of its
        calls (the others wait for it)."""
        key = (attempt_id, judge)
        future = self._tapes.get(key)
        if future is None:
            if len(self._tapes) >= _MAX_TAPES:  # the oldest attempts have long ended
                for key in list(self._tapes)[: _MAX_TAPES // 2]:
                    del self._tapes[key]
            future = self._tapes[key] = asyncio.get_running_loop().create_future()
            load = replay.judge_tape_load if judge else replay.tape_load
            try:
                tape = await self._db.read(load, attempt_id=attempt_id)
                future.set_result(tape or replay.Tape(0, 0, ()))
            except BaseException as exc:
                del self._tapes[key]
                future.set_exception(exc)
                future.exception()  # retrieved: the calls waiting get it, no warning is logged
                raise
        return await asyncio.shield(future)


async def _send_recorded(send, record: CallRecord, recorded: replay.Recorded) -> None:
    """The recorded answer in the call's wire format: a stream when it asks for one."""
    status = recorded.http_status or 200
    doc = recorded.response if isinstance(recorded.response, dict) else {}
    if not (record.stream and status == 200 and record.route != "embeddings"):
        await send_json(send, status, orjson.dumps(recorded.response))
        return
    options = record.request.get("stream_options")
    asked = isinstance(options, dict) and bool(options.get("include_usage"))
    body = recorded_stream(record.route, doc, include_usage=asked)
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
