"""Fixtures shared by the test packages: a real headless Chromium for the browser tests.

The browser is the system's (Debian's ``chromium``; or the one named by APPORTION_CHROMIUM),
driven by Playwright: Playwright's own browser downloads are never needed. One browser per
test module; each test gets a fresh page that records console errors and uncaught exceptions.
"""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The Chromium to drive: $APPORTION_CHROMIUM, else the first of CHROMIUM_NAMES on PATH or in /usr/bin."""
    named = os.environ.get("APPORTION_CHROMIUM")
    if named:
        return named if os.access(named, os.X_OK) else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name) or shutil.which(name, path="/usr/bin")
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the whole module; the tests using it skip, saying why, where none can be found."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set APPORTION_CHROMIUM to one)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def new_page(browser):
    """A page (1400×1000) in a fresh context, whose console errors and uncaught exceptions collect
    in ``page.errors``; close it with ``page.context.close()``."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.errors = []
    tab.on("console", lambda message: tab.errors.append(message.text) if message.type == "error" else None)
    tab.on("pageerror", lambda error: tab.errors.append(f"uncaught: {error}"))
    return tab


@pytest.fixture
def page(browser):
    """A fresh page for one test (see new_page)."""
    tab = new_page(browser)
    yield tab
    tab.context.close()


@pytest.fixture(autouse=True)
def built_in_policies_only():
    """Each test starts with the built-in policies only: a plugin a test registered (from a file or a
    package) goes with it, so no other test's "known:" list depends on the order tests ran in."""
    yield
    import sys

    from apportion.policies import registry

    for name, entry in list(registry.ENTRIES.items()):
        if entry.source != "built-in":
            registry.unregister(name)
    sys.modules.pop("apportion_demo_plugins", None)
