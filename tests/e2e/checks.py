"""What a run's recorded requests show: whether paging happened, whether any request lost the
agent's tools or instructions, and whether every cache break was a cut advance.

A **cache break** is a task request whose conversation does not begin with the previous task
request's conversation (the bytes the provider caches, ``cache_control`` markers aside, which
agents move on purpose). A break is a **cut advance** when the request carries the paging
notice and what it dropped is the oldest part of the previous window: the rest of that window
follows the notice unchanged, then the new messages. The one change a kept message may show is
a distilled stub in place of one of its tool outputs: edits held back while the prefix was
cached land with the re-write the cut pays anyway (docs/distillation.md, "Under prompt
caching"). Changes of ``tools`` or ``system`` are the agent's own (Claude Code adds its MCP
tools when the server connects) and are counted apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from context_paging.paging.distill.render import MARKER as DISTILLED
from context_paging.paging.notice import HEADER

from tests.e2e import validate
from tests.e2e.provider import Exchange

# the notice's first line, as the proxy writes it (JSON-escaped: it is looked for in bodies)
NOTICE = json.dumps(HEADER)[1:-1]
FIRST_OUTPUT = b"E2E STEP 01 OF 18"
BILLING = "x-anthropic-billing-header"


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def conversation(exchange: Exchange) -> list[str]:
    body = exchange.body or {}
    field = {"anthropic": "messages", "gemini": "contents"}.get(exchange.api or "", "input")
    return [json.dumps(_strip(m), sort_keys=True) for m in body.get(field) or ()]


def has_notice(exchange: Exchange) -> bool:
    """Whether the request carries the paging notice anywhere (conversation, system or
    instructions; nothing else in the task's requests quotes it)."""
    return NOTICE.encode() in exchange.request.body or HEADER.encode() in exchange.request.body


def paged(exchanges: list[Exchange]) -> list[int]:
    """The task requests whose window is not the whole conversation."""
    return [e.number for e in exchanges
            if has_notice(e) or (e.done_steps >= 2 and FIRST_OUTPUT not in e.request.body)]


@dataclass(frozen=True)
class Break:
    number: int
    cut_advance: bool
    detail: str


def cache_breaks(exchanges: list[Exchange]) -> list[Break]:
    out = []
    for previous, current in zip(exchanges, exchanges[1:], strict=False):
        before, after = conversation(previous), conversation(current)
        if after[:len(before)] == before:
            continue
        advance, detail = _cut_advance(before, after, has_notice(current))
        out.append(Break(current.number, advance, detail))
    return out


def _cut_advance(before: list[str], after: list[str], notice: bool) -> tuple[bool, str]:
    """A cut advance drops messages and changes nothing else: what stays keeps its order, the
    newest part of the previous window stays whole, and the only new messages are the notice
    (with what travels in it) and the ones appended at the end, which name no tool call of the
    previous window (one that does is that message changed). A message that took the notice in
    (Anthropic puts it in the first kept user message) counts as kept when nothing else about
    it changed, and so does one whose tool output became a distilled stub (a held edit landing
    with the cut)."""
    if not notice:
        return False, "messages left the window but no paging notice took their place"
    carriers = {_without_notice(m): i for i, m in enumerate(after) if NOTICE in m}
    carriers |= {_stub_key(_call_ids(m)): i for i, m in enumerate(after)
                 if DISTILLED in m and _call_ids(m)}
    place = _places(before, after, carriers)
    gone = [i for i, p in enumerate(place) if p is None]
    if not gone:
        return False, "nothing left the window, yet the conversation changed"
    if any(p is None for p in place[gone[-1] + 1:]):
        return False, "a recent message left while an older one stayed"
    kept = [p for p in place if p is not None]
    if kept != sorted(kept):
        return False, "the kept messages changed their order"
    known = set(kept)
    for index in range(kept[-1] + 1 if kept else 0):
        if index not in known and NOTICE not in after[index]:
            return False, (f"message {index} is neither the notice nor a message of the previous "
                           f"window: {after[index][:160]}")
    old_ids = set().union(*(_call_ids(m) for m in before))
    for index in range(kept[-1] + 1 if kept else 0, len(after)):
        reused = _call_ids(after[index]) & old_ids if index not in known else set()
        if reused:
            return False, (f"message {index} changed: it holds tool call {sorted(reused)[0]!r} "
                           "of the previous request with other bytes")
    return True, f"{len(gone)} of the previous window's {len(before)} messages left"


def _places(before: list[str], after: list[str], carriers: dict[str, int]) -> list[int | None]:
    """Where each message of ``before`` stands in ``after``, or None when it left. Equal
    messages (Claude Code repeats the same reminder) are matched in order, each occurrence
    once: the n-th copy that stays is the n-th copy in ``after``."""
    where: dict[str, list[int]] = {}
    for index, message in enumerate(after):
        where.setdefault(message, []).append(index)
    taken: dict[str, int] = {}
    place: list[int | None] = []
    for message in before:
        copies = where.get(message, [])
        # skip the copies a kept message before this one already stands at or after
        floor = max((p for p in place if p is not None), default=-1)
        n = taken.get(message, 0)
        while n < len(copies) and copies[n] <= floor:
            n += 1
        if n < len(copies):
            place.append(copies[n])
            taken[message] = n + 1
        else:
            place.append(carriers.get(_without_notice(message),
                                      carriers.get(_stubbed(message, after))))
    return place


def _stubbed(message: str, after: list[str]) -> str:
    """The key that pairs a message with its copy in ``after`` whose tool output became a
    distilled stub: the call ids it holds, when exactly one message of ``after`` holds them
    with more distilled outputs than ``message`` has."""
    ids = _call_ids(message)
    if not ids:
        return ""
    role = json.loads(message).get("role")
    copies = [m for m in after if _call_ids(m) == ids and json.loads(m).get("role") == role
              and m.count(DISTILLED) > message.count(DISTILLED)]
    return _stub_key(ids) if len(copies) == 1 else ""


def _stub_key(ids: set[str]) -> str:
    return "stubbed " + " ".join(sorted(ids))


def _call_ids(message: str) -> set[str]:
    """The tool call ids a message makes or answers (Anthropic, Responses and Gemini)."""
    value = json.loads(message)
    found = {value.get("call_id")} if isinstance(value, dict) else set()
    for part in value.get("parts") or () if isinstance(value, dict) else ():
        for key in ("functionCall", "functionResponse"):
            if isinstance(part, dict) and isinstance(part.get(key), dict):
                found.add(part[key].get("id"))
    content = value.get("content") if isinstance(value, dict) else None
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict):
            found |= {block.get("id") if block.get("type") == "tool_use" else None,
                      block.get("tool_use_id")}
    return {i for i in found if isinstance(i, str)}


