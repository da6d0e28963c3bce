"""paging.distill: upstream's numbered cases (specs/distill.md §10) and this port's guarantees.

Not here, because they are the server's: 27, 28 and 46's concurrency (the sampling judge's time
budget and request pool), 34, 37 and 38 (recall and its regex safety), 56 (Pi's footer).
Fixtures follow upstream's: filler lines of 60 chars, grep lines ``file:n:match yyy…``.
"""

from __future__ import annotations

import base64
import json
import math
import struct

from context_paging.paging.distill import (
    MARKER,
    Chunk,
    ChunkOptions,
    Decision,
    DistillConfig,
    LocalJudge,
    Question,
    Verdict,
    apply,
    chunk_output,
    decide_plan,
    distill,
    grep_file,
    is_grep_like,
    judge_plan,
    parse_chunk_ids,
    plan_pass,
    prompt_for_segment,
    segment_chunks,
    summarize,
)
from context_paging.paging.distill.conversation import (
    Call,
    content_chars,
    image_cost,
    later_calls_for,
    superseded_by,
)
from context_paging.paging.distill.decide import interpret, pays_off
from context_paging.paging.distill.items import (
    batch_items,
    cited_files,
    collect_exchanges,
    collect_small,
)
from context_paging.paging.distill.model import JudgeContext
from context_paging.paging.distill.render import (
    Source,
    exchange_stub,
    format_chars,
    image_stub,
    render_output,
    small_stub,
    tool_label,
)
from hypothesis import given, settings
from hypothesis import strategies as st

CONFIG = DistillConfig()


def lines(count: int, prefix: str = "line", width: int = 60) -> str:
    return "\n".join(f"{prefix} {i + 1} ".ljust(width, "x") for i in range(count))


def grep_output(files: list[str], per_file: int, width: int = 60) -> str:
    return "\n".join(f"{f}:{i + 1}:" + "match ".ljust(width, "y") for f in files
                     for i in range(per_file))


def user(text, hid):
    return hid, {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant(text, hid, calls=(), stop=None):
    content = ([{"type": "text", "text": text}] if text else []) + [
        {"type": "toolCall", "id": c, "name": n, "arguments": a} for c, n, a in calls]
    return hid, {"role": "assistant", "content": content,
                 "stopReason": stop or ("toolUse" if calls else "stop")}


def result(call_id, tool, text, hid, error=False):
    return hid, {"role": "toolResult", "toolCallId": call_id, "toolName": tool,
                 "content": [{"type": "text", "text": text}], "isError": error}


def messages(entries):
    return [m for _, m in entries]


class Fixed:
    """A judge answering from a function of (context, chunk)."""

    def __init__(self, score, name="fake"):
        self.score, self.name = score, name

    def judge(self, question, chunks, context):
        return {c.index: self.score(context, c) for c in chunks}


def assert_covers(text, chunks):
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:], strict=False))
    assert chunks[0].start == 0 and chunks[-1].end == len(text.split("\n"))
    assert "\n".join(c.text for c in chunks) == text


# --- §3 chunking ---------------------------------------------------------------------------

def test_01_grep_file_recognises_match_context_and_separator_lines():
    assert grep_file("src/a.ts:12:const a") == "src/a.ts"
    assert grep_file("src/a.ts-13-const b") == "src/a.ts"
    assert grep_file("src/my-file.ts-4-x") == "src/my-file.ts"
    assert grep_file("docs/2024-05-01-post.md:3:hello") == "docs/2024-05-01-post.md"
    assert grep_file("--") == ""
    assert [grep_file(x) for x in ("plain text line", " indented:1:x", "")] == [None] * 3


def test_02_context_lines_of_dash_digit_names_resolve_to_the_longest_known_file():
    known = {"docs/2024-05-01-post.md", "docs/2024"}
    assert grep_file("docs/2024-05-01-post.md-4-context", known) == "docs/2024-05-01-post.md"
    assert grep_file("docs/2024-05-01-post.md-4-context") == "docs/2024"


def test_03_grep_like_needs_three_lines_and_sixty_percent_matches():
    assert not is_grep_like(["a.ts:1:x", "a.ts:2:y"])
    assert is_grep_like(["a.ts:1:x", "a.ts-2-y", "--", "b.ts:9:z", ""])
    assert not is_grep_like(["a.ts:1:x", "b.ts:2:y", "hello", "world", "again"])
    assert is_grep_like(["a.ts:1:x", "b.ts:2:y", "c.ts:3:z", "note", "more"])
    assert not is_grep_like(lines(10).split("\n"))


def test_timestamped_logs_are_not_grep_output_but_spaced_paths_with_extensions_are():
    for stamp in ("2024-05-01 12:30:{:02d} INFO served", "2024-05-01T12:30:{:02d}Z ok",
                  "12:30:{:02d} worker up"):
        log = "\n".join(stamp.format(i) for i in range(30))
        assert not is_grep_like(log.split("\n"))
        assert all(c.files == () for c in chunk_output(log))
    assert grep_file("My Documents/notes.md:3:x") == "My Documents/notes.md"


