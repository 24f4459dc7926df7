"""The web server: uvicorn serving `evalhub.asgi`, with the read deadlines uvicorn lacks.

uvicorn bounds only the wait between two requests on a kept-alive connection
(`timeout_keep_alive`: armed once a response is sent, dropped at the first byte of the next
request); nothing bounds the wait for a connection's first request or the reading of a request
(`h11_max_incomplete_event_size` bounds its size, not its time). A client that opens a
connection and sends part of its headers, slowly or never, holds it for ever: fifty such held
fifty connections of the web process for as long as they liked. Here, as in a proxy's
`client_header_timeout` / `client_body_timeout`:

- a request's head must arrive whole within EVALHUB_HEADERS_TIMEOUT_S of its first byte (or of
  the connection, for its first request); else the answer is a 408 and the connection closed;
- its body must keep coming, no gap longer than EVALHUB_BODY_TIMEOUT_S between two parts of it;
  else the connection is closed (the view sees the client gone).

`python -m evalhub.webserver [--host H] [--port P] [--workers N]` is what `make run`, compose
and the image run (the host, port and workers default to HOST, PORT and
EVALHUB_WEB_CONCURRENCY).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import uvicorn
from django.conf import settings
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

PROTOCOL = "evalhub.webserver:DeadlineHttpProtocol"
REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 16\r\nconnection: close\r\n\r\nRequest Timeout\n"
)


class DeadlineHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline on reading each request's head and on
    each gap in its body (see the module's docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.headers_timeout_s = settings.EVALHUB_HEADERS_TIMEOUT_S
        self.body_timeout_s = settings.EVALHUB_BODY_TIMEOUT_S
        self._deadline: asyncio.TimerHandle | None = None
        self._reading_head = False

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm(head=True)  # the first request

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm(head=True)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(head=False)

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._arm(head=False)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the connection is the WebSocket protocol's from here
        super().handle_websocket_upgrade()

    def _arm(self, *, head: bool) -> None:
        self._disarm()
        self._reading_head = head
        delay = self.headers_timeout_s if head else self.body_timeout_s
        self._deadline = self.loop.call_later(delay, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport is None or self.transport.is_closing():
            return
        if not self._reading_head and self.flow is not None and self.flow.read_paused:
            self._arm(head=False)  # we stopped reading (the app is behind), not the client
            return
        if self._reading_head and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(REQUEST_TIMEOUT)  # nothing else is being answered
        self.transport.close()


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalhub.settings")
    parser = argparse.ArgumentParser(prog="python -m evalhub.webserver")
    parser.add_argument("--host", default=settings.HOST)
    parser.add_argument("--port", type=int, default=settings.PORT)
    parser.add_argument("--workers", type=int, default=settings.EVALHUB_WEB_CONCURRENCY)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--no-access-log", action="store_true")
    args = parser.parse_args(argv)
    uvicorn.run(
        "evalhub.asgi:application", host=args.host, port=args.port, workers=args.workers,
        http=PROTOCOL, log_level=args.log_level, access_log=not args.no_access_log,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
