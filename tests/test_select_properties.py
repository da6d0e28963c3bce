"""Selection invariants over growing conversations (hypothesis), and upstream's benchmark
workload paged in one pass (docs/selection.md, "The benchmark workload").
"""

from __future__ import annotations

import math

from context_paging.paging.estimate import chars4_tokens, resident_chars4, text_chars4
from context_paging.paging.select import ContextSelectionError, select_context
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import FakeRaw, assistant, call, custom, result, select, tool_assistant, user

# -- properties over growing conversations ------------------------------------------------------

exchange_specs = st.fixed_dictionaries({
    "calls": st.integers(1, 3),
    "sizes": st.lists(st.integers(0, 300), min_size=4, max_size=4),
    "reversed": st.booleans(),
    "bash_before": st.booleans(),
    "outgoing": st.sampled_from([None, None, "end", "envelope"]),
})
turn_specs = st.fixed_dictionaries({
    "request": st.sampled_from(["user", "user", "custom", "user+custom"]),
    "extra": st.sampled_from([None, None, None, "bashExecution", "system"]),
    "size": st.integers(0, 300),
    "outgoing": st.sampled_from([None, None, "end", "envelope"]),
    "exchanges": st.lists(exchange_specs, max_size=3),
    "end": st.sampled_from(["answer", "answer", "open", "interrupted", "interrupted_text"]),
})
conversation_specs = st.fixed_dictionaries({
    "budget": st.integers(60, 2_500),
    "target": st.sampled_from([None, "half", "same", "above"]),
    "window": st.sampled_from([None, 1.0, 1.5, 4.0]),
    "system": st.integers(0, 40),
    "offset": st.sampled_from([None, None, -15, 0, 40]),
    "summary": st.booleans(),
    "turns": st.lists(turn_specs, min_size=1, max_size=7),
})


class Conversation:
    """A growing Pi session: persistent messages plus the calls a host would make."""

    def __init__(self, spec):
        self.spec, self.history, self.counter = spec, [], 0
        self.system = "s" * (4 * spec["system"])
        self.cut, self.previous, self.previous_length = None, None, 0

    def text(self, tokens):
        self.counter += 1
        return f"m{self.counter} " + "x" * (4 * tokens)

    def add(self, message):
        self.history.append(message)
        return message

    def request(self, turn):
        kind, text = turn["request"], self.text(turn["size"])
        envelope = [self.add(custom(text) if kind == "custom" else user(text))]
        if kind == "user+custom":
            envelope.append(self.add(custom(self.text(10))))
        if turn["extra"] == "bashExecution":
            envelope.append(self.add({"role": "bashExecution", "command": self.text(1),
                                      "output": self.text(20)}))
        elif turn["extra"] == "system":
            envelope.append(self.add({"role": "system", "content": self.text(5)}))
        return envelope

    def exchange(self, spec, stop="toolUse", results=None):
        self.counter += 1
        ids = [f"c{self.counter}-{n}" for n in range(spec["calls"])]
        calls = tool_assistant(*(call(i, path=self.text(1)) for i in ids), stop=stop)
        outs = [result(i, self.text(size)) for i, size in zip(ids, spec["sizes"], strict=False)]
        outs = outs[::-1] if spec["reversed"] else outs
        return [self.add(calls), *map(self.add, outs[:results])]


def _cost(message):
    return 0 if message["role"] == "system" else chars4_tokens(message)


def _check(conv, messages, outgoing, selection, calibration, protected, dropped):
    kept = set(selection.indexes)
    assert len(kept) == len(selection.indexes)
    assert kept.isdisjoint(selection.evicted) and kept.isdisjoint(selection.dropped)
    assert kept | set(selection.evicted) | set(selection.dropped) == set(range(len(messages)))
    assert {id(messages[i]) for i in selection.dropped} == dropped
    total = resident_chars4(conv.system, []) + text_chars4(selection.notice or "")
    for i in selection.indexes:
        text = selection.replacements.get(i)
        total += _cost(messages[i]) if text is None else text_chars4(text)
    assert selection.estimated_tokens == max(0, total + calibration)
    if selection.mode in ("within_budget", "paged"):
        assert selection.estimated_tokens <= selection.budget_tokens
    else:
        assert selection.estimated_tokens <= (_window(conv.spec) or math.inf)
    for i in selection.indexes:  # an assistant with calls is kept iff all its results are
        assert all(j in kept for j in _results(messages, i))
        if messages[i]["role"] == "toolResult":
            assert next(k for k in range(i, -1, -1) if messages[k]["role"] == "assistant") in kept
    for i, message in enumerate(messages):  # the request envelope and the unread exchange
        if outgoing[i] or any(message is p for p in protected):
            assert i in kept


def _window(spec):
    return None if spec["window"] is None else spec["budget"] * spec["window"]


