"""The selector's and distillation's shortcuts answer byte for byte as the full computation.

``select_context`` reuses the normalization the server validated the request
with, finds the remembered frontier without asking the history about every message, and the
local judge rules chunks out with substring tests before running its patterns. Each shortcut
is switched off by :func:`full_computation` (the code as it was: the selector normalizes on its
own, the frontier search asks about every message, every pattern runs on every chunk). A
service with the shortcuts, fed ``after_id`` calls, must give the same reply and leave the same
state as a from-scratch service on the full computation fed the whole conversation each time.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest
from context_paging.index.ledger import Ledger, LedgerSession
from context_paging.index.window import distill as window_distill
from context_paging.index.window import estimate as window_estimate
from context_paging.index.window import pipeline as context
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.paging import select
from context_paging.paging.distill import DistillConfig, chunk, conversation, items, judge, plan
from context_paging.paging.distill.chunk import Chunk
from context_paging.paging.distill.model import JudgeContext, Question
from context_paging.paging.limits import ContextSelectionError
from context_paging.paging.units import normalize
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.test_read_reuse import prints, taken
from tests.test_window_cost import outcome


def words(text: str) -> int:
    """A deterministic stand-in tokenizer, not proportional to characters."""
    return len(text.split()) + len(text) // 7


# Distillation at this test's scale: outputs of a few thousand characters are large, a
# checkpoint judges once about 10,000 characters wait, exchanges and savings count sooner.
DISTILL = DistillConfig(min_result_chars=1_500, min_run_chars=2_000, mid_run_batch_chars=10_000,
                        mid_run_min_age_turns=2, exchange_min_saving_chars=1_000,
                        small_result_min_chars=200)


def service(home: Path, reference: bool, budget: int) -> ContextService:
    svc = ContextService(Ledger(home), ContextSettings(token_budget=budget, distill=DISTILL),
                         words)
    svc.reference = reference
    svc.spare_seconds = 0.0  # counting ahead only fills a cache; keep runs deterministic
    return svc


PATHS = ["src/a.py", "src/b.py", "lib/c.ts", "src/deep/d.py"]


def turn(n: int, lines: int, path: str, answer: bool, failing: bool) -> list[dict]:
    """A request, a read of ``path`` and its output (a failing test log when ``failing``); an
    answer naming the path when asked."""
    if failing:  # a test log: only the failures share anything with a question
        body = "\n".join(f"case {i}: " + ("AssertionError: expected" if i % 9 == 0 else "ok")
                         for i in range(lines))
    else:
        body = "\n".join(f"line {i}: value_{i % 7}={i * n} needle{n % 5}" for i in range(lines))
    messages = [
        {"role": "user", "content": f"request {n}: look at {path}", "timestamp": n * 4},
        {"role": "assistant", "stopReason": "toolUse", "timestamp": n * 4 + 1, "content": [
            {"type": "toolCall", "id": f"c{n}", "name": "read", "arguments": {"path": path}}]},
        {"role": "toolResult", "toolCallId": f"c{n}", "toolName": "read", "isError": False,
         "timestamp": n * 4 + 2, "content": [{"type": "text", "text": body}]},
    ]
    if answer:
        messages.append({"role": "assistant", "stopReason": "stop", "timestamp": n * 4 + 3,
                         "content": [{"type": "text", "text": f"`{path}` has needle{n % 5}"}]})
    return messages


def _apply_everywhere(self: select._Selector, frontier: select.Frontier):
    """``_Selector.apply`` as it was: every message of every group is asked about."""
    groups, key = self.groups, frontier.last_evicted
    if frontier.kind == "partialTurn":
        return original_apply(self, frontier)

    def matches(index: int) -> bool:
        role = select.role_of(self.messages[index])
        if role not in ("assistant", "user") or self._key_id(index) != key.history_id:
            return False
        return key.tool_call_id is None or key.tool_call_id in select.tool_call_ids(
            self.messages[index])

    units = ([list(a) for a in groups.prefixes] if frontier.kind == "prefix"
             else [select._flat(t) for t in groups.turns])
    hits = [p for p, unit in enumerate(units) for i in unit if matches(i)]
    if len(hits) != 1:
        return None
    if frontier.kind == "prefix":
        turns = select.turn_units(groups.turns, self.costs)
        return self._view(groups.prefixes[hits[0] + 1:], turns, groups.active)
    return self._view((), select.turn_units(groups.turns[hits[0] + 1:], self.costs),
                      groups.active)


original_apply = select._Selector.apply


def _run_starts_looking_back(messages: list[dict]) -> list[int]:
    """``conversation.run_starts`` as it was: each user message looks back on its own."""
    def steering(index: int) -> bool:
        for earlier in reversed(messages[:index]):
            if conversation.role(earlier) == "custom":
                continue
            if conversation.role(earlier) == "toolResult":
                return True
            return (bool(conversation.tool_calls(earlier))
                    and not conversation.is_interrupted(earlier))
        return False

    return [i for i, m in enumerate(messages)
            if conversation.role(m) == "user" and not steering(i)]


def _grep_like_counting_all(lines: list[str]) -> bool:
    """``chunk.is_grep_like`` as it was: every line is asked, then the share is compared."""
    total = hits = 0
    for line in lines:
        if line.strip() and line != "--":
            total += 1
            hits += bool(chunk.grep_file(line))
    return total >= 3 and hits / total >= 0.6


def _collect_sized_twice(messages, start, end, config, *, youngest=None, skip=frozenset(),
                         reach=0, calls=None, reads=None):
    """``items.collect_sized`` as it was: a walk for the large outputs, one for the small,
    each reading the messages themselves."""
    large = items.collect_outputs(messages, start, end, config, floor=config.min_result_chars,
                                  youngest=youngest, skip=skip, reach=reach, calls=calls)
    return large, items.collect_small(messages, start, end, config, youngest=youngest,
                                      skip=skip, calls=calls)


def _facts_from_scratch(outputs, calls, reach):
    """``items.with_facts`` as a second, full collection gives it: every output's facts."""
    return [items.OutputItem(o.call_id, o.index, o.tool, o.arguments, o.text, o.turn,
                             o.is_error,
                             conversation.superseded_by(o.tool, o.arguments, o.turn, calls) or "",
                             conversation.later_calls_for(o.turn, calls))
            for o in outputs]


