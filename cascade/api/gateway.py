"""The Ray Serve ingress (`Gateway`): each request sent on to a `Models` replica (once more if it died before
answering), 429 past the queue, and /health, /v1/models and CORS preflights answered from what it holds, never
behind a replica's generations."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
from typing import Any, Callable, Mapping

from ..engine.config import ModelConfig
from ..serving.messages import hide_paths
from ..serving.settings import model_config
from .fields import ApiError
from .server import ApiSettings, create_api

log = logging.getLogger(__name__)

APP_NAME = "cascade"
MODELS = "Models"  # the replicas' deployment
KEY_VARIABLE = "CASCADE_API_KEY"  # as ApiSettings.from_environment reads it
ATTEMPTS_HEADER = b"x-cascade-attempts"
ATTEMPTS = 2  # one retry: a request that crashes llama.cpp would crash every replica it is sent to
# the parts of a request's scope an HTTP app reads (no server objects), sent to the replica
SCOPE_KEYS = ("type", "asgi", "http_version", "method", "scheme", "path", "raw_path", "root_path",
              "query_string", "headers", "client", "server")
# Answered by the gateway itself, as a replica would (and CORS preflights, any path): a replica's calls all count
# against its max_ongoing_requests, so these would otherwise wait behind every slot's generation.
OWN_PATHS = frozenset({"/health", "/v1/health", "/v1/models"})
STATE_REFRESH_S = 2.0  # how often the gateway reads Serve's status of the replicas, for /health
READ_WAIT_S = 5.0  # how long the gateway's own answer waits for a reading while no replica was known to run
ERROR_RETRY_S = 10.0  # /health's Retry-After when no replica runs: Ray's health checks come every 10 s


def with_key(api: ApiSettings, keyed: bool, env: Mapping[str, str] | None = None) -> ApiSettings:
    """`api` with CASCADE_API_KEY from this process's environment: the one way the key reaches a replica (never
    through the deployments' arguments, which Ray's tools show). `keyed` (built with a key) and none here:
    RuntimeError, rather than serve without one."""
    key = (os.environ if env is None else env).get(KEY_VARIABLE, "")
    if keyed and not key:
        raise RuntimeError(f"the application was built with an API key, but {KEY_VARIABLE} is not set where this "
                           "replica runs: set it where Ray starts (on a cluster, every node's environment before "
                           "`ray start`; docs/hosting.md)")
    return dataclasses.replace(api, api_key=key)


def error_json(message: str, code: str, kind: str = "server_error") -> bytes:
    """OpenAI's error object, as the API's own errors are."""
    return json.dumps(ApiError(0, message, code=code, kind=kind).body()).encode()


class ReplicasView:
    """What the gateway's own routes read in place of a replica's EngineService, which it never loads: the pair's
    settings (/v1/models) and the replicas' state (/health), as the gateway last read it from Serve."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.state: tuple[str, str] = ("loading", "")

    def status(self) -> tuple[str, str]:
        return self.state

    def ready(self) -> bool:
        return self.state[0] == "ok"

    def wait_ready(self, timeout_s: float) -> bool:
        return self.ready()

    def retry_in_s(self) -> float:
        return ERROR_RETRY_S


def models_state(status: Any, app: str) -> tuple[str, str]:
    """/health's state and reason from Serve's status (`serve.status()`) of application `app`: "ok" while any
    `Models` replica runs (Ray routes only to those, and starts one only once its models are loaded), "error" when
    none does and the deployment failed or is unhealthy, else "loading"."""
    application = status.applications.get(app)
    models = application.deployments.get(MODELS) if application else None
    if models is None:
        return "loading", ""
    if models.replica_states.get("RUNNING", 0) > 0:
        return "ok", ""
    if models.status.value in ("DEPLOY_FAILED", "UNHEALTHY"):
        lines = models.message.strip().splitlines()
        why = re.sub(r"^[\w.]+(?:Error|Exception): ", "", lines[-1]) if lines else "see `serve status`"
        return "error", f"no replica is running: {hide_paths(why)}"
    return "loading", ""


def serve_state() -> tuple[str, str]:
    """`models_state` of this replica's application, read from Serve's controller (blocks: call it in a thread)."""
    from ray import serve

    return models_state(serve.status(), serve.get_replica_context().app_name)


