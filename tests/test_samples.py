"""The project's own sample sessions (tests/fixtures/make_samples.py) through the three readers.

These run everywhere, a fresh clone included, and cover the shapes the recorded sessions cover
in tests/test_source_*.py: every number below was counted from the generator's text by hand
(the comments say how), not read back from the readers.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from context_paging.index.history import project, public_item
from context_paging.index.jsonl import read_jsonl
from context_paging.index.model import HiddenBlock, ImageBlock, TextBlock, ToolCall, Usage
from context_paging.index.sources import claude, codex, detect, pi
from context_paging.index.sources.pi import active_path, migrate

from tests.conftest import SAMPLES_DIR, sample
from tests.fixtures.make_samples import CHILD_THREAD, CLAUDE_SESSION, PARENT_THREAD, SAMPLES, render

READERS = {"pi": pi, "claude": claude, "codex": codex}
SOURCE = {"pi-v1": "pi", "pi-v3": "pi", "claude": "claude", "claude-subagent": "claude",
          "codex-0.40": "codex", "codex-modern": "codex", "codex-child": "codex"}


def load(key: str):
    path = str(sample(key))
    return READERS[SOURCE[key]].build(read_jsonl(path).records, path)


def by_id(conv):
    return {m.id: m for m in conv.messages}


# --- the files -----------------------------------------------------------------------------------


def test_the_committed_samples_are_what_the_generator_writes():
    on_disk = {str(p.relative_to(SAMPLES_DIR)): p.read_text("utf-8")
               for p in SAMPLES_DIR.rglob("*.jsonl")}
    assert on_disk == render(), "run python tests/fixtures/make_samples.py and commit the result"


def test_a_missing_sample_names_where_it_was_looked_for(tmp_path, monkeypatch):
    import tests.conftest as conftest

    monkeypatch.setattr(conftest, "SAMPLES_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        conftest.sample("pi-v1")
    with pytest.raises(KeyError, match="pi-v1"):
        conftest.sample("no-such-sample")


# --- every sample --------------------------------------------------------------------------------

# (user items, model turns, messages by role) — counted from the generator: a model turn is one
# assistant entry (pi), one message id (Claude), one run of model-output items (Codex).
COUNTS = {
    # prompts L2 L12 L14 L18 L19.1 + the !cmd on L16; replies L3 L5 L7 L9 L13 L15 L19 L20;
    # results L4 L6 L8 L21 (L15's call never ran). Line 22 is still being written.
    # The compaction on L17 gives its summary as a user item too.
    "pi-v1": (7, 8, {"user": 7, "assistant": 8, "tool_result": 4}),
    # on the path e01 … e06, e09 … e21: prompts e01 e19, replies e03 e05 e13 e20, results
    # e04 e06 e14 e15; e07 and e08 are on the abandoned branch; the compaction e16's summary.
    "pi-v3": (3, 4, {"user": 3, "assistant": 4, "tool_result": 4}),
    # prompts u1 u2 u3(/cost) u5 u6 u7 b2u and the compaction summary cs; 11 message ids on
    # the path (S01 … S08, the API error, S10, S11; S09 is on the abandoned branch); results
    # r1-r5 and b2r.
    "claude": (8, 11, {"user": 8, "assistant": 11, "tool_result": 6}),
    "claude-subagent": (1, 3, {"user": 1, "assistant": 3, "tool_result": 2}),
    # 3 user_message prompts; runs L8-9, L13, L17, L23, L29-30, L34; outputs L10 L14 L31.
    "codex-0.40": (3, 6, {"user": 3, "assistant": 6, "tool_result": 3}),
    # 2 prompts; runs L7-8, L12, L15-16 (web search + call), L19, L22, L32, L35; outputs L9 L13
    # L17 L20 L33 and the web search's synthesized one; the compacted line's summary L26.
    "codex-modern": (3, 7, {"user": 3, "assistant": 7, "tool_result": 6}),
    "codex-child": (1, 2, {"user": 1, "assistant": 2, "tool_result": 1}),
}


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_each_sample_is_detected_and_yields_its_counted_items(key):
    path = str(sample(key))
    assert detect(read_jsonl(path).records, path) == SOURCE[key]
    conv = load(key)
    users, turns, roles = COUNTS[key]
    kinds = Counter(i.kind for i in project(conv.messages).items)
    assert (kinds["user"], kinds["model_turn"]) == (users, turns)
    assert dict(Counter(m.role for m in conv.messages)) == roles


# Calls with no result: each belongs to an interrupted reply, so nothing is reported.
UNANSWERED = {"pi-v1": {"toolu_pi1_d"}, "claude": {"toolu_S06"}, "codex-0.40": {"call_old_3"}}


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_every_call_pairs_with_its_result_or_belongs_to_an_interrupted_reply(key):
    conv = load(key)
    projection = project(conv.messages)
    calls = {c.id: m for m in conv.messages for c in m.tool_calls}
    answered = {m.tool_call_id for m in conv.messages if m.role == "tool_result"}
    assert set(calls) - answered == UNANSWERED.get(key, set())
    assert answered - set(calls) == set()
    assert all(calls[c].interrupted for c in UNANSWERED.get(key, ()))
    assert projection.issues == ()


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_no_planted_private_text_reaches_the_public_view_or_the_conversation(key):
    raw = sample(key).read_text("utf-8")
    assert raw.count("PLANTED") >= 2  # every sample really has something to hide
    conv = load(key)
    public = json.dumps([public_item(i) for i in project(conv.messages).items])
    assert "PLANTED" not in public and "PLANTED" not in repr(conv)


def test_the_samples_plant_every_kind_of_private_block():
    text = "".join(render().values())
    for kind in ("pi1-thinking", "pi1-signature", "pi3-textsignature", "pi3-redacted-payload",
                 "cc-thinking", "cc-signature", "codex-old-summary", "codex-old-encrypted",
                 "codex-new-raw-reasoning", "codex-new-encrypted"):
        assert f"PLANTED-{kind}" in text, kind


# --- pi v1 ---------------------------------------------------------------------------------------


def test_pi_v1_ids_are_line_numbers_and_the_glued_line_gives_two_messages():
    conv = load("pi-v1")
    ids = [m.id for m in conv.messages]
    assert ids == ["L2", "L3", "L4", "L5", "L6", "L7", "L8", "L9", "L12", "L13", "L14", "L15",
                   "L16", "L17", "L18", "L19", "L19.1", "L20", "L21"]
    glued_reply, glued_prompt = by_id(conv)["L19"], by_id(conv)["L19.1"]
    assert glued_reply.content == (HiddenBlock("thinking"),
                                   TextBlock("Yes: the dashboard reads the guarded average."))
    assert (glued_prompt.role, glued_prompt.content) == ("user", (TextBlock("thanks, commit it"),))
    assert conv.info.format == "pi-v1"


def test_pi_v1_entries_chain_and_the_compaction_keeps_from_its_entry_index():
    entries = migrate(read_jsonl(str(sample("pi-v1"))).records).entries
    assert entries[0].parent_id is None
    assert all(b.parent_id == a.id for a, b in zip(entries, entries[1:], strict=False))
    # firstKeptEntryIndex 13 counts the header as 0: line 14
    assert [e.first_kept_id for e in entries if e.type == "compaction"] == ["L14"]
    conv = load("pi-v1")
    assert conv.compactions == 1 and by_id(conv)["L17"].origin == "compaction_summary"


def test_pi_v1_aborted_and_error_replies_are_failed_turns():
    conv = load("pi-v1")
    aborted, error = by_id(conv)["L13"], by_id(conv)["L15"]
    assert (aborted.stop_reason, aborted.content, aborted.interrupted) == ("aborted", (), True)
    assert (error.stop_reason, error.interrupted) == ("error", True)
    failed = [i.history_id for i in project(conv.messages).items if i.failed]
    assert failed == ["L3", "L13", "L15"]  # L3's bash run failed (isError)


def test_pi_v1_bash_image_model_change_fork_and_pending_tail():
    conv = load("pi-v1")
    bash = by_id(conv)["L16"]
    assert (bash.role, bash.origin) == ("user", "bash")
    assert bash.content == (TextBlock(
        "Ran `git status --short`\n```\n M inventory/report.py\n?? notes.txt\n\n```"),)
    image = by_id(conv)["L12"].content[1]
    assert isinstance(image, ImageBlock) and image.mime == "image/png" and image.data
    assert by_id(conv)["L4"].is_error and not by_id(conv)["L6"].is_error
    assert (conv.stats["model_changes"], conv.stats["thinking_level_changes"]) == (1, 1)
    assert (conv.info.parent_id, conv.info.parent_kind) == (
        "1a2b3c4d-0000-4000-8000-00000000a000", "fork")
    assert read_jsonl(str(sample("pi-v1"))).pending
    assert "Committed as 4be1a7c." not in repr(conv)  # the half-written line is not read


# --- pi v3 ---------------------------------------------------------------------------------------


def test_pi_v3_follows_the_last_line_back_to_the_root_around_the_abandoned_branch():
    path = str(sample("pi-v3"))
    path_ids = active_path(read_jsonl(path).records, path)
    assert path_ids == ["e01", "e02", "e03", "e04", "e05", "e06", "e09", "e10", "e11", "e12",
                        "e13", "e14", "e15", "e16", "e17", "e18", "e19", "e20", "e21"]
    conv = load("pi-v3")
    assert [m.id for m in conv.messages] == ["e01", "e03", "e04", "e05", "e06", "e13", "e14",
                                             "e15", "e16", "e19", "e20"]
    # every reply is billed, the abandoned e07 included: 4 × (100, 20) + (220, 40)
    assert conv.usage == Usage(input=620, output=120)


def test_pi_v3_counts_what_is_not_a_message_and_warns_about_the_unknown_entry():
    conv = load("pi-v3")
    stats = conv.stats
    assert (stats["branch_summaries"], stats["labels"], stats["custom_entries"],
            stats["custom_messages"], stats["session_infos"], stats["unknown_entries"]) == (
        1, 1, 1, 1, 1, 1)
    assert conv.compactions == 1
    assert [(w.kind, w.line) for w in conv.warnings] == [("unknown_type", 18)]
    assert "a field no reader knows" not in repr(conv)


def test_pi_v3_hides_redacted_thinking_and_keeps_parallel_calls_and_the_read_image():
    conv = load("pi-v3")
    reply = by_id(conv)["e13"]
    assert reply.content == (
        HiddenBlock("redacted_thinking"),
        ToolCall("call_e13a", "bash", {"command": "docker compose up -d redis"}),
        ToolCall("call_e13b", "read", {"path": "docs/cache-diagram.png"}))
    image_result = by_id(conv)["e15"]
    assert [type(b).__name__ for b in image_result.content] == ["TextBlock", "ImageBlock"]
    assert by_id(conv)["e06"].is_error


def test_pi_v3_session_facts():
    info = load("pi-v3").info
    assert (info.title, info.format, info.cwd) == ("Pricing cache with expiry", "pi-v3",
                                                   "/home/dev/pricing")
    assert (info.session_id, info.parent_id, info.parent_kind) == (
        "019cc0de-3333-7000-8000-00000000b003", "019cc0de-2222-7000-8000-00000000b002", "fork")


# --- Claude Code ---------------------------------------------------------------------------------


def test_claude_fragments_merge_and_interleaved_results_follow_the_merged_reply():
    conv = load("claude")
    ids = [m.id for m in conv.messages]
    first = by_id(conv)["c-a1"]
    assert first.content == (
        HiddenBlock("thinking"), TextBlock("Reading the job's log and its source."),
        ToolCall("toolu_S01a", "Bash", {"command": "tail -n 300 logs/export.log",
                                        "description": "Read the log"}),
        ToolCall("toolu_S01b", "Read", {"file_path": "/home/dev/exporter/export/job.py"}))
    assert ids[ids.index("c-a1"):ids.index("c-a1") + 3] == ["c-a1", "c-r1", "c-r2"]
    assert conv.stats["assistant_fragments"] == 14
    assert (first.stop_reason, first.usage.output) == ("tool_use", 180)


def test_claude_prompts_context_lines_and_the_failed_tool():
    conv = load("claude")
    users = [(m.id, m.origin) for m in conv.messages if m.role == "user"]
    assert users == [("c-u1", "typed"), ("c-u2", "typed"), ("c-u3", "slash_command"),
                     ("c-cs", "compaction_summary"), ("c-u5", "typed"), ("c-u6", "typed"),
                     ("c-u7", "typed"), ("c-b2u", "typed")]
    assert by_id(conv)["c-u2"].content[0] == ImageBlock("image/png", by_id(conv)["c-u2"]
                                                        .content[0].data)
    assert by_id(conv)["c-r3"].is_error and not by_id(conv)["c-r4"].is_error
    stats = conv.stats
    assert (stats["caveat"], stats["local_command_output"], stats["progress_lines"],
            stats["queue_operation"], stats["file_history_snapshot"]) == (1, 1, 1, 1, 1)


def test_claude_compactions_interrupt_api_error_and_rewind():
    conv = load("claude")
    assert conv.compactions == 1 and conv.stats["compact_summary"] == 1
    assert (conv.stats["microcompactions"], conv.stats["microcompacted_results"]) == (1, 1)
    assert by_id(conv)["c-cs"].origin == "compaction_summary"  # a summary, not a prompt
    assert by_id(conv)["c-a9"].stop_reason == "aborted"  # its call was interrupted
    assert by_id(conv)["c-e1"].stop_reason == "error"
    assert conv.stats["forks"] == 1
    assert {"c-b1u", "c-b1a"}.isdisjoint(by_id(conv))  # the earlier branch of the rewind
    assert [(w.kind, w.line) for w in conv.warnings] == [("unknown_type", 40)]


def test_claude_usage_counts_each_response_once_and_skips_the_synthetic_error():
    # 11 real responses (S01 … S11, the abandoned S09 included), each with input 4, cache write
    # 1200 and cache read 18000; outputs: S01 180, S02 40, S03 60, S04 70, S05 30, S11 25, and
    # 10 for S06 S07 S08 S09 S10.
    assert load("claude").usage == Usage(input=44, output=455, cache_read=198000,
                                         cache_write=13200)


def test_claude_titles_and_the_subagent_file():
    info = load("claude").info
    assert (info.title, info.session_id, info.format) == ("Export timeout", CLAUDE_SESSION,
                                                          "claude-2.1.40")
    sub = load("claude-subagent").info
    assert (sub.session_id, sub.parent_id, sub.parent_kind) == (
        "agent-a5b6c7d", CLAUDE_SESSION, "subagent")


# --- Codex ---------------------------------------------------------------------------------------


def test_codex_0_40_prompt_context_image_and_title():
    conv = load("codex-0.40")
    prompt = conv.messages[0]
    assert (prompt.id, prompt.role) == ("L3", "user")
    assert prompt.content[0].text.startswith("# Context from my IDE setup:")
    assert isinstance(prompt.content[1], ImageBlock)
    assert not any("<environment_context>" in repr(m.content) for m in conv.messages)
    assert conv.stats["context_messages"] == 1
    assert conv.info.title == "Why does the cart total ignore discounts?"


def test_codex_0_40_output_wrapper_exit_codes_reasoning_and_the_aborted_turn():
    conv = load("codex-0.40")
    listing, failing = by_id(conv)["L10"], by_id(conv)["L14"]
    assert listing.content[0].text.startswith("shop/module_001.py\n") and not listing.is_error
    assert failing.is_error and "AssertionError" in failing.content[0].text
    assert by_id(conv)["L8"].content[0] == HiddenBlock("thinking")
    assert by_id(conv)["L8"].tool_calls[0].arguments == {"command": ["bash", "-lc", "ls shop"],
                                                        "workdir": "."}
    assert by_id(conv)["L23"].stop_reason == "aborted"
    # usage is the last cumulative total: input 19500 - 13500 cached, output 480
    assert conv.usage == Usage(input=6000, output=480, cache_read=13500, reasoning=60)


def test_codex_modern_tools_exit_header_and_web_search():
    conv = load("codex-modern")
    assert by_id(conv)["L9"].is_error and not by_id(conv)["L17"].is_error
    patch = by_id(conv)["L12"].tool_calls[0]
    assert (patch.name, patch.arguments[:17]) == ("apply_patch", "*** Begin Patch\n*")
    search = by_id(conv)["L15"]
    assert [c.name for c in search.tool_calls][1] == "exec_command"
    assert conv.stats["synthesized_results"] == 1  # the web search, which has no output item
    spawn = by_id(conv)["L20"]
    assert CHILD_THREAD in spawn.content[0].text


def test_codex_modern_compaction_unknown_types_duplicate_usage_and_glued_prompt():
    conv = load("codex-modern")
    assert conv.compactions == 1 and conv.warnings == ()
    assert (conv.stats["unknown_types"], conv.stats["token_count_duplicates"]) == (2, 1)
    assert conv.usage == Usage(input=18560, output=680, cache_read=42000, reasoning=140)
    assert [(m.id, m.origin) for m in conv.messages if m.role == "user"] == \
        [("L5", "typed"), ("L26", "compaction_summary"), ("L31", "typed")]
    assert "PLANTED" not in repr(conv)


def test_codex_child_names_its_parent_thread():
    info = load("codex-child").info
    assert (info.session_id, info.parent_id, info.parent_kind) == (
        CHILD_THREAD, PARENT_THREAD, "subagent")


# --- the recorded sessions' lookup -------------------------------------------------------------


def test_a_missing_recorded_session_names_where_it_was_looked_for():
    from tests.conftest import FIXTURES, fixture

    with pytest.raises(FileNotFoundError, match="looked in") as raised:
        fixture("no-such-recording.jsonl")
    assert str(FIXTURES) in str(raised.value) and "CONTEXT_PAGING_FIXTURES" in str(raised.value)


def test_without_the_recorded_sessions_one_line_says_where_they_were_looked_for(tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import PROJECT

    missing = tmp_path / "nowhere"
    env = {**os.environ, "CONTEXT_PAGING_FIXTURES": str(missing)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_jsonl.py", "-k", "glued"],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith("recorded sessions:")]
    # the glued-line tests: three on samples and hand-made data run, one on a recorded file not
    assert lines == [f"recorded sessions: not found in {missing} (set CONTEXT_PAGING_FIXTURES "
                     "to their folder); 1 test that needs them was skipped"]
