"""What the fake provider refuses: the rules the real Messages and Responses APIs apply to a
request body, each broken rule one precise reason (which message or item, which rule).

Pure functions over bytes and parsed values, so the unit tests hold every rule on its own. The
rules are the ones an agent or a proxy can break by cutting a conversation: pairing of calls and
results, their order, roles, reasoning kept with its call, tool definitions present whenever
tool calls are, required fields and strict JSON. Claude Code's ``role: "system"`` messages
inside ``messages`` are accepted: the agent sends them, so a provider that serves it does too.
"""

from __future__ import annotations

import json
from typing import Any


class Invalid(ValueError):
    """The body is not strict JSON (or not an object); the message says where."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise Invalid(f"duplicate key {key!r} in a JSON object")
        seen[key] = value
    return seen


def _no_constants(name: str) -> Any:
    raise Invalid(f"{name} is not JSON")


def strict_json(raw: bytes) -> dict[str, Any]:
    """The body as an object: UTF-8, no NaN/Infinity, no duplicate keys, an object on top."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        raise Invalid(f"body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") \
            from None
    if not isinstance(value, dict):
        raise Invalid(f"body is a JSON {type(value).__name__}, not an object")
    return value


# --- Anthropic Messages -------------------------------------------------------------------------

_USER_BLOCKS = {"text", "image", "document", "search_result", "tool_result", "container_upload"}
_ASSISTANT_BLOCKS = {"text", "thinking", "redacted_thinking", "tool_use", "server_tool_use",
                     "web_search_tool_result", "web_fetch_tool_result",
                     "code_execution_tool_result", "mcp_tool_use", "mcp_tool_result"}
MAX_BREAKPOINTS = 4


def anthropic_problems(body: dict[str, Any]) -> list[str]:
    """Every rule of ``POST /v1/messages`` the body breaks (empty when it is valid)."""
    problems = _required(body, {"model": str, "max_tokens": int, "messages": list})
    messages = body.get("messages")
    if not isinstance(messages, list):
        return problems
    if not messages:
        return [*problems, "messages: must not be empty"]
    tools = body.get("tools")
    names = {t.get("name") for t in tools if isinstance(t, dict)} if isinstance(tools, list) \
        else set()
    problems += _anthropic_shapes(messages)
    problems += _anthropic_pairing(messages, names, isinstance(tools, list) and bool(tools))
    marks = _count_breakpoints(tools) + _count_breakpoints(body.get("system")) \
        + _count_breakpoints(messages)
    if marks > MAX_BREAKPOINTS:
        problems.append(f"cache_control: {marks} breakpoints; at most {MAX_BREAKPOINTS} allowed")
    thinking = body.get("thinking")
    if (isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
            and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant"):
        problems.append(f"messages.{len(messages) - 1}: a final assistant message (prefill) "
                        "is not allowed with thinking on")
    return problems


def _required(body: dict[str, Any], fields: dict[str, type]) -> list[str]:
    problems = []
    for name, kind in fields.items():
        if name not in body:
            problems.append(f"{name}: field required")
        elif not isinstance(body[name], kind) or isinstance(body[name], bool):
            problems.append(f"{name}: must be {kind.__name__}, not {type(body[name]).__name__}")
    return problems


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _anthropic_shapes(messages: list[Any]) -> list[str]:
    problems = []
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict):
            problems.append(f"{where}: must be an object")
            continue
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant", "system"):
            problems.append(f"{where}.role: {role!r} is not user, assistant or system")
            continue
        if isinstance(content, str):
            if not content and role != "assistant":
                problems.append(f"{where}.content: text must be non-empty")
            continue
        if not isinstance(content, list) or not content:
            problems.append(f"{where}.content: must be a string or a non-empty list of blocks")
            continue
        allowed = _ASSISTANT_BLOCKS if role == "assistant" else _USER_BLOCKS
        if role == "system":
            allowed = {"text"}
        for k, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind not in allowed:
                problems.append(f"{where}.content.{k}: block type {kind!r} not allowed in a "
                                f"{role} message")
            elif kind == "text" and not (isinstance(block.get("text"), str) and block["text"]):
                problems.append(f"{where}.content.{k}: text blocks must be non-empty")
            elif kind == "thinking" and not block.get("signature"):
                problems.append(f"{where}.content.{k}: thinking block without its signature")
    return problems


