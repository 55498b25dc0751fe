"""Finding, downloading, loading and pairing the two models: a catalog size by name ("7B"), a local path, or
`repo_id/filename` on the Hugging Face Hub (a split file in all its parts), checked against the free memory."""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import llama_cpp
import numpy as np

from ..routing.router import token_class
from . import memory
from .batching import Scheduler, SharedContext
from .catalog import SIZES, SMALL, Size, split_parts
from .runner import ModelRunner
from .transfer import Download, Progress

if TYPE_CHECKING:
    from .config import ModelConfig

GGUF_MAGIC = b"GGUF"
# Sizes by name, as --draft and --target take them.
FAMILY: dict[str, Size] = {SMALL.name: SMALL, **SIZES}
_SIZE_NAME = re.compile(r"^\d+(\.\d+)?[bB]$")


class ModelError(Exception):
    """A model could not be found, fetched, loaded or paired; the message says what to do."""


@dataclass(frozen=True)
class HubFile:
    repo_id: str
    filename: str

    @property
    def parts(self) -> list["HubFile"]:
        """Every part of a split file, in order (the file alone when it is not split)."""
        return [HubFile(self.repo_id, name) for name in split_parts(self.filename)]


def catalog_size(spec: str) -> Size | None:
    """The catalog's size whose file (any part) a spec names, by name or by file, or None."""
    where = parse_model_spec(spec)
    name = where.filename.rsplit("/", 1)[-1] if isinstance(where, HubFile) else where.name
    return next((s for s in FAMILY.values() if name in {p.rsplit("/", 1)[-1] for p in split_parts(s.filename)}), None)


def parse_model_spec(spec: str) -> Path | HubFile:
    """A size by name (its Hub file), a local path if one exists or the spec looks like one, else a HubFile."""
    path = Path(spec).expanduser()
    named = next((s for name, s in FAMILY.items() if name.lower() == spec.strip().lower()), None)
    if named is not None and not path.is_file():
        return parse_model_spec(named.spec)
    looks_local = spec.startswith(("/", "./", "../", "~")) or path.exists()
    parts = spec.split("/")
    if looks_local or len(parts) < 3:
        return path
    return HubFile(repo_id="/".join(parts[:2]), filename="/".join(parts[2:]))


@dataclass(frozen=True)
class Located:
    """A model found: where it is, each part's bytes, and its first part's path once every part is here."""

    spec: str
    role: str
    where: Path | HubFile
    sizes: tuple[int, ...]
    path: Path | None = None


def locate(spec: str, role: str = "model") -> Located:
    """A model's place and size, asking the Hub (one look per part) only for parts not yet here."""
    where = parse_model_spec(spec)
    if isinstance(where, HubFile):
        cached = _cached_parts(where)
        if all(cached):
            return Located(spec, role, where, tuple(p.stat().st_size for p in cached), cached[0])
        return Located(spec, role, where, tuple(_hub_size(part, role) for part in where.parts))
    parts = [Path(p) for p in split_parts(str(where))]
    if not where.is_file():
        if _SIZE_NAME.match(spec.strip()):
            raise ModelError(f"there is no {role} model of size {spec.strip()}: the sizes are {', '.join(FAMILY)} "
                             f"(or give a local .gguf file, or repo_id/filename on the Hub)")
        raise ModelError(f"{role} model file not found: {spec}")
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise ModelError(f"the {role} model is split in {len(parts)} parts and {', '.join(missing)} is not beside "
                         f"the others; put every part in one folder")
    return Located(spec, role, where, tuple(p.stat().st_size for p in parts), parts[0])


def resolve_model(spec: str, role: str = "model", progress: Progress = lambda _msg: None) -> Path:
    """The local path of a model (a split file's first part), downloading it from the Hub on first use."""
    return fetch(locate(spec, role), progress).path


def local_model(spec: str) -> Path | None:
    """The local path of a model already on this machine (a file, or every part in the Hub's cache), else None."""
    where = parse_model_spec(spec)
    if isinstance(where, Path):
        return where if where.is_file() else None
    cached = _cached_parts(where)
    return cached[0] if all(cached) else None


