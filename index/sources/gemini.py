"""Gemini CLI chat files → :class:`Conversation`.

The format (docs/sessions.md, "Gemini CLI"), as Gemini CLI 0.61 writes it under
``~/.gemini/tmp/<project>/chats/session-<local time>-<id prefix>.jsonl``:

* **Header.** The first line holds ``sessionId``, ``projectHash``, ``startTime`` and ``kind``.
* **Updates.** A line ``{"$set": {...}}`` sets fields of the chat; a ``messages`` field
  replaces the whole message list (the CLI writes its opening context that way).
* **Messages.** Any other line with an ``id`` and a ``type`` is a message; a line repeating an
  earlier id replaces that message in place (a response is written, then written again with
  its tool calls). ``user`` messages hold Gemini API parts: text and inline data are a
  prompt, ``functionResponse`` parts are tool results. ``gemini`` messages hold the response
  text, ``thoughts`` (private: kept as hidden slots, never as text), ``toolCalls`` (id, name,
  args and the ``result`` parts) and ``tokens``. Other types (``info``, ``error``,
  ``warning``) are counted, not shown.
* **Tool results.** Taken from the user messages that carry them, as the model saw them; a
  call whose result was never written as a user message gets the result stored with it.
* **Injected context.** A user message that opens with ``<session_context>`` (the CLI's
  environment preamble) is counted, not shown; its workspace folder is the session's cwd.
* **Usage.** ``tokens``: ``input`` includes ``cached``, so input is ``input - cached`` and
  cache reads are ``cached``; ``thoughts`` is the reasoning count.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from context_paging.index.jsonl import Issue, Record
from context_paging.index.model import (
    Block,
    Conversation,
    HiddenBlock,
    ImageBlock,
    Message,
    SessionInfo,
    TextBlock,
    ToolCall,
    Usage,
)

_TITLE_CHARS = 80
_CONTEXT_OPEN = "<session_context>"
_WORKSPACE = re.compile(r"\*\*Workspace Directories:\*\*\s*\n\s*- (\S[^\n]*)")
_NAME_ID = re.compile(r"-([0-9a-f]{8})$")


@dataclass(slots=True)
class _Log:
    path: str
    issues: list[Issue] = field(default_factory=list)

    def warn(self, record: Record, kind: str, message: str) -> None:
        self.issues.append(Issue(self.path, record.line, record.offset, kind, message))


@dataclass(frozen=True, slots=True)
class _Entry:
    value: dict[str, Any]
    line: int


def build(records: Sequence[Record], path: str) -> Conversation:
    log = _Log(path)
    header: dict[str, Any] = {}
    entries: dict[str, _Entry] = {}  # message id → its latest line, in first-written order
    stats = {"lines": len(records), "updates": 0, "other_messages": 0, "user": 0,
             "assistant": 0, "tool_results": 0, "tool_calls": 0, "hidden_blocks": 0,
             "skipped_context": 0, "replaced": 0}
    for record in records:
        value = record.value
        if not isinstance(value, dict):
            log.warn(record, "bad_line", "a line that is not an object skipped")
            continue
        if "$set" in value:
            stats["updates"] += 1
            _apply_set(value["$set"], record, header, entries, log)
        elif isinstance(value.get("id"), str) and isinstance(value.get("type"), str):
            stats["replaced"] += value["id"] in entries
            entries[value["id"]] = _Entry(value, record.line)
        elif "sessionId" in value and not header:
            header.update(value)
        else:
            log.warn(record, "unknown_line", "a line that is no message or update skipped")
    messages, cwd = _messages(list(entries.values()), stats)
    return Conversation(
        info=_info(header, messages, cwd, path),
        messages=tuple(messages),
        warnings=tuple(log.issues),
        usage=_total(messages),
        stats=stats,
    )


def _apply_set(update: Any, record: Record, header: dict[str, Any],
               entries: dict[str, _Entry], log: _Log) -> None:
    if not isinstance(update, dict):
        log.warn(record, "bad_update", "a $set that is not an object skipped")
        return
    for key, value in update.items():
        if key != "messages":
            header[key] = value
            continue
        if not isinstance(value, list):
            log.warn(record, "bad_update", "a $set of messages that is not a list skipped")
            continue
        entries.clear()
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                entries[item["id"]] = _Entry(item, record.line)


def _messages(entries: list[_Entry], stats: dict[str, int]) -> tuple[list[Message], str | None]:
    answered = {part["functionResponse"].get("id")
                for entry in entries if entry.value.get("type") == "user"
                for part in _parts(entry.value.get("content"))
                if isinstance(part.get("functionResponse"), dict)}
    names: dict[str, str] = {}
    out: list[Message] = []
    cwd: str | None = None
    for entry in entries:
        value, kind = entry.value, entry.value.get("type")
        stamp = value.get("timestamp") if isinstance(value.get("timestamp"), str) else ""
        if kind == "user":
            parts = _parts(value.get("content"))
            results = [p["functionResponse"] for p in parts
                       if isinstance(p.get("functionResponse"), dict)]
            for number, response in enumerate(results):
                stats["tool_results"] += 1
                out.append(_result(response, f"{value['id']}.{number}", stamp, entry.line, names))
            prompt = _prompt(parts)
            if not prompt:
                continue
            first = prompt[0].text if isinstance(prompt[0], TextBlock) else ""
            if first.lstrip().startswith(_CONTEXT_OPEN):
                stats["skipped_context"] += 1
                found = _WORKSPACE.search(first)
                cwd = cwd or (found.group(1).strip() if found else None)
                continue
            stats["user"] += 1
            out.append(Message("user", value["id"], stamp, tuple(prompt), entry.line))
        elif kind == "gemini":
            stats["assistant"] += 1
            message, calls = _assistant(value, stamp, entry.line, stats)
            out.append(message)
            for call in calls:
                names[call["id"]] = call["name"]
                if call["id"] not in answered:
                    for number, part in enumerate(_parts(call.get("result"))):
                        response = part.get("functionResponse")
                        if isinstance(response, dict):
                            stats["tool_results"] += 1
                            out.append(_result({"id": call["id"], **response},
                                               f"{value['id']}.{call['id']}.{number}", stamp,
                                               entry.line, names))
        else:
            stats["other_messages"] += 1
    return out, cwd


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    return [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []


def _prompt(parts: list[dict[str, Any]]) -> list[Block]:
    blocks: list[Block] = []
    for part in parts:
        if part.get("thought") is True:
            blocks.append(HiddenBlock("thinking"))
        elif isinstance(part.get("text"), str):
            blocks.append(TextBlock(part["text"]))
        elif isinstance(part.get("inlineData"), dict):
            data = part["inlineData"]
            mime = data.get("mimeType") if isinstance(data.get("mimeType"), str) else ""
            blocks.append(ImageBlock(mime, data.get("data") if isinstance(data.get("data"), str)
                                     else ""))
    return blocks


def _assistant(value: dict[str, Any], stamp: str, line: int,
               stats: dict[str, int]) -> tuple[Message, list[dict[str, Any]]]:
    blocks: list[Block] = []
    for _ in value.get("thoughts") if isinstance(value.get("thoughts"), list) else ():
        stats["hidden_blocks"] += 1
        blocks.append(HiddenBlock("thinking"))
    content = value.get("content")
    if isinstance(content, str) and content:
        blocks.append(TextBlock(content))
    elif isinstance(content, list):
        blocks.extend(_prompt(_parts(content)))
    calls = [c for c in value.get("toolCalls") or () if isinstance(c, dict)
             and isinstance(c.get("id"), str) and isinstance(c.get("name"), str)]
    for call in calls:
        stats["tool_calls"] += 1
        args = call.get("args")
        blocks.append(ToolCall(call["id"], call["name"], args if args is not None else {}))
    model = value.get("model")
    return Message("assistant", value["id"], stamp, tuple(blocks), line,
                   stop_reason="tool_use" if calls else "stop",
                   model=model if isinstance(model, str) else None,
                   usage=_usage(value.get("tokens"))), calls


def _result(response: dict[str, Any], message_id: str, stamp: str, line: int,
            names: dict[str, str]) -> Message:
    call_id = response.get("id") if isinstance(response.get("id"), str) else None
    name = response.get("name") if isinstance(response.get("name"), str) else None
    body = response.get("response")
    is_error = isinstance(body, dict) and "error" in body and "output" not in body
    if isinstance(body, dict) and set(body) <= {"output", "error"} and len(body) == 1:
        text = next(iter(body.values()))
        text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    else:
        text = json.dumps(body, ensure_ascii=False)
    return Message("tool_result", message_id, stamp, (TextBlock(text),), line,
                   tool_call_id=call_id,
                   tool_name=name or (names.get(call_id) if call_id else None),
                   is_error=is_error)


def _usage(tokens: Any) -> Usage | None:
    if not isinstance(tokens, dict):
        return None

    def count(key: str) -> int:
        number = tokens.get(key)
        ok = isinstance(number, int | float) and not isinstance(number, bool)
        return max(int(number), 0) if ok else 0

    cached = count("cached")
    return Usage(max(count("input") - cached, 0), count("output"), cached, 0,
                 count("thoughts") if "thoughts" in tokens else None)


def _total(messages: list[Message]) -> Usage | None:
    total: Usage | None = None
    for message in messages:
        if message.usage is not None:
            total = message.usage if total is None else total + message.usage
    return total


def _info(header: dict[str, Any], messages: list[Message], cwd: str | None,
          path: str) -> SessionInfo:
    session_id = header.get("sessionId")
    started = header.get("startTime")
    updated = header.get("lastUpdated")
    stamps = [m.timestamp for m in messages if m.timestamp]
    return SessionInfo(
        source="gemini",
        session_id=session_id if isinstance(session_id, str) and session_id else name_id(path),
        path=path,
        cwd=cwd,
        title=_title(messages),
        created=started if isinstance(started, str) else (stamps[0] if stamps else None),
        updated=updated if isinstance(updated, str) else (stamps[-1] if stamps else None),
        format="gemini-" + (header["kind"] if isinstance(header.get("kind"), str) else "chat"),
    )


def _title(messages: list[Message]) -> str | None:
    for message in messages:
        if message.role != "user":
            continue
        for block in message.content:
            text = block.text if isinstance(block, TextBlock) else ""
            line = next((s.strip() for s in text.splitlines() if s.strip()), "")
            if line:
                return line[:_TITLE_CHARS]
    return None


def name_id(path: str) -> str:
    """The id a chat file's name carries: the session id's first 8 hex digits at its end."""
    stem = path.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".jsonl")
    found = _NAME_ID.search(stem)
    return found.group(1) if found else stem
