"""``serve`` reads each request line once (server/mcp/transport.py): stdin's bytes into one reused
buffer, split into lines exactly as a text reader splits them, and parsed with orjson into the
very message the SDK's own ``validate_json`` makes of the line, or left to the SDK."""

from __future__ import annotations

import io
import json
import os
import threading

import mcp_types as types
import pytest
from context_paging.server.mcp.transport import SDK_DEPTH, _Lines, oversize, parse_message
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import halfway

LEAVES = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
          | st.floats(allow_nan=True, allow_infinity=True)
          | st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


def sdk(line: bytes) -> object:
    """What the SDK's stdio transport makes of a line: its message, or the error it reports."""
    try:
        return types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        return exc


def same_value(a: object, b: object) -> bool:
    """Equal, and of the same types all the way down (1 and 1.0 are not the same request)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def check_against_sdk(line: bytes) -> None:
    parsed = parse_message(line)
    expected = sdk(line)
    if parsed is None:
        return  # left to the SDK: it reads the line itself, as before
    assert not isinstance(expected, Exception), (line[:200], expected)
    assert type(parsed) is type(expected)
    assert same_value(parsed.model_dump(by_alias=True, exclude_unset=True),
                      expected.model_dump(by_alias=True, exclude_unset=True))
    assert parsed.model_fields_set == expected.model_fields_set


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(st.text(max_size=8), VALUES, max_size=4),
       st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=8) | st.none(),
       st.sampled_from(["tools/call", "tools/list", "notifications/initialized", None]))
def test_a_parsed_line_is_the_message_the_sdk_makes_of_it(arguments, ident, method):
    request: dict = {"jsonrpc": "2.0", "params": {"name": "select_context",
                                                  "arguments": arguments}}
    if ident is not None:
        request["id"] = ident
    if method is not None:
        request["method"] = method
    else:
        request["result"] = request.pop("params")  # a response (to a sampling request)
    for ascii_only in (True, False):
        check_against_sdk((json.dumps(request, ensure_ascii=ascii_only) + "\n").encode(
            "utf-8", "surrogatepass"))


@pytest.mark.parametrize("line", [
    b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":1.0,"method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":[1],"method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":1,"method":5}',
    b'{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}',
    b'{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}',
    b'{"jsonrpc":"2.0","id":1,"error":{"code":"1","message":"m"}}',
    b'{"jsonrpc":"2.0","id":"1","method":"x","params":{"_meta":{"progressToken":true}}}',
    b'{"jsonrpc":"2.0","method":"notifications/initialized","params":null}',
    b'{"jsonrpc":"2.0","id":1,"method":"x","extra":1}',
    b' {"jsonrpc":"2.0","id":1,"method":"x"}\r\n',
])
def test_odd_but_readable_lines_become_what_the_sdk_makes_of_them(line):
    parsed, expected = parse_message(line), sdk(line)
    assert (parsed is None) == isinstance(expected, Exception)
    check_against_sdk(line)


def nested(depth: int) -> bytes:
    """A tools/call line whose arrays and objects nest ``depth`` deep in all."""
    value: object = 1
    for _ in range(depth - 2):  # the request and its params are two; arguments the third
        value = {"x": value}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "search_history", "arguments": value}}).encode()


@pytest.mark.parametrize("line", [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"q":"\\ud800"}}',  # lone surrogate
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"q":"\xff"}}',  # not UTF-8
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n":NaN}}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n":123456789012345678901234}}',
    b'{"jsonrpc":"2.0","id":123456789012345678901234,"method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n":1e400}}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n":-1e19}}',
    b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
    b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]',
    b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":1,"method":',
    b"\n",
    nested(SDK_DEPTH + 1),
    # a number orjson rounds the other way at a halfway point (more than 768 digits)
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n":1017554834493971.5625'
    + b"0" * 749 + b"}}",
])
def test_a_line_orjson_might_read_otherwise_is_left_to_the_sdk(line):
    assert parse_message(line) is None


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=1e-300, max_value=1e300), st.integers(min_value=0, max_value=1200))
def test_long_numbers_at_a_halfway_point_come_through_as_the_sdk_reads_them(value, zeros):
    line = (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n":'
            + halfway(value, zeros) + b"}}")
    check_against_sdk(line)


def test_nesting_as_deep_as_the_sdk_reads_is_parsed_and_one_more_is_not():
    assert not isinstance(sdk(nested(SDK_DEPTH)), Exception)
    assert isinstance(sdk(nested(SDK_DEPTH + 1)), Exception)  # the SDK's own limit, pinned
    check_against_sdk(nested(SDK_DEPTH))
    assert parse_message(nested(SDK_DEPTH)) is not None


def test_floats_and_large_integers_come_through_as_the_sdk_reads_them():
    for number in ("0.1", "-0.0", "1e-320", "2.5e18", "9007199254740993", "-9223372036854775808",
                   "18446744073709551615", "9.223372036854775e18", "1E5", "3.0"):
        line = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n":' + number + "}}"
        assert parse_message(line.encode()) is not None, number  # read here, not by the SDK
        check_against_sdk(line.encode())


def read_all(chunks: list[bytes]) -> list[bytes]:
    """The lines :class:`_Lines` makes of ``chunks`` written one by one into a pipe."""
    read, write = os.pipe()

    def writer() -> None:
        try:
            with os.fdopen(write, "wb", buffering=0) as out:
                for chunk in chunks:
                    out.write(chunk)
        except BrokenPipeError:  # the reader failed and closed its end
            pass

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        lines = _Lines(read)
        got = []
        while line := lines.readline():
            got.append(bytes(line))
        assert not lines.readline()  # the end stays the end
    finally:
        os.close(read)
        thread.join()
    return got


def text_lines(data: bytes) -> list[str]:
    """The lines the SDK's own stdin reader (a text wrapper, universal newlines) makes."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="latin-1").readlines()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=3 << 20),
                          st.sampled_from([b"\n", b"\r\n", b"\r", b"\r\r\n"])), max_size=5),
       st.booleans(), st.integers(min_value=1, max_value=5 << 20),
       st.sampled_from([None, 1 << 20, 3 << 19]))
