"""The OpenAI-compatible HTTP API (`create_api`): /v1/models, /v1/chat/completions, /v1/completions and
llama-server's /health, over the page's `EngineService`, each request in a pump thread of its own; a client
that leaves stops its generation, and every refusal, whatever the request, is in OpenAI's error shape.
Environment: CASCADE_API_KEY, CASCADE_API_CORS, CASCADE_API_QUEUE (past it, 429), CASCADE_API_CLIENT_QUEUE (one
client's requests waiting or running; past it, 429), CASCADE_API_LOAD_WAIT."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import math
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

from fastapi import FastAPI, Request as HttpRequest
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..engine.batching import BACKGROUND, INTERACTIVE
from ..engine.config import SettingError
from ..engine.engine import ContextFull
from ..engine.events import Event, Summary, TokenEvent
from ..engine.models import ModelError
from ..engine.prompt import PromptError
from ..serving.lender import Asker
from ..serving.messages import model_name, public_message
from ..serving.pump import EventPump
from ..serving.service import EngineService
from . import fields, protocol
from .protocol import ApiError, Request, refused

log = logging.getLogger(__name__)

DEFAULT_QUEUE = 64  # as many as the page's own queue holds (app.py's max_size)
# One client's requests waiting or running: a chat app's answer, title, tags and follow-ups, several times over.
DEFAULT_CLIENT_QUEUE = 16
CLIENT_RETRY_AFTER_S = 5  # what a client past its own queue is asked to wait
# How long a request waits for the models to load before a 503 (the `openai` library itself waits 600 s).
DEFAULT_LOAD_WAIT_S = 120.0
LOADING_RETRY_AFTER_S = 5  # what a 503 while the models load asks a client to wait


@dataclass(frozen=True)
class ApiSettings:
    api_key: str = ""  # empty: no key needed
    cors: tuple[str, ...] = ()  # origins allowed to call from a browser ("*" for any)
    queue: int = DEFAULT_QUEUE
    load_wait_s: float = DEFAULT_LOAD_WAIT_S  # 0: a request while the models load is told at once (503)
    client_queue: int = DEFAULT_CLIENT_QUEUE

    @classmethod
    def from_environment(cls, env: dict[str, str] | None = None) -> "ApiSettings":
        env = dict(os.environ) if env is None else env
        cors = tuple(o.strip() for o in env.get("CASCADE_API_CORS", "").split(",") if o.strip())
        queue = _from_env(env, "CASCADE_API_QUEUE", int, DEFAULT_QUEUE, "a whole number")
        wait = _from_env(env, "CASCADE_API_LOAD_WAIT", float, DEFAULT_LOAD_WAIT_S, "a number of seconds")
        client_queue = _from_env(env, "CASCADE_API_CLIENT_QUEUE", int, DEFAULT_CLIENT_QUEUE, "a whole number")
        return cls(api_key=env.get("CASCADE_API_KEY", ""), cors=cors, queue=max(1, queue), load_wait_s=max(0.0, wait),
                   client_queue=max(1, client_queue))


def _from_env(env: dict[str, str], name: str, kind: type, default: Any, words: str) -> Any:
    """A variable's number, or `default` when it is unset; ValueError, naming it, for anything else."""
    raw = env.get(name, "").strip()
    try:
        value = kind(raw) if raw else default
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{name} must be {words}, got {raw!r}")
    return value


