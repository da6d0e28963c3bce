"""Prefix, cache-cost and baseline arithmetic for ``context-paging replay`` (pure, no I/O).

A replay turns a recorded session into a sequence of model requests and sends each through three
*strategies*: the full history (no management), a compaction baseline, and the window
``select_context`` returns. Every strategy yields, per request, the tokens sent and the tokens
that are an exact prefix of the *previous request of the same strategy*. Everything else here is
arithmetic over those two numbers:

* **Cost under prompt caching.** The shared prefix is read from the provider's cache, the rest
  is written to it (the provider caches the whole request for the next one). Prices are per
  token, relative to an uncached input token: defaults 1.0 uncached, 1.25 cache write, 0.1 cache
  read (Anthropic's 5-minute cache). The uncached price gives the cost with no cache at all.
* **Cache breaks.** A request *breaks* the cache when it does not start with the whole previous
  request: the part of the previous request it does not reuse is written again. Breaks are
  counted by cause (the caller names the cause).
* **The compaction baseline** (what agents do without paging): the full history until a request
  would exceed a threshold, then one summarisation call over the context so far, after which the
  context is a fixed-size summary plus the newest messages; it grows again from there and is
  compacted again at the threshold. The summarisation call is a request too (it sends the whole
  context to the model), so it is counted, marked ``summary``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Prices:
    """Input price per token, relative to an uncached token."""

    uncached: float = 1.0
    cache_write: float = 1.25
    cache_read: float = 0.1


@dataclass(frozen=True, slots=True)
class Sent:
    """One request of one strategy: tokens sent, tokens shared with the strategy's previous
    request as an exact prefix, and why it broke the cache (``None`` when it did not)."""

    tokens: float
    prefix: float
    rewritten: float = 0.0  # tokens of the previous request it did not reuse
    cause: str | None = None
    summary: bool = False  # a compaction's summarisation call, not an agent request

    def cost(self, prices: Prices) -> float:
        return self.prefix * prices.cache_read + (self.tokens - self.prefix) * prices.cache_write


def sent_after(previous: Sent | None, tokens: float, prefix: float,
               cause: str | None = None, summary: bool = False) -> Sent:
    """A request given the one before it: a break when the previous request is not reused whole
    (then ``cause`` says why; a break without a cause is ``other``)."""
    if previous is None:
        return Sent(tokens, 0.0, summary=summary)
    rewritten = max(0.0, previous.tokens - prefix)
    if rewritten <= 0:
        return Sent(tokens, prefix, summary=summary)
    return Sent(tokens, prefix, rewritten, cause or "other", summary)


@dataclass(frozen=True)
class Totals:
    """One strategy over a whole replay."""

    requests: int
    peak: float
    cumulative: float
    prefix: float
    cost: float
    uncached_cost: float
    breaks: dict[str, int] = field(default_factory=dict)
    rewritten: dict[str, float] = field(default_factory=dict)

    @property
    def prefix_share(self) -> float:
        """Share of all tokens sent that repeat the previous request exactly (token-weighted)."""
        return self.prefix / self.cumulative if self.cumulative else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "peak_tokens": self.peak,
                "cumulative_tokens": self.cumulative, "prefix_tokens": self.prefix,
                "prefix_share": self.prefix_share, "cost": self.cost,
                "uncached_cost": self.uncached_cost, "breaks": dict(self.breaks),
                "rewritten_tokens": dict(self.rewritten)}


def totals(sent: Sequence[Sent], prices: Prices) -> Totals:
    breaks: Counter[str] = Counter()
    rewritten: Counter[str] = Counter()
    for s in sent:
        if s.cause:
            breaks[s.cause] += 1
            rewritten[s.cause] += s.rewritten
    return Totals(
        requests=len(sent),
        peak=max((s.tokens for s in sent), default=0.0),
        cumulative=sum(s.tokens for s in sent),
        prefix=sum(s.prefix for s in sent),
        cost=sum(s.cost(prices) for s in sent),
        uncached_cost=sum(s.tokens for s in sent) * prices.uncached,
        breaks=dict(breaks), rewritten=dict(rewritten),
    )


def full_history(estimates: Sequence[float], requests: Sequence[int]) -> list[Sent]:
    """No management: request ``k`` sends messages ``[0, k)``; each request extends the last."""
    out: list[Sent] = []
    total, done = 0.0, 0
    for end in requests:
        total += sum(estimates[done:end])
        done = end
        out.append(sent_after(out[-1] if out else None, total, out[-1].tokens if out else 0.0))
    return out


@dataclass(frozen=True, slots=True)
class Compaction:
    """The baseline's settings. Defaults follow Claude Code: a 200k window compacted when
    a request would pass 167k (a 33k auto-compact buffer), a summary of a few thousand tokens
    (the two real Claude Code summaries in this project's fixtures hold 11.3k and 14.3k
    characters, about 2.8k–3.6k tokens), and no earlier messages kept verbatim beyond the
    current exchange (``keep_tokens`` adds newer messages up to that many tokens)."""

    threshold: float = 167_000
    summary_tokens: float = 3_500
    keep_tokens: float = 0


def compaction(estimates: Sequence[float], requests: Sequence[int],
               can_start: Callable[[int], bool], settings: Compaction) -> list[Sent]:
    """The compaction baseline for requests ending at ``requests`` (message counts).

    ``can_start(i)`` says whether message ``i`` may open the kept tail (a tail must not start
    with a tool result whose call was summarised away). The kept tail is the shortest valid one
    ending the request, extended backwards while it stays within ``keep_tokens``.
    """
    out: list[Sent] = []
    start = 0  # first message sent verbatim
    summary = 0.0  # tokens of the summary in front (0 before the first compaction)
    context = 0.0  # tokens of summary + messages[start:done]
    done = 0
    for end in requests:
        context += sum(estimates[done:end])
        done = end
        previous = out[-1] if out else None
        if context > settings.threshold and end > 0:
            # The summarisation call sends the context as it stands (the previous request plus
            # what is new), so it reuses the cache; the agent's request after it does not.
            out.append(sent_after(previous, context, previous.tokens if previous else 0.0,
                                  summary=True))
            start = _tail_start(estimates, start, end, can_start, settings.keep_tokens)
            summary = settings.summary_tokens
            context = summary + sum(estimates[start:end])
            out.append(sent_after(out[-1], context, 0.0, cause="compaction"))
            continue
        out.append(sent_after(previous, context, previous.tokens if previous else 0.0))
    return out


def _tail_start(estimates: Sequence[float], lo: int, end: int, can_start: Callable[[int], bool],
                keep: float) -> int:
    first = next((i for i in range(end - 1, lo - 1, -1) if can_start(i)), lo)
    size = sum(estimates[first:end])
    best = first
    for i in range(first - 1, lo - 1, -1):
        size += estimates[i]
        if size > keep:
            break
        if can_start(i):
            best = i
    return best
