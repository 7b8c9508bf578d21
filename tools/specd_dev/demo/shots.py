"""Screenshots of the dashboard during the demo (``--screenshots DIR``): headless Chromium
(Debian's chromium and chromium-driver) loads a page, waits for it to draw, saves a PNG."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


class Shots:
    def __init__(self, url: str, folder: Path | None) -> None:
        self.url, self.folder = url.rstrip("/"), folder
        self.driver: Any = None
        self.taken: list[Path] = []

    def take(self, name: str, path: str, wait_for: str, settle_s: float = 4.0) -> None:
        """Load ``path`` (e.g. ``/rollout?ns=demo&name=chat``) until ``wait_for`` shows,
        then save ``<folder>/<name>.png``; nothing without a folder."""
        if self.folder is None:
            return
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec
        from selenium.webdriver.support.ui import WebDriverWait

        driver = self._driver()
        driver.get(self.url + path)
        WebDriverWait(driver, 60).until(ec.presence_of_element_located(
            (By.XPATH, f"//*[contains(normalize-space(.), {wait_for!r})]")))
        time.sleep(settle_s)  # the charts and tables finish drawing
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / f"{name}.png"
        driver.save_screenshot(str(target))
        self.taken.append(target)

    def _driver(self) -> Any:
        if self.driver is None:
            from specd_dev.browser import chromium

            self.driver = chromium()
        return self.driver

    def close(self) -> None:
        if self.driver is not None:
            self.driver.quit()
            self.driver = None
