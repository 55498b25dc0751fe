"""The "Big model" control beside the models line: the catalog's sizes (and the big model the page started with,
where it is none of them), each with what its pair needs in memory here, and switching the service to the one
chosen (`EngineService.switch_target`), its progress said and a refusal given in words."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import gradio as gr

from ..engine.catalog import SIZES
from ..engine.memory import gb
from ..engine.models import ModelError, catalog_size
from ..serving.messages import hide_paths, model_name
from ..serving.service import EngineService, estimated_need

INFO = ("Loaded for everyone on this page: switching takes a while (a download the first time), and "
        "generations wait for it.")


@dataclass(frozen=True)
class Choice:
    """One entry of the dropdown: what it shows, what it sends back, and the model the service loads."""

    label: str  # "7B · about 7.8 GB"
    value: str  # a size's name, or the started model's name (never a path of this machine)
    spec: str


def same_model(a: str, b: str) -> bool:
    """Whether two specs name one model: the same text, or the same size of the catalog."""
    if a == b:
        return True
    try:
        size = catalog_size(a)
        return size is not None and size == catalog_size(b)
    except (ValueError, OSError):
        return False


def label(name: str, need: int | None, room: int | None) -> str:
    """A choice's words: its name and need ("7B · about 7.8 GB"), or what it lacks ("needs 14.4 GB, 9.1 GB free")."""
    if need is None:
        return name
    if room is None or need <= room:
        return f"{name} · about {gb(need)} GB"
    return f"{name} · needs {gb(need)} GB, {gb(room)} GB free"


class BigModels:
    """The choices over a service, and the switch; `sizes` (name to spec) defaults to the catalog's."""

    def __init__(self, service: EngineService, sizes: Mapping[str, str] | None = None) -> None:
        self.service = service
        self.sizes = dict(sizes) if sizes is not None else {name: s.spec for name, s in SIZES.items()}

    def choices(self) -> list[Choice]:
        """Every size, and the started big model where it is none of them (empty where the settings are bad)."""
        try:
            config = self.service.config
        except ValueError:
            return []
        named = dict(self.sizes)
        started = self.service.started_target
        if not any(same_model(started, spec) for spec in named.values()):
            named[model_name(started)] = started
        room = self.service.room()
        return [Choice(label(name, estimated_need(replace(config, target=spec)), room), name, spec)
                for name, spec in named.items()]

    def current(self, choices: list[Choice]) -> str | None:
        """The value of the big model the service serves (or will load)."""
        try:
            target = self.service.config.target
        except ValueError:
            return None
        return next((c.value for c in choices if same_model(c.spec, target)), None)

    def offered(self) -> dict[str, Any]:
        """The dropdown's choices and value, as this machine stands now."""
        choices = self.choices()
        return gr.update(choices=[(c.label, c.value) for c in choices], value=self.current(choices))

    def switch(self, value: Any, progress: Any = gr.Progress()) -> tuple[str, dict[str, Any]]:
        """The models line and the dropdown after switching to `value`: what is loaded, with a refusal or a
        failure in one sentence under it (the old pair then stays)."""
        chosen = next((c for c in self.choices() if c.value == value), None)
        if chosen is None:
            asked = str(value)[:40]
            return self.line(f"there is no big model {asked!r} on this page; choose one of the list"), self.offered()

        def report(message: str) -> None:  # shown over the models line and the text while it loads
            progress(0.0, desc=f"Switching the big model to {chosen.value}: {message}…")

        try:
            self.service.switch_target(chosen.spec, report)
        except ModelError as e:
            return self.line(hide_paths(str(e))), self.offered()
        return self.line(), self.offered()

    def line(self, refusal: str | None = None) -> str:
        """The models line (`EngineService.describe`), and a refusal under it."""
        if refusal is None:
            return self.service.describe()
        words = refusal.strip().rstrip(".")
        return f"{self.service.describe()}  \n**Not switched:** {words[:1].upper()}{words[1:]}."


def control(big: BigModels) -> gr.Dropdown:
    """The dropdown, filled as the page is built (and again on each visit, `wire`)."""
    choices = big.choices()
    return gr.Dropdown([(c.label, c.value) for c in choices], value=big.current(choices), label="Big model",
                       info=INFO, interactive=True, min_width=200, elem_classes="cascade-big-model")


def wire(demo: gr.Blocks, dropdown: gr.Dropdown, models_line: gr.Markdown, big: BigModels,
         progress_on: list[Any]) -> None:
    """A visitor's choice switches the big model (one switch at a time); each visit reads the memory anew."""
    dropdown.input(big.switch, inputs=[dropdown], outputs=[models_line, dropdown], concurrency_limit=1,
                   concurrency_id="big-model", show_progress_on=progress_on, api_visibility="private")
    demo.load(big.offered, outputs=[dropdown], queue=False, api_visibility="private")
