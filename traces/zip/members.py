"""Seed documents as the traces zip holds them (redacted, indented, deflated), kept ready.

Building a document is most of a zip's cost (reading the calls, redacting, deflating: about half
a millisecond a seed); assembling kept members is a copy. So each finished seed's member is kept
(`TraceMember`) under a key of everything its document is made of: the seed run's own version
(status, end, verdict, attempts), its attempts' ends, its calls (how many, the newest), the
secrets its redactor knows and `MEMBER_FORMAT`. A zip reads its members a page at a time, with
their current keys; a member missing or whose key no longer matches (a call saved after it was
built, a verdict written since) is built again there and kept. Exact, not a guess: a member is
served only when nothing it was made of has changed.

While a job runs, its runners send `traces.job_members_build` every `EVALHUB_TRACES_ZIP_AFTER_S`
seconds (`jobs.dispatch`), which builds the members of the seeds that ended before then, so the
zip of a job that just ended is assembled, not built. Only while they keep up: a runner whose
worker has no CPU to spare (its loop late, or its CPU quota throttling it: `evalhub.cpuquota`)
sends none (the build would slow its rollouts), and a build stops
once the job has no seed left to claim (its end waits for its last rollouts and its summary);
the zip builds what is missing as the job ends.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, Max, OuterRef, Q
from django.utils import timezone

from jobs.bulk import rows_insert
from jobs.models import TERMINAL_SEED_STATUSES, EvalJob, RolloutAttempt, SeedRun, SeedStatus
from jobs.selectors import seed_run_pages
from traces.calls.pages import attempt_call_pages, calls_without_bodies
from traces.models import CallKind, CallState, LLMCall, TraceMember
from traces.redaction import JsonScrubber, Redactor, job_redactor
from traces.results import result_rows, totals
from traces.results.rows import model_rows
from traces.zip.documents import (
    document_bytes,
    document_head,
    document_verifier,
    llm_call_entry,
    trace_of,
    trace_rows,
)
from traces.zip.writer import Deflated, Deflating, deflate

log = logging.getLogger(__name__)

# Part of every member's key: raise it when the same rows make a different document (a new
# field, another indentation), so kept members are built again.
MEMBER_FORMAT = 2
# Deflate level of the members: 3, the last of zlib's fast levels, deflates these documents
# 2.5 times as fast as 6 for 13 % more bytes (1 is no faster and 25 % bigger than 3).
ZIP_LEVEL = 3
# Seed runs per page: their members' bytes and, for the ones built, their calls' JSON as text
# wait in memory together.
PAGE_SIZE = 200
# A seed with more LLM calls than this has its member built alone, its document written a
# page of STREAM_CALLS calls at a time into the deflater (`_member_streamed`), never whole.
BIG_SEED_CALLS = 500
STREAM_CALLS = 200
# Where a document without calls holds them, indented as `document_bytes` writes it.
_NO_CALLS = b'\n  "llm_calls": [],\n'
# A member build that has not ended after this long is taken to have died with its worker.
BUILD_CLAIM_S = 600
_HEAD = ("id", "seed", "repeat", "status", "score", "finished_at", "judge_status", "judged_at",
         "attempts")  # fmt: skip


class Head(NamedTuple):
    """What a seed run's member is keyed and named by."""

    id: int
    seed: int
    repeat: int
    status: str
    score: float | None
    finished_at: datetime | None
    judge_status: str
    judged_at: datetime | None
    attempts: int


class Member(NamedTuple):
    head: Head
    deflated: Deflated
    num_llm_calls: int


def _keyer(redactor: Redactor) -> Any:
    """A keyed hash holding the redactor's secrets: a secret configured since a member was
    built changes its key. Keyed with SECRET_KEY, so the key reveals nothing of them."""
    keyer = hashlib.blake2b(digest_size=16, key=settings.SECRET_KEY.encode()[:64])
    for secret in redactor.secrets:
        keyer.update(secret.encode() + b"\0")
    keyer.update(b"format %d" % MEMBER_FORMAT)
    return keyer


