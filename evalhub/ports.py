"""Is a port free to listen on? Asked before a server starts, so a busy port is one clear line
naming the variable that chooses another, not a server failing to bind over and over."""

from __future__ import annotations

import errno
import socket


def port_problem(host: str, port: int, *, how: str) -> str | None:
    """Why nothing can listen on host:port, in a sentence ending with `how` another port is
    chosen (e.g. "PORT=8001 make run"), or None when it is free. The port is bound and closed at once, as the server will bind it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: a port in TIME_WAIT after a restart is free, one listened on is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "is already in use (another evalhub, or another program)"
            else:
                why = f"cannot be listened on ({exc.strerror or exc})"
            return f"port {port} on {host} {why}. Choose another port with {how}"
    return None
