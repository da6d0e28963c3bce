"""The Gemini CLI and OpenCode readers (index/sources/gemini.py, opencode.py) on sessions recorded
by running the real binaries against a fake provider on loopback (tests/fixtures/recorded/), and
on small hand-made variants; then ``sessions`` and ``search --scope all`` over all five agents.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from context_paging.index.catalog import Catalog
from context_paging.index.discovery import SessionRefError, iter_session_files, resolve
from context_paging.index.jsonl import read_jsonl
from context_paging.index.model import HiddenBlock, TextBlock, ToolCall, Usage
from context_paging.index.sources import detect, gemini, opencode
from context_paging.server.cli import main

RECORDED = Path(__file__).resolve().parent / "fixtures" / "recorded"
GEMINI_FILE = RECORDED / "gemini" / "exporter" / "chats" / \
    "session-2026-12-06T02-33-2561e3b3.jsonl"
OPENCODE_SQL = RECORDED / "opencode" / "opencode.sql"
OPENCODE_ID = "ses_db6cd401effeQlJl19CicLQIRx"


def opencode_root(tmp_path: Path) -> Path:
    root = tmp_path / "opencode"
    root.mkdir()
    database = sqlite3.connect(root / opencode.DATABASE)
    database.executescript(OPENCODE_SQL.read_text(encoding="utf-8"))
    database.commit()
    database.close()
    return root


def gemini_root(tmp_path: Path) -> Path:
    root = tmp_path / "gemini"
    shutil.copytree(RECORDED / "gemini", root)
    return root


# --- Gemini CLI ---------------------------------------------------------------------------


def test_a_recorded_gemini_chat_reads_as_prompt_calls_results_and_answer():
    records = read_jsonl(str(GEMINI_FILE)).records
    assert detect(records, str(GEMINI_FILE)) == "gemini"
    conversation = gemini.build(records, str(GEMINI_FILE))
    roles = [m.role for m in conversation.messages]
    assert roles == ["user", "assistant", "tool_result", "assistant", "tool_result", "assistant"]
    first = conversation.messages[0]
    assert first.content == (TextBlock("Say hello and run a command; task token geminiprompt9x"),)
    call = conversation.messages[1].content[-1]
    assert isinstance(call, ToolCall) and call.name == "run_shell_command"
    assert call.arguments == {"command": "echo geminimarker42zq"}
    result = conversation.messages[2]
    assert result.tool_call_id == call.id and result.tool_name == "run_shell_command"
    assert "Output: geminimarker42zq" in result.content[0].text
    assert conversation.messages[-1].content == (TextBlock("Done: geminifinal77 answer."),)
    # the session context is counted, its workspace is the cwd; repeated ids replaced in place
    assert conversation.stats["skipped_context"] == 1 and conversation.stats["replaced"] == 2
    info = conversation.info
    assert info.session_id == "2561e3b3-f521-4a8f-aefe-12f5abc45590"
    assert info.cwd == "/home/dev/exporter" and info.format == "gemini-main"
    assert info.updated == "2026-12-06T02:33:01.316Z"
    assert conversation.usage == Usage(11546 + 11653 + 11763, 15, 0, 0, 0)
    assert conversation.warnings == ()


def test_gemini_thoughts_are_hidden_slots_never_text(tmp_path):
    path = tmp_path / "session-2026-01-01T00-00-aaaabbbb.jsonl"
    lines = [
        {"sessionId": "aaaabbbb-0000", "projectHash": "x", "startTime": "2026-01-01T00:00:00Z",
         "kind": "main"},
        {"id": "u1", "timestamp": "t1", "type": "user", "content": [{"text": "hi"}]},
        {"id": "g1", "timestamp": "t2", "type": "gemini", "content": "visible",
         "thoughts": [{"subject": "PLANTED", "description": "PLANTED-secret-thought"}],
         "tokens": {"input": 100, "cached": 40, "output": 5, "thoughts": 7}},
        {"id": "i1", "timestamp": "t3", "type": "info", "content": "a notice"},
    ]
    path.write_text("".join(json.dumps(v) + "\n" for v in lines), encoding="utf-8")
    conversation = gemini.build(read_jsonl(str(path)).records, str(path))
    answer = conversation.messages[-1]
    assert answer.content == (HiddenBlock("thinking"), TextBlock("visible"))
    assert "PLANTED" not in repr(conversation.messages)
    assert answer.usage == Usage(60, 5, 40, 0, 7)  # input counts the cached tokens
    assert conversation.stats["other_messages"] == 1


def test_a_gemini_call_without_a_user_result_line_takes_the_stored_result(tmp_path):
    path = tmp_path / "session-2026-01-01T00-00-ccccdddd.jsonl"
    response = {"id": "c1", "name": "read_file", "response": {"error": "no such file"}}
    lines = [
        {"sessionId": "ccccdddd-0000", "projectHash": "x", "startTime": "s", "kind": "main"},
        {"id": "u1", "timestamp": "t1", "type": "user", "content": "read it"},
        {"id": "g1", "timestamp": "t2", "type": "gemini", "content": "",
         "toolCalls": [{"id": "c1", "name": "read_file", "args": {"path": "a"},
                        "result": [{"functionResponse": response}]}]},
        {"$set": {"lastUpdated": "t9"}},
    ]
    path.write_text("".join(json.dumps(v) + "\n" for v in lines), encoding="utf-8")
    conversation = gemini.build(read_jsonl(str(path)).records, str(path))
    result = conversation.messages[-1]
    assert result.role == "tool_result" and result.is_error
    assert result.content == (TextBlock("no such file"),) and result.tool_call_id == "c1"
    assert conversation.info.updated == "t9" and conversation.info.title == "read it"


# --- OpenCode -----------------------------------------------------------------------------


def test_a_recorded_opencode_session_reads_from_its_database(tmp_path):
    root = opencode_root(tmp_path)
    database = str(root / opencode.DATABASE)
    assert opencode.session_ids(database, str(root)) == [OPENCODE_ID]
    conversation = opencode.build(opencode.read_records(database, OPENCODE_ID, str(root)),
                                  database)
    roles = [m.role for m in conversation.messages]
    assert roles == ["user", "assistant", "tool_result", "assistant"]
    call = conversation.messages[1].content[-1]
    assert isinstance(call, ToolCall) and call.name == "bash"
    assert call.arguments["command"] == "echo opencodemarker42zq"
    assert conversation.messages[1].stop_reason == "tool_use"
    assert conversation.messages[2].tool_call_id == call.id
    assert conversation.messages[2].content == (TextBlock("opencodemarker42zq\n"),)
    assert conversation.messages[3].stop_reason == "stop"
    info = conversation.info
    assert (info.session_id, info.title, info.cwd) == (OPENCODE_ID, "Recorded title",
                                                       "/home/dev/exporter")
    assert info.format == "opencode-1.18.33"
    assert conversation.usage == Usage(7648 + 7732, 10, 0, 0, 0)


def test_opencode_reasoning_is_hidden_and_steps_split_responses(tmp_path):
    root = opencode_root(tmp_path)
    database = sqlite3.connect(root / opencode.DATABASE)
    message = "msg_24932cb82001djq1PeAt32MU1d"
    for number, data in enumerate([{"type": "reasoning", "text": "PLANTED-reasoning"},
                                   {"type": "step-start"},
                                   {"type": "text", "text": "second step"}]):
        database.execute("INSERT INTO part VALUES (?, ?, ?, 0, 0, ?)",
                         (f"prt_zz{number}", message, OPENCODE_ID, json.dumps(data)))
    database.commit()
    database.close()
    path = str(root / opencode.DATABASE)
    conversation = opencode.build(opencode.read_records(path, OPENCODE_ID, str(root)), path)
    last_two = conversation.messages[-2:]
    assert HiddenBlock("thinking") in last_two[0].content
    assert last_two[1].content == (TextBlock("second step"),)
    assert "PLANTED" not in repr(conversation.messages)


def test_an_opencode_reference_names_a_session_and_the_database_path_is_refused(tmp_path):
    roots = {"opencode": opencode_root(tmp_path)}
    found = resolve(f"opencode:{OPENCODE_ID}", roots)
    assert found.path.name == opencode.DATABASE
    with pytest.raises(SessionRefError, match="opencode:<id>"):
        resolve(str(found.path), roots)


def test_an_opencode_session_is_read_again_when_the_database_changes(tmp_path):
    root = opencode_root(tmp_path)
    catalog = Catalog({"opencode": root})
    _, session = catalog.session(f"opencode:{OPENCODE_ID}")
    assert len(session.conversation.messages) == 4
    database = sqlite3.connect(root / opencode.DATABASE)
    database.execute("INSERT INTO message VALUES ('msg_zzz', ?, 9796524395394, 0, ?)",
                     (OPENCODE_ID, json.dumps({"role": "user"})))
    database.execute("INSERT INTO part VALUES ('prt_zzz', 'msg_zzz', ?, 0, 0, ?)",
                     (OPENCODE_ID, json.dumps({"type": "text", "text": "one more"})))
    database.commit()
    database.close()
    _, session = catalog.session(f"opencode:{OPENCODE_ID}")
    assert session.conversation.messages[-1].content == (TextBlock("one more"),)


# --- listing and search over all five ---------------------------------------------------------


@pytest.fixture
def five(tmp_path: Path) -> Path:
    """A home whose sources hold the project's samples plus the two recorded sessions."""
    samples = Path(__file__).resolve().parent / "fixtures" / "sessions"
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{samples / "pi"}"\nclaude_code = "{samples / "claude-code"}"\n'
        f'codex = "{samples / "codex"}"\ngemini = "{gemini_root(tmp_path)}"\n'
        f'opencode = "{opencode_root(tmp_path)}"\n')
    return home


