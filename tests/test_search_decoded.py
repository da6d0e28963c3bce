"""Search reads what the agents wrote: JSON tool outputs decoded, escapes apart from words,
phrases with backslashes, diff marks and literal escapes matched as typed, the decoded line shown.

The sessions are written here (Codex and Pi formats); the last test reads the recorded Codex
sessions when they are present.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from context_paging.index.discovery import iter_session_files
from context_paging.index.history import decoded_output, search_text
from context_paging.index.search.analysis import tokens
from context_paging.index.search.query import holds_run
from context_paging.index.service import History

from tests.conftest import FIXTURES, RECORDED, recorded
from tests.test_search_compound import pi_line

CODEX_ID = "01997ea4-a70d-7da3-8c20-c736db82a7c5"
STEPS = "STEP-1\nMARKER-0001 gathered\nMARKER-0002 planned\nMARKER-0003 shipped the pager\n"
LATEX = "\\subsection{Gather requirements}\n\\label{sec:req}\n"
CODE = "rows = 'a\\nb'.split('\\n')\nprint('done\\tnext')\n"
PATCH = ("*** Begin Patch\n*** Update File: plan.md\n@@\n-1. Gather requirements later\n"
         "+1. Gather requirements first\n*** End Patch\n")


def exec_output(text: str, code: int = 0) -> str:
    """The exec tool's output as Codex's default model records it: JSON in text."""
    return json.dumps({"chunk_id": "5f1c2a", "wall_time": 0.2, "exit_code": code,
                       "original_token_count": 40, "output": text})


def codex_line(kind: str, payload: dict, n: int) -> str:
    return json.dumps({"timestamp": f"2026-01-01T00:00:{n:02d}.000Z", "type": kind,
                       "payload": payload})


def write_codex_session(root: Path, calls: list[tuple[str, dict, str]]) -> None:
    """A Codex rollout: one request, then one exec call per (name, arguments, output)."""
    lines = [codex_line("session_meta", {"id": CODEX_ID, "cwd": "/work/app",
                                         "timestamp": "2026-01-01T00:00:00.000Z"}, 0),
             codex_line("response_item", {"type": "message", "role": "user", "content": [
                 {"type": "input_text", "text": "run the steps"}]}, 1)]
    for n, (name, arguments, output) in enumerate(calls, start=1):
        lines.append(codex_line("response_item", {
            "type": "function_call", "name": name, "call_id": f"call_{n}",
            "arguments": json.dumps(arguments)}, 2 * n))
        lines.append(codex_line("response_item", {
            "type": "function_call_output", "call_id": f"call_{n}", "output": output}, 2 * n + 1))
    folder = root / "2026" / "01" / "01"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rollout-2026-01-01T00-00-00-{CODEX_ID}.jsonl").write_text("\n".join(lines) + "\n")


def write_pi_session(root: Path, calls: list[tuple[str, dict, str]]) -> None:
    lines = [json.dumps({"type": "session", "version": 3, "id": "s9pipipi",
                         "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/work/app"}),
             pi_line("u0", None, {"role": "user", "content": "go", "timestamp": 1}, 0)]
    parent = "u0"
    for n, (tool, arguments, output) in enumerate(calls, start=1):
        lines.append(pi_line(f"a{n}", parent, {
            "role": "assistant", "model": "m", "stopReason": "toolUse",
            "content": [{"type": "toolCall", "id": f"call_pi_{n}", "name": tool,
                         "arguments": arguments}],
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0}}, 2 * n))
        lines.append(pi_line(f"r{n}", f"a{n}", {
            "role": "toolResult", "toolCallId": f"call_pi_{n}", "toolName": tool,
            "isError": False, "content": [{"type": "text", "text": output}], "timestamp": 2},
            2 * n + 1))
        parent = f"r{n}"
    folder = root / "--work-app--"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "2026-01-01T00-00-00-000Z_s9pipipi.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture
def history(tmp_path):
    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    write_codex_session(roots["codex"], [
        ("exec_command", {"cmd": "./steps.sh"}, exec_output(STEPS)),
        ("exec_command", {"cmd": "cat notes.tex"}, exec_output(LATEX)),
        ("exec_command", {"cmd": "cat split.py"}, exec_output(CODE, code=1)),
        ("apply_patch", {"input": PATCH}, exec_output("Done!")),
        ("exec_command", {"cmd": "echo unrelated"}, exec_output("unrelated words here")),
    ])
    write_pi_session(roots["pi"], [
        ("mcp_run", {"script": "build"},
         json.dumps({"stdout": "compiled 3 files\nwarning: unused pager", "stderr": "",
                     "code": 0})),
        ("bash", {"command": "ls"}, "README.md\nsrc"),
    ])
    history = History(roots, tmp_path / "home")
    yield history
    history.close()


CODEX = f"codex:{CODEX_ID}"


def test_escapes_are_never_glued_to_the_word_after_them():
    raw = '{"output":"STEP-1\\nMARKER-0003 shipped\\tDONE\\r\\nEND \\"quoted\\" C:\\\\Temp"}'
    assert tokens(raw) == ["output", "step-1", "marker-0003", "shipped", "done", "end",
                           "quoted", "c", "temp"]
    assert tokens("a\\u00e9b \\n2") == ["a", "b", "2"]
    # before a lower-case letter the backslash alone separates: LaTeX and paths keep names
    assert tokens("\\newcommand \\textbf{x} \\right") == ["newcommand", "textbf", "x", "right"]


@pytest.mark.parametrize("scope", ["session", "all"])  # the in-memory index, then the disk's
def test_a_word_after_an_escape_in_codex_exec_output_is_found_and_shown_decoded(history, scope):
    reply = history.search("MARKER-0003", CODEX, scope)
    assert [r["history_id"] for r in reply.references] == \
        [history.navigator(CODEX).raw[1].history_id]
    (match,) = reply.references[0]["matches"]
    assert (match["source"], match["tool_call_id"]) == ("tool_result", "call_1")
    assert match["text"] == "MARKER-0003 shipped the pager"
    assert match["text"][slice(*match["spans"][0])] == "MARKER-0003"
    recalled = history.recall(CODEX, tool_call_id="call_1", offset=match["line"], limit=1)
    assert recalled.text.startswith("MARKER-0003 shipped the pager\n")


def test_codex_exec_output_is_its_decoded_text_and_its_exit_code_fails_the_turn(history):
    items = history.navigator(CODEX).raw
    assert items[1].tool_results[0].content[0].text == STEPS
    assert [item.failed for item in items[1:]] == [False, False, True, False, False]
    assert [r["history_id"] for r in history.search("cat", CODEX, failed=True).references] == \
        [items[3].history_id]


@pytest.mark.parametrize("phrase, line", [
    ('"\\subsection{Gather requirements}"', "\\subsection{Gather requirements}"),
    ("\"rows = 'a\\nb'.split('\\n')\"", "rows = 'a\\nb'.split('\\n')"),
    ('"-1. Gather requirements later"', "-1. Gather requirements later"),
    ('"+1. Gather requirements first"', "+1. Gather requirements first"),
])
def test_phrases_with_backslashes_diff_marks_and_literal_escapes_match_as_typed(
        history, phrase, line):
    reply = history.search(phrase, CODEX, "all", limit=3)
    assert len(reply.references) == 1, reply.note
    shown = reply.references[0]["matches"][0]
    assert shown["text"] == line
    assert len(shown["spans"]) == 1  # the phrase, marked as one run


def test_a_tool_call_is_searched_and_shown_as_its_arguments_not_as_json(history):
    reply = history.search('"Gather requirements first"', CODEX)
    (match,) = reply.references[0]["matches"]
    assert (match["source"], match["tool_name"]) == ("assistant", "apply_patch")
    assert match["text"] == "+1. Gather requirements first"
    preview = reply.references[0]["preview"]
    assert preview.startswith("apply_patch input: *** Begin Patch") and '{"type"' not in preview


def test_any_tool_output_that_is_a_json_object_with_stdout_is_searched_decoded(history):
    reply = history.search("unused", "pi:s9pipipi")
    (match,) = reply.references[0]["matches"]
    assert match["text"] == "warning: unused pager"
    assert match["line"] == 1  # the output's one written line: recall's offset
    recalled = history.recall("pi:s9pipipi", tool_call_id="call_pi_1", offset=1, limit=1)
    assert "unused pager" in recalled.text  # recall returns the output as recorded


def test_what_is_decoded_and_what_is_not():
    assert decoded_output('{"stdout": "a\\nb", "stderr": "c"}') == [(1, "a\nb"), (1, "c")]
    # the other members follow as one line of JSON: no word of the output is lost
    assert decoded_output('{\n  "code": 0,\n  "output": "x"\n}') == [(3, "x"), (1, '{"code":0}')]
    assert decoded_output('{"content": [{"type": "text", "text": "t"}]}') == [(1, "t")]
    assert decoded_output('{"output": ""}') == []
    for text in ('{"exit": 0}', "[1, 2]", "{not json}", "plain text", '{"output": 3}'):
        assert decoded_output(text) is None


@recorded
def test_recorded_codex_exec_outputs_are_searched_as_their_decoded_lines(tmp_path):
    """Every recorded Codex session: a line of a JSON-wrapped exec output is found as typed and
    shown decoded (no line shown holds an escaped newline)."""
    import shutil

    root = tmp_path / "codex" / "2026" / "01" / "01"
    root.mkdir(parents=True)
    for n, name in enumerate(RECORDED["codex"]):
        shutil.copy(FIXTURES / "codex" / name,
                    root / f"rollout-2026-01-01T00-00-{n:02d}-{CODEX_ID[:-2]}{n:02d}.jsonl")
    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    history = History(roots, tmp_path / "home")
    try:
        checked = 0
        for ref in sorted({found.ref for found in iter_session_files(roots)}):
            items = history.navigator(ref).visible
            texts = [search_text(item).lower() for item in items]
            for item in items:
                for result in item.tool_results:
                    text = "\n".join(b.text for b in result.content if hasattr(b, "text"))
                    lines = [ln.strip() for ln in text.splitlines()
                             if 25 <= len(ln.strip()) <= 100 and '"' not in ln
                             and "\\" not in ln and len(ln.split()) >= 3
                             and sum(ln.strip().lower() in t for t in texts) == 1]
                    if not lines:
                        continue
                    line = lines[len(lines) // 2]
                    reply = history.search(f'"{line}"', ref, limit=3)
                    mine = [r for r in reply.references if r["history_id"] == item.history_id]
                    assert mine, (ref, line)
                    shown = mine[0]["matches"][0]["text"]
                    assert holds_run(shown, tokens(line)) and "\\n" not in shown, (line, shown)
                    checked += 1
        assert checked >= 20
    finally:
        history.close()


# --- a search emptied by its filters says which ----------------------------------------------


def test_a_search_emptied_by_a_filter_names_that_filter_not_the_spelling(history):
    reply = history.search("MARKER-0003", CODEX, failed=True)
    assert reply.references == []
    assert "'MARKER-0003' matches items, but none that passes the filters (failed)" in reply.note
    assert "without failed: that filter emptied it" in reply.note
    assert "another spelling" not in reply.note
    both = history.search("pager", "pi:s9pipipi", tools=["bash"], failed=False)
    assert both.references == [] and "without tool 'bash'" in both.note
    assert "without not failed" not in both.note  # the successful turn is there without it


def test_a_word_that_is_nowhere_still_gets_the_spelling_advice_with_filters(history):
    reply = history.search("zebra", CODEX, failed=True)
    assert "another spelling" in reply.note and "filters" not in reply.note


# --- compaction summaries are searched and browsed, marked as summaries ----------------------

CLAUDE_ID = "7e57c0de-1111-2222-3333-444455556666"
SUMMARY = ("This session is being continued from a previous conversation that ran out of "
           "context. Summary: the pager keeps RUNBOOK-77 in its notes.")


def write_claude_session(root: Path) -> None:
    """A Claude Code transcript: a prompt and answer, a compaction, its summary, then more."""
    base = {"isSidechain": False, "userType": "external", "cwd": "/work/c",
            "sessionId": CLAUDE_ID, "version": "2.1.37"}
    lines: list[dict] = []

    def add(kind: str, uuid: str, **fields) -> None:
        parent = lines[-1]["uuid"] if lines else None
        lines.append({**base, "type": kind, "uuid": uuid, "parentUuid": parent,
                      "timestamp": f"2026-03-01T00:00:{len(lines):02d}Z", **fields})

    def answer(uuid: str, text: str) -> None:
        add("assistant", uuid, message={"id": f"msg_{uuid}", "type": "message",
                                        "role": "assistant", "model": "claude-opus-4-6",
                                        "content": [{"type": "text", "text": text}],
                                        "stop_reason": "end_turn"})

    add("user", "u1", message={"role": "user", "content": "write the runbook"})
    answer("a1", "Written.")
    add("system", "cb", subtype="compact_boundary", content="Conversation compacted",
        logicalParentUuid="a1", compactMetadata={"trigger": "auto", "preTokens": 150000})
    lines[-1]["parentUuid"] = None
    add("user", "cs", isCompactSummary=True, isVisibleInTranscriptOnly=True,
        message={"role": "user", "content": SUMMARY})
    add("user", "u2", message={"role": "user", "content": "and now the pager"})
    answer("a2", "Done.")
    folder = root / "-work-c"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{CLAUDE_ID}.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))


def test_a_compaction_summary_is_searched_browsed_and_loaded_marked_as_one(tmp_path):
    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    write_claude_session(roots["claude"])
    history = History(roots, tmp_path / "home")
    ref = f"claude:{CLAUDE_ID}"
    try:
        for scope in ("session", "all"):
            (hit,) = history.search("RUNBOOK-77", ref, scope).references
            assert (hit["history_id"], hit["kind"], hit.get("compaction_summary")) == \
                ("cs", "user", True)
            assert hit["matches"][0]["text"].endswith("RUNBOOK-77 in its notes.")
        kinds = [(r["history_id"], r.get("compaction_summary", False))
                 for r in history.browse(ref, direction="forward", count=10)[0]]
        assert kinds == [("u1", False), ("a1", False), ("cs", True), ("u2", False),
                         ("a2", False)]
        (item,) = history.load(ref, ["cs"])
        assert item["compaction_summary"] is True and item["content"][0]["text"] == SUMMARY
        assert "compaction_summary" not in history.load(ref, ["u2"])[0]
    finally:
        history.close()


# --- the CLI: decoded lines, the commands that open a hit, the filter note -------------------


def test_cli_search_shows_the_decoded_line_and_the_commands_that_open_each_hit(tmp_path,
                                                                              capsys):
    from context_paging.server.cli import main

    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    write_codex_session(roots["codex"], [
        ("exec_command", {"cmd": "./steps.sh"}, exec_output(STEPS)),
        ("exec_command", {"cmd": "echo theme"}, exec_output("theme ok")),
    ])
    write_claude_session(roots["claude"])
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{roots["pi"]}"\nclaude_code = "{roots["claude"]}"\n'
        f'codex = "{roots["codex"]}"\n')
    assert main(["--home", str(home), "search", "MARKER-0003", "--session", CODEX]) == 0
    out = capsys.readouterr().out
    hid = out.split("\n")[1].split()[1]
    assert "    > exec_command output call_1 line 4: «MARKER-0003» shipped the pager" in out
    assert f"    open: context-paging show {hid} --session {CODEX}\n" in out
    assert f"    line: context-paging recall call_1 --offset 4 --session {CODEX}\n" in out
    assert "    exec_command cmd: ./steps.sh" in out and '{"type"' not in out  # the preview
    assert main(["--home", str(home), "search", "RUNBOOK-77", "--scope", "all"]) == 0
    assert "cs  #2 user (compaction summary)" in capsys.readouterr().out
    assert main(["--home", str(home), "search", "theme", "--session", CODEX,
                 "--tool", "exec_command", "--failed"]) == 1
    out = capsys.readouterr().out
    assert "'theme' matches items, but none that passes the filters (tool 'exec_command', " \
        "failed). It has hits without failed" in out and "spelling" not in out


def test_a_shell_command_given_as_a_list_is_searched_as_its_words():
    from context_paging.index.history import call_text
    from context_paging.index.model import ToolCall

    heredoc = ToolCall("c1", "shell", {"command": ["bash", "-lc", "cat <<EOF\nnotes here\nEOF"],
                                       "timeout_ms": 1000})
    assert call_text(heredoc) == "shell\ncommand: bash -lc cat <<EOF\nnotes here\nEOF\n" \
        "timeout_ms: 1000"
    assert "notes" in tokens(call_text(heredoc))


def test_cli_a_hit_in_a_tool_call_names_the_output_command_of_its_block(tmp_path, capsys):
    from context_paging.server.cli import main

    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    write_codex_session(roots["codex"], [("apply_patch", {"input": PATCH}, exec_output("Done!"))])
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f'[sources]\ncodex = "{roots["codex"]}"\n')
    assert main(["--home", str(home), "search", '"Gather requirements first"',
                 "--session", CODEX]) == 0
    out = capsys.readouterr().out
    hid = out.split("\n")[1].split()[1]
    command = f"context-paging output {hid} --content-index 0 --session {CODEX}"
    assert f"    line: {command}\n" in out
    assert main(["--home", str(home), *command.split()[1:]]) == 0
    assert "+1. Gather requirements first" in capsys.readouterr().out


@recorded
def test_a_recorded_claude_compaction_summary_is_found_and_marked(tmp_path):
    import shutil

    name = "cc-2.0.76-auto-compact-boundary-and-summary.jsonl"
    session = "198393f2-22db-477b-ac77-1825bea883ae"
    folder = tmp_path / "claude" / "-work-x"
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude-code" / name, folder / f"{session}.jsonl")
    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    history = History(roots, tmp_path / "home")
    try:
        reply = history.search('"Deleted the orphaned session state file"', f"claude:{session}")
        (hit,) = reply.references
        assert (hit["kind"], hit.get("compaction_summary")) == ("user", True)
        assert hit["history_id"] == "8373cdaf-79c9-4b53-87f9-6618ecbefff1"
    finally:
        history.close()


def test_codex_exec_output_after_its_header_part_is_found_and_shown_decoded(tmp_path):
    """Codex's default model calls its ``exec`` tool (JavaScript); the output is recorded as two
    text parts, a header ("Script completed", wall time, "Output:") and the JSON in text."""
    root = tmp_path / "codex"
    lines = [codex_line("session_meta", {"id": CODEX_ID, "cwd": "/work/app",
                                         "timestamp": "2026-01-01T00:00:00.000Z"}, 0),
             codex_line("response_item", {"type": "message", "role": "user", "content": [
                 {"type": "input_text", "text": "run the steps"}]}, 1),
             codex_line("response_item", {
                 "type": "custom_tool_call", "name": "exec", "call_id": "call_x",
                 "input": "const r = await tools.exec_command({cmd: './steps.sh'});\ntext(r);"},
                 2),
             codex_line("response_item", {
                 "type": "custom_tool_call_output", "call_id": "call_x", "output": [
                     {"type": "input_text",
                      "text": "Script completed\nWall time 0.1 seconds\nOutput:\n"},
                     {"type": "input_text", "text": exec_output(STEPS)}]}, 3)]
    folder = root / "2026" / "01" / "01"
    folder.mkdir(parents=True)
    (folder / f"rollout-2026-01-01T00-00-00-{CODEX_ID}.jsonl").write_text("\n".join(lines) + "\n")
    history = History({"pi": None, "claude": None, "codex": root}, tmp_path / "home")
    try:
        for scope in ("session", "all"):
            reply = history.search("MARKER-0003", CODEX, scope)
            assert len(reply.references) == 1, scope
            texts = [m["text"] for m in reply.references[0]["matches"]]
            assert "MARKER-0003 shipped the pager" in texts, texts
            assert not any("\\n" in text for text in texts)
    finally:
        history.close()
    pieces = decoded_output("Script completed\nOutput:\n\n" + exec_output(STEPS))
    assert pieces[0] == (1, "Script completed\nOutput:") and pieces[1] == (4, STEPS)