@contextlib.contextmanager
def full_computation():
    """Every shortcut of this module's subject off (see the module docstring)."""
    with pytest.MonkeyPatch.context() as patch:
        selector = context.select_context
        patch.setattr(context, "select_context",
                      lambda *a, normalized=None, **k: selector(*a, **k))
        patch.setattr(select._Selector, "apply", _apply_everywhere)
        failure = judge._FAILURE
        patch.setattr(judge, "_failure_in", lambda text: failure.search(text) is not None)
        # "" is in every text: the pattern always runs, as a regex
        patch.setattr(judge, "_path_pattern", lambda paths: (judge._path_regex(paths), ("",)))
        patch.setattr(judge, "_names_a_path", lambda files, paths: any(
            f == p or f.endswith("/" + p) for f in files for p in paths))
        patch.setattr(chunk, "is_grep_like", _grep_like_counting_all)
        # Work texts read whole, as one text, uncached.
        patch.setattr(judge, "_text_evidence", judge.Evidence.of_text)
        patch.setattr(judge, "_text_terms", judge._terms.__wrapped__)
        patch.setattr(plan, "run_starts", _run_starts_looking_back)
        patch.setattr(items, "run_starts", _run_starts_looking_back)
        # Each request read from scratch, not built on the session's previous one.
        reader, expander = context.read, context.expand
        patch.setattr(context, "read", lambda *args: reader(*args[:6]))
        patch.setattr(context, "expand", lambda *args: expander(*args[:5]))
        # Planning: both output walks, a full re-collection, chunks made anew, and every
        # message read by the pass itself (no keys: no remembered reads).
        patch.setattr(plan, "collect_sized", _collect_sized_twice)
        patch.setattr(plan, "with_facts", _facts_from_scratch)
        patch.setattr(plan, "_chunks", lambda text: tuple(chunk.chunk_output(text)))
        patch.setattr(window_distill, "view_keys", lambda request: None)
        # The ledger walks every path and looks at every message of an append: no chain known.
        append = LedgerSession.append

        def append_walking(self, *args, **kwargs):
            self._chain = []
            return append(self, *args, **kwargs)

        patch.setattr(LedgerSession, "append", append_walking)
        # Exact counting back to the reach: no floors past the trim target.
        patch.setattr(window_estimate.Estimates, "floor_chars", lambda self: None)
        yield


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(st.tuples(st.integers(0, 160), st.sampled_from(PATHS), st.booleans(),
                             st.booleans()), min_size=3, max_size=16),
    budget=st.integers(200, 4_000),
    steps=st.lists(st.integers(1, 4), min_size=2, max_size=5),
    tail=st.booleans(),
    ahead=st.one_of(st.none(), st.integers(0, 30)),
)
def test_after_id_calls_answer_as_a_from_scratch_full_computation(
        tmp_path_factory, turns, budget, steps, tail, ahead):
    messages = [m for n, (lines, path, answer, failing) in enumerate(turns)
                for m in turn(n, lines, path, answer, failing)]
    fast = service(tmp_path_factory.mktemp("fast"), reference=False, budget=budget)
    full = service(tmp_path_factory.mktemp("full"), reference=True, budget=budget)
    # Each call sends the turns since the last one (and, with ``tail``, a request after them,
    # which stays in the conversation as the bench's does); the full service gets it all.
    upto, sent, last, whole = max(1, len(messages) - 4 * sum(steps)), 0, None, []
    for grow in steps:
        upto = min(len(messages), upto + 4 * grow)
        new = messages[sent:upto] + ([{"role": "user", "content": "go on"}] if tail else [])
        whole += new
        args = {"fmt": "pi", "system": "sys", "token_budget": budget}
        if last is None or "last_message_id" not in last:
            got = outcome(fast, messages=whole, **args)
        else:
            got = outcome(fast, messages=new, after_id=last["last_message_id"], **args)
        with full_computation():
            assert got == outcome(full, messages=whole, **args)
        last, sent = json.loads(got)[0], upto
        # Spare time between calls (counting ahead, until done or stopped after some views).
        asked = iter(range(10**9))
        fast.idle(math.inf, None if ahead is None
                  else lambda asked=asked: next(asked) >= ahead)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(st.tuples(st.integers(0, 160), st.sampled_from(PATHS), st.booleans(),
                             st.booleans()), min_size=3, max_size=16),
    budget=st.integers(200, 4_000),
    steps=st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["grow", "tail", "edit"]),
                             st.one_of(st.none(), st.integers(0, 60))), min_size=2, max_size=5),
)
def test_whole_conversation_calls_answer_as_a_from_scratch_full_computation(
        tmp_path_factory, turns, budget, steps):
    """The whole conversation each time, read on the session's previous request (its
    fingerprints show the unchanged start): turns appended (``grow``), inserted before a
    trailing request that stays last (``tail``, as the bench does), or after an earlier
    message changed (``edit``); sometimes with an ephemeral message."""
    messages = [m for n, (lines, path, answer, failing) in enumerate(turns)
                for m in turn(n, lines, path, answer, failing)]
    fast = service(tmp_path_factory.mktemp("fast"), reference=False, budget=budget)
    full = service(tmp_path_factory.mktemp("full"), reference=True, budget=budget)
    upto = max(1, len(messages) - 4 * sum(grow for grow, _, _ in steps))
    sent: list[dict] = messages[:upto]
    for grow, how, ephemeral in steps:
        more, upto = messages[upto:upto + 4 * grow], upto + 4 * grow
        if how == "tail":
            sent = [*sent[:-1], *more, {"role": "user", "content": "go on"}]
        elif how == "edit" and sent:
            at = (ephemeral or 0) % len(sent)
            changed = json.loads(json.dumps(sent[at]))
            changed["timestamp"] = -1 - at
            sent = [*sent[:at], changed, *sent[at + 1:], *more]
        else:
            sent = [*sent, *more]
        args = {"fmt": "pi", "system": "sys", "token_budget": budget,
                "ephemeral": [] if ephemeral is None else [ephemeral % len(sent)]}
        got = outcome(fast, messages=sent, **args)
        with full_computation():  # each request read from scratch, and no other shortcut
            assert got == outcome(full, messages=sent, **args)


