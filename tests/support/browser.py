"""Headless Debian Chromium driven by Playwright (no browser download), for tests outside tests/dashboard."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "chromium_page"]

CHROMIUM = Path("/usr/bin/chromium")
"""Installed by `make browser` (as root); tests that need it check it exists first."""


@contextmanager
def chromium_page(width: int = 1400, height: int = 900) -> Iterator[tuple[Any, list[str]]]:
    """A fresh page and the list its uncaught JavaScript errors are appended to."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page, errors
        finally:
            browser.close()
