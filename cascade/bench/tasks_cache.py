"""The tasks' answers on disk: one JSON-lines file per (model files, configuration, prompt style), named by
`cache_key`, one `Answer.record` per task, under `~/.cache/cascade/tasks` (or CASCADE_CACHE)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.config import ModelConfig
from .local import cache_folder
from .tasks import PromptStyle, Task
from .tasks_configs import Configuration

CACHE_VERSION = 1  # bump when a change to the engine or the prompts makes cached answers stale

# Policies whose first check reads its proposals apart from the prompt, keyed apart for that reason.
PROMPT_READ_APART = ("bild", "speculative", "lookup", "lookup+draft", "auto")


def cache_root() -> Path:
    return cache_folder("tasks")


def file_identity(path: Path) -> str:
    """A model file by its name, size and the hash of its first and last MiB."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        digest.update(f.read(1 << 20))
    return f"{path.name}:{size}:{digest.hexdigest()[:16]}"


@dataclass(frozen=True)
class Setup:
    """What, besides a configuration, decides its answers and their timing: the models and how they run."""

    draft: str  # file identities
    target: str
    router: str = ""  # the learned rule's router (its file's hash), where a configuration uses it
    n_threads: int = 0
    n_ctx: int = 0
    n_gpu_layers: int = 0
    # This build's batch-only CPU kernels (`numerics.batch_kernels`), which change rounding; None: the default.
    batch_kernels: tuple[str, ...] | None = None


def setup_of(models: ModelConfig, router: Any) -> Setup:
    """The models' identities (resolving, and if need be downloading, their files) and how they run."""
    from ..engine.models import resolve_model
    from ..engine.numerics import BATCH_KERNELS, batch_kernels

    kernels = batch_kernels()
    router_id = "" if router is None else hashlib.sha256(
        json.dumps(router.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
    return Setup(draft=file_identity(resolve_model(models.draft, "draft")),
                 target=file_identity(resolve_model(models.target, "target")), router=router_id,
                 n_threads=models.n_threads, n_ctx=models.n_ctx, n_gpu_layers=models.n_gpu_layers,
                 batch_kernels=None if kernels == BATCH_KERNELS else kernels)


def cache_key(setup: Setup, configuration: Configuration, style: PromptStyle) -> str:
    uses_draft = configuration.policy != "target"
    raw = {"version": CACHE_VERSION, "style": style.to_dict(), "settings": configuration.settings(),
           "target": setup.target, "draft": setup.draft if uses_draft else "",
           "router": setup.router if configuration.rule == "learned" else "",
           "threads": setup.n_threads, "n_ctx": setup.n_ctx, "gpu_layers": setup.n_gpu_layers}
    if configuration.policy in PROMPT_READ_APART:
        raw["prompt_read"] = "apart"
    if setup.batch_kernels is not None:  # another build than the default: answers of its own
        raw["batch_kernels"] = list(setup.batch_kernels)
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:24]


class AnswerCache:
    """Answers on disk, one JSON-lines file per (setup, configuration, style): a run resumes from them."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._loaded: dict[str, dict[str, dict]] = {}

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.jsonl"

    def get(self, key: str, task: Task) -> dict | None:
        if self.root is None:
            return None
        if key not in self._loaded:
            records: dict[str, dict] = {}
            with contextlib.suppress(OSError):
                for line in self._path(key).read_text(encoding="utf-8").splitlines():
                    with contextlib.suppress(ValueError, KeyError, TypeError):  # a line cut short by an interruption
                        record = json.loads(line)
                        records[record["task_id"]] = record
            self._loaded[key] = records
        record = self._loaded[key].get(task.task_id)
        return record if record is not None and record.get("task_digest") == task.digest else None

    def put(self, key: str, record: dict) -> None:
        self._loaded.setdefault(key, {})[record["task_id"]] = record
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self._path(key), "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
