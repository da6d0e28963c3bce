"""The first cut's depth (paging/select.py ``first_cut``; docs/window.md).

Generated conversations grow one exchange per request and are sent through ``select_context``
with the cut state passed back, the way the server does. The window each request sends is
priced as a prompt cache sees it (paging.replay_cost): the part that repeats the previous
request is read, the rest written.
"""

from __future__ import annotations

import pytest
from context_paging.paging.estimate import chars4_tokens, resident_chars4, text_chars4
from context_paging.paging.replay_cost import Prices, sent_after, totals
from context_paging.paging.request import common_start
from context_paging.paging.select import ContextSelectionError, select_context

from tests.builders import TOOLS, FakeRaw, call, result, tool_assistant, user, window

BUDGET = 24_000


def conversation(turns: int, seed: int = 0) -> list[dict]:
    """``turns`` user requests, each answered by one read whose output size varies (400–2,400
    tokens), so a cut lands on uneven unit boundaries."""
    messages: list[dict] = []
    for n in range(turns):
        size = 400 + (n * 7 + seed * 13) % 11 * 200
        messages.append(user(f"request {n} of conversation {seed}", n))
        messages.append(tool_assistant(call(f"c{seed}-{n}", path=f"src/f{n}.py")))
        messages.append(result(f"c{seed}-{n}", f"output {n} " + "y" * (size * 4)))
    return messages


def select(messages, cut_state=None, **options):
    return select_context(
        messages, token_budget=BUDGET, resident_tokens=resident_chars4("system", TOOLS),
        estimates=[chars4_tokens(m) for m in messages], raw=FakeRaw.by_index(messages),
        cut_state=cut_state, notice_tokens=text_chars4, **options)


def run(turns: int, seed: int = 0, **options):
    """Every request of a growing conversation: (selections, sent windows)."""
    messages = conversation(turns, seed)
    state, selections, windows = None, [], []
    for n in range(1, turns + 1):
        request = messages[: 3 * n]  # ends with the newest read's output, not yet answered
        selection = select(request, state, **options)
        state = selection.cut_state
        selections.append(selection)
        windows.append(window(request, selection))
    return selections, windows


def cache_cost(windows) -> tuple[float, int]:
    """(cost under Anthropic-style cache pricing, cut re-writes) of a run's windows."""
    sent, previous = [], []
    for w in windows:
        sizes = [chars4_tokens(m) for m in w]
        shared = common_start(previous, w)
        sent.append(sent_after(sent[-1] if sent else None, sum(sizes), sum(sizes[:shared])))
        previous = w
    t = totals(sent, Prices())
    return t.cost, t.breaks.get("other", 0)


def test_without_a_setting_the_first_cut_trims_to_the_target_as_upstream():
    selections, _ = run(40)
    upstream, _ = run(40, first_cut=None)
    assert [s.indexes for s in selections] == [s.indexes for s in upstream]
    first = next(s for s in selections if s.mode == "paged")
    # Upstream's FIFO stops at the first unit boundary under the target (5/8 of the budget).
    assert first.estimated_tokens <= first.target_tokens == BUDGET * 5 // 8
    assert first.estimated_tokens > BUDGET * 3 // 8


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_deeper_first_cut_lands_under_its_fraction_and_later_cuts_at_the_target(seed):
    selections, _ = run(60, seed, first_cut=0.375)
    cuts = [n for n, s in enumerate(selections)
            if s.cut_state is not None
            and (n == 0 or s.cut_state != selections[n - 1].cut_state)]
    assert len(cuts) >= 2
    first, second = selections[cuts[0]], selections[cuts[1]]
    assert first.estimated_tokens <= BUDGET * 3 // 8
    # A remembered frontier means upstream's rule again: evict only down to the target.
    assert BUDGET * 3 // 8 < second.estimated_tokens <= second.target_tokens
    assert all(s.estimated_tokens <= BUDGET for s in selections)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_deeper_first_cut_rewrites_less_and_costs_less_under_caching(seed):
    _, upstream = run(60, seed)
    _, deeper = run(60, seed, first_cut=0.375)
    upstream_cost, upstream_breaks = cache_cost(upstream)
    deeper_cost, deeper_breaks = cache_cost(deeper)
    assert deeper_breaks <= upstream_breaks
    assert deeper_cost < upstream_cost
    # Both windows stay byte-stable between cuts: every break is a cut advance.
    for windows, breaks in ((upstream, upstream_breaks), (deeper, deeper_breaks)):
        advances = sum(1 for a, b in zip(windows, windows[1:], strict=False)
                       if common_start(a, b) < len(a))
        assert advances == breaks


def test_a_fraction_at_or_above_the_target_changes_nothing():
    selections, _ = run(40)
    same, _ = run(40, first_cut=0.9)
    assert [s.indexes for s in same] == [s.indexes for s in selections]


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, True, "0.5", float("nan")])
def test_an_invalid_first_cut_fraction_is_a_trim_target_error(bad):
    with pytest.raises(ContextSelectionError) as caught:
        select(conversation(2)[:5], first_cut=bad)
    assert caught.value.code == "INVALID_TRIM_TARGET"


# -- the server's default (index/window/pipeline.py ContextSettings.first_cut: upstream's rule)
#  ---------


def _anthropic_conversation(turns: int) -> list[dict]:
    """A Claude-shaped session: each turn a question, a grep and its ~600-token output."""
    messages: list[dict] = []
    for n in range(turns):
        messages += [
            {"role": "user", "content": f"Question {n}: where is handler_{n} defined?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{n}", "name": "grep", "input": {"q": f"h{n}"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}",
                                          "content": f"src/h{n}.py:1: " + "z" * 2_400}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"In src/h{n}.py."}]},
        ]
    return messages


def _first_cut_reply(tmp_path, **settings) -> dict:
    """The reply to the first request of a growing session that crosses a 6,000 budget."""
    from context_paging.index.service import History
    from context_paging.index.window.pipeline import ContextSettings
    from context_paging.paging.distill import DistillConfig

    service = History({}, tmp_path, ContextSettings(token_budget=6_000, estimator="chars4",
                                                    distill=DistillConfig(enabled=False),
                                                    **settings))
    try:
        messages = _anthropic_conversation(20)
        for end in range(4, len(messages) + 1, 4):
            reply = service.select_context("first-cut", messages[:end], fmt="anthropic")
            if reply["frontier"] is not None:
                return reply
    finally:
        service.close()
    raise AssertionError("the session never crossed the budget")


def test_the_server_cuts_first_to_the_target_by_default_as_upstream(tmp_path):
    reply = _first_cut_reply(tmp_path / "default")
    assert 6_000 * 3 // 8 < reply["estimated_tokens"] <= reply["target_tokens"] == 3_750
    # The deeper first cut is a setting.
    deeper = _first_cut_reply(tmp_path / "deeper", first_cut=0.375)
    assert deeper["estimated_tokens"] <= 6_000 * 3 // 8
    # An explicit trim target is where every cut lands, the first included.
    explicit = _first_cut_reply(tmp_path / "explicit", first_cut=0.375, trim_to_tokens=4_500)
    assert 6_000 * 3 // 8 < explicit["estimated_tokens"] <= 4_500
