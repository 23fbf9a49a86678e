"""The web console against a real mesh in a real browser: one mesh for the module, headless Chromium.

The mesh is ``agentmesh up --detach --ports-auto`` in a fresh home (every role, the
dev IdP and the console as their own processes), with each specialist slowed down a
little so a page can watch an execution while it runs. The browser is Debian's
``chromium`` driven by Selenium through Debian's ``chromedriver`` (``scripts/bootstrap``
installs both); without them these tests fail, they are never skipped.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentmesh import config, launcher
from agentmesh.config import MeshConfig

SPECIALIST_DELAY_MS = 2000
"""Each task takes at least this long, so an analysis is RUNNING while its page loads."""
WAIT_S = 90.0
"""The longest a test waits for the browser to show something (a failure, never a measurement)."""


@pytest.fixture(scope="module")
def console_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    import yaml

    home = tmp_path_factory.mktemp("console-mesh")
    (home / "config.yaml").write_text(yaml.safe_dump({"specialist_delay_ms": SPECIALIST_DELAY_MS}))
    result = subprocess.run([sys.executable, "-m", "agentmesh_cli", "--home", str(home), "up", "--detach",
                             "--ports-auto", "--json"], capture_output=True, text=True, timeout=300)
    cfg = config.load(home=str(home), environ={})
    try:
        assert result.returncode == 0, result.stderr
        yield cfg
    finally:
        launcher.down(cfg)


def console_url(cfg: MeshConfig) -> str:
    """The running console's base URL, as ``agentmesh status`` shows it."""
    return str(json.loads((cfg.mesh_home.run / "console.addr").read_text())["url"])


def _binaries() -> tuple[str, str]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.fail("the console's browser tests need Debian's chromium and chromium-driver "
                    "(scripts/bootstrap installs them: apt-get install chromium chromium-driver)")
    return chromium, driver


@pytest.fixture()
def browser(tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Opens headless Chromium browsers (each its own cookie jar); all are closed after the test."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = _binaries()
    opened: list[Any] = []

    def open_browser() -> Any:
        options = Options()
        options.binary_location = chromium
        profile = tmp_path / f"profile-{len(opened)}"
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--window-size=1280,1600", f"--user-data-dir={profile}", "--no-first-run"):
            options.add_argument(arg)
        driver = webdriver.Chrome(options=options, service=Service(driver_path))
        driver.set_page_load_timeout(WAIT_S)
        opened.append(driver)
        return driver

    try:
        yield open_browser
    finally:
        for driver in opened:
            driver.quit()
