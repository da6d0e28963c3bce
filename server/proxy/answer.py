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
from context_paging.paging.resident import RESPONSES_CALLS
from context_paging.server.proxy import wire
from context_paging.server.proxy.inband import OFFERED, Hidden, InBand, Ran, Round, run_call

log = logging.getLogger("context_paging")

USAGE_FIELD = {"gemini": "usageMetadata"}  # where a reply holds its usage; else ``usage``
USAGE_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
              "output_tokens")
# The encodings whose replies the proxy can read (httpx decodes them); any other is relayed
# untouched, its offered calls unanswered.
READABLE = frozenset({"", "identity", "gzip", "deflate"})


def readable(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request's headers with ``Accept-Encoding`` narrowed to the encodings the proxy can
    read, so a reply it may have to answer in band never comes in one it cannot (brotli,
    zstd)."""
    out = []
    for key, value in headers:
        if key.lower() == b"accept-encoding":
            kept = [part.strip() for part in value.decode("latin-1").split(",")
                    if part.split(";")[0].strip().lower() in READABLE]
            value = ", ".join(kept).encode("latin-1") or b"identity"
        out.append((key, value))
    return out


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
                         for m in hidden_messages(self.api, r))
        return self.body[:self.bracket] + added + self.body[self.bracket:]

    def offered(self, block: Any) -> bool:
        """Whether a reply's block (Anthropic), output item (Responses), tool call (Chat) or
        part (Gemini) is a call of an offered tool."""
        if not isinstance(block, dict):
            return False
        if self.api is wire.ANTHROPIC:
            kind, name = block.get("type") == "tool_use", block.get("name")
        elif self.api is wire.RESPONSES:
            kind, name = block.get("type") == "function_call", block.get("name")
        elif self.api is wire.GEMINI:  # a part
            call = block.get("functionCall")
            kind = isinstance(call, dict)
            name = call.get("name") if kind else None
        else:
            function = block.get("function")
            kind = isinstance(function, dict)
            name = function.get("name") if kind else None
        return kind and name in OFFERED and name not in self.agent_tools

    def record(self, merged: bool) -> Hidden:
        return Hidden(self.at, self.anchor, tuple(self.rounds), merged)


def hidden_messages(api: wire.Api, hidden: Round) -> list[Any]:
    """What one hidden round adds to the conversation, in the API's shape."""
    if api is wire.ANTHROPIC:
        return [hidden.assistant, {"role": "user", "content": hidden.results}]
    if api is wire.GEMINI:
        return [hidden.assistant, {"role": "user", "parts": hidden.results}]
    if api is wire.RESPONSES:
        return [*hidden.assistant, *hidden.results]
    return [hidden.assistant, *hidden.results]


Send = Callable[[bytes], Awaitable[httpx.Response]]


def _call(api: wire.Api, call: dict[str, Any]) -> tuple[str, str, Any]:
    """(name, call id, arguments) of an offered call; arguments as the model wrote them."""
    if api is wire.ANTHROPIC:
        return call.get("name", ""), call.get("id", ""), call.get("input")
    if api is wire.GEMINI:
        function = call.get("functionCall") or {}
        arguments = function.get("args", {})
        return function.get("name", ""), function.get("id") or "", arguments
    if api is wire.RESPONSES:
        text, name, ident = call.get("arguments"), call.get("name", ""), call.get("call_id", "")
    else:
        function = call.get("function") or {}
        text, name, ident = function.get("arguments"), function.get("name", ""), call.get("id")
    try:
        arguments = json.loads(text) if isinstance(text, str) and text.strip() else {}
    except ValueError:
        arguments = None  # the runner says the arguments are not an object
    return name, ident or "", arguments


async def results(turn: Turn, calls: list[dict[str, Any]], past_bound: bool) -> list[dict]:
    """The results for the offered calls, in the API's shape (run in a worker thread)."""
    out: list[dict[str, Any]] = []
    for call in calls:
        name, ident, arguments = _call(turn.api, call)
        if past_bound:
            ran = Ran(f"NOT_RUN: at most {turn.inband.rounds} recovery round trips per reply; "
                      "call it again in your next reply", True)
        else:
            ran = await anyio.to_thread.run_sync(run_call, turn.inband.history, turn.session,
                                                 name, arguments)
        turn.calls.append((name, ran.found))
        if turn.api is wire.ANTHROPIC:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": ident,
                                     "content": ran.text}
            if ran.error:
                block["is_error"] = True
        elif turn.api is wire.RESPONSES:
            block = {"type": "function_call_output", "call_id": ident, "output": ran.text}
        elif turn.api is wire.GEMINI:  # answered by id when the call had one, else by name
            block = {"functionResponse": {**({"id": ident} if ident else {}), "name": name,
                                          "response": {"error" if ran.error else "output":
                                                       ran.text}}}
        else:
            block = {"role": "tool", "tool_call_id": ident, "content": ran.text}
        out.append(block)
    return out


