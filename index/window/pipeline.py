"""``select_context``: the rolling window, as a pipeline of named steps.

One call (docs/host-protocol.md, "The call") reads its request once (``paging.request``) and runs:

1. **record** — every message not seen before is appended to the session's ledger, before
   anything can fail on budget grounds: a selection error never loses stored history;
2. **distill** — the session's decisions, and a pass that may add new ones, say which views
   are sent replaced (``index.window.distill``); edits of messages an earlier window already
   sent are held back until their prefix is re-written anyway (``index.window.landing``);
3. **estimate** — per-view token estimates from a cache keyed by content, counted only back to
   where the window can reach (``index.window.estimate``); before the first cut, only back to
   the trim target while the older views' floors show the budget is exceeded;
4. **calibrate** — the host's ``usage`` for the latest response corrects them
   (``paging.calibrate``), counting first the uncounted views it reads one by one (what the last
   window sent, the response);
5. **select** (``select_window``) — the pure selector (``paging.select``) with the ledger
   answering its history questions (``index.history.LedgerHistory``) and the session's
   remembered cut; recounted in full if the window reached an uncounted view, and once more if
   held edits land;
6. **render** — the window in the host's own format, the notice where that API accepts it;
7. **remember** — the session's state (``index.window.state``) for the next call, in this
   process or after a restart.

The cut is reset when the model or its window changes (upstream resets on a model switch).
"""

from __future__ import annotations

import json
import math
import operator
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from context_paging.index.history import LedgerHistory
from context_paging.index.ledger import Ledger, LedgerSession
from context_paging.index.window.distill import (
    Distilled,
    Distiller,
    entry_reach,
    provider_of,
    without,
)
from context_paging.index.window.estimate import Estimates
from context_paging.index.window.landing import held_targets, to_land
from context_paging.index.window.request import FingerprintMemo, expand
from context_paging.index.window.state import Latest, SessionState
from context_paging.paging.cache_cost import horizon, prices_for
from context_paging.paging.calibrate import Anchor, Calibration, Sent, calibrate, counted_views
from context_paging.paging.distill import Decision, DistillConfig, Judge, LocalJudge, summarize
from context_paging.paging.distill.plan import Plan
from context_paging.paging.formats import FORMATS, FormatError, render, to_views
from context_paging.paging.limits import ContextSelectionError, context_limits
from context_paging.paging.request import Request, read
from context_paging.paging.select import CutState, Selection, select_context
from context_paging.paging.stubs import merge_stubs
from context_paging.paging.window_form import check as check_form
from context_paging.paging.window_form import positions

if TYPE_CHECKING:  # its pydantic model loads with the first stats report
    from context_paging.index.stats import Stats

__all__ = ["ContextService", "ContextSettings", "Distilled", "LedgerHistory", "provider_of"]

_REQUESTS = 16  # sessions whose last request is kept for the next one to build on
# Per-view passes over the whole conversation run in C (map over these), not in Python loops.
_MESSAGE = operator.attrgetter("message")
_SOURCE = operator.attrgetter("source")


@dataclass(frozen=True)
class ContextSettings:
    enabled: bool = True
    token_budget: int = 128_000
    trim_to_tokens: int | None = None
    # Where the first cut lands, a fraction of the budget (paging.select.first_cut_target).
    # 1.0 (or None): upstream's rule, every cut trims to the target. A smaller fraction cuts
    # deeper the first time, trading recent history for fewer re-writes (docs/window.md). An
    # explicit trim target is where every cut lands, the first included.
    first_cut: float | None = 1.0
    estimator: str = "tiktoken"
    distill: DistillConfig = field(default_factory=DistillConfig)


@dataclass
class _Call:
    """One call's inputs, resolved: the request, the session's state and the limits."""

    ledger: LedgerSession
    request: Request
    state: SessionState
    settings: tuple[Any, Any]  # (model, model window): the state's cut and anchor belong to it
    budget: Any
    trim: Any
    model_window: Any
    reach: float | None  # tokens the window can hold at most; None: count everything
    # Before the first cut: (the trim target, the budget) when the views past the target can
    # carry floors (index.window.estimate), so exact counting stops at the target; else None.
    first_reach: tuple[float, float] | None
    resident: float
    usage: dict[str, Any] | None
    judge: Judge
    provider: str | None
    cut_state: CutState | None
    previous: list[str | None] | None  # the last window's keys, for the landing of edits


