"""The traces zip of a job: `manifest.json` and one `seeds/seed_<n>.json` per finished seed.

The zip is produced as a stream with bounded memory: seed runs are read in chunks (attempts and
LLM calls prefetched per chunk), each document is compressed and sent as soon as it is made, and
nothing but the list of file names outlives a chunk. `stream-zip` writes the archive from a
generator of members (zip64 when needed), so no buffer holds the archive.

A running job's zip holds the seeds that have finished. A terminal job's zip is built once,
kept in storage (`EvalJob.traces_zip_name`) and served from there, streamed, never redirected.
The first download of a terminal job streams to the client and into a temporary file at the
same time; the file goes to storage when the stream completes.
"""

from __future__ import annotations

import json
import logging
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.core.files import File
from django.core.files.storage import Storage, storages
from django.core.serializers.json import DjangoJSONEncoder
from django.http import StreamingHttpResponse
from django.utils import timezone
from stream_zip import ZIP_32, ZIP_AUTO, stream_zip

from jobs.models import TERMINAL_SEED_STATUSES, EvalJob, SeedRun
from jobs.public import job_config
from traces import totals
from traces.documents import document_bytes, seed_runs_with_calls, seed_trace_document
from traces.redaction import REDACTED, Redactor, is_secret_key, job_redactor, value_is_set
from traces.tokens import INTERCEPTOR_PATH, TOKEN_PREFIX

logger = logging.getLogger(__name__)

MANIFEST_SCHEMA = "evalhub.traces-manifest/1"
# Seed runs read (and documents built) per database round trip: their LLM calls are in memory
# together, so this bounds the memory the zip takes.
SEED_CHUNK_SIZE = 50
# Deflate level of the members: 9 (stream-zip's default) took a quarter of the time for a few
# per cent of size.
ZIP_LEVEL = 6
# Bytes read from storage per chunk, and gathered per hop when serving under ASGI.
READ_CHUNK_BYTES = 256 * 1024
# Size of the pieces the zip stream is cut into.
ZIP_CHUNK_BYTES = 64 * 1024
_FILE_MODE = stat.S_IFREG | 0o644


def traces_zip_storage() -> Storage:
    return storages["default"]


def traces_zip_storage_name(*, job: EvalJob) -> str:
    return f"traces/{job.id}.zip"


def seed_entry_name(seed: int, repeat: int | None = None) -> str:
    """`seeds/seed_<n>.json`: a safe relative name for any integer seed, negative ones too;
    `seeds/seed_<n>_r<k>.json` for sample k of a job that runs each seed more than once."""
    if repeat is None:
        return f"seeds/seed_{int(seed)}.json"
    return f"seeds/seed_{int(seed)}_r{int(repeat)}.json"


def _member(name: str, data: bytes, modified_at: datetime):
    return (name, modified_at, _FILE_MODE, ZIP_AUTO(len(data), level=ZIP_LEVEL), (data,))


class _AsRecorded:
    """A redactor that changes nothing: documents are built as recorded, then redacted by
    `_redacted`, which skips the parts that hold nothing to redact."""

    @staticmethod
    def value(value: Any) -> Any:
        return value


# Lower-cased, every key `is_secret_key` calls secret contains one of these.
_SECRET_KEY_HINTS = (
    b"authorization", b"api_key", b"api-key", b"apikey", b"cookie", b"password", b"passwd",
    b"access_token", b"access-token", b"refresh_token", b"refresh-token", b"client_secret",
    b"client-secret", b"secret_key", b"secret-key", b"secret_access_key", b"secret-access-key",
    b"session_token", b"session-token",
)  # fmt: skip
# Every string `Redactor.text` would change contains one of these (tokens start with ehi_).
_TEXT_HINTS = (INTERCEPTOR_PATH.encode(), TOKEN_PREFIX.encode(), b"earer")


def _needs_redaction(data: bytes, secrets: list[bytes]) -> bool:
    """Could `Redactor.value` change the JSON value these bytes encode? A superset: False only
    when no key looks secret, no string holds a secret, a token, a bearer or an inference URL."""
    if any(hint in data for hint in _TEXT_HINTS) or any(s in data for s in secrets):
        return True
    lowered = data.lower() if data.isascii() else data.decode().lower().encode()
    return any(hint in lowered for hint in _SECRET_KEY_HINTS)


