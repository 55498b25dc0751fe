"""The Gradio page: `python app.py` serves it (a Hugging Face Space runs the same file).

Importing this module builds the page and loads no model: the models load on the first Generate,
chosen by --draft/--target or CASCADE_DRAFT/CASCADE_TARGET (a .gguf path or repo_id/filename).
"""

from __future__ import annotations

import argparse
import logging

from cascade.settings import add_model_flags, model_config, model_flags
from cascade.ui.layout import build_demo
from cascade.ui.service import EngineService

service = EngineService()
demo = build_demo(service.engine, describe_models=service.describe)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve the cascade page.")
    add_model_flags(parser)
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1, or GRADIO_SERVER_NAME)")
    parser.add_argument("--port", type=int, help="port (default 7860, or GRADIO_SERVER_PORT)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request of the page to itself
    service.configure(model_config(model_flags(args)))
    # One generation at a time runs on the shared models (each handler also says so); others wait in line.
    demo.queue(max_size=64).launch(server_name=args.host, server_port=args.port)


if __name__ == "__main__":
    main()
