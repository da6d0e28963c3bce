"""A ``select_context`` request, read once into one frozen value.

Everything a call needs to know about its request is derived here, in one pass, and then only
read: the format and the views (``paging.formats``), which host messages are outgoing only
(``ephemeral`` ones and resident system messages: never stored, never recalled), each message's
content fingerprint and chain id (the ledger's history ids), each view's key (what calibration
and the landing of edits compare between calls), role and interruption, and distillation's
``(history id, message)`` entries. The ledger stores from it, the sampling judge plans from it,
and the window selects and renders from it (``index.window``).

Fingerprints are content hashes of the canonical JSON, which ``index`` computes (incrementally,
``index.request``); :func:`read` asks for them through a callback once it knows which messages
are skipped, so this module stays pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from context_paging.paging.formats import (
    FORMATS,
    Format,
    FormatError,
    Views,
    detect_format,
    to_views,
)
from context_paging.paging.messages import INTERRUPTED, tool_call_blocks, tool_call_ids
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
    if fmt == "auto":
        fmt = detect_format(messages)
    elif fmt not in FORMATS:
        raise FormatError(f"format {fmt!r} is not one of auto, {', '.join(FORMATS)}")
    for index in ephemeral:
        if not 0 <= index < len(messages):
            raise FormatError(f"ephemeral index {index} is outside 0..{len(messages) - 1}")
    return fmt, to_views(messages, fmt)  # type: ignore[arg-type]


def read(messages: Sequence[Any], fmt: str, ephemeral: Sequence[int], prints: Prints,
         stored: Sequence[str] = (), validate: bool = False,
         earlier: Request | None = None) -> Request:
    """The request value. ``prints(skip)``: the fingerprint of every host message, None for the
    skipped ones. ``validate``: check the exchanges (``paging.units.normalize``), so a
    malformed request is refused before anything is stored (specs/paging.md §1.5), and with no
    ``earlier`` before its fingerprints are taken; the result is kept for the selector.

    ``earlier``: the same session's previous request. What it derived for the leading messages
    both share is reused instead of derived again (the value is the same either way;
    tests/test_select_cost.py proves it against reading from scratch): its ids for the shared
    fingerprints, and its normalization and per-view fields for the leading views both share:
    those of the leading ``stored`` messages of an ``after_id`` request whose ids it holds, or,
    for the whole conversation, of the leading messages with its fingerprints."""
    fmt, views = parse(messages, fmt, ephemeral)
    skip = frozenset(ephemeral) | frozenset(views.resident)
    same = _shared_views(views, stored, earlier)
    fingerprints: tuple[str | None, ...] | None = None
    if earlier is not None and not stored:
        # The whole conversation again: its fingerprints (mostly reused, index.request) show
        # how many leading messages are the earlier request's, so they are taken first here.
        fingerprints = tuple(prints(skip))
        same = _unchanged_views(views, fingerprints, earlier)
    vms = [v.message for v in views.views]
    normalized = None
    if validate:
        known = None
        if same and earlier is not None and earlier.normalized is not None:
            known = (earlier.normalized, same)
        normalized = normalize(vms, known)
    if fingerprints is None:
        fingerprints = tuple(prints(skip))
    ids = tuple(chain_ids(fingerprints, earlier))
    n = len(views.views)
    outgoing = [False] * n
    keys: list[str | None] = [None] * n
    roles: list[str] = [""] * n
    interrupted = [False] * n
    positions: list[int] = []
    entries: list[Entry] = []
    if same and earlier is not None:  # every view before ``same`` is stored, in both
        outgoing[:same] = earlier.outgoing[:same]
        keys[:same] = earlier.keys[:same]
        roles[:same] = earlier.roles[:same]
        interrupted[:same] = earlier.interrupted[:same]
        positions[:] = range(same)
        entries[:] = zip((ids[v.source] for v in views.views[:same]), vms[:same], strict=True)
    for index, view in enumerate(views.views[same:], same):
        message = view.message
        roles[index] = str(message.get("role"))
        # as calibration has always read it: the stop reason alone, whatever the role
        interrupted[index] = message.get("stopReason") in INTERRUPTED
        if view.source in skip:
            outgoing[index] = True
            continue
        history_id = ids[view.source]
        keys[index] = f"{history_id}#{view.part}"
        positions.append(index)
        entries.append((str(history_id), message))
    return Request(tuple(messages), fmt, views, fingerprints, ids, tuple(outgoing), tuple(keys),
                   tuple(roles), tuple(interrupted),
                   tuple(positions), tuple(entries), normalized)


def _unchanged_views(views: Views, fingerprints: Sequence[str | None],
                     earlier: Request) -> int:
    """How many leading views of a whole-conversation request are those of ``earlier``: the
    views of its leading messages whose fingerprints are the earlier request's, up to the first
    outgoing-only one (no fingerprint, so nothing says it is unchanged). The same fingerprint
    is the same JSON value, so the same views, roles, stop reasons; and the same fingerprints
    from the start give the same chain ids, so the same keys (:func:`_shared_views` says why
    Responses is left out)."""
    if views.format == "responses" or earlier.format != views.format:
        return 0
    count = common_start(fingerprints, earlier.fingerprints)
    if None in fingerprints[:count]:
        count = fingerprints.index(None)
    same = sum(views.parts[:count])
    if sum(earlier.views.parts[:count]) != same or any(earlier.outgoing[:same]):
        return 0
    return same


def _shared_views(views: Views, stored: Sequence[str], earlier: Request | None) -> int:
    """How many leading views are those of ``earlier`` (0: none known): the views of the
    leading ``stored`` messages of an ``after_id`` request when ``earlier`` holds the same ids
    there, all of them stored (so none outgoing there). Ids are a hash chain, so the same id
    means the same messages up to it; a view depends only on its message and those before it
    in every format but Responses, whose runs of items can grow with later items."""
    count = len(stored)
    if (earlier is None or not count or views.format == "responses"
            or earlier.format != views.format or len(earlier.ids) < count
            or earlier.ids[count - 1] != stored[-1] or earlier.ids[:count] != tuple(stored)):
        return 0
    same = sum(views.parts[:count])
    if sum(earlier.views.parts[:count]) != same or any(earlier.outgoing[:same]):
        return 0
    return same
