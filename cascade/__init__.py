"""A small draft model and a large target model writing one text together.

    from cascade import ModelConfig, GenerationConfig, load_pair, Engine
    engine = Engine(load_pair(ModelConfig(draft="small.gguf", target="large.gguf")))
    for event in engine.generate("My name is A", GenerationConfig(policy="cascade")):
        ...  # TokenEvents as they happen, then one Summary
"""

from importlib import import_module
from typing import Any

from .engine.config import GenerationConfig, ModelConfig, RouterMissing, SettingError
from .engine.events import ModelStats, Summary, TokenEvent
from .engine.policies import POLICIES

# Names whose modules load llama.cpp, imported when first used: a config is made without the native library.
_LAZY = {"Engine": ".engine.engine", "ModelError": ".engine.models", "ModelPair": ".engine.models",
         "load_pair": ".engine.models", "PromptError": ".engine.prompt"}

__all__ = ["Engine", "GenerationConfig", "ModelConfig", "ModelError", "ModelPair", "ModelStats", "POLICIES",
           "PromptError", "RouterMissing", "SettingError", "Summary", "TokenEvent", "load_pair"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'cascade' has no attribute {name!r}")
    return getattr(import_module(_LAZY[name], __name__), name)
