"""JSON encodings on select_context's hot path, through orjson where the bytes come out the same.

``bench/select_bench.py``'s workload (901 messages, 15 MiB) measured in one run: the canonical
form of every message costs 181 ms with ``json.dumps(sort_keys=True, separators=(",", ":"))``
and 35 ms with ``orjson.dumps(OPT_SORT_KEYS)``. The canonical form feeds the ledger's
fingerprints, so its bytes must never change (they make every stored history id). orjson writes
the same bytes as the json module for str keys, strings, ints, booleans, null, lists and dicts,
except: non-ASCII text (json escapes it), DEL (json escapes it as ``\\u007f``), floats (the two
print exponents differently) and integers beyond 64 bits (orjson refuses). :func:`plain`
finds the floats and other types; the rest is checked on the bytes. Anything else goes through
the json module, as before. Without orjson installed, everything does.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # optional speed-up: the json module gives the same bytes
    orjson = None  # type: ignore[assignment]

_LEAVES = (str, int, bool, type(None))


def plain(value: Any) -> bool:
    """Only dicts with str keys, lists, str, int, bool and None (exact types, no floats)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            if not all(type(k) is str for k in item):
                return False
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind not in _LEAVES:
            return False
    return True


def canonical(value: Any) -> bytes:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"))`` as ASCII bytes."""
    if orjson is not None and plain(value):
        try:
            data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # an integer beyond 64 bits
            data = b""
        if data and data.isascii() and b"\x7f" not in data:
            return data
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("ascii")


def line(value: Any) -> bytes:
    """One JSON line for the ledger (UTF-8). orjson's compact form where the value is plain
    (no floats, so no NaN it would write as null); else the json module's, lone surrogates
    kept as before."""
    if orjson is not None and plain(value):
        try:
            return orjson.dumps(value) + b"\n"
        except TypeError:  # lone surrogates or an integer beyond 64 bits
            pass
    return (json.dumps(value, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
