"""tiktoken counts of long texts, taken in two halves at once, are the whole text's counts.

server/tokens.py splits a long text just after a newline that an ASCII letter follows, where
cl100k_base's pre-tokenizer always starts a new piece; the halves' counts must add up to the
whole text's count exactly, for every such position and whatever surrounds it.
"""

from __future__ import annotations

import re

from context_paging.server import tokens
from hypothesis import given, settings
from hypothesis import strategies as st

COUNT = tokens.text_counter()  # the cl100k_base file ships with the package

# The characters that decide cl100k's pieces: whitespace of each kind, letters (ASCII and not),
# digits, punctuation, apostrophes (contractions), and a letter after every newline often.
TRICKY = st.lists(st.sampled_from(list(" \t\n\r\n\n\x0b\x0c\u00a0\u3000aZsdtlmvre'é日1 9.,;-_()\"")
                                  + ["\nx", "\nA", "\n\n", " \n", ".\n", "\r\n", "'s", "'ll"]),
                  max_size=40).map("".join)


def test_the_shipped_tokenizer_loads():
    assert COUNT is not None


def whole(text: str) -> int:
    return COUNT.whole(text)


@settings(max_examples=600, deadline=None)
@given(TRICKY, TRICKY, st.sampled_from("abcXYZs"), TRICKY)
def test_every_newline_before_a_letter_splits_the_count_exactly(before, middle, letter, after):
    text = before + middle + "\n" + letter + after
    total = whole(text)
    for found in re.finditer("\n[A-Za-z]", text):
        cut = found.start() + 1
        assert whole(text[:cut]) + whole(text[cut:]) == total, (text, cut)


@settings(max_examples=200, deadline=None)
@given(st.lists(TRICKY, min_size=2, max_size=12))
def test_the_counter_splits_long_texts_and_counts_them_exactly(parts):
    text = "\nfile ".join(parts)
    old = tokens.SPLIT_CHARS
    tokens.SPLIT_CHARS = 0  # every text is split where it can be
    try:
        assert COUNT(text) == whole(text)
    finally:
        tokens.SPLIT_CHARS = old


def test_a_long_output_is_split_near_its_middle_and_counted_exactly():
    lines = [f"src/file{i}.py:{i} value = {i * 7} # note\n    indented {i}" for i in range(2_000)]
    text = "\n".join(lines)
    assert len(text) >= tokens.SPLIT_CHARS
    cut = tokens.split_point(text)
    assert cut is not None and abs(cut - len(text) / 2) < 200
    assert COUNT(text) == whole(text)
    assert tokens.split_point("no newline " * 3_000) is None
    assert COUNT("no newline " * 3_000) == whole("no newline " * 3_000)
