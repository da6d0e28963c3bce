"""The live view in a real browser, as a person sees it while an agent runs.

Headless Chromium (Debian's ``chromium``) opens the URL ``context-paging view`` prints while a
scripted Claude Code-like conversation runs through the proxy against the fake provider; the
test reads what is on the screen: the conversation's row, its request count rising without a
reload, the chart, a turn out of the window opened to its original; then the status line
``context-paging statusline`` prints for the same session, drawn as a status bar. With
``CONTEXT_PAGING_SCREENSHOTS=<folder>`` it saves the screenshots docs/live-view.md shows.

Without a browser the test skips with one line, except where ``CONTEXT_PAGING_REQUIRE_AGENTS``
is set (CI, whose .ci/run installs chromium): there a missing browser fails.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from context_paging.server.proxy.commands import view_url

from tests.browser import Browser, find_browser
from tests.conftest import PROJECT
from tests.test_live_view import Live, live  # noqa: F401  # the fixture
from tests.test_proxy import SESSION, claude_code_conversation

BINARY = find_browser()
if BINARY is None and not os.environ.get("CONTEXT_PAGING_REQUIRE_AGENTS"):
    pytest.skip("no chromium on this machine: the browser test needs Debian's chromium",
                allow_module_level=True)


@pytest.fixture
def browser() -> Browser:
    assert BINARY is not None, "CI needs chromium: .ci/run installs it"
    opened = Browser(BINARY, width=1440, height=1000)
    yield opened
    opened.close()


def test_a_person_watches_the_window_work(live: Live, browser: Browser, tmp_path):  # noqa: F811
    requests = list(claude_code_conversation(30))
    for messages in requests[:4]:
        live.send(messages)
    browser.open(view_url(live.home, "127.0.0.1", live.port))
    row = "document.querySelector('#conversations tbody tr[data-session]')"
    session = browser.wait_for(f"{row} && {row}.dataset.session", "the conversation's row")
    assert session.startswith("ledger:cc-")
    count = "Number(document.querySelector('#conversations td.requests').textContent)"
    assert browser.wait_for(f"{count} === 4 && {count}", "4 requests") == 4
    browser.evaluate("window.stillTheSamePage = true")
    for messages in requests[4:]:
        live.send(messages)
    total = len(requests)
    assert browser.wait_for(f"{count} === {total} && {count}", f"{total} requests") == total
    assert browser.evaluate("window.stillTheSamePage === true")  # no reload happened
    # the chart: one point per request on the sent and full-history lines, the cut's marks
    sent = "document.querySelector('#chart polyline.sent')"
    drawn = browser.wait_for(
        f"{sent} && {sent}.getAttribute('data-values').split(',').length === {total} && "
        f"{sent}.getAttribute('points').split(' ').length", "the chart's line")
    assert drawn == total
    advances = int(browser.evaluate(
        "document.querySelector('#conversations td.cut-advances').textContent"))
    assert advances >= 1
    assert browser.evaluate("document.querySelectorAll('#chart .mark.cut').length") == advances
    # one bar per request, the last one once the provider's usage of its reply is kept
    bars = "document.querySelectorAll('#chart g.bar').length"
    assert browser.wait_for(f"{bars} === {total} && {bars}", "a bar per request") == total
    assert "Context paging notice" in browser.evaluate("document.getElementById('notice')"
                                                       ".textContent")
    # a turn out of the window opens to its original: the opening request
    button = "document.querySelector('#turns-out li:last-child button')"
    browser.wait_for(f"!!{button}", "the turns out of the window")
    browser.evaluate(f"{button}.click()")
    original = browser.wait_for(
        "(() => { const t = document.getElementById('turn-original').textContent; "
        "return t.includes('Refactor the modules') && t; })()", "the opened turn")
    assert json.loads(original)["content"][0]["text"].startswith("Refactor the modules")
    shots = Path(os.environ.get("CONTEXT_PAGING_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    browser.evaluate("window.scrollTo(0, 0)")
    page = browser.screenshot(shots / "live-view.png")
    assert page.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    browser.evaluate("document.querySelector('#detail .columns').scrollIntoView()")
    turns = browser.screenshot(shots / "live-view-turns.png", "#detail .columns")
    assert turns.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the status line Claude Code shows for the same session, drawn as its status bar
    done = subprocess.run([sys.executable, "-m", "context_paging", "--home", str(live.home),
                           "statusline"], input=json.dumps({"session_id": SESSION}).encode(),
                          capture_output=True, cwd=PROJECT, timeout=120, check=True)
    line = done.stdout.decode().strip()
    assert line.startswith("paging: window ") and line.endswith(f"{advances} cuts")
    bar = ("<body style='margin:0;background:#1e1e1e'><div id='bar' style='font:14px "
           "monospace;color:#d4d4d4;background:#1e1e1e;padding:10px 14px;width:760px'>"
           "<div style='color:#6a9955'>&gt; refactor the modules, starting with module_0"
           "</div><div style='margin-top:8px;color:#9cdcfe'>" + html.escape(line)
           + "</div></div></body>")
    browser.open("data:text/html;charset=utf-8," + urllib.parse.quote(bar))
    browser.wait_for("!!document.getElementById('bar')", "the status bar")
    status = browser.screenshot(shots / "statusline.png", "#bar")
    assert status.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
