"""Reliability (docs/reliability.md): fuzzed arguments, path safety, privacy, concurrency and
faults.

Every tool is driven through the SDK's in-memory ``Client``. Hypothesis tests are synchronous,
so the fuzzing tests reach the async client through one anyio blocking portal per module; every
other test is a plain anyio test. A crash inside a tool reaches the client only as the SDK's
generic ``Error executing tool <name>`` text, so "no crash" means: every error either starts with
one of our error codes or is a pydantic validation message.

Run with ``-s`` to see how many cases were tried and faults injected.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import context_paging.index.ledger as ledger_module
import pytest
from context_paging.index.discovery import iter_session_files
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from tests.conftest import sample
from tests.test_protocol import call, lay_out, write_config

TOOLS = ("search_history", "browse_history", "load_history", "read_context_output", "recall",
         "list_sessions", "select_context", "paging_stats")
ERROR_CODE = re.compile(r"^[A-Z][A-Z_]+: ")
COUNTS: Counter[str] = Counter()
FUZZ = settings(max_examples=45, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


def anticipated(tool: str, text: str) -> bool:
    """An error we meant: our code prefix, or the SDK's message for arguments failing the schema."""
    if ERROR_CODE.match(text):
        return True
    return text.startswith(f"Error executing tool {tool}: ") and "validation error" in text


def teardown_module() -> None:
    print(f"\nreliability: {dict(sorted(COUNTS.items()))}")


# --- shared corpus --------------------------------------------------------------------------


