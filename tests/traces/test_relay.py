"""Relaying a provider's stream: a key the provider echoes is masked even when it arrives
split across two chunks, and the caller still gets every event."""

from __future__ import annotations

import asyncio

from aiohttp import web

from traces.calls.recording import CallRecord
from traces.interceptor import relay
from traces.interceptor.clients import UpstreamClient
from traces.redaction import server_redactor

KEY = "sk-provider-key-that-must-stay-0042"


async def relay_from_provider(chunks: list[bytes], record: CallRecord, send) -> None:
    """Serve `chunks` as a stream from a provider on a loopback port, written apart, and relay
    what the interceptor's client reads of it."""

    async def stream(request):
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in chunks:
            await resp.write(chunk)
            await asyncio.sleep(0.05)
        await resp.write_eof()
        return resp

    async def receive():
        await asyncio.sleep(3600)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = UpstreamClient()
    try:
        resp = await client.request(
            "POST", f"http://127.0.0.1:{port}/v1/chat/completions", headers={}, body=b"{}"
        )
        try:
            await relay.relay_stream(record, resp, receive, send, 0.0, False)
        finally:
            await resp.aclose()
    finally:
        await client.aclose()
        await runner.cleanup()


def test_a_key_split_across_chunks_of_a_stream_is_masked(settings):
    settings.EVALHUB_UPSTREAMS = {"openai": {"base_url": "http://x", "api_key": KEY}}
    server_redactor.cache_clear()
    event = f'data: {{"choices":[{{"delta":{{"content":"my key is {KEY}"}}}}]}}\n\n'.encode()
    cut = event.index(KEY.encode()) + 10
    stream = [event[:cut], event[cut:], b"data: [DONE]\n\n"]
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    record = CallRecord(
        attempt_id=1, job_id="j", provider="openai", price_provider=None, request={},
        started_at=None, stream=True,
    )  # fmt: skip
    try:
        asyncio.run(relay_from_provider(stream, record, send))
    finally:
        server_redactor.cache_clear()
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert KEY.encode() not in body and KEY.encode() not in record.response_body
    assert b"my key is <redacted>" in body and body.endswith(b"data: [DONE]\n\n")