def test_the_property_reaches_distillation_and_cut_advances(tmp_path):
    """The shapes above do exercise what the shortcuts touch: decisions (removals of
    superseded reads among them) and a remembered cut that advances."""
    turns = [turn(n, 140, PATHS[n % 2], n % 3 == 0, n == 5) for n in range(14)]
    messages = [m for t in turns for m in t]
    ends = [sum(len(t) for t in turns[:k]) for k in range(1, len(turns) + 1)]
    svc = service(tmp_path, reference=False, budget=2_500)
    frontiers, last, sent = [], None, 0
    for upto in ends[5::2]:
        tail = [{"role": "user", "content": f"go on after {upto}"}]
        kwargs = {"messages": messages[:upto] + tail, "fmt": "pi"} if last is None else {
            "messages": messages[sent:upto] + tail, "after_id": last["last_message_id"]}
        last, sent = svc.select("s", **kwargs), upto
        frontiers.append(json.dumps(last["frontier"], sort_keys=True))
    actions = {d.action for d in svc.ledger.session("s").decisions}
    assert {"remove", "keep"} <= actions
    assert len(set(frontiers) - {"null"}) >= 2


@pytest.mark.parametrize("extra", [0, 1, 2])
def test_a_frontier_found_outside_the_completed_turns_answers_as_the_full_search(tmp_path,
                                                                              extra):
    """The frontier search finds a matching message's turn by bisection; a match that lies in
    no completed turn (here the conversation goes back to the cut's own turn, which becomes
    the active one, ``extra`` messages into it or past it) is no hit, as the full search has
    it: both answer the same (the cut is not in the groups)."""
    messages = [m for n in range(10) for m in turn(n, 120, PATHS[n % 2], True, False)]
    messages.append({"role": "user", "content": "go on"})
    fast = service(tmp_path / "fast", reference=False, budget=1_500)
    full = service(tmp_path / "full", reference=True, budget=1_500)
    got = json.loads(outcome(fast, messages=messages, fmt="pi"))
    with full_computation():
        assert json.dumps(got, sort_keys=True) == outcome(full, messages=messages, fmt="pi")
    frontier = got[0]["frontier"]
    assert frontier is not None and frontier["kind"] == "completedTurn"
    path = fast.ledger.session("s").path_ids()
    at = path.index(frontier["last_evicted"]["history_id"])
    again = messages[: at + 1 + extra]
    again += [{"role": "user", "content": "and now?"}] if extra == 2 else []
    fast_again = outcome(fast, messages=again, fmt="pi")
    with full_computation():
        assert fast_again == outcome(full, messages=again, fmt="pi")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["x", " ", "\n", "FAIL", "FAILED", "Error", "error:", "ERROR",
                                 "Traceback", "ValueException", "assertion", "panicked", "_",
                                 "AssertionError", "errors", "Fail", "pani", "assert",
                                 "Exception", "9", ":", "é", "\u0663", "\u0301", "-", "x:"]),
                max_size=12).map("".join))
