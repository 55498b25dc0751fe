"""The OpenAI-compatible HTTP API: chat apps (Open WebUI, Jan, SillyTavern, ...) use the engine through it.

`create_api(service)` returns a FastAPI app with `GET /v1/models`, `POST /v1/chat/completions` and
`POST /v1/completions`. It shares the page's `EngineService`: a request leases an engine as a page visitor's
does, so N workers serve N requests at once, page and API together, in the order they came. Each request
runs the engine's generator in a thread of its own (`serving.pump`) and streams its events as they come; a
client that goes away stops its generation at once (the generator is closed, as the page's Stop closes it).

Settings (environment): CASCADE_API_KEY (a Bearer key every request must carry; unset, anyone may call, as
anyone may use the page), CASCADE_API_CORS (origins a browser client may call from, comma-separated, or *),
CASCADE_API_QUEUE (requests that may wait or run at once; past it, 429).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator

from fastapi import FastAPI, Request as HttpRequest
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask

from ..engine.events import Event, Summary, TokenEvent
from ..engine.models import ModelError
from ..engine.prompt import PromptError
from ..serving.messages import model_name, public_message
from ..serving.pump import EventPump
from ..serving.service import EngineService
from . import protocol
from .protocol import ApiError, Request

log = logging.getLogger(__name__)

# As many as the page's own queue holds (app.py's max_size).
DEFAULT_QUEUE = 64


@dataclass(frozen=True)
class ApiSettings:
    api_key: str = ""  # empty: no key needed
    cors: tuple[str, ...] = ()  # origins allowed to call from a browser ("*" for any)
    queue: int = DEFAULT_QUEUE

    @classmethod
    def from_environment(cls, env: dict[str, str] | None = None) -> "ApiSettings":
        env = dict(os.environ) if env is None else env
        cors = tuple(o.strip() for o in env.get("CASCADE_API_CORS", "").split(",") if o.strip())
        raw = env.get("CASCADE_API_QUEUE", "").strip()
        try:
            queue = int(raw) if raw else DEFAULT_QUEUE
        except ValueError:
            raise ValueError(f"CASCADE_API_QUEUE must be a whole number, got {raw!r}") from None
        return cls(api_key=env.get("CASCADE_API_KEY", ""), cors=cors, queue=max(1, queue))


class Answer:
    """One request's generation: it leases an engine in the pump's thread (waiting there, not in the event
    loop, while every engine is busy), writes without the target's scoring pass (no API field reports it,
    and the stream's last chunk, after an end-of-text token, would wait for it), and notes the target's
    measured speed for the final chunk's timings."""

    def __init__(self, service: EngineService, request: Request) -> None:
        self.service, self.request = service, request
        self.target_tokens_per_s: float | None = None
        self.pump = EventPump(self._events(), name="cascade-api-request")

    def _events(self) -> Iterator[Event]:
        with self.service.lease() as engine:
            if self.pump.cancelled:  # the client left while the request waited for an engine
                return
            for event in engine.generate(self.request.prompt, self.request.config, score=False):
                if isinstance(event, Summary):
                    step = engine.tuner.target_step.value
                    self.target_tokens_per_s = 1.0 / step if step else None
                yield event


