"""Open a page in headless Chromium through the DevTools protocol (no browser download, no
playwright): console errors, uncaught exceptions, network requests, figure sizes, a screenshot.

Chromium is Debian's package (``/usr/bin/chromium``; .ci/run installs it when missing).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")

#: Every <svg> and <img> of the page with its rendered size (and an <img>'s natural size), and
#: the number of drawn shapes inside each <svg>.
_FIGURES_JS = """JSON.stringify([...document.querySelectorAll('svg, img')].map(e => {
  const r = e.getBoundingClientRect();
  return {tag: e.tagName.toLowerCase(), width: r.width, height: r.height,
          natural: e.tagName === 'IMG' ? [e.naturalWidth, e.naturalHeight] : null,
          shapes: e.tagName === 'IMG' ? null : e.querySelectorAll('path, use, rect').length,
          complete: e.tagName === 'IMG' ? e.complete : true};
}))"""


def find_chromium() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageReport:
    """What the browser saw."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    figures: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""


class _DevTools:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 30.0) -> None:
        if any(e.get("method") == method for e in self.events):
            return
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            self.events.append(message)
            if message.get("method") == method:
                return


@contextmanager
def _chromium(executable: str) -> Iterator[str]:
    """A headless Chromium; yields the DevTools websocket URL of its first page.

    Chromium runs in a process group of its own, ended as a whole, so that none of its helper
    processes still writes into the profile when the profile is removed (a race that left
    ``Default`` non-empty under load)."""
    profile = tempfile.mkdtemp(prefix="chromium-")
    process = subprocess.Popen(
        [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
         "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{executable} did not start (exit {process.poll()})")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(t for t in targets if t["type"] == "page")
        yield str(page["webSocketDebuggerUrl"])
    finally:
        _end_group(process)
        shutil.rmtree(profile, ignore_errors=True)


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to Chromium's whole process group, SIGKILL to what is left after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # helpers that outlived the browser process


def open_page(executable: str, path: Path, screenshot: Path) -> PageReport:
    """Load ``path`` (a local HTML file), wait for it, measure its figures, save a full-page
    screenshot as PNG, and report console errors, exceptions and network requests."""
    with browse(executable) as page:
        page.goto(path.resolve().as_uri())
        figures = json.loads(page.evaluate(_FIGURES_JS))
        page.screenshot(screenshot)
        seen = page.seen()
        seen.figures = figures
        return seen


def _report(events: list[dict[str, Any]], url: str, figures: list[dict[str, Any]],
            title: str) -> PageReport:
    report = PageReport(figures=figures, title=title)
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            report.errors.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            report.errors.append(f"exception: {params.get('exceptionDetails')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            report.errors.append(f"log: {params['entry'].get('text')}")
        elif method == "Network.requestWillBeSent":
            request_url = params.get("request", {}).get("url", "")
            if request_url != url:
                report.requests.append(request_url)
    return report


class BrowserPage:
    """One page of a running headless Chromium, driven step by step (:func:`browse`): go to a
    URL, run a script in the page, wait for the next load, take a screenshot; every console
    error and request seen meanwhile is kept (:meth:`seen`)."""

    def __init__(self, tools: _DevTools) -> None:
        self._tools = tools

    def goto(self, url: str) -> None:
        self._tools.events.clear()
        self._tools.call("Page.navigate", url=url)
        self._tools.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self._tools.call("Runtime.evaluate", expression=expression, returnByValue=True,
                                  awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def submit(self, expression: str) -> None:
        """Run ``expression`` (which submits a form or follows a link) and wait for the load of
        the page it leads to."""
        self._tools.events = [e for e in self._tools.events
                              if e.get("method") != "Page.loadEventFired"]
        self.evaluate(expression)
        self._tools.wait_for("Page.loadEventFired")

    def wait_until(self, expression: str, timeout: float = 30.0) -> None:
        """Poll ``expression`` in the page until it is true (a page a script builds)."""
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression} still false after {timeout} s")
            time.sleep(0.2)

    def screenshot(self, path: Path) -> None:
        size = self._tools.call("Page.getLayoutMetrics")["cssContentSize"]
        shot = self._tools.call("Page.captureScreenshot", format="png",
                                captureBeyondViewport=True,
                                clip={"x": 0, "y": 0, "width": size["width"],
                                      "height": size["height"], "scale": 1})
        path.write_bytes(base64.b64decode(shot["data"]))

    def seen(self) -> PageReport:
        """Console errors, exceptions and requests since the last :meth:`goto`."""
        url = self.evaluate("location.href")
        return _report(self._tools.events, str(url), [], str(self.evaluate("document.title")))


@contextmanager
def browse(executable: str) -> Iterator[BrowserPage]:
    """A headless Chromium with one page to drive."""
    with _chromium(executable) as ws_url, connect(ws_url, max_size=None) as ws:
        tools = _DevTools(ws)
        for domain in ("Page", "Runtime", "Log", "Network"):
            tools.call(f"{domain}.enable")
        yield BrowserPage(tools)
