"""paging.distill: settings (docs/configuration.md, case 58), the whole pass and ``apply`` (case
59 and this port's guarantees), sampling replies and the pass's stats.

Upstream's cases that are the server's are tested with the server, not in tests/test_distill_*:
27, 28 and 46's concurrency (the sampling judge's time budget and request pool), 34, 37 and 38
(recall and its regex safety), 56 (Pi's footer).
"""

from __future__ import annotations

import json
import math

from context_paging.paging.distill import (
    MARKER,
    Decision,
    DistillConfig,
    distill,
    parse_chunk_ids,
    plan_pass,
    summarize,
)
from context_paging.paging.distill.apply import apply
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import CONFIG, FIRST_CHUNK, PAD, Fixed, judged_run, lines, run_end
from tests.builders import assistant_entry as assistant
from tests.builders import result_entry as result
from tests.builders import user_entry as user

# --- config --------------------------------------------------------------------------------

def test_58_invalid_settings_fall_back_to_defaults_with_one_warning_each():
    bad = {"enabled": "no", "keep_whole_threshold": 1.5, "timeout_ms": 100, "concurrency": 64,
           "max_segment_chars": 1_000, "max_chunks_per_segment": 1, "exclude_tools": "edit",
           "history_exchanges": "3", "model": "no-slash", "typo_key": 1, "judge": "cloud"}
    config, warnings = DistillConfig.from_mapping(bad)
    assert config == DistillConfig() and len(warnings) == len(bad)
    assert any("concurrency = 64" in w and "1 to 32" in w for w in warnings)
    assert any("typo_key" in w for w in warnings)
    assert DistillConfig.from_mapping({"concurrency": 2.5})[0].concurrency == 6
    assert DistillConfig.from_mapping({"concurrency": 2.0})[0].concurrency == 2
    for value in (-1, 11, 2.5, "3", None, True):
        assert DistillConfig.from_mapping({"history_exchanges": value})[0].history_exchanges == 3
    assert DistillConfig.from_mapping({"model": "  openrouter/a/b  "})[0].model == "openrouter/a/b"
    assert DistillConfig.from_mapping({"model": "/leading"})[0].model is None
    assert DistillConfig.from_mapping({"exclude_tools": ["bash", 3, "read"]})[0].exclude_tools \
        == ("bash", "read")
    assert DistillConfig.from_mapping({"judge": "sampling"}) == (DistillConfig(judge="sampling"),
                                                                  [])
    assert DistillConfig.from_mapping("x")[0] == DistillConfig()


# --- the whole pass, apply, judges ----------------------------------------------------------

def test_59_run_end_distills_a_log_and_a_read_but_not_an_edit_and_not_an_aborted_run():
    entries = run_end([("bash", {"command": "cat big.log"}, lines(300)),
                        ("read", {"path": "src/big.ts"}, lines(300)),
                        ("edit", {"path": "src/big.ts"}, lines(300))])
    got = distill(entries, CONFIG, judge=FIRST_CHUNK)
    assert [(d.target, d.action) for d in got] == [("c0", "distill"), ("c1", "distill")]
    assert "–300 of src/big.ts …]" in got[1].replacement
    aborted = entries[:-2] + [assistant("", "a1", stop="aborted"), user("next", "u1")]
    assert plan_pass(aborted, CONFIG) is None
    assert plan_pass(entries, DistillConfig(enabled=False)) is None


def test_outputs_already_edited_by_the_host_or_another_tool_are_left_alone():
    entries = run_end([("bash", {"command": "a"}, f"{MARKER} x\n{lines(200)}"),
                        ("bash", {"command": "b"}, f"[context-guard] x\n{lines(200)}")])
    assert plan_pass(entries, DistillConfig(min_run_chars=0)) is None


