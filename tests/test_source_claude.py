"""Claude Code source: the recorded sessions (marked ``recorded``), plus small hand-made files for
shapes no recording has (docs/sessions.md, "Claude Code"); tests/test_samples.py covers the
project's own samples."""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from context_paging.index.history import project, public_item
from context_paging.index.jsonl import Record, read_jsonl
from context_paging.index.model import HiddenBlock, ImageBlock, TextBlock, ToolCall, Usage
from context_paging.index.sources import claude, detect

from tests.conftest import FIXTURES, RECORDED, fixture, recorded

CLAUDE_FIXTURES = RECORDED["claude-code"]
REWIND = "cc-SYNTHETIC-rewind-fork-then-compact-preserved-segment.jsonl"
MICRO = "cc-2.1.14-microcompact-and-two-compactions.jsonl"
AUTO = "cc-2.0.76-auto-compact-boundary-and-summary.jsonl"
HOOKS = "cc-2.1.37-tools-thinking-progress-hooks.jsonl"
IMAGE = "cc-2.1.29-user-pasted-image.jsonl"
QUEUE = "cc-2.1.38-small-tool-heavy-queue-ops.jsonl"
SUBAGENT = "cc-2.1.39-subagent-sidechain-file.jsonl"
COMPACT_AGENT = "cc-2.1.39-compaction-agent-sidechain-file.jsonl"


@cache
def load(name: str):
    path = str(fixture(name))
    return claude.build(read_jsonl(path).records, path)


def raw_lines(name: str) -> list[dict]:
    return [json.loads(line) for line in fixture(name).read_text().splitlines() if line.strip()]


def build_values(values: list[dict], path: str = "/s/0000-session.jsonl"):
    return claude.build([Record(i + 1, i * 100, v) for i, v in enumerate(values)], path)


def entry(kind: str, uuid: str, parent: str | None, minute: int, **extra) -> dict:
    value = {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "S", "cwd": "/w",
             "version": "2.1.40", "isSidechain": False,
             "timestamp": f"2026-01-01T10:{minute:02d}:00.000Z"}
    return {**value, **extra}


def said(uuid, parent, minute, content, **extra) -> dict:
    return entry("user", uuid, parent, minute, message={"role": "user", "content": content},
                 **extra)


def answer(uuid, parent, minute, msg_id, blocks, stop=None, **extra) -> dict:
    message = {"id": msg_id, "role": "assistant", "model": "claude-x", "content": blocks,
               "stop_reason": stop, "usage": {"input_tokens": 1, "output_tokens": 2}}
    return entry("assistant", uuid, parent, minute, message=message, **extra)


# --- every fixture -----------------------------------------------------------------------------


@recorded
@pytest.mark.parametrize("name", CLAUDE_FIXTURES)
def test_every_claude_fixture_is_detected_and_loads(name):
    path = str(fixture(name))
    records = read_jsonl(path).records
    assert detect(records, path) == "claude"
    conversation = claude.build(records, path)
    assert conversation.info.source == "claude"
    assert conversation.warnings == ()


