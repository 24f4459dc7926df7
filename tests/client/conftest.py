from __future__ import annotations

import subprocess

import pytest

from jobs.apikeys import api_key_create_for_username
from tests.support.servers import ROOT

# Built by `make client-venv` from client/ alone: nothing of the server is in it.
CLIENT_VENV = ROOT / ".venv-client"


@pytest.fixture
def evalhub(web_server, tmp_path):
    """Run the installed `evalhub` executable of .venv-client against the session's web
    process with a fresh key; `run(*args, env=...)` returns the finished process."""
    executable = CLIENT_VENV / "bin" / "evalhub"
    if not executable.exists():
        pytest.fail(f"the evalhub client is not installed at {CLIENT_VENV}: run `make client-venv`")
    _, key = api_key_create_for_username(username="cli")

    def environment(env: dict[str, str] | None) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "EVALHUB_CONFIG": str(tmp_path / "evalhub-config.json"),
            "EVALHUB_URL": web_server,
            "EVALHUB_API_KEY": key,
            "COLUMNS": "200",
            **(env or {}),
        }

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 180):
        done = subprocess.run(
            [str(executable), *args], env=environment(env), cwd=tmp_path, capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def start(*args: str) -> subprocess.Popen:
        """The command started, not waited for (to interrupt it)."""
        return subprocess.Popen(
            [str(executable), *args], env=environment(None), cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    run.key = key
    run.start = start
    return run
