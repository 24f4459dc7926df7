"""The zip member of a sample of many LLM calls, written a page of calls at a time into the
deflater (traces.zip.members): the same bytes as the member built whole, and a sample of
thousands of calls whole in the zip."""

from __future__ import annotations

import json
import zipfile

import pytest
from django.contrib.auth import get_user_model

from jobs.models import SeedRun
from tests.frontend import job_rows
from tests.support.big_sample import big_sample_make
from tests.support.trace_rows import TASK_APP_KEY, make_traced_job
from tests.traces.test_members import zip_of
from traces.redaction import JsonScrubber, job_redactor
from traces.zip import members
from traces.zip.documents import seed_trace_document
from traces.zip.export import seed_entry_name
from traces.zip.members import _build, _keyer, _keys, _member_streamed

pytestmark = pytest.mark.django_db


def built_both_ways(job, monkeypatch) -> tuple[dict, dict]:
    redactor = job_redactor(job=job)
    heads = [h for page in members._heads(job=job, statuses=["succeeded"]) for h in page]
    keys, scrubber = _keys(heads, _keyer(redactor)), JsonScrubber(redactor)
    whole = _build(job=job, seed_run_ids=list(keys), keys=keys, scrubber=scrubber)
    monkeypatch.setattr(members, "BIG_SEED_CALLS", 0)  # every seed streamed...
    monkeypatch.setattr(members, "STREAM_CALLS", 2)  # ...its calls read two at a time
    streamed = _build(job=job, seed_run_ids=list(keys), keys=keys, scrubber=scrubber)
    return whole, streamed


def test_a_streamed_member_is_the_member_built_whole(monkeypatch):
    traced = make_traced_job(seeds=[0, 1, 2], calls_per_seed=5)
    job_rows.judge_record(
        seed_run=SeedRun.objects.get(job=traced.job, seed=1), verdict=0.25,
        justification=f"The task app's key {TASK_APP_KEY} was in the answer.",
    )  # fmt: skip
    whole, streamed = built_both_ways(traced.job, monkeypatch)
    assert len(whole) == 3 and streamed == whole


def test_a_sample_of_thousands_of_calls_is_whole_in_the_zip():
    owner = get_user_model().objects.create_user(username="alice")
    seed_run = big_sample_make(owner=owner, calls=1500)
    job = seed_run.job
    zf: zipfile.ZipFile = zip_of(job)
    document = json.loads(zf.read(seed_entry_name(seed_run.seed)))
    assert document == seed_trace_document(
        job=job, seed_run=seed_run, redactor=job_redactor(job=job)
    )
    assert [c["seq"] for c in document["llm_calls"]] == list(range(1, 1501))
    manifest = json.loads(zf.read("manifest.json"))
    assert [f["num_llm_calls"] for f in manifest["files"]] == [1500]


def test_the_streamed_member_of_a_big_sample_is_deflated_as_a_whole_one_would_be():
    owner = get_user_model().objects.create_user(username="alice")
    seed_run = big_sample_make(owner=owner, calls=600)
    job = seed_run.job
    redactor = job_redactor(job=job)
    (deflated, calls) = _member_streamed(job, seed_run.id, JsonScrubber(redactor))
    expected = members.seed_document_bytes(
        job, *next(iter(members.trace_rows(job=job, seed_run_ids=[seed_run.id], chunk_size=1))),
        JsonScrubber(redactor),
    )  # fmt: skip
    assert calls == expected[1] == 600
    assert deflated == members.deflate(expected[0], members.ZIP_LEVEL)
