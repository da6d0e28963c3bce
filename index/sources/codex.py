"""OpenAI Codex CLI rollout files read into a Conversation (docs/sessions.md, "Codex").

Newer files wrap every line as ``{timestamp, type, payload}``; legacy ones have a bare ``{id,
timestamp, instructions, git}`` header, bare ResponseItems and ``record_type`` lines. :func:`_lines`
recognises each line by its shape. A rollout is linear and its items carry no ids (nor does the
envelope), so a message id is ``L<line>`` of its first line (``L<line>.k`` for the k-th object glued
on one line), which appending lines never changes.

Decisions where the spec leaves a choice:

* Prompts: the ``user_message`` event texts, counted in a pre-pass, so the user
  ``response_item`` with the same text is the prompt (its images, its line) whichever comes
  first; an event without such an item is the prompt itself. With no ``user_message`` event at
  all (legacy), user items are classified by the injected-context marker prefixes. Other user
  items and developer/system messages are context (counted). ``<user_shell_command>`` items are
  user messages of origin ``bash``; a prompt while the running task has one is ``steering``.
* Assistant messages: consecutive model-output items form one message; tool outputs,
  other messages, ``turn_context``, ``token_count``, task events and ``compacted`` end it. Echo
  events (``agent_message``, ``agent_reasoning``) are dropped when an item with the same text is
  in the file, else used (interrupted requests often left only the echo). 0.40 writes an echo
  before its item, so an echo-only message stays tentative until its turn ends, and is left out
  while the turn is still running (at the growing end of a file).
* Privacy: reasoning (summary, raw content, ``encrypted_content``) becomes
  ``HiddenBlock("thinking")``, one per run; the pre-pass keeps only ``hash()`` values of its text.
* Results pair by ``call_id`` and follow their call's message even when the file interleaves
  them; an output for an unknown call is skipped with a warning. A 0.40 output
  ``{"output", "metadata": {"exit_code"}}`` and the exec tool's ``{"chunk_id", …, "exit_code",
  "output"}`` yield the inner text, decoded; a non-zero exit code (also
  newer exec output's "Process exited with code N" header) sets ``is_error``, as a failed shell
  command does in the other formats. ``web_search_call`` and ``image_generation_call`` have no
  output item: each gets a synthesized result (the image, or a text saying that Codex
  recorded no output), so the exchange does not look unfinished.
* ``turn_aborted`` precedes the aborted request's items in 0.40 and follows them in 2026 builds,
  so it applies when the turn ends (next prompt, rollback, end of file): the turn's last
  assistant message, and any of its messages with an unanswered call, become "aborted".
* Usage: one per ``token_count`` whose cumulative total changed, from
  ``last_token_usage`` (else the difference of totals), given to the newest assistant message of
  the current turn if it has none yet, else to the next one. ``Conversation.usage`` is the exact
  sum, rolled-back requests included.
* ``thread_rolled_back {num_turns}`` drops the last N prompts and what follows each.
  ``compacted`` counts in ``compactions``; earlier lines stay on the path. Unknown
  line, item and event types are counted in stats, not warned about.
"""

from __future__ import annotations

import json
import mimetypes
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePath
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
from context_paging.paging.resident import AGENT_CONTEXT_PREFIXES