# Expected numbers come from a short raw-JSON count that does not use the module: model turns = runs
# of equal consecutive message.id among assistant lines; tool results = tool_result blocks in
# user lines; user items = user lines whose non-result text is typed, a <command-name> slash
# command, or text sent along with tool results (steering) — not isMeta, isCompactSummary,
# <local-command-stdout> or [Request interrupted…].
COUNTS = {
    AUTO: {
        "user": 4,  # /exit (line 4) + 2 typed prompts (lines 8, 26) + the compaction summary
        "model_turn": 13,  # 13 message ids, the first the <synthetic> "No response requested."
        "tool_result": 10,  # 10 tool_result blocks
    },
    MICRO: {
        "user": 10,  # 9 typed string prompts and the compaction summary (line 156)
        "model_turn": 49,  # 49 message ids over 127 fragment lines
        "tool_result": 60,  # 60 tool_result blocks, 20 of them on sibling shapes
    },
    IMAGE: {
        "user": 21,  # 17 typed (one is image-only) + 3 slash commands + 1 text sent with a result
        "model_turn": 89,  # 89 message ids over 147 fragment lines
        "tool_result": 74,  # 74 tool_result blocks
    },
    HOOKS: {
        "user": 2,  # the typed prompt (line 4) and /exit (line 102); line 101 is the caveat
        "model_turn": 20,  # 20 message ids over 46 fragment lines
        "tool_result": 25,  # 25 tool_result blocks
    },
    "cc-2.1.38-main-with-agent-progress.jsonl": {
        "user": 2,  # /handgemacht:create-beads (line 4) and "create the beads" (line 71)
        "model_turn": 12,  # 12 message ids; 19 agent_progress mirrors are not messages
        "tool_result": 16,  # 16 tool_result blocks
    },
    QUEUE: {
        "user": 3,  # 2 typed prompts + /mcp; 2 interrupt markers are not prompts
        "model_turn": 4,  # 4 message ids over 9 fragment lines
        "tool_result": 6,  # 6 tool_result blocks
    },
    COMPACT_AGENT: {
        "user": 1,  # the summarizer's instruction; 2 isMeta <system-reminder> lines are context
        "model_turn": 1,  # 1 assistant line
        "tool_result": 0,  # no tool_result blocks
    },
    SUBAGENT: {
        "user": 1,  # the Task prompt (line 1)
        "model_turn": 3,  # 3 message ids over 5 fragment lines
        "tool_result": 2,  # 2 tool_result blocks
    },
    REWIND: {
        "user": 5,  # 5 typed prompts minus b1u on the abandoned branch, plus the summary cs
        "model_turn": 4,  # 5 responses minus b1a on the abandoned branch
        "tool_result": 0,  # no tools
    },
}


@recorded
def test_counts_cover_every_fixture():
    on_disk = sorted(p.name for p in (FIXTURES / "claude-code").glob("*.jsonl"))
    assert sorted(COUNTS) == CLAUDE_FIXTURES == on_disk


@recorded
@pytest.mark.parametrize("name", sorted(COUNTS))
def test_fixture_has_the_pinned_items_and_messages(name):
    conversation = load(name)
    items = project(conversation.messages).items
    expected = COUNTS[name]
    assert Counter(i.kind for i in items) == Counter(
        {"user": expected["user"], "model_turn": expected["model_turn"]}
    )
    roles = Counter(m.role for m in conversation.messages)
    assert roles == Counter({"user": expected["user"], "assistant": expected["model_turn"],
                             "tool_result": expected["tool_result"]})


@recorded
@pytest.mark.parametrize("name", CLAUDE_FIXTURES)
def test_every_tool_call_pairs_with_its_result(name):
    # No fixture has an unanswered call on its active path: every interrupt came after results.
    conversation = load(name)
    calls = {c.id for m in conversation.messages for c in m.tool_calls}
    answered = {m.tool_call_id for m in conversation.messages if m.role == "tool_result"}
    assert calls - answered == set()
    assert answered - calls == set()
    assert project(conversation.messages).issues == ()


def _private_strings(value, found: set[str]) -> None:
    if isinstance(value, dict):
        kind = value.get("type")
        for key in ("thinking", "signature", "data") if kind in (
            "thinking", "redacted_thinking"
        ) else ("signature",):
            if isinstance(value.get(key), str) and len(value[key]) >= 16:
                found.add(value[key])
        for inner in value.values():
            _private_strings(inner, found)
    elif isinstance(value, list):
        for inner in value:
            _private_strings(inner, found)


@recorded
@pytest.mark.parametrize("name", CLAUDE_FIXTURES)
def test_no_thinking_or_signature_text_anywhere(name):
    private: set[str] = set()
    for value in raw_lines(name):
        _private_strings(value, private)
    conversation = load(name)
    public = json.dumps([public_item(i) for i in project(conversation.messages).items])
    everything = repr(conversation)
    assert [s[:20] for s in private if s in public or s in everything] == []


@recorded
def test_fixtures_with_thinking_have_private_strings_to_check():
    private: set[str] = set()
    for value in raw_lines(HOOKS):
        _private_strings(value, private)
    assert len(private) >= 18  # 9 thinking blocks, each with text and a signature


# --- fragments and parallel tools --------------------------------------------------------------


