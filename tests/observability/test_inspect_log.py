"""`GET .../export/inspect` read back by the real `inspect_ai` package (its own virtualenv,
`.venv-env/inspect`): the samples, their scores, messages (tool calls and results included),
usage and the judge's verdicts are the job's results."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.environments.conftest import venv_python
from tests.support import servers
from tests.support.jobs import api_job_run, job_body
from tests.support.task_app import task_app_create

pytestmark = pytest.mark.worker

# Run by the inspect virtualenv's Python: what `read_eval_log` makes of the file.
READ = """
import json, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(sys.argv[1])
out = {
    "status": log.status, "task": log.eval.task, "model": log.eval.model,
    "total": log.results.total_samples, "completed": log.results.completed_samples,
    "metrics": {s.name: {k: m.value for k, m in s.metrics.items()} for s in log.results.scores},
    "usage": {m: u.model_dump() for m, u in log.stats.model_usage.items()},
    "samples": [{
        "id": s.id, "epoch": s.epoch,
        "scores": {k: v.value for k, v in (s.scores or {}).items()},
        "roles": [m.role for m in s.messages],
        "tool_calls": [c.function for m in s.messages if m.role == "assistant"
                       for c in (m.tool_calls or [])],
        "tool_results": [m.text for m in s.messages if m.role == "tool"],
        "output": s.output.completion,
        "usage": {m: u.model_dump() for m, u in s.model_usage.items()},
        "error": s.error.message if s.error else None,
    } for s in log.samples],
}
print(json.dumps(out))
"""


def test_inspect_reads_the_jobs_log(evalhub_factory, tmp_path):
    python = venv_python("inspect")
    base, headers, _ = evalhub_factory()
    app, _ = task_app_create()
    with servers.serve_asgi(app) as task_url:
        body = job_body(task_url, seeds=[0, 1, 2], repeats=2, env_config={
            "call_llm": "tools", "status_always": {"2": 400}}, verifier_config={
            "enabled": True, "backend_model": "gpt-4o-mini", "backend_provider": "openai"})  # fmt: skip
        run = api_job_run(base, headers, body)
    assert run["status"]["status"] == "completed", run["status"]
    rows = {(r["seed"], r["repeat"]): r for r in run["results"]["results"]}
    url = f"{base}/api/eval/jobs/{run['job_id']}/export/inspect"
    answer = httpx.get(url, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-disposition"].endswith('.json"')
    name = answer.headers["content-disposition"].split('filename="')[1].rstrip('"')
    path = tmp_path / name
    path.write_bytes(answer.content)
    read = subprocess.run([python, "-c", READ, str(path)], capture_output=True, text=True)
    assert read.returncode == 0, read.stderr
    log = json.loads(read.stdout)

    assert (log["status"], log["task"], log["model"]) == ("success", "demo", "openai/gpt-4o-mini")
    assert (log["total"], log["completed"]) == (3, 6)
    summary = run["results"]["summary"]
    assert log["metrics"]["reward"]["mean"] == pytest.approx(summary["mean_score"])
    samples = {(s["id"], s["epoch"] - 1): s for s in log["samples"]}
    assert set(samples) == set(rows)
    for key, row in rows.items():
        sample = samples[key]
        if row["status"] == "failed":
            assert sample["error"] and "400" in sample["error"]
            assert sample["roles"] == []
            continue
        assert sample["error"] is None
        assert sample["scores"]["reward"] == pytest.approx(row["score"])
        assert sample["scores"]["task_app"] == pytest.approx(row["task_app_score"])
        assert sample["scores"]["judge"] == pytest.approx(row["verifier_score"])
        # The agent's turn: the tool call, its result, the final answer.
        assert sample["roles"] == ["system", "user", "assistant", "tool", "assistant"]
        assert sample["tool_calls"] == ["get_weather"]
        assert "light rain" in sample["tool_results"][0]
        assert sample["output"]
        (usage,) = sample["usage"].values()
        # The policy's calls and the judge's, both of gpt-4o-mini here.
        assert usage["total_tokens"] == row["tokens"] + row["judge_tokens"]
        assert usage["total_cost"] == pytest.approx(row["cost_usd"] + row["judge_cost_usd"])
    (usage,) = log["usage"].values()
    assert usage["total_tokens"] == summary["total_tokens"] + summary["judge_total_tokens"]
    assert log["metrics"]["judge"]["mean"] == pytest.approx(summary["mean_verifier_score"])
    inspect_view_shows(python, tmp_path, name, samples=len(rows))


def inspect_view_shows(python: str, log_dir, name: str, *, samples: int) -> None:
    """`inspect view` on the folder lists the log and serves it whole to its UI."""
    port = servers.free_port()
    argv = [str(Path(python).parent / "inspect"), "view", "start", "--log-dir", str(log_dir),
            "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    view = servers.ChildProcess("inspect-view", argv, servers.child_env())
    api = f"http://127.0.0.1:{port}/api"

    def listed() -> list | None:
        if view.proc.poll() is not None:
            raise RuntimeError(f"inspect view exited:\n{view.log()}")
        try:
            files = httpx.get(f"{api}/log-files", timeout=5).json()["files"]
        except httpx.HTTPError:
            return None
        return files or None

    try:
        files = servers.wait_until(listed, timeout=120, interval=0.5, what="inspect view")
        assert [Path(f["name"]).name for f in files] == [name]
        shown = httpx.get(f"{api}/logs/{files[0]['name']}", timeout=30)
        assert shown.status_code == 200, shown.text
        assert len(shown.json()["samples"]) == samples
    finally:
        view.stop()
