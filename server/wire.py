"""What the proxy may rewrite in a model-API request body, and how (specs/model-apis.md).

Rule of thumb from the spec: replace only the conversation array (``messages`` / ``input``) and
keep every other byte as received. So a body is not loaded and dumped again: :func:`read_body`
finds the byte span of every top-level value (one pass of the stdlib decoder, the same work as
``json.loads``) and the span of every element of the conversation array; :func:`splice` writes
the window back between the untouched bytes around it, reusing each kept message's own bytes.
Only messages the window changed (the notice, a rebuilt partial message, a distilled output) are
serialized, compactly and deterministically, so the same window gives the same bytes on every
request and the provider's prompt cache keeps hitting.

Conversation keys: a ledger session per conversation the agent runs. Claude Code sends its
session id (header ``X-Claude-Code-Session-Id``, or inside ``metadata.user_id``), but its title
calls and subagents share it, so the key adds a short fingerprint of the conversation's start
(first message and the tool names): the main conversation keeps one ledger session, a subagent
gets its own, and a side call never moves the main conversation's cut. OpenAI requests are keyed
by ``conversation`` or ``prompt_cache_key`` (Codex sends the thread id there).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from context_paging.paging.formats import is_agent_context

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


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
    return None


@dataclass(frozen=True, slots=True)
class Body:
    """A JSON request body read once: its bytes, its value, and where things are in the bytes."""

    raw: bytes
    value: dict[str, Any]
    spans: Mapping[str, tuple[int, int]]  # top-level key -> (start, end) of its value, in bytes
    items: tuple[tuple[int, int], ...]  # the conversation array's elements, (start, end)


def read_body(raw: bytes, field: str) -> Body:
    """Parse a request body, keeping the spans :func:`splice` needs. ShapeError if it is not an
    object whose ``field`` is an array of objects."""
    text = decode(raw)
    try:
        value, spans, items = _scan_object(text, field)
    except ValueError as exc:  # JSONDecodeError included
        raise ShapeError(f"body is not a JSON object: {exc}") from None
    return checked(raw, value, *in_bytes(text, raw, spans, items), field)


def decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ShapeError("body is not UTF-8 JSON") from exc


def checked(raw: bytes, value: dict[str, Any], spans: dict[str, tuple[int, int]],
            items: tuple[tuple[int, int], ...], field: str) -> Body:
    conversation = value.get(field)
    if not isinstance(conversation, list) or not all(isinstance(m, dict) for m in conversation):
        raise ShapeError(f"no {field!r} array of objects")
    return Body(raw, value, spans, items)


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


def _scan_object(text: str, field: str) -> tuple[dict, dict[str, tuple[int, int]], tuple]:
    at = _WS.match(text, 0).end()
    if text[at:at + 1] != "{":
        raise ValueError("not an object")
    value: dict[str, Any] = {}
    spans: dict[str, tuple[int, int]] = {}
    at = _WS.match(text, at + 1).end()
    if text[at:at + 1] == "}":
        return value, spans, ()
    return scan_members(text, at, field, value, spans, ())


def scan_members(text: str, at: int, field: str, value: dict[str, Any],
                 spans: dict[str, tuple[int, int]], items: Any) -> tuple[dict, dict, Any]:
    """The object's members from ``at`` (a key) to its end, into ``value`` and ``spans``;
    ``items``: the conversation array's element spans, as found (else as given)."""
    while True:
        key, at = _DECODER.raw_decode(text, at)
        if not isinstance(key, str):
            raise ValueError("object key is not a string")
        at = _WS.match(text, at).end()
        if text[at:at + 1] != ":":
            raise ValueError("expected ':'")
        start = _WS.match(text, at + 1).end()
        if key == field and text[start:start + 1] == "[":
            item, end, found = scan_elements(text, start + 1, False)
            items = tuple(found)
        else:
            item, end = _DECODER.raw_decode(text, start)
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


def scan_elements(text: str, at: int, after: bool) -> tuple[list, int, list[tuple[int, int]]]:
    """An array's elements from ``at``, just past its ``[`` or, ``after``, just past an
    element: their values, the array's end, their spans."""
    out: list[Any] = []
    spans: list[tuple[int, int]] = []
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
        item, end = _DECODER.raw_decode(text, at)
        out.append(item)
        spans.append((at, end))
        at = _WS.match(text, end).end()
        if text[at:at + 1] == "]":
            return out, at + 1, spans
        if text[at:at + 1] != ",":
            raise ValueError("expected ',' or ']' in the conversation array")
        at = _WS.match(text, at + 1).end()


def dumps(value: Any) -> str:
    """How the proxy writes a message it changed: compact, key order kept, UTF-8 as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def splice(body: Body, field: str, window: Sequence[dict[str, Any]]) -> bytes:
    """The body with ``field`` replaced by ``window``: every other byte as received, and every
    message the window kept unchanged (the same object) as its original bytes."""
    original = body.value[field]
    where = {id(message): span for message, span in zip(original, body.items, strict=True)}
    raw = body.raw
    parts = []
    for message in window:
        span = where.get(id(message))
        parts.append(raw[span[0]:span[1]] if span else dumps(message).encode("utf-8"))
    start, end = body.spans[field]
    return b"".join((raw[:start], b"[", b",".join(parts), b"]", raw[end:]))


# --- conversation keys --------------------------------------------------------------------------

_LEGACY_SESSION = re.compile(r"_session_([0-9A-Za-z-]+)$")


def agent_session(api: Api, value: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """The agent's own session or conversation id, when the request carries one."""
    if api is ANTHROPIC:
        header = headers.get("x-claude-code-session-id")
        if header:
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


def conversation_key(api: Api, value: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """The ledger session id of this request's conversation (see the module docstring)."""
    conversation = value.get(api.field) or []
    tools = value.get("tools")
    names = sorted(str(t.get("name") or (t.get("function") or {}).get("name") or "")
                   for t in tools if isinstance(t, dict)) if isinstance(tools, list) else []
    start = conversation[0] if conversation else None
    if api is not ANTHROPIC:
        # OpenAI conversations open with resident developer/system messages that can change
        # (permissions, environment); the first user message names the conversation better.
        # (Codex's leading environment / AGENTS.md messages are the same in every thread of a
        # directory, so the first real request names it.)
        start = next((m for m in conversation if m.get("role") == "user"
                      and not is_agent_context(m)), start)
    seed = json.dumps([start, names], sort_keys=True, ensure_ascii=True)
    digest = hashlib.blake2b(seed.encode(), digest_size=5).hexdigest()
    session = agent_session(api, value, headers)
    name = _UNSAFE.sub("-", session).strip("-.")[:80] if session else "anon"
    return f"{api.prefix}-{name or 'anon'}-{digest}"


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
            if line.startswith(b"data:") and b'"usage"' in line:
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
        if not isinstance(event, dict):
            return
        for holder in (event, event.get("message"), event.get("response")):
            usage = holder.get("usage") if isinstance(holder, dict) else None
            if isinstance(usage, dict):
                self._merge(usage)

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
