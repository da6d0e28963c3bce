"""Pi session files (docs/sessions.md, "Pi") read into the normalized model: the recorded
sessions (marked ``recorded``) and small hand-made records; tests/test_samples.py covers the
project's own samples."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from context_paging.index.history import project, public_item
from context_paging.index.jsonl import Record, read_jsonl
from context_paging.index.model import HiddenBlock, TextBlock, ToolCall, Usage
from context_paging.index.sources import detect
from context_paging.index.sources.pi import active_path, build, migrate

from tests.conftest import FIXTURES, RECORDED, fixture, recorded

CONCAT = "pi-v1-real-compaction-with-concatenated-line.jsonl"
LARGE = "pi-v1-real-large-session-aborted-and-model-change.jsonl"
TWO_COMPACTIONS = "pi-v1-real-two-compactions-bash-exec.jsonl"
BRANCHING = "pi-v3-SYNTHETIC-branching-compaction-unknown-entry.jsonl"
TINY = "pi-v3-real-redacted-smoke-session-info.jsonl"
PI_FIXTURES = RECORDED["pi"]


def load(name: str):
    path = str(fixture(name))
    return build(read_jsonl(path).records, path)


def items_of(conv):
    return project(conv.messages).items


def rec(line: int, **value) -> Record:
    return Record(line, line * 100, value)


def header(version: int | None = 3, **extra) -> dict:
    value = {"type": "session", "id": "S", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}
    if version is not None:
        value["version"] = version
    return value | extra


def msg(line: int, entry_id: str | None, parent: str | None, message: dict, **extra) -> Record:
    value = {"type": "message", "timestamp": f"2026-01-01T00:00:{line:02d}.000Z",
             "message": message} | extra
    if entry_id is not None:
        value |= {"id": entry_id, "parentId": parent}
    return Record(line, line * 100, value)


def user(text="hi"):
    return {"role": "user", "content": text, "timestamp": 1}


def assistant(*blocks, stop="stop"):
    return {"role": "assistant", "content": list(blocks), "model": "m", "stopReason": stop,
            "usage": {"input": 1, "output": 2, "cacheRead": 3, "cacheWrite": 4}}


# --- every fixture -----------------------------------------------------------------------------


@recorded
def test_the_fixture_folder_holds_the_five_pi_samples():
    on_disk = sorted(p.name for p in (FIXTURES / "pi").glob("*.jsonl"))
    assert on_disk == PI_FIXTURES == sorted([CONCAT, LARGE, TWO_COMPACTIONS, BRANCHING, TINY])


@recorded
@pytest.mark.parametrize("name", PI_FIXTURES)
def test_every_pi_fixture_is_detected_and_loads(name):
    path = str(fixture(name))
    records = read_jsonl(path).records
    assert detect(records, path) == "pi"
    conv = build(records, path)
    assert conv.info.source == "pi" and conv.messages


# user items, model turns, and messages by role (user, assistant, tool_result).
EXPECTED_COUNTS = {
    # 44 user + 1 bashExecution lines; 220 assistant lines, none pending at the end (last
    # message is a stop); 189 toolResult lines. Line 440 adds one assistant and one user; the
    # compaction's summary is one more user item.
    CONCAT: (46, 220, {"user": 46, "assistant": 220, "tool_result": 189}),
    # 88 user lines, no bashExecution; 453 assistant lines (last one stops); 373 toolResult.
    LARGE: (88, 453, {"user": 88, "assistant": 453, "tool_result": 373}),
    # 55 user + 3 bashExecution lines; 484 assistant lines (the file ends with a bash run, so
    # no turn is pending); 448 toolResult lines; the two compactions' summaries are user items.
    TWO_COMPACTIONS: (60, 484, {"user": 60, "assistant": 484, "tool_result": 448}),
    # Active path e1 → e2 → e7 → e8: user e1, assistant e7 whose call-2 has no result and is
    # the last message, so project() leaves that turn out as pending.
    BRANCHING: (1, 0, {"user": 1, "assistant": 1}),
    # One user and one assistant (stop) line on a straight path.
    TINY: (1, 1, {"user": 1, "assistant": 1}),
}


@recorded
@pytest.mark.parametrize("name", PI_FIXTURES)
def test_each_fixture_yields_the_counted_items_and_messages(name):
    conv = load(name)
    kinds = Counter(item.kind for item in items_of(conv))
    users, turns, roles = EXPECTED_COUNTS[name]
    assert (kinds["user"], kinds["model_turn"]) == (users, turns)
    assert dict(Counter(m.role for m in conv.messages)) == roles


# Tool calls without a result, from a raw scan (call ids minus toolResult.toolCallId):
UNPAIRED = {
    CONCAT: set(),  # 189 calls, 189 results
    # 391 calls vs 373 results: all 18 belong to aborted (2) or error (16) assistant messages.
    LARGE: {
        "toolu_011mk4qaB89ZVgGUK3FDLMAy", "toolu_016i8caCv6EqBx4nQUJmnEvU",
        "toolu_017igA3hffBefoKhvK7ow388", "toolu_019Tx1dA75PzTCz5f6Rs1WV4",
        "toolu_019nCFejmUgXPai9ezvE2KRu", "toolu_01AW1CNSFAmKzC5chvgXJgDD",
        "toolu_01DHqJEvLE9CXCnyH7wLe1CK", "toolu_01DYhmrkmbTiGMggbpFz5oZ8",
        "toolu_01DhvFkJv7TfnCLAwBHm4QPY", "toolu_01FcWTz8gwoRyxHZXoCFXjuT",
        "toolu_01FqnM5dBVJFXhsg447MgoHG", "toolu_01GWNT3XwKZHKFoLmrkH4UAF",
        "toolu_01HouTyCHYS3XgNt8KVbob9P", "toolu_01KrqyacVY2SCsSeAKd8sFqm",
        "toolu_01LkEwZGqXuB8Rf98H5ZiBjE", "toolu_01S3kgrEgH1rzNok91eKmknL",
        "toolu_01Sd8bP7StDNLVSP6ERSyADM", "toolu_01UqZWxWcVbBgPN8MQ3uaEQq",
    },
    # 454 calls vs 448 results: 5 on aborted messages, 1 (line 628) cut off by the compaction
    # on line 629.
    TWO_COMPACTIONS: {
        "toolu_0134E2F4jLV9HVUFhunmam8N", "toolu_01571BXn2nSXvrR7sxVHAXXE",
        "toolu_01F2Xbizd52r1AuErXgFpR6W", "toolu_01G37VFJMMftUXQaqu3pHizc",
        "toolu_01GBRsfbomRe6sBo32xf6hPK", "toolu_01XfdvT2StjnLNw7MpkvVvJP",
    },
    BRANCHING: {"call-2"},  # e7's call on the active path; e4 answers call-1 off the path
    TINY: set(),  # no tool calls
}
# The unpaired calls that project() reports, and how (the rest are interrupted turns).
REPORTED = {
    TWO_COMPACTIONS: [("INCOMPLETE_TOOL_RESULTS", 628)],
    BRANCHING: [("PENDING_TOOL_RESULTS", 8)],
}


@recorded
@pytest.mark.parametrize("name", PI_FIXTURES)
def test_every_tool_call_pairs_or_is_an_interrupted_turn_or_is_reported(name):
    conv = load(name)
    projection = project(conv.messages)
    calls = {c.id: m for m in conv.messages if m.role == "assistant" for c in m.tool_calls}
    paired = {r.tool_call_id for item in projection.items for r in item.tool_results}
    unpaired = set(calls) - paired
    assert unpaired == UNPAIRED[name]
    reported_lines = {issue.line for issue in projection.issues}
    for call_id in unpaired:
        assert calls[call_id].interrupted or calls[call_id].line in reported_lines
    assert [(i.kind, i.line) for i in projection.issues] == REPORTED.get(name, [])


def _private_strings(path) -> set[str]:
    found: set[str] = set()

    def visit(value):
        if isinstance(value, dict):
            for key, inner in value.items():
                if key in ("thinking", "thinkingSignature", "textSignature", "thoughtSignature",
                           "signature") and isinstance(inner, str) and len(inner) >= 16:
                    found.add(inner)
                visit(inner)
        elif isinstance(value, list):
            for inner in value:
                visit(inner)

    for record in read_jsonl(str(path)).records:
        visit(record.value)
    return found


@recorded
@pytest.mark.parametrize("name", PI_FIXTURES)
def test_no_thinking_or_signature_text_reaches_the_public_view_or_the_conversation(name):
    conv = load(name)
    public = json.dumps([public_item(i) for i in items_of(conv)], ensure_ascii=False)
    everything = repr(conv)
    for secret in _private_strings(fixture(name)):
        assert secret not in public
        assert secret not in everything


@recorded
def test_the_fixtures_really_contain_thinking_and_signatures_to_hide():
    assert len(_private_strings(fixture(TWO_COMPACTIONS))) > 50
    assert "[REDACTED_TEXTSIGNATURE]" in _private_strings(fixture(TINY))


# --- v1 ----------------------------------------------------------------------------------------


@recorded
def test_both_objects_glued_on_line_440_are_messages_with_ids_L440_and_L440_1():
    conv = load(CONCAT)
    by_id = {m.id: m for m in conv.messages}
    first, second = by_id["L440"], by_id["L440.1"]
    assert (first.role, first.line, first.stop_reason) == ("assistant", 440, "stop")
    assert first.content == (HiddenBlock("thinking"), TextBlock("Done."))
    assert (second.role, second.line, second.origin) == ("user", 440, "typed")
    assert second.content == (TextBlock("ok"),)
    ids = [m.id for m in conv.messages]
    assert ids.index("L440.1") == ids.index("L440") + 1


@recorded
@pytest.mark.parametrize("name", [CONCAT, LARGE, TWO_COMPACTIONS])
def test_v1_message_ids_are_their_line_numbers_and_unique(name):
    conv = load(name)
    ids = [m.id for m in conv.messages]
    assert len(set(ids)) == len(ids)
    assert all(m.id == f"L{m.line}" for m in conv.messages if m.id != "L440.1")
    assert conv.info.format == "pi-v1"


@recorded
def test_v1_entries_form_one_chain_through_the_previous_entry():
    entries = migrate(read_jsonl(str(fixture(CONCAT))).records).entries
    assert entries[0].parent_id is None
    assert all(b.parent_id == a.id for a, b in zip(entries, entries[1:], strict=False))
    assert [e.id for e in entries[438:441]] == ["L440", "L440.1", "L441"]


@recorded
def test_v1_first_kept_entry_index_becomes_the_id_of_that_entry():
    # firstKeptEntryIndex counts objects with the header as 0, so index n is line n + 1 here.
    concat = migrate(read_jsonl(str(fixture(CONCAT))).records).entries
    two = migrate(read_jsonl(str(fixture(TWO_COMPACTIONS))).records).entries
    assert [e.first_kept_id for e in concat if e.type == "compaction"] == ["L356"]
    assert [e.first_kept_id for e in two if e.type == "compaction"] == ["L294", "L552"]
    kept_roles = [e.value["message"]["role"] for e in two if e.id in ("L294", "L552")]
    assert kept_roles == ["user", "user"]


@recorded
def test_aborted_and_error_responses_become_failed_turns():
    conv = load(LARGE)
    stops = Counter(m.stop_reason for m in conv.messages if m.role == "assistant")
    # raw stopReason counts: 366 toolUse, 65 stop, 21 aborted, 1 error
    assert stops == {"tool_use": 366, "stop": 65, "aborted": 21, "error": 1}
    interrupted = [i for i in items_of(conv) if i.message.interrupted]
    assert len(interrupted) == 22 and all(i.failed for i in interrupted)
    empty = next(i for i in interrupted if i.history_id == "L3")  # aborted with empty content
    assert empty.message.content == () and empty.message.stop_reason == "aborted"


@recorded
def test_bash_executions_are_user_messages_with_pi_s_own_text():
    conv = load(TWO_COMPACTIONS)
    bash = [m for m in conv.messages if m.origin == "bash"]
    assert [(m.id, m.role) for m in bash] == [("L640", "user"), ("L997", "user"),
                                               ("L1002", "user")]
    listing = ("AGENTS.md\nbiome.json\nLICENSE\nnode_modules\npackage-lock.json\npackage.json\n"
               "packages\npi-mono.code-workspace\nREADME.md\nscripts\ntsconfig.base.json\n"
               "tsconfig.json\n")
    assert bash[0].content == (TextBlock(f"Ran `ls`\n```\n{listing}\n```"),)
    assert bash[2].content[0].text.startswith("Ran `find .`\n```\n./.git/objects/2d\n")
    assert conv.stats["bash"] == 3
    assert [i.kind for i in items_of(conv) if i.history_id in ("L640", "L997", "L1002")] == [
        "user", "user", "user"]


def test_bash_text_marks_failures_cancellation_and_truncation():
    records = [
        rec(1, **header()),
        msg(2, "a", None, {"role": "bashExecution", "command": "make", "output": "",
                           "exitCode": 2, "cancelled": False, "truncated": False}),
        msg(3, "b", "a", {"role": "bashExecution", "command": "yes", "output": "y",
                          "exitCode": None, "cancelled": True, "truncated": True,
                          "fullOutputPath": "/tmp/out"}),
    ]
    texts = [m.content[0].text for m in build(records, "s.jsonl").messages]
    assert texts == [
        "Ran `make`\n(no output)\n\nCommand exited with code 2",
        "Ran `yes`\n```\ny\n```\n\n(command cancelled)"
        "\n\n[Output truncated. Full output: /tmp/out]",
    ]


@recorded
def test_forked_v1_session_names_its_parent_from_branched_from():
    info = load(TWO_COMPACTIONS).info
    assert (info.parent_id, info.parent_kind) == ("d97339c6-6c10-4827-846b-9ff1d9c3dc37", "fork")
    assert info.session_id == "ffae836b-9420-4060-ac13-7745215f90ff"
    # no session_info: the first prompt's first line, cut to 80 characters
    assert info.title == ("alright, read @packages/coding-agent/src/main.ts "
                          "@packages/coding-agent/src/tui/")
    assert (info.created, info.updated) == ("2025-12-09T00:53:29.825Z", "2025-12-09T01:26:35.570Z")


@recorded
def test_compactions_are_counted_and_their_summaries_are_messages_marked_as_such():
    conv = load(TWO_COMPACTIONS)
    assert conv.compactions == 2
    summaries = [m for m in conv.messages if m.id in ("L360", "L629")]
    assert [(m.role, m.origin) for m in summaries] == [("user", "compaction_summary")] * 2
    assert all(m.content[0].text.strip() for m in summaries)
    assert (conv.stats["model_changes"], conv.stats["thinking_level_changes"]) == (5, 5)


# --- v3 ----------------------------------------------------------------------------------------


@recorded
def test_branching_fixture_follows_the_last_line_back_to_the_root():
    path = str(fixture(BRANCHING))
    assert active_path(read_jsonl(path).records, path) == ["e1", "e2", "e7", "e8"]
    conv = load(BRANCHING)
    assert [m.id for m in conv.messages] == ["e1", "e7"]
    assert conv.messages[1].tool_calls == (ToolCall("call-2", "bash", {}),)


@recorded
def test_branching_fixture_counts_its_compaction_usage_and_unknown_entry():
    conv = load(BRANCHING)
    assert conv.compactions == 1  # e5, on the abandoned branch
    # assistants e3 (10/5), e6 (12/8), e7 (20/10) + toolResult e4 (2/2) + compaction e5 (1/2)
    assert conv.usage == Usage(input=45, output=27)
    assert conv.stats["unknown_entries"] == 1
    assert [(w.kind, w.line) for w in conv.warnings] == [("unknown_type", 9)]
    assert "future_entry" in conv.warnings[0].message
    assert "ignored" not in repr(conv)  # the unknown entry's fields are not carried


@recorded
def test_usage_sums_every_assistant_of_a_linear_file():
    conv = load(TINY)
    assert conv.usage == Usage(input=433, output=9)
    assert conv.messages[1].usage == Usage(input=433, output=9)
    assert conv.messages[1].model == "gpt-5.5"


@recorded
def test_tiny_v3_file_takes_its_title_from_session_info_and_drops_the_text_signature():
    conv = load(TINY)
    info = conv.info
    assert (info.title, info.format, info.cwd) == (
        "agent-history pi smoke", "pi-v3", "/tmp/agent-history-real-agent/pi/workspace")
    assert info.session_id == "019e963d-6bd6-7ade-8a49-256ac3391bdd"
    assert (info.parent_id, info.parent_kind) == (None, None)
    assert conv.messages[1].content == (TextBlock("[REDACTED_ASSISTANT_TEXT]"),)
    assert "[REDACTED_TEXTSIGNATURE]" not in repr(conv)
    assert (conv.stats["session_infos"], conv.stats["skipped_context"]) == (1, 3)


def test_latest_non_empty_session_name_wins():
    records = [
        rec(1, **header()),
        rec(2, type="session_info", id="a", parentId=None, name="first"),
        msg(3, "b", "a", user("prompt")),
        rec(4, type="session_info", id="c", parentId="b", name="second"),
        rec(5, type="session_info", id="d", parentId="c", name="  "),
    ]
    assert build(records, "s.jsonl").info.title == "second"


# --- odd input ---------------------------------------------------------------------------------


def test_a_file_without_header_loads_with_a_warning_and_an_id_from_its_name():
    records = [msg(1, None, None, user("hello\nsecond line")), msg(2, None, None, assistant())]
    conv = build(records, "/x/2025-12-09T00-52-54-397Z_d97339c6.jsonl")
    assert [w.kind for w in conv.warnings] == ["missing_header"]
    assert (conv.info.session_id, conv.info.format, conv.info.title) == (
        "d97339c6", "pi-v1", "hello")
    assert [m.id for m in conv.messages] == ["L1", "L2"]


def test_the_header_may_follow_a_fork_title_line():
    records = [rec(1, type="title", title="x"), rec(2, **header()), msg(3, "a", None, user())]
    conv = build(records, "s.jsonl")
    assert (conv.info.session_id, conv.warnings, conv.stats["pre_header_objects"]) == ("S", (), 1)
    assert [m.id for m in conv.messages] == ["a"]


def test_a_parent_cycle_is_reported_and_the_walk_stops():
    records = [rec(1, **header()), msg(2, "a", "b", user()), msg(3, "b", "a", assistant())]
    conv = build(records, "s.jsonl")
    assert [m.id for m in conv.messages] == ["a", "b"]
    assert [w.kind for w in conv.warnings] == ["cycle"]


def test_an_entry_with_a_missing_parent_is_a_root():
    records = [rec(1, **header()), msg(2, "a", None, user("old")),
               msg(3, "b", "gone", user("new")), msg(4, "c", "b", assistant())]
    conv = build(records, "s.jsonl")
    assert [m.id for m in conv.messages] == ["b", "c"]
    assert [(w.kind, w.line) for w in conv.warnings] == [("orphan", 3)]


def test_a_trailing_leaf_entry_moves_the_leaf_and_a_later_append_moves_it_on():
    base = [rec(1, **header()), msg(2, "a", None, user()), msg(3, "b", "a", assistant()),
            msg(4, "c", "a", user("other"))]
    to_b = base + [rec(5, type="leaf", id="l1", parentId="c", targetId="b")]
    assert active_path(to_b) == ["a", "b"]
    empty = base + [rec(5, type="leaf", id="l1", parentId="c", targetId=None)]
    assert active_path(empty) == [] and build(empty, "s.jsonl").messages == ()
    later = to_b + [msg(6, "d", "b", user("after"))]
    assert active_path(later) == ["a", "b", "d"]


def test_v2_hook_messages_and_custom_messages_are_counted_not_returned():
    records = [
        rec(1, **header(version=2)),
        msg(2, "a", None, user()),
        msg(3, "b", "a", {"role": "hookMessage", "customType": "x", "content": "hook"}),
        rec(4, type="custom_message", id="c", parentId="b", customType="y", content="inject"),
        msg(5, "d", "c", assistant()),
    ]
    conv = build(records, "s.jsonl")
    assert [m.id for m in conv.messages] == ["a", "d"]
    assert (conv.stats["custom_messages"], conv.info.format) == (2, "pi-v2")


def test_assistant_blocks_keep_their_order_and_hide_private_kinds():
    call = {"type": "toolCall", "id": "t1", "name": "read", "arguments": '{"path": "a.py"}',
            "thoughtSignature": "sig-sig-sig-sig-sig"}
    blocks = [{"type": "thinking", "thinking": "", "thinkingSignature": "opaque", "redacted": True},
              {"type": "text", "text": "x", "textSignature": "msg_1"}, call,
              {"type": "toolCall", "id": "t2", "name": "bash", "arguments": "not json"},
              {"type": "mystery", "payload": "secret-secret"}]
    records = [rec(1, **header()), msg(2, "a", None, user()),
               msg(3, "b", "a", assistant(*blocks, stop="toolUse")),
               msg(4, "c", "b", {"role": "toolResult", "toolCallId": "t1", "isError": True,
                                 "content": [{"type": "image", "data": "AAAA",
                                              "mimeType": "image/png"}]})]
    conv = build(records, "s.jsonl")
    reply, result = conv.messages[1], conv.messages[2]
    assert reply.content == (HiddenBlock("redacted_thinking"), TextBlock("x"),
                             ToolCall("t1", "read", {"path": "a.py"}),
                             ToolCall("t2", "bash", "not json"), HiddenBlock("unknown"))
    assert (reply.stop_reason, reply.usage) == ("tool_use", Usage(1, 2, 3, 4))
    assert (result.tool_name, result.is_error, result.content[0].mime) == ("read", True,
                                                                          "image/png")
    for private in ("sig-sig-sig-sig-sig", "opaque", "msg_1", "secret-secret"):
        assert private not in repr(conv)


def test_odd_records_never_raise_and_each_is_reported():
    records = [
        rec(1, **header(parentSession="/p/no-underscore.jsonl")),
        rec(2, type="message", id="a", parentId=None, message="text"),
        rec(3, type="message", id="b", parentId="a", message={"role": "assistant",
                                                              "content": "str"}),
        rec(4, type="message", id="c", parentId="b", message={"role": "alien"}),
        rec(5, type="message", parentId="c", message={"role": "toolResult", "content": [1]}),
        rec(6, type=7, id="f", parentId="L5", timestamp=3),
        rec(7, type="compaction", id="f", parentId="L5", usage="many"),
        rec(8, type="session", id="again"),
    ]
    conv = build(records, "s.jsonl")
    assert sorted(w.kind for w in conv.warnings) == sorted([
        "bad_entry", "bad_content", "unknown_role", "missing_id", "unknown_block",
        "unknown_type", "duplicate_id", "extra_header"])
    assert [m.id for m in conv.messages] == ["b", "L5"]  # the later "f" is the leaf
    assert (conv.info.parent_id, conv.compactions, conv.usage) == ("no-underscore", 1, None)
    v1 = [rec(1, **header(version=None)), msg(2, None, None, user()),
          rec(3, type="compaction", firstKeptEntryIndex=99)]
    assert [w.kind for w in build(v1, "s.jsonl").warnings] == ["dangling_first_kept"]
    odd_version = build([rec(1, **header(version="x")), msg(2, None, None, user())], "s.jsonl")
    assert [w.kind for w in odd_version.warnings] == ["bad_version"]
    newer = build([rec(1, **header(version=4)), msg(2, "a", None, user())], "s.jsonl")
    assert ([w.kind for w in newer.warnings], newer.info.format) == (["newer_version"], "pi-v4")
    assert build([], "empty.jsonl").messages == ()
