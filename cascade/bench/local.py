"""What the bench takes from the machine it runs on: a free local port, the API served on one in a
thread of this process, and the folder its caches live in.

The API and page benches serve what they measure in their own process, on a port of this machine; the
target's texts and the tasks' answers are cached on its disk (`CASCADE_CACHE`), so a second run reuses them.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
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


def cache_folder(name: str) -> Path:
    """One of the bench's caches: `name` under CASCADE_CACHE, or under ~/.cache/cascade."""
    return Path(os.environ.get("CASCADE_CACHE", Path.home() / ".cache" / "cascade")) / name
