"""What is new in a ``select_context`` request, found without re-reading what is not.

Two ways to avoid paying for the whole history on every call (DESIGN.md "Performance rules"):

* **Send only what is new.** A host passes ``after_id`` (the ``last_message_id`` of an earlier
  reply, or any stored message id) and only the messages after it. :func:`expand` rebuilds the
  full conversation from the ledger: the stored messages are the host's own objects, exactly,
  so everything downstream sees the same request as if the host had sent it whole. An id this
  session does not hold is the coded error ``UNKNOWN_AFTER_ID``: the host sends everything.
* **Whole conversation again.** :class:`FingerprintMemo` remembers each session's last request
  and its fingerprints. A message equal to the one at the same position last time (the same
  object, or structurally equal with the same JSON types) keeps its fingerprint, so only the
  messages after the first difference are serialized and hashed. Equality is strict about types
  because ``1``, ``1.0`` and ``true`` are equal in Python but not in canonical JSON.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import Any

from context_paging.index.ledger import LedgerSession, fingerprint
from context_paging.paging.formats import FormatError
from context_paging.paging.limits import ContextSelectionError

SESSIONS = 16  # sessions whose last request is remembered (a request is held by reference)
IDS = 200_000  # stored message ids whose fingerprint is remembered (for after_id requests)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values: same types all the way down (``1`` is not ``1.0`` nor ``True``).

    The memo compares a request with its snapshot of the last one, whose leaves are the very
    same objects when the host re-sent its own messages: an identity check settles each such
    leaf (an identical object is the same JSON value), and strings, by far the most common
    values, are compared in line rather than through a call each."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict:
        if len(a) != len(b):
            return False
        for key, value in a.items():
            other = b.get(key, _MISSING)
            if value is other:
                continue
            if type(value) is str:
                if type(other) is not str or value != other:
                    return False
            elif not same(value, other):
                return False
        return True
    if kind is list:
        if len(a) != len(b):
            return False
        for value, other in zip(a, b):  # noqa: B905 — the lengths are equal
            if value is not other and not same(value, other):
                return False
        return True
    if kind is float:  # as JSON writes it: 0.0 == -0.0 in Python, and NaN != NaN
        return a.__repr__() == b.__repr__()
    return bool(a == b)


_MISSING = object()


def snapshot(value: Any) -> Any:
    """A copy of the containers (leaves are immutable and shared): a library host may change
    its message objects in place, so the memo must not hold the host's own dicts and lists."""
    kind = type(value)
    if kind is dict:
        return {k: snapshot(v) for k, v in value.items()}
    if kind is list:
        return [snapshot(v) for v in value]
    return value


class FingerprintMemo:
    """Per session: the last request's messages and their fingerprints."""

    def __init__(self) -> None:
        self._last: OrderedDict[str, tuple[Sequence[Any], list[str | None]]] = OrderedDict()
        self._by_id: dict[str, str] = {}  # stored message id -> its fingerprint

    def remember(self, ids: Sequence[str | None], prints: Sequence[str | None]) -> None:
        """Stored ids and their fingerprints, for later ``after_id`` requests."""
        if len(self._by_id) > IDS:
            self._by_id.clear()
        self._by_id.update((i, p) for i, p in zip(ids, prints, strict=True)
                           if i is not None and p is not None)

    def fingerprints(self, session: str, messages: Sequence[Any], skip: Collection[int],
                     stored: Sequence[str] = ()) -> list[str | None]:
        """``ledger.fingerprint`` of every message (None for the ``skip`` ones), reusing the
        last request's values for its unchanged prefix. ``stored``: the ledger ids of the
        first messages (an ``after_id`` request), whose fingerprints are known by id."""
        known = [self._by_id.get(i) for i in stored]
        if stored and None not in known:
            return [*known, *(None if i in skip else fingerprint(m)
                              for i, m in enumerate(messages) if i >= len(known))]
        previous, prints = self._last.get(session, ((), []))
        out: list[str | None] = []
        reused = 0  # the unchanged prefix: its snapshots are kept as they are
        for i, message in enumerate(messages):
            if i == reused and i < len(previous) and same(message, previous[i]):
                out.append(None if i in skip else prints[i] or fingerprint(message))
                reused += 1
                continue
            out.append(None if i in skip else fingerprint(message))
        kept = [previous[i] if i < reused else snapshot(m) for i, m in enumerate(messages)]
        self._last[session] = (kept, out)
        self._last.move_to_end(session)
        while len(self._last) > SESSIONS:
            self._last.popitem(last=False)
        return out


def expand(ledger: LedgerSession, after_id: str, messages: Sequence[Any], fmt: str,
           ephemeral: Sequence[int]) -> tuple[list[Any], str, list[int], list[str]]:
    """The whole conversation for an ``after_id`` request: the stored messages up to and
    including ``after_id``, then ``messages``. Returns (messages, format, ephemeral indexes
    shifted to the whole conversation, the stored ids of the first messages)."""
    path = ledger.path_to(after_id) if isinstance(after_id, str) else None
    if not path:
        raise ContextSelectionError(
            "UNKNOWN_AFTER_ID",
            f"after_id {after_id!r} is not a message stored for {ledger.ref}: send the whole "
            "conversation in messages, without after_id.",
        )
    records = [ledger.records[i] for i in path]
    stored = str(records[-1].get("format"))
    if fmt not in ("auto", stored) or any(r.get("format") != stored for r in records):
        raise ContextSelectionError(
            "UNKNOWN_AFTER_ID",
            f"after_id {after_id!r} was stored in format {stored!r}, not {fmt!r}: send the "
            "whole conversation in messages, without after_id.",
        )
    for index in ephemeral:
        if not 0 <= index < len(messages):
            raise FormatError(f"ephemeral index {index} is outside 0..{len(messages) - 1} "
                              "(with after_id it counts from the first new message)")
    return ([*(r["message"] for r in records), *messages], stored,
            [i + len(records) for i in ephemeral], path)
