"""A tool reply's text copy is the compact JSON of its structured content, byte for byte,
whichever encoder writes it (server/mcp_server.compact_json)."""

from __future__ import annotations

from context_paging.index.navigator import dumps
from context_paging.server.mcp.tools import compact_json
from hypothesis import given, settings
from hypothesis import strategies as st

LEAVES = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
          | st.floats(allow_nan=True, allow_infinity=True)
          | st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_the_text_is_the_compact_json_of_the_value(value):
    assert compact_json(value) == dumps(value)


def test_the_cases_orjson_would_write_differently_take_the_json_module():
    for value in ({"x": 1e16}, {"x": 1e-05}, {"x": float("nan")}, {"x": 2**64}, {"x": "\ud800"},
                  {1: "int key"}, {"x": "\x7f\u2028 é \x00\x1f"}):
        assert compact_json(value) == dumps(value)