def _keys(heads: list[Head], keyer: Any) -> dict[int, str]:
    """The key each seed run's member has to have now."""
    rollouts = {
        row[0]: row[1:]
        for row in RolloutAttempt.objects.filter(seed_run_id__in=[h.id for h in heads])
        .values("seed_run_id")
        .annotate(
            Count("id", distinct=True),
            Count("finished_at"),
            Max("finished_at"),
            Count("llm_calls"),
            Max("llm_calls"),
            # A call written ahead is completed (or marked lost) in place: its state counts.
            in_flight=Count("llm_calls", filter=Q(llm_calls__state=CallState.IN_FLIGHT)),
            lost=Count("llm_calls", filter=Q(llm_calls__state=CallState.LOST)),
        )
        .values_list(
            "seed_run_id",
            "id__count",
            "finished_at__count",
            "finished_at__max",
            "llm_calls__count",
            "llm_calls__max",
            "in_flight",
            "lost",
        )
    }
    keys = {}
    for head in heads:
        key = keyer.copy()
        key.update(repr((head, rollouts.get(head.id))).encode())
        keys[head.id] = key.hexdigest()
    return keys


def _heads(
    *, job: EvalJob, statuses: Iterable[str], unkept_before: datetime | None = None
) -> Iterator[list[Head]]:
    """The job's seed runs of these statuses by seed and repeat, a page at a time; with
    `unkept_before`, only those that ended before then and have no member yet."""
    runs = SeedRun.objects.filter(job=job, status__in=list(statuses))
    if unkept_before is not None:
        kept = TraceMember.objects.filter(seed_run_id=OuterRef("pk"))
        runs = runs.filter(finished_at__lt=unkept_before).exclude(Exists(kept))
    yield from seed_run_pages(
        runs, size=PAGE_SIZE, read=lambda page: [Head(*v) for v in page.values_list(*_HEAD)]
    )


def job_members(*, job: EvalJob, statuses: Iterable[str], redactor: Redactor) -> Iterator[Member]:
    """The members of the job's seed runs of these statuses, by seed and repeat: kept ones
    whose key still matches, the others built, kept and then given."""
    keyer, scrubber = _keyer(redactor), JsonScrubber(redactor)
    for heads in _heads(job=job, statuses=statuses):
        keys = _keys(heads, keyer)
        kept = {
            row[0]: row[1:]
            for row in TraceMember.objects.filter(seed_run_id__in=list(keys)).values_list(
                "seed_run_id", "key", "crc", "size", "num_llm_calls", "data"
            )
        }
        stale = [h.id for h in heads if h.id not in kept or kept[h.id][0] != keys[h.id]]
        built = _build(job=job, seed_run_ids=stale, keys=keys, scrubber=scrubber)
        for head in heads:
            if head.id in built:
                yield Member(head, *built[head.id])
            else:
                _, crc, size, calls, data = kept[head.id]
                yield Member(head, Deflated(crc, size, bytes(data)), calls)


def job_members_build(*, job_id: str) -> int | None:
    """Build and keep the members of the job's finished seeds that have none and ended
    EVALHUB_TRACES_ZIP_AFTER_S ago (the web processes save each call a moment after answering
    it); how many were built, or None when another worker is building the job's members.

    Only while the job has seeds left to claim, looked at before each page: once it has none,
    what its end waits for is its last rollouts and its summary, on the workers, and a build
    in one of their processes takes that process's CPU from them (four workers held to a tenth
    of a CPU each: a build that started a second before the job's last rollout ended ran for
    12 s, beside the summary made in its process, and the job ended 5.4 s after its last
    rollout where it took 2.3-3.1 s without). The zip builds the members left as the job
    ends."""
    started = timezone.now()
    claimable = Q(traces_members_at__isnull=True) | Q(
        traces_members_at__lt=started - timedelta(seconds=BUILD_CLAIM_S)
    )
    if not EvalJob.objects.filter(claimable, pk=job_id).update(traces_members_at=started):
        return None
    try:
        job = EvalJob.objects.get(pk=job_id)
        redactor = job_redactor(job=job)
        keyer, scrubber = _keyer(redactor), JsonScrubber(redactor)
        ended_before = started - timedelta(seconds=settings.EVALHUB_TRACES_ZIP_AFTER_S)
        count = 0
        for heads in _heads(job=job, statuses=TERMINAL_SEED_STATUSES, unkept_before=ended_before):
            if not _left_to_claim(job_id):
                break
            keys = _keys(heads, keyer)
            count += len(_build(job=job, seed_run_ids=list(keys), keys=keys, scrubber=scrubber))
        return count
    finally:
        EvalJob.objects.filter(pk=job_id, traces_members_at=started).update(traces_members_at=None)


