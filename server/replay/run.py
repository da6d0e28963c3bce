"""``context-paging replay``: a recorded session's requests sent again through ``select_context``.

A session file records every model response. The request behind response ``k`` was the whole
conversation before it; the replay rebuilds exactly that — the full active path up to the
response, with the agent's own compactions ignored (the readers keep the messages a compaction
summarised) — as **Pi-shaped messages** (``user``/``custom``/``assistant``/``toolResult``, the
format ``select_context`` reads natively; Claude Code and Codex sessions are converted into it).
Thinking and other hidden blocks are left out: the recovery model never carries their text, and
providers drop old thinking from requests anyway. System prompts and tool definitions are not in
the session files, so none of the three strategies counts them (they would add the same cached
prefix to each).

Each request goes through :meth:`index.service.History.select_context` — the library function
the MCP tool calls, with its ledger, cut state, distillation and estimator — in a throwaway home,
one ``History`` for the whole replay (as a host's server process would be). The three
strategies are measured with the same estimator ``select_context`` uses, per message, so their
figures compare: the full history, the compaction baseline (``paging.replay_cost``), and the
window. Recoverability then asks ``search_history`` on the ledger for distinctive identifiers
and paths from tool outputs whose text left the window.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from context_paging.index.history import block_text
from context_paging.index.model import HiddenBlock, ImageBlock, Message, TextBlock, ToolCall
from context_paging.index.service import History
from context_paging.index.sessions import load
from context_paging.index.window.pipeline import ContextSettings
from context_paging.paging.distill import DistillConfig
from context_paging.paging.estimate import chars4_tokens
from context_paging.paging.replay_cost import (
    Compaction,
    Prices,
    Sent,
    compaction,
    full_history,
    sent_after,
    totals,
)
from context_paging.paging.request import common_start
from context_paging.paging.tokens import counted_tokens

LEDGER = "replay"
STRATEGIES = ("full", "compaction", "window")
# Identifier-like words of tool output: a path, a dotted/snake/kebab name or letters mixed with
# digits, 8+ characters. Plain words and bare numbers are not distinctive enough to look up.
_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./:-]*[A-Za-z0-9_]")
_HEX = re.compile(r"[0-9a-f]{8,}")


@dataclass(frozen=True)
class ReplayOptions:
    budget: int = 128_000
    trim_to: int | None = None
    first_cut: float | None = ContextSettings.first_cut  # fraction of the budget; 1.0: target
    estimator: str = "tiktoken"
    distill: bool = True
    model_window: int = 200_000
    # "provider/id" as a host would pass it: sets the cache prices distillation's edits are
    # weighed with (paging.cache_cost); None prices them as Anthropic's 5-minute cache.
    model: str | None = None
    compaction: Compaction = Compaction()
    prices: Prices = Prices()
    recover_sample: int = 100  # identifiers looked up per session (evenly spread)
    max_items_per_identifier: int = 3  # "distinctive": held by at most this many history items


@dataclass
class RequestRow:
    """One request of the session, as each strategy sent it."""

    index: int  # 0-based request number
    messages: int  # messages in the full request
    full: Sent
    compaction: Sent
    window: Sent
    mode: str
    cut_advanced: bool
    distilled: int  # outputs / exchanges the window carries shortened
    compacted: bool  # the compaction baseline summarised before this request
    distilled_saved: float = 0.0  # tokens those save in this request (as the server counts)


@dataclass
class Replay:
    session: str
    options: ReplayOptions
    rows: list[RequestRow]
    sent: dict[str, list[Sent]]  # per strategy, every request (compaction: summary calls too)
    distillation: dict[str, Any]
    recoverability: dict[str, Any]
    seconds: float  # wall time
    cpu_seconds: float  # this process's CPU time (what the replay costs on an idle machine)
    refused: list[tuple[int, str]] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        return {name: totals(self.sent[name], self.options.prices) for name in STRATEGIES}

    def cut_advances(self) -> int:
        return sum(r.cut_advanced for r in self.rows)

    def never_paged(self) -> bool:
        """No request passed the budget: the window sent every request whole."""
        return bool(self.rows) and all(r.mode == "within_budget" for r in self.rows)

    def suggested_budget(self) -> int | None:
        """When the session never paged: a budget at which it would, about half its largest
        request, rounded down to a thousand tokens (at least 1,000). None otherwise."""
        if not self.never_paged():
            return None
        peak = max(r.full.tokens for r in self.rows)
        return max(1_000, int(peak / 2 // 1_000 * 1_000)) if peak > 2_000 else None

    def budget_note(self) -> str | None:
        """What to say when the session never passed the budget (a flat line otherwise)."""
        if not self.never_paged():
            return None
        peak = max(r.full.tokens for r in self.rows)
        note = (f"This session never passed the {self.options.budget:,}-token budget (its "
                f"largest request is {peak:,.0f} tokens), so the window sent every request "
                "whole: nothing was paged, and the figures equal the full history's.")
        budget = self.suggested_budget()
        if budget is not None:
            note += f" To see the window page it, replay it with --budget {budget}."
        return note

    def distillation_breaks(self) -> list[dict[str, Any]]:
        """Every cache break caused by distillation alone, with its price and what it bought:
        the price is the re-written tokens at (cache write − cache read); the value is the
        tokens the request newly saves, read at the cache-read price on every later request
        until the cut advances (when the prefix is re-written anyway) or the session ends.
        ``pays`` says whether the value covered the price in hindsight."""
        prices = self.options.prices
        out = []
        for n, r in enumerate(self.rows):
            if r.window.cause != "distillation":
                continue
            saved = r.distilled_saved - (self.rows[n - 1].distilled_saved if n else 0.0)
            later = 0
            for after in self.rows[n + 1:]:
                if after.cut_advanced:
                    break
                later += 1
            price = r.window.rewritten * (prices.cache_write - prices.cache_read)
            value = max(0.0, saved) * prices.cache_read * later
            out.append({"request": r.index, "rewritten_tokens": r.window.rewritten,
                        "saved_tokens": saved, "later_requests": later, "price": price,
                        "value": value, "pays": value >= price})
        return out

    def as_dict(self) -> dict[str, Any]:
        t = self.totals()
        window = t["window"]
        return {
            "session": self.session,
            "options": {"budget": self.options.budget, "trim_to": self.options.trim_to,
                        "estimator": self.options.estimator, "distill": self.options.distill,
                        "model_window": self.options.model_window, "model": self.options.model,
                        "compaction": vars_of(self.options.compaction),
                        "prices": vars_of(self.options.prices), "format": "pi"},
            "requests": [{
                "index": r.index, "messages": r.messages, "mode": r.mode,
                "cut_advanced": r.cut_advanced, "distilled": r.distilled,
                "compacted": r.compacted,
                **{f"{name}_tokens": getattr(r, name).tokens for name in STRATEGIES},
                **{f"{name}_prefix": getattr(r, name).prefix for name in STRATEGIES},
                "window_break": r.window.cause, "window_rewritten": r.window.rewritten,
            } for r in self.rows],
            "totals": {name: value.as_dict() for name, value in t.items()},
            "cut_advances": self.cut_advances(),
            "never_paged": self.never_paged(), "suggested_budget": self.suggested_budget(),
            "distillation_breaks": self.distillation_breaks(),
            "ratios": {
                "cumulative_vs_full": _ratio(window.cumulative, t["full"].cumulative),
                "cumulative_vs_compaction": _ratio(window.cumulative, t["compaction"].cumulative),
                "cost_vs_full": _ratio(window.cost, t["full"].cost),
                "cost_vs_compaction": _ratio(window.cost, t["compaction"].cost),
            },
            "distillation": self.distillation,
            "recoverability": self.recoverability,
            "refused": [{"request": i, "error": e} for i, e in self.refused],
            "seconds": self.seconds, "cpu_seconds": self.cpu_seconds,
        }


def vars_of(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


# --- the session as requests ------------------------------------------------------------------


def pi_shaped(message: Message) -> dict[str, Any]:
    """A history message as a Pi AgentMessage. Typed and steering user messages are requests;
    other user messages (slash commands, ``!`` shell runs, notifications) are ``custom``: the
    model read them, but they do not start a run."""
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            blocks.append({"type": "image", "data": block.data, "mimeType": block.mime})
        elif isinstance(block, ToolCall):
            blocks.append({"type": "toolCall", "id": block.id, "name": block.name,
                           "arguments": block.arguments})
        elif not isinstance(block, HiddenBlock):
            raise TypeError(f"unknown block {block!r}")
    if message.role == "assistant":
        stop = {"tool_use": "toolUse", "aborted": "aborted", "error": "error",
                "length": "length"}.get(message.stop_reason or "")
        return {"role": "assistant", "content": blocks,
                "stopReason": stop or ("toolUse" if message.tool_calls else "stop")}
    if message.role == "tool_result":
        return {"role": "toolResult", "toolCallId": message.tool_call_id,
                "toolName": message.tool_name, "content": blocks, "isError": message.is_error}
    if message.origin in ("typed", "steering"):
        return {"role": "user", "content": blocks}
    return {"role": "custom", "customType": message.origin, "content": blocks, "display": True}


def session_messages(path: str) -> tuple[list[Message | None], list[dict[str, Any]]]:
    """The session's active path, complete (the reader keeps what compactions summarised), as
    the requests carried it: every tool call followed by its result. A result the file does not
    hold (a response whose calls never got results, kept by the reader as a failed turn) is
    sent as an error result, as Pi's provider layer does; results without their call (orphans,
    duplicates) are left out. The first list holds the original message of each one sent
    (None for the inserted results)."""
    history: list[Message | None] = []
    shaped: list[dict[str, Any]] = []
    pending: list[str] = []  # calls of the latest assistant still waiting for a result

    def close_exchange() -> None:
        for call_id in pending:
            history.append(None)
            shaped.append({"role": "toolResult", "toolCallId": call_id, "toolName": "",
                           "content": [{"type": "text", "text": "No result provided"}],
                           "isError": True})
        pending.clear()

    for message in load(path).conversation.messages:
        if message.role == "tool_result":
            if message.tool_call_id not in pending:
                continue
            pending.remove(message.tool_call_id)
        else:
            close_exchange()
            if message.role == "assistant":
                pending.extend(dict.fromkeys(c.id for c in message.tool_calls))
        history.append(message)
        shaped.append(pi_shaped(message))
    close_exchange()
    return history, shaped


def request_ends(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Message counts of the requests: one request before every assistant response."""
    return [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]