@recorded
def test_fragments_of_one_response_merge_into_one_assistant_message():
    conversation = load(HOOKS)
    fragments = [v for v in raw_lines(HOOKS) if v["type"] == "assistant"]
    assistants = [m for m in conversation.messages if m.role == "assistant"]
    assert (len(fragments), len(assistants)) == (46, 20)
    assert conversation.stats["assistant_fragments"] == 46
    first = assistants[0]
    assert first.id == "88e09fda-0559-4cc6-a8ea-d41ecc5a6d9e"  # uuid of the first fragment
    assert [type(b).__name__ for b in first.content] == [
        "TextBlock", "HiddenBlock", "TextBlock", "ToolCall"
    ]
    assert first.content[1] == HiddenBlock("thinking")
    assert first.content[0] == TextBlock("\n\n")


@recorded
def test_results_interleaved_with_fragments_follow_the_merged_message():
    # Line 14 tool_use₁, 15 result₁, 16 tool_use₂ (same message id, parent = result₁), 17 result₂.
    messages = load(HOOKS).messages
    at = next(i for i, m in enumerate(messages) if m.id.startswith("06cf53c3"))
    turn = messages[at : at + 3]
    assert [m.role for m in turn] == ["assistant", "tool_result", "tool_result"]
    calls = [c.id for c in turn[0].tool_calls]
    assert [m.tool_call_id for m in turn[1:]] == calls
    assert [m.tool_name for m in turn[1:]] == ["Bash", "Bash"]


@recorded
def test_parallel_tools_on_sibling_shapes_pair_with_their_results():
    # Lines 29-32: tool_use 4Zpiz7, tool_use GAbZgC, result GAbZgC, result 4Zpiz7; the path
    # continues from result 4Zpiz7, so tool_use GAbZgC and its result hang off the path.
    messages = load(MICRO).messages
    at = next(i for i, m in enumerate(messages) if m.id.startswith("92739748"))
    turn = messages[at : at + 3]
    assert [c.id[-6:] for c in turn[0].tool_calls] == ["4Zpiz7", "GAbZgC"]
    assert [m.tool_call_id[-6:] for m in turn[1:]] == ["GAbZgC", "4Zpiz7"]  # file order
    assert turn[0].id.startswith("92739748")


@recorded
def test_all_sixty_tool_results_survive_where_a_bare_leaf_walk_keeps_forty():
    conversation = load(MICRO)
    assert sum(m.role == "tool_result" for m in conversation.messages) == 60
    # The active set: the bare walk sees 201 of 226 nodes; the active set keeps all 226.
    stats = conversation.stats
    assert (stats["path_nodes"], stats["active_nodes"], stats["nodes"]) == (201, 226, 226)


# --- compaction, forks, leaves -------------------------------------------------------------------


@recorded
def test_auto_compaction_is_counted_and_its_summary_is_a_message_marked_as_one():
    conversation = load(AUTO)
    assert conversation.compactions == 1
    assert conversation.stats["compact_summary"] == 1
    summaries = [m for m in conversation.messages if m.role == "user"
                 and m.content[0].text.startswith("This session is being continued")]
    assert [m.origin for m in summaries] == ["compaction_summary"]
    # The response right after the boundary is on the path (crossed via logicalParentUuid).
    assert any(m.id.startswith("869e9170") for m in conversation.messages)


@recorded
def test_microcompaction_is_a_stat_and_the_full_compaction_counts_once():
    conversation = load(MICRO)
    assert conversation.compactions == 1
    assert conversation.stats["microcompactions"] == 1
    assert conversation.stats["microcompacted_results"] == 42


@recorded
def test_rewind_fork_follows_the_later_branch_across_the_preserved_segment():
    # The active path: u1 a1 b2u b2a b2u2 | cb cs b2a2 p1u p1a; cb is not a message, the
    # summary cs is one (marked as a summary).
    conversation = load(REWIND)
    assert [m.id for m in conversation.messages] == [
        "u1", "a1", "b2u", "b2a", "b2u2", "cs", "b2a2", "p1u", "p1a"
    ]
    assert conversation.stats["forks"] == 1
    assert conversation.compactions == 1
    assert conversation.usage == Usage(input=50, output=25)  # b1a's response was billed too


@recorded
def test_last_prompt_leaf_selects_the_older_branch():
    values = raw_lines(REWIND)[:7] + [
        {"type": "last-prompt", "leafUuid": "b1u", "sessionId": "s2"}
    ]
    conversation = build_values(values)
    assert [m.id for m in conversation.messages] == ["u1", "a1", "b1u", "b1a"]


