"""Answering the offered recovery tools in band: one agent request, several provider round trips,
one reply (docs/proxy.md, "Recovery in band"; the offer and the records are
server/proxy/inband.py).

A reply that calls an offered tool is read as it comes. Everything else in it reaches the agent
at once (streamed: text written before the call arrives before the continuation); the offered
calls do not. At the reply's end the proxy runs the calls against the conversation's ledger and
sends the provider the same request plus the model's message and the results, and relays that
continuation as the rest of the same reply: one ``message_start``, block indexes that go on
counting, one final ``message_delta`` and ``message_stop``, with usage that adds up every round
trip (input, cache reads, cache writes, output). A JSON reply is merged the same way.

Bounded: at most ``rounds`` follow-ups per agent request. A reply that also calls the agent's
own tools, or calls offered ones past the bound, ends there: the agent gets its own calls, and
the offered calls' results (or, past the bound, a result that says so) wait in the record for
the agent's next request. A follow-up the provider refuses reaches the agent as that error (an
``error`` event in a stream, the provider's status and body otherwise).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import httpx2 as httpx
from context_paging.server.proxy import wire
from context_paging.server.proxy.inband import OFFERED, Hidden, InBand, Ran, Round, run_call

log = logging.getLogger("context_paging")

USAGE_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
              "output_tokens")
# The encodings whose replies the proxy can read (httpx decodes them); any other is relayed
# untouched, its offered calls unanswered.
READABLE = frozenset({"", "identity", "gzip", "deflate"})


@dataclass
class Turn:
    """One agent request being answered: where its reply's hidden exchange belongs."""

    inband: InBand
    session: str
    api: wire.Api
    body: bytes  # the request as sent upstream
    bracket: int  # where its conversation array's ``]`` is
    at: int  # the index the assistant reply will have in the agent's conversation
    anchor: str  # the digest of the message before it
    agent_tools: set[str] = field(default_factory=set)
    rounds: list[Round] = field(default_factory=list)
    calls: list[tuple[str, bool]] = field(default_factory=list)  # (tool, returned something)

    def follow_up(self) -> bytes:
        """The same request with every hidden round so far appended to its conversation."""
        added = b"".join(b"," + wire.dumps(m).encode() for r in self.rounds
                         for m in (r.assistant, {"role": "user", "content": r.results}))
        return self.body[:self.bracket] + added + self.body[self.bracket:]

    def offered(self, block: Any) -> bool:
        return (isinstance(block, dict) and block.get("type") == "tool_use"
                and block.get("name") in OFFERED and block.get("name") not in self.agent_tools)

    def record(self, merged: bool) -> Hidden:
        return Hidden(self.at, self.anchor, tuple(self.rounds), merged)


Send = Callable[[bytes], Awaitable[httpx.Response]]


async def results(turn: Turn, calls: list[dict[str, Any]], past_bound: bool) -> list[dict]:
    """The tool_result blocks for the offered calls (run in a worker thread)."""
    out = []
    for call in calls:
        name = call.get("name", "")
        if past_bound:
            ran = Ran(f"NOT_RUN: at most {turn.inband.rounds} recovery round trips per reply; "
                      "call it again in your next reply", True)
        else:
            ran = await anyio.to_thread.run_sync(run_call, turn.inband.history, turn.session,
                                                 name, call.get("input"))
        turn.calls.append((name, ran.found))
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.get("id", ""),
                                 "content": ran.text}
        if ran.error:
            block["is_error"] = True
        out.append(block)
    return out


async def remember(turn: Turn, merged: bool) -> None:
    if turn.rounds:
        try:
            await anyio.to_thread.run_sync(turn.inband.remember, turn.session,
                                           turn.record(merged))
        except OSError as exc:  # the answer still reaches the agent
            log.warning("proxy: in-band exchange of %s not stored: %s", turn.session, exc)


