"""A large text is counted in two pieces on two threads (server/tokens.py): the pieces' counts
must add up to the whole text's count, at every split point the rule allows, for the one
encoding the project uses (cl100k_base with CL100K_PATTERN)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from context_paging.server import tokens
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ALL_FIXTURES, recorded_params

ENCODING = tokens.cl100k()
pytestmark = pytest.mark.skipif(ENCODING is None, reason="the shipped cl100k_base is missing")


def whole(text: str) -> int:
    return len(ENCODING.encode_ordinary(text))


def boundaries(text: str, limit: int | None = None) -> list[int]:
    """Every split point the rule allows (``limit``: that many, spread over the text)."""
    points = [m.end() for m in tokens._BOUNDARY.finditer(text)]
    if limit is not None and len(points) > limit:
        step = len(points) / limit
        points = [points[int(k * step)] for k in range(limit)]
    return points


def assert_adds_up(text: str, limit: int | None = None) -> None:
    total = whole(text)
    for point in boundaries(text, limit):
        near = text[point - 20:point + 20]
        assert whole(text[:point]) + whole(text[point:]) == total, (point, near)


def long_strings(value, out: list[str], least: int = 200) -> None:
    if isinstance(value, str):
        if len(value) >= least:
            out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            long_strings(item, out, least)
    elif isinstance(value, list):
        for item in value:
            long_strings(item, out, least)


def bench_output(n: int = 7) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import select_bench

    return select_bench.turn(n, 52_428)[2]["content"][0]["text"]


# Characters that meet at a line feed in every way the pattern distinguishes: line breaks,
# spaces and tabs, letters (ASCII and not), digits, punctuation, an apostrophe (contractions),
# a slash, a combining mark, an emoji, a lone surrogate.
TRICKY = st.text(alphabet=st.sampled_from(
    list("\n\n\n\r  \tabZ09'/;.-_é") + ["\u0301", "\U0001f600", "字", "\ud800", "\u00a0", "١"]),
    max_size=80)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TRICKY, min_size=1, max_size=6))
def test_the_counts_at_every_allowed_split_add_up(parts):
    # Joined with line feeds followed by letters, so every text has split points to check.
    assert_adds_up("\nx".join(parts))


def test_the_check_catches_a_split_the_rule_does_not_allow():
    # After a line feed followed by another one the pieces differ ("\n\n" is one piece): the
    # sum is checked against something that can fail.
    text = "status ok\n\nnext line"
    point = text.index("\n") + 1
    assert whole(text[:point]) + whole(text[point:]) != whole(text)
    assert point not in boundaries(text)


def test_the_benchmark_output_adds_up_at_every_split():
    assert_adds_up(bench_output(), limit=60)



def recorded_texts(path) -> list[str]:
    """The strings of 20 characters or more in a recorded session file (unreadable lines
    skipped)."""
    texts: list[str] = []
    for line in path.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
        try:
            long_strings(json.loads(line), texts, least=20)
        except json.JSONDecodeError:
            continue
    return texts

@pytest.mark.parametrize("path", recorded_params())
def test_the_recorded_sessions_texts_add_up(path):
    texts = recorded_texts(path)
    assert texts
    for text in texts:
        assert_adds_up(text, limit=12)


def test_large_texts_are_counted_in_two_pieces_as_the_whole(monkeypatch):
    monkeypatch.setattr(tokens, "spare_core", lambda: True)
    count = tokens.text_counter()
    texts = [bench_output(n) for n in range(3)]
    texts.append("line of output\n" * 5_000)  # split points everywhere
    texts.append(" \n" * 20_000)  # none: counted whole
    texts.append(("entry é 😀 \ud800 '" + "\n") * 2_000 + "tail")
    for text in texts:
        assert count(text) == whole(text)
        # The counter made by text_counter splits exactly the large texts that have a point.
        assert (len(text) >= tokens.SPLIT_CHARS and tokens.split_point(text) is not None) == (
            _splits(text))


def _splits(text: str) -> bool:
    """Whether ``_count_split`` hands part of ``text`` to the helper thread."""
    submitted: list[str] = []

    class Helper:
        def submit(self, fn, piece):
            submitted.append(piece)

            class Done:
                def result(self):
                    return fn(piece)

            return Done()

    total = tokens._count_split(whole, Helper(), text)
    assert total == whole(text)
    return bool(submitted)


def test_a_split_point_lies_in_the_middle_half():
    text = bench_output()
    point = tokens.split_point(text)
    assert point is not None and len(text) // 4 <= point <= 3 * len(text) // 4
    assert text[point - 1] == "\n" and text[point].isalnum()
    assert tokens.split_point("x" * 40_000) is None


@pytest.mark.recorded
def test_the_fixture_list_is_what_the_texts_test_reads():
    assert ALL_FIXTURES and all(path.exists() for path in ALL_FIXTURES)


def test_a_busy_machine_counts_in_one_piece(monkeypatch):
    text = bench_output()
    monkeypatch.setattr(os, "getloadavg", lambda: (tokens.cores() + 1.0, 0.0, 0.0))
    assert not _splits(text)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert _splits(text)


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=1, max_size=3_000) | st.sampled_from(
    ["." * 5_000, " " * 4_000, "-" * 3_000, "é" * 2_000, "a" * 6_000, "\n" * 500]))
def test_the_shipped_counter_never_counts_fewer_tokens_than_its_floor(text):
    """The window bounds uncounted history by ``len / max_token_chars`` (paging/tokens.py
    ``token_floor``): no text may count below it, the longest runs cl100k merges included."""
    counter = tokens.text_counter()
    assert counter.max_token_chars == max(map(len, ENCODING.token_byte_values())) == 128
    assert counter(text) >= -(-len(text) // counter.max_token_chars)


# Every ASCII class the piece floor tells apart, and where they meet: letters and digits in
# runs, contractions, marks alone and in runs, each whitespace character (and the separators
# \x1c-\x1f, which are not whitespace to the pattern), a control character.
ASCII_CLASSES = st.text(alphabet=st.sampled_from(
    list("aZq09''sltdmrve.,;-/=$_`\"") + list(" \t\n\r\x0b\x0c") + ["\x1c", "\x1f", "\x00"]),
    max_size=120)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ASCII_CLASSES | TRICKY | st.text(max_size=80))
def test_the_piece_floor_never_exceeds_the_count(text):
    """The window bounds uncounted history by ``piece_floor`` too (index/window/estimate.py):
    no text may count below it."""
    assert tokens.piece_floor(text) <= whole(text)


def test_the_piece_floor_holds_on_large_outputs_and_is_near_their_count():
    """On the bench's tool output and on code the bound is most of the count (so it can stand
    in for counting); on recorded outputs it never exceeds the count."""
    texts = [bench_output(), Path(tokens.__file__).read_text(), "x" * 300, "." * 5_000]
    for text in texts:
        assert tokens.piece_floor(text) <= whole(text)
    assert tokens.piece_floor(texts[0]) > whole(texts[0]) / 2
    assert tokens.piece_floor(texts[1]) > whole(texts[1]) / 3
    # Around a character that is not ASCII a run may go on: each stretch counts two less
    # ("na", then " ve text, a b c": six runs of letters, less two for each of two stretches).
    assert tokens.piece_floor("naïve text, a b c") == 6 - 2 * 2
    assert tokens.piece_floor("字" * 100_000 + "a b") == 0


@pytest.mark.parametrize("path", recorded_params())
def test_the_piece_floor_never_exceeds_the_count_of_recorded_outputs(path):
    texts = recorded_texts(path)
    assert texts
    for text in texts:
        assert tokens.piece_floor(text) <= whole(text)
