"""index.scan answers a session's first search exactly as the persistent index does later."""

from __future__ import annotations

import tempfile
from pathlib import Path

from context_paging.index.analysis import token_count, tokens
from context_paging.index.scan import scan_search
from context_paging.index.store import IndexDoc, SearchIndex
from hypothesis import given, settings
from hypothesis import strategies as st

WORDS = ["needle", "src/a/needle.ts", "paraxial.io", "https://paraxial.io/blog/x", "a.b.c",
         "x.a.b", "inc-pager-047", "inc/pager/047", "needle.", "-needle-", "xneedle", "needlex",
         "_io", "a_b.c", "zpager-047", "io", "a.a.a", "a.a", "✓ needle…", "→io", "请分页",
         "Ünïcode", "hay", "hay", "hay", "tokens=128........", "b.c", "café.io", "naïve-needle",
         "Ωneedle", "needleé", "cafe\u0301", "привет/a.a", "x\ud800needle", "①io", "ab请needle",
         "─┼─hay", "KELVIN\u212a", "请needle", "..请.io", "x.请", "\u2e80io", "a\u2e80io",
         "分页hay",
         "Σίσυφος.io"]
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


@given(st.text(alphabet=st.sampled_from("ab_Z09./:- \t!éÉßΩж①…✓─\u0301\u212a\ud800请分\u2e80〇々"),
               max_size=60))
def test_non_ascii_text_keeps_its_tokens_once_made_ascii(text):
    from context_paging.index.scan import _count, _stand_in_bytes

    stand_in = _stand_in_bytes(text)
    assert _count(stand_in) == len(tokens(text))
    ascii_tokens = [t for t in tokens(text) if t.isascii()]
    words = stand_in.replace(b"\x80", b"\x00").decode("ascii")
    assert all(t in words for t in ascii_tokens)


def test_a_han_character_where_a_match_begins_is_a_token_of_its_own():
    from context_paging.index.scan import _count, _stand_in_bytes

    assert _stand_in_bytes("请needle") == b" \x80 needle"  # 请, needle
    assert _stand_in_bytes("ab请needle") == b"ab\x80needle"  # one token
    assert _count(_stand_in_bytes("..请分.io")) == len(tokens("..请分.io")) == 1


def test_a_repeated_search_with_the_kept_stand_ins_ranks_as_a_fresh_one():
    docs = [doc("pi:s", n, words) for n, words in enumerate(
        [["needle", "请needle"], ["paraxial.io", "hay"], ["Ωneedle", "src/a/needle.ts"], ["hay"]])]
    cache: dict = {}
    for query in ("needle", "hay", "needle.ts", "paraxial.io needle", "分页"):
        kept = scan_search(docs, query, cache=cache)
        fresh = scan_search(docs, query)
        assert [(h.history_id, h.score) for h in kept] == [(h.history_id, h.score) for h in fresh]
    assert len(cache) == len(docs)
    changed = [doc("pi:s", 0, ["hay", "hay"]), *docs[1:]]  # an item's text changed: not reused
    assert [h.history_id for h in scan_search(changed, "hay", cache=cache)] == \
        [h.history_id for h in scan_search(changed, "hay")]
    assert len(cache) == len(docs)  # and the old text's stand-in is dropped


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
