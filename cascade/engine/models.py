"""Finding, downloading, loading and pairing the two models: a local path, or `repo_id/filename` on the
Hugging Face Hub, fetched once into its cache."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import llama_cpp
import numpy as np

from ..routing.router import token_class
from .batching import Scheduler, SharedContext
from .runner import ModelRunner

if TYPE_CHECKING:
    from .config import ModelConfig

GGUF_MAGIC = b"GGUF"


class ModelError(Exception):
    """A model could not be found, fetched, loaded or paired; the message says what to do."""


@dataclass(frozen=True)
class HubFile:
    repo_id: str
    filename: str


def parse_model_spec(spec: str) -> Path | HubFile:
    """A local path if one exists (or the spec clearly is a path), else `owner/repo/filename`."""
    path = Path(spec).expanduser()
    looks_local = spec.startswith(("/", "./", "../", "~")) or path.exists()
    parts = spec.split("/")
    if looks_local or len(parts) < 3:
        return path
    return HubFile(repo_id="/".join(parts[:2]), filename="/".join(parts[2:]))


def resolve_model(spec: str, role: str = "model") -> Path:
    """The local path of a model, downloading it from the Hub on first use."""
    where = parse_model_spec(spec)
    if isinstance(where, Path):
        if not where.is_file():
            raise ModelError(f"{role} model file not found: {spec}")
        return where
    return _download(where, role)


def local_model(spec: str) -> Path | None:
    """The local path of a model already on this machine (a file, or in the Hub's cache), asking no one; else None."""
    where = parse_model_spec(spec)
    if isinstance(where, Path):
        return where if where.is_file() else None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(where.repo_id, where.filename)
    return Path(cached) if isinstance(cached, str) else None


# How long a visitor waits to learn that the Hub cannot be reached (huggingface_hub's own retries take ~23 s).
HUB_TIMEOUT_S = 5.0


def _unreachable(hub: HubFile, role: str) -> ModelError:
    return ModelError(f"cannot fetch the {role} model {hub.repo_id}/{hub.filename}: the Hugging Face Hub is "
                      f"unreachable (or HF_HUB_OFFLINE is set) and the file is not in the local cache. "
                      f"Point CASCADE_{role.upper()} (or --{role}) at a local .gguf file instead.")


def _check_hub_first(hub: HubFile, role: str) -> None:
    """One look at the Hub for a file not cached yet: an unreachable Hub or a missing file is told at once."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

    if constants.HF_HUB_OFFLINE or isinstance(try_to_load_from_cache(hub.repo_id, hub.filename), str):
        return  # huggingface_hub answers from the cache at once
    try:
        get_hf_file_metadata(hf_hub_url(hub.repo_id, hub.filename), timeout=HUB_TIMEOUT_S)
    except (RepositoryNotFoundError, EntryNotFoundError) as e:
        raise ModelError(f"the {role} model {hub.repo_id}/{hub.filename} does not exist on the Hub") from e
    except Exception as e:  # noqa: BLE001 - connection errors differ by transfer library and version
        raise _unreachable(hub, role) from e


def _download(hub: HubFile, role: str) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError

    _check_hub_first(hub, role)
    try:
        return Path(hf_hub_download(repo_id=hub.repo_id, filename=hub.filename, etag_timeout=HUB_TIMEOUT_S))
    except LocalEntryNotFoundError as e:
        raise _unreachable(hub, role) from e
    except (RepositoryNotFoundError, EntryNotFoundError) as e:
        raise ModelError(f"the {role} model {hub.repo_id}/{hub.filename} does not exist on the Hub") from e
    except Exception as e:  # noqa: BLE001 - the transfer library's errors (httpx, httpx2, xet) vary by version
        raise ModelError(f"downloading the {role} model {hub.repo_id}/{hub.filename} failed "
                         f"({type(e).__name__}); try again, or point CASCADE_{role.upper()} at a local .gguf file") from e


def check_gguf(path: Path, role: str = "model") -> None:
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ModelError(f"the {role} model is not a GGUF file: {path.name}")


def load_model(path: Path, config: "ModelConfig", role: str = "model", logits_all: bool = False,
               slots: int = 1) -> llama_cpp.Llama:
    """A model and its context: `config.n_ctx` tokens for each of `slots` sequences."""
    check_gguf(path, role)
    try:
        # Only embedding mode sizes a context for many sequences; it is switched off again below.
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=config.n_ctx * slots, n_batch=config.n_batch,
                              n_ubatch=config.n_batch, n_threads=config.n_threads, n_threads_batch=config.n_threads,
                              n_gpu_layers=config.n_gpu_layers, logits_all=logits_all, embedding=slots > 1,
                              verbose=False)
    except (ValueError, RuntimeError, OSError) as e:
        raise ModelError(f"the {role} model could not be loaded (truncated or corrupt?): {path.name}") from e
    if slots > 1:
        llama_cpp.llama_set_embeddings(llm.ctx, False)
        llm.context_params.embeddings = False
    return llm


# ---- vocabulary -----------------------------------------------------------------------------------

def _vocab(llm: llama_cpp.Llama):
    return llama_cpp.llama_model_get_vocab(llm.model)


def token_text(llm: llama_cpp.Llama, token: int) -> bytes:
    return llama_cpp.llama_vocab_get_text(_vocab(llm), token) or b""


def _is_padding(vocab, token: int) -> bool:
    return bool(llama_cpp.llama_vocab_get_attr(vocab, token) & llama_cpp.LLAMA_TOKEN_ATTR_UNUSED)


def check_same_vocabulary(draft: llama_cpp.Llama, target: llama_cpp.Llama) -> int:
    """Refuse a pair unless every id both have means the same text and every row only the bigger one has is
    padding (token type UNUSED, as the 128 rows Qwen2.5 7B and 14B have past the smaller sizes'); return the
    shared vocabulary size."""
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
    """The ids under `n_vocab` either model marks as padding ("[PAD151665]", ...), which neither may ever
    choose; None where there are none."""
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


def load_pair(config: "ModelConfig", progress: Callable[[str], None] = lambda _msg: None) -> ModelPair:
    progress("locating the draft model")
    draft_path = resolve_model(config.draft, "draft")
    progress("locating the target model")
    target_path = resolve_model(config.target, "target")
    slots = config.parallel
    progress("loading the draft model")
    draft = load_model(draft_path, config, "draft", slots=slots)
    progress("loading the target model")
    target = load_model(target_path, config, "target", slots=slots)
    n_vocab = check_same_vocabulary(draft, target)
    padding = shared_padding(draft, target, n_vocab)  # never chosen by either model's rows
    scheduler = Scheduler()  # one decode at a time over the machine's cores, whichever the model
    return ModelPair(draft=ModelRunner(draft, n_vocab, SharedContext(draft, slots, scheduler), padding=padding),
                     target=ModelRunner(target, n_vocab, SharedContext(target, slots, scheduler), padding=padding),
                     draft_path=draft_path, target_path=target_path, config=config)
