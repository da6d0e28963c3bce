"""What is new in a ``select_context`` request, found without re-reading what is not.

Two ways to avoid paying for the whole history on every call (docs/architecture.md,
"Performance rules"):

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

import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from itertools import repeat, takewhile
from operator import eq, itemgetter
from typing import Any

from context_paging.index.ledger import LedgerSession, fingerprint
from context_paging.paging.formats import FormatError
from context_paging.paging.limits import ContextSelectionError
from context_paging.paging.request import Request

SESSIONS = 16  # sessions whose last request is remembered (a request is held by reference)
IDS = 200_000  # stored message ids whose fingerprint is remembered (for after_id requests)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values: same types all the way down (``1`` is not ``1.0`` nor ``True``,
    ``0.0`` is not ``-0.0``; NaN is NaN, as JSON writes them)."""
    return _equal(a, strict(b))


def _equal(value: Any, snapped: Any) -> bool:
    """``value`` against what :func:`strict` made: Python's own ``==``, which compares the
    containers in C (each identical leaf settled at once, strings compared in C), while each
    number of the snapshot is an :class:`_Exact`, equal only to a number JSON writes alike:
    the only leaves where ``==`` could not tell JSON values apart."""
    try:
        return bool(value == snapped)
    except RecursionError:  # nested deeper than C compares: not known to be the same
        return False


class _Exact:
    """A number in a snapshot: equal to a number of the same type that JSON writes the same
    way (for a float, as ``repr`` writes it: ``-0.0`` is not ``0.0``, any NaN is NaN)."""

    __slots__ = ("kind", "value")

    def __init__(self, value: Any) -> None:
        self.kind = type(value)
        self.value = value.__repr__() if self.kind is float else value

    def __eq__(self, other: object) -> bool:
        if type(other) is not self.kind:
            return other is self or (type(other) is _Exact and other.kind is self.kind
                                     and other.value == self.value)
        return (other.__repr__() if self.kind is float else other) == self.value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"_Exact({self.value!r})"


_NUMBERS = frozenset({int, float, bool})


def strict(value: Any) -> Any:
    """What the memo holds of a message: a copy of the containers (a library host may change
    its message objects in place, so the memo must not hold the host's own dicts and lists),
    strings and other leaves shared, numbers wrapped in :class:`_Exact`; ``==`` against it is
    :func:`same`."""
    kind = type(value)
    if kind is str:  # the most common leaf, shared
        return value
    if kind is dict:
        return {k: strict(v) for k, v in value.items()}
    if kind is list:
        return [strict(v) for v in value]
    if kind is tuple:
        return tuple(strict(v) for v in value)
    if kind in _NUMBERS:
        return _Exact(value)
    # A subclass (an OrderedDict message, say) is copied too, as its plain kind: held as it
    # is, an edit in place would leave it equal to itself and its old fingerprint reused.
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strict(v) for v in value]
    if isinstance(value, tuple):
        return tuple(strict(v) for v in value)
    return value


def fingerprints(messages: Sequence[Any]) -> list[str]:
    """``[index.ledger.fingerprint(m) for m in messages]``.

    On this thread, one message at a time. Hashing on a helper thread beside the serialization
    was measured slower on an idle 2-core machine, 25 ms against 14 ms for the benchmark's
    15 MiB request: the helper waited for the interpreter lock at every hand-over, and every
    canonical form had to stay alive until it was hashed, in memory the next one could not
    reuse (docs/performance-history.md, "2026-12-05: the collector, and helper threads that cost
    more than they saved")."""
    return [fingerprint(m) for m in messages]


