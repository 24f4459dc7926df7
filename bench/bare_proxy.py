"""The floor to compare the interceptor with: a bare pass-through proxy (an ASGI app plus one
pooled httpx client, no database, no parsing). `UPSTREAM` is the OpenAI base URL to forward to.

    UPSTREAM=http://127.0.0.1:9000/v1 uvicorn bench.bare_proxy:app
"""

from __future__ import annotations

import os

import httpx

UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9000/v1")
client: httpx.AsyncClient | None = None


async def app(scope, receive, send):
    global client
    if scope["type"] != "http":
        return
    if client is None:
        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=1000), timeout=60)
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    req = client.build_request(
        "POST",
        f"{UPSTREAM}/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
    )
    resp = await client.send(req, stream=True)
    await send(
        {
            "type": "http.response.start",
            "status": resp.status_code,
            "headers": [(b"content-type", resp.headers["content-type"].encode())],
        }
    )
    async for chunk in resp.aiter_bytes():
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await resp.aclose()
    await send({"type": "http.response.body", "body": b""})
