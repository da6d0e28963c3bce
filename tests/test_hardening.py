"""Hardening (issue 11): each numbered defect of the adversarial run, as a behaviour sentence.

Every test here failed before its fix. The tools are driven through the SDK's in-memory
``Client`` except where the transport itself is the subject (item 5), which runs the installed
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

import anyio
import pytest
from mcp import Client

import context_paging.index.recall as recall_module
from context_paging.server.config import load_settings
from context_paging.server.mcp_server import create_server
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


async def test_1_nested_counted_repeats_are_refused_before_compiling(tmp_path):
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


async def test_1_a_memory_error_while_compiling_is_a_coded_error(tmp_path, monkeypatch):
    home = ledger_home(tmp_path)

    def exhausted(*args, **kwargs):
        raise MemoryError

    replies = await calls(home, select("mem", exchange("t1", "x")))
    assert not replies[0][0]
    monkeypatch.setattr(recall_module.regex, "compile", exhausted)
    (error, text, _), = await calls(home, ("recall", {
        "tool_call_id": "t1", "pattern": "x", "session": "ledger:mem"}))
    assert error and text.startswith("RECALL_PATTERN: ") and "memory" in text, text


# --- 6. a damaged state file costs only the cut point ----------------------------------------------


@pytest.mark.parametrize("damage", [
    "[" * 100_000,
    json.dumps({"usage_by_response": {"m1": "zz"}, "latest": {"estimated_tokens": "x"}}),
    json.dumps({"usage_by_response": [1, 2], "cut": 7, "anchor": "x", "settings": {}}),
    json.dumps({"latest": [], "evicted_messages": "many", "model_window": {"a": 1}}),
])
async def test_6_a_damaged_state_file_is_set_aside_with_one_warning(tmp_path, caplog, damage):
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


async def test_7_a_result_for_no_call_is_refused_in_the_last_exchange_and_earlier(tmp_path):
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


# --- 8. one code per cause -------------------------------------------------------------------------


async def test_8_a_malformed_session_reference_has_one_code_in_every_tool(tmp_path):
    home = ledger_home(tmp_path)
    bad = "ledger:../x"
    replies = await calls(home, ("paging_stats", {"session": bad}),
                          ("search_history", {"query": "x", "session": bad}),
                          ("browse_history", {"direction": "backward", "session": bad}),
                          ("load_history", {"history_ids": ["m"], "session": bad}),
                          ("recall", {"tool_call_id": "t", "session": bad}))
    codes = {text.split(":", 1)[0] for _, text, _ in replies}
    assert codes == {"INVALID_SESSION"}, [text for _, text, _ in replies]


async def test_8_a_file_name_too_long_names_the_file_not_the_home(tmp_path):
    roots = {name: tmp_path / name for name in ("pi", "claude", "codex")}
    for root in roots.values():
        root.mkdir()
    home = tmp_path / "home"
    write_config(home, roots)
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


async def test_2_a_symlink_swapped_in_while_reading_never_leaks_the_outside_file(tmp_path):
    roots = {name: tmp_path / name for name in ("pi", "claude", "codex")}
    for root in roots.values():
        root.mkdir()
    home = tmp_path / "home"
    write_config(home, roots)
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
            for round_ in range(60):
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
    for error, text in replies:
        assert not error or text.startswith(("UNKNOWN_SESSION: ", "UNKNOWN_HISTORY_ID: ",
                                             "UNKNOWN_TOOL_CALL_ID: ")), text
    assert any(not error and "insideword" in text for error, text in replies)


async def test_2_a_link_swapped_in_right_after_the_check_is_not_read(tmp_path, monkeypatch):
    """The race above, made certain: the file becomes a link to the outside file between the
    roots check and the read."""
    import context_paging.index.service as service_module

    roots = {name: tmp_path / name for name in ("pi", "claude", "codex")}
    for root in roots.values():
        root.mkdir()
    home = tmp_path / "home"
    write_config(home, roots)
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


async def test_2_ledger_and_state_files_replaced_by_links_are_not_followed(tmp_path, caplog):
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