class FingerprintMemo:
    """Per session: the last request's messages and their fingerprints."""

    def __init__(self) -> None:
        self._last: OrderedDict[str, tuple[Sequence[Any], list[str | None]]] = OrderedDict()
        self._by_id: dict[str, str] = {}  # stored message id -> its fingerprint
        # Calls of different sessions run at once (index/window/gate.py): the tables change under
        #  it.
        self._lock = threading.Lock()

    def remember(self, ids: Sequence[str | None], prints: Sequence[str | None]) -> None:
        """Stored ids and their fingerprints, for later ``after_id`` requests."""
        with self._lock:
            if len(self._by_id) > IDS:
                self._by_id.clear()
            # In C: an id is None exactly when its fingerprint is (outgoing only), so the one
            # pair that is not an id's is (None, None), taken out again.
            self._by_id.update(zip(ids, prints, strict=True))
            self._by_id.pop(None, None)  # type: ignore[call-overload]

    def fingerprints(self, session: str, messages: Sequence[Any], skip: Collection[int],
                     stored: Sequence[str] = ()) -> list[str | None]:
        """``ledger.fingerprint`` of every message (None for the ``skip`` ones), reusing the
        last request's values for its unchanged prefix. ``stored``: the ledger ids of the
        first messages (an ``after_id`` request), whose fingerprints are known by id."""
        known = list(map(self._by_id.get, stored))
        if stored and None not in known:
            return [*known, *_fingerprints(messages, len(known), skip)]
        previous, prints = self._last.get(session, ((), []))
        # The unchanged prefix, compared in C against the snapshot (each message's numbers
        # strictly, :func:`_equal`): its snapshots and fingerprints are kept as they are.
        # Counted in C, message by message up to the first difference (each compared once:
        # over a freshly parsed request, equal strings are compared byte by byte).
        try:
            reused = len(list(takewhile(bool, map(eq, messages, previous))))
        except RecursionError:
            reused = 0
        out: list[str | None] = list(prints[:reused])
        for i in skip:
            if i < reused:
                out[i] = None
        if None in out:  # skipped last time, not now
            out = [None if i in skip else p or fingerprint(messages[i])
                   for i, p in enumerate(out)]
        out += _fingerprints(messages, reused, skip)
        snapshot = ([*previous[:reused], *map(strict, messages[reused:])], out)
        with self._lock:
            self._last.pop(session, None)
            self._last[session] = snapshot
            while len(self._last) > SESSIONS:
                self._last.popitem(last=False)
        return out


def _fingerprints(messages: Sequence[Any], start: int,
                  skip: Collection[int]) -> list[str | None]:
    """The fingerprints of ``messages[start:]``, None for the ``skip`` ones."""
    indexes = range(start, len(messages))
    prints = iter(fingerprints([messages[i] for i in indexes if i not in skip]))
    return [None if i in skip else next(prints) for i in indexes]


def expand(ledger: LedgerSession, after_id: str, messages: Sequence[Any], fmt: str,
           ephemeral: Sequence[int], earlier: Request | None = None,
           ) -> tuple[list[Any], str, list[int], list[str]]:
    """The whole conversation for an ``after_id`` request: the stored messages up to and
    including ``after_id``, then ``messages``. Returns (messages, format, ephemeral indexes
    shifted to the whole conversation, the stored ids of the first messages).

    ``earlier``: the session's previous request, recorded in this ledger. When it holds
    ``after_id``, its ids up to it are the path (ids are a hash chain: an id commits to its
    parent's, so the ledger's walk back from ``after_id`` finds exactly those), and the walk
    is not made; the records are then read in C (no Python step per stored message)."""
    path = _known_path(ledger, after_id, earlier)
    if path is None:
        path = ledger.path_to(after_id) if isinstance(after_id, str) else None
    if not path:
        raise ContextSelectionError(
            "UNKNOWN_AFTER_ID",
            f"after_id {after_id!r} is not a message stored for {ledger.ref}: send the whole "
            "conversation in messages, without after_id.",
        )
    records = list(map(ledger.records.__getitem__, path))
    stored = str(records[-1].get("format"))
    if fmt not in ("auto", stored) or set(map(dict.get, records, repeat("format"))) != {stored}:
        raise ContextSelectionError(
            "UNKNOWN_AFTER_ID",
            f"after_id {after_id!r} was stored in format {stored!r}, not {fmt!r}: send the "
            "whole conversation in messages, without after_id.",
        )
    for index in ephemeral:
        if not 0 <= index < len(messages):
            raise FormatError(f"ephemeral index {index} is outside 0..{len(messages) - 1} "
                              "(with after_id it counts from the first new message)")
    return ([*map(_MESSAGE, records), *messages], stored,
            [i + len(records) for i in ephemeral], path)


_MESSAGE = itemgetter("message")


def _known_path(ledger: LedgerSession, after_id: Any, earlier: Request | None) -> list[str] | None:
    """The stored ids from the first message to ``after_id`` as ``earlier`` holds them, or None
    (not held, or not all of them in the ledger: the ledger's own walk decides)."""
    if earlier is None or not isinstance(after_id, str):
        return None
    ids = earlier.ids
    try:
        at = len(ids) - 1 if ids and ids[-1] == after_id else ids.index(after_id)
    except ValueError:
        return None
    path = list(ids[:at + 1])
    if None in path:  # outgoing-only messages: never stored, no part of the chain
        path = [i for i in path if i is not None]
    records = ledger.records
    return path if all(map(records.__contains__, path)) else None
