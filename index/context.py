"""``select_context``: ledger first, then the pure selector, then the host's format again.

Per call (DESIGN.md "Host-facing tools"):

1. the request is read in its format (``paging.formats``) and every message not seen before is
   appended to the session's ledger, so it can be recovered once it leaves the window — before
   anything can fail on budget grounds: a selection error never loses stored history;
2. per-message token estimates come from a cache keyed by content fingerprint, so a call costs
   estimation work only for new messages;
3. the host's ``usage`` for the latest response calibrates the estimate (``paging.calibrate``);
4. the selector (``paging.select``) runs with the ledger answering its history questions and the
   persisted cut state, which is saved again afterwards (a restarted server returns the same
   window);
5. the window is rendered back in the host's format with the notice placed where that API
   accepts it.

Distillation (DESIGN.md "Distillation in an MCP server") runs between steps 1 and 2: the views
become the core's ``(history_id, message)`` entries — the history id is the ledger id of the
view's source message; outgoing-only (``ephemeral``) views are left out, since they are never
stored and so could never be recalled (resident system messages are not views at all). The
session's earlier decisions come from the ledger's ``decision`` lines; a pass of
:func:`paging.distill.distill` adds new ones (with the tokens each saves, counted with this
server's tokenizer), which are appended to the ledger before they are used, so every later call
— in this process or after a restart — applies the same replacement bytes. The judge is the
local one unless the caller passes another (the server's sampling judge, built from
:meth:`ContextService.plan`).

What the window gets: a distilled output, a removed output's stub, or an old output's text
without its images is the host's own message with only that content replaced. An omitted
exchange keeps its request as the stub and leaves out the rest of its messages; the left-out
views stay in the selector's list at zero cost (so cut points and frontiers keyed on them stay
valid) and are skipped when the window is rendered. The core omits an exchange only when no
tool call in it would lose its result (``paging.distill.apply``). Every replaced view is
estimated on its replaced content (the cache key names the decision). Any failure while
distilling means the conversation is sent as it is.

The cut is reset when the model or its window changes (upstream resets on a model switch).
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from context_paging.index.history import HistoryItem
from context_paging.index.landing import held_targets, sent_keys, sent_tokens, to_land
from context_paging.index.ledger import Ledger, LedgerSession, chain_ids
from context_paging.index.request import FingerprintMemo, expand
from context_paging.index.stats import Stats
from context_paging.paging.cache_cost import horizon, prices_for
from context_paging.paging.calibrate import Anchor, Sent, calibrate
from context_paging.paging.distill import (
    Decision,
    DistillConfig,
    Judge,
    LocalJudge,
    decide_plan,
    judge_plan,
    summarize,
)
from context_paging.paging.distill.apply import applied, changed
from context_paging.paging.distill.conversation import content_chars
from context_paging.paging.distill.model import fingerprint as text_fingerprint
from context_paging.paging.distill.plan import Plan, latest, plan_pass
from context_paging.paging.distill.render import exchange_recall, output_recall
from context_paging.paging.estimate import chars4_tokens, resident_chars4, text_chars4
from context_paging.paging.formats import (
    FORMATS,
    FormatError,
    Views,
    detect_format,
    render,
    to_views,
)
from context_paging.paging.limits import ContextSelectionError, context_limits
from context_paging.paging.select import CutKey, CutState, Frontier, Selection, select_context
from context_paging.paging.stubs import merge_stubs
from context_paging.paging.tokens import counted_resident, counted_tokens
from context_paging.paging.units import normalize, tool_call_ids

ESTIMATE_CACHE = 50_000
PLAN_CACHE = 8
log = logging.getLogger("context_paging")


@dataclass(frozen=True)
class ContextSettings:
    enabled: bool = True
    token_budget: int = 128_000
    trim_to_tokens: int | None = None
    # Where the first cut lands, a fraction of the budget (paging.select.first_cut_target):
    # deeper than the 5/8 target, so it re-writes less and the next cut comes later (issue 16;
    # measured with bench/replay_eval.py). 1.0 or None: upstream's rule, the target. An explicit
    # trim target is where every cut lands, the first included.
    first_cut: float | None = 0.375
    estimator: str = "tiktoken"
    distill: DistillConfig = field(default_factory=DistillConfig)


class LedgerHistory:
    """The selector's ``RawHistory``, answered from the ledger and the request's views."""

    def __init__(self, views: Views, ids: Sequence[str | None], items: Sequence[HistoryItem]):
        self.views = views
        self.ids = ids
        self.items = {item.history_id: item for item in items}
        self.last = items[-1] if items else None
        self.owner: dict[int, tuple[str, str, str]] = {}
        calls: dict[str, tuple[str, str]] = {}
        for index, view in enumerate(views.views):
            message = view.message
            if message.get("role") == "assistant" and ids[view.source]:
                for block in message.get("content") or ():
                    if isinstance(block, dict) and block.get("type") == "toolCall":
                        calls[str(block.get("id"))] = (ids[view.source], str(block.get("name")))
            elif message.get("role") == "toolResult":
                call = calls.get(str(message.get("toolCallId")))
                if call:
                    self.owner[index] = (call[0], str(message.get("toolCallId")), call[1])

    def key_of(self, index: int) -> CutKey | None:
        view = self.views.views[index]
        history_id = self.ids[view.source]
        role = view.message.get("role")
        if history_id is None or role not in ("user", "assistant"):
            return None
        calls = tool_call_ids(view.message) if role == "assistant" else []
        return CutKey(history_id, calls[0] if calls else None)

    def resolves(self, frontier: Frontier) -> bool:
        item = self.items.get(frontier.last_evicted.history_id)
        if item is None:
            return False
        call = frontier.last_evicted.tool_call_id
        if call is not None and (item.kind != "model_turn" or item.call(call) is None):
            return False
        if frontier.kind == "partialTurn":
            if item.kind != "model_turn":
                return False
            user = frontier.user_history_id
            if user is not None and getattr(self.items.get(user), "kind", None) != "user":
                return False
        return True

    def is_last_item(self, index: int) -> bool:
        key = self.key_of(index)
        return (key is not None and self.last is not None and self.last.kind == "model_turn"
                and self.last.history_id == key.history_id)

    def tool_reference(self, index: int) -> tuple[str, str, str] | None:
        return self.owner.get(index)


class ContextService:
    def __init__(self, ledger: Ledger, settings: ContextSettings,
                 count_text: Callable[[str], int] | None) -> None:
        self.ledger = ledger
        self.settings = settings
        self.count_text = count_text if settings.estimator == "tiktoken" else None
        self._estimates: OrderedDict[tuple[str, int], float] = OrderedDict()
        self._plans: OrderedDict[tuple[Any, ...], Plan | None] = OrderedDict()
        self.latest: dict[str, dict[str, Any]] = {}  # per session: the last reply's figures
        self._fingerprints = FingerprintMemo()
        # The reference path: count every message exactly before selecting (as before the
        # window-proportional counting); tests compare the two.
        self.reference = False
        self.spare_seconds = 0.005  # per call: exact counting of older messages, ahead of need

    # --- estimates ------------------------------------------------------------------------

    def _estimate(self, message: dict[str, Any]) -> float:
        if self.count_text is None:
            return chars4_tokens(message)
        return counted_tokens(message, self.count_text)

    def _resident(self, system: str, tools: list[dict[str, Any]]) -> float:
        if self.count_text is None:
            return resident_chars4(system, tools)
        return counted_resident(system, tools, self.count_text)

    def notice_tokens(self, text: str) -> float:
        return text_chars4(text) if self.count_text is None else self.count_text(text) + 4

    def _view_estimates(self, views: Views, fps: Sequence[str | None],
                        distilled: dict[int, Distilled], reach: float | None = None,
                        deferred: Collection[int] = ()) -> tuple[list[float], set[int]]:
        """Per view: its token estimate, and the views left uncounted.

        Counting runs from the newest view back. With ``reach``, once the views counted so far
        add up to more than ``reach`` tokens, older views that are not in the cache are not
        counted: they get 0, a lower bound, and are returned as uncounted. The caller selects on
        these figures and falls back to counting everything if the window keeps (or an error
        names) an uncounted view — see :meth:`select` for why that gives the same answer.
        ``deferred`` views (outputs distillation has not judged yet) are uncounted as well:
        a decision could only make them smaller, so 0 is their lower bound too."""
        out = [0.0] * len(views.views)
        lazy: set[int] = set()
        total = 0.0
        counting = True
        for index in range(len(views.views) - 1, -1, -1):
            value = None if index in deferred else self._view_estimate(
                index, views, fps, distilled, counting)
            if value is None:
                lazy.add(index)
            else:
                out[index] = value
                total += value
            # Past the reach, stop after a request: whole turns leave the window, so the turn
            # that crosses the reach is counted to its start.
            if reach is not None and total > reach and views.views[index].message.get(
                    "role") == "user":
                counting = False
        return out, lazy

    def _view_estimate(self, index: int, views: Views, fps: Sequence[str | None],
                       distilled: dict[int, Distilled], count: bool = True) -> float | None:
        """One view's estimate from the cache, else counted (None when ``count`` is false)."""
        view = views.views[index]
        fp = fps[view.source]
        message = view.message
        if index in distilled:
            if distilled[index].message is None:
                return 0.0  # left out with its exchange: never sent
            message = distilled[index].message
            fp = fp and f"{fp}:{distilled[index].key}"
        key = None if fp is None else (fp, view.part)
        value = None if key is None else self._estimates.get(key)
        if value is not None or not count:
            return value
        value = self._estimate(message)
        if key is not None:
            self._estimates[key] = value
            if len(self._estimates) > ESTIMATE_CACHE:
                self._estimates.popitem(last=False)
        return value

    def _count_ahead(self, views: Views, fps: Sequence[str | None],
                     distilled: dict[int, Distilled], lazy: set[int]) -> None:
        """Spend at most ``spare_seconds`` counting uncounted views, newest first, so later
        calls (calibration, a longer window) find them in the cache."""
        deadline = time.perf_counter() + self.spare_seconds
        last = 0.0  # the previous count's time: a count that would not fit is not started
        for index in sorted(lazy, reverse=True):
            now = time.perf_counter()
            if now + last >= deadline:
                return
            self._view_estimate(index, views, fps, distilled)
            last = time.perf_counter() - now

    # --- the call -------------------------------------------------------------------------

    def select(self, session: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:meth:`_select`. Its ledger appends are flushed to disk in the background while it
        selects; the call answers, or raises, only once they are on disk (a failed flush is
        the ``OSError`` a failed write would be), so an acknowledged call never loses a
        message to a crash, and the flush costs it no time."""
        try:
            return self._select(session, *args, **kwargs)
        finally:
            self.ledger.synced(session)

    def _select(
        self,
        session: str,
        messages: Sequence[Any],
        fmt: str = "auto",
        system: Any = None,
        tools: Sequence[dict[str, Any]] | None = None,
        model: str | None = None,
        model_window: float | None = None,
        token_budget: int | None = None,
        trim_to_tokens: int | None = None,
        usage: dict[str, Any] | None = None,
        ephemeral: Sequence[int] = (),
        judge: Judge | None = None,
        after_id: str | None = None,
    ) -> dict[str, Any]:
        stored: list[str] = []
        if after_id is not None:
            messages, fmt, ephemeral, stored = expand(self.ledger.session(session), after_id,
                                                      messages, fmt, ephemeral)
        if fmt == "auto":
            fmt = detect_format(messages)
        elif fmt not in FORMATS:
            raise FormatError(f"format {fmt!r} is not one of auto, {', '.join(FORMATS)}")
        for index in ephemeral:
            if not 0 <= index < len(messages):
                raise FormatError(f"ephemeral index {index} is outside 0..{len(messages) - 1}")
        views = to_views(messages, fmt)  # type: ignore[arg-type]
        checked = None
        if self.settings.enabled:
            # A malformed request (a result that answers no call, …) is refused before anything
            # is stored, so no tool ever sees its messages (specs/paging.md §1.5).
            checked = normalize([v.message for v in views.views])  # the selector reuses it
        ledger = self.ledger.session(session)
        skip = set(ephemeral) | set(views.resident)
        fps = self._fingerprints.fingerprints(ledger.ref, messages, skip, stored)
        ids = chain_ids(fps)
        ledger.append(messages, ids, fmt, durable=False)  # select waits for the flush
        self._fingerprints.remember(ids, fps)
        if not self.settings.enabled:
            return _disabled(messages) | {"last_message_id": ledger.head}

        budget = token_budget if token_budget is not None else self.settings.token_budget
        trim = trim_to_tokens if trim_to_tokens is not None else (
            self.settings.trim_to_tokens if token_budget is None else None)
        # Count exactly only back to where the window can reach (the largest limit the
        # selector compares with); calibration sums every message, so it counts them all.
        reach = None if self.reference or usage is not None else _reach(budget, trim,
                                                                         model_window)
        judge = judge or LocalJudge()
        state = self.ledger.load_state(session)
        settings_key = [model, model_window]
        # Edits of messages an earlier request already sent wait for a re-write of their prefix
        # (issue 16, index/landing.py): ``everything`` is what the decisions would change,
        # ``distilled`` what this window shows of it.
        previous = sent_keys(state) if state.get("settings") == settings_key else None
        outgoing = [views.views[i].source in skip for i in range(len(views.views))]

        def keys_of(distilled: dict[int, Distilled]) -> list[str | None]:
            return [None if outgoing[i] else f"{ids[v.source]}#{v.part}"
                    + (f"~{distilled[i].key}" if i in distilled else "")
                    for i, v in enumerate(views.views)]

        def shown(everything: dict[int, Distilled], new: list[Decision]) -> tuple[Any, ...]:
            """What this window shows of the decisions: edits of already-sent messages are
            held back (``held``) until they land; ``dropped`` are the omitted views."""
            held = held_targets(everything, keys_of(everything), previous)
            distilled = self.without(views, ids, skip, [*ledger.decisions, *new],
                                     held) if held else everything
            return held, distilled, {i for i, d in distilled.items() if d.message is None}

        everything, new, deferred = self._distill(ledger, views, ids, skip, judge,
                                                  provider_of(model), reach)
        held, distilled, dropped = shown(everything, new)
        estimates, lazy = self._view_estimates(views, fps, distilled, reach, deferred)
        system_text = _system_text(system, [messages[i] for i in views.resident])
        resident = self._resident(system_text, list(tools or []))
        cut_state = None
        if state.get("settings") == settings_key and state.get("cut"):
            try:
                cut_state = CutState.from_dict(state["cut"])
            except ValueError:
                cut_state = None

        def calibrated(keys: list[str | None], estimates: list[float]) -> Any:
            return calibrate(
                Anchor.from_dict(state.get("anchor")) if state.get("settings") == settings_key
                else None,
                keys, estimates, [str(v.message.get("role")) for v in views.views],
                [v.message.get("stopReason") in ("aborted", "error") for v in views.views],
                resident, usage,
            )

        keys = keys_of(distilled)
        calibration = calibrated(keys, estimates)
        raw = LedgerHistory(views, ids, ledger.items())

        def choose(estimates: list[float], distilled: dict[int, Distilled]) -> Selection:
            return select_context(
                [distilled[i].message or v.message if i in distilled else v.message
                 for i, v in enumerate(views.views)],
                token_budget=budget, trim_to_tokens=trim, model_window=model_window,
                first_cut=self.settings.first_cut if trim is None else None,
                resident_tokens=resident, estimates=estimates,
                context_tokens=calibration.context_tokens if calibration else None,
                token_estimates=calibration.token_estimates if calibration else None,
                outgoing_only=outgoing, raw=raw, cut_state=cut_state,
                notice_tokens=self.notice_tokens, normalized=checked,
            )

        # Uncounted views carry 0, never more than their real estimate, and the selector only
        # compares sums of estimates against limits (no calibration here: it needs usage, and
        # with usage everything is counted). So any comparison that fails on these figures
        # fails on the exact ones too: each view the selector evicted here, it evicts on the
        # exact figures as well. If it kept an uncounted view, or raised (its message prints
        # a sum), the answer may differ: count everything and select again.
        try:
            selection: Selection | None = choose(estimates, distilled)
        except ContextSelectionError:
            if not lazy:
                raise
            selection = None
        if lazy and (selection is None or not lazy.isdisjoint(selection.indexes)):
            if deferred:  # judge the outputs left unjudged too: the full pass, from scratch
                everything, new, _ = self._distill(ledger, views, ids, skip, judge,
                                                   provider_of(model), None)
                held, distilled, dropped = shown(everything, new)
                keys = keys_of(distilled)
            estimates, lazy = self._view_estimates(views, fps, distilled)
            selection = choose(estimates, distilled)
        assert selection is not None
        landed = set()
        if held and previous is not None:
            current = [None] * bool(selection.notice) + [keys[i] for i in selection.indexes]
            room = selection.budget_tokens - selection.estimated_tokens
            later = horizon(int(state.get("requests") or 0), room, float(state.get("growth") or 0))
            prices = prices_for(provider_of(model), (state.get("usage_by_response") or {}).values())
            landed = to_land(held, everything, keys_of(everything), current, previous,
                             sent_tokens(state), prices, later)
        if landed:  # one re-write carries every edit that lands: select again with them
            distilled = self.without(views, ids, skip, [*ledger.decisions, *new],
                                     held - landed) if held - landed else everything
            dropped = {i for i, d in distilled.items() if d.message is None}
            keys = keys_of(distilled)
            held_estimates = estimates
            estimates, lazy = self._view_estimates(views, fps, distilled)
            calibration = calibrated(keys, estimates)
            cut = selection
            selection = choose(estimates, distilled)
            if (cut.cut_state != cut_state and selection.cut_state == cut_state
                    and selection.estimated_tokens > selection.target_tokens):
                # The edits only just fit the window under its budget: the cut would follow
                # within a few requests and re-write it all again. Keep this request's cut and
                # let the edits ride on it (the same views, sent edited).
                saved = sum(held_estimates[i] - estimates[i] for i in cut.indexes)
                selection = replace(cut, estimated_tokens=cut.estimated_tokens - saved)
        if new:
            ledger.append_decisions(new, durable=False)
        recovery = selection.replacements or {}
        kept = [i for i in selection.indexes if i not in dropped]
        shown = [i for i in kept if i in distilled and i not in recovery]
        replacements = {i: distilled[i].text for i in shown} | recovery
        window = render(messages, views, kept, selection.notice, replacements)
        window = merge_stubs(window, {distilled[i].text for i in shown
                                      if distilled[i].decision.action == "omit_exchange"})
        usage_log = dict(state.get("usage_by_response") or {})
        newest = _newest_assistant(views, ids)
        if newest is not None and isinstance(usage, dict):
            usage_log[newest] = [usage.get("cache_read_tokens") or 0,
                                 usage.get("cache_write_tokens") or 0]
        evicted_sources = {views.views[i].source for i in selection.evicted}
        self._remember(session, settings_key, selection, keys, estimates, resident,
                       calibration.overhead if calibration else 0.0,
                       {"usage_by_response": usage_log, "model_window": model_window,
                        "calibrated": calibration is not None,
                        "evicted_messages": len(evicted_sources),
                        **_pace(state, selection, cut_state)})
        if lazy:
            self._count_ahead(views, fps, distilled, lazy)
        reply = {
            "messages": window,
            "mode": selection.mode,
            "estimated_tokens": _number(selection.estimated_tokens),
            "budget_tokens": _number(selection.budget_tokens),
            "target_tokens": _number(selection.target_tokens),
            "evicted_messages": len(evicted_sources),
            "frontier": selection.cut_state.to_dict()["frontier"] if selection.cut_state else None,
            "fallback_reason": selection.fallback_reason,
            "notice": selection.notice,
            "distilled": [distilled[i].report() for i in shown],
            "last_message_id": ledger.head,
        }
        self.latest[ledger.ref] = {k: v for k, v in reply.items()
                                   if k not in ("messages", "last_message_id")} | {
            "model_window": model_window, "format": fmt, "input_messages": len(messages),
            "returned_messages": len(window), "calibrated": calibration is not None,
        }
        return reply

    def entries(self, views: Views, ids: Sequence[str | None],
                outgoing: set[int]) -> tuple[list[int], list[tuple[str, dict[str, Any]]]]:
        """The distillation core's entries (view positions, ``(history id, message)``): every
        view but outgoing-only ones, which are never stored and so could never be recalled."""
        positions = [i for i, v in enumerate(views.views) if v.source not in outgoing]
        return positions, [(str(ids[views.views[i].source]), views.views[i].message)
                           for i in positions]

    def plan(self, session: str, messages: Sequence[Any], fmt: str = "auto",
             ephemeral: Sequence[int] = (), model: str | None = None,
             after_id: str | None = None) -> Plan | None:
        """What this request's distillation pass would judge, without storing anything: the
        sampling judge asks the host's model about ``plan.segments`` before the call runs."""
        config = self.settings.distill
        if not (self.settings.enabled and config.enabled):
            return None
        stored: list[str] = []
        if after_id is not None:
            messages, fmt, ephemeral, stored = expand(self.ledger.session(session), after_id,
                                                      messages, fmt, ephemeral)
        fmt = detect_format(messages) if fmt == "auto" else fmt
        views = to_views(messages, fmt)  # type: ignore[arg-type]
        skip = set(ephemeral) | set(views.resident)
        ids = chain_ids(self._fingerprints.fingerprints(
            self.ledger.session(session).ref, messages, skip, stored))
        _, entries = self.entries(views, ids, skip)
        # The same reach select uses with the configured limits (a call that overrides them
        # may judge a few more or fewer outputs; an unasked segment is a timeout: kept).
        reach = None if self.reference else _reach(self.settings.token_budget,
                                                   self.settings.trim_to_tokens, None)
        return self._plan(self.ledger.session(session), entries, provider_of(model),
                          reach=_entry_reach(entries, reach))

    def _plan(self, ledger: LedgerSession, entries: Sequence[tuple[str, Any]],
              provider: str | None,
              prior: Mapping[int, dict[str, Any] | None] | None = None,
              reach: int = 0) -> Plan | None:
        """The pass's plan over the conversation as the window already shows it (earlier
        decisions applied: an exchange holding a distilled output is costed at its distilled
        size, so savings are never counted twice). Cached, because the sampling judge plans
        before the call and the call plans again: the key names the stored conversation (its
        last chain id), the decisions made so far and the provider. ``prior`` is what those
        decisions change (``paging.distill.apply.changed``), when the caller has it already."""
        decisions = ledger.decisions
        key = (ledger.ref, entries[-1][0] if entries else "", len(entries), len(decisions),
               provider, reach)
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key]
        if prior is None:
            prior = changed(entries, decisions)
        plan = plan_pass(applied(entries, prior), self.settings.distill, decisions,
                         provider=provider, reach=reach)
        self._plans[key] = plan
        while len(self._plans) > PLAN_CACHE:
            self._plans.popitem(last=False)
        return plan

    def _distill(self, ledger: LedgerSession, views: Views, ids: Sequence[str | None],
                 outgoing: set[int], judge: Judge, provider: str | None,
                 reach: float | None = None,
                 ) -> tuple[dict[int, Distilled], list[Decision], set[int]]:
        """This call's distillation: view index -> the view as sent (None: left out of the
        window, part of an omitted exchange) and the decision behind it; the new decisions
        (the caller stores them once the window is chosen); and the views of large outputs
        left unjudged because they lie beyond ``reach`` tokens of content (chars/4)."""
        config = self.settings.distill
        if not config.enabled:
            return {}, [], set()
        positions, entries = self.entries(views, ids, outgoing)
        changes = changed(entries, ledger.decisions)  # what the window already shows
        plan = None
        try:
            plan = self._plan(ledger, entries, provider, changes, _entry_reach(entries, reach))
            new = [] if plan is None else decide_plan(plan, judge_plan(plan, judge))
            shown = applied(entries, changes) if new else []
            new = [self._measured(d, shown) for d in new]
        except Exception:  # a failed pass must never fail the request: keep everything
            log.warning("distillation failed; the conversation is sent whole", exc_info=True)
            new = []
        deferred = {positions[p] for p in plan.deferred} if plan is not None else set()
        decisions = [*ledger.decisions, *new]
        if any(d.edits for d in new):
            changes = changed(entries, decisions)
        return self._shown(views, ids, positions, changes, decisions), new, deferred

    def without(self, views: Views, ids: Sequence[str | None], outgoing: set[int],
                decisions: Sequence[Decision], targets: Collection[str]) -> dict[int, Distilled]:
        """The window's replacements with the newest decision of each of ``targets`` left out
        (pending, index/landing.py): what those views showed before it, an earlier decision's
        bytes or their own."""
        newest = latest(decisions)
        kept = [d for d in decisions if not (d.target in targets and newest.get(d.target) is d)]
        positions, entries = self.entries(views, ids, outgoing)
        return self._shown(views, ids, positions, changed(entries, kept), kept)

    @staticmethod
    def _shown(views: Views, ids: Sequence[str | None], positions: Sequence[int],
               changes: Mapping[int, Any], decisions: Sequence[Decision]) -> dict[int, Distilled]:
        """View index -> the view as sent under ``decisions`` (``changes`` is what they change,
        by entry position)."""
        if not changes:
            return {}
        in_force = {t: d for t, d in latest(decisions).items() if d.edits}
        by_view = {positions[p]: message for p, message in changes.items()}
        result: dict[int, Distilled] = {}
        owner: Decision | None = None
        for index in sorted(by_view):
            message = by_view[index]
            view = views.views[index].message
            if message is None:  # omitted with the exchange whose stub came before it
                if owner is not None:
                    result[index] = Distilled(None, owner)
                continue
            key = view.get("toolCallId") if view.get("role") == "toolResult" else ids[
                views.views[index].source]
            decision = in_force.get(str(key))
            if decision is None:
                continue
            if decision.action == "omit_exchange":
                owner = decision
            result[index] = Distilled(dict(message), decision)
        return result

    def _measured(self, decision: Decision, entries: Sequence[tuple[str, Any]]) -> Decision:
        """The decision with the tokens it saves, counted with this server's tokenizer."""
        if not decision.edits or self.count_text is None:
            return decision
        saved = summarize([decision], self.count_text, entries).saved_tokens
        return replace(decision, saved_tokens=saved)

    def _remember(self, session: str, settings_key: list[Any],
                  selection: Selection, keys: Sequence[str | None], estimates: Sequence[float],
                  resident: float, overhead: float, extra: dict[str, Any]) -> None:
        sent = [Sent(None, self.notice_tokens(selection.notice))] if selection.notice else []
        sent += [Sent(keys[i], estimates[i]) for i in selection.indexes]
        state = {
            "settings": settings_key,
            "cut": selection.cut_state.to_dict() if selection.cut_state else None,
            "anchor": Anchor(tuple(sent), resident, overhead).to_dict(),
            "latest": {"estimated_tokens": selection.estimated_tokens,
                       "budget_tokens": selection.budget_tokens, "mode": selection.mode},
            **extra,
        }
        self.ledger.save_state(session, state)

    def stats(self, session: str, enabled: bool = True) -> Stats:
        """The §8 report for a ledger session."""
        ledger = self.ledger.session(session)
        state = self.ledger.load_state(session)
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
            history += sum(self._estimate(v.message) for v in views.views)
        latest = state.get("latest") or {}
        usage = list((state.get("usage_by_response") or {}).values())
        summary = summarize(ledger.decisions)
        return Stats(
            session=ledger.ref, enabled=enabled,
            stored_bytes=ledger.path.stat().st_size if ledger.path.exists() else None,
            history_tokens=math.ceil(history),
            input_tokens=latest.get("estimated_tokens"),
            input_measured=bool(state.get("calibrated")),
            budget_tokens=latest.get("budget_tokens"),
            model_window=state.get("model_window"),
            cache_read_tokens=sum(int(u[0]) for u in usage) if usage else None,
            cache_write_tokens=sum(int(u[1]) for u in usage) if usage else None,
            mode=latest.get("mode"), evicted_messages=state.get("evicted_messages"),
            distilled_outputs=summary.outputs_distilled + summary.outputs_removed,
            omitted_exchanges=summary.exchanges_omitted,
            dropped_images=summary.images_dropped,
            distilled_saved_characters=summary.saved_chars,
            distilled_saved_tokens=summary.saved_tokens,
            distill_judges=dict(summary.judges),
        )


