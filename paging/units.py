"""Eviction units: normalization, grouping, views and cut identities.

The rules are in docs/selection.md, "Interrupted exchanges" to "The cut point".

Everything here works on indexes into the caller's message list, never on copies, so the
selector can answer with indexes and the caller rebuilds its own provider format.

An *atom* is the smallest thing that may leave the window: an assistant together with its
contiguous tool results, or any other single message. Normalization validates every exchange
(the whole input, before any cut) and drops interrupted ones — assistants whose ``stopReason``
is ``aborted`` or ``error``, with the 0..n results they got, text-only failed replies too. They
stay in stored history; only this request omits them.

Grouping splits the atoms into *prefix* atoms (before the first request), *completed turns*
(a request up to the next one) and the *active turn* (the last request): its request envelope
(the user message plus attached custom and outgoing-only messages; a custom-started request is
the custom alone), its exchanges (evictable one by one) and its trailing outgoing-only messages
(sent last, never evicted). A *view* lists the evictable units in FIFO order.

Changed from upstream (weakness W4, docs/selection.md, "Differences from upstream"): a ``system``,
``bashExecution``, ``compactionSummary``, ``branchSummary`` (or any other non-request role) message
after the active request no longer aborts the call with "unsupported message structure". Directly
after the envelope it joins the envelope (protected like the request it follows; outgoing-only
messages in between do not change that, so a request's ephemeral messages never move the cut); later
it is a single-message exchange that FIFO may evict (it has no history id: a keyless unit). An
outgoing-only assistant travels with its results, so the flags never split an exchange.

``CutKey``, ``Frontier``, ``CutState`` and the ``RawHistory`` protocol at the end say how
stored history identifies an evicted unit across calls (docs/selection.md, "The cut point").
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from context_paging.paging.limits import ContextSelectionError
from context_paging.paging.messages import (  # the one set of Pi-message helpers
    is_interrupted,
    role_of,
    tool_call_ids,
)

Atom = tuple[int, ...]
_FIRST = operator.itemgetter(0)
FrontierKind = Literal["prefix", "completedTurn", "partialTurn"]
REQUEST_ROLES = frozenset({"user", "custom"})


def _structure_error(message: str) -> ContextSelectionError:
    return ContextSelectionError("INVALID_MESSAGE_STRUCTURE", message)


@dataclass(frozen=True)
class Normalized:
    atoms: tuple[Atom, ...]
    dropped: tuple[int, ...]


def _exchange(messages: Sequence[Mapping[str, Any]], roles: Sequence[Any], index: int) -> Atom:
    """The assistant at ``index`` with its contiguous results, validated."""
    calls = tool_call_ids(messages[index])
    expected = set(calls)
    if len(expected) != len(calls):
        raise _structure_error(f"The tool calls of message {index} repeat a call id.")
    seen: set[str] = set()
    end = index + 1
    while end < len(messages) and roles[end] == "toolResult":
        call_id = messages[end].get("toolCallId")
        if call_id not in expected or call_id in seen:
            raise _structure_error(
                f"Tool result {end} ({call_id!r}) matches no open call of message {index}."
            )
        seen.add(call_id)
        end += 1
    if len(seen) != len(expected) and not is_interrupted(messages[index]):
        raise _structure_error(
            f"The tool calls of message {index} have {len(seen)} of {len(expected)} results."
        )
    return tuple(range(index, end))


def normalize(messages: Sequence[Mapping[str, Any]],
              known: tuple[Normalized, int] | None = None) -> Normalized:
    """Validate every exchange and drop the interrupted ones
    (docs/selection.md, "Interrupted exchanges").

    ``known = (earlier, same)``: ``earlier`` is the normalization of a list whose first
    ``same`` messages are these ones (an earlier request of the conversation). An atom's
    validity and extent depend only on its own messages and the role of the one after it, so
    every atom of ``earlier`` before the last one starting within ``same`` holds here too; only
    the rest is walked. The result is the same as without ``known``."""
    start, atoms, dropped = _known_prefix(known)
    roles = [None] * start + [message.get("role") for message in messages[start:]]
    index = start
    while index < len(messages):
        role = roles[index]
        if role == "toolResult":
            raise _structure_error(f"Tool result {index} does not follow its tool call.")
        if role != "assistant":
            atoms.append((index,))
            index += 1
            continue
        atom = _exchange(messages, roles, index)
        (dropped.extend if is_interrupted(messages[index]) else atoms.append)(atom)
        index = atom[-1] + 1
    return Normalized(tuple(atoms), tuple(dropped))


def _known_prefix(known: tuple[Normalized, int] | None) -> tuple[int, list[Atom], list[int]]:
    """(where to walk from, the kept atoms and dropped indexes before it) of ``normalize``'s
    ``known``: the start of the last kept atom that starts within the unchanged messages (it
    may grow: results can follow it); every atom before it ends before it."""
    if known is None or known[1] <= 0:
        return 0, [], []
    earlier, same = known
    position = bisect.bisect_right(earlier.atoms, same - 1, key=lambda atom: atom[0]) - 1
    if position <= 0:
        return 0, [], []
    start = earlier.atoms[position][0]
    dropped = earlier.dropped[: bisect.bisect_left(earlier.dropped, start)]
    return start, list(earlier.atoms[:position]), list(dropped)


@dataclass(frozen=True)
class ActiveTurn:
    request: tuple[int, ...]
    exchanges: tuple[Atom, ...]
    trailing: tuple[int, ...]


@dataclass(frozen=True)
class Groups:
    prefixes: tuple[Atom, ...]
    turns: tuple[tuple[Atom, ...], ...]  # completed turns, each as its atoms
    active: ActiveTurn | None


def _request_starts(
    messages: Sequence[Mapping[str, Any]], atoms: Sequence[Atom], outgoing: Sequence[bool],
    roles: Sequence[Any] | None = None,
) -> list[int]:
    """Atom positions that start a request (docs/selection.md, "Eviction units"). ``roles``: each
    message's ``get("role")``, when the caller has them."""
    firsts = list(map(_FIRST, atoms))
    kinds = (list(map(roles.__getitem__, firsts)) if roles is not None
             else [messages[first].get("role") for first in firsts])
    if "custom" not in kinds and not any(outgoing):
        # No custom request and nothing outgoing: every user message starts one (the loop
        # below, in C: this is a pass over every atom of the conversation).
        return list(itertools.compress(range(len(kinds)),
                                       map(operator.eq, kinds, itertools.repeat("user"))))
    starts: list[int] = []
    follows_user = False
    for position, first in enumerate(firsts):
        if outgoing[first]:
            continue
        role = kinds[position]
        if role == "user":
            starts.append(position)
            follows_user = True
        elif role == "custom":
            if not follows_user:
                starts.append(position)
        else:
            follows_user = False
    return starts


