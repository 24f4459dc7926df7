"""The fake LLM provider a newcomer starts beside `make run` (`python -m evalhub.fakeprovider`,
`make fake-llm`): a real process on a loopback port, called with the OpenAI SDK as a task app
calls it; and the loud line `make run` prints when no provider is configured."""

from __future__ import annotations

import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
from openai import OpenAI

from evalhub import runall
from evalhub.fakeprovider import arithmetic_answer
from evalhub.providers import upstreams_from
from tests.support.servers import ROOT, free_port, wait_until


@pytest.fixture
def fake_llm():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "evalhub.fakeprovider", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    first = "".join(process.stdout.readline() for _ in range(4))  # how to use it
    wait_until(lambda: _listening(port), timeout=20, what="the fake provider to listen")
    yield port, first
    process.terminate()
    process.wait(timeout=10)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_fake_provider_answers_arithmetic_as_a_task_app_asks_it(fake_llm):
    port, printed = fake_llm
    base_url = f"http://127.0.0.1:{port}/v1"
    assert f"OPENAI_BASE_URL={base_url} OPENAI_API_KEY=sk-fake make run" in printed
    client = OpenAI(base_url=base_url, api_key="anything")
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "What is 7 * 6?"}]
    )
    assert "42" in reply.choices[0].message.content
    assert reply.usage.total_tokens == 1500  # as a real provider reports it: tokens and cost
    other = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "The capital of Peru?"}]
    )
    assert other.choices[0].message.content == "You said: The capital of Peru?"


def test_most_arithmetic_questions_are_answered_right_and_always_the_same_way():
    questions = [f"What is {a} * {b}?" for a in range(2, 22) for b in range(2, 22)]
    right = [arithmetic_answer(q).endswith(f"= {eval(q[8:-1])}") for q in questions]  # noqa: S307
    assert 0.75 < sum(right) / len(right) < 0.95
    assert [arithmetic_answer(q) for q in questions] == [arithmetic_answer(q) for q in questions]


def test_a_busy_port_is_one_line_saying_how_to_choose_another(fake_llm):
    port, _ = fake_llm
    done = subprocess.run(
        [sys.executable, "-m", "evalhub.fakeprovider", "--port", str(port)],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"fake provider: port {port} on 127.0.0.1 is already in use (another evalhub, or "
        f"another program). Choose another port with --port (make fake-llm "
        f"FAKE_LLM_PORT={port + 1})"
    ]


def _settings(**env) -> SimpleNamespace:
    upstreams, _ = upstreams_from(
        env.get("providers", {}),
        openai_base_url=env.get("base_url", "https://api.openai.com/v1"),
        openai_api_key=env.get("key", ""),
    )
    return SimpleNamespace(EVALHUB_UPSTREAMS=upstreams)


def test_make_run_says_loudly_when_no_provider_is_configured_and_how_to_start_the_fake():
    warning = runall.no_provider_warning(_settings())
    assert "NO LLM PROVIDER IS CONFIGURED" in warning
    assert "make fake-llm" in warning
    assert "OPENAI_BASE_URL=http://127.0.0.1:8011/v1 OPENAI_API_KEY=sk-fake make run" in warning
    assert runall.no_provider_warning(_settings(key="sk-real")) == ""
    local = {"vllm": {"base_url": "http://127.0.0.1:9000/v1"}}  # a local server needs no key
    assert runall.no_provider_warning(_settings(providers=local)) == ""
