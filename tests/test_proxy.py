"""The model-API proxy, driven by the official Anthropic SDK against a fake provider.

Each test starts the fake provider and the proxy in front of it (real HTTP on loopback ports),
sends requests the way Claude Code does, and checks what reached the provider byte for byte.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2 as httpx
import pytest
from context_paging.index.home.proxied import ProxyLog, conversation_stats, last_proxied
from context_paging.index.stats import render as render_stats
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import make_history
from context_paging.server.proxy import wire
from context_paging.server.proxy.app import Proxy, Upstreams

from tests.fake_provider import FakeProvider, Recorded, Reply, Served, anthropic_stream

SESSION = "5b1e7c2a-0d1f-4c55-9d7e-0a1b2c3d4e5f"
USER_ID = json.dumps({"device_id": "dev", "account_uuid": "", "session_id": SESSION})
SYSTEM = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.90; cch=ab12;"},
          {"type": "text", "text": "You are a coding agent.",
           "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "Bash", "description": "Run a command",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
         {"name": "Read", "description": "Read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


def make_home(tmp_path: Path, budget: int = 4000, paging: bool = True) -> Path:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    empty = tmp_path / "none"
    (home / "config.toml").write_text(
        f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
        f'[paging]\nestimator = "chars4"\ntoken_budget = {budget}\n'
        f'enabled = {"true" if paging else "false"}\n[distill]\nenabled = false\n')
    return home


class Stack:
    def __init__(self, home: Path, select=None) -> None:
        self.home = home
        self.history = make_history(load_settings(home=str(home)))
        self.provider = FakeProvider()
        self.upstream = Served(self.provider)
        upstreams = Upstreams(anthropic=self.upstream.url, openai=self.upstream.url,
                              gemini=self.upstream.url)
        self.proxy_app = Proxy(select or self.history.select_context, upstreams,
                               ProxyLog(home))
        self.proxy = Served(self.proxy_app, lifespan="on")
        self.url = self.proxy.url
        self.clients: list = []  # SDK clients, closed with the stack (no socket left to the GC)

    def anthropic(self, **kwargs) -> anthropic.Anthropic:
        client = anthropic.Anthropic(base_url=self.url, api_key="sk-ant-test", max_retries=0,
                                     **kwargs)
        self.clients.append(client)
        return client

    def openai(self, api_key: str = "sk-openai-test"):
        import openai

        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.proxy.close()
        self.upstream.close()
        self.history.close()


@pytest.fixture
def stack(tmp_path) -> Iterator[Stack]:
    s = Stack(make_home(tmp_path))
    yield s
    s.close()


def tool_turn(i: int) -> tuple[dict, dict]:
    call = f"toolu_{i:03d}"
    assistant = {"role": "assistant", "content": [
        {"type": "text", "text": f"Step {i}: looking at module_{i}."},
        {"type": "tool_use", "id": call, "name": "Bash",
         "input": {"command": f"cat src/module_{i}.py"}}]}
    output = "\n".join(f"marker-turn-{i} line {n}: value = {i * 100 + n}" for n in range(40))
    result = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call, "content": output}]}
    return assistant, result


def claude_code_conversation(turns: int) -> Iterator[list[dict]]:
    """The messages array of each successive request of a Claude Code-like session: a request
    every five tool calls, each answered by tool use."""
    messages: list[dict] = [{"role": "user", "content": [
        {"type": "text", "text": "Refactor the modules, starting with module_0."}]}]
    for i in range(turns):
        yield list(messages)
        assistant, result = tool_turn(i)
        messages += [assistant, result]
        if i % 5 == 4:
            yield list(messages)
            messages += [{"role": "assistant", "content": [{"type": "text",
                                                            "text": f"Done with batch {i}."}]},
                         {"role": "user", "content": [{"type": "text",
                                                       "text": f"Now continue after {i}."}]}]


def check_pairs(messages: list[dict]) -> None:
    """Every tool_use is answered in the next message and every tool_result has its call."""
    for index, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        if message["role"] == "assistant":
            calls = {b["id"] for b in blocks if b.get("type") == "tool_use"}
            if calls:
                following = messages[index + 1]["content"] if index + 1 < len(messages) else []
                answered = {b.get("tool_use_id") for b in following if isinstance(b, dict)}
                assert calls <= answered, (index, calls, answered)
        else:
            results = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
            if results:
                before = messages[index - 1] if index else {"content": []}
                calls = {b.get("id") for b in before["content"] if isinstance(b, dict)}
                assert results <= calls, (index, results, calls)


def test_a_long_claude_code_conversation_pages_and_keeps_its_prefix_until_the_cut_moves(stack):
    client = stack.anthropic()
    sent = []
    for messages in claude_code_conversation(30):
        with client.messages.stream(model="claude-fake", max_tokens=1024, system=SYSTEM,
                                    tools=TOOLS, messages=messages,
                                    metadata={"user_id": USER_ID}) as stream:
            stream.get_final_message()
        sent.append(messages)
    upstream = [r for r in stack.provider.requests if r.path == "/v1/messages"]
    assert len(upstream) == len(sent)
    bodies = [wire.read_body(r.body, "messages") for r in upstream]
    ledger = f"ledger:{wire.conversation_key(wire.ANTHROPIC, bodies[0].value, {})}"
    assert SESSION in ledger
    last = bodies[-1].value["messages"]
    assert len(last) < len(sent[-1]) / 3  # paged under the 4,000-token budget
    first_text = last[0]["content"][0]["text"]
    assert "Context paging notice" in first_text and f'"{ledger}"' in first_text
    advances = 0
    for before, after in zip(bodies, bodies[1:], strict=False):
        check_pairs(after.value["messages"])
        assert after.value["system"] == SYSTEM and after.value["tools"] == TOOLS
        if before.value["messages"][0] != after.value["messages"][0]:
            advances += 1
            continue
        end = before.spans["messages"][1] - 1  # up to the closing bracket
        assert after.raw[:end] == before.raw[:end]
    assert 1 <= advances <= len(bodies) // 4  # cut rarely, in big steps
    # the whole conversation stays in the ledger: the first evicted output is one call away
    found = stack.history.search("marker-turn-0", ledger, "session", (), (), None, 3)
    assert found.references and found.references[0]["session"] == ledger
    assert last_proxied(stack.home) == ledger
    tally = conversation_stats(stack.home, ledger)
    assert tally["requests"] == len(sent) and tally["cut_advances"] >= advances
    assert tally["sent_tokens"] < tally["full_tokens"]


def test_the_recovery_tools_default_to_the_conversation_the_proxy_saw_last(stack):
    client = stack.anthropic()
    for messages in claude_code_conversation(15):
        client.messages.create(model="claude-fake", max_tokens=10, system=SYSTEM, tools=TOOLS,
                               messages=messages, metadata={"user_id": USER_ID})
    body = stack.provider.requests[0].json()  # before any paging: the conversation's start
    ledger = f"ledger:{wire.conversation_key(wire.ANTHROPIC, body, {})}"
    # another process (the MCP server) over the same home, with no session passed
    other = make_history(load_settings(home=str(stack.home)))
    try:
        assert other.resolve_default(None) == ledger
        found = other.search("marker-turn-0", None, "session", (), (), None, 3)
        assert found.references[0]["session"] == ledger
        stats = other.stats(None)
        assert stats.input_measured  # calibrated with the provider's usage of each reply
        assert stats.proxy is not None and stats.proxy.requests == 18
        assert 0 < stats.proxy.sent_tokens < stats.proxy.full_tokens
        assert stats.proxy.cut_advances >= 1 and 0 < stats.proxy.prefix_share < 1
        text = render_stats(stats)
        assert "PROXY" in text and "Cut advances" in text and "Repeated prefix" in text
    finally:
        other.close()


def test_system_tools_and_every_other_field_reach_the_provider_byte_for_byte(stack):
    messages = []
    for assistant, result in (tool_turn(i) for i in range(12)):
        messages += [assistant, result]
    body = {"model": "claude-fake", "max_tokens": 99, "temperature": 0.25,
            "system": SYSTEM, "tools": TOOLS, "metadata": {"user_id": USER_ID},
            "messages": [{"role": "user", "content": "start"}, *messages[:-1],
                         {"role": "user", "content": messages[-1]["content"]}],
            "thinking": {"type": "enabled", "budget_tokens": 2048}}
    # odd spacing and escapes that a re-serialization would change
    raw = json.dumps(body, indent=1, ensure_ascii=True).encode()
    response = httpx.post(f"{stack.url}/v1/messages?beta=true", content=raw, headers={
        "x-api-key": "sk-ant-secret", "anthropic-version": "2023-06-01",
        "anthropic-beta": "a-2025,b-2026", "content-type": "application/json"})
    assert response.status_code == 200
    got = stack.provider.requests[-1]
    assert got.query == "beta=true"
    assert got.body != raw  # paged
    before, after = wire.read_body(raw, "messages"), wire.read_body(got.body, "messages")
    for key in body.keys() - {"messages"}:
        assert after.raw[slice(*after.spans[key])] == before.raw[slice(*before.spans[key])]
    assert list(after.value) == list(before.value)
    kept = after.value["messages"][1:]
    assert kept == before.value["messages"][-len(kept):]
    for item_span in after.items[1:]:  # kept messages are their original bytes
        assert after.raw[slice(*item_span)] in before.raw
    assert got.headers["x-api-key"] == "sk-ant-secret"
    assert got.headers["anthropic-beta"] == "a-2025,b-2026"
    assert got.headers["anthropic-version"] == "2023-06-01"


def test_streamed_bytes_equal_the_providers(stack):
    reply = anthropic_stream([{"type": "text", "text": "hello"},
                              {"type": "tool_use", "id": "toolu_x", "name": "Bash",
                               "input": {"command": "ls"}}])
    stack.provider.queue.append(reply)
    body = {"model": "claude-fake", "max_tokens": 10, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    received = b""
    with httpx.stream("POST", f"{stack.url}/v1/messages", json=body,
                      headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["request-id"] == "req_fake"
        for chunk in response.iter_raw():
            received += chunk
    assert received == reply.body
    # and the SDK reads the same stream into a message
    stack.provider.queue.append(reply)
    with stack.anthropic().messages.stream(model="claude-fake", max_tokens=10, messages=[
            {"role": "user", "content": "hi"}]) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"command": "ls"}


def test_stream_chunks_reach_the_client_before_the_provider_has_finished(stack):
    stack.provider.gate = threading.Event()
    reply = anthropic_stream([{"type": "text", "text": "hello"}], "end_turn")
    stack.provider.queue.append(reply)
    body = {"model": "claude-fake", "max_tokens": 10, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", f"{stack.url}/v1/messages", json=body,
                      headers={"x-api-key": "k"}) as response:
        chunks = response.iter_raw()
        first = next(chunks)  # the provider is still holding the rest back
        stack.provider.gate.set()
        rest = b"".join(chunks)
    assert stack.provider.gate_opened == [True]  # opened by us, not by its timeout
    assert first + rest == reply.body and first.startswith(b"event: message_start")


def test_count_tokens_and_unknown_paths_pass_through_untouched(stack):
    client = stack.anthropic()
    messages = [{"role": "user", "content": "hi"}]
    counted = client.messages.count_tokens(model="claude-fake", messages=messages)
    assert counted.input_tokens == 1234
    assert stack.provider.requests[-1].path == "/v1/messages/count_tokens"
    raw = b'{ "model" : "m",  "messages": [ {"role":"user","content":"\\u00e9"} ] }'
    for method, path in (("POST", "/v1/messages/count_tokens"), ("GET", "/v1/models?limit=5"),
                         ("POST", "/api/event_logging/batch"), ("PUT", "/v1/whatever")):
        response = httpx.request(method, stack.url + path, content=raw if method != "GET" else b"",
                                 headers={"x-api-key": "k", "x-custom": "kept"})
        assert response.status_code == 200
        got = stack.provider.requests[-1]
        assert (got.method, got.path + (f"?{got.query}" if got.query else "")) == (method, path)
        assert got.body == (raw if method != "GET" else b"")
        assert got.headers["x-custom"] == "kept" and got.headers["x-api-key"] == "k"
    assert last_proxied(stack.home) is None  # nothing was a conversation


def test_a_provider_529_reaches_the_client_with_its_body(stack):
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
             "request_id": "req_529"}
    stack.provider.queue.append(Reply(529, (("content-type", "application/json"),),
                                      (json.dumps(error).encode(),)))
    with pytest.raises(anthropic.APIStatusError) as caught:
        stack.anthropic().messages.create(model="claude-fake", max_tokens=10,
                                          messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 529
    assert caught.value.body == error


def test_an_internal_fault_forwards_the_original_body_and_logs_one_line(tmp_path, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("selector exploded")

    s = Stack(make_home(tmp_path), select=broken)
    try:
        raw = json.dumps({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": "hi"}]}, indent=2).encode()
        with caplog.at_level(logging.WARNING, logger="context_paging"):
            response = httpx.post(f"{s.url}/v1/messages", content=raw,
                                  headers={"x-api-key": "sk-ant-secret"})
        assert response.status_code == 200
        assert s.provider.requests[-1].body == raw
        lines = [r.getMessage() for r in caplog.records if r.name == "context_paging"]
        assert len(lines) == 1 and "selector exploded" in lines[0]
        assert "sk-ant-secret" not in caplog.text
    finally:
        s.close()


@pytest.mark.parametrize("raw", [b'{"model": "m", "messages": "not a list"}', b"[1, 2]",
                                 b"\xff\xfe", b'{"messages": [1]}', b'{"a": 1} trailing'])
def test_an_unknown_shape_is_forwarded_unchanged(stack, raw):
    response = httpx.post(f"{stack.url}/v1/messages", content=raw)
    assert response.status_code == 200
    assert stack.provider.requests[-1].body == raw


def test_with_paging_disabled_the_original_bytes_go_upstream(tmp_path):
    s = Stack(make_home(tmp_path, paging=False))
    try:
        messages = []
        for assistant, result in (tool_turn(i) for i in range(12)):
            messages += [assistant, result]
        raw = json.dumps({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": "go"}, *messages, {"role": "assistant", "content": "x"},
            {"role": "user", "content": "more"}]}).encode()
        httpx.post(f"{s.url}/v1/messages", content=raw)
        assert s.provider.requests[-1].body == raw
    finally:
        s.close()


def test_side_calls_and_subagents_get_their_own_ledger_sessions():
    headers = {"x-claude-code-session-id": SESSION}
    main = {"messages": [{"role": "user", "content": "task"}], "tools": TOOLS}
    title = {"messages": [{"role": "user", "content": "task"}]}
    legacy = {"metadata": {"user_id": f"user_abc_account__session_{SESSION}"}, **main}
    keys = {wire.conversation_key(wire.ANTHROPIC, body, h)
            for body, h in ((main, headers), (title, headers))}
    assert len(keys) == 2 and all(SESSION in k for k in keys)
    assert (wire.conversation_key(wire.ANTHROPIC, legacy, {})
            == wire.conversation_key(wire.ANTHROPIC, main, headers))


def test_recorded_request_helper_reads_json():
    assert Recorded("POST", "/", "", {}, b'{"a": 1}').json() == {"a": 1}


@pytest.mark.parametrize(("api", "streaming", "chunks", "expected"), [
    (wire.ANTHROPIC, True, [b'event: message_start\ndata: {"type":"message_start","message":'
                            b'{"usage":{"input_tokens":7,"cache_read_input_tokens":900,',
                            b'"cache_creation_input_tokens":40,"output_tokens":1}}}\n\n',
                            b'data: {"type":"message_delta","usage":{"output_tokens":55}}\n\n'],
     {"input_tokens": 7, "cache_read_tokens": 900, "cache_write_tokens": 40,
      "output_tokens": 55}),
    (wire.RESPONSES, True, [b'data: {"type":"response.completed","response":{"usage":{"input_'
                            b'tokens":1000,"input_tokens_details":{"cached_tokens":768},'
                            b'"output_tokens":20}}}\n\n'],
     {"input_tokens": 232, "cache_read_tokens": 768, "output_tokens": 20}),
    (wire.CHAT, False, [b'{"usage":{"prompt_tokens":50,"completion_tokens":3,', b'"x":1}}'],
     {"input_tokens": 50, "output_tokens": 3}),
    (wire.ANTHROPIC, False, [b"not json"], None),
])
def test_the_usage_tap_reads_what_the_provider_counted(api, streaming, chunks, expected):
    tap = wire.UsageTap(api, streaming)
    for chunk in chunks:
        tap.feed(chunk)
    assert tap.result() == expected


def test_claude_codes_project_context_stays_after_its_first_message_leaves(stack):
    reminder = {"type": "text", "text": "<system-reminder>\n# claudeMd\nclaude-md-marker: use "
                "tabs\n</system-reminder>"}
    client = stack.anthropic()
    for messages in claude_code_conversation(20):
        first = {"role": "user", "content": [reminder, *messages[0]["content"]]}
        client.messages.create(model="claude-fake", max_tokens=10, system=SYSTEM, tools=TOOLS,
                               messages=[first, *messages[1:]], metadata={"user_id": USER_ID})
    bodies = [r.json()["messages"] for r in stack.provider.requests]
    assert "Context paging notice" in bodies[-1][0]["content"][0]["text"]
    for messages in bodies:
        assert json.dumps(messages).count("claude-md-marker") == 1
        assert reminder in messages[0]["content"]
    assert bodies[-1][0]["content"][1] == reminder  # right after the notice
    raws = [wire.read_body(r.body, "messages") for r in stack.provider.requests]
    for before, after in zip(raws, raws[1:], strict=False):
        if before.value["messages"][0] == after.value["messages"][0]:
            end = before.spans["messages"][1] - 1
            assert after.raw[:end] == before.raw[:end]


def test_forget_takes_effect_in_a_running_proxy(stack):
    from context_paging.server.histories import forget_sessions

    client = stack.anthropic()
    requests = list(claude_code_conversation(6))
    for messages in requests[:3]:
        client.messages.create(model="claude-fake", max_tokens=64, system=SYSTEM, tools=TOOLS,
                               messages=messages, metadata={"user_id": USER_ID})
    ledger = stack.history.current_session
    assert conversation_stats(stack.home, ledger)["requests"] == 3
    forgotten = forget_sessions(load_settings(home=str(stack.home)), [ledger])
    assert forgotten[0].anything and conversation_stats(stack.home, ledger) is None
    client.messages.create(model="claude-fake", max_tokens=64, system=SYSTEM, tools=TOOLS,
                           messages=requests[3], metadata={"user_id": USER_ID})
    tally = conversation_stats(stack.home, ledger)
    assert tally["requests"] == 1  # counted from the forget on, not the old tally written back
    assert tally["cut_advances"] <= 1
    assert last_proxied(stack.home) == ledger
    # the ledger holds the conversation as sent since, whole and readable
    found = stack.history.search("marker-turn-0", ledger, "session", (), (), None, 3)
    assert found.references and found.references[0]["session"] == ledger