def test_04_grep_output_is_grouped_by_file():
    files = ["src/alpha.ts", "src/my-beta.ts", "docs/2024-05-01-post.md"]
    text = grep_output(files, 12)
    chunks = chunk_output(text, ChunkOptions(120, 1_000, 4_000))
    assert_covers(text, chunks)
    assert [(c.start, c.end, c.files) for c in chunks] == [
        (0, 12, (files[0],)), (12, 24, (files[1],)), (24, 36, (files[2],))]


def _blocks(file, *ns):
    return [x for n in ns for x in (f"{file}-{n - 1}-before".ljust(70, "."),
                                    f"{file}:{n}:match".ljust(70, "."),
                                    f"{file}-{n + 1}-after".ljust(70, "."), "--")]


def test_05_context_lines_and_separators_stay_with_their_file():
    text = "\n".join(_blocks("src/a-b.ts", 10, 30) + _blocks("lib/c.ts", 5, 50))
    chunks = chunk_output(text, ChunkOptions(120, 600, 600))
    assert_covers(text, chunks)
    assert [c.files for c in chunks] == [("src/a-b.ts",), ("lib/c.ts",)]
    assert chunks[0].end == 8


def test_06_date_named_files_group_correctly():
    text = "\n".join(_blocks("docs/2024-05-01-a.md", 10, 30) + _blocks("docs/2024-06-02-b.md", 5))
    chunks = chunk_output(text, ChunkOptions(120, 500, 500))
    assert [(c.start, c.end, c.files) for c in chunks] == [
        (0, 8, ("docs/2024-05-01-a.md",)), (8, 12, ("docs/2024-06-02-b.md",))]


def test_07_big_grep_groups_are_split_and_never_mix_files():
    text = grep_output(["src/huge.ts", "src/small.ts"], 100)
    chunks = chunk_output(text, ChunkOptions(120, 1_000, 1_000))
    assert_covers(text, chunks)
    assert len(chunks) > 4
    for c in chunks:
        assert len(c.files) == 1 and len(c.text) <= 1_000
        assert all(line.startswith(c.files[0] + ":") for line in c.text.split("\n"))


def test_08_tiny_grep_groups_are_merged_up_to_half_the_target():
    files = [f"src/f{i}.ts" for i in range(30)]
    chunks = chunk_output(grep_output(files, 1, 20), ChunkOptions(120, 800, 800))
    assert 3 <= len(chunks) < len(files)
    assert all(len(c.text) + 1 <= 400 for c in chunks)
    assert [f for c in chunks for f in c.files] == files


def test_09_plain_text_is_windowed_ending_after_blank_lines():
    text = "\n\n".join(lines(8, f"p{n}", 50) for n in range(10))
    chunks = chunk_output(text, ChunkOptions(120, 1_000, 1_000))
    assert_covers(text, chunks)
    assert len(chunks) > 1 and all(len(c.text) <= 1_000 and c.files == () for c in chunks)
    assert all(text.split("\n")[c.end - 1] == "" for c in chunks[:-1])


def test_10_the_target_grows_to_respect_max_chunks():
    assert len(chunk_output(lines(2_000), ChunkOptions(10, 100, 500))) <= 11


def test_11_a_very_long_line_is_a_chunk_of_its_own():
    chunks = chunk_output(f"short\n{'z' * 10_000}\nshort again", ChunkOptions(120, 800, 800))
    assert any(c.text == "z" * 10_000 for c in chunks)


def test_12_segments_respect_both_limits_and_isolate_oversized_chunks():
    chunks = chunk_output(lines(400), ChunkOptions(120, 500, 500))
    assert len(segment_chunks(chunks, 1_000_000, 7)) == math.ceil(len(chunks) / 7)
    big = chunk_output(f"a\n{'z' * 5_000}\nb", ChunkOptions(120, 100, 100))
    assert any(len(s) == 1 and len(s[0].text) == 5_000 for s in segment_chunks(big, 1_000, 10))
    assert segment_chunks([], 100, 10) == []


# --- §2/§4 prompts, verdicts, decisions ----------------------------------------------------

def _context(**kw):
    base = dict(kind="output", phase="run-end", labels=("bash `cat x`",), superseded=("",),
                failed=(False,), tool="bash", arguments='{"command":"cat x"}', total_lines=30)
    return JudgeContext(**(base | kw))


def test_13_to_16_segment_prompts_carry_the_work_the_tool_and_numbered_chunks():
    chunks = chunk_output(lines(30), ChunkOptions(120, 700, 700))[:3]
    prompt = prompt_for_segment(Question("Why?", answer="Because."), chunks, _context())
    for part in ("Why?", "Because.", "bash `cat x`", '{"command":"cat x"}', "30 lines",
                 "[chunk 1]", "[chunk 3]", '{"keep"'):
        assert part in prompt
    assert "Earlier in the session" not in prompt and "reported an error" not in prompt
    long = prompt_for_segment(Question("q", answer="a" * 10_000), chunks,
                              _context(arguments="", part=2, parts=3, total_lines=300))
    answer = long.split("## The agent's final answer\n")[1].split("\n\n## ")[0]
    assert len(answer) < 6_100 and "[…]" in answer
    assert "300 lines; this is part 2 of 3" in long and "Arguments:" not in long
    history = Question("q", answer="a", history=(("Fix it", "Done"), ("Thanks", "")))
    text = prompt_for_segment(history, chunks, _context(failed=(True,)))
    assert "User: Fix it\nAgent: Done" in text and "reported an error" in text
    assert "User: Thanks" in text and "User: Thanks\nAgent" not in text