def test_the_failure_pre_test_agrees_with_the_pattern(text):
    assert judge._failure_in(text) == (judge._FAILURE.search(text) is not None)


names = st.sampled_from(["src/a.py", "a.py", "lib/src/a.py", "b-a.py", "a.pyc", "x/y",
                         "main.rs", "srcs/a.py", "./..", "é/ß.py", "-v.txt", "a_b/c.py"])


@settings(max_examples=300, deadline=None)
@given(st.frozensets(names, min_size=1, max_size=4),
       st.lists(names | st.sampled_from([" ", "\n", ".", "-", "/", ":", "$", "_", "é", "x",
                                         "7", "\u0663", "\u00b7", "\u0301"]),
                max_size=10))
@example(frozenset({"a.py"}), [".", "a.py"])  # a name after "." or before "-" is not whole
@example(frozenset({"a.py"}), ["a.py", "-"])
@example(frozenset({"a.py"}), ["\u0663", "a.py", " ", "a.py"])  # a later occurrence is
def test_the_path_pre_test_agrees_with_the_pattern(paths, parts):
    text = "".join(parts)
    evidence = judge.Evidence(frozenset(), paths, frozenset())
    chunk = Chunk(0, 0, 1, text)
    pattern = judge._path_regex(paths)
    assert evidence.found_in(chunk, text) == (pattern.search(text) is not None)
    assert judge._path_pattern(paths)[0].search(text) == (pattern.search(text) is not None)