def estimator(name: str) -> Callable[[dict[str, Any]], float]:
    """The per-message estimate ``select_context`` uses under the same setting."""
    if name == "chars4":
        return chars4_tokens
    from context_paging.server.tokens import text_counter

    count = text_counter()
    if count is None:
        return chars4_tokens
    return lambda message: counted_tokens(message, count)


# --- the replay -------------------------------------------------------------------------------


Progress = Callable[[float, float | None, str], None]  # done, total (None: unknown), message


def _silent(done: float, total: float | None, message: str) -> None:
    pass


def replay(path: str, options: ReplayOptions = ReplayOptions(),
           progress: Progress = _silent) -> Replay:
    started, cpu = time.perf_counter(), time.process_time()
    progress(0, None, "reading the session file")
    history_messages, messages = session_messages(path)
    ends = request_ends(messages)
    progress(0, None, f"counting the tokens of {len(messages):,} messages")
    estimate = estimator(options.estimator)
    estimates = [float(estimate(m)) for m in messages]
    by_identity = {id(m): e for m, e in zip(messages, estimates, strict=False)}
    full = full_history(estimates, ends)
    compacted_sent = compaction(estimates, ends, lambda i: messages[i]["role"] != "toolResult",
                                options.compaction)
    agent_requests = [s for s in compacted_sent if not s.summary]
    compacted_before = _compacted_flags(compacted_sent)

    settings = ContextSettings(
        token_budget=options.budget, trim_to_tokens=options.trim_to,
        first_cut=options.first_cut, estimator=options.estimator,
        distill=DistillConfig(enabled=options.distill))
    rows: list[RequestRow] = []
    window_sent: list[Sent] = []
    refused: list[tuple[int, str]] = []
    with tempfile.TemporaryDirectory(prefix="context-paging-replay-") as home:
        service = History({}, Path(home), settings, _counter_factory(options.estimator))
        try:
            last = _Window([], "", None, set())
            for n, end in enumerate(ends):
                progress(n, len(ends), "replaying requests through select_context")
                try:
                    reply = service.select_context(
                        LEDGER, messages[:end], fmt="pi", model=options.model,
                        model_window=options.model_window)
                    current = _Window.of(reply)
                except Exception as exc:  # a request the selector refuses is reported, not fatal
                    refused.append((n, f"{type(exc).__name__}: {exc}"))
                    current = _Window(messages[:end], "refused", None, set())  # sent whole
                sizes = [by_identity.get(id(m)) for m in current.messages]
                sizes = [s if s is not None else float(estimate(m))
                         for s, m in zip(sizes, current.messages, strict=False)]
                shared = common_start(last.messages, current.messages)
                advanced = current.frontier is not None and current.frontier != last.frontier
                cause = "cut" if advanced else (
                    "distillation" if current.distilled != last.distilled else None)
                sent = sent_after(window_sent[-1] if window_sent else None, sum(sizes),
                                  sum(sizes[:shared]), cause)
                window_sent.append(sent)
                rows.append(RequestRow(n, end, full[n], agent_requests[n], sent, current.mode,
                                       advanced, len(current.distilled), compacted_before[n],
                                       current.saved))
                last = current
            progress(len(ends), len(ends), "replaying requests through select_context")
            window = last.messages
            progress(0, None, "looking up identifiers that left the window")
            stats = service.stats(f"ledger:{LEDGER}") if ends else None
            recoverability = _recoverability(service, history_messages, messages, window,
                                             options) if ends else _no_lookups()
        finally:
            service.close()
    distillation = {} if stats is None else {
        "distilled_outputs": stats.distilled_outputs,
        "omitted_exchanges": stats.omitted_exchanges,
        "dropped_images": stats.dropped_images,
        "saved_characters": stats.distilled_saved_characters,
        "saved_tokens": stats.distilled_saved_tokens,
    }
    return Replay(path, options, rows,
                  {"full": full, "compaction": compacted_sent, "window": window_sent},
                  distillation, recoverability, time.perf_counter() - started,
                  time.process_time() - cpu, refused)


