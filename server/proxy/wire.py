"""What the proxy may rewrite in a model-API request body, and how (docs/proxy.md).

Rule of thumb from the spec: replace only the conversation array (``messages`` / ``input``) and
keep every other byte as received. So a body is not loaded and dumped again: :func:`read_body`
finds the byte span of every top-level value (one pass of the stdlib decoder, the same work as
``json.loads``) and the span of every element of the conversation array; :func:`splice` writes
the window back between the untouched bytes around it, reusing each kept message's own bytes.
Only messages the window changed (the notice, a rebuilt partial message, a distilled output) are
serialized, compactly and deterministically, so the same window gives the same bytes on every
request and the provider's prompt cache keeps hitting. They are strict JSON: a number keeps the
spelling the agent wrote (``1.0E2`` stays ``1.0E2``, ``1.5e400`` stays ``1.5e400`` rather than
becoming ``Infinity``), and a value strict JSON cannot hold raises, so the proxy forwards the
original body instead (docs/proxy.md, "What is forwarded exactly").

Conversation keys: a ledger session per conversation the agent runs. Claude Code sends its
session id (header ``X-Claude-Code-Session-Id``, or inside ``metadata.user_id``), but its title
calls and subagents share it, so the key adds a short fingerprint of the conversation's opening
(its first message without ``cache_control`` markers, and whether tools are sent — not their
names, which grow when an MCP server connects late): the main conversation keeps one ledger
session, a subagent gets its own, and a side call never moves the main conversation's cut.
OpenAI requests are keyed by ``conversation`` or ``prompt_cache_key`` (Codex sends the thread id
there) or Codex's ``session-id`` header. The key only names a request's candidates: requests of
one key are told apart by their chains of messages (server/proxy/conversations.py), so two
conversations that share an id and an opening, or that carry no id (Pi), never share a ledger.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from types import MappingProxyType
from typing import Any

from context_paging.paging.resident import is_agent_context
from context_paging.server.endpoints import safe_name

_DECODER = json.JSONDecoder()
_string = json.encoder.encode_basestring  # type: ignore[attr-defined]
_WS = re.compile(r"[ \t\n\r]*")
_NO_NUMBERS: Mapping[str, str] = MappingProxyType({})


class ShapeError(ValueError):
    """The body is not a request this proxy knows how to page (it is forwarded unchanged)."""

    code = "UNKNOWN_SHAPE"


@dataclass(frozen=True, slots=True)
class Api:
    name: str  # "anthropic" | "responses" | "chat"
    field: str  # the conversation array
    fmt: str  # select_context's format name
    prefix: str  # ledger session prefix


ANTHROPIC = Api("anthropic", "messages", "anthropic", "cc")
RESPONSES = Api("responses", "input", "responses", "oa")
CHAT = Api("chat", "messages", "openai", "oc")
# Gemini's turns are paged in the Anthropic shape (server/proxy/gemini.py reads and writes them)
GEMINI = Api("gemini", "contents", "anthropic", "gm")


def route(method: str, path: str) -> Api | None:
    """The API whose conversation this request carries, or None (pass it through)."""
    if method != "POST":
        return None
    path = path.rstrip("/")
    if path.endswith("/v1/messages"):  # not /v1/messages/count_tokens, not batches
        return ANTHROPIC
    if path.endswith("/responses"):  # not /responses/compact: that one is Codex's own summary
        return RESPONSES
    if path.endswith("/chat/completions"):
        return CHAT
    if path.endswith((":generateContent", ":streamGenerateContent")):
        return GEMINI
    return None


@dataclass(frozen=True, slots=True)
class Body:
    """A JSON request body read once: its bytes, its value, and where things are in the bytes."""

    raw: bytes
    value: dict[str, Any]
    spans: Mapping[str, tuple[int, int]]  # top-level key -> (start, end) of its value, in bytes
    items: tuple[tuple[int, int], ...]  # the conversation array's elements, (start, end)
    # repr of a float read -> its first spelling in the body where the two differ, so a
    # changed message keeps it
    numbers: Mapping[str, str] = dataclass_field(default_factory=dict)
    # how many of ``numbers`` were noted before the conversation array's first element, and
    # after each element: a body read after this one takes the spellings of what it shares
    counted: tuple[int, ...] = ()


def read_body(raw: bytes, field: str) -> Body:
    """Parse a request body, keeping the spans :func:`splice` needs. ShapeError if it is not an
    object whose ``field`` is an array of objects."""
    text = decode(raw)
    decoder = SpellingDecoder({})
    try:
        value, spans, items = _scan_object(text, field, decoder)
    except ValueError as exc:  # JSONDecodeError included
        raise ShapeError(f"body is not a JSON object: {exc}") from None
    return checked(raw, value, *in_bytes(text, raw, spans, items), field, decoder.numbers,
                   tuple(decoder.counted))


class SpellingDecoder(json.JSONDecoder):
    """A decoder that notes in ``numbers`` each float spelled otherwise than ``repr`` gives it
    back (``1.0E2``, ``1.5e400``), so :func:`strict` can write it as the agent did; the first
    spelling in the body wins. :func:`scan_elements` notes in ``counted`` how many it held
    before and after each element of the conversation array (``Body.counted``)."""

    def __init__(self, numbers: dict[str, str]) -> None:
        self.numbers = numbers
        self.counted: list[int] = []
        super().__init__(parse_float=self._number)

    def _number(self, spelled: str) -> float:
        value = float(spelled)
        if repr(value) != spelled:
            self.numbers.setdefault(repr(value), spelled)
        return value


def decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ShapeError("body is not UTF-8 JSON") from exc


def checked(raw: bytes, value: dict[str, Any], spans: dict[str, tuple[int, int]],
            items: tuple[tuple[int, int], ...], field: str,
            numbers: Mapping[str, str] = _NO_NUMBERS, counted: tuple[int, ...] = ()) -> Body:
    conversation = value.get(field)
    if not isinstance(conversation, list) or not all(isinstance(m, dict) for m in conversation):
        raise ShapeError(f"no {field!r} array of objects")
    return Body(raw, value, spans, items, dict(numbers), counted)


def in_bytes(text: str, raw: bytes, spans: dict[str, tuple[int, int]],
             items: tuple[tuple[int, int], ...], shift: int = 0,
             ) -> tuple[dict[str, tuple[int, int]], tuple[tuple[int, int], ...]]:
    """Character spans of ``text`` as byte spans of ``raw`` (its UTF-8), moved by ``shift``:
    the same numbers for ASCII text, else counted through one encoding of the text's pieces."""
    if len(text) == len(raw):
        if not shift:
            return spans, items
        return ({k: (a + shift, b + shift) for k, (a, b) in spans.items()},
                tuple((a + shift, b + shift) for a, b in items))
    offsets = sorted({x for pair in (*spans.values(), *items) for x in pair})
    where, at, size = {}, 0, shift
    for offset in offsets:
        size += len(text[at:offset].encode("utf-8"))
        where[offset], at = size, offset
    return ({k: (where[a], where[b]) for k, (a, b) in spans.items()},
            tuple((where[a], where[b]) for a, b in items))


