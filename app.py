"""The Gradio page: `python app.py` serves it (a Hugging Face Space runs the same file).

Importing this module builds the page and loads no model: the models load on the first Generate,
chosen by --draft/--target or CASCADE_DRAFT/CASCADE_TARGET (a .gguf path or repo_id/filename).
"""

from __future__ import annotations

import argparse
import logging

from cascade.page import build_demo
from cascade.service import EngineService, model_config

service = EngineService()
demo = build_demo(service.engine, describe_models=service.describe)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve the cascade page.")
    parser.add_argument("--draft", help="draft model: a .gguf path or repo_id/filename (env CASCADE_DRAFT)")
    parser.add_argument("--target", help="target model: a .gguf path or repo_id/filename (env CASCADE_TARGET)")
    parser.add_argument("--threads", type=int, help="CPU threads per model (env CASCADE_THREADS)")
    parser.add_argument("--n-ctx", type=int, help="context size in tokens (env CASCADE_N_CTX)")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1, or GRADIO_SERVER_NAME)")
    parser.add_argument("--port", type=int, help="port (default 7860, or GRADIO_SERVER_PORT)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request of the page to itself
    service.configure(model_config(draft=args.draft, target=args.target, n_threads=args.threads, n_ctx=args.n_ctx))
    # One generation at a time runs on the shared models (each handler also says so); others wait in line.
    demo.queue(max_size=64).launch(server_name=args.host, server_port=args.port)


if __name__ == "__main__":
    main()
