"""The engines the page and the API share: chosen by flags or environment, loaded lazily once behind a lock,
one per slot, leased per request; a failed load is remembered for `retry_after_s`, then tried again. The big
model can be switched while serving (`switch_target`): checked and fetched first, swapped once no engine is lent."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterator

from ..engine import memory
from ..engine.config import ModelConfig
from ..engine.engine import Engine
from ..engine.catalog import Size
from ..engine.models import (FAMILY, Located, ModelError, ModelPair, catalog_size, check_memory, fetch, load_pair,
                             local_model, locate, pair_need, parse_model_spec)
from ..routing.router import Router, load_router, router_words
from .lender import Asker, Lender
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
        self._warm = warm or Engine.calibrate  # at loading: weights paged in, `auto` taught the pair's costs
        self._engines: list[Engine] = []
        self._free: Lender[Engine] = Lender(clock=clock)
        self._lock = threading.Lock()  # held while loading, and while a switch swaps the pair: leases wait
        self._switching = threading.Lock()  # one switch at a time
        self._started: str | None = None  # the target before the first switch
        self._failure: tuple[float, ModelError] | None = None
        self.retry_after_s, self._clock = retry_after_s, clock

    @property
    def config(self) -> ModelConfig:
        # Read the environment when first needed, not at import: app.py's flags may still set it.
        return self._config or model_config(serving=True)

    @property
    def started_target(self) -> str:
        """The big model the service was configured with, whatever it was switched to since."""
        return self._started or self.config.target

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

    def slots(self) -> dict[str, Any] | None:
        """The slots now (None before the models load): how many, how many busy, whether they batch, the requests
        waiting for one and the model calls waiting for a decode, by class (a person watching first)."""
        engines = self._engines
        if not engines:
            return None
        scheduler = engines[0].pair.draft.context.scheduler
        return {"total": len(engines), "busy": len(engines) - self._free.qsize(), "batched": scheduler.batch,
                "waiting": self._free.waiting(), "waiting_calls": scheduler.waiting()}

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
    def lease(self, progress: Progress = lambda _msg: None, asker: Asker = Asker()) -> Iterator[Engine]:
        """An engine no other request is using, for the length of the `with` block: waits for `asker`'s turn
        (`lender.Lender`: a client's fair share, a person watching first)."""
        self.engines(progress)
        engine = self._free.get(asker)
        try:
            yield engine
        finally:
            self._free.put(engine)

    def _load(self, progress: Progress) -> None:
        if self._failure is not None and self._clock() - self._failure[0] < self.retry_after_s:
            raise self._failure[1]
        config = self._settings()
        try:
            engines = self._started_engines(config, progress)
        except ModelError as e:
            self._failure = (self._clock(), e)
            raise
        self._lend(engines)

    def _settings(self) -> ModelConfig:
        try:
            return self.config
        except ValueError as e:  # a variable of whoever runs the page, such as CASCADE_THREADS=many
            raise ModelError(f"the page's settings are not valid ({e})") from e

    def _started_engines(self, config: ModelConfig, progress: Progress) -> list[Engine]:
        """The config's pair loaded, its router found and warmed up: one engine per slot, none lent yet."""
        log.info("loading models: draft %s, target %s, %d slot(s)", config.draft, config.target, config.parallel)
        pair = self._loader(config, progress=progress)
        try:
            try:
                router = load_router(config.router, pair.draft_path)
            except ValueError as e:  # CASCADE_ROUTER names a file that is missing or not a router
                raise ModelError(f"the learned rule's router could not be loaded: {e}") from e
        except ModelError:
            close_pair(pair)
            raise
        log.info("router: %s", router_words(config.router, router, pair.draft_path.name))
        first = Engine(pair, router=router)
        progress("warming up the models")
        self._warm(first)  # its slots share what it teaches `auto`
        return first.slots() if config.parallel > 1 else [first]

    def _lend(self, engines: list[Engine]) -> None:
        for engine in engines:
            self._free.put(engine)
        self._engines, self._failure = engines, None

    def _taken_back(self) -> list[Engine]:
        """(Holding the lock, so no lease begins.) Every engine, each taken out of the pool as its lease ends."""
        engines, self._engines = self._engines, []
        for _ in engines:
            self._free.get()
        return engines

    def switch_target(self, target: str, progress: Progress = lambda _msg: None) -> ModelConfig:
        """Serve `target` (a size by name, a path or a Hub file) beside the same draft; the config served after.
        ModelError where it is refused or fails: the old pair serves on (reloaded if the new one failed to load)."""
        with self._switching:
            old = self._settings()
            try:
                new = replace(old, target=target).validate()
            except ValueError as e:
                raise ModelError(f"{target!r} is not a big model the page can use ({e})") from e
            if new == old and self.loaded:
                return old
            progress("locating the target model")
            draft, wanted = locate(new.draft, "draft"), locate(new.target, "target")
            check_memory(new, draft, wanted, free_memory=self._room_reader())
            fetch(wanted, progress)
            with self._lock:
                if self._engines:
                    if self._free.qsize() < len(self._engines):
                        progress("waiting for the generations under way to finish")
                    close_pair(self._taken_back()[0].pair)
                try:
                    engines = self._started_engines(new, progress)
                except ModelError:
                    log.exception("switching the target to %s failed; loading %s again", new.target, old.target)
                    with contextlib.suppress(ModelError):  # else the next request loads it, or says why not
                        self._lend(self._started_engines(old, progress))
                    raise
                self._lend(engines)
                self._started = self._started or old.target
                self._config = new
            log.info("target switched to %s", new.target)
            return new

    def room(self) -> int | None:
        """Bytes a pair switched in may use: free memory and what the loaded pair holds, which a switch closes
        first; None where no check is made (`check_memory`'s exceptions) or free memory cannot be read."""
        try:
            config = self.config
        except ValueError:
            return None
        if memory.skip_requested() or config.n_gpu_layers != 0:
            return None
        return self._room_reader()()

    def _room_reader(self) -> memory.FreeMemory:
        # The loaded pair's estimate, not its measured use: both sides of a switch's check are estimates.
        held = (estimated_need(self.config) or 0) if self.loaded else 0
        free = memory.free_memory()
        return lambda: None if free is None else free + held

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
        how = "batched together" if config.batch_slots else "taking turns, each text as it would be alone"
        at_once = f" · {config.parallel} generations at once ({how})" if config.parallel > 1 else ""
        return (f"Small model (draft): **{model_name(config.draft)}** · big model (target): "
                f"**{model_name(config.target)}** · {config.device}{at_once}")


def close_pair(pair: ModelPair) -> None:
    """Both models' memory freed (their contexts' batches, then the models); no slot of the pair may run after."""
    for runner in (pair.draft, pair.target):
        runner.context.close()
        runner.llm.close()


def estimated(spec: str, role: str) -> Located | None:
    """A model found without asking anyone: its files here, else its catalog entry, else the catalog entry of the
    size its name says (another quantization, as an estimate); None if none of these."""
    if local_model(spec) is not None:
        try:
            return locate(spec, role)
        except ModelError:
            return None
    known = catalog_size(spec) or _size_in_name(spec)
    if known is None:
        return None
    return Located(known.spec, role, parse_model_spec(known.spec), (known.file_bytes,))


def _size_in_name(spec: str) -> Size | None:
    name = model_name(spec).rsplit("/", 1)[-1].lower()
    return next((s for s in FAMILY.values() if name.startswith(s.stem.split("-instruct")[0] + "-")), None)


def estimated_need(config: ModelConfig) -> int | None:
    """Bytes the config's pair needs (`pair_need`), asking no one; None where either model is unknown here."""
    draft, target = estimated(config.draft, "draft"), estimated(config.target, "target")
    return None if draft is None or target is None else pair_need(config, draft, target).total
