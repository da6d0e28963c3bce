"""The live view (docs/live-view.md): its JSON against ``stats``, its token, who may read it.

The proxy is built the way ``context-paging proxy`` builds it (``make_app``: the view mounted,
the guard in front, the real server settings) over a fake provider on a loopback port, and a
scripted Claude Code-like conversation goes through it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from context_paging.index.home.proxied import ProxyLog, request_series, view_token
from context_paging.server.cli import main
from context_paging.server.config import load_settings
from context_paging.server.proxy import commands as proxy_cli
from context_paging.server.proxy import wire
from context_paging.server.proxy.view import Costs, View, conversation, conversations

from tests.conftest import PROJECT
from tests.fake_provider import FakeProvider, Recorded, Served, sse
from tests.test_proxy import SYSTEM, TOOLS, USER_ID, claude_code_conversation, make_home

API = "/context-paging/api/conversations"


def caching_provider() -> FakeProvider:
    """A fake provider with a prompt cache: each reply's usage reads from the cache what the
    request shares with the one before it, byte for byte, and writes the rest, as Anthropic
    reports it."""
    provider = FakeProvider()
    previous = [b""]

    def reply(request: Recorded):
        body, before = request.body, previous[0]
        shared = next((i for i, (a, b) in enumerate(zip(body, before, strict=False)) if a != b),
                      min(len(body), len(before)))
        previous[0] = body
        usage = {"input_tokens": 7, "cache_read_input_tokens": shared // 4,
                 "cache_creation_input_tokens": max(0, (len(body) - shared) // 4 - 7),
                 "output_tokens": 1}
        return sse([{"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake",
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}},
            {"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": "ok"}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                "stop_sequence": None},
             "usage": {"output_tokens": 2}}, {"type": "message_stop"}])

    provider.default = reply  # type: ignore[method-assign]
    return provider


class Live:
    """The provider, and the proxy as the command builds it, live view included."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.settings = load_settings(home=str(home))
        self.provider = caching_provider()
        self.upstream = Served(self.provider)
        args = argparse.Namespace(upstream_anthropic=self.upstream.url,
                                  upstream_openai=self.upstream.url)
        self.app, self.history = proxy_cli.make_app(self.settings, args)
        self.sock = proxy_cli.listen("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = proxy_cli._server(self.app, self.sock)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)
        self.thread.start()
        self.token = view_token(home)
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def send(self, messages: list[dict], session_header: bool = False) -> None:
        headers = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01",
                   "content-type": "application/json", "user-agent": "claude-cli/2.1.90"}
        body = {"model": "claude-fake", "max_tokens": 64, "stream": True, "system": SYSTEM,
                "tools": TOOLS, "messages": messages, "metadata": {"user_id": USER_ID}}
        reply = self.http.post("/v1/messages", headers=headers, content=json.dumps(body))
        assert reply.status_code == 200

    def get(self, path: str, token: str | None = "query", **headers: str) -> httpx.Response:
        params = {"token": self.token} if token == "query" else {}
        if token == "bearer":
            headers["authorization"] = f"Bearer {self.token}"
        return self.http.get(path, params=params, headers=headers)

    def close(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()
        self.app.view.close()
        self.history.close()
        self.upstream.close()


@pytest.fixture
def live(tmp_path) -> Iterator[Live]:
    stack = Live(make_home(tmp_path))
    yield stack
    stack.close()


def run_conversation(live: Live, turns: int = 30) -> int:
    """Send the scripted conversation; return once the provider's usage of its last reply is
    kept too (the proxy records it after the agent has the whole reply)."""
    count = 0
    for messages in claude_code_conversation(turns):
        live.send(messages)
        count += 1
    deadline = time.monotonic() + 60  # a bound on a loaded machine, not a speed assertion
    while time.monotonic() < deadline:
        rows = conversations(live.home)
        if rows and all("usage" in r for r in request_series(live.home, rows[0]["session"])):
            break
        time.sleep(0.02)
    return count


def test_the_json_lists_the_conversation_with_the_figures_stats_reports(live):
    sent = run_conversation(live)
    rows = live.get(API).json()["conversations"]
    assert len(rows) == 1
    row = rows[0]
    ref = row["session"]
    assert ref.startswith("ledger:cc-") and USER_ID.split('"session_id": "')[1][:8] in ref
    assert row["agent"] == "claude-code" and row["model"] == "claude-fake"
    stats = live.history.stats(ref).proxy  # what `context-paging stats --json` prints
    assert stats is not None
    assert row["requests"] == stats.requests == sent
    assert row["tokens_sent"] == stats.sent_tokens and row["tokens_full"] == stats.full_tokens
    assert row["cut_advances"] == stats.cut_advances >= 1
    assert row["prefix_share"] == stats.prefix_share
    assert row["paged"] + row["within_budget"] + row["failed_open"] == sent
    assert row["paged"] >= 1 and row["within_budget"] >= 1 and row["failed_open"] == 0
    detail = live.get(f"{API}/{ref}").json()
    series = detail["series"]
    assert [p["n"] for p in series] == list(range(1, sent + 1))
    assert sum(p["advanced"] for p in series) == row["cut_advances"]
    assert sum(p["sent"] for p in series) == row["tokens_sent"]
    assert sum(p["full"] for p in series) == row["tokens_full"]
    # the provider's usage, per request and summed, and the share read from the cache
    reads = [p["cache_read_tokens"] for p in series]
    assert all(isinstance(r, int) and r > 0 for r in reads[1:])
    assert sum(reads) == row["cache_read_tokens"]
    assert sum(p["cache_write_tokens"] for p in series) == row["cache_write_tokens"]
    assert sum(p["input_tokens"] for p in series) == row["input_tokens"] == 7 * sent
    total = row["input_tokens"] + row["cache_read_tokens"] + row["cache_write_tokens"]
    assert row["cache_read_share"] == round(row["cache_read_tokens"] / total, 4)
    # the window is cheaper than sending everything; the chart is drawn from the same series
    assert 0 < row["cost"]["sent"] < row["cost"]["full"]
    assert detail["chart"].count('class="mark cut"') == row["cut_advances"]
    assert f'data-count="{sent}"' in detail["chart"]
    # the notice as the model saw it: the words the provider received in the last request
    assert detail["notice"] and "search_history" in detail["notice"]
    last = json.dumps(live.provider.requests[-1].json(), ensure_ascii=False)
    assert json.dumps(detail["notice"], ensure_ascii=False)[1:-1] in last
    assert detail["evicted_messages"] > 0 and detail["frontier"]["last_evicted"]["history_id"]


def test_a_turn_out_of_the_window_opens_to_what_the_recovery_tools_serve(live):
    run_conversation(live)
    ref = live.get(API).json()["conversations"][0]["session"]
    turns = live.get(f"{API}/{ref}/turns").json()
    out = turns["out"]
    detail = live.get(f"{API}/{ref}").json()
    assert out and out[0]["history_id"] == detail["frontier"]["last_evicted"]["history_id"]
    assert out[-1]["sequence"] == 0  # the opening request left the window first
    first = out[-1]["history_id"]
    opened = live.get(f"{API}/{ref}/turns/{first}").json()
    assert opened["item"] == live.history.load(ref, [first])[0]
    assert opened["item"]["content"][0]["text"].startswith("Refactor the modules")
    assert live.get(f"{API}/{ref}/turns/nope").status_code == 404


def test_recovery_calls_the_model_made_are_listed_with_what_they_returned(live):
    messages = next(iter(claude_code_conversation(1)))
    search = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_s1",
              "name": "mcp__context-paging__search_history", "input": {"query": "module_0"}}]}
    found = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_s1",
                                          "content": "1 reference: module_0 ..."}]}
    shell = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_s2",
             "name": "Bash", "input": {"command": "context-paging recall toolu_000"}}]}
    empty = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_s2",
                                          "content": ""}]}
    live.send([*messages, search, found, shell, empty])
    ref = live.get(API).json()["conversations"][0]["session"]
    calls = live.get(f"{API}/{ref}/turns").json()["recovery_calls"]
    assert [(c["tool"], c["returned"]) for c in calls] == [
        ("mcp__context-paging__search_history", True), ("Bash", False)]