def _redacted(value: Any, redactor: Redactor, secrets: list[bytes], depth: int = 0) -> Any:
    """`redactor.value(value)`, without walking the parts that hold nothing to redact (most of
    a document: logprobs, tool schemas, the task app's trace). Exact: a part is skipped only
    when its encoding shows nothing the redactor would change."""
    if not isinstance(value, dict | list):
        return redactor.value(value)
    try:
        data = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return redactor.value(value)
    if not _needs_redaction(data, secrets):
        return value
    if depth >= _MAX_SELECTIVE_DEPTH:  # deep parts are walked whole (and iteratively)
        return redactor.value(value)
    if isinstance(value, list):
        return [_redacted(v, redactor, secrets, depth + 1) for v in value]
    out: dict[str, Any] = {}
    for key, item in value.items():
        if is_secret_key(str(key)) and value_is_set(item):
            out[redactor.text(str(key))] = REDACTED
        else:
            out[redactor.text(str(key))] = _redacted(item, redactor, secrets, depth + 1)
    return out


_MAX_SELECTIVE_DEPTH = 8


def _secret_bytes(redactor: Redactor) -> list[bytes]:
    """The redactor's known secrets as they appear inside JSON strings."""
    return [orjson.dumps(secret)[1:-1] for secret in redactor.secrets]


def _members(*, job: EvalJob) -> Iterator[tuple]:
    redactor = job_redactor(job=job)
    secrets = _secret_bytes(redactor)
    now = timezone.now()
    seed_runs = (
        seed_runs_with_calls(job=job)
        .filter(status__in=TERMINAL_SEED_STATUSES)
        .iterator(chunk_size=SEED_CHUNK_SIZE)
    )
    with tempfile.TemporaryFile() as files:  # the manifest's list, kept out of memory
        count = 0
        for seed_run in seed_runs:
            document = seed_trace_document(
                job=job, seed_run=seed_run, redactor=_AsRecorded,
                attempts=seed_run.rollout_attempts.all(),
            )  # fmt: skip
            document = _redacted(document, redactor, secrets)
            name = seed_entry_name(seed_run.seed, seed_run.repeat if job.repeats > 1 else None)
            entry = {"seed": seed_run.seed, "repeat": seed_run.repeat, "path": name, "status": seed_run.status,
                     "score": seed_run.score, "num_llm_calls": len(document["llm_calls"])}  # fmt: skip
            files.write(orjson.dumps(entry) + b"\n")
            count += 1
            yield _member(name, document_bytes(document), seed_run.finished_at or now)
        # Last, so it lists exactly the files written and the summary is as fresh as they are.
        job.refresh_from_db()
        files.seek(0)
        manifest = _manifest_head(job=job, count=count, redactor=redactor)
        yield ("manifest.json", now, _FILE_MODE, ZIP_32, _manifest_chunks(manifest, files))


def _manifest_head(*, job: EvalJob, count: int, redactor) -> bytes:
    summary = totals.job_summary(job)
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "trace_schema": "evalhub.trace/1",
        "job_id": job.id,
        "status": job.status,
        "error": job.error,
        "complete": job.is_terminal,
        "generated_at": timezone.now(),
        "created_at": job.created_at,
        "started_at": job.started_at,
        "completed_at": job.completed_at,
        "config": job_config(job),
        "summary": summary,
        "num_files": count,
    }
    manifest = redactor.value(json.loads(json.dumps(manifest, cls=DjangoJSONEncoder)))
    return document_bytes(manifest)


def _manifest_chunks(head: bytes, files) -> Iterator[bytes]:
    """The manifest: its head as `_manifest_head` indents it, then `files`, one entry per
    line (seed, path, status, score, number of LLM calls: nothing to redact), read back
    from the temporary file a chunk at a time."""
    yield head.rstrip()[:-1].rstrip() + b',\n  "files": ['
    first = True
    while lines := files.readlines(READ_CHUNK_BYTES):
        sep = b"\n    " if first else b",\n    "
        first = False
        yield sep + b",\n    ".join(line.rstrip(b"\n") for line in lines)
    yield b"\n  ]\n}" if not first else b"]\n}"


def job_traces_zip_stream(*, job: EvalJob) -> Iterator[bytes]:
    """The zip of the job as it is now, as a stream of bytes, built from the database."""
    return stream_zip(_members(job=job), chunk_size=ZIP_CHUNK_BYTES)


