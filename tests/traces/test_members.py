"""Zip members kept ready (traces.zip.members): a zip assembled from them is the zip built from the
rows; a member whose rows changed is built again; the archive opens with zip64 past 65,535."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import zipfile
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import EvalJob, SeedRun
from tests.support.trace_rows import make_traced_job
from traces import tasks
from traces.models import LLMCall, TraceMember
from traces.retention import traces_prune
from traces.zip import export, members
from traces.zip.writer import ZipWriter, deflate

pytestmark = pytest.mark.django_db


def zip_of(job: EvalJob) -> zipfile.ZipFile:
    job.refresh_from_db()
    return zipfile.ZipFile(io.BytesIO(b"".join(export.job_traces_zip_stream(job=job))))


def seed_files(zf: zipfile.ZipFile) -> dict[str, bytes]:
    return {name: zf.read(name) for name in zf.namelist() if name.startswith("seeds/")}


def call_rows_read(ctx) -> int:
    return sum('"traces_llmcall"."request"' in q["sql"] for q in ctx.captured_queries)


def test_a_zip_from_kept_members_is_the_zip_built_from_the_rows():
    traced = make_traced_job(seeds=[0, 1, 2, 3], calls_per_seed=2)
    built = seed_files(zip_of(traced.job))
    assert TraceMember.objects.filter(seed_run__job=traced.job).count() == 4
    with CaptureQueriesContext(connection) as queries:
        again = zip_of(traced.job)
    assert seed_files(again) == built
    assert call_rows_read(queries) == 0  # assembled: no call was read, nothing was built
    manifest = json.loads(again.read("manifest.json"))
    assert [f["num_llm_calls"] for f in manifest["files"]] == [2, 2, 2, 2]


def test_a_call_saved_after_its_member_was_built_is_in_the_next_zip():
    traced = make_traced_job(seeds=[0, 1], calls_per_seed=2)
    zip_of(traced.job)
    late = LLMCall.objects.filter(attempt__seed_run__seed=1, attempt__seed_run__job=traced.job)
    call = late.order_by("seq").last()
    call.pk, call.seq = None, 3
    call.response = {**call.response, "id": "chatcmpl-late"}
    call.save()
    with CaptureQueriesContext(connection) as queries:
        zf = zip_of(traced.job)
    assert call_rows_read(queries) == 1  # only seed 1's member was built again
    document = json.loads(zf.read("seeds/seed_1.json"))
    assert [c["seq"] for c in document["llm_calls"]] == [1, 2, 3]
    assert document["llm_calls"][2]["response"]["id"] == "chatcmpl-late"
    assert len(json.loads(zf.read("seeds/seed_0.json"))["llm_calls"]) == 2
    manifest = json.loads(zf.read("manifest.json"))
    assert [f["num_llm_calls"] for f in manifest["files"]] == [2, 3]


def test_a_verdict_written_since_and_a_secret_configured_since_rebuild_the_members(settings):
    traced = make_traced_job(seeds=[0, 1], calls_per_seed=1)
    zip_of(traced.job)
    SeedRun.objects.filter(job=traced.job, seed=0).update(
        judge_status="succeeded", verifier_score=0.25, judged_at=timezone.now(),
        verifier_justification="half right",
    )  # fmt: skip
    assert (
        json.loads(zip_of(traced.job).read("seeds/seed_0.json"))["verifier"]["verifier_score"]
        == 0.25
    )
    # A provider key configured later that a kept member shows in the clear.
    exposed = json.loads(zip_of(traced.job).read("seeds/seed_1.json"))["llm_calls"][0]["response"][
        "id"
    ]
    assert len(exposed) >= 8
    upstreams = {name: dict(entry) for name, entry in settings.EVALHUB_UPSTREAMS.items()}
    upstreams["openai"]["api_key"] = exposed
    settings.EVALHUB_UPSTREAMS = upstreams
    assert exposed.encode() not in zip_of(traced.job).read("seeds/seed_1.json")


def _seed_to_claim(job: EvalJob) -> SeedRun:
    """A seed of the running job that no worker has claimed yet."""
    return SeedRun.objects.create(job=job, seed=99, status="pending")


def test_a_running_job_has_the_members_of_seeds_ended_a_while_ago_built(settings):
    settings.EVALHUB_TRACES_ZIP_AFTER_S = 5.0
    traced = make_traced_job(seeds=[0, 1, 2], calls_per_seed=1, status="running")
    _seed_to_claim(traced.job)
    SeedRun.objects.filter(job=traced.job, seed=2).update(finished_at=timezone.now())
    tasks.job_members_build(traced.job.id)  # as the runners send it
    kept = TraceMember.objects.filter(seed_run__job=traced.job)
    assert sorted(kept.values_list("seed_run__seed", flat=True)) == [0, 1]  # 2 ended just now
    assert EvalJob.objects.get(pk=traced.job.pk).traces_members_at is None
    # Another build of the job under way: this one leaves it alone.
    EvalJob.objects.filter(pk=traced.job.pk).update(traces_members_at=timezone.now())
    SeedRun.objects.filter(job=traced.job, seed=2).update(
        finished_at=timezone.now() - timedelta(minutes=1)
    )
    assert members.job_members_build(job_id=traced.job.id) is None
    assert kept.count() == 2


def test_a_build_stops_once_the_job_has_no_seed_left_to_claim(settings, monkeypatch):
    """Its last rollouts and its summary are what the job's end waits for: a build in their
    worker's process would take its CPU from them. The zip builds the rest."""
    settings.EVALHUB_TRACES_ZIP_AFTER_S = 0.0
    traced = make_traced_job(seeds=[0, 1, 2, 3], calls_per_seed=1, status="running")
    left = _seed_to_claim(traced.job)
    monkeypatch.setattr(members, "PAGE_SIZE", 2)
    pages: list[list[int]] = []
    build = members._build

    def build_then_claim_the_last(**kwargs):
        pages.append(sorted(kwargs["seed_run_ids"]))
        SeedRun.objects.filter(pk=left.pk).update(status="running")  # a worker claims it
        return build(**kwargs)

    monkeypatch.setattr(members, "_build", build_then_claim_the_last)
    assert members.job_members_build(job_id=traced.job.id) == 2
    kept = TraceMember.objects.filter(seed_run__job=traced.job)
    assert sorted(kept.values_list("seed_run__seed", flat=True)) == [0, 1]
    assert len(pages) == 1
    # Nothing left to claim from the start: nothing is built; the zip builds every member.
    assert members.job_members_build(job_id=traced.job.id) == 0
    assert kept.count() == 2
    left.delete()
    EvalJob.objects.filter(pk=traced.job.pk).update(status="completed", completed_at=timezone.now())
    manifest = json.loads(zip_of(traced.job).read("manifest.json"))
    assert [f["seed"] for f in manifest["files"]] == [0, 1, 2, 3]
    assert kept.count() == 4


