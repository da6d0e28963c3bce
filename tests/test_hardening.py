"""Hardening (docs/reliability.md, "Hostile input"): each defect an adversarial run found, as
a behaviour sentence.

Every test here failed before its fix. The tools are driven through the SDK's in-memory
``Client`` except where the transport itself is the subject (raw JSON-RPC), which runs the installed
console script over stdio with raw JSON-RPC lines.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import context_paging.index.recall as recall_module
import pytest
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

from tests.conftest import ledger_home
from tests.test_protocol import call, write_config

pytestmark = pytest.mark.anyio


async def calls(home: Path, *requests: tuple[str, dict]) -> list[tuple[bool, str, dict | None]]:
    """Each request against one fresh server over ``home``, in order."""
    server = create_server(load_settings(home=home))
    try:
        async with Client(server) as client:
            return [await call(client, tool, arguments) for tool, arguments in requests]
    finally:
        server.history.close()


def exchange(call_id: str, output: str, *, question: str = "run it") -> list[dict]:
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": output}]},
    ]


def select(session: str, messages: list[dict], fmt: str = "anthropic", **extra: Any) -> tuple:
    return ("select_context", {"session": session, "messages": messages, "format": fmt, **extra})


# --- 1. a recall pattern cannot exhaust memory or time while compiling ---------------------------


def agent_roots(tmp_path: Path) -> tuple[dict[str, Path], Path]:
    """Empty Pi, Claude Code and Codex roots, and a home whose config points at them."""
    roots = {name: tmp_path / name for name in ("pi", "claude", "codex")}
    for root in roots.values():
        root.mkdir()
    home = tmp_path / "home"
    write_config(home, roots)
    return roots, home


async def test_nested_counted_repeats_are_refused_before_compiling(tmp_path):
    home = ledger_home(tmp_path)
    messages = exchange("t1", "aaaa\nbbbb\n" * 20)
    patterns = ["(?:(?:a{100}){100}){100}", "(?:(?:a{1000}){1000}){1000}", "(?:x{400}){400}"]
    replies = await calls(home, select("re", messages), *[
        ("recall", {"tool_call_id": "t1", "pattern": p, "session": "ledger:re"})
        for p in patterns])
    for pattern, (error, text, _) in zip(patterns, replies[1:], strict=True):
        assert error and text.startswith("RECALL_PATTERN: "), (pattern, text)
        assert "repeat" in text
    # An ordinary counted pattern still works.
    (error, text, _), = await calls(home, ("recall", {
        "tool_call_id": "t1", "pattern": "b{4}|a{2,}", "session": "ledger:re"}))
    assert not error and text.startswith("1: aaaa"), text


async def test_a_memory_error_while_compiling_is_a_coded_error(tmp_path, monkeypatch):
    home = ledger_home(tmp_path)

    def exhausted(*args, **kwargs):
        raise MemoryError

    replies = await calls(home, select("mem", exchange("t1", "x")))
    assert not replies[0][0]
    monkeypatch.setattr(recall_module.regex, "compile", exhausted)
    (error, text, _), = await calls(home, ("recall", {
        "tool_call_id": "t1", "pattern": "x", "session": "ledger:mem"}))
    assert error and text.startswith("RECALL_PATTERN: ") and "memory" in text, text


# --- 6. a damaged state file costs only the cut point ---------------------------------------------


@pytest.mark.parametrize("damage", [
    "[" * 100_000,
    json.dumps({"usage_by_response": {"m1": "zz"}, "latest": {"estimated_tokens": "x"}}),
    json.dumps({"usage_by_response": [1, 2], "cut": 7, "anchor": "x", "settings": {}}),
    json.dumps({"latest": [], "evicted_messages": "many", "model_window": {"a": 1}}),
])
async def test_a_damaged_state_file_is_set_aside_with_one_warning(tmp_path, caplog, damage):
    home = ledger_home(tmp_path)
    messages = exchange("t1", "out")
    assert not (await calls(home, select("st", messages)))[0][0]
    (home / "state" / "st.json").write_text(damage)
    caplog.set_level(logging.WARNING, logger="context_paging")
    more = messages + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "n"}]
    replies = await calls(home, ("paging_stats", {"session": "ledger:st"}), select("st", more),
                          ("paging_stats", {"session": "ledger:st"}))
    for error, text, _ in replies:
        assert not error, text
    warnings = [r for r in caplog.records if "state" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert json.loads((home / "state" / "st.json").read_text())["settings"] == [None, None]


# --- 7. a tool result that answers no call is refused wherever it is ------------------------------


async def test_a_result_for_no_call_is_refused_in_the_last_exchange_and_earlier(tmp_path):
    home = ledger_home(tmp_path)
    stray = exchange("t1", "ok")
    stray[2]["content"].append({"type": "tool_result", "tool_use_id": "nobody", "content": "?"})
    later = stray + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
    openai = [{"role": "user", "content": "go"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
              {"role": "tool", "tool_call_id": "c1", "content": "a"},
              {"role": "tool", "tool_call_id": "nobody", "content": "b"}]
    replies = await calls(home, select("s1", stray), select("s2", later),
                          select("s3", openai, "openai"),
                          select("s4", openai + [{"role": "user", "content": "more"}], "openai"))
    for error, text, _ in replies:
        assert error and text.startswith("INVALID_MESSAGE_STRUCTURE: "), text
        assert "nobody" in text
    # Refused whole: nothing of a refused request is stored, so no recovery tool shows it.
    assert not (home / "ledger").exists() or not list((home / "ledger").glob("*.jsonl")), [
        p.read_text()[:200] for p in (home / "ledger").glob("*.jsonl")]


# --- 8. one code per cause ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["ledger:../x", "pi:../x", "../sessions/x.jsonl", "a\x00b"])
async def test_a_malformed_session_reference_has_one_code_in_every_tool(tmp_path, bad):
    home = ledger_home(tmp_path)
    replies = await calls(home, ("paging_stats", {"session": bad}),
                          ("search_history", {"query": "x", "session": bad}),
                          ("browse_history", {"direction": "backward", "session": bad}),
                          ("load_history", {"history_ids": ["m"], "session": bad}),
                          ("recall", {"tool_call_id": "t", "session": bad}))
    codes = {text.split(":", 1)[0] for _, text, _ in replies}
    assert codes == {"INVALID_SESSION"}, [text for _, text, _ in replies]


async def test_a_file_name_too_long_names_the_file_not_the_home(tmp_path):
    roots, home = agent_roots(tmp_path)
    long_name = str(roots["pi"] / ("a" * 300 + ".jsonl"))
    replies = await calls(home, ("search_history", {"query": "x", "session": long_name}),
                          ("paging_stats", {"session": long_name}),
                          ("load_history", {"history_ids": ["m"], "session": long_name}))
    for error, text, _ in replies:
        assert error and text.startswith("UNKNOWN_SESSION: "), text
        assert "too long" in text and str(home) not in text, text


# --- 2. a symlink swapped in between check and open never leaks a file outside the roots ----------


def claude_lines(session_id: str, word: str, turns: int = 4) -> str:
    base = {"isSidechain": False, "userType": "external", "cwd": "/work/c",
            "sessionId": session_id, "version": "2.1.37", "timestamp": "2026-03-01T00:00:01Z"}
    lines: list[dict] = []

    def add(kind: str, message: dict) -> None:
        parent = lines[-1]["uuid"] if lines else None
        lines.append({**base, "type": kind, "uuid": f"{word}{len(lines):04d}",
                      "parentUuid": parent, "message": message})

    for n in range(turns):
        add("user", {"role": "user", "content": f"{word} question {n}"})
        add("assistant", {"id": f"msg_{n}", "type": "message", "role": "assistant",
                          "model": "claude-opus-4-6", "content": [
                              {"type": "text", "text": f"{word} answer {n}"},
                              {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash",
                               "input": {"command": f"ls {n}"}}], "stop_reason": "tool_use"})
        add("user", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"{word} out {n}"}]})
    return "".join(json.dumps(line) + "\n" for line in lines)


async def test_a_symlink_swapped_in_while_reading_never_leaks_the_outside_file(tmp_path):
    roots, home = agent_roots(tmp_path)
    session = roots["claude"] / "-work-c" / "race.jsonl"
    session.parent.mkdir()
    session.write_text(claude_lines("race", "insideword"))
    keep = tmp_path / "keep.jsonl"  # a second name for the inside file, to swap it back cheaply
    os.link(session, keep)
    outside = tmp_path / "outside.jsonl"
    outside.write_text(claude_lines("race", "outsideword"))
    stop = threading.Event()
    swaps = 0

    def swap() -> None:
        nonlocal swaps
        link, hard = str(session) + ".lnk", str(session) + ".hard"
        while not stop.is_set() and swaps < 20_000:
            os.symlink(outside, link)
            os.replace(link, session)  # now a link to the outside file
            stop.wait(0.0005)  # each state lasts a moment, as in the adversarial run
            os.link(keep, hard)
            os.replace(hard, session)  # the inside file again
            stop.wait(0.0005)
            swaps += 1

    requests = [("recall", {"tool_call_id": "toolu_1", "session": str(session)}),
                ("search_history", {"query": "answer", "session": str(session), "load": True}),
                ("browse_history", {"direction": "forward", "count": 10, "session": str(session)}),
                ("load_history", {"history_ids": ["insideword0001"], "session": str(session)})]
    server = create_server(load_settings(home=home))
    replies: list[tuple[bool, str]] = []
    thread = threading.Thread(target=swap, daemon=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # let the swapping thread run between the server's steps
    try:
        async with Client(server) as client:
            thread.start()
            for _ in range(60):
                for tool, arguments in requests:
                    error, text, _ = await call(client, tool, arguments)
                    replies.append((error, text))
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
        server.history.close()
    leaked = [text for _, text in replies if "outsideword" in text]
    assert swaps > 0 and leaked == [], (swaps, len(leaked), leaked[:1])
    # A rare STORAGE_ERROR here was realpath's own race in the error handler: made certain in
    # tests/test_swap_resolve.py.
    for error, text in replies:
        assert not error or text.startswith(("UNKNOWN_SESSION: ", "UNKNOWN_HISTORY_ID: ",
                                             "UNKNOWN_TOOL_CALL_ID: ")), text
    assert any(not error and "insideword" in text for error, text in replies)


async def test_a_link_swapped_in_right_after_the_check_is_not_read(tmp_path, monkeypatch):
    """The race above, made certain: the file becomes a link to the outside file between the
    roots check and the read."""
    import context_paging.index.service as service_module

    roots, home = agent_roots(tmp_path)
    session = roots["claude"] / "-work-c" / "race.jsonl"
    session.parent.mkdir()
    session.write_text(claude_lines("race", "insideword"))
    outside = tmp_path / "outside.jsonl"
    outside.write_text(claude_lines("race", "outsideword", turns=5))
    server = create_server(load_settings(home=home))
    recall = ("recall", {"tool_call_id": "toolu_1", "session": "claude:race"})
    try:
        async with Client(server) as client:
            error, text, _ = await call(client, *recall)
            assert (error, text) == (False, "insideword out 1")
            real_check = service_module._still_inside

            def check_then_swap(found, roots):
                inside = real_check(found, roots)
                session.unlink()
                session.symlink_to(outside)
                return inside

            monkeypatch.setattr(service_module, "_still_inside", check_then_swap)
            error, text, _ = await call(client, *recall)
    finally:
        server.history.close()
    assert "outsideword" not in text
    assert error and text.startswith("UNKNOWN_SESSION: ") and "outside" in text, text


async def test_ledger_and_state_files_replaced_by_links_are_not_followed(tmp_path, caplog):
    home = ledger_home(tmp_path)
    (error, text, _), = await calls(home, select("lk", exchange("t1", "insideword")))
    assert not error, text
    outside_ledger = tmp_path / "outside-ledger.jsonl"
    outside_ledger.write_text(json.dumps({
        "type": "message", "id": "m1", "parent": None, "format": "anthropic", "ts": "",
        "message": {"role": "user", "content": "outsideword in the ledger"}}) + "\n"
        + json.dumps({"type": "head", "id": "m1", "ts": ""}) + "\n")
    outside_state = tmp_path / "outside-state.json"
    outside_state.write_text(json.dumps({"settings": "outsideword"}))
    for path, target in ((home / "ledger" / "lk.jsonl", outside_ledger),
                         (home / "state" / "lk.json", outside_state)):
        path.unlink()
        path.symlink_to(target)
    caplog.set_level(logging.WARNING, logger="context_paging")
    replies = await calls(home, ("search_history", {"query": "", "session": "ledger:lk",
                                                    "load": True}),
                          ("paging_stats", {"session": "ledger:lk"}))
    for error, text, _ in replies:
        assert "outsideword" not in text
        assert not error or text.startswith("STORAGE_ERROR: "), text  # the home is damaged
    assert outside_state.read_text() == json.dumps({"settings": "outsideword"})


def test_listing_and_index_all_verify_every_file_inside_its_root(tmp_path):
    # Listing and `index --all` read many files in worker processes: each must be opened and
    # verified inside its root like any other read, so a link to a file outside is never read.
    from context_paging.index.catalog import Catalog
    from context_paging.index.service import History

    roots, home = agent_roots(tmp_path)
    project = roots["claude"] / "-work-c"
    project.mkdir()
    for n in range(3):  # several files, so the parallel readers are used where there are cores
        (project / f"inside{n}.jsonl").write_text(claude_lines(f"inside{n}", f"insideword{n}"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "outside.jsonl").write_text(claude_lines("outside", "outsideword"))
    (project / "planted.jsonl").symlink_to(elsewhere / "outside.jsonl")  # a link to a file
    (roots["claude"] / "-planted").symlink_to(elsewhere)  # and a link to a folder
    summaries = Catalog(roots, cache=home / "catalog.json").summaries()
    assert sorted(s.session_id for s in summaries) == ["inside0", "inside1", "inside2"]
    assert "outsideword" not in json.dumps([s.model_dump() for s in summaries])
    history = History(roots, home)
    try:
        history.index_all()
        assert history.search("outsideword", scope="all").references == []
        assert history.search("insideword1", scope="all").references
    finally:
        history.close()


# --- 3. one private-part rule on every path -------------------------------------------------------


def home_bytes(home: Path, *folders: str) -> bytes:
    return b"".join(p.read_bytes() for folder in folders for p in (home / folder).rglob("*")
                    if p.is_file())


async def test_unknown_openai_assistant_parts_and_reasoning_fields_never_come_back(tmp_path):
    home = ledger_home(tmp_path)
    messages = [
        {"role": "user", "content": "publicword question"},
        {"role": "assistant", "content": [
            {"type": "reasoning_text", "text": "secretword1 chain of thought"},
            {"type": "summary_text", "text": "secretword2 summary"},
            {"type": "text", "text": "publicword answer"},
            {"type": "future_part", "payload": "secretword3"}],
         "reasoning_content": "secretword4", "reasoning_details": [{"text": "secretword5"}],
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "publicword listing"},
        {"role": "assistant", "content": "publicword done", "reasoning_content": "secretword6"},
        {"role": "user", "content": "next"},
    ]
    (error, text, _), = await calls(home, select("oa", messages, "openai"))
    assert not error, text
    ref = "ledger:oa"
    (_, _, found), = await calls(home, ("search_history", {"query": "", "session": ref,
                                                          "limit": 10, "load": True}))
    ids = [r["history_id"] for r in found["references"]]
    requests = [("search_history", {"query": q, "session": ref, "load": True})
                for q in ("secretword1", "chain of thought", "summary", "publicword")]
    requests += [("browse_history", {"direction": "forward", "count": 10, "session": ref}),
                 ("load_history", {"history_ids": ids[:3], "session": ref})]
    requests += [("read_context_output", {"history_id": i, "source": "assistant",
                                          "content_index": k, "session": ref})
                 for i in ids for k in range(5)]
    requests += [("recall", {"history_id": i, "session": ref}) for i in ids]
    requests += [("recall", {"tool_call_id": "c1", "session": ref})]
    replies = await calls(home, *requests)
    text = "\n".join(t.replace("secretword1", "") if "query" in r[1] else t
                     for r, (_, t, _) in zip(requests, replies, strict=True))
    assert "secretword" not in text
    assert "publicword answer" in text and "publicword listing" in text
    assert b"secretword" not in home_bytes(home, "index", "state")


def test_a_thinking_block_inside_user_content_is_never_text_for_a_model():
    from context_paging.paging.formats import to_views

    thinking = {"type": "thinking", "thinking": "secretword7", "signature": "secretword8"}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, thinking]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "out"}, thinking]}]},
    ]
    views = to_views(messages, "anthropic")
    texts = [b.get("text", "") for v in views.views for b in v.message["content"]
             if isinstance(b, dict) and b.get("type") == "text"]
    assert texts == ["hi", "out"]


# --- 4. Anthropic server tools are complete exchanges ---------------------------------------------


def server_tool_turn() -> dict:
    return {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
         "input": {"query": "zanzibar release notes"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
            {"type": "web_search_result", "url": "https://example.org/zanzibar",
             "title": "Zanzibar 4.2 release notes", "encrypted_content": "opaqueblob",
             "page_age": "2 days"}]},
        {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "lookup", "server_name": "docs",
         "input": {"q": "quokka"}},
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": False,
         "content": [{"type": "text", "text": "quokka handbook page"}]},
        {"type": "text", "text": "Version 4.2 is out."}]}


async def test_server_tool_uses_with_their_results_are_accepted_kept_and_searchable(tmp_path):
    home = ledger_home(tmp_path)
    first = [{"role": "user", "content": "what is new in zanzibar?"}, server_tool_turn()]
    later = first + [{"role": "user", "content": "thanks"}]
    replies = await calls(
        home, select("srv", first), select("srv", later),
        select("srv", later, token_budget=100, trim_to_tokens=30),
        ("search_history", {"query": "zanzibar release notes", "session": "ledger:srv"}),
        ("search_history", {"query": "quokka handbook", "session": "ledger:srv"}))
    for error, text, _ in replies[:3]:
        assert not error, text
    assert replies[1][2]["messages"] == later  # within budget: the window is the request
    for window in (replies[1][2]["messages"], replies[2][2]["messages"]):
        kept = [m for m in window if m.get("content") == server_tool_turn()["content"]]
        assert len(kept) <= 1  # the turn is whole or gone, never split
    for error, text, value in replies[3:]:
        assert not error and value["references"], text
        assert value["references"][0]["kind"] == "model_turn"
    assert "opaqueblob" not in "".join(t for _, t, _ in replies[3:])


async def test_a_claude_code_file_ending_with_a_server_tool_turn_shows_it(tmp_path):
    roots, home = agent_roots(tmp_path)
    base = {"isSidechain": False, "userType": "external", "cwd": "/work/c",
            "sessionId": "srv", "version": "2.1.37", "timestamp": "2026-03-01T00:00:01Z"}
    turn = server_tool_turn()
    lines = [{**base, "type": "user", "uuid": "u1", "parentUuid": None,
              "message": {"role": "user", "content": "what is new in zanzibar?"}}]
    for n, block in enumerate(turn["content"]):  # Claude Code writes one line per block
        lines.append({**base, "type": "assistant", "uuid": f"a{n}", "parentUuid": lines[-1]["uuid"],
                      "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                  "model": "claude-opus-4-6", "content": [block],
                                  "stop_reason": "end_turn" if n == 4 else None}})
    path = roots["claude"] / "-work-c" / "srv.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    replies = await calls(home, ("browse_history", {"direction": "backward",
                                                    "session": "claude:srv"}),
                          ("search_history", {"query": "zanzibar release notes",
                                              "session": "claude:srv", "load": True}))
    (error, text, browsed), (error2, text2, found) = replies
    assert not error and not error2, (text, text2)
    assert [r["kind"] for r in browsed["references"]] == ["model_turn", "user"], text
    assert found["references"] and found["references"][0]["kind"] == "model_turn", text2
    assert "opaqueblob" not in text + text2


# --- 5. every request line gets an answer over stdio ----------------------------------------------


def start_serve(home: Path, *flags: str):
    import shutil
    import subprocess

    executable = shutil.which("context-paging", path=os.path.dirname(sys.executable))
    assert executable, "the console script is installed next to the test interpreter"
    return subprocess.Popen([executable, "--home", str(home), *flags, "serve"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_replies(server, ids: set[int]) -> dict[int, dict]:
    """The replies with these ids, read from the pipe itself (a buffered reader may hold a
    second line that ``select`` then never sees), each within 30 s."""
    import select as select_module

    replies: dict[int, dict] = {}
    fd, pending = server.stdout.fileno(), b""
    while not ids <= set(replies):
        while b"\n" not in pending:
            ready, _, _ = select_module.select([fd], [], [], 30)
            assert ready, f"no answer for {sorted(ids - set(replies))}"
            data = os.read(fd, 1 << 20)
            assert data, f"serve closed its output with no answer for {sorted(ids - set(replies))}"
            pending += data
        line, _, pending = pending.partition(b"\n")
        reply = json.loads(line)
        if "id" in reply:  # a notification has none
            replies[reply["id"]] = reply
    return replies


def finish(server) -> str:
    """Close the server's input, wait for it to exit, and return what it wrote on stderr."""
    try:
        server.stdin.close()
        server.wait(30)
        return server.stderr.read().decode()
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
        server.stderr.close()


