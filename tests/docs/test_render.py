"""The built site, in a real browser: a page's Mermaid diagram is drawn as SVG, with no
request leaving localhost (so the Mermaid served with the site drew it, not a CDN's).

Run by ``make docs`` after ``mkdocs build`` (tests/docs), on site/. Headless Chromium
(Debian's ``chromium``, /usr/bin/chromium; .ci/run installs it) is driven over the DevTools
protocol on a pipe (``--remote-debugging-pipe``: fd 3 in, fd 4 out, NUL-terminated JSON),
so the test needs no driver or package of its own. The protocol's DOM domain reads through
shadow roots, and Material for MkDocs puts each drawn diagram in a closed one, which a page
script and ``--dump-dom`` cannot see.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "site"
CHROMIUM = os.environ.get("DISPATCH_CHROMIUM", "/usr/bin/chromium")
# The flags that work on this project's machines (root, no GPU, a closed network).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe"]
PAGE = "states/"  # docs/states.md: one stateDiagram
TIMEOUT_S = 30.0

Msg = dict[str, Any]


@pytest.fixture(scope="module")
def site_url() -> Iterator[str]:
    if not (SITE / PAGE / "index.html").exists():
        pytest.fail(f"{SITE / PAGE / 'index.html'} is missing: build the site first "
                    "(make docs, or .venv/bin/mkdocs build --strict)")
    handler = functools.partial(_Quiet, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Browser:
    """Chromium with the DevTools protocol on a pipe: ``call`` sends a command and returns its
    result; every event read on the way is kept in ``events``."""

    def __init__(self, profile: Path) -> None:
        if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
            pytest.fail(f"{CHROMIUM} is missing: the docs' render test needs Debian's "
                        "Chromium (apt-get install chromium; .ci/run installs it)")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # bash puts the pipes where Chromium looks for them, fds 3 and 4.
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w} '
                           f'{to_chrome_r}<&- {from_chrome_w}>&-', "bash", CHROMIUM, *FLAGS,
             f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(to_chrome_r, from_chrome_w), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.events: list[Msg] = []
        self._replies: queue.Queue[Msg | None] = queue.Queue()
        self._next = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        with os.fdopen(self._from_chrome, "rb", buffering=0) as f:
            while chunk := f.read(65536):
                buf += chunk
                *msgs, buf = buf.split(b"\0")
                for raw in msgs:
                    self._replies.put(json.loads(raw))
        self._replies.put(None)

    def call(self, method: str, session: str | None = None, **params: Any) -> Msg:
        self._next += 1
        msg: Msg = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                reply = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"Chromium did not answer {method} in {TIMEOUT_S} s")\
                    from None
            if reply is None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr \
                    else ""
                raise AssertionError(f"Chromium exited ({self.proc.wait()}): {err[-2000:]}")
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                result: Msg = reply.get("result", {})
                return result
            self.events.append(reply)

    def close(self) -> None:
        with contextlib.suppress(AssertionError):
            self.call("Browser.close")
        os.close(self._to_chrome)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(tmp_path / "profile")
    try:
        yield b
    finally:
        b.close()


def _diagrams(node: Msg) -> list[Msg]:
    """The SVGs inside the shadow roots of ``div.mermaid`` elements (Material's hosts)."""
    found: list[Msg] = []
    attrs = node.get("attributes") or []
    classes = dict(zip(attrs[::2], attrs[1::2], strict=True)).get("class", "").split()
    if node.get("localName") == "div" and "mermaid" in classes:
        for root in node.get("shadowRoots") or []:
            found += _svgs(root)
    for child in [*(node.get("children") or []), *(node.get("shadowRoots") or []),
                  *([node["contentDocument"]] if "contentDocument" in node else [])]:
        found += _diagrams(child)
    return found


def _svgs(node: Msg) -> list[Msg]:
    out = [node] if node.get("localName") == "svg" else []
    for child in node.get("children") or []:
        out += _svgs(child)
    return out


def test_a_mermaid_diagram_renders_as_svg_offline(site_url: str, browser: Browser) -> None:
    target = browser.call("Target.createTarget", url="about:blank")["targetId"]
    session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    browser.call("Network.enable", session)
    browser.call("Page.navigate", session, url=site_url + PAGE)
    deadline = time.monotonic() + TIMEOUT_S
    svgs: list[Msg] = []
    while time.monotonic() < deadline and not svgs:
        time.sleep(0.25)
        root = browser.call("DOM.getDocument", session, depth=-1, pierce=True)["root"]
        svgs = _diagrams(root)
    assert svgs, f"no diagram of {site_url + PAGE} was drawn as SVG in {TIMEOUT_S} s"
    attrs = dict(zip(svgs[0]["attributes"][::2], svgs[0]["attributes"][1::2], strict=True))
    # Mermaid draws a syntax error as an SVG too, with this role.
    assert attrs.get("aria-roledescription") != "error", attrs
    assert attrs.get("aria-roledescription", "").startswith("state"), attrs

    sent = [(e["params"].get("type", ""), e["params"]["request"]["url"])
            for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    assert any(u == site_url + "assets/javascripts/mermaid.min.js" for _, u in sent), sent
    # No script from elsewhere (the CDN's Mermaid would be one). The theme's web fonts
    # (Google Fonts' stylesheet) may be asked for: offline the page falls back to the
    # system's fonts, and the diagram above was drawn all the same.
    elsewhere = [(t, u) for t, u in sent if not u.startswith((site_url, "data:", "blob:"))]
    assert not [u for t, u in elsewhere if t == "Script" or "mermaid" in u], elsewhere
