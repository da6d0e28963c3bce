"""What an edit of already-sent messages costs under prompt caching (pure, no I/O).

Providers cache a request's prefix: the next request that starts with the same bytes reads them
at a discount, and whatever follows the first changed byte is processed (and cached) again at
the write price. So replacing an old tool output that the model has already seen (distillation)
is not free: an edit at position ``p`` re-writes every token after ``p``. It pays when what it
saves, read from the cache on every later request until the prefix is re-written anyway (the
cut advances), is more than that re-write:

    rewrite_tokens × (write − read)  <  saved_tokens × read × horizon

Prices are per input token relative to an uncached one, per provider (docs/distillation.md, "Under
prompt caching"). The tables below are the published list-price ratios, rounded:

* ``anthropic`` (5-minute cache, the default ``cache_control``): write 1.25, read 0.1;
* ``anthropic-1h`` (the 1-hour cache): write 2.0, read 0.1;
* ``openai`` / ``openai-codex`` (automatic caching, no write surcharge; the GPT-5 family reads
  cached input at 0.1): write 1.0, read 0.1;
* ``none`` (no cache: every request is paid in full): write = read = 1.0, so an edit never
  costs a re-write and pays as soon as it saves anything.

A host that names no provider is priced as Anthropic's 5-minute cache, the dearest re-write of
the common ones: holding an edit back costs little when the guess is wrong, re-writing a cached
prefix for nothing costs a lot. When the host's ``usage`` reports (for at least two responses)
neither cache reads nor cache writes, the cache is off whatever the provider, and ``none`` is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CachePrices:
    write: float
    read: float

    @property
    def rewrite(self) -> float:
        """What one token costs extra when it is written again instead of read from the cache."""
        return max(0.0, self.write - self.read)


PRICES: dict[str, CachePrices] = {
    "anthropic": CachePrices(1.25, 0.1),
    "anthropic-1h": CachePrices(2.0, 0.1),
    "openai": CachePrices(1.0, 0.1),
    "openai-codex": CachePrices(1.0, 0.1),
    "none": CachePrices(1.0, 1.0),
}
DEFAULT = "anthropic"
# Providers that serve Anthropic or OpenAI models under another name, priced as those.
ALIASES = {"claude": "anthropic", "bedrock": "anthropic", "vertex": "anthropic",
           "azure": "openai", "azure-openai": "openai"}


def prices_for(provider: str | None, usage: Iterable[Sequence[float]] = ()) -> CachePrices:
    """The cache prices for ``provider`` (the ``provider`` of ``provider/id``), or ``none`` when
    the host's usage (``[cache_read, cache_write]`` per response) shows no caching at all."""
    seen = list(usage)
    if len(seen) >= 2 and all(not (u[0] or u[1]) for u in seen):
        return PRICES["none"]
    name = (provider or DEFAULT).lower()
    return PRICES.get(ALIASES.get(name, name), PRICES[DEFAULT])


def horizon(requests_so_far: int, room: float, growth: float) -> float:
    """How many later requests will read an edit's savings before the prefix is re-written
    anyway: until the window grows into its budget (``room`` tokens left at ``growth`` per
    request, when known), and no more than the session has run so far (a session that ran
    ``n`` requests is as likely to end before as after ``n`` more)."""
    lindy = float(max(1, requests_so_far))
    if growth > 0:
        return max(0.0, min(lindy, room / growth))
    return lindy


def pays(rewrite_tokens: float, saved_tokens: float, later_requests: float,
         prices: CachePrices) -> bool:
    """Does re-writing ``rewrite_tokens`` cached tokens now cost less than reading
    ``saved_tokens`` fewer on each of ``later_requests`` requests?"""
    if saved_tokens <= 0:
        return False
    return rewrite_tokens * prices.rewrite < saved_tokens * prices.read * later_requests


def common_keys(previous: Sequence[object], current: Sequence[object]) -> int:
    """How many leading entries two requests share (the cached prefix, in messages)."""
    n = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        n += 1
    return n
