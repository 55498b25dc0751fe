"""The learned router: a logistic regression over what the draft knows before the target is asked (`FEATURES`,
optionally its hidden state) predicting "the big model would write another token here"; a small JSON file."""

from __future__ import annotations

import json
import math
import unicodedata
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .identity import fingerprint
from .reading import DraftReading

HISTORY = 3  # earlier positions whose readings are features

FEATURES: tuple[str, ...] = (
    "logp_token",  # log-probability of the proposed token (the seed's rule, as a log)
    "logp_top1", "logp_top2", "margin", "entropy",
    "prev_entropy",  # entropy at the previous position
    "prev_logp_written",  # the draft's log-probability of the token written at the previous position
    "mean_entropy_recent",  # mean entropy over the last HISTORY positions
    "min_logp_written_recent",  # the most surprising written token of the last HISTORY positions
    "has_history",  # 0 at the first position, where the history features are 0
    "token_space", "token_newline", "token_punct", "token_digit", "token_letter", "token_nonascii",
    "log_position",
)

# A router that also reads the draft's hidden state has these names after FEATURES, one per dimension.
HIDDEN = "hidden_"


def hidden_names(n: int) -> tuple[str, ...]:
    return tuple(f"{HIDDEN}{i}" for i in range(n))


def token_class(piece: str) -> tuple[float, ...]:
    """Flags of a token's text, in the order of FEATURES' `token_*` (computed once per token id)."""
    stripped = piece.strip()
    return (float(piece[:1] == " "), float("\n" in piece),
            float(bool(stripped) and all(unicodedata.category(c)[0] in "PS" for c in stripped)),
            float(any(c.isdigit() for c in piece)), float(any(c.isalpha() for c in piece)),
            float(any(ord(c) > 127 for c in piece)))


@dataclass
class Trail:
    """(entropy, log-probability written) of the positions before the one judged (None: unread); training and
    serving both read features through it, so they cannot drift."""

    items: list[tuple[float, float] | None] = field(default_factory=list)

    @staticmethod
    def item(entropy: float | None, logp_written: float | None) -> tuple[float, float] | None:
        """One position of the trail (a log-probability floored at -700)."""
        if entropy is None or logp_written is None:
            return None
        return entropy, max(logp_written, -700.0)

    def add(self, entropy: float | None, logp_written: float | None) -> None:
        self.items.append(self.item(entropy, logp_written))

    def features(self, reading: DraftReading, piece_class: Sequence[float], position: int,
                 hidden: np.ndarray | None = None,
                 ahead: Sequence[tuple[float, float] | None] = ()) -> np.ndarray:
        """The router's input for the position after this trail and then `ahead` (proposed, not yet checked):
        FEATURES, then `hidden` if given."""
        trail = (self.items[-HISTORY:] + list(ahead))[-HISTORY:]
        top1, top2 = max(reading.draft_top1, 1e-300), max(reading.draft_top2, 1e-300)
        logp = -math.log(reading.draft_ppl) if math.isfinite(reading.draft_ppl) else -700.0
        recent = [h for h in trail if h is not None]
        last = trail[-1] if trail else None
        return np.array([
            logp, math.log(top1), math.log(top2), reading.draft_top1 - reading.draft_top2, reading.draft_entropy,
            last[0] if last else 0.0, max(last[1], -30.0) if last else 0.0,
            sum(h[0] for h in recent) / len(recent) if recent else 0.0,
            max(min(h[1] for h in recent), -30.0) if recent else 0.0,
            float(last is not None),
            *piece_class, math.log1p(position),
            *(() if hidden is None else hidden),
        ], dtype=np.float64)


