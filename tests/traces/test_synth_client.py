"""synth-ai 0.4.4's own download code extracts our zip, over HTTP from a real uvicorn process
(ASGI: the zip goes out as an async stream)."""

from __future__ import annotations

import asyncio
import json
import warnings

import httpx
import pytest

from jobs.apikeys import api_key_create_for_username
from jobs.models import EvalJob, SeedRun
from tests.support import servers
from tests.support.trace_rows import TASK_APP_KEY, make_traced_job

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from synth_ai.cli.commands.eval.runner import fetch_traces_from_backend
    from synth_ai.sdk.api.eval import EvalJob as SynthEvalJob

pytestmark = pytest.mark.django_db(transaction=True)


def check_extracted(directory, traced, seeds: list[int], calls: int) -> None:
    files = sorted(p.name for p in (directory / "seeds").glob("*.json"))
    assert files == sorted(f"seed_{s}.json" for s in seeds)
    for seed in seeds:
        document = json.loads((directory / "seeds" / f"seed_{seed}.json").read_text())
        assert document["seed"] == seed and document["job_id"] == traced.job.id
        assert len(document["llm_calls"]) == calls
        tool_calls = [c["response"]["tool_calls"] for c in document["llm_calls"][:-1]]
        assert all(tc and tc[0]["function"]["name"] == "calculator" for tc in tool_calls)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["num_files"] == len(seeds)
    text = "".join(p.read_text() for p in directory.rglob("*.json"))
    assert TASK_APP_KEY not in text and not any(t in text for t in traced.tokens)


def test_sdk_download_traces_extracts_one_file_per_seed(web_server, tmp_path):
    _, key = api_key_create_for_username(username="alice")
    traced = make_traced_job(username="alice", seeds=[0, 1, 2, -1], calls_per_seed=4)
    job = SynthEvalJob.from_job_id(traced.job.id, backend_url=web_server, api_key=key)
    out = job.download_traces(tmp_path / "sdk")
    check_extracted(out, traced, [0, 1, 2, -1], 4)
    # The first download of a terminal job also stored it; the next one is served from storage.
    assert EvalJob.objects.get(pk=traced.job.pk).traces_zip_name
    again = job.download_traces(tmp_path / "sdk-again")
    check_extracted(again, traced, [0, 1, 2, -1], 4)


def test_cli_fetch_traces_from_backend_extracts_the_zip_of_a_running_job(web_server, tmp_path):
    _, key = api_key_create_for_username(username="alice")
    traced = make_traced_job(username="alice", seeds=[5, 6, 7], calls_per_seed=2, status="running")
    SeedRun.objects.filter(job=traced.job, seed=7).update(status="running", finished_at=None)
    path = asyncio.run(
        fetch_traces_from_backend(traced.job.id, web_server, key, str(tmp_path / "cli"))
    )
    check_extracted(tmp_path / "cli", traced, [5, 6], 2)
    assert path == str(tmp_path / "cli")


def test_web_process_streams_the_zip_as_it_is_made():
    """Chunked transfer, no Content-Length, and no warning from Django that it had to collect
    a sync iterator first: the zip is not assembled before it is sent."""
    web, base = servers.start_web()
    try:
        _, key = api_key_create_for_username(username="alice")
        traced = make_traced_job(username="alice", seeds=list(range(30)), calls_per_seed=2)
        headers = {"Authorization": f"Bearer {key}"}
        url = f"{base}/api/eval/jobs/{traced.job.id}/traces"
        for _ in ("built while sent", "read from storage"):
            with httpx.stream("GET", url, headers=headers, timeout=60) as response:
                assert response.status_code == 200
                assert response.headers.get("transfer-encoding") == "chunked"
                assert "content-length" not in response.headers
                body = response.read()
            assert body[:4] == b"PK\x03\x04"
    finally:
        web.stop()
    assert "must consume synchronous iterators" not in web.log()
