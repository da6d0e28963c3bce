"""The selector's limits, validation and accounting: upstream's cases 01–16
(docs/selection.md, "Upstream's test cases").

Ported from upstream's numbered rules with upstream's figures: estimates come from
``paging.estimate.chars4_tokens`` (Pi's chars/4), so R = 23 for the resident prompt and one
``read`` tool, and an image costs 1,200 tokens.
"""

from __future__ import annotations

import math

from context_paging.paging.estimate import chars4_tokens
from context_paging.paging.limits import Limits, context_limits
from context_paging.paging.select import TokenEstimates

from tests.builders import FakeRaw, assistant, raises, repeat, select, user

MAX_SAFE = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER, upstream's largest valid count


# -- limits and validation ---------------------------------------------------------------------


def test_case_01_effective_targets_scale_with_the_window_without_rounding_products():
    inf = math.inf
    cases = [
        (128_000, 80_000, None, Limits(128_000, 80_000, inf)),
        (128_000, 80_000, 64_000, Limits(64_000, 40_000, 64_000)),
        (128_000, 160_000, 64_000, Limits(64_000, 64_000, 64_000)),
        (MAX_SAFE, MAX_SAFE - 1, 64_000, Limits(64_000, 63_999, 64_000)),
        (128_000, 80_000, 16_000.5, Limits(16_000.5, 10_000, 16_000.5)),
        (128_000, 80_000, 0.5, Limits(0.5, 1, 0.5)),
    ]
    for budget, target, model_window, expected in cases:
        assert context_limits(budget, target, model_window) == expected


def test_case_02_an_omitted_target_is_five_eighths_of_the_budget():
    assert context_limits(128_000) == Limits(128_000, 80_000, math.inf)
    assert context_limits(1) == Limits(1, 1, math.inf)
    assert context_limits(MAX_SAFE).target_tokens == 5_629_499_534_213_119
    assert context_limits(MAX_SAFE - 4).target_tokens == 5_629_499_534_213_116


def test_case_03_invalid_explicit_targets_are_rejected():
    # JavaScript's null is "omitted" in Python (None), so it is not in this list.
    for target in [0, -1, 1.5, math.nan, math.inf, MAX_SAFE + 1, "80000", True, [], {}]:
        raises("INVALID_TRIM_TARGET", select, [], budget=128_000, target=target,
               window=1_000_000, system="", tools=[])


def test_case_04_invalid_token_budgets_are_rejected():
    for budget in [0, -1, 1.5, math.nan, math.inf, MAX_SAFE + 1, "64_000", [96000], {}]:
        error = raises("INVALID_TOKEN_BUDGET", select, [], budget=budget, target=None,
                       window=None)
        assert "token budget" in error.message.lower()
        assert (error.resident_tokens, error.estimated_tokens, error.budget_tokens) == (0, 0, 0)


def test_case_05_invalid_model_windows_are_rejected():
    for model_window in [0, math.nan, math.inf, -1]:
        error = raises("INVALID_MODEL_CONTEXT", select, [], window=model_window)
        assert "estimate" in error.message


def test_case_06_a_resident_input_over_the_budget_is_rejected():
    error = raises("RESIDENT_INPUT_TOO_LARGE", select, [], window=64_000,
                   system="x" * 300_000, tools=[])
    assert "estimate" in error.message and "75001" in error.message  # (300,000 + "[]") / 4


def test_case_07_an_active_request_over_the_budget_is_rejected():
    error = raises("ACTIVE_REQUEST_TOO_LARGE", select, [user("x" * 300_000)], window=64_000)
    assert "estimate" in error.message


def test_case_08_the_budget_is_capped_by_the_model_window():
    assert select([], budget=128_000, window=32_000, system="resident").budget_tokens == 32_000
    uncapped = select([], budget=96_000, window=None, system="resident")
    assert (uncapped.budget_tokens, uncapped.mode) == (96_000, "within_budget")


def test_case_09_a_minimum_target_cannot_bypass_a_fractional_model_limit():
    error = raises("RESIDENT_INPUT_TOO_LARGE", select, [], budget=128_000, target=80_000,
                   window=0.5, system="", tools=[], context_tokens=0.75,
                   raw=FakeRaw([], []))
    assert "0.75" in error.message and "0.5" in error.message


# -- accounting --------------------------------------------------------------------------------


def test_case_10_measured_usage_within_budget_beats_a_larger_heuristic():
    messages = [user(repeat("old request", 300_000)), assistant(repeat("old answer", 300_000)),
                user("active request")]
    selection = select(messages, budget=128_000, window=272_000, context_tokens=119_430)
    assert (selection.mode, selection.estimated_tokens) == ("within_budget", 119_430)
    assert selection.indexes == (0, 1, 2)


def test_case_11_observed_usage_replaces_an_oversized_resident_heuristic():
    selection = select([user("active request")], system=repeat("large", 300_000), tools=[],
                       context_tokens=1_000)
    assert (selection.mode, selection.estimated_tokens, selection.indexes) == (
        "within_budget", 1_000, (0,))


def test_case_12_invalid_message_weights_fall_back_to_plain_estimates():
    for weights in [TokenEstimates(math.nan, [1]), TokenEstimates(50, []),
                    TokenEstimates(50, [math.inf]), TokenEstimates(50, [-1])]:
        selection = select([user("active request")], budget=500, window=1_000, tools=[],
                           context_tokens=100, token_estimates=weights)
        assert (selection.mode, selection.estimated_tokens) == ("within_budget", 100)


def test_case_13_system_metadata_is_resident_input_not_a_message():
    request = user("next")
    metadata = {"role": "system", "content": "s" * 20, "toolsAdded": [{"name": "t"}]}
    without = select([request])
    with_metadata = select([metadata, request], budget=without.estimated_tokens)
    assert without.estimated_tokens == 24  # R 23 + "next" 1
    assert with_metadata.estimated_tokens == without.estimated_tokens
    assert (with_metadata.mode, with_metadata.indexes) == ("within_budget", (0, 1))


def test_case_14_resident_input_and_messages_use_pi_estimates():
    messages = [user('request  😀  {"spacing":  true}'),
                assistant('answer\n\nwith JSON: {"ok":true}')]
    tools = [{"name": "read", "description": "Read", "parameters": {"type": "object"}}]
    # Counted by hand in UTF-16 units: system 16 + tools JSON 69 → 22; user 31 → 8; answer 30 → 8.
    selection = select(messages, system="system prompt\t😀", tools=tools)
    assert (selection.estimated_tokens, selection.budget_tokens) == (38, 64_000)
    assert context_limits(128_000).budget_tokens == 128_000


def test_case_15_an_image_block_is_estimated_at_1200_tokens():
    image = {"role": "user", "content": [{"type": "image", "data": "x", "mimeType": "image/png"}]}
    assert chars4_tokens(image) == 1_200


def test_case_16_measured_usage_over_the_budget_evicts_an_old_turn():
    messages = [user(repeat("old request", 40_000)), assistant(repeat("old answer", 40_000)),
                user("active request")]
    selection = select(messages, context_tokens=70_000)
    assert (selection.mode, selection.indexes, selection.evicted) == ("paged", (2,), (0, 1))