@dataclass(frozen=True)
class Router:
    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    pair: dict[str, str] = field(default_factory=dict)  # {"draft": file name, "target": file name}
    data: dict[str, Any] = field(default_factory=dict)  # what it was trained on: prompts, positions, ...

    def probability(self, x: np.ndarray) -> np.ndarray | float:
        """P(the target would write another token) for one feature vector (a float) or rows of them."""
        # Elementwise rather than `@`: no BLAS threads left spinning to slow the next decode.
        z = (((np.asarray(x, dtype=np.float64) - self.mean) / self.scale) * self.coef).sum(axis=-1) + self.intercept
        p = 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic function, without overflow
        return float(p) if np.ndim(p) == 0 else p

    @property
    def n_hidden(self) -> int:
        """How many dimensions of the draft's hidden state it reads (0: none)."""
        return len(self.features) - len(FEATURES)

    @property
    def trained_on(self) -> str:
        """The pair, in words: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf → qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"."""
        return f"{self.pair.get('draft', '?')} → {self.pair.get('target', '?')}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "cascade-router", "version": 1, "features": list(self.features),
                "mean": self.mean.tolist(), "scale": self.scale.tolist(), "coef": self.coef.tolist(),
                "intercept": self.intercept, "pair": self.pair, "data": self.data}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Router":
        if not isinstance(d, dict) or d.get("kind") != "cascade-router":
            raise ValueError("not a router file (no \"kind\": \"cascade-router\")")
        names = tuple(d["features"])
        expected = FEATURES + hidden_names(len(names) - len(FEATURES))
        if names != expected:
            unknown = sorted(set(names) ^ set(expected))
            raise ValueError("the router was trained on other features than this version computes"
                             + (f" ({', '.join(unknown)})" if unknown else " (in another order)")
                             + "; train it again (`python -m lab router study`)")
        arrays = [np.asarray(d[k], dtype=np.float64) for k in ("mean", "scale", "coef")]
        if any(a.shape != (len(names),) for a in arrays):
            raise ValueError("the router's weights do not match its feature names")
        return cls(names, *arrays, intercept=float(d["intercept"]), pair=dict(d.get("pair", {})),
                   data=dict(d.get("data", {})))

    def save(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path | str) -> "Router":
        """A router from its JSON file; ValueError in words for a missing, unreadable or foreign file."""
        path = Path(path)
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise ValueError(f"router file {path} does not exist") from None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"router file {path} is not readable JSON: {e}") from None
        except (KeyError, TypeError) as e:
            raise ValueError(f"router file {path} lacks {e}") from None
        except ValueError as e:
            raise ValueError(f"router file {path}: {e}") from None


# Routers the project ships, one file per pair it trained on (docs/how-it-works.md says which and how).
ROUTERS = Path(__file__).resolve().parent / "routers"


def shipped_routers() -> list[Router]:
    """Every router that ships with the project (unreadable files left out: a router is optional)."""
    out = []
    for path in sorted(ROUTERS.glob("*.json")):
        with suppress(ValueError):
            out.append(Router.load(path))
    return out


def shipped_router_for(draft: Path | str | None) -> Router | None:
    """The shipped router trained for this draft file, matched by its fingerprint; None if there is none."""
    if draft is None:
        return None
    try:
        mine = fingerprint(draft)
    except OSError:
        return None
    return next((r for r in shipped_routers() if r.pair.get("draft_fingerprint") == mine), None)


def load_router(setting: str, draft: Path | str | None = None) -> Router | None:
    """`setting` "" the shipped router for `draft` (or None), "none" None, else that file (ValueError if bad)."""
    if setting.strip().lower() == "none":
        return None
    if not setting.strip():
        return shipped_router_for(draft)
    return Router.load(Path(setting).expanduser())


def router_words(setting: str, router: Router | None, draft_name: str) -> str:
    """Where the loaded router came from, in words, for a page or a log: the fallback said as such."""
    if router is not None:
        own = "the router trained for this small model's file" if not setting.strip() else f"the router {setting}"
        return f"{own} (trained on {router.trained_on}, {router.data.get('positions', '?')} positions)"
    if setting.strip().lower() == "none":
        return "no router (turned off); the learned rule is not offered"
    return (f"no router was trained for this small model ({draft_name}); the learned rule is not offered, and "
            "the other rules judge (perplexity to start with)")