INITIALIZE = [
    json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
]


def test_unreadable_request_lines_are_answered_over_stdio_with_one_warning_each(tmp_path):
    home = ledger_home(tmp_path)
    server = start_serve(home)
    deep: dict = {"a": 1}
    for _ in range(200):
        deep = {"x": deep}
    lines = [
        *INITIALIZE,
        # json.dumps would escape the backslash; these are the raw bytes a host sends
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_history",'
        '"arguments":{"query":"\\ud800","session":"ledger:none"}}}',
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "search_history", "arguments": {"query": "a", "files": [deep]}}}),
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":',
        json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
    ]
    try:
        server.stdin.write("".join(line + "\n" for line in lines).encode())
        server.stdin.flush()
        replies = read_replies(server, {0, 1, 2, 3, 4})
    finally:
        stderr = finish(server)
    assert replies[1]["result"]["isError"] is True
    assert replies[1]["result"]["content"][0]["text"].startswith("UNKNOWN_SESSION: ")
    assert replies[2]["error"]["code"] == -32600
    assert replies[3]["error"]["code"] == -32700
    assert len(replies[4]["result"]["tools"]) == 8
    warnings = [line for line in stderr.splitlines() if line.strip()]
    assert len(warnings) == 3 and "Traceback" not in stderr, stderr


