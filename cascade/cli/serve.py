"""`python -m cascade serve ...`: the OpenAI-compatible API, answering while the models load in the background;
with `--ray`, on replicas of the pair on Ray Serve (`api/replicas.py`, an optional install)."""

from __future__ import annotations

import argparse
import sys

from ..serving.settings import add_model_flags, model_config, model_flags
from .shared import Command


def add_arguments(serve: argparse.ArgumentParser) -> None:
    add_model_flags(serve, page=True)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    serve.add_argument("--port", type=int, default=8000, help="port (default %(default)s)")
    ray = serve.add_argument_group("replicas on Ray Serve (pip install 'cascade-decoding[ray]'; docs/hosting.md)")
    ray.add_argument("--ray", action="store_true",
                     help="serve through Ray Serve's proxy, over replicas that each hold one pair of models")
    ray.add_argument("--replicas", default="1", metavar="MIN[:MAX]",
                     help="replicas of the pair: N, or MIN:MAX to autoscale on ongoing requests (default %(default)s)")
    ray.add_argument("--ray-address", default=None, metavar="ADDRESS",
                     help="join this Ray cluster (auto: the one `ray start` began here); default: start a local Ray")
    ray.add_argument("--target-ongoing", type=float, default=None, metavar="N",
                     help="autoscaling: ongoing requests per replica to aim for (default: its slots, --parallel)")
    ray.add_argument("--replica-cpus", type=float, default=None, metavar="N",
                     help="CPUs Ray reserves for each replica (default: its --threads)")


def run(args: argparse.Namespace) -> int:
    if args.ray:
        return run_on_ray(args)
    import logging

    import uvicorn

    from ..api.server import ApiSettings, create_api
    from ..serving.pump import tune_interpreter
    from ..serving.service import EngineService

    tune_interpreter()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    service = EngineService(model_config(model_flags(args), serving=True))
    settings = ApiSettings.from_environment()
    app = create_api(service, settings)
    service.ready()  # load the models now, in the background: requests meanwhile wait for them (/health: 503)
    key = "a key (CASCADE_API_KEY)" if settings.api_key else "no key"
    print(f"* OpenAI-compatible API: http://{args.host}:{args.port}/v1 · {key} · models load in the background",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def run_on_ray(args: argparse.Namespace) -> int:
    """The same API on Ray Serve: Ray's proxy at --host:--port, the replicas wherever Ray places them."""
    import dataclasses
    import time

    from ..api import replicas

    try:
        replicas.require_ray()
    except replicas.RayMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    scaling = replicas.Scaling.parse(args.replicas, args.target_ongoing, args.replica_cpus)
    flags = dataclasses.asdict(model_config(model_flags(args), serving=True))  # flag > environment > default, here
    try:
        url = replicas.deploy(flags, scaling, host=args.host, port=args.port, address=args.ray_address)
        low, high = scaling.min_replicas, scaling.max_replicas
        span = f"{low} to {high}" if high > low else f"{low}"
        print(f"* OpenAI-compatible API on Ray Serve: {url} · {span} replica(s) · Ctrl-C stops it",
              file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    except RuntimeError as e:  # Ray's words for a deployment that failed (a replica's models did not load, ...)
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        replicas.undeploy(local=args.ray_address is None)


COMMANDS = (Command("serve", "an OpenAI-compatible API (/v1/chat/completions, /v1/completions, "
                             "/v1/models) for chat apps; every token says which model wrote it", add_arguments, run),)