@settings(max_examples=300, deadline=None)
@given(st.lists(names | st.sampled_from(["a", "(", "a|b", "[x]", ".*", "\\", "é"]),
                max_size=6).map(tuple),
       st.lists(names | st.sampled_from([" ", "\n", ".", "a", "(", "|", "[x]", "\\", "é"]),
                max_size=10))
def test_the_names_pre_test_is_a_substring_test_of_every_name(names_, parts):
    """Many names are looked for with one search of their alternation: the same answer as a
    substring test of each (names with regex syntax in them included)."""
    text = "".join(parts)
    assert judge._names_in(names_, text) == any(name in text for name in names_)


def test_a_passed_normalization_is_the_one_the_selector_computes():
    messages = [m for n in range(6) for m in turn(n, 30, "src/a.py", n % 2 == 0, False)]
    messages.append({"role": "user", "content": "go on"})
    kwargs = {"token_budget": 300, "resident_tokens": 10,
              "estimates": [words(json.dumps(m)) for m in messages],
              "notice_tokens": words}
    # Only structure decides a normalization: one of the same conversation with other texts
    # (what a request whose contents were edited passes on) gives the same window.
    other = json.loads(json.dumps(messages).replace("needle", "thread"))
    assert other != messages
    assert (select.select_context(messages, **kwargs)
            == select.select_context(messages, normalized=normalize(other), **kwargs))


lines = st.lists(st.sampled_from([
    "src/a.py:3: value_1 = 2", "lib/c.ts ok", "see a.py", "case 4: AssertionError: expected",
    "FAILED tests/test_x.py", "panicked at main.rs", "nothing here", "needle3 found",
    "parseValue called", "Traceback (most recent call last):", "x-a.py", "srcs/a.py",
    "nothing here at all", "so: look at src/a.py"]),
    min_size=1, max_size=6).map("\n".join)
texts = st.lists(st.sampled_from(["", "look at src/a.py", "fix `parseValue` in lib/c.ts",
                                  "needle3 and main.rs", "> nothing here at all", "```",
                                  "case 4: expected", "`src/a.py\n\nis` here", "\n",
                                  "```py\n\nnothing here at all\n\n```"]),
                 max_size=4).map("\n\n".join)


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(lines, min_size=1, max_size=5), request=texts, answer=texts,
       later=st.lists(st.sampled_from(["read src/a.py", "read lib/c.ts", "bash pytest"]),
                      max_size=3),
       phase=st.sampled_from(["mid-run", "run-end"]), superseded=st.booleans(),
       failed=st.booleans())
def test_the_local_judge_scores_as_with_every_pattern_run(chunks, request, answer, later, phase,
                                                          superseded, failed):
    question = Question(request, answer=answer, latest_note=answer)
    context = JudgeContext("output", phase, ("read src/a.py",),
                           ("src/a.py" if superseded else "",), (failed,), "read",
                           '{"path":"src/a.py"}', tuple(later))
    parts = tuple(Chunk(k, 0, 1, text) for k, text in enumerate(chunks))
    fast = judge.LocalJudge().judge(question, parts, context)
    with full_computation():
        assert fast == judge.LocalJudge().judge(question, parts, context)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["a.ts:1:x", "a.ts-2-y", "--", "", " ", "b/c.py:30: z",
                                 "plain words", "2024-05-01 12:00:01 log", "d.md:4:"]),
                max_size=14))
def test_grep_detection_stopping_early_agrees_with_counting_every_line(lines):
    assert chunk.is_grep_like(lines) == _grep_like_counting_all(lines)


