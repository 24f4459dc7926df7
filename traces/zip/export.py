"""The traces zip of a job: `manifest.json` and one `seeds/seed_<n>.json` per finished seed.

The zip is assembled as a stream with bounded memory from its seeds' members, deflated
documents kept ready as seeds end (`traces.zip.members`: a member is built again only if something
it was made of changed), read a page at a time; `traces.zip.writer` writes the archive around
them (zip64 when needed). Nothing but the manifest's list of files and the central directory
(both in temporary files) outlives a page.

A running job's zip holds the seeds that have finished. A terminal job's zip is built once,
kept in storage (`EvalJob.traces_zip_name`) and served from there, streamed, never redirected.
A worker builds it as the job ends (`job_traces_zip_store`, the `traces.job_traces_zip_build`
task), off the web process. A download that comes first streams to the client and into a
temporary file at the same time; the file goes to storage when the stream completes (whichever
build is stored first is kept).
"""

from __future__ import annotations

import json
import logging
import tempfile
import zlib
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import orjson
from asgiref.sync import sync_to_async
from django.core.files import File
from django.core.files.storage import Storage, storages
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count, Max, Q
from django.http import StreamingHttpResponse
from django.utils import timezone

from jobs import labels
from jobs.models import TERMINAL_SEED_STATUSES, EvalJob, SeedRun
from jobs.public import job_config
from traces.models import CallState, LLMCall
from traces.redaction import job_redactor
from traces.results import result_rows
from traces.zip.documents import document_bytes
from traces.zip.members import ZIP_LEVEL, job_members
from traces.zip.writer import ZipWriter

logger = logging.getLogger(__name__)

MANIFEST_SCHEMA = "evalhub.traces-manifest/1"
# Every label the job's samples carry, as GET .../labels lists them.
LABELS_NAME = "labels.json"
LABELS_SCHEMA = "evalhub.labels/1"
# Bytes read from storage per chunk, and gathered per hop when serving under ASGI.
READ_CHUNK_BYTES = 256 * 1024
# Size of the pieces the zip stream is cut into.
ZIP_CHUNK_BYTES = 64 * 1024


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


def _zip_chunks(*, job: EvalJob) -> Iterator[bytes]:
    """The archive's bytes: the members of the finished seeds (`traces.zip.members`: kept ones
    copied, the others built), then the manifest, then the central directory."""
    writer, redactor, now = ZipWriter(), job_redactor(job=job), timezone.now()
    members = job_members(job=job, statuses=TERMINAL_SEED_STATUSES, redactor=redactor)
    with tempfile.TemporaryFile() as files:  # the manifest's list, kept out of memory
        for head, deflated, num_llm_calls in members:
            name = seed_entry_name(head.seed, head.repeat if job.repeats > 1 else None)
            entry = {"seed": head.seed, "repeat": head.repeat, "path": name, "status": head.status,
                     "score": head.score, "num_llm_calls": num_llm_calls}  # fmt: skip
            files.write(orjson.dumps(entry) + b"\n")
            yield writer.member(name, head.finished_at or now, deflated)
        carried = labels.job_labels(job=job)
        if carried:
            text = document_bytes(redactor.value(json.loads(json.dumps(
                {"schema": LABELS_SCHEMA, "job_id": job.id, "labels": carried},
                cls=DjangoJSONEncoder,
            ))))  # fmt: skip
            yield from _deflated_member(writer, LABELS_NAME, now, iter([text]))
        # Last, so it lists exactly the files written and the summary is as fresh as they are.
        job.refresh_from_db()
        files.seek(0)
        manifest = _manifest_head(
            job=job, count=writer.count - bool(carried), redactor=redactor, num_labels=len(carried)
        )
        yield from _deflated_member(writer, "manifest.json", now, _manifest_chunks(manifest, files))
    yield from writer.end()


def _deflated_member(
    writer: ZipWriter, name: str, modified_at: datetime, chunks: Iterator[bytes]
) -> Iterator[bytes]:
    """A member too big to hold in memory: deflated into a temporary file, then copied."""
    compressor = zlib.compressobj(ZIP_LEVEL, zlib.DEFLATED, -15)
    crc = size = 0
    with tempfile.TemporaryFile() as out:
        for chunk in chunks:
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
            out.write(compressor.compress(chunk))
        out.write(compressor.flush())
        compressed_size = out.tell()
        out.seek(0)
        data = iter(lambda: out.read(READ_CHUNK_BYTES), b"")
        yield from writer.member_chunks(name, modified_at, crc, size, compressed_size, data)