@dataclass(frozen=True)
class _Window:
    """What one request sent under select_context, as far as the replay compares requests."""

    messages: list[dict[str, Any]]
    mode: str
    frontier: Any  # the cut's frontier (None before the first cut)
    distilled: set[str]  # tool call / history ids the window carries shortened
    saved: float = 0.0  # tokens the window's distillation saves, as the server reports them

    @classmethod
    def of(cls, reply: dict[str, Any]) -> _Window:
        return cls(reply["messages"], reply["mode"], reply["frontier"],
                   {str(d.get("tool_call_id") or d.get("history_id")) for d in reply["distilled"]},
                   float(sum(d.get("saved_tokens") or 0 for d in reply["distilled"])))


def _counter_factory(name: str) -> Callable[[], Any]:
    def factory():
        if name != "tiktoken":
            return None
        from context_paging.server.tokens import text_counter

        return text_counter()

    return factory


def _compacted_flags(sent: Sequence[Sent]) -> list[bool]:
    """Per agent request: did a summarisation call come right before it."""
    flags: list[bool] = []
    pending = False
    for s in sent:
        if s.summary:
            pending = True
            continue
        flags.append(pending)
        pending = False
    return flags


# --- recoverability ---------------------------------------------------------------------------


def distinctive(text: str) -> set[str]:
    """Identifier-like words: paths and names (8+ characters, with a separator, a digit next to
    letters, or an inner capital). Long hex runs (hashes, ids) count too."""
    out = set()
    for word in _WORD.findall(text):
        if len(word) < 8 or len(word) > 120:
            continue
        letters = any(c.isalpha() for c in word)
        if not letters:
            continue
        if (any(c in word for c in "/._-:") or any(c.isdigit() for c in word)
                or any(a.islower() and b.isupper() for a, b in zip(word, word[1:], strict=False))):
            out.add(word)
    return out


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, dict):
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") == "toolCall":
                parts.append(f"{block.get('name')} {block.get('arguments')}")
    return "\n".join(parts)


