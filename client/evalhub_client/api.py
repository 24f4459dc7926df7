"""evalhub's REST API over httpx: each call's failure made one `CliError` (errors.py), the
event stream read as server-sent events, downloads streamed to a file."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

import httpx

from evalhub_client import __version__
from evalhub_client.config import Config
from evalhub_client.errors import CliError, Exit

TIMEOUT = httpx.Timeout(30.0, connect=10.0)
# The event stream sends a keep-alive every 15 s: a read waits a little longer than that.
STREAM_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
TERMINAL = ("completed", "failed", "cancelled")
STREAM_ENDED = "sse.stream.ended"
RECONNECTS = 20


class RequestRefused(CliError):
    """A 400/422: the server named the offending fields (`fields`, as the API's error body)."""

    def __init__(self, message: str, fields: dict[str, Any]) -> None:
        super().__init__(message, Exit.INVALID)
        self.fields = fields


@dataclass(frozen=True)
class Event:
    seq: int | None
    type: str
    data: dict[str, Any]


class Api:
    def __init__(self, config: Config) -> None:
        self.config = config
        headers = {"User-Agent": f"evalhub-client/{__version__}"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self.http = httpx.Client(base_url=f"{config.url}/api", headers=headers, timeout=TIMEOUT)

    def dashboard_url(self, job_id: str) -> str:
        return f"{self.config.url}/jobs/{job_id}/"

    def call(self, method: str, path: str, *, what: str = "", **kwargs: Any) -> Any:
        """The JSON answer of one call; `what` names the thing a 404 is about ("job X")."""
        with _transport_errors(self.config.url):
            response = self.http.request(method, path, **kwargs)
        self.check(response, what=what)
        try:
            return response.json()
        except ValueError:
            raise CliError(
                f"{self.config.url} answered {path} with something that is not JSON "
                "(is EVALHUB_URL an evalhub server?)",
                Exit.SERVER,
            ) from None

    def check(self, response: httpx.Response, *, what: str = "") -> None:
        if response.status_code < 400:
            return
        if not response.is_stream_consumed:  # a streamed answer: its error body is small
            response.read()
        body = _json_or_none(response)
        detail = (body or {}).get("detail") or response.text[:200] or response.reason_phrase
        code = response.status_code
        if code == 401 or code == 403:
            if not self.config.api_key:
                raise CliError("no API key: set EVALHUB_API_KEY or run `evalhub login`", Exit.AUTH)
            raise CliError(f"the server refused the API key ({detail})", Exit.AUTH)
        if code == 404:
            raise CliError(f"{what or 'not found'}: no such job, or not yours", Exit.NOT_FOUND)
        if code == 409:
            raise CliError(f"{what}: {detail}" if what else str(detail), Exit.RUNNING)
        if code in (400, 413, 422):
            raise RequestRefused(str(detail), (body or {}).get("fields") or {})
        raise CliError(f"the server failed ({code}): {detail}", Exit.SERVER)

    def download(self, path: str, out: BinaryIO, *, what: str, **kwargs: Any) -> int:
        """Stream `path`'s body into `out`; its size in bytes."""
        size = 0
        with (
            _transport_errors(self.config.url),
            self.http.stream("GET", path, timeout=STREAM_TIMEOUT, **kwargs) as response,
        ):
            self.check(response, what=what)
            for chunk in response.iter_bytes():
                out.write(chunk)
                size += len(chunk)
        return size

    def summary(self, job_id: str) -> dict[str, Any]:
        """The job's summary (mean score, cost, tokens...) as `GET .../results` begins with it:
        only the head of the body is read, however many rows follow."""
        path = f"/eval/jobs/{job_id}/results"
        text = ""
        with _transport_errors(self.config.url), self.http.stream("GET", path) as response:
            self.check(response, what=f"job {job_id}")
            for chunk in response.iter_text():
                text += chunk
                end = text.find(',"seeds":')
                if end >= 0:
                    return json.loads(text[:end] + "}").get("summary") or {}
        return (json.loads(text) if text else {}).get("summary") or {}

    def events(self, job_id: str, since: int = 0) -> Iterator[Event]:
        """The job's events after `since` as they happen, until its last one; the stream is
        opened again (from the last event seen) when the connection drops."""
        failures = 0
        while True:
            ended = False
            try:
                for event in self._stream_once(job_id, since):
                    if event.type == STREAM_ENDED:
                        ended = True
                        break
                    since = event.seq or since
                    failures = 0
                    yield event
            except CliError as exc:
                if exc.code != Exit.UNREACHABLE or failures >= RECONNECTS:
                    raise
                failures += 1
                time.sleep(min(5.0, 0.5 * failures))
                continue
            if ended or self.call("GET", f"/eval/jobs/{job_id}")["status"] in TERMINAL:
                return

    def _stream_once(self, job_id: str, since: int) -> Iterator[Event]:
        path = f"/eval/jobs/{job_id}/events/stream"
        with (
            _transport_errors(self.config.url),
            self.http.stream(
                "GET", path, params={"since_seq": since}, timeout=STREAM_TIMEOUT
            ) as response,
        ):
            self.check(response, what=f"job {job_id}")
            yield from sse_parse(response.iter_lines())


def sse_parse(lines: Iterator[str]) -> Iterator[Event]:
    """Server-sent events from the stream's lines: `id`, `event`, `data`; a blank line ends one."""
    seq, kind, data = None, "message", []
    for line in lines:
        if not line:
            if data:
                try:
                    body = json.loads("\n".join(data))
                except ValueError:
                    body = {}
                payload = body.get("data", body) if isinstance(body, dict) else {}
                yield Event(seq=seq, type=kind, data=payload if isinstance(payload, dict) else {})
            seq, kind, data = None, "message", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                seq = int(value) if value.isdigit() else None
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)


def _json_or_none(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


@contextmanager
def _transport_errors(url: str) -> Iterator[None]:
    """A connection refused, a name that does not resolve, a timeout: one line, no traceback."""
    try:
        yield
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        raise CliError(
            f"cannot reach evalhub at {url}: {reason} (is it running? check EVALHUB_URL)",
            Exit.UNREACHABLE,
        ) from None