async def remember(turn: Turn, merged: bool) -> None:
    if turn.rounds:
        try:
            await anyio.to_thread.run_sync(turn.inband.remember, turn.session,
                                           turn.record(merged))
        except OSError as exc:  # the answer still reaches the agent
            log.warning("proxy: in-band exchange of %s not stored: %s", turn.session, exc)


def usage_of(api: wire.Api, value: Any) -> Any:
    """A reply's (or a streamed event's) usage object in the API's field."""
    return value.get(USAGE_FIELD.get(api.name, "usage")) if isinstance(value, dict) else None


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
    """The agent's reply (status, body) for a JSON reply, and the last round's usage as
    select_context's usage fields."""
    try:
        value = json.loads(first)
    except ValueError:
        return 200, first, None
    if not isinstance(value, dict):
        return 200, first, None
    calls, kept, whole, shown = _split(turn, value)
    if not calls:
        return 200, first, calibration(turn.api, usage_of(turn.api, value))
    opening, shown_all, total = value, [], {}
    while True:
        _add(total, usage_of(turn.api, value))
        shown_all.append(kept)
        if not calls:
            break
        mixed = _agent_calls(turn.api, kept)
        past = len(turn.rounds) >= turn.inband.rounds
        answered = await results(turn, calls, past)
        turn.rounds.append(Round(whole, answered, shown))
        if mixed or past:
            await remember(turn, True)
            return 200, _joined(turn.api, opening, value, shown_all, total, mixed, True), \
                calibration(turn.api, usage_of(turn.api, value))
        reply = await send(turn.follow_up())
        raw = await reply.aread()
        await reply.aclose()
        if reply.status_code != 200:
            await remember(turn, False)  # what the model saw so far stays in place
            return reply.status_code, raw, None  # the provider's own error, as it sent it
        try:
            value = json.loads(raw)
        except ValueError:
            value = {}
        calls, kept, whole, shown = _split(turn, value if isinstance(value, dict) else {})
    await remember(turn, False)
    return 200, _joined(turn.api, opening, value, shown_all, total, False, False), \
        calibration(turn.api, usage_of(turn.api, value))


def _split(turn: Turn, value: dict[str, Any]) -> tuple[list, list, Any, int]:
    """A JSON reply's offered calls, what reaches the agent, the model's whole message (as the
    follow-up sends it) and how much of it the agent is shown."""
    if turn.api is wire.ANTHROPIC:
        blocks = value.get("content") or []
        kept = [b for b in blocks if not turn.offered(b)]
        return ([b for b in blocks if turn.offered(b)], kept,
                {"role": "assistant", "content": blocks}, len(kept))
    if turn.api is wire.RESPONSES:
        items = value.get("output") or []
        kept = [i for i in items if not turn.offered(i)]
        return [i for i in items if turn.offered(i)], kept, items, len(kept)
    if turn.api is wire.GEMINI:
        candidates = value.get("candidates") or [{}]
        parts = (candidates[0].get("content") or {}).get("parts") or []
        kept = [p for p in parts if not turn.offered(p)]
        return ([p for p in parts if turn.offered(p)], kept, gemini_turn(parts),
                shown_text(kept))
    choices = value.get("choices") or [{}]
    message = choices[0].get("message") or {}
    tool_calls = message.get("tool_calls") or []
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    kept_calls = [c for c in tool_calls if not turn.offered(c)]
    whole = {"role": "assistant", "content": message.get("content"), "tool_calls": tool_calls}
    return ([c for c in tool_calls if turn.offered(c)], [text, kept_calls], whole, len(text))


