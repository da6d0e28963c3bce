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