shapes = st.sampled_from([
    {"role": "user", "content": "u"}, {"role": "custom", "content": "c"},
    {"role": "toolResult", "toolCallId": "t"}, {"role": "system", "content": "s"},
    {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
    {"role": "assistant", "content": [{"type": "toolCall", "id": "t", "name": "read"}]},
    {"role": "assistant", "stopReason": "aborted",
     "content": [{"type": "toolCall", "id": "t", "name": "read"}]},
])


@settings(max_examples=400, deadline=None)
@given(st.lists(shapes, max_size=12))
def test_run_starts_in_one_pass_are_the_ones_each_message_finds_looking_back(messages):
    assert conversation.run_starts(messages) == _run_starts_looking_back(messages)
    assert [i for i, m in enumerate(messages) if m["role"] == "user"
            and conversation.is_steering(messages, i)] == [
        i for i, m in enumerate(messages)
        if m["role"] == "user" and i not in _run_starts_looking_back(messages)]


def _history_for(messages: list[dict], fmt: str):
    from context_paging.index.history import LedgerHistory
    from context_paging.index.ledger import fingerprint
    from context_paging.paging.request import read

    request = read(messages, fmt, [], lambda skip: [None if i in skip else fingerprint(m)
                                                   for i, m in enumerate(messages)])
    return request, LedgerHistory(request, [])


@pytest.mark.parametrize("fmt,messages", [
    ("anthropic", [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}}]},
        {"role": "user", "content": [  # a mixed user message: several views
            {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
            {"type": "text", "text": "and now b"}]},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "hi"}]),
    ("openai", [
        {"role": "system", "content": "resident"},
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "user", "content": "list"}]),
    ("responses", [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "r1", "summary": []},
        {"type": "function_call", "call_id": "f1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": "x"},
        {"role": "user", "content": "again"}]),
])
def test_the_ledger_history_lists_a_history_ids_views_as_a_full_scan_does(fmt, messages):
    """``LedgerHistory.indexes_of`` (the selector's frontier search) finds exactly the views
    whose host message has the id, in every format (several views per message, resident
    messages without views, runs of Responses items)."""
    request, history = _history_for(messages, fmt)
    views = range(len(request.views.views))
    for history_id in {*request.ids, "m-unknown"} - {None}:
        assert history.indexes_of(history_id) == [
            i for i in views if request.history_id(i) == history_id]
    assert any(len(history.indexes_of(h)) > 1 for h in request.ids if h) == (fmt == "anthropic")


def _message(kind: str, n: int) -> dict:
    """One message of a small alphabet: requests, answers, calls (interrupted or not), results
    for call ``c<n>`` (which may answer no open call: an invalid request)."""
    if kind == "user":
        return {"role": "user", "content": f"u{n}"}
    if kind == "answer":
        return {"role": "assistant", "stopReason": "stop", "content": [{"type": "text",
                                                                         "text": f"a{n}"}]}
    if kind in ("call", "aborted"):
        return {"role": "assistant", "stopReason": "aborted" if kind == "aborted" else "toolUse",
                "content": [{"type": "toolCall", "id": f"c{n}", "name": "read",
                             "arguments": {}}]}
    return {"role": "toolResult", "toolCallId": f"c{n}", "toolName": "read", "isError": False,
            "content": [{"type": "text", "text": f"r{n}"}]}


KINDS = st.sampled_from(["user", "answer", "call", "aborted", "result"])
CALLS = st.integers(0, 2)


def _structure(messages: list[dict], **known):
    try:
        return normalize(messages, **known)
    except ContextSelectionError as exc:
        return str(exc)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(KINDS, CALLS), max_size=14), st.lists(st.tuples(KINDS, CALLS),
                                                                  max_size=6),
       st.lists(st.tuples(KINDS, CALLS), max_size=6), st.integers(0, 14))