def _anthropic_pairing(messages: list[Any], names: set[Any], have_tools: bool) -> list[str]:
    """tool_use ↔ tool_result: every call answered in the next message, results first, one
    per call, no result without its call, and the tools defined whenever either appears."""
    problems, seen_ids, used = [], set(), False
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        blocks = [b for b in _blocks(message) if isinstance(b, dict)]
        calls = [b for b in blocks if b.get("type") == "tool_use"]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        used = used or bool(calls or results)
        for call in calls:
            if call.get("id") in seen_ids:
                problems.append(f"messages.{index}: tool_use id {call.get('id')!r} used twice")
            seen_ids.add(call.get("id"))
            if have_tools and call.get("name") not in names:
                problems.append(f"messages.{index}: tool_use of {call.get('name')!r}, a tool "
                                "not in tools")
        if results:
            problems += _results_answer(messages, index, blocks, results)
        if calls:
            problems += _calls_answered(messages, index, calls)
    if used and not have_tools:
        problems.append("tools: the messages hold tool_use/tool_result blocks but no tools "
                        "are defined")
    return problems


def _results_answer(messages: list[Any], index: int, blocks: list[dict[str, Any]],
                    results: list[dict[str, Any]]) -> list[str]:
    problems = []
    if messages[index].get("role") != "user":
        problems.append(f"messages.{index}: tool_result blocks must be in a user message")
    first_other = next((k for k, b in enumerate(blocks) if b.get("type") != "tool_result"),
                       len(blocks))
    if any(b.get("type") == "tool_result" for b in blocks[first_other:]):
        problems.append(f"messages.{index}: tool_result blocks must come first in the message")
    previous = messages[index - 1] if index > 0 and isinstance(messages[index - 1], dict) \
        else {}
    offered = {b.get("id") for b in _blocks(previous)
               if isinstance(b, dict) and b.get("type") == "tool_use"}
    answered: set[Any] = set()
    for result in results:
        call_id = result.get("tool_use_id")
        if call_id not in offered:
            problems.append(f"messages.{index}: tool_result for {call_id!r} has no tool_use "
                            "in the previous message")
        if call_id in answered:
            problems.append(f"messages.{index}: two tool_result blocks for {call_id!r}")
        answered.add(call_id)
    return problems


def _calls_answered(messages: list[Any], index: int, calls: list[dict[str, Any]]) -> list[str]:
    following = messages[index + 1] if index + 1 < len(messages) else None
    if following is None:
        return [f"messages.{index}: tool_use {c.get('id')!r} is the last message; its "
                "tool_result must follow" for c in calls][:1]
    answered = {b.get("tool_use_id") for b in _blocks(following)
                if isinstance(b, dict) and b.get("type") == "tool_result"}
    return [f"messages.{index}: tool_use {c.get('id')!r} has no tool_result in the next "
            "message" for c in calls if c.get("id") not in answered]


def _count_breakpoints(value: Any) -> int:
    if isinstance(value, list):
        return sum(_count_breakpoints(v) for v in value)
    if isinstance(value, dict):
        own = 1 if isinstance(value.get("cache_control"), dict) else 0
        return own + sum(_count_breakpoints(v) for k, v in value.items()
                         if k in ("content",) or isinstance(v, list))
    return 0


# --- OpenAI Responses ---------------------------------------------------------------------------

_CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output",
          "local_shell_call": "function_call_output"}
_OUTPUTS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
# Items the Responses API takes besides messages, calls and outputs (the last two are the ones
# Codex's default model sends, with its tools and settings in them).
_OTHER_ITEMS = {"reasoning", "web_search_call", "compaction", "item_reference",
                "additional_tools", "configuration_update"}
_ROLES = {"user", "assistant", "system", "developer"}
_PARTS = {"input_text", "output_text", "input_image", "input_file", "refusal"}


def responses_problems(body: dict[str, Any]) -> list[str]:
    """Every rule of ``POST /v1/responses`` the body breaks (empty when it is valid)."""
    problems = _required(body, {"model": str})
    items = body.get("input")
    if isinstance(items, str):
        return problems
    if not isinstance(items, list):
        return [*problems, "input: field required (a string or a list of items)"]
    problems += _responses_shapes(items)
    problems += _responses_pairing(items)
    problems += _responses_reasoning(items)
    problems += _responses_tools(body, items)
    return problems


