"""Upstream's characters/4 token estimate, with JavaScript parity (docs/selection.md, "Token
estimates").

Pi estimates a message as ``ceil(chars / 4)`` where ``chars`` counts JavaScript string lengths,
i.e. UTF-16 code units (an emoji counts 2), and tool-call arguments and tool definitions are
measured as ``JSON.stringify`` output (compact separators, insertion order, no ASCII escaping,
integral numbers without ``.0``, lone surrogates escaped). This module reproduces that so
upstream's token figures hold in tests and in the ``chars4`` estimator setting.

Per role: user/custom/toolResult count text blocks plus 4,800 characters per image (a
string content counts whole); assistant counts text, thinking, and for each tool call its name
plus its JSON arguments; bashExecution counts command plus output; compaction and branch
summaries count the summary; system counts content plus JSON of ``toolsAdded`` (the tracker's
estimate — the selector itself forces system messages to 0, they are resident input); any
other role counts 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

IMAGE_CHARS = 4_800

_LONE_SURROGATE = re.compile(
    r"[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]"
)


def utf16_len(text: str) -> int:
    """JavaScript ``string.length``: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def js_number(value: float) -> str:
    """JavaScript ``String(number)``: shortest round-trip digits, JS exponent rules."""
    if isinstance(value, bool):
        raise TypeError("booleans are not numbers here")
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    all_digits = whole + fraction
    digits = all_digits.lstrip("0")
    # value = 0.digits × 10**point (ECMAScript Number::toString's k digits and n).
    point = len(whole) + int(exponent or 0) - (len(all_digits) - len(digits))
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * (-point) + digits
    e = point - 1
    tail = f"e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + (digits if k == 1 else digits[0] + "." + digits[1:]) + tail


def _js_string(text: str) -> str:
    out = json.dumps(text, ensure_ascii=False)
    if _LONE_SURROGATE.search(text) is None:
        return out
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)


def js_json(value: Any) -> str:
    """JavaScript ``JSON.stringify(value)`` for JSON-shaped Python values."""
    if value is None or value is True or value is False:
        return "null" if value is None else ("true" if value else "false")
    if isinstance(value, str):
        return _js_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return js_number(value) if math.isfinite(value) else "null"
    if isinstance(value, Mapping):
        parts = (f"{_js_string(str(k))}:{js_json(v)}" for k, v in value.items())
        return "{" + ",".join(parts) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(js_json(item) for item in value) + "]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _ceil4(chars: int) -> int:
    return -(-chars // 4)


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return utf16_len(content)
    chars = 0
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            chars += utf16_len(block["text"])
        elif kind == "image":
            chars += IMAGE_CHARS
    return chars


def _assistant_chars(content: Any) -> int:
    chars = 0
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            chars += utf16_len(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            chars += utf16_len(block["thinking"])
        elif kind == "toolCall":
            chars += utf16_len(str(block.get("name", "")))
            # JSON.stringify(undefined) has no length in JS (Pi would throw); count nothing.
            if "arguments" in block:
                chars += utf16_len(js_json(block["arguments"]))
    return chars


def _text(value: Any) -> int:
    return utf16_len(value) if isinstance(value, str) else 0


def chars4_tokens(message: Mapping[str, Any]) -> int:
    """Pi's ``estimateTokens`` for one Pi AgentMessage dict."""
    role = message.get("role")
    if role in ("user", "custom", "toolResult"):
        chars = _content_chars(message.get("content"))
    elif role == "assistant":
        chars = _assistant_chars(message.get("content"))
    elif role == "bashExecution":
        chars = _text(message.get("command")) + _text(message.get("output"))
    elif role in ("compactionSummary", "branchSummary"):
        chars = _text(message.get("summary"))
    elif role == "system":
        chars = _content_chars(message.get("content"))
        if "toolsAdded" in message:
            chars += utf16_len(js_json(message["toolsAdded"]))
    else:
        chars = 0
    return _ceil4(chars)


def text_chars4(text: str) -> int:
    """The estimate of a plain text (a notice): a user message with string content."""
    return _ceil4(utf16_len(text))


def resident_chars4(system: str, tools: Sequence[Mapping[str, Any]]) -> int:
    """Resident input R = ceil((len(system) + len(JSON of the active tools)) / 4).

    (docs/selection.md, "Resident input and estimates")

    Each tool is reduced to ``{name, description, parameters}`` in that order; a missing key is
    left out, as ``JSON.stringify`` drops ``undefined`` properties.
    """
    keys = ("name", "description", "parameters")
    defs = [{key: tool[key] for key in keys if key in tool} for tool in tools]
    return _ceil4(utf16_len(system) + utf16_len(js_json(defs)))
