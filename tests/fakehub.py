"""A stand-in for the Hugging Face Hub's file endpoint, served on 127.0.0.1 for download tests.

It answers `HEAD|GET /{owner}/{repo}/resolve/{revision}/{filename}` with the headers huggingface_hub
reads (X-Repo-Commit, ETag, Content-Length), so `hf_hub_download` runs its real code path against it
when HF_ENDPOINT points here. A GET with `Range: bytes=N-` is answered from byte N (206), as the Hub does.
`cut_after` makes it drop the connection at that byte of the file, like a network fault: in every answer,
or in the first `cuts` answers only (a fault that passes).
"""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files  # "owner/repo/filename" -> local file
        self.requests: list[str] = []
        self.cut_after: int | None = None
        self.cuts: int | None = None  # answers still to cut (None: every one)
        self.ranges: list[str | None] = []  # each GET's Range header
        self.served = 0  # body bytes sent, over every GET
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    self.send_error(404)
                    return
                key = "/".join(parts[:2] + parts[4:])
                if key not in hub.files:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("X-Error-Message", "Entry not found")
                    self.end_headers()
                    return
                data = hub.files[key].read_bytes()
                asked = self.headers.get("Range") if body else None
                start = int(asked.split("=")[1].split("-")[0]) if asked else 0
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if body:
                    hub.ranges.append(asked)
                    end = len(data)
                    if hub.cut_after is not None and hub.cuts != 0:
                        end = max(start, min(end, hub.cut_after))
                        hub.cuts = None if hub.cuts is None else hub.cuts - 1
                    self.wfile.write(data[start:end])
                    hub.served += end - start

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
