"""Token estimates with a real tokenizer, for Pi-shaped messages (the selector's view).

The text counter is injected (``count_text``), so this module stays pure: the server loads the
tokenizer (tiktoken's cl100k_base, shipped with the package) and passes its ``len(encode(t))``. What
is counted mirrors upstream's characters/4 estimator (docs/selection.md, "Token estimates") — text,
thinking, tool names and JSON arguments, result text, summaries — so the two estimators differ only
in how they turn text into tokens. Images are counted by size: their pixel dimensions are read from
the PNG/JPEG/GIF/WebP header and priced as ``width × height / 750`` (capped at 1,600, Anthropic's
published rule); an image whose size cannot be read costs upstream's 1,200.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from collections.abc import Callable, Iterator
from typing import Any

IMAGE_DEFAULT_TOKENS = 1_200
IMAGE_MAX_TOKENS = 1_600
TextCounter = Callable[[str], int]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def message_parts(message: dict[str, Any]) -> Iterator[str | dict[str, Any]]:
    """The countable pieces of a message: text strings and image blocks."""
    role = message.get("role")
    if role == "bashExecution":
        yield str(message.get("command", ""))
        yield str(message.get("output", ""))
        return
    if role in ("compactionSummary", "branchSummary"):
        yield str(message.get("summary", ""))
        return
    content = message.get("content")
    if isinstance(content, str):
        yield content
        return
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            yield str(block.get("text", ""))
        elif kind == "thinking":
            yield str(block.get("thinking", ""))
        elif kind == "toolCall":
            yield str(block.get("name", ""))
            yield _dumps(block.get("arguments", {}))
        elif kind == "image":
            yield block


def image_tokens(block: dict[str, Any]) -> int:
    size = image_size(str(block.get("data", "")))
    if size is None:
        return IMAGE_DEFAULT_TOKENS
    width, height = size
    return max(1, min(IMAGE_MAX_TOKENS, math.ceil(width * height / 750)))


def image_size(data_b64: str) -> tuple[int, int] | None:
    """(width, height) from the first bytes of a base64 image, or None."""
    try:
        head = base64.b64decode(data_b64[:4096] + "=" * (-len(data_b64[:4096]) % 4))
    except (binascii.Error, ValueError):
        return None
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 24:
        return struct.unpack(">II", head[16:24])
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return struct.unpack("<HH", head[6:10])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and head[12:16] == b"VP8X":
        w = int.from_bytes(head[24:27], "little") + 1
        h = int.from_bytes(head[27:30], "little") + 1
        return w, h
    if head.startswith(b"\xff\xd8"):
        return _jpeg_size(head)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None


def counted_tokens(message: dict[str, Any], count_text: TextCounter) -> int:
    """Tokens of one message with a real tokenizer; ``system`` messages are resident (0)."""
    if message.get("role") == "system":
        return 0
    total = 0
    for part in message_parts(message):
        total += image_tokens(part) if isinstance(part, dict) else count_text(part)
    return total


def counted_resident(system: str, tools: list[dict[str, Any]], count_text: TextCounter) -> int:
    defs = [{"name": t.get("name"), "description": t.get("description"),
             "parameters": t.get("parameters", t.get("input_schema"))} for t in tools]
    return count_text(system) + count_text(_dumps(defs))


def token_floor(message: dict[str, Any], max_token_chars: int,
                text_floor: TextCounter | None = None) -> int:
    """A lower bound of :func:`counted_tokens` for a counter none of whose tokens is longer than
    ``max_token_chars`` characters: the tokens of a text tile it, so a text of ``n`` characters
    is at least ``ceil(n / max_token_chars)`` tokens. ``text_floor``: the counter's own lower
    bound of a text's count, where it has one (``server.tokens.piece_floor``); each text
    takes the larger of the two. Images count 0 here (never more than their price). It costs
    a length per text (or the counter's bound), nothing like encoding it."""
    if message.get("role") == "system":
        return 0
    if text_floor is None:
        return sum(-(-len(part) // max_token_chars) for part in message_parts(message)
                   if isinstance(part, str))
    return sum(max(-(-len(part) // max_token_chars), text_floor(part))
               for part in message_parts(message) if isinstance(part, str))