def test_same_timestamp_prompt_children_are_a_replay_not_a_fork():
    values = [
        said("u1", None, 0, "start"),
        answer("a1", "u1", 1, "m1", [{"type": "text", "text": "ok"}], "end_turn"),
        said("r1", "a1", 2, "again"),
        said("r2", "a1", 2, "again"),
    ]
    conversation = build_values(values)
    assert "forks" not in conversation.stats
    assert [m.id for m in conversation.messages] == ["u1", "a1", "r2"]  # the leaf's child


@recorded
def test_a_file_that_starts_mid_session_loads_from_its_dangling_root():
    conversation = load(AUTO)
    assert conversation.stats["dangling_parents"] == 1
    assert conversation.messages[0].id.startswith("ac4be0a3")  # /exit, first message line


# --- user lines ---------------------------------------------------------------------------------


@recorded
def test_pasted_image_becomes_an_image_block_of_the_prompt():
    raw = next(v for v in raw_lines(IMAGE) if v.get("uuid", "").startswith("4d96b680"))
    message = next(m for m in load(IMAGE).messages if m.id == raw["uuid"])
    source = raw["message"]["content"][0]["source"]
    assert (message.role, message.origin) == ("user", "typed")
    assert message.content == (ImageBlock("image/png", source["data"]),)


@recorded
def test_caveat_and_local_command_lines_are_not_prompts():
    users = [m for m in load(AUTO).messages if m.role == "user"]
    assert [m.origin for m in users] == ["slash_command", "typed", "typed",
                                          "compaction_summary"]
    assert users[0].content[0].text.startswith("<command-name>/exit</command-name>")
    stats = load(AUTO).stats
    assert (stats["caveat"], stats["local_command_output"]) == (1, 1)


@recorded
def test_hook_progress_and_meta_lines_are_not_prompts():
    conversation = load(HOOKS)
    users = [m for m in conversation.messages if m.role == "user"]
    raw = {v["uuid"]: v for v in raw_lines(HOOKS) if "uuid" in v}
    assert [(m.origin, m.content[0].text) for m in users] == [
        ("typed", "can you address the PR comment?"),
        ("slash_command", raw[users[1].id]["message"]["content"]),  # exact tag text
    ]
    assert conversation.stats["progress_lines"] == 23  # 16 hook_progress + 7 bash_progress


@recorded
def test_text_sent_with_a_tool_result_is_a_steering_prompt_after_the_result():
    messages = load(IMAGE).messages
    at = next(i for i, m in enumerate(messages) if m.id == "7a4a2519-5a0c-4bfa-807e-2f6040f98223")
    result, steering = messages[at - 1], messages[at]
    assert (result.role, result.tool_call_id[-6:], result.id) == (
        "tool_result", "qwzbcp", "7a4a2519-5a0c-4bfa-807e-2f6040f98223.0"
    )
    assert (steering.role, steering.origin) == ("user", "steering")
    assert steering.content == (TextBlock("let's not leave _all_ the tests to the very end..."),)


def test_queued_command_attachment_is_steering_and_hooks_are_context():
    values = [
        said("u1", None, 0, "go"),
        answer("a1", "u1", 1, "m1", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                       "input": {"command": "ls"}}], "tool_use"),
        said("r1", "a1", 2, [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]),
        entry("attachment", "h1", "r1", 3, attachment={"type": "hook_success", "stdout": "ok"}),
        entry("attachment", "q1", "h1", 3,
              attachment={"type": "queued_command", "prompt": "also check tests"}),
    ]
    conversation = build_values(values)
    assert [(m.role, m.origin) for m in conversation.messages][-1] == ("user", "steering")
    assert conversation.messages[-1].content == (TextBlock("also check tests"),)
    assert conversation.stats["hooks"] == 1


def test_bash_mode_lines_have_origin_bash():
    values = [
        said("u1", None, 0, "<bash-input>ls</bash-input>"),
        said("u2", "u1", 0, "<bash-stdout>a.txt</bash-stdout><bash-stderr></bash-stderr>"),
        said("u3", "u2", 1, "<system-reminder>ctx</system-reminder>"),
        said("u4", "u3", 1, "<task-notification>done</task-notification>"),
    ]
    conversation = build_values(values)
    assert [(m.id, m.origin) for m in conversation.messages] == [("u1", "bash"), ("u2", "bash")]
    assert (conversation.stats["system_reminder"], conversation.stats["task_notification"]) == (
        1, 1
    )