def _no_lookups() -> dict[str, Any]:
    return {"identifiers": 0, "found": 0, "share": None, "outputs_left": 0, "misses": []}


def _recoverability(service: History, history: Sequence[Message],
                    messages: Sequence[dict[str, Any]], window: Sequence[dict[str, Any]],
                    options: ReplayOptions) -> dict[str, Any]:
    """For tool outputs the last window no longer carries verbatim, take the identifiers and
    paths that appear nowhere in that window and in at most a few history items, and check that
    ``search_history`` on the ledger ranks an item holding each one in its top 3."""
    shown = {id(m) for m in window}
    window_words = set()
    for m in window:
        window_words |= distinctive(_message_text(m))
    _, _, items, _ = service.ledger.open(f"ledger:{LEDGER}")
    item_words: dict[str, set[str]] = {}
    holders: dict[str, int] = {}
    for item in items:
        text = " ".join(block_text(b) for m in (item.message, *item.tool_results)
                        for b in m.content)
        words = distinctive(text)
        item_words[item.history_id] = words
        for w in words:
            holders[w] = holders.get(w, 0) + 1
    candidates: list[str] = []
    seen: set[str] = set()
    left = 0
    last = request_ends(messages)[-1]
    for original, message in zip(history[:last], messages[:last], strict=False):
        if original is None or message["role"] != "toolResult" or id(message) in shown:
            continue
        left += 1
        words = distinctive(" ".join(block_text(b) for b in original.content))
        for word in sorted(words - window_words - seen):
            if 0 < holders.get(word, 0) <= options.max_items_per_identifier:
                candidates.append(word)
                seen.add(word)
    step = max(1, len(candidates) / options.recover_sample) if candidates else 1
    picked = [candidates[int(i * step)] for i in range(min(len(candidates),
                                                          options.recover_sample))]
    found = 0
    misses = []
    for word in picked:
        reply = service.search(word, session=f"ledger:{LEDGER}", limit=3)
        if any(word in item_words.get(r["history_id"], ()) for r in reply.references[:3]):
            found += 1
        else:
            misses.append(word)
    return {"identifiers": len(picked), "found": found,
            "share": found / len(picked) if picked else None, "outputs_left": left,
            "candidates": len(candidates), "misses": misses[:20]}
