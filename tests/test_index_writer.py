"""The index's own segment writer stores what Whoosh's stock writer stores, merges included."""

from __future__ import annotations

from pathlib import Path

import pytest
from context_paging.index.search import store as store_module
from context_paging.index.search.analysis import SCHEMA
from context_paging.index.search.store import SearchIndex, doc_for
from context_paging.index.search.writer import INLINE_POSTINGS, TermPool, TermWriter
from context_paging.index.sessions import load
from whoosh.codec.whoosh3 import W3Codec
from whoosh.writing import SegmentWriter

from tests.conftest import ALL_FIXTURES, ALL_SAMPLES, HAVE_RECORDED, SAMPLE_SOURCE, source_folder


def stock_writer(ix, **kwargs):
    return SegmentWriter(ix, codec=W3Codec(), **kwargs)


def sessions() -> list[tuple[str, list]]:
    found = []
    for path in [*ALL_SAMPLES, *(ALL_FIXTURES if HAVE_RECORDED else ())]:
        session = load(str(path), SAMPLE_SOURCE[source_folder(path)])
        ref = f"s:{path.stem}"
        cwd = session.info.cwd or ""
        found.append((ref, [doc_for(ref, cwd, item) for item in session.projection.items]))
    return found


def contents(directory: Path) -> dict:
    """Every term's postings, every stored document, every length, read through Whoosh."""
    index = SearchIndex(directory)
    with index._reading() as searcher:
        reader = searcher.reader()
        postings = {}
        for number, (leaf, _) in enumerate(reader.leaf_readers()):  # per segment: its blocks
            for fieldname, term in leaf.all_terms():
                matcher = leaf.postings(fieldname, term)
                matcher = getattr(matcher, "child", matcher)  # deleted documents included
                found = []
                while matcher.is_active():  # a value-less inlined list reads "" for None
                    found.append((matcher.id(), matcher.weight(), matcher.value() or None,
                                  matcher.block_max_weight(), matcher.block_min_length(),
                                  matcher.block_max_length()))
                    matcher.next()
                info = leaf.term_info(fieldname, term)
                postings[number, fieldname, term] = (
                    info.doc_frequency(), info.weight(), info.min_length(), info.max_length(),
                    info.max_weight(), found)
        stored = [(reader.stored_fields(n), reader.doc_field_length(n, "text"))
                  for n in reader.all_doc_ids()]
        hits = [index.search(q, limit=20) for q in ("error", "src/index", "the file", "")]
    index.close()
    return {"postings": postings, "stored": stored, "hits": hits}


def write_all(directory: Path, batches: list[tuple[str, list]], writer) -> None:
    store_module.TermWriter = writer
    index = SearchIndex(directory)
    for ref, docs in batches:  # one commit per session: small segments, and their merges
        index.sync(ref, docs, {"file": ref})
    index.sync(batches[0][0], batches[0][1][1:], {"file": "changed"})  # deletions too
    index.close()


def test_the_segments_hold_what_the_stock_writer_writes(tmp_path, monkeypatch):
    batches = sessions()
    monkeypatch.setattr(store_module, "TermWriter", TermWriter)
    write_all(tmp_path / "ours", batches, TermWriter)
    write_all(tmp_path / "stock", batches, stock_writer)
    monkeypatch.setattr(store_module, "TermWriter", TermWriter)
    ours, stock = contents(tmp_path / "ours"), contents(tmp_path / "stock")
    # not a vacuous comparison: the samples alone give ~70 items, the recorded sessions ~1,800
    assert len(ours["postings"]) > 1000 and len(ours["stored"]) > (100 if HAVE_RECORDED else 50)
    assert ours == stock


def test_short_posting_lists_are_inlined_and_long_ones_written_as_blocks(tmp_path):
    index = SearchIndex(tmp_path / "index")
    docs = [doc_for("s:a", "", item) for item in
            load(str(ALL_SAMPLES[0]), SAMPLE_SOURCE[source_folder(ALL_SAMPLES[0])])
            .projection.items]
    index.sync("s:a", docs, {})
    with index._reading() as searcher:
        reader = searcher.reader()
        infos = [reader.term_info(f, t) for f, t in reader.all_terms()]
    index.close()
    inlined = [i for i in infos if i.is_inlined()]
    assert inlined and all(i.doc_frequency() < INLINE_POSTINGS for i in inlined)
    assert all(i.doc_frequency() >= INLINE_POSTINGS for i in infos if not i.is_inlined())


def test_the_term_pool_yields_postings_by_field_term_and_document():
    pool = TermPool()
    for item in [("text", b"b", 3, 1.0, b"x"), ("files", b"z", 0, 1.0, None),
                 ("text", b"a", 5, 2.0, b"y"), ("text", b"b", 1, 1.0, b"w")]:
        pool.add(item)
    assert list(pool.iter_postings()) == [
        ("files", b"z", 0, 1.0, None), ("text", b"a", 5, 2.0, b"y"),
        ("text", b"b", 1, 1.0, b"w"), ("text", b"b", 3, 1.0, b"x")]


def test_a_schema_with_vectors_is_refused(tmp_path):
    from whoosh.fields import TEXT, Schema
    from whoosh.index import create_in

    ix = create_in(str(tmp_path), Schema(body=TEXT(vector=True)))
    with pytest.raises(ValueError, match="vectors or spelling"):
        TermWriter(ix)
    assert SCHEMA  # the project's own schema is accepted by every other test here