def _interpret(verdict, n=3, threshold=0.6):
    out = interpret(verdict, list(range(n)), CONFIG, threshold)
    return out.keep_all, sorted(out.keep), out.reason


def test_17_no_answer_or_half_an_answer_keeps_the_segment():
    assert _interpret(Verdict(None, failure="error")) == (True, [0, 1, 2], "error")
    assert _interpret(Verdict({}, focus="whole", focus_scores={"whole": 1.0}))[2] == "no-answer"
    assert _interpret(Verdict({}, keep_whole=0.1))[2] == "no-answer"
    assert _interpret(None)[2] == "timeout"


def test_18_keep_whole_at_the_threshold_or_a_strong_whole_focus_keeps_all():
    assert _interpret(Verdict({}, keep_whole=0.7, focus="none"))[2] == "whole-needed"
    strong = Verdict({}, keep_whole=0.2, focus="whole", focus_scores={"whole": 0.9})
    assert _interpret(strong)[2] == "whole-chosen"


def test_19_a_weak_whole_defers_to_chunk_scores():
    weak = Verdict({1: 0.96}, keep_whole=0.1, focus="whole", focus_scores={"whole": 0.43})
    assert _interpret(weak, threshold=0.8) == (False, [1], "chunks")
    weak = Verdict({0: 0.3}, keep_whole=0.1, focus="whole", focus_scores={"whole": 0.45})
    assert _interpret(weak)[0::2] == (True, "whole-chosen")


def test_20_the_focus_chunk_is_kept_whatever_its_score():
    v = Verdict({0: 0.1, 1: 0.79, 2: 0.8}, keep_whole=0.1, focus="chunk_1",
                focus_scores={"chunk_1": 0.5})
    assert _interpret(v, threshold=0.8) == (False, [0, 2], "chunks")


def test_21_none_focus_removes_only_when_nothing_passes():
    none = {"keep_whole": 0.1, "focus": "none"}
    assert _interpret(Verdict({0: .2, 1: .3}, **none, focus_scores={"none": .6})) == (
        False, [], "none-needed")
    assert _interpret(Verdict({2: .95}, **none, focus_scores={"none": .9}))[1] == [2]
    weak = Verdict({}, **none, focus_scores={"none": .4, "chunk_1": .1, "chunk_2": .35,
                                             "whole": .15})
    assert _interpret(weak)[1] == [1]


def test_plain_chunk_scores_keep_unscored_chunks_and_remove_only_on_an_empty_keep_set():
    assert _interpret(Verdict({0: 0.9, 1: 0.1})) == (False, [0, 2], "chunks")
    assert _interpret(Verdict({0: 0.0, 1: 0.0, 2: 0.0})) == (False, [], "none-needed")


def test_22_cited_files_need_word_boundaries_and_basenames_of_four_chars():
    files = ["src/core/session.ts", "lib/util.ts", "src/x.c"]
    assert cited_files("See src/core/session.ts for details.", files) == {files[0]}
    assert cited_files("It is in `util.ts`.", files) == {files[1]}
    for text in ("myutil.ts", "util.tsx", "src/util.tsx", "old-session.ts", "data.ts",
                 "x.c is short"):
        assert cited_files(text, files) == set()
    assert cited_files("See session.ts.", files) == {files[0]}
    assert cited_files("in src/x.c", files) == {files[2]}


def _run_end(outputs, answer="Done.", follow="next"):
    """u0, one assistant calling every output's tool, the results, the answer, a new prompt."""
    calls = [(f"c{i}", tool, args) for i, (tool, args, _) in enumerate(outputs)]
    return [user("Please look", "u0"), assistant("", "a0", calls),
            *(result(f"c{i}", t, text, f"r{i}") for i, (t, _, text) in enumerate(outputs)),
            assistant(answer, "a1"), user(follow, "u1")]


FIRST_CHUNK = Fixed(lambda ctx, c: 1.0 if c.index == 0 else 0.0)


def test_23_a_run_end_pass_distills_each_large_output_to_the_kept_chunks():
    entries = _run_end([("bash", {"command": "cmd a"}, lines(200)),
                        ("bash", {"command": "cmd b"}, lines(200))])
    decisions = distill(entries, CONFIG, judge=FIRST_CHUNK)
    assert [(d.target, d.action, d.reason, d.judge) for d in decisions] == [
        ("c0", "distill", "chunks", "fake"), ("c1", "distill", "chunks", "fake")]
    assert all(d.replacement.startswith(MARKER) and d.kept == (0,) for d in decisions)
    assert summarize(decisions).saved_chars == sum(d.before_chars - d.after_chars
                                                   for d in decisions) > 0


