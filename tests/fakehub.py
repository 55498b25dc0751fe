"""A stand-in for the Hugging Face Hub's file endpoint, served on 127.0.0.1 for download tests.

It answers `HEAD|GET /{owner}/{repo}/resolve/{revision}/{filename}` with the headers huggingface_hub
reads (X-Repo-Commit, ETag, Content-Length), so `hf_hub_download` runs its real code path against it
when HF_ENDPOINT points here. `cut_after` makes it drop the connection mid-file, like a network fault.
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
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data if hub.cut_after is None else data[: hub.cut_after])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
