"""Environment servers built with the real libraries (eval-protocol, OpenEnv, Atropos), each run
by its own virtualenv's Python (`make env-venvs`) on a loopback port; and evalhub itself: a web
process (API + interceptor) whose provider is the fake, and a real Celery worker."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from jobs.apikeys import api_key_create_for_username
from tests.support import servers
from tests.support.jobs import JOBS, api_job_wait

ROOT = Path(__file__).resolve().parents[2]
SERVERS = ROOT / "tests" / "support" / "env_servers"
SERVER_KEY = "sk-provider-key-only-the-server-holds"


def venv_python(name: str) -> str:
    python = ROOT / ".venv-env" / name / "bin" / "python"
    if not (ROOT / ".venv-env" / name / ".installed").exists():
        pytest.skip(f".venv-env/{name} is not built: run `make env-venvs`")
    return str(python)


def start_server(name: str, argv: list[str], *, ready_path: str, **env: str):
    """Start an environment server; return (process, base URL) once it answers HTTP."""
    port = servers.free_port()
    argv = [a.replace("{port}", str(port)) for a in argv]
    proc = servers.ChildProcess(name, argv, servers.child_env(PYTHONPATH=str(ROOT), **env))
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"{name} exited at start:\n{proc.log()}")
        try:
            httpx.get(f"{base}{ready_path}", timeout=2)
            return True
        except httpx.HTTPError:
            return False

    # OpenEnv imports gradio at start: about a minute on a busy 2-core machine.
    servers.wait_until(up, timeout=240, interval=0.2, what=f"{name} to start")
    return proc, base


@pytest.fixture(scope="session")
def gym_server(django_db_setup):
    """eval-protocol McpGym (tests/support/env_servers/gym_server.py); yields its MCP URL."""
    python = venv_python("eval-protocol")
    proc, base = start_server(
        "mcp-gym",
        [python, str(SERVERS / "gym_server.py"), "{port}"],
        ready_path="/mcp",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    yield f"{base}/mcp"
    proc.stop()


@pytest.fixture(scope="session")
def openenv_servers(django_db_setup):
    """OpenEnv servers: {"steps": URL, "rollout": URL, "steps-1": URL of one that takes a
    single session at a time} (env_servers/openenv_server.py)."""
    python = venv_python("openenv")
    argv = {"steps": ["steps"], "rollout": ["rollout"], "steps-1": ["steps", "1"]}
    started = {
        name: start_server(
            f"openenv-{name}",
            [python, str(SERVERS / "openenv_server.py"), "{port}", *args],
            ready_path="/health",
        )
        for name, args in argv.items()
    }
    yield {mode: base for mode, (_, base) in started.items()}
    for proc, _ in started.values():
        proc.stop()


def build_tokenizer(directory: Path) -> Path:
    """A word-level tokenizer saved locally, so BaseEnv loads one without the Hugging Face hub
    (run in the Atropos virtualenv, which has `tokenizers` and `transformers`)."""
    script = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = ["[UNK]", "[PAD]"] + [chr(c) for c in range(32, 127)]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(sys.argv[1])
"""
    servers_python = venv_python("atroposlib")
    proc = subprocess.run(
        [servers_python, "-c", script, str(directory)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return directory


@pytest.fixture(scope="session")
def atropos_bridge(django_db_setup, tmp_path_factory):
    """`evalhub-atropos` serving tests/support/env_servers/atropos_env.py:WeatherEnv, offline
    (HF_HUB_OFFLINE) with a tokenizer built locally; yields its base URL."""
    venv_python("atroposlib")
    tokenizer = build_tokenizer(tmp_path_factory.mktemp("tokenizer"))
    config = tmp_path_factory.mktemp("atropos") / "config.json"
    config.write_text(json.dumps({"env": {"tokenizer_name": str(tokenizer)}}))
    script = str(ROOT / ".venv-env" / "atroposlib" / "bin" / "evalhub-atropos")
    argv = [script, "tests.support.env_servers.atropos_env:WeatherEnv", "--config", str(config),
            "--port", "{port}", "--items", "4"]  # fmt: skip
    proc, base = start_server(
        "atropos", argv, ready_path="/health", HF_HUB_OFFLINE="1", WANDB_MODE="disabled"
    )
    yield base
    proc.stop()


@pytest.fixture(scope="module")
def evalhub_web(django_db_setup, django_db_blocker, celery_queue, fake_upstream_server):
    """The module's web process (API + interceptor, provider `openai` at the fake)."""
    with django_db_blocker.unblock():
        web, base = servers.start_web(
            EVALHUB_CELERY_QUEUE=celery_queue,
            OPENAI_BASE_URL=fake_upstream_server.url,
            OPENAI_API_KEY=SERVER_KEY,
        )
    yield base
    web.stop()


@pytest.fixture
def evalhub(transactional_db, evalhub_web, fake_upstream, worker_factory):
    """The module's web process and one worker; yields (base URL, auth headers)."""
    base = evalhub_web
    worker_factory(
        EVALHUB_PUBLIC_URL=base,
        EVALHUB_ROLLOUT_BACKOFF_S="0.05",
        EVALHUB_ROLLOUT_BACKOFF_MAX_S="0.2",
    )
    _, key = api_key_create_for_username(username="envs")
    return base, {"Authorization": f"Bearer {key}"}


def replay_reproduces(base: str, headers: dict[str, str], original: dict, fake_upstream) -> dict:
    """Replay the ended job `original` (as `api_job_run` answers it, its provider `fake_upstream`):
    every LLM call is answered from the recording, none reaches the provider, and every sample
    scores as it did. The replay's results."""
    fake_upstream.reset()
    made = httpx.post(f"{base}{JOBS}/{original['job_id']}/replay", json={}, headers=headers,
                      timeout=30)  # fmt: skip
    assert made.status_code == 201, made.text
    status = api_job_wait(base, headers, made.json()["job_id"])
    assert status["status"] == "completed", status
    was = original["results"]
    calls = sum(row["num_llm_calls"] for row in was["results"])

    def settled():  # the interceptor saves each call a moment after answering it
        answer = httpx.get(f"{base}{JOBS}/{status['job_id']}/results", headers=headers, timeout=30)
        results = answer.json()
        return results if results["summary"]["replayed_calls"] == calls else None

    results = servers.wait_until(settled, timeout=30, what="the replayed calls saved")
    assert calls > 0 and fake_upstream.received == []
    summary = results["summary"]
    assert (summary["live_calls"], summary["divergences"], summary["total_cost_usd"]) == (0, 0, 0)
    assert summary["total_tokens"] == was["summary"]["total_tokens"]
    scored = {(r["seed"], r["repeat"]): (r["status"], r["score"]) for r in results["results"]}
    assert scored == {(r["seed"], r["repeat"]): (r["status"], r["score"]) for r in was["results"]}
    return results
