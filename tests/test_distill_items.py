"""paging.distill: the items a pass judges besides large outputs — small outputs, old
exchanges, images — and their stubs (docs/distillation.md, "What can be distilled"), upstream's
cases 39–47, 54 and 55.
"""

from __future__ import annotations

import base64
import struct

from context_paging.paging.distill import MARKER, DistillConfig, distill, summarize
from context_paging.paging.distill.apply import apply
from context_paging.paging.distill.conversation import content_chars, image_cost
from context_paging.paging.distill.items import batch_items, collect_exchanges, collect_sized
from context_paging.paging.distill.render import Source, exchange_stub, image_stub, small_stub

from tests.builders import CONFIG, PAD, Fixed, judged_run, retry_session
from tests.builders import assistant_entry as assistant
from tests.builders import result_entry as result
from tests.builders import user_entry as user


def messages(entries):
    return [m for _, m in entries]


# --- items ---------------------------------------------------------------------------------

def _span():
    return [assistant("", "a", [("a", "bash", {"command": "ls"}), ("b", "read", {"path": "x"})]),
            result("a", "bash", "m" * 300, "tiny"), result("b", "read", "m" * 1_500, "small1"),
            assistant("", "b", [("c", "bash", {"command": "big"}), ("d", "edit", {"path": "x"}),
                                ("e", "bash", {"command": "f"}), ("f", "bash", {"command": "d"}),
                                ("g", "Recall", {}), ("h", "bash", {"command": "up"})]),
            result("c", "bash", "m" * 5_000, "large"), result("d", "edit", "m" * 1_000, "ex"),
            result("e", "bash", "m" * 1_000, "error", error=True),
            result("f", "bash", f"{MARKER} {'m' * 1_000}", "marked"),
            result("g", "recall", "m" * 1_000, "recalled"),
            result("h", "bash", "[context-guard] " + "m" * 1_000, "upstream")]


def test_39_small_outputs_follow_the_candidate_rules_age_and_memo():
    span = messages(_span())

    def ids(config=CONFIG, **kw):  # the small outputs of the pass's one walk
        small = collect_sized(span, 0, len(span), config, **kw)[1]
        return [(i.call_id, i.turn) for i in small]

    assert ids() == [("b", 0), ("e", 1)]
    assert ids(DistillConfig(distill_errors=False)) == [("b", 0)]
    assert ids(youngest=0) == [("b", 0)]
    assert ids(skip={"b"}) == [("e", 1)]
    short = messages([assistant("", "a", [("g", "bash", {"command": "x" * 300})]),
                      result("g", "bash", "m" * 150, "g1")])
    assert collect_sized(short, 0, 2, DistillConfig(small_result_min_chars=100))[1] == []


def test_40_the_small_stub_names_call_size_and_recall():
    stub = small_stub(Source("e1", "bash", {"command": "ls -la"}, "m" * 1_200))
    assert stub.startswith(MARKER)
    assert all(p in stub for p in ("bash `ls -la`", "1.2k chars", 'recall({"tool_call_id":"e1"})'))


def _exchanges(entries, keep=0, skip=()):
    ids, msgs = [i for i, _ in entries], messages(entries)
    start = max(i for i, m in enumerate(msgs) if m["role"] == "user" and i in
                {ids.index(h) for h in ids if h.startswith("u")})
    return collect_exchanges(ids, msgs, start, keep, set(skip))


def test_41_old_exchanges_skip_the_recent_ones_the_judged_and_the_omitted():
    entries = retry_session()
    first, second = _exchanges(entries, keep=2)
    assert (first.history_id, second.history_id) == ("u1", "u2")
    assert first.omitted == ("a1", "r1", "a1b", "notice") and first.messages == 5
    assert first.tool_calls == ("bash `rg retry`",) and first.answer.startswith("jobStatus")
    assert [x.history_id for x in _exchanges(entries)] == ["u1", "u2", "u3", "u4"]
    assert [x.history_id for x in _exchanges(entries, skip={"u2"})] == ["u1", "u3", "u4"]
    stubbed = [user(f"{MARKER} …", "u1") if h == "u1" else (h, m) for h, m in entries]
    assert [x.history_id for x in _exchanges(stubbed)] == ["u2", "u3", "u4"]


def test_42_a_steering_message_belongs_to_the_exchange_it_was_sent_in():
    entries = [user("Fix it", "u1"), assistant("", "a1", [("c1", "bash", {"command": "t"})]),
               result("c1", "bash", "fail", "r1"), user("steering: the parser", "u2"),
               assistant(f"done\n{PAD}", "a2"), user("next", "u3"),
               assistant(f"ok\n{PAD}", "a3"), user("now", "u4")]
    got = _exchanges(entries)
    assert [x.history_id for x in got] == ["u1", "u3"]
    assert got[0].omitted == ("a1", "r1", "u2", "a2")
    after_call = [user("Fix it", "u1"),
                  assistant(f"working\n{PAD}", "a1", [("c1", "bash", {"command": "t"})]),
                  user("next", "u3"), assistant(f"ok\n{PAD}", "a3"), user("now", "u4")]
    assert [x.history_id for x in _exchanges(after_call)] == ["u1"]


def test_43_the_exchange_stub_quotes_the_prompt_and_names_the_history_recall():
    stub = exchange_stub("u1", "word " * 60 + "end", 5, 12_000)
    assert stub.startswith(MARKER) and f'"{"word " * 23}word…"' in stub
    assert "5 messages" in stub and "~3.0k tokens" in stub
    assert 'recall({"history_id":"u1"})' in stub


