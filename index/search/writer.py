"""Whoosh's segment writer with its postings kept by term: the same segment, written faster.

Whoosh's :class:`~whoosh.writing.SegmentWriter` puts every posting of every document into a pool
as a ``(field, term, document, weight, value)`` tuple, sorts all the tuples at commit, and then,
for every posting, reads the document's field length back from the new segment's length column
(a seek and a read each) before writing it. Profiled on the first index of real sessions, that
was most of the writer's time. :class:`TermWriter` writes the same thing in a cheaper way:

* postings are grouped by field and term as they come (documents arrive in order, so each
  term's list is already in document order) and only the distinct terms are sorted;
* the length column is read once per document and field, not once per posting;
* ``add_document`` does what Whoosh's does for the field types of this schema (no vectors,
  no spelling words, no boosts), without the per-posting bookkeeping of the pool.

The segment's files hold the same terms, postings, lengths, stored fields and columns as the
stock writer's (tests/test_index_writer.py compares them); merges go through the same pool.
The pool is not spilled to disk: callers bound a segment's size (``BATCH_DOCS`` and
``MERGE_MAX_DOCS`` in index.search.store and index.search.analysis).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any

from whoosh.codec.whoosh3 import W3Codec, W3PostingsWriter
from whoosh.writing import SegmentWriter

# Posting lists shorter than this are kept in the term's entry of the term table instead of a
# block of their own in the postings file (pickled, zlib-compressed and pointed to). Most terms
# of a session history are rare (ids, numbers, paths), so most terms take this path: measured in
# docs/performance-history.md "Search and indexing". Whoosh reads either form with its default
# codec.
INLINE_POSTINGS = 16


class _InliningPostings(W3PostingsWriter):
    """Whoosh 2.7's postings writer with its inlining working (it calls ``set_inline``, which
    its term info names ``set_inlined``, so any ``inlinelimit`` above 1 fails)."""

    def finish_postings(self):
        if not self.written() and len(self) < self._inlinelimit:
            terminfo = self._terminfo
            terminfo.add_block(self)
            terminfo.set_inlined(self._ids, self._weights, self._values)
            self._terminfo = None
            return terminfo
        return super().finish_postings()

    def add_many(self, docs: array, weights: list, values: list, lengths: list) -> None:
        """``add_posting`` for each posting of a term, a block at a time: the same buffers,
        block statistics and block boundaries, without a call and its checks per posting."""
        start, count = 0, len(docs)
        while start < count:
            if len(self._ids) >= self._blocklimit:
                self._write_block()
            end = min(count, start + self._blocklimit - len(self._ids))
            self._ids.extend(docs[start:end])
            chunk = weights[start:end]
            self._weights.extend(chunk)
            self._maxweight = max(self._maxweight, *chunk) if chunk else self._maxweight
            self._values.extend(v for v in values[start:end] if v)
            known = [n for n in (lengths[d] for d in docs[start:end]) if n]
            if known:
                low = min(known)
                if self._minlength is None or low < self._minlength:
                    self._minlength = low
                self._maxlength = max(self._maxlength, *known)
            start = end


class Codec(W3Codec):
    """Whoosh's codec, writing short posting lists inline (:data:`INLINE_POSTINGS`)."""

    def __init__(self) -> None:
        super().__init__(inlinelimit=INLINE_POSTINGS)

    def postings_writer(self, dbfile, byteids=False):
        return _InliningPostings(dbfile, blocklimit=self._blocklimit, byteids=byteids,
                                 compression=self._compression,
                                 inlinelimit=self._inlinelimit)


