"""A ``select_context`` request, read once into one frozen value.

Everything a call needs to know about its request is derived here, in one pass, and then only
read: the format and the views (``paging.formats``), which host messages are outgoing only
(``ephemeral`` ones and resident system messages: never stored, never recalled), each message's
content fingerprint and chain id (the ledger's history ids), each view's key (what calibration
and the landing of edits compare between calls), role and interruption, and distillation's
``(history id, message)`` entries. The ledger stores from it, the sampling judge plans from it,
and the window selects and renders from it (``index.window.pipeline``).

Fingerprints are content hashes of the canonical JSON, which ``index`` computes (incrementally,
``index.window.request``); :func:`read` asks for them through a callback once it knows which
messages are skipped, so this module stays pure. """

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from context_paging.paging.formats import (
    FORMATS,
    Format,
    FormatError,
    Views,
    detect_format,
    reusable,
    to_views,
)
from context_paging.paging.messages import INTERRUPTED, tool_call_blocks, tool_call_ids
from context_paging.paging.resident import resident_indexes
from context_paging.paging.units import Normalized, normalize

Prints = Callable[[Collection[int]], Sequence[str | None]]
Entry = tuple[str, dict[str, Any]]


def chain_ids(fingerprints: Sequence[str | None],
              earlier: Request | None = None) -> list[str | None]:
    """History ids for a conversation: ``id = H(parent id, fingerprint)``, so a re-sent prefix
    gets the same ids and an edit starts a new branch. ``None`` fingerprints (outgoing-only
    messages) get no id and take no part in the chain. ``earlier``: a request whose ids are
    taken as they are for the fingerprints it shares at the start (an id depends only on the
    fingerprints up to it)."""
    same = 0 if earlier is None else common_start(fingerprints, earlier.fingerprints)
    ids: list[str | None] = list(earlier.ids[:same]) if earlier is not None else []
    previous = next((i for i in reversed(ids) if i is not None), "")
    for fp in fingerprints[same:]:
        if fp is None:
            ids.append(None)
            continue
        previous = "m" + hashlib.blake2b(f"{previous}:{fp}".encode(), digest_size=10).hexdigest()
        ids.append(previous)
    return ids


