"""The Gemini API as the proxy pages it: ``generateContent`` and ``streamGenerateContent``.

A Gemini request carries its conversation in ``contents``: turns of ``role`` ``user`` or
``model``, each a list of ``parts`` (``text``, ``functionCall``, ``functionResponse``,
``inlineData``, thought parts). The window pipeline reads the Anthropic shape, so the turns are
read into it (docs/proxy.md, "Gemini"), paged, and the window is written back in Gemini's own
shape, a kept turn as its original bytes and a kept part as its original object:

* a ``text`` part is a text block; a thought part (``thought: true``) is a thinking block
  whose text is never read (private: never indexed, never shown);
* a ``functionCall`` is a ``tool_use`` and a ``functionResponse`` a ``tool_result`` paired by
  the call's ``id``; a call without an id gets one from its place, and a response without an
  id answers the first unanswered call of its name in the turn before (as the API pairs them);
* ``inlineData`` is an image or document block; any other part is text of its JSON;
* a ``thoughtSignature`` belongs to its part: the part goes back as it came, signature and all.

``systemInstruction`` and ``tools`` are resident input (counted, never cut);
``cachedContent``, ``generationConfig`` and every other field go to the provider as received.
The opening ``<session_context>`` parts of the first turn (Gemini CLI's environment and
GEMINI.md) are instructions, not history: they travel with the notice once that turn leaves.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

Message = dict[str, Any]
_CONTEXT = "<session_context>"


class Turns:
    """A request's ``contents`` read as Anthropic-shaped messages, and the way back."""

    def __init__(self, contents: Sequence[Any]) -> None:
        self.contents = list(contents)
        self.messages: list[Message] = []
        self._turn: dict[int, Any] = {}  # id(message) → the turn it was read from
        self._part: dict[int, Any] = {}  # id(block) → the part it was read from
        self._names: dict[str, str] = {}  # call id → function name
        self._answers: dict[str, Any] = {}  # call id → the functionResponse that answered it
        self._read()

    def _read(self) -> None:
        calls: list[tuple[str, str]] = []  # the previous model turn's (name, id), unanswered
        for number, turn in enumerate(self.contents):
            parts = turn.get("parts") if isinstance(turn, dict) else None
            parts = parts if isinstance(parts, list) else []
            model = turn.get("role") == "model" if isinstance(turn, dict) else False
            blocks: list[Message] = []
            made: list[tuple[str, str]] = []
            for place, part in enumerate(parts):
                block = self._block(part, model, number, place, calls, made)
                if block is not None:
                    self._part[id(block)] = part
                    blocks.append(block)
            calls = made if model else []
            message = {"role": "assistant" if model else "user", "content": blocks}
            self._turn[id(message)] = turn
            self.messages.append(message)

    def _block(self, part: Any, model: bool, number: int, place: int,
               calls: list[tuple[str, str]], made: list[tuple[str, str]]) -> Message | None:
        if not isinstance(part, dict):
            return None
        if part.get("thought") is True:
            signature = part.get("thoughtSignature")
            return {"type": "thinking", "thinking": "",
                    "signature": signature if isinstance(signature, str) else ""}
        if isinstance(part.get("text"), str):
            return {"type": "text", "text": part["text"]}
        call = part.get("functionCall")
        if isinstance(call, dict) and model:
            name = call.get("name") if isinstance(call.get("name"), str) else ""
            ident = call.get("id") if isinstance(call.get("id"), str) and call["id"] else \
                f"gemini-call-{number}-{place}"
            made.append((name, ident))
            self._names[ident] = name
            arguments = call.get("args") if isinstance(call.get("args"), dict) else {}
            return {"type": "tool_use", "id": ident, "name": name, "input": arguments}
        response = part.get("functionResponse")
        if isinstance(response, dict) and not model:
            name = response.get("name") if isinstance(response.get("name"), str) else ""
            ident = response.get("id") if isinstance(response.get("id"), str) else None
            if ident is None or ident not in {i for _, i in calls}:
                ident = next((i for n, i in calls if n == name), ident or f"gemini-lost-{number}")
            calls[:] = [(n, i) for n, i in calls if i != ident]
            self._answers[ident] = response
            return {"type": "tool_result", "tool_use_id": ident,
                    "content": response_text(response.get("response")),
                    **({"is_error": True} if _failed(response.get("response")) else {})}
        data = part.get("inlineData")
        if isinstance(data, dict) and isinstance(data.get("data"), str):
            mime = data.get("mimeType") if isinstance(data.get("mimeType"), str) else ""
            kind = "image" if mime.startswith("image/") else "document"
            return {"type": kind, "source": {"type": "base64", "media_type": mime,
                                             "data": data["data"]}}
        return {"type": "text", "text": json.dumps(part, ensure_ascii=False, sort_keys=True)}

    def pinned(self) -> list[Message]:
        """The first turn's leading ``<session_context>`` blocks (instructions, not history)."""
        first = self.messages[0] if self.messages else None
        if first is None or first["role"] != "user":
            return []
        pinned = []
        for block in first["content"]:
            if block.get("type") != "text" or not block["text"].lstrip().startswith(_CONTEXT):
                break
            pinned.append(block)
        return pinned

    def back(self, window: Sequence[Message]) -> list[Any]:
        """The window as Gemini turns: a kept message is its original turn, a rebuilt one is
        made of its kept parts and new parts. A rebuilt turn next to a turn of its role is
        joined to it (the notice's turn before the first kept user turn), so the roles
        alternate where the agent's own turns did."""
        out: list[Any] = []
        made: list[bool] = []
        for message in window:
            turn = self._turn.get(id(message))
            new = turn is None
            if new:
                role = "model" if message.get("role") == "assistant" else "user"
                turn = {"role": role, "parts": self._parts(message.get("content"))}
            if out and _role(out[-1]) == _role(turn) and (new or made[-1]):
                out[-1] = {**out[-1], "parts": [*_parts_of(out[-1]), *_parts_of(turn)]}
                made[-1] = True
            else:
                out.append(turn)
                made.append(new)
        return out

    def _parts(self, content: Any) -> list[Any]:
        if isinstance(content, str):
            return [{"text": content}]
        parts = []
        for block in content if isinstance(content, list) else ():
            part = self._part.get(id(block))
            if part is not None:
                parts.append(part)
            elif isinstance(block, dict):
                made = self._new_part(block)
                if made is not None:
                    parts.append(made)
        return parts

    def _new_part(self, block: Message) -> Any:
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            return {"text": block["text"]}
        if kind == "tool_result":  # a cut-down output: the response it stands for, new text
            ident = block.get("tool_use_id")
            text = block.get("content")
            if isinstance(text, list):
                text = "".join(b.get("text", "") for b in text if isinstance(b, dict))
            answer = self._answers.get(ident) if isinstance(ident, str) else None
            if answer is None:
                answer = {"id": ident, "name": self._names.get(ident, "")}
            return {"functionResponse": {**answer, "response": {"output": text}}}
        if kind == "tool_use":
            return {"functionCall": {"id": block.get("id"), "name": block.get("name"),
                                     "args": block.get("input") or {}}}
        return None  # a thinking block is never made up


