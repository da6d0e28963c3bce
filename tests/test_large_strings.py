"""A message holding one very large string costs a small multiple of it to fingerprint, store
and count (a 10 MB tool output once took 133 MB in orjson and 100 MB in tiktoken's token list)."""

from __future__ import annotations

import json
import tracemalloc

from context_paging.index.canonical import ORJSON_MAX_STRING, canonical
from context_paging.index.jsonl import dump_line
from context_paging.server.tokens import PIECE_CHARS, cl100k, pieces, text_counter

BIG = "".join(f"line {n}: value = {n * 7}\n" for n in range(ORJSON_MAX_STRING // 10))


def peak_of(work) -> tuple[object, int]:
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = work()
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_the_canonical_form_of_a_message_with_a_huge_string_is_the_json_modules_at_a_small_cost():
    message = {"role": "user", "content": [{"type": "text", "text": BIG}]}
    data, peak = peak_of(lambda: canonical(message))
    assert data == json.dumps(message, sort_keys=True, separators=(",", ":")).encode()
    assert peak < 4 * len(BIG)


def test_a_ledger_line_with_a_huge_string_reads_back_alike_at_a_small_cost():
    record = {"type": "message", "message": {"role": "user", "content": BIG + "é"}}
    line, peak = peak_of(lambda: dump_line(record))
    assert json.loads(line) == record and line.endswith(b"\n")
    assert peak < 4 * len(BIG)


def test_a_huge_text_is_counted_in_pieces_that_add_up_to_the_whole_count(monkeypatch):
    from context_paging.server import tokens

    monkeypatch.setattr(tokens, "spare_core", lambda: True)  # the helper thread too, if any
    encoding, count = cl100k(), text_counter()
    assert encoding is not None and count is not None  # shipped in server/data
    text = BIG * 2
    parts = pieces(text)
    assert len(parts) > 2 and "".join(parts) == text
    assert max(map(len, parts)) <= PIECE_CHARS
    total, peak = peak_of(lambda: count(text))
    assert total == len(encoding.encode_ordinary(text))
    assert peak < 4 * len(text)