@recorded
def test_interrupt_after_answered_calls_leaves_the_response_alone():
    conversation = load(QUEUE)
    assert conversation.stats["interrupts"] == 2
    assert not any(m.interrupted for m in conversation.messages)


def test_interrupt_cutting_a_response_marks_it_aborted():
    values = [
        said("u1", None, 0, "go"),
        answer("a1", "u1", 1, "m1", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                       "input": {"command": "sleep 100"}}]),
        said("i1", "a1", 2, [{"type": "text", "text": "[Request interrupted by user for tool use]"}
                              ]),
        said("u2", "i1", 3, "never mind"),
        answer("a2", "u2", 4, "m2", [{"type": "text", "text": "Ok"}]),
        said("i2", "a2", 5, "[Request interrupted by user]"),
    ]
    conversation = build_values(values)
    assert [(m.id, m.stop_reason) for m in conversation.messages] == [
        ("u1", None), ("a1", "aborted"), ("u2", None), ("a2", "aborted")
    ]
    projection = project(conversation.messages)
    assert projection.issues == ()
    assert [i.failed for i in projection.items] == [False, True, False, True]


# --- assistant content, usage, stop reasons ------------------------------------------------------


def test_assistant_block_kinds_and_stop_reasons():
    blocks = [
        {"type": "redacted_thinking", "data": "opaque-redacted-payload-0123456789"},
        {"type": "server_tool_use", "id": "srv1", "name": "web_search", "input": {"q": "x"}},
        {"type": "web_search_tool_result", "tool_use_id": "srv1", "content": []},
        {"type": "future_block", "text": "?"},
        {"type": "tool_use", "id": "t1", "name": "Edit", "input": '{"file_path": "a.py"}'},
    ]
    values = [
        said("u1", None, 0, "go"),
        answer("a1", "u1", 1, "m1", blocks, "max_tokens"),
        said("u2", "a1", 2, "again"),
        answer("a2", "u2", 3, "m2", [{"type": "text", "text": "API Error: 500"}],
               isApiErrorMessage=True),
    ]
    first, second = build_values(values).messages[1], build_values(values).messages[3]
    assert first.content == (
        HiddenBlock("redacted_thinking"),
        # a server tool's call and result are one complete exchange, kept as text
        TextBlock('{"type":"server_tool_use","id":"srv1","name":"web_search","input":{"q":"x"}}'),
        TextBlock('{"type":"web_search_tool_result","tool_use_id":"srv1","content":[]}'),
        HiddenBlock("unknown"),
        ToolCall("t1", "Edit", {"file_path": "a.py"}),
    )
    assert (first.stop_reason, second.stop_reason) == ("length", "error")


@recorded
def test_usage_is_deduplicated_per_response_and_matches_an_independent_sum():
    # Independent rule: per message.id, the largest input/cache value of any fragment, and the
    # output of the fragment with a stop_reason, else the largest output; <synthetic> skipped.
    per_id: dict[str, dict] = {}
    for value in raw_lines(AUTO):
        message = value.get("message") if value["type"] == "assistant" else None
        if not message or message["model"] == "<synthetic>":
            continue
        usage, slot = message["usage"], per_id.setdefault(message["id"], Counter())
        for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            slot[key] = max(slot[key], usage[key])
        slot["max_out"] = max(slot["max_out"], usage["output_tokens"])
        if message["stop_reason"]:
            slot["final_out"] = usage["output_tokens"] + 1  # +1 to tell 0 from unset
    expected = Usage(
        input=sum(s["input_tokens"] for s in per_id.values()),
        output=sum(s["final_out"] - 1 if s["final_out"] else s["max_out"]
                   for s in per_id.values()),
        cache_read=sum(s["cache_read_input_tokens"] for s in per_id.values()),
        cache_write=sum(s["cache_creation_input_tokens"] for s in per_id.values()),
    )
    conversation = load(AUTO)
    assert len(per_id) == 12  # 13 responses minus the synthetic one
    assert conversation.usage == expected
    on_messages = [m.usage for m in conversation.messages if m.usage is not None]
    assert sum(on_messages, Usage()) == expected
    # MC4T25: output 1 on the thinking fragment, 276 on the tool_use fragment with stop_reason.
    turn = next(m for m in conversation.messages if m.id.startswith("7d5452ad"))
    assert (turn.usage.output, turn.stop_reason) == (276, "tool_use")
    synthetic = conversation.messages[1]
    assert (synthetic.model, synthetic.usage, synthetic.stop_reason) == (
        "<synthetic>", None, "stop"
    )