def _cached_parts(hub: HubFile) -> list[Path | None]:
    from huggingface_hub import try_to_load_from_cache

    found = [try_to_load_from_cache(part.repo_id, part.filename) for part in hub.parts]
    return [Path(p) if isinstance(p, str) else None for p in found]


HUB_TIMEOUT_S = 5.0  # how long a visitor waits to learn the Hub is unreachable (its own retries take far longer)


def _unreachable(hub: HubFile, role: str) -> ModelError:
    return ModelError(f"cannot fetch the {role} model {hub.repo_id}/{hub.filename}: the Hugging Face Hub is "
                      f"unreachable (or HF_HUB_OFFLINE is set) and the file is not in the local cache. "
                      f"Point CASCADE_{role.upper()} (or --{role}) at a local .gguf file instead.")


def _missing(hub: HubFile, role: str) -> ModelError:
    return ModelError(f"the {role} model {hub.repo_id}/{hub.filename} does not exist on the Hub")


def _hub_size(part: HubFile, role: str) -> int:
    """A part's bytes: the cached file's, else the Hub's; an unreachable Hub or a missing file is told at once."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

    cached = try_to_load_from_cache(part.repo_id, part.filename)
    if isinstance(cached, str):
        return Path(cached).stat().st_size
    if constants.HF_HUB_OFFLINE:
        raise _unreachable(part, role)
    try:
        return int(get_hf_file_metadata(hf_hub_url(part.repo_id, part.filename), timeout=HUB_TIMEOUT_S).size or 0)
    except (RepositoryNotFoundError, EntryNotFoundError) as e:
        raise _missing(part, role) from e
    except Exception as e:  # noqa: BLE001 - connection errors differ by transfer library and version
        raise _unreachable(part, role) from e


def fetch(model: Located, progress: Progress = lambda _msg: None, clock: Callable[[], float] = time.monotonic
          ) -> Located:
    """The model with every part on disk, each part not cached downloaded with its progress said."""
    if model.path is not None:
        return model
    hub, total = model.where, sum(model.sizes)
    assert isinstance(hub, HubFile)
    paths, before = [], 0
    for k, (part, size, cached) in enumerate(zip(hub.parts, model.sizes, _cached_parts(hub)), 1):
        which = f" (part {k} of {len(model.sizes)})" if len(model.sizes) > 1 else ""
        paths.append(cached or _download(part, model.role, Download(
            progress, f"downloading the {model.role} model{which}", before, total, clock)))
        before += size
    return replace(model, sizes=tuple(p.stat().st_size for p in paths), path=paths[0])


def _download(hub: HubFile, role: str, meter: Download) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(hf_hub_download(repo_id=hub.repo_id, filename=hub.filename, etag_timeout=HUB_TIMEOUT_S,
                                    tqdm_class=meter.bar))
    except LocalEntryNotFoundError as e:
        raise _unreachable(hub, role) from e
    except (RepositoryNotFoundError, EntryNotFoundError) as e:
        raise _missing(hub, role) from e
    except Exception as e:  # noqa: BLE001 - the transfer library's errors (httpx, httpx2, xet) vary by version
        raise ModelError(f"downloading the {role} model {hub.repo_id}/{hub.filename} failed ({type(e).__name__}); "
                         f"try again, or point CASCADE_{role.upper()} at a local .gguf file") from e


# ---- memory -------------------------------------------------------------------------------------

def _kv_shape(model: Located) -> memory.KvShape | None:
    """The model's KV shape: from its header once on disk, else from the catalog."""
    shape = memory.read_kv_shape(model.path) if model.path is not None else None
    known = catalog_size(model.spec)
    return shape or (memory.KvShape.of(known.shape) if known is not None else None)


def pair_need(config: "ModelConfig", draft: Located, target: Located) -> memory.Need:
    """What the pair needs: both models' files, KV caches and working buffers at the config's context and slots."""
    return sum((memory.need(sum(m.sizes), _kv_shape(m), config.n_ctx, config.parallel, config.n_batch)
                for m in (draft, target)), memory.Need(0, 0, 0))