@dataclass(frozen=True)
class _Shown:
    """What this window shows of the decisions: ``everything`` they change, the ``new`` ones,
    outputs left unjudged (``deferred``), edits of already-sent messages held back (``held``),
    and what is sent (``distilled``, with ``dropped`` the views left out)."""

    everything: dict[int, Distilled]
    new: list[Decision]
    deferred: set[int]
    held: set[str]
    distilled: dict[int, Distilled]
    dropped: frozenset[int]


@dataclass(frozen=True)
class _Chosen:
    """The selected window (None before the select step) and the figures it was chosen on."""

    selection: Selection | None
    shown: _Shown
    estimates: list[float]
    lazy: set[int]  # views left uncounted
    calibration: Calibration | None
    floored: bool = False  # counted to the trim target only, the rest carrying floors


class ContextService:
    def __init__(self, ledger: Ledger, settings: ContextSettings,
                 count_text: Callable[[str], int] | None) -> None:
        self.ledger = ledger
        self.settings = settings
        self.count_text = count_text if settings.estimator == "tiktoken" else None
        self.estimates = Estimates(self.count_text)
        self.distiller = Distiller(settings.distill, self.count_text)
        self.latest: dict[str, dict[str, Any]] = {}  # per session: the last reply's figures
        self._fingerprints = FingerprintMemo()
        self._requests: OrderedDict[str, Request] = OrderedDict()  # per session: the last one
        self._shared = threading.Lock()
        # The reference path: count every message exactly before selecting (as before the
        # window-proportional counting); tests compare the two.
        self.reference = False
        # Exact counting of older messages ahead of need runs between calls (:meth:`idle`), at
        # most this long each time unless the caller says otherwise.
        self.spare_seconds = 0.005
        self._ahead: tuple[Request, dict[int, Distilled], set[int]] | None = None
        # What a call stopped needing (the session's previous request): freeing its thousands
        # of objects took ~0.3 ms of the call on the bench, so :meth:`idle` drops them.
        self._retired: list[Any] = []

    def notice_tokens(self, text: str) -> float:
        return self.estimates.notice(text)

    # --- the request ------------------------------------------------------------------------

    def read(self, session: str, messages: Sequence[Any], fmt: str, ephemeral: Sequence[int],
             after_id: str | None, validate: bool = False) -> Request:
        """The request value (``paging.request``), with an ``after_id`` request expanded to the
        whole conversation from the ledger and fingerprints reused for an unchanged prefix."""
        stored: list[str] = []
        ref = self.ledger.session(session).ref
        if after_id is not None:
            messages, fmt, ephemeral, stored = expand(self.ledger.session(session), after_id,
                                                      messages, fmt, ephemeral,
                                                      self._requests.get(ref))
        return read(messages, fmt, ephemeral, lambda skip: self._fingerprints.fingerprints(
            ref, messages, skip, stored), stored, validate, self._requests.get(ref))

    # --- the call ---------------------------------------------------------------------------

    def select(self, session: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:meth:`_select`. Its ledger appends are flushed to disk in the background while it
        selects; the call answers, or raises, only once they are on disk (a failed flush is
        the ``OSError`` a failed write would be), so an acknowledged call never loses a
        message to a crash, and the flush costs it no time."""
        try:
            return self._select(session, *args, **kwargs)
        finally:
            self.ledger.synced(session)

    def _select(self, session: str, messages: Sequence[Any], fmt: str = "auto",
                system: Any = None, tools: Sequence[dict[str, Any]] | None = None,
                model: str | None = None, model_window: float | None = None,
                token_budget: int | None = None, trim_to_tokens: int | None = None,
                usage: dict[str, Any] | None = None, ephemeral: Sequence[int] = (),
                judge: Judge | None = None, after_id: str | None = None,
                reply_form: str = "messages") -> dict[str, Any]:
        """Read the request once, then: record, distill, estimate, calibrate, select, render,
        remember (the module docstring says what each decides). ``reply_form="positions"``:
        the window said by position (``paging.window_form``), every other field the same."""
        check_form(reply_form)  # refused before anything is stored, like a bad request
        # A malformed request (a result that answers no call, …) is refused before anything is
        # stored, so no tool ever sees its messages (docs/sessions.md, "One bad exchange never
        # hides the rest").
        request = self.read(session, messages, fmt, ephemeral, after_id, self.settings.enabled)
        ledger = self.record(session, request)
        if not self.settings.enabled:
            return _form(_disabled(request.messages) | {"last_message_id": ledger.head},
                         request, reply_form)
        # a checkpoint's decisions left for spare time are made before anything reads them
        self.distiller.settle(ledger.ref)
        call = self.begin(ledger, request, system, tools, model, model_window, token_budget,
                          trim_to_tokens, usage, judge)
        shown = self.distill(call)
        estimates, lazy, floored = self.first_estimate(call, shown)
        calibration = self.calibrate(call, shown, estimates, lazy)
        chosen = self.select_window(call, _Chosen(None, shown, estimates, lazy, calibration,
                                                  floored))
        reply = self.render(call, chosen)
        self.remember(call, chosen, reply)
        return _form(reply, request, reply_form)

    def record(self, session: str, request: Request) -> LedgerSession:
        """Store every message of the request not seen before and move the session's head
        (the fsync runs in the background; :meth:`select` waits for it before answering)."""
        ledger = self.ledger.session(session)
        ledger.append(request.messages, request.ids, request.format, durable=False,
                      copies=request.copies)
        self._fingerprints.remember(request.ids, request.fingerprints)
        # The next request of the session reuses what this one derived for their shared start.
        with self._shared:  # calls of other sessions change the table too (index/window/gate.py)
            self._retire(self._requests.pop(ledger.ref, None))
            self._requests[ledger.ref] = request
            while len(self._requests) > _REQUESTS:
                self._requests.popitem(last=False)
        return ledger

    def begin(self, ledger: LedgerSession, request: Request, system: Any, tools: Any,
              model: str | None, model_window: Any, token_budget: Any, trim_to_tokens: Any,
              usage: dict[str, Any] | None, judge: Judge | None) -> _Call:
        """The call's limits (its own, else the configured ones), how far exact counting must
        reach, the resident input's estimate, and the state the session's last call left."""
        budget = token_budget if token_budget is not None else self.settings.token_budget
        trim = trim_to_tokens if trim_to_tokens is not None else (
            self.settings.trim_to_tokens if token_budget is None else None)
        # Count exactly only back to where the window can reach (the largest limit the
        # selector compares with); calibration counts what else it reads (:meth:`calibrate`).
        reach = None if self.reference else _reach(budget, trim, model_window)
        state = SessionState.from_dict(self.ledger.load_state(ledger.ref))
        settings = (model, model_window)
        first_reach = None
        if reach is not None and state.cut_for(settings) is None and self.estimates.floor_chars():
            limits = context_limits(budget, trim, model_window)  # valid: ``reach`` is a number
            first_reach = (limits.target_tokens, limits.budget_tokens)
        system_text = _system_text(system, request.resident_messages())
        return _Call(ledger, request, state, settings, budget, trim, model_window, reach,
                     first_reach,
                     self.estimates.resident(system_text, list(tools or [])), usage,
                     judge or LocalJudge(), provider_of(model), state.cut_for(settings),
                     state.sent_for(settings))

    def distill(self, call: _Call, full: bool = False) -> _Shown:
        """Which views this window sends replaced: the pass's decisions (judging only outputs
        within twice the reach, every output when ``full``), minus the edits of messages the
        last window sent, which are held until they land (index/window/landing.py)."""
        everything, new, deferred = self.distiller.run(
            call.ledger, call.request, call.judge, call.provider, None if full else call.reach)
        held = held_targets(everything, _keys(call.request, everything), call.previous)
        distilled = without(call.request, [*call.ledger.decisions, *new],
                            held) if held else everything
        return _Shown(everything, new, deferred, held, distilled,
                      frozenset(i for i, d in distilled.items() if d.message is None))

    def first_estimate(self, call: _Call, shown: _Shown) -> tuple[list[float], set[int], bool]:
        """The estimates the window is first chosen on, and whether they carry floors.

        Before the first cut, the window holds at most the trim target (the first cut lands at
        or below it) unless the whole conversation fits the budget. So exact counting stops at
        the target and older views carry floors: when the floors already put the conversation
        over its budget, the window is cut and holds only counted views; when they do not, the
        window may keep them all, so counting goes on to the reach at once."""
        if call.first_reach is not None:
            target, budget = call.first_reach
            estimates, lazy = self.estimates.views(call.request, shown.distilled, target,
                                                   shown.deferred, floors=True,
                                                   enough=budget - call.resident)
            if not lazy:
                return estimates, lazy, False
            if sum(estimates) + call.resident > budget:
                return estimates, lazy, True
        estimates, lazy = self.estimate(call, shown)
        return estimates, lazy, False

    def estimate(self, call: _Call, shown: _Shown,
                 lazy_allowed: bool = True) -> tuple[list[float], set[int]]:
        """Per-view token estimates of the views as sent, counted back to the reach (every
        view with ``lazy_allowed`` false), and the views left uncounted."""
        if not lazy_allowed:
            return self.estimates.views(call.request, shown.distilled)
        return self.estimates.views(call.request, shown.distilled, call.reach, shown.deferred)

    def calibrate(self, call: _Call, shown: _Shown, estimates: list[float],
                  lazy: set[int] | None = None) -> Calibration | None:
        """The estimates corrected by the host's usage of the latest response, against what
        the last window sent (None without usage or a matching anchor).

        Of the views left uncounted (``lazy``), the ones whose own count calibration reads
        (``paging.calibrate.counted_views``: what the last window sent, the response) are
        counted here, in ``estimates`` and out of ``lazy``; the rest enter only through their
        sum, which the selector's correction does not depend on (``Calibration.exact``)."""
        anchor = call.state.anchor_for(call.settings)
        if call.usage is None or anchor is None:
            return None
        keys = _keys(call.request, shown.distilled)
        roles = call.request.roles
        if lazy:
            for index in counted_views(anchor, keys, roles) & lazy - shown.deferred:
                value = self.estimates.view(index, call.request, shown.distilled)
                assert value is not None
                estimates[index] = value
                lazy.discard(index)
        return calibrate(anchor, keys, estimates, list(roles), list(call.request.interrupted),
                         call.resident, call.usage, lazy or ())

    def select_window(self, call: _Call, first: _Chosen) -> _Chosen:
        """The window (the "select" step). Uncounted views carry 0, never more than their real
        estimate, and the selector only compares sums of estimates against limits (plus a
        calibration's correction, which is the same whatever the uncounted views count:
        paging/calibrate.py). So any comparison that fails on these figures fails on the exact
        ones too. If the window kept an uncounted view, or the selector raised (its message
        prints a sum), or scaled weights met an uncounted view (:func:`_calibrated_alike`),
        everything is counted (and judged) and the window chosen again. Held edits that land
        are then sent in one re-write."""
        shown, estimates, lazy, calibration = (first.shown, first.estimates, first.lazy,
                                               first.calibration)
        try:
            selection: Selection | None = self._selector(call, shown, estimates, calibration)
        except ContextSelectionError:
            if not lazy:
                raise
            selection = None
        if lazy and (selection is None or not lazy.isdisjoint(selection.indexes)
                     or not _calibrated_alike(calibration, selection, lazy)):
            if first.floored:  # the floors were not enough: count to the reach, as without them
                estimates, lazy = self.estimate(call, shown)
                return self.select_window(call, _Chosen(
                    None, shown, estimates, lazy, self.calibrate(call, shown, estimates, lazy)))
            return self.select_window(call, self._everything(call, shown))
        assert selection is not None
        landed = self._landing(call, shown, selection)
        if landed:  # one re-write carries every edit that lands: select again with them
            distilled = without(call.request, [*call.ledger.decisions, *shown.new],
                                shown.held - landed) if shown.held - landed else shown.everything
            shown = replace(shown, distilled=distilled, dropped=frozenset(
                i for i, d in distilled.items() if d.message is None))
            held_estimates = estimates
            # Outputs left unjudged keep their lower bound (0) here too: judged, they could
            # land with these edits and let the window keep more. If the window chosen with
            # them at 0 keeps one, everything is judged and the window chosen again from the
            # start; if it keeps none, their real sizes cannot change it (see the docstring).
            deferred = bool(shown.deferred) and call.reach is not None
            estimates, lazy = self.estimate(call, shown, lazy_allowed=deferred)
            calibration = self.calibrate(call, shown, estimates, lazy)
            cut = selection
            selection = self._selector(call, shown, estimates, calibration)
            if lazy and (not lazy.isdisjoint(selection.indexes)
                         or not _calibrated_alike(calibration, selection, lazy)):
                return self.select_window(call, self._everything(call, shown))
            if (cut.cut_state != call.cut_state and selection.cut_state == call.cut_state
                    and selection.estimated_tokens > selection.target_tokens):
                # The edits only just fit the window under its budget: the cut would follow
                # within a few requests and re-write it all again. Keep this request's cut and
                # let the edits ride on it (the same views, sent edited).
                saved = sum(held_estimates[i] - estimates[i] for i in cut.indexes)
                selection = replace(cut, estimated_tokens=cut.estimated_tokens - saved)
        return _Chosen(selection, shown, estimates, lazy, calibration)

    def _everything(self, call: _Call, shown: _Shown) -> _Chosen:
        """The window's input with every view counted, and every output judged when some were
        left unjudged (the full pass, from scratch), calibrated on those counts: chosen on it,
        no window keeps a lower bound, so :meth:`select_window` needs no second look."""
        if shown.deferred:
            shown = self.distill(call, full=True)
        estimates, lazy = self.estimate(call, shown, lazy_allowed=False)
        return _Chosen(None, shown, estimates, lazy, self.calibrate(call, shown, estimates))

    def _selector(self, call: _Call, shown: _Shown, estimates: list[float],
                  calibration: Calibration | None) -> Selection:
        request, distilled = call.request, shown.distilled
        messages = list(map(_MESSAGE, request.views.views))
        for i, shown_as in distilled.items():  # a replaced view is sent as its replacement
            if shown_as.message:
                messages[i] = shown_as.message
        return select_context(
            messages,
            token_budget=call.budget, trim_to_tokens=call.trim, model_window=call.model_window,
            first_cut=self.settings.first_cut if call.trim is None else None,
            resident_tokens=call.resident, estimates=estimates,
            context_tokens=calibration.context_tokens if calibration else None,
            token_estimates=calibration.token_estimates if calibration else None,
            outgoing_only=request.outgoing,
            raw=LedgerHistory(request, call.ledger.items), cut_state=call.cut_state,
            notice_tokens=self.notice_tokens, normalized=request.normalized,
        )

    def _landing(self, call: _Call, shown: _Shown, selection: Selection) -> set[str]:
        """The held edits worth sending now, re-writing the window's prefix
        (index/window/landing.py: the cache cost of the re-write against the savings until the cut
        would re-write it anyway)."""
        if not shown.held or call.previous is None:
            return set()
        keys = _keys(call.request, shown.distilled)
        current = [None] * bool(selection.notice) + [keys[i] for i in selection.indexes]
        room = selection.budget_tokens - selection.estimated_tokens
        later = horizon(call.state.requests, room, call.state.growth)
        prices = prices_for(call.provider, call.state.usage().values())
        return to_land(shown.held, shown.everything, _keys(call.request, shown.everything),
                       current, call.previous, call.state.sent_tokens(), prices, later)

    def render(self, call: _Call, chosen: _Chosen) -> dict[str, Any]:
        """The reply: the window in the host's format (kept views, replaced content, the
        notice; omitted exchanges' stubs merged), its figures and the decisions it shows."""
        request, shown, selection = call.request, chosen.shown, chosen.selection
        assert selection is not None
        distilled = shown.distilled
        recovery = selection.replacements or {}
        kept = [i for i in selection.indexes if i not in shown.dropped]
        replaced = [i for i in kept if i in distilled and i not in recovery]
        replacements = {i: distilled[i].text for i in replaced} | recovery
        window = render(request.messages, request.views, kept, selection.notice, replacements)
        window = merge_stubs(window, {distilled[i].text for i in replaced
                                      if distilled[i].decision.action == "omit_exchange"})
        return {
            "messages": window,
            "mode": selection.mode,
            "estimated_tokens": _number(selection.estimated_tokens),
            "budget_tokens": _number(selection.budget_tokens),
            "target_tokens": _number(selection.target_tokens),
            "evicted_messages": _evicted(request, selection),
            "frontier": selection.cut_state.to_dict()["frontier"] if selection.cut_state else None,
            "fallback_reason": selection.fallback_reason,
            "notice": selection.notice,
            "distilled": [distilled[i].report() for i in replaced],
            "last_message_id": call.ledger.head,
        }

    def remember(self, call: _Call, chosen: _Chosen, reply: dict[str, Any]) -> None:
        """Store the call's new decisions, save the session's state for the next call (what
        was sent, the cut, usage, pace), keep the reply's figures, and leave the views it did not
        count for :meth:`idle` to count ahead (after the reply is out, not inside the call)."""
        request, state, shown, selection = call.request, call.state, chosen.shown, chosen.selection
        estimates, calibration = chosen.estimates, chosen.calibration
        assert selection is not None
        if shown.new:
            call.ledger.append_decisions(shown.new, durable=False)
        keys = _keys(request, shown.distilled)
        sent = [Sent(None, self.notice_tokens(selection.notice))] if selection.notice else []
        sent += [Sent(keys[i], estimates[i]) for i in selection.indexes]
        usage_log = state.usage()
        newest = request.newest_assistant()
        if newest is not None and isinstance(call.usage, dict):
            usage_log[newest] = [_cached(call.usage.get("cache_read_tokens")),
                                 _cached(call.usage.get("cache_write_tokens"))]
        steps, growth = _pace(state, selection, call.cut_state)
        anchor = Anchor(tuple(sent), call.resident, calibration.overhead if calibration else 0.0)
        self.ledger.save_state(call.ledger.ref, SessionState(
            settings=call.settings, cut=selection.cut_state, anchor_value=anchor.to_dict(),
            latest=Latest(selection.estimated_tokens, selection.budget_tokens, selection.mode),
            usage_by_response=tuple((k, (v[0], v[1])) for k, v in usage_log.items()),
            model_window=call.model_window, calibrated=calibration is not None,
            evicted_messages=reply["evicted_messages"], requests=state.requests + 1,
            growth_steps=steps, growth=growth).to_dict())
        self.latest[call.ledger.ref] = {k: v for k, v in reply.items()
                                        if k not in ("messages", "last_message_id")} | {
            "model_window": call.model_window, "format": request.format,
            "input_messages": len(request.messages), "returned_messages": len(reply["messages"]),
            "calibrated": calibration is not None,
        }
        # Only the newest call's views: an older request's are its prefix (or another session's).
        self._retire(self._ahead)
        self._ahead = (request, shown.distilled, set(chosen.lazy)) if chosen.lazy else None

    def _retire(self, value: Any) -> None:
        """Keep ``value`` alive until :meth:`idle` (a host that never calls it frees them here,
        a few calls later)."""
        if len(self._retired) >= 8:
            self._retired.clear()
        self._retired.append(value)

    def idle(self, seconds: float | None = None, stop: Callable[[], bool] | None = None) -> bool:
        """Spare time between calls: count the last call's uncounted views, newest first, for
        at most ``seconds`` (default ``spare_seconds``; ``math.inf``: until done), asking ``stop``
        before each count; then chunk the large outputs no decision covers yet, for the
        checkpoint that will judge them (``Distiller.ahead``). It only fills caches (a later
        call that reaches those views, or calibrates, finds them counted; a checkpoint finds
        its outputs chunked), so every reply is the same with or without it. Returns whether
        work is left. The caller holds whatever lock guards :meth:`select` (the MCP server
        runs this after writing a reply, yielding to the next request). It first frees what the
        last calls stopped needing (their sessions' previous requests), then judges the outputs
        a checkpoint left for later beyond the window's reach (``Distiller.settle``: decisions
        the full computation makes, which a call makes first if spare time did not)."""
        self._retired.clear()  # freed here, in spare time, not inside a call
        budget = self.spare_seconds if seconds is None else seconds
        if self.distiller.owes():
            started = time.monotonic()
            if self.distiller.settle(None, started + budget, stop):
                return True
            budget = max(0.0, budget - (time.monotonic() - started))
        if self._ahead is None:
            return self.distiller.ahead(budget, stop)
        request, distilled, lazy = self._ahead
        started = time.monotonic()
        self.estimates.ahead(request, distilled, lazy, budget, stop)
        if not lazy:
            self._ahead = None
        return self._ahead is not None or self.distiller.ahead(
            max(0.0, budget - (time.monotonic() - started)), stop)

    # --- planning for the sampling judge ----------------------------------------------------

    def plan(self, session: str, messages: Sequence[Any], fmt: str = "auto",
             ephemeral: Sequence[int] = (), model: str | None = None,
             after_id: str | None = None) -> Plan | None:
        """What this request's distillation pass would judge, without storing anything: the
        sampling judge asks the host's model about ``plan.segments`` before the call runs."""
        config = self.settings.distill
        if not (self.settings.enabled and config.enabled):
            return None
        request = self.read(session, messages, fmt, ephemeral, after_id)
        # The same reach select uses with the configured limits (a call that overrides them
        # may judge a few more or fewer outputs; an unasked segment is a timeout: kept).
        reach = None if self.reference else _reach(self.settings.token_budget,
                                                   self.settings.trim_to_tokens, None)
        return self.distiller.plan(self.ledger.session(session), request.entries,
                                   provider_of(model), reach=entry_reach(request.entries, reach))

    # --- the report ---------------------------------------------------------------------------

    def stats(self, session: str, enabled: bool = True) -> Stats:
        """The stats report for a ledger session (docs/tools.md, "The stats report")."""
        ledger = self.ledger.session(session)
        state = SessionState.from_dict(self.ledger.load_state(session))
        history = 0
        for record in ledger.records.values():
            message = record.get("message")
            fmt = record.get("format")
            if not isinstance(message, dict) or fmt not in FORMATS:
                continue
            try:
                views = to_views([message], fmt)
            except FormatError:
                continue
            history += sum(self.estimates.message(v.message) for v in views.views)
        latest = state.latest or Latest()
        usage = [pair for _, pair in state.usage_by_response]
        summary = summarize(ledger.decisions)
        from context_paging.index.stats import Stats

        return Stats(
            session=ledger.ref, enabled=enabled,
            stored_bytes=ledger.path.stat().st_size if ledger.path.exists() else None,
            history_tokens=math.ceil(history),
            input_tokens=latest.estimated_tokens,
            input_measured=state.calibrated,
            budget_tokens=latest.budget_tokens,
            model_window=state.model_window,
            cache_read_tokens=sum(int(u[0]) for u in usage) if usage else None,
            cache_write_tokens=sum(int(u[1]) for u in usage) if usage else None,
            mode=latest.mode, evicted_messages=state.evicted_messages,
            distilled_outputs=summary.outputs_distilled + summary.outputs_removed,
            omitted_exchanges=summary.exchanges_omitted,
            dropped_images=summary.images_dropped,
            distilled_saved_characters=summary.saved_chars,
            distilled_saved_tokens=summary.saved_tokens,
            distill_judges=dict(summary.judges),
        )