# --- session facts --------------------------------------------------------------------------------


@recorded
@pytest.mark.parametrize("name", [SUBAGENT, COMPACT_AGENT])
def test_sidechain_files_are_subagent_sessions_of_their_parent(name):
    info = load(name).info
    assert (info.session_id, info.parent_id, info.parent_kind) == (
        Path(name).stem, "258c7280-ae70-4798-800f-63464d01a85d", "subagent"
    )
    assert info.format == "claude-2.1.39"


@recorded
def test_agent_file_name_gives_the_session_id(tmp_path):
    target = tmp_path / "agent-a881341.jsonl"
    target.write_bytes(fixture(SUBAGENT).read_bytes())
    conversation = claude.build(read_jsonl(str(target)).records, str(target))
    assert conversation.info.session_id == "agent-a881341"
    assert conversation.info.parent_kind == "subagent"


@recorded
def test_main_session_facts():
    info = load(HOOKS).info
    assert (info.session_id, info.cwd, info.format, info.parent_id) == (
        Path(HOOKS).stem, "/Users/soph/Work/entire/devenv/cli", "claude-2.1.37", None
    )
    assert (info.created, info.updated) == ("2026-02-09T19:16:12.613Z", "2026-02-09T19:20:30.046Z")
    assert info.title == "can you address the PR comment?"


def test_title_precedence_custom_then_ai_then_summary_then_first_prompt():
    base = [said("u1", None, 0, "first line of the prompt\nsecond line"),
            answer("a1", "u1", 1, "m1", [{"type": "text", "text": "ok"}], "end_turn")]
    summary = {"type": "summary", "summary": "Summary title", "leafUuid": "a1"}
    stale = {"type": "summary", "summary": "Other branch", "leafUuid": "zz"}
    ai = {"type": "ai-title", "aiTitle": "AI title", "sessionId": "S"}
    custom = {"type": "custom-title", "customTitle": "Mine", "sessionId": "S"}
    assert build_values(base).info.title == "first line of the prompt"
    assert build_values([stale, *base]).info.title == "first line of the prompt"
    assert build_values([summary, *base]).info.title == "Summary title"
    assert build_values([summary, ai, *base]).info.title == "AI title"
    assert build_values([custom, summary, ai, *base]).info.title == "Mine"
    long = [said("u1", None, 0, "x" * 200)]
    assert build_values(long).info.title == "x" * 80


@recorded
def test_ids_stay_stable_as_the_file_grows():
    records = read_jsonl(str(fixture(HOOKS))).records
    full = [m.id for m in claude.build(records, "f.jsonl").messages]
    for cut in (9, 15, 16, 40, 81, 102):
        grown = [m.id for m in claude.build(records[:cut], "f.jsonl").messages]
        assert grown == full[: len(grown)], cut


def test_odd_input_becomes_warnings_not_exceptions():
    values = [
        {"type": "user", "uuid": "x1", "parentUuid": "x2", "message": {"content": "loop"}},
        {"type": "assistant", "uuid": "x2", "parentUuid": "x1", "message": {"content": []}},
        {"type": "user", "uuid": "y1", "parentUuid": None, "message": {"content": 7}},
        {"type": "assistant", "uuid": "y2", "parentUuid": "y1", "message": "nope"},
        {"type": "user", "parentUuid": None, "message": {"content": "no uuid"}},
        {"type": "user", "uuid": "x1", "message": {"content": "dup"}},
        {"type": "brand-new", "uuid": "n1", "parentUuid": None},
        {"type": "another-new"},
        said("u1", None, 0, [{"type": "document", "source": {}}, {"type": "text", "text": "hi"}]),
        {"no_type": True},
    ]
    conversation = build_values(values)
    kinds = sorted({w.kind for w in conversation.warnings})
    assert kinds == ["bad_content", "bad_message", "cycle", "duplicate_uuid", "missing_uuid",
                     "unknown_block", "unknown_type"]
    assert [(m.id, m.content) for m in conversation.messages] == [("u1", (TextBlock("hi"),))]