@dataclass(frozen=True, slots=True)
class Distilled:
    """A view as this window sends it: the applied message (None when it is left out with an
    omitted exchange) and the decision behind it."""

    message: dict[str, Any] | None
    decision: Decision

    @property
    def key(self) -> str:
        """Names the decision in estimate-cache and calibration keys."""
        return text_fingerprint(self.decision.action, self.decision.replacement)[:16]

    @property
    def text(self) -> str:
        """The replacement content as one text: the stub, then (old images) the output's own
        text blocks."""
        if self.decision.action == "drop_image" and self.message is not None:
            return "\n".join(str(b.get("text", "")) for b in self.message.get("content") or ()
                             if isinstance(b, dict) and b.get("type") == "text")
        return self.decision.replacement

    def report(self) -> dict[str, Any]:
        d = self.decision
        saved = {"saved_characters": d.saved_chars,
                 "saved_tokens": d.saved_tokens if d.saved_tokens is not None
                 else round(d.saved_chars / 4)}
        if d.action == "omit_exchange":
            return {"history_id": d.target, "action": d.action, "judge": d.judge, **saved,
                    "recall": exchange_recall(d.target)}
        return {"tool_call_id": d.target, "action": d.action, "judge": d.judge, **saved,
                "recall": output_recall(d.target)}