def _without_notice(message: str) -> str:
    """A message without the notice and the pinned context that travels with it."""
    value = json.loads(message)
    for key in ("content", "parts"):  # Gemini's pinned context is its <session_context>
        content = value.get(key) if isinstance(value, dict) else None
        if isinstance(content, list):
            value[key] = [b for b in content if not (
                isinstance(b, dict) and isinstance(b.get("text"), str)
                and (HEADER in b["text"] or b["text"].lstrip().startswith(
                    ("<system-reminder>", "<session_context>"))))]
    return json.dumps(value, sort_keys=True)


def resident(exchange: Exchange) -> dict[str, set[str]]:
    """The agent's standing input that travels inside the conversation array, where a proxy
    could drop it: tools defined in ``additional_tools`` items, and instruction texts
    (``system``/``developer`` messages, environment context, the ``<system-reminder>`` context
    of Claude Code's first message; the top-level ``system`` and ``instructions`` too). The
    top-level ``tools`` are the agent's own, forwarded as received: Claude Code drops its
    ``WaitForMcpServers`` tool once its MCP servers are up."""
    body = exchange.body or {}
    if exchange.api == "gemini":
        instruction = body.get("systemInstruction")
        texts = {p.get("text") for p in (instruction or {}).get("parts") or ()
                 if isinstance(p, dict)} if isinstance(instruction, dict) else set()
        for turn in body.get("contents") or ():
            texts |= {p.get("text") for p in turn.get("parts") or () if isinstance(p, dict)
                      and str(p.get("text", "")).lstrip().startswith("<session_context>")}
        return {"tools": set(), "instructions": {t for t in texts if t}}
    if exchange.api == "anthropic":
        system = body.get("system")
        texts = {b.get("text", "") for b in system if isinstance(b, dict)} \
            if isinstance(system, list) else {system} if isinstance(system, str) else set()
        texts = {t for t in texts if not t.startswith(BILLING)}
        for message in body.get("messages") or ():
            if message.get("role") == "system":
                texts.add(_text_of(message.get("content")))
        first = (body.get("messages") or [{}])[0]
        texts |= {b.get("text") for b in first.get("content") or ()
                  if isinstance(first.get("content"), list) and isinstance(b, dict)
                  and str(b.get("text", "")).lstrip().startswith("<system-reminder>")}
        return {"tools": set(), "instructions": {t for t in texts if t}}
    texts = {body["instructions"]} if body.get("instructions") else set()
    for item in body.get("input") or ():
        role = item.get("role") if isinstance(item, dict) else None
        text = _text_of(item.get("content")) if role else ""
        if role in ("developer", "system") or text.lstrip().startswith("<environment_context>"):
            texts.add(text)
    inside = {k: v for k, v in body.items() if k != "tools"}
    return {"tools": validate.tool_names(inside), "instructions": {t for t in texts if t}}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or () if isinstance(b, dict))


