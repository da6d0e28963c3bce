"""Codex rollout reader (index/sources/codex.py) on the recorded sessions (marked ``recorded``) and
on small hand-made files; tests/test_samples.py covers the project's own samples.

Expected numbers were derived from the raw files with a separate script, not from the reader:
user items = ``event_msg/user_message`` lines (every one has a matching user ``response_item`` in
the real files); model turns = maximal runs of model-output ``response_item`` lines (reasoning,
calls, assistant messages) with only non-item lines between them, plus one per run of echo
events whose text no response item carries; tool results = ``*_output`` lines.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from context_paging.index.history import project, public_item
from context_paging.index.jsonl import read_jsonl
from context_paging.index.model import (
    Conversation,
    HiddenBlock,
    ImageBlock,
    TextBlock,
    ToolCall,
    Usage,
)
from context_paging.index.sources import codex, detect

from tests.conftest import FIXTURES, RECORDED, fixture, recorded

CODEX = [FIXTURES / "codex" / name for name in RECORDED["codex"]]
PARENT = "codex-0.142-parent-thread-spawns-subagents.RECOMPACTED.jsonl"
CHILD_A = "codex-0.142-subagent-A-child-thread.jsonl"
CHILD_B = "codex-0.142-subagent-B-child-thread.jsonl"
ABORTED = "codex-0.40-vscode-13-turns-with-aborted-turns.jsonl"
SHELL = "codex-0.40-vscode-shell-tools-reasoning.jsonl"
SINGLE = "codex-0.40-vscode-single-turn-many-tools.jsonl"
SYNTHETIC = "codex-SYNTHETIC-modern-event-catalog-with-compacted.jsonl"


def load(name: str) -> Conversation:
    path = str(fixture(name))
    return codex.build(read_jsonl(path).records, path)


def load_lines(tmp_path: Path, lines: list[dict[str, Any]]) -> Conversation:
    path = tmp_path / "rollout-2026-01-01T00-00-00-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in lines), encoding="utf-8")
    return codex.build(read_jsonl(str(path)).records, str(path))


def env(kind: str, payload: dict[str, Any], ts: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"timestamp": ts, "type": kind, "payload": payload}


def item(payload_type: str, **fields: Any) -> dict[str, Any]:
    return env("response_item", {"type": payload_type, **fields})


def event(payload_type: str, **fields: Any) -> dict[str, Any]:
    return env("event_msg", {"type": payload_type, **fields})


def user_text(text: str) -> dict[str, Any]:
    return item("message", role="user", content=[{"type": "input_text", "text": text}])


def assistant_text(text: str) -> dict[str, Any]:
    return item("message", role="assistant", content=[{"type": "output_text", "text": text}])


def call(call_id: str, name: str = "shell", arguments: str = "{}") -> dict[str, Any]:
    return item("function_call", call_id=call_id, name=name, arguments=arguments)


def output(call_id: str, text: Any = "ok") -> dict[str, Any]:
    return item("function_call_output", call_id=call_id, output=text)


def tokens(total: int, inp: int, cached: int, out: int, reasoning: int = 0) -> dict[str, Any]:
    raw = {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out,
           "reasoning_output_tokens": reasoning, "total_tokens": total}
    return event("token_count", info={"total_token_usage": raw})


META = env("session_meta", {"id": "thread-1", "timestamp": "2026-01-01T00:00:00Z",
                            "cwd": "/w", "cli_version": "0.150.0"})


def roles(conv: Conversation) -> dict[str, int]:
    return dict(Counter(m.role for m in conv.messages))


def raw_records(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in fixture(name).read_text("utf-8").splitlines() if line]


# --- every fixture ----------------------------------------------------------------------------


@recorded
@pytest.mark.parametrize("path", CODEX, ids=lambda p: p.name)
def test_every_codex_fixture_loads_without_an_exception_or_a_warning(path: Path):
    conv = codex.build(read_jsonl(str(path)).records, str(path))
    assert conv.info.source == "codex"
    assert conv.warnings == ()


@recorded
def test_every_codex_fixture_is_detected_as_codex():
    for path in CODEX:
        assert detect(read_jsonl(str(path)).records, str(path)) == "codex"


COUNTS = {
    # 1 user_message; 5 model-output runs (L8-9, L12-14, L18-19, L23, L28); 5 outputs.
    PARENT: (1, 5, {"user": 1, "assistant": 5, "tool_result": 5}),
    # 1 user_message; 2 runs (L8-9 reasoning + exec_command, L13 final message); 1 output.
    CHILD_A: (1, 2, {"user": 1, "assistant": 2, "tool_result": 1}),
    CHILD_B: (1, 2, {"user": 1, "assistant": 2, "tool_result": 1}),
    # 13 user_message; 132 runs (= 132 token_counts, one per request) plus 2 interrupted requests
    # known only from agent_reasoning echoes no item carries (L551, L612-614); 123 outputs.
    ABORTED: (13, 134, {"user": 13, "assistant": 134, "tool_result": 123}),
    # 2 user_message; 18 runs (= 18 token_counts); 16 outputs.
    SHELL: (2, 18, {"user": 2, "assistant": 18, "tool_result": 16}),
    # 1 user_message; 35 runs (34 tool requests + the final answer = 35 token_counts); 34 outputs.
    SINGLE: (1, 35, {"user": 1, "assistant": 35, "tool_result": 34}),
    # 2 user_message events with no user item; 1 run (L7-L10) plus the echo-only agent_message of
    # the aborted turn 2 (L24); 1 output; the compacted line's summary (L16) is a user item too.
    SYNTHETIC: (3, 2, {"user": 3, "assistant": 2, "tool_result": 1}),
}


@recorded
def test_counts_cover_every_codex_fixture():
    on_disk = sorted(p.name for p in (FIXTURES / "codex").glob("*.jsonl"))
    assert sorted(COUNTS) == [p.name for p in CODEX] == on_disk


@recorded
@pytest.mark.parametrize("name", sorted(COUNTS))
def test_fixture_counts_of_items_and_messages(name: str):
    conv = load(name)
    users, turns, by_role = COUNTS[name]
    kinds = Counter(i.kind for i in project(conv.messages).items)
    assert (kinds["user"], kinds["model_turn"], roles(conv)) == (users, turns, by_role)


@recorded
@pytest.mark.parametrize("name", sorted(COUNTS))
def test_every_tool_call_pairs_with_its_result(name: str):
    conv = load(name)
    projection = project(conv.messages)
    unpaired = {c.id for i in projection.items for c in i.message.tool_calls
                if i.result_for(c.id) is None}
    assert (unpaired, projection.issues) == (set(), ())


def private_strings(value: Any, inside_reasoning: bool = False) -> set[str]:
    """Every reasoning/encrypted text of length >= 16 in a raw record."""
    found: set[str] = set()
    if isinstance(value, dict):
        reasoning = inside_reasoning or value.get("type") in (
            "reasoning", "agent_reasoning", "agent_reasoning_raw_content")
        for key, inner in value.items():
            if key == "encrypted_content" and isinstance(inner, str) and len(inner) >= 16:
                found.add(inner)
            elif reasoning and key == "text" and isinstance(inner, str) and len(inner) >= 16:
                found.add(inner)
            else:
                found |= private_strings(inner, reasoning)
    elif isinstance(value, list):
        for inner in value:
            found |= private_strings(inner, inside_reasoning)
    return found


@recorded
@pytest.mark.parametrize("name", sorted(COUNTS))
def test_no_reasoning_or_encrypted_text_reaches_items_or_the_conversation(name: str):
    secrets = set().union(*(private_strings(r) for r in raw_records(name)))
    conv = load(name)
    public = json.dumps([public_item(i) for i in project(conv.messages).items],
                        ensure_ascii=False)
    everything = repr(conv)
    assert secrets  # every fixture has reasoning
    assert [s[:30] for s in secrets if s in public or s in everything] == []


# --- prompts and context ----------------------------------------------------------------------


@recorded
def test_ide_context_prompt_is_a_user_message_and_environment_context_is_not():
    conv = load(SINGLE)
    users = [m for m in conv.messages if m.role == "user"]
    assert [m.id for m in users] == ["L3"]  # the item, not the event on L4
    assert users[0].content[0].text.startswith("# Context from my IDE setup:")
    assert not any("<environment_context>" in str(m.content) for m in conv.messages)
    assert conv.stats["context_messages"] == 1


@recorded
def test_without_user_message_events_prompts_are_classified_by_marker_prefixes(tmp_path):
    lines = [r for r in raw_records(SINGLE)
             if r["payload"].get("type") != "user_message"]
    conv = load_lines(tmp_path, lines)
    users = [m for m in conv.messages if m.role == "user"]
    assert [m.id for m in users] == ["L3"]
    assert users[0].content[0].text.startswith("# Context from my IDE setup:")
    assert conv.stats["context_messages"] == 1  # <environment_context> on L2


@recorded
def test_title_is_the_request_after_the_ide_context_block():
    assert load(SINGLE).info.title == "Evaluate @packages/services and create a new"
    assert load(SYNTHETIC).info.title == "Build the parser"


@recorded
def test_prompt_images_come_from_the_response_item():
    prompt = load(SHELL).messages[0]
    image = prompt.content[1]
    raw = raw_records(SHELL)[2]["payload"]["content"][1]["image_url"]
    assert (prompt.id, type(prompt.content[0]), image.mime) == ("L3", TextBlock, "image/png")
    assert "data:image/png;base64," + image.data == raw


@recorded
def test_user_message_event_without_an_item_becomes_the_prompt_with_its_images():
    first = load(SYNTHETIC).messages[0]
    assert first.id == "L5"
    assert first.content == (TextBlock("Build the parser"),
                             ImageBlock("image/png", url="C:\\work\\diagram.png"))


@recorded
def test_subagent_notifications_and_developer_messages_are_context_not_messages():
    conv = load(PARENT)
    assert [m.id for m in conv.messages if m.role == "user"] == ["L6"]
    # L3 developer, L4 AGENTS.md + environment, L22 and L26 <subagent_notification>
    assert conv.stats["context_messages"] == 4


def test_user_shell_command_is_a_bash_user_message(tmp_path):
    shell = "<user_shell_command>\n<command>\nls\n</command>\n</user_shell_command>"
    conv = load_lines(tmp_path, [META, user_text("hi"), event("user_message", message="hi"),
                                 assistant_text("hello"), user_text(shell)])
    assert [(m.role, m.origin) for m in conv.messages] == [
        ("user", "typed"), ("assistant", "typed"), ("user", "bash")]


def test_a_prompt_during_a_running_task_is_steering(tmp_path):
    conv = load_lines(tmp_path, [
        META, event("task_started"), event("user_message", message="do it"),
        call("c1"), output("c1"), event("user_message", message="use tabs"),
        assistant_text("done"), event("task_complete"), event("user_message", message="next"),
    ])
    assert [m.origin for m in conv.messages if m.role == "user"] == [
        "typed", "steering", "typed"]


# --- assistant messages, calls and results ----------------------------------------------------


@recorded
def test_reasoning_text_and_call_of_one_request_form_one_message_in_order():
    message = next(m for m in load(SYNTHETIC).messages if m.role == "assistant")
    assert (message.id, message.model, message.stop_reason) == ("L7", "gpt-exact-1", "tool_use")
    assert message.content == (
        HiddenBlock("thinking"),
        TextBlock("The parser is ready."),
        ToolCall("call-1", "read_file", {"path": "README.md"}, "filesystem"),
    )


@recorded
def test_echoes_are_dropped_when_items_exist_and_used_when_they_do_not():
    conv = load(SYNTHETIC)
    texts = [b.text for m in conv.messages for b in m.content if isinstance(b, TextBlock)]
    assert texts.count("The parser is ready.") == 1
    assert conv.messages[-1].content == (TextBlock("Working on it."),)
    assert conv.stats["echoes_deduplicated"] == 2  # L6 agent_reasoning, L8 agent_message


@recorded
def test_single_turn_file_pairs_all_34_tool_calls():
    items = project(load(SINGLE).messages).items
    calls = [(c.id, i.result_for(c.id)) for i in items for c in i.message.tool_calls]
    assert len(calls) == 34
    assert all(result is not None and result.tool_name == "shell" for _, result in calls)


@recorded
def test_function_call_arguments_are_parsed_from_json_strings():
    first_call = next(m for m in load(SINGLE).messages if m.tool_calls).tool_calls[0]
    assert first_call == ToolCall("call_mux7Gp4q9YON9fYffwerwHgr", "shell",
                                  {"command": ["bash", "-lc", "ls"], "workdir": ".",
                                   "timeout_ms": 120000})


def test_arguments_that_are_not_json_are_kept_as_the_raw_string(tmp_path):
    conv = load_lines(tmp_path, [META, user_text("x"), call("c1", arguments="{oops"), output("c1")])
    assert conv.messages[1].tool_calls[0].arguments == "{oops"


@recorded
def test_0_40_output_wrapper_yields_the_inner_text_and_a_nonzero_exit_code_is_an_error():
    results = {m.id: m for m in load(SHELL).messages if m.role == "tool_result"}
    assert results["L16"].content == (TextBlock(
        "sed: apps/spectora-labs/src/app/(protected)/settings/teams/hooks/useTeamWithStats.ts:"
        " No such file or directory\n"),)
    assert (results["L10"].is_error, results["L16"].is_error, results["L22"].is_error) == (
        True, True, False)  # exit codes 2, 1, 0
    # 16 outputs: 13 with exit code 0, 2 with 1, 1 with 2
    assert sum(r.is_error for r in results.values()) == 3


@recorded
def test_exec_output_header_exit_code_decides_is_error(tmp_path):
    ok = load(CHILD_A).messages[2]
    assert (ok.tool_name, ok.is_error) == ("exec_command", False)
    assert ok.content[0].text.startswith("Chunk ID: 1ca3b1\n")
    failed = "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 2\nOutput:\nboom\n"
    conv = load_lines(tmp_path, [META, user_text("x"), call("c1", "exec_command"),
                                 output("c1", failed)])
    assert conv.messages[2].is_error is True


@recorded
def test_subagent_children_name_the_parent_thread():
    parent, a, b = load(PARENT), load(CHILD_A), load(CHILD_B)
    assert (parent.info.parent_id, parent.info.parent_kind) == (None, None)
    assert (a.info.parent_id, a.info.parent_kind) == (parent.info.session_id, "subagent")
    assert (b.info.parent_id, b.info.parent_kind) == (parent.info.session_id, "subagent")
    assert parent.info.format == "codex-0.142.0-alpha.1"
    assert parent.info.created == "2026-06-19T04:29:48.630Z"  # session_meta payload timestamp
    assert parent.info.updated == "2026-06-19T04:32:55.464Z"  # the last line


def test_forked_session_names_the_thread_it_was_forked_from(tmp_path):
    meta = env("session_meta", {"id": "fork-1", "forked_from_id": "thread-0", "cwd": "/w"})
    info = load_lines(tmp_path, [meta, user_text("x")]).info
    assert (info.session_id, info.parent_id, info.parent_kind, info.format) == (
        "fork-1", "thread-0", "fork", "codex")


@recorded
def test_spawn_and_wait_agent_calls_pair_with_outputs_naming_the_children():
    children = {load(CHILD_A).info.session_id, load(CHILD_B).info.session_id}
    items = project(load(PARENT).messages).items
    pairs = [(c, i.result_for(c.id)) for i in items for c in i.message.tool_calls]
    spawned = {json.loads(r.content[0].text)["agent_id"]
               for c, r in pairs if c.name == "spawn_agent"}
    assert spawned == children
    assert [(c.name, c.namespace) for c, _ in pairs] == [
        ("tool_search", None), ("spawn_agent", "multi_agent_v1"),
        ("spawn_agent", "multi_agent_v1"), ("wait_agent", "multi_agent_v1"),
        ("wait_agent", "multi_agent_v1")]
    assert all(r is not None for _, r in pairs)


@recorded
def test_tool_search_call_keeps_object_arguments_and_pairs_with_its_output():
    conv = load(PARENT)
    search = conv.messages[1].tool_calls[0]
    assert search.arguments == {"query": "spawn subagent run task parallel scoped agent",
                                "limit": 10}
    result = conv.messages[2]
    assert (result.tool_call_id, result.tool_name) == (search.id, "tool_search")
    assert json.loads(result.content[0].text)[0]["name"] == "multi_agent_v1"


def test_custom_tool_call_input_is_kept_as_a_raw_string(tmp_path):
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    conv = load_lines(tmp_path, [
        META, user_text("x"),
        item("custom_tool_call", call_id="p1", name="apply_patch", input=patch),
        item("custom_tool_call_output", call_id="p1", output="Success. Updated: A a.txt\n"),
    ])
    (turn,) = [i for i in project(conv.messages).items if i.kind == "model_turn"]
    assert turn.message.tool_calls[0].arguments == patch
    assert (turn.tool_results[0].tool_name, turn.files) == ("apply_patch", ("a.txt",))


def test_results_follow_their_call_even_when_the_file_interleaves_them(tmp_path):
    conv = load_lines(tmp_path, [
        META, user_text("x"), call("a"), call("b"), output("b"),
        assistant_text("meanwhile"), output("a"),
    ])
    assert [(m.role, m.tool_call_id) for m in conv.messages] == [
        ("user", None), ("assistant", None), ("tool_result", "b"), ("tool_result", "a"),
        ("assistant", None)]
    assert project(conv.messages).issues == ()


def test_array_output_becomes_text_and_image_blocks(tmp_path):
    out = [{"type": "input_text", "text": "see"},
           {"type": "input_image", "image_url": "data:image/jpeg;base64,AAAA"}]
    conv = load_lines(tmp_path, [META, user_text("x"), call("v", "view_image"), output("v", out)])
    assert conv.messages[2].content == (TextBlock("see"), ImageBlock("image/jpeg", "AAAA"))


def test_web_search_call_gets_a_synthesized_result_and_no_incomplete_exchange(tmp_path):
    conv = load_lines(tmp_path, [
        META, user_text("x"),
        item("web_search_call", id="ws_1", status="completed",
             action={"type": "search", "query": "codex rollout"}),
        assistant_text("found it"),
    ])
    items = project(conv.messages)
    assert items.issues == ()
    turn = items.items[1]
    assert turn.message.tool_calls[0] == ToolCall(
        "ws_1", "web_search", {"type": "search", "query": "codex rollout"})
    assert turn.tool_results[0].content[0].text.startswith("[no output recorded")
    assert conv.stats["synthesized_results"] == 1


def test_output_for_an_unknown_call_is_skipped_with_a_warning(tmp_path):
    conv = load_lines(tmp_path, [META, user_text("x"), output("nope")])
    assert [(w.line, w.kind) for w in conv.warnings] == [(3, "orphan_output")]
    assert roles(conv) == {"user": 1}


# --- aborted turns ----------------------------------------------------------------------------


@recorded
def test_aborted_turns_mark_the_last_response_of_each_of_the_four_turns():
    conv = load(ABORTED)
    assert conv.stats["turn_aborted"] == 4
    aborted = [m.id for m in conv.messages if m.stop_reason == "aborted"]
    # turn_aborted on L169 and L262 precede the interrupted requests' items (L170-172, L263-265);
    # L552 and L615 follow reasoning echoes that no item carries (L551, L612-614).
    assert aborted == ["L170", "L263", "L551", "L612"]
    items = project(conv.messages).items
    for history_id in aborted:
        index = next(n for n, i in enumerate(items) if i.history_id == history_id)
        assert items[index].failed and items[index + 1].kind == "user"


def test_an_aborted_turn_keeps_a_call_that_never_got_its_result(tmp_path):
    conv = load_lines(tmp_path, [
        META, event("task_started"), user_text("x"), event("user_message", message="x"),
        call("c1"), output("c1"), call("c2"), event("turn_aborted", reason="interrupted"),
        user_text("y"), event("user_message", message="y"),
    ])
    projection = project(conv.messages)
    assert projection.issues == ()
    assert [(i.kind, i.failed) for i in projection.items] == [
        ("user", False), ("model_turn", False), ("model_turn", True), ("user", False)]


# --- usage ------------------------------------------------------------------------------------


def final_total(name: str) -> dict[str, int]:
    counts = [r["payload"]["info"] for r in raw_records(name)
              if r["payload"].get("type") == "token_count" and r["payload"].get("info")]
    return counts[-1]["total_token_usage"]


@recorded
@pytest.mark.parametrize("name", [ABORTED, SHELL, SINGLE, PARENT, CHILD_A, CHILD_B])
def test_per_request_usage_sums_to_the_final_cumulative_total(name: str):
    total, conv = final_total(name), load(name)
    assert total["total_tokens"] == total["input_tokens"] + total["output_tokens"]
    expected = Usage(input=total["input_tokens"] - total["cached_input_tokens"],
                     output=total["output_tokens"], cache_read=total["cached_input_tokens"],
                     reasoning=total["reasoning_output_tokens"])
    attached = [m.usage for m in conv.messages if m.usage is not None]
    assert conv.usage == expected
    assert sum(attached, Usage()) == expected  # every request found its message
    assert conv.usage.total == total["total_tokens"]


@recorded
def test_synthetic_duplicate_token_count_is_counted_once():
    conv = load(SYNTHETIC)
    # L18 and L19 repeat total 100; L25 adds last usage 40/10/15/5. Raw totals (100, 160) break
    # total == input + output (70 + 25 = 95), so the sum is computed from the fields:
    # input (70-20) + (40-10) = 80, cache_read 20 + 10 = 30, output 25 + 15 = 40, reasoning 10.
    assert conv.usage == Usage(input=80, output=40, cache_read=30, cache_write=0, reasoning=10)
    assert conv.usage.total == 150
    assert conv.stats["token_count_duplicates"] == 1
    assert [m.usage.total for m in conv.messages if m.usage] == [95, 55]


@recorded
def test_usage_goes_to_the_request_it_precedes_in_0_40_and_follows_in_0_142():
    first_040 = next(m for m in load(SINGLE).messages if m.role == "assistant")
    assert (first_040.id, first_040.usage) == ("L8", Usage(339, 100, 2560, 0, 64))  # from L7
    first_142 = next(m for m in load(PARENT).messages if m.role == "assistant")
    assert (first_142.id, first_142.usage) == ("L8", Usage(25284, 166, 0, 0, 133))  # from L11


def test_token_count_without_last_usage_uses_the_difference_of_totals(tmp_path):
    conv = load_lines(tmp_path, [
        META, user_text("x"), assistant_text("a"), tokens(110, 100, 40, 10),
        user_text("y"), assistant_text("b"), tokens(180, 160, 90, 20, 5),
    ])
    assert [m.usage for m in conv.messages if m.role == "assistant"] == [
        Usage(60, 10, 40, 0, 0), Usage(10, 10, 50, 0, 5)]


# --- lines, branches, unknowns ----------------------------------------------------------------


@recorded
def test_unknown_future_payload_is_counted_without_a_warning():
    conv = load(SYNTHETIC)
    assert conv.stats["unknown_types"] == 1  # event_msg future_payload on L27
    assert conv.warnings == ()
    assert "not-a-real-secret" not in repr(conv)


@recorded
def test_compacted_line_is_counted_its_summary_is_marked_and_earlier_messages_stay():
    conv = load(SYNTHETIC)
    assert (conv.compactions, conv.stats["compactions"]) == (1, 1)
    assert [m.id for m in conv.messages] == ["L5", "L7", "L11", "L16", "L23", "L24"]
    summary = conv.messages[3]
    assert (summary.origin, summary.content) == ("compaction_summary",
                                                 (TextBlock("Earlier work was summarized."),))


def test_rollback_drops_the_last_turns_from_the_active_path(tmp_path):
    lines = [META]
    for n, prompt in enumerate(["one", "two", "three"]):
        lines += [user_text(prompt), assistant_text(f"answer {prompt}"),
                  tokens(100 * (n + 1), 90 * (n + 1), 0, 10 * (n + 1))]
    lines += [event("thread_rolled_back", num_turns=2), user_text("four"), assistant_text("4")]
    conv = load_lines(tmp_path, lines)
    assert [m.id for m in conv.messages] == ["L2", "L3", "L12", "L13"]  # L11 is the rollback
    assert (conv.stats["rollbacks"], conv.stats["rolled_back_messages"]) == (1, 4)
    assert conv.usage == Usage(input=270, output=30, reasoning=0)  # abandoned ones were billed


def test_legacy_bare_rollout_is_read_by_shape(tmp_path):
    conv = load_lines(tmp_path, [
        {"id": "legacy-1", "timestamp": "2025-08-20T13:20:47.060Z", "instructions": None},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n</environment_context>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "opaque-opaque-opaque"},
        {"type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}',
         "call_id": "call_1"},
        {"type": "function_call_output", "call_id": "call_1", "output": "README.md\n"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "text", "text": "One file."}]},
        {"record_type": "state"},
    ])
    assert (conv.info.session_id, conv.info.format) == ("legacy-1", "codex-legacy")
    assert conv.info.created == "2025-08-20T13:20:47.060Z"
    assert [(m.role, m.id) for m in conv.messages] == [
        ("user", "L4"), ("assistant", "L5"), ("tool_result", "L7"), ("assistant", "L8")]
    assert conv.messages[1].content[0] == HiddenBlock("thinking")
    assert conv.messages[3].content == (TextBlock("One file."),)
    assert detect(read_jsonl(conv.info.path).records, conv.info.path) == "codex"
    assert (conv.stats["context_messages"], conv.stats["meta_lines"]) == (1, 2)


def write_raw(tmp_path: Path, lines: list[str]) -> Conversation:
    path = tmp_path / "rollout-glued.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return codex.build(read_jsonl(str(path)).records, str(path))


def test_glued_objects_on_one_line_get_distinct_ids(tmp_path):
    prompt_and_answer = json.dumps(user_text("x")) + json.dumps(assistant_text("a"))
    conv = write_raw(tmp_path, [json.dumps(META), prompt_and_answer])
    assert [(m.role, m.id) for m in conv.messages] == [("user", "L2"), ("assistant", "L2.1")]


def test_glued_items_of_one_request_stay_one_message(tmp_path):
    text_and_call = json.dumps(assistant_text("a")) + json.dumps(call("c1"))
    conv = write_raw(tmp_path, [json.dumps(META), json.dumps(user_text("x")), text_and_call,
                                json.dumps(output("c1"))])
    assert [m.id for m in conv.messages] == ["L2", "L3", "L4"]
    assert conv.messages[1].content == (TextBlock("a"), ToolCall("c1", "shell", {}))


@recorded
def test_ids_do_not_change_when_the_file_grows():
    path = str(fixture(ABORTED))
    records = read_jsonl(path).records
    full = {m.id: m.role for m in codex.build(records, path).messages}
    # 100: an echo whose item is not written yet; 169 and 262: a 0.40 turn_aborted whose
    # interrupted request's items come on the next lines; 553: just after an echo-only message.
    for cut in (100, 169, 262, 300, 553, 700):
        prefix = codex.build(records[:cut], path)
        assert {m.id: m.role for m in prefix.messages}.items() <= full.items()


def test_odd_lines_become_warnings_never_exceptions(tmp_path):
    conv = load_lines(tmp_path, [
        META, {"timestamp": "t", "type": "response_item", "payload": "not an object"},
        user_text("x"), item("function_call", name="shell", arguments="{}"),
        item("message", role="assistant", content="not a list"),
        event("token_count", info={"total_token_usage": "weird", "last_token_usage": None}),
        event("thread_rolled_back", num_turns="two"), item("message", role="user"),
        item(None), event(None), env("turn_context", {"model": 5}), {"unexpected": True},
    ])
    assert [w.kind for w in conv.warnings] == [
        "bad_payload", "missing_call_id", "bad_item", "bad_rollback"]
    assert roles(conv) == {"user": 1, "assistant": 1}
