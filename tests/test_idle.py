"""Spare-time work after a select_context reply (server/idle.py, ``ContextService.idle``).

Counting ahead left the call (docs/architecture.md, "Performance rules"): the server
runs it on its own thread once the reply is written, under the History lock, and hands the
lock back as soon as a tool call waits. Replies are the same with or without it
(tests/test_window_cost.py and tests/test_select_cost.py run it between calls).
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from context_paging.server.idle import Idler


def until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_work_runs_only_when_due_and_kicked_and_holds_the_lock():
    lock = threading.Lock()
    held = []
    idler = Idler(lambda seconds, stop: held.append((lock.locked(), seconds)), lock, 0.25)
    idler.hooked = True  # the transport kicks
    idler.kick()
    time.sleep(0.05)
    assert held == []  # nothing due
    idler.due()
    time.sleep(0.05)
    assert held == []  # due, but the reply is not written yet
    idler.kick()
    assert until(lambda: held == [(True, 0.25)])
    assert not lock.locked()
    idler.kick()  # a second kick without new work does nothing
    time.sleep(0.05)
    assert held == [(True, 0.25)]


def test_without_a_transport_hook_the_tool_kicks_when_work_is_due():
    ran = threading.Event()
    idler = Idler(lambda seconds, stop: ran.set(), threading.Lock())
    idler.due()
    assert ran.wait(5)


def test_work_yields_to_a_waiting_call_and_skips_while_one_runs():
    lock = threading.Lock()
    counted, started, release = [], threading.Event(), threading.Event()

    def work(seconds, stop):
        started.set()
        while not stop():
            counted.append(1)
            time.sleep(0.001)
        release.set()

    idler = Idler(work, lock)
    idler.due()
    assert started.wait(5)
    idler.enter()  # a tool call arrives: the work stops at its next check
    assert release.wait(5)
    with lock:  # ...and the call gets the lock
        idler.leave()
        runs = idler.runs
        idler.due()  # work due while the call holds the lock: skipped, not waited for
        time.sleep(0.05)
        assert idler.runs == runs


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_the_server_counts_ahead_after_a_reply_and_replies_stay_the_same(tmp_path):
    from context_paging.server.config import load_settings
    from context_paging.server.mcp.tools import create_server
    from mcp import Client

    from tests.conftest import ledger_home
    from tests.test_window_cost import conversation

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    server = create_server(load_settings(home=ledger_home(tmp_path / "a")))
    # The full computation, with no spare-time work, for comparison.
    full = create_server(load_settings(home=ledger_home(tmp_path / "b")))
    full.history.context.reference = True
    full.history.context.idle = lambda *args: False
    service = server.history.context
    messages = conversation([120] * 24, [True] * 24) + [{"role": "user", "content": "go on"}]
    args = {"session": "h", "format": "pi", "token_budget": 2_000}
    async with Client(server) as client, Client(full) as reference:
        first = await client.call_tool("select_context", args | {"messages": messages[:-30]})
        assert until(lambda: service._ahead is None)  # counted while the client went on
        assert server.idler.runs >= 1
        expected = await reference.call_tool("select_context",
                                             args | {"messages": messages[:-30]})
        assert first.structured_content == expected.structured_content
        assert service.estimates.cache == full.history.context.estimates.cache
        second = await client.call_tool("select_context", args | {
            "messages": messages[-30:], "after_id": first.structured_content["last_message_id"]})
        expected = await reference.call_tool("select_context", args | {"messages": messages})
        assert second.structured_content == expected.structured_content


def test_the_wire_kicks_after_each_written_message():
    from context_paging.server.mcp.transport import _Stdout

    read, write = os.pipe()
    try:
        out = _Stdout(write)
        kicks = []
        out.after_write = lambda: kicks.append(os.read(read, 100))
        out._send('{"jsonrpc":"2.0"}\n')
        assert kicks == [b'{"jsonrpc":"2.0"}\n']  # written and flushed before the kick
    finally:
        os.close(read)
        os.close(write)


def test_a_request_line_stops_idle_work_until_the_next_reply():
    lock = threading.Lock()
    stops, ran = [], threading.Event()

    def work(seconds, stop):
        stops.append(stop())
        ran.set()

    idler = Idler(work, lock)
    idler.hooked = True
    idler.due()
    idler.arrived()  # a line came in before the kick: stale, the kick clears it
    idler.kick()
    assert ran.wait(5) and stops == [False]
    ran.clear()
    idler.due()
    idler.kick()
    assert ran.wait(5)
    idler.arrived()
    assert idler._waited_on()  # the running work would stop at its next check


def test_the_proxy_counts_ahead_after_paging_a_request(tmp_path):
    from tests.test_proxy import Stack, make_home

    stack = Stack(make_home(tmp_path))
    calls = []
    try:
        history = stack.history
        stack.proxy_app._idler = Idler(
            lambda seconds, stop: calls.append(history.idle(seconds, stop)), threading.Lock())
        stack.anthropic().messages.create(
            model="claude-test", max_tokens=10,
            messages=[{"role": "user", "content": "hello " * 50}])
        assert until(lambda: len(calls) == 1)  # once the request was paged
    finally:
        stack.close()


def test_a_request_soon_after_the_reply_means_no_spare_time():
    ran = threading.Event()
    idler = Idler(lambda seconds, stop: ran.set(), threading.Lock(), delay=0.3)
    idler.hooked = True
    idler.due()
    idler.kick()
    idler.arrived()  # the host's next request, within the delay
    assert not ran.wait(0.6)
    idler.due()
    idler.kick()  # a reply with no request after it
    assert ran.wait(5)


@pytest.mark.anyio
@pytest.mark.parametrize("setting", [None, "json", "summary"])
async def test_the_text_copy_of_select_contexts_reply_is_a_setting(tmp_path, setting):
    """Default (and "json"): the text is the whole reply as JSON, as the MCP spec asks;
    "summary": the same without the window's messages, which stay in the structured content."""
    import json

    from context_paging.server.config import load_settings
    from context_paging.server.mcp.tools import create_server
    from mcp import Client

    from tests.conftest import ledger_home

    home = ledger_home(tmp_path)
    if setting is not None:
        config = home / "config.toml"
        config.write_text(config.read_text() + f'[server]\nselect_context_text = "{setting}"\n')
    server = create_server(load_settings(home=home))
    messages = [{"role": "user", "content": "hello"}]
    async with Client(server) as client:
        reply = await client.call_tool("select_context", {
            "session": "t", "messages": messages, "format": "pi"})
    text = json.loads(reply.content[0].text)
    assert reply.structured_content["messages"] == messages
    if setting == "summary":
        assert text == {k: v for k, v in reply.structured_content.items() if k != "messages"}
    else:
        assert text == reply.structured_content
