"""The API past one machine (`build`, `app_builder`, `deploy`; docs/hosting.md): `Models` replicas on Ray Serve,
each a pair behind `create_api`'s routes, and the `Gateway` ingress, which answers /health and /v1/models itself
(never behind a replica's generations), retries a dead replica's request once and answers 429 past the queue.
The API key reaches each of them from its own environment, never through the deployments' arguments. Ray is
optional and imported only where it is used."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Mapping

from ..engine.config import ModelConfig
from ..engine.models import ModelError
from ..serving.messages import hide_paths
from ..serving.pump import tune_interpreter
from ..serving.service import EngineService
from ..serving.settings import model_config
from .server import ApiSettings, create_api

log = logging.getLogger(__name__)

APP_NAME = "cascade"
MODELS = "Models"  # the replicas' deployment
KEY_VARIABLE = "CASCADE_API_KEY"  # as ApiSettings.from_environment reads it
REPLICA_HEADER = b"x-cascade-replica"
ATTEMPTS_HEADER = b"x-cascade-attempts"
INSTALL = ("Ray Serve is not installed; install it with: pip install 'cascade-decoding[ray]' "
           "(from a checkout: pip install '.[ray]'), or pip install 'ray[serve]'")

ATTEMPTS = 2  # one retry: a request that crashes llama.cpp would crash every replica it is sent to
# a replica going away finishes its answers first (Ray's default, 20 s, would cut a long CPU answer off)
GRACEFUL_SHUTDOWN_S = 300.0
# the parts of a request's scope an HTTP app reads (no server objects), sent to the replica
SCOPE_KEYS = ("type", "asgi", "http_version", "method", "scheme", "path", "raw_path", "root_path",
              "query_string", "headers", "client", "server")
# What the gateway answers itself, by the same routes as a replica, from what it holds: a replica's calls all
# count against its max_ongoing_requests, so these would otherwise wait behind every slot's generation. CORS
# preflights (OPTIONS, any path) too: they need only the settings.
OWN_PATHS = frozenset({"/health", "/v1/health", "/v1/models"})
STATE_REFRESH_S = 2.0  # how often the gateway reads Serve's status of the replicas, for /health
READ_WAIT_S = 5.0  # how long the gateway's own answer waits for a reading while no replica was known to run
ERROR_RETRY_S = 10.0  # /health's Retry-After when no replica runs: Ray's health checks come every 10 s


def with_key(api: ApiSettings, keyed: bool, env: Mapping[str, str] | None = None) -> ApiSettings:
    """`api` with the key of this process's environment (CASCADE_API_KEY): the one way the key reaches a replica,
    so that it is never among the deployments' arguments, which Ray keeps and its tools may show. `keyed` (the
    application was built with a key): with none in its environment, a replica refuses to start (RuntimeError)
    rather than serve without one."""
    key = (os.environ if env is None else env).get(KEY_VARIABLE, "")
    if keyed and not key:
        raise RuntimeError(f"the application was built with an API key, but {KEY_VARIABLE} is not set where this "
                           "replica runs: set it where Ray starts (on a cluster, every node's environment before "
                           "`ray start`; docs/hosting.md)")
    return dataclasses.replace(api, api_key=key)


class RayMissing(ImportError):
    """Ray Serve is not installed; the message says how to install it."""


def require_ray() -> None:
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as e:
        raise RayMissing(INSTALL) from e


@dataclass(frozen=True)
class Scaling:
    """How many `Models` replicas, and what each asks of a node (None: its slots, its models' threads)."""

    min_replicas: int = 1
    max_replicas: int = 1
    target_ongoing: float | None = None
    replica_cpus: float | None = None

    @classmethod
    def parse(cls, replicas: str, target_ongoing: float | None = None, replica_cpus: float | None = None) -> "Scaling":
        """`replicas` as the command line takes it: "N" (fixed) or "MIN:MAX" (autoscaled between them)."""
        low, _, high = str(replicas).partition(":")
        try:
            low_n, high_n = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"--replicas must be N or MIN:MAX, whole numbers, got {replicas!r}") from None
        if low_n < 1 or high_n < low_n:
            raise ValueError(f"--replicas {replicas}: needs 1 <= MIN <= MAX")
        if target_ongoing is not None and target_ongoing <= 0:
            raise ValueError("--target-ongoing must be above 0")
        if replica_cpus is not None and replica_cpus < 0:
            raise ValueError("--replica-cpus must be 0 or more")
        return cls(low_n, high_n, target_ongoing, replica_cpus)

    def options(self, config: ModelConfig) -> dict[str, Any]:
        """`Models`' deployment options for a replica of `config` (twice its slots may be ongoing at once)."""
        slots = config.parallel
        cpus = config.n_threads if self.replica_cpus is None else self.replica_cpus
        options: dict[str, Any] = {"max_ongoing_requests": 2 * slots, "ray_actor_options": {"num_cpus": cpus},
                                   "graceful_shutdown_timeout_s": GRACEFUL_SHUTDOWN_S}
        if self.min_replicas == self.max_replicas:
            options["num_replicas"] = self.min_replicas
        else:
            options["autoscaling_config"] = {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                                             "target_ongoing_requests": self.target_ongoing or slots}
        return options


