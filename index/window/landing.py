"""When distillation's edits reach the window: with the re-writes the cache pays anyway.

The rule is in docs/distillation.md, "Under prompt caching".

Distillation decides early and stores its decisions in the ledger as before. But an edit of a
message the provider has already cached re-writes the cached prefix from that message on
(``paging.cache_cost``), so a decision about a message that an earlier request sent unedited is
*pending*: the window keeps sending that message's old bytes until

* the prefix is re-written from an earlier position anyway (the cut advances, the notice
  changes, an earlier edit lands): every pending edit after that position lands for free; or
* the pending edits before that position together save enough, on the later requests, to pay
  for re-writing from the first of them (``paging.cache_cost.pays``): then all of them land in
  one re-write.

A decision about a message no earlier request sent (new in this request) lands at once.

Which edits have landed needs no state of its own: the previous window's calibration anchor,
persisted with the cut, keys every message it sent by ledger id and part, with the decision's
key appended when it was sent edited (``index.context``). A message sent edited stays edited; a
message sent unedited whose decision is pending stays unedited; so consecutive windows are
byte-stable and a restarted server continues exactly where it left off. Pending decisions are
ordinary ledger decisions, so ``recall`` works on them as on any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_paging.paging.cache_cost import CachePrices, common_keys, pays


def sent_keys(state: Mapping[str, Any]) -> list[str | None] | None:
    """The keys of the previous window, in order (None for the notice and unstored messages), or
    None when there was no previous window to compare with."""
    anchor = state.get("anchor")
    try:
        return [k if isinstance(k, str) else None for k, _ in anchor["sent"]]
    except (KeyError, TypeError, ValueError):
        return None


def sent_tokens(state: Mapping[str, Any]) -> list[float]:
    try:
        return [float(t) for _, t in state["anchor"]["sent"]]
    except (KeyError, TypeError, ValueError):
        return []


def held_targets(distilled: Mapping[int, Any], keys: Sequence[str | None],
                 previous: Sequence[str | None] | None) -> set[str]:
    """Decision targets whose edit is pending: the previous window sent one of their views, but
    not as this decision makes it (``keys`` are the views' keys with the decision's suffix, as
    ``index.context`` keys them). An omitted exchange is held whole."""
    if previous is None:
        return set()
    sent = {k for k in previous if k is not None}
    bases = {k.split("~", 1)[0] for k in sent}
    held = set()
    for index, d in distilled.items():
        key = keys[index]
        if key is not None and key not in sent and key.split("~", 1)[0] in bases:
            held.add(d.decision.target)
    return held


def saved_tokens(decision: Any) -> float:
    if decision.saved_tokens is not None:
        return float(decision.saved_tokens)
    return decision.saved_chars / 4


def to_land(held: set[str], distilled: Mapping[int, Any], keys: Sequence[str | None],
            current: Sequence[str | None], previous: Sequence[str | None],
            previous_tokens: Sequence[float], prices: CachePrices,
            later_requests: float) -> set[str]:
    """The held targets whose edits land in this request.

    ``distilled`` is every decision's view (pending ones too) and ``keys`` the views' keys;
    ``current`` the keys this request sends with the pending edits held back, ``previous`` /
    ``previous_tokens`` the last request's keys and token estimates. The request re-writes the
    previous one from the first position where the two differ; held edits of messages the
    previous request sent at or after that position ride on that re-write (or leave with the
    cut); the ones before it land together only if their savings pay for re-writing the prefix
    from the first of them."""
    shared = common_keys(previous, current)
    where = {}
    for n, key in enumerate(previous):
        if key is not None:
            where.setdefault(key.split("~", 1)[0], n)
    first: dict[str, int] = {}  # decision target -> its first position in the last request
    decisions: dict[str, Any] = {}
    for index, d in distilled.items():
        target = d.decision.target
        key = keys[index]
        if target not in held or key is None:
            continue
        p = where.get(key.split("~", 1)[0])
        if p is None:
            continue
        decisions[target] = d.decision
        first[target] = min(first.get(target, p), p)
    free = {t for t, p in first.items() if p >= shared}
    costly = {t: p for t, p in first.items() if p < shared}
    if costly:
        start = min(costly.values())
        rewrite = sum(previous_tokens[start:shared])
        saved = sum(saved_tokens(decisions[t]) for t in costly)
        if pays(rewrite, saved, later_requests, prices):
            free |= set(costly)
    return free
