"""The ledger's lines: written through orjson where it reads back alike, read by every version.

index.jsonl.dump_line replaced ``json.dumps(record, ensure_ascii=False)`` as the ledger's writer.
The bytes changed (compact separators); what a reader gets back must not, and ledgers written
before the change must still be read and extended.
"""

from __future__ import annotations

import enum
import json
from datetime import UTC, datetime

from context_paging.index.jsonl import dump_line, parse_line
from context_paging.index.ledger import Ledger, fingerprint
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.paging.distill import DistillConfig
from context_paging.paging.request import chain_ids
from hypothesis import given, settings
from hypothesis import strategies as st

LEAVES = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
          | st.floats(allow_nan=True, allow_infinity=True)
          | st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


def old_line(value) -> bytes:
    """The ledger's writer before orjson, byte for byte."""
    return (json.dumps(value, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")


def read_back(raw: bytes):
    values, issues = parse_line(raw.rstrip(b"\n"), "ledger", 1, 0)
    assert not issues and len(values) == 1
    return values[0]


def as_read(value) -> str:
    """A comparable form of a value read back: key order, float text (NaN), types all show."""
    return json.dumps(value, ensure_ascii=True)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_a_new_line_reads_back_as_the_old_writers_line_did(value):
    new = dump_line({"type": "message", "message": value})
    assert new.endswith(b"\n") and new.count(b"\n") == 1
    assert as_read(read_back(new)) == as_read(read_back(old_line({"type": "message",
                                                                   "message": value})))


def test_the_cases_orjson_would_read_back_differently_take_the_json_module():
    class Text(str):
        pass

    class Kind(enum.StrEnum):
        TEXT = "text"

    class Size(enum.IntEnum):
        BIG = 2

    for value in ({"x": float("nan")}, {"x": [1.5, float("inf")]}, {"x": -float("inf")},
                  {"x": 2**64}, {"x": -(2**63) - 1}, {"x": "\ud800 lone"}, {1: "int key"},
                  {"x": Text("a str subclass")}, {"x": (1, 2)}, {"x": Kind.TEXT},
                  {"x": Size.BIG}, {"x": [True, False, None, 0, -1]},
                  {"é": "\x7f\u2028 é \x00\x1f"},
                  {"x": 1e16, "y": 1e-05, "z": -0.0, "w": 0.1 + 0.2}):
        assert as_read(read_back(dump_line(value))) == as_read(read_back(old_line(value)))
    # the json module's own bytes where orjson cannot match them
    assert dump_line({"x": float("nan")}) == old_line({"x": float("nan")})
    assert dump_line({"x": "\ud800"}) == old_line({"x": "\ud800"})
    # a value neither writer can write is still refused, as before
    plain = enum.Enum("Plain", "A")
    for bad in ({"x": datetime(2026, 1, 1, tzinfo=UTC)}, {"x": {1, 2}}, {"x": plain.A}):
        try:
            dump_line(bad)
        except TypeError:
            continue
        raise AssertionError(f"{bad!r} was written")


def test_keys_keep_their_order_and_text_is_utf8_not_escaped():
    line = dump_line({"z": 1, "a": "é ✓ 😀", "m": None})
    assert line == '{"z":1,"a":"é ✓ 😀","m":null}\n'.encode()


def conversation(n):
    out = []
    for i in range(n):
        out += [{"role": "user", "content": f"request {i} é", "timestamp": i},
                {"role": "assistant", "content": f"answer {i}", "score": 0.5 + i},
                ]
    return out


def service(home):
    settings = ContextSettings(token_budget=100_000, estimator="chars4",
                               distill=DistillConfig(enabled=False))
    return ContextService(Ledger(home), settings, None)


def test_a_ledger_written_by_the_old_writer_is_read_and_extended(tmp_path):
    home = tmp_path / "home"
    old = conversation(3)
    ids = chain_ids([fingerprint(m) for m in old])
    lines = []
    parent = None
    for message, message_id in zip(old, ids, strict=True):
        lines.append(old_line({"type": "message", "id": message_id, "parent": parent,
                               "format": "openai", "ts": "2026-01-01T00:00:00.000Z",
                               "message": message}))
        parent = message_id
    lines.append(old_line({"type": "head", "id": parent, "ts": "2026-01-01T00:00:00.000Z"}))
    (home / "ledger").mkdir(parents=True)
    path = home / "ledger" / "old.jsonl"
    path.write_bytes(b"".join(lines))
    assert b'", "' in path.read_bytes()  # really the old writer's spacing

    grown = conversation(5)
    reply = service(home).select("old", grown, fmt="openai")
    assert reply["messages"] == grown
    session = Ledger(home).session("old")
    # the old messages kept their ids (no second branch), the new ones follow them
    assert len(session.records) == len(grown)
    assert session.path_ids() == chain_ids([fingerprint(m) for m in grown])
    assert [session.records[i]["message"] for i in session.path_ids()] == grown
    raw = path.read_bytes().splitlines()
    assert raw[: len(lines)] == [line.rstrip(b"\n") for line in lines]  # never rewritten
    assert b'","' in raw[-2]  # the new lines are orjson's
    # and a fresh process reads both kinds of line into the same history
    items = Ledger(home).session("old").items()
    assert [i.message.content[0].text for i in items if i.kind == "user"] == \
        [f"request {i} é" for i in range(5)]


def test_a_large_append_is_written_line_by_line_whole_and_in_order(tmp_path):
    # 40 messages of 100 KB: each line is made and written in turn, not joined first
    big = [{"role": "user", "content": f"{i} " + "é" * 50_000} for i in range(40)]
    ids = chain_ids([fingerprint(m) for m in big])
    writer = Ledger(tmp_path).session("big")
    assert writer.append(big, ids, "openai") == 40
    raw = (tmp_path / "ledger" / "big.jsonl").read_bytes()
    assert len(raw) > 3 * 2**20 and raw.count(b"\n") == 41  # 40 messages and the head
    fresh = Ledger(tmp_path).session("big")
    assert fresh.path_ids() == ids
    assert [fresh.records[i]["message"] for i in ids] == big
    assert writer.cursor.offset == len(raw)  # the writer did not need to read its lines back
    assert raw == b"".join(dump_line(v) for v in [*map(fresh.records.get, ids),
                                                   {"type": "head", "id": ids[-1],
                                                    "ts": fresh.records[ids[0]]["ts"]}])
