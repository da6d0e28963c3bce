"""A search of history: which items, in what order, the lines each matched, and what it covered.

:func:`search` is ``History.search``: it picks the session (the one default-session rule,
index/search/notes.py), the ranker (the on-disk index, or the session's in-memory index while the
disk index lacks it), keeps the hits a quoted phrase needs or puts verbatim holders first
(index/search/query.py), and builds one page of references with their matched lines and the notes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from context_paging.index.history import HistoryItem, search_text
from context_paging.index.navigator import Navigator, NavigatorError, cap_items, compact_references
from context_paging.index.search.notes import (
    DEFAULT_SESSION_RULE,
    PHRASE_CANDIDATES,
    PHRASE_POOL,
    Searched,
    filtered_note,
    match_files,
    searched_note,
    unknown_files_note,
)
from context_paging.index.search.query import ParsedQuery, holds, holds_run, matches, parse
from context_paging.index.search.store import Hit

if TYPE_CHECKING:
    from context_paging.index.search.scan import MemoryIndex
    from context_paging.index.search.store import SearchIndex

Progress = Callable[[float, float | None, str], None]  # done, total (None: unknown), message


class Searchable(Protocol):
    """What a search needs of the recovery operations (``index.service.History`` is one): the
    session rule, the opened sessions and the two indexes. Declared here so that this module
    never imports the service that calls it."""

    @property
    def store(self) -> SearchIndex: ...

    def default_session(self, ref: str | None) -> tuple[str, str]: ...

    def opened(self, ref: str) -> tuple[str, str, Sequence[HistoryItem], dict[str, Any]]: ...

    def navigator(self, ref: str | None) -> Navigator: ...

    def project_of(self, session: str | None) -> str: ...

    def index_all(self, progress: Progress | None = None) -> int: ...

    def memory_index(self, canonical: str, cwd: str, items: Sequence[HistoryItem]
                     ) -> MemoryIndex: ...

    def catch_up(self, canonical: str, cwd: str, items: Sequence[HistoryItem],
                 state: dict[str, Any]) -> None: ...

LOADED_BY_SEARCH = 3  # items a search with load=True returns whole
__all__ = ["DEFAULT_SESSION_RULE", "SearchReply", "search"]


@dataclass(frozen=True, slots=True)
class SearchReply:
    references: list[dict[str, Any]]
    items: list[dict[str, Any]] | None
    unloaded_history_ids: list[str] | None
    note: str | None
    searched: Searched
    next_offset: int | None = None


def _empty(searched: Searched, note: str) -> SearchReply:
    return SearchReply([], None, None, note, searched)


def search(
    history: Searchable,
    query: str,
    session: str | None = None,
    scope: str = "session",
    files: Sequence[str] = (),
    tools: Sequence[str] = (),
    failed: bool | None = None,
    limit: int = 5,
    load: bool = False,
    progress: Progress | None = None,
    directory: str | None = None,
    offset: int = 0,
) -> SearchReply:
    """One page of hits (``offset``, ``limit``) with the lines each matched, and what was
    searched. The query syntax is :mod:`index.search.query`'s; which session,
    :data:`DEFAULT_SESSION_RULE`."""
    if offset < 0:
        raise NavigatorError("INVALID_ARGUMENT", f"offset {offset} is negative; pass 0 or "
                             "a reply's next_offset")
    parsed = parse(query)
    if scope == "session":
        ref, chosen = history.default_session(session)
        canonical, cwd, items, state = history.opened(ref)
        searched = Searched("session", (canonical,), 1,
                            len(history.navigator(canonical).visible), None, chosen)
        known = {path for item in items for path in item.files}
    else:
        # Searching everything needs no session; a project needs a directory: the one
        # given, else the session's, else this process's.
        if scope == "project" and not directory:
            directory = history.project_of(session)
        history.index_all(progress)
        project = directory if scope == "project" else None
        sessions, count = history.store.scope_size(project)
        searched = Searched(scope, (), sessions, count, project, None)
        known = history.store.file_paths()
    alternatives, unknown = match_files(files, known)
    if unknown:
        return _empty(searched, unknown_files_note(unknown, searched))
    want = offset + limit + 1  # one more than the page: is there a next page?
    pool = max(PHRASE_CANDIDATES, 4 * want) if parsed.phrases else \
        max(PHRASE_POOL, want) if parsed.verbatim else want
    navigators = per_reply(history)
    in_memory = scope == "session" and history.store.file_state(canonical) != state

    def find(files: Sequence, tools: Sequence[str], failed: bool | None) -> list[Hit]:
        arguments = dict(files=files, tools=tools, failed=failed, limit=pool,
                         required=parsed.required, excluded=parsed.excluded)
        if in_memory:
            found = history.memory_index(canonical, cwd, items).search(parsed.ranked,
                                                                        **arguments)
        else:
            found = history.store.search(parsed.ranked, sessions=[canonical]
                                         if scope == "session" else None,
                                         project=searched.project, **arguments)
        return _phrased(navigators, found, parsed)

    if in_memory and progress:
        progress(0, 1, f"searching {canonical} in memory; indexing it meanwhile")
    hits = find(alternatives, tools, failed)
    if in_memory:
        # Not indexed yet, or behind: answered from memory now, and the index catches up in
        # the background (the first search is fast, and so is every one after it).
        history.catch_up(canonical, cwd, items, state)
    if not hits and not offset and (alternatives or tools or failed is not None) and \
            find((), (), None):  # the query matches: the filters emptied the reply
        given, emptying = _emptying(find, files, alternatives, tools, failed)
        return _empty(searched, filtered_note(searched, parsed, given, emptying))
    return _reply(navigators, hits, parsed, offset, limit, load, searched)


def _emptying(find: Callable[..., list[Hit]], files: Sequence[str],
              alternatives: Sequence, tools: Sequence[str], failed: bool | None
              ) -> tuple[list[str], list[str]]:
    """(every filter given, those whose removal alone brings hits back), as the note names
    them: ``file 'x'``, ``tool 'y'``, ``failed`` or ``not failed``."""
    named = [(f"file {name!r}", ([a for a in alternatives if a is not paths], tools, failed))
             for name, paths in zip(dict.fromkeys(files), alternatives, strict=False)]
    named += [(f"tool {tool!r}", (alternatives, [t for t in tools if t != tool], failed))
              for tool in dict.fromkeys(tools)]
    if failed is not None:
        named.append(("failed" if failed else "not failed", (alternatives, tools, None)))
    return [n for n, _ in named], [n for n, rest in named if find(*rest)]


def per_reply(history: Searchable) -> Callable[[str], Navigator]:
    """``history.navigator`` remembered for the length of one reply (each call checks the
    session's file)."""
    seen: dict[str, Navigator] = {}

    def get(session: str) -> Navigator:
        if session not in seen:
            seen[session] = history.navigator(session)
        return seen[session]

    return get


def _phrased(navigator: Callable[[str], Navigator], hits: Sequence[Hit], parsed: ParsedQuery
             ) -> list[Hit]:
    """Quoted phrases: only the hits that hold them. An unquoted query of several words:
    the hits holding it verbatim first, each group in its order."""

    def item(hit: Hit) -> HistoryItem | None:
        return navigator(hit.session).raw_by_id.get(hit.history_id)

    if parsed.phrases:
        return [h for h in hits if (i := item(h)) is not None and holds(i, parsed)]
    if not parsed.verbatim or len(hits) < 2:
        return list(hits)
    first = [h for h in hits if (i := item(h)) is not None
             and holds_run(search_text(i), parsed.verbatim)]
    return first + [h for h in hits if h not in first]

def _reply(navigators: Callable[[str], Navigator], hits: Sequence[Hit], parsed: ParsedQuery,
           offset: int, limit: int, load: bool, searched: Searched) -> SearchReply:
    references = []
    for hit in hits[offset:offset + limit]:
        navigator = navigators(hit.session)
        reference = navigator.reference_for(hit.history_id)
        if reference is not None:
            item = navigator.raw_by_id[hit.history_id]
            references.append({**reference, "matches": matches(item, parsed)})
    references, note = compact_references(references)
    more = len(hits) > offset + limit or len(references) < len(hits[offset:offset + limit])
    next_offset = offset + len(references) if more and references else None
    items = unloaded = None
    cut = None
    if load:
        items, cut = cap_items([
            navigators(r["session"]).load([r["history_id"]])[0]
            for r in references[:LOADED_BY_SEARCH]
        ])
        unloaded = [r["history_id"] for r in references[LOADED_BY_SEARCH:]]
    notes = [n for n in (note, cut, searched_note(searched, parsed, bool(references), offset))
             if n]
    return SearchReply(references, items, unloaded, " ".join(notes) or None, searched,
                       next_offset)

