"""A free local port, an ASGI app served on one in a thread of this process, and `python -m cascade serve` in a
process of its own once it is ready (the serving benches and scripts)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]


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


@contextmanager
def cascade_serve(flags: Sequence[str], port: int, env: dict[str, str] | None = None,
                  wait_s: float = 300, log: Path | None = None) -> Iterator[str]:
    """`python -m cascade serve FLAGS --port PORT` in its own process, its output dropped (or written to `log`): its
    base URL once /health answers 200 (at most `wait_s`); ended on leaving."""
    import httpx

    url = f"http://127.0.0.1:{port}"
    out = log.open("w") if log else subprocess.DEVNULL
    server = subprocess.Popen([sys.executable, "-m", "cascade", "serve", *flags, "--port", str(port)], cwd=ROOT,
                              env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"cascade serve ended with exit code {server.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise TimeoutError(f"cascade serve was not ready after {wait_s:.0f} s")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait()
        if log:
            out.close()
