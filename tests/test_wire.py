"""The proxy's body surgery (server/proxy/wire.py) against generated bodies: whatever the spacing,
escapes and key order, splicing a window changes the conversation array and nothing else."""

from __future__ import annotations

import json

import pytest
from context_paging.server.proxy import wire
from hypothesis import given, settings
from hypothesis import strategies as st

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12),
                    st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)
messages = st.lists(st.dictionaries(st.text(max_size=6), values, min_size=1, max_size=4),
                    max_size=8)
others = st.dictionaries(st.text(max_size=8).filter(lambda k: k != "messages"), values,
                         max_size=5)


def render(value: dict, indent: int | None, ascii_only: bool) -> bytes:
    return json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()


@settings(max_examples=300, deadline=None)
@given(others, messages, st.sampled_from([None, 0, 2]), st.booleans(), st.data())
def test_splicing_a_window_changes_only_the_conversation(rest, conversation, indent,
                                                          ascii_only, data):
    value = {**rest, "messages": conversation}
    raw = render(value, indent, ascii_only)
    body = wire.read_body(raw, "messages")
    assert body.value == json.loads(raw)
    kept = data.draw(st.lists(st.sampled_from(range(len(conversation))), unique=True)
                     if conversation else st.just([]))
    new = {"role": "user", "content": "notice ✓"}
    window = [new] + [body.value["messages"][i] for i in sorted(kept)]
    out = wire.splice(body, "messages", window)
    assert json.loads(out) == {**json.loads(raw), "messages": window}
    start, end = body.spans["messages"]
    spliced = wire.read_body(out, "messages")
    # every byte outside the array is as received
    assert spliced.raw[:start] == raw[:start]
    assert spliced.raw[spliced.spans["messages"][1]:] == raw[end:]
    # kept messages are their original bytes
    for i, span in zip(sorted(kept), spliced.items[1:], strict=True):
        original = body.items[i]
        assert spliced.raw[span[0]:span[1]] == raw[original[0]:original[1]]


@pytest.mark.parametrize("raw", [b"", b"null", b"[]", b'{"messages": {}}', b'{"messages": [1]}',
                                 b'{"messages": []', b'{"messages": [] } x', b"\xff",
                                 b'{"a" 1}', b'{1: 2}'])
def test_bodies_that_are_not_requests_are_refused(raw):
    with pytest.raises(wire.ShapeError):
        wire.read_body(raw, "messages")