def _store_built_zip(*, job: EvalJob, tmp) -> str:
    storage = traces_zip_storage()
    tmp.seek(0)
    name = storage.save(traces_zip_storage_name(job=job), File(tmp))
    # Record the name only if no other process recorded one meanwhile.
    updated = EvalJob.objects.filter(pk=job.pk, traces_zip_name="").update(traces_zip_name=name)
    if updated:
        job.traces_zip_name = name
        return name
    job.refresh_from_db(fields=["traces_zip_name"])
    if name != job.traces_zip_name:
        storage.delete(name)
    return job.traces_zip_name


def stored_zip_chunks(*, storage: Storage, name: str) -> Iterator[bytes]:
    """Chunks of a stored file. S3 objects are read from the response body as it arrives:
    django-storages' S3File would first copy the whole object into memory."""
    bucket = getattr(storage, "bucket", None)
    if bucket is not None and hasattr(storage, "_normalize_name"):
        from storages.utils import clean_name

        key = storage._normalize_name(clean_name(name))
        body = bucket.Object(key).get()["Body"]
        try:
            yield from body.iter_chunks(READ_CHUNK_BYTES)
        finally:
            body.close()
        return
    with storage.open(name, "rb") as f:
        while chunk := f.read(READ_CHUNK_BYTES):
            yield chunk


def _stored_zip_exists(*, job: EvalJob) -> bool:
    return bool(job.traces_zip_name) and traces_zip_storage().exists(job.traces_zip_name)


def _build_while_streaming(*, job: EvalJob) -> Iterator[bytes]:
    """Stream the zip to the client and into a temporary file; store it once complete.
    An interrupted download stores nothing."""
    with tempfile.TemporaryFile() as tmp:
        for chunk in job_traces_zip_stream(job=job):
            tmp.write(chunk)
            yield chunk
        try:
            _store_built_zip(job=job, tmp=tmp)
        except Exception:  # the client has its zip; the next download builds it again
            logger.exception("could not store the traces zip of job %s", job.id)


def job_traces_final(*, job: EvalJob) -> bool:
    """The job has ended and none of its seeds is still pending or running (a cancelled job's
    rollouts in flight may still be recording): its zip will not change any more."""
    return (
        job.is_terminal
        and not SeedRun.objects.filter(job=job).exclude(status__in=TERMINAL_SEED_STATUSES).exists()
    )


def job_traces_chunks(*, job: EvalJob) -> Iterator[bytes]:
    """What GET /traces sends: the stored zip of a finished job (built on first use), else the
    zip of what has finished so far."""
    if not job_traces_final(job=job):
        return job_traces_zip_stream(job=job)
    if _stored_zip_exists(job=job):
        return stored_zip_chunks(storage=traces_zip_storage(), name=job.traces_zip_name)
    if job.traces_zip_name:  # recorded but gone from storage (pruned or lost): build again
        EvalJob.objects.filter(pk=job.pk).update(traces_zip_name="")
        job.traces_zip_name = ""
    return _build_while_streaming(job=job)


async def _async_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Serve a sync byte iterator under ASGI without collecting it: Django would turn a sync
    iterator into a list first. Each hop to the sync thread gathers ~READ_CHUNK_BYTES, so the
    database work stays on the request's thread and the hops stay few."""

    def pull() -> bytes:
        parts, size = [], 0
        for part in chunks:
            parts.append(part)
            size += len(part)
            if size >= READ_CHUNK_BYTES:
                break
        return b"".join(parts)

    try:
        while data := await sync_to_async(pull)():
            yield data
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            await sync_to_async(close)()


def job_traces_response(*, job: EvalJob, asynchronous: bool = False) -> StreamingHttpResponse:
    """The body of GET /api/eval/jobs/{id}/traces. `asynchronous` when served under ASGI."""
    chunks = job_traces_chunks(job=job)
    content = _async_chunks(chunks) if asynchronous else chunks
    response = StreamingHttpResponse(content, content_type="application/zip")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") if not job.is_terminal else "final"
    response["Content-Disposition"] = f'attachment; filename="{job.id}-traces-{stamp}.zip"'
    response["Cache-Control"] = "private, no-store"
    return response