def check_memory(config: "ModelConfig", draft: Located, target: Located,
                 free_memory: memory.FreeMemory | None = None) -> None:
    """Refuse a pair this machine cannot hold (unless skipped, with layers on a GPU, or free memory is unknown)."""
    if memory.skip_requested() or config.n_gpu_layers != 0:
        return
    free = (free_memory or memory.free_memory)()
    needed = pair_need(config, draft, target)
    if free is None or needed.total <= free:
        return
    known = catalog_size(target.spec)
    where = target.where
    who = f"{known.name} target" if known is not None else \
        f"target model {where.name if isinstance(where, Path) else f'{where.repo_id}/{where.filename}'}"
    raise ModelError(f"the {who} needs about {memory.gb(needed.total)} GB with its draft (model files "
                     f"{memory.gb(needed.weights)} GB, context {memory.gb(needed.kv)} GB, working memory "
                     f"{memory.gb(needed.working)} GB); this machine has {memory.gb(free)} GB free. Choose a smaller "
                     f"big model, or free memory (or set {memory.SKIP_ENV}=1 to load it anyway).")


def load_model(path: Path, config: "ModelConfig", role: str = "model", logits_all: bool = False,
               slots: int = 1) -> llama_cpp.Llama:
    """A model and its context: `config.n_ctx` tokens for each of `slots` sequences."""
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ModelError(f"the {role} model is not a GGUF file: {path.name}")
    try:
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=config.n_ctx, n_batch=config.n_batch,
                              n_ubatch=config.n_batch, n_threads=config.n_threads, n_threads_batch=config.n_threads,
                              n_gpu_layers=config.n_gpu_layers, logits_all=logits_all, verbose=False)
        if slots > 1:
            give_slots(llm, config.n_ctx, slots)
    except (ValueError, RuntimeError, OSError) as e:
        raise ModelError(f"the {role} model could not be loaded (truncated or corrupt?): {path.name}") from e
    return llm


def give_slots(llm: llama_cpp.Llama, n_ctx: int, slots: int) -> None:
    """`llm`'s context replaced by one of `slots` sequences of `n_ctx` tokens, each with a cache of its own (not
    llama.cpp's unified one), so a sequence's logits do not depend on who else is in the context."""
    from llama_cpp import _internals

    params = type(llm.context_params).from_buffer_copy(llm.context_params)
    params.n_ctx, params.n_seq_max, params.kv_unified, params.embeddings = n_ctx * slots, slots, False, False
    shared = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
    alone, llm._ctx = llm._ctx, shared
    alone.close()
    llm.context_params = params


# ---- vocabulary -----------------------------------------------------------------------------------

def _vocab(llm: llama_cpp.Llama):
    return llama_cpp.llama_model_get_vocab(llm.model)


def token_text(llm: llama_cpp.Llama, token: int) -> bytes:
    return llama_cpp.llama_vocab_get_text(_vocab(llm), token) or b""


def _is_padding(vocab, token: int) -> bool:
    return bool(llama_cpp.llama_vocab_get_attr(vocab, token) & llama_cpp.LLAMA_TOKEN_ATTR_UNUSED)


def check_same_vocabulary(draft: llama_cpp.Llama, target: llama_cpp.Llama) -> int:
    """Refuse a pair unless every id both have means the same text and every row only the bigger one has is
    padding (token type UNUSED); return the shared vocabulary size."""
    vd, vt = _vocab(draft), _vocab(target)
    if llama_cpp.llama_vocab_type(vd) != llama_cpp.llama_vocab_type(vt) or \
            llama_cpp.llama_vocab_eos(vd) != llama_cpp.llama_vocab_eos(vt):
        raise ModelError("the draft and target models use different tokenizers (their vocabularies differ); "
                         "choose two models of one family")
    nd, nt = draft.n_vocab(), target.n_vocab()
    n = min(nd, nt)
    for token in range(n):
        if llama_cpp.llama_vocab_get_text(vd, token) != llama_cpp.llama_vocab_get_text(vt, token):
            raise ModelError(f"the draft and target models' vocabularies differ (token {token} is "
                             f"{token_text(draft, token)!r} vs {token_text(target, token)!r}); choose two models "
                             "of one family")
    bigger, role = (draft, "draft") if nd > nt else (target, "target")
    real = next((t for t in range(n, max(nd, nt)) if not _is_padding(_vocab(bigger), t)), None)
    if real is not None:
        raise ModelError(f"the draft and target models' vocabularies differ: the {role} has {abs(nd - nt)} more "
                         f"tokens, and token {real} ({token_text(bigger, real)!r}) is not padding; choose two models "
                         f"of one family (for example Qwen2.5 0.5B and 7B)")
    return n