def test_apply_is_byte_identical_idempotent_and_touches_only_decided_messages():
    entries = judged_run([("bash", {"command": "ls"}, "m" * 1_500)])
    entries = entries[:-2] + run_end([("bash", {"command": "cat"}, lines(200))])[1:]
    config = DistillConfig(exchange_break_even=False)
    got = distill(entries, config, judge=Fixed(lambda ctx, c: 1.0 if c.index == 0 else 0.0))
    assert {d.action for d in got} >= {"distill", "omit_exchange"}
    once = apply(entries, got)
    stored = [Decision.from_dict(json.loads(json.dumps(d.to_dict()))) for d in got]
    again = apply(entries, stored)
    assert json.dumps(once) == json.dumps(again)
    assert json.dumps(apply(once, got)) == json.dumps(once)
    assert distill(entries, config, judge=Fixed(lambda ctx, c: 1.0 if c.index == 0 else 0.0)) \
        == got
    changed = {d.target for d in got if d.edits} | {i for d in got for i in d.omitted}
    for entry in once:
        if entry[0] not in changed and entry[1].get("toolCallId") not in changed:
            assert any(entry is original for original in entries)
    edited = [(h, {**m, "content": [{"type": "text", "text": "host changed it"}]})
              if m.get("toolCallId") == "c0" else (h, m) for h, m in entries]
    assert dict(apply(edited, got))["r0"]["content"][0]["text"] == "host changed it"


def _pairs_intact(entries):
    seen_calls, results = set(), set()
    for _, m in entries:
        if m["role"] == "assistant":
            seen_calls |= {b["id"] for b in m["content"] if b["type"] == "toolCall"}
        if m["role"] == "toolResult":
            assert m["toolCallId"] in seen_calls
            results.add(m["toolCallId"])
    return seen_calls <= results


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.booleans(), st.booleans()),
                min_size=1, max_size=5), st.data())
def test_a_decided_exchange_never_leaves_a_tool_call_without_its_result(shape, data):
    entries = []
    for n, (turns, width, steer, shared) in enumerate(shape):
        entries.append(user(f"task {n} " + "word " * 5, f"u{n}"))
        for t in range(turns):
            hid = f"a{n}.{t}"
            calls = [(f"c{n}.{t}.{k}", "bash", {"command": f"x{k}"}) for k in range(width)]
            entries.append(assistant("", hid, calls))
            entries += [result(c, "bash", "z" * 900, hid if shared else f"r{c}")
                        for c, _, _ in calls]
            if steer and calls:
                entries.append(user("also this", f"s{n}.{t}"))
        entries.append(assistant(PAD, f"f{n}"))
    entries.append(user("current", "now"))
    config = DistillConfig(keep_recent_exchanges=0, exchange_break_even=False, min_run_chars=0)
    got = distill(entries, config, judge=Fixed(lambda ctx, c: 0.0))
    mangled = [Decision(d.target, d.kind, d.action, d.reason, d.phase, d.run, d.judge,
                        original=d.original, replacement=d.replacement,
                        omitted=tuple(data.draw(st.lists(st.sampled_from(d.omitted), unique=True))))
               for d in got if d.action == "omit_exchange" and d.omitted]
    for decisions in (got, mangled):
        assert _pairs_intact(apply(entries, decisions))


def test_sampling_replies_parse_to_chunk_indexes_and_anything_odd_means_keep():
    assert parse_chunk_ids('{"keep": [2, 5]}') == frozenset({1, 4})
    assert parse_chunk_ids('```json\n{"keep": ["chunk_3"]}\n```') == frozenset({2})
    assert parse_chunk_ids('Sure: {"keep": []}') == frozenset()
    assert parse_chunk_ids("[1, 2]", allowed={0, 1}) == frozenset({0, 1})
    for reply in ("keep all", '{"keep": [0]}', '{"keep": [true]}', '{"drop": [1]}', None,
                  '{"keep": [9]}'):
        assert parse_chunk_ids(reply, allowed=range(5)) is None


def test_stats_count_actions_judges_and_measured_tokens():
    entries = run_end([("bash", {"command": "a"}, lines(200)), ("bash", {"command": "b"},
                                                                 lines(200))])
    got = distill(entries, CONFIG, judge=FIRST_CHUNK)
    stats = summarize(got, tokens=lambda t: math.ceil(len(t) / 4), entries=entries)
    assert (stats.outputs_distilled, stats.judges) == (2, (("fake", 2),))
    assert abs(stats.saved_tokens - stats.saved_chars / 4) < 10
