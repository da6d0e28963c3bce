"""The window's distillation step: which views this call sends replaced, and why.

The request's entries (``paging.request.Request.entries``: every stored view as its ledger id and
message; outgoing-only views are left out, since they could never be recalled) go through a pass
of :func:`paging.distill` with the session's earlier decisions (the ledger's ``decision``
lines). New decisions carry the tokens they save, counted with this server's tokenizer; the
window appends them to the ledger before it answers, so every later call — in this process or
after a restart — applies the same replacement bytes. Any failure while distilling means the
conversation is sent as it is.

A distilled output, a removed output's stub, or an old output's text without its images is the
host's own message with only that content replaced. An omitted exchange keeps its request as
the stub and leaves out the rest of its messages (:class:`Distilled` with no message): they stay
in the selector's list at zero cost, so cut points keyed on them stay valid, and are skipped when
the window is rendered.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from context_paging.index.ledger import LedgerSession
from context_paging.paging.distill import (
    Decision,
    DistillConfig,
    Judge,
    decide_plan,
    judge_plan,
    summarize,
)
from context_paging.paging.distill.apply import applied, changed
from context_paging.paging.distill.conversation import Read, content_chars
from context_paging.paging.distill.judge import prepare_chunk
from context_paging.paging.distill.model import fingerprint as text_fingerprint
from context_paging.paging.distill.plan import (
    Plan,
    latest,
    message_fingerprint,
    plan_pass,
    prepare_output,
)
from context_paging.paging.distill.render import exchange_recall, output_recall
from context_paging.paging.distill.scan import Scan
from context_paging.paging.request import Entry, Request

PLAN_CACHE = 8
# Spare time prepares at most this many of the newest undecided large outputs: fewer than the
# chunk cache holds, so what it prepares is still there when a checkpoint judges it.
AHEAD_OUTPUTS = 32
# Remembered fingerprints of stored views (every edit in force checks the one of its message on
# every call, and hashing a long output is the cost): cleared past this many.
PRINTS = 200_000
_prints: dict[tuple[Any, ...], str] = {}
SCANS = 8  # sessions whose conversation structure is kept between passes
# Remembered message reads: cleared when they hold more views or text than this (they keep the
# texts alive, so the bound is on characters too: a few long conversations, not every one seen).
READS = 200_000
READ_CHARS = 64_000_000
log = logging.getLogger("context_paging")
_LEFT_OUT = object()  # _read_all: an entry left out with an omitted exchange


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


@dataclass(slots=True)
class _Owed:
    """What a pass that deferred outputs beyond reach still owes (``Distiller.settle``): its
    inputs, the decisions made before it, and the entry indexes of the outputs it deferred
    (oldest first); ``plan`` is that pass over every output, made when first needed."""

    ledger: LedgerSession
    entries: Sequence[Entry]
    changes: Mapping[int, Any]
    keys: Sequence[tuple[Any, ...] | None]
    provider: str | None
    judge: Judge
    decisions: tuple[Decision, ...]
    deferred: list[int]
    plan: Plan | None = None


class Distiller:
    """Plans (cached) and passes for one service's configuration."""

    def __init__(self, config: DistillConfig, count_text: Callable[[str], int] | None) -> None:
        self.config = config
        self.count_text = count_text
        self._plans: OrderedDict[tuple[Any, ...], Plan | None] = OrderedDict()
        # What a pass reads of each view (text, images, tool calls, size), by what names its
        # content (see view_keys): a pass reads every entry, and on the next call all but the
        # new ones are the same messages. The texts are the request's own strings.
        self._reads: dict[tuple[Any, ...], Read] = {}
        self._read_chars = 0
        # Per ledger session, what the last pass read of its conversation's structure (run
        # starts, counts, each run's calls and candidates …): extended by the next pass when
        # that conversation starts with the same messages. Taken out while a pass uses it.
        self._scans: OrderedDict[Any, Scan] = OrderedDict()
        self._lock = threading.Lock()
        self.keep_scans = True  # False: every pass walks the whole conversation (benches)
        # The last pass's request, for :meth:`ahead` (entries, their changes, keys, ledger).
        self._next: tuple[Any, ...] | None = None
        # Per ledger session, the decisions a checkpoint left unmade beyond the window's reach
        # (:meth:`settle`): the pass's own inputs, so they are made as that pass would have.
        self._owed: dict[Any, _Owed] = {}

    def plan(self, ledger: LedgerSession, entries: Sequence[Entry], provider: str | None,
             prior: Mapping[int, dict[str, Any] | None] | None = None,
             reach: int = 0, keys: Sequence[tuple[Any, ...] | None] | None = None,
             decisions: Sequence[Decision] | None = None) -> Plan | None:
        """The pass's plan over the conversation as the window already shows it (earlier
        decisions applied: an exchange holding a distilled output is costed at its distilled
        size, so savings are never counted twice). Cached, because the sampling judge plans
        before the call and the call plans again: the key names the stored conversation (its
        last chain id), the decisions made so far and the provider. ``prior`` is what those
        decisions change (``paging.distill.apply.changed``), when the caller has it already;
        ``decisions``, the ones made so far when not the ledger's own (:meth:`settle`)."""
        if decisions is None:
            decisions = ledger.decisions
        key = (ledger.ref, entries[-1][0] if entries else "", len(entries), len(decisions),
               provider, reach)
        with self._lock:  # calls of several sessions at once (index/window/gate.py)
            if key in self._plans:
                self._plans.move_to_end(key)
                return self._plans[key]
        if prior is None:
            prior = changed(entries, decisions)
        shown = applied(entries, prior)
        reads = scan = None
        if keys is not None:
            reads, named = self._read_all(entries, prior, keys)
            scan = self._scans.pop(ledger.ref, None)
            if None in named or not self.keep_scans:  # a view not named by its content
                scan = None
            else:
                scan = Scan.of(scan, [m for _, m in shown], reads, named, self.config)
        plan = plan_pass(shown, self.config, decisions, provider=provider, reach=reach,
                         reads=reads, scan=scan)
        if scan is not None:
            self._scans[ledger.ref] = scan
            while len(self._scans) > SCANS:
                self._scans.popitem(last=False)
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > PLAN_CACHE:
                self._plans.popitem(last=False)
        return plan

    def reads(self, entries: Sequence[Entry], changes: Mapping[int, Any],
              keys: Sequence[tuple[Any, ...] | None]) -> list[Read]:
        """The :class:`Read` of each of ``applied(entries, changes)``: a replaced message is
        read, an unchanged one looked up by its key (read once)."""
        return self._read_all(entries, changes, keys)[0]

    def _read_all(self, entries: Sequence[Entry], changes: Mapping[int, Any],
                  keys: Sequence[tuple[Any, ...] | None]
                  ) -> tuple[list[Read], list[Hashable | None]]:
        """``reads``, and what names each read message's content for a :class:`Scan`: its key,
        or for a replaced message its key with the replacement's read (None: not named)."""
        memo = self._reads
        if len(memo) > READS or self._read_chars > READ_CHARS:
            memo.clear()
            self._read_chars = 0
        # Every remembered read in one pass in C (a key of None finds nothing: none is stored
        # under None); then the replaced messages, and the few read for the first time.
        found: list[Any] = list(map(memo.get, keys))
        named: list[Hashable | None] = list(keys)
        for position, shown in changes.items():
            if shown is None:  # left out with an omitted exchange
                found[position] = _LEFT_OUT
                continue
            read = Read.of(shown)
            found[position] = read
            key = keys[position]
            named[position] = None if key is None else (key, read.text, read.images, read.chars)
        # Searched by identity, in C: list.index on the reads themselves would call each
        # Read's __eq__ in Python.
        unread, identities = id(None), list(map(id, found))
        try:
            position = identities.index(unread)
            while True:
                read = found[position] = Read.of(entries[position][1])
                key = keys[position]
                if key is not None:
                    memo[key] = read
                    self._read_chars += len(read.text)
                position = identities.index(unread, position + 1)
        except ValueError:  # no more unread messages
            pass
        if any(shown is None for shown in changes.values()):
            named = [n for n, read in zip(named, found, strict=True) if read is not _LEFT_OUT]
            found = [read for read in found if read is not _LEFT_OUT]
        return found, named

    def run(self, ledger: LedgerSession, request: Request, judge: Judge, provider: str | None,
            reach: float | None = None) -> tuple[dict[int, Distilled], list[Decision], set[int]]:
        """This call's pass: view index -> the view as sent and the decision behind it; the new
        decisions (stored by the caller once the window is chosen); and the views of large
        outputs left unjudged because they lie beyond ``reach`` tokens of content."""
        if not self.config.enabled:
            return {}, [], set()
        entries = request.entries
        keys = view_keys(request)
        prints = fingerprints(entries, keys)
        changes = changed(entries, ledger.decisions, prints)  # what the window already shows
        plan = None
        self._owed.pop(ledger.ref, None)  # a later pass over the session replaces it
        try:
            plan = self.plan(ledger, entries, provider, changes, entry_reach(entries, reach),
                             keys)
            if plan is not None and plan.deferred:
                self._owed[ledger.ref] = _Owed(ledger, entries, changes, keys, provider, judge,
                                               tuple(ledger.decisions), list(plan.deferred))
            new = [] if plan is None else decide_plan(plan, judge_plan(plan, judge))
            # what the new edits are measured against (measured reads it for edits only)
            shown = (applied(entries, changes)
                     if self.count_text is not None and any(d.edits for d in new) else [])
            new = [self.measured(d, shown) for d in new]
        except Exception:  # a failed pass must never fail the request: keep everything
            log.warning("distillation failed; the conversation is sent whole", exc_info=True)
            new = []
        self._next = (entries, changes, keys, ledger)
        positions = request.positions
        deferred = {positions[p] for p in plan.deferred} if plan is not None else set()
        decisions = [*ledger.decisions, *new]
        if any(d.edits for d in new):
            changes = changed(entries, decisions, prints)
        return shown_views(request, changes, decisions), new, deferred

    def owes(self) -> bool:
        """Whether a checkpoint's decisions beyond the window's reach are still unmade."""
        return bool(self._owed)

    def settle(self, ref: Any = None, deadline: float = math.inf,
               stop: Callable[[], bool] | None = None) -> bool:
        """Make the decisions a checkpoint left unmade because their outputs lay beyond the
        window's reach (``Plan.deferred``), for the session ``ref`` (every session: None), one
        output at a time until ``deadline`` (``time.monotonic``) or ``stop``; appended to the
        ledger as they are made. Returns whether some are left.

        The full computation decides them at that checkpoint, and later passes read what it
        decided: a decided output no longer counts towards a checkpoint's batch nor its
        re-write, and a distilled one is smaller in the exchanges pruned later. So they are made
        from that pass's own inputs (its conversation, decisions and judge: the same question
        and the same verdicts), in spare time (``ContextService.idle``) or, at the latest, first
        thing in the session's next call, before it plans. The call that deferred them stays as
        fast as the reach makes it, and no later reply differs from the full computation's."""
        for key in [ref] if ref is not None else list(self._owed):
            owed = self._owed.get(key)
            while owed is not None and owed.deferred:
                if (stop is not None and stop()) or time.monotonic() > deadline:
                    return True
                if owed.plan is None:
                    owed.plan = self.plan(owed.ledger, owed.entries, owed.provider, owed.changes,
                                          0, owed.keys, owed.decisions)
                    if owed.plan is None:  # cannot be (the pass planned them): nothing owed
                        break
                index = owed.deferred.pop(0)
                self._decide_owed(owed, index)
            self._owed.pop(key, None)
        return False

    def _decide_owed(self, owed: _Owed, index: int) -> None:
        """The deferred output at entry ``index``, decided as the full pass decides it."""
        plan = owed.plan
        assert plan is not None
        large = tuple(o for o in plan.large if o.item.index == index)
        if not large:
            return
        one = replace(plan, large=large, small=(), exchanges=(), images=(), batches=(),
                      batch_items={}, deferred=())
        try:
            new = decide_plan(one, judge_plan(one, owed.judge))
            shown = (applied(owed.entries, owed.changes)
                     if self.count_text is not None and any(d.edits for d in new) else [])
            new = [self.measured(d, shown) for d in new]
        except Exception:  # as in a pass: the output stays as it is, undecided
            log.warning("distillation failed; an output stays undecided", exc_info=True)
            return
        owed.ledger.append_decisions(new, durable=False)

    def ahead(self, seconds: float, stop: Callable[[], bool] | None = None) -> bool:
        """Spare time: chunk the last request's large outputs that no decision covers yet,
        newest first, and read their chunks' words, so the checkpoint that judges them finds
        both done. Only content-keyed caches are filled (``paging.distill.plan`` chunks and the
        local judge's word sets, each keyed by the text itself), so a pass gives the same
        decisions with or without it. Returns whether work is left."""
        if self._next is None or not self.config.enabled:
            return False
        entries, changes, keys, ledger = self._next
        deadline = time.monotonic() + seconds
        decided = set(latest(ledger.decisions))
        floor, done = self.config.min_result_chars, 0
        reads = self._reads
        for position in range(len(entries) - 1, -1, -1):
            if done >= AHEAD_OUTPUTS:
                break
            message = entries[position][1]
            if (position in changes or message.get("role") != "toolResult"
                    or str(message.get("toolCallId")) in decided):
                continue
            key = keys[position]
            read = reads.get(key) if key is not None else None
            text = read.text if read is not None else None
            if text is None or len(text) < floor:
                continue
            if (stop is not None and stop()) or time.monotonic() > deadline:
                return True
            for chunk in prepare_output(text):
                prepare_chunk(chunk)
            done += 1
        self._next = None
        return False

    def measured(self, decision: Decision, entries: Sequence[Entry]) -> Decision:
        """The decision with the tokens it saves, counted with this server's tokenizer."""
        if not decision.edits or self.count_text is None:
            return decision
        saved = summarize([decision], self.count_text, entries).saved_tokens
        return replace(decision, saved_tokens=saved)