def test_24_an_output_with_nothing_needed_is_removed_with_a_stub():
    entries = _run_end([("bash", {"command": "cmd a"}, lines(200))])
    [d] = distill(entries, CONFIG, judge=Fixed(lambda ctx, c: 0.0))
    assert (d.action, d.reason) == ("remove", "none-needed")
    assert d.replacement.startswith(MARKER) and "bash `cmd a`" in d.replacement
    assert '200 lines' in d.replacement and 'recall({"tool_call_id":"c0"})' in d.replacement


def test_25_keeping_most_of_an_output_is_not_worth_an_edit():
    entries = _run_end([("bash", {"command": "cmd a"}, lines(200))])
    [d] = distill(entries, CONFIG, judge=Fixed(lambda ctx, c: 1.0 if c.index % 10 < 7 else 0))
    assert (d.action, d.reason, d.saved_chars) == ("keep", "not-worth", 0)
    plan = plan_pass(entries, CONFIG)
    whole = {s.key: Verdict({}, keep_whole=0.9, focus="none") for s in plan.segments}
    assert [(d.action, d.reason) for d in decide_plan(plan, whole)] == [("keep", "whole-needed")]


def test_26_a_judge_that_fails_keeps_everything_and_is_asked_again():
    class Broken:
        name = "broken"

        def judge(self, question, chunks, context):
            raise RuntimeError("network down")

    entries = _run_end([("bash", {"command": "a"}, lines(200))])
    [d] = distill(entries, CONFIG, judge=Broken())
    assert (d.action, d.reason, d.judged) == ("keep", "error", False)
    [d] = distill(entries, CONFIG, judge=_Silent())
    assert (d.action, d.reason, d.judged) == ("keep", "no-answer", False)


class _Silent:
    name = "silent"

    def judge(self, question, chunks, context):
        return None


def test_29_a_failed_segment_keeps_exactly_its_own_lines():
    config = DistillConfig(max_chunks_per_segment=5)
    entries = _run_end([("bash", {"command": "cat big"}, lines(1_000))])
    plan = plan_pass(entries, config)
    [large] = plan.large
    assert len(large.segments) == math.ceil(len(large.chunks) / 5)
    second = prompt_for_segment(plan.question, large.segments[1].chunks, large.segments[1].context)
    assert f"1000 lines; this is part 2 of {len(large.segments)}" in second
    assert second.index("[chunk 6]") < second.index("[chunk 7]")
    verdicts = judge_plan(plan, Fixed(lambda ctx, c: 0.0))
    verdicts[large.segments[0].key] = Verdict(None, failure="error")
    [d] = decide_plan(plan, verdicts)
    end = large.segments[0].chunks[-1].end
    assert d.action == "distill" and d.kept == tuple(range(5))
    assert f"line {end} x" in d.replacement and f"line {end + 1} x" not in d.replacement


# --- §5 render -----------------------------------------------------------------------------

def test_30_format_chars_and_tool_labels():
    assert [format_chars(n) for n in (999, 1_500, 2_300_000, 1_250)] == [
        "999", "1.5k", "2.3M", "1.3k"]
    assert tool_label("bash", {"command": "rg  -n\n foo   src"}) == "bash `rg -n foo src`"
    assert tool_label("shell", {"cmd": "ls"}) == "shell `ls`"
    assert tool_label("read", {"path": "src/a.ts", "offset": 5}) == "read src/a.ts"
    assert tool_label("view", {"file_path": "b.ts"}) == "view b.ts"
    assert tool_label("grep", {"pattern": "foo|bar"}) == "grep `foo|bar`"
    assert tool_label("bash", {"command": "x" * 200}) == f"bash `{'x' * 79}…`"
    assert tool_label("mystery", {"n": 1}) == "mystery"


def test_31_removed_grep_chunks_name_their_files():
    files = [f"{c}.ts" for c in "abcdefgh"]
    text = grep_output(files, 5, 40)
    chunks = chunk_output(text, ChunkOptions(120, 300, 300))
    out = render_output(Source("g", "grep", {"pattern": "x"}, text), chunks, {0})
    assert out.text.split("\n")[-1] == (
        "[… 35 lines not shown: matches in b.ts, c.ts, d.ts, e.ts, f.ts and 2 more …]")
    assert out.text.split("\n")[0].startswith(f"{MARKER} The output of grep `x`, shortened: 5 of")


def test_32_read_omissions_map_to_file_lines_and_skip_the_read_note():
    text = lines(30)
    chunks = chunk_output(text, ChunkOptions(120, 300, 300))
    source = Source("r", "read", {"path": "src/big.ts", "offset": 101}, text)
    end0 = chunks[0].end
    expect = f"[… {30 - end0} lines not shown: lines {end0 + 101}–130 of src/big.ts …]"
    assert render_output(source, chunks, {0}).text.split("\n")[-1] == expect
    noted = text + "\n\n[Showing lines 101-130 of 400. Use offset=131 to continue.]"
    source = Source("r", "read", source.arguments, noted)
    out = render_output(source, chunk_output(noted, ChunkOptions(120, 300, 300)), {0})
    assert "–130 of src/big.ts …]" in out.text
    only_note = [Chunk(0, 0, 30, text), Chunk(1, 30, 32, noted.split("\n", 30)[-1])]
    assert render_output(source, only_note, {0}).text.endswith(text)


