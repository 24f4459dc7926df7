"""The floor to compare the interceptor with: a bare pass-through proxy (an ASGI app plus one
pooled HTTP client, no database, no parsing). `UPSTREAM` is the OpenAI base URL to forward to;
`BARE_CLIENT` the client: `aiohttp` (the default, the interceptor's own) or `httpx`.

    UPSTREAM=http://127.0.0.1:9000/v1 uvicorn bench.bare_proxy:app
"""

from __future__ import annotations

import os

import aiohttp
import httpx

UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9000/v1")
CLIENT = os.environ.get("BARE_CLIENT", "aiohttp")
HEADERS = {"content-type": "application/json"}
clients: dict = {}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    url = f"{UPSTREAM}/chat/completions"
    if CLIENT == "httpx":
        await _via_httpx(url, body, send)
    else:
        await _via_aiohttp(url, body, send)


async def _via_aiohttp(url: str, body: bytes, send) -> None:
    if "aiohttp" not in clients:
        clients["aiohttp"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1000))
    async with clients["aiohttp"].post(url, data=body, headers=HEADERS) as resp:
        await _start(send, resp.status, resp.headers["content-type"])
        async for chunk in resp.content.iter_any():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _via_httpx(url: str, body: bytes, send) -> None:
    if "httpx" not in clients:
        clients["httpx"] = httpx.AsyncClient(limits=httpx.Limits(max_connections=1000), timeout=60)
    client = clients["httpx"]
    resp = await client.send(client.build_request("POST", url, content=body, headers=HEADERS),
                             stream=True)  # fmt: skip
    await _start(send, resp.status_code, resp.headers["content-type"])
    async for chunk in resp.aiter_bytes():
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await resp.aclose()
    await send({"type": "http.response.body", "body": b""})


async def _start(send, status: int, content_type: str) -> None:
    headers = [(b"content-type", content_type.encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