def lost_resident(exchanges: list[Exchange]) -> dict[int, list[str]]:
    """Per task request: the tools and instructions of the first request it lacks, and
    whether it came without a shell tool the model could call."""
    lost: dict[int, list[str]] = {}
    first = resident(exchanges[0]) if exchanges else {}
    for exchange in exchanges:
        now = resident(exchange)
        for kind in ("tools", "instructions"):
            gone = first[kind] - now[kind]
            if gone:
                sample = sorted(gone)[0].replace("\n", " ")[:80]
                lost.setdefault(exchange.number, []).append(
                    f"request {exchange.number} lost {len(gone)} {kind} of the first request, "
                    f"e.g. {sample!r}")
        if exchange.answer == "no-tools":
            lost.setdefault(exchange.number, []).append(
                f"request {exchange.number} came with no shell tool the model could call")
    return lost


def repeated_context(exchanges: list[Exchange]) -> list[str]:
    """The task requests that send a ``<system-reminder>`` block (Claude Code's pinned
    project context) more than once, in one line."""
    numbers, example = [], ""
    for exchange in exchanges:
        blocks = [b.get("text") for m in (exchange.body or {}).get("messages") or ()
                  if isinstance(m.get("content"), list) for b in m["content"]
                  if isinstance(b, dict) and str(b.get("text", "")).lstrip()
                  .startswith("<system-reminder>")]
        twice = sorted({b for b in blocks if blocks.count(b) > 1})
        if twice:
            numbers.append(exchange.number)
            example = example or f"{len(twice)} blocks, e.g. {twice[0][:60]!r}"
    if not numbers:
        return []
    return [f"{len(numbers)} requests (from request {numbers[0]}) send pinned context twice: "
            f"{example}"]


def completed(exchanges: list[Exchange]) -> bool:
    return any(e.answer == "final" for e in exchanges)


def sent_bytes(exchanges: list[Exchange]) -> int:
    return sum(len(e.request.body) for e in exchanges)


def session_files(home: Any) -> list[Any]:
    """The agent's own session files under its HOME: Claude Code's, Codex's, Pi's and Gemini
    CLI's JSON Lines, OpenCode's SQLite store (with its write-ahead log)."""
    folders = (home / ".claude" / "projects", home / ".codex" / "sessions",
               home / ".pi" / "agent" / "sessions", home / ".gemini" / "tmp")
    found = [p for folder in folders if folder.is_dir() for p in folder.rglob("*.jsonl")]
    store = home / ".local" / "share" / "opencode"
    return found + (sorted(store.glob("opencode.db*")) if store.is_dir() else [])


def inband_problems(exchanges: list[Exchange], marker: str) -> list[str]:
    """What is wrong with the recovery the proxy answered in band: the model's call (answered
    ``recover``) must be followed by the proxy's follow-up, whose conversation ends with the
    call and its result holding ``marker``, and the next task request must carry that exchange
    in place."""
    called = [i for i, e in enumerate(exchanges) if e.answer == "recover"]
    if len(called) != 1:
        return [f"the scripted model called the offered search_history {len(called)} times, "
                "not once"]
    at = called[0]
    if at + 2 >= len(exchanges):
        return ["no follow-up and next request after the recovery call"]
    follow, after = exchanges[at + 1], exchanges[at + 2]
    hidden = conversation(follow)[-2:]
    problems = []
    if len(hidden) < 2 or marker not in hidden[1] or "search_history" not in hidden[0]:
        problems.append(f"request {follow.number} is not the proxy's follow-up with the marker "
                        "in the tool result")
    mine = conversation(after)
    if not any(mine[i:i + 2] == hidden for i in range(len(mine) - 1)):
        problems.append(f"request {after.number} does not carry the hidden exchange in place")
    return problems