def without(request: Request, decisions: Sequence[Decision],
            targets: Collection[str]) -> dict[int, Distilled]:
    """The window's replacements with the newest decision of each of ``targets`` left out
    (pending, index/window/landing.py): what those views showed before it, an earlier decision's
    bytes or their own."""
    newest = latest(decisions)
    kept = [d for d in decisions if not (d.target in targets and newest.get(d.target) is d)]
    entries = request.entries
    return shown_views(request, changed(entries, kept, fingerprints(entries, view_keys(request))),
                       kept)


def fingerprints(entries: Sequence[Entry],
                 keys: Sequence[tuple[Any, ...] | None] | None) -> Callable[[int], str]:
    """``message_fingerprint`` of the entry at a position, remembered by its view key (see
    :func:`view_keys`: the key names the view's content, so the same key, the same bytes)."""
    def of(position: int) -> str:
        key = None if keys is None else keys[position]
        found = None if key is None else _prints.get(key)
        if found is None:
            found = message_fingerprint(entries[position][1])
            if key is not None:
                if len(_prints) >= PRINTS:
                    _prints.clear()
                _prints[key] = found
        return found
    return of


def shown_views(request: Request, changes: Mapping[int, Any],
                decisions: Sequence[Decision]) -> dict[int, Distilled]:
    """View index -> the view as sent under ``decisions`` (``changes`` is what they change,
    by entry position)."""
    if not changes:
        return {}
    views = request.views.views
    in_force = {t: d for t, d in latest(decisions).items() if d.edits}
    by_view = {request.positions[p]: message for p, message in changes.items()}
    result: dict[int, Distilled] = {}
    owner: Decision | None = None
    for index in sorted(by_view):
        message = by_view[index]
        view = views[index].message
        if message is None:  # omitted with the exchange whose stub came before it
            if owner is not None:
                result[index] = Distilled(None, owner)
            continue
        key = view.get("toolCallId") if view.get("role") == "toolResult" else request.ids[
            views[index].source]
        decision = in_force.get(str(key))
        if decision is None:
            continue
        if decision.action == "omit_exchange":
            owner = decision
        result[index] = Distilled(dict(message), decision)
    return result


def view_keys(request: Request) -> list[tuple[Any, ...] | None]:
    """Per entry, what determines its view's own content: the format and the view's ledger key
    (its history id chains the fingerprints of every stored message up to it, and the part
    names the view of that message); a Responses run's view also holds its later items, so
    their ids are part of it. What a view takes from earlier messages (a tool name looked up
    by call id) is not content that ``content_chars`` reads. None: not remembered."""
    followers = request.views.followers or {}
    views, ids = request.views.views, request.ids
    if not followers:  # every format but Responses: one comprehension over every entry
        fmt, own = request.format, request.keys
        return [(fmt, own[index], ()) for index in request.positions]
    keys: list[tuple[Any, ...] | None] = []
    for index in request.positions:
        more = tuple(ids[i] for i in followers.get(views[index].source, ()))
        keys.append(None if None in more else (request.format, request.keys[index], more))
    return keys


def entry_reach(entries: Sequence[Entry], reach: float | None) -> int:
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


def provider_of(model: str | None) -> str | None:
    """The provider part of a ``provider/id`` model name (``openai-codex/gpt-5`` →
    ``openai-codex``), which sets the cost model of distillation's break-even rule."""
    if model and "/" in model.strip("/"):
        return model.split("/", 1)[0] or None
    return None
