"""`python -m cascade serve ...`: the OpenAI-compatible API for chat apps, on the serving layer's engine
pool; the models load in the background while the server already answers."""

from __future__ import annotations

import argparse
import sys

from ..serving.settings import add_model_flags, model_config, model_flags
from .shared import Command


def add_arguments(serve: argparse.ArgumentParser) -> None:
    add_model_flags(serve, page=True)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    serve.add_argument("--port", type=int, default=8000, help="port (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from ..api.server import ApiSettings, create_api
    from ..serving.pump import tune_interpreter
    from ..serving.service import EngineService

    tune_interpreter()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    service = EngineService(model_config(model_flags(args)))
    settings = ApiSettings.from_environment()
    app = create_api(service, settings)
    service.ready()  # load the models now, in the background: requests meanwhile are told to retry (503)
    key = "a key (CASCADE_API_KEY)" if settings.api_key else "no key"
    print(f"* OpenAI-compatible API: http://{args.host}:{args.port}/v1 · {key} · models load in the background",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


COMMANDS = (Command("serve", "an OpenAI-compatible API (/v1/chat/completions, /v1/completions, "
                             "/v1/models) for chat apps; every token says which model wrote it", add_arguments, run),)