def _scan_object(text: str, field: str,
                 decoder: json.JSONDecoder = _DECODER) -> tuple[dict, dict, tuple]:
    at = _WS.match(text, 0).end()
    if text[at:at + 1] != "{":
        raise ValueError("not an object")
    value: dict[str, Any] = {}
    spans: dict[str, tuple[int, int]] = {}
    at = _WS.match(text, at + 1).end()
    if text[at:at + 1] == "}":
        return value, spans, ()
    return scan_members(text, at, field, value, spans, (), decoder)


def scan_members(text: str, at: int, field: str, value: dict[str, Any],
                 spans: dict[str, tuple[int, int]], items: Any,
                 decoder: json.JSONDecoder = _DECODER) -> tuple[dict, dict, Any]:
    """The object's members from ``at`` (a key) to its end, into ``value`` and ``spans``;
    ``items``: the conversation array's element spans, as found (else as given)."""
    while True:
        key, at = decoder.raw_decode(text, at)
        if not isinstance(key, str):
            raise ValueError("object key is not a string")
        at = _WS.match(text, at).end()
        if text[at:at + 1] != ":":
            raise ValueError("expected ':'")
        start = _WS.match(text, at + 1).end()
        if key == field and text[start:start + 1] == "[":
            item, end, found = scan_elements(text, start + 1, False, decoder)
            items = tuple(found)
        else:
            item, end = decoder.raw_decode(text, start)
        value[key] = item
        spans[key] = (start, end)
        at = after_member(text, end)
        if at is None:
            return value, spans, items


