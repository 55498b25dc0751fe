"""Shared fixtures: toy models built on the spot, engines over them, and the real pair where present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cascade import Engine, GenerationConfig, ModelConfig, load_pair
from cascade.events import Summary, TokenEvent

from .toymodels import ToyModels, build_toy_models


@pytest.fixture(scope="session")
def toy(tmp_path_factory) -> ToyModels:
    return build_toy_models(tmp_path_factory.mktemp("toy-models"))


_ENGINES: dict[tuple, Engine] = {}


def engine_for(draft: Path, target: Path, **model_settings) -> Engine:
    """One engine per model pair and settings for the whole session: loading is the slow part."""
    key = (str(draft), str(target), tuple(sorted(model_settings.items())))
    if key not in _ENGINES:
        config = ModelConfig(draft=str(draft), target=str(target), **{"n_threads": 2, "n_ctx": 1024, **model_settings})
        _ENGINES[key] = Engine(load_pair(config))
    return _ENGINES[key]


@pytest.fixture(scope="session")
def pair_engines(toy):
    """The three kinds of draft the equivalence tests need, all checked by one target."""
    return {
        "agrees": engine_for(toy.large, toy.large),  # the target drafting for itself
        "partly": engine_for(toy.small, toy.related),
        "rarely": engine_for(toy.small, toy.large),
    }


def run(engine: Engine, prompt: str, **settings) -> tuple[list[TokenEvent], Summary]:
    events = list(engine.generate(prompt, GenerationConfig(**settings)))
    summary = events.pop()
    assert isinstance(summary, Summary)
    return events, summary


def accepted_ids(events: list[TokenEvent]) -> list[int]:
    return [e.token_id for e in events if e.accepted]


@pytest.fixture(scope="session")
def real_pair() -> tuple[str, str]:
    draft, target = os.environ.get("CASCADE_REAL_DRAFT"), os.environ.get("CASCADE_REAL_TARGET")
    if not (draft and target and Path(draft).is_file() and Path(target).is_file()):
        pytest.skip("real-model tier: set CASCADE_REAL_DRAFT and CASCADE_REAL_TARGET (scripts/test does it "
                    "where ../shared/models/get-real-pair exists)")
    return draft, target