def shared_padding(draft: llama_cpp.Llama, target: llama_cpp.Llama, n_vocab: int) -> np.ndarray | None:
    """The ids under `n_vocab` either model marks as padding, which neither may ever choose; None if none."""
    vd, vt = _vocab(draft), _vocab(target)
    ids = [t for t in range(n_vocab) if _is_padding(vd, t) or _is_padding(vt, t)]
    return np.asarray(ids, dtype=np.intp) if ids else None


# ---- the pair -------------------------------------------------------------------------------------

@dataclass(eq=False)  # a pair is itself: compared and hashed by identity
class ModelPair:
    """Both models' cursors and the lock one generation holds; one per slot (`slots()`), sharing the models."""

    draft: ModelRunner
    target: ModelRunner
    draft_path: Path
    target_path: Path
    config: "ModelConfig"
    lock: threading.Lock = field(default_factory=threading.Lock)
    _classes: dict[int, tuple[float, ...]] = field(default_factory=dict, repr=False)

    @property
    def n_vocab(self) -> int:
        return self.draft.n_vocab

    def piece(self, token: int) -> str:
        """A token's own text (a part of a character shows as U+FFFD)."""
        return self.draft.llm.detokenize([token]).decode("utf-8", errors="replace")

    def token_class(self, token: int) -> tuple[float, ...]:
        """The router's flags for a token's text (`router.token_class`), computed once per token."""
        if token not in self._classes:
            self._classes[token] = token_class(self.piece(token))
        return self._classes[token]

    @property
    def target_params_b(self) -> float:
        """The target's parameters, in billions (as llama.cpp counts them from its tensors)."""
        return llama_cpp.llama_model_n_params(self.target.llm.model) / 1e9

    def is_end_of_generation(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(_vocab(self.target.llm), token))

    @property
    def slot(self) -> int:
        return self.draft.seq

    def slots(self) -> list["ModelPair"]:
        """This pair (slot 0) and one pair per further slot its contexts were made for."""
        return [self] + [ModelPair(draft=self.draft.sibling(seq), target=self.target.sibling(seq),
                                   draft_path=self.draft_path, target_path=self.target_path, config=self.config,
                                   _classes=self._classes)
                         for seq in range(1, self.draft.context.n_seq)]

    @contextmanager
    def writing(self) -> Iterator[None]:
        """The pair's lock, its slot counted as writing by the slots' scheduler while it is held."""
        scheduler = self.draft.context.scheduler
        with self.lock:
            scheduler.enter(self.slot)
            try:
                yield
            finally:
                scheduler.leave(self.slot)


def load_pair(config: "ModelConfig", progress: Progress = lambda _msg: None,
              free_memory: memory.FreeMemory | None = None) -> ModelPair:
    """Both models found, checked against the free memory (before and after downloading), loaded and paired."""
    progress("locating the draft model")
    draft = locate(config.draft, "draft")
    progress("locating the target model")
    target = locate(config.target, "target")
    check_memory(config, draft, target, free_memory)
    fetched = fetch(draft, progress), fetch(target, progress)
    if fetched != (draft, target):  # now read from the files themselves
        check_memory(config, *fetched, free_memory)
    draft, target = fetched
    slots = config.parallel
    progress("loading the draft model")
    small = load_model(draft.path, config, "draft", slots=slots)
    progress("loading the target model")
    large = load_model(target.path, config, "target", slots=slots)
    n_vocab = check_same_vocabulary(small, large)
    padding = shared_padding(small, large, n_vocab)
    scheduler = Scheduler(batch=config.batch_slots)  # one decode at a time over the cores, whichever the model
    return ModelPair(draft=ModelRunner(small, n_vocab, SharedContext(small, slots, scheduler), padding=padding),
                     target=ModelRunner(large, n_vocab, SharedContext(large, slots, scheduler), padding=padding),
                     draft_path=draft.path, target_path=target.path, config=config)
