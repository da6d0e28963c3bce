"""A trim target below the resident input is raised so that a cut leaves the conversation room,
instead of cutting on every second request."""

from __future__ import annotations

from context_paging.paging.limits import Limits, leave_room
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import make_history

from tests.test_proxy import make_home


def test_a_target_below_the_resident_input_is_raised_to_half_the_room_above_it():
    limits = Limits(budget_tokens=40_000, target_tokens=25_000, model_limit=float("inf"))
    raised, first = leave_room(limits, 15_000, resident=30_000)
    assert raised.target_tokens == 35_000 and first == 32_500


def test_targets_well_above_a_small_resident_input_stand():
    limits = Limits(budget_tokens=128_000, target_tokens=80_000, model_limit=float("inf"))
    assert leave_room(limits, 48_000, resident=8_000) == (limits, 48_000)


def cut_advances(tmp_path, steps: int) -> tuple[int, list[dict]]:
    """Cut advances over a session whose system prompt is 3/4 of a 4,000-token budget."""
    history = make_history(load_settings(home=str(make_home(tmp_path, budget=4000))))
    system = "standing instructions. " * 520  # ~3,000 tokens at characters/4
    messages: list[dict] = [{"role": "user", "content": "do the task"}]
    replies, frontiers = [], set()
    try:
        for step in range(steps):
            reply = history.select_context("room", list(messages), fmt="anthropic",
                                           system=system)
            replies.append(reply)
            frontiers.add(str(reply["frontier"]))
            call = f"toolu_{step}"
            messages += [
                {"role": "assistant", "content": [{"type": "tool_use", "id": call,
                                                   "name": "Bash", "input": {"n": step}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                              "content": "x" * 400}]}]
    finally:
        history.close()
    return len(frontiers) - 1, replies


def test_with_a_large_resident_input_the_cut_moves_rarely(tmp_path):
    advances, replies = cut_advances(tmp_path, 40)
    assert replies[-1]["evicted_messages"] > 0
    assert replies[-1]["target_tokens"] > 3000  # above the resident input
    assert advances <= 40 // 4
