"""Small ASGI helpers: reading a bounded request body, sending a JSON answer, and which of the
provider's headers go back to the caller."""

from __future__ import annotations

from traces.interceptor.clients import UpstreamResponse
from traces.interceptor.errors import InterceptorError

# Response headers of the upstream worth handing on; everything else (cookies, encodings,
# hop-by-hop headers, lengths we recompute) stays behind.
_PASS_HEADERS = {
    b"content-type",
    b"x-request-id",
    b"openai-processing-ms",
    b"openai-version",
    b"openai-model",
    b"retry-after",
    b"retry-after-ms",
    b"x-should-retry",
}


async def read_body(scope, receive, limit: int) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise InterceptorError(413, "request_too_large", _too_large(limit))
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InterceptorError(400, "client_disconnected", "The request was not completed.")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise InterceptorError(413, "request_too_large", _too_large(limit))
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _too_large(limit: int) -> str:
    return f"The request body is larger than {limit} bytes (EVALHUB_MAX_REQUEST_BYTES)."


def pass_headers(resp: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower(), value)
        for name, value in resp.raw_headers
        if name.lower() in _PASS_HEADERS or name.lower().startswith(b"x-ratelimit-")
    ]


async def send_json(send, status: int, body: bytes, *, headers=None, retry: bool | None = None):
    out = [(k, v) for k, v in (headers or []) if k != b"content-type"]
    out.append((b"content-type", b"application/json"))
    out.append((b"content-length", str(len(body)).encode()))
    if retry is False:
        # Our own refusals (bad token, ended rollout, spent budget) do not get better on retry;
        # the OpenAI SDKs read this header and stop retrying.
        out.append((b"x-should-retry", b"false"))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})
