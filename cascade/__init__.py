"""A small draft model and a large target model writing one text together.

    from cascade import ModelConfig, GenerationConfig, load_pair, Engine
    engine = Engine(load_pair(ModelConfig(draft="small.gguf", target="large.gguf")))
    for event in engine.generate("My name is A", GenerationConfig(policy="cascade")):
        ...  # TokenEvents as they happen, then one Summary
"""

from .engine.config import GenerationConfig, ModelConfig
from .engine.policies import POLICIES
from .engine.engine import Engine
from .engine.events import ModelStats, Summary, TokenEvent
from .engine.models import ModelError, ModelPair, load_pair
from .engine.prompt import PromptError

__all__ = ["Engine", "GenerationConfig", "ModelConfig", "ModelError", "ModelPair", "ModelStats", "POLICIES",
           "PromptError", "Summary", "TokenEvent", "load_pair"]
