"""The "Big model" control in a real browser over the toy models (two toy "sizes"): its choices say what each
needs, and choosing another loads it and the models line names it. It leaves artifacts/page-big-model.png."""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from cascade import ModelConfig  # noqa: E402
from cascade.serving.service import EngineService  # noqa: E402
from cascade.ui.bigmodel import BigModels  # noqa: E402
from cascade.ui.layout import build_demo, queued  # noqa: E402

from .helpers import ARTIFACTS, TOY_THREADS, free_port  # noqa: E402

pytestmark = pytest.mark.browser

MODELS_LINE = "() => document.querySelector('.cascade-models')?.innerText || ''"


def test_choosing_another_big_model_switches_the_pair_and_the_models_line_names_it(browser, toy):
    service = EngineService(ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=TOY_THREADS,
                                        n_ctx=1024), warm=lambda engine: None)
    big = BigModels(service, sizes={"1.5B": str(toy.related), "7B": str(toy.large)})
    demo = build_demo(service.lease, describe_models=service.describe, big_model=big)
    _, url, _ = queued(demo).launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
                                    quiet=True)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_function(f"() => /toy-related/.test(({MODELS_LINE})())", timeout=15_000)
        page.get_by_role("combobox", name="Big model", exact=True).click()
        options = [o.replace("✓", "").strip() for o in page.get_by_role("option").all_inner_texts()]  # ✓: chosen
        assert [o.split(" · ")[0] for o in options] == ["1.5B", "7B"] and all(" GB" in o for o in options), options
        page.get_by_role("option", name=re.compile(r"^7B")).click()
        page.wait_for_function(f"() => /toy-large/.test(({MODELS_LINE})())", timeout=60_000)
        assert service.config.target == str(toy.large) and "Not switched" not in page.evaluate(MODELS_LINE)
        page.screenshot(path=str(ARTIFACTS / "page-big-model.png"), full_page=True)
        page.close()
    finally:
        demo.close()
