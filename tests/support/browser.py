"""Helpers for the browser tests: Debian's Chromium driven by Playwright (sync API)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import expect

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
# The committed screenshots in docs/ are refreshed only on request, so a test run leaves the
# work tree clean; otherwise they go to the data directory for a look.
SCREENSHOTS = (
    ROOT / "docs" / "screenshots"
    if os.environ.get("UPDATE_SCREENSHOTS") == "1"
    else ROOT / "var" / "screenshots"
)
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PASSWORD = "correct-horse-battery-7"


@contextlib.contextmanager
def orm_allowed() -> Iterator[None]:
    """Playwright's sync API runs an event loop in this thread, and Django refuses ORM calls
    from a thread with a running loop. The test's own row writes are plain sync code, so allow
    them, only for this block (the web process, started earlier, keeps the check)."""
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


def sign_in(page, *, username: str = "alice", password: str = PASSWORD, path: str = "/") -> None:
    page.goto(path)
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


def press(page, key: str) -> None:
    """Press a key once the page's keys answer: a page is drawn before its deferred script
    attaches them, and a key pressed in between is lost (the script marks `<html data-keys>`)."""
    expect(page.locator("html[data-keys='ready']")).to_have_count(1)
    page.keyboard.press(key)


def screenshot(page, name: str) -> None:
    """Save the page at desktop and phone width (docs/screenshots/ with UPDATE_SCREENSHOTS=1)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(SCREENSHOTS / f"{name}-phone.png"), full_page=True)
    page.set_viewport_size(DESKTOP)
