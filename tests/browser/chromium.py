"""Headless Chromium for the browser tests: one driver per fixture, a fresh profile, quit after.

``wait_for`` polls a condition (no timed assertions); ``drawn`` runs drawn.js in the page and
returns what Plotly really drew (full layout, full data, SVG pixel boxes).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("BATCHSCOPE_SCREENSHOTS", ROOT / "out" / "screenshots"))
DRAWN_JS = (Path(__file__).resolve().parent / "drawn.js").read_text(encoding="utf-8")
HAVE_CHROMIUM = os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)
needs_chromium = pytest.mark.skipif(
    not HAVE_CHROMIUM, reason="headless Chromium and chromedriver are not installed (make browser)")


@contextmanager
def chromium(width: int = 1366, height: int = 768):
    """A headless Chromium window of ``width`` x ``height`` CSS pixels."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="batchscope-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    viewport(driver, width, height)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def viewport(driver, width: int, height: int) -> None:
    """Make the page's viewport exactly ``width`` x ``height`` (a headless window's size
    includes the browser's own frame)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})


def debug(driver) -> dict | None:
    return driver.execute_script("return window.batchscope ? window.batchscope.debug() : null")


def wait_for(driver, condition, what, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.2)
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / "timeout.png"))
    what = what() if callable(what) else what
    raise AssertionError(f"timed out waiting for {what}; state: {debug(driver)}")


def drawn(driver, function: str, *args):
    """``function`` of drawn.js applied to ``args`` in the page."""
    return driver.execute_script(f"{DRAWN_JS}\nreturn {function}(...arguments);", *args)


def scrub(driver, iteration: int) -> None:
    """Drag the replay bar's scrubber to ``iteration`` (0-based)."""
    driver.execute_script(
        "const s = document.getElementById('bs-replay-scrubber'); s.value = arguments[0];"
        "s.dispatchEvent(new Event('input', {bubbles: true}));"
        "s.dispatchEvent(new Event('change', {bubbles: true}));", iteration)