def _left_to_claim(job_id: str) -> bool:
    """Whether the job has a seed no worker has claimed yet (pending, or to be tried again)."""
    return SeedRun.objects.filter(job_id=job_id, status=SeedStatus.PENDING).exists()


def _build(
    *, job: EvalJob, seed_run_ids: list[int], keys: dict[int, str], scrubber: JsonScrubber
) -> dict[int, tuple[Deflated, int]]:
    """Build the members of these seed runs and keep them under `keys` (read before their rows:
    a call saved in between makes the member stale, never wrong)."""
    if not seed_run_ids:
        return {}
    built: dict[int, tuple[Deflated, int]] = {}
    calls_of = dict(
        LLMCall.objects.filter(attempt__seed_run_id__in=seed_run_ids)
        .values_list("attempt__seed_run_id").annotate(Count("id")).order_by()
    )  # fmt: skip
    big = [i for i in seed_run_ids if calls_of.get(i, 0) > BIG_SEED_CALLS]
    small = [i for i in seed_run_ids if i not in set(big)]
    if small:
        for seed_run, attempts in trace_rows(job=job, seed_run_ids=small, chunk_size=len(small)):
            data, calls = seed_document_bytes(job, seed_run, attempts, scrubber)
            built[seed_run.id] = (deflate(data, ZIP_LEVEL), calls)
    for seed_run_id in big:
        built[seed_run_id] = _member_streamed(job, seed_run_id, scrubber)
    rows = [(i, keys[i], crc, size, calls, deflated)
            for i, ((crc, size, deflated), calls) in built.items()]  # fmt: skip
    try:
        with transaction.atomic():
            # Not bulk_create: its building of the statement, value by value, was two fifths
            # of a build's CPU (a build, nearly half of a worker's held to a tenth of a CPU).
            rows_insert(TraceMember, _MEMBER_COLUMNS, rows, update_on="seed_run")
    except IntegrityError:  # the job was deleted meanwhile: the zip goes on, nothing is kept
        log.info("job %s: its seed runs are gone; members not kept", job.id)
    return built


_MEMBER_COLUMNS = ("seed_run", "key", "crc", "size", "num_llm_calls", "data")


def seed_document_bytes(
    job: EvalJob, seed_run: Any, attempts: list[tuple[Any, list[Any]]], scrubber: JsonScrubber
) -> tuple[bytes, int]:
    """(the seed's trace document as the zip holds it, its number of LLM calls)."""
    _, document = trace_of(job=job, seed_run=seed_run, redactor=_AsRecorded, attempts=attempts)
    calls = [call for _, attempt_calls in attempts for call in attempt_calls]  # in order
    document = _redacted(document, seed_run, calls, scrubber)
    return document_bytes(document), len(calls)


class _AsRecorded:
    """A redactor that changes nothing: documents are built as recorded, then redacted by
    `_redacted`, which skips the parts that hold nothing to redact."""

    @staticmethod
    def value(value: Any) -> Any:
        return value