def _cached(value: Any) -> int | float:
    """A cache figure of the host's usage as stored: a count (a whole or finite number of at
    least 0, below 2**63), else 0, as when the host leaves it out (a string, a boolean, NaN, an
    infinity or an integer beyond what the state's JSON holds is no count)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value if 0 <= value < 1 << 63 else 0
    if isinstance(value, float):
        return value if 0 <= value < float("inf") else 0
    return 0


def _keys(request: Request, distilled: dict[int, Distilled]) -> list[str | None]:
    """Per view, the key calibration and landing compare between calls: the message's history
    id and part, and the decision it is sent under (None for outgoing-only views)."""
    keys = list(request.keys)
    for index, shown in distilled.items():
        if keys[index] is not None:
            keys[index] = f"{keys[index]}~{shown.key}"
    return keys


def _calibrated_alike(calibration: Calibration | None, selection: Selection,
                      lazy: set[int]) -> bool:
    """Whether a window chosen under ``calibration`` with the ``lazy`` views left uncounted
    is the one every view counted gives, provided it kept none of them.

    Without calibration, or without per-message weights, every figure is a whole number, the
    sums are exact and the uncounted views only lower them (``select_window`` says why that
    suffices). Weights make the sums fractions: a sum over the views a cut looks at rounds
    differently when one of them is uncounted, even one it evicts. So the window stands only
    when the cut looked at none of them (a remembered cut looks only at the views after it);
    else it is chosen again with every view counted. The correction itself is the same either
    way when the calibration is ``exact`` (paging/calibrate.py)."""
    if calibration is None:
        return True
    if not calibration.exact:
        return False
    return calibration.token_estimates is None or max(lazy) < selection.looked_from


def _evicted(request: Request, selection: Selection) -> int:
    """How many host messages the window left out (an Anthropic message counts once)."""
    return len(set(map(_SOURCE, map(request.views.views.__getitem__, selection.evicted))))


def _reach(budget: Any, trim: Any, model_window: Any) -> float | None:
    """How many tokens of messages the window can hold at most: the largest limit the selector
    compares a sum with. None (count everything) when the limits are invalid: the selector then
    raises its own error."""
    try:
        limits = context_limits(budget, trim, model_window)
    except ContextSelectionError:
        return None
    # Without a model window the model limit is unbounded; only protected overflow compares
    # with it, and that keeps the newest exchange, which is counted (or the call recounts).
    finite = [v for v in (limits.budget_tokens, limits.target_tokens, limits.model_limit)
              if math.isfinite(v)]
    return max(finite)


def _pace(state: SessionState, selection: Selection,
          cut_state: CutState | None) -> tuple[tuple[float, int], float]:
    """The window's mean growth per request while the cut holds (every step, the large
    outputs with the small ones): how long an edit's savings are read before the cut re-writes
    the prefix anyway (index/window/landing.py). Returns (sum of growth, requests measured),
    mean."""
    steps = state.growth_steps
    before = state.latest.estimated_tokens if state.latest else None
    if isinstance(before, int | float) and selection.cut_state == cut_state:
        steps = (float(steps[0]) + max(0.0, selection.estimated_tokens - before),
                 int(steps[1]) + 1)
    return steps, steps[0] / steps[1] if steps[1] else 0.0


def _system_text(system: Any, resident_messages: Sequence[dict[str, Any]]) -> str:
    parts: list[str] = []
    # an item without content (Codex's ``additional_tools``, ``configuration_update``) counts
    # as its JSON: the tool list or settings it carries are sent every request
    for value in [system, *(m.get("content", m) for m in resident_messages)]:
        if isinstance(value, dict):
            value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(str(b.get("text", "")) for b in value if isinstance(b, dict))
    return "\n".join(p for p in parts if p)


def _number(value: float) -> float | int:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _form(reply: dict[str, Any], request: Request, reply_form: str) -> dict[str, Any]:
    """The reply in the asked form: as rendered, or with ``messages`` only the ones the host
    does not hold and ``window`` saying where each window message comes from (positions in the
    whole conversation: with ``after_id``, the stored messages, then the new ones), and
    ``not_stored`` the positions of that conversation the server did not store (resident
    leading messages, ephemeral ones): what the host leaves out of the list its next
    ``after_id`` call's positions count over. Which leading messages are resident depends on
    the format (Codex's set-up messages, for one), so the server says it rather than the host
    working it out."""
    if reply_form != "positions":
        return reply
    made, parts = positions(reply["messages"], request.messages)
    not_stored = [i for i, stored_id in enumerate(request.ids) if stored_id is None]
    return reply | {"messages": made, "window": parts, "not_stored": not_stored}


def _disabled(messages: Sequence[Any]) -> dict[str, Any]:
    return {"messages": list(messages), "mode": "disabled", "estimated_tokens": 0,
            "budget_tokens": 0, "target_tokens": 0, "evicted_messages": 0, "frontier": None,
            "fallback_reason": None, "notice": None, "distilled": []}