def test_without_the_token_nothing_of_a_conversation_is_served(live):
    run_conversation(live, 5)
    for path in ("/context-paging/", API, f"{API}/x", "/context-paging/live-view.js"):
        for token in (None, "wrong"):
            reply = (live.get(path, token=None) if token is None else
                     live.http.get(path, params={"token": "x" * 43}))
            assert reply.status_code == 403
            assert "claude-fake" not in reply.text and "ledger:" not in reply.text
    assert live.get(API, token="bearer").status_code == 200
    moved = live.http.get("/context-paging", params={"token": live.token})
    assert moved.status_code == 307
    assert moved.headers["location"] == f"/context-paging/?token={live.token}"
    page = live.get("/context-paging/")
    assert page.status_code == 200 and "<script src=\"live-view.js\">" in page.text
    assert "http" not in page.text.replace('http-equiv', '')  # nothing from the network
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    cookie = page.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    # the cookie the page set is enough for its own requests
    again = httpx.get(live.url + API, cookies={"context_paging_view": live.token})
    assert again.status_code == 200
    assert live.http.post(API, params={"token": live.token}).status_code in (403, 405)


def test_the_token_is_the_users_alone_and_stays_the_same(tmp_path):
    home = make_home(tmp_path)
    token = view_token(home)
    path = home / "proxy" / "view.token"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and len(token) >= 32
    assert view_token(home) == token
    path.write_text("short")
    assert view_token(home) != token and len(view_token(home)) >= 32