def after_member(text: str, end: int) -> int | None:
    """Past a member's value: the next key's position, or None at the object's end."""
    at = _WS.match(text, end).end()
    if text[at:at + 1] == "}":
        if _WS.match(text, at + 1).end() != len(text):
            raise ValueError("extra data after the object")
        return None
    if text[at:at + 1] != ",":
        raise ValueError("expected ',' or '}'")
    return _WS.match(text, at + 1).end()


def scan_elements(text: str, at: int, after: bool, decoder: json.JSONDecoder = _DECODER,
                  ) -> tuple[list, int, list[tuple[int, int]]]:
    """An array's elements from ``at``, just past its ``[`` or, ``after``, just past an
    element: their values, the array's end, their spans. A :class:`SpellingDecoder`'s
    ``counted`` gets the count of its numbers after each element (and, from the ``[``, before
    the first)."""
    out: list[Any] = []
    spans: list[tuple[int, int]] = []
    counted = decoder.counted if isinstance(decoder, SpellingDecoder) else []
    numbers = decoder.numbers if isinstance(decoder, SpellingDecoder) else {}
    if not after:
        counted[:] = [len(numbers)]
    at = _WS.match(text, at).end()
    if after:
        if text[at:at + 1] == "]":
            return out, at + 1, spans
        if text[at:at + 1] != ",":
            raise ValueError("expected ',' or ']' in the conversation array")
        at = _WS.match(text, at + 1).end()
    elif text[at:at + 1] == "]":
        return out, at + 1, spans
    while True:
        item, end = decoder.raw_decode(text, at)
        out.append(item)
        spans.append((at, end))
        counted.append(len(numbers))
        at = _WS.match(text, end).end()
        if text[at:at + 1] == "]":
            return out, at + 1, spans
        if text[at:at + 1] != ",":
            raise ValueError("expected ',' or ']' in the conversation array")
        at = _WS.match(text, at + 1).end()