def common_start(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items ``a`` and ``b`` share: slices compared in C, halving the
    length on a mismatch (a whole shared prefix, the usual case, costs one comparison)."""
    low, high = 0, min(len(a), len(b))  # a[:low] == b[:low]; the answer is at most high
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def common_bytes(a: bytes, b: bytes) -> int:
    """:func:`common_start` of two byte strings without copying them: each probe compares a
    window of ``a`` in place with ``b`` at the same offset (``startswith`` over a memoryview),
    so a 16 MB shared prefix costs about one pass over it at memory speed."""
    view = memoryview(a)
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if b.startswith(view[low:middle], low):
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True, slots=True)
class Request:
    """One request as read. Per host message: ``fingerprints``, ``ids`` (None: outgoing only).
    Per view: ``outgoing``, ``keys`` (``<history id>#<part>``, None when outgoing), ``roles``,
    ``interrupted``. ``positions``/``entries``: distillation's entries (every stored view) and
    the view index of each. ``normalized``: the selector's validation of the views
    (None when it was not asked for)."""

    messages: tuple[Any, ...]
    format: Format
    views: Views
    fingerprints: tuple[str | None, ...]
    ids: tuple[str | None, ...]
    outgoing: tuple[bool, ...]
    keys: tuple[str | None, ...]
    roles: tuple[str, ...]
    interrupted: tuple[bool, ...]
    positions: tuple[int, ...]
    entries: tuple[Entry, ...]
    normalized: Normalized | None = None

    @property
    def copies(self) -> tuple[Any, ...] | None:
        """Per host message, a copy of its containers that nothing changes, where the views
        are such copies (Pi: a view is its message, copied by ``formats.detached``), else None.
        The ledger keeps them as its records' messages instead of copying every message a
        second time."""
        views = self.views.views
        if self.format != "pi" or len(views) != len(self.messages):
            return None
        return tuple(map(_MESSAGE, views))

    def history_id(self, view: int) -> str | None:
        """The ledger id of a view's host message."""
        return self.ids[self.views.views[view].source]

    def resident_messages(self) -> list[Any]:
        return [self.messages[i] for i in self.views.resident]

    def newest_assistant(self) -> str | None:
        """The history id of the newest assistant view (whose response ``usage`` describes)."""
        for index in range(len(self.roles) - 1, -1, -1):
            if self.roles[index] == "assistant":
                return self.history_id(index)
        return None

    def tool_owners(self) -> dict[int, tuple[str, str, str]]:
        """Tool-result view index -> (history id of the assistant that made the call, call id,
        tool name): what a recovery reference in the window names."""
        owner: dict[int, tuple[str, str, str]] = {}
        calls: dict[str, tuple[str, str]] = {}
        for index, view in enumerate(self.views.views):
            message = view.message
            role = self.roles[index]
            history_id = self.ids[view.source]
            if role == "assistant" and history_id:
                for block in tool_call_blocks(message):
                    calls[block["id"]] = (history_id, block["name"])
            elif role == "toolResult":
                call = calls.get(str(message.get("toolCallId")))
                if call:
                    owner[index] = (call[0], str(message.get("toolCallId")), call[1])
        return owner

    def first_call(self, view: int) -> str | None:
        """The id of an assistant view's first tool call (a cut key names it)."""
        calls = tool_call_ids(self.views.views[view].message)
        return calls[0] if calls else None


def parse(messages: Sequence[Any], fmt: str, ephemeral: Sequence[int]) -> tuple[Format, Views]:
    """The request's format (``auto``: detected) and views; a ``FormatError`` for an unknown
    format or an ephemeral index outside the request."""
    fmt = _checked(messages, fmt, ephemeral)
    return fmt, to_views(messages, fmt)  # type: ignore[arg-type]


def _checked(messages: Sequence[Any], fmt: str, ephemeral: Sequence[int]) -> Format:
    if fmt == "auto":
        fmt = detect_format(messages)
    elif fmt not in FORMATS:
        raise FormatError(f"format {fmt!r} is not one of auto, {', '.join(FORMATS)}")
    for index in ephemeral:
        if not 0 <= index < len(messages):
            raise FormatError(f"ephemeral index {index} is outside 0..{len(messages) - 1}")
    return fmt  # type: ignore[return-value]


def read(messages: Sequence[Any], fmt: str, ephemeral: Sequence[int], prints: Prints,
         stored: Sequence[str] = (), validate: bool = False,
         earlier: Request | None = None) -> Request:
    """The request value. ``prints(skip)``: the fingerprint of every host message, None for the
    skipped ones. ``validate``: check the exchanges (``paging.units.normalize``), so a malformed
    request is refused before anything is stored (docs/sessions.md, "One bad exchange never hides
    the rest"), and with no ``earlier`` before its fingerprints are taken; the result is kept for
    the selector.

    ``earlier``: the same session's previous request. What it derived for the leading messages
    both share is reused instead of derived again (the value is the same either way;
    tests/test_select_cost.py proves it against reading from scratch): its views of them
    (``formats.to_views``), their ids, normalization and per-view fields. Shared are the
    leading ``stored`` messages of an ``after_id`` request whose ids it holds at the same
    places or, for the whole conversation, the leading messages with its fingerprints (the same
    fingerprint is the same JSON value, and the same fingerprints from the start give the same
    chain ids)."""
    fmt = _checked(messages, fmt, ephemeral)
    if earlier is not None and earlier.format != fmt:
        earlier = None
    fingerprints: tuple[str | None, ...] | None = None
    shared = 0
    if earlier is not None and stored:
        shared = common_start(tuple(stored), earlier.ids)
    elif earlier is not None:
        # The whole conversation again: its fingerprints (mostly reused, index.window.request) show
        # how many leading messages are the earlier request's, so they are taken first here.
        resident = frozenset(resident_indexes(messages, fmt))
        try:
            fingerprints = tuple(prints(frozenset(ephemeral) | resident))
        except Exception:  # noqa: BLE001 — not JSON: read from scratch, its error first
            earlier = None
        else:
            shared = _unchanged(fingerprints, earlier, resident)
    start = reusable(messages, fmt, shared)
    views = to_views(messages, fmt, True, earlier.views if earlier else None, start)
    skip = frozenset(ephemeral) | frozenset(views.resident)
    same = 0  # leading views taken from ``earlier``, all stored in both
    if start and earlier is not None:
        same = sum(views.parts[:start])
        if any(earlier.outgoing[:same]):
            same = 0
    vms = list(map(_MESSAGE, views.views))
    normalized = None
    if validate:
        known = None
        if same and earlier is not None and earlier.normalized is not None:
            known = (earlier.normalized, same)
        normalized = normalize(vms, known)
    if fingerprints is None:
        fingerprints = tuple(prints(skip))
    ids = tuple(chain_ids(fingerprints, earlier))
    outgoing: list[bool] = []
    keys: list[str | None] = []
    roles: list[str] = []
    interrupted: list[bool] = []
    positions: list[int] = []
    entries: list[Entry] = []
    for index, view in enumerate(views.views[same:], same):
        message = view.message
        roles.append(str(message.get("role")))
        # as calibration has always read it: the stop reason alone, whatever the role
        interrupted.append(message.get("stopReason") in INTERRUPTED)
        if view.source in skip:
            outgoing.append(True)
            keys.append(None)
            continue
        history_id = ids[view.source]
        outgoing.append(False)
        keys.append(f"{history_id}#{view.part}")
        positions.append(index)
        entries.append((str(history_id), message))
    if same and earlier is not None:  # every view before ``same`` is stored, in both
        return Request(tuple(messages), fmt, views, fingerprints, ids,
                       earlier.outgoing[:same] + tuple(outgoing), earlier.keys[:same] + tuple(keys),
                       earlier.roles[:same] + tuple(roles),
                       earlier.interrupted[:same] + tuple(interrupted),
                       earlier.positions[:same] + tuple(positions),
                       earlier.entries[:same] + tuple(entries), normalized)
    return Request(tuple(messages), fmt, views, fingerprints, ids, tuple(outgoing), tuple(keys),
                   tuple(roles), tuple(interrupted),
                   tuple(positions), tuple(entries), normalized)


_MESSAGE = attrgetter("message")


def _unchanged(fingerprints: Sequence[str | None], earlier: Request,
               resident: frozenset[int]) -> int:
    """How many leading messages of a whole-conversation request have the JSON values of the
    earlier request's: those with its fingerprints, up to the first outgoing-only one that is
    not resident input (no fingerprint, so nothing says it is unchanged). Resident messages
    have none either, but no view depends on one: only their places count, so resident
    messages at the same places in both are passed over."""
    count = common_start(fingerprints, earlier.fingerprints)
    at = 0
    while None in fingerprints[at:count]:
        at = fingerprints.index(None, at, count)
        if at not in resident or at not in earlier.views.resident:
            return at
        at += 1
    return count
