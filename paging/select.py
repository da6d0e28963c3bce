"""The context selector: which messages of an outgoing request are sent.

The rules, step by step, are in docs/selection.md.

A pure port of upstream's ``selectContext`` over Pi-shaped message dicts. The caller (the
server) converts a host request into Pi AgentMessage dicts, computes one token estimate per
message with its estimator, and passes what it knows about stored history as a ``RawHistory``.
The answer is a ``Selection`` of *indexes* into the input plus the text of a leading notice, so
the caller rebuilds the window in the host's own format; the notice is returned as text, not
as a message, so the caller may place it where a strictly alternating API accepts it (W11) —
it is byte-stable either way.

The algorithm, in upstream's order: limits → resident and per-message estimates →
normalization and grouping, which validate the whole input (``paging.units``) →
calibration ``c = context_tokens − raw input estimate`` → resident precheck → fast path
→ provenance and the remembered frontier → one FIFO executor that evicts prefix
units, then completed turns, then active-turn exchanges, only when over the budget and then
down to the target, never the active request envelope, trailing outgoing-only messages or the
unread trailing tool exchange → stable frontier with backward snap →
protected-overflow and recovery modes.

Kept from upstream: error codes and the facts of their messages (numbers printed raw); the
equality rules (at the budget nothing pages; between target and budget nothing advances); the
five fallback causes, each forgetting the frontier and running budget-only; calibration is
computed once from the original input; the frozen notice is re-sent unchanged until the cut
advances; a non-interrupted exchange with missing results anywhere is INVALID_MESSAGE_STRUCTURE.

Changed (docs/selection.md, "Differences from upstream"):

* Identity. Upstream finds raw items by object identity, then timestamp buckets and JSON
  equality. Here the caller answers ``RawHistory.key_of`` / ``tool_reference`` /
  ``is_last_item`` per input index from its ledger, so the selector serializes nothing and is
  linear in the number of messages.
* W1: the notice's read call names the most recently evicted tool output (the last evicted
  tool result whose raw turn is known), not the oldest one.
* W2: without raw history (fallback ``raw-history-unavailable``) the trailing tool exchange
  after the last request is still protected, derived from the input alone (its results are
  complete, or normalization would have raised).
* W4: non-request messages after the active request degrade instead of raising (see
  ``paging.units``). The unread exchange is the last *assistant* exchange of the active turn;
  such single messages after it stay with it.
* Recovery mode needs at least one result it can replace with a read call; without one it
  raises the recovery error instead of sending a "recovery" window that recovered nothing.
* ``first_cut`` (off unless passed; docs/window.md, "The first cut"): a cut made with no remembered
  frontier — the session first crossing the budget — may land deeper than the target; see
  ``first_cut_target``. Without it every cut trims to the target, as upstream.
* W13: notice numbers use fixed en-US grouping. The notice is text, its cost is the caller's
  ``notice_tokens(text)`` (a recovery replacement is costed the same way).
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from context_paging.paging.estimate import js_number
from context_paging.paging.limits import (
    ContextSelectionError,
    Limits,
    context_limits,
    leave_room,
)
from context_paging.paging.notice import (
    overflow_notice,
    paging_notice,
    recovery_notice,
    recovery_replacement,
)
from context_paging.paging.units import (
    ActiveTurn,
    Atom,
    CutKey,
    CutState,
    Frontier,
    Normalized,
    RawHistory,
    Unit,
    View,
    envelope_size,
    group,
    make_unit,
    make_view,
    normalize,
    role_of,
    tool_call_ids,
    turn_units,
)

__all__ = [
    "ContextSelectionError",
    "CutKey",
    "CutState",
    "Frontier",
    "RawHistory",
    "Selection",
    "TokenEstimates",
    "select_context",
]

Mode = Literal["within_budget", "paged", "protected_overflow", "recovery"]
_ROLE = operator.methodcaller("get", "role")


@dataclass(frozen=True)
class TokenEstimates:
    """Provider-calibrated costs aligned with the input; used only with context_tokens."""

    resident_tokens: float
    message_tokens: Sequence[float]


@dataclass(frozen=True)
class Selection:
    indexes: tuple[int, ...]
    notice: str | None
    replacements: dict[int, str]
    mode: Mode
    estimated_tokens: float
    budget_tokens: float
    target_tokens: float
    cut_state: CutState | None
    fallback_reason: str | None
    evicted: tuple[int, ...]
    dropped: tuple[int, ...]
    # The first message whose estimate the window's sums read (the units the cut looked at);
    # the estimates of the messages before it entered only the correction's total.
    looked_from: int = 0


# A notice before it is needed: a frozen text, or the (history_id, tool) it will be built from.
_NoticeKey = str | tuple[str | None, tuple[str, str, str] | None] | None


@dataclass(frozen=True)
class _Keyed:
    count: int
    frontier: Frontier
    notice: _NoticeKey
    raw_estimate: float


@dataclass(frozen=True)
class _Outcome:
    indexes: tuple[int, ...]
    notice: str | None
    mode: Mode
    estimate: float  # uncalibrated
    count: int = 0
    last_keyed: _Keyed | None = None
    last_was_keyless: bool = False
    cut_failure: str | None = None
    replacements: dict[int, str] = field(default_factory=dict)


def _finite_nonnegative(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _valid_weights(weights: TokenEstimates | None, count: int) -> bool:
    return (
        weights is not None
        and _finite_nonnegative(weights.resident_tokens)
        and len(weights.message_tokens) == count
        and all(_finite_nonnegative(value) for value in weights.message_tokens)
    )


def select_context(
    messages: Sequence[Mapping[str, Any]],
    *,
    token_budget: int,
    trim_to_tokens: int | None = None,
    model_window: float | None = None,
    first_cut: float | None = None,
    resident_tokens: float,
    estimates: Sequence[float],
    context_tokens: float | None = None,
    token_estimates: TokenEstimates | None = None,
    outgoing_only: Sequence[bool] | None = None,
    raw: RawHistory | None = None,
    cut_state: CutState | None = None,
    notice_tokens: Callable[[str], float],
    normalized: Normalized | None = None,
) -> Selection:
    """Select the window for one outgoing request; raises ``ContextSelectionError``.

    ``estimates`` holds one caller-computed cost per message (system messages count 0 here,
    they are resident input); ``context_tokens`` is a provider-backed estimate of the whole
    input and ``token_estimates`` its per-message split, each ignored when invalid;
    ``notice_tokens(text)`` is the non-negative cost of a notice or recovery replacement;
    ``cut_state`` is the previous selection's, passed back unchanged; ``first_cut`` (a
    fraction of the budget; None: upstream's rule) is where a cut lands when no frontier is
    remembered, see ``first_cut_target``. ``normalized`` is ``normalize(messages)`` when the
    caller has it already (it validated the request): only roles, tool calls, result ids and
    stop reasons decide it, so messages whose content alone differs share it.
    """
    limits = context_limits(token_budget, trim_to_tokens, model_window)
    first_target = first_cut_target(limits, first_cut)
    if len(estimates) != len(messages):
        raise ValueError(f"{len(estimates)} estimates for {len(messages)} messages")
    measured = context_tokens if _finite_nonnegative(context_tokens) else None
    weights = token_estimates if measured is not None else None
    if not _valid_weights(weights, len(messages)):
        weights = None
    if weights is not None:
        resident_tokens, estimates = weights.resident_tokens, weights.message_tokens
    limits, first_target = leave_room(limits, first_target, resident_tokens)
    # Outgoing system messages are covered by the resident estimate.
    # (``role_of`` as a map in C: this and the costs are passes over the whole conversation.)
    roles = list(map(_ROLE, messages))
    costs = ([0 if role == "system" else estimates[i] for i, role in enumerate(roles)]
             if "system" in roles else list(estimates))
    if outgoing_only is None or len(outgoing_only) != len(messages):
        outgoing_only = [False] * len(messages)
    selector = _Selector(
        messages, costs, list(outgoing_only), limits, resident_tokens, measured, raw,
        notice_tokens, first_target, normalized, roles,
    )
    return selector.select(cut_state)


class _Selector:
    """One call's state: inputs, calibration and the notice-cost cache. Never kept."""

    def __init__(
        self,
        messages: Sequence[Mapping[str, Any]],
        costs: list[float],
        outgoing: list[bool],
        limits: Limits,
        resident: float,
        measured: float | None,
        raw: RawHistory | None,
        notice_tokens: Callable[[str], float],
        first_target: float,
        normalized: Normalized | None,
        roles: list[Any],
    ) -> None:
        self.messages, self.costs, self.outgoing = messages, costs, outgoing
        self.roles, self.first_target = roles, first_target
        self.limits, self.resident, self.raw = limits, resident, raw
        self.budget = limits.budget_tokens
        self._notice_tokens, self._notice_costs, self._notices = notice_tokens, {}, {}
        if normalized is None:
            normalized = normalize(messages)
        self.groups = group(messages, normalized.atoms, outgoing, roles)
        self.dropped = normalized.dropped
        self.normalized = tuple(itertools.chain.from_iterable(normalized.atoms))
        self.raw_full = resident + sum(map(costs.__getitem__, self.normalized))  # same order
        # Computed once from the original input; never after normalization, cuts or snaps.
        # Summed exactly (one rounding, math.fsum): c then depends on the messages' figures only
        # through their exact total, so a caller may leave messages the window cannot reach
        # uncounted when it lowers ``context_tokens`` by just as much (docs/selection.md,
        # "Calibration and the fast path").
        self.c = 0 if measured is None else math.fsum(
            (measured, -resident, *map(operator.neg, costs)))
        if measured is None and resident > self.budget:
            raise ContextSelectionError(
                "RESIDENT_INPUT_TOO_LARGE",
                f"Resident input (system prompt and tools) is estimated at {js_number(resident)}"
                f" tokens, above the budget estimate of {js_number(self.budget)}.",
                resident, resident, self.budget,
            )

    # -- arithmetic -------------------------------------------------------------------------

    def cost(self, text: str | None) -> float:
        if text is None:
            return 0
        if text not in self._notice_costs:
            self._notice_costs[text] = self._notice_tokens(text)
        return self._notice_costs[text]

    def fits(self, estimate: float, limit: float) -> bool:
        return estimate + self.c <= limit

    def reported(self, estimate: float) -> float:
        """The estimate as replies show it: a whole number is an int, whether the figures that
        summed to it were ints or floats (a view left uncounted is 0.0 where the full
        computation counted an int), so the same window is always reported the same way."""
        value = max(0, estimate + self.c)
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value

    def _error(self, code: str, text: str, estimate: float, limit: float) -> ContextSelectionError:
        shown = self.reported(estimate)
        return ContextSelectionError(
            code,
            text.format(e=js_number(shown), b=js_number(limit)),
            self.resident, shown, self.budget,
        )

    # -- views ------------------------------------------------------------------------------

    def _view(
        self, prefixes: Sequence[Atom], turns: Sequence[Unit], active: ActiveTurn | None
    ) -> View:
        return make_view(prefixes, turns, active, self.costs, self.resident)

    def raw_view(self) -> View:
        groups = self.groups
        return self._view(groups.prefixes, turn_units(groups.turns, self.costs), groups.active)

    def _key_id(self, index: int) -> str | None:
        key = self.raw.key_of(index) if self.raw is not None else None
        return None if key is None else key.history_id

    def _matches(self, index: int, key: CutKey, assistant_only: bool = False) -> bool:
        role = self.roles[index]
        if role != "assistant" and (assistant_only or role != "user"):
            return False
        # The call id first: it rules out almost every message without asking the history.
        if key.tool_call_id is not None and key.tool_call_id not in tool_call_ids(
                self.messages[index]):
            return False
        return self._key_id(index) == key.history_id

    def _found(self, key: CutKey, assistant_only: bool = False) -> set[int] | None:
        """The messages ``_matches`` accepts for one key, when the history lists the messages
        carrying a history id (``indexes_of``, optional to ``RawHistory``): only those can
        match (``_key_id`` is that id), so the frontier is found without asking about every
        message of the conversation. None without ``indexes_of``."""
        indexes_of = getattr(self.raw, "indexes_of", None)
        if indexes_of is None:
            return None
        return {i for i in indexes_of(key.history_id) if self._matches(i, key, assistant_only)}

    def _matching(self, key: CutKey, assistant_only: bool = False) -> Callable[[int], bool]:
        """``_matches`` for one key (a set lookup when :meth:`_found` knows the set)."""
        found = self._found(key, assistant_only)
        if found is None:
            return lambda i: self._matches(i, key, assistant_only)
        return found.__contains__

    def apply(self, frontier: Frontier) -> View | None:
        """The groups after a remembered frontier, or None if it is not exactly once there."""
        groups, key = self.groups, frontier.last_evicted
        if frontier.kind != "partialTurn":
            units = [(a,) for a in groups.prefixes] if frontier.kind == "prefix" else groups.turns
            found = self._found(key)
            if found is not None:
                # Each matching message's unit, found by bisection on the units' first
                # messages (units hold ascending, disjoint runs of indexes): the messages in no
                # unit (the active turn, dropped exchanges, the other kind) are no hits.
                hits = [p for i in found if (p := _unit_of(units, i)) is not None]
            else:
                matches = self._matching(key)
                hits = []
                for p, unit in enumerate(units):
                    for atom in unit:
                        for i in atom:
                            if matches(i):
                                hits.append(p)
                    if len(hits) > 1:
                        return None  # not exactly once there, whatever follows
            if len(hits) != 1:
                return None
            if frontier.kind == "prefix":
                turns = turn_units(groups.turns, self.costs)
                return self._view(groups.prefixes[hits[0] + 1 :], turns, groups.active)
            later = turn_units(groups.turns[hits[0] + 1 :], self.costs)
            return self._view((), later, groups.active)
        matches = self._matching(key, assistant_only=True)
        candidates = [
            (t, a)
            for t, turn in enumerate(groups.turns)
            for a, atom in enumerate(turn)
            if matches(atom[0])
        ]
        active = groups.active
        if active is not None:
            candidates.extend(
                (None, e)
                for e, atom in enumerate(active.exchanges)
                if matches(atom[0])
            )
        if len(candidates) != 1:
            return None
        turn_index, position = candidates[0]
        wanted_user = frontier.user_history_id
        if turn_index is None:
            assert active is not None
            if wanted_user is not None and self._key_id(active.request[0]) != wanted_user:
                return None
            rest = ActiveTurn(active.request, active.exchanges[position + 1 :], active.trailing)
            return self._view((), (), rest)
        return self._remainder_view(frontier, turn_index, position)

    def _remainder_view(self, frontier: Frontier, turn_index: int, position: int) -> View | None:
        """A partly cut turn that has since completed: its request plus what followed the cut."""
        turn = self.groups.turns[turn_index]
        size = envelope_size(self.messages, turn, self.outgoing)
        request = _flat(turn[:size])
        wanted_user = frontier.user_history_id
        if position < size or (wanted_user is not None and self._key_id(request[0]) != wanted_user):
            return None
        remaining = [i for i in _flat(turn[position + 1 :]) if not self.outgoing[i]]
        trailing = [i for i in _flat(turn[size:]) if self.outgoing[i]]
        messages = (*request, *remaining, *trailing)
        remainder = make_unit("completedTurn", messages, self.costs, anchors=_flat(turn))
        later = turn_units(self.groups.turns[turn_index + 1 :], self.costs)
        return self._view((), [remainder, *later], self.groups.active)

    def protected(self, view: View) -> int | None:
        """Position of the unread trailing tool exchange P among the view's units
        (docs/selection.md, "Protected content")."""
        if view.active is None:
            return None
        position = len(view.units) - 1
        while position >= view.active_start:
            first = view.units[position].messages[0]
            if role_of(self.messages[first]) == "assistant":
                if not tool_call_ids(self.messages[first]):
                    return None
                # W2: without raw history the input alone shows the exchange is unread.
                if self.raw is None or self.raw.is_last_item(first):
                    return position
                return None
            position -= 1
        return None

    # -- provenance -------------------------------------------------------------------------

    def _evicted_ids(
        self, unit: Unit, history_id: str | None, tool: tuple[str, str, str] | None
    ) -> tuple[str | None, tuple[str, str, str] | None]:
        """The notice's facts after evicting ``unit``: the last evicted message that has a
        history id, and (W1) the last evicted tool output whose stored turn is known."""
        if self.raw is None:
            return history_id, tool
        found_id = found_tool = None
        for i in reversed(unit.messages):  # newest first; stop once both are known
            role = role_of(self.messages[i])
            if role == "toolResult" and found_tool is None:
                found_tool = self.raw.tool_reference(i)
                if found_id is None and found_tool is not None:
                    found_id = found_tool[0]
            elif role in ("user", "assistant") and found_id is None:
                found_id = self._key_id(i)
            if found_id is not None and found_tool is not None:
                break
        return found_id or history_id, found_tool or tool

    def _unit_frontier(self, unit: Unit, view: View) -> tuple[Frontier | None, bool]:
        """(frontier, failed) of an evicted unit; (None, False) means keyless
        (docs/selection.md, "The cut point")."""
        assert self.raw is not None
        for i in reversed(unit.anchors):
            if role_of(self.messages[i]) not in ("user", "assistant"):
                continue
            key = self.raw.key_of(i)
            if key is None:
                if self.outgoing[i]:
                    continue
                return None, True
            if unit.kind != "partialTurn":
                return Frontier(unit.kind, key), False
            assert view.active is not None
            owner = next(
                (r for r in view.active.request if role_of(self.messages[r]) == "user"), None
            )
            owner_id = None if owner is None else self._key_id(owner)
            return Frontier("partialTurn", key, owner_id), False
        return None, False

    # -- the FIFO executor ------------------------------------------------------------------

    def run(
        self, view: View, destination: float, previous: CutState | None, stateful: bool
    ) -> _Outcome:
        """Evict units FIFO until the window fits the destination
        (docs/selection.md, "The FIFO cut")."""
        budget, units = self.budget, view.units
        retained = view.protected_tokens + sum(unit.tokens for unit in units)
        notice: _NoticeKey = None if previous is None else previous.notice
        history_id = None if previous is None else previous.frontier.last_evicted.history_id
        tool: tuple[str, str, str] | None = None
        last_keyed = None if previous is None else _Keyed(0, previous.frontier, notice, retained)
        last_was_keyless, failure, count = False, None, 0
        protected = self.protected(view)

        def finish(mode: Mode, shown: str | None, replaced=None, delta=0.0) -> _Outcome:
            return _Outcome(
                view.indexes(count), shown, mode, retained + delta + self.cost(shown),
                count, last_keyed, last_was_keyless, failure, replaced or {},
            )

        def fits(limit: float) -> bool:
            # Notice costs are non-negative, so a window over the limit without its notice is
            # over with it: the notice text is only built when it can decide (linear time).
            return self.fits(retained, limit) and self.fits(
                retained + self.cost(self.notice_text(notice)), limit
            )

        if fits(budget):
            mode: Mode = "within_budget" if previous is None else "paged"
            return finish(mode, self.notice_text(notice))
        if view.active is not None and not self.fits(view.protected_tokens, budget):
            raise self._error(
                "ACTIVE_REQUEST_TOO_LARGE",
                "Resident input plus the active request is estimated at {e} tokens, above the"
                " budget estimate of {b}.",
                view.protected_tokens, budget,
            )
        while not fits(min(destination, budget)):
            if count == len(units) or count == protected:
                if fits(budget):  # the target is out of reach; the budget holds
                    return finish("paged", self.notice_text(notice))
                if protected is None:
                    raise self._error(
                        "ACTIVE_REQUEST_TOO_LARGE" if view.active else "RESIDENT_INPUT_TOO_LARGE",
                        "Resident input plus the retained request is estimated at {e} tokens,"
                        " above the budget estimate of {b}, with nothing left to evict.",
                        retained + self.cost(self.notice_text(notice)), budget,
                    )
                mode, shown, replaced, delta = self._exceptional(units[protected], retained)
                return finish(mode, shown, replaced, delta)
            unit = units[count]
            count += 1
            retained -= unit.tokens
            history_id, tool = self._evicted_ids(unit, history_id, tool)
            notice = (history_id, tool)  # after any eviction, a new (or equal) paging notice
            if stateful:
                frontier, failed = self._unit_frontier(unit, view)
                if failed and failure is None:
                    failure = "cut-key-unresolved"
                last_was_keyless = frontier is None
                if frontier is not None:
                    last_keyed = _Keyed(count, frontier, notice, retained)
        return finish("paged", self.notice_text(notice))

    def notice_text(self, key: _NoticeKey) -> str | None:
        """A frozen notice is its text; a new one is built once from (history_id, tool)."""
        if key is None or isinstance(key, str):
            return key
        if key not in self._notices:
            self._notices[key] = paging_notice(self.budget, *key)
        return self._notices[key]

    def _exceptional(
        self, exchange: Unit, retained: float
    ) -> tuple[Mode, str, dict[int, str], float]:
        """Protected-overflow, else recovery, else the recovery error
        (docs/selection.md, "Overflow and recovery")."""
        limit = self.limits.model_limit
        overflow = overflow_notice(self.budget)
        if self.fits(retained + self.cost(overflow), limit):
            return "protected_overflow", overflow, {}, 0.0
        replaced: dict[int, str] = {}
        delta = 0.0
        for i in exchange.messages[1:]:
            reference = None if self.raw is None else self.raw.tool_reference(i)
            if reference is not None:
                replaced[i] = recovery_replacement(reference[0], reference[1])
                delta += self.cost(replaced[i]) - self.costs[i]
        notice = recovery_notice()
        recovered = retained + delta + self.cost(notice)
        if replaced and self.fits(recovered, limit):
            return "recovery", notice, replaced, delta
        raise self._error(
            "ACTIVE_REQUEST_TOO_LARGE",
            "The protected tool exchange with recovery references is estimated at {e} tokens,"
            " above the model context estimate of {b}.",
            recovered, limit,
        )

    # -- the selection ----------------------------------------------------------------------

    def _selection(
        self, outcome: _Outcome, cut_state: CutState | None, view: View | None,
        reason: str | None = None,
    ) -> Selection:
        """The selection of ``outcome``, chosen on ``view`` (None: on the whole input)."""
        kept = set(outcome.indexes)
        looked = self.normalized if view is None else view.indexes(0)
        return Selection(
            indexes=outcome.indexes,
            notice=outcome.notice,
            replacements=outcome.replacements,
            mode=outcome.mode,
            estimated_tokens=self.reported(outcome.estimate),
            budget_tokens=self.budget,
            target_tokens=self.limits.target_tokens,
            cut_state=cut_state,
            fallback_reason=reason,
            evicted=tuple(itertools.filterfalse(kept.__contains__, self.normalized)),
            dropped=self.dropped,
            looked_from=min(looked, default=len(self.messages)),
        )

    def fallback(self, reason: str) -> Selection:
        """Budget-only FIFO on the uncut view; the frontier is forgotten
        (docs/selection.md, "The remembered cut")."""
        view = self.raw_view()
        return self._selection(self.run(view, self.budget, None, False), None, view, reason)

    def select(self, remembered: CutState | None) -> Selection:
        """Fast path, provenance, one stateful FIFO run, then commit, snap or fall back."""
        if remembered is None and self.fits(self.raw_full, self.budget):
            within = _Outcome(self.normalized, None, "within_budget", self.raw_full)
            return self._selection(within, None, None)
        if self.raw is None:
            return self.fallback("raw-history-unavailable")
        if remembered is None:
            view = self.raw_view()
        elif not self.raw.resolves(remembered.frontier):
            return self.fallback("cut-key-unresolved")
        elif (applied := self.apply(remembered.frontier)) is None:
            return self.fallback("frontier-not-in-groups")
        else:
            view = applied
        # The first crossing may cut deeper than later ones (first_cut_target).
        destination = self.first_target if remembered is None else self.limits.target_tokens
        outcome = self.run(view, destination, remembered, True)
        if outcome.cut_failure is not None:
            return self.fallback(outcome.cut_failure)
        if outcome.count == 0:
            return self._selection(outcome, remembered, view)
        boundary = outcome.last_keyed
        if boundary is None:
            return self.fallback("keyless-no-key")
        notice = self.notice_text(boundary.notice)
        assert notice is not None
        if not outcome.last_was_keyless:
            return self._selection(outcome, CutState(boundary.frontier, notice), view)
        # The FIFO ended on keyless units: snap back to the last keyed one and keep them.
        if not self.fits(boundary.raw_estimate + self.cost(notice), self.budget):
            return self.fallback("keyless-snap-over-budget")
        state = remembered if boundary.count == 0 and remembered else CutState(
            boundary.frontier, notice
        )
        snapped = _Outcome(
            view.indexes(boundary.count), state.notice, "paged",
            boundary.raw_estimate + self.cost(state.notice),
        )
        return self._selection(snapped, state, view)


