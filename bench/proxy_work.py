"""What the proxy benches send and whom to: upstream's workload as growing requests, a provider
that only counts, and a plain pass-through on the proxy's own HTTP stack.

The workload is upstream's bench (bench/select_bench.py ``turn``: 300 turns, 15 MiB of tool
output, one ``read`` call and its 52 KB result a turn), written the way the agents send it:
request ``n`` carries turns ``0..n-1``, so the bodies grow from 53 KB to 15.9 MB and each one
resends the previous one's bytes (the conversation array comes before ``system`` and ``tools``,
as Claude Code orders its body).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import httpx2 as httpx
from starlette.responses import StreamingResponse

from bench.select_bench import TOTAL, TURNS, turn

ANTHROPIC_HEADERS = {"x-api-key": "bench", "anthropic-version": "2023-06-01",
                     "content-type": "application/json"}
OPENAI_HEADERS = {"authorization": "Bearer bench", "content-type": "application/json"}


def anthropic_turn(n: int) -> list[dict]:
    user, _, result = turn(n, TOTAL // TURNS)
    call = f"toolu_{n:05d}"
    return [{"role": "user", "content": user["content"]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "read",
                                               "input": {"path": f"src/{n}.ts"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                          "content": result["content"][0]["text"]}]}]


def responses_turn(n: int) -> list[dict]:
    user, _, result = turn(n, TOTAL // TURNS)
    call = f"call_{n:05d}"
    return [{"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": user["content"]}]},
            {"type": "function_call", "name": "read", "call_id": call,
             "arguments": json.dumps({"path": f"src/{n}.ts"})},
            {"type": "function_call_output", "call_id": call,
             "output": result["content"][0]["text"]}]


def anthropic_body(conversation: list[dict], session: str = "bench-session") -> bytes:
    user_id = json.dumps({"device_id": "bench", "account_uuid": "", "session_id": session})
    return json.dumps({
        "model": "claude-bench", "messages": conversation,
        "system": [{"type": "text", "text": "You are a benchmark assistant.",
                    "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "read", "description": "Read a file",
                   "input_schema": {"type": "object"}}],
        "metadata": {"user_id": user_id}, "max_tokens": 32000, "stream": False}).encode()


def responses_body(conversation: list[dict], session: str = "bench-thread") -> bytes:
    return json.dumps({
        "model": "gpt-bench", "instructions": "You are a benchmark assistant.",
        "input": conversation, "tools": [{"type": "function", "name": "read",
                                          "parameters": {"type": "object"}}],
        "store": False, "stream": False, "prompt_cache_key": session}).encode()


def growing(api: str, turns: int = TURNS) -> Iterator[bytes]:
    """Upstream's workload as the ``turns`` requests an agent makes: the n-th carries n turns."""
    one, body = ((anthropic_turn, anthropic_body) if api == "anthropic"
                 else (responses_turn, responses_body))
    conversation: list[dict] = []
    for n in range(turns):
        conversation += one(n)
        yield body(conversation)


def path_of(api: str) -> str:
    return "/v1/messages" if api == "anthropic" else "/v1/responses"


def headers_of(api: str) -> dict[str, str]:
    return ANTHROPIC_HEADERS if api == "anthropic" else OPENAI_HEADERS


def big_body(megabytes: float, api: str = "anthropic", session: str = "big") -> bytes:
    """A conversation of a few turns, one of whose outputs carries ``megabytes`` of text."""
    text = ("y" * 99 + "\n") * int(megabytes * (1 << 20) / 100)
    first = anthropic_turn(0) if api == "anthropic" else responses_turn(0)
    if api == "anthropic":
        first[2]["content"][0]["content"] = text
        return anthropic_body([*first, {"role": "user", "content": "and now?"}], session)
    first[2]["output"] = text
    return responses_body([*first, {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "and now?"}]}], session)


class Sink:
    """ASGI provider: reads the body, keeps only its size, answers a small JSON reply whose
    usage counts the body as characters/4."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        self.sizes.append(size)
        usage = {"input_tokens": size // 4, "output_tokens": 2}
        if scope["path"].endswith("/responses"):
            reply = {"id": "resp", "object": "response", "status": "completed",
                     "output": [], "usage": {**usage, "input_tokens_details":
                                             {"cached_tokens": 0}}}
        else:
            reply = {"id": "msg", "type": "message", "role": "assistant", "content": [
                {"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": usage}
        body = json.dumps(reply).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class Hop:
    """The plain HTTP hop: the proxy's stack (uvicorn, Starlette, the same HTTP client) reading
    the body and streaming the reply back, with no work on the body."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(600.0, connect=30.0), follow_redirects=False, trust_env=False,
            transport=httpx.AsyncHTTPTransport(
                trust_env=False, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]))

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"host", b"content-length")]
        request = self.client.build_request(scope["method"], self.upstream + scope["path"],
                                            headers=headers, content=b"".join(parts))
        reply = await self.client.send(request, stream=True)
        response = StreamingResponse(reply.aiter_raw(), status_code=reply.status_code)
        response.raw_headers = [(k, v) for k, v in reply.headers.raw
                                if k.lower() not in (b"connection", b"transfer-encoding")]
        await response(scope, receive, send)
        await reply.aclose()


class Command:
    """An ASGI app served on a free loopback port as ``context-paging proxy`` serves its own
    (server/proxy/commands.py: the guard, the header deadline and body timeout, the connection
    limits), on a thread of its own."""

    def __init__(self, app) -> None:
        from context_paging.server.proxy.commands import _server, listen

        self.socket = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.server = _server(app, self.socket)
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.socket.close()
