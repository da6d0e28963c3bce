"""Messages a host sends through ``select_context`` (Anthropic, OpenAI chat and Responses, Pi) as
history Messages.

Used for the ledger: each stored host message becomes zero or more Messages with ids derived
from its ledger id. An Anthropic user message carrying tool results becomes one ``tool_result``
Message per result (``<id>.r<k>``), followed by the user text, if any, under the message's own
id. Thinking is hidden exactly as in the session sources.

An OpenAI Responses item is one Message: a call or an assistant text an ``assistant`` Message,
reasoning (and any other model-side item) an assistant Message with one hidden block, an output a
``tool_result``. :func:`join_turns` then merges each run of consecutive model items into the one
model turn the window treats it as (``paging.formats.responses_runs``), under the run's first id.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from context_paging.index.model import Block, HiddenBlock, ImageBlock, Message, TextBlock, ToolCall
from context_paging.index.sources.pi import agent_message
from context_paging.paging.formats import (
    SERVER_CALL_KINDS,
    is_private_part,
    is_server_result,
    public_json,
    responses_call,
    responses_role,
)
from context_paging.paging.messages import stop_reason


def host_messages(
    message: dict[str, Any], fmt: str, message_id: str, names: dict[str, str], timestamp: str = ""
) -> list[Message]:
    if fmt == "pi":
        converted = agent_message(message_id, message, names, timestamp)
        return [converted] if converted is not None else []
    if fmt == "anthropic":
        return _anthropic(message, message_id, names, timestamp)
    if fmt == "responses":
        return _responses(message, message_id, names, timestamp)
    return _openai(message, message_id, names, timestamp)


def _image(block: dict[str, Any]) -> ImageBlock:
    source = block.get("source")
    if isinstance(source, dict):
        return ImageBlock(str(source.get("media_type", "")), str(source.get("data", "") or ""),
                          source.get("url") if isinstance(source.get("url"), str) else None)
    url = block.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    if isinstance(url, str) and url.startswith("data:") and "," in url:
        head, data = url.split(",", 1)
        return ImageBlock(head[5:].split(";")[0], data)
    return ImageBlock("", "", url if isinstance(url, str) else None)


def _content_blocks(content: Any, role: str | None = None) -> tuple[Block, ...]:
    if isinstance(content, str):
        return (TextBlock(content),)
    blocks: list[Block] = []
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            blocks.append(TextBlock(block["text"]))
        elif kind in ("image", "image_url"):
            blocks.append(_image(block))
        elif isinstance(block, dict) and is_private_part(block, role):
            blocks.append(HiddenBlock(str(kind or "unknown")))
        elif isinstance(block, dict):
            blocks.append(TextBlock(public_json(block)))
    return tuple(blocks)



def _stop(message: dict[str, Any], has_calls: bool) -> str:
    return stop_reason(message) or ("tool_use" if has_calls else "stop")


def _anthropic(message: dict, message_id: str, names: dict[str, str], ts: str) -> list[Message]:
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    if message.get("role") == "assistant":
        out: list[Block] = []
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in SERVER_CALL_KINDS or is_server_result(block):
                # A server tool's call and result are both in this message: a complete
                # exchange, kept as searchable text rather than a call awaiting a result.
                out.append(TextBlock(public_json(block)))
            elif kind == "tool_use" and isinstance(block.get("id"), str):
                names[block["id"]] = str(block.get("name", ""))
                out.append(ToolCall(block["id"], str(block.get("name", "")), block.get("input")))
            elif kind == "text" and isinstance(block.get("text"), str):
                out.append(TextBlock(block["text"]))
            elif kind in ("thinking", "redacted_thinking"):
                out.append(HiddenBlock(kind))
            else:
                out.append(HiddenBlock("unknown"))
        has_calls = any(isinstance(b, ToolCall) for b in out)
        return [Message("assistant", message_id, ts, tuple(out),
                        stop_reason=_stop(message, has_calls), model=message.get("model"))]
    results: list[Message] = []
    rest = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            call_id = str(block.get("tool_use_id", ""))
            results.append(Message(
                "tool_result", f"{message_id}.r{len(results)}", ts,
                _content_blocks(block.get("content", "")), tool_call_id=call_id,
                tool_name=names.get(call_id), is_error=block.get("is_error") is True,
            ))
        else:
            rest.append(block)
    if rest or not results:
        results.append(Message("user", message_id, ts, _content_blocks(rest)))
    return results


def _openai(message: dict, message_id: str, names: dict[str, str], ts: str) -> list[Message]:
    role = message.get("role")
    blocks = _content_blocks(message.get("content") or [], role)
    if role == "assistant":
        calls: list[Block] = []
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            raw = function.get("arguments", "")
            try:
                arguments = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                arguments = raw
            call_id = str(call.get("id", "")) if isinstance(call, dict) else ""
            names[call_id] = str(function.get("name", ""))
            calls.append(ToolCall(call_id, str(function.get("name", "")), arguments))
        return [Message("assistant", message_id, ts, blocks + tuple(calls),
                        stop_reason=_stop(message, bool(calls)), model=message.get("model"))]
    if role == "tool":
        call_id = str(message.get("tool_call_id", ""))
        return [Message("tool_result", message_id, ts, blocks, tool_call_id=call_id,
                        tool_name=names.get(call_id))]
    if role == "user":
        return [Message("user", message_id, ts, blocks)]
    return []  # system / developer: resident input, not history


def _responses(item: dict, message_id: str, names: dict[str, str], ts: str) -> list[Message]:
    role = responses_role(item)
    kind = item.get("type", "message")
    if role == "system":
        return []  # resident input, not history
    if role == "user":
        return [Message("user", message_id, ts, _responses_blocks(item.get("content")))]
    if role == "output":
        call_id = str(item.get("call_id", ""))
        return [Message("tool_result", message_id, ts, _responses_blocks(item.get("output")),
                        tool_call_id=call_id, tool_name=names.get(call_id))]
    if kind == "message":
        return [Message("assistant", message_id, ts, _responses_blocks(item.get("content")),
                        stop_reason="stop")]
    call = responses_call(item)
    if call is not None:
        call_id = str(item.get("call_id", ""))
        name, arguments = call
        names[call_id] = name
        return [Message("assistant", message_id, ts, (ToolCall(call_id, name, arguments),),
                        stop_reason="tool_use")]
    return [Message("assistant", message_id, ts, (HiddenBlock(str(kind)),), stop_reason="stop")]


def _responses_blocks(value: Any) -> tuple[Block, ...]:
    if isinstance(value, str):
        return (TextBlock(value),)
    blocks: list[Block] = []
    for block in value if isinstance(value, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(block.get("text"), str):
            blocks.append(TextBlock(block["text"]))
        elif kind == "input_image":
            blocks.append(_image({"image_url": block.get("image_url")}))
        elif isinstance(block, dict) and is_private_part(block):
            blocks.append(HiddenBlock(str(kind or "unknown")))
        elif isinstance(block, dict):
            blocks.append(TextBlock(json.dumps(block, ensure_ascii=False)))
    return tuple(blocks)


def join_turns(messages: list[Message], joinable: set[str]) -> list[Message]:
    """Merge each run of consecutive assistant Messages whose ids are ``joinable`` (Responses
    items) into one, under the first id: one model response, one model turn with its calls."""
    out: list[Message] = []
    for message in messages:
        previous = out[-1] if out else None
        if (previous is not None and message.role == "assistant" and previous.role == "assistant"
                and message.id in joinable and previous.id in joinable):
            has_calls = bool(previous.tool_calls or message.tool_calls)
            out[-1] = replace(previous, content=previous.content + message.content,
                              stop_reason="tool_use" if has_calls else message.stop_reason)
            continue
        out.append(message)
    return out