def _error(e: BaseException) -> ApiError:
    """An engine's exception in OpenAI's words."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, PromptError):
        code = "context_length_exceeded" if "the context holds" in str(e) else None
        return ApiError(400, str(e), "messages", code)
    if isinstance(e, ModelError):
        return ApiError(503, public_message(e), kind="server_error", code="models_unavailable")
    if isinstance(e, ValueError):
        return ApiError(400, str(e))
    log.error("a request failed", exc_info=e)
    return ApiError(500, "the server failed to answer; whoever runs it can find the details in its log",
                    kind="server_error")


def _sse(payload: Any) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def create_api(service: EngineService, settings: ApiSettings | None = None, app: FastAPI | None = None) -> FastAPI:
    """The API's routes on `app` (a new FastAPI app if None), over the service's engines."""
    settings = settings or ApiSettings.from_environment()
    app = app or FastAPI(title="cascade: an OpenAI-compatible API", docs_url=None, redoc_url=None)
    waiting = {"n": 0}
    lock = threading.Lock()

    def check_key(http: HttpRequest) -> None:
        if not settings.api_key:
            return
        given = http.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), settings.api_key.encode()):
            raise ApiError(401, "a valid API key is required: send it as Authorization: Bearer <key>",
                           code="invalid_api_key")

    def check_ready() -> None:
        try:
            if not service.ready():
                raise ApiError(503, "the models are loading; try again in a few seconds", kind="server_error",
                               code="models_loading")
        except ModelError as e:
            raise _error(e) from None

    async def body_of(http: HttpRequest) -> Any:
        raw = await http.body()
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "the request body is not valid JSON") from None

    async def answer(request: Request) -> Any:
        with lock:
            if waiting["n"] >= settings.queue:
                raise ApiError(429, f"{settings.queue} requests are already waiting or running; try again soon",
                               kind="rate_limit_error", code="queue_full")
            waiting["n"] += 1
        run = Answer(service, request)
        finished = threading.Event()

        def finish() -> None:
            """Stop the generation (if it still runs) and free the request's place; once."""
            run.pump.cancel()
            if not finished.is_set():
                finished.set()
                with lock:
                    waiting["n"] -= 1

        events = run.pump.start().stream()
        try:
            try:  # an error before the first event is an HTTP error, not a broken stream
                first = await events.__anext__()
            except StopAsyncIteration:
                raise _error(RuntimeError("the generation ended without a summary")) from None
            except Exception as e:  # noqa: BLE001 - answered in OpenAI's words
                raise _error(e) from None
            if request.stream:
                return StreamingResponse(stream(request, run, first, events, finish), media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                                         background=BackgroundTask(finish))
            return JSONResponse(await collect(request, run, first, events))
        except BaseException:
            finish()
            raise
        finally:
            if not request.stream:
                finish()

    async def items(first: Event, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        yield first
        async for event in events:
            yield event

    async def collect(request: Request, run: Answer, first: Event, events: AsyncIterator[Event]) -> dict[str, Any]:
        tokens, summary = [], None
        async for item in items(first, events):
            if isinstance(item, TokenEvent):
                tokens.append(item)
            elif isinstance(item, Summary):
                summary = item
        if summary is None:
            raise ApiError(500, "the generation ended without a summary", kind="server_error")
        return protocol.response(request, tokens, summary, run.target_tokens_per_s)

    async def stream(request: Request, run: Answer, first: Event, events: AsyncIterator[Event],
                     finish) -> AsyncIterator[str]:
        chunks = protocol.Stream(request)
        try:
            opening = chunks.first()
            if opening is not None:
                yield _sse(opening)
            async for item in items(first, events):
                if isinstance(item, TokenEvent):
                    chunk = chunks.token(item)
                    if chunk is not None:
                        yield _sse(chunk)
                elif isinstance(item, Summary):
                    for chunk in chunks.last(item, run.target_tokens_per_s):
                        yield _sse(chunk)
            yield "data: [DONE]\n\n"
        except Exception as e:  # noqa: BLE001 - mid-stream, the error goes in the stream, as OpenAI's does
            yield _sse(_error(e).body())
        finally:
            finish()  # a client that left stops its generation here

    @app.exception_handler(ApiError)
    async def api_error(_http: HttpRequest, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.get("/v1/models")
    async def models(http: HttpRequest) -> JSONResponse:
        check_key(http)
        config = service.config
        return JSONResponse(protocol.models_list(model_name(config.draft), model_name(config.target)))

    async def complete(http: HttpRequest, read: Callable[[Any], Request]) -> Any:
        """A completion request of either kind: the key, the body read by `read`, the models ready, the answer."""
        check_key(http)
        request = read(await body_of(http))
        check_ready()
        return await answer(request)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HttpRequest) -> Any:
        return await complete(http, protocol.chat_request)

    @app.post("/v1/completions")
    async def completions(http: HttpRequest) -> Any:
        return await complete(http, protocol.completion_request)

    if settings.cors:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    return app
