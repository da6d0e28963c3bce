"""Spare time prepares the outputs a mid-run checkpoint will judge (``ContextService.idle``):
their chunks and the words the local judge reads of them; and it makes the decisions a
checkpoint left for later beyond the window's reach, from that checkpoint's own inputs (else
the session's next call makes them first). So every reply, and the state a call leaves, is the
full computation's (``ContextService.reference``) with or without it, however early a request
stops it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import context_paging.paging.distill.plan as plan_module
from context_paging.index.ledger import Ledger
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.paging.distill import DistillConfig
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.test_window_cost import conversation, service, spare_time, words


def made(home: Path, reference: bool, budget: int) -> ContextService:
    svc = ContextService(Ledger(home), ContextSettings(
        token_budget=budget, distill=DistillConfig(mid_run_batch_chars=12_000)), words)
    svc.reference, svc.spare_seconds = reference, 0.0
    return svc


def output(turn: int, lines: int, grep: bool) -> str:
    if grep:
        return "\n".join(f"src/mod{turn % 7}/file{i % 13}.py:{i}: value_{i * turn} = "
                         f"lookup(key{i % 5})" for i in range(lines))
    return "\n".join(f"step {i} of build {turn}: copied asset_{i:04d}.png ({i * 7} bytes)"
                     + (" ERROR missing fixture" if i % 97 == 5 else "") for i in range(lines))


def run(turns: int, sizes: list[int]) -> list[list[dict]]:
    """One run growing a call and its output at a time (never ending): the requests sent."""
    messages: list[dict] = [{"role": "user", "content": "Fix the tokenizer crash in "
                             "src/mod3/file4.py (value_12 is read twice)."}]
    requests = []
    for turn in range(turns):
        size = sizes[turn % len(sizes)]
        grep = turn % 3 == 1
        messages += [
            {"role": "assistant", "stopReason": "toolUse", "content": [
                {"type": "text", "text": f"Looking at part {turn}."},
                {"type": "toolCall", "id": f"c{turn}", "name": "grep" if grep else "bash",
                 "arguments": {"pattern": "value"} if grep else {"command": f"make {turn}"}}]},
            {"role": "toolResult", "toolCallId": f"c{turn}", "toolName": "grep" if grep else
             "bash", "isError": False,
             "content": [{"type": "text", "text": output(turn, size, grep)}]},
        ]
        requests.append(list(messages))
    return requests


def outcome(svc: ContextService, messages: list[dict]) -> str:
    """The reply and the state it leaves, as canonical JSON."""
    reply = svc.select("s", messages, fmt="pi", model="anthropic/claude")
    return json.dumps([reply, svc.ledger.load_state("s")], sort_keys=True)


def decisions(svc: ContextService) -> list[str]:
    """The session's stored decisions (the full computation also decides outputs beyond the
    window's reach, which no reply shows: compared only between passes over the same reach)."""
    return [repr(d) for d in svc.ledger.session("s").decisions]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.integers(6, 30),
    sizes=st.lists(st.integers(20, 160), min_size=1, max_size=6),
    budget=st.integers(3_000, 60_000),
    stops=st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=1, max_size=5),
)
@example(turns=25, sizes=[56, 135, 143, 20, 43, 75], budget=8057, stops=[None])
def test_replies_are_the_full_computations_with_spare_time_between_calls(
        tmp_path_factory, turns, sizes, budget, stops):
    home = tmp_path_factory.mktemp("ahead")
    fast, full = made(home / "a", False, budget), made(home / "b", True, budget)
    plain = made(home / "c", False, budget)  # the same pass, never given spare time
    for n, messages in enumerate(run(turns, sizes)):
        expected = outcome(full, messages)
        assert outcome(fast, messages) == expected
        assert outcome(plain, messages) == expected
        assert decisions(fast) == decisions(plain)
        spare_time(fast, stops[n % len(stops)])


def test_a_checkpoint_after_spare_time_chunks_nothing_again(tmp_path, monkeypatch):
    """The outputs a checkpoint judges were chunked in the spare time before it: the call itself
    chunks at most the output that came with it (and replies and decisions stay those of the
    same calls without spare time)."""
    plan_module._chunks.cache_clear()
    chunked: list[int] = []
    original = plan_module.chunk_output

    def counting(text, *args):
        chunked.append(len(text))
        return original(text, *args)

    monkeypatch.setattr(plan_module, "chunk_output", counting)
    fast, full = made(tmp_path / "a", False, 400_000), made(tmp_path / "b", False, 400_000)
    checkpoints = decided = 0
    for messages in run(30, [120]):
        plan_module._chunks.cache_clear()  # nothing is shared with the other service
        full_outcome = outcome(full, messages)
        plan_module._chunks.cache_clear()
        assert fast.idle(math.inf) is False  # done: every undecided output prepared
        fast.idle(math.inf)
        chunked.clear()
        fast_outcome = outcome(fast, messages)
        assert fast_outcome == full_outcome
        assert decisions(fast) == decisions(full)
        if len(json.loads(fast_outcome)[0]["distilled"]) > decided:
            decided = len(json.loads(fast_outcome)[0]["distilled"])
            checkpoints += 1
            # only the newest output (not prepared yet: it came with this request) may be
            # chunked, and a checkpoint never judges an output that young
            assert len(chunked) <= 1
    assert checkpoints >= 1


def test_spare_time_stops_when_a_request_comes(tmp_path):
    svc = made(tmp_path, False, 400_000)
    for messages in run(8, [120]):
        svc.select("s", messages, fmt="pi")
    plan_module._chunks.cache_clear()
    assert svc.idle(math.inf, lambda: True)  # a request waits: nothing done, work left
    assert plan_module._chunks.cache_info().currsize == 0
    assert svc.idle(math.inf) is False
    assert plan_module._chunks.cache_info().currsize > 0


def test_outputs_a_checkpoint_left_beyond_reach_are_decided_after_the_reply(tmp_path):
    """The call leaves the old outputs unjudged; spare time (or else the session's next call,
    before it plans) makes exactly the decisions the full computation made for them."""
    messages = conversation([300] * 30, [False] * 30)
    fast, full = service(tmp_path / "a", False, 12_000), service(tmp_path / "b", True, 12_000)
    plain = service(tmp_path / "c", False, 12_000)  # never given spare time
    assert fast.select("s", messages, fmt="pi") == full.select("s", messages, fmt="pi")
    plain.select("s", messages, fmt="pi")
    everything = sorted(decisions(full))
    assert len(decisions(fast)) < len(everything)
    assert fast.idle(math.inf) is False
    assert sorted(decisions(fast)) == everything
    assert len(decisions(plain)) < len(everything)
    later = messages + [{"role": "user", "content": "thanks"}]
    assert plain.select("s", later, fmt="pi") == full.select("s", later, fmt="pi")
    assert set(decisions(plain)) >= set(everything)  # made first, before the call planned
