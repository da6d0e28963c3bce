"""index.search.scan answers a session's first search exactly as the persistent index does later."""

from __future__ import annotations

import tempfile
from pathlib import Path

from context_paging.index.search.analysis import token_count, tokens
from context_paging.index.search.scan import scan_search
from context_paging.index.search.store import IndexDoc, SearchIndex
from hypothesis import example, given, settings
from hypothesis import strategies as st

WORDS = ["needle", "src/a/needle.ts", "paraxial.io", "https://paraxial.io/blog/x", "a.b.c",
         "x.a.b", "inc-pager-047", "inc/pager/047", "needle.", "-needle-", "xneedle", "needlex",
         "_io", "a_b.c", "zpager-047", "io", "a.a.a", "a.a", "✓ needle…", "→io", "请分页",
         "Ünïcode", "hay", "hay", "hay", "tokens=128........", "b.c", "café.io", "naïve-needle",
         "Ωneedle", "needleé", "cafe\u0301", "привет/a.a", "x\ud800needle", "①io", "ab请needle",
         "─┼─hay", "KELVIN\u212a", "请needle", "..请.io", "x.请", "\u2e80io", "a\u2e80io",
         "分页hay",
         "Σίσυφος.io", "step\\nNEEDLE", "\\tio", "\\needle", "a\\u00e9needle"]
QUERIES = ["a.a", "needle", "paraxial.io", "a.b", "a.b.c", "inc-pager-047", "io hay", "分页", "",
           "needle.ts", "src/a/needle.ts", "b.c", "!!!", "ünïcode 128", "cafe", "caf", "io needle",
           "привет", "a.a.a hay", "naïve-needle", "kelvink"]


def doc(session: str, n: int, words: list[str], **extra) -> IndexDoc:
    return IndexDoc(session=session, history_id=f"{session}-{n}", sequence=n, kind="model_turn",
                    timestamp="", text=" ".join(words), **extra)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), min_size=1, max_size=12),
    st.lists(st.sampled_from(WORDS), max_size=6),
    st.sampled_from(QUERIES),
    st.integers(1, 6),
    st.booleans(),
)
# The second and third items score the same real number (3 hits in 13 tokens, 2 in 8, average
# 6); the two rankers computed it in other orders of operations and broke the tie differently.
@example(rows=[["paraxial.io"], ["needle", "needle"],
               ["needle"] * 3 + ["paraxial.io"] * 4 + ["请分页", "a\u2e80io"],
               ["needle"] * 2 + ["paraxial.io"] * 6],
         other=[], query="needle", limit=2, hide=False)
def test_the_in_memory_search_ranks_exactly_like_the_index(rows, other, query, limit, hide):
    docs = [doc("pi:s", n, words, hidden=hide and n == 0, failed=n % 2 == 1)
            for n, words in enumerate(rows)]
    with tempfile.TemporaryDirectory() as tmp, SearchIndex(Path(tmp) / "ix") as ix:
        ix.sync("pi:s", docs, {})
        if other:  # another session in the index must not change one session's ranking
            ix.sync("pi:t", [doc("pi:t", 0, other)], {})
        for failed in (None, True):
            expected = ix.search(query, sessions=["pi:s"], limit=limit, failed=failed)
            found = scan_search(docs, query, limit=limit, failed=failed)
            assert [h.history_id for h in found] == [h.history_id for h in expected]
            assert [h.score for h in found] == [
                __import__("pytest").approx(h.score) for h in expected]


@given(st.text(alphabet=st.sampled_from("ab_Z09./:- \t\n!@"), max_size=60))
def test_token_count_counts_the_tokens_without_building_them(text):
    lowered = text.lower()
    assert token_count(lowered) == len(tokens(lowered))


def test_overlapping_pairs_count_as_the_index_counts_them():
    docs = [doc("pi:s", 0, ["a.a.a"]), doc("pi:s", 1, ["a.a", "x"]), doc("pi:s", 2, ["y"])]
    with tempfile.TemporaryDirectory() as tmp, SearchIndex(Path(tmp) / "ix") as ix:
        ix.sync("pi:s", docs, {})
        expected = ix.search("a.a", sessions=["pi:s"])
    found = scan_search(docs, "a.a")
    assert [(h.history_id, round(h.score, 9)) for h in found] == \
        [(h.history_id, round(h.score, 9)) for h in expected]


@given(st.text(alphabet=st.sampled_from("ab_Z09./:- \t\n!@é请\u212aİΣ\\ntrNu"), max_size=60))
def test_the_memory_index_finds_the_tokens_the_index_finds(text):
    from collections import Counter

    from context_paging.index.search.scan import _tokens

    assert Counter(_tokens(text)) == Counter(tokens(text))


def test_a_repeated_search_of_the_kept_memory_index_ranks_as_a_fresh_one():
    from context_paging.index.search.scan import MemoryIndex

    docs = [doc("pi:s", n, words) for n, words in enumerate(
        [["needle", "请needle"], ["paraxial.io", "hay"], ["Ωneedle", "src/a/needle.ts"], ["hay"]])]
    kept = MemoryIndex(docs)
    for query in ("needle", "hay", "needle.ts", "paraxial.io needle", "分页"):
        assert [(h.history_id, h.score) for h in kept.search(query)] == \
            [(h.history_id, h.score) for h in scan_search(docs, query)]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8), min_size=1, max_size=10),
    st.sampled_from(QUERIES),
    st.lists(st.sampled_from(["needle", "hay", "a.a", "paraxial.io", "io"]), max_size=2),
    st.lists(st.sampled_from(["needle", "hay", "b.c", "io"]), max_size=1),
)
def test_required_and_excluded_words_filter_in_memory_as_in_the_index(rows, query, must, never):
    from context_paging.index.search.scan import MemoryIndex

    docs = [doc("pi:s", n, words) for n, words in enumerate(rows)]
    with tempfile.TemporaryDirectory() as tmp, SearchIndex(Path(tmp) / "ix") as ix:
        ix.sync("pi:s", docs, {})
        expected = ix.search(query, sessions=["pi:s"], limit=20, required=must, excluded=never)
    found = MemoryIndex(docs).search(query, limit=20, required=must, excluded=never)
    assert [h.history_id for h in found] == [h.history_id for h in expected]


def test_a_pasted_line_finds_the_turn_holding_it_as_a_phrase_first(tmp_path):
    """Other turns hold the line's words more often, apart: BM25 alone ranks them first."""
    from context_paging.index.service import History

    from tests.test_search_compound import write_pi_session

    outputs = [("c1", "isError: event.isError,\n" + "filler line\n" * 40)]
    outputs += [(f"c{n}", "event.isError set\nreturns isError too\nevent.isError again")
                for n in range(2, 6)]
    root = tmp_path / "pi"
    write_pi_session(root / "--work-app--" / "2026-01-01T00-00-00-000Z_s1.jsonl", outputs)
    history = History({"pi": root}, tmp_path / "home")
    try:
        owner = history.navigator("pi:s1").raw[1].history_id
        first = history.search("isError: event.isError,", session="pi:s1", limit=3)  # in memory
        history.wait_for_index()
        again = history.search("isError: event.isError,", session="pi:s1", limit=3)  # indexed
        assert first.references[0]["history_id"] == owner
        assert again.references[0]["history_id"] == owner
        assert len(again.references) == 3
    finally:
        history.close()
