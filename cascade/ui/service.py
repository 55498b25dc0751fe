"""The page's one engine: chosen by flags or environment variables, loaded on first use, shared by all.

Loading is lazy so that importing the app (tests, tools, a Space's build step) never touches a model;
it happens once per process, behind a lock, so visitors arriving together wait for one load. A failed
load is not remembered: the next request tries again (the Hub may be back).
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Callable

from ..config import GenerationConfig, ModelConfig
from ..engine import Engine
from ..models import ModelError, ModelPair, load_pair, parse_model_spec
from ..settings import model_config

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

HOW_TO_POINT_AT_LOCAL_FILES = (
    "To use model files already on this machine, whoever runs the page can set CASCADE_DRAFT and "
    "CASCADE_TARGET to two .gguf files (or pass --draft and --target to app.py) and restart it."
)


class EngineService:
    """Holds the process's engine. `engine()` loads it the first time; `describe()` never loads."""

    def __init__(self, config: ModelConfig | None = None,
                 loader: Callable[..., ModelPair] = load_pair,
                 warm: Callable[[Engine], None] | None = None) -> None:
        self._config = config
        self._loader = loader
        self._warm = warm or warm_up
        self._engine: Engine | None = None
        self._lock = threading.Lock()

    @property
    def config(self) -> ModelConfig:
        # Read the environment when first needed, not at import: app.py's flags may still set it.
        return self._config or model_config()

    def configure(self, config: ModelConfig) -> None:
        with self._lock:
            if self._engine is not None:
                raise RuntimeError("the models are already loaded; configure the service before first use")
            self._config = config

    @property
    def loaded(self) -> bool:
        return self._engine is not None

    def engine(self, progress: Progress = lambda _msg: None) -> Engine:
        with self._lock:
            if self._engine is None:
                config = self.config
                log.info("loading models: draft %s, target %s", config.draft, config.target)
                engine = Engine(self._loader(config, progress=progress))
                progress("warming up the models")
                self._warm(engine)
                self._engine = engine
            return self._engine

    def describe(self) -> str:
        """Which models the page uses, by file name (never a directory of this machine)."""
        config = self.config
        return (f"Small model (draft): **{model_name(config.draft)}** · big model (target): "
                f"**{model_name(config.target)}** · {config.n_threads} CPU threads")


def warm_up(engine: Engine) -> None:
    """One short generation through both models, so the first visitor's measured speed is not the
    cost of the operating system paging the weights in (loading, which measurements exclude)."""
    for _ in engine.generate("Hello", GenerationConfig(policy="speculative", k=1, max_tokens=2, chat=False)):
        pass


def model_name(spec: str) -> str:
    """A Hub file as repo_id/filename, a local file by its name only."""
    where = parse_model_spec(spec)
    return where.name if isinstance(where, Path) else f"{where.repo_id}/{where.filename}"


# A path (/a/b, ~/a/b, ./a/b), but not the `//host/...` of a URL nor a Hub repo id (owner/repo/file).
_PATH = re.compile(r"(?<![\w.:/~-])(?:~/|\.{1,2}/|/)(?:[^\s/'\"]+/)*([^\s/'\"]+)")


def hide_paths(message: str) -> str:
    """The message with every absolute path replaced by its last part, the file name."""
    return _PATH.sub(lambda m: m.group(1), message)


SERVER_TROUBLE = "Something went wrong on the server; whoever runs the page can find the details in its log."


def public_message(error: ModelError) -> str:
    """What a visitor is told when the models cannot be used: what went wrong, and what to do."""
    return f"The models could not be loaded: {hide_paths(str(error)).rstrip('.')}. {HOW_TO_POINT_AT_LOCAL_FILES}"
