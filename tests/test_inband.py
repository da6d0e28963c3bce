"""Recovery in band: the proxy offers the recovery tools, answers the model's calls to them with
follow-up requests, and puts the hidden exchanges back in place in every later request.

Real HTTP on loopback: an agent-like client posts Anthropic requests to the proxy, the fake
provider answers with recorded reply shapes (streamed events and JSON bodies).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from context_paging.index.home.forget import forget
from context_paging.index.home.proxied import ProxyLog, conversation_stats
from context_paging.index.stats import render as render_stats
from context_paging.server.commands.docs import offered_tools, snapshot_tools
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import make_history
from context_paging.server.proxy import inband, wire
from context_paging.server.proxy.app import Proxy, Upstreams
from context_paging.server.setup.agents import paging_report

from tests.fake_provider import (
    FakeProvider,
    Reply,
    Served,
    anthropic_message,
    anthropic_stream,
)
from tests.test_proxy import SYSTEM, TOOLS, USER_ID, check_pairs, make_home, tool_turn

OFFERED = {"search_history", "read_context_output", "recall"}


class Stack:
    """The fake provider, and a proxy with in-band recovery in front of it (restartable)."""

    def __init__(self, home: Path, mode: str = "auto", rounds: int = 3) -> None:
        self.home = home
        self.mode, self.rounds = mode, rounds
        self.provider = FakeProvider()
        self.upstream = Served(self.provider)
        self.history = None
        self.proxy = None
        self.start()

    def start(self) -> None:
        self.history = make_history(load_settings(home=str(self.home)))
        upstreams = Upstreams(anthropic=self.upstream.url, openai=self.upstream.url,
                              gemini=self.upstream.url)
        recovery = inband.InBand(self.history, self.home, self.mode, self.rounds)
        self.app = Proxy(self.history.select_context, upstreams, ProxyLog(self.home),
                         recovery=recovery)
        self.proxy = Served(self.app, lifespan="on")
        self.client = httpx.Client(base_url=self.proxy.url, timeout=30)

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        self.client.close()
        self.proxy.close()
        self.history.close()

    def close(self) -> None:
        self.stop()
        self.upstream.close()

    def post(self, messages: list[dict], stream: bool, tools: list[dict] = TOOLS,
             user_id: str = USER_ID) -> httpx.Response:
        body = {"model": "claude-fake", "max_tokens": 100, "system": SYSTEM, "tools": tools,
                "messages": messages, "metadata": {"user_id": user_id}}
        if stream:
            body["stream"] = True
        return self.client.post("/v1/messages", content=json.dumps(body).encode(),
                                headers={"x-api-key": "sk-ant-test",
                                         "anthropic-version": "2023-06-01",
                                         "content-type": "application/json"})

    def upstream_bodies(self) -> list[wire.Body]:
        return self.upstream_bodies_of("messages")

    def upstream_bodies_of(self, field: str, path: str = "") -> list[wire.Body]:
        path = path or {"messages": "/v1/messages", "input": "/v1/responses"}[field]
        return [wire.read_body(r.body, field) for r in self.provider.requests
                if r.path == path]


@pytest.fixture
def stack(tmp_path) -> Iterator[Stack]:
    s = Stack(make_home(tmp_path))
    yield s
    s.close()


def events(text: str) -> list[tuple[str, dict]]:
    out = []
    for part in text.replace("\r\n", "\n").split("\n\n"):
        lines = part.strip().split("\n")
        name = next((x[6:].strip() for x in lines if x.startswith("event:")), "")
        data = [x[5:].strip() for x in lines if x.startswith("data:")]
        if data:
            out.append((name, json.loads("\n".join(data))))
    return out


def paged_conversation(s: Stack, turns: int = 14, user_id: str = USER_ID) -> list[dict]:
    """A conversation long enough that its start has left the window (4,000-token budget)."""
    messages: list[dict] = [{"role": "user", "content": [
        {"type": "text", "text": "Refactor the modules, starting with module_0."}]}]
    for i in range(turns):
        assistant, result = tool_turn(i)
        messages += [assistant, result]
        assert s.post(messages, stream=False, user_id=user_id).status_code == 200
    last = s.upstream_bodies()[-1].value["messages"]
    assert "Context paging notice" in json.dumps(last[0])
    return messages


SEARCH = {"type": "tool_use", "id": "toolu_inband_1", "name": "search_history",
          "input": {"query": "marker-turn-0"}}


def test_a_streamed_call_is_answered_in_band_and_the_agent_reads_one_reply(stack):
    messages = paged_conversation(stack)
    before = len(stack.provider.requests)
    stack.provider.queue.extend([
        anthropic_stream([{"type": "text", "text": "Let me look that up."}, SEARCH],
                         "tool_use", input_tokens=300),
        anthropic_stream([{"type": "text", "text": "Found: value = 5."}], "end_turn",
                         input_tokens=400)])
    reply = stack.post(messages, stream=True)
    assert reply.status_code == 200
    seen = events(reply.text)
    kinds = [name for name, _ in seen]
    assert kinds.count("message_start") == 1 and kinds.count("message_stop") == 1
    assert kinds[-2:] == ["message_delta", "message_stop"]
    starts = [d for name, d in seen if name == "content_block_start"]
    assert [d["index"] for d in starts] == [0, 1]
    assert all(d["content_block"]["type"] == "text" for d in starts)
    texts = [d["delta"]["text"] for name, d in seen if name == "content_block_delta"]
    assert texts == ["Let me look that up.", "Found: value = 5."]  # the first before the rest
    final = seen[-2][1]
    assert final["delta"]["stop_reason"] == "end_turn"
    assert final["usage"]["input_tokens"] == 700 and final["usage"]["output_tokens"] == 10
    assert "search_history" not in reply.text  # the agent never sees the proxy's call

    first, follow = stack.upstream_bodies()[before:]
    tools = [t["name"] for t in first.value["tools"]]
    assert tools == ["Bash", "Read", "search_history", "read_context_output", "recall"]
    bracket = first.spans["messages"][1] - 1
    assert follow.raw[:bracket] == first.raw[:bracket]  # the same request, two more messages
    hidden = follow.value["messages"][-2:]
    assert hidden[0]["content"][1]["name"] == "search_history"
    result = hidden[1]["content"][0]
    assert result["tool_use_id"] == SEARCH["id"] and "marker-turn-0" in result["content"]
    assert "«marker-turn-0»" in result["content"]

    # the agent's next request: the hidden exchange is back in place, with the same bytes
    agent_reply = {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look that up."},
        {"type": "text", "text": "Found: value = 5."}]}
    later = [*messages, agent_reply, {"role": "user", "content": "Thanks, go on."}]
    assert stack.post(later, stream=True).status_code == 200
    after = stack.upstream_bodies()[-1]
    assert after.value["messages"][-4:-2] == hidden
    assert after.value["messages"][-2]["content"] == [agent_reply["content"][1]]
    end = follow.spans["messages"][1] - 1
    assert after.raw[:end] == follow.raw[:end]  # the cached prefix holds
    check_pairs(after.value["messages"])

    # a restarted proxy reads the exchange back from the home and sends the same bytes
    stack.restart()
    assert stack.post(later, stream=True).status_code == 200
    assert stack.upstream_bodies()[-1].raw == after.raw

    # the ledger has it with its turn; the tally counts the call and that it found something
    opening = stack.upstream_bodies()[0].value  # before any paging: the conversation start
    ledger = f"ledger:{wire.conversation_key(wire.ANTHROPIC, opening, {})}"
    stored = [json.loads(line) for line in
              (stack.home / "ledger" / f"{ledger[7:]}.jsonl").read_text().splitlines()]
    stored = [line["message"] for line in stored if line["type"] == "message"]
    at = stored.index(hidden[0])  # the model's call, then the proxy's result, in place
    assert stored[at + 1] == hidden[1] and stored[at - 1] == messages[-1]
    # like every recovery call, the turn is kept out of search results (no loops)
    found = stack.history.search("marker-turn-0", ledger, "session", (), (), None, 5)
    assert [r["tools"] for r in found.references] == [["Bash"]]
    tally = conversation_stats(stack.home, ledger)
    assert tally["inband"] == {"search_history": {"calls": 1, "found": 1}}
    stats = stack.history.stats(ledger)
    assert (stats.proxy.inband_calls, stats.proxy.inband_found) == (1, 1)
    assert "Recovery in band" in render_stats(stats)
    _, lines = paging_report(stack.home)
    assert any("1 recovery call in band, 1 returned something" in line for line in lines)
    # forgetting the conversation deletes its hidden exchanges too
    hidden_file = stack.home / "inband" / f"{ledger[7:]}.jsonl"
    decision = hidden_file.with_suffix(".json")  # the offer and the notice's wording
    assert hidden_file.stat().st_mode & 0o777 == 0o600
    assert decision.stat().st_mode & 0o777 == 0o600
    forget(stack.home, ledger, None)
    assert not hidden_file.exists() and not decision.exists()


def test_a_json_reply_is_merged_with_its_continuation(stack):
    messages = paged_conversation(stack)
    stack.provider.queue.extend([
        anthropic_message([{"type": "text", "text": "Checking."}, SEARCH], "tool_use", 300),
        anthropic_message([{"type": "text", "text": "It was 5."}], "end_turn", 400)])
    reply = stack.post(messages, stream=False)
    assert reply.status_code == 200
    body = reply.json()
    assert body["content"] == [{"type": "text", "text": "Checking."},
                               {"type": "text", "text": "It was 5."}]
    assert body["stop_reason"] == "end_turn"
    assert body["usage"]["input_tokens"] == 700 and body["usage"]["output_tokens"] == 10
    assert int(reply.headers["content-length"]) == len(reply.content)
    follow = stack.upstream_bodies()[-1]
    assert "marker-turn-0" in follow.value["messages"][-1]["content"][0]["content"]


def test_a_reply_with_an_agent_tool_and_an_offered_one_gives_the_agent_its_own_call(stack):
    messages = paged_conversation(stack)
    before = len(stack.provider.requests)
    bash = {"type": "tool_use", "id": "toolu_agent_9", "name": "Bash",
            "input": {"command": "ls"}}
    stack.provider.queue.append(anthropic_stream(
        [{"type": "text", "text": "Two things."}, SEARCH, bash], "tool_use"))
    reply = stack.post(messages, stream=True)
    seen = events(reply.text)
    starts = [d["content_block"] for name, d in seen if name == "content_block_start"]
    assert [b["type"] for b in starts] == ["text", "tool_use"] and starts[1]["name"] == "Bash"
    assert [d["index"] for name, d in seen if name == "content_block_start"] == [0, 1]
    assert seen[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert len(stack.provider.requests) == before + 1  # no follow-up: the agent runs its tool
    later = [*messages, {"role": "assistant", "content": [
        {"type": "text", "text": "Two things."}, bash]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_agent_9",
                                      "content": "a.py b.py"}]}]
    stack.post(later, stream=False)
    sent = stack.upstream_bodies()[-1].value["messages"]
    assert [b.get("name") for b in sent[-2]["content"]] == [None, "search_history", "Bash"]
    ids = [b["tool_use_id"] for b in sent[-1]["content"]]
    assert ids == [SEARCH["id"], "toolu_agent_9"]
    assert "marker-turn-0" in sent[-1]["content"][0]["content"]
    check_pairs(sent)


@pytest.mark.parametrize("stream", [True, False])
def test_a_failed_follow_up_reaches_the_agent_as_the_providers_error(stack, stream):
    messages = paged_conversation(stack)
    overloaded = {"type": "error", "error": {"type": "overloaded_error",
                                             "message": "Overloaded"}}
    first = (anthropic_stream if stream else anthropic_message)(
        [{"type": "text", "text": "Looking."}, SEARCH], "tool_use")
    stack.provider.queue.extend([first, Reply(529, chunks=(json.dumps(overloaded).encode(),))])
    reply = stack.post(messages, stream=stream)
    if stream:
        seen = events(reply.text)
        assert reply.status_code == 200 and seen[-1] == ("error", overloaded)
        assert [d["delta"]["text"] for n, d in seen if n == "content_block_delta"] == [
            "Looking."]
    else:
        assert reply.status_code == 529 and reply.json() == overloaded


def test_past_the_round_bound_the_model_is_told_so_in_the_next_request(tmp_path):
    s = Stack(make_home(tmp_path), rounds=1)
    try:
        messages = paged_conversation(s)
        again = {**SEARCH, "id": "toolu_inband_2", "input": {"query": "marker-turn-1"}}
        s.provider.queue.extend([
            anthropic_message([SEARCH], "tool_use"),
            anthropic_message([{"type": "text", "text": "Still looking."}, again], "tool_use")])
        before = len(s.provider.requests)
        body = s.post(messages, stream=False).json()
        assert len(s.provider.requests) == before + 2  # one follow-up, no second
        assert body["content"] == [{"type": "text", "text": "Still looking."}]
        assert body["stop_reason"] == "end_turn"
        later = [*messages, {"role": "assistant", "content": body["content"]},
                 {"role": "user", "content": "go on"}]
        s.post(later, stream=False)
        sent = s.upstream_bodies()[-1].value["messages"]
        told = sent[-1]["content"][0]
        assert told["tool_use_id"] == "toolu_inband_2" and told["is_error"] is True
        assert "at most 1 recovery round" in told["content"]
        assert sent[-1]["content"][1] == {"type": "text", "text": "go on"}
        check_pairs(sent)
    finally:
        s.close()


def test_agents_with_recovery_tools_get_nothing_added(tmp_path, caplog):
    mcp = [*TOOLS, {"name": "mcp__context-paging__search_history", "description": "x",
                    "input_schema": {"type": "object"}}]
    own = [*TOOLS, {"name": "recall", "description": "the agent's own",
                    "input_schema": {"type": "object"}}]
    cases = (("auto", mcp, False), ("always", mcp, True), ("never", TOOLS, False),
             ("always", own, False))
    for number, (mode, tools, offered) in enumerate(cases):
        (tmp_path / str(number)).mkdir()
        s = Stack(make_home(tmp_path / str(number)), mode=mode)
        try:
            with caplog.at_level(logging.INFO, logger="context_paging"):
                for _ in range(2):
                    s.post([{"role": "user", "content": "hello"}], stream=False, tools=tools)
            for body in s.upstream_bodies():
                names = {t["name"] for t in body.value["tools"]}
                assert (OFFERED <= names) is offered, (mode, names)
        finally:
            s.close()
    assert sum("has its own recall" in r.getMessage() for r in caplog.records) == 1


def test_recovery_tools_that_show_up_late_withdraw_the_offer_only_before_any_paging(stack,
                                                                                  caplog):
    mcp = [*TOOLS, {"name": "mcp__context-paging__search_history", "description": "x",
                    "input_schema": {"type": "object"}}]
    hello = [{"role": "user", "content": "hello"}]
    with caplog.at_level(logging.INFO, logger="context_paging"):
        stack.post(hello, stream=False)  # no recovery tools yet: offered
        stack.post([*hello, {"role": "assistant", "content": "hi"},
                    {"role": "user", "content": "go"}], stream=False, tools=mcp)
    first, second = stack.upstream_bodies()
    assert OFFERED <= {t["name"] for t in first.value["tools"]}
    assert not OFFERED & {t["name"] for t in second.value["tools"]}
    assert sum("withdrawn" in r.getMessage() for r in caplog.records) == 1
    # another conversation, paged before its MCP tools show up: the offer stays
    other = {**json.loads(USER_ID), "session_id": "another-session"}
    messages = paged_conversation(stack, user_id=json.dumps(other))
    stack.post(messages, stream=False, tools=mcp, user_id=json.dumps(other))
    assert OFFERED <= {t["name"] for t in stack.upstream_bodies()[-1].value["tools"]}


def test_the_offered_definitions_are_the_mcp_tools_without_their_session():
    assert inband.DEFINITIONS.read_text(encoding="utf-8") == offered_tools(snapshot_tools())
    names = [t["name"] for t in inband.definitions()]
    assert names == ["search_history", "read_context_output", "recall"]
    assert all("session" not in t["input_schema"]["properties"] for t in inband.definitions())


def test_bad_arguments_are_the_calls_error_never_an_exception():
    ran = inband.run_call(None, "s", "search_history", {"query": 5})
    assert ran.error and ran.text.startswith("INVALID_ARGUMENT: field 'query'")
    assert inband.run_call(None, "s", "recall", ["x"]).error
    assert inband.run_call(None, "s", "load_history", {}).text.startswith("UNKNOWN_TOOL")
    ran = inband.run_call(None, "s", "search_history", {"query": "x", "limit": 99})
    assert ran.error and "out of range" in ran.text


# --- OpenAI Responses and Chat Completions ----------------------------------------------------


def post_openai(s: Stack, path: str, body: dict) -> httpx.Response:
    return s.client.post(path, content=json.dumps(body).encode(),
                         headers={"authorization": "Bearer sk-test",
                                  "content-type": "application/json"})


def responses_conversation(turns: int = 14) -> list[dict]:
    items: list[dict] = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Refactor the modules."}]}]
    for i in range(turns):
        output = "\n".join(f"marker-turn-{i} line {n}: value = {i * 100 + n}" for n in range(40))
        items += [{"type": "function_call", "call_id": f"call_{i}", "name": "shell",
                   "arguments": json.dumps({"cmd": f"cat module_{i}.py"})},
                  {"type": "function_call_output", "call_id": f"call_{i}", "output": output}]
    return items


SHELL = [{"type": "function", "name": "shell", "description": "Run a command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
RESPONSES_SEARCH = {"type": "function_call", "id": "fc_1", "call_id": "call_inband",
                    "name": "search_history", "arguments": '{"query": "marker-turn-0"}',
                    "status": "completed"}


def said(text: str, ident: str = "msg_1") -> dict:
    return {"type": "message", "id": ident, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


@pytest.mark.parametrize("stream", [True, False])
def test_responses_calls_are_answered_in_band_and_put_back_in_place(stack, stream):
    from tests.fake_provider import responses_items_body, responses_items_stream

    items = responses_conversation()
    body = {"model": "gpt-fake", "instructions": "You are Codex.", "tools": SHELL,
            "prompt_cache_key": "thread-1", "stream": stream}
    for end in range(3, len(items) + 1, 2):
        assert post_openai(stack, "/v1/responses", {**body, "input": items[:end]}
                           ).status_code == 200
    shape = responses_items_stream if stream else responses_items_body
    stack.provider.queue.extend([shape([said("Looking.", "msg_a"), RESPONSES_SEARCH], 300),
                                 shape([said("It was 0.", "msg_b")], 400)])
    before = len(stack.provider.requests)
    reply = post_openai(stack, "/v1/responses", {**body, "input": items})
    assert reply.status_code == 200
    if stream:
        seen = events(reply.text)
        kinds = [d["type"] for _, d in seen]
        assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed"
        assert [d["sequence_number"] for _, d in seen] == list(range(len(seen)))
        added = [d for _, d in seen if d["type"] == "response.output_item.added"]
        assert [d["output_index"] for d in added] == [0, 1]
        final = seen[-1][1]["response"]
    else:
        final = reply.json()
    assert [i["id"] for i in final["output"]] == ["msg_a", "msg_b"]
    assert final["usage"]["input_tokens"] == 700
    assert "search_history" not in reply.text
    first, follow = stack.upstream_bodies_of("input")[before:]
    assert [t["name"] for t in first.value["tools"]] == [
        "shell", "search_history", "read_context_output", "recall"]
    bracket = first.spans["input"][1] - 1
    assert follow.raw[:bracket] == first.raw[:bracket]
    output = follow.value["input"][-1]
    assert output["call_id"] == "call_inband" and "marker-turn-0" in output["output"]

    later = [*items, said("Looking.", "msg_a"), said("It was 0.", "msg_b"),
             {"type": "message", "role": "user", "content": [
                 {"type": "input_text", "text": "go on"}]}]
    post_openai(stack, "/v1/responses", {**body, "input": later})
    after = stack.upstream_bodies_of("input")[-1]
    assert after.value["input"][-5:-2] == follow.value["input"][-3:]
    end = follow.spans["input"][1] - 1
    assert after.raw[:end] == follow.raw[:end]
    stack.restart()  # the records are read back from the home: the same bytes go upstream
    post_openai(stack, "/v1/responses", {**body, "input": later})
    assert stack.upstream_bodies_of("input")[-1].raw == after.raw


def chat_stream(text: str, calls: list[dict], finish: str, prompt: int) -> Reply:
    from tests.fake_provider import sse

    base = {"id": "chatcmpl_1", "object": "chat.completion.chunk", "created": 0,
            "model": "gpt-fake"}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                          "content": text}}]}]
    for index, call in enumerate(calls):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "id": call["id"], "type": "function",
             "function": {"name": call["function"]["name"], "arguments": ""}}]}}]})
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "function": {"arguments": call["function"]["arguments"]}}]}}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": prompt,
                                                    "completion_tokens": 3,
                                                    "total_tokens": prompt + 3}})
    return sse(chunks, named=False)


def chat_body(text: str, calls: list[dict], finish: str, prompt: int) -> Reply:
    message = {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}
    body = {"id": "chatcmpl_1", "object": "chat.completion", "created": 0, "model": "gpt-fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 3,
                      "total_tokens": prompt + 3}}
    return Reply(chunks=(json.dumps(body).encode(),))


CHAT_SEARCH = {"id": "call_inband", "type": "function", "function": {
    "name": "search_history", "arguments": '{"query": "marker-turn-0"}'}}
CHAT_AGENT = {"id": "call_agent", "type": "function", "function": {
    "name": "shell", "arguments": '{"cmd": "ls"}'}}


@pytest.mark.parametrize("stream", [True, False])
def test_chat_calls_are_answered_and_the_continuations_agent_call_reaches_it(stack, stream):
    messages: list[dict] = [{"role": "system", "content": "You are an agent."},
                            {"role": "user", "content": "Refactor."}]
    tools = [{"type": "function", "function": {"name": "shell", "parameters": {
        "type": "object"}}}]
    body = {"model": "gpt-fake", "tools": tools, "prompt_cache_key": "chat-1"}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    for i in range(14):
        output = "\n".join(f"marker-turn-{i} line {n}: value = {n}" for n in range(40))
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "shell", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": output}]
        assert post_openai(stack, "/v1/chat/completions",
                           {**body, "messages": messages}).status_code == 200
    # the first reply: text, an offered call, then (the follow-up) text and the agent's call
    shape = chat_stream if stream else chat_body
    stack.provider.queue.extend([shape("Looking. ", [CHAT_SEARCH], "tool_calls", 300),
                                 shape("Found it.", [CHAT_AGENT], "tool_calls", 400)])
    reply = post_openai(stack, "/v1/chat/completions", {**body, "messages": messages})
    assert reply.status_code == 200
    if stream:
        chunks = [json.loads(line[5:]) for line in reply.text.split("\n")
                  if line.startswith("data:") and line[5:].strip() != "[DONE]"]
        assert reply.text.rstrip().endswith("data: [DONE]")
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                       if c["choices"])
        calls = [t for c in chunks if c["choices"]
                 for t in c["choices"][0]["delta"].get("tool_calls") or ()]
        finish = [c["choices"][0]["finish_reason"] for c in chunks
                  if c["choices"] and c["choices"][0].get("finish_reason")]
        usage = [c["usage"] for c in chunks if c.get("usage")]
        assert text == "Looking. Found it." and finish == ["tool_calls"]
        assert {t.get("id") for t in calls if t.get("id")} == {"call_agent"}
        assert all(t["index"] == 0 for t in calls)
        assert usage == [{"prompt_tokens": 700, "completion_tokens": 6, "total_tokens": 706}]
    else:
        message = reply.json()["choices"][0]["message"]
        assert message["content"] == "Looking. Found it."
        assert message["tool_calls"] == [CHAT_AGENT]
        assert reply.json()["usage"]["prompt_tokens"] == 700
    later = [*messages, {"role": "assistant", "content": "Looking. Found it.",
                         "tool_calls": [CHAT_AGENT]},
             {"role": "tool", "tool_call_id": "call_agent", "content": "a.py"}]
    post_openai(stack, "/v1/chat/completions", {**body, "messages": later})
    sent = stack.upstream_bodies_of("messages", "/v1/chat/completions")[-1].value["messages"]
    assert sent[-4]["tool_calls"][0]["function"]["name"] == "search_history"
    assert sent[-4]["content"] == "Looking. "
    assert sent[-3]["tool_call_id"] == "call_inband" and "marker-turn-0" in sent[-3]["content"]
    assert sent[-2] == {"role": "assistant", "content": "Found it.", "tool_calls": [CHAT_AGENT]}
    assert sent[-1]["tool_call_id"] == "call_agent"


def test_the_shell_notice_names_a_command_that_runs_from_any_shell():
    import subprocess

    from context_paging.paging.notice import paging_notice, shell_notice
    from context_paging.server.proxy.app import shell_command

    command = shell_command()
    assert command.startswith("/")  # no PATH lookup: a login shell without the venv runs it
    text = shell_notice(paging_notice(1000, "m1", ("m1", "call_1", "Bash")), "ledger:x", command)
    assert f'{command} search "<words>" --session ledger:x' in text
    assert f"{command} output m1 --tool-call-id call_1 --session ledger:x" in text
    done = subprocess.run(f"env -i /bin/sh -c '{command} --version'", shell=True,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip()


# --- OpenAI: a mixed reply, a failed follow-up, the round bound, per mode --------------------

AGENT_SHELL = {"type": "function_call", "id": "fc_2", "call_id": "call_agent", "name": "shell",
               "arguments": '{"cmd": "ls"}', "status": "completed"}


class OpenAI:
    """One OpenAI API's request and reply shapes, for the tests below."""

    def __init__(self, api: str, stream: bool) -> None:
        self.api, self.stream = api, stream
        self.path = "/v1/responses" if api == "responses" else "/v1/chat/completions"
        self.field = "input" if api == "responses" else "messages"

    def body(self, conversation: list[dict]) -> dict:
        if self.api == "responses":
            return {"model": "gpt-fake", "tools": SHELL, "prompt_cache_key": "t-1",
                    "stream": self.stream, "input": conversation}
        body = {"model": "gpt-fake", "prompt_cache_key": "c-1", "messages": conversation,
                "tools": [{"type": "function", "function": {"name": "shell",
                                                            "parameters": {"type": "object"}}}]}
        if self.stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        return body

    def paged(self, s: Stack) -> list[dict]:
        if self.api == "responses":
            items = responses_conversation()
            for end in range(3, len(items) + 1, 2):
                post_openai(s, self.path, self.body(items[:end]))
            return items
        messages: list[dict] = [{"role": "user", "content": "Refactor."}]
        for i in range(14):
            output = "\n".join(f"marker-turn-{i} line {n}: value = {n}" for n in range(40))
            messages += [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": "shell", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": output}]
            post_openai(s, self.path, self.body(messages))
        return messages

    def reply(self, text: str, calls: list[str], search_id: str = "call_inband") -> Reply:
        """``calls``: "search" (the offered tool), "agent" (the agent's shell)."""
        from tests.fake_provider import responses_items_body, responses_items_stream

        if self.api == "responses":
            search = {**RESPONSES_SEARCH, "call_id": search_id}
            items = [said(text, f"msg_{len(text)}")] + [
                search if c == "search" else AGENT_SHELL for c in calls]
            shape = responses_items_stream if self.stream else responses_items_body
            return shape(items, 100)
        search = {**CHAT_SEARCH, "id": search_id}
        tool_calls = [search if c == "search" else CHAT_AGENT for c in calls]
        shape = chat_stream if self.stream else chat_body
        return shape(text, tool_calls, "tool_calls" if calls else "stop", 100)

    def seen(self, reply: httpx.Response) -> tuple[str, list[str], str]:
        """(text, the agent's call ids, how the reply ended) as the agent reads it."""
        if self.api == "responses":
            if self.stream:  # the items as they arrived
                seen = [d for _, d in events(reply.text)]
                output = [d["item"] for d in seen if d["type"] == "response.output_item.done"]
                ending = seen[-1]["type"]
                if ending == "response.completed":
                    assert seen[-1]["response"]["output"] == output
            else:
                output, ending = reply.json()["output"], "json"
            text = "".join(c["text"] for i in output
                           if i["type"] == "message" for c in i["content"])
            calls = [i["call_id"] for i in output if i["type"] == "function_call"]
            return text, calls, ending
        if self.stream:
            chunks = [json.loads(line[5:]) for line in reply.text.split("\n")
                      if line.startswith("data:") and line[5:].strip() != "[DONE]"]
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                           if c.get("choices"))
            calls = [t["id"] for c in chunks if c.get("choices")
                     for t in c["choices"][0]["delta"].get("tool_calls") or () if t.get("id")]
            ends = [c["choices"][0]["finish_reason"] for c in chunks
                    if c.get("choices") and c["choices"][0].get("finish_reason")]
            errors = [c["error"] for c in chunks if "error" in c]
            return text, calls, "error" if errors else ends[-1]
        message = reply.json()["choices"][0]["message"]
        return (message.get("content") or "", [t["id"] for t in message.get("tool_calls") or ()],
                reply.json()["choices"][0]["finish_reason"])

    def agent_reply(self, text: str, calls: list[str]) -> list[dict]:
        """What the agent appends after a reply it read as ``text`` and ``calls``."""
        if self.api == "responses":
            return [said(text, f"msg_{len(text)}"),
                    *([AGENT_SHELL, {"type": "function_call_output", "call_id": "call_agent",
                                     "output": "a.py"}] if calls else
                      [{"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "go on"}]}])]
        return [{"role": "assistant", "content": text,
                 **({"tool_calls": [CHAT_AGENT]} if calls else {})},
                {"role": "tool", "tool_call_id": "call_agent", "content": "a.py"} if calls
                else {"role": "user", "content": "go on"}]


def results_in(api: OpenAI, conversation: list[dict]) -> dict[str, str]:
    """Call id -> result text of every tool result in a conversation."""
    if api.api == "responses":
        return {i["call_id"]: i["output"] for i in conversation
                if i.get("type") == "function_call_output"}
    return {m["tool_call_id"]: m["content"] for m in conversation if m.get("role") == "tool"}


def check_openai_pairs(api: OpenAI, conversation: list[dict]) -> None:
    if api.api == "responses":
        calls = [i["call_id"] for i in conversation if i.get("type") == "function_call"]
        outputs = [i["call_id"] for i in conversation if i.get("type") == "function_call_output"]
        assert sorted(calls) == sorted(outputs)
        return
    for index, message in enumerate(conversation):
        for call in message.get("tool_calls") or ():
            following = conversation[index + 1:]
            answered = []
            for other in following:
                if other.get("role") != "tool":
                    break
                answered.append(other["tool_call_id"])
            assert call["id"] in answered, (index, call["id"])


OPENAI_CASES = [("responses", True), ("responses", False), ("chat", True), ("chat", False)]


@pytest.mark.parametrize(("api_name", "stream"), OPENAI_CASES)
def test_openai_mixed_reply_gives_the_agent_its_call_and_the_next_request_the_answer(
        stack, api_name, stream):
    api = OpenAI(api_name, stream)
    conversation = api.paged(stack)
    before = len(stack.provider.requests)
    stack.provider.queue.append(api.reply("Two things.", ["search", "agent"]))
    reply = post_openai(stack, api.path, api.body(conversation))
    text, calls, _ = api.seen(reply)
    assert text == "Two things." and calls == ["call_agent"]
    assert "search_history" not in reply.text
    assert len(stack.provider.requests) == before + 1  # no follow-up: the agent runs its tool
    later = [*conversation, *api.agent_reply(text, calls)]
    post_openai(stack, api.path, api.body(later))
    sent = stack.upstream_bodies_of(api.field, api.path)[-1].value[api.field]
    found = results_in(api, sent)
    assert "marker-turn-0" in found["call_inband"] and found["call_agent"] == "a.py"
    check_openai_pairs(api, sent)


@pytest.mark.parametrize(("api_name", "stream"), OPENAI_CASES)
def test_openai_failed_follow_up_reaches_the_agent_as_the_providers_error(
        stack, api_name, stream):
    api = OpenAI(api_name, stream)
    conversation = api.paged(stack)
    error = {"error": {"message": "Rate limited", "type": "rate_limit_error", "param": None,
                       "code": "rate_limit_exceeded"}}
    stack.provider.queue.extend([api.reply("Looking.", ["search"]),
                                 Reply(429, chunks=(json.dumps(error).encode(),))])
    reply = post_openai(stack, api.path, api.body(conversation))
    if not stream:
        assert reply.status_code == 429 and reply.json() == error
        return
    assert reply.status_code == 200
    text, _, ending = api.seen(reply)
    assert text == "Looking." and "Rate limited" in reply.text
    assert ending == ("response.failed" if api_name == "responses" else "error")


@pytest.mark.parametrize(("api_name", "stream"), OPENAI_CASES)
def test_openai_calls_past_the_round_bound_are_told_so_in_the_next_request(
        tmp_path, api_name, stream):
    s = Stack(make_home(tmp_path), rounds=1)
    try:
        api = OpenAI(api_name, stream)
        conversation = api.paged(s)
        s.provider.queue.extend([api.reply("One.", ["search"]),
                                 api.reply("Two.", ["search"], "call_inband_2")])
        before = len(s.provider.requests)
        reply = post_openai(s, api.path, api.body(conversation))
        text, calls, _ = api.seen(reply)
        assert len(s.provider.requests) == before + 2 and text == "One.Two." and not calls
        post_openai(s, api.path, api.body([*conversation, *api.agent_reply(text, [])]))
        sent = s.upstream_bodies_of(api.field, api.path)[-1].value[api.field]
        told = results_in(api, sent)
        assert "marker-turn-0" in told["call_inband"]  # answered by the one follow-up
        assert "at most 1 recovery round" in told["call_inband_2"]  # past the bound
        check_openai_pairs(api, sent)
    finally:
        s.close()


def test_a_stream_with_thinking_ping_and_split_input_is_rebuilt_exactly_for_the_follow_up(
        stack):
    from tests.fake_provider import sse

    messages = paged_conversation(stack)
    usage = {"input_tokens": 12, "cache_creation_input_tokens": 30,
             "cache_read_input_tokens": 3000, "output_tokens": 1}
    first = sse([
        {"type": "message_start", "message": {
            "id": "msg_r1", "type": "message", "role": "assistant", "model": "claude-fake",
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}},
        {"type": "ping"},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "The start left; "}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "search it."}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "signature_delta", "signature": "sig-abc"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_inband_7", "name": "search_history", "input": {}}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": '{"query": "mark'}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": 'er-turn-0", "limit": 2}'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 40}},
        {"type": "message_stop"}])
    stack.provider.queue.extend([first, anthropic_stream(
        [{"type": "text", "text": "Found it."}], "end_turn", input_tokens=5)])
    reply = stack.post(messages, stream=True)
    seen = events(reply.text)
    assert [n for n, _ in seen].count("ping") == 1
    starts = [d["content_block"]["type"] for n, d in seen if n == "content_block_start"]
    assert starts == ["thinking", "text"]
    final = seen[-2][1]["usage"]
    assert final == {"output_tokens": 45, "input_tokens": 17,
                     "cache_creation_input_tokens": 30, "cache_read_input_tokens": 3000}
    model_message = stack.upstream_bodies()[-1].value["messages"][-2]
    assert model_message == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "The start left; search it.", "signature": "sig-abc"},
        {"type": "tool_use", "id": "toolu_inband_7", "name": "search_history",
         "input": {"query": "marker-turn-0", "limit": 2}}]}