class Answer:
    """One request's generation in a pump's thread (no scoring pass), and the target's speed for the timings."""

    def __init__(self, service: EngineService, request: Request, client: str | None = None) -> None:
        self.service, self.request, self.client = service, request, client
        self.arrived = time.perf_counter()
        self.target_tokens_per_s: float | None = None
        self.batched_slots = False  # whether the slots decode requests together (`--batch-slots`)
        self.pump = EventPump(self._events(), name="cascade-api-request")

    def _events(self) -> Iterator[Event]:
        with self.service.lease(asker=Asker(self.client, interactive=self.request.stream)) as engine:
            if self.pump.cancelled:  # the client left while the request waited for an engine
                return
            leased = time.perf_counter()
            pair = getattr(engine, "pair", None)  # (a stand-in engine has none: not batched)
            self.batched_slots = bool(getattr(getattr(pair, "config", None), "batch_slots", False))
            # A person reading a stream goes first; a request answered whole (a title, tags) waits for them.
            with in_class(engine, INTERACTIVE if self.request.stream else BACKGROUND):
                for event in engine.generate(self.request.prompt, self.request.config, score=False):
                    if isinstance(event, Summary):
                        step = engine.tuner.target_step.value
                        self.target_tokens_per_s = 1.0 / step if step else None
                        log.info("%s", self.log_line(event, leased))
                    yield event

    def log_line(self, summary: Summary, leased: float) -> str:
        """One request in a host's log: who, what, its wait for a slot, its first token, its end."""
        waited, first = leased - self.arrived, summary.timings.first_token_s
        return (f"{'stream' if self.request.stream else 'whole'} {summary.policy} for {self.client or 'a client'}: "
                f"{summary.prompt_tokens} prompt tokens, waited {waited:.2f} s for a slot, first token "
                f"{'-' if first is None else f'{waited + first:.2f} s'}, {summary.counts.n_tokens} tokens in "
                f"{time.perf_counter() - self.arrived:.2f} s ({summary.stop_reason})")


@contextlib.contextmanager
def in_class(engine: Any, priority: int) -> Iterator[None]:
    """The engine's calls in `priority`'s class for the block, then back to interactive (the page's)."""
    set_priority = getattr(engine, "set_priority", lambda _priority: None)  # (a stand-in engine has none)
    set_priority(priority)
    try:
        yield
    finally:
        set_priority(INTERACTIVE)


def _error(e: BaseException) -> ApiError:
    """An engine's exception in OpenAI's words."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, SettingError):
        return refused(e)
    if isinstance(e, PromptError):
        code = "context_length_exceeded" if isinstance(e, ContextFull) else None
        return ApiError(400, str(e), "messages", code)
    if isinstance(e, ModelError):
        return ApiError(503, public_message(e), kind="server_error", code="models_unavailable")
    if isinstance(e, ValueError):
        return ApiError(400, str(e))
    if isinstance(e, ClientDisconnect):  # no one is left to read the answer
        return ApiError(400, "the client went away before its request's body had come")
    log.error("a request failed", exc_info=e)
    return ApiError(500, "the server failed to answer; whoever runs it can find the details in its log",
                    kind="server_error")


def _sse(payload: Any) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


class _AsciiJSON(JSONResponse):
    """JSON escaped to ASCII, so that a lone surrogate quoted from a request cannot stop the answer."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")