def dumps(value: Any) -> str:
    """Compact strict JSON, key order kept, UTF-8 as is (ValueError for NaN or infinity)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def strict(value: Any, numbers: Mapping[str, str] = _NO_NUMBERS) -> str:
    """How the proxy writes a message it changed: :func:`dumps`, except that a float keeps the
    spelling it had in the body (``numbers``); ValueError for anything strict JSON cannot hold
    (NaN, or an infinity the body did not spell as a number)."""
    if not numbers:
        return dumps(value)  # every float in the body is spelled as json.dumps spells it
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"object key {key!r} is not a string")
            parts.append(_string(key) + ":" + strict(item, numbers))
        return "{" + ",".join(parts) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(strict(item, numbers) for item in value) + "]"
    if isinstance(value, float):
        spelled = numbers.get(repr(value))
        return spelled if spelled is not None else dumps(value)
    return dumps(value)  # int, bool, None; anything else raises TypeError


def splice(body: Body, field: str, window: Sequence[dict[str, Any]]) -> bytes:
    """The body with ``field`` replaced by ``window``: every other byte as received, and every
    message the window kept unchanged (the same object) as its original bytes."""
    return splice_at(body, field, window)[0]


def splice_at(body: Body, field: str, window: Sequence[dict[str, Any]] | None,
              tools: bytes = b"") -> tuple[bytes, int]:
    """:func:`splice` (``window`` None: the array as received), with ``tools`` (compact JSON
    objects, comma-separated) appended to the body's ``tools`` array, or as a ``tools`` member
    at the object's end when it has none; and where the conversation array's ``]`` is in the
    bytes returned (a follow-up request appends messages there)."""
    raw = body.raw
    start, end = body.spans[field]
    if window is None:
        array = raw[start:end]
    else:
        original = body.value[field]
        where = {id(message): span for message, span in zip(original, body.items, strict=True)}
        parts = []
        for message in window:
            span = where.get(id(message))
            parts.append(raw[span[0]:span[1]] if span else strict(message, body.numbers).encode())
        array = b"".join((b"[", b",".join(parts), b"]"))
    edits = [(start, end, array)]
    if tools:
        listed = body.spans.get("tools") if isinstance(body.value.get("tools"), list) else None
        if listed is not None:
            close = raw.rindex(b"]", listed[0], listed[1])
            empty = not body.value["tools"]
            edits.append((close, close, tools if empty else b"," + tools))
        elif "tools" not in body.value:
            close = raw.rindex(b"}")
            edits.append((close, close, b',"tools":[' + tools + b"]"))
    edits.sort()
    out, at, bracket = [], 0, 0
    for begin, stop, text in edits:
        out.append(raw[at:begin])
        if begin == start:
            bracket = sum(len(p) for p in out) + len(text) - 1
        out.append(text)
        at = stop
    out.append(raw[at:])
    return b"".join(out), bracket


# --- conversation keys --------------------------------------------------------------------------

_LEGACY_SESSION = re.compile(r"_session_([0-9A-Za-z-]+)$")


def agent_session(api: Api, value: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """The agent's own session or conversation id, when the request carries one."""
    if api is ANTHROPIC:
        header = headers.get("x-claude-code-session-id") or headers.get("x-session-id")
        if header:  # Claude Code's, or OpenCode's (``ses_…``)
            return header
        metadata = value.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, dict) else None
        if isinstance(user, str):
            if user.startswith("{"):
                try:
                    parsed = json.loads(user)
                except ValueError:
                    parsed = None
                if isinstance(parsed, dict) and isinstance(parsed.get("session_id"), str):
                    return parsed["session_id"]
            match = _LEGACY_SESSION.search(user)
            if match:
                return match.group(1)
        return None
    conversation = value.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    for candidate in (conversation, value.get("prompt_cache_key"),
                      headers.get("session-id") or headers.get("session_id")):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None


def agent_name(api: Api, headers: Mapping[str, str]) -> str:
    """Which agent sent the request, as the live view names it, from the headers each one
    sends: Claude Code its session header (and a ``claude-cli`` user agent), Codex its
    ``originator``, Pi the ``Sec-Fetch-Mode: cors`` of Node's ``fetch`` (server/proxy/guard.py);
    else the API's name."""
    agent = headers.get("user-agent", "").lower()
    if "x-claude-code-session-id" in headers or "claude-cli" in agent:
        return "claude-code"
    if "codex" in headers.get("originator", "").lower() or "codex" in agent:
        return "codex"
    if headers.get("sec-fetch-mode", "").lower() == "cors" or "pi-coding-agent" in agent:
        return "pi"
    return api.name


def opening(api: Api, value: Mapping[str, Any]) -> str:
    """A short digest of how the conversation opens: its first message (for OpenAI, the first
    user message that is not set-up) without cache markers, and whether tools are sent."""
    conversation = value.get(api.field) or []
    start = conversation[0] if conversation else None
    if api is not ANTHROPIC:
        # OpenAI conversations open with resident developer/system messages that can change
        # (permissions, environment); the first user message names the conversation better.
        start = next((m for m in conversation if m.get("role") == "user"
                      and not is_agent_context(m)), start)
    tools = value.get("tools")
    seed = json.dumps([without_markers(start), bool(tools)], sort_keys=True, ensure_ascii=True)
    return hashlib.blake2b(seed.encode(), digest_size=5).hexdigest()


def without_markers(value: Any) -> Any:
    """A JSON value without its ``cache_control`` keys (agents move them between requests)."""
    if isinstance(value, dict):
        return {k: without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_markers(v) for v in value]
    return value