def test_33_a_removed_output_stub_names_call_size_and_recall():
    text = render_output(Source("z", "bash", {"command": "make"}, "m" * 2_000),
                         [Chunk(0, 0, 1, "m" * 2_000)], set()).text
    assert text.startswith(MARKER)
    for part in ("bash `make`", "1 line ", "2.0k chars", 'recall({"tool_call_id":"z"})'):
        assert part in text


# --- §6 items ------------------------------------------------------------------------------

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

    def ids(config=CONFIG, **kw):
        return [(i.call_id, i.turn) for i in collect_small(span, 0, len(span), config, **kw)]

    assert ids() == [("b", 0), ("e", 1)]
    assert ids(DistillConfig(distill_errors=False)) == [("b", 0)]
    assert ids(youngest=0) == [("b", 0)]
    assert ids(skip={"b"}) == [("e", 1)]
    short = messages([assistant("", "a", [("g", "bash", {"command": "x" * 300})]),
                      result("g", "bash", "m" * 150, "g1")])
    assert collect_small(short, 0, 2, DistillConfig(small_result_min_chars=100)) == []


def test_40_the_small_stub_names_call_size_and_recall():
    stub = small_stub(Source("e1", "bash", {"command": "ls -la"}, "m" * 1_200))
    assert stub.startswith(MARKER)
    assert all(p in stub for p in ("bash `ls -la`", "1.2k chars", 'recall({"tool_call_id":"e1"})'))


PAD = lines(40, "detail")


def _session():
    return [("cmp", {"role": "compactionSummary", "summary": "earlier work"}),
            user("Which clients retry?", "u1"),
            assistant("Searching.", "a1", [("c1", "bash", {"command": "rg retry"})]),
            result("c1", "bash", lines(20), "r1"),
            assistant(f"jobStatus and orderStatus.\n{PAD}", "a1b"),
            ("notice", {"role": "custom", "content": "subagent finished"}),
            user("Draft a README paragraph.", "u2"), assistant(f"Here it is: …\n{PAD}", "a2"),
            user("Count the 500s in the log.", "u3"),
            assistant("", "a3", [("c3", "bash", {"command": "grep -c 500 log"})]),
            result("c3", "bash", "12", "r3"), assistant(f"12 lines.\n{PAD}", "a3b"),
            user("Where is StatusBadge used?", "u4"), assistant(f"In 5 files.\n{PAD}", "a4"),
            user("Back to the retry clients: which also retry on 502?", "u5"),
            assistant("", "a5", [("c5", "bash", {"command": "rg 502"})]),
            result("c5", "bash", lines(5), "r5")]


def _exchanges(entries, keep=0, skip=()):
    ids, msgs = [i for i, _ in entries], messages(entries)
    start = max(i for i, m in enumerate(msgs) if m["role"] == "user" and i in
                {ids.index(h) for h in ids if h.startswith("u")})
    return collect_exchanges(ids, msgs, start, keep, set(skip))


def test_41_old_exchanges_skip_the_recent_ones_the_judged_and_the_omitted():
    entries = _session()
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


def _judged_run(small_texts):
    """_session() finished (a5b answers), u6 asks next; run 5 also made small outputs."""
    entries = _session()
    calls = [(f"s{i + 1}", tool, args) for i, (tool, args, _) in enumerate(small_texts)]
    entries += [assistant("", "a5s", calls),
                *(result(f"s{i + 1}", t, x, f"rs{i + 1}") for i, (t, _, x) in
                  enumerate(small_texts)),
                assistant("jobStatus also retries on 502.", "a5b"), user("Thanks, now 503?", "u6")]
    return entries


