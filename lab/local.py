"""A free local port, and an ASGI app served on one in a thread of this process (the serving benches)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


def free_local_port() -> int:
    """A port on 127.0.0.1 that no one listens on now (the system's choice, so two runs never collide)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_in_thread(app: Any) -> tuple[Any, int]:
    """An ASGI app served by uvicorn on a free local port, in a daemon thread, once it accepts
    requests: (the server, its port). Stop it with `server.should_exit = True`."""
    import uvicorn

    port = free_local_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, port
