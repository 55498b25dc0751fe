"""Flags for the command line and the launcher, from the config fields' metadata, resolved with
`model_config`: a flag wins over an environment variable, which wins over the default."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any, Mapping

from ..engine.config import GenerationConfig, ModelConfig
from ..engine.policies import POLICY_TABLE
from ..engine.prompt import parse_history
from ..routing.rules import RULE_TABLE


# The defaults and flags of the page and `serve`, which serve several visitors at once.
SERVING_DEFAULTS: Mapping[str, Any] = {"parallel": 4}
SERVING_ONLY = ("parallel", "batch_slots")
# Set to 0, the page offers no "Big model" control: whoever runs a shared page keeps the pair it started with.
SWITCH_ENV = "CASCADE_SWITCH_MODELS"
YES, NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def switching_allowed(env: Mapping[str, str] | None = None) -> bool:
    """Whether visitors may switch the page's big model (default yes; CASCADE_SWITCH_MODELS=0 says no)."""
    raw = (os.environ if env is None else env).get(SWITCH_ENV, "").strip().lower()
    return raw not in NO


def model_config(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                 serving: bool = False) -> ModelConfig:
    """The models' settings: flag, else environment variable, else default (`SERVING_DEFAULTS` with `serving`)."""
    flags, env = flags or {}, os.environ if env is None else env
    values: dict[str, Any] = dict(SERVING_DEFAULTS) if serving else {}
    for f in dataclasses.fields(ModelConfig):
        if flags.get(f.name) is not None:
            values[f.name] = flags[f.name]
        elif raw := env.get(f.metadata["env"], "").strip():
            values[f.name] = _from_environment(f, raw)
    return ModelConfig(**values).validate()


def _from_environment(f: dataclasses.Field, raw: str) -> Any:
    """An environment variable's text as the field's type; ValueError naming the variable."""
    kind = type(f.default)
    if kind is bool:
        if raw.lower() in YES + NO:
            return raw.lower() in YES
        raise ValueError(f"{f.metadata['env']} must be 1 or 0, got {raw!r}")
    try:
        return kind(raw)
    except ValueError:
        words = "a whole number" if kind is int else "text"
        raise ValueError(f"{f.metadata['env']} must be {words}, got {raw!r}") from None


def add_model_flags(parser: argparse.ArgumentParser, page: bool = False) -> None:
    """One flag per ModelConfig field (`SERVING_ONLY` with `page`), unset (None) so the environment can speak."""
    for f in dataclasses.fields(ModelConfig):
        if f.name in SERVING_ONLY and not page:
            continue
        meta, default = f.metadata, SERVING_DEFAULTS.get(f.name, f.default) if page else f.default
        if type(default) is bool:  # --name / --no-name
            parser.add_argument(meta["flag"], dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                                help=f"{meta['help']} (env {meta['env']}=1; default {'on' if default else 'off'})")
            continue
        parser.add_argument(meta["flag"], dest=f.name, type=type(default), default=None,
                            help=f"{meta['help']} (env {meta['env']}; default {default})")


def model_flags(args: argparse.Namespace) -> dict[str, Any]:
    return {f.name: getattr(args, f.name, None) for f in dataclasses.fields(ModelConfig)}


# GenerationConfig fields set otherwise than by a `--name value` flag.
_SPECIAL = ("policy", "rule", "threshold", "chat", "stop", "history")


def add_generation_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per GenerationConfig field, its default and range from the field's metadata."""
    default = GenerationConfig()
    parser.add_argument("--policy", choices=list(POLICY_TABLE), default=default.policy,
                        help="who writes (default %(default)s): "
                             + "; ".join(f"{p.name}: {p.description}" for p in POLICY_TABLE.values()))
    parser.add_argument("--rule", choices=list(RULE_TABLE), default=default.rule,
                        help="cascade, bild: how the draft judges its own token (default %(default)s): "
                             + "; ".join(f"{r.name}: {r.description}" for r in RULE_TABLE.values()))
    parser.add_argument("--threshold", type=float, default=None,
                        help="escalate where the rule finds the draft's token doubtful beyond this, in the rule's "
                             "units (default, and range: " + "; ".join(
                                 f"{r.name} {r.default:g}, {r.low:g} to {r.high:g}" for r in RULE_TABLE.values()) + ")")
    for f in dataclasses.fields(GenerationConfig):
        if f.name in _SPECIAL:
            continue
        meta, flag = f.metadata, "--" + f.name.replace("_", "-")
        if isinstance(f.default, str):
            if "choices" in meta:
                parser.add_argument(flag, dest=f.name, default=f.default, choices=meta["choices"],
                                    help=f"{meta['help']} (default {f.default})")
            else:
                parser.add_argument(flag, dest=f.name, default=f.default, metavar="TEXT", help=meta["help"])
            continue
        kind = meta.get("type", type(f.default))
        shown = "unset" if f.default is None else f"{f.default:g}"  # an optional setting (budget)
        parser.add_argument(flag, dest=f.name, type=kind, default=f.default,
                            help=f"{meta['help']} (default {shown}; {meta['min']:g} to {meta['max']:g})")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--chat", dest="chat", action="store_true", default=default.chat,
                      help="wrap the prompt in the model's chat template (default)")
    mode.add_argument("--raw", dest="chat", action="store_false", help="continue the prompt as raw text")
    parser.add_argument("--stop", action="append", default=[], help="stop after this string (repeatable)")
    parser.add_argument("--history", default="", metavar="JSON",
                        help='chat: the conversation so far, so the prompt is a follow-up question: '
                             '[["user", "question"], ["assistant", "its answer"], ...], oldest first (the JSON a '
                             "page link's history parameter holds)")


def generation_config(args: argparse.Namespace) -> GenerationConfig:
    """The request the flags describe; ValueError names a bad one."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(GenerationConfig) if hasattr(args, f.name)}
    history = parse_history(values.get("history", ""))
    return GenerationConfig(**{**values, "stop": tuple(values["stop"]), "history": history}).validate()
