"""A fake model provider and a server runner for the proxy tests.

The provider is a real HTTP server on a free loopback port: it records every request (method,
path, query, headers, exact body bytes) and answers with scripted replies, streamed in several
chunks so the proxy's streaming is exercised. Servers run on a thread of their own; the
listening socket is bound before the thread starts, so clients can connect at once (the kernel
queues them) and no test has to wait for start-up.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import uvicorn


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)
    chunks: tuple[bytes, ...] = (b"{}",)

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


def sse(events: list[dict[str, Any]], named: bool = True) -> Reply:
    """An SSE reply, one chunk per event (Anthropic names events; OpenAI sends data lines)."""
    chunks = []
    for event in events:
        head = f"event: {event['type']}\n" if named and "type" in event else ""
        chunks.append(f"{head}data: {json.dumps(event)}\n\n".encode())
    if not named:
        chunks.append(b"data: [DONE]\n\n")
    return Reply(200, (("content-type", "text/event-stream"),
                       ("request-id", "req_fake"), ("x-provider", "fake")), tuple(chunks))


def anthropic_stream(content: list[dict[str, Any]], stop: str = "tool_use",
                     input_tokens: int = 10, message_id: str = "msg_fake") -> Reply:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": "claude-fake",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}]
    for index, block in enumerate(content):
        if block["type"] == "tool_use":
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {**block, "input": {}}})
            events.append({"type": "content_block_delta", "index": index, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        else:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}})
            events.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "text_delta", "text": block["text"]}})
        events.append({"type": "content_block_stop", "index": index})
    events += [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5}}, {"type": "message_stop"}]
    return sse(events)


def anthropic_message(content: list[dict[str, Any]], stop: str = "end_turn",
                      input_tokens: int = 10, message_id: str = "msg_fake") -> Reply:
    body = {"id": message_id, "type": "message", "role": "assistant", "model": "claude-fake",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 5}}
    return Reply(chunks=(json.dumps(body).encode(),))


def responses_stream(text: str = "ok", input_tokens: int = 10) -> Reply:
    """An OpenAI Responses SSE reply with one assistant message."""
    item = {"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return responses_items_stream([item], input_tokens)


def _response(output: list[dict[str, Any]], status: str, input_tokens: int,
              response_id: str = "resp_fake") -> dict[str, Any]:
    usage = {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": input_tokens + 2}
    return {"id": response_id, "object": "response", "created_at": 0, "model": "gpt-fake",
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "status": status,
            "output": output, **({"usage": usage} if status == "completed" else {})}


def responses_items_stream(items: list[dict[str, Any]], input_tokens: int = 10,
                           response_id: str = "resp_fake") -> Reply:
    """An OpenAI Responses SSE reply with these output items (messages, reasoning, calls)."""
    events: list[dict[str, Any]] = [{"type": "response.created", "response": _response(
        [], "in_progress", input_tokens, response_id)}]
    for index, item in enumerate(items):
        if item.get("type") == "message":  # as the API streams text: empty, parts, deltas
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "status": "in_progress", "content": []}})
            events += _text_events(item, index)
        else:
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": item})
        events.append({"type": "response.output_item.done", "output_index": index,
                       "item": item})
    events.append({"type": "response.completed",
                   "response": _response(items, "completed", input_tokens, response_id)})
    return sse([{**event, "sequence_number": n} for n, event in enumerate(events)])


def _text_events(item: dict[str, Any], index: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for part_index, part in enumerate(item.get("content") or ()):
        where = {"item_id": item.get("id", ""), "output_index": index,
                 "content_index": part_index}
        text = part.get("text", "")
        events += [{"type": "response.content_part.added", **where,
                    "part": {**part, "text": ""}},
                   {"type": "response.output_text.delta", **where, "delta": text},
                   {"type": "response.output_text.done", **where, "text": text},
                   {"type": "response.content_part.done", **where, "part": part}]
    return events


def responses_items_body(items: list[dict[str, Any]], input_tokens: int = 10,
                         response_id: str = "resp_fake") -> Reply:
    """The same reply as one JSON response (a request without ``stream``)."""
    body = _response(items, "completed", input_tokens, response_id)
    return Reply(chunks=(json.dumps(body).encode(),))


def chat_completion(text: str = "ok", input_tokens: int = 10) -> Reply:
    body = {"id": "chatcmpl_fake", "object": "chat.completion", "created": 0,
            "model": "gpt-fake", "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": input_tokens, "completion_tokens": 2,
                      "total_tokens": input_tokens + 2}}
    return Reply(chunks=(json.dumps(body).encode(),))


def gemini_reply(parts: list[dict[str, Any]], prompt_tokens: int = 10, stream: bool = True,
                 cached: int = 0, finish: str = "STOP") -> Reply:
    """A Gemini generateContent reply; streamed as SSE ``data:`` lines (``alt=sse``), the
    parts in one event and the usage repeated on the last, as the API sends them."""
    usage = {"promptTokenCount": prompt_tokens, "candidatesTokenCount": 3,
             "totalTokenCount": prompt_tokens + 3, "cachedContentTokenCount": cached}
    whole = {"candidates": [{"content": {"role": "model", "parts": parts},
                             "finishReason": finish, "index": 0}],
             "usageMetadata": usage, "modelVersion": "gemini-fake", "responseId": "fake"}
    if not stream:
        return Reply(chunks=(json.dumps(whole).encode(),))
    first = {**whole, "candidates": [{"content": {"role": "model", "parts": parts},
                                      "index": 0}]}
    last = {**whole, "candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
                                     "finishReason": finish, "index": 0}]}
    return Reply(200, (("content-type", "text/event-stream"),),
                 tuple(f"data: {json.dumps(e)}\r\n\r\n".encode() for e in (first, last)))


@dataclass
class FakeProvider:
    """ASGI app: records requests; answers from ``queue`` first, else a default per path."""

    requests: list[Recorded] = field(default_factory=list)
    queue: deque[Reply] = field(default_factory=deque)
    # When set: after the first chunk the provider waits (bounded) until the test opens the
    # gate, so a test can prove the first chunk reached the client before the rest was sent.
    gate: threading.Event | None = None
    gate_opened: list[bool] = field(default_factory=list)

    def default(self, request: Recorded) -> Reply:
        """A plain answer whose usage counts the request as characters/4, like the tests'
        estimator, so calibration from it is realistic."""
        tokens = len(request.body) // 4
        if request.path.endswith("/count_tokens"):
            return Reply(chunks=(b'{"input_tokens": 1234}',))
        if request.path.endswith("/v1/messages"):
            text = [{"type": "text", "text": "ok"}]
            try:
                wants_stream = json.loads(request.body or b"{}").get("stream")
            except (ValueError, AttributeError):  # the proxy forwarded a body it cannot read
                wants_stream = False
            return (anthropic_stream(text, "end_turn", tokens) if wants_stream
                    else anthropic_message(text, "end_turn", tokens))
        if request.path.endswith("/responses"):
            return responses_stream("ok", tokens)
        if request.path.endswith("/chat/completions"):
            return chat_completion("ok", tokens)
        if request.path.endswith((":generateContent", ":streamGenerateContent")):
            return gemini_reply([{"text": "ok"}], tokens,
                                stream=request.path.endswith(":streamGenerateContent"))
        return Reply(chunks=(json.dumps({"echo": request.path}).encode(),))

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        recorded = await received(scope, receive)
        self.requests.append(recorded)
        reply = self.queue.popleft() if self.queue else self.default(recorded)
        await send({"type": "http.response.start", "status": reply.status,
                    "headers": [(k.encode(), v.encode()) for k, v in reply.headers]})
        for index, chunk in enumerate(reply.chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if index == 0 and self.gate is not None:
                opened = await anyio.to_thread.run_sync(self.gate.wait, 10.0)
                self.gate_opened.append(opened)
        await send({"type": "http.response.body", "body": b""})


async def received(scope, receive) -> Recorded:
    """An HTTP request as the ASGI server hands it over, body read whole."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    return Recorded(scope["method"], scope["path"], scope["query_string"].decode(), headers, body)


class Served:
    """An ASGI app served by uvicorn on a free loopback port, on a thread of its own."""

    def __init__(self, app, lifespan: str = "off") -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(128)
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, lifespan=lifespan, log_config=None, access_log=False,
                                server_header=False, date_header=False, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.socket.close()

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
