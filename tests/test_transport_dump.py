"""``serve`` writes each JSON-RPC response itself (server/transport.dump_response, through
orjson): the very bytes the SDK's own dump writes, or it leaves the response to the SDK."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import uuid

import mcp_types as types
import pytest
from context_paging.server.mcp.transport import dump_response
from hypothesis import given, settings
from hypothesis import strategies as st

LEAVES = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
          | st.floats(allow_nan=True, allow_infinity=True)
          | st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


def sdk(message: types.JSONRPCResponse) -> str:
    return message.model_dump_json(by_alias=True, exclude_unset=True)


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(st.text(max_size=8), VALUES, max_size=4),
       st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(max_size=8))
def test_a_response_is_written_as_the_sdk_writes_it_or_left_to_the_sdk(result, ident):
    message = types.JSONRPCResponse(jsonrpc="2.0", id=ident, result=result)
    text = dump_response(message)
    assert text is None or text == sdk(message)


def test_plain_results_are_written_here_floats_included():
    for result in ({"x": 1e16}, {"x": 1e-05}, {"x": float("nan")}, {"x": -0.0},
                   {"x": "\x7f\u2028 é \x00\x1f \"\\/ 😀"}, {"content": [{"type": "text"}]}):
        message = types.JSONRPCResponse(jsonrpc="2.0", id=7, result=result)
        assert dump_response(message) == sdk(message)


class Colour(enum.Enum):
    RED = "red"


class Name(str):
    pass


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize("value", [
    2**64, "\ud800", {1: "an int key"}, datetime.datetime(2026, 1, 2, 3, 4, 5),
    Point(1), Name("x"), object(),
])
def test_what_orjson_could_write_otherwise_is_left_to_the_sdk(value):
    message = types.JSONRPCResponse(jsonrpc="2.0", id=1, result={"x": value})
    assert dump_response(message) is None


def test_only_responses_with_their_three_fields_are_written_here():
    error = types.JSONRPCError(jsonrpc="2.0", id=1,
                               error=types.ErrorData(code=-32600, message="no"))
    assert dump_response(error) is None
    notification = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/progress")
    assert dump_response(notification) is None


def test_an_enum_or_uuid_is_written_as_the_sdk_writes_it():
    for value in (Colour.RED, uuid.UUID(int=12345)):
        message = types.JSONRPCResponse(jsonrpc="2.0", id=1, result={"x": value})
        assert dump_response(message) in (None, sdk(message))
