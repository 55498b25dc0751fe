"""Where the tasks' answers are kept: one JSON-lines file per (model files, configuration, prompt style),
one line per task, in `~/.cache/cascade/tasks` (or under CASCADE_CACHE).

An interrupted run resumes where it stopped, and a sweep over thresholds reuses the target's and the
draft's answers. A line is an answer's own record (`Answer.record`); the file's name is `cache_key`, so
any change to what the key hashes, or to CACHE_VERSION, leaves every answer on disk behind.
"""

from __future__ import annotations

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

# Policies whose first check reads proposals after the prompt: since the runner reads the prompt apart from
# them (`ModelRunner._evaluate`, 2026-12-02), their answers are keyed apart from those written before.
# (Every other policy reads exactly as it did, and keeps its cached answers.)
PROMPT_READ_APART = ("bild", "speculative", "lookup", "lookup+draft", "auto")


def cache_root() -> Path:
    return cache_folder("tasks")


def file_identity(path: Path) -> str:
    """A model file by its name, size and the hash of its first and last MiB: renaming a copy keeps
    nothing, and a file changed in place is not mistaken for the old one."""
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
    # llama.cpp's batch-only CPU kernels on this build (`numerics.batch_kernels`): a build without them
    # reads a prompt, and speculative decoding checks its proposals, with other rounding, so its answers
    # are its own. None: the project's default build, whose answers kept their keys when this was added.
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
            try:
                for line in self._path(key).read_text(encoding="utf-8").splitlines():
                    try:
                        record = json.loads(line)
                        records[record["task_id"]] = record
                    except (ValueError, KeyError, TypeError):
                        continue  # a line cut short by an interruption
            except OSError:
                pass
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