def test_a_request_with_the_offered_tools_asks_only_for_encodings_the_proxy_can_read(stack):
    stack.client.post("/v1/messages", content=json.dumps({
        "model": "claude-fake", "max_tokens": 10, "tools": TOOLS,
        "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"x-api-key": "k", "content-type": "application/json",
                 "accept-encoding": "br, gzip;q=0.9, zstd, deflate"})
    sent = stack.provider.requests[-1]
    assert OFFERED <= {t["name"] for t in sent.json()["tools"]}
    assert sent.headers["accept-encoding"] == "gzip;q=0.9, deflate"


def test_a_gzip_reply_is_read_answered_and_relayed_decoded(stack):
    import gzip

    messages = paged_conversation(stack)
    first = anthropic_message([{"type": "text", "text": "Zipped."}, SEARCH], "tool_use")
    zipped = Reply(200, (("content-type", "application/json"), ("content-encoding", "gzip")),
                   (gzip.compress(first.body),))
    stack.provider.queue.extend([zipped, anthropic_message(
        [{"type": "text", "text": "Done."}], "end_turn")])
    reply = stack.post(messages, stream=False)
    assert "content-encoding" not in reply.headers
    assert [b["text"] for b in reply.json()["content"]] == ["Zipped.", "Done."]


def test_the_offered_tools_name_no_tool_that_is_not_offered():
    text = json.dumps(inband.definitions())
    for other in ("browse_history", "load_history", "list_sessions", "select_context"):
        assert other not in text


@pytest.mark.parametrize("api", ["anthropic", "responses"])
def test_a_streamed_reply_without_an_offered_call_reaches_the_agent_byte_for_byte(stack, api):
    from tests.fake_provider import responses_items_stream

    if api == "anthropic":
        first = anthropic_stream([{"type": "text", "text": "Plain."}], "end_turn")
        stack.provider.queue.append(first)
        reply = stack.post([{"role": "user", "content": "hi"}], stream=True)
    else:
        first = responses_items_stream([said("Plain.")])
        stack.provider.queue.append(first)
        reply = post_openai(stack, "/v1/responses", {
            "model": "gpt-fake", "tools": SHELL, "stream": True, "prompt_cache_key": "p",
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "hi"}]}]})
    assert OFFERED <= {t["name"] for t in stack.provider.requests[-1].json()["tools"]}
    assert reply.content == first.body


def test_hidden_exchanges_a_forget_deleted_are_not_put_back_from_memory(tmp_path):
    from context_paging.server.proxy.inband import Hidden, Round, Store

    store = Store(tmp_path)
    record = Hidden(2, "anchor", (Round({"role": "assistant", "content": "x"}, [], 1),))
    store.add("cc-s-open", record)
    assert store.records("cc-s-open") == [record]
    (tmp_path / "inband" / "cc-s-open.jsonl").unlink()  # what forget removes
    assert store.records("cc-s-open") == []
    store.add("cc-s-open", record)  # recorded afresh from then on
    assert store.records("cc-s-open") == [record]