def conversation_key(api: Api, value: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """The key of this request's conversation (see the module docstring): the ledger session of
    the first conversation of an agent session id; server/proxy/conversations.py tells the
    conversations of one key apart by their messages."""
    session = agent_session(api, value, headers)
    name = safe_name(session) if session else "anon"
    return f"{api.prefix}-{name}-{opening(api, value)}"


# --- usage of the provider's reply --------------------------------------------------------------

USAGE_BODY_LIMIT = 8 << 20  # a JSON reply larger than this is not kept for its usage


class UsageTap:
    """Reads the provider's token usage out of a reply as its chunks pass (after each has been
    forwarded), for the next request's calibration (paging/calibrate.py): SSE ``data:`` lines
    that mention usage, or a whole JSON body. Returns select_context's usage fields — input
    without the cached part, cache reads, cache writes, output — or None."""

    def __init__(self, api: Api, streaming: bool) -> None:
        self.api = api
        self.streaming = streaming
        self.pending = b""
        self.body: list[bytes] = []
        self.size = 0
        self.usage: dict[str, int] = {}

    def feed(self, chunk: bytes) -> None:
        if not self.streaming:
            self.size += len(chunk)
            if self.size <= USAGE_BODY_LIMIT:
                self.body.append(chunk)
            return
        lines = (self.pending + chunk).split(b"\n")
        self.pending = lines.pop()
        if len(self.pending) > USAGE_BODY_LIMIT:
            self.pending = b""
        for line in lines:
            if line.startswith(b"data:") and (b'"usage"' in line or b'"usageMetadata"' in line):
                try:
                    self._read(json.loads(line[5:]))
                except ValueError:
                    continue

    def result(self) -> dict[str, int] | None:
        if not self.streaming and self.body and self.size <= USAGE_BODY_LIMIT:
            try:
                self._read(json.loads(b"".join(self.body)))
            except ValueError:
                return None
        return self.usage or None

    def _read(self, event: Any) -> None:
        if isinstance(event, list) and self.api is GEMINI:  # streamGenerateContent without
            for item in event:  # alt=sse answers one JSON array of the stream's events
                self._read(item)
            return
        if not isinstance(event, dict):
            return
        if self.api is GEMINI:
            if isinstance(event.get("usageMetadata"), dict):
                self._gemini(event["usageMetadata"])
            return
        for holder in (event, event.get("message"), event.get("response")):
            usage = holder.get("usage") if isinstance(holder, dict) else None
            if isinstance(usage, dict):
                self._merge(usage)

    def _gemini(self, usage: dict[str, Any]) -> None:
        """``usageMetadata``: the prompt count includes ``cachedContentTokenCount``; thoughts
        are output. A stream repeats the figures, the last ones standing."""
        def number(key: str) -> int:
            value = usage.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        if "promptTokenCount" not in usage:
            return
        cached = number("cachedContentTokenCount")
        found = {"input_tokens": number("promptTokenCount") - cached,
                 "cache_read_tokens": cached,
                 "output_tokens": number("candidatesTokenCount") + number("thoughtsTokenCount")}
        self.usage.update({k: v for k, v in found.items() if v >= 0})

    def _merge(self, usage: dict[str, Any]) -> None:
        def number(*path: str) -> int | None:
            value: Any = usage
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        if self.api is ANTHROPIC:  # input is the uncached part already; output is cumulative
            found = {"input_tokens": number("input_tokens"),
                     "cache_read_tokens": number("cache_read_input_tokens"),
                     "cache_write_tokens": number("cache_creation_input_tokens"),
                     "output_tokens": number("output_tokens")}
        else:  # OpenAI counts cached tokens inside the input
            total = number("input_tokens") if self.api is RESPONSES else number("prompt_tokens")
            cached = number("input_tokens_details", "cached_tokens") if self.api is RESPONSES \
                else number("prompt_tokens_details", "cached_tokens")
            found = {"input_tokens": None if total is None else total - (cached or 0),
                     "cache_read_tokens": cached,
                     "output_tokens": number("output_tokens") if self.api is RESPONSES
                     else number("completion_tokens")}
        self.usage.update({k: v for k, v in found.items() if v is not None and v >= 0})
