"""Shared fixtures: toy models built on the spot, engines over them, and the real pair where present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .helpers import CHROMIUM, CHROMIUM_ARGS, engine_for, serve
from .toymodels import ToyModels, build_toy_models


def pytest_collection_modifyitems(items) -> None:
    """A test of the real pair is in the real-model tier, marked or not (scripts/test runs that tier alone)."""
    for item in items:
        if "real_pair" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session")
def toy(tmp_path_factory) -> ToyModels:
    return build_toy_models(tmp_path_factory.mktemp("toy-models"))


@pytest.fixture(scope="session")
def pair_engines(toy):
    """The three kinds of draft the equivalence tests need, all checked by one target."""
    return {
        "agrees": engine_for(toy.large, toy.large),  # the target drafting for itself
        "partly": engine_for(toy.small, toy.related),
        "rarely": engine_for(toy.small, toy.large),
    }


@pytest.fixture(scope="session")
def real_pair() -> tuple[str, str]:
    draft, target = os.environ.get("CASCADE_REAL_DRAFT"), os.environ.get("CASCADE_REAL_TARGET")
    if not (draft and target and Path(draft).is_file() and Path(target).is_file()):
        pytest.skip("real-model tier: set CASCADE_REAL_DRAFT and CASCADE_REAL_TARGET (scripts/test does it "
                    "where ../shared/models/get-real-pair exists)")
    return draft, target


# ---- the browser tier: one Chromium per test module, one page over the toy pair for the session ------
# Per module, not per session: between its calls a sync Playwright marks its event loop as running in the main
# thread, so while it lives asyncio.run fails there (a test of another module would fail only in the whole
# suite). A module's pages share one context, closed at its end with any page a failed test left open (an open
# page keeps its server busy, and the tests after it would pay).

@pytest.fixture(scope="module")
def chromium():
    if not CHROMIUM.exists():
        pytest.skip("browser tier: needs Debian's chromium at /usr/bin/chromium (scripts/setup installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="browser tier: needs the playwright package")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def browser(chromium):
    context = OneContext(chromium)
    yield context
    context.close()


@pytest.fixture(autouse=True)
def _close_pages_after_each_test(request):
    """A page a test leaves open is closed when it ends: an open Gradio page keeps drawing (its status tracker
    asks for every animation frame), about 0.08 CPU-s a second, which the tests after it would pay. Pages of
    module-scoped fixtures (set up before it) stay open for the tests that share them."""
    if "browser" not in request.fixturenames:
        yield
        return
    context = request.getfixturevalue("browser")
    before = set(context.pages)
    yield
    for page in set(context.pages) - before:
        page.close()


class OneContext:
    """The browser as the tests use it: `new_page` opens each page in one shared context, so the page's
    scripts come from the cache after the first (about 0.3 s of the 1.3 s a page takes to load)."""

    def __init__(self, chromium) -> None:
        self._context = chromium.new_context(reduced_motion="reduce")  # fewer of Gradio's transitions to draw

    def new_page(self, viewport: dict | None = None, **options):
        page = self._context.new_page(**options)
        if viewport:
            page.set_viewport_size(viewport)
        return page

    @property
    def pages(self) -> list:
        return self._context.pages

    def close(self) -> None:
        self._context.close()


@pytest.fixture(scope="session")
def page_url(toy):
    engine = engine_for(toy.small, toy.related)
    demo, url = serve(lambda progress: engine)
    yield url
    demo.close()
