"""The Gradio page, and on the same port the OpenAI-compatible API (`/v1/...`): `python app.py` serves
both (a Hugging Face Space runs the same file).

Importing this module builds the page and loads no model: `main` starts loading the models in the
background as the server starts (a Generate or an API request that comes meanwhile waits for them, and
`/health` says when they are ready), chosen by --draft/--target or CASCADE_DRAFT/CASCADE_TARGET (a .gguf
path or repo_id/filename). Page visitors and API clients share the same engines.
"""

from __future__ import annotations

import argparse
import logging
import os

from cascade.api.server import ApiSettings, create_api
from cascade.serving.pump import tune_interpreter
from cascade.serving.settings import add_model_flags, model_config, model_flags, switching_allowed
from cascade.ui.bigmodel import BigModels
from cascade.ui.layout import build_demo, queued
from cascade.serving.service import EngineService

service = EngineService()


def page(at_once: int):
    """The page over the service's engines, `at_once` requests at once (each leases its own engine: a slot);
    its "Big model" control unless CASCADE_SWITCH_MODELS=0."""
    return build_demo(service.lease, describe_models=service.describe, concurrency=at_once,
                      router=service.router, big_model=BigModels(service) if switching_allowed() else None)


def at_once_from_environment() -> int:
    try:
        return model_config(serving=True).parallel  # CASCADE_PARALLEL
    except ValueError:
        return 1  # the first Generate then says which variable is wrong


# Built at import, for a Space and for tools; --parallel in main() builds it again.
demo = page(at_once_from_environment())


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve the cascade page.")
    add_model_flags(parser, page=True)
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1, or GRADIO_SERVER_NAME)")
    parser.add_argument("--port", type=int, help="port (default 7860, or GRADIO_SERVER_PORT)")
    return parser.parse_args(argv)


# Visitors who may wait in the page's queue; the API holds as many requests (CASCADE_API_QUEUE).
QUEUE_SIZE = 64


def server(blocks):
    """The page and the API as one app: the API's routes first, then the page mounted at "/"."""
    import gradio as gr

    api = create_api(service, ApiSettings.from_environment())
    return gr.mount_gradio_app(api, queued(blocks, max_size=QUEUE_SIZE), path="/")


def main(argv=None) -> None:
    global demo
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request of the page to itself
    config = model_config(model_flags(args), serving=True)
    service.configure(config)
    if config.parallel != at_once_from_environment():
        demo = page(config.parallel)
    import uvicorn

    tune_interpreter()  # the page's and the API's streams hand the GIL to and fro each token
    # `at_once` generations run at once, one per slot; other visitors and API requests wait in line.
    host = args.host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1")
    port = args.port or int(os.environ.get("GRADIO_SERVER_PORT", "7860"))
    print(f"* The page: http://{host}:{port}/ · the OpenAI-compatible API: http://{host}:{port}/v1", flush=True)
    service.ready()  # the models start loading now, in the background, as the port opens
    uvicorn.run(server(demo), host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main()