def test_47_small_items_and_exchanges_get_their_own_thresholds_and_edits():
    entries = _judged_run([("bash", {"command": "ls"}, "m" * 1_500),
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
    entries = _judged_run([])
    [*_, u2] = distill(entries, CONFIG, judge=Fixed(lambda ctx, c: 0.0))
    assert (u2.target, u2.action, u2.reason, u2.judged) == ("u2", "keep", "deferred", False)


# --- §7 checkpoints, superseded, break-even, memo -------------------------------------------

def _mid_run(calls, question="Fix the tests"):
    entries = [user("earlier question", "u0"), assistant("earlier answer", "a0"),
               user(question, "u1")]
    for i, (name, args, text, note) in enumerate(calls):
        entries += [assistant(note, f"a{i + 1}", [(f"c{i}", name, args)]),
                    result(f"c{i}", name, text, f"r{i}")]
    return entries


BIG = lines(20)
EAGER = DistillConfig(min_result_chars=100, mid_run_min_age_turns=2, mid_run_batch_chars=0,
                      mid_run_break_even=False)


def test_49_checkpoints_take_outputs_old_enough_with_later_calls_and_superseded_facts():
    entries = _mid_run([("bash", {"command": "npm  test"}, BIG, "Running the suite."),
                        ("read", {"path": "./src/a.js"}, BIG, ""),
                        ("edit", {"path": "src/a.js"}, BIG, "Fixing a.js."),
                        ("recall", {"tool_call_id": "c0"}, BIG, ""),
                        ("bash", {"command": "npm test"}, BIG, ""),
                        ("bash", {"command": "git diff"}, "short", "Checking the diff.")])
    plan = plan_pass(entries, EAGER)
    assert plan.phase == "mid-run" and plan.run_id == "u1"
    assert [(o.item.call_id, o.item.turn) for o in plan.large] == [("c0", 0), ("c1", 1)]
    log, read = (o.item for o in plan.large)
    assert log.superseded == "the same command ran again later (4 turns later)"
    assert read.superseded == "the file changed after this read (edit src/a.js, 1 turn later)"
    assert log.later_calls[:2] == ("read ./src/a.js", "edit src/a.js")
    assert plan.question.latest_note == "Checking the diff."
    assert plan.question.notes == "Running the suite.\n\nFixing a.js."
    assert plan.question.history == (("earlier question", "earlier answer"),)
    assert plan_pass(entries[:-1], EAGER) is None  # a result is missing: not between turns


def test_superseded_reads_commands_and_repeated_calls():
    def call(name, args, turn):
        return Call("x", name, args, turn, 0)

    read = ("read", {"path": "a.ts", "offset": 1, "limit": 100}, 1)
    assert superseded_by(*read, [call("read", {"path": "a.ts", "offset": 101, "limit": 100}, 2)]) \
        is None
    assert "read again" in superseded_by(*read, [call("read", {"path": "./a.ts", "offset": 1,
                                                               "limit": 100}, 3)])
    assert superseded_by(*read, [call("edit", {"path": "a.ts"}, 1)]) is None
    assert superseded_by("bash", {"command": "npm test 2>&1"}, 0,
                         [call("bash", {"command": "npm  test | head"}, 4)]) is None
    assert superseded_by("grep", {"pattern": "x"}, 0, [call("grep", {"pattern": "x"}, 2)]) == (
        "the same grep call ran again later (2 turns later)")


def test_mid_run_tiers_need_the_batch_size_and_must_pay_off():
    entries = _mid_run([("bash", {"command": f"c{i}"}, "y" * 12_000, "") for i in range(6)])
    assert plan_pass(entries, DistillConfig()) is None  # 24k eligible < 60k batch
    batch = DistillConfig(mid_run_batch_chars=20_000)
    assert plan_pass(entries, batch) is None  # 24k × 6 turns < 16 × ~72k rewrite
    plan = plan_pass(entries, DistillConfig(mid_run_batch_chars=20_000, mid_run_break_even=False))
    assert [o.item.call_id for o in plan.large] == ["c0", "c1"]


def test_50_break_even():
    assert pays_off(60_000, 20, 90_000, 13) and not pays_off(60_000, 20, 90_000, 16)
    assert pays_off(60_000, 0, 1_000, 16)


def test_51_the_memo_uses_explicit_status_and_rejudges_checkpoint_keeps_at_run_end():
    outputs = [("bash", {"command": f"k{i}"}, lines(100, f"o{i}")) for i in range(5)]
    entries = _run_end(outputs)

    def d(target, action="keep", phase="mid-run", judged=True):
        return Decision(target, "output", action, "x", phase, "u0", "local", judged=judged)

    known = [d("c0"), d("c1", judged=False), d("c2", phase="run-end"), d("c3", "distill"),
             d("c4", phase="run-end", judged=False)]
    plan = plan_pass(entries, DistillConfig(min_run_chars=0), known)
    assert [o.item.call_id for o in plan.large] == ["c0", "c1", "c4"]


def test_52_later_call_lists_keep_both_ends():
    calls = [Call(f"x{i}", "bash", {"command": f"c{i}"}, i, 0) for i in range(40)]
    assert later_calls_for(37, calls) == ("bash `c38`", "bash `c39`")
    assert later_calls_for(-1, calls, 6) == ("bash `c0`", "bash `c1`", "bash `c2`",
                                             "[… 34 more calls …]", "bash `c37`", "bash `c38`",
                                             "bash `c39`")


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
    entries = _run_end([("bash", {"command": "cat big.log"}, lines(300)),
                        ("read", {"path": "src/big.ts"}, lines(300)),
                        ("edit", {"path": "src/big.ts"}, lines(300))])
    got = distill(entries, CONFIG, judge=FIRST_CHUNK)
    assert [(d.target, d.action) for d in got] == [("c0", "distill"), ("c1", "distill")]
    assert "–300 of src/big.ts …]" in got[1].replacement
    aborted = entries[:-2] + [assistant("", "a1", stop="aborted"), user("next", "u1")]
    assert plan_pass(aborted, CONFIG) is None
    assert plan_pass(entries, DistillConfig(enabled=False)) is None


def test_outputs_already_edited_by_the_host_or_another_tool_are_left_alone():
    entries = _run_end([("bash", {"command": "a"}, f"{MARKER} x\n{lines(200)}"),
                        ("bash", {"command": "b"}, f"[context-guard] x\n{lines(200)}")])
    assert plan_pass(entries, DistillConfig(min_run_chars=0)) is None


def test_apply_is_byte_identical_idempotent_and_touches_only_decided_messages():
    entries = _judged_run([("bash", {"command": "ls"}, "m" * 1_500)])
    entries = entries[:-2] + _run_end([("bash", {"command": "cat"}, lines(200))])[1:]
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


def test_local_judge_keeps_every_chunk_with_an_identifier_path_or_quoted_line_of_the_answer():
    text = "\n".join(
        [f"src/mod{i}.ts:{k}:" + f"const value{i} = compute();".ljust(60, ".")
         for i in range(12) for k in range(1, 9)] + ["tail"])
    chunks = chunk_output(text, ChunkOptions(120, 600, 600))
    answer = ("The bug is in `retryPolicy` (see src/mod3.ts) and the line "
              f"`{chunks[7].text.split(chr(10))[0][len('src/mod7.ts:1:'):].strip('.')}` "
              "matters; also parseConfig_v2.")
    chunks = [Chunk(c.index, c.start, c.end, c.text + ("\nretryPolicy()" if c.index == 5 else "")
                    + ("\nparseConfig_v2" if c.index == 9 else ""), c.files) for c in chunks]
    context = _context(kind="output", superseded=("the file changed",))
    scores = LocalJudge().judge(Question("Why does it fail?", answer=answer), chunks, context)
    kept = {i for i, s in scores.items() if s >= 0.6}
    assert {3, 5, 7, 9} <= kept and scores[0] == 0.0
    assert LocalJudge().judge(Question(""), chunks, context) is None


def test_local_judge_removes_grep_files_unrelated_to_the_answer_and_keeps_when_unsure():
    entries = _run_end([("bash", {"command": "rg retry"},
                         grep_output([f"src/client{i}.ts" for i in range(8)], 16))],
                       answer="Only src/client2.ts and src/client5.ts retry.")
    [d] = distill(entries, CONFIG)
    assert d.action == "distill" and d.judge == "local"
    assert "src/client2.ts:1:" in d.replacement and "src/client5.ts:1:" in d.replacement
    assert "src/client0.ts:1:" not in d.replacement
    vague = _run_end([("bash", {"command": "cat notes"}, lines(200, "retry"))],
                     answer="Every retry line matters.")
    assert [x.action for x in distill(vague, CONFIG)] == ["keep"]


def _grep_chunks(bodies: dict[str, str], per_file: int = 6) -> list[Chunk]:
    """One chunk per file: ``per_file`` grep lines of ``file:n:<body>``."""
    text = "\n".join(f"{f}:{n + 1}:  {body} {n}" for f, body in bodies.items()
                     for n in range(per_file))
    return chunk_output(text, ChunkOptions(120, 300, 300))


def test_local_judge_keeps_grep_chunks_on_two_distinctive_words_not_on_the_pattern_or_one():
    bodies = {"src/retry.ts": "backoff jitter delay status", "src/cache.ts": "cache status",
              "src/log.ts": "logger status", "src/a.ts": "status", "src/b.ts": "status",
              "src/c.ts": "status", "src/d.ts": "status", "src/e.ts": "status flag"}
    chunks = _grep_chunks(bodies)
    assert [c.files for c in chunks] == [(f,) for f in bodies]
    context = _context(arguments='{"command":"rg -n status"}', labels=("bash `rg -n status`",))
    answer = "Retries use exponential backoff with jitter; the cache keeps its status, flags too."
    scores = LocalJudge().judge(Question("Which status?", answer=answer), chunks, context)
    # backoff + jitter: kept. cache alone: one word, below 0.6. status is the pattern and in
    # every chunk; flag is shared too, but alone. logger shares nothing.
    assert scores == {0: 0.75, 1: 0.5, 2: 0.0, 3: 0.0, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.5}


def test_local_judge_drops_grep_words_found_in_more_than_a_quarter_of_the_chunks():
    bodies = {f"src/m{i}.ts": "reducer failed active" + (" retries" if i == 0 else "")
              for i in range(8)}
    chunks = _grep_chunks(bodies)
    answer = "Only m0 retries; every reducer handles failed and active states."
    scores = LocalJudge().judge(Question("Where?", answer=answer), chunks,
                                _context(arguments='{"command":"rg reducer"}'))
    # reducer is the pattern; failed and active are in all 8 chunks: only "retries" counts.
    assert scores == {i: 0.5 if i == 0 else 0.0 for i in range(8)}


def test_local_judge_keeps_a_read_window_on_one_shared_word():
    text = lines(40, "alpha") + "\n" + lines(40, "beta")
    chunks = chunk_output(text, ChunkOptions(120, 600, 600))
    scores = LocalJudge().judge(Question("Explain the beta part"), chunks, _context())
    beta = [c.index for c in chunks if "beta" in c.text]
    assert beta and all(scores[i] == 0.65 for i in beta)
    assert all(scores[c.index] == 0.0 for c in chunks if c.index not in beta)


def test_local_judge_does_not_count_a_logs_own_command_words_as_evidence():
    # 20 seeded test runs: every window says "tests", and so does the request, but only
    # because the command names the folder; the run's answer quotes the summary line.
    text = lines(60, "tests/test_cart.py ....") + "\n500 passed in 3.20s"
    chunks = chunk_output(text, ChunkOptions(120, 600, 600))
    question = Question("Keep the tests fast", answer="`500 passed in 3.20s` on every seed.")
    context = _context(labels=("bash `pytest -q tests/ --seed=3`",),
                       arguments='{"command":"pytest -q tests/ --seed=3"}')
    scores = LocalJudge().judge(question, chunks, context)
    assert scores[chunks[-1].index] == 1.0
    assert all(scores[c.index] == 0.0 for c in chunks[:-1])
    # The same window read from a file keeps its one shared word.
    read = _context(labels=("read tests/log.txt",), tool="read",
                    arguments='{"path":"tests/log.txt"}')
    assert LocalJudge().judge(question, chunks, read)[chunks[0].index] == 0.65


def test_local_judge_omits_exchanges_sharing_only_tool_names_and_keeps_one_word():
    texts = ["user prompt: Fix the retry backoff in the payments client\nfinal answer: done\n"
             "tool calls: read src/pay.ts",
             "user prompt: Update the README badge\nfinal answer: done\ntool calls: read README.md",
             "user prompt: Why is the date picker test flaky?\nfinal answer: timezone\n"
             "tool calls: bash `npm test`"]
    chunks = [Chunk(k, 0, 0, t) for k, t in enumerate(texts)]
    question = Question("Add retry with backoff to the orders client and a test.",
                        latest_note="Reading the orders client.")
    scores = LocalJudge().judge(question, chunks, JudgeContext("exchange", "mid-run", ("x",) * 3))
    # retry + backoff + client: kept; "read" is a tool name: nothing, omitted; "test" alone:
    # unsure, so kept (omission needs P < 0.2; measured on the fixtures, bench/fixture_eval.py).
    assert {i: round(s, 2) for i, s in scores.items()} == {0: 0.85, 1: 0.05, 2: 0.2}


def test_local_judge_small_outputs_need_two_words_and_count_their_call():
    chunks = [Chunk(0, 0, 1, "export function parseCsv(text) { return rows }"),
              Chunk(1, 0, 1, "a1b2c3d ledgerly 2.3.1 initial import"),
              Chunk(2, 0, 1, "export const quote = (value) => value")]
    context = JudgeContext("small", "mid-run",
                           ("read src/csv/parse.js", "bash `git log`", "read src/csv/write.js"),
                           ("",) * 3, (False,) * 3)
    question = Question("Fix the parse errors in the rows of the csv import",
                        latest_note="Looking at the parser.")
    scores = LocalJudge().judge(question, chunks, context)
    # parse (from the call's path) + rows; import alone; nothing.
    assert scores == {0: 0.75, 1: 0.4, 2: 0.1}


def test_at_run_end_only_the_answer_or_next_request_keeps_an_out_of_date_output():
    chunks = [Chunk(0, 0, 1, "def load_config(path): ...")]
    context = _context(superseded=("the file changed after this read",))
    notes_only = Question("Fix it", answer="Done.", notes="`load_config` reads the path.")
    in_answer = Question("Fix it", answer="I changed `load_config`.")
    next_request = Question("Fix it", answer="Done.", follow_up="Why does load_config fail?")
    assert LocalJudge().judge(notes_only, chunks, context) == {0: 0.0}
    assert LocalJudge().judge(in_answer, chunks, context) == {0: 1.0}
    assert LocalJudge().judge(next_request, chunks, context) == {0: 1.0}
    current = _context()
    assert LocalJudge().judge(notes_only, chunks, current) == {0: 1.0}
    checkpoint = Question("Fix it", latest_note="`load_config` reads the path.")
    assert LocalJudge().judge(checkpoint, chunks, _context(phase="mid-run",
                                                           superseded=("newer",))) == {0: 1.0}


def test_sampling_replies_parse_to_chunk_indexes_and_anything_odd_means_keep():
    assert parse_chunk_ids('{"keep": [2, 5]}') == frozenset({1, 4})
    assert parse_chunk_ids('```json\n{"keep": ["chunk_3"]}\n```') == frozenset({2})
    assert parse_chunk_ids('Sure: {"keep": []}') == frozenset()
    assert parse_chunk_ids("[1, 2]", allowed={0, 1}) == frozenset({0, 1})
    for reply in ("keep all", '{"keep": [0]}', '{"keep": [true]}', '{"drop": [1]}', None,
                  '{"keep": [9]}'):
        assert parse_chunk_ids(reply, allowed=range(5)) is None


def test_stats_count_actions_judges_and_measured_tokens():
    entries = _run_end([("bash", {"command": "a"}, lines(200)), ("bash", {"command": "b"},
                                                                 lines(200))])
    got = distill(entries, CONFIG, judge=FIRST_CHUNK)
    stats = summarize(got, tokens=lambda t: math.ceil(len(t) / 4), entries=entries)
    assert (stats.outputs_distilled, stats.judges) == (2, (("fake", 2),))
    assert abs(stats.saved_tokens - stats.saved_chars / 4) < 10
