"""The run page under test: a real server on a free loopback port, a real headless browser (Chromium from the
system package, driven by Playwright), and screenshots of what it showed (test-artifacts/web)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
CHROMIUM = os.environ.get("KITAE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Served:
    def __init__(self, runs: Path, **kwargs):
        import httpx

        from kitae.web import make_server, serve_in_thread

        self.server = make_server(runs, port=0, **kwargs)
        self.url = self.server.url
        self.thread = serve_in_thread(self.server)
        self.http = httpx.Client(base_url=self.url, timeout=10)

    def close(self) -> None:
        self.http.close()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def serve():
    """serve(runs_dir, **make_server kwargs) -> Served; every server is shut down after the test."""
    started: list[Served] = []

    def start(runs: Path, **kwargs) -> Served:
        started.append(Served(runs, poll_s=kwargs.pop("poll_s", 0.2), **kwargs))
        return started[-1]

    yield start
    for s in started:
        s.close()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium from the system package, driven by Playwright (never `playwright install`)."""
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="browser tests need playwright: pip install playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tests need Chromium at {CHROMIUM}: apt-get install -y chromium (or set KITAE_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh page that fails the test on any JavaScript error."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    pg.set_default_timeout(15_000)
    yield pg
    ctx.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(path), full_page=True)
    return path