def error_json(message: str, code: str, kind: str = "server_error") -> bytes:
    """OpenAI's error object, as the API's own errors are."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


class Models:
    """One replica: a pair loaded before Ray routes to it, behind `create_api`'s routes; X-Cascade-Replica names it."""

    def __init__(self, flags: Mapping[str, Any] | None = None, api: ApiSettings | None = None,
                 service: Callable[[ModelConfig], EngineService] = EngineService, keyed: bool = False) -> None:
        from ray import serve

        tune_interpreter()
        settings = with_key(api or ApiSettings.from_environment(), keyed)  # before the load: a missing key fails fast
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.service = service(model_config(dict(flags or {}), serving=True))
        self.service.engines()  # a load that fails fails the replica's start: Ray retries, then reports it
        self.app = create_api(self.service, settings)

    def check_health(self) -> None:
        """Ray's health check: raises while the service cannot answer (its load failed, or it has none)."""
        try:
            loaded = self.service.ready()
        except ModelError as e:
            raise RuntimeError(f"the models failed to load: {e}") from e
        if not loaded:
            raise RuntimeError("the models are not loaded")

    async def asgi(self, request: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        """One HTTP request (plain scope and body) through the app, its ASGI messages yielded in batches as they
        come; cancelled (the client left), the app hears a disconnect."""
        messages: asyncio.Queue = asyncio.Queue()
        left = asyncio.Event()
        body = [{"type": "http.request", "body": request["body"], "more_body": False}]

        async def receive() -> dict[str, Any]:
            if body:
                return body.pop()
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (REPLICA_HEADER, self.replica.encode())]}
            await messages.put(message)

        async def run() -> None:
            try:
                await self.app(dict(request["scope"]), receive, send)
            finally:
                await messages.put(None)

        task = asyncio.create_task(run())
        try:
            while (message := await messages.get()) is not None:
                batch = [message]
                while not messages.empty() and (message := messages.get_nowait()) is not None:
                    batch.append(message)
                yield batch
                if message is None:
                    break
        finally:
            left.set()
            if not task.done():
                task.cancel()
            elif not task.cancelled() and task.exception() is not None:  # answered already (a 500)
                log.error("a request failed", exc_info=task.exception())


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
        # The replicas' own routes over a view that never loads models: the same answers, keys and CORS headers.
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
            # While a replica runs (as under load), the last reading answers; else a fresh one (milliseconds): the
            # first replica may have loaded since, and "not yet" should not stand for a whole STATE_REFRESH_S.
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


def build(flags: Mapping[str, Any] | None = None, api: ApiSettings | None = None, scaling: Scaling = Scaling(),
          service: Callable[[ModelConfig], EngineService] = EngineService) -> Any:
    """`Gateway` in front of `Models` replicas with `scaling`; `flags` win over each replica's environment. The key
    is left out of the deployments' arguments: each replica reads CASCADE_API_KEY from its own environment, and
    one built with a key in `api` (by default, from this environment) refuses to start without it (`with_key`)."""
    require_ray()
    from ray import serve

    flags = dict(flags or {})
    config = model_config(flags, serving=True)  # the settings each replica will read, checked here first
    api = api or ApiSettings.from_environment()
    keyed, api = bool(api.api_key), dataclasses.replace(api, api_key="")
    models = serve.deployment(Models, name=MODELS, **scaling.options(config)).bind(flags, api, service, keyed)
    gateway = serve.deployment(serve.ingress()(Gateway), name="Gateway", num_replicas=1,
                               max_ongoing_requests=api.queue + 8, ray_actor_options={"num_cpus": 0})
    return gateway.bind(models, api, flags, keyed)


def app_builder(args: Mapping[str, str] | None = None) -> Any:
    """`build` for a Serve config file (`args`: replicas, target_ongoing, replica_cpus; models from CASCADE_*)."""
    args = dict(args or {})
    unknown = set(args) - {"replicas", "target_ongoing", "replica_cpus"}
    if unknown:
        raise ValueError(f"app_builder takes replicas, target_ongoing and replica_cpus, not {sorted(unknown)}")
    def number(name: str) -> float | None:
        return float(args[name]) if args.get(name) not in (None, "") else None

    return build(scaling=Scaling.parse(str(args.get("replicas", "1")), number("target_ongoing"),
                                       number("replica_cpus")))


def local_paths(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Model and router paths of existing files made absolute (a replica's working folder is Ray's)."""
    out = dict(flags)
    for name in ("draft", "target", "router"):
        value = out.get(name)
        if value and Path(value).expanduser().is_file():
            out[name] = str(Path(value).expanduser().resolve())
    return out


def deploy(flags: Mapping[str, Any], scaling: Scaling, host: str = "127.0.0.1", port: int = 8000,
           address: str | None = None) -> str:
    """Start Ray (`address`: join that cluster; None: a local one) with this package for the replicas, serve the
    application at host:port, and return the API's base URL once every replica is loaded."""
    require_ray()
    import ray
    from ray import serve

    import cascade

    ray.init(address=address, runtime_env={"py_modules": [cascade]})
    serve.start(http_options={"host": host, "port": port})
    try:
        serve.run(build(local_paths(flags), scaling=scaling), name=APP_NAME, route_prefix="/")
    except RuntimeError as e:  # Ray's words name the deployment; its status holds the replica's error
        raise RuntimeError(f"{e} {failure(APP_NAME)}".strip()) from None
    return f"http://{host}:{port}/v1"


def failure(app: str) -> str:
    """Why an application's deployments failed: the last line of each one's error."""
    from ray import serve

    status = serve.status().applications.get(app)
    deployments = status.deployments.items() if status else ()
    reasons = [f"{name}: {d.message.strip().splitlines()[-1]}" for name, d in deployments
               if d.status.value in ("DEPLOY_FAILED", "UNHEALTHY") and d.message.strip()]
    return "; ".join(reasons)


def undeploy(local: bool) -> None:
    """Takes the application down; a local Ray instance (one `deploy` started) goes with it."""
    import ray
    from ray import serve

    if not ray.is_initialized():  # `deploy` failed before Ray started
        return
    if local:
        serve.shutdown()
    else:
        serve.delete(APP_NAME)
    ray.shutdown()
