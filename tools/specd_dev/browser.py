"""Headless Chromium for the dashboard's browser test, its benchmark and the demo's
screenshots: Debian's chromium and chromium-driver (``make apt``), driven by Selenium."""

from __future__ import annotations

import shutil
from typing import Any


def chromium(width: int = 1920, height: int = 1200) -> Any:
    """A headless Chromium WebDriver (the caller quits it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        raise RuntimeError("Debian's chromium and chromium-driver are needed (make apt)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 f"--window-size={width},{height}", "--disable-gpu"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(driver), options=options)
    browser.set_page_load_timeout(60)
    return browser
