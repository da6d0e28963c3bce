"""The proxy's message chains (server/proxy/conversations.py): a request read on the previous one
hashes only its new messages, and gets the chain a fresh read gives."""

from __future__ import annotations

import json

from context_paging.server.proxy import conversations, wire
from context_paging.server.proxy.conversations import Chains, chain
from context_paging.server.proxy.resent import Resent


def body_of(count: int, marker_on_last: bool = True) -> bytes:
    messages = [{"role": "user" if i % 2 == 0 else "assistant",
                 "content": [{"type": "text", "text": f"message {i} " * 50}]} for i in range(count)]
    if marker_on_last:  # agents move the cache marker to the newest message every request
        messages[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    return json.dumps({"model": "m", "messages": messages}).encode()


def counting_hash(monkeypatch) -> list[int]:
    calls = [0]
    real = conversations.hashlib.blake2b

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(conversations.hashlib, "blake2b", counted)
    return calls


def test_a_grown_request_hashes_only_its_new_messages_and_keeps_its_conversation(monkeypatch):
    bodies, chains = Resent(), Chains()
    first = wire.read_body(body_of(40, marker_on_last=False), "messages")
    name = chains.key(first, "pi-open", "messages")
    bodies.remember(name, first)
    grown = bodies.read(body_of(44, marker_on_last=False), "messages")
    calls = counting_hash(monkeypatch)
    assert chains.key(grown, "pi-open", "messages") == name
    assert calls[0] == 4  # the four new messages, not all 44
    monkeypatch.undo()
    assert chain(grown, "messages", (first.value["messages"], chain(first, "messages"))) == \
        chain(wire.read_body(body_of(44, marker_on_last=False), "messages"), "messages")


def test_messages_that_are_not_the_same_objects_are_hashed_again():
    first = wire.read_body(body_of(10), "messages")
    again = wire.read_body(body_of(12), "messages")  # read whole: new objects, same bytes
    known = (first.value["messages"], chain(first, "messages"))
    assert chain(again, "messages", known) == chain(again, "messages")
    assert chain(again, "messages")[:9] == chain(first, "messages")[:9]  # marker aside


# --- through the proxy: one session id, one opening, two conversations ----------------------------

def subagent_requests(tag: str, turns: int) -> list[bytes]:
    """The bodies a Claude Code subagent sends: the same prompt and session id as its twin,
    then its own tool calls (``tag`` in every answer and output)."""
    from tests.test_proxy import SYSTEM, TOOLS, USER_ID

    messages: list[dict] = [{"role": "user", "content": [
        {"type": "text", "text": "Look through the modules and report."}]}]
    bodies = []
    for turn in range(turns):
        bodies.append(json.dumps({"model": "claude-fake", "max_tokens": 64, "system": SYSTEM,
                                  "tools": TOOLS, "messages": messages,
                                  "metadata": {"user_id": USER_ID}}).encode())
        call = f"toolu_{tag}_{turn}"
        output = "\n".join(f"{tag}-output-{turn} line {n}" for n in range(40))
        messages = [*messages,
                    {"role": "assistant", "content": [
                        {"type": "text", "text": f"{tag} step {turn}"},
                        {"type": "tool_use", "id": call, "name": "Bash",
                         "input": {"command": f"cat {tag}_{turn}.py"}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": call, "content": output}]}]
    return bodies


def test_two_conversations_with_one_session_id_and_opening_keep_their_own_ledgers(tmp_path):
    import httpx2 as httpx

    from tests.test_proxy import Stack, make_home

    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    first, second = subagent_requests("alpha", 24), subagent_requests("beta", 24)
    (tmp_path / "alone").mkdir()
    (tmp_path / "both").mkdir()
    alone, both = Stack(make_home(tmp_path / "alone")), Stack(make_home(tmp_path / "both"))
    try:
        for raw in first:
            assert httpx.post(alone.url + "/v1/messages", content=raw,
                              headers=headers).status_code == 200
        for mine, theirs in zip(first, second, strict=True):  # the twins take turns
            for raw in (mine, theirs):
                assert httpx.post(both.url + "/v1/messages", content=raw,
                                  headers=headers).status_code == 200
        sent_alone = [r.body for r in alone.provider.requests]
        sent_both = [r.body for r in both.provider.requests]
        # the first conversation went upstream as if the proxy had seen it alone
        assert sent_both[0::2] == sent_alone
        assert any(len(b) < len(raw) for b, raw in zip(sent_alone, first, strict=True))
        ledgers = both.history.ledger.sessions()
        assert len(ledgers) == 2
        names = {}
        for ref in ledgers:
            found = both.history.search("alpha-output-3", ref, "session", (), (), None, 3)
            other = both.history.search("beta-output-3", ref, "session", (), (), None, 3)
            assert bool(found.references) != bool(other.references), ref
            names["alpha" if found.references else "beta"] = ref
        key = wire.conversation_key(wire.ANTHROPIC, json.loads(first[0]), {})
        assert names["alpha"] == f"ledger:{key}"  # the first keeps the name it always had
        assert names["beta"].startswith(f"ledger:{key}-")
    finally:
        alone.close()
        both.close()


def test_conversations_of_other_keys_never_join_one_another_even_with_the_same_messages():
    chains = Chains()
    body = wire.read_body(body_of(4), "messages")
    first = chains.key(body, "cc-one-open", "messages", "anthropic", identified=True)
    second = chains.key(body, "cc-two-open", "messages", "anthropic", identified=True)
    assert (first, second) == ("cc-one-open", "cc-two-open")
    assert chains.key(wire.read_body(body_of(6), "messages"), "cc-one-open", "messages",
                      "anthropic", identified=True) == "cc-one-open"


def test_a_rewritten_resident_item_does_not_start_a_new_conversation():
    def body(environment: str, turns: int) -> wire.Body:
        items = [{"type": "message", "role": "developer", "content": environment},
                 *({"type": "message", "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"turn {i}"} for i in range(turns))]
        return wire.read_body(json.dumps({"input": items}).encode(), "input")

    chains = Chains()
    name = chains.key(body("cwd /a", 3), "oa-thread-open", "input", "responses", True)
    assert chains.key(body("cwd /b", 5), "oa-thread-open", "input", "responses", True) == name
    # an edited conversation message does: it is a conversation of its own
    edited = body("cwd /b", 7)
    edited.value["input"][1]["content"] = "another first turn"
    raw = json.dumps({"input": edited.value["input"]}).encode()
    other = chains.key(wire.read_body(raw, "input"), "oa-thread-open", "input", "responses", True)
    assert other.startswith("oa-thread-open-") and other != name


def test_a_side_call_on_top_of_a_conversation_does_not_take_it_over():
    def body(*messages: dict) -> wire.Body:
        return wire.read_body(json.dumps({"messages": list(messages)}).encode(), "messages")

    task = {"role": "user", "content": "task"}
    answer = {"role": "assistant", "content": "first answer"}
    output = {"role": "user", "content": "tool output"}
    chains = Chains()
    name = chains.key(body(task), "cc-s-open", "messages", "anthropic", True)
    assert chains.key(body(task, answer, output), "cc-s-open", "messages", "anthropic",
                      True) == name
    # a side call: the conversation and a question of its own, no answer of the model's
    side = body(task, answer, output, {"role": "user", "content": "suggest the next prompt"})
    assert chains.key(side, "cc-s-open", "messages", "anthropic", True) == name
    going_on = body(task, answer, output, {"role": "assistant", "content": "second answer"},
                    {"role": "user", "content": "more output"})
    assert chains.key(going_on, "cc-s-open", "messages", "anthropic", True) == name
    # a twin that parted after the first request is still a conversation of its own
    twin = body(task, {"role": "assistant", "content": "another answer"}, output)
    assert chains.key(twin, "cc-s-open", "messages", "anthropic", True) != name