def _agent_calls(api: wire.Api, kept: list[Any]) -> bool:
    if api is wire.ANTHROPIC:
        return any(isinstance(b, dict) and b.get("type") == "tool_use" for b in kept)
    if api is wire.RESPONSES:
        return any(isinstance(i, dict) and i.get("type") in RESPONSES_CALLS for i in kept)
    if api is wire.GEMINI:
        return any(isinstance(p, dict) and "functionCall" in p for p in kept)
    return bool(kept[1])


def gemini_turn(parts: list[Any]) -> dict[str, Any]:
    """A Gemini reply's parts as the model turn a follow-up sends back: empty text parts,
    which the API refuses in a request, left out unless they carry a thought signature."""
    return {"role": "model", "parts": [p for p in parts if not (
        isinstance(p, dict) and p.get("text") == "" and "thoughtSignature" not in p
        and len(p) == 1)]}


def shown_text(parts: list[Any]) -> int:
    """How many characters of text (thoughts aside) a Gemini agent was shown in these parts."""
    return sum(len(p["text"]) for p in parts if isinstance(p, dict)
               and isinstance(p.get("text"), str) and not p.get("thought"))


def _joined(api: wire.Api, opening: dict[str, Any], last: dict[str, Any],
            shown: list[list[Any]], total: dict[str, Any], mixed: bool, ended: bool) -> bytes:
    """The one reply the agent gets: the opening reply's identity, every round's shown part,
    the last round's ending, the usage of all of them."""
    usage = {**(usage_of(api, last) or {}), **total}
    if api is wire.GEMINI:
        candidate = dict((last.get("candidates") or [{}])[0])
        parts = [p for part in shown for p in part] or [{"text": ""}]
        candidate["content"] = {**(candidate.get("content") or {}), "role": "model",
                                "parts": parts}
        if ended:
            candidate["finishReason"] = "STOP"
        value = {**last, "candidates": [candidate], "usageMetadata": usage}
        if "responseId" in opening:
            value["responseId"] = opening["responseId"]
        return wire.dumps(value).encode()
    if api is wire.ANTHROPIC:
        stop = ("tool_use" if mixed else "end_turn") if ended else last.get("stop_reason")
        value = {**last, "id": opening.get("id", last.get("id")),
                 "content": [b for part in shown for b in part], "stop_reason": stop,
                 "usage": usage}
    elif api is wire.RESPONSES:
        value = {**last, "id": opening.get("id", last.get("id")),
                 "output": [i for part in shown for i in part], "usage": usage}
    else:
        choice = dict((last.get("choices") or [{}])[0])
        message = dict(choice.get("message") or {"role": "assistant"})
        message["content"] = "".join(part[0] for part in shown) or message.get("content")
        calls = [c for part in shown for c in part[1]]
        if calls:
            message["tool_calls"] = calls
        else:
            message.pop("tool_calls", None)
        choice["message"] = message
        if ended:
            choice["finish_reason"] = "tool_calls" if mixed else "stop"
        value = {**last, "id": opening.get("id", last.get("id")), "choices": [choice],
                 "usage": usage}
    return wire.dumps(value).encode()


def _add(total: dict[str, Any], usage: Any) -> None:
    """Add a usage object's counts into ``total`` (nested details too)."""
    if not isinstance(usage, dict):
        return
    for key, value in usage.items():
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
        elif isinstance(value, dict):
            inner = total.setdefault(key, {})
            if isinstance(inner, dict):
                _add(inner, value)


# --- a streamed reply --------------------------------------------------------------------------