# Where a document holds what came from a task app (a seed run's JSON fields) or a provider (a
# chat completion's request and response, whose parts the document copies as they are).
_SEED_RUN_PARTS = (
    ("metrics_json", ("task_app", "metrics")),
    ("metrics_json", ("task_app", "details")),
    ("metrics_json", ("outcome_objectives",)),
    ("task_trace_json", ("task_app", "trace")),
)
_CHAT_ROUTE = "chat.completions"


def _redacted(document: dict[str, Any], seed_run, calls: list, scrubber: JsonScrubber) -> dict:
    """The document through the job's redactor, exactly. What a task app or a provider sent is
    walked only when its JSON as stored shows something to redact (another wire format's
    request and response, rewritten as chat, are checked as rewritten); the rest, the fields
    evalhub writes, is checked whole."""
    parts = [(getattr(seed_run, column), path) for column, path in _SEED_RUN_PARTS]
    for i, call in enumerate(calls):
        parts += _call_parts(call, ("llm_calls", i))
    return _scrubbed(document, parts, scrubber)


def _call_parts(call: Any, where: tuple) -> list[tuple[str | None, tuple]]:
    """Where a call's entry (at `where`) holds what its provider sent, and that JSON as stored."""
    chat = call.route == _CHAT_ROUTE
    return [(call.request_json if chat else "", (*where, "request")),
            (call.response_json if chat else "", (*where, "response"))]  # fmt: skip


def _scrubbed(document: Any, parts: list[tuple[str | None, tuple]], scrubber: JsonScrubber) -> Any:
    """`document` redacted, its `parts` walked only when their stored JSON may hold a secret."""
    held = []
    for text, path in parts:
        *where, key = path
        container = _at(document, where)
        value, container[key] = container[key], None
        if text is None or (text and not scrubber.may_change(text)):
            held.append((path, value))  # nothing to redact
        else:
            held.append((path, scrubber.walk(value) if text else scrubber.value(value)))
    document = scrubber.value(document)
    for (*where, key), value in held:
        _at(document, where)[key] = value
    return document


def _at(document: dict[str, Any], path: list) -> Any:
    for step in path:
        document = document[step]
    return document


def _member_streamed(
    job: EvalJob, seed_run_id: int, scrubber: JsonScrubber
) -> tuple[Deflated, int]:
    """The member of a seed of many calls, the bytes `seed_document_bytes` makes, written into
    the deflater a page of calls at a time (`traces.calls.pages`): the document is never whole
    in memory. Its figures first, from the calls read without their bodies."""
    (seed_run,) = model_rows(SeedRun.objects.filter(pk=seed_run_id))
    attempts = list(model_rows(RolloutAttempt.objects.filter(seed_run_id=seed_run_id)
                               .order_by("number", "id")))  # fmt: skip
    usage = totals.usage_from_calls(calls_without_bodies(attempts=attempts, kind=CallKind.POLICY))
    judge = totals.usage_from_calls(calls_without_bodies(attempts=attempts, kind=CallKind.JUDGE))
    row = result_rows.seed_result_row(seed_run, usage, judge)
    head = document_head(job=job, seed_run=seed_run, row=row, usage=usage, attempts=attempts)
    document = {**head, "llm_calls": [], "verifier": document_verifier(seed_run=seed_run, row=row)}
    before, after = document_bytes(_redacted(document, seed_run, [], scrubber)).split(_NO_CALLS)
    out, count = Deflating(ZIP_LEVEL), 0
    out.write(before + b'\n  "llm_calls": [\n')
    for attempt in attempts:
        for page in attempt_call_pages(attempt_id=attempt.id, size=STREAM_CALLS,
                                       read=lambda calls: list(model_rows(calls))):  # fmt: skip
            for call in page:
                entry = _scrubbed(llm_call_entry(call, attempt), _call_parts(call, ()), scrubber)
                text = b"    " + document_bytes(entry).replace(b"\n", b"\n    ")
                out.write(b",\n" + text if count else text)
                count += 1
    out.write(b"\n  ],\n" + after)
    return out.done(), count