@pytest.mark.parametrize("headers, allowed", [
    ({"sec-fetch-site": "none", "sec-fetch-mode": "navigate"}, True),
    ({"sec-fetch-site": "same-origin", "sec-fetch-mode": "cors"}, True),
    ({"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"}, False),
    ({"sec-fetch-site": "same-site", "sec-fetch-mode": "cors"}, False),
    ({"sec-fetch-site": "same-origin", "origin": "http://evil.example"}, False),
    ({"host": "evil.example:8787", "sec-fetch-site": "none"}, False),
])
def test_the_guard_lets_only_a_person_and_the_page_itself_read_the_view(live, headers, allowed):
    run_conversation(live, 2)
    for path in ("/context-paging/", API):
        reply = live.get(path, **headers)
        assert (reply.status_code == 200) is allowed, (path, headers, reply.text[:200])
        if not allowed:
            assert "ledger:" not in reply.text


def test_a_browser_is_still_refused_on_every_other_path(live):
    body = json.dumps({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "hello"}]})
    for site in ("none", "same-origin"):
        reply = live.http.post("/v1/messages", content=body, headers={
            "sec-fetch-site": site, "content-type": "application/json"})
        assert reply.status_code == 403
        reply = live.http.post(API, params={"token": live.token},
                               headers={"sec-fetch-site": site})
        assert reply.status_code == 403
    assert not live.provider.requests


def test_the_series_survives_a_restart(live):
    sent = run_conversation(live, 10)
    ref = live.get(API).json()["conversations"][0]["session"]
    before = conversation(live.home, ref)
    restarted = ProxyLog(live.home)  # a new proxy process over the same home
    assert before is not None and len(before["series"]) == sent
    assert conversations(live.home)[0]["requests"] == sent
    assert len(request_series(live.home, ref)) == sent
    assert View(live.home).token == live.token
    number = restarted.record(ref.removeprefix("ledger:"), "anthropic", {"mode": "paged"},
                              sent=b"x" * 40, full=b"x" * 80, previous=None)
    assert number == sent + 1  # the restarted proxy goes on where the series stopped
    assert [p["n"] for p in request_series(live.home, ref)] == list(range(1, sent + 2))


