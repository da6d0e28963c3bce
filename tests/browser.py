"""A headless Chromium driven over the DevTools protocol, for the tests that look at a page as a
person would (tests/test_live_view_browser.py): open a URL, evaluate script, wait for a
condition, take a screenshot. Debian's ``chromium`` package; nothing is downloaded.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx

NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
WAIT = 60.0  # seconds: a bound on a loaded machine, never an assertion about speed


def find_browser() -> str | None:
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless browser with one page."""

    def __init__(self, binary: str, width: int = 1280, height: int = 1000) -> None:
        from websockets.sync.client import connect

        self.profile = tempfile.TemporaryDirectory(prefix="context-paging-browser-")
        args = [binary, "--headless=new", "--remote-debugging-port=0", "--no-first-run",
                "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--metrics-recording-only", "--no-sandbox",
                "--disable-dev-shm-usage", f"--window-size={width},{height}",
                f"--user-data-dir={self.profile.name}", "about:blank"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True, env={**os.environ, "LANG": "en_US.UTF-8"})
        self.opened = contextlib.ExitStack()
        try:
            port = self._port(Path(self.profile.name) / "DevToolsActivePort")
            pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=WAIT).json()
            page = next(p for p in pages if p.get("type") == "page")
            self.socket = self.opened.enter_context(connect(
                page["webSocketDebuggerUrl"], max_size=64 << 20, open_timeout=WAIT))
            self.ids = itertools.count(1)
            self.call("Page.enable")
            self.call("Runtime.enable")
            self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()
            raise

    def _port(self, path: Path) -> int:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the browser exited: {self.process.stderr.read()[-2000:]}")
            try:
                text = path.read_text()
            except OSError:
                text = ""
            match = re.match(r"(\d+)\n", text)
            if match:
                return int(match.group(1))
            time.sleep(0.05)
        raise TimeoutError("the browser did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self.ids)
        self.socket.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=WAIT))
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, what: str) -> Any:
        """The value of ``expression`` once it is truthy (polled)."""
        deadline = time.monotonic() + WAIT
        value = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"the page never showed {what} (last value {value!r})")

    def screenshot(self, path: Path, selector: str | None = None) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if selector is not None:
            box = self.evaluate(
                f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                ".getBoundingClientRect(); return [r.x + scrollX, r.y + scrollY, r.width, "
                "r.height]; })()")
            params["clip"] = {"x": box[0], "y": box[1], "width": box[2], "height": box[3],
                              "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.opened.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process.stderr.close()
            self.profile.cleanup()
