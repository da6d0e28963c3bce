"""An omitted exchange's stub merged into the user message after it (pure).

The rule is in docs/distillation.md, "Two user messages in a row".

Distillation omits an old exchange by keeping its request as a one-text stub and leaving out
the rest of its messages, so the stub is usually followed directly by the next request: two user
messages in a row. Anthropic's Messages API (it joins consecutive user turns), OpenAI's chat
completions and Pi's providers accept that shape; APIs that require strict user/assistant
alternation (AWS Bedrock's Converse API, and chat templates of many open models served through
vLLM or Ollama, which raise "roles must alternate") reject it. So the window never sends it: the
stub becomes the first text block of the following user message. Only a plain user message
takes it — not an Anthropic user message that carries ``tool_result`` blocks (those must come
first in their message), and not Pi's ``custom`` messages. The merge is a function of the stub
texts and the messages, so the same window renders the same bytes on every call.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any


def _stub_text(message: dict[str, Any], stubs: Collection[str]) -> str | None:
    """The stub a rendered message is exactly (``render`` gives a stub one text block, or a
    string in OpenAI's format), else None."""
    if message.get("role") != "user":
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content if content in stubs else None
    if (isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict)
            and content[0].get("type") == "text" and content[0].get("text") in stubs):
        return content[0]["text"]
    return None


def _takes_text(message: dict[str, Any]) -> bool:
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") not in ("tool_result",) for b in content)


def merge_stubs(window: Sequence[dict[str, Any]], stubs: Collection[str]) -> list[dict[str, Any]]:
    """``window`` with every stub message that a plain user message follows folded into that
    message as its first text block (several stubs in a row fold into the same message)."""
    if not stubs:
        return list(window)
    out: list[dict[str, Any]] = []
    carried: list[tuple[str, dict[str, Any]]] = []  # stubs waiting for the next user message
    for message in window:
        text = _stub_text(message, stubs)
        if text is not None:
            carried.append((text, message))
            continue
        if carried and _takes_text(message):
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(
                content or [])
            message = {**message, "content": [{"type": "text", "text": t} for t, _ in carried]
                       + blocks}
        else:  # no plain user message follows: the stubs stay where they were
            out.extend(m for _, m in carried)
        carried = []
        out.append(message)
    out.extend(m for _, m in carried)
    return out