class TermPool:
    """Postings by field and term: ``{field: {term: (documents, weights, values)}}``."""

    def __init__(self) -> None:
        self.fields: dict[str, dict[bytes, tuple[array, list, list]]] = {}

    def add(self, item: tuple[str, bytes, int, float, bytes | None]) -> None:
        """One posting (the pool interface Whoosh's merges use)."""
        fieldname, term, docnum, weight, value = item
        # An inlined posting list without values reads back ``""`` for each value
        self.add_posting(fieldname, term, docnum, weight, value or None)

    def add_posting(self, fieldname: str, term: bytes, docnum: int, weight: float,
                    value: bytes | None) -> None:
        terms = self.fields.get(fieldname)
        if terms is None:
            terms = self.fields[fieldname] = {}
        postings = terms.get(term)
        if postings is None:
            postings = terms[term] = (array("I"), [], [])
        postings[0].append(docnum)
        postings[1].append(weight)
        postings[2].append(value)

    def iter_postings(self) -> Iterator[tuple[str, bytes, int, float, bytes | None]]:
        """Every posting in Whoosh's order: field, term, document."""
        for fieldname in sorted(self.fields):
            terms = self.fields[fieldname]
            for term in sorted(terms):
                docs, weights, values = _in_order(terms[term])
                for i, docnum in enumerate(docs):
                    yield fieldname, term, docnum, weights[i], values[i]

    def cleanup(self) -> None:
        self.fields = {}


def _in_order(postings: tuple[array, list, list]) -> tuple[array, list, list]:
    """A term's postings by document (merged segments may interleave with added documents)."""
    docs, weights, values = postings
    if all(docs[i] < docs[i + 1] for i in range(len(docs) - 1)):
        return postings
    order = sorted(range(len(docs)), key=docs.__getitem__)
    return (array("I", (docs[i] for i in order)), [weights[i] for i in order],
            [values[i] for i in order])


class TermWriter(SegmentWriter):
    """A SegmentWriter with a :class:`TermPool` (see the module's docstring)."""

    def __init__(self, ix: Any, **kwargs: Any) -> None:
        for name, field in ix.schema.items():
            if field.vector or field.separate_spelling():
                raise ValueError(f"field {name!r} has vectors or spelling; use SegmentWriter")
        kwargs.setdefault("codec", Codec())
        super().__init__(ix, **kwargs)
        self.pool.cleanup()
        self.pool = TermPool()

    def add_document(self, **fields: Any) -> None:
        self._check_state()
        if any(name.startswith("_") for name in fields):
            return super().add_document(**fields)  # boosts or custom stored values
        perdoc, schema, docnum = self.perdocwriter, self.schema, self.docnum
        add_posting = self.pool.add_posting
        names = sorted(fields)
        self._check_fields(schema, names)
        perdoc.start_doc(docnum)
        try:
            for name in names:
                value = fields[name]
                if value is None:
                    continue
                field = schema[name]
                length = 0
                if field.indexed:
                    scorable = field.scorable
                    for term, freq, weight, vbytes in field.index(value):
                        if scorable:
                            length += freq
                        add_posting(name, term, docnum, weight * 1.0, vbytes)
                perdoc.add_field(name, field, value if field.stored else None, length)
                column = field.column_type
                if column:
                    perdoc.add_column_value(name, column, field.to_column_value(value))
        except Exception:
            perdoc.cancel_doc()
            raise
        perdoc.finish_doc()
        self._added = True
        self.docnum += 1

    def _flush_segment(self) -> None:
        self.perdocwriter.close()
        lengths = self.per_document_reader() if self.codec.length_stats else None
        try:
            _write_postings(self.fieldwriter, self.schema, self.pool, lengths, self.docnum)
            self.fieldwriter.close()
        finally:
            if lengths is not None:
                lengths.close()


def _write_postings(fieldwriter: Any, schema: Any, pool: TermPool, lengths: Any,
                    doccount: int) -> None:
    """Every term of the pool into the segment, with each posting's field length."""
    for fieldname in sorted(pool.fields):
        terms = pool.fields[fieldname]
        field = schema[fieldname]
        known = [0] * doccount
        if lengths is not None and field.scorable:
            known = [lengths.doc_field_length(d, fieldname) for d in range(doccount)]
        fieldwriter.start_field(fieldname, field)
        for term in sorted(terms):
            docs, weights, values = _in_order(terms[term])
            fieldwriter.start_term(term)
            postings = fieldwriter._postwriter  # the term's writer: an _InliningPostings
            if isinstance(postings, _InliningPostings):
                postings.add_many(docs, weights, values, known)
            else:  # another codec's writer
                for i, docnum in enumerate(docs):
                    value = values[i]
                    fieldwriter.add(docnum, weights[i], value or b"", known[docnum])
            fieldwriter.finish_term()
        fieldwriter.finish_field()