# --- 9. a request size limit, configurable, answered without parsing the request ------------------


@pytest.mark.parametrize("how", ["flag", "config"])
def test_a_select_context_request_over_the_limit_is_refused_with_a_clear_code(tmp_path, how):
    home = ledger_home(tmp_path)
    limit = 200_000
    if how == "config":
        config = home / "config.toml"
        config.write_text(config.read_text().replace(
            "[paging]\n", f"[paging]\nmax_request_bytes = {limit}\n"))
    server = start_serve(home, *(["--set", f"paging.max_request_bytes={limit}"]
                                 if how == "flag" else []))
    small = exchange("t1", "fits")
    big = exchange("t2", "y" * (limit + 10))

    def request(ident: int, messages: list[dict], id_last: bool = False) -> str:
        body = {"method": "tools/call", "params": {"name": "select_context", "arguments": {
            "session": "lim", "messages": messages, "format": "anthropic"}}}
        head = {"jsonrpc": "2.0", "id": ident}
        # Python clients write the id first, TypeScript clients last
        return json.dumps({**body, **head} if id_last else {**head, **body})

    try:
        server.stdin.write("".join(line + "\n" for line in [
            *INITIALIZE, request(1, small), request(2, big), request(3, big, id_last=True),
            json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})]).encode())
        server.stdin.flush()
        replies = read_replies(server, {0, 1, 2, 3, 4})
    finally:
        stderr = finish(server)
    assert replies[1]["result"].get("isError") is not True
    for ident in (2, 3):
        result = replies[ident]["result"]
        assert result["isError"] is True
        text = result["content"][0]["text"]
        assert text.startswith("REQUEST_TOO_LARGE: ") and f"{limit:,}" in text, text
        assert "max_request_bytes" in text
    assert replies[4]["result"]["tools"]
    assert stderr.count("max_request_bytes") == 2 and "Traceback" not in stderr, stderr
