"""The validating fake provider: Anthropic Messages, OpenAI Responses and Gemini
generateContent, streamed or not, on 127.0.0.1, driving the scripted task (tests/e2e/task.py).

Every request is recorded with its verdict. An invalid one is answered 400 with the reasons, as
the real APIs answer, so an agent that gets one stops and the run shows it. A valid task
request gets the next step's shell call in the agent's own tool shape (Codex's default model
also gets the ``reasoning`` item that comes with each call); after the last step, the final
answer. A task request without a shell tool gets a plain answer saying so and is marked: the
model would have lost its tools. Requests outside the task (titles, probes) get a short text.
WebSocket upgrades are refused, so Codex falls back to HTTPS as it does with any provider that
has none. Gemini calls carry a thought signature made from the call, which every later request
must send back on that call's part (tests/e2e/validate.py); Gemini CLI's routing call (JSON
mode, no tools) gets the score it asks for.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from context_paging.paging.notice import HEADER

from tests.e2e import task, validate
from tests.fake_provider import (
    Recorded,
    Reply,
    anthropic_message,
    anthropic_stream,
    gemini_reply,
    received,
    responses_items_body,
    responses_items_stream,
)


@dataclass(frozen=True)
class Exchange:
    """One request, what the provider made of it, and what it answered."""

    number: int
    request: Recorded
    api: str | None  # "anthropic" | "responses" | "gemini" | None (another path)
    problems: tuple[str, ...]
    in_task: bool
    done_steps: int
    answer: str  # "call" | "final" | "text" | "invalid" | "other" | "no-tools"
    body: dict[str, Any] | None = None

    @property
    def where(self) -> str:
        return f"request {self.number} ({self.request.method} {self.request.path})"


def _api(method: str, path: str) -> str | None:
    if method != "POST":
        return None
    if path.endswith("/v1/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith((":generateContent", ":streamGenerateContent")):
        return "gemini"
    return None


@dataclass
class ScriptedProvider:
    """The ASGI app; ``exchanges`` holds every request in arrival order."""

    exchanges: list[Exchange] = field(default_factory=list)
    bypassed: int = 0  # requests that reached a second fake instead of the proxy
    # The model pages back once it sees the notice: it calls the recovery tool the request
    # offers (the proxy's own ``search_history``) for an evicted marker, once in the run.
    recover: bool = False
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})  # refused: use HTTPS
            return
        if scope["type"] != "http":
            return
        reply = self.answer(await received(scope, receive))
        await send({"type": "http.response.start", "status": reply.status,
                    "headers": [(k.encode(), v.encode()) for k, v in reply.headers]})
        for chunk in reply.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    def answer(self, request: Recorded) -> Reply:
        """Judge, record and answer one request."""
        api = _api(request.method, request.path)
        with self._lock:
            number = next(self._ids)
        if api is None:
            self._record(number, request, None, (), "other")
            return _other(request)
        in_task = task.in_conversation(request.body)
        try:
            body = validate.strict_json(request.body)
        except validate.Invalid as exc:
            self._record(number, request, api, (str(exc),), "invalid", None, in_task)
            return _refusal(api, [str(exc)])
        if in_task and (_wants_json(body) or _title_call(body)):  # a title or routing call
            in_task = False
        check = {"anthropic": validate.anthropic_problems, "gemini": validate.gemini_problems,
                 "responses": validate.responses_problems}[api]
        problems = tuple(check(body))
        done = task.done_steps(body) if in_task else 0
        if problems:
            self._record(number, request, api, problems, "invalid", body, in_task, done)
            return _refusal(api, list(problems))
        if (in_task and self.recover and _wants_recovery(api, body, request.body)
                and not any(e.answer == "recover" for e in self.exchanges)):
            reply, answer = _recovery_call(api, body, number, request.path), "recover"
        else:
            reply, answer = (_task_reply(api, body, done, number, request.path) if in_task
                             else (_text(api, body, _side_text(body), number, request.path),
                                   "text"))
        self._record(number, request, api, (), answer, body, in_task, done)
        return reply

    def _record(self, number: int, request: Recorded, api: str | None,
                problems: tuple[str, ...], answer: str, body: dict[str, Any] | None = None,
                in_task: bool = False, done: int = 0) -> None:
        exchange = Exchange(number, request, api, problems, in_task, done, answer, body)
        with self._lock:
            self.exchanges.append(exchange)

    def task_exchanges(self) -> list[Exchange]:
        return sorted((e for e in self.exchanges if e.in_task), key=lambda e: e.number)

    def invalid(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.problems]


RECOVERY_TOOL = "search_history"
OFFERED = ("search_history", "read_context_output", "recall")  # the proxy's in-band tools
NOTICE_BYTES = json.dumps(HEADER)[1:-1].encode()


def _wants_recovery(api: str, body: dict[str, Any], raw: bytes) -> bool:
    """The request carries the notice and offers ``search_history``, and the model has not
    called it yet in this conversation."""
    if NOTICE_BYTES not in raw and HEADER.encode() not in raw:
        return False
    if api == "gemini":
        names = validate.gemini_tool_names(body)
        called = any(isinstance(p, dict) and (p.get("functionCall") or {}).get("name")
                     == RECOVERY_TOOL for c in body.get("contents") or ()
                     for p in (c.get("parts") or () if isinstance(c, dict) else ()))
    elif api == "anthropic":
        names = {t.get("name") for t in body.get("tools") or () if isinstance(t, dict)}
        called = any(isinstance(b, dict) and b.get("type") == "tool_use"
                     and b.get("name") == RECOVERY_TOOL
                     for m in body.get("messages") or ()
                     for b in (m.get("content") if isinstance(m.get("content"), list) else ()))
    else:
        names = validate.tool_names(body)
        called = any(isinstance(i, dict) and i.get("type") == "function_call"
                     and i.get("name") == RECOVERY_TOOL for i in body.get("input") or ())
    return RECOVERY_TOOL in names and not called


def _recovery_call(api: str, body: dict[str, Any], number: int, path: str = "") -> Reply:
    query = task.evicted_markers(1)[0]
    if api == "gemini":
        call = {"name": RECOVERY_TOOL, "args": {"query": query}}
        return _gemini(body, [{"text": "Step 1 left my window; looking it up."},
                              {"functionCall": call,
                               "thoughtSignature": validate.thought_signature(call)}], path)
    if api == "anthropic":
        return _anthropic(body, [
            {"type": "text", "text": "Step 1 left my window; looking it up."},
            {"type": "tool_use", "id": f"toolu_rec{number:04d}", "name": RECOVERY_TOOL,
             "input": {"query": query}}], "tool_use", number)
    item = {"type": "function_call", "id": f"fc_rec{number:04d}",
            "call_id": f"call_rec{number:04d}", "name": RECOVERY_TOOL,
            "arguments": json.dumps({"query": query}), "status": "completed"}
    return _responses(body, [item], number)


def _wants_json(body: dict[str, Any]) -> bool:
    config = body.get("output_config")
    form = config.get("format") if isinstance(config, dict) else None
    generation = body.get("generationConfig")
    return (isinstance(form, dict) and form.get("type") == "json_schema") or (
        isinstance(generation, dict) and "responseJsonSchema" in generation)


def _title_call(body: dict[str, Any]) -> bool:
    """OpenCode's title request: its system prompt (or instructions) makes it a title
    generator, with no tools of its own (the proxy may have offered its recovery tools)."""
    items = body.get("input") if isinstance(body.get("input"), list) else []
    prompt = json.dumps([body.get("system"), body.get("instructions"), items[:1]])[:600]
    names = validate.tool_names(body) | {t.get("name") for t in body.get("tools") or ()
                                         if isinstance(t, dict)}
    return not names - set(OFFERED) - {None} and "title generator" in prompt


def _side_text(body: dict[str, Any]) -> str:
    generation = body.get("generationConfig")
    if isinstance(generation, dict) and "responseJsonSchema" in generation:
        return json.dumps({"complexity_reasoning": "a scripted task", "complexity_score": 10})
    return json.dumps({"title": "Scripted end-to-end task"}) if _wants_json(body) else "ok"


def _tokens(body: dict[str, Any]) -> int:
    return len(json.dumps(body)) // 4


def _task_reply(api: str, body: dict[str, Any], done: int, number: int,
                path: str = "") -> tuple[Reply, str]:
    if done >= task.STEPS:
        return _text(api, body, task.final_answer(), number, path), "final"
    cmd = task.command(done + 1)
    if api == "gemini":
        call = task.gemini_call(validate.gemini_tool_names(body), cmd)
        if call is None:
            return _text(api, body, "There is no shell tool in this request.", number, path), \
                "no-tools"
        part = {"functionCall": call, "thoughtSignature": validate.thought_signature(call)}
        return _gemini(body, [{"text": f"Running {cmd}."}, part], path), "call"
    if api == "anthropic":
        names = {t.get("name") for t in body.get("tools") or () if isinstance(t, dict)}
        call = task.anthropic_call(names, cmd)
        if call is None:
            return _text(api, body, "There is no shell tool in this request.", number), \
                "no-tools"
        block = {"type": "tool_use", "id": f"toolu_e2e{number:04d}", "name": call[0],
                 "input": call[1]}
        return _anthropic(body, [{"type": "text", "text": f"Running {cmd}."}, block],
                          "tool_use", number), "call"
    item = task.responses_call(validate.tool_names(body), cmd)
    if item is None:
        return _text(api, body, "There is no shell tool in this request.", number), "no-tools"
    item = {**item, "id": f"fc_e2e{number:04d}", "call_id": f"call_e2e{number:04d}",
            "status": "completed"}
    reasoning = {"type": "reasoning", "id": f"rs_e2e{number:04d}",
                 "summary": [], "encrypted_content": f"e2e-opaque-reasoning-{number:04d}"}
    return _responses(body, [reasoning, item], number), "call"


def _text(api: str, body: dict[str, Any], text: str, number: int, path: str = "") -> Reply:
    if api == "gemini":
        return _gemini(body, [{"text": text}], path)
    if api == "anthropic":
        return _anthropic(body, [{"type": "text", "text": text}], "end_turn", number)
    message = {"type": "message", "id": f"msg_e2e{number:04d}", "role": "assistant",
               "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return _responses(body, [message], number)


def _anthropic(body: dict[str, Any], content: list[dict[str, Any]], stop: str,
               number: int) -> Reply:
    """A reply of its own id: Claude Code joins streamed parts that share a message id."""
    message_id = f"msg_e2e{number:04d}"
    if body.get("stream"):
        return anthropic_stream(content, stop, _tokens(body), message_id)
    return anthropic_message(content, stop, _tokens(body), message_id)


def _responses(body: dict[str, Any], items: list[dict[str, Any]], number: int) -> Reply:
    response_id = f"resp_e2e{number:04d}"
    if body.get("stream"):
        return responses_items_stream(items, _tokens(body), response_id)
    return responses_items_body(items, _tokens(body), response_id)


def _gemini(body: dict[str, Any], parts: list[dict[str, Any]], path: str) -> Reply:
    return gemini_reply(parts, _tokens(body), stream=path.endswith(":streamGenerateContent"))


def _refusal(api: str, problems: list[str]) -> Reply:
    message = "; ".join(problems)
    if api == "gemini":
        error = {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
        return Reply(400, chunks=(json.dumps(error).encode(),))
    if api == "anthropic":
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": message},
                 "request_id": "req_e2e_invalid"}
    else:
        error = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                           "code": None}}
    return Reply(400, chunks=(json.dumps(error).encode(),))


def _other(request: Recorded) -> Reply:
    if request.path.endswith("/count_tokens"):
        return Reply(chunks=(json.dumps({"input_tokens": len(request.body) // 4}).encode(),))
    if request.path.endswith("/models"):
        return Reply(404, chunks=(b'{"error": {"message": "no model list here"}}',))
    return Reply(chunks=(b"{}",))