def _usage(total: dict[str, int], usage: Any) -> None:
    for key in USAGE_KEYS:
        value = usage.get(key) if isinstance(usage, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def _error_body(status: int, raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if isinstance(value, dict) and value.get("type") == "error":
        return value
    return {"type": "error", "error": {"type": "api_error", "message": (
        f"context-paging proxy: the provider answered the recovery follow-up with {status}: "
        + raw[:500].decode("utf-8", "replace"))}}


# --- a JSON reply ------------------------------------------------------------------------------


async def answer_json(turn: Turn, first: bytes, send: Send
                      ) -> tuple[int, bytes, dict[str, int] | None]:
    """The agent's reply (status, body) for a JSON reply, and the last round's usage."""
    try:
        message = json.loads(first)
    except ValueError:
        return 200, first, None
    if not isinstance(message, dict):
        return 200, first, None
    if not any(turn.offered(b) for b in message.get("content") or ()):
        return 200, first, message.get("usage")
    content: list[Any] = []
    total: dict[str, int] = {}
    while True:
        blocks = message.get("content") or []
        _usage(total, message.get("usage"))
        calls = [b for b in blocks if turn.offered(b)]
        kept = [b for b in blocks if not turn.offered(b)]
        content += kept
        if not calls:
            break
        mixed = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in kept)
        past = len(turn.rounds) >= turn.inband.rounds
        answered = await results(turn, calls, past)
        turn.rounds.append(Round({"role": "assistant", "content": blocks}, answered, len(kept)))
        if mixed or past:
            await remember(turn, True)
            return 200, _merged(message, content, total, "tool_use" if mixed else "end_turn"), \
                message.get("usage")
        reply = await send(turn.follow_up())
        raw = await reply.aread()
        await reply.aclose()
        if reply.status_code != 200:
            await remember(turn, False)  # what the model saw so far stays in place
            return reply.status_code, wire.dumps(_error_body(reply.status_code, raw)).encode(), None
        try:
            message = json.loads(raw)
        except ValueError:
            message = {}
    await remember(turn, False)
    return 200, _merged(message, content, total, message.get("stop_reason")), \
        message.get("usage")


def _merged(last: dict[str, Any], content: list[Any], total: dict[str, int],
            stop: Any) -> bytes:
    first_usage = dict(last.get("usage") or {})
    first_usage.update(total)
    return wire.dumps({**last, "content": content, "stop_reason": stop,
                       "usage": first_usage}).encode()


# --- a streamed reply --------------------------------------------------------------------------


@dataclass
class _Stream:
    """The merge of the rounds' event streams into the one the agent reads."""

    turn: Turn
    next_index: int = 0
    total: dict[str, int] = field(default_factory=dict)
    delta: dict[str, Any] | None = None  # the latest round's message_delta, held to the end
    held: bytes = b""  # its bytes and message_stop's, as received
    usage: dict[str, int] | None = None  # the latest round's usage (calibration)


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {wire.dumps(data)}\n\n".encode()


def _events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Whole SSE events in ``buffer`` (each with its blank line), and what follows them."""
    buffer = buffer.replace(b"\r\n", b"\n")
    parts = buffer.split(b"\n\n")
    rest = parts.pop()
    return [p + b"\n\n" for p in parts if p.strip()], rest


def _data(event: bytes) -> Any:
    lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
    try:
        return json.loads(b"\n".join(lines)) if lines else None
    except ValueError:
        return None


async def answer_stream(turn: Turn, first: AsyncIterator[bytes], send: Send,
                        on_usage: Callable[[dict[str, int]], None]) -> AsyncIterator[bytes]:
    """The agent's event stream: the first reply's events and each continuation's, merged."""
    state = _Stream(turn)
    chunks = first
    first_round = True
    while True:
        blocks: dict[int, dict[str, Any]] = {}  # upstream index -> the block as rebuilt
        partial: dict[int, str] = {}
        shown: dict[int, int] = {}  # upstream index -> the agent's index
        round_usage: dict[str, int] = {}
        ended = False
        buffer = b""
        async for chunk in chunks:
            events, buffer = _events(buffer + chunk)
            for raw in events:
                out = _step(state, raw, blocks, partial, shown, round_usage, first_round)
                if out is _ERROR:
                    yield raw
                    return
                if out is _END:
                    ended = True
                elif out:
                    yield out
        if buffer.strip():  # a last event without its blank line
            out = _step(state, buffer + b"\n\n", blocks, partial, shown, round_usage,
                        first_round)
            ended = ended or out is _END
            if out not in (_END, _ERROR, b""):
                yield out
        _usage(state.total, round_usage)
        state.usage = {k: v for k, v in round_usage.items()}
        ordered = [blocks[i] for i in sorted(blocks)]
        for index, text in partial.items():
            try:
                blocks[index]["input"] = json.loads(text) if text.strip() else {}
            except ValueError:
                blocks[index]["input"] = {}
        calls = [b for b in ordered if turn.offered(b)]
        kept = [b for b in ordered if not turn.offered(b)]
        stop = (state.delta or {}).get("delta", {}).get("stop_reason")
        if not calls or not ended:
            await remember(turn, False)
            yield _final(state, stop) if turn.rounds or not ended else state.held
            _report(state, on_usage)
            return
        mixed = any(b.get("type") == "tool_use" for b in kept)
        past = len(turn.rounds) >= turn.inband.rounds
        answered = await results(turn, calls, past)
        turn.rounds.append(Round({"role": "assistant", "content": ordered}, answered, len(kept)))
        if mixed or past:
            await remember(turn, True)
            yield _final(state, "tool_use" if mixed else "end_turn")
            _report(state, on_usage)
            return
        try:
            reply = await send(turn.follow_up())
        except httpx.HTTPError as exc:
            await remember(turn, False)
            yield _event("error", {"type": "error", "error": {
                "type": "api_error", "message": "context-paging proxy: the recovery follow-up "
                f"did not reach the provider: {type(exc).__name__}"}})
            return
        if reply.status_code != 200:
            raw = await reply.aread()
            await reply.aclose()
            await remember(turn, False)
            yield _event("error", _error_body(reply.status_code, raw))
            return
        chunks = _closing(reply)
        first_round = False


async def _closing(reply: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in reply.aiter_bytes():
            yield chunk
    finally:
        await reply.aclose()


def calibration(usage: Any) -> dict[str, int]:
    """The provider's usage of the last round trip as select_context's usage fields (the next
    request holds that round's whole input)."""
    usage = usage if isinstance(usage, dict) else {}
    return {"input_tokens": usage.get("input_tokens", 0),
            "cache_read_tokens": usage.get("cache_read_input_tokens") or 0,
            "cache_write_tokens": usage.get("cache_creation_input_tokens") or 0,
            "output_tokens": usage.get("output_tokens", 0)}


def _report(state: _Stream, on_usage: Callable[[dict[str, int]], None]) -> None:
    if state.usage:
        on_usage(calibration(state.usage))


_END = object()
_ERROR = object()


def _step(state: _Stream, raw: bytes, blocks: dict[int, dict[str, Any]],
          partial: dict[int, str], shown: dict[int, int], usage: dict[str, int],
          first_round: bool) -> Any:
    """One upstream event: the bytes to pass on (b"" for none), or _END / _ERROR."""
    data = _data(raw)
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "error":
        return _ERROR
    if kind == "message_start":
        message = data.get("message") or {}
        usage.update({k: v for k, v in (message.get("usage") or {}).items() if k in USAGE_KEYS})
        return raw if first_round else b""
    if kind == "message_delta":
        usage.update({k: v for k, v in (data.get("usage") or {}).items() if k in USAGE_KEYS})
        state.delta = data
        state.held = raw
        return b""
    if kind == "message_stop":
        state.held += raw
        return _END
    if kind not in ("content_block_start", "content_block_delta", "content_block_stop"):
        return raw  # ping, and any event added later
    index = data.get("index")
    if not isinstance(index, int):
        return raw
    if kind == "content_block_start":
        block = dict(data.get("content_block") or {})
        blocks[index] = block
        if state.turn.offered(block):
            return b""
        shown[index] = state.next_index
        state.next_index += 1
    elif kind == "content_block_delta":
        _grow(blocks.get(index), partial, index, data.get("delta") or {})
    if index not in shown:
        return b""
    if shown[index] == index:
        return raw
    return _event(kind, {**data, "index": shown[index]})


def _grow(block: dict[str, Any] | None, partial: dict[int, str], index: int,
          delta: dict[str, Any]) -> None:
    """A block rebuilt from its deltas (the model's message as the follow-up sends it)."""
    if block is None:
        return
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta.get("text", "")
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
    elif kind == "signature_delta":
        block["signature"] = delta.get("signature", "")
    elif kind == "input_json_delta":
        partial[index] = partial.get(index, "") + delta.get("partial_json", "")
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))


def _final(state: _Stream, stop: Any) -> bytes:
    delta = dict(state.delta or {"type": "message_delta", "delta": {}})
    delta["delta"] = {**(delta.get("delta") or {}), "stop_reason": stop}
    delta["usage"] = {**(delta.get("usage") or {}), **state.total}
    return _event("message_delta", delta) + _event("message_stop", {"type": "message_stop"})