def test_a_failed_open_request_shows_with_its_reason(tmp_path):
    home = make_home(tmp_path)
    log = ProxyLog(home)
    log.record_failure("cc-x-1", "anthropic", "SELECTION_FAILED: the budget is too small",
                       b"{" + b" " * 400 + b"}", agent="claude-code", model="m")
    found = conversation(home, "ledger:cc-x-1")
    assert found is not None and found["failed_open"] == 1
    assert found["fail_opens"][0]["reason"].startswith("SELECTION_FAILED")
    assert found["series"][0]["mode"] == "failed_open"
    assert found["last_fail_open"].startswith("SELECTION_FAILED")


def test_view_prints_the_whole_url_and_run_names_the_page_on_its_start_line(tmp_path, capfd):
    home = make_home(tmp_path)
    assert main(["--home", str(home), "view", "--no-browser", "--port", "9911"]) == 0
    token = view_token(home)
    assert capfd.readouterr().out.strip() == (
        f"http://127.0.0.1:9911/context-paging/?token={token}")
    provider = FakeProvider()
    with Served(provider) as upstream:
        script = ("import os, urllib.request; base = os.environ['ANTHROPIC_BASE_URL']; "
                  "page = urllib.request.urlopen(base + '/context-paging/api/conversations"
                  f"?token={token}').read(); print(page.decode())")
        code = main(["--home", str(home), "run", "--upstream-anthropic", upstream.url, "--",
                     sys.executable, "-c", script])
    assert code == 0
    captured = capfd.readouterr()
    assert json.loads(captured.out) == {"conversations": []}
    assert re.search(r"live view at http://127\.0\.0\.1:\d+/context-paging/\?token=" + token,
                     captured.err)


def test_distillations_edits_show_what_was_cut_and_how_much(tmp_path):
    home = make_home(tmp_path, budget=8000)
    config = home / "config.toml"
    config.write_text(config.read_text().replace("[distill]\nenabled = false",
                                                 "[distill]\nenabled = true"))
    stack = Live(home)
    try:
        run_conversation(stack, 40)
        ref = stack.get(API).json()["conversations"][0]["session"]
        detail = stack.get(f"{API}/{ref}").json()
    finally:
        stack.close()
    edits = detail["distilled"]
    assert edits and detail["series"][-1]["distilled"] == len(edits)
    for edit in edits:
        assert edit["saved_tokens"] > 0 and edit["recall"].startswith("recall(")
        assert edit.get("tool_call_id") or edit.get("history_id")


@pytest.mark.parametrize("name, api, agent", [
    ("claude-code-default", wire.ANTHROPIC, "claude-code"),
    ("codex-default", wire.RESPONSES, "codex"),
    ("pi-anthropic", wire.ANTHROPIC, "anthropic"),  # recorded without its fetch's headers
])
def test_each_agent_is_named_by_the_headers_it_sends(name, api, agent):
    recorded = json.loads((PROJECT / "tests" / "fixtures" / "requests" / f"{name}.json")
                          .read_text())
    headers = {k.lower(): v for k, v in recorded["headers"].items()}
    assert wire.agent_name(api, headers) == agent
    assert wire.agent_name(api, {**headers, "sec-fetch-mode": "cors"}) == (
        "pi" if agent == "anthropic" else agent)


def test_the_list_reads_a_conversations_series_again_only_when_it_changed(tmp_path):
    home = make_home(tmp_path)
    log = ProxyLog(home)
    for _ in range(3):
        log.record("cc-x-1", "anthropic", {"mode": "paged"}, sent=b"x" * 400, full=b"x" * 800,
                   previous=None)
    cached = Costs()
    first = conversations(home, cached)[0]["cost"]
    assert conversations(home, cached)[0]["cost"] is first  # the same value, not read again
    assert first == conversation(home, "ledger:cc-x-1")["cost"]
    log.record("cc-x-1", "anthropic", {"mode": "paged"}, sent=b"x" * 400, full=b"x" * 1600,
               previous=None)
    again = conversations(home, cached)[0]["cost"]
    assert again is not first and again["full"] > first["full"]
    assert again == conversation(home, "ledger:cc-x-1")["cost"]
