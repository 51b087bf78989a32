"""A real headless Chromium (Debian's chromium + chromium-driver) driven with selenium, for
the console's browser tests (tests/integration against `zds demo`-style apps on fakes,
tests/e2e against the booted appliance).

The browser reaches loopback only: every host name but localhost resolves to nothing
(--host-resolver-rules) and everything not on loopback goes to a proxy on 127.0.0.1:9
where nothing listens, so a stray CDN reference fails instead of leaving this machine.
Screenshots go to ``artifacts_dir()`` ($ZDS_TEST_ARTIFACTS, default /tmp/zds-artifacts);
with ZDS_UPDATE_SCREENSHOTS=1 they are copied to docs/img too.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"
T = TypeVar("T")


def available() -> str | None:
    """None when the browser can run here, else why not."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


def artifacts_dir() -> Path:
    d = Path(os.environ.get("ZDS_TEST_ARTIFACTS", "/tmp/zds-artifacts"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def chromium(width: int = 1366, height: int = 860) -> Iterator[webdriver.Chrome]:
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--ignore-certificate-errors",
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
                "--proxy-server=http://127.0.0.1:9", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps",
                "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(fn: Callable[[], T | None], timeout: float = 20.0, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = fn()
        except Exception as exc:  # the page may be re-rendering under us
            last = exc
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what or fn}: {last!r}")


def css(driver: webdriver.Chrome, selector: str) -> list[WebElement]:
    return driver.find_elements(By.CSS_SELECTOR, selector)


def login(driver: webdriver.Chrome, base: str, token: str) -> None:
    driver.get(base + "/ui#/login")
    box = wait_for(lambda: css(driver, "#token"), what="the token field")[0]
    box.clear()
    box.send_keys(token)
    css(driver, "#login button[type=submit]")[0].click()
    wait_for(lambda: css(driver, "table#pools"), what="the overview after login")


def screenshot(driver: webdriver.Chrome, name: str) -> Path:
    path = artifacts_dir() / f"{name}.png"
    driver.save_screenshot(str(path))
    if os.environ.get("ZDS_UPDATE_SCREENSHOTS"):
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS_IMG / f"{name}.png")
    return path


def external_requests(driver: webdriver.Chrome, base: str) -> list[str]:
    """URLs the page loaded from anywhere but ``base`` (resource timing)."""
    urls: list[str] = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    return [u for u in urls if not u.startswith(base) and not u.startswith("blob:")]
