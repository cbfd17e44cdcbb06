"""Browser tests: the real `mqlens serve` on loopback, driven by Playwright through Debian's
Chromium. One browser per test module; each test gets a fresh page.

Screenshots land in a temporary folder; with MQLENS_SCREENSHOTS set to a folder (docs/screenshots
when updating the user guide) they are written there instead."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.live_server import ADMIN_HEADERS, LiveServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 860}
EXPECT_TIMEOUT_MS = 15_000
ADMIN_PASSWORD = "browser-admin-password"


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("browser")
    settings = {"flush": "sync", "commitlog_file_size": 1024 * 1024, "cq_file_size": 20 * 1024,
                "index_slots": 512, "index_entries": 4096, "admin_password": ADMIN_PASSWORD}
    with LiveServer(root / "data", root / "server.log", settings) as live:
        live.start()
        yield live
        assert live.stop() == 0


def expected_noise(error: str) -> bool:
    """Console lines that are no defect of a page: a 4xx answer, a request a test made fail, htmx
    telling of it, the browser blocking a hostile test page's request."""
    return ("status of 4" in error or "net::ERR_FAILED" in error or "blocked by CORS policy" in error
            or error in ("Failed to fetch", "TypeError: Failed to fetch")
            or error.startswith(("htmx:sendError", "htmx:afterRequest")))


def sign_in(page, name: str, password: str) -> None:
    """Sign in through the sign-in form, as a person would."""
    page.goto("/login")
    page.get_by_label("User name").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("header .account .who")).to_contain_text(name)


@contextlib.contextmanager
def page_factory(browser, base_url: str) -> Iterator:
    """Makes fresh pages on `base_url` (each in its own browser context), none signed in; at the
    end, a script error or a refused script or style (the CSP) on any of them is a defect."""
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    contexts, errors = [], []

    def make(viewport: dict | None = None):
        context = browser.new_context(base_url=base_url, viewport=viewport or VIEWPORT)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        return page

    try:
        yield make
    finally:
        for context in contexts:
            context.close()
    assert not [e for e in errors if not expected_noise(e)], errors


@pytest.fixture
def new_page(browser, server: LiveServer) -> Iterator:
    with page_factory(browser, server.base_url) as make:
        yield make


@pytest.fixture
def page(browser, server: LiveServer) -> Iterator:
    """A fresh page signed in as the first admin."""
    with page_factory(browser, server.base_url) as make:
        page = make()
        sign_in(page, "admin", ADMIN_PASSWORD)
        yield page


@pytest.fixture
def api(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=30, headers=ADMIN_HEADERS) as client:
        yield client


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("MQLENS_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


HIDE_TEMP_FOLDERS = """pattern => {
    const prefix = new RegExp(pattern, "g");
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (prefix.test(node.nodeValue)) node.nodeValue = node.nodeValue.replace(prefix, "");
        prefix.lastIndex = 0;
    }
}"""


def save_screenshot(page, folder: Path, name: str) -> Path:
    """A full-page PNG; checked to be a real picture, not an empty file."""
    path = folder / f"{name}.png"
    tmp = folder / f".{name}.tmp.png"
    # The test server's folders live under pytest's temporary directory: show them relative to it,
    # as `make run` would show ./data, so the pictures in docs/ name no folder of this machine.
    temp_folders = re.escape(str(Path(tempfile.gettempdir()))) + r"/pytest-of-[^/]+/pytest-\d+/[^/]+/"
    page.evaluate(HIDE_TEMP_FOLDERS, temp_folders)
    page.screenshot(path=str(tmp), full_page=True)
    data = tmp.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000, f"screenshot {name} looks empty"
    shutil.move(tmp, path)
    return path