class Gateway:
    """The ingress: /health, /v1/models and CORS preflights answered here (`OWN_PATHS`); each other request sent
    on to a replica (once more if it died before answering; `replica_lost`)."""

    def __init__(self, models: Any, api: ApiSettings | None = None, flags: Mapping[str, Any] | None = None,
                 keyed: bool = False) -> None:
        self.models = models  # a DeploymentHandle to `Models`
        settings = with_key(api or ApiSettings.from_environment(), keyed)
        self.queue = settings.queue
        self.ongoing = 0
        # A replica's own routes over a view that loads no models: the same answers, keys and CORS headers.
        self.view = ReplicasView(model_config(dict(flags or {}), serving=True))
        self.own = create_api(self.view, settings)  # type: ignore[arg-type]
        self.read_state: Callable[[], tuple[str, str]] = serve_state
        self.reading: asyncio.Future | None = None
        self.failing = False  # the last reading failed (said once in the log)
        self.watcher: asyncio.Task | None = None
        self.watch()

    def __serve_build_asgi_app__(self) -> Callable:
        async def app(scope: dict[str, Any], receive: Callable, send: Callable) -> None:  # a function: ASGI 3
            await self.forward(scope, receive, send)

        return app

    def watch(self) -> None:
        """Keep the view's state read from Serve every STATE_REFRESH_S (started at the first request when the
        gateway was made outside an event loop; restarted if it ever ended)."""
        if self.watcher is not None and not self.watcher.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self.watcher = loop.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            await self.read()
            await asyncio.sleep(STATE_REFRESH_S)

    async def read(self) -> None:
        """One reading of the replicas' state into the view; one at a time (a caller meanwhile waits for it)."""
        if self.reading is None or self.reading.done():
            self.reading = asyncio.ensure_future(self._read())
        await asyncio.shield(self.reading)

    async def _read(self) -> None:
        try:
            self.view.state = await asyncio.to_thread(self.read_state)
            self.failing = False
        except Exception as e:  # noqa: BLE001 - the last state stands; said once until a reading works again
            if not self.failing:
                log.warning("could not read the replicas' state from Serve: %s", e)
            self.failing = True

    async def forward(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return  # the API has no websockets
        self.watch()
        if route_path(scope) in OWN_PATHS or scope["method"] == "OPTIONS":
            # No replica known to run: read afresh, lest "not yet" stand for a whole STATE_REFRESH_S.
            if not self.view.ready():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.read(), READ_WAIT_S)
            await self.own(scope, receive, send)
            return
        if self.ongoing >= self.queue:
            await respond(send, 429, f"{self.queue} requests are already waiting or running; try again soon",
                          "queue_full", kind="rate_limit_error")
            return
        self.ongoing += 1
        try:
            body = bytearray()
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            await self.send_on({"scope": {k: scope[k] for k in SCOPE_KEYS if k in scope}, "body": bytes(body)}, send)
        finally:
            self.ongoing -= 1

    async def send_on(self, request: dict[str, Any], send: Callable) -> None:
        from ray.exceptions import RayActorError

        for attempt in range(1, ATTEMPTS + 1):
            started, streaming = False, False
            response = self.models.options(stream=True).asgi.remote(request)
            try:
                async for batch in response:
                    for message in batch:
                        if message["type"] == "http.response.start":
                            headers = [*message.get("headers", []), (ATTEMPTS_HEADER, str(attempt).encode())]
                            message = {**message, "headers": headers}
                            streaming = dict(headers).get(b"content-type", b"").startswith(b"text/event-stream")
                        await send(message)
                        started = True
                return
            except asyncio.CancelledError:  # the client left: stop the generation where it runs
                response.cancel()
                raise
            except Exception as e:  # noqa: BLE001 - answered in OpenAI's words, in the stream or as a status
                lost = isinstance(e, RayActorError)  # the replica died (killed, out of memory, its node gone)
                if not started and lost:
                    log.warning("a replica died before it answered (attempt %d of %d): %s", attempt, ATTEMPTS, e)
                    continue
                log.error("a request failed in its replica", exc_info=e)
                words, code = (("the replica writing this answer stopped; ask again", "replica_lost") if lost else
                               ("the server failed to answer; whoever runs it can find the details in its log",
                                "server_error"))
                if not started:
                    await respond(send, 500, words, code)
                else:  # mid-way: the error goes in the stream, as the API's own do
                    error = b"data: " + error_json(words, code) + b"\n\n" if streaming else b""
                    await send({"type": "http.response.body", "body": error, "more_body": False})
                return
        await respond(send, 503, "the replicas this request was sent to stopped before answering; try again",
                      "replica_lost")


def route_path(scope: dict[str, Any]) -> str:
    """The path a route matches: the request's, less the application's route prefix (Serve's root_path)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return (path[len(root):] or "/") if root and path.startswith(root) else path


async def respond(send: Callable, status: int, message: str, code: str, kind: str = "server_error") -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": error_json(message, code, kind), "more_body": False})