def _responses_shapes(items: list[Any]) -> list[str]:
    problems = []
    for index, item in enumerate(items):
        where = f"input.{index}"
        if not isinstance(item, dict):
            problems.append(f"{where}: must be an object")
            continue
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in _ROLES:
                problems.append(f"{where}.role: {item.get('role')!r} is not one of "
                                f"{', '.join(sorted(_ROLES))}")
            content = item.get("content")
            if isinstance(content, list):
                for k, part in enumerate(content):
                    ptype = part.get("type") if isinstance(part, dict) else None
                    if ptype not in _PARTS:
                        problems.append(f"{where}.content.{k}: part type {ptype!r} unknown")
            elif not isinstance(content, str):
                problems.append(f"{where}.content: must be a string or a list of parts")
        elif kind in _CALLS:
            for name in ("call_id",) + (("name",) if kind != "local_shell_call" else ()):
                if not isinstance(item.get(name), str):
                    problems.append(f"{where}: {kind} needs a string {name}")
            if kind == "function_call":
                problems += _json_arguments(where, item.get("arguments"))
        elif kind in _OUTPUTS:
            if not isinstance(item.get("call_id"), str):
                problems.append(f"{where}: {kind} needs a string call_id")
            if "output" not in item:
                problems.append(f"{where}: {kind} needs its output")
        elif kind not in _OTHER_ITEMS:
            problems.append(f"{where}.type: {kind!r} is not an input item type")
    return problems


def _json_arguments(where: str, arguments: Any) -> list[str]:
    if not isinstance(arguments, str):
        return [f"{where}.arguments: must be a JSON string"]
    try:
        strict_json(arguments.encode())
    except Invalid as exc:
        return [f"{where}.arguments: {exc}"]
    return []


def _responses_pairing(items: list[Any]) -> list[str]:
    """Every call has one output after it with the same call_id, and every output a call."""
    problems, open_calls, answered = [], {}, set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind, call_id = item.get("type"), item.get("call_id")
        if kind in _CALLS:
            open_calls[call_id] = (index, kind)
        elif kind in _OUTPUTS:
            if call_id not in open_calls:
                problems.append(f"input.{index}: no tool call found for {kind} with call_id "
                                f"{call_id!r}")
            elif call_id in answered:
                problems.append(f"input.{index}: a second output for call_id {call_id!r}")
            answered.add(call_id)
    for call_id, (index, kind) in open_calls.items():
        if call_id not in answered:
            problems.append(f"input.{index}: no tool output found for {kind} with call_id "
                            f"{call_id!r}")
    return problems


def _responses_reasoning(items: list[Any]) -> list[str]:
    """A reasoning item must be followed by the item it produced (a call or a message), not
    left on its own; a stateless request carries it with its encrypted content."""
    problems = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") != "reasoning":
            continue
        following = items[index + 1] if index + 1 < len(items) else None
        kind = following.get("type", "message") if isinstance(following, dict) else None
        produced = kind in _CALLS or (kind == "message" and following.get("role") == "assistant")
        if not produced:
            problems.append(f"input.{index}: reasoning item {item.get('id')!r} was provided "
                            "without its required following item")
        if not isinstance(item.get("summary"), list):
            problems.append(f"input.{index}: reasoning item needs a summary list")
    return problems


def tool_names(body: dict[str, Any]) -> set[str]:
    """The tools a Responses request defines: ``tools`` and any ``additional_tools`` item,
    namespaces opened."""
    found: set[str] = set()
    sources = [body.get("tools")] + [item.get("tools") for item in body.get("input") or ()
                                     if isinstance(item, dict)
                                     and item.get("type") == "additional_tools"]
    stack = [tool for source in sources if isinstance(source, list) for tool in source]
    while stack:
        tool = stack.pop()
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            stack += tool.get("tools") or []
        elif isinstance(tool.get("name"), str):
            found.add(tool["name"])
        elif tool.get("type") == "local_shell":
            found.add("local_shell")
    return found


def _responses_tools(body: dict[str, Any], items: list[Any]) -> list[str]:
    names = tool_names(body)
    problems = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") not in _CALLS:
            continue
        name = item.get("name", "local_shell")
        if name not in names:
            problems.append(f"input.{index}: {item['type']} of {name!r}, but no tool of that "
                            "name is defined (tools or additional_tools)")
    return problems