def _manifest_head(*, job: EvalJob, count: int, redactor, num_labels: int) -> bytes:
    summary = result_rows.job_summary(job)
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
        # People's labels of the samples (jobs.labels), in LABELS_NAME when there are any.
        "num_labels": num_labels,
        "labels": LABELS_NAME if num_labels else None,
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
    """The zip of the job as it is now, as a stream of bytes in pieces of about
    ZIP_CHUNK_BYTES."""
    parts, size = [], 0
    for part in _zip_chunks(job=job):
        parts.append(part)
        size += len(part)
        if size >= ZIP_CHUNK_BYTES:
            yield b"".join(parts)
            parts, size = [], 0
    if parts:
        yield b"".join(parts)


def _store_built_zip(*, job: EvalJob, tmp, calls: str) -> str:
    storage = traces_zip_storage()
    tmp.seek(0)
    name = storage.save(traces_zip_storage_name(job=job), File(tmp))
    # Record the name only if no other process recorded one meanwhile.
    recorded = EvalJob.objects.filter(pk=job.pk, traces_zip_name="")
    if recorded.update(traces_zip_name=name, traces_zip_calls=calls):
        job.traces_zip_name, job.traces_zip_calls = name, calls
        return name
    job.refresh_from_db(fields=["traces_zip_name", "traces_zip_calls"])
    if name != job.traces_zip_name:
        storage.delete(name)
    return job.traces_zip_name


def _calls_now(*, job: EvalJob) -> str:
    """The job's LLM calls as `traces_zip_calls` records them, and its labels (how many, the
    latest change: they are in the zip too): read before a zip is built, so a call saved or a
    label made while it is built has it built again."""
    calls = LLMCall.objects.filter(attempt__seed_run__job=job).aggregate(
        Count("id"),
        Max("id"),
        # A call written ahead is completed (or marked lost) in place: its state counts.
        in_flight=Count("id", filter=Q(state=CallState.IN_FLIGHT)),
        lost=Count("id", filter=Q(state=CallState.LOST)),
    )
    return (
        f"{calls['id__count']}:{calls['id__max'] or 0}:{calls['in_flight']}:{calls['lost']}"
        f":{labels.job_labels_stamp(job=job)}"
    )


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


def _stored_zip(*, job: EvalJob, calls: str) -> bool:
    """The job's zip is in storage and was built from the calls it has now; one that is not is
    forgotten (and deleted when a call came since), for the caller to build it again."""
    name = job.traces_zip_name
    if name and job.traces_zip_calls == calls and traces_zip_storage().exists(name):
        return True
    if name and EvalJob.objects.filter(pk=job.pk, traces_zip_name=name).update(traces_zip_name=""):
        if job.traces_zip_calls != calls:
            traces_zip_storage().delete(name)
    job.traces_zip_name = ""
    return False


def _build_while_streaming(*, job: EvalJob, calls: str) -> Iterator[bytes]:
    """Stream the zip to the client and into a temporary file; store it once complete.
    An interrupted download stores nothing."""
    with tempfile.TemporaryFile() as tmp:
        for chunk in job_traces_zip_stream(job=job):
            tmp.write(chunk)
            yield chunk
        try:
            _store_built_zip(job=job, tmp=tmp, calls=calls)
        except Exception:  # the client has its zip; the next download builds it again
            logger.exception("could not store the traces zip of job %s", job.id)


def job_traces_final(*, job: EvalJob) -> bool:
    """The job has ended and none of its seeds is still pending or running (a cancelled job's
    rollouts in flight may still be recording): its zip will not change any more."""
    return (
        job.is_terminal
        and not SeedRun.objects.filter(job=job).exclude(status__in=TERMINAL_SEED_STATUSES).exists()
    )


def job_traces_zip_store(*, job: EvalJob) -> str | None:
    """Build the zip of an ended job into storage unless it is there already (a worker does
    this as the job ends, so the first download is read from storage); its storage name, or
    None while the job's zip may still change."""
    if not job_traces_final(job=job):
        return None
    calls = _calls_now(job=job)
    if _stored_zip(job=job, calls=calls):
        return job.traces_zip_name
    with tempfile.TemporaryFile() as tmp:
        for chunk in job_traces_zip_stream(job=job):
            tmp.write(chunk)
        return _store_built_zip(job=job, tmp=tmp, calls=calls)


def job_traces_chunks(*, job: EvalJob) -> Iterator[bytes]:
    """What GET /traces sends: the stored zip of a finished job (built on first use, and again
    when a call was saved since), else the zip of what has finished so far."""
    if not job_traces_final(job=job):
        return job_traces_zip_stream(job=job)
    calls = _calls_now(job=job)
    if _stored_zip(job=job, calls=calls):
        return stored_zip_chunks(storage=traces_zip_storage(), name=job.traces_zip_name)
    return _build_while_streaming(job=job, calls=calls)


async def async_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
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
    content = async_chunks(chunks) if asynchronous else chunks
    response = StreamingHttpResponse(content, content_type="application/zip")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") if not job.is_terminal else "final"
    response["Content-Disposition"] = f'attachment; filename="{job.id}-traces-{stamp}.zip"'
    response["Cache-Control"] = "private, no-store"
    return response