def _results(messages, index):
    if messages[index]["role"] != "assistant":
        return []
    out = []
    for j in range(index + 1, len(messages)):
        if messages[j]["role"] != "toolResult":
            break
        out.append(j)
    return out


def _call(conv, envelope, unread, outgoing_kind, dropped):
    spec, messages, protected = conv.spec, list(conv.history), envelope + unread
    outgoing = [False] * len(messages)
    if outgoing_kind is not None:  # a fresh outgoing-only message, after the envelope or last
        where = len(messages)
        if outgoing_kind == "envelope":
            where = 1 + next(i for i, m in enumerate(messages) if m is envelope[-1])
        messages.insert(where, user(conv.text(15)))
        outgoing.insert(where, True)
    target = {None: None, "half": max(1, spec["budget"] // 2), "same": spec["budget"],
              "above": spec["budget"] * 2}[spec["target"]]
    resident = resident_chars4(conv.system, [])
    measured, calibration = None, 0
    if spec["offset"] is not None:  # provider usage: the plain estimate plus a constant
        measured = max(0, resident + sum(map(chars4_tokens, messages)) + spec["offset"])
        calibration = measured - resident - sum(map(_cost, messages))
    stored = [(f"h{id(m)}", m) for m, out in zip(messages, outgoing, strict=True) if not out]
    try:
        selection = select_context(
            messages, token_budget=spec["budget"], trim_to_tokens=target,
            model_window=_window(spec), resident_tokens=resident,
            estimates=[chars4_tokens(m) for m in messages], context_tokens=measured,
            outgoing_only=outgoing, raw=FakeRaw(messages, stored), cut_state=conv.cut,
            notice_tokens=text_chars4)
    except ContextSelectionError as error:  # the host aborts; the cut is not committed
        assert error.code in ("ACTIVE_REQUEST_TOO_LARGE", "RESIDENT_INPUT_TOO_LARGE")
        assert error.estimated_tokens > error.budget_tokens
        conv.previous = None
        return
    _check(conv, messages, outgoing, selection, calibration, protected, dropped)
    current = (selection.notice, [id(messages[i]) for i in selection.indexes if not outgoing[i]],
               selection.cut_state, selection.mode, selection.fallback_reason)
    previous, stable = conv.previous, ("within_budget", "paged")
    if (previous is not None and previous[3] in stable and current[3] in stable
            and previous[4] is None and current[4] is None and previous[2] == current[2]):
        existed = {id(m) for m in conv.history[: conv.previous_length]}
        carried = [i for i in current[1] if i in existed]
        assert current[0] == previous[0]
        assert carried[: len(previous[1])] == previous[1]  # prefix stability
    conv.previous, conv.previous_length = current, len(conv.history)
    conv.cut = selection.cut_state


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation_specs)
def test_growing_conversations_keep_every_selection_invariant(spec):
    conv = Conversation(spec)
    dropped = set()
    if spec["summary"]:
        conv.add({"role": "compactionSummary", "summary": conv.text(200)})
    for turn in spec["turns"]:
        envelope = conv.request(turn)
        _call(conv, envelope, [], turn["outgoing"], dropped)
        for exchange in turn["exchanges"]:
            if exchange["bash_before"]:
                conv.add({"role": "bashExecution", "command": "ls", "output": conv.text(30)})
            messages = conv.exchange(exchange)
            _call(conv, envelope, messages, exchange["outgoing"], dropped)
        if turn["end"] == "answer":
            conv.add(assistant(conv.text(50)))
        elif turn["end"] == "interrupted":
            failed = conv.exchange(turn["exchanges"][0] if turn["exchanges"] else
                                   {"calls": 2, "sizes": [5, 5, 5, 5], "reversed": False},
                                   stop="aborted", results=1)
            dropped |= {id(m) for m in failed}
        elif turn["end"] == "interrupted_text":
            dropped.add(id(conv.add(assistant(conv.text(10), stop="error"))))


def test_the_upstream_benchmark_workload_pages_in_one_pass():
    # 300 turns, 15 MiB of read output, budget = window = 128,000, default target.
    messages, size = [], 15 * 1024 * 1024 // 300
    for n in range(300):
        text = (f"src/benchmark/turn-{n:03}.ts event=read status=ok " * 1_000)[: size]
        messages += [user(f"Benchmark request {n}"), tool_assistant(call(f"call-{n}")),
                     result(f"call-{n}", text)]
    messages.append(user("Summarize the benchmark results."))
    selection = select(messages, budget=128_000, target=None, window=128_000,
                       system="You are a benchmark assistant.",
                       raw=FakeRaw.by_index(messages))
    assert selection.mode == "paged" and selection.fallback_reason is None
    assert 0 < selection.estimated_tokens <= 80_000
    assert selection.cut_state.frontier.kind == "completedTurn"
    assert '"tool_call_id":"call-' in selection.notice
