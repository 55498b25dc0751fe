"""The API past one machine (`build`, `app_builder`, `deploy`; docs/hosting.md): `Models` replicas on Ray Serve,
each a pair behind `create_api`'s routes, behind the `Gateway` ingress. Ray is imported only where it is used."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Mapping

from ..engine.config import ModelConfig
from ..engine.models import ModelError
from ..serving.pump import tune_interpreter
from ..serving.service import EngineService
from ..serving.settings import model_config
from .gateway import APP_NAME, MODELS, Gateway, with_key
from .server import ApiSettings, create_api

log = logging.getLogger(__name__)

REPLICA_HEADER = b"x-cascade-replica"
INSTALL = ("Ray Serve is not installed; install it with: pip install 'cascade-decoding[ray]' "
           "(from a checkout: pip install '.[ray]'), or pip install 'ray[serve]'")

# a replica going away finishes its answers first (Ray's default, 20 s, would cut a long CPU answer off)
GRACEFUL_SHUTDOWN_S = 300.0


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


def build(flags: Mapping[str, Any] | None = None, api: ApiSettings | None = None, scaling: Scaling = Scaling(),
          service: Callable[[ModelConfig], EngineService] = EngineService) -> Any:
    """`Gateway` in front of `Models` replicas with `scaling`; `flags` win over each replica's environment. Each
    replica reads the key from its own environment and, built with one in `api`, refuses to start without it."""
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