def test_normalizing_on_an_earlier_requests_atoms_is_normalizing_from_scratch(
        shared, before, after, cut):
    """``normalize(messages, (earlier, same))`` equals ``normalize(messages)`` whenever the
    first ``same`` messages are the earlier request's (the earlier one went on differently)."""
    shared = [_message(kind, n) for kind, n in shared]
    earlier = shared + [_message(kind, n) for kind, n in before]
    now = shared + [_message(kind, n) for kind, n in after]
    first = _structure(earlier)
    if isinstance(first, str):
        return  # a request the server refused leaves nothing to build on
    same = min(cut, len(shared))
    assert _structure(now, known=(first, same)) == _structure(now)


@pytest.mark.parametrize("fmt", ["pi", "anthropic", "openai", "responses"])
def test_a_request_read_on_the_previous_one_is_the_request_read_from_scratch(fmt):
    """``paging.request.read`` with ``earlier`` (the session's previous request) gives the same
    value as without, for an ``after_id`` request and for the whole conversation, in every
    format."""
    from context_paging.paging.request import read

    conversations = {
        "pi": [_message(k, n) for k, n in [("user", 0), ("call", 1), ("result", 1),
                                           ("aborted", 2), ("answer", 0), ("user", 1),
                                           ("call", 2), ("result", 2), ("user", 2)]],
        "anthropic": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": "A"}, {"type": "text", "text": "more"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t2", "name": "read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                                          "content": "B"}]},
            {"role": "user", "content": "next"}],
        "openai": [
            {"role": "user", "content": "list"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "list"}],
        "responses": [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "f1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "f1", "output": "x"},
            {"role": "user", "content": "again"}],
    }
    messages = conversations[fmt]
    reused = valid = unchanged = 0
    for upto in range(1, len(messages)):
        try:
            earlier = read(messages[:upto], fmt, [], prints(messages[:upto]), validate=True)
        except ContextSelectionError:
            continue  # a call without its results yet: refused, nothing to build on
        valid += 1
        stored = list(earlier.ids)
        built = read(messages, fmt, [], prints(messages), stored, True, earlier)
        assert built == read(messages, fmt, [], prints(messages), stored, True)
        reused += bool(taken(built, earlier))
        # The whole conversation again (no ``stored``): the fingerprints show the shared start.
        whole = read(messages, fmt, [], prints(messages), (), True, earlier)
        assert whole == read(messages, fmt, [], prints(messages), (), True)
        unchanged += bool(taken(whole, earlier))
        # ... and with the earlier request's last message changed, sent again after it.
        edited = [*messages[:upto - 1], {**messages[upto - 1], "edited": True},
                  *messages[upto - 1:]]
        with contextlib.suppress(ContextSelectionError):
            assert (read(edited, fmt, [], prints(edited), (), True, earlier)
                    == read(edited, fmt, [], prints(edited), (), True))
    # Responses: not when the earlier request ends in a run of model items (it may go on)
    assert valid >= 2 and 0 < reused == unchanged <= valid
    assert fmt == "responses" or reused == valid





@pytest.mark.parametrize("fmt", ["pi", "anthropic", "openai", "responses"])
def test_view_keys_without_followers_are_the_general_walks(fmt):
    """``window_distill.view_keys`` answers a request without Responses runs in one
    comprehension; it must equal the general walk (each view's later items looked up)."""
    from context_paging.index.ledger import fingerprint
    from context_paging.paging.request import read

    messages = {
        "pi": [_message(k, n) for k, n in [("user", 0), ("call", 1), ("result", 1),
                                           ("answer", 0), ("user", 1)]],
        "anthropic": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": [
                          {"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
                      {"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                          {"type": "text", "text": "more"}]}],
        "openai": [{"role": "system", "content": "sys"}, {"role": "user", "content": "list"},
                   {"role": "assistant", "content": "done"}],
        "responses": [{"role": "user", "content": "go"},
                      {"type": "function_call", "call_id": "f1", "name": "ls",
                       "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "f1", "output": "x"}],
    }[fmt]
    request = read(messages, fmt, [], lambda skip: [
        None if i in skip else fingerprint(m) for i, m in enumerate(messages)])
    followers = request.views.followers or {}
    general = []
    for index in request.positions:
        more = tuple(request.ids[i]
                     for i in followers.get(request.views.views[index].source, ()))
        general.append(None if None in more else (request.format, request.keys[index], more))
    assert window_distill.view_keys(request) == general and general
