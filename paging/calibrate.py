"""Calibration from provider usage, for a server that sees only requests.

The rules are in docs/selection.md, "Calibration and the fast path".

Upstream anchors on Pi's ``turn_end`` event. A ``select_context`` server never sees the response
go by; it sees the *next* request, which contains that response, and the host's ``usage`` for
it. So the server remembers what it sent (the anchor: one entry per message, its stable key,
local estimate and whether it is persistent history) and, on the next call:

1. finds the response: the first assistant message after the last persistent message it sent,
   which must not be interrupted, and the sent persistent messages must appear in the new request
   in the same order (else no calibration: the host edited history);
2. the provider total U = input + output + cache_read + cache_write counts the anchored request
   plus the response, so the estimate of the new request is
   ``E = U + Σtok(current) − Σtok(sent) − tok(response) + R_now − R_sent``;
3. per-message weights: ``surplus = U − R − M`` is split between a resident overhead
   (first observation ``surplus · R / (R + scalable)``, later ``min(previous, surplus)``) and a
   scale on the persistent messages, so an evicted message removes its own scaled cost.

What it reads of the messages (:func:`counted_views`): the exact count of each message the last
window sent, of the response and of system messages (the selector costs those 0), and the sum of
all the others. The selector's correction ``c = E − R' − Σ weights`` does not depend on that sum:
an other message adds its count to ``E`` and its unscaled count to the weights alike. So a message
left uncounted (a lower bound, 0 or a floor) gives the same ``c`` as its count would, when both are
summed exactly: the figures are integers here (:attr:`Calibration.exact` says when), and the
selector sums ``c`` with one rounding.

Changed from upstream (docs/selection.md, "Differences from upstream"): W5 — when a response shows
no surplus, the remembered overhead is kept instead of collapsing to 0 (a later undercount is then
still split, not blamed on messages alone); W6 — weights do not depend on an exact match between two
provider totals: here the provider total is the usage itself.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from context_paging.paging.select import TokenEstimates


@dataclass(frozen=True, slots=True)
class Sent:
    """One message of a request the server returned: stable key (None if not persistent)."""

    key: str | None
    tokens: float


@dataclass(frozen=True, slots=True)
class Anchor:
    sent: tuple[Sent, ...]
    resident: float
    overhead: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"sent": [[s.key, s.tokens] for s in self.sent], "resident": self.resident,
                "overhead": self.overhead}

    @classmethod
    def from_dict(cls, value: Any) -> Anchor | None:
        try:
            sent = tuple(
                Sent(k if isinstance(k, str) else None, float(t)) for k, t in value["sent"]
            )
            return cls(sent, float(value["resident"]), float(value.get("overhead", 0.0)))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class Calibration:
    context_tokens: float
    token_estimates: TokenEstimates | None
    overhead: float
    # Whether the selector's correction is the one every view counted would give: no view read
    # exactly was left uncounted, every figure is a whole number (summed without rounding),
    # and the estimate needed no clamp at 0 (the uncounted views only raise it).
    exact: bool = True


_EXACT = float(2**53)  # whole numbers below this add up without rounding


def usage_total(usage: Any) -> float | None:
    """input + output + cache_read + cache_write, if all present ones are valid."""
    if not isinstance(usage, dict):
        return None
    total = 0.0
    for key in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        value = usage.get(key, 0)
        if value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            return None  # not a count, negative or NaN
        try:
            total += value
        except OverflowError:  # an integer beyond any float: no count a window could hold
            return None
    return total if 0 < total < float("inf") else None


def _places(anchor: Anchor, keys: Sequence[str | None]) -> list[int] | None:
    """Where the sent persistent messages are in the current request, in order, or None."""
    sent_keys = [s.key for s in anchor.sent if s.key is not None]
    if not sent_keys:
        return None
    position = {key: i for i, key in enumerate(keys) if key is not None}
    places = [position.get(key) for key in sent_keys]
    if any(p is None for p in places) or places != sorted(places):  # type: ignore[type-var]
        return None
    return places  # type: ignore[return-value]


def _response(places: Sequence[int], keys: Sequence[str | None],
              roles: Sequence[str]) -> int | None:
    return next((i for i in range(places[-1] + 1, len(keys))
                 if roles[i] == "assistant" and keys[i] is not None), None)


def counted_views(anchor: Anchor | None, keys: Sequence[str | None],
                  roles: Sequence[str]) -> set[int]:
    """The views whose own count :func:`calibrate` reads: the ones the last window sent, the
    response, and system messages (of every other view it reads only the sum)."""
    if anchor is None:
        return set()
    sent = {s.key for s in anchor.sent if s.key is not None}
    wanted = {i for i, (key, role) in enumerate(zip(keys, roles, strict=True))
              if role == "system" or key in sent}
    places = _places(anchor, keys)
    if places is None:
        return wanted
    response = _response(places, keys, roles)
    return wanted | ({response} if response is not None else set())


def calibrate(
    anchor: Anchor | None,
    keys: Sequence[str | None],
    tokens: Sequence[float],
    roles: Sequence[str],
    interrupted: Sequence[bool],
    resident: float,
    usage: Any,
    uncounted: Collection[int] = (),
) -> Calibration | None:
    """The provider-backed estimate of the current request, or None (heuristics then apply).

    ``uncounted``: views whose figure in ``tokens`` is a lower bound, not a count (the module
    docstring says why the result's correction stays the same; ``exact`` is false when it may
    not)."""
    total = usage_total(usage)
    if anchor is None or total is None:
        return None
    places = _places(anchor, keys)
    if places is None:
        return None
    response = _response(places, keys, roles)
    if response is None or interrupted[response]:
        return None
    sent_tokens = sum(s.tokens for s in anchor.sent)
    estimate = total + sum(tokens) - sent_tokens - tokens[response] + resident - anchor.resident
    if not estimate == estimate or estimate in (float("inf"), float("-inf")):  # NaN / inf
        return None
    exact = estimate >= 0 and _whole(total, sent_tokens, resident, anchor.resident, estimate)
    if exact and uncounted:
        sent = {s.key for s in anchor.sent if s.key is not None}
        exact = not any(keys[i] in sent or i == response or roles[i] == "system"
                        for i in uncounted)
    estimate = max(0.0, estimate)

    persistent = sum(s.tokens for s in anchor.sent if s.key is not None)
    scalable = persistent + tokens[response]
    surplus = total - anchor.resident - sent_tokens - tokens[response]
    if surplus <= 0 or anchor.resident + scalable <= 0:
        return Calibration(estimate, None, anchor.overhead, exact)
    if anchor.overhead > 0:
        overhead = min(anchor.overhead, surplus)
    else:
        overhead = surplus * anchor.resident / (anchor.resident + scalable)
    scale = 1.0 if scalable == 0 else 1.0 + (surplus - overhead) / scalable
    weights = list(tokens)
    matched = {s.key for s in anchor.sent if s.key is not None}
    for i, key in enumerate(keys):
        if key in matched or i == response:
            weights[i] = tokens[i] * scale
    return Calibration(estimate, TokenEstimates(resident + overhead, tuple(weights)), overhead,
                       exact)


def _whole(*values: float) -> bool:
    """Whether every value is a whole number that sums without rounding."""
    return all(float(v).is_integer() and abs(v) < _EXACT for v in values)