# Set-up user messages (environment, AGENTS.md …): the proxy's resident table, one list for both.
_CONTEXT_PREFIXES = AGENT_CONTEXT_PREFIXES
_SHELL_PREFIX = "<user_shell_command>"
_IDE_CONTEXT, _IDE_REQUEST = "# Context from my IDE setup:", "## My request for Codex:"
_MEDIA_LABEL = re.compile(r"</?(?:local_)?(?:image|audio)\b[^>]*>")
_EXIT_CODE = re.compile(r"^(?:Process exited with code|Exit code:) (-?\d+)\s*$", re.MULTILINE)
# Where each model-output item keeps its call's arguments ("arguments" is a JSON string).
_ARGUMENTS = {
    "function_call": "arguments", "tool_search_call": "arguments", "custom_tool_call": "input",
    "local_shell_call": "action", "web_search_call": "action",
    "image_generation_call": "revised_prompt",
}
_FIXED_NAMES = {
    "tool_search_call": "tool_search", "local_shell_call": "local_shell",
    "web_search_call": "web_search", "image_generation_call": "image_generation",
}
_ASSISTANT_TEXT = frozenset({"output_text", "input_text", "text", "refusal"})
_NO_OUTPUT_ITEM = frozenset({"web_search_call", "image_generation_call"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output", "tool_search_output"})
# Not conversation (paging/resident.py: ``additional_tools`` is resident in a request too).
_HARNESS_ITEMS = frozenset({
    "ghost_snapshot", "additional_tools", "compaction", "compaction_summary", "context_compaction",
})
_META_LINES = frozenset({
    "state", "inter_agent_communication", "inter_agent_communication_metadata", "world_state",
    "token_usage_record", "retained_context", "security_risk_score", "realtime_item",
})
_LIFECYCLE = frozenset({  # persisted events, older builds' included
    "context_compacted", "entered_review_mode", "exited_review_mode", "patch_apply_end",
    "mcp_tool_call_end", "web_search_end", "image_generation_end", "sub_agent_activity",
    "item_completed", "thread_goal_updated", "thread_settings_applied", "exec_command_end",
    "agent_reasoning_section_break", "turn_diff", "plan_update", "stream_error", "error",
})


@dataclass(frozen=True, slots=True)
class _Line:
    """One record with the envelope (or the legacy bare shape) taken off."""

    kind: str  # session_meta | response_item | event_msg | turn_context | compacted | state | …
    type: str  # the payload's own type, "" if none
    payload: dict[str, Any]
    timestamp: str
    line: int
    offset: int
    id: str


@dataclass(frozen=True, slots=True, eq=False)  # identity: two drafts may hold equal content
class _Draft:
    """An assistant message being assembled; ``blocks`` and ``results`` fill in as lines come."""

    head: Message
    blocks: list[Block] = field(default_factory=list)
    results: list[Message] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Cursor:
    """Where the reader stands; replaced, never mutated, as lines are read."""

    model: str | None = None
    open: _Draft | None = None  # the message still taking model output
    last: _Draft | None = None  # the newest assistant message of the current turn
    turn_at: int = 0  # index in entries of the current turn's prompt
    aborted: bool = False
    in_task: bool = False
    prompted: bool = False  # the running task has its prompt: more prompts are steering
    totals: dict[str, Any] | None = None  # the last distinct total_token_usage


@dataclass(frozen=True, slots=True)
class _State:
    """What the reader accumulates. The four counters (keys are ``hash()`` of texts) come from
    the pre-pass and are spent as items and echoes are matched."""

    path: str
    user_events: Counter[int] = field(default_factory=Counter)
    user_items: Counter[int] = field(default_factory=Counter)
    agent_items: Counter[int] = field(default_factory=Counter)
    reasoning_items: Counter[int] = field(default_factory=Counter)
    entries: list[Message | _Draft] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    calls: dict[str, tuple[_Draft, str]] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    pending: list[Usage] = field(default_factory=list)
    requests: list[Usage] = field(default_factory=list)
    aborted: set[str] = field(default_factory=set)
    tentative: list[_Draft] = field(default_factory=list)  # echo-only, in a turn still running
    dropped: set[str] = field(default_factory=set)
    stats: Counter[str] = field(default_factory=Counter)
    warnings: list[Issue] = field(default_factory=list)

    def warn(self, ln: _Line, kind: str, message: str) -> None:
        self.warnings.append(Issue(self.path, ln.line, ln.offset, kind, message))


def build(records: Sequence[Record], path: str) -> Conversation:
    st = _State(path)
    _count_texts(st, _lines(records))
    cur = _Cursor()
    for ln in _lines(records):
        cur = _step(st, cur, ln)
    _end_turn(st, cur)
    st.stats["unattached_usage"] += len(st.pending)
    st.stats["pending_echoes"] += len(st.tentative)
    st.dropped.update(d.head.id for d in st.tentative)
    messages = tuple(_flatten(st))
    return Conversation(
        info=_info(records, path, messages),
        messages=messages,
        warnings=tuple(st.warnings),
        compactions=st.stats["compactions"],
        usage=sum(st.requests, Usage()) if st.requests else None,
        stats={k: v for k, v in sorted(st.stats.items()) if v},
    )


def _lines(records: Sequence[Record]) -> Iterator[_Line]:
    previous, glued, header_seen = -1, 0, False
    for record in records:
        glued = glued + 1 if record.line == previous else 0
        previous, value = record.line, record.value
        payload, kind = value.get("payload"), _str(value.get("type"))
        if "payload" in value:
            kind, payload = (kind, payload) if isinstance(payload, dict) else ("bad", {})
        elif "record_type" in value:
            kind, payload = "state", {}
        elif kind:
            kind, payload = "response_item", value  # legacy bare ResponseItem
        else:
            kind, payload = ("unknown" if header_seen else "session_meta"), value
        header_seen = header_seen or kind == "session_meta"
        yield _Line(kind, _str(payload.get("type")), payload, _str(value.get("timestamp")),
                    record.line, record.offset,
                    f"L{record.line}" if glued == 0 else f"L{record.line}.{glued}")


def _count_texts(st: _State, lines: Iterator[_Line]) -> None:
    for ln in lines:
        p = ln.payload
        if ln.kind == "event_msg" and ln.type == "user_message" and _is_prompt_event(p):
            st.user_events[hash(_str(p.get("message")))] += 1
        elif ln.kind != "response_item":
            continue
        elif ln.type == "message" and p.get("role") == "user":
            st.user_items[hash(_user_key(p.get("content")))] += 1
        elif ln.type == "message" and p.get("role") == "assistant":
            st.agent_items[hash(_assistant_key(p.get("content")))] += 1
        elif ln.type == "reasoning":
            for text in _reasoning_texts(p):
                st.reasoning_items[hash(text)] += 1


def _step(st: _State, cur: _Cursor, ln: _Line) -> _Cursor:
    if ln.kind == "response_item":
        return _on_item(st, cur, ln)
    if ln.kind == "event_msg":
        return _on_event(st, cur, ln)
    if ln.kind == "turn_context":
        st.stats["turn_contexts"] += 1
        return replace(cur, open=None, model=_str(ln.payload.get("model")) or cur.model)
    if ln.kind == "compacted":
        st.stats["compactions"] += 1
        summary = ln.payload.get("message")
        if isinstance(summary, str) and summary.strip():
            st.entries.append(Message("user", ln.id, ln.timestamp, (TextBlock(summary),),
                                      ln.line, origin="compaction_summary"))
        return replace(cur, open=None)
    if ln.kind == "bad":
        st.warn(ln, "bad_payload", "a line whose payload is not an object was skipped")
    elif ln.kind == "session_meta":
        st.stats["session_meta"] += 1
    else:
        st.stats["meta_lines" if ln.kind in _META_LINES else "unknown_types"] += 1
    return cur


# Response items: model output, prompts and context, tool outputs.


def _on_item(st: _State, cur: _Cursor, ln: _Line) -> _Cursor:
    kind, role = ln.type, ln.payload.get("role")
    if kind == "message" and role == "assistant":
        return _add(st, cur, ln, _assistant_blocks(st, ln))
    if kind == "message" and role == "user":
        return _on_user_item(st, cur, ln)
    if kind == "reasoning":
        st.stats["reasoning_items"] += 1
        return _add(st, cur, ln, [HiddenBlock("thinking")])
    if kind in _ARGUMENTS:
        call = _tool_call(st, ln)
        cur = _add(st, cur, ln, [call])
        if kind in _NO_OUTPUT_ITEM and cur.open is not None:
            cur.open.results.append(_stand_in_result(st, call, ln))
        return cur
    if kind in _OUTPUTS:
        _on_output(st, ln)
    elif kind == "message":
        st.stats["context_messages"] += 1  # developer / system instructions
    else:
        st.stats["harness_items" if kind in _HARNESS_ITEMS else "unknown_types"] += 1
        return cur
    return replace(cur, open=None)


def _on_user_item(st: _State, cur: _Cursor, ln: _Line) -> _Cursor:
    content = ln.payload.get("content")
    text, blocks = _user_key(content), _input_blocks(content)
    if st.user_events[hash(text)] > 0:
        st.user_events[hash(text)] -= 1
        return _prompt(st, cur, ln, blocks)
    text = text.lstrip()
    if text.startswith(_SHELL_PREFIX):
        st.entries.append(Message("user", ln.id, ln.timestamp, blocks, ln.line, origin="bash"))
        st.stats["shell_commands"] += 1
    elif not st.user_events and blocks and not text.lower().startswith(_CONTEXT_PREFIXES):
        return _prompt(st, cur, ln, blocks)  # legacy: the file has no user_message events
    else:
        st.stats["context_messages"] += 1
    return replace(cur, open=None)


def _assistant_blocks(st: _State, ln: _Line) -> list[Block]:
    content = ln.payload.get("content")
    if not isinstance(content, list):
        st.warn(ln, "bad_item", "assistant message without a content list skipped")
        return []
    blocks: list[Block] = []
    for part in content:
        part = part if isinstance(part, dict) else {}
        text = part.get("text", part.get("refusal"))
        if part.get("type") in _ASSISTANT_TEXT and isinstance(text, str):
            blocks.append(TextBlock(text))
        else:  # an unknown part type is hidden, never shown raw
            blocks.append(HiddenBlock(_str(part.get("type")) or "unknown"))
    return blocks


def _tool_call(st: _State, ln: _Line) -> ToolCall:
    p, kind = ln.payload, ln.type
    call_id = _str(p.get("id")) if kind in _NO_OUTPUT_ITEM else _str(p.get("call_id"))
    call_id = call_id or _str(p.get("id"))
    if not call_id:
        if kind not in _NO_OUTPUT_ITEM:
            st.warn(ln, "missing_call_id", f"{kind} without call_id: its output cannot pair")
        call_id = ln.id
    raw = p.get(_ARGUMENTS[kind])
    arguments = _parse_arguments(raw) if _ARGUMENTS[kind] == "arguments" else raw
    st.stats["tool_calls"] += 1
    return ToolCall(call_id, _FIXED_NAMES.get(kind) or _str(p.get("name")) or "unknown",
                    {} if arguments is None else arguments, _str(p.get("namespace")) or None)


def _parse_arguments(raw: Any) -> Any:
    """A JSON-string argument parsed; an object kept; the raw string kept if it is not JSON."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw


def _stand_in_result(st: _State, call: ToolCall, ln: _Line) -> Message:
    image = ln.payload.get("result")
    if ln.type == "image_generation_call" and isinstance(image, str) and image:
        content: tuple[Block, ...] = (ImageBlock("image/png", image),)
    else:
        status = _str(ln.payload.get("status")) or "unknown"
        content = (TextBlock(f"[no output recorded: Codex stores no result for {call.name} "
                             f"calls; status {status}]"),)
    st.stats["synthesized_results"] += 1
    return Message("tool_result", f"{ln.id}:result", ln.timestamp, content, ln.line,
                   tool_call_id=call.id, tool_name=call.name)


def _on_output(st: _State, ln: _Line) -> None:
    call_id = _str(ln.payload.get("call_id"))
    if call_id not in st.calls:
        st.warn(ln, "orphan_output", f"{ln.type} for unknown call {call_id!r} skipped")
        return
    draft, name = st.calls[call_id]
    if ln.type == "tool_search_output":
        text = json.dumps(ln.payload.get("tools"), ensure_ascii=False)
        content, is_error = (TextBlock(text),), ln.payload.get("status") == "failed"
    else:
        content, is_error = _output_blocks(ln.payload.get("output"))
    draft.results.append(Message("tool_result", ln.id, ln.timestamp, content, ln.line,
                                 tool_call_id=call_id, tool_name=name, is_error=is_error))
    st.stats["tool_results"] += 1


def _output_blocks(output: Any) -> tuple[tuple[Block, ...], bool]:
    if isinstance(output, list):
        return _input_blocks(output), False
    if isinstance(output, dict):  # {"content": …, "success": bool} in some builds
        return _output_blocks(output.get("content"))[0], output.get("success") is False
    if not isinstance(output, str):
        return (TextBlock("" if output is None else json.dumps(output)),), False
    text, code = _unwrap_exec(output)
    return (TextBlock(text),), code not in (None, 0)


def _unwrap_exec(output: str) -> tuple[str, int | None]:
    """The text and exit code of a shell output: 0.40 wraps it as ``{"output", "metadata"}``,
    the exec tool of newer default models as ``{"chunk_id", …, "exit_code", "output"}``; other
    exec output starts with a header ("Process exited with code N" … "Output:")."""
    if output.startswith('{"output"') or output.startswith('{"chunk_id"'):
        try:
            value = json.loads(output, strict=False)
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("output"), str):
            meta = value.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else value.get("exit_code")
            return value["output"], code if type(code) is int else None
    header, marker, _ = output[:600].partition("\nOutput:")
    match = _EXIT_CODE.search(header) if marker else None
    return output, int(match.group(1)) if match else None


def _input_blocks(content: Any) -> tuple[Block, ...]:
    if isinstance(content, str):
        return (TextBlock(content),)
    blocks: list[Block] = []
    for part in content if isinstance(content, list) else ():
        part = part if isinstance(part, dict) else {}
        if part.get("type") in ("input_text", "output_text", "text") and "text" in part:
            blocks.append(TextBlock(_str(part["text"])))
        elif part.get("type") in ("input_image", "image") and _str(part.get("image_url")):
            blocks.append(_image(part["image_url"]))
    return tuple(blocks)


def _image(url: str) -> ImageBlock:
    if url.startswith("data:") and ";base64," in url[:100]:
        head, data = url.split(",", 1)
        return ImageBlock(head[5:].split(";", 1)[0] or "image/png", data)
    return ImageBlock(mimetypes.guess_type(url)[0] or "image/*", url=url)


# Events: echoes, usage, turn lifecycle, rollback.


def _on_event(st: _State, cur: _Cursor, ln: _Line) -> _Cursor:
    p, kind = ln.payload, ln.type
    if kind == "user_message":
        return _on_user_event(st, cur, ln)
    if kind == "agent_message":
        if _spend(st, st.agent_items, _str(p.get("message"))):
            return cur
        return _add(st, cur, ln, [TextBlock(_str(p.get("message")))], echo=True)
    if kind in ("agent_reasoning", "agent_reasoning_raw_content"):
        if _spend(st, st.reasoning_items, _str(p.get("text"))):
            return cur
        if cur.open is not None and cur.open.blocks[-1] == HiddenBlock("thinking"):
            return cur  # another part of the same reasoning
        return _add(st, cur, ln, [HiddenBlock("thinking")], echo=True)
    if kind == "token_count":
        return _on_usage(st, cur, ln)
    if kind == "thread_rolled_back":
        return _rollback(st, cur, ln)
    if kind == "task_started":
        st.stats[kind] += 1
        return replace(cur, open=None, in_task=True, prompted=False)
    if kind in ("task_complete", "turn_aborted"):
        st.stats[kind] += 1
        if cur.in_task:  # 0.40 has no task events and writes an aborted request's items later
            st.tentative.clear()
        aborted = cur.aborted or kind == "turn_aborted"
        return replace(cur, open=None, in_task=False, aborted=aborted)
    st.stats["lifecycle_events" if kind in _LIFECYCLE else "unknown_types"] += 1
    return cur


def _spend(st: _State, budget: Counter[int], text: str) -> bool:
    """True (and one use spent) when a response item carries this echo's text."""
    if budget[hash(text)] > 0:
        budget[hash(text)] -= 1
        st.stats["echoes_deduplicated"] += 1
        return True
    st.stats["echoes_used"] += 1
    return False


def _on_user_event(st: _State, cur: _Cursor, ln: _Line) -> _Cursor:
    p = ln.payload
    if not _is_prompt_event(p):
        st.stats["context_messages"] += 1
        return cur
    text = _str(p.get("message"))
    if st.user_items[hash(text)] > 0:  # the matching response item is (or was) the prompt
        st.user_items[hash(text)] -= 1
        return cur
    images = [u for u in [*(p.get("images") or ()), *(p.get("local_images") or ())] if _str(u)]
    st.stats["prompts_from_events"] += 1
    blocks = ((TextBlock(text),) if text else ()) + tuple(_image(u) for u in images)
    return _prompt(st, cur, ln, blocks)


def _on_usage(st: _State, cur: _Cursor, ln: _Line) -> _Cursor:
    info, cur = ln.payload.get("info"), replace(cur, open=None)
    if not isinstance(info, dict):
        st.stats["token_counts_without_info"] += 1
        return cur
    totals, last = info.get("total_token_usage"), info.get("last_token_usage")
    totals = totals if isinstance(totals, dict) else None
    if totals and cur.totals and totals.get("total_tokens") == cur.totals.get("total_tokens"):
        st.stats["token_count_duplicates"] += 1
        return cur
    if not isinstance(last, dict):
        before = cur.totals or {}
        last = {k: v - _int(before.get(k)) for k, v in (totals or {}).items() if isinstance(v, int)}
    # OpenAI fields overlap: input includes cached input, output includes reasoning.
    cached = _int(last.get("cached_input_tokens"))
    usage = Usage(input=max(_int(last.get("input_tokens")) - cached, 0), cache_read=cached,
                  output=_int(last.get("output_tokens")),
                  reasoning=_int(last.get("reasoning_output_tokens")))
    st.requests.append(usage)
    st.stats["usage_records"] += 1
    if cur.last is not None and cur.last.head.id not in st.usage:
        st.usage[cur.last.head.id] = usage
    else:
        st.pending.append(usage)
    return replace(cur, totals=totals or cur.totals)


# Turns and the active path.


def _add(st: _State, cur: _Cursor, ln: _Line, blocks: list[Block], echo: bool = False) -> _Cursor:
    """Append model output to the open assistant message, opening one if needed.

    A message made of echoes only stays tentative until its turn ends: in 0.40 the echo is
    written before its item, so at the growing end of a file the item may still be coming."""
    if not blocks:
        return cur
    if cur.open is None:
        draft = _Draft(Message("assistant", ln.id, ln.timestamp, (), ln.line, model=cur.model))
        st.entries.append(draft)
        if echo:
            st.tentative.append(draft)
        if st.pending:
            st.usage[draft.head.id] = st.pending.pop(0)
        cur = replace(cur, open=draft, last=draft)
    elif not echo and cur.open in st.tentative:
        st.tentative.remove(cur.open)
    cur.open.blocks.extend(blocks)
    for block in blocks:
        if isinstance(block, ToolCall):
            st.calls[block.id] = (cur.open, block.name)
    return cur


def _prompt(st: _State, cur: _Cursor, ln: _Line, blocks: tuple[Block, ...]) -> _Cursor:
    steering = cur.in_task and cur.prompted
    if not steering:
        _end_turn(st, cur)
        st.stats["unattached_usage"] += len(st.pending)
        st.pending.clear()
        cur = replace(cur, last=None, aborted=False, turn_at=len(st.entries))
    st.tentative.clear()
    origin = "steering" if steering else "typed"
    st.turn_starts.append(len(st.entries))
    st.entries.append(Message("user", ln.id, ln.timestamp, blocks, ln.line, origin=origin))
    st.stats["steering" if steering else "prompts"] += 1
    return replace(cur, open=None, prompted=cur.in_task)


def _end_turn(st: _State, cur: _Cursor) -> None:
    """Mark an aborted turn: its last response, and any response left with unanswered calls."""
    if not cur.aborted:
        return
    if cur.last is None:
        st.stats["aborted_turns_without_response"] += 1
        return
    st.aborted.add(cur.last.head.id)
    for entry in st.entries[cur.turn_at:]:
        if isinstance(entry, _Draft):
            answered = {r.tool_call_id for r in entry.results}
            if any(isinstance(b, ToolCall) and b.id not in answered for b in entry.blocks):
                st.aborted.add(entry.head.id)


def _rollback(st: _State, cur: _Cursor, ln: _Line) -> _Cursor:
    turns = ln.payload.get("num_turns")
    if not isinstance(turns, int) or turns < 1 or not st.turn_starts:
        st.warn(ln, "bad_rollback", f"rollback of {turns!r} turns ignored "
                                    f"({len(st.turn_starts)} turns on the path)")
        return cur
    _end_turn(st, cur)
    turns = min(turns, len(st.turn_starts))
    cut = st.turn_starts[-turns]
    st.stats["rolled_back_messages"] += sum(
        1 + len(e.results) if isinstance(e, _Draft) else 1 for e in st.entries[cut:])
    st.stats["rollbacks"] += 1
    del st.entries[cut:], st.turn_starts[-turns:]
    st.tentative.clear()
    return replace(cur, open=None, last=None, aborted=False, turn_at=cut)


def _flatten(st: _State) -> Iterator[Message]:
    for entry in st.entries:
        if isinstance(entry, Message):
            yield entry
            continue
        if entry.head.id in st.dropped:
            continue
        head, blocks = entry.head, tuple(entry.blocks)
        stop = "tool_use" if any(isinstance(b, ToolCall) for b in blocks) else "stop"
        yield replace(head, content=blocks, usage=st.usage.get(head.id),
                      stop_reason="aborted" if head.id in st.aborted else stop)
        yield from entry.results


# Session facts.


def _info(records: Sequence[Record], path: str, messages: tuple[Message, ...]) -> SessionInfo:
    meta = next((ln.payload for ln in _lines(records) if ln.kind == "session_meta"), {})
    cwd = _str(meta.get("cwd")) or next(
        (_str(ln.payload.get("cwd")) for ln in _lines(records) if ln.kind == "turn_context"), "")
    stamps = (_str(r.value.get("timestamp")) for r in records)
    reversed_stamps = (_str(r.value.get("timestamp")) for r in reversed(records))
    version = _str(meta.get("cli_version"))
    legacy = bool(records) and "payload" not in records[0].value
    spawn = meta.get("source")
    for key in ("subagent", "thread_spawn"):
        spawn = spawn.get(key) if isinstance(spawn, dict) else None
    parent = [(_str(spawn.get("parent_thread_id")) if isinstance(spawn, dict) else "", "subagent"),
              (_str(meta.get("forked_from_id")), "fork"),
              (_str(meta.get("parent_thread_id")), "subagent")]
    parent_id, parent_kind = next(((i, k) for i, k in parent if i), (None, None))
    return SessionInfo(
        source="codex",
        session_id=_str(meta.get("id")) or _id_from_path(path),
        path=path,
        cwd=cwd or None,
        title=_title(messages),
        created=_str(meta.get("timestamp")) or next((s for s in stamps if s), None),
        updated=next((s for s in reversed_stamps if s), None),
        format=f"codex-{version}" if version else ("codex-legacy" if legacy else "codex"),
        parent_id=parent_id,
        parent_kind=parent_kind,
    )


def _id_from_path(path: str) -> str:
    stem = PurePath(path).name.split(".", 1)[0]
    return stem[-36:] if stem.startswith("rollout-") and len(stem) > 36 else stem


def _title(messages: tuple[Message, ...]) -> str | None:
    """First line of the first typed prompt, ≤ 80 characters. The VS Code extension prepends an
    IDE-context block; when the request follows it under its heading, the block is skipped."""
    for message in messages:
        if message.role != "user" or message.origin != "typed":
            continue
        text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
        if text.startswith(_IDE_CONTEXT) and _IDE_REQUEST in text:
            text = text.split(_IDE_REQUEST, 1)[1]
        line = next((s.strip() for s in text.splitlines() if s.strip()), "")
        if line:
            return line[:80]
    return None


# Small helpers.


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _is_prompt_event(payload: dict[str, Any]) -> bool:
    # Some 0.3x builds also echoed injected context as user_message with a non-plain kind.
    return payload.get("kind") in (None, "plain") and isinstance(payload.get("message"), str)


def _user_key(content: Any) -> str:
    """A user item's text as its user_message event carries it (image labels left out)."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else ()
    texts = (_str(p.get("text")) for p in parts if isinstance(p, dict)
             and p.get("type") == "input_text")
    return "".join(t for t in texts if not _MEDIA_LABEL.fullmatch(t))


def _assistant_key(content: Any) -> str:
    parts = content if isinstance(content, list) else ()
    return "".join(_str(p.get("text")) for p in parts if isinstance(p, dict))


def _reasoning_texts(payload: dict[str, Any]) -> Iterator[str]:
    for key in ("summary", "content"):
        parts = payload.get(key)
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