def _entry_reach(entries: Sequence[tuple[str, Any]], reach: float | None) -> int:
    """The first entry distillation judges: where the newest entries' content reaches twice
    ``reach`` tokens at characters/4 (cheap; a margin, not a bound — the caller checks that the
    window kept nothing older and redoes the pass in full otherwise). 0: judge everything."""
    if reach is None:
        return 0
    total = 0.0
    for position in range(len(entries) - 1, -1, -1):
        total += content_chars(entries[position][1]) / 4
        if total > 2 * reach:
            return position
    return 0


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


def _pace(state: Mapping[str, Any], selection: Selection,
          cut_state: CutState | None) -> dict[str, Any]:
    """Requests so far and the window's mean growth per request while the cut holds (every
    step, the large outputs with the small ones): how long an edit's savings are read before
    the cut re-writes the prefix anyway (index/landing.py)."""
    steps = state.get("growth_steps") or [0.0, 0]  # sum of growth, requests measured
    before = (state.get("latest") or {}).get("estimated_tokens")
    if isinstance(before, int | float) and selection.cut_state == cut_state:
        steps = [float(steps[0]) + max(0.0, selection.estimated_tokens - before),
                 int(steps[1]) + 1]
    return {"requests": int(state.get("requests") or 0) + 1, "growth_steps": steps,
            "growth": steps[0] / steps[1] if steps[1] else 0.0}


def provider_of(model: str | None) -> str | None:
    """The provider part of a ``provider/id`` model name (``openai-codex/gpt-5`` →
    ``openai-codex``), which sets the cost model of distillation's break-even rule."""
    if model and "/" in model.strip("/"):
        return model.split("/", 1)[0] or None
    return None


def _newest_assistant(views: Views, ids: Sequence[str | None]) -> str | None:
    for view in reversed(views.views):
        if view.message.get("role") == "assistant":
            return ids[view.source]
    return None


def _system_text(system: Any, resident_messages: Sequence[dict[str, Any]]) -> str:
    parts: list[str] = []
    for value in [system, *(m.get("content") for m in resident_messages)]:
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(str(b.get("text", "")) for b in value if isinstance(b, dict))
    return "\n".join(p for p in parts if p)


def _number(value: float) -> float | int:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _disabled(messages: Sequence[Any]) -> dict[str, Any]:
    return {"messages": list(messages), "mode": "disabled", "estimated_tokens": 0,
            "budget_tokens": 0, "target_tokens": 0, "evicted_messages": 0, "frontier": None,
            "fallback_reason": None, "notice": None, "distilled": []}

