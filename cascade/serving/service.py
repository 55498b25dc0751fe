"""The engines the page and the API share: chosen by flags or environment, loaded lazily once behind a lock,
one per slot, leased per request; a failed load is remembered for `retry_after_s`, then tried again."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from ..engine.config import ModelConfig
from ..engine.engine import Engine
from ..engine.models import ModelError, ModelPair, load_pair, local_model
from ..routing.router import Router, load_router, router_words
from .messages import model_name, public_message
from .settings import model_config

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

# A burst of visitors after a failure is answered at once; a Hub that comes back is used within a minute.
FAILED_LOAD_MEMORY_S = 60.0


class EngineService:
    """The process's engines: `engine()` and `lease()` load them the first time; `describe()` never loads."""

    def __init__(self, config: ModelConfig | None = None,
                 loader: Callable[..., ModelPair] = load_pair,
                 warm: Callable[[Engine], None] | None = None,
                 retry_after_s: float = FAILED_LOAD_MEMORY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._loader = loader
        self._warm = warm or warm_up
        self._engines: list[Engine] = []
        self._free: queue.Queue[Engine] = queue.Queue()
        self._lock = threading.Lock()
        self._failure: tuple[float, ModelError] | None = None
        self.retry_after_s, self._clock = retry_after_s, clock

    @property
    def config(self) -> ModelConfig:
        # Read the environment when first needed, not at import: app.py's flags may still set it.
        return self._config or model_config(serving=True)

    def configure(self, config: ModelConfig) -> None:
        with self._lock:
            if self._engines:
                raise RuntimeError("the models are already loaded; configure the service before first use")
            self._config = config

    @property
    def loaded(self) -> bool:
        return bool(self._engines)

    def ready(self) -> bool:
        """Whether the engines are loaded, without waiting (else the load starts in the background); raises the
        remembered ModelError of a load that failed a moment ago."""
        if self._engines:
            return True
        if not self._lock.acquire(blocking=False):
            return False  # another request is loading them
        try:
            if self._engines:
                return True
            if self._failure is not None and self._clock() - self._failure[0] < self.retry_after_s:
                raise self._failure[1]
        finally:
            self._lock.release()
        threading.Thread(target=self._load_in_background, daemon=True, name="cascade-load").start()
        return False

    def _load_in_background(self) -> None:
        with contextlib.suppress(ModelError):  # remembered: the next request is told
            self.engines()

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether the engines are loaded within `timeout_s` seconds (as `ready`, waiting)."""
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            left = deadline - time.monotonic()
            if left <= 0 or not self._lock.acquire(timeout=min(left, threading.TIMEOUT_MAX)):
                return False
            self._lock.release()
            time.sleep(0.01)  # the load had ended, or one just begun had not yet taken the lock: let it
        return True

    def status(self) -> tuple[str, str]:
        """("ok", ""), ("loading", "") or ("error", a visitor's words), as llama-server's /health, as `ready`."""
        try:
            return ("ok", "") if self.ready() else ("loading", "")
        except ModelError as e:
            return "error", public_message(e)

    def retry_in_s(self) -> float:
        """Seconds until a failed load is tried again (0 when none is remembered): a 503's Retry-After."""
        failure = self._failure
        return 0.0 if failure is None else max(0.0, self.retry_after_s - (self._clock() - failure[0]))

    def engines(self, progress: Progress = lambda _msg: None) -> list[Engine]:
        """Every engine, loading them on first use; ModelError (remembered a while) if they cannot load."""
        with self._lock:
            if not self._engines:
                self._load(progress)
            return self._engines

    def engine(self, progress: Progress = lambda _msg: None) -> Engine:
        """The first engine: for a caller that runs one request at a time."""
        return self.engines(progress)[0]

    @contextmanager
    def lease(self, progress: Progress = lambda _msg: None) -> Iterator[Engine]:
        """An engine no other request is using, for the length of the `with` block (waits for one)."""
        self.engines(progress)
        engine = self._free.get()
        try:
            yield engine
        finally:
            self._free.put(engine)

    def _load(self, progress: Progress) -> None:
        if self._failure is not None and self._clock() - self._failure[0] < self.retry_after_s:
            raise self._failure[1]
        try:
            config = self.config
        except ValueError as e:  # a variable of whoever runs the page, such as CASCADE_THREADS=many
            raise ModelError(f"the page's settings are not valid ({e})") from e
        log.info("loading models: draft %s, target %s, %d slot(s)", config.draft, config.target, config.parallel)
        try:
            pair = self._loader(config, progress=progress)
            try:
                router = load_router(config.router, pair.draft_path)
            except ValueError as e:  # CASCADE_ROUTER names a file that is missing or not a router
                raise ModelError(f"the learned rule's router could not be loaded: {e}") from e
            log.info("router: %s", router_words(config.router, router, pair.draft_path.name))
            first = Engine(pair, router=router)
        except ModelError as e:
            self._failure = (self._clock(), e)
            raise
        progress("warming up the models")
        self._warm(first)  # its slots share what it teaches `auto`
        engines = first.slots() if config.parallel > 1 else [first]
        for engine in engines:
            self._free.put(engine)
        self._engines, self._failure = engines, None

    def router(self) -> Router | None:
        """The engines' router once loaded; before that, the one the settings name (None: none, or a bad file)."""
        if self.loaded:
            return self._engines[0].router
        try:
            config = self.config
            return load_router(config.router, local_model(config.draft))
        except ValueError:
            return None

    def describe(self) -> str:
        """Which models the page uses, by file name (never a directory of this machine)."""
        config = self.config
        at_once = f" · {config.parallel} generations at once" if config.parallel > 1 else ""
        return (f"Small model (draft): **{model_name(config.draft)}** · big model (target): "
                f"**{model_name(config.target)}** · {config.device}{at_once}")


def warm_up(engine: Engine) -> None:
    """Short generations at loading (`Engine.calibrate`): weights paged in, and `auto` knows the pair's costs."""
    engine.calibrate()
