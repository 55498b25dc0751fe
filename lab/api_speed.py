"""What the OpenAI-compatible API costs a client: the same request through the engine and through the API.

`python -m lab api-bench` serves the API in this process (uvicorn, a local port), then for each round
runs one request through the engine directly and the same request streamed through the official `openai`
client, one after the other. For both it measures when the first token arrived and the tokens per second
up to the last token. Neither runs the big model's scoring of the finished text (the API never does: no
field of its answer reports it).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from cascade.engine.config import GenerationConfig, ModelConfig
from cascade.engine.events import TokenEvent
from lab.local import serve_in_thread


@dataclass(frozen=True)
class Timing:
    first_token_s: float  # from the request to the first token with text
    last_token_s: float  # from the request to the last token
    n_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.last_token_s if self.last_token_s > 0 else 0.0


@dataclass
class ApiSpeed:
    policy: str
    max_tokens: int
    engine: list[Timing] = field(default_factory=list)
    api: list[Timing] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """The API's tokens/s over the engine's: the median of each round's ratio (a round's two runs are
        back to back, so a machine that slows down between rounds moves both)."""
        return statistics.median(a.tokens_per_s / e.tokens_per_s for a, e in zip(self.api, self.engine)
                                 if e.tokens_per_s > 0)

    @property
    def first_token_delay_ms(self) -> float:
        """How much later the first token reaches an API client than the engine's own caller (median)."""
        return 1000 * (statistics.median(t.first_token_s for t in self.api)
                       - statistics.median(t.first_token_s for t in self.engine))

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "max_tokens": self.max_tokens, "ratio": self.ratio,
                "first_token_delay_ms": self.first_token_delay_ms,
                "engine": [asdict(t) | {"tokens_per_s": t.tokens_per_s} for t in self.engine],
                "api": [asdict(t) | {"tokens_per_s": t.tokens_per_s} for t in self.api]}


def engine_timing(engine: Any, prompt: str, config: GenerationConfig) -> Timing:
    started = time.perf_counter()
    first = last = None
    n = 0
    for event in engine.generate(prompt, config, score=False):
        if isinstance(event, TokenEvent) and event.accepted:
            now = time.perf_counter() - started
            n += 1
            last = now
            if first is None and event.text:
                first = now
    return Timing(first or 0.0, last or 0.0, n)


def api_timing(client: Any, model: str, messages: list[dict], max_tokens: int, extension: dict) -> Timing:
    started = time.perf_counter()
    first = last = None
    n = 0
    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens, stream=True,
                                            extra_body={"cascade": extension} if extension else None)
    for chunk in stream:
        if not chunk.choices:
            continue
        tokens = (chunk.choices[0].model_extra or {}).get("cascade", {}).get("tokens", [])
        if tokens:
            now = time.perf_counter() - started
            n += len(tokens)
            last = now
            if first is None:
                first = now
    return Timing(first or 0.0, last or 0.0, n)


def measure_api(models: ModelConfig, prompt: str, policy: str = "cascade", max_tokens: int = 128, rounds: int = 3,
                log: Callable[[str], None] = lambda _m: None) -> ApiSpeed:
    import openai

    from cascade.api import protocol
    from cascade.api.server import ApiSettings, create_api
    from cascade.serving.pump import tune_interpreter
    from cascade.serving.service import EngineService

    tune_interpreter()  # as `serve` and the page do
    service = EngineService(models)
    service.engines(progress=lambda m: log(f"[{m}]"))
    server, port = serve_in_thread(create_api(service, ApiSettings()))
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": prompt}]
    request = protocol.chat_request({"model": policy, "messages": messages, "max_tokens": max_tokens})
    result = ApiSpeed(policy, max_tokens)
    try:
        for i in range(rounds):
            with service.lease() as engine:
                result.engine.append(engine_timing(engine, request.prompt, request.config))
            result.api.append(api_timing(client, policy, messages, max_tokens, {}))
            log(f"[round {i + 1}/{rounds}] engine {result.engine[-1].tokens_per_s:.2f} tokens/s, API "
                f"{result.api[-1].tokens_per_s:.2f}; first token {1000 * result.engine[-1].first_token_s:.0f} ms "
                f"against {1000 * result.api[-1].first_token_s:.0f} ms")
    finally:
        server.should_exit = True
    return result
