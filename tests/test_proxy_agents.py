"""Each agent's recorded request shapes through the proxy, over real HTTP, against the fake
provider: what reaches the provider keeps the agent's standing context, one agent session is
one ledger conversation, and the window does not work against itself."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx2 as httpx
import pytest
from context_paging.index.home.proxied import conversation_stats
from context_paging.server.proxy import wire

from tests.test_agent_shapes import recorded
from tests.test_proxy import Stack, make_home

OUTPUT = "\n".join(f"step output line {n}: value {n * 7}" for n in range(120))  # ~4,000 chars


@pytest.fixture
def small(tmp_path) -> Iterator[Stack]:
    s = Stack(make_home(tmp_path, budget=6000))
    yield s
    s.close()


def send(stack: Stack, name: str, body: dict, headers: dict | None = None) -> None:
    fixture = recorded(name)
    reply = httpx.post(stack.url + fixture["path"], content=json.dumps(body).encode(),
                       headers={"content-type": "application/json", **fixture["headers"],
                                **(headers or {})}, timeout=30)
    assert reply.status_code == 200


def claude_turns(name: str, steps: int) -> Iterator[dict]:
    """Successive bodies of a Claude Code (or Pi) session that opened as recorded: each step a
    Bash call and its output, the newest message marked for the cache as the agents do."""
    body = recorded(name)["body"]
    messages = [m for m in body["messages"][:2] if m["role"] != "assistant"]
    for step in range(steps):
        yield {**body, "messages": [*messages[:-1], marked(messages[-1])]}
        call = f"toolu_s{step}"
        messages += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "Bash",
                                               "input": {"command": f"cat part{step}"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                          "content": f"marker-{step}\n{OUTPUT}"}]}]


def marked(message: dict) -> dict:
    content = message["content"]
    if isinstance(content, str):
        return message
    last = {**content[-1], "cache_control": {"type": "ephemeral"}}
    return {**message, "content": [*content[:-1], last]}


def upstream(stack: Stack, path: str = "/v1/messages") -> list[dict]:
    return [r.json() for r in stack.provider.requests if r.path == path]


def ledgers(stack: Stack) -> set[str]:
    return {p.stem for p in (stack.home / "proxy").glob("*.json") if p.stem != "last"}


def test_claude_codes_default_model_pages_and_keeps_its_system_messages(small):
    for body in claude_turns("claude-code-default", 14):
        send(small, "claude-code-default", body)
    sent = upstream(small)
    listing = recorded("claude-code-default")["body"]["messages"][1]
    assert listing["role"] == "system"
    assert all(listing in body["messages"] for body in sent)
    assert "Context paging notice" in json.dumps(sent[-1]["messages"][0])
    assert len(sent[-1]["messages"]) < 14
    (tally,) = [conversation_stats(small.home, f"ledger:{n}") for n in ledgers(small)]
    assert tally["requests"] == 14


def codex_turns(steps: int) -> Iterator[dict]:
    """Successive bodies of a Codex (default model) session that opened as recorded: each step
    a reasoning item, an ``exec`` call and its output; Codex's configuration_update and
    deferred tool namespace arrive after the first output, as it sends them."""
    body = recorded("codex-default")["body"]
    items = body["input"][:7]
    late = body["input"][10:12]
    for step in range(steps):
        yield {**body, "input": list(items)}
        call = f"call_s{step}"
        items += [{"type": "reasoning", "summary": [], "encrypted_content": f"enc{step}"},
                  {"type": "custom_tool_call", "call_id": call, "name": "exec",
                   "input": f"text(await tools.exec_command({{cmd: 'cat part{step}'}}))"},
                  {"type": "custom_tool_call_output", "call_id": call, "output": [
                      {"type": "input_text", "text": f"marker-{step}\n{OUTPUT}"}]}]
        if step == 0:
            items += late


def test_codexs_default_model_keeps_its_tools_and_instructions_in_every_paged_request(small):
    for body in codex_turns(14):
        send(small, "codex-default", body)
    sent = upstream(small, "/v1/responses")
    resident = [item for item in recorded("codex-default")["body"]["input"]
                if item["type"] != "message" or item["role"] != "user"
                or "<environment_context>" in item["content"][0]["text"]][:6]
    late = recorded("codex-default")["body"]["input"][10:12]
    assert late[0]["type"] == "configuration_update"
    for index, body in enumerate(sent):
        for item in resident + (late if index else []):
            assert item in body["input"], (index, item.get("type"))
    assert "Context paging notice" in json.dumps(sent[-1]["input"])
    assert len(sent[-1]["input"]) < len(list(codex_turns(14))[-1]["input"])


def test_a_codex_request_whose_standing_context_exceeds_the_budget_is_forwarded_unchanged(
        tmp_path, caplog):
    stack = Stack(make_home(tmp_path, budget=500))
    try:
        body = next(codex_turns(1))
        send(stack, "codex-default", body)
        assert stack.provider.requests[-1].json() == body
        assert "Resident input" in caplog.text
    finally:
        stack.close()


def test_one_claude_code_session_is_one_ledger_while_markers_move_and_tools_grow(small):
    bodies = list(claude_turns("claude-code-sonnet", 4))
    more_tools = [*bodies[0]["tools"], {"name": "mcp__context-paging__search_history",
                                        "description": "Search", "input_schema": {}}]
    for index, body in enumerate(bodies):
        send(small, "claude-code-sonnet", {**body, "tools": more_tools} if index > 1 else body)
    assert len(ledgers(small)) == 1


def test_two_pi_sessions_that_open_alike_get_a_ledger_each_and_keep_it(small):
    first = list(claude_turns("pi-anthropic", 5))
    second = [json.loads(json.dumps(b).replace("part", "other")) for b in first]
    for a, b in zip(first, second, strict=True):  # interleaved, as two terminals would
        send(small, "pi-anthropic", a)
        send(small, "pi-anthropic", b)
    assert first[0] == second[0]  # the same opening request
    names = ledgers(small)
    assert len(names) == 2
    # The second session's first request is the first one's, byte for byte (nothing can tell
    # it from a retry), so it is counted there; from its second request on it has its own.
    assert sorted(conversation_stats(small.home, f"ledger:{n}")["requests"]
                  for n in names) == [4, 6]
    for name in names:  # neither ledger holds the other session's turns
        stored = small.history.ledger.session(f"ledger:{name}").path.read_text()
        assert ("cat part1" in stored) != ("cat other1" in stored)


def test_session_ids_that_sanitize_alike_stay_apart():
    assert wire.safe_name("team/a") != wire.safe_name("team-a")
    assert wire.safe_name("team_a") not in (wire.safe_name("team/a"), wire.safe_name("team-a"))
    assert wire.safe_name("5b1e7c2a-0d1f-4c55") == "5b1e7c2a-0d1f-4c55"
    long = wire.safe_name("x" * 200)
    assert len(long) < 100 and long != wire.safe_name("x" * 201)


def test_claude_codes_project_context_is_sent_once_after_paging(small):
    for body in claude_turns("claude-code-sonnet", 14):
        send(small, "claude-code-sonnet", body)
    sent = upstream(small)
    reminder = recorded("claude-code-sonnet")["body"]["messages"][0]["content"][0]["text"]
    assert reminder.startswith("<system-reminder>")
    assert "Context paging notice" in json.dumps(sent[-1]["messages"][0])
    for body in sent:
        assert json.dumps(body["messages"]).count(json.dumps(reminder)) == 1


def test_the_notice_names_the_cli_commands_for_an_agent_without_the_recovery_tools(small):
    for body in claude_turns("pi-anthropic", 14):
        send(small, "pi-anthropic", body)
    notice = json.dumps(upstream(small)[-1]["messages"][0])
    assert "context-paging search" in notice and "--session ledger:" in notice
    assert "search_history" not in notice


def test_the_notice_names_the_tools_for_an_agent_that_has_them(small):
    mcp = {"name": "mcp__context-paging__search_history", "description": "Search",
           "input_schema": {"type": "object"}}
    for body in claude_turns("claude-code-sonnet", 14):
        send(small, "claude-code-sonnet", {**body, "tools": [*body["tools"], mcp]})
    notice = json.dumps(upstream(small)[-1]["messages"][0])
    assert "search_history" in notice and "context-paging search" not in notice


def test_a_websocket_upgrade_is_refused_at_once_and_never_forwarded(small):
    reply = httpx.get(small.url + "/v1/responses", timeout=10, headers={
        "connection": "Upgrade", "upgrade": "websocket", "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert reply.status_code == 426  # Codex posts over HTTP at once after this one
    assert "WebSocket" in reply.json()["error"]["message"]
    assert small.provider.requests == []


def test_uvicorns_websocket_warning_never_reaches_the_agents_terminal():
    import logging
    import socket

    from context_paging.server.proxy.commands import _server

    with socket.socket() as sock:
        _server(None, sock)  # type: ignore[arg-type]
    quiet = logging.getLogger("uvicorn.error")
    warning = logging.LogRecord("uvicorn.error", logging.WARNING, "", 0,
                                "Unsupported upgrade request.", None, None)
    other = logging.LogRecord("uvicorn.error", logging.WARNING, "", 0, "Other.", None, None)
    assert not quiet.filter(warning) and quiet.filter(other)


def test_run_routes_pi_through_a_models_file_of_its_own(tmp_path, monkeypatch, capfd):
    import os
    import stat
    import sys

    from context_paging.server.cli import main

    from tests.fake_provider import FakeProvider, Served

    user = tmp_path / "user"
    agent = user / ".pi" / "agent"
    (agent / "sessions").mkdir(parents=True)
    (agent / "models.json").write_text('{"providers": {"mine": {"baseUrl": "http://x"}}}')
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.delenv("PI_CODING_AGENT_DIR", raising=False)
    pi = tmp_path / "bin" / "pi"  # stands in for Pi: reads its models file, posts, saves
    pi.parent.mkdir()
    pi.write_text(f"#!{sys.executable}\n" + (
        "import json, os, pathlib, urllib.request\n"
        "d = pathlib.Path(os.environ['PI_CODING_AGENT_DIR'])\n"
        "base = json.loads((d / 'models.json').read_text())['providers']['anthropic']['baseUrl']\n"
        "req = urllib.request.Request(base + '/v1/messages', method='POST', data=json.dumps("
        "{'model': 'm', 'max_tokens': 5, 'messages': [{'role': 'user', 'content': 'hi'}]})"
        ".encode(), headers={'x-api-key': 'k', 'content-type': 'application/json'})\n"
        "print(urllib.request.urlopen(req).status)\n"
        "(d / 'sessions' / 's.jsonl').write_text('{}')\n"))
    pi.chmod(pi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{pi.parent}{os.pathsep}{os.environ['PATH']}")
    provider = FakeProvider()
    with Served(provider) as upstream:
        code = main(["--home", str(make_home(tmp_path)), "run", "--upstream-anthropic",
                     upstream.url, "--", "pi", "-p", "hi"])
    assert code == 0 and capfd.readouterr().out.strip() == "200"
    assert [r.path for r in provider.requests] == ["/v1/messages"]
    assert (agent / "sessions" / "s.jsonl").exists()  # in the user's own folder
    assert json.loads((agent / "models.json").read_text()) == {
        "providers": {"mine": {"baseUrl": "http://x"}}}  # unchanged


def test_doctor_counts_each_conversations_requests_and_flags_one_that_always_fails_open(
        tmp_path):
    from context_paging.server.setup.agents import paging_report

    stack = Stack(make_home(tmp_path, budget=600))
    try:
        assert paging_report(stack.home) == (True, [])
        for body in codex_turns(3):  # its standing context alone is above 600 tokens
            send(stack, "codex-default", body)
        for body in claude_turns("claude-code-sonnet", 6):
            send(stack, "claude-code-sonnet", body)
        ok, lines = paging_report(stack.home)
    finally:
        stack.close()
    assert not ok
    (codex,) = [line for line in lines if "(responses)" in line]
    assert codex.startswith("  ✗ ")
    assert "3 requests — 0 paged, 0 within budget, 3 failed open" in codex
    assert "RESIDENT_INPUT_TOO_LARGE" in codex
    (claude,) = [line for line in lines if "(anthropic)" in line]
    assert "6 requests" in claude and "0 failed open" in claude and "✗" not in claude
    assert " 0 paged" not in claude  # the budget is crossed: some requests were paged


@pytest.mark.parametrize("registered", [True, False])
def test_codex_is_told_the_tools_when_its_deferred_namespace_lists_the_server(small,
                                                                              registered):
    for body in codex_turns(14):
        items = [i for i in body["input"] if registered or "Deferred tool" not in json.dumps(i)]
        send(small, "codex-default", {**body, "input": items})
    notice = next(i for i in upstream(small, "/v1/responses")[-1]["input"]
                  if "Context paging notice" in json.dumps(i))
    text = notice["content"][0]["text"]
    assert ("search_history" in text) is registered
    assert ("context-paging search" in text) is not registered


def test_codexs_notice_names_its_ledger_session_after_a_dozen_resident_items(small):
    for body in codex_turns(14):
        send(small, "codex-default", body)
    sent = upstream(small, "/v1/responses")[-1]["input"]
    at = next(k for k, i in enumerate(sent) if "Context paging notice" in json.dumps(i))
    assert at >= 6  # after Codex's tool list, developer messages and environment
    assert 'Session for those tools: "ledger:oa-' in sent[at]["content"][0]["text"]