def test_lines_split_as_a_text_reader_splits_them(sizes, unterminated, piece, keep):
    from context_paging.server.mcp import transport

    data = b"".join(bytes([65 + n % 26]) * size + end for n, (size, end) in enumerate(sizes))
    if unterminated:
        data += b"tail without a newline"
    chunks = [data[i:i + piece] for i in range(0, len(data), piece)]
    default = transport._KEEP
    transport._KEEP = keep or default  # a small buffer: lines moved to its front, and it grown
    try:
        got = read_all(chunks)
    finally:
        transport._KEEP = default
    assert got == data.splitlines(keepends=True)
    assert [line.rstrip(b"\r\n").decode("latin-1") for line in got] == [
        line.rstrip("\n") for line in text_lines(data)]


@pytest.mark.parametrize("data", [b"a\rb\n", b"a\r", b"\r\n\r\r", b"a\r\nb", b"\r" * 5 + b"x"])
@pytest.mark.parametrize("piece", [1, 2, 100])
def test_a_carriage_return_ends_a_line_as_it_does_for_a_text_reader(data, piece):
    got = read_all([data[i:i + piece] for i in range(0, len(data), piece)])
    assert [line.rstrip(b"\r\n").decode() for line in got] == [
        line.rstrip("\n") for line in text_lines(data)]


def test_the_first_bytes_of_each_line_are_reported_before_it_is_whole():
    read, write = os.pipe()
    lines = _Lines(read)
    seen: list[int] = []
    lines.on_bytes = lambda: seen.append(len(seen))
    os.write(write, b'{"a":')
    os.write(write, b"1}\n")
    os.close(write)
    try:
        assert bytes(lines.readline()) == b'{"a":1}\n'
        assert not lines.readline()
    finally:
        os.close(read)
    assert seen == [0]