async def _in_thread(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` awaited in a daemon thread of its own (no pool's worker held; a stopped server won't wait)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # the request was cancelled: its client left
            return
        if error is None:
            done.set_result(result)
        else:
            done.set_exception(error)

    def work() -> None:
        try:
            result, error = function(*args), None
        except BaseException as e:  # noqa: BLE001 - raised again in the request that waits
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the event loop has closed: no one waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, daemon=True, name="cascade-api-wait").start()
    return await done


async def _items(first: Event, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    yield first
    async for event in events:
        yield event


async def _collect(request: Request, run: Answer, events: AsyncIterator[Event]) -> dict[str, Any]:
    """The whole answer at once, from the generation's events."""
    items = [item async for item in events]
    summary = next((item for item in items if isinstance(item, Summary)), None)
    if summary is None:
        raise ApiError(500, "the generation ended without a summary", kind="server_error")
    tokens = [item for item in items if isinstance(item, TokenEvent)]
    return protocol.response(request, tokens, summary, run.target_tokens_per_s, run.batched_slots)


async def _stream(request: Request, run: Answer, events: AsyncIterator[Event],
                  finish: Callable[[], None]) -> AsyncIterator[str]:
    """The answer as server-sent events; an error mid-way goes in the stream, and `finish` runs at its end."""
    chunks = protocol.Stream(request)
    try:
        opening = chunks.first()
        if opening is not None:
            yield _sse(opening)
        async for item in events:
            if isinstance(item, TokenEvent):
                chunk = chunks.token(item)
                if chunk is not None:
                    yield _sse(chunk)
            elif isinstance(item, Summary):
                for chunk in chunks.last(item, run.target_tokens_per_s, run.batched_slots):
                    yield _sse(chunk)
        yield "data: [DONE]\n\n"
    except Exception as e:  # noqa: BLE001 - mid-stream, the error goes in the stream, as OpenAI's does
        yield _sse(_error(e).body())
    finally:
        finish()  # a client that left stops its generation here


class _Api:
    """The routes over one service: the key, the wait for the models, the queue's places, the answers."""

    def __init__(self, service: EngineService, settings: ApiSettings) -> None:
        self.service, self.settings = service, settings
        self.waiting = 0  # requests that wait or run
        self.by_client: Counter[str] = Counter()  # the same, by client
        self.lock = threading.Lock()

    def check_key(self, http: HttpRequest) -> None:
        if not self.settings.api_key:
            return
        scheme, _, token = http.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(),
                                                                 self.settings.api_key.encode()):
            raise ApiError(401, "a valid API key is required: send it as Authorization: Bearer <key>",
                           code="invalid_api_key")

    async def models_ready(self) -> None:
        """Return once the models are loaded, waiting up to `settings.load_wait_s`; else a 503."""
        wait_s = self.settings.load_wait_s
        try:
            if self.service.ready() or await _in_thread(self.service.wait_ready, wait_s):
                return
        except ModelError as e:
            raise _error(e) from None
        raise ApiError(503, f"the models are still loading after {wait_s:g} s; try again in a moment",
                       kind="server_error", code="models_loading", retry_after_s=LOADING_RETRY_AFTER_S)

    def take_place(self, client: str = "") -> Callable[[], None]:
        """A place among the requests that wait or run, and its give-back (once); 429 when none is free, or when
        `client` has its own queue full."""
        with self.lock:
            if self.waiting >= self.settings.queue:
                raise ApiError(429, f"{self.settings.queue} requests are already waiting or running; try again "
                                    "soon", kind="rate_limit_error", code="queue_full")
            if self.by_client[client] >= self.settings.client_queue:
                raise ApiError(429, f"you have {self.settings.client_queue} requests waiting or running already; "
                                    "try again once one has finished", kind="rate_limit_error",
                               code="client_queue_full", retry_after_s=CLIENT_RETRY_AFTER_S)
            self.waiting += 1
            self.by_client[client] += 1
        given_back = threading.Event()

        def give_back() -> None:
            with self.lock:
                if not given_back.is_set():
                    given_back.set()
                    self.waiting -= 1
                    self.by_client -= Counter([client])  # a Counter keeps positive counts only
        return give_back

    async def answer(self, request: Request, client: str = "") -> Any:
        give_back = self.take_place(client)  # before waiting for the models: those who wait count in the queue
        run: Answer | None = None

        def finish() -> None:
            """Stop the generation (if it started and still runs) and give the request's place back."""
            if run is not None:
                run.pump.cancel()
            give_back()

        streaming = False
        try:
            await self.models_ready()
            run = Answer(self.service, request, client)
            events = run.pump.start().stream()
            try:  # an error before the first event is an HTTP error, not a broken stream
                first = await events.__anext__()
            except StopAsyncIteration:
                raise _error(RuntimeError("the generation ended without a summary")) from None
            except Exception as e:  # noqa: BLE001 - answered in OpenAI's words
                raise _error(e) from None
            events = _items(first, events)
            if not request.stream:
                return JSONResponse(await _collect(request, run, events))
            response = StreamingResponse(_stream(request, run, events, finish), media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                                         background=BackgroundTask(finish))
            streaming = True  # from here the stream's end, or the client leaving, calls `finish`
            return response
        finally:
            if not streaming:
                finish()

    def reply(self, e: ApiError) -> JSONResponse:
        """An error in OpenAI's shape; every 503, and a 429 that knows, says when to try again (Retry-After)."""
        seconds = e.retry_after_s
        if e.status == 503 and seconds is None:
            seconds = self.service.retry_in_s() or LOADING_RETRY_AFTER_S
        if e.status not in (429, 503) or seconds is None:
            return _AsciiJSON(e.body(), status_code=e.status)
        return _AsciiJSON(e.body(), status_code=e.status, headers={"Retry-After": str(max(1, math.ceil(seconds)))})

    def guarded(self, route: Callable[[HttpRequest], Awaitable[Any]]) -> Callable[[HttpRequest], Awaitable[Any]]:
        """The route with every failure answered in OpenAI's shape (not by an Exception handler: after one,
        Starlette raises again and uvicorn closes the connection)."""
        @functools.wraps(route)
        async def answered(http: HttpRequest) -> Any:
            try:
                return await route(http)
            except Exception as e:  # noqa: BLE001 - every failure is answered, in OpenAI's words
                return self.reply(_error(e))
        return answered

    async def http_error(self, _http: HttpRequest, e: HTTPException) -> JSONResponse:
        """A path or method the API does not have, in OpenAI's shape too."""
        return self.reply(ApiError(e.status_code, str(e.detail), kind="server_error" if e.status_code >= 500 else
                                   "invalid_request_error"))

    async def health(self, http: HttpRequest) -> JSONResponse:
        """llama-server's health check (no key): 200 once loaded, with the slots (busy, waiting by class), else 503
        with the state and any reason."""
        state, reason = self.service.status()
        if state == "ok":
            slots = getattr(self.service, "slots", lambda: None)()
            return JSONResponse({"status": "ok", **({"slots": slots} if slots else {})})
        wait = LOADING_RETRY_AFTER_S if state == "loading" else self.service.retry_in_s()
        return _AsciiJSON({"status": state, **({"error": reason} if reason else {})}, status_code=503,
                          headers={"Retry-After": str(max(1, math.ceil(wait)))})

    async def models(self, http: HttpRequest) -> JSONResponse:
        self.check_key(http)
        config = self.service.config
        return JSONResponse(protocol.models_list(model_name(config.draft), model_name(config.target)))

    def answering(self, read: Callable[[Any], Request]) -> Callable[[HttpRequest], Awaitable[Any]]:
        """A completions route: the key checked, the body read into a `Request` by `read`, then answered."""
        async def route(http: HttpRequest) -> Any:
            self.check_key(http)
            return await self.answer(read(await fields.body_of(http)), client_of(http))
        return route


def client_of(http: HttpRequest) -> str:
    """Who a request comes from, for its fair share: its address, and a hash of the key it sends, if any."""
    address = http.client.host if http.client else "unknown"
    token = http.headers.get("authorization", "").partition(" ")[2].strip()
    return f"{address} key {hashlib.sha256(token.encode()).hexdigest()[:12]}" if token else address


def create_api(service: EngineService, settings: ApiSettings | None = None, app: FastAPI | None = None) -> FastAPI:
    """The API's routes on `app` (a new FastAPI app if None), over the service's engines."""
    api = _Api(service, settings or ApiSettings.from_environment())
    app = app or FastAPI(title="cascade: an OpenAI-compatible API", docs_url=None, redoc_url=None)
    app.add_exception_handler(HTTPException, api.http_error)
    for path in ("/health", "/v1/health"):  # llama-server answers at both
        app.get(path)(api.guarded(api.health))
    app.get("/v1/models")(api.guarded(api.models))
    app.post("/v1/chat/completions")(api.guarded(api.answering(protocol.chat_request)))
    app.post("/v1/completions")(api.guarded(api.answering(protocol.completion_request)))
    if api.settings.cors:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(api.settings.cors), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    return app