def test_sessions_lists_gemini_and_opencode_beside_the_other_three(five, capsys):
    assert main(["--home", str(five), "sessions", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["sessions"]
    sources = {item["source"] for item in listed}
    assert sources == {"pi", "claude", "codex", "gemini", "opencode"}
    refs = {item["ref"] for item in listed}
    assert {"gemini:2561e3b3", f"opencode:{OPENCODE_ID}"} <= refs
    assert main(["--home", str(five), "sessions", "--source", "opencode"]) == 0
    assert f"opencode:{OPENCODE_ID}"[:20] in capsys.readouterr().out


@pytest.mark.parametrize(("word", "ref"), [("geminifilemarker55", "gemini:2561e3b3"),
                                           ("opencodemarker42zq", f"opencode:{OPENCODE_ID}")])
def test_search_scope_all_finds_a_line_from_each(five, monkeypatch, tmp_path, capsys, word, ref):
    monkeypatch.chdir(tmp_path)
    assert main(["--home", str(five), "search", word, "--scope", "all"]) == 0
    out = capsys.readouterr().out
    assert ref in out and word in out


def test_discovery_finds_only_chat_files_under_the_gemini_root(tmp_path):
    root = gemini_root(tmp_path)
    (root / "exporter" / "logs.json").write_text("[]")
    (root / "exporter" / "other.jsonl").write_text("{}\n")
    found = list(iter_session_files({"gemini": root}))
    assert [(f.source, f.session_id) for f in found] == [("gemini", "2561e3b3")]


@pytest.mark.parametrize(("ref", "call_word", "output"), [
    ("gemini:2561e3b3", "run_shell_command", "Output: geminimarker42zq"),
    (f"opencode:{OPENCODE_ID}", "bash", "opencodemarker42zq"),
])
def test_each_session_is_browsed_loaded_and_recalled_with_no_private_text(five, ref, call_word,
                                                                          output):
    from context_paging.server.config import load_settings
    from context_paging.server.histories import make_history

    history = make_history(load_settings(home=str(five)))
    try:
        items, _ = history.browse(ref, direction="forward", sequence=0, count=10)
        turns = [i for i in items if i.get("tools")]
        assert turns and call_word in turns[0]["tools"]
        loaded = history.load(ref, [turns[0]["history_id"]])
        text = json.dumps(loaded)
        assert output in text and "Let me think" not in text and "c2lnbmF0dXJl" not in text
        call_id = loaded[0]["tool_results"][0]["tool_call_id"]
        assert output in history.recall(ref, tool_call_id=call_id).text
    finally:
        history.close()


def test_a_file_that_is_no_opencode_database_lists_no_session_and_says_why(tmp_path, caplog):
    root = tmp_path / "opencode"
    root.mkdir()
    (root / opencode.DATABASE).write_bytes(b"not a database at all" * 100)
    assert list(iter_session_files({"opencode": root})) == []
    assert "OpenCode's sessions not listed" in caplog.text