def test_a_line_over_the_limit_is_told_by_its_bytes_and_its_id_found_at_either_end():
    body = '"method":"tools/call","params":{"x":"' + "é" * 600 + '"}'
    head_first = f'{{"jsonrpc":"2.0","id":7,{body}}}\n'.encode()
    tail_last = f'{{{body},"jsonrpc":"2.0","id":"a-9"}}\n'.encode()
    assert oversize(head_first, len(head_first)) is None
    big = oversize(head_first, len(head_first) - 1)
    assert big is not None and (big.size, big.ident, big.tool_call) == (len(head_first), 7, True)
    big = oversize(memoryview(tail_last), 1000)
    assert big is not None and (big.size, big.ident, big.tool_call) == (len(tail_last), "a-9",
                                                                       True)


def test_a_buffer_grown_past_what_it_keeps_is_given_back_after_its_line(monkeypatch):
    from context_paging.server.mcp import transport

    monkeypatch.setattr(transport, "_KEEP", 4 << 20)
    read, write = os.pipe()
    lines = _Lines(read)
    big = b"x" * (5 << 20) + b"\n"
    thread = threading.Thread(target=lambda: (os.write(write, big), os.write(write, b"next\n"),
                                              os.close(write)))
    thread.start()
    try:
        assert bytes(lines.readline()) == big
        grown = len(lines._buf)
        assert bytes(lines.readline()) == b"next\n"
        assert not lines.readline()
    finally:
        thread.join()
        os.close(read)
    assert grown > 4 << 20 and len(lines._buf) <= 4 << 20


def test_a_line_past_the_cap_is_read_past_in_bounded_memory_and_the_next_line_read():
    """A line of many times the cap (or without end) never grows the buffer past the cap and a
    read: it is dropped as it comes in, its size counted and its edges kept for its id."""
    from context_paging.server.mcp import transport

    cap = 3 * transport._READ  # the buffer grows (to 4 MiB) before the line is past the cap
    big = (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"'
           + b"y" * (40 * transport._READ) + b'"},"id":8}\n')
    read, write = os.pipe()
    lines = _Lines(read, cap=cap)
    seen: list[int] = []
    lines.on_bytes = lambda: seen.append(1)
    thread = threading.Thread(target=lambda: (os.write(write, big), os.write(write, b"next\n"),
                                              os.write(write, b"z" * (3 * cap)),
                                              os.close(write)))
    thread.start()
    try:
        skipped = lines.readline()
        assert isinstance(skipped, transport.Skipped)
        assert skipped.size == len(big) and len(lines._buf) <= 2 * transport._READ
        assert skipped.head == big[:transport._EDGE] and skipped.tail == big[-transport._EDGE:]
        found = oversize(skipped, cap)
        assert found is not None and (found.size, found.ident, found.tool_call) == (
            len(big), 7, True)
        assert bytes(lines.readline()) == b"next\n"
        unended = lines.readline()  # no newline before the end of the input
        assert isinstance(unended, transport.Skipped) and unended.size == 3 * cap
        assert not lines.readline()
    finally:
        thread.join()
        os.close(read)
    assert len(lines._buf) <= 2 * transport._READ  # given back
    assert 1 <= len(seen) <= 3  # at most once a line, not once per read of the skipped one


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_a_line_read_past_ends_where_a_text_reader_ends_it(piece):
    from context_paging.server.mcp import transport

    cap = 1000
    data = (b"y" * (3 * cap) + b"\r\n" + b"next\r" + b"z" * (2 * cap) + b"\r" + b"last\n"
            + b"w" * (2 * cap) + b"\r")
    read, write = os.pipe()
    lines = _Lines(read, cap=cap)
    thread = threading.Thread(target=lambda: ([os.write(write, data[i:i + piece])
                                               for i in range(0, len(data), piece)],
                                              os.close(write)))
    thread.start()
    try:
        got = []
        while line := lines.readline():
            got.append(line if isinstance(line, transport.Skipped) else bytes(line))
    finally:
        thread.join()
        os.close(read)
    expected = data.splitlines(keepends=True)
    assert len(got) == len(expected)
    for line, whole in zip(got, expected, strict=True):
        if isinstance(line, transport.Skipped):  # only a line over the cap, never a short one
            assert len(whole) > cap and line.size == len(whole)
            assert (line.head, line.tail) == (whole[:transport._EDGE], whole[-transport._EDGE:])
        else:
            assert line == whole