def test_pruning_a_job_drops_its_members():
    traced = make_traced_job(seeds=[0, 1], calls_per_seed=1)
    zip_of(traced.job)
    EvalJob.objects.filter(pk=traced.job.pk).update(
        completed_at=timezone.now() - timedelta(days=40)
    )
    traces_prune(older_than_days=30)
    assert not TraceMember.objects.filter(seed_run__job=traced.job).exists()
    document = json.loads(zip_of(traced.job).read("seeds/seed_0.json"))
    assert document["llm_calls"][0]["content_pruned"] is True


def test_an_archive_of_more_than_65535_members_is_zip64(tmp_path):
    path = tmp_path / "big.zip"
    at = datetime(2026, 11, 22, 14, 3, 7, tzinfo=UTC)
    writer = ZipWriter()
    with open(path, "wb") as f:
        for i in range(70_000):
            f.write(writer.member(f"seeds/seed_{i}.json", at, deflate(b'{"seed": %d}' % i, 3)))
        big = deflate(b"manifest " * 100_000, 3)
        pieces = [big.data[:1000], big.data[1000:]]
        for chunk in writer.member_chunks(
            "manifest.json", at, big.crc, big.size, len(big.data), pieces
        ):
            f.write(chunk)
        for chunk in writer.end():
            f.write(chunk)
    with zipfile.ZipFile(path) as zf:
        assert len(zf.infolist()) == 70_001
        assert zf.read("seeds/seed_69999.json") == b'{"seed": 69999}'
        assert zf.read("manifest.json") == b"manifest " * 100_000
        assert zf.getinfo("seeds/seed_0.json").date_time == (2026, 11, 22, 14, 3, 6)
        assert zf.testzip() is None
    if shutil.which("unzip"):  # Info-ZIP reads it too
        checked = subprocess.run(["unzip", "-tq", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
