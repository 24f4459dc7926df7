"""`GET /api/eval/jobs/{id}/results`, with memory that does not grow with the job.

Whole: the body is streamed. The summary and the per-seed figures (which need every row) come
first, computed once the job's rows are final and then kept (`jobs.figures`); then the rows are
read, encoded and sent RESULT_ROWS_CHUNK at a time; the body is the JSON document it always
was (summary fields, `job_id`, `status`, `error`, `summary`, `seeds` (the
per-seed figures), `results`).

Paginated (`?limit=N`, then `?limit=N&cursor=<next_cursor>`): `job_id`, `status`, `error`,
`results` (at most N rows in seed order) and `next_cursor` (null on the last page). Pages are
keyset-paginated on (seed, repeat), so every page costs the same however deep it is; the
summary is not repeated on every page (it is in the whole form and the job's status).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpResponse, StreamingHttpResponse
from rest_framework.utils.encoders import JSONEncoder

from jobs import labels
from jobs.models import EvalJob
from traces.results import result_rows
from traces.results.summary import with_people

MAX_PAGE = 10_000
# Encoded rows gathered per piece of the streamed body.
PIECE_BYTES = 256 * 1024


class CursorInvalid(ValueError):
    pass


def _dumps(value: Any) -> str:
    return json.dumps(
        value, cls=JSONEncoder, ensure_ascii=False, allow_nan=False, separators=(",", ":")
    )


def cursor_encode(seed: int, repeat: int) -> str:
    return f"{seed}:{repeat}"


def cursor_decode(cursor: str) -> tuple[int, int]:
    try:
        seed, repeat = cursor.split(":")
        return int(seed), int(repeat)
    except ValueError:
        raise CursorInvalid("cursor: not a cursor this API returned (use next_cursor)") from None


def results_page(*, job: EvalJob, limit: int, cursor: str | None) -> dict[str, Any]:
    """One page of the job's result rows."""
    after = cursor_decode(cursor) if cursor else None
    keyed = list(result_rows.result_rows_keyed(job=job, after=after, limit=limit + 1))
    more = len(keyed) > limit
    keyed = keyed[:limit]
    next_cursor = cursor_encode(*keyed[-1][0]) if more and keyed else None
    rows = [row for _, row in keyed]
    return {"job_id": job.id, "status": job.status, "error": job.error, "results": rows,
            "next_cursor": next_cursor}  # fmt: skip


def _whole_pieces(job: EvalJob) -> Iterator[str]:
    kept = result_rows.kept_figures(job=job, names=("summary", "seeds"), as_text=("seeds",))
    summary = with_people(kept["summary"], labels.job_people(job=job))
    head = {**summary, "job_id": job.id, "task_app_kind": job.task_app_kind,
            "status": job.status, "error": job.error, "summary": summary}  # fmt: skip
    yield _dumps(head)[:-1] + ',"seeds":'
    seeds = kept["seeds"].text  # as kept, never decoded (`jobs.figures.JsonText`)
    for start in range(0, len(seeds), PIECE_BYTES):
        yield seeds[start : start + PIECE_BYTES]
    yield ',"results":['
    parts, size, first = [], 0, True
    for row in result_rows.result_rows(job=job):
        text = _dumps(row) if first else "," + _dumps(row)
        first = False
        parts.append(text)
        size += len(text)
        if size >= PIECE_BYTES:
            yield "".join(parts)
            parts, size = [], 0
    parts.append("]}")
    yield "".join(parts)


async def _async(pieces: Iterator[str]) -> AsyncIterator[bytes]:
    """Under ASGI: each piece is made on a worker thread (the ORM is synchronous)."""
    done = object()
    while (piece := await sync_to_async(next)(pieces, done)) is not done:
        yield piece.encode()


def results_response(*, job: EvalJob, asynchronous: bool) -> HttpResponse:
    """Streamed under ASGI (the web process); in one piece under WSGI (Django's test client)."""
    pieces = _whole_pieces(job)
    if asynchronous:
        response = StreamingHttpResponse(_async(pieces), content_type="application/json")
    else:
        response = HttpResponse("".join(pieces).encode(), content_type="application/json")
    response["Cache-Control"] = "private, no-store"
    return response
