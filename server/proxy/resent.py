"""Reading a request body that resends an earlier one: only the bytes after the shared start
are parsed.

An agent sends its whole conversation on every request, and the new body repeats the previous
one's bytes up to its newest messages. So the proxy keeps each conversation's last body (its
bytes and spans, server/proxy/wire.py) and reads a new one against the remembered body that shares
the longest start with it, compared in place at memory speed
(``paging.request.common_bytes``). The conversation's elements that end inside the shared start
are the same bytes, so the same values: they are taken as they were, the very same objects
(downstream, the fingerprint memo and the request reader then find them unchanged by identity,
and count, fingerprint and record only the new messages). Everything after the last of them —
the new elements, the rest of the array and the members after it — is parsed as
:func:`wire.read_body` would. Members before the array lie inside the shared start, so their
values are taken too.

The result is the body :func:`wire.read_body` gives, value, spans and number spellings alike
(tests/test_resent.py compares the two over growing, edited and rewound conversations, and over
pairs of bodies): the spellings are those the shared start noted, in order, then the tail's,
never one that only the earlier body had (it may be another conversation's). When no
remembered body shares the array's start, or anything is unusual (the array key twice, bytes
that do not parse), the whole body is read.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from itertools import islice
from typing import Any

from context_paging.paging.request import common_bytes
from context_paging.server.proxy import wire

KEEP = 32  # conversations whose last body is kept
KEEP_BYTES = 128 << 20  # and at most this many bytes of them in all


class Resent:
    """The last body per conversation, and reading new bodies against them."""

    def __init__(self, keep: int = KEEP, keep_bytes: int = KEEP_BYTES) -> None:
        self.keep = keep
        self.keep_bytes = keep_bytes
        self._bodies: OrderedDict[str, wire.Body] = OrderedDict()
        self._lock = threading.Lock()
        self.reused = 0  # bodies read against an earlier one (tests and benches read it)

    def read(self, raw: bytes, field: str) -> wire.Body:
        """``wire.read_body(raw, field)``, reading only what follows the longest start ``raw``
        shares with a remembered body."""
        with self._lock:
            bodies = list(self._bodies.values())
        best, shared = None, 0
        for body in bodies:
            length = common_bytes(body.raw, raw)
            if length > shared:
                best, shared = body, length
        if best is not None and field in best.spans:
            try:
                found = read_after(best, raw, shared, field)
            except (ValueError, RecursionError):  # not JSON after all: the full read says why
                found = None
            if found is not None:
                self.reused += 1
                return found
        return wire.read_body(raw, field)

    def remember(self, conversation: str, body: wire.Body) -> None:
        with self._lock:
            self._bodies.pop(conversation, None)
            self._bodies[conversation] = body
            total = sum(len(b.raw) for b in self._bodies.values())
            while len(self._bodies) > self.keep or (total > self.keep_bytes
                                                    and len(self._bodies) > 1):
                _, dropped = self._bodies.popitem(last=False)
                total -= len(dropped.raw)


def read_after(previous: wire.Body, raw: bytes, shared: int, field: str) -> wire.Body | None:
    """The body of ``raw``, which shares its first ``shared`` bytes with ``previous``'s; None
    when the shared start does not reach into the conversation array."""
    start, _ = previous.spans[field]  # the array's "["
    if shared <= start:
        return None
    kept = bisect.bisect_right([end for _, end in previous.items], shared)
    at = previous.items[kept - 1][1] if kept else start + 1
    tail_raw = raw[at:]
    tail = wire.decode(tail_raw)  # at a character boundary: just after "}" or "["
    if len(previous.counted) != len(previous.items) + 1:
        return None
    # the spellings the shared start noted (the first ones in it), then the tail's: never one
    # that only the earlier body's own end had, which a full read of this one does not see
    shared_numbers = previous.counted[kept]
    decoder = wire.SpellingDecoder(dict(islice(previous.numbers.items(), shared_numbers)))
    more, end, spans = wire.scan_elements(tail, 0, bool(kept), decoder)
    # from the "[" the decoder counted before the first element too
    counted = (*(previous.counted[:kept + 1] if kept else ()), *decoder.counted)
    value: dict[str, Any] = {k: v for k, v in previous.value.items()
                             if previous.spans[k][1] <= start}
    members: dict[str, tuple[int, int]] = {k: s for k, s in previous.spans.items()
                                           if s[1] <= start}
    tail_spans: dict[str, tuple[int, int]] = {field: (0, end)}
    value[field] = [*previous.value[field][:kept], *more]
    following = wire.after_member(tail, end)
    if following is not None:
        after: dict[str, Any] = {}
        _, after_spans, again = wire.scan_members(tail, following, field, after, {}, None,
                                                  decoder)
        if again is not None or field in after:
            return None  # the array key twice: the full read decides which counts
        value.update(after)
        tail_spans.update(after_spans)
    byte_spans, byte_items = wire.in_bytes(tail, tail_raw, tail_spans, tuple(spans), at)
    members.update(byte_spans)
    members[field] = (start, byte_spans[field][1])
    return wire.checked(raw, value, members, (*previous.items[:kept], *byte_items), field,
                        decoder.numbers, counted)


def same_objects(items: list, objects: list) -> int:
    """How many leading ``items`` are the very objects of ``objects``: a body read after an
    earlier one (:func:`read_after`) reuses that body's values for the bytes they share, so
    whatever was worked out for those values still holds for them."""
    same = 0
    for mine, theirs in zip(items, objects):  # noqa: B905 (the shorter one ends it)
        if mine is not theirs:
            break
        same += 1
    return same