def envelope_size(
    messages: Sequence[Mapping[str, Any]], atoms: Sequence[Atom], outgoing: Sequence[bool]
) -> int:
    """How many of ``atoms`` (a turn, from its request) form the request envelope."""
    user_request = role_of(messages[atoms[0][0]]) == "user"
    size = probe = 1
    while probe < len(atoms):
        first = atoms[probe][0]
        role = role_of(messages[first])
        if outgoing[first]:
            # Attached to a user request; after a custom request only if a W4 message follows,
            # so this request's outgoing-only messages never change what joins the envelope.
            probe += 1
            size = probe if user_request else size
        elif (user_request and role == "custom") or (
            role not in REQUEST_ROLES and role != "assistant"
        ):
            probe += 1  # W4: a non-request message directly after the request joins it
            size = probe
        else:
            break
    return size


def _active_turn(
    messages: Sequence[Mapping[str, Any]], atoms: Sequence[Atom], outgoing: Sequence[bool]
) -> ActiveTurn:
    size = envelope_size(messages, atoms, outgoing)
    exchanges: list[Atom] = []
    trailing: list[int] = []
    for atom in atoms[size:]:
        if outgoing[atom[0]]:
            trailing.extend(atom)
        else:
            exchanges.append(atom)  # an assistant exchange, or a W4 single message
    request = tuple(index for atom in atoms[:size] for index in atom)
    return ActiveTurn(request, tuple(exchanges), tuple(trailing))


def group(
    messages: Sequence[Mapping[str, Any]], atoms: Sequence[Atom], outgoing: Sequence[bool],
    roles: Sequence[Any] | None = None,
) -> Groups:
    """Split normalized atoms into prefix atoms, completed turns and the active turn.
    ``roles``: each message's ``get("role")``, when the caller has them."""
    starts = _request_starts(messages, atoms, outgoing, roles)
    if not starts:
        return Groups(tuple(atoms), (), None)
    turns = tuple(tuple(atoms[a:b]) for a, b in zip(starts, starts[1:], strict=False))
    active = _active_turn(messages, atoms[starts[-1] :], outgoing)
    return Groups(tuple(atoms[: starts[0]]), turns, active)


# -- views: the evictable units in FIFO order ----------------------------------------------


@dataclass(frozen=True)
class Unit:
    kind: FrontierKind
    messages: tuple[int, ...]
    anchors: tuple[int, ...]  # where its frontier key is looked up (a remainder: the full turn)
    tokens: float