def first_cut_target(limits: Limits, first_cut: float | None) -> float:
    """Where a cut lands when no frontier is remembered (the session first crosses the budget):
    ``first_cut`` × the effective budget, never above the target; None keeps upstream's rule
    (the first cut trims to the target like any other).

    Under prompt caching every cut re-writes the whole kept window once (the notice and the
    evicted prefix change its first bytes) and pays back only through the cache reads it saves
    on later requests. A deeper first cut re-writes less and leaves more room before the next
    cut, so it pays back sooner; the price is less recent history in the window (it stays
    recoverable with the tools).
    """
    if first_cut is None:
        return limits.target_tokens
    if isinstance(first_cut, bool) or not isinstance(first_cut, int | float) or not (
        0 < first_cut <= 1
    ):
        raise ContextSelectionError(
            "INVALID_TRIM_TARGET",
            f"The first-cut fraction {first_cut!r} is not a number in (0, 1].", 0, 0, 0,
        )
    return min(limits.target_tokens, max(1, math.floor(first_cut * limits.budget_tokens)))


def _unit_of(units: Sequence[Sequence[Atom]], index: int) -> int | None:
    """The position of the unit (a run of atoms) holding message ``index``, or None."""
    position = bisect.bisect_right(units, index, key=lambda unit: unit[0][0]) - 1
    if position < 0 or not any(index in atom for atom in units[position]):
        return None
    return position


def _flat(atoms: Sequence[Atom]) -> tuple[int, ...]:
    return tuple(i for atom in atoms for i in atom)
