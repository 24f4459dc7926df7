"""Relaying a provider's stream: a key the provider echoes is masked even when it arrives
split across two chunks, and the caller still gets every event."""

from __future__ import annotations

import asyncio

import httpx

from traces.interceptor import relay
from traces.redaction import server_redactor
from traces.services import CallRecord

KEY = "sk-provider-key-that-must-stay-0042"


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk


def test_a_key_split_across_chunks_of_a_stream_is_masked(settings):
    settings.EVALHUB_UPSTREAMS = {"openai": {"base_url": "http://x", "api_key": KEY}}
    server_redactor.cache_clear()
    event = f'data: {{"choices":[{{"delta":{{"content":"my key is {KEY}"}}}}]}}\n\n'.encode()
    cut = event.index(KEY.encode()) + 10
    stream = [event[:cut], event[cut:], b"data: [DONE]\n\n"]
    resp = httpx.Response(200, stream=Chunks(stream), headers={"content-type": "text/event-stream"})
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        await asyncio.sleep(3600)

    record = CallRecord(
        attempt_id=1, job_id="j", provider="openai", price_provider=None, request={},
        started_at=None, stream=True,
    )  # fmt: skip
    try:
        asyncio.run(relay.relay_stream(record, resp, receive, send, 0.0, False))
    finally:
        server_redactor.cache_clear()
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert KEY.encode() not in body and KEY.encode() not in record.response_body
    assert b"my key is <redacted>" in body and body.endswith(b"data: [DONE]\n\n")