@dataclass(frozen=True)
class View:
    """Evictable units in FIFO order (prefix, completed turns, then active exchanges) and the
    protected active turn; ``protected_tokens`` = resident + request + trailing outgoing."""

    units: tuple[Unit, ...]
    active_start: int  # position of the first partialTurn unit
    active: ActiveTurn | None
    protected_tokens: float

    def indexes(self, count: int) -> tuple[int, ...]:
        """The window after evicting the first ``count`` units, in sending order."""
        out: list[int] = []
        for unit in self.units[count : self.active_start]:
            out.extend(unit.messages)
        if self.active is not None:
            out.extend(self.active.request)
        for unit in self.units[max(count, self.active_start) :]:
            out.extend(unit.messages)
        if self.active is not None:
            out.extend(self.active.trailing)
        return tuple(out)


def make_unit(
    kind: FrontierKind, messages: Sequence[int], costs: Sequence[float], anchors=None
) -> Unit:
    messages = tuple(messages)
    anchors = messages if anchors is None else tuple(anchors)
    return Unit(kind, messages, anchors, sum(costs[i] for i in messages))


def turn_units(turns: Sequence[Sequence[Atom]], costs: Sequence[float]) -> list[Unit]:
    return [make_unit("completedTurn", [i for a in turn for i in a], costs) for turn in turns]


def make_view(
    prefixes: Sequence[Atom],
    turns: Sequence[Unit],
    active: ActiveTurn | None,
    costs: Sequence[float],
    resident: float,
) -> View:
    units = [make_unit("prefix", atom, costs) for atom in prefixes]
    units.extend(turns)
    active_start, protected = len(units), resident
    if active is not None:  # an exchange's frontier key is its assistant's
        units.extend(make_unit("partialTurn", atom, costs, atom[:1]) for atom in active.exchanges)
        protected += sum(costs[i] for i in active.request)
        protected += sum(costs[i] for i in active.trailing)
    return View(tuple(units), active_start, active, protected)


# -- how stored history identifies an evicted unit ---------------------------------------


@dataclass(frozen=True)
class CutKey:
    """Stored identity of a user or assistant message; ``tool_call_id`` is its first call."""

    history_id: str
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Frontier:
    """The last evicted keyed unit: everything up to and including it stays out."""

    kind: FrontierKind
    last_evicted: CutKey
    user_history_id: str | None = None


@dataclass(frozen=True)
class CutState:
    """The remembered cut: its frontier and the frozen notice text re-sent with it."""

    frontier: Frontier
    notice: str

    def to_dict(self) -> dict[str, Any]:
        key = self.frontier.last_evicted
        return {
            "frontier": {
                "kind": self.frontier.kind,
                "last_evicted": {"history_id": key.history_id, "tool_call_id": key.tool_call_id},
                "user_history_id": self.frontier.user_history_id,
            },
            "notice": self.notice,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CutState:
        """Parse ``to_dict`` output; ``ValueError`` names what is wrong."""
        try:
            frontier, key = data["frontier"], data["frontier"]["last_evicted"]
            state = cls(
                Frontier(
                    frontier["kind"],
                    CutKey(key["history_id"], key.get("tool_call_id")),
                    frontier.get("user_history_id"),
                ),
                data["notice"],
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"cut state lacks a field: {error}") from None
        fields = (state.notice, state.frontier.last_evicted.history_id)
        optional = (state.frontier.last_evicted.tool_call_id, state.frontier.user_history_id)
        if (
            state.frontier.kind not in ("prefix", "completedTurn", "partialTurn")
            or not all(isinstance(value, str) for value in fields)
            or not all(value is None or isinstance(value, str) for value in optional)
        ):
            raise ValueError(f"cut state has a field of the wrong kind: {data!r:.200}")
        return state


class RawHistory(Protocol):
    """What the selector needs to know about stored history (the server's ledger). A history
    may also offer ``indexes_of(history_id) -> Iterable[int]``, every message whose
    ``key_of`` names that id (the selector then finds a frontier without a full scan)."""

    def key_of(self, index: int) -> CutKey | None:
        """Cut key of ``messages[index]`` (user/assistant only); None if unknown or ambiguous."""

    def resolves(self, frontier: Frontier) -> bool:
        """upstream ``rawCutFrontierResolves``: the frontier's ids exist, uniquely."""

    def is_last_item(self, index: int) -> bool:
        """``messages[index]`` (an assistant) is the newest stored item, results in order."""

    def tool_reference(self, index: int) -> tuple[str, str, str] | None:
        """For a toolResult: (owning turn history_id, tool_call_id, tool_name), if stored."""
