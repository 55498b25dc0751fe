"""Every default, range and help text in one place (flags and controls read them from the field metadata);
`GenerationConfig.validate` is the one judge of a setting, `parse` the way in for loosely typed values."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..routing.rules import RULE_TABLE, RULES, Rule, plain_number
from .catalog import SIZES, SMALL
from .policies import POLICIES, POLICY_TABLE, SPANS

# Official Qwen2.5 instruct GGUF files sharing a tokenizer; the Q4_0 draft is the faster one on a CPU.
DEFAULT_DRAFT = "Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_0.gguf"
DEFAULT_TARGET = "Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_k_m.gguf"
_MODEL_HELP = (f"a Qwen2.5 Instruct size ({', '.join([SMALL.name, *SIZES])}: its Q4_K_M file on the Hub), a local "
               ".gguf path, or repo_id/filename on the Hub")


class SettingError(ValueError):
    """A setting a request cannot have; `name` is the GenerationConfig field it names."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class RouterMissing(SettingError):
    """A request judges by the learned rule where no router is loaded."""

    def __init__(self) -> None:
        super().__init__("rule", "the learned rule needs a router, and none is loaded (routers ship only for the "
                                 "small model files they were trained with); choose another rule (whoever runs the "
                                 "models can name a router with --router or CASCADE_ROUTER)")


def _opt(default: Any, help: str, **limits: Any) -> Any:
    """A dataclass field whose metadata holds its help, range (min, max) and, for models, env and flag."""
    return field(default=default, metadata={"help": help, **limits})


@dataclass(frozen=True)
class ModelConfig:
    """How the two models are found and loaded: settled once per process."""

    draft: str = _opt(DEFAULT_DRAFT, f"draft model: {_MODEL_HELP}", env="CASCADE_DRAFT", flag="--draft")
    target: str = _opt(DEFAULT_TARGET, f"target model: {_MODEL_HELP}", env="CASCADE_TARGET", flag="--target")
    # Both models run one after the other, never at once, so each may use every core.
    n_threads: int = _opt(os.cpu_count() or 1, "CPU threads per model", min=1, max=256,
                          env="CASCADE_THREADS", flag="--threads")
    n_ctx: int = _opt(4096, "context size in tokens (prompt plus output)", min=64, max=32768,
                      env="CASCADE_N_CTX", flag="--n-ctx")
    n_batch: int = _opt(512, "tokens per evaluation batch", min=16, max=4096, env="CASCADE_N_BATCH", flag="--n-batch")
    # 0 runs on any build's CPU; a GPU needs a CUDA or Metal build.
    n_gpu_layers: int = _opt(0, "layers of each model to offload to a GPU (-1: all)", min=-1, max=10000,
                             env="CASCADE_GPU_LAYERS", flag="--gpu-layers")
    router: str = _opt("", "router file for the learned rule (none: without one; default: the shipped router)",
                       env="CASCADE_ROUTER", flag="--router")
    # Slots (engine/batching.py): one for the library; servers set their own (serving/settings.py).
    parallel: int = _opt(1, "generations that run at once over one pair of models (slots)", min=1,
                         max=64, env="CASCADE_PARALLEL", flag="--parallel")
    batch_slots: bool = _opt(False, "decode the slots' calls together in one batch: more tokens/s with many cores "
                             "or a GPU, but a text may then change with who else is writing (off: the slots take "
                             "turns, and every text is its text alone)", env="CASCADE_BATCH_SLOTS",
                             flag="--batch-slots")

    def validate(self) -> "ModelConfig":
        """Raise ValueError naming the first setting out of its range; return self."""
        for f in dataclasses.fields(self):
            _check_value(f, getattr(self, f.name))
        return self

    @property
    def device(self) -> str:
        """Where the models run, in words."""
        threads = f"CPU, {self.n_threads} threads"
        if self.n_gpu_layers == 0:
            return threads
        layers = "all layers" if self.n_gpu_layers < 0 else f"{self.n_gpu_layers} layers"
        return f"GPU ({layers} offloaded), {threads}"