class Harness:
    """One server over the sample (and recorded) sessions, reached from synchronous code through a
    portal."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal, client: Client, server,
                 home: Path, roots: dict[str, Path]) -> None:
        self.portal, self.client, self.server = portal, client, server
        self.home, self.roots = home, roots
        self.refs = [found.ref for found in iter_session_files(roots)]
        self.history_ids: list[str] = []
        self.call_ids: list[str] = []

    def call(self, tool: str, arguments: Any) -> tuple[bool, str, dict | None]:
        # Hypothesis seeds the global ``random`` alike for every example, and Whoosh names new
        # segments with it: without a fresh seed two commits get one segment id and collide.
        random.seed(os.urandom(16))
        result = self.portal.call(self.client.call_tool, tool, arguments)
        text = "".join(getattr(c, "text", "") for c in result.content)
        return result.is_error, text, result.structured_content


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("reliability")
    roots = lay_out(tmp)
    home = tmp / "home"
    write_config(home, roots)
    server = create_server(load_settings(home=home))
    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        client = portal.wrap_async_context_manager(Client(server))
        with client as connected:
            h = Harness(portal, connected, server, home, roots)
            for ref in h.refs[:6]:
                _, _, found = h.call("search_history",
                                     {"query": "", "session": ref, "limit": 10, "load": True})
                h.history_ids += [r["history_id"] for r in found["references"]]
                for item in found["items"] or []:
                    h.call_ids += [r["tool_call_id"] for r in item.get("tool_results", [])]
            yield h
    server.history.close()


# --- 1. fuzzing every tool's arguments ------------------------------------------------------

ODD_TEXT = st.sampled_from([
    "", " ", "\x00", "a\x00b", "\ud800", "x\udfffy", "\U0001f600" * 3, "é" * 5, "../../etc/passwd",
    "/etc/passwd", "ledger:../x", "pi:", "claude:\x00", ".*", "(", "(a+)+$", "\\", "%s%n",
    "ledger:" + "a" * 200, "\u202e\u200b", "null", "{}", "[1]",
])
TEXT = st.one_of(
    ODD_TEXT,
    st.text(st.characters(codec=None, exclude_categories=()), max_size=40),
    st.integers(0, 300_000).map(lambda n: "ë" * n),
)
NUMBERS = st.one_of(
    st.integers(), st.sampled_from([-1, 0, 1, 2**31, 2**63, -(2**63), 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=20,
)


def argument_space(h: Harness, tool: str) -> dict[str, st.SearchStrategy]:
    """Per argument, sensible values mixed with anything at all, so calls reach the tool body."""
    session = st.one_of(st.sampled_from(h.refs + ["ledger:fuzz"]), TEXT, JSON)
    history_id = st.one_of(st.sampled_from(h.history_ids or ["h"]), TEXT, JSON)
    call_id = st.one_of(st.sampled_from(h.call_ids or ["c"]), TEXT, JSON)
    small = st.one_of(st.integers(0, 12), NUMBERS, JSON)
    messages = st.lists(st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "toolResult", "x"]),
                               "content": st.one_of(TEXT, JSON)}),
        st.dictionaries(st.text(max_size=8), JSON, max_size=4)), max_size=6)
    return {
        "search_history": {"query": TEXT, "session": session, "scope": st.one_of(
            st.sampled_from(["session", "project", "all"]), JSON), "files": JSON, "tools": JSON,
            "failed": JSON, "limit": small, "load": JSON},
        "browse_history": {"direction": st.one_of(
            st.sampled_from(["backward", "forward", "around"]), JSON), "history_id": history_id,
            "sequence": small, "count": small, "stride": small, "session": session},
        "load_history": {"history_ids": st.one_of(st.lists(history_id, max_size=4), JSON),
                         "session": session},
        "read_context_output": {"history_id": history_id, "source": st.one_of(
            st.sampled_from(["assistant", "tool_result"]), JSON), "content_index": small,
            "tool_call_id": call_id, "offset": small, "limit": small, "session": session},
        "recall": {"tool_call_id": call_id, "history_id": history_id, "pattern": TEXT,
                   "offset": small, "limit": small, "session": session},
        "list_sessions": {"source": st.one_of(st.sampled_from(["pi", "claude", "codex"]), JSON),
                          "project": TEXT, "limit": small},
        "select_context": {"session": st.one_of(st.sampled_from(["fuzz", "fuzz-2"]), TEXT),
                           "messages": st.one_of(messages, JSON), "format": st.one_of(
                               st.sampled_from(["auto", "anthropic", "openai", "pi"]), JSON),
                           "system": JSON, "tools": JSON, "model": JSON, "model_window": NUMBERS,
                           "token_budget": NUMBERS, "trim_to_tokens": NUMBERS, "usage": JSON,
                           "ephemeral": JSON},
        "paging_stats": {"session": session},
    }[tool]


@st.composite
def tool_arguments(draw, h: Harness, tool: str) -> dict[str, Any]:
    space = argument_space(h, tool)
    chosen = draw(st.lists(st.sampled_from(sorted(space)), unique=True))
    arguments = {name: draw(space[name]) for name in chosen}
    arguments.update(draw(st.dictionaries(st.text(min_size=1, max_size=10), JSON, max_size=2)))
    return arguments


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_answers_fuzzed_arguments_without_crashing(harness, tool):
    @FUZZ
    @given(data=st.data())
    def check(data):
        arguments = data.draw(tool_arguments(harness, tool))
        COUNTS["fuzzed calls"] += 1
        error, text, _ = harness.call(tool, arguments)
        if error:
            assert anticipated(tool, text), (tool, arguments, text)

    check()


@FUZZ
@given(data=st.data())
def test_a_call_whose_arguments_are_not_an_object_is_refused_cleanly(harness, data):
    tool = data.draw(st.sampled_from(TOOLS))
    arguments = data.draw(st.one_of(st.lists(JSON, max_size=3), SCALARS))
    COUNTS["fuzzed calls"] += 1
    try:
        error, text, _ = harness.call(tool, arguments)
    except Exception as exc:  # a protocol error is an acceptable answer to a non-object
        assert "Error executing tool" not in str(exc)
        return
    if error:
        assert anticipated(tool, text), (tool, arguments, text)


FIRST_FIXTURE = {"pi": sample("pi-v1"), "claude": sample("claude"), "codex": sample("codex-0.40")}
GARBAGE_LINE = st.one_of(
    st.binary(max_size=200),
    JSON.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b'{"type":"message"', b'{"type":"session","version":3}{"type":"x"}',
                     b'{"type":"message","message":{"role":"assistant","content":7}}',
                     b'{"type":"user","message":{"role":"user","content":[{"type":"thinking"}]}}',
                     b'{"type":"response_item","payload":{"type":"reasoning","summary":5}}',
                     b"\xff\xfe\x00", b"[]", b"null", b'"text"']),
)


@FUZZ
@given(data=st.data())
def test_garbage_session_files_are_listed_and_searched_without_crashing(harness, data):
    source = data.draw(st.sampled_from(["pi", "claude", "codex"]))
    lines = data.draw(st.lists(GARBAGE_LINE, min_size=0, max_size=8))
    body = b"\n".join(lines)
    if data.draw(st.booleans()):  # a real file cut at a random byte
        raw = FIRST_FIXTURE[source].read_bytes()
        body = raw[: data.draw(st.integers(0, len(raw)))] + body
    folder = {"pi": "--fuzz--", "claude": "-fuzz", "codex": "2026/02/02"}[source]
    name = {"pi": "2026-02-02T00-00-00-000Z_fuzzsession.jsonl", "claude": "fuzzsession.jsonl",
            "codex": "rollout-2026-02-02T00-00-00-00000000-0000-4000-8000-00000000f022.jsonl"}
    path = harness.roots[source] / folder / name[source]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    ref = f"{source}:" + ("00000000-0000-4000-8000-00000000f022" if source == "codex"
                          else "fuzzsession")
    COUNTS["garbage session files"] += 1
    for tool, arguments in [
        ("list_sessions", {"limit": 100}),
        ("list_sessions", {"source": source, "project": "/"}),
        ("search_history", {"query": "", "session": ref, "load": True}),
        ("search_history", {"query": "error message", "session": ref}),
        ("browse_history", {"direction": "backward", "session": ref}),
        ("paging_stats", {"session": ref}),
    ]:
        error, text, _ = harness.call(tool, arguments)
        if error:
            assert anticipated(tool, text), (tool, body[:300], text)


# --- 2. path safety -------------------------------------------------------------------------

SESSION_TOOLS = {
    "search_history": {"query": "x"},
    "browse_history": {"direction": "backward"},
    "load_history": {"history_ids": ["h"]},
    "read_context_output": {"history_id": "h", "source": "assistant", "content_index": 0},
    "recall": {"tool_call_id": "c"},
    "paging_stats": {},
}


def test_sessions_outside_the_roots_are_refused_with_the_value_named(harness, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    secret = outside / "2026-01-01T00-00-00-000Z_secret0session.jsonl"
    secret.write_bytes(FIRST_FIXTURE["pi"].read_bytes())
    link = harness.roots["pi"] / "--work-app--" / "2026-01-01T00-00-00-000Z_linkedsession.jsonl"
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(secret)
    (harness.roots["pi"] / "linkdir").symlink_to(outside, target_is_directory=True)
    pi_root = harness.roots["pi"]
    bad = {  # value → the part of it the error must name
        str(secret): str(secret),
        str(link): str(link),
        str(pi_root / "linkdir" / secret.name): "linkdir",
        f"{pi_root}/../{secret.parent.name}/{secret.name}": "..",
        "../../etc/passwd": "../../etc/passwd",
        "/etc/passwd": "/etc/passwd",
        "pi:linkedsession": "linkedsession",
        "pi:secret0session": "secret0session",
        "ledger:../escape": "../escape",
        "ledger:/etc/passwd": "/etc/passwd",
        str(pi_root / "a\x00b.jsonl"): "a",
        "pi:\x00": "NUL",
        "/": "/",
        "~/.ssh/id_rsa.jsonl": "~/.ssh/id_rsa.jsonl",
    }
    for value, named in bad.items():
        for tool, arguments in SESSION_TOOLS.items():
            COUNTS["path cases"] += 1
            error, text, _ = harness.call(tool, {**arguments, "session": value})
            assert error, (tool, value, text)
            assert ERROR_CODE.match(text) and named in text, (tool, value, text)
            assert "Traceback" not in text and "secret" not in text.replace(value, "")


# --- 3. privacy -----------------------------------------------------------------------------


class Markers:
    """Unique words for every private string, so a leak is found by plain substring search."""

    def __init__(self) -> None:
        self.private: list[str] = []
        self.public: list[str] = []

    def secret(self, kind: str) -> str:
        word = f"privmark{kind}{len(self.private):04d}"
        self.private.append(word)
        return f"{word} hidden reasoning about parser.ts"

    def visible(self, kind: str) -> str:
        word = f"pubmark{kind}{len(self.public):04d}"
        self.public.append(word)
        return f"{word} visible text about parser.ts"


def pi_session(m: Markers, turns: int) -> list[dict]:
    lines: list[dict] = [{"type": "session", "version": 3, "id": "pi-private", "cwd": "/work/p",
                          "timestamp": "2026-03-01T00:00:00.000Z"}]
    parent = None

    def add(message: dict) -> None:
        nonlocal parent
        entry_id = f"e{len(lines):07d}"
        lines.append({"type": "message", "id": entry_id, "parentId": parent,
                      "timestamp": "2026-03-01T00:00:01.000Z", "message": message})
        parent = entry_id

    for n in range(turns):
        add({"role": "user", "content": [{"type": "text", "text": m.visible("piuser")}],
             "timestamp": 1})
        add({"role": "assistant", "stopReason": "toolUse", "timestamp": 2, "content": [
            {"type": "thinking", "thinking": m.secret("pithink"),
             "thinkingSignature": m.secret("pisig")},
            {"type": "thinking", "thinking": "", "redacted": True,
             "thinkingSignature": m.secret("piredacted")},
            {"type": "text", "text": m.visible("pitext"), "textSignature": m.secret("pitextsig")},
            {"type": "toolCall", "id": f"pi-call-{n}", "name": "bash",
             "arguments": {"command": f"echo {n}"}, "thoughtSignature": m.secret("pithought")},
        ]})
        add({"role": "toolResult", "toolCallId": f"pi-call-{n}", "toolName": "bash",
             "content": [{"type": "text", "text": m.visible("piresult")}], "isError": False,
             "timestamp": 3})
    return lines


def claude_session(m: Markers, turns: int) -> list[dict]:
    lines: list[dict] = []
    base = {"isSidechain": False, "userType": "external", "cwd": "/work/c",
            "sessionId": "claude-private", "version": "2.1.37", "timestamp": "2026-03-01T00:00:01Z"}

    def add(kind: str, message: dict) -> None:
        parent = lines[-1]["uuid"] if lines else None
        lines.append({**base, "type": kind, "uuid": f"u{len(lines):07d}", "parentUuid": parent,
                      "message": message})

    for n in range(turns):
        add("user", {"role": "user", "content": m.visible("ccuser")})
        add("assistant", {"id": f"msg_{n}", "type": "message", "role": "assistant",
                          "model": "claude-opus-4-6", "content": [
                              {"type": "thinking", "thinking": m.secret("ccthink"),
                               "signature": m.secret("ccsig")},
                              {"type": "redacted_thinking", "data": m.secret("ccredacted")},
                              {"type": "text", "text": m.visible("cctext")},
                              {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash",
                               "input": {"command": f"ls {n}"}}],
                          "stop_reason": "tool_use", "usage": {"input_tokens": 1,
                                                               "output_tokens": 1}})
        add("user", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": m.visible("ccresult"),
             "is_error": False}]})
    return lines


def codex_session(m: Markers, turns: int) -> list[dict]:
    ts = "2026-03-01T00:00:01.000Z"
    uuid = "00000000-0000-4000-8000-00000000c0de"
    lines: list[dict] = [{"timestamp": ts, "type": "session_meta", "payload": {
        "id": uuid, "timestamp": ts, "cwd": "/work/x", "originator": "codex_cli_rs",
        "cli_version": "0.142.0"}}]

    def item(payload: dict, kind: str = "response_item") -> None:
        lines.append({"timestamp": ts, "type": kind, "payload": payload})

    for n in range(turns):
        item({"turn_id": f"t{n}", "model": "gpt-5", "cwd": "/work/x"}, "turn_context")
        text = m.visible("cxuser")
        item({"type": "user_message", "message": text, "images": []}, "event_msg")
        item({"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": text}]})
        summary = m.secret("cxsummary")
        item({"type": "agent_reasoning", "text": summary}, "event_msg")
        item({"type": "agent_reasoning_raw_content", "text": m.secret("cxraw")}, "event_msg")
        item({"type": "reasoning", "id": f"rs_{n}",
              "summary": [{"type": "summary_text", "text": summary}],
              "content": [{"type": "reasoning_text", "text": m.secret("cxcontent")}],
              "encrypted_content": m.secret("cxencrypted")})
        item({"type": "function_call", "name": "shell", "call_id": f"cx-call-{n}",
              "arguments": json.dumps({"command": ["ls", str(n)]})})
        item({"type": "function_call_output", "call_id": f"cx-call-{n}",
              "output": json.dumps({"output": m.visible("cxresult"), "metadata": {}})})
        item({"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": m.visible("cxtext")}]})
    item({"message": "", "replacement_history": [
        {"type": "compaction", "encrypted_content": m.secret("cxcompaction")}]}, "compacted")
    item({"type": "compaction", "encrypted_content": m.secret("cxcompaction")})
    item({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": m.visible("cxafter")}]})
    return lines


def write_jsonl(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


@pytest.fixture
def private_corpus(tmp_path) -> tuple[Path, dict[str, Path], list[str], Markers]:
    m = Markers()
    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    write_jsonl(roots["pi"] / "--work-p--" / "2026-03-01T00-00-00-000Z_piprivate.jsonl",
                pi_session(m, 6))
    write_jsonl(roots["claude"] / "-work-c" / "claude-private.jsonl", claude_session(m, 6))
    write_jsonl(roots["codex"] / "2026" / "03" / "01" /
                "rollout-2026-03-01T00-00-00-00000000-0000-4000-8000-00000000c0de.jsonl",
                codex_session(m, 6))
    home = tmp_path / "home"
    write_config(home, roots)
    refs = ["pi:piprivate", "claude:claude-private", "codex:00000000-0000-4000-8000-00000000c0de"]
    return home, roots, refs, m


@pytest.mark.anyio
async def test_no_reply_reveals_generated_thinking_signatures_or_reasoning(private_corpus):
    home, _, refs, m = private_corpus
    server = create_server(load_settings(home=home))
    replies: list[str] = []

    async def ask(c: Client, tool: str, arguments: dict) -> dict | None:
        error, text, value = await call(c, tool, arguments)
        # a query may be echoed back; the echo is the caller's own text, not a leak
        replies.append(text.replace(str(arguments.get("query", "\x01")), ""))
        COUNTS["privacy calls"] += 1
        return None if error else value

    async with Client(server) as c:
        for ref in refs:
            everything = await ask(c, "search_history",
                                   {"query": "", "session": ref, "limit": 10, "load": True})
            assert everything and everything["references"], ref
            ids = [r["history_id"] for r in everything["references"]]
            for query in [*m.private[::7], "hidden reasoning", "parser.ts", "thinking"]:
                await ask(c, "search_history", {"query": query, "session": ref, "load": True})
            for direction in ("backward", "forward", "around"):
                await ask(c, "browse_history", {"direction": direction, "count": 10,
                                                "session": ref, "sequence": 0})
            items = []
            for chunk in range(0, len(ids), 3):
                loaded = await ask(c, "load_history",
                                   {"history_ids": ids[chunk:chunk + 3], "session": ref})
                items += loaded["items"]
            for item in items:
                for index in range(len(item.get("content") or []) + 1):
                    await ask(c, "read_context_output", {
                        "history_id": item["history_id"], "source": "assistant",
                        "content_index": index, "session": ref})
                await ask(c, "recall", {"history_id": item["history_id"], "session": ref})
                for result in item.get("tool_results", []):
                    await ask(c, "read_context_output", {
                        "history_id": item["history_id"], "source": "tool_result",
                        "tool_call_id": result["tool_call_id"], "session": ref})
                    await ask(c, "recall", {"tool_call_id": result["tool_call_id"],
                                            "session": ref})
                    await ask(c, "recall", {"tool_call_id": result["tool_call_id"],
                                            "pattern": "privmark|pubmark", "session": ref})
            await ask(c, "paging_stats", {"session": ref})
        await ask(c, "list_sessions", {"limit": 100})
    server.history.close()
    text = "\n".join(replies)
    assert [word for word in m.private if word in text] == []
    shown = {word for word in m.public if word in text}
    assert len(shown) > len(m.public) // 2  # the replies did carry the visible text


# --- 4. concurrency -------------------------------------------------------------------------


def conversation(turns: int) -> list[dict]:
    messages: list[dict] = []
    for n in range(turns):
        messages += [{"role": "user", "content": f"concurrent request {n} ledgerword{n}"},
                     {"role": "assistant", "content": [{"type": "text",
                                                        "text": f"answer {n} " + "x" * 400}]}]
    return messages


def ledger_lines(home: Path, session: str) -> list[dict]:
    raw = (home / "ledger" / f"{session}.jsonl").read_text(encoding="utf-8")
    assert raw.endswith("\n")
    return [json.loads(line) for line in raw.splitlines()]  # raises on a corrupt line


@pytest.mark.anyio
async def test_readers_a_growing_session_and_select_context_together_lose_nothing(tmp_path):
    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    growing = roots["pi"] / "--work-g--" / "2026-03-02T00-00-00-000Z_growing.jsonl"
    m = Markers()
    lines = pi_session(m, 2)
    write_jsonl(growing, lines)
    home = tmp_path / "home"
    write_config(home, roots)
    server = create_server(load_settings(home=home))
    turns, rounds = 25, 20
    sent = conversation(turns)
    failures: list[tuple[str, str]] = []

    async def writer(c: Client) -> None:
        for n in range(1, turns + 1):
            error, text, _ = await call(c, "select_context", {
                "session": "busy", "messages": sent[: 2 * n], "format": "anthropic",
                "token_budget": 2000})
            COUNTS["concurrent calls"] += 1
            if error:
                failures.append(("select_context", text))

    async def grower() -> None:
        for n in range(rounds):
            turn = pi_session(m, 1)[1:]
            for entry in turn:  # keep the pi tree linear: chain onto the last entry
                entry["id"] = f"g{n}-{entry['id']}"
                entry["parentId"] = lines[-1]["id"]
                lines.append(entry)
            with open(growing, "a", encoding="utf-8") as handle:
                handle.write("".join(json.dumps(e) + "\n" for e in turn))
            await anyio.lowlevel.checkpoint()  # let the readers run

    async def reader(c: Client, ref: str) -> None:
        for n in range(rounds):
            for tool, arguments in [
                ("search_history", {"query": "visible parser", "session": ref, "load": True}),
                ("browse_history", {"direction": "backward", "count": 10, "session": ref}),
                ("search_history", {"query": "", "session": ref, "limit": 3}),
            ]:
                error, text, value = await call(c, tool, arguments)
                COUNTS["concurrent calls"] += 1
                if error and not (ref.startswith("ledger:") and "UNKNOWN_SESSION" in text):
                    failures.append((tool, text))
                elif tool == "browse_history" and not error and n % 5 == 0:
                    ids = [r["history_id"] for r in value["references"][:3]]
                    if ids:
                        error, text, _ = await call(c, "load_history",
                                                    {"history_ids": ids, "session": ref})
                        if error:
                            failures.append(("load_history", text))

    with anyio.fail_after(120):
        async with Client(server) as a, Client(server) as b, Client(server) as w:
            async with anyio.create_task_group() as group:
                group.start_soon(writer, w)
                group.start_soon(grower)
                group.start_soon(reader, a, "pi:growing")
                group.start_soon(reader, b, "ledger:busy")
                group.start_soon(reader, a, "pi:growing")
            newest = m.public[-1]
            _, _, found = await call(a, "search_history", {"query": newest, "session":
                                                            "pi:growing", "load": True})
            _, _, ledger_found = await call(b, "search_history", {
                "query": f"ledgerword{turns - 1}", "session": "ledger:busy"})
    server.history.close()
    assert failures == []
    assert any(newest in json.dumps(item) for item in found["items"])
    assert ledger_found["references"]
    stored = [line["message"] for line in ledger_lines(home, "busy") if line["type"] == "message"]
    assert stored == sent  # every message once, in order, none lost, no corrupt line
    COUNTS["items lost"] += len(sent) - len(stored)


# --- 5. faults ------------------------------------------------------------------------------


def fixture_home(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    roots = lay_out(tmp_path)
    home = tmp_path / "home"
    write_config(home, roots)
    return home, roots


async def select(home: Path, session: str, messages: list[dict]) -> tuple[bool, str]:
    server = create_server(load_settings(home=home))
    try:
        async with Client(server) as c:
            error, text, _ = await call(c, "select_context", {
                "session": session, "messages": messages, "format": "anthropic"})
    finally:
        server.history.close()
    return error, text


def stored_messages(home: Path, session: str) -> list[dict]:
    return [line["message"] for line in ledger_lines(home, session) if line["type"] == "message"]


class FullDisk:
    """``open`` for index.ledger: appends write half their bytes, then fail with ENOSPC."""

    def __init__(self) -> None:
        self.injected = 0

    def __call__(self, path, mode="r", *args, **kwargs):
        handle = open(path, mode, *args, **kwargs)  # returned to the caller
        if "a" not in mode:
            return handle
        disk = self
        original_write = handle.write

        def write(data: bytes) -> int:
            disk.injected += 1
            original_write(data[: len(data) // 2])
            handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

        handle.write = write
        return handle


@pytest.mark.anyio
async def test_a_full_disk_is_a_clear_error_and_the_next_start_loses_no_message(
        tmp_path, monkeypatch):
    home, _ = fixture_home(tmp_path)
    sent = conversation(6)
    assert (await select(home, "disk", sent[:4]))[0] is False
    disk = FullDisk()
    monkeypatch.setattr(ledger_module, "open", disk, raising=False)
    error, text = await select(home, "disk", sent[:8])
    monkeypatch.undo()
    COUNTS["faults injected"] += disk.injected
    assert error and ERROR_CODE.match(text) and "No space left" in text, text
    error, text = await select(home, "disk", sent)
    assert not error, text
    assert stored_messages(home, "disk") == sent


@pytest.mark.anyio
async def test_a_home_that_cannot_be_written_is_a_clear_error_and_a_fixed_home_recovers(
        tmp_path):
    home, roots = fixture_home(tmp_path)
    sent = conversation(3)
    assert (await select(home, "ro", sent[:2]))[0] is False
    ledger_dir = home / "ledger"
    if os.geteuid() == 0:  # root writes through chmod 0o500: make the directory a file instead
        aside = tmp_path / "ledger-aside"
        ledger_dir.rename(aside)
        ledger_dir.write_text("not a directory")
    else:
        ledger_dir.chmod(0o500)
    COUNTS["faults injected"] += 1
    error, text = await select(home, "ro", sent)
    assert error and ERROR_CODE.match(text) and "ledger" in text, text
    assert "Traceback" not in text
    if os.geteuid() == 0:
        ledger_dir.unlink()
        aside.rename(ledger_dir)
    else:
        ledger_dir.chmod(0o700)
    assert (await select(home, "ro", sent))[0] is False
    assert stored_messages(home, "ro") == sent


@pytest.mark.anyio
async def test_a_garbage_index_is_moved_aside_rebuilt_and_searched(tmp_path):
    home, roots = fixture_home(tmp_path)
    ref = next(f.ref for f in iter_session_files(roots) if f.path.name == sample("pi-v3").name)
    query = {"query": "ECONNREFUSED", "session": ref}
    results = []
    for damage in (None, b"\x00garbage\xff" * 50):
        if damage:
            for path in (home / "index").iterdir():
                path.write_bytes(damage)
                COUNTS["faults injected"] += 1
        server = create_server(load_settings(home=home))
        async with Client(server) as c:
            error, text, value = await call(c, "search_history", query)
        server.history.close()
        assert not error, text
        results.append([r["history_id"] for r in value["references"]])
    assert results[0] and results[0] == results[1]
    assert [p.name for p in tmp_path.glob("home/index.broken-*")]


@pytest.mark.anyio
async def test_a_truncated_ledger_line_is_cut_and_no_earlier_message_is_lost(tmp_path):
    home, _ = fixture_home(tmp_path)
    sent = conversation(5)
    assert (await select(home, "cut", sent[:6]))[0] is False
    path = home / "ledger" / "cut.jsonl"
    raw = path.read_bytes()
    last_message = raw.rfind(b'{"type": "message"')
    last_message = last_message if last_message >= 0 else raw.rfind(b'{"type":"message"')
    path.write_bytes(raw[: last_message + 40])  # a crash in the middle of the last message
    COUNTS["faults injected"] += 1
    error, text = await select(home, "cut", sent)
    assert not error, text
    assert stored_messages(home, "cut") == sent


# --- 6. fuzzed message parts of the current provider APIs ----------------------------------


class PartFuzz:
    """Random conversations built from Anthropic Messages, OpenAI Chat Completions and OpenAI
    Responses content types. Private markers go only where the content is private (reasoning,
    signatures, encrypted payloads, unknown assistant parts); visible text carries no marker."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.markers: list[str] = []
        self.calls = 0

    def secret(self) -> str:
        word = f"fuzzsecret{len(self.markers):05d}"
        self.markers.append(word)
        return word

    def visible(self) -> str:
        return self.rng.choice(["build failed in parser.ts", "ok", "", "é" * 3, "line\n" * 5,
                                "\U0001f600 done", "x" * self.rng.randint(0, 3000)])

    def image(self) -> dict:
        return {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                            "data": "iVBORw0KGgo="}}

    def anthropic_user_part(self) -> dict:
        return self.rng.choice([
            lambda: {"type": "text", "text": self.visible()},
            self.image,
            lambda: {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                    "data": self.visible()}, "title": "notes"},
            lambda: {"type": "search_result", "source": "https://example.org", "title": "t",
                     "content": [{"type": "text", "text": self.visible()}]},
            lambda: {"type": "container_upload", "file_id": "file_1"},
            lambda: {"type": "thinking", "thinking": self.secret(), "signature": self.secret()},
        ])()

    def anthropic_assistant(self, n: int) -> tuple[dict, list[str]]:
        parts: list[dict] = []
        calls: list[str] = []
        for _ in range(self.rng.randint(1, 5)):
            kind = self.rng.randrange(9)
            if kind == 0:
                parts.append({"type": "thinking", "thinking": self.secret(),
                              "signature": self.secret()})
            elif kind == 1:
                parts.append({"type": "redacted_thinking", "data": self.secret()})
            elif kind == 2:
                ident = f"srv{n}_{len(parts)}"
                parts += [{"type": "server_tool_use", "id": ident, "name": "web_search",
                           "input": {"query": self.visible()}},
                          {"type": "web_search_tool_result", "tool_use_id": ident, "content": [
                              {"type": "web_search_result", "url": "https://example.org",
                               "title": self.visible(), "encrypted_content": self.secret()}]}]
            elif kind == 3:
                ident = f"code{n}_{len(parts)}"
                parts += [{"type": "server_tool_use", "id": ident, "name": "code_execution",
                           "input": {"code": "print(1)"}},
                          {"type": "code_execution_tool_result", "tool_use_id": ident,
                           "content": {"type": "code_execution_result", "stdout": self.visible(),
                                       "stderr": "", "return_code": 0}}]
            elif kind == 4:
                ident = f"mcp{n}_{len(parts)}"
                parts += [{"type": "mcp_tool_use", "id": ident, "name": "lookup",
                           "server_name": "docs", "input": {}},
                          {"type": "mcp_tool_result", "tool_use_id": ident, "is_error": False,
                           "content": [{"type": "text", "text": self.visible()}]}]
            elif kind == 5:
                parts.append({"type": "compaction_future", "content": self.secret()})
            elif kind == 6:
                ident = f"tool{n}_{len(parts)}"
                calls.append(ident)
                parts.append({"type": "tool_use", "id": ident, "name": "bash",
                              "input": {"command": "ls"}})
            else:
                parts.append({"type": "text", "text": self.visible()})
        return {"role": "assistant", "content": parts}, calls

    def anthropic(self, turns: int) -> list[dict]:
        messages: list[dict] = []
        for n in range(turns):
            messages.append({"role": "user", "content": [self.anthropic_user_part()
                                                         for _ in range(self.rng.randint(1, 3))]})
            assistant, calls = self.anthropic_assistant(n)
            messages.append(assistant)
            if calls:
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": c, "is_error": self.rng.random() < .2,
                     "content": [self.rng.choice([{"type": "text", "text": self.visible()},
                                                  self.image(), self.anthropic_user_part()])]}
                    for c in calls]})
        messages.append({"role": "user", "content": self.visible() or "next"})
        return messages

    def openai_part(self, assistant: bool) -> dict:
        public = [
            lambda: {"type": "text", "text": self.visible()},
            lambda: {"type": "output_text" if assistant else "input_text",
                     "text": self.visible(), "annotations": []},
            lambda: {"type": "refusal", "refusal": self.visible()},
        ]
        if not assistant:
            public += [
                lambda: {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                lambda: {"type": "input_image", "image_url": "https://example.org/a.png"},
                lambda: {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
                lambda: {"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}},
                lambda: {"type": "input_file", "file_id": "file-2"},
            ]
        private = [
            lambda: {"type": "reasoning", "id": "rs_1", "encrypted_content": self.secret(),
                     "summary": [{"type": "summary_text", "text": self.secret()}]},
            lambda: {"type": "thinking", "thinking": self.secret()},
        ]
        if assistant:
            private += [lambda: {"type": "reasoning_text", "text": self.secret()},
                        lambda: {"type": "summary_text", "text": self.secret()},
                        lambda: {"type": "future_part", "data": self.secret()}]
        return self.rng.choice(public + private)()

    def openai(self, turns: int) -> list[dict]:
        messages: list[dict] = [{"role": "system", "content": "be brief"}]
        for n in range(turns):
            messages.append({"role": "user", "content": [self.openai_part(False)
                                                         for _ in range(self.rng.randint(1, 3))]})
            assistant: dict[str, Any] = {"role": "assistant", "content": [
                self.openai_part(True) for _ in range(self.rng.randint(0, 3))] or None}
            for key in self.rng.sample(["reasoning_content", "reasoning_details", "reasoning"],
                                       self.rng.randint(0, 2)):
                assistant[key] = (self.secret() if key != "reasoning_details"
                                  else [{"type": "reasoning.text", "text": self.secret()}])
            calls = [f"call{n}_{k}" for k in range(self.rng.randint(0, 2))]
            if calls:
                assistant["tool_calls"] = [{"id": c, "type": "function", "function": {
                    "name": "bash", "arguments": json.dumps({"command": "ls"})}} for c in calls]
            messages.append(assistant)
            messages += [{"role": "tool", "tool_call_id": c, "content": self.visible()}
                         for c in calls]
        messages.append({"role": "user", "content": self.visible() or "next"})
        return messages


def _window_texts(messages: list[dict]) -> Iterator[str]:
    """Every text a window shows a model: string contents, text parts, and the same inside
    tool results. Private parts the host sent come back to it untouched and are not text."""

    def parts(content: Any) -> Iterator[str]:
        if isinstance(content, str):
            yield content
            return
        for part in content if isinstance(content, list) else ():
            if not isinstance(part, dict):
                continue
            if part.get("type") in ("text", "output_text", "input_text"):
                yield str(part.get("text"))
            elif part.get("type") == "tool_result":
                yield from parts(part.get("content"))

    for message in messages:
        yield from parts(message.get("content"))


@pytest.mark.anyio
async def test_fuzzed_provider_parts_give_no_uncoded_error_and_no_private_text(tmp_path):
    home = tmp_path / "home"
    write_config(home, {name: tmp_path / "none" for name in ("pi", "claude", "codex")},
                 '[paging]\nestimator = "chars4"\n')
    fuzz = PartFuzz(seed=11)
    server = create_server(load_settings(home=home))
    replies: list[str] = []

    async def ask(c: Client, tool: str, arguments: dict) -> dict | None:
        error, text, value = await call(c, tool, arguments)
        fuzz.calls += 1
        assert not error or anticipated(tool, text), (tool, text)
        if tool == "select_context" and not error:
            replies.extend(_window_texts(value["messages"]))
            replies.append(json.dumps({k: v for k, v in value.items() if k != "messages"}))
        else:
            replies.append(text)
        return None if error else value

    async with Client(server) as c:
        for case in range(24):
            fmt = "anthropic" if case % 2 == 0 else "openai"
            turns = fuzz.rng.randint(1, 6)
            messages = fuzz.anthropic(turns) if fmt == "anthropic" else fuzz.openai(turns)
            session = f"fuzz{case}"
            budget = fuzz.rng.choice([None, 400, 2000])
            arguments: dict[str, Any] = {"session": session, "messages": messages, "format": fmt}
            if budget:
                arguments["token_budget"] = budget
            if await ask(c, "select_context", arguments) is None:
                continue
            ref = f"ledger:{session}"
            found = await ask(c, "search_history", {"query": "", "session": ref, "limit": 10,
                                                    "load": True})
            await ask(c, "search_history", {"query": "parser", "session": ref})
            await ask(c, "browse_history", {"direction": "around", "session": ref, "count": 10,
                                            "sequence": 1})
            for reference in (found or {}).get("references", [])[:6]:
                history_id = reference["history_id"]
                await ask(c, "recall", {"history_id": history_id, "session": ref})
                for index in range(4):
                    await ask(c, "read_context_output", {
                        "history_id": history_id, "source": "assistant", "content_index": index,
                        "session": ref})
            for item in (found or {}).get("items") or []:
                for result in item.get("tool_results", []):
                    await ask(c, "recall", {"tool_call_id": result["tool_call_id"],
                                            "session": ref})
            await ask(c, "paging_stats", {"session": ref})
    server.history.close()
    COUNTS["fuzzed provider-part calls"] += fuzz.calls
    COUNTS["planted private markers"] += len(fuzz.markers)
    text = "\n".join(replies)
    leaks = [m for m in fuzz.markers if m in text]
    assert leaks == [], text[max(0, text.find(leaks[0]) - 300):][:400] if leaks else ""
    stored = b"".join(p.read_bytes() for folder in ("index", "state")
                      for p in (home / folder).rglob("*") if p.is_file())
    assert [m for m in fuzz.markers if m.encode() in stored] == []