def test_44_exchanges_edited_by_others_or_too_small_are_skipped_ours_are_not():
    def two(first):
        return [*first, user("Second task", "u2"), assistant(f"Done.\n{PAD}", "a2"),
                user("Current task", "u9")]

    own = two([user("Show it", "u1"), assistant("", "a1", [("c1", "read", {"path": "p"})]),
               result("c1", "read", f"{MARKER} distilled", "r1"), assistant(PAD, "a1b")])
    assert [x.history_id for x in _exchanges(own)] == ["u1", "u2"]
    foreign = two([user("[context-guard] Omitted …", "u1"), assistant(PAD, "a1")])
    assert [x.history_id for x in _exchanges(foreign)] == ["u2"]
    tiny = two([user("Hi", "u1"), assistant("Hello!", "a1")])
    assert [x.history_id for x in _exchanges(tiny)] == ["u2"]
    fixed = two([user("Build", "u1"), ("s", {"role": "system", "content": "x"}),
                 ("b", {"role": "bashExecution", "command": "ls", "output": "a"}),
                 ("k", {"role": "compactionSummary", "summary": "s"}), assistant(PAD, "a1")])
    assert _exchanges(fixed)[0].omitted == ("a1",)


def test_45_batches_respect_both_limits():
    assert batch_items([5] * 5, 10, 10) == [[0, 1], [2, 3], [4]]
    assert batch_items([1] * 5, 100, 2) == [[0, 1], [2, 3], [4]]
    assert batch_items([50, 1], 10, 10) == [[0], [1]]


def test_47_small_items_and_exchanges_get_their_own_thresholds_and_edits():
    entries = judged_run([("bash", {"command": "ls"}, "m" * 1_500),
                           ("read", {"path": "a.ts"}, "n" * 1_500)])

    def score(ctx, chunk):
        if ctx.kind == "small":
            return 0.1 if chunk.index == 0 else 0.8
        return 0.9 if chunk.index == 0 else 0.05

    config = DistillConfig(exchange_break_even=False)
    got = distill(entries, config, judge=Fixed(score))
    assert [(d.kind, d.target, d.action, d.reason) for d in got] == [
        ("small", "s1", "remove", "not-needed"), ("small", "s2", "keep", "needed"),
        ("exchange", "u1", "keep", "relevant"), ("exchange", "u2", "omit_exchange", "unrelated")]
    window = apply(entries, got)
    assert [h for h, _ in window if h in ("u2", "a2")] == ["u2"]
    assert dict(window)["u2"]["content"][0]["text"].startswith(MARKER)
    assert dict(window)["rs1"]["content"][0]["text"].startswith(MARKER)


def test_run_end_break_even_defers_an_exchange_omission_that_does_not_pay():
    entries = judged_run([])
    [*_, u2] = distill(entries, CONFIG, judge=Fixed(lambda ctx, c: 0.0))
    assert (u2.target, u2.action, u2.reason, u2.judged) == ("u2", "keep", "deferred", False)


# --- images and sizes ----------------------------------------------------------------------

def _png(w, h, pad=0):
    head = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + struct.pack(">II", w, h) + b"\x08\x02\0\0\0"
    return base64.b64encode(head).decode() + "A" * pad


def test_54_image_stubs_list_sizes_tokens_and_age():
    stub = image_stub("i", 5, [(1, 1), (2, 2), (3, 3), (4, 4)], 9_000, 7)
    assert "(1×1, 2×2, 3×3, …; ~9.0k tokens), 7 turns old" in stub and "them again" in stub
    one = image_stub("i", 1, [], 1_600, 1)
    assert "1 image" in one and "(~1.6k tokens), 1 turn old" in one and "it again" in one


def test_55_image_and_block_sizes():
    assert image_cost({"data": _png(1280, 960, 110_000)}) == (1_639, (1280, 960))
    assert image_cost({"data": "not an image"})[0] == 1_600
    assert image_cost({"data": _png(20_000, 20_000)})[0] == 6_700
    thinking = {"type": "thinking", "thinking": "t" * 100, "thinkingSignature": "s" * 400}
    assert content_chars({"role": "assistant", "content": [thinking]}) == 300
    assert content_chars(assistant("", "a", [("c", "bash", {"command": "ls"})])[1]) == 4 + 16


def test_old_tool_images_are_dropped_by_age_with_their_text_kept_and_user_images_never():
    shot = {"type": "image", "data": _png(1500, 1000), "mimeType": "image/png"}
    image_result = ("r0", {"role": "toolResult", "toolCallId": "c0", "toolName": "screenshot",
                           "content": [{"type": "text", "text": "shot taken"}, shot],
                           "isError": False})
    entries = [user("look", "u0"), ("u0i", {"role": "user", "content": [shot]}),
               assistant("", "a0", [("c0", "screenshot", {})]), image_result,
               assistant("one", "a1"), user("more", "u1"), assistant("two", "a2"),
               user("again", "u2"), assistant("three", "a3"), user("now", "u3")]
    got = distill(entries, DistillConfig(exchange_break_even=False), judge=Fixed(lambda *a: 1.0))
    [image] = [d for d in got if d.kind == "image"]
    assert (image.target, image.action, image.reason, image.judge) == (
        "c0", "drop_image", "3 turns old", "rules")
    content = dict(apply(entries, got))["r0"]["content"]
    assert [b["type"] for b in content] == ["text", "text"] and content[1]["text"] == "shot taken"
    assert "1500×1000" in content[0]["text"] and dict(apply(entries, got))["u0i"]["content"] == [
        shot]
    stats = summarize(got, tokens=len, entries=entries)
    assert stats.images_dropped == 1 and stats.saved_chars == image.before_chars - image.after_chars