def _event(name: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {wire.dumps(data)}\n\n".encode()


def _events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Whole SSE events in ``buffer`` (each with its blank line), and what follows them."""
    buffer = buffer.replace(b"\r\n", b"\n")
    parts = buffer.split(b"\n\n")
    rest = parts.pop()
    return [p + b"\n\n" for p in parts if p.strip()], rest


def _payload(event: bytes) -> bytes:
    return b"\n".join(line[5:].lstrip() for line in event.split(b"\n")
                      if line.startswith(b"data:"))


def _data(event: bytes) -> Any:
    payload = _payload(event)
    try:
        return json.loads(payload) if payload else None
    except ValueError:
        return None


_END = object()
_ERROR = object()


class _Merge:
    """Per API: reads one round's events, passes on what the agent reads, and keeps what the
    round's end needs. ``step`` returns the bytes to pass on (b"" for none), _END or _ERROR."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.total: dict[str, Any] = {}  # every round's usage added up
        self.usage: Any = None  # the latest round's usage (calibration)
        self.first = True

    def begin(self) -> None:
        raise NotImplementedError

    def step(self, raw: bytes) -> Any:
        raise NotImplementedError

    def end(self) -> tuple[list, list, Any, int]:
        """(offered calls, what reached the agent, the model's whole message, shown)."""
        raise NotImplementedError

    def final(self, rounds: bool, mixed: bool | None) -> bytes:
        """The reply's ending; ``mixed`` None: the last round ended by itself."""
        raise NotImplementedError

    def error(self, status: int, raw: bytes) -> bytes:
        raise NotImplementedError

    def between(self) -> bytes:
        """What the agent reads of a round's ending before the follow-up is sent (b"")."""
        return b""


class _AnthropicMerge(_Merge):
    """One ``message_start``, block indexes that go on counting across rounds, the offered
    ``tool_use`` blocks left out, one ``message_delta`` (usage added up) and ``message_stop``."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.next_index = 0
        self.delta: dict[str, Any] | None = None  # the latest message_delta, held to the end
        self.held = b""  # its bytes and message_stop's, as received

    def begin(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}  # upstream index -> the block rebuilt
        self.partial: dict[int, str] = {}
        self.shown: dict[int, int] = {}  # upstream index -> the agent's index
        self.round_usage: dict[str, int] = {}

    def step(self, raw: bytes) -> Any:
        data = _data(raw)
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "error":
            return _ERROR
        if kind == "message_start":
            message = data.get("message") or {}
            self._use(message.get("usage"))
            return raw if self.first else b""
        if kind == "message_delta":
            self._use(data.get("usage"))
            self.delta, self.held = data, raw
            return b""
        if kind == "message_stop":
            self.held += raw
            return _END
        if kind not in ("content_block_start", "content_block_delta", "content_block_stop"):
            return raw  # ping, and any event added later
        index = data.get("index")
        if not isinstance(index, int):
            return raw
        if kind == "content_block_start":
            block = dict(data.get("content_block") or {})
            self.blocks[index] = block
            if self.turn.offered(block):
                return b""
            self.shown[index] = self.next_index
            self.next_index += 1
        elif kind == "content_block_delta":
            _grow(self.blocks.get(index), self.partial, index, data.get("delta") or {})
        if index not in self.shown:
            return b""
        if self.shown[index] == index:
            return raw
        return _event(kind, {**data, "index": self.shown[index]})

    def _use(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.round_usage.update({k: v for k, v in usage.items() if k in USAGE_KEYS})

    def end(self) -> tuple[list, list, Any, int]:
        _usage(self.total, self.round_usage)
        self.usage = dict(self.round_usage)
        for index, text in self.partial.items():
            try:
                self.blocks[index]["input"] = json.loads(text) if text.strip() else {}
            except ValueError:
                self.blocks[index]["input"] = {}
        ordered = [self.blocks[i] for i in sorted(self.blocks)]
        kept = [b for b in ordered if not self.turn.offered(b)]
        return ([b for b in ordered if self.turn.offered(b)], kept,
                {"role": "assistant", "content": ordered}, len(kept))

    def final(self, rounds: bool, mixed: bool | None) -> bytes:
        if not rounds and self.held:
            return self.held  # nothing was answered: the provider's own ending
        stop = (self.delta or {}).get("delta", {}).get("stop_reason")
        if mixed is not None:
            stop = "tool_use" if mixed else "end_turn"
        delta = dict(self.delta or {"type": "message_delta", "delta": {}})
        delta["delta"] = {**(delta.get("delta") or {}), "stop_reason": stop}
        delta["usage"] = {**(delta.get("usage") or {}), **self.total}
        return _event("message_delta", delta) + _event("message_stop", {"type": "message_stop"})

    def error(self, status: int, raw: bytes) -> bytes:
        return _event("error", _error_body(status, raw))


class _ResponsesMerge(_Merge):
    """One ``response.created``, output indexes that go on counting, the offered
    ``function_call`` items left out, one ``response.completed`` whose output is every item the
    agent was shown and whose usage adds up the rounds; sequence numbers renumbered."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.next_index = 0
        self.sequence = 0
        self.opening: dict[str, Any] | None = None  # the first round's response
        self.shown_items: list[Any] = []
        self.last: dict[str, Any] | None = None  # the latest round's final event
        self.held = b""  # its bytes, as received

    def begin(self) -> None:
        self.shown: dict[int, int] = {}
        self.hidden: set[int] = set()
        self.output: list[Any] = []

    def step(self, raw: bytes) -> Any:
        data = _data(raw)
        kind = data.get("type") if isinstance(data, dict) else None
        if kind in ("error", "response.failed"):
            return _ERROR
        if kind in ("response.created", "response.in_progress", "response.queued"):
            if self.opening is None:
                self.opening = data.get("response") or {}
            return self._send(data, raw) if self.first else b""
        if kind in ("response.completed", "response.incomplete"):
            self.last, self.held = data, raw
            response = data.get("response") or {}
            self.output = list(response.get("output") or [])
            self.round_usage = response.get("usage")
            return _END
        index = data.get("output_index") if isinstance(data, dict) else None
        if not isinstance(index, int):
            return self._send(data, raw) if isinstance(data, dict) else raw
        if kind == "response.output_item.added" and index not in self.shown:
            if self.turn.offered(data.get("item")):
                self.hidden.add(index)
            else:
                self.shown[index] = self.next_index
                self.next_index += 1
        if index in self.hidden or index not in self.shown:
            return b""
        if kind == "response.output_item.done":
            self.shown_items.append(data.get("item"))
        return self._send({**data, "output_index": self.shown[index]}, raw,
                          self.shown[index] != index)

    def _send(self, data: dict[str, Any], raw: bytes, changed: bool = False) -> bytes:
        number = data.get("sequence_number")
        sequence, self.sequence = self.sequence, self.sequence + 1
        if number is None or (number == sequence and not changed):
            return raw
        return _event(data.get("type"), {**data, "sequence_number": sequence})

    def end(self) -> tuple[list, list, Any, int]:
        usage = getattr(self, "round_usage", None)
        _add(self.total, usage)
        self.usage = usage
        kept = [i for i in self.output if not self.turn.offered(i)]
        return [i for i in self.output if self.turn.offered(i)], kept, self.output, len(kept)

    def final(self, rounds: bool, mixed: bool | None) -> bytes:
        if not rounds and self.last is not None and (
                self.last.get("sequence_number") in (None, self.sequence)):
            self.sequence += 1
            return self.held  # nothing was answered: the provider's own ending
        last = dict(self.last or {"type": "response.completed", "response": {}})
        response = dict(last.get("response") or {})
        if rounds:
            response["output"] = list(self.shown_items)
            response["usage"] = {**(response.get("usage") or {}), **self.total}
            if self.opening and self.opening.get("id"):
                response["id"] = self.opening["id"]
        return self._send({**last, "response": response}, b"", True)

    def error(self, status: int, raw: bytes) -> bytes:
        error = _error_body(status, raw).get("error") or {}
        response = {**(self.opening or {}), "status": "failed", "error": {
            "code": str(error.get("type") or error.get("code") or status),
            "message": str(error.get("message", ""))}}
        return self._send({"type": "response.failed", "response": response,
                           "sequence_number": -1}, b"", True)


class _ChatMerge(_Merge):
    """Chat chunks: text deltas pass on, the offered tool calls are left out and the agent's
    own renumbered; one chunk with the ``finish_reason``, one usage chunk (added up), one
    ``[DONE]``."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.next_call = 0
        self.template: dict[str, Any] | None = None  # the first chunk, for the endings
        self.finish: Any = None
        self.role_sent = False

    def begin(self) -> None:
        self.text = ""
        self.calls: dict[int, dict[str, Any]] = {}  # upstream index -> the call rebuilt
        self.renumbered: dict[int, int] = {}
        self.round_usage: Any = None

    def step(self, raw: bytes) -> Any:
        if _payload(raw).strip() == b"[DONE]":
            return _END
        data = _data(raw)
        if not isinstance(data, dict):
            return raw
        if "error" in data and "choices" not in data:
            return _ERROR
        if self.template is None:
            self.template = data
        if data.get("usage"):
            self.round_usage = data["usage"]
        choices = data.get("choices") or []
        if not choices:
            return b""  # the usage chunk: added up at the end
        choice = dict(choices[0])
        if choice.get("finish_reason"):
            self.finish = choice["finish_reason"]
            choice["finish_reason"] = None
        delta = dict(choice.get("delta") or {})
        if isinstance(delta.get("content"), str):
            self.text += delta["content"]
        if not self.first or self.role_sent:
            delta.pop("role", None)
        elif "role" in delta:
            self.role_sent = True
        passed = []
        for call in delta.get("tool_calls") or ():
            index = call.get("index", 0)
            known = self.calls.setdefault(index, {"id": None, "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
            known["id"] = call.get("id") or known["id"]
            function = call.get("function") or {}
            known["function"]["name"] += function.get("name") or ""
            known["function"]["arguments"] += function.get("arguments") or ""
            if self.turn.offered(known):
                continue
            if index not in self.renumbered:
                self.renumbered[index] = self.next_call
                self.next_call += 1
            passed.append({**call, "index": self.renumbered[index]})
        if "tool_calls" in delta:
            if passed:
                delta["tool_calls"] = passed
            else:
                delta.pop("tool_calls")
        if not delta and not choice.get("logprobs"):
            return b""
        return _event(None, {**data, "choices": [{**choice, "delta": delta}],
                             **({"usage": None} if "usage" in data else {})})

    def end(self) -> tuple[list, list, Any, int]:
        _add(self.total, self.round_usage)
        self.usage = self.round_usage
        calls = [self.calls[i] for i in sorted(self.calls)]
        kept = [c for c in calls if not self.turn.offered(c)]
        whole = {"role": "assistant", "content": self.text or None, "tool_calls": calls}
        return ([c for c in calls if self.turn.offered(c)], [self.text, kept], whole,
                len(self.text))

    def final(self, rounds: bool, mixed: bool | None) -> bytes:
        template = self.template or {"object": "chat.completion.chunk"}
        finish = self.finish if mixed is None else ("tool_calls" if mixed else "stop")
        out = _event(None, {**{k: v for k, v in template.items() if k != "usage"},
                            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if self.total:
            out += _event(None, {**{k: v for k, v in template.items() if k != "usage"},
                                 "choices": [], "usage": self.total})
        return out + b"data: [DONE]\n\n"

    def error(self, status: int, raw: bytes) -> bytes:
        return _event(None, {"error": _error_body(status, raw).get("error")})


class _GeminiMerge(_Merge):
    """Gemini's ``alt=sse`` events (each a ``GenerateContentResponse`` chunk, no end marker):
    a chunk without an offered call passes as it came, one with one passes without it; each
    round's last chunk (the one with a ``finishReason``) is held, and the reply ends with one
    such chunk: the last round's parts, the first round's ``responseId`` and every round's
    ``usageMetadata`` added up. A chunk with an ``error`` ends the reply."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.opening: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None  # the latest round's final chunk, its parts kept
        self.held = b""  # its bytes, as received

    def begin(self) -> None:
        self.parts: list[Any] = []  # the round's every part, as the follow-up sends them back
        self.offered_seen = False
        self.round_usage: Any = None

    def step(self, raw: bytes) -> Any:
        data = _data(raw)
        if not isinstance(data, dict):
            return raw
        if "error" in data:
            return _ERROR
        if self.opening is None:
            self.opening = data
        if isinstance(data.get("usageMetadata"), dict):
            self.round_usage = data["usageMetadata"]  # repeated: the last one stands
        candidates = data.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else {}
        content = candidate.get("content") if isinstance(candidate, dict) else None
        content = content if isinstance(content, dict) else {}
        parts = content.get("parts")
        parts = parts if isinstance(parts, list) else []
        self.parts += parts
        kept = [p for p in parts if not self.turn.offered(p)]
        self.offered_seen = self.offered_seen or len(kept) < len(parts)
        if isinstance(candidate, dict) and candidate.get("finishReason"):
            self.held = raw
            self.last = {**data, "candidates": [
                {**candidate, "content": {**content, "parts": kept}}]}
            return _END
        if len(kept) == len(parts):
            return raw
        if not kept:
            return b""
        return _event(None, {**data, "candidates": [
            {**candidate, "content": {**content, "parts": kept}}, *candidates[1:]]})

    def end(self) -> tuple[list, list, Any, int]:
        _add(self.total, self.round_usage)
        self.usage = self.round_usage
        calls = [p for p in self.parts if self.turn.offered(p)]
        kept = [p for p in self.parts if not self.turn.offered(p)]
        return calls, kept, gemini_turn(self.parts), shown_text(kept)

    def _last_parts(self) -> list[Any]:
        candidate = (self.last or {}).get("candidates", [{}])[0]
        return list((candidate.get("content") or {}).get("parts") or [])

    def between(self) -> bytes:
        parts = [p for p in self._last_parts() if p != {"text": ""}]
        if not parts or self.last is None:
            return b""
        candidate = {k: v for k, v in self.last["candidates"][0].items()
                     if k not in ("finishReason", "finishMessage")}
        value = {k: v for k, v in self.last.items() if k != "usageMetadata"}
        return _event(None, {**value, "candidates": [candidate]})

    def final(self, rounds: bool, mixed: bool | None) -> bytes:
        if not rounds and self.held and not self.offered_seen:
            return self.held  # nothing was answered: the provider's own ending
        last = self.last or {"candidates": [{"content": {"role": "model", "parts": []}}]}
        candidate = dict(last["candidates"][0])
        candidate["content"] = {**(candidate.get("content") or {}), "role": "model",
                                "parts": self._last_parts() or [{"text": ""}]}
        candidate["finishReason"] = candidate.get("finishReason") or "STOP"
        value = {**last, "candidates": [candidate], "usageMetadata": {
            **(self.round_usage or {}), **self.total}}
        if self.opening and "responseId" in self.opening:
            value["responseId"] = self.opening["responseId"]
        return _event(None, value)

    def error(self, status: int, raw: bytes) -> bytes:
        error = _error_body(status, raw).get("error") or {}
        return _event(None, {"error": {"code": status, "message": str(error.get("message", "")),
                                       "status": str(error.get("status") or error.get("type")
                                                     or "UNKNOWN")}})


_MERGES = {"anthropic": _AnthropicMerge, "responses": _ResponsesMerge, "chat": _ChatMerge,
           "gemini": _GeminiMerge}


async def answer_stream(turn: Turn, first: AsyncIterator[bytes], send: Send,
                        on_usage: Callable[[dict[str, int]], None]) -> AsyncIterator[bytes]:
    """The agent's event stream: the first reply's events and each continuation's, merged."""
    merge = _MERGES[turn.api.name](turn)
    chunks = first
    while True:
        merge.begin()
        ended = False
        buffer = b""
        async for chunk in chunks:
            events, buffer = _events(buffer + chunk)
            for raw in events:
                out = merge.step(raw)
                if out is _ERROR:
                    yield raw
                    return
                if out is _END:
                    ended = True
                elif out:
                    yield out
        if buffer.strip():  # a last event without its blank line
            out = merge.step(buffer + b"\n\n")
            if out is _ERROR:
                yield buffer
                return
            ended = ended or out is _END
            if out is not _END and out:
                yield out
        calls, kept, whole, shown = merge.end()
        merge.first = False
        if not calls or not ended:
            await remember(turn, False)
            yield merge.final(bool(turn.rounds), None)
            _report(turn.api, merge.usage, on_usage)
            return
        mixed = _agent_calls(turn.api, kept)
        past = len(turn.rounds) >= turn.inband.rounds
        answered = await results(turn, calls, past)
        turn.rounds.append(Round(whole, answered, shown))
        if mixed or past:
            await remember(turn, True)
            yield merge.final(True, mixed)
            _report(turn.api, merge.usage, on_usage)
            return
        shown_end = merge.between()
        if shown_end:
            yield shown_end
        try:
            reply = await send(turn.follow_up())
        except httpx.HTTPError as exc:
            await remember(turn, False)
            yield merge.error(502, ("context-paging proxy: the recovery follow-up did not reach "
                                    f"the provider: {type(exc).__name__}").encode())
            return
        if reply.status_code != 200:
            raw = await reply.aread()
            await reply.aclose()
            await remember(turn, False)
            yield merge.error(reply.status_code, raw)
            return
        chunks = _closing(reply)


async def _closing(reply: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in reply.aiter_bytes():
            yield chunk
    finally:
        await reply.aclose()


def calibration(api: wire.Api, usage: Any) -> dict[str, int] | None:
    """The provider's usage of the last round trip as select_context's usage fields (the next
    request holds that round's whole input): the usage tap's own reading."""
    if not isinstance(usage, dict):
        return None
    tap = wire.UsageTap(api, False)
    tap.feed(wire.dumps({USAGE_FIELD.get(api.name, "usage"): usage}).encode())
    return tap.result()


def _report(api: wire.Api, usage: Any, on_usage: Callable[[dict[str, int]], None]) -> None:
    found = calibration(api, usage)
    if found:
        on_usage(found)


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