# --- Gemini generateContent ---------------------------------------------------------------------

_PART_DATA = ("text", "inlineData", "fileData", "functionCall", "functionResponse",
              "executableCode", "codeExecutionResult")


def thought_signature(call: dict[str, Any]) -> str:
    """The signature the fake gives a function call it makes, from the call itself, so a later
    request can be checked without any state: a call sent back must carry exactly this one."""
    import base64
    import hashlib

    seed = json.dumps([call.get("name"), call.get("args")], sort_keys=True).encode()
    return base64.b64encode(b"e2e-signature:" + hashlib.sha1(seed).digest()).decode()


def gemini_tool_names(body: dict[str, Any]) -> set[str]:
    tools = body.get("tools")
    return {d.get("name") for tool in tools if isinstance(tool, dict)
            for d in tool.get("functionDeclarations") or () if isinstance(d, dict)} \
        if isinstance(tools, list) else set()


def gemini_problems(body: dict[str, Any]) -> list[str]:
    """Every rule of ``generateContent`` the body breaks: non-empty ``contents`` of ``user`` and
    ``model`` turns with non-empty parts of one kind each; no two model turns in a row (user
    turns may follow each other: Gemini CLI sends them so); every model turn's function calls
    answered, one response each, in the very next turn and nowhere else; the calls' tools
    declared; and each call the fake made sent back with its thought signature on its part."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return ["contents: a non-empty list of turns is required"]
    problems: list[str] = []
    names = gemini_tool_names(body)
    for index, turn in enumerate(contents):
        where = f"contents.{index}"
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "model"):
            problems.append(f"{where}: a turn needs role user or model")
            continue
        parts = turn.get("parts")
        if not isinstance(parts, list) or not parts:
            problems.append(f"{where}.parts: must be a non-empty list")
            continue
        if index and turn["role"] == "model" and _role(contents[index - 1]) == "model":
            problems.append(f"{where}: two model turns in a row")
        for k, part in enumerate(parts):
            kinds = [key for key in _PART_DATA if isinstance(part, dict) and key in part]
            if len(kinds) != 1:
                problems.append(f"{where}.parts.{k}: a part holds exactly one of "
                                f"{', '.join(_PART_DATA)} (found {kinds or 'none'})")
                continue
            call = part.get("functionCall")
            if isinstance(call, dict):
                if turn["role"] != "model":
                    problems.append(f"{where}.parts.{k}: functionCall outside a model turn")
                if names and call.get("name") not in names:
                    problems.append(f"{where}.parts.{k}: functionCall of {call.get('name')!r}, "
                                    "a function not declared in tools")
                if part.get("thoughtSignature") != thought_signature(call):
                    problems.append(f"{where}.parts.{k}: functionCall without the thought "
                                    "signature it was made with")
            if "functionResponse" in part and turn["role"] != "user":
                problems.append(f"{where}.parts.{k}: functionResponse outside a user turn")
        problems += _gemini_pairing(contents, index)
    return problems


def _role(turn: Any) -> Any:
    return turn.get("role") if isinstance(turn, dict) else None


def _function_parts(turn: Any, key: str) -> list[dict[str, Any]]:
    parts = turn.get("parts") if isinstance(turn, dict) else None
    return [p[key] for p in parts or () if isinstance(p, dict) and isinstance(p.get(key), dict)]


def _gemini_pairing(contents: list[Any], index: int) -> list[str]:
    calls = _function_parts(contents[index], "functionCall")
    answers = _function_parts(contents[index], "functionResponse")
    problems = []
    if calls:
        following = _function_parts(contents[index + 1], "functionResponse") \
            if index + 1 < len(contents) else []
        if [(c.get("id"), c.get("name")) for c in calls] != \
                [(r.get("id"), r.get("name")) for r in following]:
            problems.append(f"contents.{index}: {len(calls)} function calls, answered by "
                            f"{len(following)} responses in the next turn (ids and names must "
                            "match, in order)")
    if answers:
        before = _function_parts(contents[index - 1], "functionCall") if index else []
        if not before:
            problems.append(f"contents.{index}: function responses with no function call in "
                            "the turn before")
    return problems