@dataclass(frozen=True)
class GenerationConfig:
    """One request: which policy writes, and how it decides."""

    policy: str = _opt("cascade", "who writes: " + ", ".join(POLICIES), choices=POLICIES)
    rule: str = _opt("perplexity", "cascade, bild: how the draft judges its own token: " + ", ".join(RULES),
                     choices=RULES)
    # Unset, the rule's default (perplexity's 5: the draft keeps a token it gives probability >= 0.2).
    threshold: float | None = _opt(None, "escalate a draft token the rule finds doubtful beyond this (in the rule's "
                                   "units; default: the rule's own)", type=float)
    budget: float | None = _opt(None, "the share of tokens the big model should write, 0 to 1 (0.1: one in ten); "
                                "set, the engine moves the rule's threshold as it writes to deliver it, and "
                                "threshold is not used", type=float, min=0.0, max=1.0)
    # At most SPAN_MAX tokens; they count against a budget as the target's.
    span: str = _opt("token", "cascade, bild: what the target writes once the rule escalates a position: token (that "
                     "one), sure (on until it is sure of its own token), line (on to the end of the line)",
                     choices=SPANS)
    k: int = _opt(4, "speculative, lookup: most tokens proposed per target check", min=1, max=32)
    # e^3 ~ 20: inside the BiLD paper's 2-5 nats of cross-entropy.
    rollback_threshold: float = _opt(20.0, "bild: roll back a draft token whose target perplexity exceeds this",
                                     min=1.0, max=1e6)
    # Bounds how long text waits unchecked, and memory (one row of logits per pending token).
    bild_window: int = _opt(32, "bild: most draft tokens held before the target checks them", min=1, max=256)
    lookup_ngram: int = _opt(3, "lookup: longest n-gram of the text's end to find earlier in the text", min=1, max=16)
    max_tokens: int = _opt(128, "most tokens to generate", min=1, max=8192)
    temperature: float = _opt(0.0, "sampling temperature; 0 is greedy", min=0.0, max=5.0)
    top_p: float = _opt(1.0, "nucleus sampling: keep the smallest set of tokens with this much mass", min=0.0, max=1.0)
    top_k: int = _opt(0, "keep only the k most likely tokens; 0 keeps all", min=0, max=100000)
    seed: int = _opt(0, "random seed for sampling", min=0, max=2**32 - 1)
    chat: bool = _opt(True, "wrap the prompt in the model's chat template")
    # Chat only; empty keeps the template's own default (Qwen2.5's "You are Qwen, created by Alibaba Cloud...").
    system: str = _opt("", "chat: the system message (default: the chat template's own)")
    # "```python\n" asks for code as Qwen's HumanEval harness does; stop strings are sought only after it.
    answer_prefix: str = _opt("", "text the answer starts with: read as given, never written by either model")
    # Oldest first, before the prompt.
    history: tuple[tuple[str, str], ...] = _opt((), "chat: the conversation's earlier turns, (role, text) pairs")
    alternatives: int = _opt(5, "likeliest tokens to record per position and model (0: none)", min=0, max=20)
    stop: tuple[str, ...] = _opt((), "stop after any of these strings (included in the output)")

    def __post_init__(self) -> None:
        # Lists from JSON become tuples: a config is frozen and compared by value.
        if isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))
        if isinstance(self.history, (list, tuple)):
            object.__setattr__(self, "history", tuple(tuple(t) if isinstance(t, list) else t for t in self.history))
        if self.threshold is None and self.rule in RULE_TABLE:
            object.__setattr__(self, "threshold", RULE_TABLE[self.rule].default)

    @property
    def deferral(self) -> Rule:
        """The deferral rule this config names (`routing.rules`)."""
        return RULE_TABLE[self.rule]

    @property
    def needs_router(self) -> bool:
        """Whether the request judges the draft's tokens by the learned rule, which needs a router."""
        return self.rule == "learned" and self.policy in POLICY_TABLE and POLICY_TABLE[self.policy].judges

    def check_router(self, has_router: bool) -> "GenerationConfig":
        """Raise RouterMissing if the request needs a router and none is loaded; return self."""
        if self.needs_router and not has_router:
            raise RouterMissing()
        return self

    def validate(self) -> "GenerationConfig":
        """Raise SettingError naming the first bad setting; return self so calls can chain."""
        for f in dataclasses.fields(self):
            _check_value(f, getattr(self, f.name))
        policy = POLICY_TABLE[self.policy]
        refusal = policy.refusal(self.rule)
        if refusal is not None:
            raise SettingError("rule", refusal)
        if not (self.budget is not None and policy.uses_rule):  # a budget sets the threshold as it writes
            try:
                self.deferral.check(self.threshold)
            except ValueError as e:
                raise SettingError("threshold", str(e)) from None
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise SettingError("stop", "stop strings must not be empty")
        if self.history and not self.chat:
            raise SettingError("history", "earlier turns of a conversation need chat mode (the chat template "
                                          "places them)")
        for turn in self.history:
            if (not isinstance(turn, (tuple, list)) or len(turn) != 2 or turn[0] not in ("user", "assistant")
                    or not isinstance(turn[1], str)):
                raise SettingError("history", "each earlier turn is a (role, text) pair whose role is user or "
                                              f"assistant, got {turn!r}")
        if self.system and not self.chat:
            raise SettingError("system", "a system message needs chat mode (the chat template places it); in raw "
                                         "mode, write it into the prompt instead")
        return self

    @classmethod
    def parse(cls, values: Mapping[str, Any], base: "GenerationConfig | None" = None) -> "GenerationConfig":
        """A validated config from loosely typed values ("5", 0.7, 3.0 for an int); unnamed ones keep `base`'s."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise SettingError(unknown[0], f"unknown setting {unknown[0]!r}")
        typed = {name: _as_type(fields[name], value) for name, value in values.items()}
        if "rule" in typed and "threshold" not in typed:
            typed["threshold"] = None  # another rule, its own default threshold
        return dataclasses.replace(base or cls(), **typed).validate()

    def replace(self, **changes: Any) -> "GenerationConfig":
        return dataclasses.replace(self, **changes)


def _kind(f: dataclasses.Field) -> type:
    return f.metadata.get("type", type(f.default))


def _check_value(f: dataclasses.Field, value: Any) -> None:
    kind, choices = _kind(f), f.metadata.get("choices")
    if choices is not None and value not in choices:
        raise SettingError(f.name, f"unknown {f.name} {value!r}; choose one of {', '.join(choices)}")
    if value is None and f.default is None:
        return  # an optional setting left unset
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingError(f.name, f"{f.name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise SettingError(f.name, f"{f.name} must be a finite number, got {value}")
        if kind is int and value != int(value):
            raise SettingError(f.name, f"{f.name} must be a whole number, got {value}")
        lo, hi = f.metadata.get("min"), f.metadata.get("max")
        if lo is not None and value < lo or hi is not None and value > hi:
            raise SettingError(f.name, f"{f.name} must be between {plain_number(lo)} and {plain_number(hi)}, "
                                       f"got {plain_number(value)}")
    elif kind in (bool, str) and not isinstance(value, kind):
        raise SettingError(f.name, f"{f.name} must be {'true or false' if kind is bool else 'text'}, got {value!r}")


def _as_type(f: dataclasses.Field, value: Any) -> Any:
    """The value in the field's type where that is unambiguous; else unchanged, for `validate` to refuse."""
    kind = _kind(f)
    if kind in (int, float) and isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return value
    if kind is int and isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is bool and isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    if kind is tuple and isinstance(value, (list, str)):
        return tuple(value) if isinstance(value, list) else (value,)
    return value


def limits(cls: type, name: str) -> dict[str, Any]:
    """The default, range and help of one field, for building a flag or a slider."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    return {"default": f.default, **f.metadata}