def _role(turn: Any) -> Any:
    return turn.get("role") if isinstance(turn, dict) else None


def _parts_of(turn: Any) -> list[Any]:
    parts = turn.get("parts") if isinstance(turn, dict) else None
    return list(parts) if isinstance(parts, list) else []


def response_text(response: Any) -> str:
    """A function response as the text the window counts and the ledger keeps: the ``output``
    (or ``error``) string when that is all it holds, else its JSON."""
    if isinstance(response, dict) and len(response) == 1:
        only = next(iter(response.values()))
        if isinstance(only, str) and set(response) <= {"output", "error", "result"}:
            return only
    return json.dumps(response, ensure_ascii=False, sort_keys=True)


def _failed(response: Any) -> bool:
    return isinstance(response, dict) and "error" in response and "output" not in response


def system_of(value: dict[str, Any]) -> list[Message] | None:
    """``systemInstruction``'s text parts as system blocks (resident input)."""
    instruction = value.get("systemInstruction") or value.get("system_instruction")
    if isinstance(instruction, str):
        return [{"type": "text", "text": instruction}]
    parts = instruction.get("parts") if isinstance(instruction, dict) else None
    texts = [p["text"] for p in parts or () if isinstance(p, dict) and isinstance(
        p.get("text"), str)]
    return [{"type": "text", "text": text} for text in texts] or None


def tools_of(value: dict[str, Any]) -> list[Message] | None:
    """Each function declaration as a tool (resident input, counted)."""
    tools = value.get("tools")
    out: list[Message] = []
    for tool in tools if isinstance(tools, list) else ():
        declared = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        if isinstance(declared, list):
            out.extend(d for d in declared if isinstance(d, dict))
        elif isinstance(tool, dict):
            out.append(tool)  # google_search, code_execution …: counted as they are
    return out or None


def model_of(path: str) -> str | None:
    """The model a Gemini path names: ``/v1beta/models/<model>:generateContent``."""
    tail = path.rstrip("/").rsplit("/", 1)[-1]
    model = tail.partition(":")[0]
    return model or None

