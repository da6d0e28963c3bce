"""The canonical JSON of a message, through orjson where the bytes come out the same.

``bench/select_bench.py``'s workload (901 messages, 15 MiB) measured in one run: the canonical
form of every message costs 181 ms with ``json.dumps(sort_keys=True, separators=(",", ":"))``
and 35 ms with ``orjson.dumps(OPT_SORT_KEYS)``. The canonical form feeds the ledger's
fingerprints, so its bytes must never change (they make every stored history id). orjson writes
the same bytes as the json module for str keys, strings, ints, booleans, null, lists and dicts,
except: non-ASCII text (json escapes it), DEL (json escapes it as ``\\u007f``), floats (the two
print exponents differently) and integers beyond 64 bits (orjson refuses). :func:`plain`
finds the floats and other types; the rest is checked on the bytes. Anything else goes through
the json module, as before. Without orjson installed, everything does.

orjson sets aside about twelve bytes per character of a string before writing it (a 10 MB tool
output took 133 MB; a 120 MB body under a 1.5 GB address-space limit crashed the process inside
orjson), so a value holding a string of more than :data:`ORJSON_MAX_STRING` characters is
written by the json module too (about twice the string at its peak).
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # optional speed-up: the json module gives the same bytes
    orjson = None  # type: ignore[assignment]

_LEAVES = (int, bool, type(None))
ORJSON_MAX_STRING = 1 << 20


def plain(value: Any) -> bool:
    """Only dicts with str keys, lists, str, int, bool and None (exact types, no floats), and
    no string longer than :data:`ORJSON_MAX_STRING`."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if len(item) > ORJSON_MAX_STRING:
                return False
        elif kind is dict:
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

