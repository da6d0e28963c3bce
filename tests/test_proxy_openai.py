"""The proxy with OpenAI's wire formats, driven by the official openai SDK: a Codex-shaped
Responses conversation (reasoning with encrypted content, parallel function calls, custom tool
calls) and Chat Completions."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from context_paging.paging.formats import detect_format, render, to_views
from context_paging.server.proxy import wire

from tests.test_proxy import Stack, make_home

THREAD = "019a0c4e-7b7e-7d13-9a55-3a4f4e0c1d2b"
INSTRUCTIONS = "You are Codex, a coding agent."
TOOLS = [{"type": "function", "name": "shell", "description": "Run a command",
          "parameters": {"type": "object", "properties": {"command": {"type": "array"}}}},
         {"type": "custom", "name": "apply_patch", "description": "Apply a patch"}]


@pytest.fixture
def stack(tmp_path) -> Iterator[Stack]:
    s = Stack(make_home(tmp_path))
    yield s
    s.close()


def message(role: str, text: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def codex_turn(i: int) -> list[dict]:
    """One model response (reasoning, two parallel shell calls or a patch) and its outputs."""
    reasoning = {"type": "reasoning", "summary": [{"type": "summary_text",
                                                   "text": f"Plan step {i}"}],
                 "content": None, "encrypted_content": f"gAAAAB{i:04d}" + "Zx9" * 300}
    if i % 3 == 2:
        call = {"type": "custom_tool_call", "call_id": f"call_p{i}", "name": "apply_patch",
                "input": f"*** Begin Patch\n*** Update File: src/m{i}.py\n+x = {i}\n*** End Patch"}
        output = {"type": "custom_tool_call_output", "call_id": f"call_p{i}",
                  "output": f"patch-{i} applied: Success. Updated src/m{i}.py"}
        return [reasoning, call, output]
    calls = [{"type": "function_call", "call_id": f"call_{i}_{k}", "name": "shell",
              "arguments": json.dumps({"command": ["cat", f"src/m{i}_{k}.py"]})}
             for k in range(2)]
    outputs = [{"type": "function_call_output", "call_id": f"call_{i}_{k}",
                "output": "\n".join(f"codex-marker-{i}-{k} line {n}" for n in range(30))}
               for k in range(2)]
    return [reasoning, *calls, *outputs]


def codex_requests(turns: int) -> Iterator[list[dict]]:
    items = [message("developer", "<permissions instructions>sandbox</permissions instructions>"),
             message("user", "<environment_context><cwd>/work/app</cwd></environment_context>"),
             message("user", "Fix every module.")]
    for i in range(turns):
        yield list(items)
        items += codex_turn(i)
        if i % 4 == 3:
            items.append(message("assistant", f"Modules up to {i} fixed."))
            yield list(items)
            items.append(message("user", f"Continue after {i}."))


def check_runs(sent: list[dict], original: list[dict]) -> None:
    """Reasoning is followed by exactly what followed it in the conversation, and every call
    has its output and every output its call."""
    for index, item in enumerate(sent):
        if item.get("type") == "reasoning":
            where = original.index(item)
            assert sent[index + 1] == original[where + 1]
            assert item == original[where]  # encrypted content byte-identical
    calls = {i["call_id"] for i in sent if i.get("type") in ("function_call", "custom_tool_call")}
    outputs = {i["call_id"] for i in sent
               if i.get("type") in ("function_call_output", "custom_tool_call_output")}
    assert calls == outputs


def test_a_codex_responses_conversation_pages_and_keeps_reasoning_with_its_turn(stack):
    client = stack.openai()
    sent = []
    for items in codex_requests(16):
        stream = client.responses.create(
            model="gpt-fake", instructions=INSTRUCTIONS, input=items, tools=TOOLS,
            store=False, stream=True, include=["reasoning.encrypted_content"],
            prompt_cache_key=THREAD, extra_headers={"session-id": THREAD})
        kinds = [event.type for event in stream]
        assert kinds[-1] == "response.completed"
        sent.append(items)
    upstream = [r for r in stack.provider.requests if r.path == "/v1/responses"]
    assert len(upstream) == len(sent)
    bodies = [wire.read_body(r.body, "input") for r in upstream]
    last = bodies[-1].value["input"]
    assert len(last) < len(sent[-1]) / 2  # paged
    # the developer message and Codex's environment context are resident, always first
    assert last[:2] == sent[-1][:2]
    notice = last[2]["content"][0]["text"]
    assert "Context paging notice" in notice and f"ledger:oa-{THREAD}" in notice
    assert any(i.get("type") == "reasoning" for i in last)
    advances = 0
    for body, items in zip(bodies, sent, strict=True):
        assert body.value["instructions"] == INSTRUCTIONS
        assert body.value["prompt_cache_key"] == THREAD
        assert body.value["include"] == ["reasoning.encrypted_content"]
        check_runs(body.value["input"], items)
    for before, after in zip(bodies, bodies[1:], strict=False):
        if before.value["input"][2] != after.value["input"][2]:
            advances += 1
            continue
        end = before.spans["input"][1] - 1
        assert after.raw[:end] == before.raw[:end]
    assert 1 <= advances <= len(bodies) // 3
    assert upstream[-1].headers["authorization"] == "Bearer sk-openai-test"
    assert upstream[-1].headers["session-id"] == THREAD
    # evicted outputs stay searchable; reasoning is never returned
    ledger = f"ledger:{wire.conversation_key(wire.RESPONSES, bodies[0].value, {})}"
    found = stack.history.search("codex-marker-0-1", ledger, "session", (), (), None, 3)
    assert found.references
    loaded = stack.history.load(ledger, [found.references[0]["history_id"]])
    text = json.dumps(loaded)
    assert "codex-marker-0-1" in text and "gAAAAB" not in text
    # one model turn: the hidden reasoning, both parallel calls, both outputs
    assert loaded[0]["content"][0] is None
    assert [b["id"] for b in loaded[0]["content"][1:]] == ["call_0_0", "call_0_1"]
    assert [r["tool_call_id"] for r in loaded[0]["tool_results"]] == ["call_0_0", "call_0_1"]


def test_responses_is_a_select_context_format_whose_runs_render_whole():
    items = list(codex_requests(6))[-1]
    assert detect_format(items) == "responses"
    views = to_views(items, "responses")
    assert views.resident == (0, 1)  # developer message, environment context
    # every reasoning item is a follower-less run head or inside a run: never a view alone
    heads = {v.source for v in views.views if v.message["role"] == "assistant"}
    for index, item in enumerate(items):
        if item["type"] == "reasoning":
            assert index in heads
            assert views.followers[index][0] == index + 1
    everything = render(items, views, list(range(len(views.views))), None)
    assert everything == items


def test_chat_completions_go_through_the_window_too(stack):
    client = stack.openai()
    messages = [{"role": "system", "content": "You are helpful."},
                {"role": "user", "content": "Start."}]
    for i in range(30):
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "read", "arguments": json.dumps({"path": f"f{i}"})}}]},
                     {"role": "tool", "tool_call_id": f"c{i}",
                      "content": f"chat-marker-{i} " + "data " * 300}]
    messages.append({"role": "user", "content": "Summarize."})
    reply = client.chat.completions.create(model="gpt-fake", messages=messages,
                                           prompt_cache_key="chat-1")
    assert reply.choices[0].message.content == "ok"
    body = stack.provider.requests[-1].json()
    assert body["messages"][0] == messages[0]
    assert "ledger:oc-chat-1-" in body["messages"][1]["content"]
    assert body["messages"][-1] == messages[-1]
    assert len(body["messages"]) < len(messages)
    ids = [m.get("tool_call_id") for m in body["messages"] if m["role"] == "tool"]
    calls = [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]
    assert ids == calls


def test_a_provider_error_reaches_the_openai_client(stack):
    from tests.fake_provider import Reply

    error = {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}
    stack.provider.queue.append(Reply(429, (("content-type", "application/json"),
                                            ("retry-after", "7")), (json.dumps(error).encode(),)))
    client = stack.openai(api_key="k")
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="gpt-fake", input="hi")
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "7"
